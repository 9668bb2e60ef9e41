"""grid_map_msgs/GridMap of the BEV: layer names, geometry, storage order, one orientation."""

import array
import math

from builtin_interfaces.msg import Time
from configs import absolute_imports, small_config
from geometry_msgs.msg import Point, Pose, Quaternion
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.outputs.grid_map import (grid_geometry, grid_map_message, GridMapLayers,
                                                  layer_names, MESSAGE_TYPES, types_by_name)
from jax_perception_node.outputs.render import bev_to_rgb
from jax_perception_node.settings.channels import lidar_channels
from jax_perception_node.settings.config import GridConfig
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from rclpy.serialization import serialize_message
from rosbags.typesys import get_types_from_msg, get_typestore, Stores
from std_msgs.msg import Float32MultiArray, Header, MultiArrayDimension, MultiArrayLayout

# grid_map_msgs as published by ANYbotics/grid_map (ROS 2), written out here independently of
# the project's interfaces/ folder.
GRID_MAP_MSG = """
std_msgs/Header header
grid_map_msgs/GridMapInfo info
string[] layers
string[] basic_layers
std_msgs/Float32MultiArray[] data
uint16 outer_start_index
uint16 inner_start_index
"""
GRID_MAP_INFO_MSG = """
float64 resolution
float64 length_x
float64 length_y
geometry_msgs/Pose pose
"""
LIDAR = lidar_channels(1)


def typestore():
    """Return a rosbags Jazzy type store that knows grid_map_msgs."""
    store = get_typestore(Stores.ROS2_JAZZY)
    types = {}
    types.update(get_types_from_msg(GRID_MAP_MSG, 'grid_map_msgs/msg/GridMap'))
    types.update(get_types_from_msg(GRID_MAP_INFO_MSG, 'grid_map_msgs/msg/GridMapInfo'))
    store.register(types)
    return store


def round_trip(store, msg):
    """Serialize and deserialize a rosbags message, as a bag write and read do."""
    return store.deserialize_cdr(store.serialize_cdr(msg, msg.__msgtype__), msg.__msgtype__)


def layer_matrix(layer) -> np.ndarray:
    """
    Return a Float32MultiArray layer's matrix, read as grid_map_ros reads it (written out here).

    multiArrayMessageCopyToMatrixEigen: column-major when dim[0] is 'column_index'; rows from
    the 'row_index' dim, columns from the 'column_index' dim; element (a, b) at a + b * rows.
    """
    labels = [d.label for d in layer.layout.dim]
    assert labels == ['column_index', 'row_index']
    cols, rows = layer.layout.dim[0].size, layer.layout.dim[1].size
    assert layer.layout.dim[0].stride == rows * cols and layer.layout.dim[1].stride == rows
    data = np.asarray(layer.data, np.float32)
    matrix = np.empty((rows, cols), np.float32)
    for a in range(rows):
        for b in range(cols):
            matrix[a, b] = data[layer.layout.data_offset + a + b * rows]
    return matrix


def cell_position(info, index: tuple[int, int], size: tuple[int, int]) -> tuple[float, float]:
    """grid_map_core getPositionFromIndex (start index 0), written out per axis."""
    res = info.resolution
    centre = (info.pose.position.x, info.pose.position.y)
    return tuple(centre[k] + (size[k] / 2 - 0.5 - index[k]) * res for k in range(2))


# -- names ---------------------------------------------------------------------------------------

def test_layer_names_follow_the_channel_table():
    assert layer_names(LIDAR, 3) == (
        'occupancy', 'density', 'z_max', 'z_mean', 'z_min', 'intensity_mean',
        'camera_0', 'camera_1', 'camera_2', 'coverage')
    assert layer_names(lidar_channels(3), 2, ('sky', 'road')) == (
        'occupancy', 'density', 'z_max', 'z_mean', 'z_min', 'intensity_mean', 'time_lag_mean',
        'sky', 'road', 'coverage')
    assert layer_names(LIDAR, 0) == LIDAR + ('coverage',)


def test_a_projection_names_its_learned_channels():
    assert layer_names(LIDAR, 3, ('a', 'b', 'c'), projected_channels=4) == (
        'feature_0', 'feature_1', 'feature_2', 'feature_3')


def test_layer_names_count_the_pipelines_output_channels():
    cfg = small_config(cameras=1, **{'accumulation.num_sweeps': 2})
    names = layer_names(lidar_channels(2), cfg.camera_channels)
    assert len(names) == cfg.fused_channels


def test_layers_for_a_pipeline_follow_its_config(tmp_path):
    cfg = small_config(cameras=1, **{'accumulation.num_sweeps': 2,
                                     'cameras.channel_names': ['red', 'green', 'blue']})
    layers = GridMapLayers.for_pipeline(cfg, BevPipeline(cfg))
    assert layers.names == lidar_channels(2) + ('red', 'green', 'blue', 'coverage')
    weights = tmp_path / 'w.npz'
    fused = small_config(cameras=1).fused_channels
    np.savez(weights, W=np.ones((fused, 2), np.float32), b=np.zeros(2, np.float32))
    projected = small_config(cameras=1, **{'fusion.weights_file': str(weights)})
    layers = GridMapLayers.for_pipeline(projected, BevPipeline(projected))
    assert layers.names == ('feature_0', 'feature_1') and layers.nan_where_zero == ()


@pytest.mark.parametrize('names', [('a', 'b'), ('a', 'coverage', 'c'), ('a', 'z_max', 'c'),
                                   ('a', 'a', 'c'), ('a', '', 'c')])
def test_channel_names_that_do_not_fit_are_refused_by_key(names):
    with pytest.raises(ConfigError, match='cameras.channel_names'):
        GridMapLayers.of(LIDAR, 3, names)


# -- storage, against a reference written out here -----------------------------------------------

def reference_layers(features: np.ndarray, names, lidar: int) -> list[np.ndarray]:
    """
    Column-major data of M[a, b] = features[H-1-a, W-1-b], NaN where a layer has no data.

    The first ``lidar`` names are LiDAR layers; camera layers follow, coverage is last.
    """
    rows, cols, count = features.shape
    out = []
    for k in range(count):
        data = np.empty(rows * cols, np.float32)
        for a in range(rows):
            for b in range(cols):
                value = features[rows - 1 - a, cols - 1 - b, k]
                i, j = rows - 1 - a, cols - 1 - b
                if names[k] in ('z_max', 'z_mean', 'z_min', 'intensity_mean', 'time_lag_mean') \
                        and features[i, j, 0] == 0:
                    value = np.nan
                if lidar <= k < count - 1 and features[i, j, -1] == 0:
                    value = np.nan
                data[a + b * rows] = value
        out.append(data)
    return out


def synthetic_bev(rows: int, cols: int, channels: int, seed: int = 0) -> np.ndarray:
    """Distinct values everywhere; occupancy and coverage 0/1 with empty and full cells."""
    rng = np.random.default_rng(seed)
    features = rng.uniform(-3, 3, (rows, cols, channels)).astype(np.float32)
    features[..., 0] = rng.random((rows, cols)) < 0.5
    features[..., -1] = rng.random((rows, cols)) < 0.5
    return features


@pytest.mark.parametrize('sweeps', [1, 3])
def test_storage_matches_grid_maps_column_major_order(sweeps):
    lidar = lidar_channels(sweeps)
    layers = GridMapLayers.of(lidar, 2)
    features = synthetic_bev(5, 7, len(layers.names))      # not square: a transpose shows
    storage = layers.storage(features)
    expected = reference_layers(features, layers.names, len(lidar))
    assert storage.shape == (len(layers.names), 35) and storage.dtype == np.float32
    for k, name in enumerate(layers.names):
        np.testing.assert_array_equal(storage[k], expected[k], err_msg=name)
    assert np.isnan(storage[layers.names.index('z_max')]).any()
    assert not np.isnan(storage[layers.names.index('occupancy')]).any()
    assert not np.isnan(storage[layers.names.index('coverage')]).any()


def test_projected_features_keep_every_value():
    layers = GridMapLayers.of(LIDAR, 2, projected_channels=3)
    features = synthetic_bev(4, 6, 3)
    features[..., 0] = 0.0            # feature_0 is no occupancy: nothing is masked by it
    storage = layers.storage(features)
    for k in range(3):
        np.testing.assert_array_equal(storage[k], features[::-1, ::-1, k].reshape(-1, order='F'))


def test_storage_refuses_a_wrong_channel_count():
    with pytest.raises(ValueError, match='occupancy'):
        GridMapLayers.of(LIDAR, 2).storage(np.zeros((4, 4, 3), np.float32))


def test_the_bev_is_left_as_it_was():
    layers = GridMapLayers.of(LIDAR, 1)
    features = synthetic_bev(4, 6, len(layers.names))
    before = features.copy()
    layers.storage(features)
    np.testing.assert_array_equal(features, before)


# -- geometry and message ------------------------------------------------------------------------

def grid(**overrides) -> GridConfig:
    values = {'frame_id': 'base_link', 'x_min': -4.0, 'x_max': 12.0, 'y_min': -10.0,
              'y_max': 14.0, 'z_min': -2.0, 'z_max': 2.0, 'resolution': 0.5}
    values.update(overrides)
    return GridConfig(**values)


def test_geometry_is_lengths_and_the_centre():
    geometry = grid_geometry(grid(), 32, 48)
    assert (geometry.resolution, geometry.length_x, geometry.length_y) == (0.5, 16.0, 24.0)
    assert (geometry.x, geometry.y) == (4.0, 2.0)
    # A range that is no whole number of cells: the centre of the cells that exist.
    odd = grid_geometry(grid(x_max=12.2), 32, 48)
    assert odd.x == pytest.approx(-4.0 + 16.0 / 2)


def test_rosbags_message_round_trips_with_layers_and_geometry():
    store = typestore()
    layers = GridMapLayers.of(LIDAR, 2, ('sky', 'road'))
    features = synthetic_bev(32, 48, len(layers.names), seed=3)
    msg = round_trip(store, grid_map_message(store.types, layers, features, grid(),
                                             1_700_000_000_123_456_789))
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1_700_000_000, 123_456_789)
    assert msg.header.frame_id == 'base_link'
    assert (msg.info.resolution, msg.info.length_x, msg.info.length_y) == (0.5, 16.0, 24.0)
    pose = msg.info.pose
    assert (pose.position.x, pose.position.y, pose.position.z) == (4.0, 2.0, 0.0)
    assert (pose.orientation.x, pose.orientation.y, pose.orientation.z,
            pose.orientation.w) == (0.0, 0.0, 0.0, 1.0)
    assert list(msg.layers) == list(layers.names) and list(msg.basic_layers) == []
    assert (msg.outer_start_index, msg.inner_start_index) == (0, 0)
    expected = reference_layers(features, layers.names, 6)
    for k, layer in enumerate(msg.data):
        np.testing.assert_array_equal(layer.data, expected[k])
        # As grid_map reads it: M[a, b] = features[H-1-a, W-1-b] (NaN where no data).
        matrix = np.where(np.isnan(expected[k].reshape(48, 32).T), np.nan,
                          features[::-1, ::-1, k])
        np.testing.assert_array_equal(layer_matrix(layer), matrix)


def rclpy_types() -> dict:
    """Return rclpy's classes of every type the GridMap needs (grid_map_msgs: make venv)."""
    from grid_map_msgs.msg import GridMap, GridMapInfo
    return types_by_name(GridMap, GridMapInfo, Header, Time, Pose, Point, Quaternion,
                         Float32MultiArray, MultiArrayLayout, MultiArrayDimension)


def test_types_by_name_keys_every_class_the_message_needs():
    assert sorted(rclpy_types()) == sorted(MESSAGE_TYPES)
    store = typestore()
    assert types_by_name(store.types['std_msgs/msg/Header']) == {
        'std_msgs/msg/Header': store.types['std_msgs/msg/Header']}


@pytest.mark.parametrize('check_fields', ['0', '1'])
def test_rclpy_message_holds_float32_arrays_and_reads_back_in_rosbags(monkeypatch, check_fields):
    # rclpy's field checks (ROS_PYTHON_CHECK_FIELDS=1) take array.array('f') as it is.
    from std_msgs.msg import _float32_multi_array
    monkeypatch.setattr(_float32_multi_array, 'ros_python_check_fields', check_fields)
    layers = GridMapLayers.of(LIDAR, 1)
    features = synthetic_bev(6, 4, len(layers.names), seed=5)
    msg = grid_map_message(rclpy_types(), layers, features, grid(), 5)
    expected = reference_layers(features, layers.names, 6)
    for k, layer in enumerate(msg.data):
        assert layer._check_fields == (check_fields == '1')
        assert isinstance(layer.data, array.array) and layer.data.typecode == 'f'
        np.testing.assert_array_equal(np.frombuffer(layer.data, np.float32), expected[k])
    back = typestore().deserialize_cdr(serialize_message(msg), 'grid_map_msgs/msg/GridMap')
    assert list(back.layers) == list(layers.names) and back.header.stamp.nanosec == 5
    assert (back.info.length_x, back.info.length_y, back.info.pose.position.y) == (3.0, 2.0, -9.0)
    for k, layer in enumerate(back.data):
        np.testing.assert_array_equal(layer.data, expected[k])
        assert [(d.label, d.size, d.stride) for d in layer.layout.dim] == [
            ('column_index', 4, 24), ('row_index', 6, 6)]


# -- one orientation across bev_features, bev_image and the GridMap ------------------------------

def test_one_point_lands_in_the_same_cell_of_all_three_outputs():
    cfg = small_config(cameras=0, **{
        'grid.x_min': -4.0, 'grid.x_max': 12.0, 'grid.y_min': -10.0, 'grid.y_max': 14.0,
        'lidar.translation': [0.0, 0.0, 0.0]})
    pipe = BevPipeline(cfg)
    pipe.warmup()
    x, y = 9.3, -7.6                         # ahead and to the right of an off-centre grid
    features = pipe.process(np.array([[x, y, 0.5, 1.0]], np.float32)).features
    rows, cols = features.shape[:2]
    i, j = math.floor((x - cfg.grid.x_min) / 0.5), math.floor((y - cfg.grid.y_min) / 0.5)

    # bev_features: row = x index from x_min, column = y index from y_min.
    assert np.argwhere(features[..., 0] > 0).tolist() == [[i, j]]

    # bev_image: forward (+x) up, left (+y) on the left.
    rgb = bev_to_rgb(features, cfg.grid.z_min, cfg.grid.z_max)
    assert np.argwhere(rgb.any(axis=2)).tolist() == [[rows - 1 - i, cols - 1 - j]]

    # GridMap: read back as grid_map does, placed by grid_map's index -> position rule.
    store = typestore()
    layers = GridMapLayers.for_pipeline(cfg, pipe)
    msg = round_trip(store, grid_map_message(store.types, layers, features, cfg.grid, 0))
    occupancy = layer_matrix(msg.data[list(msg.layers).index('occupancy')])
    cells = np.argwhere(occupancy > 0).tolist()
    assert cells == [[rows - 1 - i, cols - 1 - j]]
    size = (round(msg.info.length_x / msg.info.resolution),
            round(msg.info.length_y / msg.info.resolution))
    px, py = cell_position(msg.info, tuple(cells[0]), size)
    assert abs(px - x) <= 0.25 and abs(py - y) <= 0.25
    assert (px, py) == pytest.approx((cfg.grid.x_min + (i + 0.5) * 0.5,
                                      cfg.grid.y_min + (j + 0.5) * 0.5))
    z_max = layer_matrix(msg.data[list(msg.layers).index('z_max')])
    assert z_max[tuple(cells[0])] == pytest.approx(0.5)
    assert np.isnan(z_max).sum() == rows * cols - 1


def test_grid_map_imports_no_ros():
    assert absolute_imports('grid_map') <= {'array', 'dataclasses', 'typing', 'numpy'}
    assert absolute_imports('timing') <= {'typing'}
