"""
The managed node's bond with Nav2's lifecycle manager, against a manager written here.

``Manager`` is the lifecycle manager's end as bondcpp speaks it (bond/msg/Status on /bond, the
managed node's name as id, its own instance id): it heartbeats when told to, records the node's
messages, answers the node's break with ``active: false`` and notes the node's death when the
node's heartbeats stop for its timeout. One node process goes through every check, with a
short heartbeat (0.05 s) and timeout (1 s) so that a lapse is seen in about a second.
"""

import re
import signal
import statistics
import time
import uuid

from configs import small_params
from lifecycle_harness import LifecycleClient, LifecycleProcess
import numpy as np
import pytest
from ros_harness import make_cloud, Probe, set_parameters, stamp_of, wait_answering, write_params

PERIOD_S, TIMEOUT_S = 0.05, 1.0
MANAGER_PERIOD_S = 0.1          # Nav2's manager: setHeartbeatPeriod(0.10)
PARAMS = small_params(0, **{'bond.heartbeat_period_s': PERIOD_S,
                            'bond.heartbeat_timeout_s': TIMEOUT_S,
                            'diagnostics.lidar_timeout_s': 60.0})
NODE = 'jax_perception'
# rclpy's console format: [SEVERITY] [wall time in s] [logger]: message
LOG_LINE = re.compile(r'\[(\w+)\] \[(\d+\.\d+)\] \[[^\]]*\]: (.*)')


class Manager:
    """The manager's end of one bond on the probe's node; every field under ``probe.lock``."""

    def __init__(self, probe, bond_id: str = NODE):
        from bond.msg import Status
        from rclpy.qos import QoSProfile
        self.probe, self.id, self.instance_id = probe, bond_id, str(uuid.uuid4())
        self.beating = False
        self.received = []          # (monotonic s, Status) of the node's messages
        self.beat_at = None         # wall time of our last heartbeat
        self.died_at = None         # monotonic time we found the node's heartbeats gone
        self._pub = probe.node.create_publisher(Status, '/bond', QoSProfile(depth=5))
        probe.node.create_subscription(Status, '/bond', self._on_status, QoSProfile(depth=100))
        probe.node.create_timer(MANAGER_PERIOD_S, self._tick)

    def _status(self, active: bool):
        from bond.msg import Status
        return Status(id=self.id, instance_id=self.instance_id, active=active,
                      heartbeat_timeout=TIMEOUT_S, heartbeat_period=MANAGER_PERIOD_S)

    def _on_status(self, msg) -> None:
        if msg.id != self.id or msg.instance_id == self.instance_id:
            return
        with self.probe.lock:
            self.received.append((time.monotonic(), msg))
        if not msg.active:      # the node breaks the bond: bondcpp answers once
            self._pub.publish(self._status(False))

    def _tick(self) -> None:
        with self.probe.lock:
            if self.beating:
                self._pub.publish(self._status(True))
                self.beat_at = time.time()
            last = self.received[-1] if self.received else None
            if (last is not None and last[1].active and self.died_at is None
                    and time.monotonic() - last[0] > TIMEOUT_S):
                self.died_at = time.monotonic()

    def break_bond(self) -> None:
        """Stop heartbeating and say ``active: false``, as Nav2's manager does on reset."""
        with self.probe.lock:
            self.beating = False
        self._pub.publish(self._status(False))

    def from_instance(self, instance_id: str) -> list:
        """Return (monotonic s, Status) of the node's messages from ``instance_id``."""
        return [(t, m) for t, m in self.received if m.instance_id == instance_id]


def logged(node, text: str) -> float | None:
    """Return the wall time of the node's first log line containing ``text``, or None."""
    for match in LOG_LINE.finditer(node.log()):
        if text in match.group(3):
            return float(match.group(2))
    return None


def serve_one(probe, stamp: int) -> None:
    """Publish a cloud and wait for its latency record: the node is serving."""
    probe.cloud_pub.publish(make_cloud(np.ones((5, 4), np.float32), stamp))
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.latency),
                   what=f'frame {stamp}')


@pytest.fixture
def managed(tmp_path):
    node = LifecycleProcess(write_params(PARAMS, tmp_path / 'params.yaml'), tmp_path / 'n.log')
    probe = Probe(features=False)
    client = LifecycleClient(probe)
    try:
        client.wait_for_services(node)
        yield node, probe, client, Manager(probe)
    finally:
        probe.close()
        node.stop()


def bond_publishers(probe) -> int:
    return probe.node.count_publishers('/bond')


def activate(probe, client, t) -> None:
    assert client.transition(t.TRANSITION_CONFIGURE)
    assert client.transition(t.TRANSITION_ACTIVATE)
    probe.wait_for(lambda: probe.cloud_pub.get_subscription_count() > 0, what='subscription')


def node_instance(probe, manager) -> str:
    """Wait for the node's first heartbeat on /bond; return its instance id."""
    probe.wait_for(lambda: manager.received, what='the node on /bond')
    with probe.lock:
        return manager.received[-1][1].instance_id


def check_formed(node, probe, manager) -> str:
    """After activate: the bond forms, heartbeats come every period; return the instance id."""
    instance = node_instance(probe, manager)
    assert uuid.UUID(instance).version == 4
    with probe.lock:
        manager.beating = True
    probe.wait_for(lambda: logged(node, f'bond "{NODE}" formed with the lifecycle manager '
                                        f'({manager.instance_id})'), what='bond formed')
    probe.wait_for(lambda: len(manager.from_instance(instance)) >= 30, what='30 heartbeats')
    with probe.lock:
        beats = manager.from_instance(instance)
    assert all(m.active and m.id == NODE for _, m in beats)
    assert all(m.heartbeat_period == pytest.approx(PERIOD_S)
               and m.heartbeat_timeout == pytest.approx(TIMEOUT_S) for _, m in beats)
    gaps = np.diff([t for t, _ in beats])
    assert 0.5 * PERIOD_S < statistics.median(gaps) < 2 * PERIOD_S, gaps
    # The contract: no gap the manager would take for a death (a loaded machine stalls a
    # timer for a few hundred ms; the median above says the period is kept).
    assert max(gaps) < TIMEOUT_S, gaps
    return instance


def check_manager_silence(node, probe, manager, instance) -> None:
    """Stop the manager: the node notices within the timeout, heartbeats and serves on."""
    with probe.lock:
        manager.beating = False
        last_beat = manager.beat_at
    text = f'bond "{NODE}": no heartbeat from the lifecycle manager ({manager.instance_id})'
    probe.wait_for(lambda: logged(node, text), timeout=TIMEOUT_S + 10, what='silence noticed')
    noticed = logged(node, text) - last_beat
    # Not before the timeout; after it, within a heartbeat period and a busy machine's slack
    # (wall clock, across two processes).
    assert TIMEOUT_S - 0.05 < noticed < TIMEOUT_S + PERIOD_S + 1.5, noticed
    # The node's own count of the silence, which no probe delay stretches: the timeout, a
    # check period and at most a short stall of the node's timer.
    silent = float(re.search(r'for (\d+\.\d) s \(timeout', node.log()).group(1))
    assert TIMEOUT_S <= silent <= TIMEOUT_S + PERIOD_S + 0.5, silent
    with probe.lock:
        count = len(manager.from_instance(instance))
    serve_one(probe, 1_700_000_000 * 10**9)
    probe.wait_for(lambda: len(manager.from_instance(instance)) >= count + 5,
                   what='heartbeats after the silence')
    with probe.lock:
        assert all(m.active for _, m in manager.from_instance(instance))
        manager.beating = True
    probe.wait_for(lambda: logged(node, f'bond "{NODE}": heartbeats from the lifecycle '
                                        'manager again'), what='heartbeats back')


def check_clean_break(node, probe, manager, client, t, instance) -> None:
    """Deactivate: ``active: false`` at once; after the manager's answer, nothing more."""
    assert client.transition(t.TRANSITION_DEACTIVATE)
    probe.wait_for(lambda: not manager.from_instance(instance)[-1][1].active,
                   what='active false')
    with probe.lock:
        manager.beating = False
    probe.wait_for(lambda: logged(node, f'bond "{NODE}" broken cleanly'), what='the answer')
    # A repeat of active false published just before the answer may still be on its way when
    # the log line is read (a loaded machine delivers it later): let it land, then count. A
    # node that went on repeating would publish every period of the 10 watched below.
    time.sleep(5 * PERIOD_S)
    with probe.lock:
        count = len(manager.from_instance(instance))
    time.sleep(10 * PERIOD_S)
    with probe.lock:
        after = manager.from_instance(instance)
        assert len(after) == count and not after[-1][1].active
        assert manager.died_at is None      # a break is no death


def test_bond_with_a_lifecycle_manager(managed):
    from lifecycle_msgs.msg import Transition as t
    from rcl_interfaces.srv import SetParameters
    node, probe, client, manager = managed
    # Unconfigured and inactive: only the manager's publisher is on /bond.
    probe.wait_for(lambda: bond_publishers(probe) == 1, what="the manager's publisher")
    assert client.transition(t.TRANSITION_CONFIGURE)
    assert bond_publishers(probe) == 1 and not manager.received

    assert client.transition(t.TRANSITION_ACTIVATE)
    first = check_formed(node, probe, manager)
    check_manager_silence(node, probe, manager, first)
    check_clean_break(node, probe, manager, client, t, first)

    # bond.enabled false (static: set while unconfigured): active without a bond.
    assert client.transition(t.TRANSITION_CLEANUP)
    setter = probe.node.create_client(SetParameters, f'/{NODE}/set_parameters')
    wait_answering(probe, setter)
    assert set_parameters(probe, setter, bond__enabled=False)[0].successful
    activate(probe, client, t)
    with probe.lock:
        count = len(manager.received)
    time.sleep(10 * PERIOD_S)
    assert bond_publishers(probe) == 1
    with probe.lock:
        assert len(manager.received) == count

    # Enabled again: a new bond (a new instance); the manager finds the killed node dead.
    assert client.transition(t.TRANSITION_DEACTIVATE)
    assert client.transition(t.TRANSITION_CLEANUP)
    assert set_parameters(probe, setter, bond__enabled=True)[0].successful
    activate(probe, client, t)
    probe.wait_for(lambda: manager.received[-1][1].instance_id != first, what='new instance')
    second = manager.received[-1][1].instance_id
    with probe.lock:
        manager.beating = True
    probe.wait_for(lambda: len(manager.from_instance(second)) >= 10
                   and logged(node, f'formed with the lifecycle manager ({manager.instance_id})'
                              ) is not None, what='heartbeats')
    assert manager.died_at is None
    node.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    probe.wait_for(lambda: manager.died_at is not None, timeout=TIMEOUT_S + 10,
                   what='the death noticed')
    with probe.lock:
        beats = manager.from_instance(second)
        assert beats[-1][1].active          # no break: the process died
        assert manager.died_at - beats[-1][0] > TIMEOUT_S
        # The node's heartbeats lasted to its death and the timeout bounds the detection.
        assert manager.died_at - killed < TIMEOUT_S + MANAGER_PERIOD_S + 1.5


def test_the_managers_break_is_answered_and_shutdown_breaks_the_bond(managed):
    from lifecycle_msgs.msg import Transition as t
    node, probe, client, manager = managed
    activate(probe, client, t)
    first = node_instance(probe, manager)
    with probe.lock:
        manager.beating = True
    probe.wait_for(lambda: logged(node, 'formed with the lifecycle manager'), what='formed')

    # The manager breaks first (Nav2: reset, shutdown): one "active: false" answers, the
    # heartbeats stop, and the node serves on.
    manager.break_bond()
    probe.wait_for(lambda: not manager.from_instance(first)[-1][1].active, what='the answer')
    assert logged(node, f'bond "{NODE}" broken by the lifecycle manager ({manager.instance_id})')
    with probe.lock:
        count = len(manager.from_instance(first))
    serve_one(probe, 1_700_000_000 * 10**9)
    time.sleep(10 * PERIOD_S)
    with probe.lock:
        assert len(manager.from_instance(first)) == count

    # Activated again: a new bond; shutdown from active breaks it before the process ends.
    assert client.transition(t.TRANSITION_DEACTIVATE)
    assert client.transition(t.TRANSITION_ACTIVATE)
    probe.wait_for(lambda: manager.received[-1][1].instance_id != first, what='new instance')
    second = manager.received[-1][1].instance_id
    with probe.lock:
        manager.beating = True
    probe.wait_for(lambda: len(manager.from_instance(second)) >= 5, what='heartbeats')
    assert client.transition(t.TRANSITION_ACTIVE_SHUTDOWN)
    assert node.proc.wait(timeout=30) == 0
    # Its last message, sent before it ended: the break, not a death the manager must time.
    probe.wait_for(lambda: not manager.from_instance(second)[-1][1].active, what='the break')
