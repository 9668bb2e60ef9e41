"""PointCloud2 decoding against a struct-based decoder and sensor_msgs_py, for every flavour."""

from dataclasses import dataclass, replace
import os
from pathlib import Path
import struct
import sys
import time
import tracemalloc

from configs import absolute_imports
from hypothesis import event, given, HealthCheck, settings
from hypothesis import strategies as st
from jax_perception_node.cloud import CloudFormatError, keep_rows, point_count, read_points
import numpy as np
import pytest
from rosbags.typesys import get_typestore, Stores
from sensor_msgs.msg import PointCloud2, PointField

FUZZ_EXAMPLES = int(os.environ.get('JAX_PERCEPTION_FUZZ_EXAMPLES', '300'))

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

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)


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
    data = np.frombuffer(bytearray(cloud.data), np.uint8)
    if flavour == 'numpy':
        return replace(cloud, data=data)
    if flavour == 'rclpy':
        return PointCloud2(
            height=cloud.height, width=cloud.width, is_bigendian=bool(cloud.is_bigendian),
            point_step=cloud.point_step, row_step=cloud.row_step, data=bytes(cloud.data),
            fields=[PointField(name=f.name, offset=f.offset, datatype=f.datatype,
                               count=f.count) for f in cloud.fields])
    types = TYPESTORE.types
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=1, nanosec=2), frame_id='lidar')
    return types['sensor_msgs/msg/PointCloud2'](
        header=header, height=cloud.height, width=cloud.width,
        fields=[types['sensor_msgs/msg/PointField'](f.name, f.offset, f.datatype, f.count)
                for f in cloud.fields],
        is_bigendian=bool(cloud.is_bigendian), point_step=cloud.point_step,
        row_step=cloud.row_step, data=data, is_dense=False)


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


# -- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize('flavour', FLAVOURS)
@pytest.mark.parametrize('is_bigendian', [False, True])
@pytest.mark.parametrize('datatype', sorted(TYPES))
def test_every_datatype_round_trips(datatype, is_bigendian, flavour):
    # Organized, row padding, point_step padding, unrelated fields between and after ours.
    rng = np.random.default_rng(datatype)
    height, width = 3, 5
    size = TYPES[datatype][1]
    fields = [Field('ring', 0, UINT16), Field('x', 3, datatype), Field('y', 3 + size, datatype),
              Field('time', 3 + 2 * size, FLOAT32), Field('z', 7 + 2 * size, datatype),
              Field('intensity', 7 + 3 * size, datatype)]
    values = {f.name: sample_values(f.datatype, height * width, rng) for f in fields}
    cloud = encode(height, width, fields, values, is_bigendian,
                   point_step=7 + 4 * size + 5, row_step=width * (7 + 4 * size + 5) + 7)
    expected = reference_decode(cloud)
    # The reference decoder itself agrees with the values that went in.
    with np.errstate(over='ignore'):
        packed = np.array([values[name] for name in XYZI], np.float64).T.astype(np.float32)
    np.testing.assert_array_equal(expected, packed)

    points, n = read_points(as_flavour(cloud, flavour))
    assert n == height * width
    assert points.dtype == np.float32 and points.shape == (n, 4)
    np.testing.assert_array_equal(points, expected)


@pytest.mark.parametrize('flavour', FLAVOURS)
def test_mixed_datatypes_any_field_order(flavour):
    rng = np.random.default_rng(1)
    fields = [Field('intensity', 0, UINT8), Field('z', 1, INT16), Field('y', 3, FLOAT64),
              Field('rgb', 11, UINT32), Field('x', 15, FLOAT32)]
    values = {f.name: sample_values(f.datatype, 12, rng) for f in fields}
    cloud = encode(1, 12, fields, values, point_step=20, row_step=20 * 12)
    points, n = read_points(as_flavour(cloud, flavour))
    assert n == 12
    np.testing.assert_array_equal(points, reference_decode(cloud))
    np.testing.assert_array_equal(points[:, 0], np.float32(values['x']))


@pytest.mark.parametrize('flavour', FLAVOURS)
def test_missing_intensity_reads_as_zero(flavour):
    fields = [Field('x', 0, FLOAT32), Field('y', 4, FLOAT32), Field('z', 8, FLOAT32)]
    cloud = encode(2, 3, fields, {'x': range(6), 'y': range(6), 'z': range(6)})
    points, n = read_points(as_flavour(cloud, flavour))
    assert n == 6
    np.testing.assert_array_equal(points[:, 3], 0.0)
    np.testing.assert_array_equal(points[:, 0], np.arange(6))


def test_organized_cloud_is_row_major():
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    values = {name: [100 * k + i for i in range(12)] for k, name in enumerate(XYZI)}
    for row_step in (4 * 16, 4 * 16 + 12):
        cloud = encode(3, 4, fields, values, row_step=row_step)
        points, n = read_points(cloud)
        assert n == 12
        np.testing.assert_array_equal(points[:, 1], 100 + np.arange(12))


@pytest.mark.parametrize('height, width', [(0, 0), (0, 5), (4, 0)])
def test_empty_cloud(height, width):
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    cloud = Cloud(height, width, fields, False, 16, 16 * width, b'')
    points, n = read_points(cloud, max_points=8)
    assert n == 0 and points.shape == (0, 4) and points.dtype == np.float32
    assert point_count(cloud) == 0


def test_non_finite_values_pass_through():
    fields = [Field('x', 0, FLOAT32), Field('y', 4, FLOAT64), Field('z', 12, FLOAT32),
              Field('intensity', 16, FLOAT32)]
    nan, inf = float('nan'), float('inf')
    values = {'x': [nan, 1.0, -inf], 'y': [1e300, inf, nan], 'z': [0.0, nan, 2.0],
              'intensity': [inf, -inf, nan]}
    points, _ = read_points(encode(1, 3, fields, values, is_bigendian=True))
    expected = np.array([[nan, inf, 0, inf], [1, inf, nan, -inf], [-inf, nan, 2, nan]],
                        np.float32)
    np.testing.assert_array_equal(points, expected)


def test_unused_fields_are_not_validated():
    # A vendor field we never read may be odd; it must not cost the frame.
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    fields += [Field('weird', 100, 42, count=7), Field('weird', 0, 0)]
    cloud = encode(1, 2, fields[:4], {'x': [1, 2], 'y': [3, 4], 'z': [5, 6]})
    cloud.fields = fields
    points, _ = read_points(cloud)
    np.testing.assert_array_equal(points[:, 2], [5, 6])


def test_data_as_plain_list():
    cloud = standard_cloud(3, np.random.default_rng(0))
    listed = replace(cloud, data=list(cloud.data))
    np.testing.assert_array_equal(read_points(listed)[0], reference_decode(cloud))
    with pytest.raises(CloudFormatError, match='byte buffer'):
        read_points(replace(cloud, data='not bytes'))


# -- zero copy --------------------------------------------------------------------------------

@pytest.mark.parametrize('flavour', ['numpy', 'rosbags', 'rclpy'])
def test_standard_layout_is_a_view(flavour):
    cloud = standard_cloud(50, np.random.default_rng(2))
    msg = as_flavour(cloud, flavour)
    points, n = read_points(msg)
    assert n == 50 and points.shape == (50, 4) and points.dtype == np.float32
    np.testing.assert_array_equal(points, reference_decode(cloud))
    assert np.shares_memory(points, np.frombuffer(msg.data, np.uint8))

    kept, _ = read_points(msg, max_points=20, policy='truncate')
    assert np.shares_memory(kept, np.frombuffer(msg.data, np.uint8))
    kept, _ = read_points(msg, max_points=20, policy='subsample')
    assert not np.shares_memory(kept, np.frombuffer(msg.data, np.uint8))


def test_padded_point_step_with_xyzi_first_is_a_view():
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    fields.append(Field('ring', 16, UINT16))
    values = {name: np.arange(7, dtype=np.float32) + k for k, name in enumerate(XYZI)}
    cloud = as_flavour(encode(1, 7, fields, values, point_step=32), 'numpy')
    points, _ = read_points(cloud)
    assert np.shares_memory(points, cloud.data)
    np.testing.assert_array_equal(points, reference_decode(cloud))


def test_foreign_byte_order_is_converted_not_viewed():
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    values = {name: [1.5, -2.0] for name in XYZI}
    foreign_big = sys.byteorder == 'little'
    cloud = as_flavour(encode(1, 2, fields, values, is_bigendian=foreign_big), 'numpy')
    points, _ = read_points(cloud)
    assert not np.shares_memory(points, cloud.data)
    np.testing.assert_array_equal(points, [[1.5] * 4, [-2.0] * 4])


# -- malformed messages -----------------------------------------------------------------------

def _good() -> Cloud:
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    return encode(2, 3, fields, {name: range(6) for name in XYZI})


def _with_field(cloud, name, **changes):
    fields = [replace(f, **changes) if f.name == name else f for f in cloud.fields]
    return replace(cloud, fields=fields)


MALFORMED = {
    'missing x': (lambda c: replace(c, fields=c.fields[1:]), 'missing field "x"'),
    'missing z': (lambda c: replace(c, fields=[f for f in c.fields if f.name != 'z']),
                  'missing field "z"'),
    'unknown datatype': (lambda c: _with_field(c, 'y', datatype=9), 'field "y": unknown datatype'),
    'datatype 0': (lambda c: _with_field(c, 'intensity', datatype=0), '"intensity"'),
    'count 3': (lambda c: _with_field(c, 'x', count=3), 'field "x": count 3'),
    'count 0': (lambda c: _with_field(c, 'intensity', count=0), 'field "intensity": count 0'),
    'field past point_step': (lambda c: _with_field(c, 'z', offset=14), 'field "z".*point_step'),
    'float64 past point_step': (lambda c: _with_field(c, 'intensity', datatype=FLOAT64),
                                'field "intensity".*point_step'),
    'negative offset': (lambda c: _with_field(c, 'x', offset=-1), 'field "x"'),
    'point_step 0': (lambda c: replace(c, point_step=0), 'point_step is 0'),
    'row_step short': (lambda c: replace(c, row_step=47), 'row_step 47 < width 3'),
    'data short': (lambda c: replace(c, data=c.data[:-1]), 'data has 95 bytes, expected .* 96'),
    'no data': (lambda c: replace(c, data=b''), 'bytes'),
    'duplicate x': (lambda c: replace(c, fields=c.fields + [Field('x', 0, FLOAT32)]),
                    'duplicate field "x"'),
    'duplicate intensity': (
        lambda c: replace(c, fields=c.fields + [Field('intensity', 0, UINT8)]),
        'duplicate field "intensity"'),
    'negative width': (lambda c: replace(c, width=-3), 'width -3 is negative'),
    'billion points': (lambda c: replace(c, height=1, width=10 ** 9, row_step=16 * 10 ** 9,
                                         data=c.data[:16]), 'bytes'),
    'uint32 products': (lambda c: replace(c, height=np.uint32(2 ** 32 - 1),
                                          width=np.uint32(2 ** 32 - 1),
                                          point_step=np.uint32(2 ** 32 - 1),
                                          row_step=np.uint32(2 ** 32 - 1)), 'row_step'),
    'uint32 header, tiny data': (lambda c: replace(c, height=np.uint32(65536),
                                                   width=np.uint32(65536),
                                                   point_step=np.uint32(16),
                                                   row_step=np.uint32(2 ** 20)), 'bytes'),
}


@pytest.mark.parametrize('case', sorted(MALFORMED))
@pytest.mark.parametrize('flavour', ['bytes', 'numpy'])
def test_malformed_cloud_is_rejected(case, flavour):
    change, message = MALFORMED[case]
    cloud = as_flavour(change(_good()), flavour)
    with pytest.raises(CloudFormatError, match=message):
        read_points(cloud)
    with pytest.raises(CloudFormatError, match=message):
        point_count(cloud)


@pytest.mark.parametrize('flavour', ['rclpy', 'rosbags'])
def test_malformed_real_messages_are_rejected(flavour):
    cloud = as_flavour(replace(_good(), data=_good().data[:40]), flavour)
    with pytest.raises(CloudFormatError, match='40 bytes'):
        read_points(cloud)
    cloud = as_flavour(_with_field(_good(), 'z', datatype=11), flavour)
    with pytest.raises(CloudFormatError, match='"z"'):
        read_points(cloud)


def test_huge_header_fails_fast_without_allocating():
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    liar = Cloud(10 ** 4, 10 ** 5, fields, False, 16, 16 * 10 ** 5, bytes(16))
    tracemalloc.start()
    start = time.process_time()     # CPU time: a loaded machine does not stretch it
    try:
        for _ in range(100):
            with pytest.raises(CloudFormatError, match='expected .* bytes'):
                read_points(liar, max_points=None)
        elapsed = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0
    assert peak < 1 << 20


def test_bad_policy_and_capacity_are_value_errors():
    cloud = _good()
    with pytest.raises(ValueError, match='policy'):
        read_points(cloud, max_points=2, policy='drop')
    with pytest.raises(ValueError, match='max_points'):
        read_points(cloud, max_points=-1)
    with pytest.raises(ValueError, match='policy'):
        keep_rows(10, 5, 'random')


# -- overflow ---------------------------------------------------------------------------------

def _reference_rows(n: int, capacity: int, policy: str) -> np.ndarray:
    if n <= capacity:
        return np.arange(n)
    if policy == 'truncate':
        return np.arange(capacity)
    return (np.arange(capacity) * n) // capacity


def _overflow_clouds():
    rng = np.random.default_rng(3)
    mixed = [Field('x', 0, FLOAT64), Field('y', 8, INT16), Field('z', 10, FLOAT32),
             Field('intensity', 14, UINT8)]
    return {
        'standard': standard_cloud(37, rng),
        'mixed flat': encode(1, 37, mixed, {f.name: sample_values(f.datatype, 37, rng)
                                            for f in mixed}),
        'organized padded': encode(5, 8, mixed, {f.name: sample_values(f.datatype, 40, rng)
                                                 for f in mixed}, row_step=8 * 15 + 3),
    }


@pytest.mark.parametrize('policy', ['subsample', 'truncate'])
@pytest.mark.parametrize('layout', sorted(_overflow_clouds()))
def test_overflow_keeps_the_selected_rows(layout, policy):
    cloud = _overflow_clouds()[layout]
    full = reference_decode(cloud)
    n = len(full)
    for capacity in (0, 1, 2, 7, n - 1, n, n + 5, None):
        points, count = read_points(as_flavour(cloud, 'numpy'), capacity, policy)
        assert count == n
        expected = full if capacity is None else full[_reference_rows(n, capacity, policy)]
        assert points.shape == expected.shape
        np.testing.assert_array_equal(points, expected)


def test_keep_rows_matches_the_documented_formula():
    for n, capacity in [(10, 3), (37, 36), (1000, 7), (5, 1), (7, 0), (131073, 131072)]:
        rows = keep_rows(n, capacity, 'subsample')
        np.testing.assert_array_equal(rows, (np.arange(capacity) * n) // capacity)
        assert rows.dtype == np.int64
        assert np.all(np.diff(rows) > 0)
        assert keep_rows(n, capacity, 'truncate') == slice(0, capacity)
    for policy in ('subsample', 'truncate'):
        assert keep_rows(5, 5, policy) == slice(0, 5)
        assert keep_rows(0, 5, policy) == slice(0, 0)


def test_keep_rows_does_not_overflow_for_huge_counts():
    n, capacity = 2 ** 45 + 12345, 2 ** 20 + 3
    rows = keep_rows(n, capacity, 'subsample')
    for i in (0, 1, 977, capacity // 2, capacity - 1):
        assert rows[i] == (i * n) // capacity
    assert rows[-1] < n


# -- layering ---------------------------------------------------------------------------------

def test_cloud_module_imports_no_ros():
    assert absolute_imports('cloud') <= {'collections', 'sys', 'numpy'}


# -- fuzz -------------------------------------------------------------------------------------

@st.composite
def random_clouds(draw):
    point_step = draw(st.sampled_from([0] + list(range(1, 41)) * 2))
    fields = []
    for name in XYZI:
        copies = draw(st.sampled_from([1] * 40 + [0, 2]))
        for _ in range(copies):
            datatype = draw(st.sampled_from(sorted(TYPES) * 10 + [0, 9]))
            size = TYPES.get(datatype, ('', 4))[1]
            if draw(st.integers(0, 39)):
                offset = draw(st.integers(0, max(point_step - size, 0)))
            else:
                offset = draw(st.integers(0, point_step + 8))
            count = draw(st.sampled_from([1] * 40 + [0, 2]))
            fields.append(Field(name, offset, datatype, count))
    fields += draw(st.lists(st.builds(Field, st.sampled_from(['ring', 'time', 'X', '']),
                                      st.integers(0, 60), st.integers(0, 12),
                                      st.integers(0, 3)), max_size=3))
    height = draw(st.sampled_from([0] + [1, 2, 3, 4] * 3))
    width = draw(st.sampled_from([0] + [1, 2, 3, 4, 5, 6] * 3))
    row_step = max(0, width * point_step + draw(st.sampled_from([0] * 16 + [-1, -4, 1, 3, 9])))
    size = max(0, row_step * height + draw(st.sampled_from([0] * 16 + [-1, -7, 1, 13])))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    cloud = Cloud(height, width, draw(st.permutations(fields)), draw(st.booleans()),
                  point_step, row_step, rng.integers(0, 256, size, np.uint8).tobytes())
    return cloud, draw(st.sampled_from(FLAVOURS))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_clouds(), st.one_of(st.none(), st.integers(0, 30)),
       st.sampled_from(['subsample', 'truncate']))
def test_fuzz_decodes_like_the_reference_or_rejects(case, max_points, policy):
    cloud, flavour = case
    try:
        expected = reference_decode(cloud)
    except Invalid:
        expected = None
    event('rejected' if expected is None else 'empty' if not len(expected) else 'decoded')
    msg = as_flavour(cloud, flavour)
    if expected is None:
        with pytest.raises(CloudFormatError):
            read_points(msg, max_points, policy)
        with pytest.raises(CloudFormatError):
            point_count(msg)
        return
    tracemalloc.start()
    try:
        points, n = read_points(msg, max_points, policy)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Bounded by what the message holds plus the (capped) output, whatever the header says.
    assert peak <= len(cloud.data) + points.nbytes + (64 << 10)
    assert n == len(expected) == point_count(msg)
    if max_points is not None:
        expected = expected[_reference_rows(n, max_points, policy)]
    assert points.dtype == np.float32 and points.shape == expected.shape
    np.testing.assert_array_equal(points, expected)


# -- a second oracle: sensor_msgs_py from ../shared -------------------------------------------

VENDOR = (Path(__file__).resolve().parents[3] / 'shared' / 'vendor'
          / 'sensor-msgs-py-jazzy')


def point_cloud2():
    """Import sensor_msgs_py.point_cloud2 from the vendor sources; skip where they are absent."""
    if not (VENDOR / 'sensor_msgs_py' / 'point_cloud2.py').is_file():
        pytest.skip(f'../shared is absent: no sensor_msgs_py oracle at {VENDOR}')
    if str(VENDOR) not in sys.path:
        sys.path.append(str(VENDOR))     # used in place, never copied (see its README)
    from sensor_msgs_py import point_cloud2 as module
    return module


def oracle_decode(cloud: Cloud) -> np.ndarray | None:
    """
    Decode with sensor_msgs_py.point_cloud2.read_points; None where it refuses the layout.

    Two layouts it misreads rather than refuses count as refused: an organized cloud with
    padded rows (it reads ``width * height`` points back to back, ignoring ``row_step``), and
    fields sharing bytes in a foreign byte order (it byteswaps the buffer in place, field by
    field, so a shared byte is swapped once per field).
    """
    pc2 = point_cloud2()
    if cloud.height > 1 and cloud.row_step != cloud.width * cloud.point_step:
        return None
    # x, y, z asked for by name (it refuses a cloud without them), intensity where present.
    names = ['x', 'y', 'z'] + [f.name for f in cloud.fields if f.name == 'intensity'][:1]
    if bool(cloud.is_bigendian) != (sys.byteorder == 'big'):
        spans = sorted((f.offset, f.offset + TYPES[f.datatype][1]) for f in cloud.fields
                       if f.name in names and f.datatype in TYPES)
        if any(end > start for (_, end), (start, _) in zip(spans, spans[1:])):
            return None
    msg = as_flavour(cloud, 'rclpy')     # a message of its own: read_points byteswaps in place
    try:
        structured = pc2.read_points(msg, field_names=names)
    except (AssertionError, KeyError, ValueError, TypeError):
        return None
    out = np.zeros((len(structured), 4), np.float32)
    with np.errstate(over='ignore', invalid='ignore'):
        for name in names:
            out[:, XYZI.index(name)] = structured[name].astype(np.float32)
    return out


def unchecked_by_the_oracle(cloud: Cloud) -> bool:
    """
    Whether the cloud breaks a rule that sensor_msgs_py does not check but ours does.

    Those are row_step against the data and, for a cloud without points, the field list itself
    (a count other than 1, a name listed twice, bytes past point_step): with nothing to read,
    sensor_msgs_py looks at none of it (hypothesis found an empty cloud with such fields).
    """
    return (cloud.row_step < cloud.width * cloud.point_step
            or len(cloud.data) < cloud.row_step * cloud.height
            or cloud.width * cloud.height == 0)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_clouds())
def test_fuzz_agrees_with_sensor_msgs_py(case):
    cloud, _ = case
    theirs = oracle_decode(cloud)
    if theirs is None:
        event('sensor_msgs_py refuses')
        return
    try:
        ours, n = read_points(as_flavour(cloud, 'rclpy'))
    except CloudFormatError:
        # It accepted a layout ours refuses: allowed only for the rules it does not check.
        event('only sensor_msgs_py accepts')
        assert unchecked_by_the_oracle(cloud), cloud
        return
    event('both decode')
    assert n == len(theirs)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize('is_bigendian', [False, True])
@pytest.mark.parametrize('datatype', sorted(TYPES))
def test_every_datatype_agrees_with_sensor_msgs_py(datatype, is_bigendian):
    rng = np.random.default_rng(100 + datatype)
    size = TYPES[datatype][1]
    # The ring field sits first in memory but last in the list: read_points_numpy compares
    # every requested field's datatype with the first listed one.
    fields = [Field('x', 3, datatype), Field('y', 3 + size, datatype),
              Field('z', 7 + 2 * size, datatype), Field('intensity', 7 + 3 * size, datatype),
              Field('ring', 0, UINT16)]
    values = {f.name: sample_values(f.datatype, 24, rng) for f in fields}
    for height, width in ((1, 24), (4, 6)):
        cloud = encode(height, width, fields, values, is_bigendian, point_step=7 + 4 * size + 3)
        theirs = oracle_decode(cloud)
        assert theirs is not None
        points, n = read_points(as_flavour(cloud, 'rclpy'))
        assert n == 24
        np.testing.assert_array_equal(points, theirs)
        same = point_cloud2().read_points_numpy(as_flavour(cloud, 'rclpy'),
                                                field_names=list(XYZI))
        with np.errstate(over='ignore'):
            np.testing.assert_array_equal(points, same.astype(np.float32))


def test_clouds_made_by_create_cloud_read_back_their_points():
    pc2 = point_cloud2()
    from std_msgs.msg import Header
    rng = np.random.default_rng(8)
    header = Header(frame_id='lidar')
    xyzi = rng.normal(scale=20.0, size=(50, 4)).astype(np.float32)
    fields = [PointField(name=name, offset=4 * k, datatype=FLOAT32, count=1)
              for k, name in enumerate(XYZI)]
    msg = pc2.create_cloud(header, fields, xyzi)
    points, n = read_points(msg)
    assert n == 50
    np.testing.assert_array_equal(points, xyzi)
    np.testing.assert_array_equal(points, pc2.read_points_numpy(msg))

    xyz = pc2.create_cloud_xyz32(header, xyzi[:, :3].tolist())
    points, _ = read_points(xyz)
    np.testing.assert_array_equal(points, np.hstack([xyzi[:, :3], np.zeros((50, 1))]))

    # Mixed types, a field between ours, a point_step wider than the fields.
    mixed = [PointField(name='intensity', offset=0, datatype=UINT8, count=1),
             PointField(name='ring', offset=2, datatype=UINT16, count=1),
             PointField(name='x', offset=4, datatype=FLOAT64, count=1),
             PointField(name='y', offset=12, datatype=INT16, count=1),
             PointField(name='z', offset=16, datatype=FLOAT32, count=1)]
    rows = [(int(rng.integers(0, 256)), k, float(rng.normal() * 1e3),
             int(rng.integers(-2 ** 15, 2 ** 15)), float(np.float32(rng.normal())))
            for k in range(30)]
    msg = pc2.create_cloud(header, mixed, rows, point_step=28)
    assert msg.point_step == 28
    points, n = read_points(msg)
    expected = np.array([[r[2], r[3], r[4], r[0]] for r in rows]).astype(np.float32)
    assert n == 30
    np.testing.assert_array_equal(points, expected)
    structured = pc2.read_points(msg, field_names=list(XYZI))
    np.testing.assert_array_equal(
        points, np.stack([structured[k].astype(np.float32) for k in XYZI], axis=1))
