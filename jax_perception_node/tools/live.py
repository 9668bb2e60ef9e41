"""
Live bag tools for machines without rosbag2: a player and a recorder on real rclpy.

Both move raw CDR bytes (``publish(bytes)``, ``raw=True`` subscriptions): nothing is converted
between rosbags and rclpy message types, so playing and recording cost a copy at most.
"""

import threading
import time

from jax_perception_node import bagio
from jax_perception_node.config import PipelineConfig
import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.qos import qos_profile_sensor_data, QoSProfile, ReliabilityPolicy

_ROS_TYPES = {}


def ros_type(msgtype: str):
    """Return the rclpy message class of 'pkg/msg/Name'."""
    if msgtype not in _ROS_TYPES:
        package, _, name = msgtype.split('/')
        module = __import__(f'{package}.msg', fromlist=[name])
        _ROS_TYPES[msgtype] = getattr(module, name)
    return _ROS_TYPES[msgtype]


def play_bag(src, cfg: PipelineConfig, pointcloud_topic: str = bagio.POINTCLOUD_TOPIC,
             camera_topics: dict[str, str] | None = None, rate: float = 1.0, loop: bool = False,
             restamp: bool = False, wait_s: float = 5.0, context=None,
             camera_info_topics: dict[str, str] | None = None,
             odometry_topic: str = bagio.ODOMETRY_TOPIC) -> int:
    """
    Publish a bag's LiDAR and camera messages onto the node's inputs at recorded timing.

    ``pointcloud_topic`` / ``camera_topics`` / ``camera_info_topics`` / ``odometry_topic`` name the
    topics in the bag; they are published on the node's own input names (odometry whenever the bag
    has it: the node subscribes to it only with accumulation). ``restamp`` shifts every header
    stamp by (wall clock at start minus the first bag time), keeping the stamps' spacing, so the
    node's age measures real latency; each loop restamps afresh, so stamps keep growing. Playing
    starts once the LiDAR topic has a subscriber, or after ``wait_s``, so the first frames are not
    lost to discovery.
    """
    reader = bagio.open_reader(src)
    try:
        types = bagio.topic_types(reader)
        if types.get(pointcloud_topic) != bagio.POINTCLOUD_TYPE:
            raise bagio.BagError(f'{src}: no {bagio.POINTCLOUD_TYPE} topic {pointcloud_topic}')
        remap = {pointcloud_topic: bagio.POINTCLOUD_TOPIC}
        for cam in cfg.cameras:
            topic = (camera_topics or {}).get(cam.name, bagio.camera_topic(cam.name))
            if types.get(topic) == bagio.IMAGE_TYPE:
                remap[topic] = bagio.camera_topic(cam.name)
            topic = (camera_info_topics or {}).get(cam.name, bagio.camera_info_topic(cam.name))
            if types.get(topic) == bagio.CAMERA_INFO_TYPE:
                remap[topic] = bagio.camera_info_topic(cam.name)
        if types.get(odometry_topic) == bagio.ODOMETRY_TYPE:
            remap[odometry_topic] = bagio.ODOMETRY_TOPIC
        own_context = context is None
        if own_context:
            context = rclpy.Context()
            rclpy.init(context=context)
        node = rclpy.create_node('jax_perception_player', context=context)
        pubs = {src_topic: node.create_publisher(ros_type(types[src_topic]), dst_topic,
                                                 qos_profile_sensor_data)
                for src_topic, dst_topic in remap.items()}
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and pubs[pointcloud_topic].get_subscription_count() == 0:
            time.sleep(0.02)
        node.get_logger().info(f'playing {src}: ' + ', '.join(
            f'{a} -> {b}' for a, b in remap.items()))
        sent = 0
        try:
            while True:
                sent += _play_once(reader, pubs, rate, restamp)
                if not loop or not context.ok():
                    break
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            node.get_logger().info(f'published {sent} messages')
            node.destroy_node()
            if own_context:
                rclpy.try_shutdown(context=context)
        return 0
    finally:
        reader.close()


def _play_once(reader, pubs, rate: float, restamp: bool) -> int:
    first = offset = start_wall = None
    sent = 0
    for topic, timestamp, raw, _ in bagio.iter_messages(reader, list(pubs)):
        if first is None:
            # Both clocks start at the first message: opening the bag takes time too.
            first, start_wall = timestamp, time.monotonic()
            offset = time.time_ns() - first
        delay = start_wall + (timestamp - first) / 1e9 / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pubs[topic].publish(bagio.shift_stamp(raw, offset) if restamp else bytes(raw))
        sent += 1
    return sent


DEFAULT_RECORD_TOPICS = (bagio.FEATURES_TOPIC, bagio.LATENCY_TOPIC, bagio.DIAGNOSTICS_TOPIC)


def record_topics(dst, topics, seconds: float | None = None, discover_s: float = 2.0) -> int:
    """
    Record live topics into a new MCAP bag until Ctrl-C or ``seconds``.

    Message types come from the ROS graph, so every topic must have a publisher within
    ``discover_s``; the default topics are the node's outputs and /diagnostics.
    """
    topics = list(topics) or list(DEFAULT_RECORD_TOPICS)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('jax_perception_record_discovery', context=context)
    try:
        deadline = time.monotonic() + discover_s
        found = {}
        while time.monotonic() < deadline and len(found) < len(topics):
            for topic in topics:
                publishers = node.get_publishers_info_by_topic(topic)
                if publishers:
                    found[topic] = publishers
            time.sleep(0.05)
        missing = [t for t in topics if t not in found]
        if missing:
            raise bagio.BagError(f'no publisher found for {", ".join(missing)} within '
                                 f'{discover_s:g} s')
        types = {t: infos[0].topic_type for t, infos in found.items()}
        # Like rosbag2: a reliable reader would not match a best-effort (sensor-data) writer.
        qos = {t: QoSProfile(depth=100) if all(
            i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos)
            else qos_profile_sensor_data for t, infos in found.items()}
        recorder = Recorder(dst, types, context, qos=qos)
        print(f'recording {", ".join(topics)} into {dst} (Ctrl-C to stop)', flush=True)
        try:
            end = None if seconds is None else time.monotonic() + seconds
            while context.ok() and (end is None or time.monotonic() < end):
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        finally:
            recorder.close()
        print('recorded ' + ', '.join(f'{t}: {recorder.count(t)}' for t in topics))
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


class Recorder:
    """Records live topics into a new bag from a background executor thread."""

    def __init__(self, path, topics: dict[str, str], context, compress: bool = True,
                 qos: dict | None = None):
        """Subscribe to ``topics`` (topic -> msgtype); QoS per topic, reliable by default."""
        self.writer = bagio.BagWriter(path, compress=compress)
        self.node = rclpy.create_node('jax_perception_recorder', context=context)
        self._lock = threading.Lock()
        for topic, msgtype in topics.items():
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
            self.writer.write_raw(topic, msgtype, data, time.time_ns())

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
