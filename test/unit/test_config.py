"""Config: the shipped YAML, the schema defaults, and one clear error per bad key."""

import ast
import os
import re

from configs import FRONT, PARAMS_FILE, REPO, small_config, small_params
from jax_perception_node.settings.config import (AccumulationConfig, CameraConfig,
                                                 config_from_parameters, default_params_file,
                                                 load_config, Pose)
from jax_perception_node.settings.live_params import check_update
from jax_perception_node.settings.param_file import read_param_file, write_param_file
from jax_perception_node.settings.parameters import BY_KEY, ConfigError, SCHEMA
import numpy as np
import pytest


def test_shipped_config_loads():
    cfg = load_config(PARAMS_FILE)
    assert (cfg.grid.height, cfg.grid.width) == (256, 256)
    assert [c.name for c in cfg.cameras] == ['front', 'left', 'rear', 'right']
    # Published output stays at or under ~8 MB (transport cost grows fast above it).
    assert cfg.grid.height * cfg.grid.width * cfg.fused_channels * 4 <= 8 * 2**20
    front = cfg.cameras[0].pose.rotation_matrix()
    np.testing.assert_allclose(front @ [0, 0, 1], [1, 0, 0], atol=1e-6)   # looks along +x


def test_accumulation_defaults_off_and_overrides():
    assert small_config().accumulation == AccumulationConfig(1, 0.5, 0.2)
    cfg = small_config(**{'accumulation.num_sweeps': 3, 'accumulation.max_sweep_age_s': 0.3,
                          'accumulation.max_odometry_gap_s': 0.05})
    assert cfg.accumulation == AccumulationConfig(3, 0.3, 0.05)


@pytest.mark.parametrize('key, value, message', [
    ('grid.resolution', 0.0, 'grid.resolution: must be >= 0.001, got 0'),
    ('grid.resolution', 0.3, 'grid.resolution: the x range'),
    ('grid.x_max', -9.0, 'grid.x_max: must be greater than grid.x_min'),
    ('grid.z_min', 'low', 'grid.z_min: expected a number'),
    ('grid.frame_id', '', 'grid.frame_id: must not be empty'),
    ('buckets', [256, 64], 'buckets: expected strictly ascending'),
    ('buckets', [], 'buckets: expected strictly ascending'),
    ('buckets', [1.5], 'buckets: expected a list of integers'),
    ('overflow_policy', 'drop', 'overflow_policy: expected one of subsample | truncate'),
    ('lidar.rotation_xyzw', [0, 0, 0.5, 0.5], 'lidar.rotation_xyzw: not a unit quaternion'),
    ('lidar.translation', [0, 0], 'lidar.translation: expected 3 finite numbers'),
    ('lidar.intensity_field', 'z', "lidar.intensity_field: 'z' is a coordinate"),
    ('lidar.time_field', 'x', "lidar.time_field: 'x' is a coordinate, not a time"),
    ('lidar.intensity_field', '', 'lidar.intensity_field: must not be empty'),
    ('lidar.intensity_scale', 0.0, 'lidar.intensity_scale: must be >= 1e-06, got 0'),
    ('lidar.intensity_scale', float('nan'), 'lidar.intensity_scale: must be finite'),
    ('lidar.intensity_scale', 'a', 'lidar.intensity_scale: expected a number'),
    ('lidar.min_range_m', -1.0, 'lidar.min_range_m: must be >= 0, got -1'),
    ('lidar.min_range_m', 1e4, 'lidar.max_range_m: must be greater than lidar.min_range_m'),
    ('lidar.ego_box', [1.0, -1.0, 0, 0, 0, 0], 'lidar.ego_box: x_min 1 is above x_max -1'),
    ('lidar.ego_box', [0.0] * 5, 'lidar.ego_box: expected 6 finite numbers'),
    ('fusion.num_heights', 0, 'fusion.num_heights: must be >= 1'),
    ('fusion.activation', 'tanh', 'fusion.activation: expected one of none | relu'),
    ('fusion.weights_file', '/nonexistent.npz', 'fusion.weights_file: cannot read'),
    ('sync.max_camera_lidar_delay_s', -1.0, 'sync.max_camera_lidar_delay_s: must be >= 0'),
    ('cameras.front.fx', -1.0, 'cameras.front.fx: must be >= 0.001, got -1'),
    ('cameras.rear.channels', 4, 'cameras.rear.channels: every camera needs the same'),
    ('cameras.front.height', None, 'cameras.front.height: required'),
    ('grid.resolutoin', 0.5, 'grid.resolutoin: unknown parameter'),
    ('grid', 5, 'grid: a group of parameters (grid.*), not a value'),
    ('cameras.names', ['front', 'front'], 'cameras.names: duplicate'),
    ('cameras.names', ['front', 'front-left'], 'cameras.names: "front-left" must be letters'),
    # A token of ~/input/camera/<name>/...: ROS refuses one starting with a digit.
    ('cameras.names', ['front', '360'], 'cameras.names: "360" must be letters, digits and '
                                        'underscores, not a digit first'),
    ('fusion.num_heights', 65, 'fusion.num_heights: must be <= 64, got 65'),
    ('accumulation.num_sweeps', 0, 'accumulation.num_sweeps: must be >= 1, got 0'),
    ('accumulation.num_sweeps', 17, 'accumulation.num_sweeps: must be <= 16, got 17'),
    ('accumulation.num_sweeps', 2.0, 'accumulation.num_sweeps: expected an integer'),
    ('accumulation.max_sweep_age_s', 0.0,
     'accumulation.max_sweep_age_s: must be >= 0.001, got 0'),
    ('accumulation.max_odometry_gap_s', -0.1,
     'accumulation.max_odometry_gap_s: must be >= 0.001'),
    ('accumulation.max_odometry_gap_s', float('nan'),
     'accumulation.max_odometry_gap_s: must be finite'),
    ('diagnostics.window', 0, 'diagnostics.window: must be >= 1, got 0'),
    ('buckets', [0, 64], 'buckets: must be >= 1'),
    ('head.weights', '/some/w.npz',
     'head.weights: /some/w.npz given, but head.module is empty (no head to load them into)'),
    ('head.score_thresholds', [0.3, 0.4],
     'head.score_thresholds: [0.3, 0.4] given, but head.module is empty (no head whose classes '
     'they threshold)'),
    ('output.objects_type', 'autoware',
     'output.objects_type: autoware given, but head.module is empty (no head, so no objects to '
     'publish)'),
])
def test_bad_values_name_the_key(key, value, message):
    params = small_params()
    if value is None:
        del params[key]
    else:
        params[key] = value
    with pytest.raises(ConfigError) as err:
        config_from_parameters(params)
    assert str(err.value).startswith(message)


def test_a_param_file_is_typed_like_the_node_but_python_callers_may_write_8_for_8_0(tmp_path):
    path = tmp_path / 'int.yaml'
    path.write_text(PARAMS_FILE.read_text().replace('fx: 40.0', 'fx: 40', 1))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == ('cameras.front.fx: expected double (ROS parameters are typed: '
                              'write 40.0, not 40), got 40 (integer)')
    path.write_text(PARAMS_FILE.read_text().replace('[0.0, 0.0, 1.8]', '[0, 0, 2]', 1))
    with pytest.raises(ConfigError, match=r'^lidar.translation: expected double\[3\]'):
        load_config(path)
    # The Python API takes ints for doubles, and write_param_file writes what the node needs.
    params = small_params(**{'cameras.front.fx': 8, 'lidar.translation': [0, 0, 2]})
    assert config_from_parameters(params).cameras[0].fx == 8.0
    written = load_config(write_param_file(params, tmp_path / 'written.yaml'))
    assert written.cameras[0].fx == 8.0 and written.lidar.translation == (0.0, 0.0, 2.0)


@pytest.mark.parametrize('text,value', [('n', False), ('Y', True), ('off', False)])
def test_a_param_file_reads_booleans_as_rcl_does(tmp_path, text, value):
    # rcl reads y, Y, n and N as booleans too: the node started where the CLI refused
    # `lidar.deskew: n` (expected true or false, got 'n').
    path = tmp_path / 'bool.yaml'
    path.write_text(PARAMS_FILE.read_text().replace('deskew: true', f'deskew: {text}', 1))
    assert load_config(path).lidar_timing.deskew is value


def test_a_param_files_keys_are_names_never_booleans(tmp_path):
    # With n read as false, a camera named n became cameras.False.* (refused, not in names).
    path = tmp_path / 'keys.yaml'
    path.write_text('/**:\n  ros__parameters:\n    cameras:\n      names: ["n", "on"]\n'
                    '      n: {fx: 1.0}\n      on: {fy: 2.0}\n')
    assert read_param_file(path) == {'cameras.names': ['n', 'on'], 'cameras.n.fx': 1.0,
                                     'cameras.on.fy': 2.0}


def test_weights_file_shape_is_checked(tmp_path):
    path = tmp_path / 'w.npz'
    np.savez(path, W=np.zeros((9, 4)), b=np.zeros(4))
    with pytest.raises(ConfigError, match=r'fusion.weights_file: W must be \(10, C_out\)'):
        config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))
    pickled = tmp_path / 'p.npz'
    np.savez(pickled, W=np.array([object()], dtype=object), b=np.zeros(4))
    with pytest.raises(ConfigError, match='fusion.weights_file: cannot read'):
        config_from_parameters(small_params(**{'fusion.weights_file': str(pickled)}))
    # Numbers that are no real numbers: a complex W would lose its imaginary part.
    for kind, values in (('complex128', np.ones((10, 4)) * 1j),
                         ('timedelta64[s]', np.ones((10, 4), 'timedelta64[s]'))):
        np.savez(path, W=values, b=np.zeros(4))
        message = re.escape(f'W must be real numbers, got {kind}')
        with pytest.raises(ConfigError, match=message):
            config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))
    # A NaN is named as such (the dtype, float32, said nothing of it).
    np.savez(path, W=np.full((10, 4), np.nan, np.float32), b=np.zeros(4))
    with pytest.raises(ConfigError, match=re.escape('W has a value that is not finite (nan)')):
        config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))


def test_fusion_weights_that_would_overflow_the_output_are_refused(tmp_path):
    # Finite, but 3e38 times any input above 1 is inf in the published BEV.
    path = tmp_path / 'w.npz'
    weights = np.eye(10, 4, dtype=np.float32)
    weights[2, 1] = 3e38
    np.savez(path, W=weights, b=np.zeros(4, np.float32))
    with pytest.raises(ConfigError, match=r'fusion.weights_file: W has a value of magnitude '
                                          r'3e\+38, more than 1e\+06'):
        config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))
    weights[2, 1] = -1e6          # the limit itself is allowed
    np.savez(path, W=weights, b=np.full(4, 1e6, np.float32))
    config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))


def test_param_file_errors(tmp_path):
    with pytest.raises(ConfigError, match='params file .*missing.yaml'):
        load_config(tmp_path / 'missing.yaml')
    bad = tmp_path / 'bad.yaml'
    bad.write_text('a: [1, 2')
    with pytest.raises(ConfigError, match='not valid YAML') as err:
        load_config(bad)
    assert '\n' not in str(err.value)           # PyYAML's mark and caret: one line
    bad.write_text('node:\n  other: 1\n')
    with pytest.raises(ConfigError, match='ros__parameters'):
        load_config(bad)


def test_launch_file_names_installed_executable_and_params():
    """Check the launch file statically (launch and launch_ros are not on PyPI)."""
    source = (REPO / 'launch' / 'jax_perception.launch.py').read_text()
    tree = ast.parse(source)
    consts = {n.targets[0].id: n.value.value for n in tree.body
              if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)}
    setup = (REPO / 'setup.py').read_text()
    assert f"'{consts['EXECUTABLE']} = jax_perception_node.ros.node_console:node'" in setup
    assert consts['PACKAGE'] == 'jax_perception_node'
    assert (REPO / 'config' / 'jax_perception.param.yaml').exists()
    assert "os.path.join('config', 'jax_perception.param.yaml')" in source
    assert ("('share/' + package_name + '/launch',\n         glob('launch/*.launch.py') + "
            "glob('launch/*.launch.xml'))") in setup
    for arg in ('params_file', 'namespace', 'use_sim_time', 'log_level', 'pointcloud_topic'):
        assert f"DeclareLaunchArgument('{arg}'" in source


# -- issue 16: huge finite values, bounds from the schema ----------------------------------------

# The live values that used to crash the node (an OverflowError out of the parameter callback).
HUGE_VALUES = [
    ('sync.max_camera_lidar_delay_s', 1e300,
     'sync.max_camera_lidar_delay_s: must be <= 86400, got 1e+300'),
    ('accumulation.max_odometry_gap_s', 1e300,
     'accumulation.max_odometry_gap_s: must be <= 86400, got 1e+300'),
    ('diagnostics.period_s', 1e10, 'diagnostics.period_s: must be <= 3600, got 1e+10'),
]


@pytest.mark.parametrize('key, value, message', HUGE_VALUES + [
    ('diagnostics.period_s', 1e-4, 'diagnostics.period_s: must be >= 0.001, got 0.0001'),
    ('cameras.front.fx', 1e-300, 'cameras.front.fx: must be >= 0.001, got 1e-300'),
    ('cameras.front.fx', 1e300, 'cameras.front.fx: must be <= 1e+06, got 1e+300'),
    ('cameras.rear.fy', 1e-300, 'cameras.rear.fy: must be >= 0.001, got 1e-300'),
    ('cameras.front.cx', -1e300, 'cameras.front.cx: must be >= -1e+06, got -1e+300'),
    ('lidar.translation', [0.0, 0.0, 1e300],
     'lidar.translation: must be <= 10000, got [0, 0, 1e+300]'),
    ('cameras.rear.translation', [-1e5, 0.0, 0.0],
     'cameras.rear.translation: must be >= -10000, got [-100000, 0, 0]'),
    ('grid.resolution', 1e300, 'grid.resolution: must be <= 100, got 1e+300'),
    ('buckets', [64, 2 ** 40], 'buckets: must be <= 16777216, got [64, 1099511627776]'),
    ('diagnostics.window', 10 ** 30, 'diagnostics.window: must be <= 100000, got 1000000'),
    # An int beyond float range: float() would raise OverflowError, the config says why.
    ('grid.x_max', 10 ** 400, 'grid.x_max: must be finite and within -10000 .. 10000, got 1'),
    ('lidar.translation', [0, 0, 10 ** 400], 'lidar.translation: expected 3 finite numbers'),
    ('cameras.front.distortion', [10 ** 400], 'cameras.front.distortion: expected finite'),
])
def test_huge_and_tiny_values_are_refused_with_the_bound(key, value, message):
    with pytest.raises(ConfigError) as err:
        config_from_parameters({**small_params(), key: value})
    assert str(err.value).startswith(message)
    assert '\n' not in str(err.value) and len(str(err.value)) < 200


NUMERIC = [s.key.replace('<name>', 'front') for s in SCHEMA
           if s.item_type in ('integer', 'double')]


@pytest.mark.parametrize('key', NUMERIC)
@pytest.mark.parametrize('extreme', [1e300, -1e300, 10 ** 400, float('inf')])
def test_no_numeric_key_lets_an_extreme_value_through_or_raises_another_error(key, extreme):
    spec = BY_KEY[key.replace('front', '<name>')]
    value = int(extreme) if spec.item_type == 'integer' and extreme != float('inf') else extreme
    if spec.ros_type.endswith('_array'):
        value = [value] * (spec.length or 1)
    with pytest.raises(ConfigError, match=f'^{key}: '):
        config_from_parameters({**small_params(), key: value})


@pytest.mark.parametrize('key, value, message', HUGE_VALUES + [
    ('cameras.front.fx', 1e-300, 'cameras.front.fx: must be >= 0.001, got 1e-300'),
])
def test_a_live_update_out_of_bounds_is_refused_naming_the_key_and_bound(key, value, message):
    values = small_params()
    with pytest.raises(ConfigError) as err:
        check_update(values, {key: value})
    assert str(err.value) == message
    check_update(values, {key: BY_KEY[key.replace('front', '<name>')].maximum})   # inclusive


@pytest.mark.parametrize('written, message', [
    ('max_camera_lidar_delay_s: 1e300', 'sync.max_camera_lidar_delay_s: must be <= 86400, '
                                        'got 1e+300'),
    ('max_camera_lidar_delay_s: 1.0e+300', 'sync.max_camera_lidar_delay_s: must be <= 86400, '
                                           'got 1e+300'),
    ('max_camera_lidar_delay_s: 1e400', 'sync.max_camera_lidar_delay_s: must be finite'),
    ('max_camera_lidar_delay_s: 2e-1', None),      # ROS reads 2e-1 as a double: so does the CLI
])
def test_a_params_file_with_a_huge_value_gives_one_line(tmp_path, written, message):
    path = tmp_path / 'huge.yaml'
    text = PARAMS_FILE.read_text()
    assert text.count('max_camera_lidar_delay_s: 0.1') == 1
    path.write_text(text.replace('max_camera_lidar_delay_s: 0.1', written))
    if message is None:
        assert load_config(path).max_camera_lidar_delay_s == 0.2
        return
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(message) and '\n' not in str(err.value)


@pytest.mark.parametrize('content, message', [
    (b'\xff\xfe/**: {}\n', 'not UTF-8 text'),
    (b'- a\n- b\n', 'expected a mapping of node names'),
    (b'just text\n', 'expected a mapping of node names'),
    (b'/**:\n  ros__parameters: [1, 2]\n', 'no "<node>: ros__parameters:" section'),
    (b'/**: {ros__parameters: {a: !!python/name:os.system }}\n', 'not valid YAML'),
])
def test_a_bad_params_file_is_one_config_error(tmp_path, content, message):
    path = tmp_path / 'bad.yaml'
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=f'^params file {path}: {message}'):
        read_param_file(path)


# -- frames and distortion -----------------------------------------------------------------------

def test_frames_default_to_lidar_and_the_optical_frames():
    cfg = small_config()
    assert cfg.lidar_frame_id == 'lidar'
    assert [c.frame_id for c in cfg.cameras] == ['front_optical', 'rear_optical']
    assert [(c.distortion_model, c.distortion) for c in cfg.cameras] == [('none', ())] * 2
    cfg = small_config(**{'lidar.frame_id': 'velodyne', 'cameras.rear.frame_id': 'cam_back'})
    assert cfg.lidar_frame_id == 'velodyne'
    assert [c.frame_id for c in cfg.cameras] == ['front_optical', 'cam_back']
    # Constructors that predate the fields keep working and resolve the frame the same way.
    pose = Pose((0.0, 0.0, 0.0), tuple(FRONT))
    camera = CameraConfig('side', 8, 8, 3, 4.0, 4.0, 3.5, 3.5, pose)
    assert (camera.frame_id, camera.distortion_model, camera.distortion) == (
        'side_optical', 'none', ())


def test_distortion_models_take_their_coefficients():
    plumb = [0.1, -0.02, 0.001, 0.002, 0.003]
    cfg = small_config(**{'cameras.front.distortion_model': 'plumb_bob',
                          'cameras.front.distortion': plumb,
                          'cameras.rear.distortion_model': 'equidistant',
                          'cameras.rear.distortion': [0.01, 0.0, -0.001, 0.0]})
    assert cfg.cameras[0].distortion == tuple(plumb)
    assert cfg.cameras[1].distortion == (0.01, 0.0, -0.001, 0.0)
    zeros = small_config(**{'cameras.front.distortion': [0.0] * 5})
    assert zeros.cameras[0].distortion == ()       # none with zeros is none


@pytest.mark.parametrize('changes, message', [
    ({'cameras.front.distortion_model': 'plumb_bob'},
     'cameras.front.distortion: plumb_bob needs 5 coefficients, got []'),
    ({'cameras.front.distortion_model': 'plumb_bob', 'cameras.front.distortion': [0.1] * 4},
     'cameras.front.distortion: plumb_bob needs 5 coefficients'),
    ({'cameras.rear.distortion_model': 'equidistant', 'cameras.rear.distortion': [0.1] * 5},
     'cameras.rear.distortion: equidistant needs 4 coefficients'),
    ({'cameras.front.distortion': [0.1, 0.0]},
     'cameras.front.distortion: distortion_model none takes [] or zeros'),
    ({'cameras.front.distortion_model': 'rational_polynomial',
      'cameras.front.distortion': [0.1] * 5},
     'cameras.front.distortion: rational_polynomial needs 8 coefficients'),
    ({'cameras.front.distortion_model': 'kannala_brandt'},
     'cameras.front.distortion_model: expected one of none | plumb_bob | rational_polynomial'),
    ({'cameras.front.distortion_model': 'plumb_bob', 'cameras.front.distortion': [2e3] * 5},
     'cameras.front.distortion: must be <= 1000'),
    ({'cameras.front.distortion': ['a']}, 'cameras.front.distortion: expected finite numbers'),
    ({'lidar.frame_id': ''}, 'lidar.frame_id: must not be empty'),
    ({'cameras.front.frame_id': 3}, 'cameras.front.frame_id: expected a string'),
])
def test_frame_and_distortion_keys_are_checked(changes, message):
    with pytest.raises(ConfigError) as err:
        small_config(**changes)
    assert str(err.value).startswith(message)


def test_frames_and_distortion_are_live():
    values = small_params()
    changes = {'lidar.frame_id': 'velodyne', 'cameras.front.frame_id': 'cam0',
               'cameras.front.distortion_model': 'equidistant',
               'cameras.front.distortion': [0.1, 0.0, 0.0, 0.0]}
    merged, cfg = check_update(values, changes)
    assert cfg.lidar_frame_id == 'velodyne' and cfg.cameras[0].frame_id == 'cam0'
    assert cfg.cameras[0].distortion == (0.1, 0.0, 0.0, 0.0)


# -- TF sources and camera channel names (issue 17) -----------------------------------------------

def test_tf_sources_and_channel_names_default_and_override():
    cfg = small_config()
    assert (cfg.extrinsics_source, cfg.accumulation.pose_source,
            cfg.accumulation.fixed_frame) == ('parameters', 'odometry', 'map')
    assert cfg.channel_names == () and cfg.camera_channel_names == ('camera_0', 'camera_1',
                                                                    'camera_2')
    assert small_config(cameras=0).camera_channel_names == ()
    cfg = small_config(**{'extrinsics.source': 'tf', 'accumulation.pose_source': 'tf',
                          'accumulation.fixed_frame': 'odom',
                          'cameras.channel_names': ['road', 'car', 'sky']})
    assert (cfg.extrinsics_source, cfg.accumulation.pose_source,
            cfg.accumulation.fixed_frame) == ('tf', 'tf', 'odom')
    assert cfg.camera_channel_names == ('road', 'car', 'sky')


@pytest.mark.parametrize('changes, message', [
    ({'extrinsics.source': 'urdf'}, 'extrinsics.source: expected one of parameters | tf'),
    ({'accumulation.pose_source': 'gps'},
     'accumulation.pose_source: expected one of odometry | tf'),
    ({'accumulation.fixed_frame': ''}, 'accumulation.fixed_frame: must not be empty'),
    ({'accumulation.pose_source': 'tf', 'accumulation.fixed_frame': '/base_link'},
     "accumulation.fixed_frame: '/base_link' is grid.frame_id, which never moves in itself"),
    ({'cameras.channel_names': ['a', 'b']},
     'cameras.channel_names: 2 names for 3 camera feature channels'),
    ({'cameras.channel_names': ['a', 'b', 'a']}, 'cameras.channel_names: duplicate names'),
    ({'cameras.channel_names': ['a', 'b', 'c-d']},
     'cameras.channel_names: "c-d" must be letters'),
    ({'cameras.channel_names': ['a', '', 'c']}, 'cameras.channel_names: an empty name'),
    ({'cameras.channel_names': 'abc'}, 'cameras.channel_names: expected a list'),
    ({'cameras.names': ['front', 'channel_names']},
     'cameras.names: "channel_names" is taken by the key cameras.channel_names'),
])
def test_tf_and_channel_keys_are_checked(changes, message):
    with pytest.raises(ConfigError) as err:
        small_config(**changes)
    assert str(err.value).startswith(message)


def test_channel_names_without_cameras_must_be_empty():
    with pytest.raises(ConfigError, match='1 names for 0 camera feature channels'):
        small_config(cameras=0, **{'cameras.channel_names': ['x']})


def test_tf_sources_and_channel_names_are_live():
    changes = {'extrinsics.source': 'tf', 'accumulation.pose_source': 'tf',
               'accumulation.fixed_frame': 'odom', 'cameras.channel_names': ['a', 'b', 'c']}
    _, cfg = check_update(small_params(), changes)
    assert cfg.extrinsics_source == 'tf' and cfg.camera_channel_names == ('a', 'b', 'c')
    assert all(BY_KEY[key].static is None for key in changes)


def test_default_params_come_from_the_ament_index_of_a_colcon_install(tmp_path, monkeypatch):
    # The layout `colcon build` installs: an ament index marker and the share folder.
    index = tmp_path / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    (index / 'jax_perception_node').write_text('')
    shipped = tmp_path / 'share' / 'jax_perception_node' / 'config' / 'jax_perception.param.yaml'
    shipped.parent.mkdir(parents=True)
    shipped.write_text('/**:\n  ros__parameters: {}\n')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path))
    assert default_params_file() == shipped
    monkeypatch.delenv('AMENT_PREFIX_PATH')
    assert default_params_file() == PARAMS_FILE      # the source tree's, outside a ROS install


def test_the_public_api_finds_the_shipped_parameters_wherever_it_runs(tmp_path, monkeypatch):
    """users.md's snippet named config/... relative to a checkout: from /tmp it was refused."""
    import jax_perception_node
    monkeypatch.chdir(tmp_path)
    assert jax_perception_node.default_params_file() == PARAMS_FILE
    assert jax_perception_node.load_config(jax_perception_node.default_params_file()) == (
        load_config(PARAMS_FILE))


def test_default_params_come_from_pips_data_folder_where_it_is_not_sys_prefix(
        tmp_path, monkeypatch):
    """With pip install --user (or Debian's pip, into /usr/local) the share folder is elsewhere."""
    import sysconfig
    user = tmp_path / 'user'
    shipped = user / 'share' / 'jax_perception_node' / 'config' / 'only_installed.yaml'
    shipped.parent.mkdir(parents=True)
    shipped.write_text('/**:\n  ros__parameters: {}\n')
    get_path = sysconfig.get_path
    monkeypatch.setattr(sysconfig, 'get_path', lambda name, *scheme: str(user) if (
        name, *scheme) == ('data', f'{os.name}_user') else get_path(name, *scheme))
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    assert default_params_file('only_installed.yaml') == shipped


@pytest.mark.parametrize('labels, message', [
    (['vehicle:CAR', 'truck:LORRY'], "'truck:LORRY' is not class:LABEL"),
    (['vehicle'], "'vehicle' is not class:LABEL"),
    ([':CAR'], "':CAR' is not class:LABEL"),
    (['vehicle:CAR', 'vehicle:TRUCK'], "class 'vehicle' mapped twice"),
])
def test_a_bad_autoware_label_map_is_refused_naming_the_item(labels, message):
    with pytest.raises(ConfigError, match=f'^output.autoware_labels: {message}'):
        small_config(1, **{'output.autoware_labels': labels})
    cfg = small_config(1, **{'output.autoware_labels': ['vehicle:TRUCK']})
    assert cfg.output.autoware_labels == (('vehicle', 'TRUCK'),)
