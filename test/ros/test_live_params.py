"""Live parameters: which keys are static (the schema), the update check, the node's callback."""

from types import SimpleNamespace

from configs import camera_params, small_config, small_params
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.settings.channels import LIDAR_CHANNELS
from jax_perception_node.settings.live_params import check_update, set_live_line, static_reason
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from ros_harness import (make_cloud, make_features, serving_node, set_parameters, stamp_of,
                         status_values, wait_answering)

T0 = 1_700_000_000 * 10**9


@pytest.mark.parametrize('key,reason', [
    ('grid.resolution', 'changes array shapes'), ('buckets', 'changes array shapes'),
    ('cameras.names', 'changes array shapes'), ('cameras.front.height', 'changes array shapes'),
    ('cameras.front.channels', 'changes array shapes'), ('fusion.num_heights',
                                                         'changes array shapes'),
    ('fusion.activation', 'compiled into the executables'),
    ('fusion.max_samples_per_cell', 'changes array shapes'),
    ('accumulation.num_sweeps', 'changes array shapes'),
    ('grid.z_min', 'fixed when the pipeline is built'),
    ('compilation_cache_dir', 'fixed when the pipeline is built'),
    ('accumulation.max_sweep_age_s', None), ('accumulation.max_odometry_gap_s', None),
    ('grid.frame_id', None), ('cameras.rear.cy', None), ('use_sim_time', None),
    ('cameras.front.fx', None), ('cameras.front.rotation_xyzw', None),
    ('lidar.translation', None), ('sync.max_camera_lidar_delay_s', None),
    ('diagnostics.latency_budget_ms', None)])
def test_static_reason(key, reason):
    assert static_reason(key) == reason


def test_check_update_refuses_static_keys_and_bad_values():
    values = small_params(1)
    with pytest.raises(ConfigError) as info:
        check_update(values, {'grid.resolution': 0.25})
    assert str(info.value) == ('grid.resolution is static (changes array shapes): '
                               'restart the node (a managed node: cleanup, set it, configure) '
                               'to change it')
    with pytest.raises(ConfigError, match=r'^cameras.front.fx: must be >=? '):
        check_update(values, {'cameras.front.fx': -1.0})
    # Setting a static key to the value it has changes nothing and is fine.
    merged, cfg = check_update(values, {'grid.resolution': 0.5, 'use_sim_time': True,
                                        'cameras.front.fx': 6.0})
    assert 'use_sim_time' not in merged and cfg.cameras[0].fx == 6.0
    assert values['cameras.front.fx'] == 8.0                 # the input is left alone


def test_the_log_line_of_a_set_names_a_static_key_as_kept_not_as_set_live():
    assert set_live_line({'cameras.front.fx': 6.0, 'use_sim_time': True}) == (
        'parameters set live: cameras.front.fx, use_sim_time')
    assert set_live_line({'grid.resolution': 0.5, 'cameras.front.fx': 6.0}) == (
        'parameters set live: cameras.front.fx (static, at the value in force: grid.resolution)')
    assert set_live_line({'grid.resolution': 0.5}) == (
        'no parameter set live (static, at the value in force: grid.resolution)')


def test_accumulation_limits_are_live_and_the_sweep_count_is_static():
    values = small_params(1)
    _, cfg = check_update(values, {'accumulation.max_sweep_age_s': 0.25,
                                   'accumulation.max_odometry_gap_s': 0.05})
    assert (cfg.accumulation.max_sweep_age_s, cfg.accumulation.max_odometry_gap_s) == (0.25, 0.05)
    with pytest.raises(ConfigError, match=r'^accumulation.num_sweeps is static \(changes array'):
        check_update(values, {'accumulation.num_sweeps': 3})


# -- the node ---------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def running(tmp_path_factory):
    from rcl_interfaces.srv import GetParameters, SetParameters
    tmp = tmp_path_factory.mktemp('live')
    params = small_params(1, **{'diagnostics.period_s': 0.2,
                                'diagnostics.lidar_timeout_s': 60.0})
    with serving_node(params, tmp, ('front',)) as (node, probe):
        setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
        getter = probe.node.create_client(GetParameters, '/jax_perception/get_parameters')
        wait_answering(probe, setter)
        wait_answering(probe, getter)
        yield node, probe, setter, getter


def get_parameter(probe, getter, name):
    from rclpy.parameter import parameter_value_to_python
    from rcl_interfaces.srv import GetParameters
    future = getter.call_async(GetParameters.Request(names=[name]))
    probe.wait_for(future.done, what='get_parameters')
    return parameter_value_to_python(future.result().values[0])


def send_frame(probe, k, points, fmap, camera_offset_ns=20_000_000):
    stamp = T0 + k * 10**9
    probe.publish_maps({'front': make_features(fmap, stamp + camera_offset_ns, 'front')})
    probe.cloud_pub.publish(make_cloud(points, stamp))
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features)
                   and any(stamp_of(m) == stamp for m in probe.latency),
                   what=f'output of frame {k}')
    msg = next(m for m in probe.features if stamp_of(m) == stamp)
    values = status_values(next(m for m in probe.latency if stamp_of(m) == stamp).status[0])
    assert values['compiles_after_warmup'] == '0'
    features = np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, -1)
    return features, int(values['cameras_used'])


def reference(**overrides):
    pipe = BevPipeline(small_config(1, **overrides))
    pipe.warmup()
    return pipe


def frame_inputs(seed):
    rng = np.random.default_rng(seed)
    points = rng.normal(scale=4.0, size=(300, 4)).astype(np.float32)
    points[:, 0] = np.abs(points[:, 0]) + 1.0
    return points, rng.uniform(size=(12, 20, 3)).astype(np.float32)


def test_live_calibration_applies_without_a_compile(running):
    node, probe, setter, getter = running
    points, fmap = frame_inputs(3)
    before, _ = send_frame(probe, 0, points, fmap)
    np.testing.assert_array_equal(before, reference().process(points, {'front': fmap}).features)

    results = set_parameters(probe, setter, cameras__front__fx=6.0)
    assert results[0].successful, results[0].reason
    assert get_parameter(probe, getter, 'cameras.front.fx') == 6.0
    after, used = send_frame(probe, 1, points, fmap)
    expected = reference(**camera_params('front', fx=6.0)).process(points, {'front': fmap})
    assert used == 1 and not np.array_equal(after, before)
    np.testing.assert_array_equal(after, expected.features)

    # Pose of the LiDAR and of the camera, two keys in one atomic set.
    results = set_parameters(probe, setter, lidar__translation=[0.5, 0.25, 1.0],
                             cameras__front__translation=[1.5, 0.25, 1.25])
    assert all(r.successful for r in results), [r.reason for r in results]
    moved, _ = send_frame(probe, 2, points, fmap)
    expected = reference(**{**camera_params('front', fx=6.0, translation=(1.5, 0.25, 1.25)),
                            'lidar.translation': [0.5, 0.25, 1.0]})
    np.testing.assert_array_equal(moved, expected.process(points, {'front': fmap}).features)

    # The intensity scale, applied as the cloud is read: the same cloud, its intensity halved.
    results = set_parameters(probe, setter, lidar__intensity_scale=0.5)
    assert results[0].successful, results[0].reason
    halved, _ = send_frame(probe, 3, points, fmap)
    scaled = points * np.float32([1.0, 1.0, 1.0, 0.5])
    assert not np.array_equal(halved, moved)
    np.testing.assert_array_equal(halved, expected.process(scaled, {'front': fmap}).features)
    assert node.alive()


def test_static_and_bad_values_are_refused_with_a_reason(running):
    node, probe, setter, getter = running
    results = set_parameters(probe, setter, grid__resolution=0.25)
    assert not results[0].successful
    assert results[0].reason == ('grid.resolution is static (changes array shapes): '
                                 'restart the node (a managed node: cleanup, set it, '
                                 'configure) to change it')
    assert get_parameter(probe, getter, 'grid.resolution') == 0.5
    assert set_parameters(probe, setter, grid__resolution=0.5)[0].successful
    assert 'no parameter set live (static, at the value in force: grid.resolution)' in node.log()
    results = set_parameters(probe, setter, cameras__front__fx=-2.0)
    # Refused by the descriptor's range (rclpy) or the config layer: the reason names the key.
    assert not results[0].successful and 'cameras.front.fx' in results[0].reason
    assert get_parameter(probe, getter, 'cameras.front.fx') > 0
    assert 'parameter change refused' in node.log()


def test_a_value_of_the_wrong_type_is_refused(running):
    """Parameters are typed: fx 20 (an integer) is refused, not silently ignored or coerced."""
    node, probe, setter, getter = running
    before = get_parameter(probe, getter, 'cameras.front.fx')
    results = set_parameters(probe, setter, cameras__front__fx=20)
    assert not results[0].successful and 'type' in results[0].reason.lower()
    assert get_parameter(probe, getter, 'cameras.front.fx') == before
    assert node.alive()


def test_live_sync_tolerance_masks_a_camera(running):
    node, probe, setter, getter = running
    points, fmap = frame_inputs(4)
    _, used = send_frame(probe, 10, points, fmap, camera_offset_ns=50_000_000)
    assert used == 1                                    # within the 0.1 s default
    results = set_parameters(probe, setter, sync__max_camera_lidar_delay_s=0.01)
    assert results[0].successful, results[0].reason
    _, used = send_frame(probe, 11, points, fmap, camera_offset_ns=50_000_000)
    assert used == 0
    _, used = send_frame(probe, 12, points, fmap, camera_offset_ns=5_000_000)
    assert used == 1


@pytest.mark.parametrize('k,key,value', [(20, 'sync.max_camera_lidar_delay_s', 1e300),
                                         (21, 'accumulation.max_odometry_gap_s', 1e300),
                                         (22, 'diagnostics.period_s', 1e10)])
def test_absurd_values_are_refused_and_the_node_keeps_serving(running, k, key, value):
    """Refused with a reason (never an exception out of the callback); the node serves on."""
    node, probe, setter, getter = running
    before = get_parameter(probe, getter, key)
    results = set_parameters(probe, setter, **{key.replace('.', '__'): value})
    assert not results[0].successful and results[0].reason
    assert get_parameter(probe, getter, key) == before
    points, fmap = frame_inputs(5)
    _, used = send_frame(probe, k, points, fmap, camera_offset_ns=5_000_000)
    assert used == 1 and node.alive()
    seen = len(probe.diagnostics)
    probe.wait_for(lambda: len(probe.diagnostics) > seen, what='diagnostics still published')


def test_an_unexpected_error_in_a_parameter_set_is_a_refusal_not_an_exception():
    """Issue 16.2: whatever goes wrong applying a set, the callback answers; it never raises."""
    from rclpy.parameter import Parameter
    from jax_perception_node.ros.serving import PerceptionCore

    class Logger:
        def __init__(self):
            self.lines = []

        def __getattr__(self, level):
            return lambda text, **_: self.lines.append((level, text))

    class Node:
        logger = Logger()

        def get_logger(self):
            return self.logger

    class BrokenPath:
        def update(self, cfg, intrinsics_from_params=frozenset(), keys_set=frozenset()):
            raise RuntimeError('a bug')

    core = PerceptionCore(Node(), None, None)
    core.values, core.cfg = small_params(1), small_config(1)
    # What the GridMap layers read of a pipeline (checked before the frame path is updated).
    core.pipe = SimpleNamespace(lidar_channels=LIDAR_CHANNELS, projected=False)
    core.path = BrokenPath()
    result = core._on_set_parameters([Parameter('cameras.front.fx', value=6.0)])
    assert not result.successful
    assert result.reason == "unexpected error: RuntimeError('a bug')"
    assert core.values['cameras.front.fx'] == 8.0           # nothing taken
    logged = ('error', "parameter change ['cameras.front.fx'] failed: unexpected error: "
                       "RuntimeError('a bug')")
    assert logged in Node.logger.lines


def test_a_lens_model_changes_with_its_coefficients_in_one_atomic_set():
    """One key at a time each half is refused; set atomically, the pair applies, no compile."""
    from rclpy.parameter import Parameter
    from jax_perception_node.ros.node import JaxPerceptionNode
    from ros_harness import in_process
    params = small_params(1, **{'diagnostics.lidar_timeout_s': 60.0})
    with in_process(JaxPerceptionNode, params, 45) as node:
        core = node.core
        lens = [-0.1, 0.01, 0.0, 0.0, 0.0]
        model = Parameter('cameras.front.distortion_model', value='plumb_bob')
        coefficients = Parameter('cameras.front.distortion', value=lens)
        assert not node.set_parameters([model])[0].successful
        assert not node.set_parameters([coefficients])[0].successful
        assert node.set_parameters_atomically([model, coefficients]).successful
        front = core.path.cameras[0]
        assert (front.distortion_model, list(front.distortion)) == ('plumb_bob', lens)
        assert core.pipe.compiles_after_warmup == 0


def test_a_refusal_for_another_camera_names_the_key_that_was_set_first():
    """The front camera turned to face the rear one: the rear's samples would not fit."""
    from configs import REAR
    from rclpy.parameter import Parameter
    from jax_perception_node.ros.node import JaxPerceptionNode
    from ros_harness import in_process
    params = small_params(2, **{'diagnostics.lidar_timeout_s': 60.0})
    with in_process(JaxPerceptionNode, params, 45) as node:
        result = node.set_parameters([Parameter('cameras.front.rotation_xyzw', value=REAR)])[0]
        assert not result.successful
        assert result.reason.startswith('cameras.front.rotation_xyzw: cameras.rear: this '
                                        'calibration puts more camera samples'), result.reason
        # A refusal that names the key already is left as it is.
        result = node.set_parameters([Parameter('grid.resolution', value=0.3)])[0]
        assert result.reason.startswith('grid.resolution'), result.reason
        assert not result.reason.startswith('grid.resolution: grid.resolution')


def test_one_request_for_every_parameter_gets_every_value(running):
    # As `ros2 param dump` asks: list, then one GetParameters for all names. A key declared
    # empty ([] by default: lidars.names, head.score_thresholds) was left unset, and rclpy
    # answers nothing for a request naming an unset parameter: the dump was empty.
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters, ListParameters
    from rclpy.parameter import parameter_value_to_python
    node, probe, setter, getter = running
    lister = probe.node.create_client(ListParameters, '/jax_perception/list_parameters')
    wait_answering(probe, lister)
    future = lister.call_async(ListParameters.Request())
    probe.wait_for(future.done, what='list_parameters')
    names = list(future.result().result.names)
    assert 'lidars.names' in names and 'head.score_thresholds' in names
    future = getter.call_async(GetParameters.Request(names=names))
    probe.wait_for(future.done, what='get_parameters')
    values = dict(zip(names, future.result().values))
    assert len(future.result().values) == len(names)
    assert values['lidars.names'].type == ParameterType.PARAMETER_STRING_ARRAY
    assert parameter_value_to_python(values['lidars.names']) == []
    assert values['head.score_thresholds'].type == ParameterType.PARAMETER_DOUBLE_ARRAY
