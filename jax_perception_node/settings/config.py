"""
Parameters of the node and the CLI: one YAML layout, validated into frozen dataclasses.

The param file uses the ROS 2 layout (``/**: ros__parameters:``). ROS flattens nested keys to
dotted names (``grid.x_min``); this module works on that flat form, so the node (which gets the
values from rclpy) and the CLI (which reads the YAML itself) validate through the same code.
Types, defaults and bounds come from the schema (parameters.py); this module adds the checks
that involve several keys and builds the dataclasses. Every error is a :class:`ConfigError`
that names the offending key.
"""

from dataclasses import dataclass
import os
from pathlib import Path
import sys
import sysconfig
from typing import Any, Mapping

import numpy as np

from .cameras import (camera_block, CameraConfig, channel_names, check_encoder,  # noqa: F401
                      check_map_shapes, EncoderConfig, image_shape, map_shape)
from .lidar_filter import lidar_filter, LidarFilter
from .lidar_timing import lidar_timing, LidarTiming
from .lidars import block_names, lidar_blocks, LidarConfig
from .npz_file import read_npz
from .param_checks import check_ros_type, check_value, unknown_key
from .param_file import read_param_file
from .parameters import (camera_defaults, camera_keys, ConfigError, defaults, is_foreign,
                         lidar_defaults, lidar_keys, NODE_KEYS)
from ..geometry.rotations import checked_norm, Pose

__all__ = ['AccumulationConfig', 'autoware_labels', 'BondConfig', 'CameraConfig',
           'config_from_parameters',
           'default_params_file', 'DiagnosticsConfig', 'FusionConfig',
           'GridConfig', 'LidarConfig', 'load_config', 'load_fusion_weights', 'OutputConfig',
           'PipelineConfig', 'Pose']

# |W|, |b| of the fusion projection: a 1x1 projection's weights are O(1); with inputs within
# channels.MAX_ABS_INPUT and thousands of channels, the products stay far below float32's max.
MAX_FUSION_WEIGHT = 1e6
# autoware_perception_msgs/ObjectClassification's labels, each at its constant's value
AUTOWARE_LABELS = ('UNKNOWN', 'CAR', 'TRUCK', 'BUS', 'TRAILER', 'MOTORCYCLE', 'BICYCLE',
                   'PEDESTRIAN', 'ANIMAL', 'HAZARD', 'OVER_DRIVABLE', 'UNDER_DRIVABLE')


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
class FusionConfig:
    """Camera lift and the optional 1x1 projection."""

    num_heights: int
    weights_file: str
    activation: str
    max_samples_per_cell: int = 0   # lift slots per cell; 0: derived at warm-up


@dataclass(frozen=True)
class HeadConfig:
    """The learned head (head.py); ``module`` and ``max_objects`` are static, the rest live."""

    module: str = ''                # 'package.module:factory', '' for none
    weights: str = ''               # checkpoint, '' for the head's shipped weights
    max_objects: int = 64           # K boxes decoded per frame
    score_threshold: float = 0.3    # boxes below are not published
    score_thresholds: tuple[float, ...] = ()    # per head class; (): score_threshold for all


@dataclass(frozen=True)
class DiagnosticsConfig:
    """Rolled-up /diagnostics status."""

    period_s: float
    window: int
    latency_budget_ms: float
    lidar_timeout_s: float
    latency_window_s: float = 5.0     # the latency rule judges the frames of this recent time


@dataclass(frozen=True)
class OutputConfig:
    """What the node publishes besides the BEV: the objects' message type and labels."""

    objects_type: str = 'vision_msgs'     # vision_msgs or autoware (static)
    # head class -> Autoware ObjectClassification label name; classes not listed are UNKNOWN
    autoware_labels: tuple[tuple[str, str], ...] = (
        ('car', 'CAR'), ('large_vehicle', 'TRUCK'), ('pedestrian', 'PEDESTRIAN'),
        ('cyclist', 'BICYCLE'))


@dataclass(frozen=True)
class BondConfig:
    """The bond the managed node keeps with Nav2's lifecycle manager once active (static)."""

    enabled: bool = True
    heartbeat_period_s: float = 0.1
    heartbeat_timeout_s: float = 4.0


@dataclass(frozen=True)
class AccumulationConfig:
    """Multi-sweep accumulation on odometry; ``num_sweeps`` is static, the limits are live."""

    num_sweeps: int               # sweeps per frame, the current one included; 1: off
    max_sweep_age_s: float        # earlier sweeps older than this are left out
    max_odometry_gap_s: float     # bracketing odometry samples further apart do not count
    pose_source: str = 'odometry'     # odometry (~/input/odometry) or tf (/tf)
    fixed_frame: str = 'map'          # with pose_source tf: grid.frame_id's pose in this frame


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
    accumulation: AccumulationConfig
    lidar_frame_id: str = 'lidar'   # the frame the ``lidar`` pose describes
    extrinsics_source: str = 'parameters'   # sensor poses: parameters, or tf (/tf_static, /tf)
    channel_names: tuple[str, ...] = ()     # camera feature channel names; () for the default
    head: HeadConfig = HeadConfig()
    output_bev_features: bool = True        # publish ~/output/bev_features
    lidar_filter: LidarFilter = LidarFilter()   # intensity field, range band, ego box (live)
    lidar_timing: LidarTiming = LidarTiming()   # per-point time field and deskew (live)
    output: OutputConfig = OutputConfig()
    bond: BondConfig = BondConfig()
    lidars: tuple[LidarConfig, ...] = ()     # lidars.names' blocks; (): the one of lidar.*
    max_lidar_delay_s: float = 0.05          # with lidars: a set's wait for its other clouds
    lidar_stamp_tolerance_s: float = 0.05    # with lidars: the stamps of one set
    encoder: EncoderConfig = EncoderConfig()
    executor: str = 'events'                 # the node's rclpy executor (ros/executors.py)

    @property
    def camera_images(self) -> bool:
        """Return True when the cameras send images (``cameras.<name>.input: image``)."""
        return bool(self.cameras) and self.cameras[0].input_kind == 'image'

    @property
    def map_shape(self) -> tuple[int, int, int] | None:
        """Return every camera's feature map (H_f, W_f, C), None without cameras."""
        return map_shape(self.cameras[0]) if self.cameras else None

    @property
    def image_shape(self) -> tuple[int, int, int] | None:
        """Return the encoder's input uint8[H_i, W_i, 3] (feature map x stride), or None."""
        return image_shape(self.cameras, self.encoder) if self.camera_images else None

    @property
    def lidar_sensors(self) -> tuple[LidarConfig, ...]:
        """Return the LiDARs processed together: ``lidars``, or the one of ``lidar.*``."""
        return self.lidars or (LidarConfig('', self.lidar_frame_id, self.lidar,
                                           self.lidar_filter.intensity_field, self.lidar_timing,
                                           self.lidar_filter.intensity_scale),)

    @property
    def camera_channels(self) -> int:
        """C, the camera feature channels (0 without cameras)."""
        return self.cameras[0].channels if self.cameras else 0

    @property
    def camera_channel_names(self) -> tuple[str, ...]:
        """Names of the C camera feature channels: ``channel_names`` or camera_0 .. camera_C-1."""
        return self.channel_names or tuple(f'camera_{k}' for k in range(self.camera_channels))

    @property
    def fused_channels(self) -> int:
        """Channels before the optional projection: LiDAR (6, or 7 with accumulation) + C + 1."""
        return 6 + (self.accumulation.num_sweeps > 1) + self.camera_channels + 1


def load_config(path: str | os.PathLike) -> PipelineConfig:
    """
    Load and validate a param YAML; raises ConfigError naming the bad key.

    The file is held to the node's typed parameters (``fx: 40`` for a double is refused as the
    node refuses it), so a file that loads here also starts the node.
    """
    params = read_param_file(path)
    for key, value in params.items():
        check_ros_type(key, value)
    return config_from_parameters(params)


def config_from_parameters(params: Mapping[str, Any]) -> PipelineConfig:
    """Validate flat dotted parameters (missing keys take their defaults) into a PipelineConfig."""
    p = {**defaults(), **params}
    camera_names = block_names('cameras', check_value('cameras.names', p['cameras.names']),
                               ('names', 'channel_names'))
    names = block_names('lidars', check_value('lidars.names', p['lidars.names']), ('names',))
    known = set(NODE_KEYS).union(*(camera_keys(name) for name in camera_names),
                                 *(lidar_keys(name) for name in names))
    # Keys of no group of this node (another node's, from a /** section) are not this node's.
    unknown = sorted(k for k in params if k not in known and not is_foreign(k))
    if unknown:
        raise unknown_key(unknown[0], {'cameras': camera_names, 'lidars': names})
    for name in camera_names:
        p = {**camera_defaults(name), **p}
    for name in names:
        p = {**lidar_defaults(name), **p}
    v = {key: check_value(key, p.get(key)) for key in sorted(known)}

    grid = GridConfig(**{f: v[f'grid.{f}'] for f in (
        'frame_id', 'x_min', 'x_max', 'y_min', 'y_max', 'z_min', 'z_max', 'resolution')})
    for lo, hi in (('x_min', 'x_max'), ('y_min', 'y_max'), ('z_min', 'z_max')):
        if getattr(grid, hi) <= getattr(grid, lo):
            raise ConfigError(f'grid.{hi}: must be greater than grid.{lo}')
    _check_fixed_frame(v)
    for axis, cells in (('x', grid.height), ('y', grid.width)):
        span = getattr(grid, f'{axis}_max') - getattr(grid, f'{axis}_min')
        if cells < 1 or abs(cells * grid.resolution - span) > 1e-6 * max(1.0, span):
            raise ConfigError(f'grid.resolution: the {axis} range {span:g} m is not a whole '
                              f'number of {grid.resolution:g} m cells')
    if grid.height * grid.width > 4096 * 4096:
        raise ConfigError(f'grid.resolution: {grid.height} x {grid.width} cells is too large')

    buckets = v['buckets']
    if not buckets or buckets != sorted(set(buckets)):
        raise ConfigError(f'buckets: expected strictly ascending positive sizes, got {buckets}')

    cameras = tuple(camera_block(v, name, _pose) for name in camera_names)
    check_map_shapes(cameras)

    fusion = FusionConfig(
        num_heights=v['fusion.num_heights'], weights_file=v['fusion.weights_file'],
        activation=v['fusion.activation'],
        max_samples_per_cell=v['fusion.max_samples_per_cell'])
    if fusion.max_samples_per_cell > len(cameras) * fusion.num_heights:
        raise ConfigError(f'fusion.max_samples_per_cell: at most cameras x num_heights = '
                          f'{len(cameras) * fusion.num_heights}, got '
                          f'{fusion.max_samples_per_cell}')

    cfg = PipelineConfig(
        grid=grid, lidar=_pose(v, 'lidar'), buckets=tuple(buckets),
        overflow_policy=v['overflow_policy'], cameras=cameras, fusion=fusion,
        max_camera_lidar_delay_s=v['sync.max_camera_lidar_delay_s'],
        compilation_cache_dir=v['compilation_cache_dir'],
        diagnostics=DiagnosticsConfig(**{f: v[f'diagnostics.{f}'] for f in (
            'period_s', 'window', 'latency_budget_ms', 'lidar_timeout_s',
            'latency_window_s')}),
        accumulation=AccumulationConfig(**{f: v[f'accumulation.{f}'] for f in (
            'num_sweeps', 'max_sweep_age_s', 'max_odometry_gap_s', 'pose_source',
            'fixed_frame')}),
        lidar_frame_id=v['lidar.frame_id'], extrinsics_source=v['extrinsics.source'],
        channel_names=channel_names(v['cameras.channel_names'], cameras),
        head=HeadConfig(**{f: v[f'head.{f}'] for f in (
            'module', 'weights', 'max_objects', 'score_threshold')},
            score_thresholds=tuple(v['head.score_thresholds'])),
        output_bev_features=v['output.bev_features'], lidar_filter=lidar_filter(v),
        lidar_timing=lidar_timing(v), output=OutputConfig(
            v['output.objects_type'], autoware_labels(v['output.autoware_labels'])),
        bond=BondConfig(**{f: v[f'bond.{f}'] for f in (
            'enabled', 'heartbeat_period_s', 'heartbeat_timeout_s')}),
        lidars=lidar_blocks(v, names, _pose), max_lidar_delay_s=v['sync.max_lidar_delay_s'],
        lidar_stamp_tolerance_s=v['sync.lidar_stamp_tolerance_s'],
        encoder=EncoderConfig(**{f: v[f'encoder.{f}'] for f in ('module', 'weights', 'stride')}),
        executor=v['executor'])
    check_encoder(cameras, cfg.encoder)
    if fusion.weights_file:
        load_fusion_weights(cfg)   # validate now, not on the first frame
    _check_head_keys(cfg.head, cfg.output.objects_type)
    return cfg


def _check_fixed_frame(v: dict) -> None:
    """Refuse, with pose_source tf, the grid frame as the fixed frame: no motion, silently."""
    fixed = v['accumulation.fixed_frame']
    if (v['accumulation.pose_source'] == 'tf'
            and fixed.lstrip('/') == v['grid.frame_id'].lstrip('/')):
        raise ConfigError(f'accumulation.fixed_frame: {fixed!r} is grid.frame_id, which never '
                          "moves in itself; name the frame the vehicle moves in ('odom' or "
                          "'map')")


def _check_head_keys(head: HeadConfig, objects_type: str) -> None:
    """Refuse head settings without a head: unused, they would look like a head that runs."""
    if head.weights and not head.module:
        raise ConfigError(f'head.weights: {head.weights} given, but head.module is empty '
                          f'(no head to load them into)')
    if head.score_thresholds and not head.module:
        raise ConfigError(f'head.score_thresholds: {list(head.score_thresholds)} given, but '
                          'head.module is empty (no head whose classes they threshold)')
    if objects_type != 'vision_msgs' and not head.module:
        # An integrator's own file asking for Autoware objects, without the shipped file's
        # head: no ~/output/objects at all, and its remap went nowhere, unsaid.
        raise ConfigError(f'output.objects_type: {objects_type} given, but head.module is '
                          'empty (no head, so no objects to publish)')


def load_fusion_weights(cfg: PipelineConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """
    Read ``W`` (C_in, C_out) and ``b`` (C_out,) float32 from the weights file, or None.

    C_out is at most 4096; the file may hold W and b only, each inflating to at most that
    many channels of 8-byte numbers (and an .npy header): a zip bomb is refused unread.
    """
    path = cfg.fusion.weights_file
    if not path:
        return None
    key = 'fusion.weights_file'
    c_in, max_out, max_item = cfg.fused_channels, 4096, 8
    arrays = read_npz(path, key, {'W': c_in * max_out * max_item, 'b': max_out * max_item})
    if 'W' not in arrays or 'b' not in arrays:
        raise ConfigError(f'{key}: {path} needs arrays "W" and "b", has {sorted(arrays)}')
    weights, bias = arrays['W'], arrays['b']
    if weights.ndim != 2 or weights.shape[0] != c_in or weights.shape[1] < 1:
        raise ConfigError(f'{key}: W must be ({c_in}, C_out) for {c_in} fused channels, '
                          f'got {weights.shape}')
    if weights.shape[1] > max_out:
        raise ConfigError(f'{key}: W has {weights.shape[1]} output channels, at most '
                          f'{max_out}')
    if bias.shape != (weights.shape[1],):
        raise ConfigError(f'{key}: b must be ({weights.shape[1]},), got {bias.shape}')
    for name, arr in (('W', weights), ('b', bias)):
        # Real numbers only: a timedelta has no isfinite, a complex one would lose its part.
        if arr.dtype.kind not in 'fiu':
            raise ConfigError(f'{key}: {name} must be real numbers, got {arr.dtype}')
        if not np.all(np.isfinite(arr)):
            raise ConfigError(f'{key}: {name} has a value that is not finite '
                              f'({arr[~np.isfinite(arr)].flat[0]})')
        # With inputs bounded by MAX_ABS_INPUT, this keeps every projected value finite (a
        # Python float compared: the limit cast to float16 would overflow).
        if arr.size and float(np.abs(arr).max()) > MAX_FUSION_WEIGHT:
            raise ConfigError(f'{key}: {name} has a value of magnitude '
                              f'{float(np.abs(arr).max()):.3g}, more than {MAX_FUSION_WEIGHT:g}')
    return weights.astype(np.float32), bias.astype(np.float32)


def autoware_labels(items: list[str]) -> tuple[tuple[str, str], ...]:
    """Return the (head class, Autoware label) pairs of ``output.autoware_labels`` items."""
    pairs = []
    for item in items:
        name, _, label = item.partition(':')
        if not name or label not in AUTOWARE_LABELS:
            raise ConfigError(f'output.autoware_labels: {item!r} is not class:LABEL with LABEL '
                              f'one of {" | ".join(AUTOWARE_LABELS)}')
        if name in dict(pairs):
            raise ConfigError(f'output.autoware_labels: class {name!r} mapped twice')
        pairs.append((name, label))
    return tuple(pairs)


def _pose(v: Mapping[str, Any], prefix: str) -> Pose:
    q = np.array(v[f'{prefix}.rotation_xyzw'])
    try:
        norm = checked_norm(q, f'{prefix}.rotation_xyzw')
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Pose(tuple(v[f'{prefix}.translation']), tuple(float(c) for c in q / norm))


def default_params_file(filename: str = 'jax_perception.param.yaml') -> Path:
    """
    Return a shipped config file: the ament index's (a colcon install) first, else ours.

    Ours: the source tree's (editable installs), else the one pip installed: under sys.prefix,
    or the data folder of pip's scheme where that is another (``--user``, Debian's
    /usr/local).
    """
    name = Path('config') / filename
    candidates = []
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.append(Path(get_package_share_directory('jax_perception_node')) / name)
    except (ImportError, LookupError, OSError):   # no index, not in it, AMENT_PREFIX_PATH unset
        pass
    data = [sys.prefix, sysconfig.get_path('data'),
            sysconfig.get_path('data', f'{os.name}_user')]
    candidates += [Path(__file__).resolve().parents[2] / name] + [
        Path(root) / 'share' / 'jax_perception_node' / name for root in dict.fromkeys(data)]
    for path in candidates:
        if path.exists():
            return path
    raise ConfigError(f'params file: {name} not found in {[str(c.parent) for c in candidates]}')
