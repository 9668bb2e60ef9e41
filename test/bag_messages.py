"""rosbags messages built by hand for bag tests (no rclpy, no code under test to build them)."""

import math
import sys

from jax_perception_node.bags import bagio
from jax_perception_node.tools.cloud_messages import point_cloud
import numpy as np

TYPES = bagio.TYPESTORE.types
# x, y, z, intensity: float32 (PointField datatype 7) at 0, 4, 8, 12 bytes.
XYZI_FIELDS = tuple((name, 4 * k, 7) for k, name in enumerate(('x', 'y', 'z', 'intensity')))


def header(stamp_ns: int, frame_id: str):
    """std_msgs/Header at ``stamp_ns``."""
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return TYPES['std_msgs/msg/Header'](
        stamp=TYPES['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id=frame_id)


def cloud(points: np.ndarray, stamp_ns: int, frame_id: str = 'lidar', types=TYPES):
    """
    float32 (N, 4) -> PointCloud2 with x, y, z, intensity, in the host's byte order.

    ``types``: rosbags' (the default) or ``cloud_messages.rclpy_types()`` for an rclpy message.
    """
    points = np.asarray(points, np.float32)
    return point_cloud(types, points, XYZI_FIELDS, len(points), 16, stamp_ns, frame_id,
                       is_bigendian=sys.byteorder == 'big')


def features(fmap: np.ndarray, stamp_ns: int, camera: str = 'front',
             frame_id: str | None = None):
    """float32 (H, W, C) -> Image 32FC<C> in ``frame_id`` (default: ``<camera>_optical``)."""
    rows, cols, channels = fmap.shape
    return TYPES[bagio.IMAGE_TYPE](
        header=header(stamp_ns, frame_id or f'{camera}_optical'), height=rows, width=cols,
        encoding=f'32FC{channels}', is_bigendian=sys.byteorder == 'big',
        step=cols * channels * 4,
        data=np.frombuffer(np.ascontiguousarray(fmap, np.float32).tobytes(), np.uint8))


def image(rgb: np.ndarray, stamp_ns: int, camera: str = 'front'):
    """uint8 (H, W, 3) -> an rgb8 Image in ``<camera>_optical``."""
    rows, cols, _ = rgb.shape
    return TYPES[bagio.IMAGE_TYPE](
        header=header(stamp_ns, f'{camera}_optical'), height=rows, width=cols, encoding='rgb8',
        is_bigendian=0, step=cols * 3, data=np.ascontiguousarray(rgb, np.uint8).reshape(-1))


def compressed_image(data: bytes, stamp_ns: int, camera: str = 'front'):
    """JPEG or PNG bytes -> a CompressedImage in ``<camera>_optical``, as image_transport sends."""
    return TYPES[bagio.COMPRESSED_IMAGE_TYPE](
        header=header(stamp_ns, f'{camera}_optical'), format='rgb8; jpeg compressed bgr8',
        data=np.frombuffer(data, np.uint8))


def camera_info(width: int, height: int, fx: float, fy: float, cx: float, cy: float,
                stamp_ns: int = 0):
    """Build a CameraInfo with K = [fx 0 cx; 0 fy cy; 0 0 1] for a ``width`` x ``height`` image."""
    k = np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], np.float64)
    roi = TYPES['sensor_msgs/msg/RegionOfInterest'](
        x_offset=0, y_offset=0, height=0, width=0, do_rectify=False)
    return TYPES[bagio.CAMERA_INFO_TYPE](
        header=header(stamp_ns, 'camera'), height=height, width=width,
        distortion_model='plumb_bob', d=np.zeros(5), k=k, r=np.eye(3).reshape(-1),
        p=np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], np.float64),
        binning_x=0, binning_y=0, roi=roi)


def odometry(stamp_ns, position=(0.0, 0.0, 0.0), xyzw=(0.0, 0.0, 0.0, 1.0),
             child='base_link', frame='map'):
    """nav_msgs/Odometry built by hand (rosbags types: the core reads messages by attribute)."""
    sec, nanosec = divmod(int(stamp_ns), 10**9)
    header = TYPES['std_msgs/msg/Header'](
        stamp=TYPES['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id=frame)
    point = TYPES['geometry_msgs/msg/Point'](*map(float, position))
    quaternion = TYPES['geometry_msgs/msg/Quaternion'](*map(float, xyzw))
    pose = TYPES['geometry_msgs/msg/PoseWithCovariance'](
        pose=TYPES['geometry_msgs/msg/Pose'](position=point, orientation=quaternion),
        covariance=np.zeros(36))
    vector = TYPES['geometry_msgs/msg/Vector3']
    twist = TYPES['geometry_msgs/msg/TwistWithCovariance'](
        twist=TYPES['geometry_msgs/msg/Twist'](linear=vector(0.0, 0.0, 0.0),
                                               angular=vector(0.0, 0.0, 0.0)),
        covariance=np.zeros(36))
    return TYPES[bagio.ODOMETRY_TYPE](header=header, child_frame_id=child, pose=pose, twist=twist)


def yaw_quaternion(degrees):
    """Return the (x, y, z, w) quaternion of a yaw about z."""
    half = math.radians(degrees) / 2
    return (0.0, 0.0, math.sin(half), math.cos(half))


def read_all(bag, topics) -> list[tuple]:
    """Every message of ``topics`` in a bag, deserialized: (topic, timestamp, message)."""
    reader = bagio.open_reader(bag)
    try:
        return [(t, ts, bagio.TYPESTORE.deserialize_cdr(raw, mt))
                for t, ts, raw, mt in bagio.iter_messages(reader, topics)]
    finally:
        reader.close()
