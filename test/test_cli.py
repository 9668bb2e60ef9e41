"""jax-perception CLI: sample-bag, replay (MCAP and sqlite3), the error paths, and the demo."""

import json
from pathlib import Path

from conftest import PARAMS_FILE, small_params
from jax_perception_node import bagio
from jax_perception_node.camera import read_features
from jax_perception_node.cli import main
from jax_perception_node.cloud import read_points
from jax_perception_node.config import load_config
from jax_perception_node.pipeline import BevPipeline
from jax_perception_node.sync import CameraSync
import numpy as np
import pytest
from ros_harness import write_params


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    """Write a 1.5 s sample drive with the shipped config (LiDAR + 4 cameras)."""
    bag = tmp_path_factory.mktemp('bags') / 'drive'
    assert main(['sample-bag', str(bag), '--seconds', '1.5', '--seed', '3']) == 0
    return bag


def read_all(bag, topics):
    reader = bagio.open_reader(bag)
    try:
        return [(t, ts, bagio.TYPESTORE.deserialize_cdr(raw, mt))
                for t, ts, raw, mt in bagio.iter_messages(reader, topics)]
    finally:
        reader.close()


def test_sample_bag_has_topics_types_and_varying_counts(sample):
    reader = bagio.open_reader(sample)
    types = bagio.topic_types(reader)
    reader.close()
    cfg = load_config(PARAMS_FILE)
    assert types[bagio.POINTCLOUD_TOPIC] == bagio.POINTCLOUD_TYPE
    for cam in cfg.cameras:
        assert types[bagio.camera_topic(cam.name)] == bagio.IMAGE_TYPE
    clouds = read_all(sample, [bagio.POINTCLOUD_TOPIC])
    assert len(clouds) == 15
    counts = {msg.width * msg.height for _, _, msg in clouds}
    assert len(counts) > 10 and min(counts) > 10_000


def replay_reference(bag, cfg):
    """Replay by hand: pair in bag order with CameraSync, run BevPipeline per LiDAR frame."""
    pipe = BevPipeline(cfg)
    pipe.warmup()
    sync = CameraSync([c.name for c in cfg.cameras], cfg.max_camera_lidar_delay_s)
    topics = {bagio.camera_topic(c.name): c.name for c in cfg.cameras}
    expected = {}
    for topic, _, msg in read_all(bag, [bagio.POINTCLOUD_TOPIC, *topics]):
        stamp = bagio.stamp_ns(msg.header.stamp)
        if topic in topics:
            sync.add(topics[topic], stamp, read_features(msg).copy())
            continue
        points, n = read_points(msg, pipe.padder.capacity)
        pairing, _ = sync.pair(stamp)
        expected[stamp] = pipe.process(points, pairing.maps, num_points=n).features
    return expected


def test_replay_writes_one_output_per_frame_equal_to_the_pipeline(sample, tmp_path):
    out, report = tmp_path / 'out', tmp_path / 'report.json'
    assert main(['replay', str(sample), '--out', str(out), '--json', str(report),
                 '--png', str(tmp_path / 'png')]) == 0
    summary = json.loads(report.read_text())
    for key in ('frames', 'rejected', 'compiles_after_warmup', 'buckets', 'latency_ms'):
        assert key in summary
    assert (summary['frames'], summary['rejected'], summary['compiles_after_warmup']) == (15, 0, 0)
    assert sum(summary['buckets'].values()) == 15
    assert set(summary['latency_ms']['compute_ms']) == {'p50', 'p95', 'p99', 'max'}
    assert {p.name for p in (tmp_path / 'png').iterdir()} == {
        'bev_0000.png', 'bev_0014.png', 'latency.png'}

    expected = replay_reference(sample, load_config(PARAMS_FILE))
    outputs = read_all(out, [bagio.FEATURES_TOPIC])
    assert len(outputs) == 15
    for _, _, msg in outputs:
        np.testing.assert_array_equal(read_features(msg), expected[bagio.stamp_ns(
            msg.header.stamp)])
    latency = read_all(out, [bagio.LATENCY_TOPIC])
    assert len(latency) == 15 and len(read_all(out, [bagio.IMAGE_TOPIC])) == 15
    used = [kv.value for _, _, m in latency for kv in m.status[0].values
            if kv.key == 'cameras_used']
    assert used.count('4') >= 12     # the first frame may precede every camera's first map


def test_replay_reads_sqlite3_bags_with_renamed_topics(sample, tmp_path):
    sqlite = tmp_path / 'vehicle'
    renamed = {bagio.POINTCLOUD_TOPIC: '/sensing/lidar/top/pointcloud',
               bagio.camera_topic('front'): '/perception/front/features'}
    reader = bagio.open_reader(sample)
    with bagio.BagWriter(sqlite, storage='sqlite3') as writer:
        for topic, ts, raw, msgtype in bagio.iter_messages(reader, list(renamed)):
            writer.write_raw(renamed[topic], msgtype, raw, ts)
    reader.close()
    assert (sqlite / 'vehicle.db3').exists()
    out = tmp_path / 'out'
    assert main(['replay', str(sqlite), '--out', str(out), '--pointcloud-topic',
                 '/sensing/lidar/top/pointcloud', '--camera-topic',
                 'front=/perception/front/features', '--json', str(tmp_path / 's.json')]) == 0
    summary = json.loads((tmp_path / 's.json').read_text())
    assert summary['frames'] == 15
    assert summary['cameras_used']['max'] == 1.0     # only the front camera was recorded


@pytest.mark.parametrize('argv, message', [
    (['replay', '/nonexistent/bag', '--out', '{tmp}/o'], 'no such bag'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--pointcloud-topic', '/nope'],
     'no sensor_msgs/msg/PointCloud2 topic /nope'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--params', '{tmp}/missing.yaml'],
     'params file'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--params', '{tmp}/bad.yaml'],
     'grid.resolution: must be > 0'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--camera-topic', 'front'],
     '--camera-topic expects NAME=TOPIC'),
    (['replay', '{sample}', '--out', '{sample}'], 'exists, not overwriting'),
    (['replay', '{tmp}/notabag.txt', '--out', '{tmp}/o'], 'cannot read bag'),
    (['sample-bag', '{sample}'], 'exists (use --force'),
    (['sample-bag', '{tmp}/s', '--cameras', '9'], '--cameras 9'),
    (['play', '/nonexistent/bag'], 'no such bag'),
    (['play', '{sample}', '--rate', '0'], '--rate must be > 0'),
    (['replay'], 'the following arguments are required'),
    (['frobnicate'], 'invalid choice'),
])
def test_user_errors_print_one_line_and_return_1(argv, message, sample, tmp_path, capsys):
    write_params(small_params(**{'grid.resolution': -1.0}), tmp_path / 'bad.yaml')
    (tmp_path / 'notabag.txt').write_text('hello')
    argv = [a.format(tmp=tmp_path, sample=sample) for a in argv]
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith('jax-perception: ') and '\n' not in err, err
    assert message in err
    assert 'Traceback' not in captured.out + captured.err


def test_play_and_record_round_trip(sample, tmp_path):
    """`play` publishes the bag live; `record` (another process) writes what it hears."""
    import subprocess
    import sys
    exe = str(Path(sys.executable).with_name('jax-perception'))
    topics = [bagio.POINTCLOUD_TOPIC, bagio.camera_topic('front')]
    out = tmp_path / 'recorded'
    topic_args = [arg for t in topics for arg in ('--topic', t)]
    player = subprocess.Popen([exe, 'play', str(sample), '--loop'],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        recorder = subprocess.run(
            [exe, 'record', str(out), '--seconds', '4', *topic_args],
            capture_output=True, text=True, timeout=60)
    finally:
        player.terminate()
        player.wait(timeout=10)
    assert recorder.returncode == 0, recorder.stderr
    clouds = read_all(out, [bagio.POINTCLOUD_TOPIC])
    maps = read_all(out, [bagio.camera_topic('front')])
    assert len(clouds) >= 20 and len(maps) >= 20          # about 10 and 12 Hz for ~3 s
    sent = {bagio.stamp_ns(m.header.stamp): m.width for _, _, m in read_all(
        sample, [bagio.POINTCLOUD_TOPIC])}
    for _, _, msg in clouds:                            # played unchanged, not restamped
        assert sent[bagio.stamp_ns(msg.header.stamp)] == msg.width


def test_record_without_publishers_is_a_user_error(tmp_path, capsys):
    assert main(['record', str(tmp_path / 'o'), '--topic', '/nobody/here']) == 1
    assert 'no publisher found for /nobody/here' in capsys.readouterr().err
