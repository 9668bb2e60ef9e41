"""
Camera feature maps as sensor_msgs/Image <-> float32 arrays, and calibrations, without ROS.

A feature map travels as an Image with encoding ``32FC<C>``: ``height`` x ``width`` pixels of
``C`` float32 channels, row-major and channel-last, rows ``step`` bytes apart. Intrinsics come
from the parameters or from a sensor_msgs/CameraInfo at image resolution, scaled here to the
feature map. Message fields are read by attribute, so rclpy and ``rosbags`` messages both work.
"""

import array
import re
import sys
from typing import Sequence

import numpy as np

from .cloud import byte_view
from .config import CameraConfig


class FeatureMapError(ValueError):
    """A camera feature Image cannot be used; the message names the problem."""


class CameraInfoError(ValueError):
    """A CameraInfo cannot give intrinsics for the feature map; the message names the field."""


# Image size over feature-map size may differ this much (relative) between x and y: backbones
# round odd sizes (900 / 16 = 56.25 rows -> 56), a different aspect ratio is a wrong pairing.
SCALE_TOLERANCE = 0.02


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

    One memcpy; rclpy keeps an ``array.array('B')`` as is, where it would convert other
    sequences one element at a time.
    """
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    out = array.array('B')
    out.frombytes(memoryview(data).cast('B'))
    return out


def calibration_arrays(
        cameras: Sequence[CameraConfig]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    Stack camera calibrations for the lift.

    Returns intrinsics float32[N, 4] (fx, fy, cx, cy in feature-map pixels), rotation
    float32[N, 3, 3] and translation float32[N, 3] (m), with p_grid = R p_optical + t mapping
    each camera's optical frame into the grid frame. Shapes are (0, 4), (0, 3, 3) and (0, 3)
    for no cameras.
    """
    intrinsics = np.zeros((len(cameras), 4), np.float32)
    rotation = np.zeros((len(cameras), 3, 3), np.float32)
    translation = np.zeros((len(cameras), 3), np.float32)
    for k, camera in enumerate(cameras):
        intrinsics[k] = (camera.fx, camera.fy, camera.cx, camera.cy)
        rotation[k] = camera.pose.rotation_matrix()
        translation[k] = camera.pose.translation
    return intrinsics, rotation, translation


def scale_camera_info(msg, map_height: int, map_width: int) -> tuple[float, float, float, float]:
    """
    Scale a CameraInfo (K at image resolution) to (fx, fy, cx, cy) at feature-map resolution.

    With s_x = W_f / W and s_y = H_f / H: fx_f = fx s_x, cx_f = (cx + 0.5) s_x - 0.5, the same
    for y (pixel centres stay at integer coordinates at both resolutions). Raises
    :class:`CameraInfoError` naming the field for a focal length that is not finite and positive,
    a principal point that is not finite, a zero size, an image smaller than the map, scale
    factors that differ between x and y by more than ``SCALE_TOLERANCE``, or binning / ROI
    (K then describes another image than the one the features were computed from).
    """
    width, height = int(msg.width), int(msg.height)
    if width <= 0 or height <= 0:
        raise CameraInfoError(f'width {width}, height {height}: the image size must be > 0')
    k = [float(v) for v in msg.k]
    if len(k) != 9:
        raise CameraInfoError(f'k has {len(k)} values, expected 9')
    fx, cx, fy, cy = k[0], k[2], k[4], k[5]
    for name, value in (('k[0] (fx)', fx), ('k[4] (fy)', fy)):
        if not np.isfinite(value) or value <= 0:
            raise CameraInfoError(f'{name} = {value}: the focal length must be finite and > 0')
    for name, value in (('k[2] (cx)', cx), ('k[5] (cy)', cy)):
        if not np.isfinite(value):
            raise CameraInfoError(f'{name} = {value}: the principal point must be finite')
    binning = (int(msg.binning_x), int(msg.binning_y))
    if max(binning) > 1:
        raise CameraInfoError(f'binning_x, binning_y = {binning}: binned images are not '
                              'supported, publish K for the image the features come from')
    roi = msg.roi
    if int(roi.width) or int(roi.height) or int(roi.x_offset) or int(roi.y_offset):
        if (int(roi.x_offset), int(roi.y_offset), int(roi.width), int(roi.height)) != (
                0, 0, width, height):
            raise CameraInfoError('roi: a region of interest is not supported, publish K for '
                                  'the image the features come from')
    if width < map_width or height < map_height:
        raise CameraInfoError(f'width {width}, height {height}: smaller than the '
                              f'{map_width} x {map_height} feature map')
    scale_x, scale_y = map_width / width, map_height / height
    if abs(scale_x - scale_y) > SCALE_TOLERANCE * max(scale_x, scale_y):
        raise CameraInfoError(
            f'width {width}, height {height}: scales to the {map_width} x {map_height} '
            f'feature map by {scale_x:.4g} in x but {scale_y:.4g} in y')
    return (fx * scale_x, fy * scale_y, (cx + 0.5) * scale_x - 0.5, (cy + 0.5) * scale_y - 0.5)


def with_intrinsics(cameras: Sequence[CameraConfig], name: str,
                    intrinsics: Sequence[float]) -> tuple[CameraConfig, ...] | None:
    """
    Return ``cameras`` with camera ``name``'s (fx, fy, cx, cy) replaced, or None if unchanged.

    Values are compared at float32, the precision the lift uses, so a CameraInfo repeating the
    intrinsics in force changes nothing (and costs no lift-table update).
    """
    index = [c.name for c in cameras].index(name)
    camera = cameras[index]
    current = np.array((camera.fx, camera.fy, camera.cx, camera.cy), np.float32)
    if np.array_equal(current, np.asarray(intrinsics, np.float32)):
        return None
    fx, fy, cx, cy = (float(v) for v in intrinsics)
    updated = CameraConfig(name=camera.name, height=camera.height, width=camera.width,
                           channels=camera.channels, fx=fx, fy=fy, cx=cx, cy=cy,
                           pose=camera.pose)
    return tuple(cameras[:index]) + (updated,) + tuple(cameras[index + 1:])
