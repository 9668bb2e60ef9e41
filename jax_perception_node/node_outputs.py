"""
The node's per-frame outputs: features, picture, GridMap, latency record, Autoware timing.

``FrameOutputs`` owns the publishers of one configured node and turns a processed
``frame_path.Frame`` into messages. The picture and the GridMap are built only while someone
subscribes; the rest is published every frame. The builders are ROS-free (camera.py,
frame_path.py, grid_map.py, timing.py); this module only hands them rclpy's classes.
"""

import time

from autoware_internal_debug_msgs.msg import Float64Stamped
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, Pose, Quaternion
from grid_map_msgs.msg import GridMap, GridMapInfo
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Image
from std_msgs.msg import Float32MultiArray, Header, MultiArrayDimension, MultiArrayLayout

from .camera import byte_array, features_image_fields
from .frame_path import Frame, FramePath, rgb_image_fields
from .grid_map import grid_map_message, GridMapLayers, types_by_name
from .latency import format_value, FRAME_KEYS
from .timing import AutowareTiming, float64_stamped, TIMING_TOPICS

# rclpy's classes of the messages the ROS-free builders make (grid_map.py, timing.py).
MESSAGE_TYPES = types_by_name(GridMap, GridMapInfo, Header, Time, Pose, Point, Quaternion,
                              Float32MultiArray, MultiArrayLayout, MultiArrayDimension,
                              Float64Stamped)


class FrameOutputs:
    """
    Publishers and message building for processed frames (one configured pipeline).

    ``layers`` names the GridMap layers; ``set_layers`` replaces them when
    ``cameras.channel_names`` changes live. ``start`` resets the Autoware cycle clock (at
    activation).
    """

    def __init__(self, create_publisher, layers: GridMapLayers):
        """Create the publishers with ``create_publisher`` (the node's or lifecycle node's)."""
        reliable = QoSProfile(depth=5)
        self.layers = layers
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

    def start(self) -> None:
        """Count the next frame's cyclic time from now (activation)."""
        self._timing = AutowareTiming(time.perf_counter())

    def wants_picture(self) -> bool:
        """Return True while someone subscribes to the rgb8 picture."""
        return self.publishers['image'].get_subscription_count() > 0

    def publish(self, frame: Frame, header, arrived: float, grid, clock) -> dict:
        """
        Publish one frame's messages; return its completed latency record.

        ``header``: the cloud's header, relabelled to the grid frame by the caller; ``arrived``:
        perf_counter when the cloud arrived; ``grid``: the GridConfig in force; ``clock``: the
        node's clock (ages and the timing stamps use it, so ``use_sim_time`` works).
        """
        publish_start = time.perf_counter()
        pubs, features = self.publishers, frame.result.features
        pubs['features'].publish(_image(header, features_image_fields(features)))
        if frame.rgb is not None:
            pubs['image'].publish(_image(header, rgb_image_fields(frame.rgb)))
        if pubs['grid_map'].get_subscription_count() > 0:
            pubs['grid_map'].publish(grid_map_message(MESSAGE_TYPES, self.layers, features,
                                                      grid, frame.stamp_ns))
        age_ms = (clock.now().nanoseconds - frame.stamp_ns) / 1e6
        record = FramePath.finish(frame, publish_start, arrived, age_ms)
        latency = DiagnosticArray(header=header)
        latency.status.append(DiagnosticStatus(
            level=DiagnosticStatus.OK, name='jax_perception: frame', hardware_id=header.frame_id,
            values=[KeyValue(key=k, value=format_value(record[k])) for k in FRAME_KEYS]))
        pubs['latency'].publish(latency)
        now_ns = clock.now().nanoseconds
        for key, value in self._timing.frame(record, frame.started, arrived).items():
            pubs[key].publish(float64_stamped(MESSAGE_TYPES, now_ns, value))
        return record

    def destroy(self, destroy_publisher) -> None:
        """Release every publisher."""
        for pub in self.publishers.values():
            destroy_publisher(pub)
        self.publishers = {}


def _image(header, fields: dict) -> Image:
    msg = Image(header=header, height=fields['height'], width=fields['width'],
                encoding=fields['encoding'], is_bigendian=fields['is_bigendian'],
                step=fields['step'])
    msg.data = byte_array(fields['data'])
    return msg
