"""Real drivers' PointCloud2 layouts: the same points and times decoded from every one of them."""

from fractions import Fraction

from cloud_reference import encode, Field, FLOAT32, reference_decode, reference_rows, TYPES
from driver_layouts import (DRIVER_LAYOUTS, driver_message, DriverLayout, layout_named,
                            no_return_slots, PLAIN, same_points, STAMP_NS)
from jax_perception_node.sensors.cloud import (CloudFormatError, read_points, read_times,
                                               returns, TIME_FIELDS, times_near_stamp)
from jax_perception_node.tools.bench.decode import decode_rows, main
import numpy as np
import pytest

N = 800
UNITS = {'s': 1, 'ms': 10 ** 3, 'us': 10 ** 6, 'ns': 10 ** 9}     # units per second
NUMPY_TYPES = {1: 'i1', 2: 'u1', 3: 'i2', 4: 'u2', 5: 'i4', 6: 'u4', 7: 'f4', 8: 'f8'}


def decode(msg, layout: DriverLayout, **kwargs) -> tuple[np.ndarray, int]:
    """Decode as a bucket does: the returns first, then the points, intensity named."""
    field = layout.intensity_field or 'intensity'
    return read_points(msg, intensity_field=field, rows=returns(msg, field), **kwargs)


def expected_rows(points: np.ndarray, layout: DriverLayout) -> np.ndarray:
    """Return the plain layout's rows: the points, the intensity 0 where the layout has none."""
    want = points.copy()
    if layout.intensity_field is None:
        want[:, 3] = 0.0
    return want


def organized(layout: DriverLayout, points, times_ns=None, share=0.3, rings=16, flavour='rosbags'):
    """Return the message; an organized one over ``rings`` rows, a ``share`` of no-returns."""
    if not layout.organized:
        return driver_message(layout, points, times_ns, flavour)
    slots = rings * -(-round(len(points) / (1 - share)) // rings)
    valid = no_return_slots(slots, 1 - len(points) / slots, seed=len(points))
    return driver_message(layout, points, times_ns, flavour, valid, rings)


def stored_times(msg, name: str) -> np.ndarray:
    """Return the time field's values as stored, slot by slot, read with NumPy."""
    field, = (f for f in msg.fields if f.name == name)
    dtype = np.dtype(('>' if msg.is_bigendian else '<') + NUMPY_TYPES[field.datatype])
    data = np.frombuffer(bytes(msg.data), np.uint8)
    return np.ndarray((msg.height, msg.width), dtype, buffer=data, offset=field.offset,
                      strides=(msg.row_step, msg.point_step)).reshape(-1)


def reference_seconds(values: np.ndarray, unit: str, reference: str, stamp_ns: int):
    """Exact seconds after the stamp (Fraction), rounded once to float64, then to float32."""
    stamp = Fraction(stamp_ns, 10 ** 9) if reference == 'absolute' else 0
    return np.float32([float(Fraction(v.item()) / UNITS[unit] - stamp) for v in values])


def test_seventeen_layouts_each_named_with_its_driver():
    assert len(DRIVER_LAYOUTS) == 17
    assert len({layout.name for layout in DRIVER_LAYOUTS}) == 17
    for layout in DRIVER_LAYOUTS:
        assert layout.driver
        names = [f[0] for f in layout.fields]
        assert len(set(names)) == len(names) and {'x', 'y', 'z'} <= set(names)
        assert all(offset + TYPES[datatype][1] <= layout.point_step
                   for _, offset, datatype in layout.fields)
        assert layout.intensity_field in names + [None]
        assert layout.time is None or layout.time[0] in names
    # What the issue names: the steps, the types and the orders real drivers publish.
    steps = {layout.name: layout.point_step for layout in DRIVER_LAYOUTS}
    assert (steps['velodyne_xyzirt'], steps['velodyne_pcl_xyzirt'], steps['ouster_original'],
            steps['hesai_xyzirt'], steps['livox_pointxyzrtlt'], steps['autoware_xyzirc']) == (
        22, 32, 48, 26, 26, 16)
    assert {'signal', 'reflectivity', 'i'} <= {layout.intensity_field for layout in DRIVER_LAYOUTS}
    assert any(layout.is_bigendian for layout in DRIVER_LAYOUTS)


@pytest.mark.parametrize('layout', DRIVER_LAYOUTS, ids=lambda layout: layout.name)
def test_every_layout_decodes_to_the_plain_layouts_rows(layout):
    points, times_ns = same_points(N, 1)
    plain, n = decode(driver_message(PLAIN, expected_rows(points, layout)), PLAIN)
    msg = organized(layout, points, times_ns)
    ours, count = decode(msg, layout)
    assert count == n == N
    np.testing.assert_array_equal(ours, plain)
    np.testing.assert_array_equal(ours, expected_rows(points, layout))
    # Into a bucket-like buffer, through the overflow cut: the plain layout's selection.
    out = np.full((N, 4), -7.0, np.float32)
    written, count = decode(msg, layout, max_points=300, out=out)
    assert count == N and written.base is out
    np.testing.assert_array_equal(out[:300], plain[reference_rows(N, 300, 'subsample')])
    np.testing.assert_array_equal(out[300:], -7.0)


@pytest.mark.parametrize('name', ['ouster_legacy', 'ouster_rng19_rfl8_sig16_nir16',
                                  'ouster_rng15_rfl8_nir8', 'sick_scan_xd'])
def test_intensity_under_another_name_needs_naming(name):
    layout = layout_named(name)
    points, _ = same_points(N, 2)
    msg = organized(layout, points, flavour='rclpy')
    np.testing.assert_array_equal(decode(msg, layout)[0][:, 3], points[:, 3])
    rows = returns(msg)
    np.testing.assert_array_equal(read_points(msg, rows=rows)[0][:, 3], 0.0)


def test_organized_ouster_128_by_2048_keeps_every_return():
    layout = layout_named('ouster_original')
    valid = no_return_slots(128 * 2048, 0.4, seed=3)
    points, _ = same_points(int(valid.sum()), 3)
    msg = driver_message(layout, points, valid=valid, height=128)
    rows = returns(msg)
    assert len(rows) == len(points) == 157_286
    # The largest bucket holds the returns, not the 262 144 slots: nothing is subsampled.
    capacity = 163_840
    out = np.full((capacity, 4), -7.0, np.float32)
    _, count = read_points(msg, capacity, 'subsample', out=out, rows=rows)
    assert count == len(points)
    np.testing.assert_array_equal(out[:count], points)
    np.testing.assert_array_equal(out[count:], -7.0)


@pytest.mark.parametrize('share', [0.3, 0.7], ids=['most slots return', 'few return'])
@pytest.mark.parametrize('layout', [layout for layout in DRIVER_LAYOUTS
                                    if layout.organized and layout.time],
                         ids=lambda layout: layout.name)
def test_organized_returns_into_a_slice_of_a_bucket(layout, share):
    # As a set of LiDARs is decoded: each cloud from its row of the bucket on, points and
    # times row for row, the rows before and after untouched.
    points, times_ns = same_points(N, 10)
    msg = organized(layout, points, times_ns, share)
    field = layout.intensity_field or 'intensity'
    rows = returns(msg, field)
    assert len(rows) == N
    buffer = np.full((N + 40, 4), -7.0, np.float32)
    times = np.full(N + 40, 7.0, np.float32)
    for start, capacity in ((5, None), (17, 300)):
        buffer[:], times[:] = -7.0, 7.0
        kept = N if capacity is None else capacity
        chosen = reference_rows(N, kept, 'subsample')
        read_points(msg, capacity, out=buffer[start:], intensity_field=field, rows=rows)
        np.testing.assert_array_equal(buffer[start:start + kept],
                                      expected_rows(points, layout)[chosen])
        assert read_times(msg, *layout.time, max_points=capacity, out=times[start:], rows=rows)
        want = reference_seconds(stored_times(msg, layout.time[0])[rows], *layout.time[1:],
                                 STAMP_NS)
        np.testing.assert_array_equal(times[start:start + kept], want[chosen])
        for array, fill in ((buffer, -7.0), (times, 7.0)):
            np.testing.assert_array_equal(array[:start], fill)
            np.testing.assert_array_equal(array[start + kept:], fill)


@pytest.mark.parametrize('layout', [layout for layout in DRIVER_LAYOUTS if layout.time],
                         ids=lambda layout: layout.name)
def test_times_are_seconds_after_the_stamp_row_for_row(layout):
    points, times_ns = same_points(N, 4)
    msg = organized(layout, points, times_ns)
    rows = returns(msg, layout.intensity_field or 'intensity')
    values = stored_times(msg, layout.time[0])
    if rows is not None:
        values = values[rows]
    want = reference_seconds(values, *layout.time[1:], STAMP_NS)
    out = np.full(N + 2, 7.0, np.float32)
    assert read_times(msg, *layout.time, out=out, rows=rows)
    np.testing.assert_array_equal(out[:N], want)
    np.testing.assert_array_equal(out[N:], 7.0)
    # Sub-microsecond whatever the convention: epoch times of 1.7e9 s or 1.7e18 ns included.
    assert np.abs(out[:N].astype(np.float64) - times_ns / 1e9).max() < 1e-6
    # The overflow cut keeps the rows read_points keeps, in the same order.
    kept = reference_rows(N, 250, 'subsample')
    out[:] = 7.0
    assert read_times(msg, *layout.time, max_points=250, out=out, rows=rows)
    np.testing.assert_array_equal(out[:250], want[kept])
    np.testing.assert_array_equal(out[250:], 7.0)
    field = layout.intensity_field or 'intensity'
    np.testing.assert_array_equal(read_points(msg, 250, intensity_field=field, rows=rows)[0],
                                  expected_rows(points, layout)[kept])


@pytest.mark.parametrize('is_bigendian', [False, True])
@pytest.mark.parametrize('datatype', sorted(NUMPY_TYPES))
def test_times_of_any_datatype_and_byte_order(datatype, is_bigendian):
    layout = DriverLayout('custom', 'test', PLAIN.fields + (('when', 16, datatype),),
                          16 + TYPES[datatype][1], time=('when', 'ms', 'stamp'),
                          is_bigendian=is_bigendian)
    points, _ = same_points(100, 5)
    times_ms = np.arange(100)
    msg = driver_message(layout, points, times_ms * 10 ** 6, 'rclpy')
    out = np.empty(100, np.float32)
    assert read_times(msg, 'when', 'ms', 'stamp', out=out)
    np.testing.assert_array_equal(out, np.float32(times_ms / 1e3))


def test_absolute_integer_times_subtract_in_int64():
    # Whole seconds since the epoch in a uint32, the stamp's nanoseconds subtracted after.
    layout = DriverLayout('custom', 'test', PLAIN.fields + (('sec', 16, 6),), 20,
                          time=('sec', 's', 'absolute'))
    points, _ = same_points(4, 6)
    stamp_ns = 1_700_000_000 * 10 ** 9 + 250_000_000
    msg = driver_message(layout, points, np.array([0, 1, 2, 3]) * 10 ** 9 - 250_000_000,
                         stamp_ns=stamp_ns)
    out = np.empty(4, np.float32)
    assert read_times(msg, 'sec', 's', 'absolute', out=out)
    np.testing.assert_array_equal(out, np.float32([-0.25, 0.75, 1.75, 2.75]))


def test_times_through_padded_rows_and_non_finite_values():
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate('x y z time'.split())]
    x = [0.0, float('nan'), 2.0, 3.0, 4.0, float('nan')]
    when = [0.5, 9.0, float('nan'), 0.25, float('inf'), 9.0]
    cloud = encode(2, 3, fields, {'x': x, 'y': x, 'z': x, 'time': when}, row_step=3 * 16 + 5)
    rows = returns(cloud)
    np.testing.assert_array_equal(rows, [0, 2, 3, 4])
    out = np.zeros(4, np.float32)
    assert read_times(cloud, 'time', 's', 'stamp', out=out, rows=rows)
    np.testing.assert_array_equal(out, [0.5, np.nan, 0.25, np.inf])
    np.testing.assert_array_equal(read_points(cloud, rows=rows)[0], reference_decode(cloud)[rows])


def test_a_cloud_without_the_time_field_leaves_out_alone():
    points, _ = same_points(10, 7)
    msg = driver_message(layout_named('pcl_xyzi'), points)
    out = np.full(10, 7.0, np.float32)
    assert not read_times(msg, 't', 'ns', 'stamp', out=out)
    assert (out == 7.0).all()
    timed = driver_message(layout_named('ouster_original'), points, np.arange(10))
    assert read_times(timed, 't', 'ns', 'stamp') and not read_times(msg, 't', 'ns', 'stamp')


TIME_FIELD_FAULTS = {
    'count 2': ({'count': 2}, 'field "t": count 2'),
    'past point_step': ({'offset': 46}, 'field "t": bytes 46..50 extend past point_step 48'),
    'unknown datatype': ({'datatype': 9}, 'field "t": unknown datatype 9'),
}


@pytest.mark.parametrize('fault', sorted(TIME_FIELD_FAULTS))
def test_a_bad_time_field_is_refused_by_name(fault):
    points, _ = same_points(10, 8)
    msg = driver_message(layout_named('ouster_original'), points, np.arange(10))
    change, message = TIME_FIELD_FAULTS[fault]
    for field in msg.fields:
        if field.name == 't':
            for key, value in change.items():
                setattr(field, key, value)
    out = np.full(10, 7.0, np.float32)
    with pytest.raises(CloudFormatError, match=message):
        read_times(msg, 't', 'ns', 'stamp', out=out)
    assert (out == 7.0).all()
    read_points(msg)     # a field the points do not read: no business of theirs


def test_bad_arguments_are_value_errors():
    points, _ = same_points(10, 9)
    msg = driver_message(layout_named('ouster_original'), points, np.arange(10))
    for kwargs, message in (({'unit': 'min'}, 'unit'), ({'reference': 'gps'}, 'reference'),
                            ({'policy': 'drop'}, 'policy'), ({'max_points': -1}, 'max_points'),
                            ({'out': np.zeros(9, np.float32)}, 'out has 9 rows'),
                            ({'out': np.zeros(10, np.float64)}, 'out must be')):
        args = {'unit': 'ns', 'reference': 'stamp', **kwargs}
        with pytest.raises(ValueError, match=message):
            read_times(msg, 't', **args)


def test_the_drivers_time_conventions():
    assert TIME_FIELDS == {
        'velodyne': ('time', 's', 'stamp'), 'ouster': ('t', 'ns', 'stamp'),
        'hesai': ('timestamp', 's', 'absolute'), 'robosense': ('timestamp', 's', 'absolute'),
        'livox': ('timestamp', 'ns', 'absolute'),
        'autoware_xyzircaedt': ('time_stamp', 'ns', 'stamp')}
    # The layouts of the test material follow them.
    for layout in DRIVER_LAYOUTS:
        driver = next((d for d in TIME_FIELDS if layout.name.startswith(d)), None)
        if layout.time is not None:
            assert layout.time == TIME_FIELDS[driver], layout.name


def test_decode_bench_rows():
    rows = decode_rows(points=600, rounds=2, inner=1, rings=8)
    assert [row['layout'] for row in rows] == (
        ['plain', 'plain_organized'] + [layout.name for layout in DRIVER_LAYOUTS])
    assert rows[0]['ratio'] == 1.0 and rows[1]['ratio_organized'] == 1.0
    for row in rows:
        assert row['decode_ms'] > 0 and row['ratio'] > 0 and row['points'] == 600
        assert (row['ratio_organized'] is None) == (row['slots'] == 600)


def test_decode_bench_prints_its_rows(capsys):
    rows = main(['--points', '300', '--rounds', '1', '--inner', '1', '--rings', '4'])
    printed = capsys.readouterr().out
    assert len(rows) == 19
    for row in rows:
        assert f'| {row["layout"]} | {row["point_step"]} | {row["slots"]} |' in printed
    assert 'slowest unorganized' in printed and 'slowest organized' in printed


def test_absolute_times_in_a_float32_are_no_sweep():
    # Near 1.7e9 s a float32 steps by 128 s: every point's time reads the same, and about one
    # stamp in 64 lands within a second of it. Such times are never taken for a sweep's.
    layout = DriverLayout('custom', 'test', PLAIN.fields + (('t', 16, 7),), 20,
                          time=('t', 's', 'absolute'))
    points, _ = same_points(4, 6)
    stamp_ns = 1_700_000_000 * 10 ** 9
    msg = driver_message(layout, points, np.array([0, 1, 2, 3]) * 10 ** 7, stamp_ns=stamp_ns)
    out = np.zeros(4, np.float32)
    assert read_times(msg, 't', 's', 'absolute', out=out)
    assert np.isnan(out).all() and not times_near_stamp(out)


@pytest.mark.parametrize('rows, columns', [(16, 1024), (64, 1024), (128, 2048), (64, 512)])
def test_an_ouster_scans_times_are_a_sweeps_whatever_its_beams(rows, columns):
    """
    ouster-ros writes a scan row by row (a beam each), t the column's time from the scan start.

    A sampling stride of whole rows read column 0 only, t = 0 everywhere: 64 and 128 beams
    were taken as a field left at 0 and never deskewed (found by an independent review).
    """
    t = np.tile(np.arange(columns, dtype=np.float32) * np.float32(0.1 / columns), rows)
    assert times_near_stamp(t)
    assert not times_near_stamp(np.zeros_like(t))
