"""Config: the shipped YAML, the schema defaults, and one clear error per bad key."""

import ast

from configs import PARAMS_FILE, REPO, small_config, small_params
from jax_perception_node.config import (AccumulationConfig, config_from_parameters, ConfigError,
                                        load_config, write_param_file)
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
    ('grid.resolution', 0.0, 'grid.resolution: must be > 0'),
    ('grid.resolution', 0.3, 'grid.resolution: the x range'),
    ('grid.x_max', -9.0, 'grid.x_max: must be greater than grid.x_min'),
    ('grid.z_min', 'low', 'grid.z_min: expected a number'),
    ('grid.frame_id', '', 'grid.frame_id: must not be empty'),
    ('buckets', [256, 64], 'buckets: expected strictly ascending'),
    ('buckets', [], 'buckets: expected strictly ascending'),
    ('buckets', [1.5], 'buckets: expected a list of integers'),
    ('overflow_policy', 'drop', 'overflow_policy: expected one of subsample | truncate'),
    ('lidar.rotation_xyzw', [0, 0, 0, 2], 'lidar.rotation_xyzw: not a unit quaternion'),
    ('lidar.translation', [0, 0], 'lidar.translation: expected 3 finite numbers'),
    ('fusion.num_heights', 0, 'fusion.num_heights: must be >= 1'),
    ('fusion.activation', 'tanh', 'fusion.activation: expected one of none | relu'),
    ('fusion.weights_file', '/nonexistent.npz', 'fusion.weights_file: cannot read'),
    ('sync.max_camera_lidar_delay_s', -1.0, 'sync.max_camera_lidar_delay_s: must be >= 0'),
    ('cameras.front.fx', -1.0, 'cameras.front.fx: must be > 0'),
    ('cameras.rear.channels', 4, 'cameras.rear.channels: every camera needs the same'),
    ('cameras.front.height', None, 'cameras.front.height: required'),
    ('grid.resolutoin', 0.5, 'grid.resolutoin: unknown parameter'),
    ('cameras.names', ['front', 'front'], 'cameras.names: duplicate'),
    ('cameras.names', ['front', 'front-left'], 'cameras.names: "front-left" must be letters'),
    ('fusion.num_heights', 65, 'fusion.num_heights: must be <= 64, got 65'),
    ('accumulation.num_sweeps', 0, 'accumulation.num_sweeps: must be >= 1, got 0'),
    ('accumulation.num_sweeps', 17, 'accumulation.num_sweeps: must be <= 16, got 17'),
    ('accumulation.num_sweeps', 2.0, 'accumulation.num_sweeps: expected an integer'),
    ('accumulation.max_sweep_age_s', 0.0, 'accumulation.max_sweep_age_s: must be > 0, got 0'),
    ('accumulation.max_odometry_gap_s', -0.1, 'accumulation.max_odometry_gap_s: must be > 0'),
    ('accumulation.max_odometry_gap_s', float('nan'),
     'accumulation.max_odometry_gap_s: must be finite'),
    ('diagnostics.window', 0, 'diagnostics.window: must be >= 1, got 0'),
    ('buckets', [0, 64], 'buckets: must be >= 1'),
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


def test_weights_file_shape_is_checked(tmp_path):
    path = tmp_path / 'w.npz'
    np.savez(path, W=np.zeros((9, 4)), b=np.zeros(4))
    with pytest.raises(ConfigError, match=r'fusion.weights_file: W must be \(10, C_out\)'):
        config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))
    pickled = tmp_path / 'p.npz'
    np.savez(pickled, W=np.array([object()], dtype=object), b=np.zeros(4))
    with pytest.raises(ConfigError, match='fusion.weights_file: cannot read'):
        config_from_parameters(small_params(**{'fusion.weights_file': str(pickled)}))


def test_param_file_errors(tmp_path):
    with pytest.raises(ConfigError, match='params file .*missing.yaml'):
        load_config(tmp_path / 'missing.yaml')
    bad = tmp_path / 'bad.yaml'
    bad.write_text('a: [1, 2')
    with pytest.raises(ConfigError, match='not valid YAML'):
        load_config(bad)
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
    assert f"'{consts['EXECUTABLE']} = jax_perception_node.node:main'" in setup
    assert consts['PACKAGE'] == 'jax_perception_node'
    assert (REPO / 'config' / 'jax_perception.param.yaml').exists()
    assert "os.path.join('config', 'jax_perception.param.yaml')" in source
    assert "('share/' + package_name + '/launch', glob('launch/*.launch.py'))" in setup
    for arg in ('params_file', 'namespace', 'use_sim_time', 'log_level', 'pointcloud_topic'):
        assert f"DeclareLaunchArgument('{arg}'" in source
