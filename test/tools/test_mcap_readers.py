"""Every bag the project writes decodes with Foxglove's mcap + mcap-ros2-support readers."""

import time

import bag_messages
from configs import small_config
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.frames.latency import FRAME_KEYS
from jax_perception_node.tools.cli import main
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
import numpy as np

ZSTD_MAGIC = b'\x28\xb5\x2f\xfd'
T0 = 1_700_000_000 * 10**9


def mcap_file(bag) -> str:
    files = sorted(bag.glob('*.mcap'))
    assert len(files) == 1, files
    return files[0]


def decode_all(bag) -> list[tuple[str, object, int]]:
    """Return (topic, decoded message, log time) for every message, read by the mcap readers."""
    with open(mcap_file(bag), 'rb') as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        return [(channel.topic, decoded, message.log_time)
                for _, channel, message, decoded in reader.iter_decoded_messages()]


def chunk_compressions(bag) -> set[str]:
    with open(mcap_file(bag), 'rb') as f:
        summary = make_reader(f).get_summary()
    return {index.compression for index in summary.chunk_indexes}


def raw_payloads(bag) -> list[bytes]:
    with open(mcap_file(bag), 'rb') as f:
        return [message.data for _, _, message in make_reader(f).iter_messages()]


def features_array(msg) -> np.ndarray:
    channels = int(msg.encoding[4:])
    return np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, channels)


def test_sample_bag_decodes(tmp_path):
    bag = tmp_path / 'drive'
    assert main(['sample-bag', str(bag), '--seconds', '0.3', '--cameras', '1', '--beams', '16',
                 '--azimuth-steps', '256']) == 0
    decoded = decode_all(bag)
    clouds = [m for t, m, _ in decoded if t == bagio.POINTCLOUD_TOPIC]
    maps = [m for t, m, _ in decoded if t == bagio.camera_topic('front')]
    assert len(clouds) == 3 and len(maps) >= 3
    # The same bytes as rosbags reads: two independent MCAP readers agree.
    reader = bagio.open_reader(bag)
    try:
        expected = [bagio.TYPESTORE.deserialize_cdr(raw, t) for _, _, raw, t in
                    bagio.iter_messages(reader, [bagio.POINTCLOUD_TOPIC])]
    finally:
        reader.close()
    for got, want in zip(clouds, expected):
        assert (got.width, got.point_step) == (want.width, want.point_step)
        assert [f.name for f in got.fields] == [f.name for f in want.fields]
        assert bytes(got.data) == bytes(want.data)


def test_replay_output_is_chunk_compressed_and_decodes(tmp_path):
    rng = np.random.default_rng(8)
    frames = [(rng.normal(scale=4.0, size=(100 + 50 * k, 4)).astype(np.float32),
               rng.uniform(size=(12, 20, 3)).astype(np.float32)) for k in range(3)]
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k, (points, fmap) in enumerate(frames):
            stamp = T0 + k * 100_000_000
            writer.write(bagio.camera_topic('front'), bag_messages.features(fmap, stamp), stamp)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)
    cfg = small_config(1)
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg)
    assert result.frames == 3

    assert chunk_compressions(tmp_path / 'out') == {'zstd'}
    # Each message is plain CDR (encapsulation header 00 01), not a zstd frame.
    payloads = raw_payloads(tmp_path / 'out')
    assert payloads and all(p[:2] == b'\x00\x01' and p[:4] != ZSTD_MAGIC for p in payloads)

    decoded = decode_all(tmp_path / 'out')
    features = [m for t, m, _ in decoded if t == bagio.FEATURES_TOPIC]
    latency = [m for t, m, _ in decoded if t == bagio.LATENCY_TOPIC]
    images = [m for t, m, _ in decoded if t == bagio.IMAGE_TOPIC]
    assert len(features) == len(latency) == len(images) == 3
    pipe = BevPipeline(cfg)
    pipe.warmup()
    for k, ((points, fmap), msg) in enumerate(zip(frames, features)):
        assert msg.encoding == '32FC10' and msg.header.frame_id == 'base_link'
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == T0 + k * 100_000_000
        np.testing.assert_array_equal(features_array(msg),
                                      pipe.process(points, {'front': fmap}).features)
    for msg, (points, _) in zip(latency, frames):
        values = {kv.key: kv.value for kv in msg.status[0].values}
        assert list(values) == list(FRAME_KEYS)
        assert values['num_points'] == str(len(points))
    assert images[0].encoding == 'rgb8' and len(images[0].data) == 32 * 48 * 3


def test_recorder_output_decodes(tmp_path):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    from jax_perception_node.tools.recorder import Recorder
    from rclpy.qos import QoSProfile
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('mcap_reader_test_publisher', context=context)
    topic = '/mcap_reader_test/diagnostics'
    recorder = Recorder(tmp_path / 'rec', {topic: 'diagnostic_msgs/msg/DiagnosticArray'},
                        context)
    try:
        pub = node.create_publisher(DiagnosticArray, topic, QoSProfile(depth=100))
        deadline = time.monotonic() + 10.0
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pub.get_subscription_count() == 1
        for k in range(5):
            msg = DiagnosticArray()
            msg.header.stamp.sec = 100 + k
            msg.status = [DiagnosticStatus(name='probe', message=f'message {k}',
                                           values=[KeyValue(key='k', value=str(k))])]
            pub.publish(msg)
        deadline = time.monotonic() + 10.0
        while recorder.count(topic) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        recorder.close()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert chunk_compressions(tmp_path / 'rec') == {'zstd'}
    decoded = [m for t, m, _ in decode_all(tmp_path / 'rec') if t == topic]
    assert [m.header.stamp.sec for m in decoded] == [100, 101, 102, 103, 104]
    assert [m.status[0].message for m in decoded] == [f'message {k}' for k in range(5)]
    assert [m.status[0].values[0].value for m in decoded] == ['0', '1', '2', '3', '4']


def test_the_heads_objects_and_markers_decode(tmp_path):
    """vision_msgs and visualization_msgs of a replay with a head, read by the mcap readers."""
    rng = np.random.default_rng(9)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k in range(2):
            stamp = T0 + k * 100_000_000
            points = np.c_[rng.uniform([-6, -10, -0.5], [6, 10, 0.5], (400, 3)),
                           rng.uniform(0, 50, 400)].astype(np.float32)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)
    cfg = small_config(0, **{'head.module': 'toy_heads:occupancy_head',
                             'head.score_threshold': 0.0})
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg)
    assert result.frames == 2
    decoded = decode_all(tmp_path / 'out')
    objects = [m for t, m, _ in decoded if t == bagio.OBJECTS_TOPIC]
    markers = [m for t, m, _ in decoded if t == bagio.OBJECTS_MARKERS_TOPIC]
    assert len(objects) == len(markers) == 2
    for detections, array in zip(objects, markers):
        assert detections.header.frame_id == 'base_link' and len(detections.detections) > 0
        assert detections.detections[0].results[0].hypothesis.class_id == 'car'
        # A DELETEALL, then a cube and a label per box.
        assert len(array.markers) == 1 + 2 * len(detections.detections)
