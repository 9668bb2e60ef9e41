"""
Area scaling of uint8 images to a camera's encoder input, downward only.

Each output pixel is the mean of the input area it covers, fractions of pixels weighted by
their share: an exact integer factor in both axes
averages the blocks exactly in integers, rounding half up (``(sum + n // 2) // n`` over a
block's n pixels, as Pillow's ``reduce`` does for powers of two); any other factor weighs the
pixels in float32, rows first, and rounds half up (within half a level of the exact mean, plus
float32 rounding). Pillow's BOX resize is not used: it takes whole pixels by their centres,
tens of levels off at sharp edges for a factor like 2.5.
"""

import numpy as np

__all__ = ['area_float', 'fit_array']


def _block_mean(src: np.ndarray, factor_y: int, factor_x: int) -> np.ndarray:
    """uint8[H, W, C] (any strides) -> uint8[H / fy, W / fx, C] block means, half rounded up."""
    count = factor_y * factor_x
    # uint16 holds a block's sum, and the half added to round it, up to 256 pixels; larger
    # blocks (rare) sum in uint32.
    wide = np.uint16 if count * 255 + count // 2 < 1 << 16 else np.uint32
    # Rows first (whole contiguous rows added), then columns: a few passes over the data,
    # where one sum over a 5-D strided view is ten times slower.
    rows = src[0::factor_y].astype(wide)
    for i in range(1, factor_y):
        rows += src[i::factor_y]
    sums = rows[:, 0::factor_x].copy()
    for i in range(1, factor_x):
        sums += rows[:, i::factor_x]
    sums += count // 2
    sums //= count
    return sums.astype(np.uint8)


def _area_taps(size: int, target: int) -> tuple[np.ndarray, np.ndarray]:
    """(index intp[target, K], weight float32[target, K]): the input pixels each output covers."""
    scale = size / target
    lo = np.arange(target) * scale                      # output i covers [lo_i, lo_i + scale)
    first = np.floor(lo).astype(np.intp)
    taps = int((np.ceil(lo + scale) - first).max())
    index = first[:, None] + np.arange(taps)
    # The overlap of [lo_i, lo_i + scale) with pixel [j, j + 1), over the span: the weights.
    overlap = np.minimum(lo[:, None] + scale, index + 1) - np.maximum(lo[:, None], index)
    weight = np.clip(overlap, 0.0, None) / scale
    return np.minimum(index, size - 1), weight.astype(np.float32)


def _area_axis(pixels: np.ndarray, target: int, axis: int) -> np.ndarray:
    """Area-average [H, W, C] ``pixels`` along ``axis`` down to ``target`` samples, as float32."""
    size = pixels.shape[axis]
    # Indexing along ``axis`` in place (no moveaxis), so rows stay rows in memory.
    along = (slice(None),) * axis
    if size % target == 0:
        # Whole blocks: strided adds, no gathers.
        factor = size // target
        total = pixels[along + (slice(0, None, factor),)].astype(np.float32)
        for i in range(1, factor):
            total += pixels[along + (slice(i, None, factor),)]
        total *= np.float32(1 / factor)
        return total
    index, weight = _area_taps(size, target)
    weight = weight.reshape((target, 1, 1, -1) if axis == 0 else (target, 1, -1))
    # scale + 1 taps at most per output pixel, each one gather and one multiply-add.
    total = weight[..., 0] * pixels[along + (index[:, 0],)]
    for tap in range(1, index.shape[1]):
        total += weight[..., tap] * pixels[along + (index[:, tap],)]
    return total


def area_float(src: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """Area-average uint8[H, W, C] (any strides) to float32[H_i, W_i, C] (a new array)."""
    pixels = src
    # Rows first: whole rows are added and gathered (long inner loops); the columns' strided
    # three-byte pixels are then fewer.
    for axis in (0, 1):
        if pixels.shape[axis] != target[axis]:
            pixels = _area_axis(pixels, target[axis], axis)
    return pixels if pixels is not src else src.astype(np.float32)


def _area_mean(src: np.ndarray, out: np.ndarray) -> None:
    """Area-average uint8[H, W, C] (any strides) into ``out``, half rounded up."""
    np.copyto(out, np.floor(area_float(src, out.shape[:2]) + np.float32(0.5)),
              casting='unsafe')


def fit_array(src: np.ndarray, out: np.ndarray) -> None:
    """Area-scale uint8[H, W, 1 or 3] (any strides) into ``out``, uint8[H_i, W_i, 3]."""
    height, width = src.shape[:2]
    target_height, target_width = out.shape[:2]
    if (height, width) == (target_height, target_width):
        np.copyto(out, src)          # broadcasts one channel (mono) to three
    elif height % target_height == 0 and width % target_width == 0:
        np.copyto(out, _block_mean(src, height // target_height, width // target_width))
    else:
        _area_mean(src, out)
