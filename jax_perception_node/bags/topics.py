"""
The node's topic names as seen from outside (node ``jax_perception`` in the root namespace).

``BagTopics``: where a bag keeps those inputs, for replay and play.
"""

from dataclasses import dataclass
from typing import Sequence

NAMESPACE = '/jax_perception'
POINTCLOUD_TOPIC = f'{NAMESPACE}/input/pointcloud'
ODOMETRY_TOPIC = f'{NAMESPACE}/input/odometry'   # nav_msgs/Odometry, for accumulation
FEATURES_TOPIC = f'{NAMESPACE}/output/bev_features'
IMAGE_TOPIC = f'{NAMESPACE}/output/bev_image'
LATENCY_TOPIC = f'{NAMESPACE}/debug/latency'
GRID_MAP_TOPIC = f'{NAMESPACE}/output/bev_grid_map'                # grid_map_msgs/GridMap
# With a head (head.module): vision_msgs/Detection3DArray or autoware_perception_msgs/
# DetectedObjects (output.objects_type), and visualization_msgs/MarkerArray.
OBJECTS_TOPIC = f'{NAMESPACE}/output/objects'
OBJECTS_MARKERS_TOPIC = f'{NAMESPACE}/output/objects_markers'
# autoware_internal_msgs/PublishedTime of each objects message, only while subscribed: the name
# Autoware's PublishedTimePublisher gives (the topic + /debug/published_time).
OBJECTS_PUBLISHED_TIME_TOPIC = f'{OBJECTS_TOPIC}/debug/published_time'
# autoware_internal_debug_msgs/Float64Stamped, ms: Autoware's timing topics.
PROCESSING_TIME_TOPIC = f'{NAMESPACE}/debug/processing_time_ms'
CYCLIC_TIME_TOPIC = f'{NAMESPACE}/debug/cyclic_time_ms'
PIPELINE_LATENCY_TOPIC = f'{NAMESPACE}/debug/pipeline_latency_ms'
DIAGNOSTICS_TOPIC = '/diagnostics'


def camera_topic(name: str) -> str:
    """Input topic of a camera's feature maps."""
    return f'{NAMESPACE}/input/camera/{name}/features'


def camera_image_topic(name: str) -> str:
    """Input topic of a camera's images (sensor_msgs/Image), image_transport's raw one."""
    return f'{NAMESPACE}/input/camera/{name}/image'


def camera_compressed_topic(name: str) -> str:
    """Input topic of a camera's compressed images (sensor_msgs/CompressedImage)."""
    return f'{camera_image_topic(name)}/compressed'


def lidar_topic(name: str) -> str:
    """Input topic of LiDAR ``name`` of ``lidars.names``: the node's ~/input/<name>/pointcloud."""
    return f'{NAMESPACE}/input/{name}/pointcloud'


def camera_info_topic(name: str) -> str:
    """Input topic of a camera's sensor_msgs/CameraInfo (K at image resolution)."""
    return f'{NAMESPACE}/input/camera/{name}/camera_info'


# Everything the node publishes (camera-free: no topic name depends on the configuration).
PUBLISHED_TOPICS = (FEATURES_TOPIC, IMAGE_TOPIC, GRID_MAP_TOPIC, OBJECTS_TOPIC,
                    OBJECTS_MARKERS_TOPIC, OBJECTS_PUBLISHED_TIME_TOPIC, LATENCY_TOPIC,
                    PROCESSING_TIME_TOPIC, CYCLIC_TIME_TOPIC, PIPELINE_LATENCY_TOPIC,
                    DIAGNOSTICS_TOPIC)


@dataclass(frozen=True)
class BagTopics:
    """
    Where a bag keeps the node's inputs; a sensor without an entry uses the node's input name.

    ``cameras`` / ``camera_infos``: camera name -> topic of its feature maps / CameraInfo,
    given as a mapping or as (name, topic) pairs and kept as sorted pairs, so a value is
    immutable and picklable (it travels to fleet workers). ``odometry`` (nav_msgs/Odometry) is
    read only with accumulation or deskew. ``pointcloud`` is the LiDAR of one-LiDAR parameters;
    with ``lidars.names`` each LiDAR's clouds are on ``lidars`` (name -> topic, as ``cameras``)
    or on the node's ``lidar_topic(name)``.
    """

    pointcloud: str = POINTCLOUD_TOPIC
    cameras: tuple[tuple[str, str], ...] = ()
    camera_infos: tuple[tuple[str, str], ...] = ()
    odometry: str = ODOMETRY_TOPIC
    lidars: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        for name in ('cameras', 'camera_infos', 'lidars'):
            object.__setattr__(self, name, tuple(sorted(dict(getattr(self, name)).items())))

    def lidar(self, name: str) -> str:
        """Topic of LiDAR ``name``'s clouds in the bag (``lidars.names``)."""
        return dict(self.lidars).get(name, lidar_topic(name))

    def clouds(self, names: tuple[str, ...] = ()) -> dict[str, str]:
        """Return bag topic -> LiDAR name: ``pointcloud`` -> '' without ``names``."""
        return {self.lidar(n): n for n in names} if names else {self.pointcloud: ''}

    def camera(self, name: str) -> str:
        """Topic of camera ``name``'s feature maps in the bag."""
        return dict(self.cameras).get(name, camera_topic(name))

    def camera_inputs(self, names: Sequence[str], images: bool) -> dict[str, str]:
        """
        Return bag topic -> camera name of each camera's maps, or with ``images`` its images.

        A camera given a topic reads that one; otherwise, with images, both of image_transport's
        (raw and compressed: a bag normally holds one), else its feature-map topic.
        """
        named = dict(self.cameras)
        return {topic: name for name in names for topic in (
            [named[name]] if name in named else
            [camera_image_topic(name), camera_compressed_topic(name)] if images else
            [camera_topic(name)])}

    def camera_info(self, name: str) -> str:
        """Topic of camera ``name``'s CameraInfo in the bag."""
        return dict(self.camera_infos).get(name, camera_info_topic(name))
