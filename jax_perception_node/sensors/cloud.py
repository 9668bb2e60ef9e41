"""
PointCloud2 -> float32 (x, y, z, intensity) rows, without ROS.

Message fields are read by attribute, so an rclpy ``sensor_msgs.msg.PointCloud2`` (``data`` an
``array.array('B')``) and a ``rosbags`` message (``data`` a uint8 NumPy array) both work, as does
anything with the same attributes and a bytes-like ``data``.

The layout is validated from the header alone before anything sized from it is allocated, so a
corrupt or hostile header costs a :class:`CloudFormatError`, never a huge allocation. Fields are
found by name (``x``, ``y``, ``z`` required, the intensity optional: ``intensity`` unless the
caller names another field, as Ouster's ``signal`` or ``reflectivity``), may have any PointField
datatype and either byte order, and may sit anywhere inside a padded ``point_step``; organized
clouds (``height > 1``) are flattened row-major, skipping any padding at the end of each row.
Fields other than these four are ignored, whatever they contain.
"""

from collections import namedtuple

import numpy as np

from ..settings.channels import MAX_ABS_INPUT


class CloudFormatError(ValueError):
    """A PointCloud2 cannot be decoded; the message names the problem (field, sizes)."""


# sensor_msgs/PointField datatype constant -> NumPy (and struct) type character.
POINTFIELD_DTYPES: dict[int, str] = {
    1: 'b',   # INT8
    2: 'B',   # UINT8
    3: 'h',   # INT16
    4: 'H',   # UINT16
    5: 'i',   # INT32
    6: 'I',   # UINT32
    7: 'f',   # FLOAT32
    8: 'd',   # FLOAT64
}

OVERFLOW_POLICIES = ('subsample', 'truncate')
OUTPUT_FIELDS = ('x', 'y', 'z', 'intensity')
REQUIRED_FIELDS = ('x', 'y', 'z')

# One native x, y, z, intensity point as an opaque 16-byte item.
_POINT = np.dtype((np.void, 16))
# What the header says, checked: dtypes maps each present output field to (offset, dtype).
_Layout = namedtuple('_Layout', 'height width point_step row_step dtypes')


def point_count(msg) -> int:
    """Validate the layout like :func:`read_points` and return height * width."""
    layout = _layout(msg, byte_view(msg.data).size)
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
    layout = _layout(msg, raw.size, intensity_field)
    height, width, point_step, row_step = layout[:4]
    offset, dtype = layout.dtypes['x']
    if (height <= 1 and msg.is_dense) or dtype.kind != 'f' or not height * width:
        return None
    x = np.ndarray((height, width), dtype, buffer=raw, offset=offset,
                   strides=(row_step, point_step))
    finite = np.isfinite(x)
    return None if finite.all() else np.flatnonzero(finite)


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
    at or past M are left as they are. The header is checked before ``out`` is touched. There,
    x, y, z and intensity as 16 contiguous native float32 bytes at any offset of a point are
    copied as one 16-byte item per point; other layouts are converted field by field.
    """
    if policy not in OVERFLOW_POLICIES:
        raise ValueError(f'policy must be one of {OVERFLOW_POLICIES}, got {policy!r}')
    if max_points is not None and max_points < 0:
        raise ValueError(f'max_points must be >= 0, got {max_points}')
    raw = byte_view(msg.data)
    layout = _layout(msg, raw.size, intensity_field)
    height, width, point_step, row_step = layout[:4]
    selected = rows
    num_points = height * width if selected is None else len(selected)
    kept = num_points if max_points is None else min(num_points, max_points)
    if out is not None:
        _check_out(out, kept)
    if num_points == 0:
        return (np.empty((0, 4), np.float32) if out is None else out[:0]), 0

    rows = _rows_read(num_points, max_points, policy, selected)
    # Unpadded rows (or a single row) make the cloud one run of points with a fixed stride.
    flat = height == 1 or row_step == width * point_step

    start = _xyzi_start(layout)
    if out is not None and start is not None:
        _copy_xyzi(raw, layout, start, rows, out[:kept].view(_POINT).reshape(kept))
        return out[:kept], num_points
    if flat and start == 0 and point_step % 4 == 0:
        view = np.ndarray((height * width, 4), np.float32, buffer=raw, strides=(point_step, 4))
        return (view if rows is None else view[rows]), num_points

    dtype = np.dtype({
        'names': list(layout.dtypes),
        'formats': [dt for _, dt in layout.dtypes.values()],
        'offsets': [offset for offset, _ in layout.dtypes.values()],
        'itemsize': point_step,
    })
    if flat:
        records = np.ndarray((height * width,), dtype, buffer=raw, strides=(point_step,))
        index = slice(None) if rows is None else rows
    else:
        records = np.ndarray((height, width), dtype, buffer=raw, strides=(row_step, point_step))
        if isinstance(rows, slice):
            rows = np.arange(*rows.indices(num_points))
        # All rows: assign through a (height, width) view of each output column instead.
        index = None if rows is None else np.divmod(rows, width)

    points = np.empty((kept, 4), np.float32) if out is None else out[:kept]
    # float64 -> float32 overflow becomes Inf, which the kernel drops like any non-finite value.
    with np.errstate(over='ignore', invalid='ignore'):
        for k, name in enumerate(OUTPUT_FIELDS):
            if name not in layout.dtypes:
                points[:, k] = 0.0
            elif index is None:
                points[:, k].reshape(height, width)[...] = records[name]
            else:
                points[:, k] = records[name][index]
    return points, num_points


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


def byte_view(data, error: type[Exception] = CloudFormatError) -> np.ndarray:
    """
    Return ``msg.data`` as a flat uint8 array without copying (bytes, array.array, NumPy).

    Raises ``error`` (the caller's layer's exception) when ``data`` is no byte buffer.
    """
    if isinstance(data, np.ndarray):
        # A rosbags array may be a strided slice, which the buffer protocol cannot export.
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(memoryview(data).cast('B'), np.uint8)
    except TypeError:
        # A plain sequence of ints (a hand-built message): one copy.
        try:
            return np.asarray(data, dtype=np.uint8).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            raise error(f'data of type {type(data).__name__} is not a byte buffer') from None


def _layout(msg, num_bytes: int, intensity_field: str = 'intensity') -> _Layout:
    """
    Check the header against the data size; every failure is a CloudFormatError.

    The field named ``intensity_field`` is read as the intensity (a field named ``intensity``
    is then ignored, like any other).
    """
    # int() first: NumPy scalars from a foreign message would wrap around in the products.
    height, width = int(msg.height), int(msg.width)
    point_step, row_step = int(msg.point_step), int(msg.row_step)
    for name, value in (('height', height), ('width', width), ('point_step', point_step),
                        ('row_step', row_step)):
        if value < 0:
            raise CloudFormatError(f'{name} {value} is negative')
    if point_step == 0:
        raise CloudFormatError('point_step is 0')

    endian = '>' if msg.is_bigendian else '<'
    dtypes = {}
    for field in msg.fields:
        name = 'intensity' if field.name == intensity_field else field.name
        if name not in OUTPUT_FIELDS or (name == 'intensity' and field.name != intensity_field):
            continue
        if name in dtypes:
            raise CloudFormatError(f'duplicate field "{field.name}"')
        datatype, offset, count = int(field.datatype), int(field.offset), int(field.count)
        if datatype not in POINTFIELD_DTYPES:
            raise CloudFormatError(f'field "{field.name}": unknown datatype {datatype}')
        if count != 1:
            raise CloudFormatError(f'field "{field.name}": count {count}, expected 1')
        dtype = np.dtype(endian + POINTFIELD_DTYPES[datatype])
        if offset < 0 or offset + dtype.itemsize > point_step:
            raise CloudFormatError(
                f'field "{field.name}": bytes {offset}..{offset + dtype.itemsize} extend past '
                f'point_step {point_step}')
        dtypes[name] = (offset, dtype)
    for name in REQUIRED_FIELDS:
        if name not in dtypes:
            raise CloudFormatError(f'missing field "{name}"')

    if row_step < width * point_step:
        raise CloudFormatError(
            f'row_step {row_step} < width {width} * point_step {point_step}')
    if num_bytes < row_step * height:
        raise CloudFormatError(
            f'data has {num_bytes} bytes, expected row_step {row_step} * height {height} = '
            f'{row_step * height} bytes')
    # Keep the output order x, y, z, intensity whatever order the message lists them in.
    ordered = {name: dtypes[name] for name in OUTPUT_FIELDS if name in dtypes}
    return _Layout(height, width, point_step, row_step, ordered)


def _xyzi_start(layout: _Layout) -> int | None:
    """Offset of x when x, y, z, intensity are native float32 at 4-byte steps from it."""
    if list(layout.dtypes) != list(OUTPUT_FIELDS):
        return None
    start, native = layout.dtypes['x'][0], np.dtype(np.float32)
    if all(layout.dtypes[name] == (start + 4 * k, native)
           for k, name in enumerate(OUTPUT_FIELDS)):
        return start
    return None


def _copy_xyzi(raw: np.ndarray, layout: _Layout, start: int, rows, into: np.ndarray) -> None:
    """
    Copy the kept points, whole 16-byte x, y, z, intensity runs, into ``into`` (_POINT[M]).

    Copied as opaque items (bit for bit, alignment free): a strided float32 copy is ~8x slower.
    """
    height, width, point_step, row_step = layout[:4]
    if height == 1 or row_step == width * point_step:
        whole = np.ndarray((height * width,), _POINT, buffer=raw, offset=start,
                           strides=(point_step,))
        if isinstance(rows, np.ndarray):
            np.take(whole, rows, out=into)
        else:
            into[...] = whole if rows is None else whole[rows]
        return
    whole = np.ndarray((height, width), _POINT, buffer=raw, offset=start,
                       strides=(row_step, point_step))
    if rows is None:
        into.reshape(height, width)[...] = whole
        return
    if isinstance(rows, slice):
        rows = np.arange(*rows.indices(height * width))
    into[...] = whole[np.divmod(rows, width)]
