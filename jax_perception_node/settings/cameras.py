"""
The cameras of the node: the ``cameras.<name>`` blocks, their input, and the image encoder.

A camera sends feature maps (``input: features``) or images (``input: image``), which the
encoder of ``encoder.*`` turns into feature maps on the device. Shapes (map size, channels,
input, stride) are static; calibration is traced (``BevPipeline.set_calibration``).
"""

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .channels import COVERAGE_CHANNEL, lidar_channels
from .parameters import ConfigError, is_camera_name, MAX_PIXELS
from ..geometry.rotations import Pose


@dataclass(frozen=True)
class CameraConfig:
    """
    One camera: feature-map shape (static) and calibration (traced), in feature-map pixels.

    ``frame_id`` is the frame ``pose`` describes ('' resolves to ``<name>_optical``).
    ``distortion`` holds the coefficients of ``distortion_model``: (k1, k2, p1, p2, k3) for
    plumb_bob, then k4, k5, k6 for rational_polynomial, (k1, k2, k3, k4) for equidistant, ()
    for none.
    """

    name: str
    height: int
    width: int
    channels: int
    fx: float
    fy: float
    cx: float
    cy: float
    pose: Pose
    frame_id: str = ''
    distortion_model: str = 'none'
    distortion: tuple[float, ...] = ()
    input_kind: str = 'features'    # cameras.<name>.input: features (32FC<C>) or image
    rectified: bool = False         # a CameraInfo gives P (rectified image), not K and D

    def __post_init__(self):
        """Resolve the default frame, so every constructor gets '<name>_optical' for ''."""
        if not self.frame_id:
            object.__setattr__(self, 'frame_id', f'{self.name}_optical')


@dataclass(frozen=True)
class EncoderConfig:
    """The image encoder (encoder.py) of cameras with input image; ``weights`` is live."""

    module: str = ''                # 'package.module:factory', '' for none
    weights: str = ''               # checkpoint, '' for the encoder's shipped weights
    stride: int = 4                 # image pixels per feature-map pixel


def map_shape(camera: CameraConfig) -> tuple[int, int, int]:
    """Return a camera's feature map (H_f, W_f, C)."""
    return camera.height, camera.width, camera.channels


def image_shape(cameras: tuple[CameraConfig, ...],
                enc: EncoderConfig) -> tuple[int, int, int]:
    """Return the encoder's input uint8[H_i, W_i, 3]: the first camera's map x the stride."""
    return cameras[0].height * enc.stride, cameras[0].width * enc.stride, 3


def check_map_shapes(cameras: tuple[CameraConfig, ...]) -> None:
    """Refuse cameras whose feature maps differ in height, width or channels, naming the key."""
    for cam in cameras:
        for field in ('height', 'width', 'channels'):
            ours, first = getattr(cam, field), getattr(cameras[0], field)
            if ours != first:
                # One batch of maps and one lift: every camera's map has one shape.
                raise ConfigError(f'cameras.{cam.name}.{field}: every camera needs the same '
                                  f'feature-map {field}, got {ours} and {first} '
                                  f'(cameras.{cameras[0].name}.{field})')


def check_encoder(cameras: tuple[CameraConfig, ...], enc: EncoderConfig) -> None:
    """Refuse mixed camera inputs, images without an encoder and an encoder without images."""
    inputs = [c.input_kind for c in cameras]
    if len(set(inputs)) > 1:
        odd = next(c for c in cameras if c.input_kind != inputs[0])
        # One batch crosses to the device: float32 maps or uint8 images, not both.
        raise ConfigError(f'cameras.{odd.name}.input: {odd.input_kind}, but cameras.'
                          f'{cameras[0].name}.input is {inputs[0]}; every camera needs the '
                          'same input')
    if inputs and inputs[0] == 'image':
        if not enc.module:
            raise ConfigError(f'cameras.{cameras[0].name}.input: image needs an image '
                              'encoder: set encoder.module (e.g. '
                              'jax_perception_node.detection.encoders.pooled:rgb)')
        height, width, _ = image_shape(cameras, enc)
        if max(height, width) > MAX_PIXELS:
            raise ConfigError(f'encoder.stride: {enc.stride} x the {cameras[0].height} x '
                              f'{cameras[0].width} feature map is a {height} x {width} '
                              f'image, above {MAX_PIXELS} px a side')
    elif enc.module or enc.weights:
        key, value = ('encoder.module', enc.module) if enc.module else (
            'encoder.weights', enc.weights)
        # Silently unused, it would look like an encoder that runs.
        raise ConfigError(f'{key}: {value} given, but no camera has input: image (nothing '
                          'to encode)')


def camera_block(v: Mapping[str, Any], name: str, pose_of: Callable) -> CameraConfig:
    """Build camera ``name``'s config from the flat values ``v``; ``pose_of(v, prefix)``."""
    k = f'cameras.{name}.'
    model = v[k + 'distortion_model']
    return CameraConfig(name=name, pose=pose_of(v, k[:-1]), frame_id=v[k + 'frame_id'],
                        distortion_model=model, input_kind=v[k + 'input'],
                        rectified=v[k + 'rectified'],
                        distortion=_distortion(k + 'distortion', model, v[k + 'distortion']),
                        **{f: v[k + f] for f in (
                            'height', 'width', 'channels', 'fx', 'fy', 'cx', 'cy')})


def channel_names(names: list[str], cameras: tuple[CameraConfig, ...]) -> tuple[str, ...]:
    """Check the camera channel names: [] or one per channel, unique, identifier-like."""
    key, channels = 'cameras.channel_names', cameras[0].channels if cameras else 0
    if names and len(names) != channels:
        raise ConfigError(f'{key}: {len(names)} names for {channels} camera feature channels '
                          f'(cameras.<name>.channels); give one per channel or []')
    for name in names:
        if not is_camera_name(name):
            raise ConfigError(f'{key}: "{name}" must be letters, digits and underscores, not a '
                              'digit first (a topic name token)')
    if len(set(names)) != len(names):
        raise ConfigError(f'{key}: duplicate names in {names}')
    # They name GridMap layers beside the LiDAR channels and coverage.
    clash = sorted((set(lidar_channels(2)) | {COVERAGE_CHANNEL}) & set(names))
    if clash:
        raise ConfigError(f'{key}: {clash} already name other BEV channels')
    return tuple(names)


DISTORTION_COUNTS = {'plumb_bob': 5, 'rational_polynomial': 8, 'equidistant': 4}


def _distortion(key: str, model: str, coefficients: list[float]) -> tuple[float, ...]:
    """Check the coefficient count of ``model``; 'none' takes [] or zeros and keeps ()."""
    if model == 'none':
        if any(coefficients):
            raise ConfigError(f'{key}: distortion_model none takes [] or zeros, got '
                              f'{coefficients}')
        return ()
    count = DISTORTION_COUNTS[model]
    if len(coefficients) != count:
        raise ConfigError(f'{key}: {model} needs {count} coefficients, got {coefficients}')
    return tuple(coefficients)
