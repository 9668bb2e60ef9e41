"""
Part 'decode': PointCloud2 decode of the real drivers' layouts against the plain layout.

``DRIVER_LAYOUTS`` are the point layouts that LiDAR drivers publish, written from the drivers'
sources (field names, PointField datatypes, offsets, point_step, organized or not, the per-point
time's convention); :func:`driver_cloud` builds any of them from the same points through the
one PointCloud2 builder (``tools/cloud_messages.py``). :func:`decode_rows` times
``cloud.returns`` + ``cloud.read_points`` into a preallocated buffer, as a bucket decode does,
for each layout beside the plain one (x, y, z, intensity float32, step 16) in one run.
``python -m jax_perception_node.tools.bench.decode`` prints those rows as a table.
"""

import argparse
from dataclasses import dataclass
import time

from jax_perception_node.sensors.cloud import read_points, returns, UNITS_PER_SECOND
from jax_perception_node.tools.cloud_messages import point_cloud
import numpy as np

INT8, UINT8, INT16, UINT16, INT32, UINT32, FLOAT32, FLOAT64 = range(1, 9)
_TYPE_CHARS = {INT8: 'i1', UINT8: 'u1', INT16: 'i2', UINT16: 'u2', INT32: 'i4', UINT32: 'u4',
               FLOAT32: 'f4', FLOAT64: 'f8'}
_NS_PER_S = 10 ** 9


@dataclass(frozen=True)
class DriverLayout:
    """One driver's PointCloud2 point layout."""

    name: str
    driver: str                           # who publishes it (package, point type)
    fields: tuple                         # (name, offset, PointField datatype) per field
    point_step: int                       # bytes per point
    intensity_field: str | None = 'intensity'   # the field read as intensity; None: none
    time: tuple | None = None             # (field, unit, reference), as cloud.TIME_FIELDS
    organized: bool = False               # height = rings; x, y, z NaN in no-return slots
    is_bigendian: bool = False


def _xyz(*rest) -> tuple:
    """x, y, z float32 at 0, 4, 8, then ``rest``."""
    return (('x', 0, FLOAT32), ('y', 4, FLOAT32), ('z', 8, FLOAT32)) + rest


VELODYNE = _xyz(('intensity', 12, FLOAT32), ('ring', 16, UINT16), ('time', 18, FLOAT32))
# PCL_ADD_POINT4D (x, y, z, pad), then 16-byte aligned structs (EIGEN_ALIGN16).
OUSTER_ORIGINAL = _xyz(('intensity', 16, FLOAT32), ('t', 20, UINT32),
                       ('reflectivity', 24, UINT16), ('ring', 26, UINT16),
                       ('ambient', 28, UINT16), ('range', 32, UINT32))
# PointCloud2Modifier / addPointField layouts: packed, no alignment.
RING_TIMESTAMP = _xyz(('intensity', 12, FLOAT32), ('ring', 16, UINT16),
                      ('timestamp', 18, FLOAT64))
AUTOWARE_XYZIRC = _xyz(('intensity', 12, UINT8), ('return_type', 13, UINT8),
                       ('channel', 14, UINT16))

PLAIN = DriverLayout('plain', "x, y, z, intensity float32 (the node's own, the sample drive)",
                     _xyz(('intensity', 12, FLOAT32)), 16)
PLAIN_ORGANIZED = DriverLayout('plain_organized', 'the plain layout, organized with no-returns',
                               PLAIN.fields, 16, organized=True)
DRIVER_LAYOUTS: tuple[DriverLayout, ...] = (
    DriverLayout('velodyne_xyzirt', 'velodyne_pointcloud PointcloudXYZIRT (ROS 2), packed',
                 VELODYNE, 22, time=('time', 's', 'stamp')),
    DriverLayout('velodyne_xyzirt_organized', 'velodyne_pointcloud, organize_cloud: true',
                 VELODYNE, 22, time=('time', 's', 'stamp'), organized=True),
    DriverLayout('velodyne_pcl_xyzirt', 'velodyne_pcl::PointXYZIRT through pcl::toROSMsg',
                 _xyz(('intensity', 16, FLOAT32), ('ring', 20, UINT16), ('time', 24, FLOAT32)),
                 32, time=('time', 's', 'stamp')),
    DriverLayout('velodyne_xyzirt_bigendian', 'velodyne_pointcloud XYZIRT, big-endian host',
                 VELODYNE, 22, time=('time', 's', 'stamp'), is_bigendian=True),
    DriverLayout('ouster_original', 'ouster-ros point_type original (ouster_ros::Point)',
                 OUSTER_ORIGINAL, 48, time=('t', 'ns', 'stamp'), organized=True),
    DriverLayout('ouster_legacy', 'ouster-ros native, LEGACY profile (Point_LEGACY)',
                 _xyz(('t', 16, UINT32), ('ring', 20, UINT16), ('range', 24, UINT32),
                      ('signal', 28, UINT32), ('reflectivity', 32, UINT32),
                      ('near_ir', 36, UINT32)),
                 48, 'signal', ('t', 'ns', 'stamp'), organized=True),
    DriverLayout('ouster_rng19_rfl8_sig16_nir16', 'ouster-ros native, RNG19_RFL8_SIG16_NIR16',
                 _xyz(('t', 16, UINT32), ('ring', 20, UINT16), ('range', 24, UINT32),
                      ('signal', 28, UINT16), ('reflectivity', 30, UINT8),
                      ('near_ir', 32, UINT16)),
                 48, 'signal', ('t', 'ns', 'stamp'), organized=True),
    DriverLayout('ouster_rng15_rfl8_nir8', 'ouster-ros native, RNG15_RFL8_NIR8 (no signal)',
                 _xyz(('t', 16, UINT32), ('ring', 20, UINT16), ('range', 24, UINT32),
                      ('reflectivity', 28, UINT8), ('near_ir', 29, UINT8)),
                 32, 'reflectivity', ('t', 'ns', 'stamp'), organized=True),
    DriverLayout('hesai_xyzirt', 'HesaiLidar_ROS_2.0 PointXYZIT', RING_TIMESTAMP, 26,
                 time=('timestamp', 's', 'absolute')),
    DriverLayout('robosense_xyzirt', 'rslidar_sdk XYZIRT, dense_points: false (organized)',
                 RING_TIMESTAMP, 26, time=('timestamp', 's', 'absolute'), organized=True),
    DriverLayout('livox_pointxyzrtlt', 'livox_ros_driver2, xfer_format 0 (PointXyzlt)',
                 _xyz(('intensity', 12, FLOAT32), ('tag', 16, UINT8), ('line', 17, UINT8),
                      ('timestamp', 18, FLOAT64)),
                 26, time=('timestamp', 'ns', 'absolute')),
    DriverLayout('autoware_xyzirc', 'autoware_point_types PointXYZIRC (uint8 intensity)',
                 AUTOWARE_XYZIRC, 16),
    DriverLayout('autoware_xyzircaedt', 'autoware_point_types PointXYZIRCAEDT',
                 AUTOWARE_XYZIRC + (('azimuth', 16, FLOAT32), ('elevation', 20, FLOAT32),
                                    ('distance', 24, FLOAT32), ('time_stamp', 28, UINT32)),
                 32, time=('time_stamp', 'ns', 'stamp')),
    DriverLayout('pcl_xyzi', 'pcl::PointXYZI through pcl_conversions (filters, LIO-SAM)',
                 _xyz(('intensity', 16, FLOAT32)), 32),
    DriverLayout('pcl_xyz', 'pcl::PointXYZ through pcl_conversions (no intensity)', _xyz(), 16,
                 None),
    DriverLayout('sick_scan_xd', 'sick_scan_xd multiScan/picoScan, intensity named i',
                 _xyz(('i', 12, FLOAT32), ('range', 16, FLOAT32), ('azimuth', 20, FLOAT32),
                      ('elevation', 24, FLOAT32), ('layer', 28, INT8), ('echo', 29, INT8),
                      ('reflector', 30, INT8)),
                 31, 'i'),
    DriverLayout('float64_xyz', 'float64 x, y, z (sensor_msgs_py.create_cloud, simulators)',
                 (('x', 0, FLOAT64), ('y', 8, FLOAT64), ('z', 16, FLOAT64),
                  ('intensity', 24, FLOAT32)), 28),
)


def layout_bytes(layout: DriverLayout, points: np.ndarray, times_ns: np.ndarray | None = None,
                 stamp_ns: int = 0, valid: np.ndarray | None = None) -> np.ndarray:
    """
    Pack points into the layout's bytes: uint8[slots * point_step].

    ``points`` float32[N, 4] (x, y, z, intensity; the intensity cast to the intensity field's
    type), ``times_ns`` int64[N] each point's time after ``stamp_ns`` (written in the layout's
    convention), ``valid`` bool[slots] the slots holding a return (N of them; the others get
    NaN x, y, z), None: every slot. Bytes no field covers are 0xA5, as padding may be anything.
    """
    order = '>' if layout.is_bigendian else '<'
    dtype = np.dtype({'names': [f[0] for f in layout.fields],
                      'formats': [order + _TYPE_CHARS[f[2]] for f in layout.fields],
                      'offsets': [f[1] for f in layout.fields], 'itemsize': layout.point_step})
    slots = len(points) if valid is None else len(valid)
    data = np.full(slots * layout.point_step, 0xA5, np.uint8)
    records = data.view(dtype)
    taken = slice(None) if valid is None else valid
    for name in dtype.names:
        records[name] = 0
    for k, name in enumerate('xyz'):
        records[name] = np.nan
        records[name][taken] = points[:, k]
    if layout.intensity_field is not None:
        records[layout.intensity_field][taken] = points[:, 3]
    if layout.time is not None and times_ns is not None:
        records[layout.time[0]][taken] = _time_values(layout.time, times_ns, stamp_ns)
    return data


def _time_values(time_field: tuple, times_ns: np.ndarray, stamp_ns: int) -> np.ndarray:
    """Per-point times in the layout's convention: offsets or epoch times, in its unit."""
    _, unit, reference = time_field
    total = np.asarray(times_ns, np.int64) + (stamp_ns if reference == 'absolute' else 0)
    per_s = UNITS_PER_SECOND[unit]
    return total if per_s == _NS_PER_S else total / (_NS_PER_S // per_s)


def driver_cloud(types, layout: DriverLayout, points: np.ndarray,
                 times_ns: np.ndarray | None = None, stamp_ns: int = 0,
                 valid: np.ndarray | None = None, height: int = 1):
    """
    Build the PointCloud2 of ``types`` (rosbags' or rclpy's) holding ``points`` in ``layout``.

    Organized clouds have ``height`` rows of ``len(valid) // height`` slots and are not
    is_dense; the others are one dense row when ``valid`` is None.
    """
    data = layout_bytes(layout, points, times_ns, stamp_ns, valid)
    slots = len(data) // layout.point_step
    return point_cloud(types, data, layout.fields, slots // height, layout.point_step,
                       stamp_ns=stamp_ns, height=height, is_bigendian=layout.is_bigendian,
                       is_dense=valid is None)


def decode_rows(points: int = 100_000, rounds: int = 15, inner: int = 5,
                no_returns: float = 0.25, rings: int = 128, seed: int = 0) -> list[dict]:
    """
    Time each layout's decode beside the plain layout's, alternated in one run.

    Every layout carries the same ``points`` returns; an organized one has ``rings`` rows and
    a share ``no_returns`` of NaN slots besides. A decode is what a bucket decode does without
    the bucket: ``returns`` (a pass over x of organized or non-dense clouds), then
    ``read_points`` into one preallocated float32[points, 4]. Each round times every layout
    once (``inner`` decodes, in an order rotated each round); a ratio is the median over rounds
    of the layout's time over the reference's in the same round.

    Returns one row per layout, ``plain`` and ``plain_organized`` first: ``layout``,
    ``driver``, ``point_step``, ``slots``, ``points``, ``bytes`` (of the message's data),
    ``decode_ms`` (median per decode), ``ratio`` (to ``plain``: the issue's target, <= 2) and
    ``ratio_organized`` (organized layouts: to ``plain_organized``, the same slots and
    no-returns, so the cost of the layout apart from that of skipping no-return slots).
    """
    from jax_perception_node.bags.bagio import TYPESTORE
    rng = np.random.default_rng(seed)
    xyzi = np.column_stack([rng.normal(0.0, 20.0, (points, 3)),
                            rng.integers(0, 256, points)]).astype(np.float32)
    times_ns = rng.integers(0, 100_000_000, points)
    layouts = (PLAIN, PLAIN_ORGANIZED) + DRIVER_LAYOUTS
    slots = rings * -(-round(points / (1.0 - no_returns)) // rings)
    valid = np.zeros(slots, bool)
    valid[np.sort(rng.choice(slots, points, replace=False))] = True
    messages = [driver_cloud(TYPESTORE.types, layout, xyzi, times_ns, 1_700_000_000 * _NS_PER_S,
                             valid if layout.organized else None,
                             rings if layout.organized else 1) for layout in layouts]
    samples = _alternated(layouts, messages, points, rounds, inner)
    ratios = np.median(samples / samples[0], axis=1)
    organized = np.median(samples / samples[1], axis=1)
    return [{'layout': layout.name, 'driver': layout.driver, 'point_step': layout.point_step,
             'slots': int(msg.height * msg.width), 'points': points, 'bytes': len(msg.data),
             'decode_ms': round(float(np.median(samples[k])) * 1e3, 4),
             'ratio': round(float(ratios[k]), 3),
             'ratio_organized': round(float(organized[k]), 3) if layout.organized else None}
            for k, (layout, msg) in enumerate(zip(layouts, messages))]


def _alternated(layouts, messages, points: int, rounds: int, inner: int) -> np.ndarray:
    """
    Seconds per decode, [layout, round]: every layout once a round, order rotated.

    Before each timed decode the message's bytes are read once (untimed), as deserializing
    it leaves them in the cache: otherwise the other layouts' messages evict it and every
    decode would time the memory instead.
    """
    buffer = np.zeros((points, 4), np.float32)

    def decode(k):
        field = layouts[k].intensity_field or 'intensity'
        rows = returns(messages[k], field)
        read_points(messages[k], points, 'subsample', out=buffer, intensity_field=field,
                    rows=rows)

    samples = np.zeros((len(layouts), rounds))
    for k in range(len(layouts)):
        decode(k)
    for r in range(rounds):
        for k in np.roll(np.arange(len(layouts)), r):
            spent = 0.0
            for _ in range(inner):
                np.bitwise_or.reduce(messages[k].data)
                start = time.perf_counter()
                decode(k)
                spent += time.perf_counter() - start
            samples[k, r] = spent / inner
    return samples


def main(argv: list[str] | None = None) -> list[dict]:
    """Time the decode of every layout (``decode_rows``) and print the rows as a table."""
    parser = argparse.ArgumentParser(
        prog='python -m jax_perception_node.tools.bench.decode',
        description="PointCloud2 decode of the real drivers' layouts against the plain one.")
    parser.add_argument('--points', type=int, default=100_000, help='returns per cloud')
    parser.add_argument('--rounds', type=int, default=15, help='rounds (the median is taken)')
    parser.add_argument('--inner', type=int, default=5, help='decodes timed per round')
    parser.add_argument('--no-returns', type=float, default=0.25,
                        help='share of no-return slots of the organized layouts')
    parser.add_argument('--rings', type=int, default=128, help='rows of the organized layouts')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    rows = decode_rows(args.points, args.rounds, args.inner, args.no_returns, args.rings,
                       args.seed)
    print('| layout | point_step | slots | decode ms | x plain | x plain organized |')
    print('|---|---:|---:|---:|---:|---:|')
    for r in rows:
        print(f'| {r["layout"]} | {r["point_step"]} | {r["slots"]} | {r["decode_ms"]} | '
              f'{r["ratio"]} | {r["ratio_organized"] or ""} |')
    flat = max((r for r in rows if r['ratio_organized'] is None), key=lambda r: r['ratio'])
    organized = max((r for r in rows if r['ratio_organized'] is not None),
                    key=lambda r: r['ratio_organized'])
    print(f'\nslowest unorganized: {flat["layout"]} {flat["ratio"]}x plain; slowest organized: '
          f'{organized["layout"]} {organized["ratio_organized"]}x plain organized (target <= 2)')
    return rows


if __name__ == '__main__':
    main()
