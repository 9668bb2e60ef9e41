"""
PointCloud2 by the spec, for the decoder's tests: stand-in messages, a struct encoder and decoder.

The reference decoder owes nothing to the module under test; ``as_flavour`` gives the same
cloud as the four kinds of message the decoder takes (bytes or NumPy stand-in, rclpy, rosbags).
"""

from dataclasses import astuple, dataclass, replace
import struct

from jax_perception_node.tools.cloud_messages import point_cloud, rclpy_types
import numpy as np
from rosbags.typesys import get_typestore, Stores

ROSBAGS_TYPES = get_typestore(Stores.ROS2_JAZZY).types

# The spec's table (sensor_msgs/PointField), written out here so the decoder below owes nothing
# to the module under test: datatype -> (struct character, bytes, min, max).
INT8, UINT8, INT16, UINT16, INT32, UINT32, FLOAT32, FLOAT64 = range(1, 9)
TYPES = {
    INT8: ('b', 1, -2 ** 7, 2 ** 7 - 1),
    UINT8: ('B', 1, 0, 2 ** 8 - 1),
    INT16: ('h', 2, -2 ** 15, 2 ** 15 - 1),
    UINT16: ('H', 2, 0, 2 ** 16 - 1),
    INT32: ('i', 4, -2 ** 31, 2 ** 31 - 1),
    UINT32: ('I', 4, 0, 2 ** 32 - 1),
    FLOAT32: ('f', 4, None, None),
    FLOAT64: ('d', 8, None, None),
}
XYZI = ('x', 'y', 'z', 'intensity')
FLAVOURS = ('bytes', 'numpy', 'rclpy', 'rosbags')


@dataclass
class Field:
    """Stand-in for sensor_msgs/PointField."""

    name: str
    offset: int
    datatype: int
    count: int = 1


@dataclass
class Cloud:
    """Stand-in for sensor_msgs/PointCloud2 (no header: the decoder must not need one)."""

    height: int
    width: int
    fields: list
    is_bigendian: bool
    point_step: int
    row_step: int
    data: object
    is_dense: bool = False


class Invalid(Exception):
    """The reference decoder's verdict that a layout is malformed."""


def reference_decode(cloud: Cloud) -> np.ndarray:
    """Decode point by point with struct, applying the spec's rules; raise Invalid if broken."""
    data = bytes(cloud.data)
    ps, rs, h, w = cloud.point_step, cloud.row_step, cloud.height, cloud.width
    if ps == 0:
        raise Invalid('point_step')
    used = [f for f in cloud.fields if f.name in XYZI]
    names = [f.name for f in used]
    if len(set(names)) != len(names):
        raise Invalid('duplicate')
    if not {'x', 'y', 'z'} <= set(names):
        raise Invalid('missing')
    for f in used:
        if f.datatype not in TYPES or f.count != 1 or f.offset + TYPES[f.datatype][1] > ps:
            raise Invalid(f.name)
    if rs < w * ps or len(data) < rs * h:
        raise Invalid('size')
    endian = '>' if cloud.is_bigendian else '<'
    out = np.zeros((h * w, 4), np.float32)
    for f in used:
        column = XYZI.index(f.name)
        fmt = endian + TYPES[f.datatype][0]
        for r in range(h):
            for c in range(w):
                (value,) = struct.unpack_from(fmt, data, r * rs + c * ps + f.offset)
                with np.errstate(over='ignore'):
                    out[r * w + c, column] = np.float64(value).astype(np.float32)
    return out


def encode(height, width, fields, values, is_bigendian=False, point_step=None, row_step=None,
           fill=0xA5) -> Cloud:
    """Pack ``values[name][i]`` into a stand-in cloud with struct; padding bytes are ``fill``."""
    if point_step is None:
        point_step = max(f.offset + TYPES[f.datatype][1] for f in fields)
    if row_step is None:
        row_step = width * point_step
    data = bytearray([fill]) * (row_step * height)
    endian = '>' if is_bigendian else '<'
    for f in fields:
        for i, value in enumerate(values.get(f.name, ())):
            r, c = divmod(i, width)
            struct.pack_into(endian + TYPES[f.datatype][0], data,
                             r * row_step + c * point_step + f.offset, value)
    return Cloud(height, width, fields, is_bigendian, point_step, row_step, bytes(data))


def as_flavour(cloud: Cloud, flavour: str):
    """Return the same cloud as bytes or NumPy stand-in, rclpy or rosbags message."""
    if flavour == 'bytes':
        return cloud
    if flavour == 'numpy':
        return replace(cloud, data=np.frombuffer(bytearray(cloud.data), np.uint8))
    types = rclpy_types() if flavour == 'rclpy' else ROSBAGS_TYPES
    return point_cloud(types, bytes(cloud.data), [astuple(f) for f in cloud.fields],
                       cloud.width, cloud.point_step, height=cloud.height,
                       row_step=cloud.row_step, is_bigendian=cloud.is_bigendian)


def sample_values(datatype: int, n: int, rng: np.random.Generator) -> list:
    """N values of the type, its extremes included, as Python numbers for struct."""
    _, _, lo, hi = TYPES[datatype]
    if lo is None:
        values = (rng.normal(size=n) * 1000).tolist()
        if datatype == FLOAT32:
            values = [float(np.float32(v)) for v in values]
        extremes = [0.0, -1.5, 3.4e38 if datatype == FLOAT32 else 1.0e300]
    else:
        values = rng.integers(lo, hi, n, endpoint=True).tolist()
        extremes = [lo, hi, 0]
    return extremes[:n] + values[len(extremes):]


def standard_cloud(n: int, rng: np.random.Generator) -> Cloud:
    """Build the common layout: native float32 x, y, z, intensity at 0, 4, 8, 12."""
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    values = {name: rng.normal(size=n).astype(np.float32).tolist() for name in XYZI}
    return encode(1, n, fields, values)


def reference_rows(n: int, capacity: int, policy: str) -> np.ndarray:
    """Rows kept of ``n`` for ``capacity``: all, the first (truncate) or an even stride."""
    if n <= capacity:
        return np.arange(n)
    if policy == 'truncate':
        return np.arange(capacity)
    return (np.arange(capacity) * n) // capacity
