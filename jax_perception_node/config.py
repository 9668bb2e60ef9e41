"""
Parameters of the node and the CLI: one YAML layout, validated into frozen dataclasses.

The param file uses the ROS 2 layout (``/**: ros__parameters:``). ROS flattens nested keys to
dotted names (``grid.x_min``); this module works on that flat form, so the node (which gets the
values from rclpy) and the CLI (which reads the YAML itself) validate through the same code.
Every error is a :class:`ConfigError` that names the offending key.
"""

from dataclasses import dataclass
import math
import os
from pathlib import Path
import sys
from typing import Any, Mapping

import numpy as np
import yaml


class ConfigError(ValueError):
    """A parameter is missing, of the wrong type or out of range; the message names the key."""


OVERFLOW_POLICIES = ('subsample', 'truncate')
ACTIVATIONS = ('none', 'relu')
CAMERA_KEYS = ('height', 'width', 'channels', 'fx', 'fy', 'cx', 'cy',
               'translation', 'rotation_xyzw')

# key -> (default, description). The defaults equal config/jax_perception.param.yaml (a test
# checks it), so the node started without a params file behaves like the shipped config, minus
# the cameras, whose calibration has no sensible default.
PARAMETERS: dict[str, tuple[Any, str]] = {
    'grid.frame_id': ('base_link', 'frame of the BEV grid (REP-103: x forward, y left, z up)'),
    'grid.x_min': (-51.2, 'm, lower x edge of the grid'),
    'grid.x_max': (51.2, 'm, upper x edge; rows H = round((x_max - x_min) / resolution)'),
    'grid.y_min': (-51.2, 'm, lower y edge of the grid'),
    'grid.y_max': (51.2, 'm, upper y edge; columns W = round((y_max - y_min) / resolution)'),
    'grid.z_min': (-2.0, 'm, points with z < z_min are ignored'),
    'grid.z_max': (4.0, 'm, points with z >= z_max are ignored'),
    'grid.resolution': (0.4, 'm per cell; with the x/y range it fixes H and W (recompiles)'),
    'lidar.translation': ([0.0, 0.0, 1.8], 'm, LiDAR origin in the grid frame'),
    'lidar.rotation_xyzw': ([0.0, 0.0, 0.0, 1.0], 'LiDAR orientation in the grid frame'),
    'buckets': ([16384, 32768, 65536, 131072],
                'point capacities, ascending; one compiled executable each'),
    'overflow_policy': ('subsample', 'above the largest bucket: subsample (even stride over the '
                        'whole cloud) or truncate (first points)'),
    'cameras.names': ([], 'camera names; each needs a cameras.<name> block'),
    'fusion.num_heights': (4, 'height levels sampled per cell by the camera lift'),
    'fusion.max_samples_per_cell': (0, 'camera-lift sample slots per cell (recompiles); 0: the '
                                    'most any cell needs with the start-up calibration'),
    'fusion.weights_file': ('', 'optional .npz with W (C_in x C_out) and b (C_out)'),
    'fusion.activation': ('none', 'none | relu, applied after the projection (weights only)'),
    'sync.max_camera_lidar_delay_s': (0.1, 's, a feature map further than this from the LiDAR '
                                      'stamp is masked for that frame'),
    'compilation_cache_dir': ('~/.cache/jax_perception_node/xla',
                              'persistent XLA cache, created 0700; empty disables it'),
    'diagnostics.period_s': (1.0, 's between /diagnostics messages'),
    'diagnostics.window': (300, 'frames in the rolling latency window'),
    'diagnostics.latency_budget_ms': (100.0, 'ms, WARN when total p99 exceeds it'),
    'diagnostics.lidar_timeout_s': (1.0, 's without a LiDAR frame before ERROR'),
}


def parameter_type(key: str) -> str:
    """Name the ROS parameter type a key expects, e.g. 'double' or 'double[3]'."""
    if key.startswith('cameras.') and key != 'cameras.names':
        return CAMERA_TYPES[key.rsplit('.', 1)[1]]
    default = PARAMETERS[key][0]
    if isinstance(default, list):
        kinds = {type(v) for v in default}
        inner = 'string' if key == 'cameras.names' else (
            'integer' if kinds == {int} else 'double')
        return f'{inner}[]' if key in ('buckets', 'cameras.names') else f'{inner}[{len(default)}]'
    return {bool: 'bool', int: 'integer', float: 'double', str: 'string'}[type(default)]


CAMERA_TYPES = {'height': 'integer', 'width': 'integer', 'channels': 'integer', 'fx': 'double',
                'fy': 'double', 'cx': 'double', 'cy': 'double', 'translation': 'double[3]',
                'rotation_xyzw': 'double[4]'}

CAMERA_PARAMETERS: dict[str, str] = {
    'height': 'feature-map rows',
    'width': 'feature-map columns',
    'channels': 'feature channels C (the same for every camera)',
    'fx': 'px, focal length at feature-map resolution',
    'fy': 'px, focal length at feature-map resolution',
    'cx': 'px, principal point column (pixel centres at integer coordinates)',
    'cy': 'px, principal point row',
    'translation': 'm, camera optical-frame origin in the grid frame',
    'rotation_xyzw': 'optical frame (z forward, x right, y down) orientation in the grid frame',
}


@dataclass(frozen=True)
class Pose:
    """Rigid transform from a sensor frame into the grid frame: p_grid = R p_sensor + t."""

    translation: tuple[float, float, float]
    rotation_xyzw: tuple[float, float, float, float]   # unit quaternion

    def rotation_matrix(self) -> np.ndarray:
        """(3, 3) float64 rotation matrix R."""
        x, y, z, w = self.rotation_xyzw
        return np.array([
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ])


@dataclass(frozen=True)
class GridConfig:
    """The BEV grid in the grid frame; ``height`` and ``width`` are static (changes recompile)."""

    frame_id: str
    x_min: float
    x_max: float
    y_min: float
    y_max: float
    z_min: float
    z_max: float
    resolution: float

    @property
    def height(self) -> int:
        """Rows H (x index)."""
        return int(round((self.x_max - self.x_min) / self.resolution))

    @property
    def width(self) -> int:
        """Columns W (y index)."""
        return int(round((self.y_max - self.y_min) / self.resolution))

    def vector(self) -> np.ndarray:
        """float32[5] (x_min, y_min, z_min, z_max, resolution), the kernels' ``grid``."""
        return np.array([self.x_min, self.y_min, self.z_min, self.z_max, self.resolution],
                        np.float32)


@dataclass(frozen=True)
class CameraConfig:
    """One camera: feature-map shape (static) and calibration (traced), in feature-map pixels."""

    name: str
    height: int
    width: int
    channels: int
    fx: float
    fy: float
    cx: float
    cy: float
    pose: Pose


@dataclass(frozen=True)
class FusionConfig:
    """Camera lift and the optional 1x1 projection."""

    num_heights: int
    weights_file: str
    activation: str
    max_samples_per_cell: int = 0   # lift slots per cell; 0: derived at warm-up


@dataclass(frozen=True)
class DiagnosticsConfig:
    """Rolled-up /diagnostics status."""

    period_s: float
    window: int
    latency_budget_ms: float
    lidar_timeout_s: float


@dataclass(frozen=True)
class PipelineConfig:
    """Everything the pipeline and the node need, validated."""

    grid: GridConfig
    lidar: Pose
    buckets: tuple[int, ...]
    overflow_policy: str
    cameras: tuple[CameraConfig, ...]
    fusion: FusionConfig
    max_camera_lidar_delay_s: float
    compilation_cache_dir: str
    diagnostics: DiagnosticsConfig

    @property
    def camera_channels(self) -> int:
        """C, the camera feature channels (0 without cameras)."""
        return self.cameras[0].channels if self.cameras else 0

    @property
    def fused_channels(self) -> int:
        """Channels before the optional projection: 6 LiDAR + C camera + 1 coverage."""
        return 6 + self.camera_channels + 1


def default_parameters() -> dict[str, Any]:
    """Flat dotted-key defaults (no cameras)."""
    return {key: value for key, (value, _) in PARAMETERS.items()}


def flatten(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Nested YAML mapping -> dotted keys, as ROS 2 does for parameters."""
    flat = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + '.'))
        else:
            flat[name] = value
    return flat


def read_param_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ROS 2 param YAML and return its flat ``ros__parameters`` (first node section)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f'params file {path}: {exc.strerror or exc}') from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f'params file {path}: not valid YAML ({exc})') from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f'params file {path}: expected a mapping of node names')
    for section in doc.values():
        if isinstance(section, Mapping) and isinstance(section.get('ros__parameters'), Mapping):
            return flatten(section['ros__parameters'])
    raise ConfigError(f'params file {path}: no "<node>: ros__parameters:" section')


def write_param_file(params: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write flat dotted parameters as a ROS 2 param file (``/**: ros__parameters:``)."""
    tree: dict = {}
    for key, value in params.items():
        *parents, leaf = key.split('.')
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = Path(path)
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': tree}}))
    return path


def load_config(path: str | os.PathLike) -> PipelineConfig:
    """Load and validate a param YAML; raises ConfigError naming the bad key."""
    return config_from_parameters(read_param_file(path))


def config_from_parameters(params: Mapping[str, Any]) -> PipelineConfig:
    """Validate flat dotted parameters (missing keys take their defaults) into a PipelineConfig."""
    known = set(PARAMETERS)
    names = params.get('cameras.names', [])
    p = default_parameters()
    p.update(params)
    reader = _Reader(p)
    camera_names = reader.str_list('cameras.names')
    if len(set(camera_names)) != len(camera_names):
        raise ConfigError(f'cameras.names: duplicate names in {list(names)}')
    for name in camera_names:
        known.update(f'cameras.{name}.{k}' for k in CAMERA_KEYS)
    unknown = sorted(k for k in params if k not in known and k != 'use_sim_time')
    if unknown:
        raise ConfigError(f'{unknown[0]}: unknown parameter')

    grid = GridConfig(
        frame_id=reader.string('grid.frame_id', nonempty=True),
        x_min=reader.number('grid.x_min'), x_max=reader.number('grid.x_max'),
        y_min=reader.number('grid.y_min'), y_max=reader.number('grid.y_max'),
        z_min=reader.number('grid.z_min'), z_max=reader.number('grid.z_max'),
        resolution=reader.number('grid.resolution', positive=True))
    for lo, hi in (('x_min', 'x_max'), ('y_min', 'y_max'), ('z_min', 'z_max')):
        if getattr(grid, hi) <= getattr(grid, lo):
            raise ConfigError(f'grid.{hi}: must be greater than grid.{lo}')
    for axis, cells in (('x', grid.height), ('y', grid.width)):
        span = getattr(grid, f'{axis}_max') - getattr(grid, f'{axis}_min')
        if cells < 1 or abs(cells * grid.resolution - span) > 1e-6 * max(1.0, span):
            raise ConfigError(f'grid.resolution: the {axis} range {span:g} m is not a whole '
                              f'number of {grid.resolution:g} m cells')
    if grid.height * grid.width > 4096 * 4096:
        raise ConfigError(f'grid.resolution: {grid.height} x {grid.width} cells is too large')

    buckets = reader.int_list('buckets')
    if not buckets or any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
        raise ConfigError(f'buckets: expected strictly ascending positive sizes, got {buckets}')
    policy = reader.choice('overflow_policy', OVERFLOW_POLICIES)

    cameras = tuple(_camera(reader, name) for name in camera_names)
    if len({c.channels for c in cameras}) > 1:
        raise ConfigError(f'cameras.{cameras[-1].name}.channels: every camera needs the same '
                          f'channel count, got {[c.channels for c in cameras]}')

    fusion = FusionConfig(
        num_heights=reader.integer('fusion.num_heights', minimum=1),
        weights_file=reader.string('fusion.weights_file'),
        activation=reader.choice('fusion.activation', ACTIVATIONS),
        max_samples_per_cell=reader.integer('fusion.max_samples_per_cell', minimum=0))
    if fusion.num_heights > 64:
        raise ConfigError('fusion.num_heights: at most 64')
    if fusion.max_samples_per_cell > len(cameras) * fusion.num_heights:
        raise ConfigError(f'fusion.max_samples_per_cell: at most cameras x num_heights = '
                          f'{len(cameras) * fusion.num_heights}, got '
                          f'{fusion.max_samples_per_cell}')

    cfg = PipelineConfig(
        grid=grid, lidar=reader.pose('lidar'), buckets=tuple(buckets), overflow_policy=policy,
        cameras=cameras, fusion=fusion,
        max_camera_lidar_delay_s=reader.number('sync.max_camera_lidar_delay_s', minimum=0.0),
        compilation_cache_dir=reader.string('compilation_cache_dir'),
        diagnostics=DiagnosticsConfig(
            period_s=reader.number('diagnostics.period_s', positive=True),
            window=reader.integer('diagnostics.window', minimum=1),
            latency_budget_ms=reader.number('diagnostics.latency_budget_ms', positive=True),
            lidar_timeout_s=reader.number('diagnostics.lidar_timeout_s', positive=True)))
    if fusion.weights_file:
        load_fusion_weights(cfg)   # validate now, not on the first frame
    return cfg


def load_fusion_weights(cfg: PipelineConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """Read ``W`` (C_in, C_out) and ``b`` (C_out,) float32 from the weights file, or None."""
    path = cfg.fusion.weights_file
    if not path:
        return None
    key = 'fusion.weights_file'
    try:
        with np.load(os.path.expanduser(path), allow_pickle=False) as npz:
            if 'W' not in npz or 'b' not in npz:
                raise ConfigError(f'{key}: {path} needs arrays "W" and "b", has {npz.files}')
            weights, bias = npz['W'], npz['b']
    except ConfigError:
        raise
    except (OSError, ValueError) as exc:
        raise ConfigError(f'{key}: cannot read {path}: {exc}') from None
    c_in = cfg.fused_channels
    if weights.ndim != 2 or weights.shape[0] != c_in or weights.shape[1] < 1:
        raise ConfigError(f'{key}: W must be ({c_in}, C_out) for {c_in} fused channels, '
                          f'got {weights.shape}')
    if bias.shape != (weights.shape[1],):
        raise ConfigError(f'{key}: b must be ({weights.shape[1]},), got {bias.shape}')
    for name, arr in (('W', weights), ('b', bias)):
        if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
            raise ConfigError(f'{key}: {name} must be finite numbers')
    return weights.astype(np.float32), bias.astype(np.float32)


def _camera(reader: '_Reader', name: str) -> CameraConfig:
    if not name or not name.replace('_', '').isalnum():
        raise ConfigError(f'cameras.names: "{name}" must be letters, digits and underscores')
    k = f'cameras.{name}.'
    return CameraConfig(
        name=name,
        height=reader.integer(k + 'height', minimum=1, required=True),
        width=reader.integer(k + 'width', minimum=1, required=True),
        channels=reader.integer(k + 'channels', minimum=1, required=True),
        fx=reader.number(k + 'fx', positive=True, required=True),
        fy=reader.number(k + 'fy', positive=True, required=True),
        cx=reader.number(k + 'cx', required=True),
        cy=reader.number(k + 'cy', required=True),
        pose=reader.pose(k[:-1], required=True))


class _Reader:
    """Typed access to flat parameters; every failure names the key."""

    def __init__(self, params: Mapping[str, Any]):
        self._p = params

    def _get(self, key: str, required: bool) -> Any:
        value = self._p.get(key)
        if value is None:
            raise ConfigError(f'{key}: {"required" if required else "missing"}')
        return value

    def number(self, key: str, positive: bool = False, minimum: float | None = None,
               required: bool = False) -> float:
        value = self._get(key, required)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f'{key}: expected a number, got {value!r}')
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f'{key}: must be finite, got {value}')
        if positive and value <= 0:
            raise ConfigError(f'{key}: must be > 0, got {value:g}')
        if minimum is not None and value < minimum:
            raise ConfigError(f'{key}: must be >= {minimum:g}, got {value:g}')
        return value

    def integer(self, key: str, minimum: int | None = None, required: bool = False) -> int:
        value = self._get(key, required)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f'{key}: expected an integer, got {value!r}')
        if minimum is not None and value < minimum:
            raise ConfigError(f'{key}: must be >= {minimum}, got {value}')
        return value

    def string(self, key: str, nonempty: bool = False) -> str:
        value = self._get(key, False)
        if not isinstance(value, str):
            raise ConfigError(f'{key}: expected a string, got {value!r}')
        if nonempty and not value:
            raise ConfigError(f'{key}: must not be empty')
        return value

    def choice(self, key: str, options: tuple[str, ...]) -> str:
        value = self.string(key)
        if value not in options:
            raise ConfigError(f'{key}: expected one of {" | ".join(options)}, got {value!r}')
        return value

    def _list(self, key: str) -> list:
        value = self._get(key, False)
        if isinstance(value, (str, bytes)) or not hasattr(value, '__len__'):
            raise ConfigError(f'{key}: expected a list, got {value!r}')
        return list(value)

    def str_list(self, key: str) -> list[str]:
        value = self._list(key)
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f'{key}: expected a list of strings, got {value!r}')
        return value

    def int_list(self, key: str) -> list[int]:
        value = self._list(key)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigError(f'{key}: expected a list of integers, got {value!r}')
        return value

    def vector(self, key: str, n: int, required: bool) -> tuple[float, ...]:
        self._get(key, required)
        value = self._list(key)
        if len(value) != n or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in value):
            raise ConfigError(f'{key}: expected {n} finite numbers, got {value!r}')
        return tuple(float(v) for v in value)

    def pose(self, prefix: str, required: bool = False) -> Pose:
        translation = self.vector(f'{prefix}.translation', 3, required)
        q = np.array(self.vector(f'{prefix}.rotation_xyzw', 4, required))
        norm = float(np.linalg.norm(q))
        if abs(norm - 1.0) > 1e-3:
            raise ConfigError(f'{prefix}.rotation_xyzw: not a unit quaternion (norm {norm:.4f})')
        return Pose(translation, tuple(float(v) for v in q / norm))


def default_params_file(filename: str = 'jax_perception.param.yaml') -> Path:
    """Return a shipped config file: the source tree's (editable installs too), else installed."""
    name = Path('config') / filename
    candidates = [Path(__file__).resolve().parent.parent / name,
                  Path(sys.prefix) / 'share' / 'jax_perception_node' / name]
    for path in candidates:
        if path.exists():
            return path
    raise ConfigError(f'params file: {name} not found in {[str(c.parent) for c in candidates]}')
