"""
PointCloud2 decoding fuzzed: against the reference decoder, and against sensor_msgs_py.

Hypothesis draws layouts, valid and broken alike (JAX_PERCEPTION_FUZZ_EXAMPLES per test, 300
by default); sensor_msgs_py, from ../shared, is a second, independent oracle.
"""

import os
from pathlib import Path
import sys
import tracemalloc

from cloud_reference import (as_flavour, Cloud, encode, Field, FLAVOURS, FLOAT32, FLOAT64, INT16,
                             Invalid, reference_decode, reference_rows, sample_values, TYPES,
                             UINT16, UINT8, XYZI)
from hypothesis import event, given, HealthCheck, settings
from hypothesis import strategies as st
from jax_perception_node.sensors.cloud import CloudFormatError, point_count, read_points
import numpy as np
import pytest
from sensor_msgs.msg import PointField

FUZZ_EXAMPLES = int(os.environ.get('JAX_PERCEPTION_FUZZ_EXAMPLES', '300'))


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
        expected = expected[reference_rows(n, max_points, policy)]
    assert points.dtype == np.float32 and points.shape == expected.shape
    np.testing.assert_array_equal(points, expected)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_clouds(), st.data())
def test_fuzz_rows_read_like_the_reference(case, data):
    # Rows as returns() gives them (ascending), of any integer type, few or most of the
    # slots, through the overflow cut, into a fresh array and into a slice of a buffer.
    cloud, flavour = case
    try:
        full = reference_decode(cloud)
    except Invalid:
        event('rejected')
        return
    n = len(full)
    chosen = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    rows = np.flatnonzero(chosen).astype(data.draw(st.sampled_from(['<i8', '<i4', '>i8', '<u2'])))
    max_points = data.draw(st.one_of(st.none(), st.integers(0, n)))
    policy = data.draw(st.sampled_from(['subsample', 'truncate']))
    event('most slots' if 2 * len(rows) >= n else 'few slots')
    expected = full[rows.astype(np.int64)]
    if max_points is not None:
        expected = expected[reference_rows(len(rows), max_points, policy)]
    msg = as_flavour(cloud, flavour)
    points, count = read_points(msg, max_points, policy, rows=rows)
    assert count == len(rows)
    assert points.dtype == np.float32 and points.shape == expected.shape
    np.testing.assert_array_equal(points, expected)
    out = np.full((len(expected) + 5, 4), -7.0, np.float32)
    read_points(msg, max_points, policy, out=out[3:], rows=rows)
    np.testing.assert_array_equal(out[3:3 + len(expected)], expected)
    np.testing.assert_array_equal(out[:3], -7.0)
    np.testing.assert_array_equal(out[3 + len(expected):], -7.0)


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

    Those are row_step against the data; for a cloud without points, the field list itself
    (a count other than 1, a name listed twice, bytes past point_step): with nothing to read,
    sensor_msgs_py looks at none of it (hypothesis found an empty cloud with such fields); and a
    name listed twice where one has a count above 1, which sensor_msgs_py renames (y_0, y_1)
    before it could clash (hypothesis found y of count 2 beside y of count 1).
    """
    names = [field.name for field in cloud.fields]
    return (cloud.row_step < cloud.width * cloud.point_step
            or len(cloud.data) < cloud.row_step * cloud.height
            or cloud.width * cloud.height == 0
            or any(names.count(f.name) > 1 and f.count > 1 for f in cloud.fields))


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
