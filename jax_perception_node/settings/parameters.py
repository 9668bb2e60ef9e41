"""
The parameter schema: one table gives every key its type, default, bounds, unit and meaning.

Everything else about parameters comes from :data:`SCHEMA`: the node declares typed ROS
parameters from it, the config layer checks types and bounds with it, the live parameter
callback asks it which keys need a restart, and
``python -m jax_perception_node.settings.schema_export`` writes the docs/parameters.md table and
``schema/jax_perception.schema.json`` from it (a test checks the shipped YAML against it).

Types are ROS parameter types (``double``, ``integer_array``, ...). A key is *static* when it
changes array shapes or what the executables were compiled with: a running node refuses to
change it and says why. Every other key is *live* and applies at once, without a compile.
Every numeric key has inclusive physical bounds (the constants above :data:`SCHEMA`), which
the node exports as ROS ranges. ``cameras.<name>.fx`` stands for every name in ``cameras.names``,
``lidars.<name>.frame_id`` for every name in ``lidars.names``.
"""

from dataclasses import dataclass
from typing import Any

CAMERA_PREFIX = 'cameras.<name>.'
LIDAR_PREFIX = 'lidars.<name>.'

# Why a static key needs a restart.
SHAPES = 'changes array shapes'
COMPILED = 'compiled into the executables'
BUILT = 'fixed when the pipeline is built'
STARTED = 'chosen when the node starts'

SCALAR_TYPES = ('bool', 'integer', 'double', 'string')
ARRAY_TYPES = ('integer_array', 'double_array', 'string_array')


class ConfigError(ValueError):
    """A parameter is missing, of the wrong type or out of range; the message names the key."""


def number_text(value: float) -> str:
    """Return a bound as people read it: 16777216, 86400, 0.001, 1e+06."""
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e6):
        return str(int(value))
    return f'{value:g}'


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: ROS type, default (None: required), bounds, unit, meaning, live or static."""

    key: str
    ros_type: str
    default: Any
    description: str
    unit: str = ''
    minimum: float | None = None     # inclusive; for arrays: of every item
    maximum: float | None = None     # inclusive; for arrays: of every item
    choices: tuple[str, ...] = ()
    length: int | None = None        # fixed array length
    nonempty: bool = False           # strings: '' is refused (arrays: as an item)
    static: str | None = None        # why changing it needs a restart; None: live

    @property
    def item_type(self) -> str:
        """Return the scalar type of the value or of its items."""
        return self.ros_type.removesuffix('_array')

    @property
    def type_label(self) -> str:
        """Return the type as people write it: 'double', 'double[3]', 'integer[]'."""
        if self.ros_type in SCALAR_TYPES:
            return self.ros_type
        return f'{self.item_type}[{self.length or ""}]'

    @property
    def summary(self) -> str:
        """Return unit and description in one line, as the YAML comment and ROS descriptor say."""
        return f'{self.unit}, {self.description}' if self.unit else self.description

    @property
    def comment(self) -> str:
        """Return the shipped YAML's comment for this key: the summary, and restart if static."""
        return self.summary + (' (static: restart to change)' if self.static else '')

    def bounds_text(self) -> str:
        """Return the bounds as text ('>= 0', '1 .. 16', 'none | relu'), '' when unbounded."""
        if self.choices:
            return ' | '.join(self.choices)
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f'{number_text(lo)} .. {number_text(hi)}'
        parts = []
        if lo is not None:
            parts.append(f'>= {number_text(lo)}')
        if hi is not None:
            parts.append(f'<= {number_text(hi)}')
        if self.nonempty:
            parts.append('not empty')
        return ', '.join(parts)


# Physical bounds (issue 16). Every numeric key is bounded, so a value the config accepts is a
# normal float32 (the kernels' precision), converts to integer nanoseconds and timer periods
# without overflow and is physically sensible. Every bound is inclusive: the ROS descriptors'
# ranges (inclusive by definition) then say exactly what the config layer checks.
SPAN_M = 1e4            # m: grid x/y edges and sensor translations (float32 keeps 1 mm at 10 km)
HEIGHT_M = 1e3          # m: grid z edges
DAY_S = 86400.0         # s: delays, gaps, ages and timeouts
HOUR_S = 3600.0         # s: timer periods
QUAT = 1.001            # quaternion components: unit length within the 1e-3 the config allows
MAX_POINTS = 2 ** 24    # float32 counts points exactly up to 2^24
MAX_PIXELS = 8192       # px: feature-map rows and columns
FOCAL_PX = (1e-3, 1e6)  # px: float32-normal, and 1 / f and f * x stay finite in float32
PRINCIPAL_PX = 1e6      # px: |cx|, |cy|
DISTORTION = 1e3        # |k|, |p|: real lenses stay well below


def _p(key, type_, default, description, **kwargs) -> ParamSpec:
    return ParamSpec(key, type_, default, description, **kwargs)


def _s(key, default, description, lo, hi, **kwargs) -> ParamSpec:
    """Return a bounded double in seconds."""
    return ParamSpec(key, 'double', default, description, unit='s', minimum=lo, maximum=hi,
                     **kwargs)


def _m(key, default, description, bound, **kwargs) -> ParamSpec:
    """Return a double in metres within +-bound."""
    return ParamSpec(key, 'double', default, description, unit='m', minimum=-bound,
                     maximum=bound, **kwargs)


_C, _L = CAMERA_PREFIX, LIDAR_PREFIX
_ROTATION = {'length': 4, 'minimum': -QUAT, 'maximum': QUAT}
_TRANSLATION = {'unit': 'm', 'length': 3, 'minimum': -SPAN_M, 'maximum': SPAN_M}
_BOX = {**_TRANSLATION, 'length': 6}
SCHEMA: tuple[ParamSpec, ...] = (
    _p('grid.frame_id', 'string', 'base_link',
       'frame of the BEV grid and of the published messages (REP-103: x forward, y left, z up)',
       nonempty=True),
    _m('grid.x_min', -51.2, 'lower x edge; rows H = round((x_max - x_min) / resolution)',
       SPAN_M, static=SHAPES),
    _m('grid.x_max', 51.2, 'upper x edge', SPAN_M, static=SHAPES),
    _m('grid.y_min', -51.2, 'lower y edge; columns W = round((y_max - y_min) / resolution)',
       SPAN_M, static=SHAPES),
    _m('grid.y_max', 51.2, 'upper y edge', SPAN_M, static=SHAPES),
    _m('grid.z_min', -2.0,
       'points below are ignored; the lowest camera-lift level sits above it', HEIGHT_M,
       static=BUILT),
    _m('grid.z_max', 4.0, 'points at or above are ignored', HEIGHT_M, static=BUILT),
    _p('grid.resolution', 'double', 0.4,
       'the edge of a square cell; with the x/y ranges it fixes H and W', unit='m per cell',
       minimum=1e-3, maximum=100.0, static=SHAPES),
    _p('extrinsics.source', 'string', 'parameters',
       'where the sensor poses come from: parameters (lidar.*, cameras.<name>.*; clouds and '
       'maps must be in their configured frames) or tf (/tf_static and /tf: the pose of each '
       "message's header.frame_id in grid.frame_id at its stamp)",
       choices=('parameters', 'tf')),
    _p('lidar.frame_id', 'string', 'lidar',
       'frame the LiDAR pose describes; with extrinsics.source parameters a cloud stamped '
       'with another frame is rejected',
       nonempty=True),
    _p('lidar.translation', 'double_array', [0.0, 0.0, 1.8],
       'LiDAR origin in the grid frame', **_TRANSLATION),
    _p('lidar.rotation_xyzw', 'double_array', [0.0, 0.0, 0.0, 1.0],
       'LiDAR orientation in the grid frame, a unit quaternion (x, y, z, w)', **_ROTATION),
    _p('lidar.intensity_field', 'string', 'intensity', 'the PointCloud2 field read as the '
       'intensity (intensity, signal, reflectivity, i); a cloud without it reads 0, warned',
       nonempty=True),
    _p('lidar.intensity_scale', 'double', 1.0, 'the intensity is multiplied by this: 0.125 for '
       "an Ouster's signal, 255 for a 0-1 simulator (the head was trained on 0-255)",
       minimum=1e-6, maximum=1e6),
    _p('lidar.min_range_m', 'double', 0.0, 'points nearer the LiDAR origin are dropped',
       unit='m', minimum=0.0, maximum=SPAN_M),
    _p('lidar.max_range_m', 'double', SPAN_M, 'points further from the LiDAR origin are dropped',
       unit='m', minimum=1e-3, maximum=SPAN_M),
    _p('lidar.ego_box', 'double_array', [0.0] * 6, 'the body in the grid frame, x_min x_max '
       'y_min y_max z_min z_max: points inside are dropped; all 0 for none', **_BOX),
    _p('lidar.time_field', 'string', '',
       "the PointCloud2 field of each point's time (time, t, timestamp, time_stamp: "
       "docs/integrators.md lists the drivers'); '' for none (no deskew)"),
    _p('lidar.time_unit', 'string', 's', 'the unit of lidar.time_field',
       choices=('s', 'ms', 'us', 'ns')),
    _p('lidar.time_reference', 'string', 'stamp',
       'lidar.time_field counts from the header stamp (stamp) or from the epoch (absolute)',
       choices=('stamp', 'absolute')),
    _p('lidar.deskew', 'bool', True,
       "move each point to where it was at the cloud's stamp, by the ego motion over its time "
       '(lidar.time_field; the motion from accumulation.pose_source)'),
    _p('lidars.names', 'string_array', [],
       'several LiDARs in one node (letters, digits, underscores), each on '
       '~/input/<name>/pointcloud with a lidars.<name> block, processed together; [] for one '
       'LiDAR on ~/input/pointcloud (lidar.*)', static=SHAPES),
    _p(_L + 'frame_id', 'string', '',
       "frame the LiDAR's pose describes; '' for lidar_<name>; with extrinsics.source "
       'parameters a cloud stamped with another frame is rejected'),
    _p(_L + 'translation', 'double_array', None, 'LiDAR origin in the grid frame',
       **_TRANSLATION),
    _p(_L + 'rotation_xyzw', 'double_array', None,
       'LiDAR orientation in the grid frame, a unit quaternion (x, y, z, w)', **_ROTATION),
    _p(_L + 'intensity_field', 'string', 'intensity',
       'the PointCloud2 field read as its intensity (as lidar.intensity_field)', nonempty=True),
    _p(_L + 'intensity_scale', 'double', 1.0,
       'its intensity is multiplied by this (as lidar.intensity_scale), to bring every '
       "LiDAR's to one scale in the BEV", minimum=1e-6, maximum=1e6),
    _p(_L + 'time_field', 'string', '',
       "the field of each point's time (as lidar.time_field); '' for none: its cloud is "
       'moved to the set stamp as a whole'),
    _p(_L + 'time_unit', 'string', 's', 'the unit of its time_field',
       choices=('s', 'ms', 'us', 'ns')),
    _p(_L + 'time_reference', 'string', 'stamp',
       'its time_field counts from the header stamp (stamp) or from the epoch (absolute)',
       choices=('stamp', 'absolute')),
    _p('buckets', 'integer_array', [16384, 32768, 65536, 131072],
       'capacities, strictly ascending; one compiled executable each', unit='points',
       minimum=1, maximum=MAX_POINTS, static=SHAPES),
    _p('overflow_policy', 'string', 'subsample',
       'above the largest bucket: subsample (even stride over the whole cloud) or truncate '
       '(first points)', choices=('subsample', 'truncate'), static=BUILT),
    _p('cameras.names', 'string_array', [],
       'camera names (letters, digits, underscores); each needs a cameras.<name> block',
       static=SHAPES),
    _p('cameras.channel_names', 'string_array', [],
       'names of the camera feature channels (letters, digits, underscores; unique), the '
       'GridMap layers; [] for camera_0 .. camera_<C-1>; else one per channel',
       nonempty=True),
    _p(_C + 'input', 'string', 'features',
       'what the camera publishes: features (32FC<C> maps on ~/input/camera/<name>/features) '
       'or image (rgb, bgr, rgba, bgra, mono, bayer 8 or 16 bits, yuv422 Image on '
       '.../image, jpeg or png '
       'CompressedImage on .../image/compressed, encoded by encoder.module); the same for '
       'every camera', choices=('features', 'image'), static=SHAPES),
    _p(_C + 'height', 'integer', None, 'feature-map rows H_f', unit='px', minimum=1,
       maximum=MAX_PIXELS, static=SHAPES),
    _p(_C + 'width', 'integer', None, 'feature-map columns W_f', unit='px', minimum=1,
       maximum=MAX_PIXELS, static=SHAPES),
    _p(_C + 'channels', 'integer', None, 'feature channels C, the same for every camera',
       minimum=1, maximum=1024, static=SHAPES),
    _p(_C + 'fx', 'double', None, 'focal length at feature-map resolution', unit='px',
       minimum=FOCAL_PX[0], maximum=FOCAL_PX[1]),
    _p(_C + 'fy', 'double', None, 'focal length at feature-map resolution', unit='px',
       minimum=FOCAL_PX[0], maximum=FOCAL_PX[1]),
    _p(_C + 'cx', 'double', None,
       'principal point column at feature-map resolution (pixel centres at integer '
       'coordinates)', unit='px', minimum=-PRINCIPAL_PX, maximum=PRINCIPAL_PX),
    _p(_C + 'cy', 'double', None, 'principal point row at feature-map resolution', unit='px',
       minimum=-PRINCIPAL_PX, maximum=PRINCIPAL_PX),
    _p(_C + 'translation', 'double_array', None,
       'camera optical-frame origin in the grid frame', **_TRANSLATION),
    _p(_C + 'rotation_xyzw', 'double_array', None,
       'optical frame (z forward, x right, y down) orientation in the grid frame, a unit '
       'quaternion (x, y, z, w)', **_ROTATION),
    _p(_C + 'frame_id', 'string', '',
       "frame the camera pose describes; '' for <name>_optical; with extrinsics.source "
       'parameters a feature map stamped with another frame is rejected'),
    _p(_C + 'distortion_model', 'string', 'none', 'lens distortion of the camera image',
       choices=('none', 'plumb_bob', 'rational_polynomial', 'equidistant')),
    _p(_C + 'rectified', 'bool', False,
       "its images or maps come from the rectified image (image_rect): a CameraInfo's P gives "
       'the intrinsics, without distortion; false: K and D (the raw image)'),
    _p(_C + 'distortion', 'double_array', [],
       'coefficients of distortion_model, in normalized image coordinates: 5 for plumb_bob '
       '(k1 k2 p1 p2 k3), 8 for rational_polynomial (then k4 k5 k6), 4 for equidistant '
       '(fisheye, k1 k2 k3 k4), none: [] or zeros', minimum=-DISTORTION, maximum=DISTORTION),
    _p('fusion.num_heights', 'integer', 4, 'height levels per cell sampled by the camera lift',
       minimum=1, maximum=64, static=SHAPES),
    _p('fusion.max_samples_per_cell', 'integer', 0,
       'camera-lift sample slots per cell; 0: the most any cell needs with the start-up '
       'calibration', minimum=0, maximum=4096, static=SHAPES),
    _p('fusion.weights_file', 'string', '',
       'optional .npz with W (6 + C + 1, C_out) and b (C_out) and no other arrays, C_out <= '
       "4096, every value within +-1e6, loaded with allow_pickle=False; '' for none",
       static=SHAPES),
    _p('fusion.activation', 'string', 'none',
       'none or relu, applied after the projection (only with weights)', choices=('none', 'relu'),
       static=COMPILED),
    _p('accumulation.num_sweeps', 'integer', 1,
       'LiDAR sweeps voxelized per frame, the current one included; 1: off (needs '
       '~/input/odometry when above 1)', unit='sweeps', minimum=1, maximum=16, static=SHAPES),
    _s('accumulation.max_sweep_age_s', 0.5,
       'an earlier sweep older than this (from the current stamp) is left out', 1e-3, DAY_S),
    _s('accumulation.max_odometry_gap_s', 0.2,
       'poses (odometry, TF) bracketing a cloud stamp further apart than this do not count; '
       'a cloud after the newest pose takes it moved on by its twist, up to this long (at '
       'most 0.2 s)',
       1e-3, DAY_S),
    _p('accumulation.pose_source', 'string', 'odometry',
       'ego motion between sweeps: odometry (~/input/odometry) or tf (the pose of '
       'grid.frame_id in accumulation.fixed_frame from /tf at each cloud stamp)',
       choices=('odometry', 'tf')),
    _p('accumulation.fixed_frame', 'string', 'map',
       'the fixed frame of the ego motion with pose_source tf', nonempty=True),
    _s('sync.max_camera_lidar_delay_s', 0.1,
       'a feature map further than this from the LiDAR stamp is masked for that frame',
       0.0, DAY_S),
    _s('sync.max_lidar_delay_s', 0.05,
       'with lidars.names: how long the first cloud of a set waits for the other LiDARs; '
       'then the set is processed with what arrived', 0.0, 60.0),
    # Under half a second: a set's stamps span twice this, and a cloud's time from the set's
    # stamp (deskew) or a step back (a new timeline) counts from 1 s (MAX_POINT_TIME_S,
    # lidar_sets.JUMP_BACK_NS).
    _s('sync.lidar_stamp_tolerance_s', 0.05,
       'with lidars.names: clouds stamped within this of the first cloud of a set join it',
       0.0, 0.5),
    _p('compilation_cache_dir', 'string', '~/.cache/jax_perception_node/xla',
       "persistent XLA cache, created 0700; '' disables it", static=BUILT),
    _p('executor', 'string', 'events',
       "the rclpy executor that spins the node: events (rclpy's EventsExecutor, in C++; "
       'rclpy >= 7.1.4) or single_threaded (its SingleThreadedExecutor, in Python, which '
       'took more CPU per message: docs/performance.md)', choices=('events', 'single_threaded'),
       static=STARTED),
    _p('head.module', 'string', '',
       "learned head on the fused BEV, 'package.module:factory' (a CenterPoint-style head, "
       "docs/design.md); '' for none", static=COMPILED),
    _p('head.weights', 'string', '',
       "the head's checkpoint (.npz, loaded with allow_pickle=False); '' for the weights the "
       'head ships; a new file of the same shapes applies without a compile; refused '
       'without head.module'),
    _p('head.max_objects', 'integer', 64,
       'K, the highest heatmap peaks decoded into boxes on the device per frame',
       unit='boxes', minimum=1, maximum=1024, static=SHAPES),
    _p('head.score_threshold', 'double', 0.3,
       'boxes scoring below it are not published', minimum=0.0, maximum=1.0),
    _p('head.score_thresholds', 'double_array', [],
       "per-class thresholds, one per head class in the head's class order (the reference "
       'head: car, large_vehicle, pedestrian, cyclist); [] for head.score_threshold in every '
       'class', minimum=0.0, maximum=1.0),
    _p('encoder.module', 'string', '',
       "image encoder of cameras with input image, 'package.module:factory' (shipped: "
       'jax_perception_node.detection.encoders.pooled:rgb, mean RGB at the stride, '
       ":appearance, the sample drive's hand-made features, and "
       'jax_perception_node.detection.encoders.learned:cnn, a small CNN trained with the head '
       "end to end), run on the device in the frame's executable; '' for none",
       static=COMPILED),
    _p('encoder.weights', 'string', '',
       "the encoder's checkpoint (.npz, loaded with allow_pickle=False); '' for the weights "
       'it ships; a new file of the same shapes applies without a compile'),
    _p('encoder.stride', 'integer', 4,
       'image pixels per feature-map pixel: every image is scaled on the host to the feature '
       'map size times this, the encoder input', unit='px', minimum=1, maximum=64,
       static=SHAPES),
    _p('output.bev_features', 'bool', True,
       'publish ~/output/bev_features (3.9 MB a frame at the default grid); false for '
       'deployments that only want objects (bev_image and bev_grid_map stay on demand)'),
    _p('output.objects_type', 'string', 'vision_msgs',
       'the type of ~/output/objects: vision_msgs (Detection3DArray) or autoware '
       '(autoware_perception_msgs/DetectedObjects)', choices=('vision_msgs', 'autoware'),
       static=BUILT),
    _p('output.autoware_labels', 'string_array',
       ['vehicle:CAR', 'car:CAR', 'large_vehicle:TRUCK', 'truck:TRUCK', 'bus:BUS',
        'trailer:TRAILER', 'motorcycle:MOTORCYCLE', 'bicycle:BICYCLE', 'cyclist:BICYCLE',
        'pedestrian:PEDESTRIAN'],
       "head class to Autoware label, 'class:LABEL' each; a class not listed is UNKNOWN",
       nonempty=True),
    _p('bond.enabled', 'bool', True,
       "the managed node keeps a bond with Nav2's lifecycle manager once active (topic /bond)",
       static=BUILT),
    _s('bond.heartbeat_period_s', 0.1, 'time between bond heartbeats', 1e-3, HOUR_S,
       static=BUILT),
    _s('bond.heartbeat_timeout_s', 4.0, 'the peer is gone after this long without its heartbeat',
       1e-3, HOUR_S, static=BUILT),
    _s('diagnostics.period_s', 1.0, 'time between /diagnostics messages', 1e-3, HOUR_S),
    _p('diagnostics.window', 'integer', 300, 'length of the rolling latency window',
       unit='frames', minimum=1, maximum=100000),
    _p('diagnostics.latency_budget_ms', 'double', 100.0,
       'WARN when the p99 of total_ms over diagnostics.latency_window_s exceeds it',
       unit='ms', minimum=1e-3, maximum=60000.0),
    _s('diagnostics.latency_window_s', 5.0,
       'the latency rule judges the frames of this recent time: an outlier clears after it',
       1e-3, HOUR_S),
    _s('diagnostics.lidar_timeout_s', 1.0, 'time without a LiDAR frame before ERROR',
       1e-3, DAY_S),
)

BY_KEY: dict[str, ParamSpec] = {spec.key: spec for spec in SCHEMA}
# Where the shipped parameter file differs from the schema's default, on purpose: it turns on
# the reference head, whose weights fit the shipped grid and cameras (a config built in code,
# with other shapes, has no head unless it names one), and it deskews by the sample drive's and
# Velodyne's per-point field (the reference head is trained on deskewed sweeps; a driver
# without per-point times has none by default).
REFERENCE_HEAD = 'jax_perception_node.detection.heads.centerpoint:object_head'
SHIPPED_VALUES = {'head.module': REFERENCE_HEAD, 'lidar.time_field': 'time'}
TEMPLATES = (CAMERA_PREFIX, LIDAR_PREFIX)
NODE_KEYS = tuple(s.key for s in SCHEMA if not s.key.startswith(TEMPLATES))
CAMERA_KEYS = tuple(s.key[len(CAMERA_PREFIX):] for s in SCHEMA
                    if s.key.startswith(CAMERA_PREFIX))
LIDAR_KEYS = tuple(s.key[len(LIDAR_PREFIX):] for s in SCHEMA if s.key.startswith(LIDAR_PREFIX))
# The first name tokens of this node's keys (grid, lidar, cameras, ..., buckets). An unknown key
# under one of them is a misspelling and refused; any other key is another node's (a stack's
# params file gives every node its /** section: vehicle_frame, qos_overrides, use_sim_time).
GROUPS = frozenset(key.split('.')[0] for key in NODE_KEYS)


def is_foreign(key: str) -> bool:
    """Return True for a key outside every group of this node's parameters (another node's)."""
    return key.split('.')[0] not in GROUPS


def spec_for(key: str) -> ParamSpec | None:
    """Return the schema entry of a flat key (``cameras.front.fx`` finds the template)."""
    if key in BY_KEY:
        return BY_KEY[key]
    parts = key.split('.')
    if len(parts) == 3 and parts[0] in ('cameras', 'lidars') and parts[1] != 'names':
        return BY_KEY.get(f'{parts[0]}.<name>.{parts[2]}')
    return None


def camera_keys(name: str) -> list[str]:
    """Return the flat keys of one camera block."""
    return [f'cameras.{name}.{leaf}' for leaf in CAMERA_KEYS]


def lidar_keys(name: str) -> list[str]:
    """Return the flat keys of one LiDAR block (``lidars.names``)."""
    return [f'lidars.{name}.{leaf}' for leaf in LIDAR_KEYS]


def is_camera_name(name: str) -> bool:
    """
    Return True for a usable camera or LiDAR name: letters, digits, underscores.

    Not a digit first: it becomes a token of its topics (~/input/<name>/pointcloud), and ROS
    refuses a token that starts with one.
    """
    return (bool(name) and name.replace('_', '').isalnum() and name.isascii()
            and not name[0].isdigit())


def defaults() -> dict[str, Any]:
    """Return the flat defaults of every key outside the camera and LiDAR blocks (lists copied)."""
    return {key: _copy(BY_KEY[key].default) for key in NODE_KEYS}


def camera_defaults(name: str) -> dict[str, Any]:
    """Return the flat defaults of one camera block's optional keys (frame, distortion)."""
    return _block_defaults(CAMERA_PREFIX, f'cameras.{name}.')


def lidar_defaults(name: str) -> dict[str, Any]:
    """Return the flat defaults of one LiDAR block's optional keys (frame, fields, time)."""
    return _block_defaults(LIDAR_PREFIX, f'lidars.{name}.')


def _block_defaults(template: str, prefix: str) -> dict[str, Any]:
    return {prefix + spec.key[len(template):]: _copy(spec.default) for spec in SCHEMA
            if spec.key.startswith(template) and spec.default is not None}


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value
