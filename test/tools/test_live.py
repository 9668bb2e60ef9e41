"""
Live play and record on real rclpy: --remap, --clock, record's wait and the bag's offered QoS.

A small bag written here (LiDAR clouds at known bag times and one topic that is no input of the
node) is played in this process on a context of its own; recording runs as the console script,
as a user runs it.
"""

from pathlib import Path
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from configs import small_config
from jax_perception_node.bags import bagio
from jax_perception_node.tools import live, recorder as live_recorder
import numpy as np
import pytest
from rosbags.interfaces import QosDurability, QosHistory, QosReliability, QosTime

START_NS = 1_700_000_000 * 10**9
PERIOD_NS = 100_000_000                 # 10 Hz
CLOUDS = 11                             # 1 s of bag time
EXTRA_TOPIC = '/vehicle/status'         # not an input of the node


def write_bag(path: Path) -> Path:
    """Write CLOUDS empty clouds 0.1 s apart and a DiagnosticArray per cloud on EXTRA_TOPIC."""
    types = bagio.TYPESTORE.types
    with bagio.BagWriter(path) as writer:
        for k in range(CLOUDS):
            stamp = START_NS + k * PERIOD_NS
            writer.write(bagio.POINTCLOUD_TOPIC, types[bagio.POINTCLOUD_TYPE](
                header=bagio.header(stamp, 'lidar'), height=1, width=0, fields=[],
                is_bigendian=False, point_step=16, row_step=0, data=np.zeros(0, np.uint8),
                is_dense=True), stamp)
            writer.write(EXTRA_TOPIC, bagio.diagnostic_array(stamp, 'base_link', 'status',
                                                             {'k': str(k)}), stamp)
    return path


class Listener:
    """Subscriptions on a context of their own, keeping every message per topic."""

    def __init__(self, topics: dict):
        """``topics``: topic -> (rclpy message class, QoS)."""
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node('live_test_listener', context=self.context)
        self.lock = threading.Lock()
        self.got = {topic: [] for topic in topics}
        for topic, (msg_type, qos) in topics.items():
            self.node.create_subscription(msg_type, topic,
                                          lambda msg, t=topic: self._keep(t, msg), qos)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _keep(self, topic, msg):
        with self.lock:
            self.got[topic].append(msg)

    def close(self):
        import rclpy
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def play(bag: Path, **kwargs) -> None:
    """Run play_bag on a context of its own (made here, in the main thread) until it ends."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        assert live.play_bag(bag, small_config(0), wait_s=30.0, context=context, **kwargs) == 0
    finally:
        rclpy.try_shutdown(context=context)


def stamp(msg) -> int:
    return msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec


def test_play_remap_publishes_inputs_and_other_bag_topics_on_the_new_names(tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import PointCloud2
    bag = write_bag(tmp_path / 'bag')
    listener = Listener({'/remapped/cloud': (PointCloud2, qos_profile_sensor_data),
                         '/remapped/status': (DiagnosticArray, qos_profile_sensor_data),
                         bagio.POINTCLOUD_TOPIC: (PointCloud2, qos_profile_sensor_data)})
    try:
        play(bag, rate=4.0, remap={bagio.POINTCLOUD_TOPIC: '/remapped/cloud',
                                   EXTRA_TOPIC: '/remapped/status'})
        time.sleep(0.5)     # the last messages in flight
    finally:
        listener.close()
    sent = {START_NS + k * PERIOD_NS for k in range(CLOUDS)}
    clouds, statuses = listener.got['/remapped/cloud'], listener.got['/remapped/status']
    # Best effort on loopback: a handful shows the route; each one is a message of the bag.
    assert len(clouds) >= 3 and len(statuses) >= 3, (len(clouds), len(statuses))
    assert {stamp(m) for m in clouds} <= sent and {stamp(m) for m in statuses} <= sent
    assert listener.got[bagio.POINTCLOUD_TOPIC] == []      # remapped away from the input


def test_play_routes_follow_the_bag_topics_and_remaps():
    types = {'/p': bagio.POINTCLOUD_TYPE, '/f': bagio.IMAGE_TYPE, EXTRA_TOPIC: 'x/msg/Y',
             bagio.ODOMETRY_TOPIC: bagio.ODOMETRY_TYPE, '/tf_static': bagio.TF_TYPE,
             '/tf': bagio.TF_TYPE}
    cfg = small_config(1)
    topics = bagio.BagTopics('/p', {'front': '/f'})
    inputs = {'/p': bagio.POINTCLOUD_TOPIC, '/f': bagio.camera_topic('front'),
              bagio.ODOMETRY_TOPIC: bagio.ODOMETRY_TOPIC, '/tf_static': '/tf_static',
              '/tf': '/tf'}
    assert live.play_routes(types, cfg, topics) == inputs
    assert live.play_routes(types, cfg, topics, {'/f': '/cam', EXTRA_TOPIC: '/x'}) == dict(
        inputs, **{'/f': '/cam', EXTRA_TOPIC: '/x'})
    with pytest.raises(bagio.BagError, match='no topic /nope to publish'):
        live.play_routes(types, cfg, topics, {'/nope': '/x'})
    # Two streams on one name: refused, the node's input included; swapping the input is not.
    with pytest.raises(bagio.BagError, match=f'topics /p and {EXTRA_TOPIC} would both be '
                                             f'published on {bagio.POINTCLOUD_TOPIC}'):
        live.play_routes(types, cfg, topics, {EXTRA_TOPIC: bagio.POINTCLOUD_TOPIC})
    with pytest.raises(bagio.BagError, match='would both be published on /x'):
        live.play_routes(types, cfg, topics, {'/f': '/x', EXTRA_TOPIC: '/x'})
    assert live.play_routes(types, cfg, topics, {'/p': '/x', EXTRA_TOPIC: bagio.POINTCLOUD_TOPIC}
                            )[EXTRA_TOPIC] == bagio.POINTCLOUD_TOPIC


def test_playback_qos_keeps_what_was_offered_and_tf2s_qos_without_it():
    from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, ReliabilityPolicy
    from rosbags.interfaces import Qos, QosLiveliness
    never = QosTime(0, 0)

    def offered(reliability, durability):
        return Qos(QosHistory.KEEP_LAST, 1, reliability, durability, never, never,
                   QosLiveliness.AUTOMATIC, never, False)
    static = live.playback_qos('/tf_static', [])
    assert (static.reliability, static.durability) == (ReliabilityPolicy.RELIABLE,
                                                       DurabilityPolicy.TRANSIENT_LOCAL)
    assert live.playback_qos('/tf', []).reliability == ReliabilityPolicy.RELIABLE
    assert live.playback_qos(bagio.POINTCLOUD_TOPIC, []) == qos_profile_sensor_data
    latched = live.playback_qos('/map', [offered(QosReliability.RELIABLE,
                                                 QosDurability.TRANSIENT_LOCAL)])
    assert (latched.reliability, latched.durability) == (ReliabilityPolicy.RELIABLE,
                                                         DurabilityPolicy.TRANSIENT_LOCAL)
    mixed = [offered(QosReliability.RELIABLE, QosDurability.VOLATILE),
             offered(QosReliability.BEST_EFFORT, QosDurability.VOLATILE)]
    assert live.playback_qos('/x', mixed) == qos_profile_sensor_data


def test_restamp_shifts_each_transform_of_a_tf_message_and_a_header():
    types = bagio.TYPESTORE.types
    stamps = [(5, 900_000_000), (7, 0)]
    transforms = [types['geometry_msgs/msg/TransformStamped'](
        header=types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=ns), frame_id='map'),
        child_frame_id=f'child_{k}', transform=types['geometry_msgs/msg/Transform'](
            translation=types['geometry_msgs/msg/Vector3'](x=1.0, y=2.0, z=3.0),
            rotation=types['geometry_msgs/msg/Quaternion'](x=0.0, y=0.0, z=0.0, w=1.0)))
        for k, (sec, ns) in enumerate(stamps)]
    raw = bagio.TYPESTORE.serialize_cdr(types[bagio.TF_TYPE](transforms=transforms),
                                        bagio.TF_TYPE)
    shifted = bagio.deserialize(live.restamped(raw, bagio.TF_TYPE, 250_000_000), bagio.TF_TYPE)
    assert [(t.header.stamp.sec, t.header.stamp.nanosec) for t in shifted.transforms] == [
        (6, 150_000_000), (7, 250_000_000)]
    assert [t.child_frame_id for t in shifted.transforms] == ['child_0', 'child_1']
    assert shifted.transforms[1].transform.translation.z == 3.0
    status = bagio.diagnostic_array(5 * 10**9, 'base_link', 'status', {})
    raw = bagio.TYPESTORE.serialize_cdr(status, bagio.DIAGNOSTICS_TYPE)
    moved = bagio.deserialize(live.restamped(raw, bagio.DIAGNOSTICS_TYPE, -10**9),
                              bagio.DIAGNOSTICS_TYPE)
    assert (moved.header.stamp.sec, moved.header.frame_id) == (4, 'base_link')


def test_play_clock_publishes_the_bag_time(tmp_path):
    from rclpy.qos import QoSProfile, qos_profile_sensor_data, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import PointCloud2
    bag = write_bag(tmp_path / 'bag')
    listener = Listener({
        '/clock': (Clock, QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)),
        bagio.POINTCLOUD_TOPIC: (PointCloud2, qos_profile_sensor_data)})
    try:
        play(bag, rate=2.0, clock_hz=100.0)
        time.sleep(0.3)
    finally:
        listener.close()
    times = [m.clock.sec * 10**9 + m.clock.nanosec for m in listener.got['/clock']]
    # The bag's time, never ahead of the message still to come: within the bag's span.
    assert len(times) >= 2, times
    assert times == sorted(times)
    assert START_NS <= times[0] and times[-1] <= START_NS + (CLOUDS - 1) * PERIOD_NS
    assert times[-1] > times[0]


def test_playback_clock_holds_at_the_next_message():
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('clock_test', context=context)
    try:
        clock = live.PlaybackClock(node, hz=1.0, rate=1.0)
        assert clock.now_ns() is None
        # Started 10 s ago at bag time 5 s: running, it would read 15 s; held at 7 s.
        clock.start(5 * 10**9, time.monotonic() - 10.0)
        clock.hold_at(7 * 10**9)
        assert clock.now_ns() == 7 * 10**9
        clock.hold_at(100 * 10**9)
        assert 15 * 10**9 <= clock.now_ns() < 100 * 10**9
        # Restamped (stamps shifted by 995 s), started 10 s ago: the stamps' time.
        shifted = live.PlaybackClock(node, hz=1e-3, rate=1.0)     # its thread never publishes
        shifted._pub = Kept()
        shifted.start(5 * 10**9, time.monotonic() - 10.0, offset_ns=995 * 10**9)
        # The loop's start is on /clock before its first message (the thread would be late).
        [msg] = shifted._pub.raw
        assert msg.clock.sec * 10**9 + msg.clock.nanosec == 1000 * 10**9
        shifted.hold_at(100 * 10**9)
        assert 1010 * 10**9 <= shifted.now_ns() < 1011 * 10**9
        shifted.stop()
        clock.stop()
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def test_bag_qos_is_the_profile_as_rosbag2_writes_it():
    from rclpy.duration import Duration
    from rclpy.qos import (DurabilityPolicy, HistoryPolicy, qos_profile_sensor_data, QoSProfile,
                           ReliabilityPolicy)
    sensor = live_recorder.bag_qos(qos_profile_sensor_data)
    assert (sensor.history, sensor.depth, sensor.reliability, sensor.durability) == (
        QosHistory.KEEP_LAST, 5, QosReliability.BEST_EFFORT, QosDurability.VOLATILE)
    latched = live_recorder.bag_qos(QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL, deadline=Duration(seconds=2.5)))
    assert (latched.reliability, latched.durability) == (QosReliability.RELIABLE,
                                                         QosDurability.TRANSIENT_LOCAL)
    assert latched.deadline == QosTime(2, 500_000_000)
    assert latched.avoid_ros_namespace_conventions is False


@pytest.mark.parametrize('stop', ['seconds', 'sigterm'])
def test_record_waits_for_its_topics_and_keeps_their_offered_qos(tmp_path, stop):
    """
    No --wait: record waits until the topics appear (started after it), then records.

    Stopped by --seconds or by SIGTERM (as a launch or a service manager stops it): either
    way the bag is closed whole, as rosbag2 does.
    """
    import signal
    from diagnostic_msgs.msg import DiagnosticArray
    import rclpy
    from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
    out = tmp_path / 'recorded'
    latched_topic, sensor_topic = '/live_test/latched', '/live_test/sensor'
    exe = str(Path(sys.executable).with_name('jax-perception'))
    recorder = subprocess.Popen(
        [exe, 'record', str(out), *(['--seconds', '2'] if stop == 'seconds' else []),
         '--topic', latched_topic, '--topic', sensor_topic], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('live_test_publisher', context=context)
    try:
        first = ''
        while 'waiting for a publisher on' not in first:
            line = recorder.stdout.readline()
            assert line, f'record ended before it waited: {first}'
            first += line
        latched = node.create_publisher(DiagnosticArray, latched_topic, QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        sensor = node.create_publisher(DiagnosticArray, sensor_topic, qos_profile_sensor_data)
        latched.publish(DiagnosticArray())     # kept for the recorder (transient local)
        while stop == 'sigterm' and 'recording ' not in first:    # it found the publishers
            line = recorder.stdout.readline()
            assert line, f'record ended before it recorded: {first}'
            first += line
        deadline = time.monotonic() + 120.0
        started = time.monotonic()
        while recorder.poll() is None and time.monotonic() < deadline:
            sensor.publish(DiagnosticArray())
            time.sleep(0.05)
            if stop == 'sigterm' and time.monotonic() - started > 1.5:
                recorder.send_signal(signal.SIGTERM)
                break
        output = first + recorder.communicate(timeout=30)[0]
    finally:
        if recorder.poll() is None:
            recorder.kill()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert recorder.returncode == 0, output
    reader = bagio.open_reader(out)
    connections = {c.topic: c for c in reader.connections}
    reader.close()
    assert connections[latched_topic].msgcount == 1, output
    assert connections[sensor_topic].msgcount >= 3, output
    [offered] = connections[latched_topic].ext.offered_qos_profiles
    assert (offered.reliability, offered.durability) == (QosReliability.RELIABLE,
                                                         QosDurability.TRANSIENT_LOCAL)
    [offered] = connections[sensor_topic].ext.offered_qos_profiles
    assert (offered.reliability, offered.durability) == (QosReliability.BEST_EFFORT,
                                                         QosDurability.VOLATILE)


def test_record_takes_a_type_beyond_rosbags_store_from_its_installed_definition(tmp_path):
    """
    A stack's own message type (here nav_msgs/Goals, which rosbags' store lacks) is recorded.

    Before, record crashed with rosbags' TypesysError and a traceback, and left a bag folder
    without metadata that refused the next run.
    """
    from geometry_msgs.msg import PoseStamped
    from nav_msgs.msg import Goals
    import rclpy
    from rclpy.qos import QoSProfile
    topic = '/live_test/goals'
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('live_test_goals_publisher', context=context)
    pub = node.create_publisher(Goals, topic, QoSProfile(depth=10))
    stop = threading.Event()

    def publish():
        while not stop.is_set():
            goals = Goals(goals=[PoseStamped(), PoseStamped()])
            goals.header.frame_id = 'map'
            pub.publish(goals)
            time.sleep(0.05)
    sender = threading.Thread(target=publish)
    sender.start()
    try:
        assert live_recorder.record_topics(tmp_path / 'goals', [topic], seconds=1.5,
                                           wait_s=30.0) == 0
    finally:
        stop.set()
        sender.join()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    reader = bagio.open_reader(tmp_path / 'goals')
    try:
        messages = [bagio.TYPESTORE.deserialize_cdr(raw, conn.msgtype)
                    for conn, _, raw in reader.messages()]
    finally:
        reader.close()
    assert messages and all(len(m.goals) == 2 and m.header.frame_id == 'map' for m in messages)


def test_a_type_without_an_installed_definition_is_named():
    from jax_perception_node.bags.message_types import register_installed
    assert register_installed(bagio.TYPESTORE, 'sensor_msgs/msg/Image') is None
    missing = 'no_such_msgs/msg/Thing'
    assert register_installed(bagio.TYPESTORE, missing) == missing


def test_record_stops_at_a_failed_write_with_one_line(tmp_path):
    """
    A write that fails (here the file size limit; a full disk alike) ends record by itself.

    Before, the error ended the recorder's executor thread with a traceback and record went
    on for ever, recording nothing, until Ctrl-C.
    """
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    import rclpy
    from rclpy.qos import QoSProfile
    topic = '/live_test/large'
    exe = str(Path(sys.executable).with_name('jax-perception'))
    # The limit is set in a process of its own that then becomes record (a preexec_fn would
    # run Python between fork and exec of this multithreaded process). SIGXFSZ ignored:
    # write() then fails with EFBIG instead of the signal ending the process.
    limited = ('import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); '
               'resource.setrlimit(resource.RLIMIT_FSIZE, (262144, 262144)); '
               'os.execv(sys.argv[1], sys.argv[1:])')
    recorder = subprocess.Popen([sys.executable, '-c', limited, exe, 'record',
                                 str(tmp_path / 'full'), '--topic', topic],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('live_test_large_publisher', context=context)
    rng = np.random.default_rng(0)
    try:
        pub = node.create_publisher(DiagnosticArray, topic, QoSProfile(depth=10))
        deadline = time.monotonic() + 120.0
        while recorder.poll() is None and time.monotonic() < deadline:
            # 200 kB that zstd cannot shrink: the writer's chunks pass the limit at once.
            text = rng.integers(0, 2 ** 63, 12_500, dtype=np.int64).tobytes().hex()
            pub.publish(DiagnosticArray(status=[DiagnosticStatus(message=text)]))
            time.sleep(0.1)
        out, err = recorder.communicate(timeout=30)
    finally:
        if recorder.poll() is None:
            recorder.kill()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert recorder.returncode == 1, out + err
    assert 'Traceback' not in out + err, out + err
    [line] = err.strip().splitlines()
    assert line.startswith('jax-perception: recording stopped: ') and 'File too large' in line
    # Its end goes to the same file: the bag is not finished, and the line says so.
    assert line.endswith('the bag could not be finished (no summary, no metadata.yaml): an '
                         'MCAP stream reader still reads its complete chunks')
    assert not (tmp_path / 'full' / 'metadata.yaml').exists()


def test_looping_a_bag_without_messages_ends_instead_of_spinning(tmp_path):
    with bagio.BagWriter(tmp_path / 'empty') as writer:     # the LiDAR topic, no message
        writer.add_topic(bagio.POINTCLOUD_TOPIC, bagio.POINTCLOUD_TYPE)
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    done = threading.Event()

    def run():
        live.play_bag(tmp_path / 'empty', small_config(0), loop=True, wait_s=0.0,
                      context=context)
        done.set()
    try:
        threading.Thread(target=run, daemon=True).start()
        # Before, each pass published nothing and the loop went round for ever at 100 % CPU.
        assert done.wait(60), 'play --loop of an empty bag never ended'
    finally:
        rclpy.try_shutdown(context=context)


def test_play_with_several_lidars_waits_for_their_subscriber(tmp_path, capfd):
    # With lidars.names the clouds are on ~/input/<name>/pointcloud: play waits for those, as
    # it waits for ~/input/pointcloud with one LiDAR (it waited for nothing, and the first
    # frames were lost to discovery).
    import rclpy
    from configs import small_params
    from jax_perception_node.bags.topics import lidar_topic
    from jax_perception_node.settings.config import config_from_parameters
    names = ('top', 'left')
    params = small_params(0, **{'lidars.names': list(names)})
    for name in names:
        params.update({f'lidars.{name}.translation': [0.0, 0.0, 1.8],
                       f'lidars.{name}.rotation_xyzw': [0.0, 0.0, 0.0, 1.0]})
    types = bagio.TYPESTORE.types
    with bagio.BagWriter(tmp_path / 'bag') as writer:
        for name in names:
            writer.write(lidar_topic(name), types[bagio.POINTCLOUD_TYPE](
                header=bagio.header(START_NS, 'lidar'), height=1, width=0, fields=[],
                is_bigendian=False, point_step=16, row_step=0, data=np.zeros(0, np.uint8),
                is_dense=True), START_NS)
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        started = time.monotonic()
        assert live.play_bag(tmp_path / 'bag', config_from_parameters(params), wait_s=1.5,
                             context=context) == 0
        assert time.monotonic() - started >= 1.5     # nobody subscribed: it waited it out
    finally:
        rclpy.try_shutdown(context=context)
    # And said so: a node in a namespace reads other names (found by an independent review).
    err = capfd.readouterr().err
    [line] = [line for line in err.splitlines() if 'no subscriber after 1.5 s on ' in line]
    assert all(f'/jax_perception/input/{name}/pointcloud' in line for name in names), err
    assert line.endswith('(a node in a namespace or renamed reads other names: --remap '
                         'FROM:=TO onto its inputs)')


class Kept:
    """A publisher that keeps what it is given."""

    def __init__(self):
        self.raw = []

    def publish(self, raw):
        self.raw.append(raw)


def test_play_stopped_by_ctrl_c_mid_loop_counts_what_it_published(tmp_path):
    """It said 'published 0 messages' after Ctrl-C in a loop: only whole loops were counted."""
    class Interrupted(Kept):
        def publish(self, raw):
            if len(self.raw) == 3:
                raise KeyboardInterrupt
            super().publish(raw)

    class Node:
        def __init__(self):
            self.lines = []

        def get_logger(self):
            return SimpleNamespace(info=self.lines.append)
    bag = write_bag(tmp_path / 'bag')
    pubs = {bagio.POINTCLOUD_TOPIC: Interrupted(), EXTRA_TOPIC: Kept()}
    node, reader = Node(), bagio.open_reader(bag)
    try:
        live._play(reader, pubs, 100.0, False, True, None, None, node)
    finally:
        reader.close()
    sent = len(pubs[bagio.POINTCLOUD_TOPIC].raw) + len(pubs[EXTRA_TOPIC].raw)
    assert sent >= 3 and node.lines == [f'published {sent} messages']


def test_loops_are_a_seam_apart_so_a_loops_last_cloud_is_served_before_the_next_timeline(
        tmp_path):
    """Back to back, the next loop's odometry reset the buffers under the last cloud's frame."""
    class Timed(Kept):
        def publish(self, raw):
            super().publish(time.monotonic())

    class Node:
        def get_logger(self):
            return SimpleNamespace(info=lambda line: None)
    answers = iter([True, False])            # two loops
    context = SimpleNamespace(ok=lambda: next(answers))
    bag = write_bag(tmp_path / 'bag')
    pubs = {bagio.POINTCLOUD_TOPIC: Timed(), EXTRA_TOPIC: Kept()}
    reader = bagio.open_reader(bag)
    try:
        live._play(reader, pubs, 100.0, False, True, context, None, Node())
    finally:
        reader.close()
    times = pubs[bagio.POINTCLOUD_TOPIC].raw
    assert len(times) == 2 * CLOUDS
    assert times[CLOUDS] - times[CLOUDS - 1] >= live.LOOP_SEAM_S


def test_a_clock_too_slow_for_the_nodes_one_second_rule_is_refused(tmp_path):
    bag = write_bag(tmp_path / 'bag')
    with pytest.raises(bagio.BagError, match=r'^--clock 0.5 Hz at --rate 1 steps the clock 2 s '
                       r'of the bag at a time: .* publish /clock more than 1 times a second$'):
        live.play_bag(bag, small_config(), clock_hz=0.5)
    with pytest.raises(bagio.BagError, match=r'^--clock 40 Hz at --rate 50 steps the clock 1.25 '
                       r's .* more than 50 times a second$'):
        live.play_bag(bag, small_config(), rate=50.0, clock_hz=40.0)


def test_restamped_loops_keep_the_bags_spacing_follow_the_wall_clock_never_step_back(
        tmp_path):
    bag = write_bag(tmp_path / 'bag')
    pubs = {bagio.POINTCLOUD_TOPIC: Kept(), EXTRA_TOPIC: Kept()}
    reader = bagio.open_reader(bag)
    try:
        for _ in range(2):                               # two loops
            live._play_once(reader, pubs, 1.0, True, None, [0])
    finally:
        reader.close()
    stamps = [stamp(bagio.deserialize(raw, bagio.POINTCLOUD_TYPE))
              for raw in pubs[bagio.POINTCLOUD_TOPIC].raw]
    assert len(stamps) == 2 * CLOUDS and all(b > a for a, b in zip(stamps, stamps[1:]))
    # Within a loop the bag's spacing, exactly: deskew and accumulation measure motion by it.
    for loop in (stamps[:CLOUDS], stamps[CLOUDS:]):
        assert {b - a for a, b in zip(loop, loop[1:])} == {PERIOD_NS}
    # Each stamp is its publication's wall clock (the last at most a few ms before now).
    assert 0 <= time.time_ns() - stamps[-1] < 0.5e9


def test_restamp_at_another_rate_is_refused(tmp_path):
    bag = write_bag(tmp_path / 'bag')
    with pytest.raises(bagio.BagError, match=r'--restamp plays at --rate 1 only \(got 4\)'):
        live.play_bag(bag, small_config(), rate=4.0, restamp=True)
    # A message without a Header is played as recorded, never "restamped" into garbage.
    string = bagio.TYPESTORE.types['std_msgs/msg/String']
    raw = bytes(bagio.TYPESTORE.serialize_cdr(string(data='hello'), 'std_msgs/msg/String'))
    assert live.restamped(raw, 'std_msgs/msg/String', 10**9) == raw
    # A type with a Header that rosbags' store lacks (a stack's own) is shifted too: its stamp
    # was left in bag time while every other topic moved to the wall clock.
    from nav_msgs.msg import Goals
    from rclpy.serialization import deserialize_message, serialize_message
    goals = Goals()
    goals.header.stamp.sec, goals.header.stamp.nanosec = 100, 5
    moved = deserialize_message(live.restamped(serialize_message(goals), 'nav_msgs/msg/Goals',
                                               5 * 10**9), Goals)
    assert (moved.header.stamp.sec, moved.header.stamp.nanosec) == (105, 5)


def test_a_new_loops_clock_is_never_followed_by_the_loop_before():
    # The clock thread may be inside a publish of the last loop's time when the player's
    # thread starts the next loop: that stale time came out after the new loop's start.
    published = []

    class SlowPublisher:
        def publish(self, msg):
            if threading.current_thread().name == 'clock':
                time.sleep(0.03)            # a loaded machine, a slow DDS write
            published.append((threading.current_thread().name,
                              msg.clock.sec * 10**9 + msg.clock.nanosec))

    class Node:
        def create_publisher(self, *args, **kwargs):
            return SlowPublisher()
    clock = live.PlaybackClock(Node(), hz=20, rate=1.0)
    try:
        clock.start(100 * 10**9, time.monotonic())      # loop 1 of a bag of 100 s .. 104 s
        clock.hold_at(104 * 10**9)
        time.sleep(0.07)                # the clock thread is inside a publish of loop 1's time
        clock.start(100 * 10**9, time.monotonic())      # loop 2, held at its first message
        clock.hold_at(100 * 10**9)
        time.sleep(0.12)
    finally:
        clock.stop()
    second = [i for i, (who, _) in enumerate(published) if who != 'clock'][1]
    assert all(t == 100 * 10**9 for _, t in published[second:]), published
