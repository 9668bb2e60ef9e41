"""
The node's per-frame outputs: features, objects, picture, GridMap, latency, Autoware timing.

``FrameOutputs`` owns the publishers of one configured node and turns a processed
``frame_path.Frame`` into messages. The picture, the GridMap, the objects' markers, the latency
record and the three timing topics are built only while someone subscribes (volatile: nobody
else could receive them; the cyclic time still counts every frame); the rest is published
every frame: ``~/output/bev_features``
while ``output.bev_features`` is true (live), ``~/output/objects`` whenever a head is
configured (an empty array when it finds nothing; no such publisher without a head), as
vision_msgs/Detection3DArray or autoware_perception_msgs/DetectedObjects
(``output.objects_type``, static; the labels of ``output.autoware_labels``, live). With it,
``~/output/objects/debug/published_time`` (autoware_internal_msgs/PublishedTime) while
subscribed, as Autoware's PublishedTimePublisher: header = the objects' header, published_stamp
= the system clock just after the objects went out (rclcpp::Clock() there, so wall time even
under ``use_sim_time``); QoS depth 1, reliable, volatile. The BEV is fetched from the
device only when the features, the picture or the GridMap are wanted (``wants_features``).
The builders are ROS-free (camera.py, frame_path.py, grid_map.py, objects.py,
detected_objects.py, object_markers.py, timing.py); this module only hands them rclpy's
classes.
"""

import time

from autoware_internal_debug_msgs.msg import Float64Stamped
from autoware_internal_msgs.msg import PublishedTime
from autoware_perception_msgs.msg import (DetectedObject, DetectedObjectKinematics,
                                          DetectedObjects, ObjectClassification, Shape)
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import (Point, Polygon, Pose, PoseWithCovariance, Quaternion, Twist,
                               TwistWithCovariance, Vector3)
from grid_map_msgs.msg import GridMap, GridMapInfo
from rclpy.clock import Clock
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import (ColorRGBA, Float32MultiArray, Header, MultiArrayDimension,
                          MultiArrayLayout)
from vision_msgs.msg import (BoundingBox3D, Detection3D, Detection3DArray, ObjectHypothesis,
                             ObjectHypothesisWithPose)
from visualization_msgs.msg import Marker, MarkerArray, MeshFile

from .message_constructors import message_constructors
from .timing import AutowareTiming, float64_stamped, TIMING_TOPICS
from ..frames.frame_path import Frame, FramePath, rgb_image_fields
from ..frames.latency import format_value, FRAME_KEYS
from ..outputs.detected_objects import detected_objects_message, unlabelled_classes
from ..outputs.grid_map import grid_map_message, GridMapLayers
from ..outputs.object_markers import markers_message
from ..outputs.objects import detections_message
from ..sensors.camera import byte_array, features_image_fields
from ..settings.config import OutputConfig

# rclpy's classes of the messages the ROS-free builders make (grid_map.py, timing.py,
# objects.py, detected_objects.py, object_markers.py) and the images, built without their
# defaults.
MESSAGE_TYPES = message_constructors(
    GridMap, GridMapInfo, Header, Time, Pose, Point, Quaternion, Float32MultiArray,
    MultiArrayLayout, MultiArrayDimension, Float64Stamped, Detection3DArray, Detection3D,
    BoundingBox3D, ObjectHypothesisWithPose, ObjectHypothesis, PoseWithCovariance, Vector3,
    MarkerArray, Marker, MeshFile, CompressedImage, ColorRGBA, Duration, DetectedObjects,
    DetectedObject, ObjectClassification, DetectedObjectKinematics, Shape, TwistWithCovariance,
    Twist, Polygon, Image)
# output.objects_type -> the message class of ~/output/objects
OBJECTS_CLASSES = {'vision_msgs': Detection3DArray, 'autoware': DetectedObjects}


def published_time_topic(objects_topic: str, resolve_topic_name=None) -> str:
    """
    Return the topic of the objects' PublishedTime: the objects' own, remapped or not, + suffix.

    Autoware's PublishedTimePublisher names it after the objects publisher's topic, so a
    remapped ``~/output/objects`` takes it along; a remap of its own name wins.
    """
    own = '~/output/objects/debug/published_time'
    if resolve_topic_name is not None and (
            resolve_topic_name(own) != resolve_topic_name(own, only_expand=True)):
        return own
    return objects_topic + '/debug/published_time'


class FrameOutputs:
    """
    Publishers and message building for processed frames (one configured pipeline).

    ``layers`` names the GridMap layers and ``bev_features`` says whether the features are
    published; ``update`` replaces both (and the Autoware labels of ``output``) when
    ``cameras.channel_names``, ``output.bev_features`` or ``output.autoware_labels`` change
    live. ``classes``: the head's class names (``()`` without a head: no objects publishers).
    ``output``: the objects' type (static) and labels. ``start`` resets the Autoware cycle
    clock (at activation).
    """

    def __init__(self, create_publisher, layers: GridMapLayers, classes: tuple[str, ...] = (),
                 bev_features: bool = True, output: OutputConfig = OutputConfig(),
                 resolve_topic_name=None, warn=None, node_name: str = '/jax_perception'):
        """
        Create the publishers with ``create_publisher`` (the node's or lifecycle node's).

        ``resolve_topic_name``: the node's, to tell a remapped PublishedTime topic (None: not
        remapped). ``warn``: the node logger's, told of head classes Autoware objects carry as
        UNKNOWN (a class missing from ``output.autoware_labels``, or a typo there), now and
        whenever the labels change. ``node_name``: the fully qualified name the latency status
        is named after (``<node_name>: frame``), as /diagnostics' ``<node_name>: pipeline``.
        """
        self._warn = warn
        self._status_name = f'{node_name}: frame'
        reliable = QoSProfile(depth=5)
        self.layers, self.bev_features, self.classes = layers, bev_features, tuple(classes)
        self.output = output
        self._wall = Clock()    # the system clock, as PublishedTimePublisher's rclcpp::Clock()
        self._timing = AutowareTiming(time.perf_counter())
        self.publishers = {
            'features': create_publisher(Image, '~/output/bev_features', reliable),
            'image': create_publisher(Image, '~/output/bev_image', reliable),
            'grid_map': create_publisher(GridMap, '~/output/bev_grid_map', reliable),
            'latency': create_publisher(DiagnosticArray, '~/debug/latency',
                                        QoSProfile(depth=50)),
            # Autoware's debug publisher: QoS depth 1, reliable, volatile.
            **{key: create_publisher(Float64Stamped, topic, QoSProfile(depth=1))
               for key, topic in TIMING_TOPICS.items()},
        }
        if self.classes:
            self.publishers['objects'] = create_publisher(
                OBJECTS_CLASSES[output.objects_type], '~/output/objects', reliable)
            self.publishers['markers'] = create_publisher(
                MarkerArray, '~/output/objects_markers', reliable)
            # Autoware's PublishedTimePublisher: QoS depth 1, reliable, volatile.
            self.publishers['published_time'] = create_publisher(
                PublishedTime, published_time_topic(self.publishers['objects'].topic_name,
                                                    resolve_topic_name), QoSProfile(depth=1))
        self._say_unlabelled()

    def update(self, layers: GridMapLayers, bev_features: bool,
               output: OutputConfig | None = None) -> None:
        """Take the GridMap layers, the features switch and the labels of a live change."""
        self.layers, self.bev_features = layers, bev_features
        if output is not None:     # its objects_type is static: the same as before
            labels, self.output = self.output.autoware_labels, output
            if output.autoware_labels != labels:
                self._say_unlabelled()

    def _say_unlabelled(self) -> None:
        unknown = unlabelled_classes(self.classes, self.output.autoware_labels)
        if self._warn is not None and self.output.objects_type == 'autoware' and unknown:
            self._warn(f'head classes {", ".join(unknown)} go out as UNKNOWN: '
                       'output.autoware_labels maps none of them (class:LABEL)')

    def start(self) -> None:
        """Count the next frame's cyclic time from now (activation)."""
        self._timing = AutowareTiming(time.perf_counter())

    def wants_picture(self) -> bool:
        """Return True while someone subscribes to the rgb8 picture."""
        return self.publishers['image'].get_subscription_count() > 0

    def wants_features(self) -> bool:
        """
        Return True when this frame's BEV must come to the host for the features or the GridMap.

        It does while ``output.bev_features`` is on, or someone subscribes to the GridMap; a
        picture fetches it too (``FramePath.process(picture=True)``); otherwise only the head's
        objects are fetched.
        """
        return self.bev_features or self.publishers['grid_map'].get_subscription_count() > 0

    def publish(self, frame: Frame, header, arrived: float, grid, clock,
                arrived_ns: int = 0) -> dict:
        """
        Publish one frame's messages; return its completed latency record.

        ``header``: the cloud's header, relabelled to the grid frame by the caller; ``arrived``:
        perf_counter when the cloud arrived; ``grid``: the GridConfig in force; ``clock``: the
        node's clock (ages and the timing stamps use it, so ``use_sim_time`` works);
        ``arrived_ns``: that clock when the cloud arrived: a clock behind it now went back
        meanwhile (a bag's loop under use_sim_time), and gives no age.
        """
        publish_start = time.perf_counter()
        pubs, features = self.publishers, frame.result.features
        # features None: not fetched (switched off, and no picture or GridMap subscriber then).
        if self.bev_features and features is not None:
            pubs['features'].publish(_image(header, features_image_fields(features)))
        self._publish_objects(frame, header.frame_id)
        if frame.rgb is not None:
            pubs['image'].publish(_image(header, rgb_image_fields(frame.rgb)))
        if features is not None and pubs['grid_map'].get_subscription_count() > 0:
            pubs['grid_map'].publish(grid_map_message(MESSAGE_TYPES, self.layers, features,
                                                      grid, frame.stamp_ns))
        now_ns = clock.now().nanoseconds
        # 0: a sim clock before its first /clock, no time to take an age from: the frame's own
        # time then, as offline (not 0 minus the stamp, -1.7e12 ms); so too for a clock gone
        # back since the cloud arrived (not minus the loop's length).
        age_ms = (now_ns - frame.stamp_ns) / 1e6 if now_ns and now_ns >= arrived_ns else None
        record = FramePath.finish(frame, publish_start, arrived, age_ms)
        # Volatile topics: a message built while nobody is subscribed reaches nobody (0.08 ms
        # a frame for these four, built and published, against 0.004 ms for the checks).
        if pubs['latency'].get_subscription_count() > 0:
            latency = DiagnosticArray(header=header)
            latency.status.append(DiagnosticStatus(
                level=DiagnosticStatus.OK, name=self._status_name,
                hardware_id=header.frame_id,
                values=[KeyValue(key=k, value=format_value(record[k])) for k in FRAME_KEYS]))
            pubs['latency'].publish(latency)
        timing = self._timing.frame(record, frame.started, arrived)   # the cycle counts on
        now_ns = clock.now().nanoseconds or frame.stamp_ns
        for key, value in timing.items():
            if pubs[key].get_subscription_count() > 0:
                pubs[key].publish(float64_stamped(MESSAGE_TYPES, now_ns, value))
        return record

    def _publish_objects(self, frame: Frame, frame_id: str) -> None:
        """Publish the head's boxes on ~/output/objects, and as markers while subscribed."""
        objects = frame.result.objects
        if 'objects' not in self.publishers or objects is None:
            return
        if self.output.objects_type == 'autoware':
            msg = detected_objects_message(MESSAGE_TYPES, objects, self.classes,
                                           self.output.autoware_labels, frame.stamp_ns, frame_id)
        else:
            msg = detections_message(MESSAGE_TYPES, objects, self.classes, frame.stamp_ns,
                                     frame_id)
        self.publishers['objects'].publish(msg)
        published_time = self.publishers['published_time']
        if published_time.get_subscription_count() > 0:
            published_time.publish(PublishedTime(header=msg.header,
                                                 published_stamp=self._wall.now().to_msg()))
        if self.publishers['markers'].get_subscription_count() > 0:
            self.publishers['markers'].publish(markers_message(
                MESSAGE_TYPES, objects, self.classes, frame.stamp_ns, frame_id))

    def destroy(self, destroy_publisher) -> None:
        """Release every publisher."""
        for pub in self.publishers.values():
            destroy_publisher(pub)
        self.publishers = {}


def _image(header, fields: dict) -> Image:
    return MESSAGE_TYPES['sensor_msgs/msg/Image'](
        header=header, height=fields['height'], width=fields['width'],
        encoding=fields['encoding'], is_bigendian=fields['is_bigendian'], step=fields['step'],
        data=byte_array(fields['data']))
