"""
PointCloud2 messages built from points, for rclpy or rosbags alike (tools and tests).

One builder for every library: the caller passes the library's message classes by ROS type
name, so the benchmarks' publisher (rclpy) and the tests' bags (rosbags) share the layout code.
Importing this module imports neither library.
"""

from jax_perception_node.sensors.camera import byte_array
import numpy as np


def point_cloud(types, data, fields, width: int, point_step: int, stamp_ns: int = 0,
                frame_id: str = 'lidar', height: int = 1, row_step: int | None = None,
                is_bigendian: bool = False, is_dense: bool = False):
    """
    Build a sensor_msgs/PointCloud2 of rclpy or rosbags from the points' bytes and layout.

    Args
    ----
    types: ROS type name -> message class: rosbags' ``typestore.types`` or
        :func:`rclpy_types` (PointCloud2, PointField, Header and Time are used).
    data: the points' bytes (any buffer; a NumPy array is taken as its bytes). rosbags gets
        them as a uint8 NumPy array, rclpy as ``array.array('B')`` (one copy: its setter
        would convert anything else byte by byte).
    fields: (name, offset, datatype[, count]) per PointField; count defaults to 1.
    width: points per row.
    point_step: bytes per point.
    stamp_ns: header stamp, integer nanoseconds.
    frame_id: header frame.
    height: rows (1: an unorganized cloud).
    row_step: bytes per row, ``width * point_step`` unless given.
    is_bigendian: the byte order of ``data``.
    is_dense: whether every point is finite.

    Returns
    -------
    The message of ``types``' PointCloud2 class.

    """
    cloud_type = types['sensor_msgs/msg/PointCloud2']
    data = np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id=frame_id)
    field = types['sensor_msgs/msg/PointField']
    return cloud_type(
        header=header, height=height, width=width, is_bigendian=bool(is_bigendian),
        fields=[field(name=f[0], offset=f[1], datatype=f[2], count=f[3] if f[3:] else 1)
                for f in fields],
        point_step=point_step, row_step=width * point_step if row_step is None else row_step,
        # rosbags' classes name their type in __msgtype__; rclpy's do not.
        data=(np.frombuffer(data, np.uint8) if hasattr(cloud_type, '__msgtype__')
              else byte_array(data)), is_dense=is_dense)


def rclpy_types() -> dict:
    """Return the rclpy message classes :func:`point_cloud` uses, by ROS type name."""
    from builtin_interfaces.msg import Time
    from sensor_msgs.msg import PointCloud2, PointField
    from std_msgs.msg import Header
    return {'sensor_msgs/msg/PointCloud2': PointCloud2, 'sensor_msgs/msg/PointField': PointField,
            'std_msgs/msg/Header': Header, 'builtin_interfaces/msg/Time': Time}
