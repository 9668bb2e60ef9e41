"""The managed node through real rclpy: lifecycle transitions over the lifecycle_msgs services."""

import time

from configs import small_config, small_params
from jax_perception_node.core.pipeline import BevPipeline
from lifecycle_harness import LifecycleClient, LifecycleProcess
import numpy as np
import pytest
from ros_harness import (make_cloud, Probe, set_parameters, stamp_of, status_values,
                         wait_answering, write_params)

T0 = 1_700_000_000 * 10**9
PARAMS = small_params(0, **{'diagnostics.period_s': 0.2, 'diagnostics.lidar_timeout_s': 60.0})


def transitions():
    from lifecycle_msgs.msg import Transition
    return Transition


@pytest.fixture
def managed(tmp_path):
    node = LifecycleProcess(write_params(PARAMS, tmp_path / 'params.yaml'), tmp_path / 'n.log')
    probe = Probe()
    client = LifecycleClient(probe)
    try:
        client.wait_for_services(node)
        yield node, probe, client
    finally:
        probe.close()
        node.stop()


def serve(probe, stamp, points):
    """Publish a cloud and wait for its output; returns the BEV features."""
    probe.cloud_pub.publish(make_cloud(points, stamp))
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features)
                   and any(stamp_of(m) == stamp for m in probe.latency), what=f'frame {stamp}')
    msg = next(m for m in probe.features if stamp_of(m) == stamp)
    return np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, -1)


def last_counts(probe):
    """Received and processed counts of the newest /diagnostics (call inside wait_for)."""
    if not probe.diagnostics:
        return {}
    return {k: int(v) for k, v in status_values(probe.diagnostics[-1].status[0]).items()
            if k in ('received', 'processed')}


def test_transitions_gate_the_output(managed):
    node, probe, client = managed
    t = transitions()
    pipe = BevPipeline(small_config(0))
    pipe.warmup()
    points = np.random.default_rng(2).normal(scale=4.0, size=(100, 4)).astype(np.float32)

    assert client.state() == 'unconfigured'
    # Unconfigured and inactive: no subscription exists, so nothing can be served.
    assert probe.cloud_pub.get_subscription_count() == 0
    assert client.transition(t.TRANSITION_CONFIGURE)
    assert client.state() == 'inactive'
    assert probe.cloud_pub.get_subscription_count() == 0
    assert 'warm-up:' in node.log()

    assert client.transition(t.TRANSITION_ACTIVATE)
    assert client.state() == 'active'
    probe.wait_for(lambda: probe.cloud_pub.get_subscription_count() > 0, what='subscription')
    out = serve(probe, T0, points)
    np.testing.assert_array_equal(out, pipe.process(points).features)
    probe.wait_for(lambda: last_counts(probe).get('processed') == 1, what='processed count')

    assert client.transition(t.TRANSITION_DEACTIVATE)
    assert client.state() == 'inactive'
    probe.wait_for(lambda: probe.cloud_pub.get_subscription_count() == 0, what='unsubscribe')
    with probe.lock:
        diagnostics_while_active = len(probe.diagnostics)
    probe.cloud_pub.publish(make_cloud(points, T0 + 10**9))     # nobody listens

    assert client.transition(t.TRANSITION_ACTIVATE)
    probe.wait_for(lambda: probe.cloud_pub.get_subscription_count() > 0, what='resubscribe')
    serve(probe, T0 + 2 * 10**9, points)
    assert not any(stamp_of(m) == T0 + 10**9 for m in probe.features + probe.latency)
    # Counters survive deactivation: the second served frame is the second processed.
    probe.wait_for(lambda: len(probe.diagnostics) > diagnostics_while_active
                   and last_counts(probe) == {'received': 2, 'processed': 2},
                   what='counts kept across deactivate')
    values = status_values(probe.latency[-1].status[0])
    assert values['compiles_after_warmup'] == '0'

    # Shutdown from active ends the process cleanly.
    assert client.transition(t.TRANSITION_ACTIVE_SHUTDOWN)
    assert node.proc.wait(timeout=30) == 0
    assert 'frame failed' not in node.log()


def test_failed_configure_reports_the_reason_and_cleanup_releases(managed):
    node, probe, client = managed
    t = transitions()
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter
    setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
    wait_answering(probe, setter)

    def set_param(name, value):
        future = setter.call_async(SetParameters.Request(
            parameters=[Parameter(name, value=value).to_parameter_msg()]))
        probe.wait_for(future.done, what='set_parameters')
        return future.result().results[0]

    # The executor spins the process from its start: read-only, unconfigured too (accepted
    # before, it read single_threaded while the events executor spun).
    refused = set_param('executor', 'single_threaded')
    assert (refused.successful, refused.reason) == (
        False, 'Trying to set a read-only parameter: executor.')
    # Unconfigured, a static key may change: configure reads it (and here refuses it: within
    # the parameter's range, 0.3 m cells do not divide the 16 m x range).
    assert set_param('grid.resolution', 0.3).successful
    assert not client.transition(t.TRANSITION_CONFIGURE)
    assert client.state() == 'unconfigured'
    assert ('configure failed: bad parameter grid.resolution: the x range 16 m is not a whole '
            'number of 0.3 m cells') in node.log()

    assert set_param('grid.resolution', 0.25).successful
    assert client.transition(t.TRANSITION_CONFIGURE)
    # Configured, the same key is static.
    refused = set_param('grid.resolution', 0.5)
    assert not refused.successful and 'is static' in refused.reason
    assert client.transition(t.TRANSITION_CLEANUP)
    assert client.state() == 'unconfigured'
    assert set_param('grid.resolution', 0.5).successful

    # Configure again after cleanup builds a new pipeline with the new grid.
    assert client.transition(t.TRANSITION_CONFIGURE)
    assert client.transition(t.TRANSITION_ACTIVATE)
    probe.wait_for(lambda: probe.cloud_pub.get_subscription_count() > 0, what='subscription')
    out = serve(probe, T0, np.ones((3, 4), np.float32))
    assert out.shape[:2] == (32, 48)                     # 16 m x 24 m at 0.5 m
    assert client.transition(t.TRANSITION_DEACTIVATE)
    assert client.transition(t.TRANSITION_INACTIVE_SHUTDOWN)
    assert node.proc.wait(timeout=30) == 0


def test_a_transition_the_state_does_not_offer_is_refused_and_the_node_lives_on(managed):
    # rclpy's own handler raised RCLError ('Transition is not registered') out of the
    # executor: the process exited 1 without answering.
    node, probe, client = managed
    t = transitions()
    assert not client.transition(t.TRANSITION_ACTIVATE)          # a fresh node
    assert not client.transition(label='deactivate')
    assert client.state() == 'unconfigured'
    assert client.transition(t.TRANSITION_CONFIGURE)
    assert not client.transition(t.TRANSITION_CONFIGURE)         # configure twice
    assert not client.transition(t.TRANSITION_ACTIVE_SHUTDOWN)   # the shutdown of another state
    assert node.alive() and client.state() == 'inactive'
    probe.wait_for(lambda: 'transition id 1 refused: not available in state "inactive" '
                           '(available: activate, cleanup, shutdown)' in node.log(),
                   what='the refusal logged')
    assert 'transition "deactivate" refused: not available in state "unconfigured"' in node.log()

    # A burst of 24 requests back to back, valid and invalid in any order. The service's
    # queue (the services' default QoS: keep last 10) may drop some while a configure warms
    # up, as it would for rclcpp; the node answers what reaches it and lives on.
    rng = np.random.default_rng(11)
    ids = rng.choice([t.TRANSITION_CONFIGURE, t.TRANSITION_CLEANUP, t.TRANSITION_ACTIVATE,
                      t.TRANSITION_DEACTIVATE, 99], size=24)
    futures = [client.request(int(i)) for i in ids]
    answered, quiet_since = 0, time.monotonic()
    while answered < len(futures) and time.monotonic() - quiet_since < 10.0:
        time.sleep(0.1)
        with probe.lock:
            done = sum(f.done() for f in futures)
        if done > answered:
            answered, quiet_since = done, time.monotonic()
    assert node.alive(), node.log()
    answers = [f.result().success for f in futures if f.done()]
    assert answered >= 10 and not all(answers) and any(answers)
    assert client.state() in ('unconfigured', 'inactive', 'active')
    # Still a working node: bring it to active and serve a frame.
    for transition in (t.TRANSITION_CONFIGURE, t.TRANSITION_ACTIVATE):
        client.transition(transition)
    assert client.state() == 'active'
    probe.wait_for(lambda: probe.cloud_pub.get_subscription_count() > 0, what='subscription')
    serve(probe, T0, np.ones((3, 4), np.float32))


def test_shutdown_from_unconfigured(managed):
    node, probe, client = managed
    assert client.transition(transitions().TRANSITION_UNCONFIGURED_SHUTDOWN)
    assert node.proc.wait(timeout=30) == 0


def test_a_reactivation_starts_its_health_afresh_and_counts_the_cloud_it_gave_up():
    """
    In-process: what the last activation left is neither reported again nor lost.

    A masked camera and the rejections of its last period are not in the next activation's
    first report; a cloud still pending is counted dropped.
    """
    from jax_perception_node.ros.lifecycle_node import JaxPerceptionLifecycleNode
    from ros_harness import in_process
    params = small_params(1, **{'diagnostics.lidar_timeout_s': 60.0})
    with in_process(JaxPerceptionLifecycleNode, params, 43) as node:
        node.trigger_configure()
        node.trigger_activate()
        core = node.core
        core._worker.stop(core.log)        # nothing serves: the cloud below stays pending
        core._worker = None
        core._on_cloud(make_cloud(np.ones((3, 4), np.float32), T0))
        with core._lock:
            core._bump('rejected', 3)
        core._stale = (('front', 'no map held'),)
        assert 'front stale' in core.diagnostic_status().message
        node.trigger_deactivate()
        assert core.counts['received'] == 1 and core.counts['dropped'] == 1
        node.trigger_activate()
        status = core.diagnostic_status()
        assert status.message == 'waiting for the first point cloud', status.message


def test_a_lidar_set_still_waiting_at_deactivate_is_counted_dropped():
    from jax_perception_node.ros.lifecycle_node import JaxPerceptionLifecycleNode
    from ros_harness import in_process
    # Made in Python: rclpy types the empty cameras.names as a byte array (taken as []).
    params = small_params(0, **{'lidars.names': ['top', 'left'],
                                'sync.max_lidar_delay_s': 60.0,
                                'diagnostics.lidar_timeout_s': 60.0})
    for name in ('top', 'left'):
        params[f'lidars.{name}.translation'] = [0.0, 0.0, 1.0]
        params[f'lidars.{name}.rotation_xyzw'] = [0.0, 0.0, 0.0, 1.0]
    with in_process(JaxPerceptionLifecycleNode, params, 44) as node:
        node.trigger_configure()
        node.trigger_activate()
        core = node.core
        cloud = make_cloud(np.ones((3, 4), np.float32), T0)
        cloud.header.frame_id = 'lidar_top'
        core._on_lidar_cloud('top', cloud)          # its set waits 60 s for left
        node.trigger_deactivate()
        assert core.counts['received'] == 1 and core.counts['dropped'] == 1


def test_a_frame_an_unexpected_error_stops_is_counted_and_reported_and_the_next_is_served():
    from jax_perception_node.ros.lifecycle_node import JaxPerceptionLifecycleNode
    from ros_harness import in_process
    params = small_params(1, **{'diagnostics.lidar_timeout_s': 60.0})
    with in_process(JaxPerceptionLifecycleNode, params, 44) as node:
        node.trigger_configure()
        node.trigger_activate()
        core = node.core
        process = core.path.process

        def broken_once(*args, **kwargs):
            core.path.process = process
            raise RuntimeError('a bug')
        core.path.process = broken_once

        def served(count):
            core._on_cloud(make_cloud(np.ones((3, 4), np.float32), T0 + count * 10**8))
            deadline = time.monotonic() + 30
            while core.counts['frames_failed'] + core.counts['processed'] < count:
                assert time.monotonic() < deadline, core.counts
                time.sleep(0.01)
        served(1)
        assert (core.counts['frames_failed'], core.counts['processed']) == (1, 0)
        assert core.diagnostic_status().message.startswith(
            '1 frames failed since the last report (an internal error: see the log)')
        served(2)
        assert (core.counts['frames_failed'], core.counts['processed']) == (1, 1)


def test_a_fault_in_configure_or_activate_is_logged_undone_and_the_node_can_start_after(
        monkeypatch):
    """A fault that is no bad parameter (out of memory, a thread that cannot start)."""
    from jax_perception_node.ros import serving
    from jax_perception_node.ros.lifecycle_node import (FAILURE, JaxPerceptionLifecycleNode,
                                                        SUCCESS)
    from ros_harness import in_process

    class Log:              # the node's logger, its errors kept
        def __init__(self, logger):
            self.logger, self.errors = logger, []

        def error(self, message):
            self.errors.append(message)

        def __getattr__(self, name):
            return getattr(self.logger, name)

    def fails(what):
        def raise_it(*args, **kwargs):
            raise RuntimeError(f'{what} (injected)')
        return raise_it
    params = small_params(1, **{'diagnostics.lidar_timeout_s': 60.0})
    with in_process(JaxPerceptionLifecycleNode, params, 45) as node:
        log = Log(node.get_logger())
        node.get_logger = lambda: log
        with monkeypatch.context() as patch:
            patch.setattr(BevPipeline, 'warmup', fails('RESOURCE_EXHAUSTED'))
            assert node.trigger_configure() == FAILURE
        assert 'configure failed' in log.errors[-1] and 'RESOURCE_EXHAUSTED' in log.errors[-1]
        assert 'Traceback' in log.errors[-1] and node.core.pipe is None
        assert node.trigger_configure() == SUCCESS, log.errors
        with monkeypatch.context() as patch:
            patch.setattr(serving, 'FrameWorker', fails('cannot start a thread'))
            assert node.trigger_activate() == FAILURE
        assert 'activate failed' in log.errors[-1] and 'cannot start' in log.errors[-1]
        assert node.core._subscriptions == [] and node.core._timer is None
        # Still configured: a clean activate serves.
        assert node.trigger_activate() == SUCCESS
        core = node.core
        core._on_cloud(make_cloud(np.ones((3, 4), np.float32), T0))
        deadline = time.monotonic() + 30
        while core.counts['processed'] < 1:
            assert time.monotonic() < deadline, core.counts
            time.sleep(0.01)
        node.trigger_deactivate()


def test_a_sim_clock_gone_back_since_a_cloud_arrived_neither_refuses_it_nor_ages_it():
    """
    A bag's loop under use_sim_time: /clock goes back while the loop's last cloud waits.

    That cloud is judged by the clock it arrived at (not refused as 2.9 s ahead) and published
    without an age (not -2900 ms); one stamped 0 is refused.
    """
    from jax_perception_node.ros.lifecycle_node import JaxPerceptionLifecycleNode
    from rclpy.time import Time
    from ros_harness import in_process
    params = small_params(1, **{'diagnostics.lidar_timeout_s': 60.0})
    with in_process(JaxPerceptionLifecycleNode, params, 46) as node:
        node.trigger_configure()
        node.trigger_activate()
        core = node.core
        core._worker.stop(core.log)        # served below, by hand, after the clock went back
        core._worker = None
        publish, records = core.outputs.publish, []
        core.outputs.publish = lambda *args: records.append(publish(*args)) or records[-1]
        clock = node.get_clock()
        clock._set_ros_time_is_active(True)     # what rclpy's TimeSource does on /clock
        last, counts = T0 + 29 * 10**8, []
        for stamp in (last, 0):
            clock.set_ros_time_override(Time(nanoseconds=last))
            core._on_cloud(make_cloud(np.ones((3, 4), np.float32), stamp))
            clock.set_ros_time_override(Time(nanoseconds=T0))      # the loop starts over
            item, core._pending = core._pending, None
            core._process(*item)
            counts.append((core.counts['processed'], core.counts['rejected']))
        assert counts == [(1, 0), (1, 1)]
        assert len(records) == 1 and records[0]['age_ms'] == records[0]['total_ms'] > 0
        node.trigger_deactivate()


def test_a_dump_of_a_node_left_without_a_required_key_shows_every_parameter(tmp_path):
    # A managed node takes an incomplete file (it is checked at configure): GetParameters for
    # every name, as `ros2 param dump`, rqt and Foxglove ask, answered nothing at all while
    # one named a key without a value. Now that key answers NOT_SET and the others theirs.
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters, ListParameters
    from rclpy.parameter import parameter_value_to_python
    params = small_params(1)
    del params['cameras.front.fx']
    node = LifecycleProcess(write_params(params, tmp_path / 'params.yaml'), tmp_path / 'n.log')
    probe = Probe()
    try:
        LifecycleClient(probe).wait_for_services(node)
        lister = probe.node.create_client(ListParameters, '/jax_perception/list_parameters')
        getter = probe.node.create_client(GetParameters, '/jax_perception/get_parameters')
        for client in (lister, getter):
            wait_answering(probe, client)
        future = lister.call_async(ListParameters.Request())
        probe.wait_for(future.done, what='list_parameters')
        names = list(future.result().result.names)
        future = getter.call_async(GetParameters.Request(names=names))
        probe.wait_for(future.done, what='get_parameters')
        values = dict(zip(names, future.result().values))
        assert len(future.result().values) == len(names)
        assert values['cameras.front.fx'].type == ParameterType.PARAMETER_NOT_SET
        assert parameter_value_to_python(values['cameras.front.fy']) == 8.0
        future = getter.call_async(GetParameters.Request(names=['cameras.front.fy', 'nope']))
        probe.wait_for(future.done, what='get_parameters of an undeclared name')
        assert list(future.result().values) == []       # rclpy's answer, unchanged
    finally:
        probe.close()
        node.stop()


def test_a_camera_named_while_unconfigured_takes_its_block_at_once(managed):
    # Its keys were declared only at configure: setting them first was refused, and the
    # operator had to run a configure that fails before the block could be set.
    from rcl_interfaces.srv import ListParameters, SetParameters
    node, probe, client = managed
    t = transitions()
    setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
    lister = probe.node.create_client(ListParameters, '/jax_perception/list_parameters')
    for service in (setter, lister):
        wait_answering(probe, service)

    def listed():
        future = lister.call_async(ListParameters.Request(prefixes=['cameras']))
        probe.wait_for(future.done, what='list_parameters')
        return [n for n in future.result().result.names if n.startswith('cameras.side.')]
    block = {k.replace('cameras.front.', 'cameras__side__'): v
             for k, v in small_params(1).items() if k.startswith('cameras.front.')}
    assert [r.successful for r in set_parameters(probe, setter, cameras__names=['side'])] == [
        True]
    assert {k.replace('__', '.') for k in block} < set(listed())      # and the defaulted ones
    results = set_parameters(probe, setter, **block)
    assert all(r.successful for r in results), [r.reason for r in results]
    assert client.transition(t.TRANSITION_CONFIGURE)
    assert client.transition(t.TRANSITION_CLEANUP)
    # Taken out again: its block goes, so a dump of the node is a file the node takes.
    assert set_parameters(probe, setter, cameras__names=[])[0].successful
    assert listed() == []
