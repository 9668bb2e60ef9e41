"""
A PointCloud2's layout, validated from its header, and its points as one structured view.

The header is checked against the data size before anything sized from it is allocated, so a
corrupt or hostile header costs a :class:`CloudFormatError`, never a huge allocation. The
checked fields become one structured NumPy view of ``msg.data`` (no copy): the used fields at
their offsets, itemsize ``point_step``, shape (height * width,) when rows are not padded, else
(height, width) with strides (row_step, point_step). :func:`copy_points` converts the selected
rows into float32 x, y, z, intensity with a constant few vectorized operations, whatever the
layout; no module here imports ROS.
"""

from collections import namedtuple
import contextlib
import functools

import numpy as np


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

OUTPUT_FIELDS = ('x', 'y', 'z', 'intensity')
REQUIRED_FIELDS = ('x', 'y', 'z')

# What the header says, checked: dtypes maps each present field's key (x, y, z, intensity,
# time) to (offset, dtype), in that order.
Layout = namedtuple('Layout', 'height width point_step row_step dtypes')
# The structured view's extra field: x, y, z (and what follows, up to 16 bytes) as raw bytes.
_BLOCK = '_xyz_block'


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


def check_layout(msg, num_bytes: int, intensity_field: str | None = 'intensity',
                 time_field: str | None = None) -> Layout:
    """
    Check the header against the data size; every failure is a CloudFormatError.

    Only x, y, z, the field named ``intensity_field`` (key ``intensity``; a field named
    ``intensity`` is then ignored, like any other) and the one named ``time_field`` (key
    ``time``) are looked at: each present must be unique, of count 1, of a known datatype and
    inside ``point_step``. None leaves that field out.
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

    keys = {name: name for name in REQUIRED_FIELDS}
    keys.update({name: key for name, key in ((intensity_field, 'intensity'),
                                             (time_field, 'time')) if name is not None})
    endian = '>' if msg.is_bigendian else '<'
    dtypes = {}
    for field in msg.fields:
        key = keys.get(field.name)
        if key is None:
            continue
        if key in dtypes:
            raise CloudFormatError(f'duplicate field "{field.name}"')
        dtypes[key] = _field_dtype(field, endian, point_step)
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
    ordered = {key: dtypes[key] for key in OUTPUT_FIELDS + ('time',) if key in dtypes}
    return Layout(height, width, point_step, row_step, ordered)


def _field_dtype(field, endian: str, point_step: int) -> tuple[int, np.dtype]:
    """Return (offset, dtype) of one PointField, or raise a CloudFormatError naming it."""
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
    return offset, dtype


def is_flat(layout: Layout) -> bool:
    """Whether the cloud is one run of points at a fixed stride (one row, or rows unpadded)."""
    return layout.height == 1 or layout.row_step == layout.width * layout.point_step


def records(raw: np.ndarray, layout: Layout) -> np.ndarray:
    """
    Return the structured view of the points: one field per key of ``layout.dtypes``.

    Shape (height * width,) when :func:`is_flat`, else (height, width); itemsize point_step.
    When x, y, z are float32 of one byte order at 4-byte steps, a field ``_xyz_block`` holds
    their 12 bytes and, where the point has them, the 4 that follow, as one opaque item.
    """
    dtype = _plan(tuple(layout.dtypes.items()), layout.point_step).dtype
    height, width, point_step, row_step = layout[:4]
    if is_flat(layout):
        return np.ndarray((height * width,), dtype, buffer=raw, strides=(point_step,))
    return np.ndarray((height, width), dtype, buffer=raw, strides=(row_step, point_step))


# How copy_points converts one layout: the structured dtype; the opaque x, y, z item (None:
# cast field by field); the foreign float32 to convert the copied items from (None: native);
# the (column, key) pairs cast one by one; whether the intensity is absent (0); whether a
# float64 is cast (its float32 may overflow to Inf, and a signalling NaN stays NaN: meant).
_Plan = namedtuple('_Plan', 'dtype block swap casts zero wide')


@functools.lru_cache(maxsize=256)
def _plan(fields: tuple, point_step: int) -> _Plan:
    """Return the conversion plan of a layout given as ((key, (offset, dtype)), ...)."""
    dtypes = dict(fields)
    names = list(dtypes)
    formats = [dtype for _, dtype in dtypes.values()]
    offsets = [offset for offset, _ in dtypes.values()]
    keys = [key for key in OUTPUT_FIELDS if key in dtypes]
    start, x_dtype = dtypes['x']
    block = swap = None
    if (x_dtype.kind == 'f' and x_dtype.itemsize == 4
            and (dtypes['y'], dtypes['z']) == ((start + 4, x_dtype), (start + 8, x_dtype))):
        block = np.dtype((np.void, 16 if start + 16 <= point_step else 12))
        names.append(_BLOCK)
        formats.append(block)
        offsets.append(start)
        swap = None if x_dtype.isnative else x_dtype
        # The 16-byte item carries the intensity when it is the fourth float32 of the run.
        keys = keys[4 if block.itemsize == 16 and dtypes.get('intensity') == (start + 12, x_dtype)
                    else 3:]
    dtype = np.dtype({'names': names, 'formats': formats, 'offsets': offsets,
                      'itemsize': point_step})
    casts = tuple((OUTPUT_FIELDS.index(key), key) for key in keys)
    wide = any(dtypes[key][1].itemsize == 8 for _, key in casts)
    return _Plan(dtype, block, swap, casts, 'intensity' not in dtypes, wide)


def row_index(layout: Layout, rows):
    """
    Index of the selected rows into :func:`records`: None (all), a slice or int64 rows.

    ``rows`` is None, a slice or ascending int64 rows of the row-major cloud; a cloud with
    padded rows is indexed by (row, column) arrays.
    """
    if rows is None or is_flat(layout):
        return rows
    if isinstance(rows, slice):
        rows = np.arange(*rows.indices(layout.height * layout.width))
    return np.divmod(rows, layout.width)


def gather(into: np.ndarray, source: np.ndarray, index, in_range: bool = False) -> None:
    """
    Write ``source[index]`` (all of it for None) into the 1-D ``into``, cast as needed.

    ``in_range``: an index array is known to lie in [0, len(source)); else it is checked in
    one pass where np.take reads it. Either way a bad index raises NumPy's IndexError.
    """
    if index is None:
        into.reshape(source.shape)[...] = source
        return
    direct = into.flags.c_contiguous and into.dtype == source.dtype
    if not isinstance(index, np.ndarray) or (_uint_aligned(source)
                                             and not (direct and source.flags.c_contiguous)):
        into[...] = source[index]
        return
    # np.take reads a compact copy of a strided source: of misaligned items (point_step 22,
    # 26, ...) ~6x faster than fancy indexing, which copies them one by one. Its bounds
    # check ('raise') doubles its time: 'wrap' does none and changes no index in range.
    mode = 'wrap' if in_range or _in_range(index, len(source)) else 'raise'
    if direct:
        np.take(source, index, out=into, mode=mode)
    else:
        into[...] = np.take(source, index, mode=mode)


def _in_range(index: np.ndarray, size: int) -> bool:
    """Whether every index lies in [0, size): one pass, the maximum read as unsigned."""
    return index.dtype.kind in 'iu' and index.ndim == 1 and (
        not index.size or int(index.view(index.dtype.str.replace('i', 'u')).max()) < size)


def _uint_aligned(array: np.ndarray) -> bool:
    """Whether NumPy copies the items as aligned integers (up to 8 bytes at a time)."""
    size = array.dtype.itemsize
    align = 8 if size == 16 else size if size in (1, 2, 4, 8) else 1
    return array.ctypes.data % align == 0 and all(s % align == 0 for s in array.strides)


def copy_points(raw: np.ndarray, layout: Layout, rows, into: np.ndarray,
                in_range: bool = False) -> None:
    """
    Convert the selected points (``rows`` as :func:`row_index` takes) into ``into``, float32[M, 4].

    Float32 x, y, z of one byte order at 4-byte steps (every driver's layout) are copied as
    one opaque 16-byte (or 12-byte) item per point, converted in place when of the foreign
    byte order, and the intensity written over column 3 unless it came with them; other
    layouts take one cast per field. A missing intensity reads 0. float64 -> float32 overflow
    becomes Inf (dropped by the kernels like any non-finite value). ``in_range``: as
    :func:`gather` takes it, for rows of the flat cloud.
    """
    plan = _plan(tuple(layout.dtypes.items()), layout.point_step)
    view = records(raw, layout)
    index = row_index(layout, rows)
    if plan.block is not None:
        items = np.ndarray((len(into),), plan.block, buffer=into, strides=(16,))
        gather(items, view[_BLOCK], index, in_range)
        if plan.swap is not None:
            # 1-D and in place: NumPy converts element by element, no copy of its own.
            flat = into.reshape(-1)
            np.copyto(flat, flat.view(plan.swap))
    with np.errstate(over='ignore', invalid='ignore') if plan.wide else contextlib.nullcontext():
        for column, key in plan.casts:
            gather(into[:, column], view[key], index, in_range)
    if plan.zero:
        into[:, 3] = 0.0
