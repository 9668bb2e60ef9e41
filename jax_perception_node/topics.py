"""The node's topic names as seen from outside (node ``jax_perception`` in the root namespace)."""

NAMESPACE = '/jax_perception'
POINTCLOUD_TOPIC = f'{NAMESPACE}/input/pointcloud'
ODOMETRY_TOPIC = f'{NAMESPACE}/input/odometry'   # nav_msgs/Odometry, for accumulation
FEATURES_TOPIC = f'{NAMESPACE}/output/bev_features'
IMAGE_TOPIC = f'{NAMESPACE}/output/bev_image'
LATENCY_TOPIC = f'{NAMESPACE}/debug/latency'
DIAGNOSTICS_TOPIC = '/diagnostics'


def camera_topic(name: str) -> str:
    """Input topic of a camera's feature maps."""
    return f'{NAMESPACE}/input/camera/{name}/features'


def camera_info_topic(name: str) -> str:
    """Input topic of a camera's sensor_msgs/CameraInfo (K at image resolution)."""
    return f'{NAMESPACE}/input/camera/{name}/camera_info'
