"""Camera Images and CompressedImages -> encoder-size RGB, against references written here."""

import io
import re
import struct
from types import SimpleNamespace
import zlib

from jax_perception_node.sensors import camera_image
from jax_perception_node.sensors.camera import FeatureMapError
from jax_perception_node.sensors.camera_image import (CameraImageError, COMPRESSED_FORMATS,
                                                      IMAGE_ENCODINGS, ImageDecoder,
                                                      MAX_JPEG_SCANS, MAX_PIXELS)
import numpy as np
from PIL import Image as PilImage
from PIL import ImageFile
import pytest
from rosbags.typesys import get_typestore, Stores

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """uint8[H, W, 3] that looks like a photo: smooth gradients, a few edges, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    base = np.stack([120 + 100 * np.sin(3 * x + 1), 60 + 150 * y, 90 + 80 * np.cos(5 * x * y)],
                    axis=-1)
    base[(x > 0.3) & (x < 0.45)] *= 0.5                          # an edge
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def pack(rgb: np.ndarray, encoding: str, pad: int = 0, seed: int = 1) -> SimpleNamespace:
    """Pack ``rgb`` as an Image in ``encoding``, channels placed by hand, ``pad`` junk a row."""
    rng = np.random.default_rng(seed)
    height, width = rgb.shape[:2]
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    alpha = rng.integers(0, 256, (height, width), dtype=np.uint8)
    planes = {'rgb8': (r, g, b), 'bgr8': (b, g, r), 'rgba8': (r, g, b, alpha),
              'bgra8': (b, g, r, alpha), 'mono8': (r,)}[encoding]
    pixels = np.stack(planes, axis=-1).reshape(height, -1)
    junk = rng.integers(0, 256, (height, pad), dtype=np.uint8)
    data = np.concatenate([pixels, junk], axis=1)
    return SimpleNamespace(encoding=encoding, height=height, width=width, is_bigendian=0,
                           step=data.shape[1], data=data.tobytes())


def expected_rgb(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """Return what the decoder must give for ``pack(rgb, encoding)`` at full size."""
    return np.repeat(rgb[..., :1], 3, axis=-1) if encoding == 'mono8' else rgb


def block_mean(rgb: np.ndarray, factor: int) -> np.ndarray:
    """Exact block means, half rounded up, in float64."""
    height, width, channels = rgb.shape
    blocks = rgb.reshape(height // factor, factor, width // factor, factor, channels)
    return np.floor(blocks.astype(np.float64).mean(axis=(1, 3)) + 0.5).astype(np.uint8)


def area_weights(size: int, target: int) -> np.ndarray:
    """float64[target, size]: the overlap of each output pixel's span with each input pixel."""
    scale = size / target
    lo = np.arange(target)[:, None] * scale
    edges = np.arange(size)[None, :]
    overlap = np.minimum(lo + scale, edges + 1) - np.maximum(lo, edges)
    return np.clip(overlap, 0, None) / scale


def area_average(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """float64[height, width, C]: the exact area average of ``rgb``."""
    rows, cols = area_weights(rgb.shape[0], height), area_weights(rgb.shape[1], width)
    return np.einsum('ih,hwc,jw->ijc', rows, rgb.astype(np.float64), cols, optimize=True)


def compressed(data: bytes, format_: str) -> SimpleNamespace:
    return SimpleNamespace(format=format_, data=data)


def encoded(rgb: np.ndarray, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    PilImage.fromarray(rgb).save(buffer, fmt, **options)
    return buffer.getvalue()


def png_file(samples: np.ndarray, color_type: int, bit_depth: int,
             size: tuple[int, int] | None = None) -> bytes:
    """Write a PNG by hand (no Pillow): filter 0 rows, big-endian samples, one IDAT."""
    height, width = samples.shape[:2]
    if size is not None:
        width, height = size            # a header that lies about the size
    dtype = '>u2' if bit_depth == 16 else 'u1'
    rows = samples.astype(dtype).reshape(samples.shape[0], -1).view(np.uint8)
    raw = b''.join(b'\x00' + row.tobytes() for row in rows)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack('>I', len(body)) + kind + body
                + struct.pack('>I', zlib.crc32(kind + body)))
    header = struct.pack('>IIBBBBB', width, height, bit_depth, color_type, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(raw))
            + chunk(b'IEND', b''))


def with_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """Rewrite the size in a baseline JPEG's SOF0 segment (FF C0 len P H W)."""
    at = data.index(b'\xff\xc0')
    return data[:at + 5] + struct.pack('>HH', height, width) + data[at + 9:]


EIGHT_BIT = ('rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8')


@pytest.mark.parametrize('encoding', EIGHT_BIT)
def test_every_8_bit_encoding_at_target_size_is_the_hand_reorder(encoding):
    rgb = photo(24, 40)
    out = ImageDecoder(24, 40).decode(pack(rgb, encoding))
    assert out.dtype == np.uint8 and out.shape == (24, 40, 3) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, expected_rgb(rgb, encoding))


@pytest.mark.parametrize('encoding', ['rgb8', 'bgra8', 'mono8'])
@pytest.mark.parametrize('pad', [1, 5, 64])
def test_row_padding_is_skipped(encoding, pad):
    rgb = photo(16, 20, seed=2)
    np.testing.assert_array_equal(ImageDecoder(16, 20).decode(pack(rgb, encoding, pad)),
                                  expected_rgb(rgb, encoding))


@pytest.mark.parametrize('encoding', ['rgb8', 'bgr8', 'rgba8', 'mono8'])
@pytest.mark.parametrize('factor', [2, 3, 4])
def test_integer_downscale_is_the_exact_block_mean(encoding, factor):
    rgb = np.random.default_rng(factor).integers(0, 256, (12 * factor, 20 * factor, 3),
                                                 dtype=np.uint8)
    out = ImageDecoder(12, 20).decode(pack(rgb, encoding, pad=3))
    np.testing.assert_array_equal(out, block_mean(expected_rgb(rgb, encoding), factor))


def test_block_mean_rounds_half_up():
    # 2 x 2 blocks summing to 2 (mean 0.5) and 6 (mean 1.5): half up gives 1 and 2.
    rgb = np.zeros((2, 4, 3), np.uint8)
    rgb[0, :2] = [[1, 1, 1], [0, 0, 0]]
    rgb[1, :2] = [[1, 1, 1], [0, 0, 0]]
    rgb[:, 2:] = [[[1, 1, 1], [2, 2, 2]], [[1, 1, 1], [2, 2, 2]]]
    out = ImageDecoder(1, 2).decode(pack(rgb, 'rgb8'))
    np.testing.assert_array_equal(out, [[[1, 1, 1], [2, 2, 2]]])


@pytest.mark.parametrize('source, target', [((150, 250), (60, 100)),      # 2.5 both ways
                                            ((91, 160), (23, 40)),        # 4 in x, 3.96 in y
                                            ((101, 203), (50, 100))])
@pytest.mark.parametrize('encoding', ['bgr8', 'mono8'])
def test_non_integer_downscale_is_the_area_average(source, target, encoding):
    rgb = photo(*source, seed=3)
    out = ImageDecoder(*target).decode(pack(rgb, encoding, pad=2))
    reference = area_average(expected_rgb(rgb, encoding), *target)
    difference = np.abs(out - reference)
    assert difference.max() <= 0.501 and difference.mean() < 0.3


def jpeg_loads(monkeypatch) -> list:
    """Record the size libjpeg-turbo decodes each JPEG at (after any DCT scaling)."""
    sizes = []
    original = camera_image.simplejpeg.decode_jpeg

    def decode_jpeg(*args, **kwargs):
        pixels = original(*args, **kwargs)
        sizes.append((pixels.shape[1], pixels.shape[0]))
        return pixels
    monkeypatch.setattr(camera_image.simplejpeg, 'decode_jpeg', decode_jpeg)
    return sizes


def pillow_decode(data: bytes, scale: int) -> np.ndarray:
    """Decode a JPEG with Pillow at 1/scale (its draft: libjpeg's DCT scaling), as RGB."""
    image = PilImage.open(io.BytesIO(data))
    if scale > 1:
        image.draft('RGB', (image.size[0] // scale, image.size[1] // scale))
    return np.asarray(image.convert('RGB'))


@pytest.mark.parametrize('scale', [1, 2, 4, 8])
@pytest.mark.parametrize('options', [{}, {'subsampling': 0}, {'progressive': True}])
def test_a_jpeg_decodes_to_the_pixels_pillow_gives(scale, options):
    # The strict decoder gives, at every DCT scale, the pixels Pillow's libjpeg gives (the
    # decoder of this node until 2026-12-06): a target of exactly 1/scale is no resampling.
    rgb = photo(256, 704, seed=6)
    data = encoded(rgb, 'JPEG', quality=90, **options)
    out = ImageDecoder(256 // scale, 704 // scale).decode(compressed(data, 'jpeg'))
    np.testing.assert_array_equal(out, pillow_decode(data, scale))


@pytest.mark.parametrize('options', [{}, {'progressive': True}])
@pytest.mark.parametrize('kept', [0.3, 0.6, 0.9])
def test_a_jpeg_whose_scan_is_cut_short_is_refused(options, kept):
    # A dropped packet of an MJPEG camera: the scan ends early, an EOI marker follows. libjpeg
    # only warns ("premature end of data segment") and fills the rest with gray, and Pillow
    # took it: half a picture, silently.
    data = encoded(photo(128, 176, seed=7), 'JPEG', quality=90, **options)
    start = data.index(b'\xff\xda')
    cut = data[:start + int((len(data) - start) * kept)] + b'\xff\xd9'
    assert pillow_decode(cut, 1).shape == (128, 176, 3)      # what Pillow accepted
    with pytest.raises(CameraImageError, match='corrupt jpeg: Corrupt JPEG data: premature '
                                               'end of data segment'):
        ImageDecoder(32, 44).decode(compressed(cut, 'jpeg'))


def test_a_webcams_stray_bytes_before_the_end_marker_lose_no_pixel():
    # USB webcams (Logitech C270 and others) leave a few stray bytes before the EOI marker of
    # their MJPEG frames. libjpeg skips them with a warning ("N extraneous bytes before marker
    # 0xd9") after every block has decoded; the strict decoder refused every such frame.
    buffer = io.BytesIO()
    PilImage.fromarray(photo(128, 176, seed=8)).save(buffer, 'JPEG', quality=90,
                                                     restart_marker_rows=1)
    data = buffer.getvalue()
    end = len(data) - 2
    decoder = ImageDecoder(32, 44)
    clean = decoder.decode(compressed(data, 'jpeg'))
    for stray in (1, 3, 16):
        out = decoder.decode(compressed(data[:end] + b'\x12' * stray + data[end:], 'jpeg'))
        np.testing.assert_array_equal(out, clean)
    # Many stray bytes are damage, not a camera's habit: still refused, named.
    with pytest.raises(CameraImageError, match=r'corrupt jpeg: Corrupt JPEG data: \d+ '
                                               'extraneous bytes before marker 0xd9'):
        decoder.decode(compressed(data[:end] + b'\x12' * 40 + data[end:], 'jpeg'))
    # Before a restart marker they stay refused: decoded leniently, a later scan cut short (a
    # dropped packet) came through with its rows gray (found by an independent review).
    restarts = [m.start() for m in re.finditer(rb'\xff[\xd0-\xd7]', data)]
    with pytest.raises(CameraImageError, match='extraneous bytes before marker 0xd0'):
        decoder.decode(compressed(data[:restarts[0]] + b'\x12' * 8 + data[restarts[0]:],
                                  'jpeg'))
    # And damage before the end marker's stray bytes is the first warning: refused.
    cut = data[:restarts[1] + 2 + 40] + data[restarts[2]:end] + b'\x12' * 8 + data[end:]
    with pytest.raises(CameraImageError, match='premature end of data segment'):
        decoder.decode(compressed(cut, 'jpeg'))


@pytest.mark.parametrize('source, target, drafted', [((256, 704), (64, 176), (176, 64)),
                                                     ((256, 704), (128, 352), (352, 128)),
                                                     ((240, 400), (40, 66), (100, 60))])
def test_scaled_jpeg_decodes_smaller_and_matches_the_full_decode(monkeypatch, source, target,
                                                                 drafted):
    rgb = photo(*source, seed=4)
    msg = compressed(encoded(rgb, 'JPEG', quality=90), 'bgr8; jpeg compressed bgr8')
    sizes = jpeg_loads(monkeypatch)
    scaled = ImageDecoder(*target).decode(msg)
    full = ImageDecoder(*target, scaled=False).decode(msg)
    assert sizes == [drafted, source[::-1]]
    reference = area_average(rgb, *target)
    for out in (scaled, full):
        assert np.abs(out - reference).mean() < 3
    assert np.abs(scaled.astype(int) - full).mean() < 3


def test_scaled_jpeg_takes_only_a_reduction_that_divides_both_sides(monkeypatch):
    # 320 x 178 to 40 x 22: libjpeg's 1/8 would give 40 x 23 (178 / 8 = 22.25, the last row a
    # part of a block), which the area mean stretches: a bar near the bottom moved up by half
    # an output pixel. 1/2 divides both sides: 160 x 89.
    rgb = np.full((178, 320, 3), 20, np.uint8)
    rgb[158:166] = 230
    msg = compressed(encoded(rgb, 'JPEG', quality=95), 'rgb8; jpeg compressed bgr8')
    sizes = jpeg_loads(monkeypatch)
    scaled = ImageDecoder(22, 40).decode(msg).astype(float)[..., 1]
    full = ImageDecoder(22, 40, scaled=False).decode(msg).astype(float)[..., 1]
    assert sizes == [(160, 89), (320, 178)]

    def bar_row(out):
        weight = out.mean(axis=1) - 20
        return (weight * np.arange(len(weight))).sum() / weight.sum()
    reference = area_average(rgb, 22, 40).astype(float)[..., 1]
    assert abs(bar_row(full) - bar_row(reference)) < 0.05
    assert abs(bar_row(scaled) - bar_row(reference)) < 0.05


def test_jpeg_at_target_size_and_grayscale():
    rgb = photo(32, 48, seed=5)
    data = encoded(rgb, 'JPEG', quality=100, subsampling=0)          # 4:4:4
    out = ImageDecoder(32, 48).decode(compressed(data, 'JPEG'))
    assert np.abs(out.astype(int) - rgb).mean() < 3
    gray = rgb[..., 1]
    out = ImageDecoder(16, 24).decode(compressed(encoded(gray, 'JPEG', quality=95),
                                                 'mono8; jpg compressed mono8'))
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 0] == out[..., 2]).all()
    assert np.abs(out[..., 0] - area_average(gray[..., None], 16, 24)[..., 0]).mean() < 3


def test_png_colour_types():
    rgb = photo(20, 30, seed=6)
    decoder = ImageDecoder(20, 30)
    alpha = np.arange(600, dtype=np.uint8).reshape(20, 30)
    rgba = np.concatenate([rgb, alpha[..., None]], axis=-1)
    for data in (encoded(rgb, 'PNG'), encoded(rgba, 'PNG'), png_file(rgb, 2, 8)):
        msg = compressed(data, 'rgb8; png compressed bgr8')
        np.testing.assert_array_equal(decoder.decode(msg), rgb)
    gray = rgb[..., 0]
    for data in (encoded(gray, 'PNG'), png_file(np.stack([gray, alpha], -1), 4, 8)):
        np.testing.assert_array_equal(decoder.decode(compressed(data, 'png')),
                                      np.repeat(gray[..., None], 3, axis=-1))
    # 16-bit samples: the high byte.
    wide = np.random.default_rng(7).integers(0, 1 << 16, (20, 30, 3), dtype=np.uint16)
    np.testing.assert_array_equal(decoder.decode(compressed(png_file(wide, 2, 16), 'png')),
                                  wide >> 8)
    np.testing.assert_array_equal(
        decoder.decode(compressed(png_file(wide[..., 0], 0, 16), 'png')),
        np.repeat((wide[..., :1] >> 8), 3, axis=-1))


def test_png_palette_is_looked_up():
    palette = np.random.default_rng(8).integers(0, 256, (256, 3), dtype=np.uint8)
    index = np.random.default_rng(9).integers(0, 256, (10, 14), dtype=np.uint8)
    image = PilImage.fromarray(index, 'P')
    image.putpalette(palette.ravel().tolist())
    image.info['transparency'] = 3
    buffer = io.BytesIO()
    image.save(buffer, 'PNG')
    out = ImageDecoder(5, 7).decode(compressed(buffer.getvalue(), 'png'))
    np.testing.assert_array_equal(out, block_mean(palette[index], 2))


def test_out_is_written_in_place_and_returned():
    rgb = photo(16, 24, seed=10)
    buffer = np.zeros(8 * 12 * 3 + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    out = buffer[start:start + 8 * 12 * 3].reshape(8, 12, 3)
    decoder = ImageDecoder(8, 12)
    assert decoder.decode(pack(rgb, 'rgba8'), out=out) is out
    np.testing.assert_array_equal(out, block_mean(rgb, 2))
    assert decoder.decode(compressed(encoded(rgb, 'PNG'), 'png'), out=out) is out
    np.testing.assert_array_equal(out, block_mean(rgb, 2))
    # A refused image leaves out as it was.
    out[:] = 7
    with pytest.raises(CameraImageError):
        decoder.decode(compressed(encoded(rgb, 'JPEG')[:300], 'jpeg'), out=out)
    assert (out == 7).all()
    for wrong in (np.zeros((8, 12, 4), np.uint8), np.zeros((8, 12, 3), np.float32)):
        with pytest.raises(ValueError, match='expected uint8'):
            decoder.decode(pack(rgb, 'rgb8'), out=wrong)


def test_rosbags_messages_also_through_cdr():
    types = TYPESTORE.types
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=1, nanosec=2), frame_id='camera')
    rgb = photo(12, 16, seed=11)
    raw = pack(rgb, 'bgr8', pad=4)
    image = types['sensor_msgs/msg/Image'](
        header=header, height=raw.height, width=raw.width, encoding='bgr8', is_bigendian=0,
        step=raw.step, data=np.frombuffer(raw.data, np.uint8).copy())
    png = types['sensor_msgs/msg/CompressedImage'](
        header=header, format='rgb8; png compressed bgr8',
        data=np.frombuffer(encoded(rgb, 'PNG'), np.uint8).copy())
    decoder = ImageDecoder(12, 16)
    for name, msg in (('sensor_msgs/msg/Image', image),
                      ('sensor_msgs/msg/CompressedImage', png)):
        received = TYPESTORE.deserialize_cdr(TYPESTORE.serialize_cdr(msg, name), name)
        for each in (msg, received):
            np.testing.assert_array_equal(decoder.decode(each), rgb)


def test_rclpy_messages():
    from sensor_msgs.msg import CompressedImage, Image
    rgb = photo(12, 16, seed=12)
    raw = pack(rgb, 'rgba8', pad=2)
    msg = Image(height=raw.height, width=raw.width, encoding='rgba8', step=raw.step,
                data=raw.data)
    decoder = ImageDecoder(6, 8)
    np.testing.assert_array_equal(decoder.decode(msg), block_mean(rgb, 2))
    msg = CompressedImage(format='png', data=encoded(rgb, 'PNG'))
    np.testing.assert_array_equal(decoder.decode(msg), block_mean(rgb, 2))


JPEG = encoded(photo(64, 96), 'JPEG', quality=90)
PNG = encoded(photo(64, 96), 'PNG')
RAW = pack(photo(64, 96), 'rgb8')


def raw_with(**fields) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(RAW), **fields})


@pytest.mark.parametrize('msg, message', [
    (raw_with(encoding='nv12'),
     "encoding 'nv12' is not one of rgb8, bgr8, rgba8, bgra8, mono8, rgb16, "),
    (raw_with(encoding='32FC1'), "encoding '32FC1' is not one of"),
    (raw_with(width=0), 'width 0, height 64: the image size must be in 1..65536'),
    (raw_with(height=-2), 'width 96, height -2: the image size must be in'),
    (raw_with(step=200), 'step 200 < width 96 * 3 bytes per pixel (rgb8) = 288'),
    (raw_with(data=RAW.data[:-1]), 'data has 18431 bytes, expected step 288 * height 64 = 18432'),
    (raw_with(data=object()), 'data of type object is not a byte buffer'),
    (raw_with(step=None), 'step None is not an integer'),
    (SimpleNamespace(format='jpeg'), 'data of type NoneType is not a byte buffer'),
    (raw_with(width=64), 'width 64, height 64: scales to the 48 x 32 encoder input by 0.75 in '
                         'x but 0.5 in y (cameras.<name>.width and height times encoder.stride '
                         'must have its aspect ratio)'),
    (raw_with(width=80, height=20, step=240),
     'width 80, height 20: smaller than the 48 x 32 encoder input'),
    (compressed(JPEG, 'tiff'), "format 'tiff': names neither jpeg (jpg) nor png"),
    (compressed(JPEG, 'jpegxl'), "format 'jpegxl': names neither"),
    (compressed(JPEG, 'png; jpeg'), "format 'png; jpeg': names both jpeg and png"),
    (compressed(JPEG, None), 'format None is not a string'),
    (compressed(PNG, '16UC1; compressedDepth png'), 'compressedDepth'),
    (compressed(JPEG, 'png'), 'format names png, but the data starts with ff d8 ff e0 00 10 4a '
                              '46, not the png signature 89 50 4e 47 0d 0a 1a 0a'),
    (compressed(PNG, 'jpeg'), 'format names jpeg, but the data starts with 89 50 4e, not the '
                              'jpeg signature ff d8 ff'),
    (compressed(b'', 'jpeg'), 'data is empty'),
    (compressed(JPEG[:len(JPEG) // 2], 'jpeg'), 'corrupt jpeg: Premature end of JPEG file'),
    (compressed(PNG[:len(PNG) // 2], 'png'), 'corrupt png: '),
    (compressed(np.random.default_rng(0).bytes(5000), 'jpeg'), 'format names jpeg, but'),
    (compressed(b'\xff\xd8\xff' + np.random.default_rng(0).bytes(5000), 'jpeg'),
     'corrupt jpeg: '),
    (compressed(b'\x89PNG\r\n\x1a\n' + np.random.default_rng(0).bytes(5000), 'png'),
     'corrupt png: '),
    (compressed(with_jpeg_size(JPEG, 70000 // 2, 80000 // 2), 'jpeg'),   # fits, 1.4 Gpx
     'jpeg header: Image size (1400000000 pixels) exceeds limit'),
    (compressed(with_jpeg_size(JPEG, 9000, 8000), 'jpeg'),
     f'jpeg header: 9000 x 8000 = 72000000 pixels, over the {MAX_PIXELS}'),
    (compressed(png_file(np.zeros((1, 1)), 0, 8, size=(65537, 1)), 'png'),
     'png header: width 65537, height 1: the image size must be in 1..65536'),
    (compressed(with_jpeg_size(JPEG, 90, 64), 'jpeg'),
     'jpeg header: width 90, height 64: scales to the 48 x 32 encoder input by 0.533 in x but '
     '0.5 in y (cameras.<name>.width and height times encoder.stride must have its aspect '
     'ratio)'),
    (SimpleNamespace(data=b''), 'SimpleNamespace has neither encoding (an Image) nor format'),
])
def test_unusable_images_are_refused_naming_the_problem(msg, message):
    with pytest.raises(CameraImageError) as raised:
        ImageDecoder(32, 48).decode(msg)
    assert message in str(raised.value)
    assert '\n' not in str(raised.value)
    assert isinstance(raised.value, FeatureMapError)


def test_a_small_file_claiming_a_huge_image_is_refused_before_decoding(monkeypatch):
    sizes = jpeg_loads(monkeypatch)
    bomb = with_jpeg_size(JPEG, 12000, 8000)                 # 96 Mpx: Pillow only warns
    with pytest.warns(PilImage.DecompressionBombWarning):
        with pytest.raises(CameraImageError, match='96000000 pixels, over the'):
            ImageDecoder(32, 48).decode(compressed(bomb, 'jpeg'))
    assert sizes == []


def test_a_jpeg_of_endless_scans_is_refused_before_decoding(monkeypatch):
    progressive = encoded(photo(32, 48, seed=9), 'JPEG', quality=90, progressive=True)
    decoder = ImageDecoder(32, 48)
    assert progressive.count(b'\xff\xda') > 1                    # a few scans: decoded
    assert decoder.decode(compressed(progressive, 'jpeg')).shape == (32, 48, 3)
    last = progressive.rindex(b'\xff\xda')                     # the last scan, repeated
    scan = progressive[last:-2]
    bomb = progressive[:-2] + scan * (MAX_JPEG_SCANS + 1 - progressive.count(b'\xff\xda')) \
        + b'\xff\xd9'
    sizes = jpeg_loads(monkeypatch)
    with pytest.raises(CameraImageError, match=f'{MAX_JPEG_SCANS + 1} scans, over the'):
        decoder.decode(compressed(bomb, 'jpeg'))
    assert sizes == []


def test_16_bit_gray_read_as_mode_i_is_the_high_byte(monkeypatch):
    # Pillow before 10.3 opens a 16-bit gray PNG in mode I (int32): the same high byte.
    wide = np.random.default_rng(10).integers(0, 1 << 16, (20, 30), dtype=np.uint16)
    load = ImageFile.ImageFile.load

    def as_mode_i(image):
        done = load(image)
        if image.mode == 'I;16':
            image.im = image.im.convert('I')
            image._mode = 'I'
        return done
    monkeypatch.setattr(ImageFile.ImageFile, 'load', as_mode_i)
    out = ImageDecoder(20, 30).decode(compressed(png_file(wide, 0, 16), 'png'))
    np.testing.assert_array_equal(out, np.repeat((wide[..., None] >> 8).astype(np.uint8), 3, -1))


def test_truncated_images_are_not_loaded_silently(monkeypatch):
    # Pillow decodes PNG (and JPEG, without it, would not see the flag: libjpeg-turbo's own).
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', True)
    with pytest.raises(CameraImageError, match='LOAD_TRUNCATED_IMAGES is set'):
        ImageDecoder(32, 48).decode(compressed(PNG[:len(PNG) // 2], 'png'))
    with pytest.raises(CameraImageError, match='corrupt jpeg: Premature end of JPEG file'):
        ImageDecoder(32, 48).decode(compressed(JPEG[:len(JPEG) // 2], 'jpeg'))


def test_mutated_files_decode_or_raise_camera_image_errors_only():
    rng = np.random.default_rng(13)
    decoder = ImageDecoder(16, 24)
    refused = 0
    for data, format_ in ((JPEG, 'jpeg'), (PNG, 'png')):
        for _ in range(150):
            mutated = bytearray(data[:rng.integers(1, len(data) + 1)])
            for at in rng.integers(0, min(len(mutated), 600), rng.integers(0, 4)):
                mutated[at] = rng.integers(256)
            try:
                out = decoder.decode(compressed(bytes(mutated), format_))
            except CameraImageError:
                refused += 1
            else:
                assert out.shape == (16, 24, 3)
    assert refused > 100


def test_constants_and_bad_targets():
    # sensor_msgs/image_encodings.h's colour, 16-bit, Bayer and 4:2:2 names.
    assert set(IMAGE_ENCODINGS) == {
        *EIGHT_BIT, 'rgb16', 'bgr16', 'rgba16', 'bgra16', 'mono16', 'yuv422', 'yuv422_yuy2',
        'uyvy', 'yuyv', *(f'bayer_{tile}{bits}' for tile in ('rggb', 'bggr', 'gbrg', 'grbg')
                          for bits in (8, 16))}
    assert COMPRESSED_FORMATS == ('jpeg', 'png')
    for height, width in ((0, 10), (10, 70000), (2.5, 4)):
        with pytest.raises(ValueError, match='must be an integer in 1..65536'):
            ImageDecoder(height, width)


def test_the_scan_count_finds_ff_da_at_every_offset_as_bytes_count_does():
    rng = np.random.default_rng(8)
    for size in list(range(1, 12)) + [99, 1000]:
        for _ in range(40):
            data = rng.choice(np.array([0xFF, 0xDA, 0x00, 0xD9], np.uint8), size=size)
            # bytes.count counts non-overlapping pairs; FF DA cannot overlap itself.
            assert camera_image._scan_markers(data) == data.tobytes().count(b'\xff\xda')
