"""
The fused BEV as a grid_map_msgs/GridMap: named layers, geometry, grid_map's storage order.

No ROS import: the message is built from message classes passed in, keyed by their ROS type
names (``'grid_map_msgs/msg/GridMap'``, ``'std_msgs/msg/Header'``, ...): rclpy's classes in the
node (``types_by_name``), the ``rosbags`` type store's ``types`` in replay.

Layers (``layer_names``): one per output channel, named as in docs/users.md's channel table; with a
fusion projection the channels are learned ones, ``feature_0`` ... Each layer is NaN where it
has no data, as grid_map expects: the height and intensity statistics (and ``time_lag_mean``)
where ``occupancy`` is 0, the camera channels where ``coverage`` is 0. ``occupancy``,
``density`` and ``coverage`` are data everywhere (0 is a value), and so are projected features.
The raw ``bev_features`` keep 0 in empty cells (the kernel contract). ``basic_layers`` is empty:
no one layer decides whether a cell is valid, each layer says so itself (grid_map_rviz_plugin
then takes validity from the layer it draws as height, so empty cells are not drawn as a floor).

Geometry (grid_map_core's rules): ``length_x = H * resolution`` along x, ``length_y =
W * resolution`` along y, ``pose`` = the grid's centre ``(x_min + length_x / 2, y_min +
length_y / 2, 0)`` in ``grid.frame_id`` with identity orientation; a cell at grid_map index
``(a, b)`` lies at ``centre + (length / 2 - (index + 0.5) * resolution)`` per axis.

Storage (grid_map_ros ``matrixEigenCopyToMultiArrayMessage`` of a column-major Eigen matrix):
layer matrix ``M[a, b] = features[H-1-a, W-1-b, k]`` (index (0, 0) at the +x, +y corner: the
``render.forward_up`` view, so bev_image pixel (r, c) is grid_map index (r, c)), its rows (a,
along x) varying fastest in ``data``; ``layout.dim`` = [('column_index', W, H * W),
('row_index', H, H)], ``data_offset`` 0; start indices 0 (not a shifted circular buffer).
"""

import array
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .render import forward_up
from ..geometry.stamps import split_ns
from ..settings.channels import (COVERAGE_CHANNEL, LIDAR_CHANNELS,
                                 projected_channels as feature_names)
from ..settings.parameters import ConfigError

GRID_MAP_TYPE = 'grid_map_msgs/msg/GridMap'
# Every message class ``grid_map_message`` builds, by ROS type name.
MESSAGE_TYPES = (GRID_MAP_TYPE, 'grid_map_msgs/msg/GridMapInfo', 'std_msgs/msg/Header',
                 'builtin_interfaces/msg/Time', 'geometry_msgs/msg/Pose',
                 'geometry_msgs/msg/Point', 'geometry_msgs/msg/Quaternion',
                 'std_msgs/msg/Float32MultiArray', 'std_msgs/msg/MultiArrayLayout',
                 'std_msgs/msg/MultiArrayDimension')
OCCUPANCY, COVERAGE = LIDAR_CHANNELS[0], COVERAGE_CHANNEL
DATA_IN_EMPTY_CELLS = ('occupancy', 'density')   # LiDAR layers whose 0 is a value


def layer_names(lidar_channels: Sequence[str], camera_channels: int,
                channel_names: Sequence[str] = (),
                projected_channels: int | None = None) -> tuple[str, ...]:
    """
    Layer names of the output channels, in channel order.

    ``lidar_channels``: ``channels.lidar_channels(num_sweeps)``; ``camera_channels``: C;
    ``channel_names``: ``cameras.channel_names`` (empty: ``camera_0`` ...);
    ``projected_channels``: C_out of a fusion projection (``pipe.output_channels`` when
    ``pipe.projected``), else None. Raises ConfigError when the names do not fit.
    """
    if projected_channels is not None:
        return feature_names(projected_channels)
    cameras = tuple(channel_names) or tuple(f'camera_{k}' for k in range(camera_channels))
    if len(cameras) != camera_channels:
        raise ConfigError(f'cameras.channel_names: {len(cameras)} names for {camera_channels} '
                          'camera feature channels (give one per channel, or none)')
    names = tuple(lidar_channels) + cameras + (COVERAGE,)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated or not all(cameras):
        raise ConfigError(f'cameras.channel_names: every layer needs its own non-empty name; '
                          f'{repeated or "an empty name"} in {list(names)}')
    return names


@dataclass(frozen=True)
class GridMapLayers:
    """
    The layers of one pipeline's output: names, and which are NaN where they hold no data.

    ``nan_where_zero``: (mask channel, first, end) triples; layers ``first`` .. ``end - 1`` are
    NaN where the mask channel is 0. Fixed per pipeline (channels are static); build it with
    ``GridMapLayers.of``.
    """

    names: tuple[str, ...]
    nan_where_zero: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def of(cls, lidar_channels: Sequence[str], camera_channels: int,
           channel_names: Sequence[str] = (),
           projected_channels: int | None = None) -> 'GridMapLayers':
        """Layers for a pipeline (arguments as for ``layer_names``); raises ConfigError."""
        names = layer_names(lidar_channels, camera_channels, channel_names, projected_channels)
        if projected_channels is not None:
            return cls(names)
        lidar = tuple(lidar_channels)
        # The statistics follow occupancy and density (channels.LIDAR_CHANNELS), up to the end
        # of the LiDAR block; the camera block ends just before coverage.
        first = max(lidar.index(n) for n in DATA_IN_EMPTY_CELLS) + 1
        groups = ((lidar.index(OCCUPANCY), first, len(lidar)),)
        if camera_channels:
            groups += ((len(names) - 1, len(lidar), len(lidar) + camera_channels),)
        return cls(names, groups)

    @classmethod
    def for_pipeline(cls, cfg, pipe) -> 'GridMapLayers':
        """
        Layers of ``pipe``'s output under ``cfg``; raises ConfigError.

        Read by attribute: ``pipe.lidar_channels``, ``projected``, ``output_channels``;
        ``cfg.camera_channels``, ``channel_names``.
        """
        return cls.of(pipe.lidar_channels, cfg.camera_channels, cfg.channel_names,
                      pipe.output_channels if pipe.projected else None)

    def storage(self, features: np.ndarray) -> np.ndarray:
        """
        float32[H, W, C] BEV -> float32[C, W * H]: row k is layer k's ``data``.

        Column-major in grid_map's index order (see the module doc), NaN where a layer has no
        data. One strided copy of the whole array, then one masked add per group: about 2-4 ms
        for 256 x 256 x 15 on this CPU, so it is built only while someone subscribes.
        """
        if features.ndim != 3 or features.shape[2] != len(self.names):
            raise ValueError(f'features must be (H, W, {len(self.names)}) for layers '
                             f'{list(self.names)}, got {features.shape}')
        rows, cols, count = features.shape
        out = np.ascontiguousarray(forward_up(features).transpose(2, 1, 0), dtype=np.float32)
        for mask, first, end in self.nan_where_zero:
            # x + 0 is x (bar the sign of a zero), x + NaN is NaN: 5x faster than masked stores.
            out[first:end] += np.where(out[mask] == 0, np.float32(np.nan), np.float32(0.0))
        return out.reshape(count, cols * rows)


@dataclass(frozen=True)
class GridGeometry:
    """GridMapInfo values: resolution, lengths (m) and the centre (m, grid frame)."""

    resolution: float
    length_x: float
    length_y: float
    x: float
    y: float


def grid_geometry(grid, rows: int, cols: int) -> GridGeometry:
    """
    Geometry of an H x W grid from ``grid`` (x_min, y_min, resolution, read by attribute).

    The centre is ``x_min + H * res / 2``, which is ``(x_min + x_max) / 2`` whenever the
    range is a whole number of cells, and the cells' true centre when it is not.
    """
    res = float(grid.resolution)
    length_x, length_y = rows * res, cols * res
    return GridGeometry(res, length_x, length_y, float(grid.x_min) + length_x / 2,
                        float(grid.y_min) + length_y / 2)


def float32_array(values: np.ndarray) -> array.array:
    """float32 values -> ``array.array('f')`` (one memcpy), what rclpy keeps for float32[]."""
    out = array.array('f')
    out.frombytes(memoryview(np.ascontiguousarray(values, np.float32)).cast('B'))
    return out


def types_by_name(*classes) -> dict[str, type]:
    """
    Message classes -> {ROS type name: class}, e.g. rclpy's GridMap -> 'grid_map_msgs/msg/GridMap'.

    A ``rosbags`` class names itself (``__msgtype__``); an rclpy one by its module
    (``grid_map_msgs.msg._grid_map``).
    """
    def name(cls) -> str:
        package, kind = cls.__module__.split('.')[:2]
        return getattr(cls, '__msgtype__', None) or f'{package}/{kind}/{cls.__name__}'
    return {name(cls): cls for cls in classes}


def grid_map_message(types: Mapping[str, type], layers: GridMapLayers, features: np.ndarray,
                     grid, stamp_ns: int):
    """
    Build a grid_map_msgs/GridMap of ``features`` (float32[H, W, C]).

    ``types``: ROS type name -> class for every name in ``MESSAGE_TYPES`` (rclpy's via
    ``types_by_name``, or the rosbags type store's ``types``). ``grid``: the grid in force
    (frame_id, x_min, y_min, resolution), ``stamp_ns``: the LiDAR stamp. Layer data goes to
    rosbags as NumPy rows, to rclpy as ``array.array('f')`` (``float32_array``: rclpy would
    convert a NumPy array one element at a time, about 5 ms per 256 x 256 layer).
    """
    rows, cols = features.shape[:2]
    storage = layers.storage(features)
    geometry = grid_geometry(grid, rows, cols)
    # rosbags' classes name their type in __msgtype__; rclpy's do not.
    float32s = np.asarray if hasattr(types[GRID_MAP_TYPE], '__msgtype__') else float32_array
    dim, layout = types['std_msgs/msg/MultiArrayDimension'], types['std_msgs/msg/MultiArrayLayout']
    data = [types['std_msgs/msg/Float32MultiArray'](
        layout=layout(dim=[dim(label='column_index', size=cols, stride=rows * cols),
                           dim(label='row_index', size=rows, stride=rows)], data_offset=0),
        data=float32s(values)) for values in storage]
    pose = types['geometry_msgs/msg/Pose'](
        position=types['geometry_msgs/msg/Point'](x=geometry.x, y=geometry.y, z=0.0),
        orientation=types['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0, w=1.0))
    info = types['grid_map_msgs/msg/GridMapInfo'](
        resolution=geometry.resolution, length_x=geometry.length_x, length_y=geometry.length_y,
        pose=pose)
    sec, nanosec = split_ns(stamp_ns)
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec),
        frame_id=grid.frame_id)
    return types[GRID_MAP_TYPE](header=header, info=info, layers=list(layers.names),
                                basic_layers=[], data=data, outer_start_index=0,
                                inner_start_index=0)
