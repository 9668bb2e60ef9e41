"""
The bond Nav2's lifecycle manager keeps with each node it manages: bond/msg/Status on ``bond``.

The protocol is bondcpp's (ros/bond_core), the one Nav2's ``nav2_util::LifecycleNode`` creates in
its ``on_activate`` as ``bond::Bond("bond", get_name(), node)`` with a 0.1 s heartbeat period
and a 4 s heartbeat timeout, and the manager creates as ``bond::Bond("bond", node_name, ...)``
once the node is active:

- Both ends publish ``Status`` on the relative topic ``bond`` (``/bond`` in the root namespace),
  ``id`` = the node's name (what the manager lists in ``node_names``), ``instance_id`` = a
  random UUID per bond, ``active`` = true every heartbeat period, and both timings.
- A message with our ``id`` and another ``instance_id`` is the peer's. The first one with
  ``active`` true forms the bond. One with ``active`` false is the peer breaking it: we answer
  once with ``active`` false (bondcpp's acknowledgement) and stop.
- Breaking it ourselves (deactivate, cleanup, shutdown): ``active`` false at once, then every
  ``DEAD_PUBLISH_PERIOD`` (0.05 s) until the peer answers ``active`` false or
  ``DEFAULT_DISCONNECT_TIMEOUT`` (2 s) passes.

Where it departs from bondcpp, on purpose, the node side stays up as Nav2's own nodes do:

- A peer silent for ``heartbeat_timeout`` is logged (and logged again when heartbeats return),
  nothing more: our heartbeats go on and the node keeps serving. Nav2's nodes set bondcpp's
  ``/bond_disable_heartbeat_timeout`` for exactly this; a manager that stalls for a while must
  not find its node gone when it looks again.
- No connect timeout (bondcpp: 10 s without a peer ends the bond): a node started by launch's
  autostart, or a manager respawned later, still finds it.

Timers run on the steady clock, as bondcpp's wall timers do (a paused /clock must not stop
heartbeats); everything runs in the node's executor, so no lock is needed. The peer's silence
is noticed within the timeout plus one heartbeat period.
"""

import uuid

from bond.msg import Constants, Status
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.qos import QoSProfile

TOPIC = 'bond'
# bondcpp: publisher rclcpp::QoS(rclcpp::KeepLast(5)), subscription rclcpp::QoS(100); both
# reliable and volatile, the defaults.
PUBLISHER_QOS = QoSProfile(depth=5)
SUBSCRIPTION_QOS = QoSProfile(depth=100)

WAITING, ALIVE, DYING, DEAD = 'waiting', 'alive', 'dying', 'dead'


class Bond:
    """
    One bond of a node with its lifecycle manager, from ``start`` to ``close``; see module doc.

    ``state``: waiting (no peer heard yet), alive, dying (our break, awaiting the peer's answer)
    or dead (no more messages). ``peer_silent``: the peer has been silent for the timeout.
    """

    def __init__(self, node, bond_id: str, heartbeat_period_s: float,
                 heartbeat_timeout_s: float, topic: str = TOPIC):
        """Prepare the bond ``bond_id`` of ``node`` (times in s); nothing runs before start."""
        self.node = node
        self.id = bond_id
        self.instance_id = str(uuid.uuid4())
        self.heartbeat_period_s = heartbeat_period_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.topic = topic
        self.state = WAITING
        self.peer_instance_id = ''
        self.peer_silent = False
        self._clock = Clock(clock_type=ClockType.STEADY_TIME)
        self._heard_ns = 0              # steady time of the peer's last heartbeat
        self._dying_since_ns = 0
        self._pub = self._sub = self._timer = None

    @property
    def log(self):
        """Return the node's logger."""
        return self.node.get_logger()

    def start(self) -> None:
        """Publish the first heartbeat now, then one every period; listen for the peer's."""
        node = self.node
        self._pub = node.create_publisher(Status, self.topic, PUBLISHER_QOS)
        self._sub = node.create_subscription(Status, self.topic, self._on_status,
                                             SUBSCRIPTION_QOS)
        self._timer = node.create_timer(self.heartbeat_period_s, self._on_heartbeat,
                                        clock=self._clock)
        self.log.info(f'bond "{self.id}" to the lifecycle manager: instance '
                      f'{self.instance_id}, heartbeat {self.heartbeat_period_s:g} s, '
                      f'timeout {self.heartbeat_timeout_s:g} s, topic '
                      f'{self._pub.topic_name}')
        self._publish(True)

    def break_bond(self) -> None:
        """Break it cleanly: ``active`` false now and every 0.05 s until the peer answers."""
        if self.state == WAITING:       # nobody to wait for: one message tells a late peer
            self._publish(False)
            self._die()
        elif self.state == ALIVE:
            self.state = DYING
            self._dying_since_ns = self._now_ns()
            self._publish(False)
            self.node.destroy_timer(self._timer)
            self._timer = self.node.create_timer(Constants.DEAD_PUBLISH_PERIOD,
                                                 self._on_dying, clock=self._clock)

    def close(self, flush_s: float = 0.0) -> None:
        """
        Release publisher, subscription and timer; the bond ends wherever it stood.

        ``flush_s`` > 0: first wait up to that long (seconds) until the peer has taken what was
        published, for a process about to end (no executor runs after it).
        """
        if self._pub is None:
            return
        if flush_s > 0:
            self._pub.wait_for_all_acked(Duration(nanoseconds=int(flush_s * 1e9)))
        self._die()
        self.node.destroy_timer(self._timer)
        self.node.destroy_subscription(self._sub)
        self.node.destroy_publisher(self._pub)
        self._pub = self._sub = self._timer = None

    # -- executor callbacks --------------------------------------------------------------------

    def _on_status(self, msg: Status) -> None:
        """Take one message on the topic: the peer's heartbeat or its break; ignore the rest."""
        if msg.id != self.id or msg.instance_id == self.instance_id or self.state == DEAD:
            return
        if not msg.active:
            self._on_peer_break(msg.instance_id)
        elif self.state != DYING:       # bondcpp ignores heartbeats once it is dying
            self._on_peer_heartbeat(msg.instance_id)

    def _on_peer_heartbeat(self, instance_id: str) -> None:
        self._heard_ns = self._now_ns()
        if self.state == WAITING:
            self.log.info(f'bond "{self.id}" formed with the lifecycle manager ({instance_id})')
        elif instance_id != self.peer_instance_id:
            self.log.info(f'bond "{self.id}": the lifecycle manager is a new instance '
                          f'({instance_id})')
        elif self.peer_silent:
            self.log.info(f'bond "{self.id}": heartbeats from the lifecycle manager again')
        self.state, self.peer_instance_id, self.peer_silent = ALIVE, instance_id, False

    def _on_peer_break(self, instance_id: str) -> None:
        if self.state == DYING:
            self.log.info(f'bond "{self.id}" broken cleanly: the lifecycle manager answered')
        else:       # the peer broke it first: acknowledge, as bondcpp does (logged first,
            # so whoever sees the answer finds the line in the log)
            self.log.warning(f'bond "{self.id}" broken by the lifecycle manager ({instance_id});'
                             ' still serving, no heartbeats until the next activation')
            self._publish(False)
        self._die()

    def _on_heartbeat(self) -> None:
        """Publish a heartbeat; note a peer silent for longer than the timeout."""
        if self.state not in (WAITING, ALIVE):
            return
        self._publish(True)
        silent_ns = self._now_ns() - self._heard_ns
        if self.state == ALIVE and not self.peer_silent \
                and silent_ns > self.heartbeat_timeout_s * 1e9:
            self.peer_silent = True
            self.log.warning(
                f'bond "{self.id}": no heartbeat from the lifecycle manager '
                f'({self.peer_instance_id}) for {silent_ns / 1e9:.1f} s (timeout '
                f'{self.heartbeat_timeout_s:g} s); still serving and sending heartbeats')

    def _on_dying(self) -> None:
        """Repeat ``active`` false until the peer answers or the disconnect timeout passes."""
        if self.state != DYING:
            return
        if self._now_ns() - self._dying_since_ns > Constants.DEFAULT_DISCONNECT_TIMEOUT * 1e9:
            self.log.info(f'bond "{self.id}" broken: no answer from the lifecycle manager '
                          f'within {Constants.DEFAULT_DISCONNECT_TIMEOUT:g} s')
            self._die()
            return
        self._publish(False)

    # -- helpers -------------------------------------------------------------------------------

    def _die(self) -> None:
        self.state = DEAD
        if self._timer is not None:
            self._timer.cancel()

    def _now_ns(self) -> int:
        return self._clock.now().nanoseconds

    def _publish(self, active: bool) -> None:
        msg = Status()
        msg.header.stamp = self._clock.now().to_msg()     # bondcpp stamps with the steady clock
        msg.id, msg.instance_id, msg.active = self.id, self.instance_id, active
        msg.heartbeat_timeout = float(self.heartbeat_timeout_s)
        msg.heartbeat_period = float(self.heartbeat_period_s)
        self._pub.publish(msg)
