"""
Camera feature maps as sensor_msgs/Image <-> float32 arrays; CameraInfo intrinsics; no ROS.

A feature map travels as an Image with encoding ``32FC<C>``: ``height`` x ``width`` pixels of
``C`` float32 channels, row-major and channel-last, rows ``step`` bytes apart. Intrinsics come
from the parameters or from a sensor_msgs/CameraInfo at image resolution, scaled here to the
feature map together with the lens distortion (``Intrinsics``). Message fields are read by
attribute, so rclpy and ``rosbags`` messages both work.

CameraInfo bounds: every value is checked before it can become a float32 0 or inf in the lift
(a focal length of 1e-300 or 1e300 would silently empty or break the coverage), with the
parameters' bounds: focal lengths in [``MIN_FOCAL_PX``, ``MAX_FOCAL_PX``] at image and at
feature-map resolution, principal points within ``MAX_PRINCIPAL_PX``, images up to
``MAX_IMAGE_SIZE`` pixels a side, K of the form [fx 0 cx; 0 fy cy; 0 0 1], a finite P, and
distortion coefficients within ``MAX_DISTORTION``.
"""

import array
import dataclasses
import re
import sys
from typing import NamedTuple, Sequence

import numpy as np

from .cloud import byte_view
from ..settings.config import CameraConfig
from ..settings.parameters import DISTORTION, FOCAL_PX, PRINCIPAL_PX


class FeatureMapError(ValueError):
    """A camera feature Image cannot be used; the message names the problem."""


class CameraInfoError(ValueError):
    """A CameraInfo cannot give intrinsics for the feature map; the message names the field."""


class UncalibratedCameraInfo(CameraInfoError):
    """
    A CameraInfo of a camera without a calibration: K (or, rectified, P) all zero.

    camera_info_manager publishes it beside every image when it has no calibration file
    (image_geometry reads K[0] == 0 as uncalibrated): no fault of the message, nothing to apply.
    """


# Image size over feature-map size may differ this much (relative) between x and y: backbones
# round odd sizes (900 / 16 = 56.25 rows -> 56), a different aspect ratio is a wrong pairing.
SCALE_TOLERANCE = 0.02


# The parameters' bounds (the same values must pass either way): focal lengths in FOCAL_PX at
# image and at feature-map resolution, |cx|, |cy| <= PRINCIPAL_PX, |d[i]| <= DISTORTION.
MIN_FOCAL_PX, MAX_FOCAL_PX = FOCAL_PX
MAX_PRINCIPAL_PX = PRINCIPAL_PX
MAX_DISTORTION = DISTORTION
MAX_IMAGE_SIZE = 65536                   # width, height

# [0-9], not \d, which also matches other scripts' digits.
_ENCODING = re.compile(r'32FC([0-9]+)')


def read_features(msg, height: int | None = None, width: int | None = None,
                  channels: int | None = None) -> np.ndarray:
    """
    Image with encoding '32FC<C>' -> float32[H_f, W_f, C].

    ``height``, ``width`` and ``channels``, when given, are the expected shape; a mismatch
    raises :class:`FeatureMapError` naming it. Row padding (``step > W_f * C * 4``) is skipped
    and big-endian data converted to native. The result is a view of ``msg.data`` when the byte
    order is native (possibly read-only and strided), otherwise one copy. NaN and Inf are passed
    through.
    """
    encoding = msg.encoding
    match = _ENCODING.fullmatch(encoding) if isinstance(encoding, str) else None
    if match is None or int(match.group(1)) < 1:
        raise FeatureMapError(f'encoding {encoding!r} is not 32FC<C> with C >= 1')
    num_channels = int(match.group(1))
    rows, cols, step = int(msg.height), int(msg.width), int(msg.step)
    if rows <= 0 or cols <= 0:
        raise FeatureMapError(f'empty feature map: height {rows}, width {cols}')
    for name, value, expected in (('height', rows, height), ('width', cols, width),
                                  ('channels', num_channels, channels)):
        if expected is not None and value != expected:
            raise FeatureMapError(f'{name} {value}, expected {expected}')
    row_bytes = cols * num_channels * 4
    if step < row_bytes:
        raise FeatureMapError(
            f'step {step} < width {cols} * channels {num_channels} * 4 = {row_bytes} bytes')
    raw = byte_view(msg.data, FeatureMapError)
    if raw.size < step * rows:
        raise FeatureMapError(
            f'data has {raw.size} bytes, expected step {step} * height {rows} = '
            f'{step * rows} bytes')
    dtype = np.dtype('>f4' if msg.is_bigendian else '<f4')
    features = np.ndarray((rows, cols, num_channels), dtype, buffer=raw,
                          strides=(step, num_channels * 4, 4))
    if dtype.isnative:
        return features
    return features.astype(np.float32)


def features_image_fields(features: np.ndarray) -> dict:
    """
    float32[H, W, C] -> the Image fields that carry it, for rclpy or rosbags.

    Returns ``height``, ``width``, ``encoding`` ('32FC<C>'), ``is_bigendian`` (the host's byte
    order, as the data is not swapped), ``step`` (W * C * 4 bytes) and ``data``, a flat uint8
    NumPy array that views ``features`` when it is already C-contiguous float32 (so do not change
    ``features`` until the message is serialized). rosbags needs exactly that. rclpy accepts it
    too, but its setter copies a NumPy array element by element (about 0.6 s for 8 MB, and an
    AssertionError with ``ROS_PYTHON_CHECK_FIELDS=1``): give rclpy ``byte_array(data)``.
    """
    features = np.ascontiguousarray(features, dtype=np.float32)
    if features.ndim != 3 or min(features.shape) < 1:
        raise ValueError(f'features must be a non-empty (H, W, C) array, got {features.shape}')
    rows, cols, num_channels = features.shape
    return {
        'height': rows,
        'width': cols,
        'encoding': f'32FC{num_channels}',
        'is_bigendian': int(sys.byteorder == 'big'),
        'step': cols * num_channels * 4,
        'data': features.view(np.uint8).reshape(-1),
    }


def byte_array(data) -> array.array:
    """
    Bytes-like ``data`` -> ``array.array('B')``, the type rclpy stores message data as.

    One memcpy; rclpy's setter converts other sequences one element at a time. It keeps an
    ``array.array('B')`` as is when the message checks its fields (``check_fields=True``),
    and copies it once more (a memcpy) when not, its default.
    """
    if isinstance(data, np.ndarray):
        # Flat bytes: memoryview cannot cast a view with a zero in its shape (an empty cloud).
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    out = array.array('B')
    out.frombytes(memoryview(data).cast('B'))
    return out


class Intrinsics(NamedTuple):
    """
    A camera's intrinsics at feature-map resolution and its lens distortion.

    fx, fy, cx, cy in feature-map pixels (pixel centres at integer coordinates);
    ``distortion_model`` 'none', 'plumb_bob' (k1, k2, p1, p2, k3), 'rational_polynomial'
    (k1, k2, p1, p2, k3, k4, k5, k6) or 'equidistant' (k1, k2, k3, k4), the coefficients in
    normalized image coordinates, so the same at any resolution. The first four fields are the
    old (fx, fy, cx, cy) tuple.
    """

    fx: float
    fy: float
    cx: float
    cy: float
    distortion_model: str = 'none'
    distortion: tuple[float, ...] = ()


# distortion_model (sensor_msgs/distortion_models.h) -> coefficient counts it may come with.
# 8: k4..k6 of rational_polynomial; 14: then OpenCV's s1..s4, tau_x, tau_y (depthai sends
# 14), usable only when those six are zero.
_PLUMB_BOB_COUNTS = (5, 8, 14)


def _checked_size(msg, map_height: int, map_width: int) -> tuple[float, float, int, int]:
    """
    Check image size and ROI; return the scales (s_x, s_y) to the map and the ROI's (x, y).

    As sensor_msgs/CameraInfo defines them, width, height and K are the sensor's, at full
    resolution, whatever the binning; the ROI is a window of it, in full-resolution pixels
    (all zero: the whole image). The map covers the image the camera sent: the ROI, binned or
    not (binning averages pixels within that area, so it scales like any resize).
    """
    width, height = int(msg.width), int(msg.height)
    if width <= 0 or height <= 0 or max(width, height) > MAX_IMAGE_SIZE:
        raise CameraInfoError(f'width {width}, height {height}: the image size must be in '
                              f'1..{MAX_IMAGE_SIZE}')
    size = f'width {width}, height {height}'
    roi = msg.roi
    x_offset, y_offset = int(roi.x_offset), int(roi.y_offset)
    if int(roi.width) or int(roi.height) or x_offset or y_offset:
        if (int(roi.width) <= 0 or int(roi.height) <= 0 or x_offset + int(roi.width) > width
                or y_offset + int(roi.height) > height):
            raise CameraInfoError(
                f'roi: x_offset {x_offset}, y_offset {y_offset}, width {int(roi.width)}, '
                f'height {int(roi.height)} is not a window of the {width} x {height} image')
        width, height = int(roi.width), int(roi.height)
        size = f'roi.width {width}, roi.height {height}'    # the fields the size came from
    if width < map_width or height < map_height:
        raise CameraInfoError(f'{size}: smaller than the {map_width} x {map_height} feature '
                              'map')
    scale_x, scale_y = map_width / width, map_height / height
    if abs(scale_x - scale_y) > SCALE_TOLERANCE * max(scale_x, scale_y):
        raise CameraInfoError(
            f'{size}: scales to the {map_width} x {map_height} feature map by '
            f'{scale_x:.4g} in x but {scale_y:.4g} in y (cameras.<name>.width and height must '
            "have the image's aspect ratio)")
    return scale_x, scale_y, x_offset, y_offset


_K_ROLES = {0: 'fx', 1: 'skew', 2: 'cx', 4: 'fy', 5: 'cy'}


def _checked_k(msg) -> tuple[float, float, float, float]:
    """Check K (and that P is finite); return (fx, fy, cx, cy) at image resolution."""
    k = [float(v) for v in msg.k]
    if len(k) != 9:
        raise CameraInfoError(f'k has {len(k)} values, expected 9')
    p = [float(v) for v in msg.p]
    for name, values in (('k', k), ('p', p)):
        for i, value in enumerate(values):
            if not np.isfinite(value):
                role = f' ({_K_ROLES[i]})' if name == 'k' and i in _K_ROLES else ''
                raise CameraInfoError(f'{name}[{i}]{role} = {value}: must be finite')
    fx, fy, cx, cy = _checked_pinhole('k', k, (0, 4, 2, 5))
    if k[1] != 0.0:
        raise CameraInfoError(f'k[1] (skew) = {k[1]}: a skewed K is not supported')
    if (k[3], k[6], k[7], k[8]) != (0.0, 0.0, 0.0, 1.0):
        raise CameraInfoError(f'k = {k}: not a camera matrix [fx 0 cx; 0 fy cy; 0 0 1]')
    return fx, fy, cx, cy


def _checked_pinhole(matrix: str, values: list[float],
                     at: tuple[int, int, int, int]) -> tuple[float, float, float, float]:
    """Check (fx, fy, cx, cy), ``values[at]`` of K or P; return them at image resolution."""
    fx, fy, cx, cy = (values[i] for i in at)
    for role, i, value in (('fx', at[0], fx), ('fy', at[1], fy)):
        if not MIN_FOCAL_PX <= value <= MAX_FOCAL_PX:
            raise CameraInfoError(f'{matrix}[{i}] ({role}) = {value}: the focal length must be '
                                  f'in [{MIN_FOCAL_PX:g}, {MAX_FOCAL_PX:g}] px')
    for role, i, value in (('cx', at[2], cx), ('cy', at[3], cy)):
        if abs(value) > MAX_PRINCIPAL_PX:
            raise CameraInfoError(f'{matrix}[{i}] ({role}) = {value}: the principal point must '
                                  f'be within {MAX_PRINCIPAL_PX:g} px')
    return fx, fy, cx, cy


def _checked_p(msg) -> tuple[float, float, float, float]:
    """Check P and R of a rectified image; return P's (fx, fy, cx, cy) at image resolution."""
    p, r = [float(v) for v in msg.p], [float(v) for v in msg.r]
    if len(p) != 12 or len(r) != 9:
        raise CameraInfoError(f'p has {len(p)} values and r {len(r)}, expected 12 and 9')
    fx, fy, cx, cy = _checked_pinhole('p', p, (0, 5, 2, 6))
    if (p[3], p[7]) != (0.0, 0.0):
        raise CameraInfoError(f'p[3], p[7] (Tx, Ty) = {p[3]}, {p[7]}: the second camera of a '
                              'stereo pair is not supported')
    if (p[1], p[4], p[8], p[9], p[10], p[11]) != (0.0, 0.0, 0.0, 0.0, 1.0, 0.0):
        raise CameraInfoError(f'p = {p}: not a projection [fx 0 cx 0; 0 fy cy 0; 0 0 1 0]')
    if not np.allclose(np.reshape(r, (3, 3)), np.eye(3), atol=1e-6):
        raise CameraInfoError(f'r = {r}: a rectification rotation other than the identity '
                              '(a stereo pair) is not supported')
    return fx, fy, cx, cy


def _distortion(msg) -> tuple[str, tuple[float, ...]]:
    """Read distortion_model and D as (model, coefficients) of ``Intrinsics``."""
    model = str(msg.distortion_model)
    d = [float(v) for v in msg.d]
    for i, value in enumerate(d):
        if not abs(value) <= MAX_DISTORTION:
            raise CameraInfoError(f'd[{i}] = {value}: distortion coefficients must be finite '
                                  f'and within {MAX_DISTORTION:g}')
    if model == 'equidistant':
        if len(d) != 4:
            raise CameraInfoError(f'd has {len(d)} values: distortion_model equidistant '
                                  'takes 4 (k1, k2, k3, k4)')
        return model, tuple(d)     # all zero is still a fisheye: theta_d = atan(r)
    if model in ('', 'plumb_bob', 'rational_polynomial') and not any(d):
        return 'none', ()          # zero polynomial terms: a pinhole, bit for bit
    if model not in ('plumb_bob', 'rational_polynomial'):
        raise CameraInfoError(f'distortion_model {model!r} is not supported (with d = {d}): '
                              'use none, plumb_bob, rational_polynomial or equidistant')
    if len(d) not in _PLUMB_BOB_COUNTS:
        raise CameraInfoError(f'd has {len(d)} values: distortion_model {model} takes 5 '
                              '(k1, k2, p1, p2, k3), 8 (then k4, k5, k6) or 14')
    if any(d[8:]):
        raise CameraInfoError(f'distortion_model {model} with s1..s4, tau_x, tau_y = {d[8:]}: '
                              "OpenCV's thin prism and tilted sensor terms are not supported")
    if any(d[5:8]):
        # As OpenCV (and so image_geometry) reads 8 coefficients, whatever the name says.
        return 'rational_polynomial', tuple(d[:8])
    return 'plumb_bob', tuple(d[:5])     # k4..k6 zero: the same polynomial


def scale_camera_info(msg, map_height: int, map_width: int,
                      rectified: bool = False) -> Intrinsics:
    """
    Scale a CameraInfo (K at image resolution) to the feature map, with its distortion.

    ``rectified``: the maps come from the rectified image (image_proc's image_rect), which
    CameraInfo describes by P (fx' 0 cx' 0; 0 fy' cy' 0; 0 0 1 0) and R: P's intrinsics are
    scaled, with no distortion (K and D are not read). A P of a stereo pair's second camera
    (Tx, Ty not 0), an R that is not the identity (the rectified image turned against the
    camera frame) or an ROI smaller than the image (a window of the raw image) is refused.

    With s_x = W_f / W and s_y = H_f / H: fx_f = fx s_x, cx_f = (cx + 0.5) s_x - 0.5, the same
    for y (pixel centres stay at integer coordinates at both resolutions). With a region of
    interest, W and H are the ROI's and cx, cy are taken from its corner (cx - x_offset); the
    binning needs nothing (K and the ROI are at full resolution, the map covers the same area
    binned or not). The distortion
    coefficients act on normalized coordinates and are taken as they are: plumb_bob or
    rational_polynomial with 5 coefficients, 8 (k4..k6 nonzero: rational_polynomial, as
    OpenCV reads them, else plumb_bob) or 14 whose last six are 0 (as depthai sends them),
    equidistant with 4; '' or an all-zero plumb_bob is a pinhole ('none').

    Args
    ----
    msg: sensor_msgs/CameraInfo (rclpy or rosbags).
    map_height, map_width: the feature map's H_f x W_f.

    Returns
    -------
    Intrinsics at feature-map resolution.

    Raises
    ------
    UncalibratedCameraInfo: K (rectified: P) all zero, a camera without a calibration.
    CameraInfoError: naming the field, for values outside the module's bounds (not finite,
        tiny or huge focal lengths, a huge image), a K that is not [fx 0 cx; 0 fy cy; 0 0 1],
        a distortion_model other than plumb_bob / rational_polynomial / equidistant,
        nonzero thin prism or tilt terms (d[8:]) or the wrong number of coefficients, an
        image smaller than the map, scale factors that differ between x and y by more than
        ``SCALE_TOLERANCE``, or an ROI that is no window of the image.

    """
    matrix, one = ('p', 10) if rectified else ('k', 8)
    # Before the size: camera_info_manager's message without a calibration may have none.
    # Some drivers send K = [0, .., 0, 1] (P alike) instead: no calibration either.
    if not any(float(v) for i, v in enumerate(getattr(msg, matrix)) if i != one):
        raise UncalibratedCameraInfo(f'{matrix} is all zero: an uncalibrated camera (no '
                                     "calibration file); the parameters' intrinsics stay")
    scale_x, scale_y, x_offset, y_offset = _checked_size(msg, map_height, map_width)
    if rectified:
        # K and D describe the raw image, which the maps do not come from: neither is read (a
        # lens model the node lacks, OpenCV's thin prism terms, is no obstacle).
        # An ROI of the whole image is no window (image_proc's crop_decimate writes one
        # even when it crops nothing); _checked_size has checked it lies in the image.
        window = (int(msg.roi.width), int(msg.roi.height))
        if x_offset or y_offset or window not in ((0, 0), (int(msg.width), int(msg.height))):
            raise CameraInfoError('roi: a window of the raw image cannot describe the '
                                  'rectified one (cameras.<name>.rectified)')
        (fx, fy, cx, cy), model, distortion = _checked_p(msg), 'none', ()
        names = ('p[0] (fx)', 'p[5] (fy)')
    else:
        fx, fy, cx, cy = _checked_k(msg)
        cx, cy = cx - x_offset, cy - y_offset
        model, distortion = _distortion(msg)
        names = ('k[0] (fx)', 'k[4] (fy)')
    for name, value in zip(names, (fx * scale_x, fy * scale_y)):
        if value < MIN_FOCAL_PX:
            raise CameraInfoError(f'{name}: {value:.3g} px at feature-map resolution, below '
                                  f'{MIN_FOCAL_PX:g} px')
    return Intrinsics(fx * scale_x, fy * scale_y, (cx + 0.5) * scale_x - 0.5,
                      (cy + 0.5) * scale_y - 0.5, model, distortion)


def camera_info_fields(msg) -> tuple | None:
    """
    Return what ``scale_camera_info`` reads of a CameraInfo, and its frame, as one tuple.

    Equal tuples scale to equal intrinsics, so a driver's CameraInfo repeated beside every
    image need not be checked again. None when a field is no number (``scale_camera_info``
    then names it).
    """
    roi = getattr(msg, 'roi', None)
    try:
        return (msg.header.frame_id, int(msg.width), int(msg.height), str(msg.distortion_model),
                int(roi.x_offset), int(roi.y_offset), int(roi.width), int(roi.height),
                *(tuple(float(v) for v in getattr(msg, name)) for name in 'kprd'))
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None


def with_intrinsics(cameras: Sequence[CameraConfig], name: str,
                    intrinsics: Sequence) -> tuple[CameraConfig, ...] | None:
    """
    Return ``cameras`` with camera ``name``'s intrinsics and lens replaced, or None if unchanged.

    Values are compared at float32, the precision the lift uses, so a CameraInfo repeating the
    calibration in force changes nothing (and costs no lift-table update).

    Args
    ----
    cameras: the cameras' configs.
    name: the camera to change.
    intrinsics: an ``Intrinsics`` (all six fields apply), or four values (fx, fy, cx, cy),
        which keep the camera's distortion.

    Returns
    -------
    The new tuple of cameras, or None when nothing changes.

    """
    index = [c.name for c in cameras].index(name)
    camera = cameras[index]
    if len(intrinsics) == 4:
        intrinsics = Intrinsics(*intrinsics, camera.distortion_model, camera.distortion)
    new = Intrinsics(*intrinsics)
    current = Intrinsics(camera.fx, camera.fy, camera.cx, camera.cy, camera.distortion_model,
                         camera.distortion)
    if (np.array_equal(np.float32(current[:4]), np.float32(new[:4]))
            and current.distortion_model == new.distortion_model
            and np.array_equal(np.float32(current.distortion), np.float32(new.distortion))):
        return None
    updated = dataclasses.replace(
        camera, fx=float(new.fx), fy=float(new.fy), cx=float(new.cx), cy=float(new.cy),
        distortion_model=new.distortion_model,
        distortion=tuple(float(v) for v in new.distortion))
    return tuple(cameras[:index]) + (updated,) + tuple(cameras[index + 1:])
