"""The node's sensor subscriptions: LiDARs, odometry, TF, per camera its input and CameraInfo."""

from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from tf2_msgs.msg import TFMessage

# image_transport's names: raw on .../image, the compressed transport beside it.
IMAGE_INPUTS = ((Image, 'image'), (CompressedImage, 'image/compressed'))
FEATURE_INPUTS = ((Image, 'features'),)
# tf2_ros' listener QoS: /tf_static latched (transient local) so a late node still gets it.
TF_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
TF_STATIC_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)


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


def subscribe_lidars(node, names, on_cloud, on_lidar_cloud, on_odometry) -> list:
    """
    Subscribe to the LiDARs and the odometry; return the subscriptions.

    ``names`` empty: one LiDAR on ``~/input/pointcloud``, calling ``on_cloud(msg)``; else
    ``~/input/<name>/pointcloud`` each, calling ``on_lidar_cloud(name, msg)``.
    ``~/input/odometry`` calls ``on_odometry(msg)``: accumulation and deskew take the ego
    motion from it with pose_source odometry (live, as are lidar.time_field and lidar.deskew:
    so always). Sensor-data QoS matches reliable and best-effort publishers alike.
    """
    subscriptions = [node.create_subscription(
        PointCloud2, '~/input/pointcloud', on_cloud, qos_profile_sensor_data)] if not names else [
        node.create_subscription(PointCloud2, f'~/input/{name}/pointcloud',
                                 lambda msg, name=name: on_lidar_cloud(name, msg),
                                 qos_profile_sensor_data) for name in names]
    subscriptions.append(node.create_subscription(Odometry, '~/input/odometry', on_odometry,
                                                  qos_profile_sensor_data))
    return subscriptions


def subscribe_tf(node, on_transforms) -> list:
    """Subscribe to /tf_static and /tf, calling ``on_transforms(msg, static)``; return both."""
    return [node.create_subscription(TFMessage, '/tf_static',
                                     lambda msg: on_transforms(msg, True), TF_STATIC_QOS),
            node.create_subscription(TFMessage, '/tf',
                                     lambda msg: on_transforms(msg, False), TF_QOS)]
