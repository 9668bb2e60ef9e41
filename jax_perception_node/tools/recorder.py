"""
A bag recorder for machines without rosbag2, on real rclpy: live topics into a new MCAP bag.

It takes raw CDR bytes (``raw=True`` subscriptions), so recording costs a copy at most. Like
rosbag2 it keeps each topic's offered QoS profiles in the bag's metadata, one per publisher,
which the player (``live.py``) publishes with.
"""

import threading
import time

from jax_perception_node.bags import bagio
from jax_perception_node.bags.message_types import register_installed
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness, QosReliability,
                                QosTime)

from .interrupts import Terminated
from .live import ros_type

RECORDER = 'jax_perception_recorder'    # node name, root namespace
DEFAULT_RECORD_TOPICS = (bagio.FEATURES_TOPIC, bagio.LATENCY_TOPIC, bagio.DIAGNOSTICS_TOPIC)


def bag_qos(profile) -> Qos:
    """Return an rclpy QoSProfile as rosbag2 writes it in ``offered_qos_profiles``."""
    def policy(enum, value):
        return enum.__members__.get(value.name, enum.UNKNOWN)

    def duration(value) -> QosTime:
        return QosTime(*divmod(value.nanoseconds, 1_000_000_000))
    return Qos(policy(QosHistory, profile.history), profile.depth,
               policy(QosReliability, profile.reliability),
               policy(QosDurability, profile.durability), duration(profile.deadline),
               duration(profile.lifespan), policy(QosLiveliness, profile.liveliness),
               duration(profile.liveliness_lease_duration),
               bool(profile.avoid_ros_namespace_conventions))


def recording_qos(infos) -> QoSProfile:
    """
    Return the QoS to record a topic with, given its publishers' endpoint infos.

    As rosbag2 does: reliable only when every publisher is (a reliable reader would not match
    a best-effort writer), transient-local only when every publisher is (/tf_static).
    """
    reliable = all(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos)
    latched = all(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
    return QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE if reliable
                      else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                      else DurabilityPolicy.VOLATILE)


def discover(node, topics: list[str], wait_s: float | None) -> dict:
    """
    Return topic -> publisher endpoint infos once every topic has a publisher.

    ``wait_s`` None waits as long as it takes (saying once what it waits for); a number gives
    up after that many seconds with a BagError naming the topics still without a publisher.
    """
    deadline = None if wait_s is None else time.monotonic() + wait_s
    found, told = {}, False
    while True:
        for topic in topics:
            publishers = node.get_publishers_info_by_topic(topic)
            if publishers:
                found[topic] = publishers
        missing = [t for t in topics if t not in found]
        if not missing:
            return found
        if deadline is not None and time.monotonic() >= deadline:
            raise bagio.BagError(f'no publisher found for {", ".join(missing)} within '
                                 f'{wait_s:g} s')
        if deadline is None and not told:
            print(f'waiting for a publisher on {", ".join(missing)} (Ctrl-C to stop)',
                  flush=True)
            told = True
        time.sleep(0.05)


def record_topics(dst, topics, seconds: float | None = None, wait_s: float | None = None) -> int:
    """
    Record live topics into a new MCAP bag until Ctrl-C, ``seconds`` or a failed write.

    A write that fails (a full disk, a file size limit) stops the recording at once and is
    raised as the BagError naming it and whether the bag could still be finished (on the same
    full disk it mostly cannot: its end is written to the same file).
    Message types and QoS come from the ROS graph, so recording starts once every topic has a
    publisher (``discover``: by default however long that takes, or give up after ``wait_s``).
    The default topics are the node's outputs and /diagnostics. The bag's metadata keeps each
    topic's offered QoS profiles, one per publisher, as rosbag2 writes them. A type beyond
    rosbags' store is read from its installed .msg (``message_types.register_installed``); one
    without an installed definition is a BagError naming it, before the bag is created.
    """
    topics = list(topics) or list(DEFAULT_RECORD_TOPICS)
    context = rclpy.Context()
    rclpy.init(args=[], context=context)   # not the command line: its options are ours
    node = rclpy.create_node('jax_perception_record_discovery', context=context)
    try:
        found = discover(node, topics, wait_s)
        types = {t: infos[0].topic_type for t, infos in found.items()}
        for topic, msgtype in types.items():     # before the bag exists: a refusal leaves none
            ros_type(msgtype)           # BagError: no rclpy class to subscribe with
            unknown = register_installed(bagio.TYPESTORE, msgtype)
            if unknown is not None:
                raise bagio.BagError(f'{topic}: {msgtype} cannot be recorded: no definition '
                                     f'of {unknown} is installed (share/<package>/msg)')
        recorder = Recorder(dst, types, context,
                            qos={t: recording_qos(i) for t, i in found.items()},
                            offered={t: [bag_qos(i.qos_profile) for i in infos]
                                     for t, infos in found.items()})
        print(f'recording {", ".join(topics)} into {dst} (Ctrl-C to stop)', flush=True)
        try:
            end = None if seconds is None else time.monotonic() + seconds
            while (context.ok() and recorder.error is None
                   and (end is None or time.monotonic() < end)):
                time.sleep(0.1)
        except (KeyboardInterrupt, Terminated):     # a stop, as rosbag2 takes SIGTERM too
            pass
        finally:
            finished = True
            try:
                recorder.close()
            except bagio.BagError:
                if recorder.error is None:
                    raise
                finished = False
        if recorder.error is not None:      # the first failure says why, not the close's
            raise bagio.BagError(f'recording stopped: {recorder.error}; ' + (
                'the bag holds what came before it' if finished else
                'the bag could not be finished (no summary, no metadata.yaml): an MCAP stream '
                'reader still reads its complete chunks'))
        print('recorded ' + ', '.join(f'{t}: {recorder.count(t)}' for t in topics))
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


class Recorder:
    """Records live topics into a new bag from a background executor thread."""

    def __init__(self, path, topics: dict[str, str], context, compress: bool = True,
                 qos: dict | None = None, offered: dict | None = None):
        """
        Subscribe to ``topics`` (topic -> msgtype); QoS per topic, reliable by default.

        ``offered``: topic -> the rosbags Qos profiles its publishers offered, for the bag's
        metadata (none given: the topic's QoS is not known).
        """
        self.writer = bagio.BagWriter(path, compress=compress)
        self.node = rclpy.create_node(RECORDER, context=context)
        self._lock = threading.Lock()
        self.error: bagio.BagError | None = None    # the first failed write; none written after
        for topic, msgtype in topics.items():
            self.writer.add_topic(topic, msgtype, (offered or {}).get(topic, ()))
            self.node.create_subscription(
                ros_type(msgtype), topic,
                lambda data, t=topic, m=msgtype: self._write(t, m, data),
                (qos or {}).get(topic, QoSProfile(depth=100)), raw=True)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def _write(self, topic: str, msgtype: str, data: bytes) -> None:
        with self._lock:
            if self.error is not None:
                return
            try:
                self.writer.write_raw(topic, msgtype, data, time.time_ns())
            except bagio.BagError as exc:
                # Raised here, it would end the executor's thread with a traceback and the
                # recording silently; the owner stops on it and says it once.
                self.error = exc

    def count(self, topic: str) -> int:
        """Return how many messages were recorded on ``topic`` so far."""
        with self._lock:
            return self.writer.counts.get(topic, 0)

    def close(self) -> None:
        """Stop receiving and finish the bag."""
        self.executor.shutdown()
        self._thread.join(timeout=5.0)
        self.node.destroy_node()
        with self._lock:
            self.writer.close()
