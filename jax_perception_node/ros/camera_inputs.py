"""The node's camera subscriptions: images or feature maps, and CameraInfo, per camera."""

from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

# image_transport's names: raw on .../image, the compressed transport beside it.
IMAGE_INPUTS = ((Image, 'image'), (CompressedImage, 'image/compressed'))
FEATURE_INPUTS = ((Image, 'features'),)


def subscribe_cameras(node, names, images: bool, on_input, on_camera_info) -> list:
    """
    Subscribe to every camera's inputs; return the subscriptions.

    ``images``: ``~/input/camera/<name>/image`` and ``.../image/compressed``, else
    ``.../features``; each calls ``on_input(name, msg)``. ``.../camera_info`` calls
    ``on_camera_info(name, msg)``. Sensor-data QoS matches reliable and best-effort drivers
    alike.
    """
    subscriptions = []
    for name in names:
        subscriptions += [node.create_subscription(
            kind, f'~/input/camera/{name}/{topic}', lambda msg, name=name: on_input(name, msg),
            qos_profile_sensor_data) for kind, topic in (
                IMAGE_INPUTS if images else FEATURE_INPUTS)]
        subscriptions.append(node.create_subscription(
            CameraInfo, f'~/input/camera/{name}/camera_info',
            lambda msg, name=name: on_camera_info(name, msg), qos_profile_sensor_data))
    return subscriptions
