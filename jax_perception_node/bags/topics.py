"""The node's topic names as seen from outside (node ``jax_perception`` in the root namespace)."""

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
