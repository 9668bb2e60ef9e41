"""Config: the shipped YAML, the schema defaults, and one clear error per bad key."""

import ast
from pathlib import Path

from conftest import PARAMS_FILE, REPO, small_params
from jax_perception_node.config import (config_from_parameters, ConfigError, load_config,
                                        PARAMETERS, read_param_file)
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


def test_schema_defaults_equal_the_shipped_yaml():
    flat = read_param_file(PARAMS_FILE)
    for key, (default, description) in PARAMETERS.items():
        assert description
        if key != 'cameras.names':
            assert flat[key] == default, key


def test_every_yaml_key_is_commented():
    for line in PARAMS_FILE.read_text().splitlines():
        stripped = line.strip()
        if ':' in stripped and not stripped.startswith('#') and not stripped.endswith(':'):
            key = stripped.split(':')[0]
            if key in ('fx', 'fy', 'cx', 'cy', 'height', 'width', 'channels', 'translation',
                       'rotation_xyzw') and '#' not in line:
                continue   # repeated camera blocks: documented on the first camera
            assert '#' in line, f'undocumented: {line}'


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


def test_launch_file_builds_a_description_where_launch_exists():
    """Runs on a full ROS install; launch_ros is not on PyPI, so it skips in the venv."""
    pytest.importorskip('launch_ros', reason='launch_ros is not on PyPI (full ROS install only)')
    import launch
    import importlib.util
    path = Path(REPO / 'launch' / 'jax_perception.launch.py')
    spec = importlib.util.spec_from_file_location('jp_launch', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert isinstance(module.generate_launch_description(), launch.LaunchDescription)
