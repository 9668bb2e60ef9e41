"""
A bag player for machines without rosbag2, on real rclpy (its recorder: ``recorder.py``).

It publishes raw CDR bytes (``publish(bytes)``): nothing is converted between rosbags and
rclpy message types, so playing costs a copy at most. Like rosbag2 it publishes with each
topic's offered QoS from the bag's metadata (where a bag has none: tf2_ros' QoS for /tf and
/tf_static, sensor-data QoS for the rest).
"""

import functools
import threading
import time

from jax_perception_node.bags import bagio
from jax_perception_node.bags.topics import lidar_topic
from jax_perception_node.geometry.stamps import MAX_FUTURE_STAMP_S
from jax_perception_node.geometry.transforms import TF_STATIC_TOPIC, TF_TOPIC
from jax_perception_node.settings.config import PipelineConfig
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from rosbags.interfaces import Qos, QosDurability, QosReliability

_ROS_TYPES = {}
CLOCK_TOPIC = '/clock'
PLAYER = 'jax_perception_player'     # node name, root namespace
CLOCK_TYPE = 'rosgraph_msgs/msg/Clock'
# Between loops: a node carries a pose at most accumulation.max_odometry_gap_s (0.2 s by
# default) on, never across a restamped seam; and a loop's last cloud is served before the
# next loop's odometry starts a new timeline (else it went without its sweeps and deskew).
LOOP_SEAM_S = 1.0


def ros_type(msgtype: str):
    """Return the rclpy message class of 'pkg/msg/Name'; BagError when it is not installed."""
    if msgtype not in _ROS_TYPES:
        package, _, name = bagio.canonical_type(msgtype).partition('/msg/')
        try:
            module = __import__(f'{package}.msg', fromlist=[name])
            _ROS_TYPES[msgtype] = getattr(module, name)
        except (ImportError, AttributeError, ValueError):
            raise bagio.BagError(f'message type {msgtype} is not installed') from None
    return _ROS_TYPES[msgtype]


def play_routes(types: dict[str, str], cfg: PipelineConfig, topics: bagio.BagTopics,
                remap: dict[str, str] | None = None) -> dict[str, str]:
    """
    Return bag topic -> published topic: the node's inputs found in the bag, then ``remap``.

    The inputs: the LiDAR (each of ``lidars.names``), each camera's maps (or, with
    ``cameras.<name>.input: image``, its Image or CompressedImage) and CameraInfo, odometry,
    /tf_static and /tf.

    ``remap`` (FROM -> TO, ``ros2 bag play --remap``'s FROM:=TO) names topics of the bag: FROM
    is published on TO instead of on the node's input, and a topic that is no input of the
    node is published at all (TO may be FROM: the CLI's ``play --topic``). BagError when the bag
    lacks an input (``bagio.check_topics``) or a topic FROM, or when two bag topics would end
    on one name (two streams interleaved on one topic are never what was meant).
    """
    lidars, images = tuple(lidar.name for lidar in cfg.lidars), cfg.camera_images
    bagio.check_topics(types, topics, lidars, images)
    # One LiDAR on the node's ~/input/pointcloud, several each on ~/input/<name>/pointcloud.
    routes = {topic: lidar_topic(name) if name else bagio.POINTCLOUD_TOPIC
              for topic, name in topics.clouds(lidars).items()}
    # Feature maps on ~/input/camera/<name>/features; images by type on image_transport's two.
    for topic, name in topics.camera_inputs([c.name for c in cfg.cameras], images).items():
        kind = types.get(topic)
        if kind in bagio.CAMERA_TYPES[images]:
            routes[topic] = (bagio.camera_topic(name) if not images else
                             bagio.camera_image_topic(name) if kind == bagio.IMAGE_TYPE else
                             bagio.camera_compressed_topic(name))
    for cam in cfg.cameras:
        if types.get(topics.camera_info(cam.name)) == bagio.CAMERA_INFO_TYPE:
            routes[topics.camera_info(cam.name)] = bagio.camera_info_topic(cam.name)
    if types.get(topics.odometry) == bagio.ODOMETRY_TYPE:
        routes[topics.odometry] = bagio.ODOMETRY_TOPIC
    for tf_topic in (TF_STATIC_TOPIC, TF_TOPIC):     # extrinsics / ego motion from TF
        if types.get(tf_topic) == bagio.TF_TYPE:
            routes[tf_topic] = tf_topic
    for src, dst in (remap or {}).items():
        if src not in types:
            raise bagio.BagError(f'no topic {src} to publish (the bag has {", ".join(types)})')
        routes[src] = dst
    sources: dict[str, str] = {}
    for src, dst in routes.items():
        if dst in sources:
            raise bagio.BagError(f'topics {sources[dst]} and {src} would both be published on '
                                 f'{dst}: remap one of them elsewhere')
        sources[dst] = src
    return routes


# tf2_ros' broadcasters: what a TF listener expects where a bag recorded no QoS.
TF_QOS = {TF_STATIC_TOPIC: QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                                      durability=DurabilityPolicy.TRANSIENT_LOCAL),
          TF_TOPIC: QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)}


def playback_qos(topic: str, offered: list[Qos]) -> QoSProfile:
    """
    Return the QoS to publish bag topic ``topic`` with, from what its publishers offered.

    Reliable (and transient-local, as /tf_static) when every recorded publisher was, so such
    readers still match; sensor-data QoS otherwise. A bag without QoS metadata: ``TF_QOS``
    for TF, sensor-data QoS for the rest.
    """
    if not offered:
        return TF_QOS.get(topic, qos_profile_sensor_data)
    if any(q.reliability != QosReliability.RELIABLE for q in offered):
        return qos_profile_sensor_data
    latched = all(q.durability == QosDurability.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(depth=100 if latched else 10, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                      else DurabilityPolicy.VOLATILE)


def restamped(raw: bytes, msgtype: str, offset_ns: int) -> bytes:
    """
    Return a message with its stamps shifted by ``offset_ns``: the Header, or each transform's.

    A TFMessage starts with its transforms, not a Header: it is decoded, shifted and encoded.
    A type that starts with no Header (std_msgs/String, an array) has no stamp to shift: it
    is returned as it is.
    """
    if msgtype != bagio.TF_TYPE:
        return bagio.shift_stamp(raw, offset_ns) if _starts_with_header(msgtype) else raw
    msg = bagio.deserialize(raw, msgtype)
    for transform in msg.transforms:
        stamp = transform.header.stamp
        stamp.sec, stamp.nanosec = divmod(stamp.sec * 10**9 + stamp.nanosec + offset_ns, 10**9)
    return bytes(bagio.TYPESTORE.serialize_cdr(msg, msgtype))


def play_bag(src, cfg: PipelineConfig, topics: bagio.BagTopics = bagio.BagTopics(),
             rate: float = 1.0, loop: bool = False, restamp: bool = False, wait_s: float = 5.0,
             context=None, remap: dict[str, str] | None = None, clock_hz: float = 0.0) -> int:
    """
    Publish a bag's messages at recorded timing: its LiDAR, camera and odometry topics.

    ``topics`` name the node's inputs in the bag; they are published on the node's own input
    names (odometry whenever the bag has it: the node subscribes to it only with accumulation),
    or where ``remap`` sends them (see ``play_routes``). ``restamp`` (at rate 1 only: the
    bag's spacing is its physics, deskew's and the camera pairing's) shifts every stamp of a
    loop by one offset, the wall clock at the loop's start less its first bag time, so the
    node's age measures real latency and a new loop never steps back; messages without a
    Header pass unchanged. ``clock_hz`` > 0 publishes /clock (rosgraph_msgs/Clock, the bag's
    time, shifted with ``restamp``) that many times a second, like ``ros2 bag play --clock``,
    once at each loop's start before its first message; refused (BagError) when one tick steps
    ``MAX_FUTURE_STAMP_S`` of the bag or more. Loops are ``LOOP_SEAM_S`` apart. Playing starts
    once the LiDAR topics and every topic named in ``remap`` have a subscriber, or after
    ``wait_s``, so the first messages are not lost to discovery (the demo records the ground
    truth this way: on a loaded machine its recorder was once matched only after a 1.5 s bag
    had played).
    """
    if restamp and rate != 1.0:
        raise bagio.BagError(f'--restamp plays at --rate 1 only (got {rate:g}): restamped at '
                             'another rate, the stamps would stretch the motion deskew and '
                             'accumulation measure; play with --clock and the node on '
                             'use_sim_time instead')
    if clock_hz and rate / clock_hz >= MAX_FUTURE_STAMP_S:
        raise bagio.BagError(
            f'--clock {clock_hz:g} Hz at --rate {rate:g} steps the clock {rate / clock_hz:g} s '
            f'of the bag at a time: the node refuses clouds stamped over {MAX_FUTURE_STAMP_S:g} '
            f's ahead of its clock; publish /clock more than {rate / MAX_FUTURE_STAMP_S:g} '
            'times a second')
    reader = bagio.open_reader(src)
    try:
        types = bagio.topic_types(reader)
        try:
            routes = play_routes(types, cfg, topics, remap)
        except bagio.BagError as exc:
            raise bagio.BagError(f'{src}: {exc}') from None
        offered = {c.topic: list(getattr(c.ext, 'offered_qos_profiles', ()))
                   for c in reader.connections}
        own_context = context is None
        if own_context:
            context = rclpy.Context()
            # Not the command line: rcl took play's own --remap A:=B as a remap rule of the
            # player (with a warning to use --ros-args).
            rclpy.init(args=[], context=context)
        node = rclpy.create_node(PLAYER, context=context)
        try:
            pubs = {src_topic: node.create_publisher(ros_type(types[src_topic]), dst_topic,
                                                     playback_qos(src_topic,
                                                                  offered[src_topic]))
                    for src_topic, dst_topic in routes.items()}
            clock = PlaybackClock(node, clock_hz, rate) if clock_hz > 0 else None
            deadline = time.monotonic() + wait_s
            lidars = topics.clouds(tuple(lidar.name for lidar in cfg.lidars))   # each LiDAR's
            awaited = [pubs[t] for t in {*lidars, *(remap or {})} if t in pubs]
            while time.monotonic() < deadline and any(
                    pub.get_subscription_count() == 0 for pub in awaited):
                time.sleep(0.02)
            unheard = [pub.topic_name for pub in awaited if pub.get_subscription_count() == 0]
            if unheard:     # a namespaced node reads other names: --remap onto them
                node.get_logger().warning(
                    f'no subscriber after {wait_s:g} s on {", ".join(unheard)}: playing '
                    'anyway (a node in a namespace or renamed reads other names: --remap '
                    'FROM:=TO onto its inputs)')
            node.get_logger().info(f'playing {src}: ' + ', '.join(
                f'{a} -> {b}' for a, b in routes.items())
                + (f', /clock at {clock_hz:g} Hz' if clock else ''))
            _play(reader, pubs, rate, restamp, loop, context, clock, node)
        finally:
            node.destroy_node()
            if own_context:
                rclpy.try_shutdown(context=context)
        return 0
    finally:
        reader.close()


@functools.cache
def _starts_with_header(msgtype: str) -> bool:
    """Return True when ``msgtype``'s first field is a std_msgs/Header (its rclpy class's)."""
    # The rclpy class, which play publishes with: rosbags' store lacks a stack's own types, whose
    # Header went unshifted.
    fields = ros_type(msgtype).get_fields_and_field_types()
    return next(iter(fields.values()), None) == 'std_msgs/Header'


def _play(reader, pubs, rate: float, restamp: bool, loop: bool, context, clock, node) -> None:
    sent = [0]      # counted as published: a loop cut short by Ctrl-C counts too
    try:
        while True:
            once = _play_once(reader, pubs, rate, restamp, clock, sent)
            if not loop or not once or not context.ok():     # an empty bag: no busy loop
                break
            time.sleep(LOOP_SEAM_S)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if clock is not None:
            clock.stop()
        node.get_logger().info(f'published {sent[0]} messages')


def _play_once(reader, pubs, rate: float, restamp: bool, clock, sent: list[int]) -> int:
    first = offset = start_wall = None
    before = sent[0]
    for topic, timestamp, raw, msgtype in bagio.iter_messages(reader, list(pubs)):
        if first is None:
            # Both clocks start at the first message: opening the bag takes time too.
            first, start_wall = timestamp, time.monotonic()
            offset = time.time_ns() - first if restamp else 0
            if clock is not None:
                clock.start(first, start_wall, offset)
        if clock is not None:
            clock.hold_at(timestamp)
        delay = start_wall + (timestamp - first) / 1e9 / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        # One offset a loop keeps the bag's spacing; at rate 1 each stamp is then the wall
        # clock of the message's slot (age is latency), and a new loop never steps back.
        pubs[topic].publish(restamped(raw, msgtype, offset) if restamp else bytes(raw))
        sent[0] += 1
    return sent[0] - before


class PlaybackClock:
    """
    Publishes /clock from the bag's time while a bag plays, ``hz`` times a second.

    The time runs at the playback rate from the first message's bag time and never passes the
    bag time of the next message still to be published (``hold_at``): a node on sim time never
    sees a clock ahead of the data. QoS as rosbag2's and rclpy's clock: best effort, depth 1.
    """

    def __init__(self, node, hz: float, rate: float):
        self._pub = node.create_publisher(
            ros_type(CLOCK_TYPE), CLOCK_TOPIC,
            QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
        self._period, self._rate = 1.0 / hz, rate
        self._lock = threading.Lock()
        self._origin = self._limit = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='clock', daemon=True)
        self._thread.start()

    def start(self, first_ns: int, start_wall: float, offset_ns: int = 0) -> None:
        """
        (Re)start at bag time ``first_ns``, reached at monotonic ``start_wall``, and publish it.

        ``offset_ns``: with restamping, the shift of the loop's stamps; the clock reads the
        stamps' time. Published at once: a new loop's first message never goes out with the
        last loop's end still on the clock (a node on sim time measured its age from there).
        """
        with self._lock:
            self._origin = (first_ns, start_wall, offset_ns)
            self._limit = first_ns
            self._publish(first_ns + offset_ns)

    def hold_at(self, bag_ns: int) -> None:
        """Let the clock run up to ``bag_ns``, the next message's bag time."""
        with self._lock:
            self._limit = bag_ns

    def now_ns(self) -> int | None:
        """Return the clock's time now (ns), None before the first message."""
        with self._lock:
            return self._now_ns()

    def _now_ns(self) -> int | None:
        if self._origin is None:
            return None
        first, start_wall, offset = self._origin
        running = first + int((time.monotonic() - start_wall) * self._rate * 1e9)
        return min(running, self._limit) + offset

    def _publish(self, now_ns: int) -> None:
        msg = ros_type(CLOCK_TYPE)()
        msg.clock.sec, msg.clock.nanosec = divmod(now_ns, 1_000_000_000)
        self._pub.publish(msg)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            # Under the lock: a new loop's start is never followed by the loop before's time.
            with self._lock:
                now = self._now_ns()
                if now is not None:
                    self._publish(now)

    def stop(self) -> None:
        """Stop publishing (the last time published stays the clock's)."""
        self._stop.set()
        self._thread.join(timeout=5.0)
