"""PointCloud2 decoding against the struct-based reference decoder, for every flavour."""

from dataclasses import replace
import itertools
import sys
import time
import tracemalloc
import warnings

from cloud_reference import (as_flavour, Cloud, encode, Field, FLAVOURS, FLOAT32, FLOAT64, INT16,
                             reference_decode, reference_rows, sample_values, standard_cloud,
                             TYPES, UINT16, UINT32, UINT8, XYZI)
from configs import absolute_imports
from jax_perception_node.sensors.cloud import (CloudFormatError, keep_rows, point_count,
                                               read_points, returns)
import numpy as np
import pytest


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
    # Straight into a bucket-like buffer (issue 19): the same rows, the rest left alone.
    out = np.full((n + 3, 4), -7.0, np.float32)
    written, _ = read_points(as_flavour(cloud, flavour), out=out)
    assert written.base is out
    np.testing.assert_array_equal(out[:n], expected)
    np.testing.assert_array_equal(out[n:], -7.0)


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


@pytest.mark.parametrize('name, datatype',
                         [('signal', UINT16), ('reflectivity', UINT8), ('i', FLOAT32)])
def test_the_intensity_is_the_field_named_by_the_caller(name, datatype):
    # Ouster native: no 'intensity', its 'signal' (u16) or only 'reflectivity' (u8); others 'i'.
    fields = [Field('x', 0, FLOAT32), Field('y', 4, FLOAT32), Field('z', 8, FLOAT32),
              Field(name, 12, datatype), Field('intensity', 16, FLOAT32)]
    values = {'x': range(5), 'y': range(5), 'z': range(5), name: [3, 40, 7, 200, 0],
              'intensity': [9.0] * 5}
    cloud = encode(1, 5, fields, values)
    points, _ = read_points(cloud, intensity_field=name)
    np.testing.assert_array_equal(points[:, 3], [3, 40, 7, 200, 0])
    # The field named 'intensity' is then just another field; the default still reads it.
    np.testing.assert_array_equal(read_points(cloud)[0][:, 3], 9.0)
    # A cloud without the named field reads 0, like one without any intensity.
    np.testing.assert_array_equal(read_points(cloud, intensity_field='ambient')[0][:, 3], 0.0)


@pytest.mark.parametrize('row_step', [4 * 16, 4 * 16 + 12])
def test_returns_are_the_finite_rows_of_an_organized_or_non_dense_cloud(row_step):
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate(XYZI)]
    x = [float(i) for i in range(12)]
    for gap in (1, 4, 5, 11):
        x[gap] = float('nan')                 # no-return slots
    values = {'x': x, 'y': range(12), 'z': range(12), 'intensity': range(12)}
    cloud = encode(3, 4, fields, values, row_step=row_step)
    rows = returns(cloud)
    np.testing.assert_array_equal(rows, [0, 2, 3, 6, 7, 8, 9, 10])
    # Read through the rows: the returns only, in order; a cut applies to them, not the slots.
    points, n = read_points(cloud, rows=rows)
    assert n == 8
    np.testing.assert_array_equal(points[:, 1], rows)
    points, n = read_points(cloud, max_points=4, rows=rows)
    np.testing.assert_array_equal(points[:, 1], rows[keep_rows(8, 4, 'subsample')])
    # Every x finite, or a dense unorganized cloud: no row list (one run, no index).
    values['x'] = range(12)
    assert returns(encode(3, 4, fields, values, row_step=row_step)) is None
    dense = replace(encode(1, 12, fields, {**values, 'x': x}), is_dense=True)
    assert returns(dense) is None


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


def test_signalling_nan_and_overflow_decode_quietly():
    # float64 -> float32: a signalling NaN stays NaN, 1e300 becomes Inf, and no warning.
    fields = [Field(name, 8 * k, FLOAT64) for k, name in enumerate(XYZI)]
    cloud = encode(1, 2, fields, {name: [1e300, 2.0] for name in XYZI})
    data = bytearray(cloud.data)
    data[8:16] = (0x7FF0000000000001).to_bytes(8, 'little')
    cloud = replace(cloud, data=bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        points, _ = read_points(cloud)
        written, _ = read_points(cloud, out=np.zeros((2, 4), np.float32))
    for decoded in (points, written):
        np.testing.assert_array_equal(decoded, [[np.inf, np.nan, np.inf, np.inf], [2, 2, 2, 2]])


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


@pytest.mark.parametrize('capacity', [None, 7])
@pytest.mark.parametrize('height, row_pad', [(1, 0), (4, 0), (4, 5)])
@pytest.mark.parametrize('start, point_step, intensity', [
    (2, 14, None), (0, 16, (12, UINT8)), (4, 23, (0, UINT16)), (0, 20, (16, FLOAT32)),
    (8, 28, (0, FLOAT64)), (1, 17, (13, FLOAT32)), (4, 16, (0, UINT16))])
@pytest.mark.parametrize('is_bigendian', [False, True])
def test_float32_xyz_runs_with_any_intensity(is_bigendian, start, point_step, intensity, height,
                                             row_pad, capacity):
    # x, y, z float32 side by side are copied as one item of 16 bytes (12 when the point
    # ends first), then the intensity is written over what came with them.
    rng = np.random.default_rng(start + point_step)
    width = 24 // height
    fields = [Field(name, start + 4 * k, FLOAT32) for k, name in enumerate('xyz')]
    if intensity is not None:
        fields.append(Field('intensity', *intensity))
    values = {f.name: sample_values(f.datatype, 24, rng) for f in fields}
    values['x'][5] = values['x'][17] = float('nan')         # no-returns
    cloud = encode(height, width, fields, values, is_bigendian, point_step=point_step,
                   row_step=width * point_step + row_pad)
    rows = returns(cloud)
    full = reference_decode(cloud)[rows]
    expected = full if capacity is None else full[reference_rows(22, capacity, 'subsample')]
    for flavour in ('bytes', 'numpy'):
        points, n = read_points(as_flavour(cloud, flavour), capacity, rows=rows)
        assert n == 22
        np.testing.assert_array_equal(points, expected)
        out = np.full((30, 4), -7.0, np.float32)
        read_points(as_flavour(cloud, flavour), capacity, out=out, rows=rows)
        np.testing.assert_array_equal(out[:len(expected)], expected)
        np.testing.assert_array_equal(out[len(expected):], -7.0)


# -- rows ------------------------------------------------------------------------------------

def _row_clouds():
    """40 slots, 10 no-returns: contiguous items, misaligned ones, a cast besides, casts only."""
    rng = np.random.default_rng(12)
    xyz = [Field(name, 4 * k, FLOAT32) for k, name in enumerate('xyz')]
    clouds = {}
    for name, fields, step in (
            ('plain', xyz + [Field('intensity', 12, FLOAT32)], 16),
            ('packed 22', xyz + [Field('intensity', 12, FLOAT32)], 22),
            ('intensity apart', xyz + [Field('intensity', 16, UINT16)], 32),
            ('float64', [Field(n, 8 * k, FLOAT64) for k, n in enumerate('xyz')]
             + [Field('intensity', 24, UINT8)], 25)):
        values = {f.name: sample_values(f.datatype, 40, rng) for f in fields}
        for slot in rng.choice(40, 10, replace=False):
            values['x'][slot] = float('nan')
        for height, pad in ((1, 0), (4, 3)):
            clouds[f'{name}, height {height}'] = encode(height, 40 // height, fields, values,
                                                        None, step, 40 // height * step + pad)
    return clouds


@pytest.mark.parametrize('every', [1, 3], ids=['returns', 'a third of them'])
@pytest.mark.parametrize('layout', sorted(_row_clouds()))
def test_rows_of_any_integer_type_read_alike(layout, every):
    # Most slots (converted whole, then taken) or few (gathered field by field), as int64 or
    # another integer array, into a fresh array or a slice of a bucket's buffer.
    cloud = _row_clouds()[layout]
    rows, full = returns(cloud)[::every], reference_decode(cloud)
    for dtype, capacity in itertools.product(('<i8', '<i4', '>i8', '<u2', '<u8'), (40, 4)):
        expected = full[rows][reference_rows(len(rows), capacity, 'subsample')]
        points, n = read_points(cloud, capacity, rows=rows.astype(dtype))
        assert n == len(rows) and np.array_equal(points, expected, equal_nan=True)
        out = np.full((len(expected) + 5, 4), -7.0, np.float32)
        written, _ = read_points(cloud, capacity, out=out[2:], rows=rows.astype(dtype))
        assert written.base is out
        np.testing.assert_array_equal(out[2:2 + len(expected)], expected)
        np.testing.assert_array_equal(np.delete(out, np.s_[2:2 + len(expected)], 0), -7.0)
    for rows in (np.array([0, 40]), np.arange(1, 41), np.array([-41, 2]), np.array([-1]),
                 np.array([-40, -2, 5]), np.arange(-40, 0)):
        for out in (None, np.zeros((40, 4), np.float32)):
            if rows.max() >= 40 or rows.min() < -40:     # rows past the cloud raise, as before
                pytest.raises(IndexError, read_points, cloud, rows=rows, out=out)
            else:    # and a negative row counts from its end, NumPy's meaning
                points, _ = read_points(cloud, rows=rows, out=out)
                np.testing.assert_array_equal(points, full[rows])


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
        expected = full if capacity is None else full[reference_rows(n, capacity, policy)]
        assert points.shape == expected.shape
        np.testing.assert_array_equal(points, expected)
        out = np.full((len(expected) + 2, 4), -7.0, np.float32)
        read_points(as_flavour(cloud, 'numpy'), capacity, policy, out=out)
        np.testing.assert_array_equal(out[:len(expected)], expected)
        np.testing.assert_array_equal(out[len(expected):], -7.0)


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

def test_cloud_modules_import_no_ros():
    assert absolute_imports('cloud') <= {'numpy'}
    assert absolute_imports('cloud_layout') <= {'collections', 'contextlib', 'functools', 'numpy'}
