"""
PointCloud2 -> float32 (x, y, z, intensity) rows and per-point times, without ROS.

Message fields are read by attribute, so an rclpy ``sensor_msgs.msg.PointCloud2`` (``data`` an
``array.array('B')``) and a ``rosbags`` message (``data`` a uint8 NumPy array) both work, as does
anything with the same attributes and a bytes-like ``data``.

The layout is validated from the header alone before anything sized from it is allocated
(``cloud_layout``), so a corrupt or hostile header costs a :class:`CloudFormatError`, never a
huge allocation. Fields are found by name (``x``, ``y``, ``z`` required, the intensity optional:
``intensity`` unless the caller names another field, as Ouster's ``signal`` or
``reflectivity``), may have any PointField datatype and either byte order, and may sit anywhere
inside a padded ``point_step``; organized clouds (``height > 1``) are flattened row-major,
skipping any padding at the end of each row. Fields other than these (and a time field asked
for by name) are ignored, whatever they contain. Each cloud is read through one structured view
of its bytes with a constant few vectorized copies, whatever its layout.
"""

import numpy as np

from .cloud_layout import (byte_view, check_layout, CloudFormatError, copy_points, gather,
                           is_flat, POINTFIELD_DTYPES, records, row_index)
from ..settings.channels import MAX_ABS_INPUT

__all__ = ['byte_view', 'CloudFormatError', 'has_valid_point', 'keep_rows', 'MAX_POINT_TIME_S',
           'MAX_SWEEP_S', 'OVERFLOW_POLICIES', 'point_count', 'POINTFIELD_DTYPES', 'read_points',
           'read_times', 'returns', 'SWEEP_SHARE', 'times_near_stamp', 'TIME_FIELDS',
           'TIME_REFERENCES', 'UNITS_PER_SECOND']

OVERFLOW_POLICIES = ('subsample', 'truncate')
# Time units -> units per second (exact integers: the stamp in units is then exact).
UNITS_PER_SECOND = {'s': 1, 'ms': 10 ** 3, 'us': 10 ** 6, 'ns': 10 ** 9}
TIME_REFERENCES = ('stamp', 'absolute')
# A per-point time this far from the stamp or further (or NaN) is no time within a sweep: the
# deskew kernel moves such a point as if its time were 0.
MAX_POINT_TIME_S = 1.0
# Times :func:`times_near_stamp` looks at, evenly strided over a cloud's points.
TIME_SAMPLES = 64
# A sweep's times lie within this of its stamp (a 5 Hz LiDAR's 0.2 s sweep stamped at its
# start or end, with room), nine in ten of them at least: a unit or clock error that leaves
# a few of them near the stamp moved the others tens of metres.
MAX_SWEEP_S = 0.3
SWEEP_SHARE = 0.9
# The per-point time of the common drivers: driver -> (field, unit, reference). 'stamp': the
# values are offsets from header.stamp; 'absolute': times since the epoch.
TIME_FIELDS: dict[str, tuple[str, str, str]] = {
    'velodyne': ('time', 's', 'stamp'),              # velodyne_pointcloud XYZIRT, float32
    'ouster': ('t', 'ns', 'stamp'),                  # ouster-ros, every point type, uint32
    'hesai': ('timestamp', 's', 'absolute'),         # HesaiLidar_ROS_2.0, float64
    'robosense': ('timestamp', 's', 'absolute'),     # rslidar_sdk XYZIRT, float64
    'livox': ('timestamp', 'ns', 'absolute'),        # livox_ros_driver2, float64
    'autoware_xyzircaedt': ('time_stamp', 'ns', 'stamp'),   # PointXYZIRCAEDT, uint32
}
_NS_PER_S = 10 ** 9


def point_count(msg) -> int:
    """Validate the layout like :func:`read_points` and return height * width."""
    layout = check_layout(msg, byte_view(msg.data).size)
    return layout.height * layout.width


def returns(msg, intensity_field: str = 'intensity') -> np.ndarray | None:
    """
    Validate the layout and return the rows holding a return, int64 ascending; None: all of them.

    A cloud that is organized (height > 1) or not ``is_dense`` may hold no-return slots, which
    drivers fill with NaN (an Ouster 128 x 2048 has 262 144 slots and usually far fewer
    returns): their rows are those whose x is not finite, found in one pass over x alone;
    when every x is finite the answer is None, and the rows are copied as one run. A dense
    unorganized cloud is taken at its word (no pass), as is one whose x is an integer type.
    """
    raw = byte_view(msg.data)
    layout = check_layout(msg, raw.size, intensity_field)
    height, width = layout.height, layout.width
    if (height <= 1 and msg.is_dense) or layout.dtypes['x'][1].kind != 'f' or not height * width:
        return None
    finite = np.isfinite(records(raw, layout)['x'])
    return None if finite.all() else finite.ravel().nonzero()[0]


def read_points(msg, max_points: int | None = None, policy: str = 'subsample',
                out: np.ndarray | None = None, intensity_field: str = 'intensity',
                rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """
    Decode to float32[M, 4] (x, y, z, intensity) and return (points, N).

    N = height * width is the number of points in the message, or with ``rows`` (ascending row
    indices, such as :func:`returns` gives) N = len(rows) and only those rows are read. When
    N > ``max_points`` only M = ``max_points`` rows are converted, chosen by
    ``keep_rows(N, max_points, policy)``, so a huge cloud never allocates more than
    ``max_points * 16`` bytes of output; otherwise M = N. The intensity is the field named
    ``intensity_field``; without one it reads as 0. NaN and Inf are passed through.

    For the common layout (native float32 x, y, z, intensity at offsets 0, 4, 8, 12, point_step
    a multiple of 4, rows not padded) the result is a view of ``msg.data`` when the selected rows
    allow it (no copy: it may be read-only and must not outlive changes to the message);
    otherwise it is one freshly allocated array.

    With ``out`` (a C-contiguous float32[B, 4] with B >= M, such as a bucket buffer) the rows
    are converted straight into ``out[:M]``, which is returned: no array of its own, and rows
    at or past M are left as they are. The header is checked before ``out`` is touched.
    Float32 x, y, z at 4-byte steps (any offset, either byte order) are copied as one 16-byte
    item per point with whatever follows them, then the intensity is written; other layouts
    take one cast per field (``cloud_layout.copy_points``).
    """
    _check_selection(policy, max_points)
    raw = byte_view(msg.data)
    layout = check_layout(msg, raw.size, intensity_field)
    num_points = layout.height * layout.width if rows is None else len(rows)
    kept = num_points if max_points is None else min(num_points, max_points)
    if out is not None:
        _check_out(out, kept)
    if num_points == 0:
        return (np.empty((0, 4), np.float32) if out is None else out[:0]), 0

    in_range = rows is None     # keep_rows' rows alone: the caller's are checked if need be
    rows = _rows_read(num_points, max_points, policy, rows)
    if out is None:
        view = _xyzi_view(raw, layout)
        if view is not None:
            return (view if rows is None else view[rows]), num_points
    points = np.empty((kept, 4), np.float32) if out is None else out[:kept]
    copy_points(raw, layout, rows, points, in_range)
    return points, num_points


def read_times(msg, field: str, unit: str, reference: str, max_points: int | None = None,
               policy: str = 'subsample', out: np.ndarray | None = None,
               rows: np.ndarray | None = None) -> bool:
    """
    Write each kept point's time, float32 seconds after ``header.stamp``, into ``out[:M]``.

    The rows are those :func:`read_points` keeps with the same ``max_points``, ``policy`` and
    ``rows``, in the same order, so ``out[k]`` is the time of decoded point k. ``field`` names
    the time field (any PointField datatype, either byte order; ``TIME_FIELDS`` lists the
    common drivers'), ``unit`` is 's', 'ms', 'us' or 'ns', ``reference`` 'stamp' (the values
    are offsets from header.stamp) or 'absolute' (times since the epoch: header.stamp is
    subtracted in int64 for integer fields, else in float64 with the stamp's whole seconds
    first, so 1.7e9 s or 1.7e18 ns keep their sub-microsecond offsets before the float32 cast);
    an absolute float32 field cannot hold them, and its times are written NaN.
    NaN and Inf pass through: the deskew kernel moves a point whose time is NaN or
    ``|t| >= 1`` s as if it were 0 (not at all).

    Returns False, ``out`` untouched, when the cloud has no field named ``field``; True once
    written. ``out`` is a C-contiguous float32[B] with B >= M; with None nothing is written and
    the answer only says whether the field is there. The layout (x, y, z and the time field:
    count 1, inside ``point_step``) is checked first: a CloudFormatError names the field.
    """
    if unit not in UNITS_PER_SECOND:
        raise ValueError(f'unit must be one of {tuple(UNITS_PER_SECOND)}, got {unit!r}')
    if reference not in TIME_REFERENCES:
        raise ValueError(f'reference must be one of {TIME_REFERENCES}, got {reference!r}')
    _check_selection(policy, max_points)
    raw = byte_view(msg.data)
    layout = check_layout(msg, raw.size, None, field)
    if 'time' not in layout.dtypes:
        return False
    if out is None:
        return True
    num_points = layout.height * layout.width if rows is None else len(rows)
    kept = num_points if max_points is None else min(num_points, max_points)
    if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.ndim == 1
            and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError('out must be a writeable C-contiguous float32[B] array, got '
                         f'{getattr(out, "dtype", type(out).__name__)} {np.shape(out)}')
    if out.shape[0] < kept:
        raise ValueError(f'out has {out.shape[0]} rows, the cloud needs {kept}')
    kind = layout.dtypes['time'][1]
    if reference == 'absolute' and kind.kind == 'f' and kind.itemsize < 8:
        # A float32 cannot hold a time since the epoch (it steps by 128 s near 1.7e9 s): all
        # its times would read as one, now and then near the stamp. Never moved, and said so.
        out[:kept] = np.nan
        return True
    if kept:
        index = row_index(layout, _rows_read(num_points, max_points, policy, rows))
        stamp = msg.header.stamp if reference == 'absolute' else None
        _seconds(records(raw, layout)['time'], index, UNITS_PER_SECOND[unit], stamp,
                 out[:kept], rows is None)
    return True


def _seconds(times: np.ndarray, index, per_s: int, stamp, into: np.ndarray,
             in_range: bool = False) -> None:
    """
    Write ``times[index]`` (``per_s`` units a second) into ``into`` as seconds after ``stamp``.

    ``stamp`` None: the times are offsets already. The stamp in units is split into whole
    units (subtracted exactly: int64, or a float64 that holds sec * per_s exactly) and the
    rest, so an absolute time keeps the precision of its offset from the stamp. ``in_range``:
    as ``cloud_layout.gather`` takes it.
    """
    with np.errstate(over='ignore', invalid='ignore'):
        if stamp is None and per_s == 1:
            gather(into, times, index, in_range)
            return
        integer = times.dtype.kind in 'iu'
        values = np.empty(len(into), np.int64 if integer else np.float64)
        gather(values, times, index, in_range)
        if stamp is not None:
            sec, nanosec = int(stamp.sec), int(stamp.nanosec)
            whole, part = divmod(nanosec * per_s, _NS_PER_S)
            if integer:
                values -= sec * per_s + whole
                values = values.astype(np.float64)
            else:
                values -= float(sec * per_s)
                if whole:
                    values -= whole
            if part:
                values -= part / _NS_PER_S
        np.divide(values, float(per_s), out=into, casting='same_kind')


def _check_selection(policy: str, max_points: int | None) -> None:
    """Refuse an unknown overflow policy or a negative ``max_points`` (a caller's bug)."""
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f'policy must be one of {OVERFLOW_POLICIES}, got {policy!r}')
    if max_points is not None and max_points < 0:
        raise ValueError(f'max_points must be >= 0, got {max_points}')


def _xyzi_view(raw: np.ndarray, layout) -> np.ndarray | None:
    """float32[N, 4] view of the message when x, y, z, intensity are native float32 at 0..16."""
    native = np.dtype(np.float32)
    if (list(layout.dtypes) == ['x', 'y', 'z', 'intensity'] and is_flat(layout)
            and layout.point_step % 4 == 0
            and all(layout.dtypes[name] == (4 * k, native)
                    for k, name in enumerate(('x', 'y', 'z', 'intensity')))):
        return np.ndarray((layout.height * layout.width, 4), np.float32, buffer=raw,
                          strides=(layout.point_step, 4))
    return None


def _rows_read(num_points: int, max_points: int | None, policy: str,
               selected: np.ndarray | None) -> slice | np.ndarray | None:
    """Return the rows to read: None for all, else a slice or index array of the message's."""
    rows = None
    if max_points is not None and num_points > max_points:
        rows = keep_rows(num_points, max_points, policy)
    if selected is not None:
        rows = selected if rows is None else selected[rows]
    return rows


def has_valid_point(points: np.ndarray) -> bool:
    """
    Whether float32[N, 4] rows hold one point the kernels could keep anywhere.

    Valid: finite x, y, z and |intensity| <= ``MAX_ABS_INPUT``. Checked in chunks growing 4x
    from 64 rows: a real cloud answers within its first rows, an all-NaN or empty one costs
    about one pass.
    """
    start, size = 0, 64
    while start < len(points):
        chunk = points[start:start + size]
        if (np.isfinite(chunk[:, :3]).all(axis=1) & (np.abs(chunk[:, 3]) <= MAX_ABS_INPUT)).any():
            return True
        start, size = start + size, size * 4
    return False


def _check_out(out, rows: int) -> None:
    """Refuse an ``out`` the decoder cannot fill in place (a caller's bug: ValueError)."""
    if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.ndim == 2
            and out.shape[1] == 4 and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError('out must be a writeable C-contiguous float32[B, 4] array, got '
                         f'{getattr(out, "dtype", type(out).__name__)} {np.shape(out)}')
    if out.shape[0] < rows:
        raise ValueError(f'out has {out.shape[0]} rows, the cloud needs {rows}')


def keep_rows(num_points: int, capacity: int, policy: str) -> slice | np.ndarray:
    """
    Rows kept when a cloud of ``num_points`` rows meets a buffer of ``capacity`` rows.

    'subsample': a deterministic even stride over the whole cloud, int64 indices
    ``(arange(capacity) * num_points) // capacity`` (ascending, distinct);
    'truncate': the first ``capacity`` rows, as a slice. A cloud that fits keeps every row
    (``slice(0, num_points)``) under either policy.
    """
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f'policy must be one of {OVERFLOW_POLICIES}, got {policy!r}')
    if capacity < 0 or num_points < 0:
        raise ValueError(f'num_points {num_points} and capacity {capacity} must be >= 0')
    if num_points <= capacity:
        return slice(0, num_points)
    if policy == 'truncate':
        return slice(0, capacity)
    if capacity == 0:
        return np.empty(0, np.int64)
    # i * N // c = i * q + i * r // c with N = q * c + r: exact without forming i * N, which
    # would overflow int64 for a large N times a large capacity.
    quotient, remainder = divmod(num_points, capacity)
    i = np.arange(capacity, dtype=np.int64)
    return i * quotient + (i * remainder) // capacity


def times_near_stamp(times: np.ndarray) -> bool:
    """
    Return whether a cloud's decoded times float32[M] (s after the stamp) are a sweep's.

    True when :data:`SWEEP_SHARE` of :data:`TIME_SAMPLES` evenly strided times lie within
    :data:`MAX_SWEEP_S` of the stamp, and not all at one time (a cloud of fewer than two
    points has nothing to tell: True). Otherwise, or NaN, it is a time field read with the
    wrong ``reference`` or ``unit`` (a driver's absolute timestamps read as offsets, offsets
    read as absolute, nanoseconds read as seconds or microseconds), a sensor clock apart from
    the header's, or a field the driver does not fill (all 0): not deskewed.
    """
    if times.size < 2:
        return True
    # An odd stride: an organized cloud's rows are 512, 1024 or 2048 wide, and a stride of
    # whole rows sampled one column only (an OS1-64's all at t = 0: taken as all equal).
    sample = times[::-(-times.size // TIME_SAMPLES) | 1]
    near = sample[np.abs(sample) < MAX_SWEEP_S]
    return near.size >= SWEEP_SHARE * sample.size and bool(near.max() > near.min())
