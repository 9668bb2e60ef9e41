"""
The node's sensor subscriptions: LiDARs, odometry, TF, per camera its input and CameraInfo.

Every subscription takes ``qos_overrides.<topic>.subscription.<policy>`` parameters (history,
depth, reliability, durability; ``<topic>`` the resolved name, after remapping), as rclcpp
nodes and tf2_ros' listener do: read once when it is made, read-only after.
"""

import copy
import functools

from nav_msgs.msg import Odometry
from rclpy.qos import (DurabilityPolicy, qos_profile_sensor_data, QoSPolicyKind, QoSProfile,
                       ReliabilityPolicy)
from rclpy.qos_overriding_options import QoSOverridingOptions
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from tf2_msgs.msg import TFMessage

# image_transport's names: raw on .../image, the compressed transport beside it.
IMAGE_INPUTS = ((Image, 'image'), (CompressedImage, 'image/compressed'))
FEATURE_INPUTS = ((Image, 'features'),)
# tf2_ros' listener's set; durability too, so that a CameraInfo latched by its driver
# (transient local, published once) can be received.
OVERRIDABLE = QoSOverridingOptions((QoSPolicyKind.HISTORY, QoSPolicyKind.DEPTH,
                                    QoSPolicyKind.RELIABILITY, QoSPolicyKind.DURABILITY))


def sensor_qos() -> QoSProfile:
    """Return rclpy's sensor-data profile (best effort, volatile, depth 5), a fresh copy."""
    # A copy per subscription: rclpy writes the overrides into the profile it is given.
    return copy.copy(qos_profile_sensor_data)


def tf_qos(static: bool) -> QoSProfile:
    """Return tf2_ros' listener QoS: reliable, depth 100; /tf_static latched (transient local)."""
    return QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if static
                      else DurabilityPolicy.VOLATILE)


def _subscribe(node, kind, topic: str, callback, qos: QoSProfile | None = None):
    """Create a subscription of QoS ``qos`` (None: sensor data) as its qos_overrides say."""
    return node.create_subscription(kind, topic, callback, qos or sensor_qos(),
                                    qos_overriding_options=OVERRIDABLE)


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
        subscriptions += [_subscribe(node, kind, f'~/input/camera/{name}/{topic}',
                                     lambda msg, name=name: on_input(name, msg))
                          for kind, topic in (IMAGE_INPUTS if images else FEATURE_INPUTS)]
        subscriptions.append(_subscribe(
            node, CameraInfo, f'~/input/camera/{name}/camera_info',
            lambda msg, name=name: on_camera_info(name, msg)))
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
    subscriptions = [_subscribe(node, PointCloud2, '~/input/pointcloud', on_cloud)] if not (
        names) else [_subscribe(node, PointCloud2, f'~/input/{name}/pointcloud',
                                lambda msg, name=name: on_lidar_cloud(name, msg))
                     for name in names]
    subscriptions.append(_subscribe(node, Odometry, '~/input/odometry', on_odometry))
    return subscriptions


def subscribe_tf(node, on_transforms) -> list:
    """
    Subscribe to /tf_static and /tf, calling ``on_transforms(msg, static, topic)``; return both.

    ``topic``: the name as remapped (a namespaced robot's /robot1/tf), for what is logged.
    """
    return [_subscribe(node, TFMessage, topic,
                       functools.partial(on_transforms, static=static,
                                         topic=node.resolve_topic_name(topic)),
                       tf_qos(static=static))
            for topic, static in (('/tf_static', True), ('/tf', False))]
