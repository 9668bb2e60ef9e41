"""InputGraph: what the ROS graph says about inputs that would never arrive, said once each."""

from contextlib import contextmanager
import time
from types import SimpleNamespace

from jax_perception_node.ros import input_graph
from jax_perception_node.ros.input_graph import InputGraph
from jax_perception_node.ros.sensor_inputs import subscribe_cameras
import pytest
from ros_harness import other_domain

TOPIC = '/jax_perception/input/camera/front/camera_info'
GRACE_S = 0.5


@contextmanager
def camera_node(overrides: dict):
    """Yield (node, publisher node, its subscriptions): the front camera's, in a domain alone."""
    import rclpy
    from rclpy.parameter import Parameter
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=other_domain(7))
    node = rclpy.create_node('jax_perception', context=context, parameter_overrides=[
        Parameter(key, value=value) for key, value in overrides.items()])
    driver = rclpy.create_node('driver', context=context)
    try:
        yield node, driver, subscribe_cameras(node, ['front'], False, lambda *a: None,
                                              lambda *a: None)
    finally:
        node.destroy_node()
        driver.destroy_node()
        rclpy.shutdown(context=context)


class StepClock:
    """The grace's clock, moved by the test: a stalled machine cannot stretch a phase."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def checks(graph, subscriptions, clock, seconds: float) -> list[str]:
    """Run ``graph.check`` every 0.05 s of ``clock`` for ``seconds``; return every line."""
    lines, end = [], clock.now + seconds
    while clock.now < end:
        lines += graph.check(subscriptions)
        clock.now += 0.05
        time.sleep(0.05)        # real time too: the graph learns of the publisher meanwhile
    return lines


@pytest.fixture
def short_grace(monkeypatch):
    clock = StepClock()
    monkeypatch.setattr(input_graph, 'LATCHED_GRACE_S', GRACE_S)
    monkeypatch.setattr(input_graph, 'time', clock)
    return clock


def test_a_latched_camera_info_is_named_once_only_while_none_is_taken(short_grace):
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo
    path = SimpleNamespace(pipe=SimpleNamespace(camera_names=('front',)),
                           cameras_with_info=frozenset())
    with camera_node({}) as (node, driver, subscriptions):
        driver.create_publisher(CameraInfo, TOPIC, QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        # A slow periodic driver: its CameraInfo taken within the grace, nothing is said.
        clock = short_grace
        graph = InputGraph(node, path)
        early = checks(graph, subscriptions, clock, GRACE_S - 0.1)     # short of the grace
        path.cameras_with_info = frozenset({'front'})
        assert early + checks(graph, subscriptions, clock, 2 * GRACE_S) == []
        # Published once, before the subscription: nothing taken, named once with the fix, and
        # not before the grace is over.
        path.cameras_with_info = frozenset()
        graph = InputGraph(node, path)
        assert checks(graph, subscriptions, clock, GRACE_S - 0.1) == []
        lines = checks(graph, subscriptions, clock, 3 * GRACE_S)
        assert len(lines) == 1, lines
        assert lines[0].startswith(f'input {TOPIC}: its publisher latches (transient local)')
        assert f'qos_overrides.{TOPIC}.subscription.durability: transient_local' in lines[0]


def test_tf_overrides_are_not_named_unapplied_before_tf_is_subscribed():
    path = SimpleNamespace(pipe=SimpleNamespace(camera_names=('front',)),
                           cameras_with_info=frozenset({'front'}))
    tf = 'qos_overrides./tf.subscription.depth'
    typo = 'qos_overrides./jax_perception/input/camera/frnt/camera_info.subscription.depth'
    with camera_node({tf: 50, typo: 3}) as (node, _, subscriptions):
        lines = InputGraph(node, path).check(subscriptions)
    # extrinsics.source may become tf live, and the /tf subscription then takes it.
    assert lines == [f'QoS overrides not applied (no subscription of this node has that topic '
                     f'and policy): {typo}']
