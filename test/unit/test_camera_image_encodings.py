"""16-bit, Bayer and 4:2:2 YUV Images -> encoder-size RGB, against references written here."""

import re
from types import SimpleNamespace

from jax_perception_node.sensors.camera_image import CameraImageError, ImageDecoder
import numpy as np
import pytest

RNG = np.random.default_rng(20)
TILES = ('rggb', 'bggr', 'gbrg', 'grbg')


def image(samples: np.ndarray, encoding: str, dtype: str = 'u1', pad: int = 3,
          bigendian: int = 0) -> SimpleNamespace:
    """Write an Image of ``samples`` [H, W, K] written as ``dtype``, ``pad`` junk bytes a row."""
    height, width = samples.shape[:2]
    rows = samples.astype(dtype).reshape(height, -1).view(np.uint8)
    junk = RNG.integers(0, 256, (height, pad), dtype=np.uint8)
    data = np.concatenate([rows, junk], axis=1)
    return SimpleNamespace(encoding=encoding, height=height, width=width, step=data.shape[1],
                           is_bigendian=bigendian, data=data.tobytes())


def rounded_block_mean(rgb: np.ndarray, factor: int) -> np.ndarray:
    height, width, channels = rgb.shape
    blocks = rgb.reshape(height // factor, factor, width // factor, factor, channels)
    return np.floor(blocks.astype(np.float64).mean(axis=(1, 3)) + 0.5).astype(np.uint8)


@pytest.mark.parametrize('bigendian', [0, 1])
@pytest.mark.parametrize('encoding, order', [('rgb16', (0, 1, 2)), ('bgr16', (2, 1, 0)),
                                             ('rgba16', (0, 1, 2, 3)), ('bgra16', (2, 1, 0, 3)),
                                             ('mono16', (0,))])
def test_16_bit_samples_are_their_high_byte(encoding, order, bigendian):
    rgba = RNG.integers(0, 256, (12, 20, 4), dtype=np.uint16)
    wide = (rgba << 8) | RNG.integers(0, 256, rgba.shape, dtype=np.uint16)   # low byte: noise
    msg = image(wide[:, :, list(order)], encoding, '>u2' if bigendian else '<u2',
                bigendian=bigendian)
    expected = np.repeat(rgba[:, :, :1], 3, axis=2) if encoding == 'mono16' else rgba[:, :, :3]
    np.testing.assert_array_equal(ImageDecoder(12, 20).decode(msg), expected)


def mosaic(rgb: np.ndarray, tile: str) -> np.ndarray:
    """Return the Bayer mosaic of ``rgb`` [H, W, 3]: each pixel keeps the colour its tile names."""
    out = np.empty(rgb.shape[:2], rgb.dtype)
    for i in range(rgb.shape[0]):
        for j in range(rgb.shape[1]):
            out[i, j] = rgb[i, j, 'rgb'.index(tile[2 * (i % 2) + j % 2])]
    return out


def demosaicked(samples: np.ndarray, tile: str) -> np.ndarray:
    """Half-size RGB, tile by tile: R and B as sampled, G the two greens' mean half up."""
    height, width = samples.shape
    out = np.empty((height // 2, width // 2, 3), np.uint8)
    for i in range(height // 2):
        for j in range(width // 2):
            block = samples[2 * i:2 * i + 2, 2 * j:2 * j + 2].ravel().astype(int)
            greens = [block[k] for k in range(4) if tile[k] == 'g']
            out[i, j] = (block[tile.index('r')], (greens[0] + greens[1] + 1) // 2,
                         block[tile.index('b')])
    return out


@pytest.mark.parametrize('tile', TILES)
def test_bayer_is_demosaicked_at_half_size_then_scaled(tile):
    truth = RNG.integers(0, 256, (16, 24, 3), dtype=np.uint8)
    samples = mosaic(truth, tile)
    reference = demosaicked(samples, tile)
    # The tile's own R and B: a mosaic of a flat colour gives that colour back.
    flat = np.broadcast_to(np.array([200, 90, 30], np.uint8), (8, 12, 3))
    np.testing.assert_array_equal(
        ImageDecoder(4, 6).decode(image(mosaic(flat, tile)[:, :, None], f'bayer_{tile}8')),
        flat[:4, :6])
    msg = image(samples[:, :, None], f'bayer_{tile}8')
    np.testing.assert_array_equal(ImageDecoder(8, 12).decode(msg), reference)
    np.testing.assert_array_equal(ImageDecoder(4, 6).decode(msg), rounded_block_mean(reference, 2))
    wide = (samples.astype(np.uint16) << 8) | RNG.integers(0, 256, samples.shape, dtype=np.uint16)
    for bigendian in (0, 1):
        msg = image(wide[:, :, None], f'bayer_{tile}16', '>u2' if bigendian else '<u2',
                    bigendian=bigendian)
        np.testing.assert_array_equal(ImageDecoder(8, 12).decode(msg), reference)


def test_a_compressed_bayer_mosaic_is_demosaicked_and_other_raw_images_refused():
    # compressed_image_transport compresses a mosaic as it is, one channel, and names it
    # before the ';' of its format: decoded as gray it lost every colour.
    import io
    from PIL import Image as PilImage
    truth = RNG.integers(0, 256, (16, 24, 3), dtype=np.uint8)

    def png(pixels):
        buffer = io.BytesIO()
        PilImage.fromarray(pixels).save(buffer, 'PNG')
        return buffer.getvalue()
    for tile in TILES:
        samples = mosaic(truth, tile)
        msg = SimpleNamespace(format=f'bayer_{tile}8; png compressed ', data=png(samples))
        np.testing.assert_array_equal(ImageDecoder(8, 12).decode(msg),
                                      demosaicked(samples, tile))
    refused = [
        ('16UC1; png compressed ', png(samples), 'the compressed image is 16uc1, not a camera '
         'picture'),
        ('8UC3; png compressed ', png(truth), 'the compressed image is 8uc3'),
        ('bayer_rggb8; png compressed ', png(truth), 'a Bayer mosaic is one channel, the png '
         'holds 3'),
        ('bayer_rggb8; png compressed ', png(samples[:15]), 'a Bayer mosaic has an even width '
         'and height'),
    ]
    for format_, data, message in refused:
        with pytest.raises(CameraImageError, match=re.escape(message)):
            ImageDecoder(4, 6).decode(SimpleNamespace(format=format_, data=data))


def yuv422(y: np.ndarray, u: np.ndarray, v: np.ndarray, order: str) -> np.ndarray:
    """Pack Y [H, W] and U, V [H, W / 2] as uint8[H, W, 2] macropixels (UYVY or YUYV)."""
    out = np.empty((*y.shape, 2), np.uint8)
    luma = 1 if order == 'uyvy' else 0
    out[:, :, luma] = y
    out[:, 0::2, 1 - luma] = u
    out[:, 1::2, 1 - luma] = v
    return out


def bt601(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """float64[H, W, 3] RGB from full-width Y, U, V: ITU-R BT.601 video range, unclipped."""
    y = 1.164 * np.maximum(y.astype(float) - 16, 0)
    u, v = u.astype(float) - 128, v.astype(float) - 128
    return np.stack([y + 1.596 * v, y - 0.391 * u - 0.813 * v, y + 2.018 * u], axis=-1)


@pytest.mark.parametrize('encoding, order', [('yuv422', 'uyvy'), ('uyvy', 'uyvy'),
                                             ('yuv422_yuy2', 'yuyv'), ('yuyv', 'yuyv')])
def test_yuv422_is_bt601_video_range(encoding, order):
    # Every level, black and saturated colours included: at full size, clipped per pixel.
    y = RNG.integers(0, 256, (20, 32), dtype=np.uint8)
    u, v = (RNG.integers(0, 256, (20, 16), dtype=np.uint8) for _ in range(2))
    out = ImageDecoder(20, 32).decode(image(yuv422(y, u, v, order), encoding))
    expected = np.clip(np.floor(bt601(y, u.repeat(2, 1), v.repeat(2, 1)) + 0.5), 0, 255)
    assert np.abs(out - expected).max() <= 1 and (out == expected).mean() > 0.99
    # Black (Y 0, below the video range's 16) and white (Y 255, above its 235): the clip.
    y, u, v = (np.array([[value] * 2], np.uint8) for value in (0, 128, 128))
    dark = ImageDecoder(1, 2).decode(image(yuv422(y, u[:, :1], v[:, :1], order), encoding))
    np.testing.assert_array_equal(dark, 0)
    white = ImageDecoder(1, 2).decode(image(yuv422(y + 255, u[:, :1], v[:, :1], order),
                                            encoding))
    np.testing.assert_array_equal(white, 255)


@pytest.mark.parametrize('source, target', [((40, 64), (20, 32)), ((50, 80), (20, 32)),
                                            ((45, 72), (20, 32))])
def test_scaled_yuv422_is_the_area_average_where_nothing_clips(source, target):
    # Levels that convert within 0..255: averaging then converting is converting then averaging.
    y = RNG.integers(60, 181, source, dtype=np.uint8)
    u, v = (RNG.integers(108, 149, (source[0], source[1] // 2), dtype=np.uint8)
            for _ in range(2))
    out = ImageDecoder(*target).decode(image(yuv422(y, u, v, 'uyvy'), 'yuv422'))
    rgb = bt601(y, u.repeat(2, 1), v.repeat(2, 1))
    rows = area_weights(source[0], target[0])
    cols = area_weights(source[1], target[1])
    expected = np.einsum('ih,hwc,jw->ijc', rows, rgb, cols)
    difference = np.abs(out - expected)
    assert difference.max() <= 0.51 and difference.mean() < 0.3


def area_weights(size: int, target: int) -> np.ndarray:
    scale = size / target
    lo = np.arange(target)[:, None] * scale
    edges = np.arange(size)[None, :]
    return np.clip(np.minimum(lo + scale, edges + 1) - np.maximum(lo, edges), 0, None) / scale


@pytest.mark.parametrize('msg, target, message', [
    (image(np.zeros((8, 13, 2)), 'yuv422'), (4, 6),
     'width 13: a 4:2:2 image (yuv422) has an even width'),
    (image(np.zeros((9, 12, 1)), 'bayer_rggb8'), (4, 6),
     'width 12, height 9: a Bayer image (bayer_rggb8) has an even width and height'),
    (image(np.zeros((8, 12, 1)), 'bayer_grbg8'), (8, 12),
     'bayer_grbg8 demosaicked at half size from width 6, height 4: smaller than the 12 x 8 '
     'encoder input'),
    (SimpleNamespace(**{**vars(image(np.zeros((8, 12, 1)), 'mono16', '<u2')), 'step': 20}),
     (8, 12), 'step 20 < width 12 * 2 bytes per pixel (mono16) = 24'),
    (SimpleNamespace(**{**vars(image(np.zeros((8, 12, 1)), 'mono16', '<u2')),
                        'is_bigendian': 'yes'}), (8, 12), "is_bigendian 'yes' is not an integer"),
])
def test_bad_images_are_refused_by_name(msg, target, message):
    with pytest.raises(CameraImageError) as error:
        ImageDecoder(*target).decode(msg)
    assert message in str(error.value)
