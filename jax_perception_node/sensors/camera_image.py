"""
Camera sensor_msgs/Image and CompressedImage -> uint8[H_i, W_i, 3] RGB at the encoder's size.

``ImageDecoder(H_i, W_i).decode(msg)`` returns the image the encoder reads: H_i x W_i pixels,
channel-last R, G, B, uint8, C-contiguous, written into a caller's buffer when one is given.
Message fields are read by attribute (rclpy and ``rosbags`` messages both work): an Image has
``encoding``, ``height``, ``width``, ``step``, ``is_bigendian`` and ``data``; a CompressedImage
``format`` and ``data``.

Image encodings: ``IMAGE_ENCODINGS``. Rows are read ``step`` bytes apart (row padding skipped), B,
G, R reordered, alpha dropped (not composited), mono replicated to three channels. 16-bit encodings
(rgb16 ... mono16, bayer_*16) are read as their high byte, by ``is_bigendian`` (as cv_bridge scales
them to 8 bits). Bayer mosaics (bayer_rggb, bggr, gbrg, grbg) are demosaicked at half size, one RGB
pixel a 2 x 2 tile (so they must be at least twice the target); 4:2:2 YUV (yuv422 = UYVY,
yuv422_yuy2 = YUYV) is converted as OpenCV's BT.601 video range. CompressedImage formats: JPEG or
PNG, named anywhere in ``format`` as image_transport writes it ('jpeg', 'bgr8; jpeg compressed
bgr8', 'rgb8; png compressed bgr8'; case-insensitive, 'jpg' too). compressed_image_transport
converts colour images (rgb, bgr, rgba, bgra) to true colours and compresses mono as it is, so the
file holds the picture whatever encodings ``format`` names; but it compresses any other image as it
is too: a Bayer mosaic (``format`` 'bayer_rggb8; jpeg compressed ') is demosaicked after decoding
as a raw one is (at half size, never DCT-scaled: that would blend the tiles), and anything else
named before the ';' (a depth 16UC1, 8UC3, yuv422) is refused by name. The file's first bytes must
be the named format's signature. The size is read from the file's header and checked before
anything is decoded (at most ``camera.MAX_IMAGE_SIZE`` a side and ``MAX_PIXELS`` in all: a small
file can claim a huge image). JPEG is decoded by libjpeg-turbo (simplejpeg), strictly: a warning (a
scan cut short and closed by an EOI marker, as a dropped packet of an MJPEG camera leaves, which
libjpeg fills with gray; a corrupt Huffman code) refuses the image, except up to
``MAX_STRAY_BYTES`` stray bytes before the EOI marker (as USB webcams pad their MJPEG frames),
libjpeg's first warning only once every block has decoded cleanly: that image is taken. A CMYK or
YCCK JPEG (no camera sends one) is decoded and converted by Pillow, whose libjpeg only warns. With
``scaled`` a JPEG is decoded at 1/2, 1/4 or 1/8 of its size in the DCT: the largest reduction that
divides both sides and keeps the image at least the target size (a reduction that does not divide a
side gives a last row or column of a part of a block, which the area mean would stretch: 1600 x 900
at 1/8 is 200 x 113, a bar 0.5 output pixels off at the bottom). PNG of any colour type, 16-bit
samples reduced to their high byte (as Pillow does for 16-bit colour). EXIF orientation is not
applied.

Scaling to the target is area averaging (``image_scaling.fit_array``). The factors in x and y
must agree within ``camera.SCALE_TOLERANCE`` (relative, as for ``scale_camera_info``): anything
else is another camera's image or a wrong pairing. Every unusable message raises
:class:`CameraImageError`, naming the field and the problem, and leaves the caller's buffer as
it was.
"""

import functools
import io
import re
import struct

import numpy as np
from PIL import Image, ImageFile
import simplejpeg

from .camera import FeatureMapError, MAX_IMAGE_SIZE, SCALE_TOLERANCE
from .cloud import byte_view
from .image_scaling import area_float, fit_array

__all__ = ['CameraImageError', 'COMPRESSED_FORMATS', 'IMAGE_ENCODINGS', 'ImageDecoder',
           'MAX_PIXELS']


class CameraImageError(FeatureMapError):
    """A camera Image or CompressedImage cannot be used; the message names the problem."""


# encoding -> (samples a pixel, bytes a sample, layout). Layout: the source sample of R, G and
# B; a Bayer tile's colours, row by row ('rggb': R G over G B); or a 4:2:2 macropixel's byte
# order (two pixels, 'uyvy': U Y0 V Y1).
_ENCODINGS = {
    'rgb8': (3, 1, (0, 1, 2)), 'bgr8': (3, 1, (2, 1, 0)),
    'rgba8': (4, 1, (0, 1, 2)), 'bgra8': (4, 1, (2, 1, 0)), 'mono8': (1, 1, (0, 0, 0)),
    'rgb16': (3, 2, (0, 1, 2)), 'bgr16': (3, 2, (2, 1, 0)),
    'rgba16': (4, 2, (0, 1, 2)), 'bgra16': (4, 2, (2, 1, 0)), 'mono16': (1, 2, (0, 0, 0)),
    **{f'bayer_{tile}{bits}': (1, bits // 8, tile)
       for bits in (8, 16) for tile in ('rggb', 'bggr', 'gbrg', 'grbg')},
    # ROS's names (image_encodings.h): yuv422 is UYVY, yuv422_yuy2 is YUYV; newer ROS names
    # them uyvy and yuyv.
    'yuv422': (2, 1, 'uyvy'), 'uyvy': (2, 1, 'uyvy'),
    'yuv422_yuy2': (2, 1, 'yuyv'), 'yuyv': (2, 1, 'yuyv'),
}
IMAGE_ENCODINGS = tuple(_ENCODINGS)
# Encodings compressed_image_transport compresses as a picture (colour converted, mono as is).
_PICTURES = frozenset(name for name, (_, _, layout) in _ENCODINGS.items()
                      if isinstance(layout, tuple))
# YUV -> RGB as OpenCV's COLOR_YUV2RGB_UYVY (what cv_bridge converts with): ITU-R BT.601,
# video range (Y from 16, 1.164 a level), in 20-bit fixed point, rounded.
_BT601_SHIFT = 20
_BT601 = {'y': 1220542, 'v_r': 1673527, 'v_g': -852492, 'u_g': -409993, 'u_b': 2116026}
COMPRESSED_FORMATS = ('jpeg', 'png')
# Pixels a compressed header may claim (8192 x 8192, 192 MiB as RGB): the header is all a bomb
# needs, and Pillow's own limit (MAX_IMAGE_PIXELS, 89 Mpx) only warns below twice its value.
MAX_PIXELS = 1 << 26
# Scans a JPEG may have (SOS markers, FF DA: entropy-coded data stuffs every FF, so the pair
# only starts a scan; an EXIF thumbnail adds its own). A progressive JPEG has about 10; libjpeg
# decodes any number, repeats only warned about, each a pass over the whole claimed image: a
# 98 KB file of empty scans took 6.6 s of CPU.
MAX_JPEG_SCANS = 64

# Whole words: 'jpeg' / 'jpg' / 'png', not inside another word ('pngx'); 'compressedDepth'
# (depth images: a 12-byte header precedes the PNG) is refused by name.
_FORMAT_WORD = re.compile(r'(?<![a-z0-9])(jpe?g|png)(?![a-z0-9])')
_SIGNATURES = {'jpeg': b'\xff\xd8\xff', 'png': b'\x89PNG\r\n\x1a\n'}
_PIL_FORMATS = {'jpeg': 'JPEG', 'png': 'PNG'}
_OBJECT_REPR = re.compile(r'<[^<>]* object at 0x[0-9a-fA-F]+>')
# libjpeg's one warning that loses no pixel: a few stray bytes before the EOI marker, which
# USB webcams (Logitech C270 and others) leave in their MJPEG frames. Strict decoding stops at
# the first warning, so this one, at the very end, means every block decoded cleanly. Before a
# restart marker it is refused: the lenient decode would hide any later warning (damage after
# the stray bytes, filled with gray). Many stray bytes are damage, not a camera's habit.
_STRAY_BYTES = re.compile(r'(\d+) extraneous bytes before marker 0xd9\b')
MAX_STRAY_BYTES = 16
# What Pillow raises for data it cannot read: OSError (truncated, broken data stream,
# UnidentifiedImageError), SyntaxError (broken PNG chunks, not a JPEG), ValueError, EOFError,
# struct.error (a header field cut short), DecompressionBombError (its own pixel limit).
_PIL_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, KeyError,
               struct.error, Image.DecompressionBombError)


def _check_size(width: int, height: int, target: tuple[int, int], what: str = '') -> None:
    """Refuse a size out of bounds, smaller than the target or of another aspect ratio."""
    target_height, target_width = target
    if width <= 0 or height <= 0 or max(width, height) > MAX_IMAGE_SIZE:
        raise CameraImageError(f'{what}width {width}, height {height}: the image size must be '
                               f'in 1..{MAX_IMAGE_SIZE}')
    if width < target_width or height < target_height:
        raise CameraImageError(f'{what}width {width}, height {height}: smaller than the '
                               f'{target_width} x {target_height} encoder input (images are '
                               'never scaled up)')
    scale_x, scale_y = target_width / width, target_height / height
    if abs(scale_x - scale_y) > SCALE_TOLERANCE * max(scale_x, scale_y):
        raise CameraImageError(
            f'{what}width {width}, height {height}: scales to the {target_width} x '
            f'{target_height} encoder input by {scale_x:.3g} in x but {scale_y:.3g} in y '
            '(cameras.<name>.width and height times encoder.stride must have its aspect ratio)')


def _format_kind(format_) -> tuple[str, str | None]:
    """CompressedImage.format -> ('jpeg' or 'png', the Bayer tile of a mosaic, else None)."""
    if not isinstance(format_, str):
        raise CameraImageError(f'format {format_!r} is not a string')
    lowered = format_.lower()
    if 'compresseddepth' in lowered:
        raise CameraImageError(f'format {format_!r}: compressedDepth (a depth image behind a '
                               '12-byte header) is not supported')
    kinds = {'jpeg' if word.startswith('j') else 'png'
             for word in _FORMAT_WORD.findall(lowered)}
    if len(kinds) != 1:
        problem = 'names both jpeg and png' if kinds else 'names neither jpeg (jpg) nor png'
        raise CameraImageError(f'format {format_!r}: {problem}')
    source = lowered.split(';', 1)[0].strip() if ';' in lowered else ''
    if not source or source in _PICTURES:
        return kinds.pop(), None
    if source.startswith('bayer_') and source in _ENCODINGS:
        return kinds.pop(), _ENCODINGS[source][2]
    raise CameraImageError(f'format {format_!r}: the compressed image is {source}, not a camera '
                           'picture (rgb, bgr, rgba, bgra, mono or bayer)')


def _open_compressed(data: np.ndarray, kind: str, target: tuple[int, int],
                     mosaic: bool = False) -> Image.Image:
    """Open JPEG or PNG bytes (header only) and check the size they claim (a mosaic's halved)."""
    signature = _SIGNATURES[kind]
    if data.size == 0:
        raise CameraImageError(f'data is empty, expected a {kind} file')
    head = data[:len(signature)].tobytes()
    if head != signature:
        raise CameraImageError(f'format names {kind}, but the data starts with {head.hex(" ")}, '
                               f'not the {kind} signature {signature.hex(" ")}')
    try:
        # formats=: only that plugin reads the bytes, no guessing among all of Pillow's.
        image = Image.open(io.BytesIO(data), formats=[_PIL_FORMATS[kind]])
    except Image.DecompressionBombError as error:
        # Pillow's own limit, twice Image.MAX_IMAGE_PIXELS (between the two it only warns,
        # DecompressionBombWarning, and MAX_PIXELS below refuses).
        raise CameraImageError(f'{kind} header: {_reason(error)}') from None
    except _PIL_ERRORS as error:
        raise CameraImageError(f'corrupt {kind}: {_reason(error)}') from None
    width, height = image.size
    scans = _scan_markers(data) if kind == 'jpeg' else 0
    if scans > MAX_JPEG_SCANS:
        raise CameraImageError(f'jpeg: {scans} scans, over the {MAX_JPEG_SCANS} a JPEG may have')
    if width * height > MAX_PIXELS:
        raise CameraImageError(f'{kind} header: {width} x {height} = {width * height} pixels, '
                               f'over the {MAX_PIXELS} a compressed image may have')
    if mosaic and (width % 2 or height % 2):
        raise CameraImageError(f'{kind} header: width {width}, height {height}: a Bayer mosaic '
                               'has an even width and height')
    _check_size(width // 2 if mosaic else width, height // 2 if mosaic else height, target,
                f'{kind} header: ' + ('Bayer mosaic demosaicked at half size from '
                                      if mosaic else ''))
    return image


def _scan_markers(data: np.ndarray) -> int:
    """
    Count the bytes FF DA (a JPEG's start-of-scan marker) at any offset of uint8 ``data``.

    As little-endian uint16 pairs from the even and from the odd offsets: 0.030 ms on a
    200 KB 1600 x 900 JPEG, against 0.057 for the bytes after each FF and 0.20 for
    ``bytes.count``, which also holds the GIL all along (2-core AMD EPYC, 2026-12-06).
    """
    end = data.size
    even = data[:end - end % 2].view('<u2')
    odd = data[1:end - (end - 1) % 2].view('<u2')
    return int(np.count_nonzero(even == 0xDAFF)) + int(np.count_nonzero(odd == 0xDAFF))


def _reason(error: BaseException) -> str:
    """Pillow's reason on one line, with the exception type when it says nothing."""
    # 'cannot identify image file <_io.BytesIO object at 0x7f...>': the address says nothing.
    text = ' '.join(_OBJECT_REPR.sub('', str(error)).split())
    return text or type(error).__name__


def _decoded_pixels(image: Image.Image, data: np.ndarray, kind: str, target: tuple[int, int],
                    scaled: bool) -> np.ndarray:
    """Decode an opened JPEG or PNG (``data``, its bytes); return uint8[H, W] or [H, W, 3]."""
    width, height = image.size
    scale = next((s for s in (8, 4, 2) if width % s == 0 and height % s == 0
                  and width // s >= target[1] and height // s >= target[0]), 1)
    scale = scale if kind == 'jpeg' and scaled else 1
    if kind == 'jpeg' and image.mode in ('L', 'RGB'):
        # Asked for at least 1/scale of each side at a reduction of at least scale: exactly
        # 1/scale, the pixels Pillow's draft gives (libjpeg-turbo both).
        decode = functools.partial(simplejpeg.decode_jpeg, data,
                                   'GRAY' if image.mode == 'L' else 'RGB',
                                   min_height=height // scale, min_width=width // scale,
                                   min_factor=scale)
        try:
            pixels = decode(strict=True)
        except ValueError as error:     # libjpeg's error, or in strict mode its warning
            stray = _STRAY_BYTES.search(str(error))
            if stray is None or int(stray.group(1)) > MAX_STRAY_BYTES:
                raise CameraImageError(f'corrupt jpeg: {_reason(error)}') from None
            try:
                pixels = decode(strict=False)
            except ValueError as error:
                raise CameraImageError(f'corrupt jpeg: {_reason(error)}') from None
        return pixels[:, :, 0] if image.mode == 'L' else pixels
    if scale > 1:
        # libjpeg scales in the DCT (most of the decode work is never done); asked for exactly
        # 1/scale of each side, Pillow's draft takes that scale.
        image.draft('RGB', (width // scale, height // scale))
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # Someone set it process-wide: a truncated file would load as gray, silently.
        raise CameraImageError('PIL.ImageFile.LOAD_TRUNCATED_IMAGES is set: truncated '
                               f'{kind} images could not be detected; leave it False')
    try:
        image.load()
        if image.mode in ('I;16', 'I'):
            # 16-bit gray (mode I before Pillow 10.3, as ROS Jazzy's apt python3-pil 10.2):
            # high byte, as Pillow reads 16-bit RGB (convert() would clip at 255).
            return (np.asarray(image) >> 8).astype(np.uint8)
        if image.mode not in ('L', 'RGB'):
            # P (palette), 1, LA, RGBA, CMYK: transparency is dropped, not composited.
            image = image.convert('L' if image.mode in ('1', 'LA') else 'RGB')
        return np.asarray(image)
    except _PIL_ERRORS as error:
        raise CameraImageError(f'corrupt {kind}: {_reason(error)}') from None


class ImageDecoder:
    """
    Decode camera Images and CompressedImages to the encoder's H_i x W_i RGB input.

    ``height`` x ``width`` is the target H_i x W_i (the image encoder's input), each in
    1..MAX_IMAGE_SIZE. ``scaled`` lets libjpeg decode a JPEG at 1/2, 1/4 or 1/8 size when that
    is still at least the target: much faster, and different from a full decode only by JPEG's
    own rounding. A decoder holds no state beyond these, so threads may share one.
    """

    def __init__(self, height: int, width: int, scaled: bool = True):
        for name, value in (('height', height), ('width', width)):
            if int(value) != value or not 1 <= value <= MAX_IMAGE_SIZE:
                raise ValueError(f'{name} {value}: must be an integer in 1..{MAX_IMAGE_SIZE}')
        self.height, self.width, self.scaled = int(height), int(width), bool(scaled)

    def decode(self, msg, out: np.ndarray | None = None) -> np.ndarray:
        """
        Decode an Image or CompressedImage to uint8[H_i, W_i, 3] RGB.

        Args
        ----
        msg: sensor_msgs/Image (has ``encoding``) or sensor_msgs/CompressedImage (has
            ``format``), rclpy or rosbags or any object with those attributes.
        out: a writable uint8[H_i, W_i, 3] to write into (e.g. preallocated and aligned);
            None: a new C-contiguous array. ``out`` is written only when decoding succeeds.

        Returns
        -------
        ``out`` (or the new array), the image at the target size.

        Raises
        ------
        CameraImageError: the message cannot be used (names the field and the problem).
        ValueError: ``out`` has the wrong shape or dtype (a caller's error, not the image's).

        """
        target = (self.height, self.width)
        if out is None:
            out = np.empty((self.height, self.width, 3), np.uint8)
        elif out.shape != (self.height, self.width, 3) or out.dtype != np.uint8:
            raise ValueError(f'out is {out.dtype}{list(out.shape)}, expected uint8'
                             f'[{self.height}, {self.width}, 3]')
        if hasattr(msg, 'encoding'):
            fit_array(_raw_pixels(msg, target), out)
            return out
        if not hasattr(msg, 'format'):
            raise CameraImageError(f'{type(msg).__name__} has neither encoding (an Image) nor '
                                   'format (a CompressedImage)')
        kind, tile = _format_kind(msg.format)
        data = byte_view(getattr(msg, 'data', None), CameraImageError)
        image = _open_compressed(data, kind, target, mosaic=tile is not None)
        pixels = _decoded_pixels(image, data, kind, target, self.scaled and tile is None)
        if tile is not None:
            if pixels.ndim != 2:
                raise CameraImageError(f'format {msg.format!r}: a Bayer mosaic is one channel, '
                                       f'the {kind} holds {pixels.shape[2]}')
            pixels = _bayer_rgb(pixels, tile)
        fit_array(pixels[:, :, None] if pixels.ndim == 2 else pixels, out)
        return out


def _integer(msg, name: str) -> int:
    """Read an integer field as a Python int (NumPy scalars would wrap around in products)."""
    value = getattr(msg, name, None)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise CameraImageError(f'{name} {value!r} is not an integer') from None


def _raw_pixels(msg, target: tuple[int, int]) -> np.ndarray:
    """Check an Image; return a uint8[H', W', 3] (mono: [H', W', 1]) RGB view or array of it."""
    encoding = msg.encoding
    if not isinstance(encoding, str) or encoding not in _ENCODINGS:
        raise CameraImageError(f'encoding {encoding!r} is not one of '
                               f'{", ".join(IMAGE_ENCODINGS)}')
    samples, sample_bytes, layout = _ENCODINGS[encoding]
    height, width, step = (_integer(msg, name) for name in ('height', 'width', 'step'))
    yuv = layout in ('uyvy', 'yuyv')
    bayer = isinstance(layout, str) and not yuv
    if yuv and width % 2:
        raise CameraImageError(f'width {width}: a 4:2:2 image ({encoding}) has an even width')
    if bayer and (width % 2 or height % 2):
        raise CameraImageError(f'width {width}, height {height}: a Bayer image ({encoding}) '
                               'has an even width and height')
    # A Bayer image is demosaicked at half its size (one RGB pixel a 2 x 2 tile).
    _check_size(width // 2 if bayer else width, height // 2 if bayer else height, target,
                f'{encoding} demosaicked at half size from ' if bayer else '')
    pixel_bytes = samples * sample_bytes
    row_bytes = width * pixel_bytes
    if step < row_bytes:
        raise CameraImageError(f'step {step} < width {width} * {pixel_bytes} bytes per pixel '
                               f'({encoding}) = {row_bytes}')
    raw = byte_view(getattr(msg, 'data', None), CameraImageError)
    if raw.size < step * height:
        raise CameraImageError(f'data has {raw.size} bytes, expected step {step} * height '
                               f'{height} = {step * height}')
    # 16-bit samples: their high byte (as cv_bridge scales 16 to 8 bits), a strided view.
    first = 0
    if sample_bytes == 2:
        first = 0 if _integer(msg, 'is_bigendian') else 1
    pixels = np.ndarray((height, width, samples), np.uint8, buffer=raw, offset=first,
                        strides=(step, pixel_bytes, sample_bytes))
    if yuv:
        return _yuv422_rgb(pixels, layout, target)
    if bayer:
        return _bayer_rgb(pixels[:, :, 0], layout)
    if samples == 1:
        return pixels
    # Basic slices only, so still a view: R, G, B forward or B, G, R backward.
    return pixels[:, :, :3] if layout == (0, 1, 2) else pixels[:, :, 2::-1]


def _bayer_rgb(mosaic: np.ndarray, tile: str) -> np.ndarray:
    """
    Demosaic uint8[H, W] at half size: uint8[H / 2, W / 2, 3], one pixel a 2 x 2 tile.

    R and B are the tile's own samples, G the mean of its two, half rounded up. Each output
    pixel covers its tile's area (so CameraInfo scales to it as to any half-size image); R and
    B sit half a pixel off its centre, as in every binning demosaic.
    """
    spots = {colour: [] for colour in 'rgb'}
    for at, colour in enumerate(tile):
        spots[colour].append(mosaic[at // 2::2, at % 2::2])
    rgb = np.empty((*spots['r'][0].shape, 3), np.uint8)
    rgb[:, :, 0] = spots['r'][0]
    green = spots['g'][0].astype(np.uint16)
    green += spots['g'][1]
    green += 1
    green >>= 1
    rgb[:, :, 1] = green
    rgb[:, :, 2] = spots['b'][0]
    return rgb


def _yuv422_rgb(pixels: np.ndarray, order: str, target: tuple[int, int]) -> np.ndarray:
    """
    Convert 4:2:2 uint8[H, W, 2] (UYVY or YUYV) to uint8[H_i, W_i, 3] RGB at the target size.

    Y, U and V are area-averaged to the target first (U and V each cover their two pixels),
    then converted as OpenCV (and cv_bridge) do: BT.601 video range, Y below 16 black, rounded
    half up and clipped. Averaging first is the same as converting first except in a block
    where some pixels clip (black or saturated), and costs a third of it: a 1080p frame is
    4 M samples to average, not 6 M to convert and average.
    """
    height, width = pixels.shape[:2]
    luma_at = 1 if order == 'uyvy' else 0
    luma = pixels[:, :, luma_at:luma_at + 1]
    chroma = pixels[:, :, 1 - luma_at]                  # U on even pixels, V on odd
    row, column = chroma.strides
    uv = np.lib.stride_tricks.as_strided(chroma, (height, width // 2, 2),
                                         (row, 2 * column, column), writeable=False)
    y, uv = area_float(luma, target), area_float(uv, target) - np.float32(128)
    y -= np.float32(16)
    np.maximum(y, 0, out=y)
    y *= np.float32(_BT601['y'] / (1 << _BT601_SHIFT))
    y += np.float32(0.5)                                # rounded half up, by the floor below
    rgb = np.empty((*target, 3), np.float32)
    weights = {name: np.float32(value / (1 << _BT601_SHIFT)) for name, value in _BT601.items()}
    u, v = uv[:, :, 0], uv[:, :, 1]
    rgb[:, :, 0] = y[:, :, 0] + weights['v_r'] * v
    rgb[:, :, 1] = y[:, :, 0] + weights['u_g'] * u + weights['v_g'] * v
    rgb[:, :, 2] = y[:, :, 0] + weights['u_b'] * u
    np.floor(rgb, out=rgb)
    np.clip(rgb, 0, 255, out=rgb)
    return rgb.astype(np.uint8)
