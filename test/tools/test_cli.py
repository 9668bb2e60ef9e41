"""jax-perception CLI: sample-bag, replay (MCAP and sqlite3), the error paths, and the demo."""

import ast
import dataclasses
import json
from pathlib import Path
import pickle

from bag_messages import read_all
from cli_errors import assert_one_line_error
from configs import PARAMS_FILE, REPO, small_params
from jax_perception_node.bags import bagio
from jax_perception_node.geometry.stamps import stamp_ns
from jax_perception_node.settings.config import load_config
from jax_perception_node.settings.param_file import read_param_file
from jax_perception_node.tools import cli
from jax_perception_node.tools.bench.checks import edge_cells
from jax_perception_node.tools.cli import main
import numpy as np
import pytest
from reference import lift_ref, voxelize_ref
from ros_harness import write_params


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
    """Write a 1.5 s sample drive with the shipped config (LiDAR + 4 cameras)."""
    bag = tmp_path_factory.mktemp('bags') / 'drive'
    assert main(['sample-bag', str(bag), '--seconds', '1.5', '--seed', '3']) == 0
    return bag


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


def small_replay_params(tmp_path) -> Path:
    """
    Write the shipped cameras (the bag's map shapes) over a grid small enough to loop over.

    Without deskew: the expectation voxelizes the clouds as measured. Without the head, whose
    weights were trained on 0.4 m cells.
    """
    params = read_param_file(PARAMS_FILE)
    params.update({'grid.x_min': -8.0, 'grid.x_max': 8.0, 'grid.y_min': -12.0,
                   'grid.y_max': 12.0, 'grid.resolution': 0.5, 'fusion.num_heights': 2,
                   'buckets': [8192, 16384], 'compilation_cache_dir': '',
                   'lidar.time_field': '', 'head.module': ''})
    return write_params(params, tmp_path / 'small.yaml')


def decode_cloud(msg) -> np.ndarray:
    """x, y, z, intensity of a little-endian float32 PointCloud2, read by its field offsets."""
    assert not msg.is_bigendian and msg.height == 1
    data = np.asarray(msg.data, np.uint8).tobytes()
    offsets = {f.name: f.offset for f in msg.fields if f.datatype == 7}   # FLOAT32
    return np.stack([np.ndarray((msg.width,), '<f4', data, offsets[name], (msg.point_step,))
                     for name in ('x', 'y', 'z', 'intensity')], axis=1)


def decode_image(msg) -> np.ndarray:
    """float32 (H, W, C) of an unpadded little-endian 32FC<C> Image."""
    channels = int(msg.encoding[4:])
    assert msg.encoding == f'32FC{channels}' and not msg.is_bigendian
    assert msg.step == msg.width * channels * 4
    return np.frombuffer(np.asarray(msg.data, np.uint8).tobytes(), '<f4').reshape(
        msg.height, msg.width, channels)


def expected_replay(bag, cfg):
    """
    Work out the output per LiDAR stamp without the pipeline or CameraSync.

    Pairing by the documented rule: each camera's map nearest the LiDAR stamp (of two as near,
    the newer), among those earlier in the bag whose stamp is within the tolerance of the LiDAR
    stamp (both sides inclusive). Above the
    largest bucket the cloud is subsampled with the documented even stride. Features: the
    NumPy reference of the kernel contracts, concatenated as [6 LiDAR, C camera, coverage].
    """
    tolerance = round(cfg.max_camera_lidar_delay_s * 1e9)
    capacity = max(cfg.buckets)
    names = {bagio.camera_topic(c.name): c.name for c in cfg.cameras}
    seen = {name: [] for name in names.values()}
    expected, last_lidar = {}, None
    for topic, _, msg in read_all(bag, [bagio.POINTCLOUD_TOPIC, *names]):
        stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        if topic in names:
            seen[names[topic]].append((stamp, decode_image(msg)))
            continue
        # The sample drive's clock only moves forward, so no buffer is ever reset.
        assert last_lidar is None or stamp > last_lidar
        last_lidar = stamp
        maps = {}
        for name, history in seen.items():
            near = [(t, m) for t, m in history if abs(t - stamp) <= tolerance]
            if near:
                maps[name] = min(near, key=lambda item: (abs(item[0] - stamp), -item[0]))[1]
        points = decode_cloud(msg)
        n = len(points)
        if n > capacity:
            points = points[(np.arange(capacity) * n) // capacity]
        camera, coverage = lift_ref(cfg, maps)
        expected[stamp] = (np.concatenate(
            [voxelize_ref(points, cfg), camera, coverage[..., None]], axis=2), len(maps), n,
            edge_cells(cfg, points))
    return expected


def test_replay_writes_one_output_per_frame_equal_to_an_independent_expectation(
        sample, tmp_path):
    params = small_replay_params(tmp_path)
    cfg = load_config(params)
    out, report = tmp_path / 'out', tmp_path / 'report.json'
    assert main(['replay', str(sample), '--out', str(out), '--json', str(report),
                 '--params', str(params), '--png', str(tmp_path / 'png')]) == 0
    summary = json.loads(report.read_text())
    for key in ('frames', 'rejected', 'compiles_after_warmup', 'buckets', 'latency_ms'):
        assert key in summary
    assert (summary['frames'], summary['rejected'], summary['compiles_after_warmup']) == (15, 0, 0)
    assert sum(summary['buckets'].values()) == 15
    assert set(summary['latency_ms']['compute_ms']) == {'p50', 'p95', 'p99', 'max'}
    assert {p.name for p in (tmp_path / 'png').iterdir()} == {
        'bev_0000.png', 'bev_0014.png', 'latency.png'}

    expected = expected_replay(sample, cfg)
    assert len(expected) == 15
    # The drive exercises the overflow path and frames that pair all four cameras.
    assert any(n > 16384 for _, _, n, _ in expected.values())
    assert any(used == 4 for _, used, _, _ in expected.values())
    outputs = read_all(out, [bagio.FEATURES_TOPIC])
    assert len(outputs) == 15
    for _, _, msg in outputs:
        features, _, _, edges = expected[stamp_ns(msg.header.stamp)]
        # A point within float32 rounding of a cell border may land in either neighbour
        # (XLA's fused transform rounds once, the float64 reference not at all): such cells
        # may differ in their LiDAR statistics, and only a few of them.
        actual = decode_image(msg)
        close = np.isclose(actual, features, rtol=1e-4, atol=1e-4).all(axis=-1)
        assert close[~edges].all() and (~close).sum() <= 3
        np.testing.assert_allclose(actual[..., 6:], features[..., 6:], rtol=1e-4, atol=1e-4)
    latency = read_all(out, [bagio.LATENCY_TOPIC])
    assert len(latency) == 15 and len(read_all(out, [bagio.IMAGE_TOPIC])) == 15
    for _, _, msg in latency:
        values = {kv.key: kv.value for kv in msg.status[0].values}
        _, used, n, _ = expected[stamp_ns(msg.header.stamp)]
        assert (int(values['cameras_used']), int(values['num_points'])) == (used, n)
        assert int(values['overflow_points']) == max(0, n - 16384)


def test_replay_that_serves_no_frame_writes_its_summary_and_exits_1(sample, tmp_path, capsys):
    params = read_param_file(small_replay_params(tmp_path))
    params['lidar.frame_id'] = 'velodyne'     # the bag's clouds say lidar: every one is refused
    params = write_params(params, tmp_path / 'other_frame.yaml')
    report = tmp_path / 'report.json'
    assert main(['replay', str(sample), '--out', str(tmp_path / 'out'), '--params', str(params),
                 '--json', str(report)]) == 1
    summary = json.loads(report.read_text())
    assert (summary['frames'], summary['rejected']) == (0, 15)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith('jax-perception: replay: no cloud of the bag became a frame')
    assert (tmp_path / 'out').is_dir()


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
    # The shipped parameters, except the executable store: tests never write to ~/.cache.
    params = write_params(dict(read_param_file(PARAMS_FILE), compilation_cache_dir=''),
                          tmp_path / 'params.yaml')
    assert main(['replay', str(sqlite), '--out', str(out), '--params', str(params),
                 '--pointcloud-topic',
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
     'grid.resolution: must be'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--camera-topic', 'front'],
     '--camera-topic expects NAME=TOPIC'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--camera-topic', 'front=/a', '--camera-topic',
      'front=/b'], '--camera-topic gives front twice: /a and /b'),
    (['replay', '{sample}', '--out', '{sample}'], 'exists, not overwriting'),
    (['replay', '{tmp}/notabag.txt', '--out', '{tmp}/o'], 'cannot read bag'),
    (['sample-bag', '{sample}'], 'exists (use --force'),
    (['sample-bag', '{tmp}/s', '--cameras', '9'], '--cameras 9'),
    (['play', '/nonexistent/bag'], 'no such bag'),
    (['play', '{sample}', '--rate', '0'], '--rate must be a number >= 0.001, got 0'),
    (['play', '{sample}', '--rate', 'nan'], '--rate must be a number >= 0.001, got nan'),
    (['play', '{sample}', '--rate', '1e-300'], '--rate must be a number >= 0.001'),
    (['play', '{sample}', '--clock', 'nan'], '--clock must be a number >= 0.01 and <= 10000 Hz'),
    (['play', '{sample}', '--clock', '1e-300'], '--clock must be a number >= 0.01'),
    (['play', '{sample}', '--remap', '/tf:=bad name!'],
     "--remap /tf:= 'bad name!': not a valid ROS topic name (topic name must not contain"),
    (['play', '{sample}', '--remap', '/tf:=/x/'], 'must not end with a forward slash'),
    (['play', '{sample}', '--remap', '/tf:=/clock', '--clock'],
     '--clock publishes /clock: no bag topic may be published there too'),
    (['play', '{sample}', '--remap', '/tf:=clock', '--clock'],      # the same, relative
     '--clock publishes /clock: no bag topic may be published there too'),
    (['play', '{sample}', '--camera-topic', 'bogus=/x'], "no camera 'bogus' in the params"),
    (['play', '{sample}', '--camera-topic', 'front=/nope'],
     '--camera-topic front=/nope: is not in the bag, want sensor_msgs/msg/Image'),
    (['play', '{sample}', '--pointcloud-topic', '/tf'],
     'no sensor_msgs/msg/PointCloud2 topic /tf (its type is tf2_msgs/msg/TFMessage)'),
    (['play', '{sample}', '--remap', '/a=/b'], '--remap expects FROM:=TO'),
    (['play', '{sample}', '--remap', '/nope:=/x'], 'no topic /nope to publish'),
    (['play', '{sample}', '--clock', '0'], '--clock must be a number >= 0.01 and <= 10000 Hz, '
                                           'got 0'),
    (['play', '{sample}', '--topic', '/nope'], 'no topic /nope to publish'),
    (['play', '{sample}', '--topic', '/tf', '--remap', '/tf:=/x'],
     '--topic /tf and --remap /tf:=/x both name /tf: give one'),
    (['record', '{tmp}/o', '--topic', '/nobody/here', '--wait', '0.5'],
     'no publisher found for /nobody/here within 0.5 s'),
    (['record', '{tmp}/o', '--wait', '-1'], '--wait must be a number >= 0 s, got -1'),
    (['record', '{tmp}/o', '--wait', 'nan'], '--wait must be a number >= 0 s, got nan'),
    (['record', '{tmp}/o', '--seconds', '-1'], '--seconds must be a number > 0 s'),
    (['record', '{tmp}/o', '--seconds', 'inf'], '--seconds must be a number > 0 s, got inf'),
    (['record', '{tmp}/o', '--topic', 'bad name!'], "--topic 'bad name!': not a valid ROS"),
    (['record', '{tmp}/notabag.txt/o'], 'OUT {tmp}/notabag.txt/o: {tmp}/notabag.txt is not a '
                                        'folder'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--camera-topic', 'front=/nope'],
     '--camera-topic front=/nope: is not in the bag, want sensor_msgs/msg/Image'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--camera-info-topic',
      'front=/jax_perception/input/pointcloud'],
     '--camera-info-topic front=/jax_perception/input/pointcloud: is '
     'sensor_msgs/msg/PointCloud2, want sensor_msgs/msg/CameraInfo'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--json', '{sample}/drive.mcap'],
     '--json {sample}/drive.mcap: would write inside the bag {sample}'),
    (['replay', '{sample}/drive.mcap', '--out', '{tmp}/o', '--json', '{sample}/drive.mcap'],
     '--json {sample}/drive.mcap: would write over the input {sample}/drive.mcap'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--json', '{tmp}/o'],
     '--out {tmp}/o and --json {tmp}/o: one would write over the other'),
    # /proc passes a permission check as root, but no file can be created there: refused
    # before the replay (it failed only when the summary was written, after the whole bag).
    (['replay', '{sample}', '--out', '{tmp}/o', '--json', '/proc/jax_perception.json'],
     '--json /proc/jax_perception.json: cannot write in /proc'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--png', '{tmp}/o/pictures'],
     '--png {tmp}/o/pictures: would write inside the output bag --out {tmp}/o'),
    (['replay', '{sample}', '--out', ''], '--out: an empty path'),
    (['replay', '{sample}', '--out', '{tmp}/o', '--params', ''], '--params: an empty path'),
    (['replay', '{tmp}/broken', '--out', '{tmp}/o'], 'cannot read its metadata.yaml'),
    (['sample-bag', '{tmp}/s', '--range-noise', 'nan'], 'need 0 <= range_noise_m <= 1'),
    (['sample-bag', '{tmp}/s', '--range-noise', '1e308'], 'need 0 <= range_noise_m <= 1'),
    (['sample-bag', '{tmp}/s', '--seconds', 'nan'],
     '--seconds must be a number > 0 and <= 3600 s, got nan'),
    (['sample-bag', '{tmp}/s', '--seconds', '1e308'],
     '--seconds must be a number > 0 and <= 3600 s, got 1e+308'),
    (['sample-bag', '{tmp}/s', '--beams', '100000000'], 'need beams in 1..256'),
    (['sample-bag', '{tmp}/s', '--azimuth-steps', '100000000'], 'azimuth_steps in 8..16384'),
    (['sample-bag', '{tmp}/notabag.txt/s'], 'OUT {tmp}/notabag.txt/s: {tmp}/notabag.txt is not '
                                            'a folder'),
    (['demo', '--out', '{tmp}/d', '--seconds', '-1'], '--seconds must be a number > 0 and <= '),
    (['demo', '--out', '{tmp}/d', '--seconds', '1e18'], '--seconds must be a number > 0 and <= '),
    (['demo', '--out', '{tmp}/notabag.txt'], '--out {tmp}/notabag.txt: exists and is not a '
                                             'folder'),
    (['bench', '--markdown', '{tmp}/notabag.txt'], 'not a bench results file (JSONDecodeError'),
    (['bench', '--markdown', '{tmp}/list.json'], 'not a bench results file (no plan and '
                                                 'machine)'),
    # Before, the whole run, then a traceback writing the JSON over the folder (or the report).
    (['bench', '--quick', '--out', '{tmp}/bo', '--json', '{tmp}/bo'],
     '--json {tmp}/bo: --out {tmp}/bo is that or writes it'),
    (['bench', '--quick', '--out', '{tmp}/bo', '--json', '{tmp}/bo/bench.md'],
     '--json {tmp}/bo/bench.md: --out {tmp}/bo is that or writes it'),
    (['replay'], 'the following arguments are required'),
    (['frobnicate'], 'invalid choice'),
])
def test_user_errors_print_one_line_and_return_1(argv, message, sample, tmp_path, capsys):
    write_params(small_params(**{'grid.resolution': -1.0}), tmp_path / 'bad.yaml')
    (tmp_path / 'notabag.txt').write_text('hello')
    (tmp_path / 'list.json').write_text('[1, 2]')
    (tmp_path / 'broken').mkdir()                       # a metadata.yaml YAML cannot parse
    (tmp_path / 'broken' / 'metadata.yaml').write_text('rosbag2_bagfile_information:\n  a: [\n')
    argv = [a.format(tmp=tmp_path, sample=sample) for a in argv]
    before = {p: p.stat().st_mtime_ns for p in Path(sample).iterdir()}
    assert main(argv) == 1
    assert_one_line_error(capsys, message.format(tmp=tmp_path, sample=sample))
    assert {p: p.stat().st_mtime_ns for p in Path(sample).iterdir()} == before   # input intact


def test_play_and_record_round_trip(sample, tmp_path):
    """`record` (started first, so it waits for the topics) writes what `play` publishes."""
    import subprocess
    import sys
    exe = str(Path(sys.executable).with_name('jax-perception'))
    topics = [bagio.POINTCLOUD_TOPIC, bagio.camera_topic('front')]
    out = tmp_path / 'recorded'
    topic_args = [arg for t in topics for arg in ('--topic', t)]
    recorder = subprocess.Popen([exe, 'record', str(out), '--seconds', '4', *topic_args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    player = subprocess.Popen([exe, 'play', str(sample), '--loop'],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        output = recorder.communicate(timeout=240)[0]
    finally:
        player.terminate()
        player.wait(timeout=30)
        if recorder.poll() is None:
            recorder.kill()
    assert recorder.returncode == 0, output
    clouds = read_all(out, [bagio.POINTCLOUD_TOPIC])
    maps = read_all(out, [bagio.camera_topic('front')])
    # Not a rate check: 4 s of a looping 10 Hz / 12 Hz bag give about 40 of each; a handful
    # shows recording works even on a machine too busy to keep the rate.
    assert len(clouds) >= 3 and len(maps) >= 3, (len(clouds), len(maps))
    sent = {(t, stamp_ns(m.header.stamp)): m for t, _, m in read_all(sample, topics)}
    for topic, _, msg in clouds + maps:                 # played unchanged, not restamped
        original = sent[topic, stamp_ns(msg.header.stamp)]
        np.testing.assert_array_equal(np.asarray(msg.data), np.asarray(original.data))


def test_play_options_become_one_bag_topics_remaps_extra_topics_and_a_clock(sample, monkeypatch):
    given = []

    def play(src, cfg, topics, **kwargs):
        given.append((topics, kwargs['remap'], kwargs['clock_hz']))
        return 0
    monkeypatch.setattr('jax_perception_node.tools.live.play_bag', play)
    assert main(['play', str(sample), '--pointcloud-topic', '/p', '--camera-topic', 'front=/f',
                 '--camera-info-topic', 'rear=/ri', '--odometry-topic', '/o',
                 '--remap', '/p:=/lidar', '--remap', '/tf:=/tf_old', '--clock']) == 0
    assert main(['play', str(sample), '--clock', '100', '--topic', '/gt', '--remap', '/gt:=/gt',
                 '--topic', '/tf']) == 0
    assert given == [
        (bagio.BagTopics('/p', {'front': '/f'}, {'rear': '/ri'}, '/o'),
         {'/p': '/lidar', '/tf': '/tf_old'}, 40.0),
        (bagio.BagTopics(), {'/gt': '/gt', '/tf': '/tf'}, 100.0)]


def error_classes() -> list[tuple[str, str]]:
    """Return (module, class) of every exception type the package defines, from its source."""
    package = Path(__file__).resolve().parents[2] / 'jax_perception_node'
    found = []
    for path in sorted(package.rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name.endswith('Error'):
                module = '.'.join(path.relative_to(package.parent).with_suffix('').parts)
                found.append((module, node.name))
    return found


# schema_export is its own console script (python -m ...schema_export) and maps its own error.
OWN_ENTRY_POINT = {('jax_perception_node.settings.schema_export', 'ExportError')}


def test_every_layers_error_is_found():
    names = {name for _, name in error_classes()}
    assert {'ConfigError', 'CloudFormatError', 'FeatureMapError', 'CameraInfoError',
            'OdometryError', 'BagError', 'FleetError', 'BenchError', 'UsageError',
            'TransformError'} <= names


@pytest.mark.parametrize('module, name', [
    pair for pair in error_classes() if pair not in OWN_ENTRY_POINT])
def test_every_layers_error_reaching_the_cli_is_one_line_and_exit_1(module, name, monkeypatch,
                                                                    capsys):
    import importlib
    error = getattr(importlib.import_module(module), name)

    def fail(**kwargs):
        raise error(f'{name} from a command')
    monkeypatch.setattr('jax_perception_node.tools.bench.run_benchmarks', fail)
    assert main(['bench', '--quick']) == 1
    assert_one_line_error(capsys, f'{name} from a command')


def test_bag_topics_default_to_the_node_inputs_and_are_immutable():
    topics = bagio.BagTopics()
    assert (topics.pointcloud, topics.odometry) == (bagio.POINTCLOUD_TOPIC, bagio.ODOMETRY_TOPIC)
    assert topics.camera('front') == bagio.camera_topic('front')
    assert topics.camera_info('front') == bagio.camera_info_topic('front')
    named = bagio.BagTopics('/p', {'rear': '/r', 'front': '/f'}, {'front': '/fi'}, '/o')
    assert named.cameras == (('front', '/f'), ('rear', '/r'))
    assert (named.camera('front'), named.camera('left')) == ('/f', bagio.camera_topic('left'))
    assert named.camera_info('front') == '/fi'
    assert pickle.loads(pickle.dumps(named)) == named      # it travels to fleet workers
    with pytest.raises(dataclasses.FrozenInstanceError):
        named.pointcloud = '/x'


def test_replay_options_become_one_bag_topics(sample, tmp_path, monkeypatch, capsys):
    given = []

    def record(src, dst, cfg, topics, **kwargs):
        given.append(topics)
        raise bagio.BagError('stop here')
    monkeypatch.setattr('jax_perception_node.bags.replay.replay_bag', record)
    assert main(['replay', str(sample), '--out', str(tmp_path / 'o'), '--pointcloud-topic', '/p',
                 '--camera-topic', 'front=/f', '--camera-info-topic', 'rear=/ri',
                 '--odometry-topic', '/o']) == 1
    assert_one_line_error(capsys, 'stop here')
    assert given == [bagio.BagTopics('/p', {'front': '/f'}, {'rear': '/ri'}, '/o')]


def test_lidar_topics_default_to_the_node_inputs():
    topics = bagio.BagTopics()
    assert topics.lidar('top') == bagio.lidar_topic('top')
    assert bagio.lidar_topic('top') == '/jax_perception/input/top/pointcloud'
    assert topics.clouds() == {bagio.POINTCLOUD_TOPIC: ''}
    named = bagio.BagTopics(lidars={'top': '/t', 'left': '/l'})
    assert named.lidars == (('left', '/l'), ('top', '/t'))
    assert named.clouds(('top', 'left', 'right')) == {
        '/t': 'top', '/l': 'left', bagio.lidar_topic('right'): 'right'}
    assert pickle.loads(pickle.dumps(named)) == named


def three_lidar_params(tmp_path) -> Path:
    """Write the shipped parameters with the sample drive's three-LiDAR rig (``lidars.*``)."""
    from jax_perception_node.tools.synthetic_drive import LidarModel
    from jax_perception_node.tools.synthetic_drive.rig import (lidar_rig, rig_parameters,
                                                               rig_summary)
    params = read_param_file(PARAMS_FILE)
    rig = rig_summary(lidar_rig('three', load_config(PARAMS_FILE), LidarModel()))
    params.update(rig_parameters(rig))
    assert params['lidars.names'] == ['top', 'left', 'right']
    assert params['lidars.left.frame_id'] == 'lidar_left'
    return write_params(params, tmp_path / 'three.yaml')


def test_lidar_topic_option_names_a_configured_lidar(sample, tmp_path, monkeypatch, capsys):
    given = []

    def record(src, dst, cfg, topics, **kwargs):
        given.append(topics)
        raise bagio.BagError('stop here')
    monkeypatch.setattr('jax_perception_node.bags.replay.replay_bag', record)
    three = three_lidar_params(tmp_path)
    assert main(['replay', str(sample), '--out', str(tmp_path / 'o'), '--params', str(three),
                 '--lidar-topic', 'top=/sensing/lidar/top/pointcloud']) == 1
    assert_one_line_error(capsys, 'stop here')
    assert given == [bagio.BagTopics(lidars={'top': '/sensing/lidar/top/pointcloud'})]
    for params in ([], ['--params', str(three)]):
        assert main(['replay', str(sample), '--out', str(tmp_path / 'o'), *params,
                     '--lidar-topic', 'rear=/r']) == 1
        assert_one_line_error(capsys, "--lidar-topic rear=...: no LiDAR (lidars.names) 'rear'")
    assert main(['replay', str(sample), '--out', str(tmp_path / 'o'), '--params', str(three),
                 '--lidar-topic', 'top']) == 1
    assert_one_line_error(capsys, '--lidar-topic')


def test_sample_bag_force_replaces_a_bag_only_after_every_check(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'notes.txt').write_text('mine')
    folder = tmp_path / 'work'
    folder.mkdir()
    (folder / 'notes.txt').write_text('mine too')
    small = ['--seconds', '0.2', '--beams', '8', '--azimuth-steps', '64']
    bag = tmp_path / 'drive'
    assert main(['sample-bag', str(bag), *small, '--seed', '1']) == 0
    mcap = next(bag.glob('*.mcap'))
    before = mcap.read_bytes()
    # A lens the renderer does not draw: the CameraInfo would carry it, the pictures not.
    lens = tmp_path / 'lens.yaml'
    lens.write_text(PARAMS_FILE.read_text().replace('distortion_model: none',
                                                    'distortion_model: plumb_bob', 1))
    for argv, message in (
            (['sample-bag', '', '--force'], 'OUT: an empty path'),
            (['sample-bag', '.', '--force'], 'is the current folder or holds it'),
            (['sample-bag', str(tmp_path.parent), '--force'], 'is the current folder or holds'),
            (['sample-bag', str(folder), '--force'], 'exists and is not a bag'),
            (['sample-bag', 'notes.txt', '--force'], 'exists and is not a bag'),
            # A refused option leaves the old bag in place.
            (['sample-bag', str(bag), '--force', '--cameras', '9'], '--cameras 9'),
            (['sample-bag', str(bag), '--force', '--seconds', '-1'], '--seconds must be'),
            (['sample-bag', str(bag), '--force', '--params', str(tmp_path / 'none.yaml')],
             'params file'),
            (['sample-bag', str(bag), '--force', '--params', str(lens)],
             'cameras.front.distortion_model is plumb_bob: the sample drive renders pinhole')):
        assert main(argv) == 1, argv
        assert_one_line_error(capsys, message)
        assert (tmp_path / 'notes.txt').read_text() == 'mine'
        assert (folder / 'notes.txt').read_text() == 'mine too'
        assert mcap.read_bytes() == before
    assert main(['sample-bag', str(bag), *small, '--seed', '2', '--force']) == 0
    reader = bagio.open_reader(bag)
    try:
        assert bagio.custom_data(reader) == {bagio.SAMPLE_SEED_KEY: '2'}
    finally:
        reader.close()
    # A link to a bag: the link is replaced, the bag it pointed to stays.
    (tmp_path / 'link').symlink_to(bag)
    assert main(['sample-bag', 'link', *small, '--seed', '4', '--force']) == 0
    assert not (tmp_path / 'link').is_symlink() and (tmp_path / 'link' / 'metadata.yaml').exists()
    assert (bag / 'metadata.yaml').exists()


def test_ctrl_c_while_a_lazy_import_loads_is_an_interrupt_not_a_missing_module(
        monkeypatch, capsys):
    # rclpy's native module, interrupted while it loads, raises ImportError from the
    # KeyboardInterrupt: 'The C extension ... isn't present on the system'.
    def importing(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError('initialization failed') from exc
    monkeypatch.setattr(cli, 'cmd_play', importing)
    assert cli.main(['play', 'bag']) == 130
    assert_one_line_error(capsys, 'interrupted')

    def missing(args):
        raise ImportError('No module named rclpy')
    monkeypatch.setattr(cli, 'cmd_play', missing)
    with pytest.raises(ImportError, match='rclpy'):    # a real missing module stays loud
        cli.main(['play', 'bag'])


def test_paths_and_bags_a_crash_or_a_cut_recording_leaves(tmp_path, capsys):
    # A rosbag2 folder whose metadata.yaml is gone (a recording cut short): named as such,
    # not "a folder of bags" nor rosbags' "metadata file ... does not exist".
    cut = tmp_path / 'cut'
    cut.mkdir()
    (cut / 'cut_0.mcap').write_bytes(b'\x89MCAP0\r\n')
    for argv in (['replay', str(cut), '--out', str(tmp_path / 'out')], ['play', str(cut)]):
        assert main(argv) == 1
        assert_one_line_error(capsys, f'{cut}: a folder without metadata.yaml is no rosbag2 bag '
                                      '(a recording cut short leaves one); name its file '
                                      '(cut_0.mcap), or rebuild the metadata with ros2 bag '
                                      'reindex')
    # An empty OUT, and an OUT inside a bag folder, are refused before anything is written.
    assert main(['sample-bag', '', '--seconds', '0.1']) == 1
    assert_one_line_error(capsys, 'OUT: an empty path')
    bag = tmp_path / 'bag'
    bag.mkdir()
    (bag / 'metadata.yaml').write_text('rosbag2_bagfile_information: {}\n')
    assert main(['sample-bag', str(bag / 'inner'), '--seconds', '0.1']) == 1
    assert_one_line_error(capsys, f'would write inside the bag {bag}')
    assert not (bag / 'inner').exists()
    # bench: its outputs are checked before minutes of benchmarking, not after.
    afile = tmp_path / 'afile'
    afile.write_text('')
    for argv, message in ((['bench', '--quick', '--out', str(afile)], 'exists and is not a '
                                                                      'folder'),
                          (['bench', '--quick', '--json', str(tmp_path)], 'exists and is a '
                                                                          'folder'),
                          (['bench', '--markdown', str(tmp_path)], 'a folder, not results '
                                                                   'file')):
        assert main(argv) == 1
        assert_one_line_error(capsys, message)


def test_a_hand_edited_results_file_is_one_line(tmp_path, capsys):
    import json
    results = json.loads((REPO / 'docs' / 'bench.json').read_text())
    results['images']['decode'] = {}         # a StopIteration traceback before
    (tmp_path / 'edited.json').write_text(json.dumps(results))
    assert main(['bench', '--markdown', str(tmp_path / 'edited.json')]) == 1
    assert_one_line_error(capsys, 'an incomplete bench results file (StopIteration')


def test_a_bag_whose_clouds_cannot_all_be_read_or_has_none_is_said(sample, tmp_path, capsys):
    import shutil
    from mcap.reader import make_reader
    # A damaged MCAP chunk: the reader skips it, and with it a cloud the bag's index lists.
    # Replay wrote the rest and exited 0, the loss nowhere to be seen.
    damaged = tmp_path / 'damaged'
    shutil.copytree(sample, damaged)
    [mcap] = damaged.glob('*.mcap')
    with open(mcap, 'rb') as f:
        chunks = sorted(c.chunk_start_offset for c in make_reader(f).get_summary().chunk_indexes)
    assert len(chunks) > 2
    data = bytearray(mcap.read_bytes())
    at = chunks[1]
    data[at + 41:at + 60] = bytes(19)        # its records' length and first bytes
    mcap.write_bytes(bytes(data))
    assert main(['replay', str(damaged), '--out', str(tmp_path / 'out'),
                 '--json', str(tmp_path / 'summary.json')]) == 1
    err = capsys.readouterr().err
    assert 'clouds the bag lists could not be read (a damaged chunk?)' in err
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert summary['clouds_unread'] >= 1 and summary['frames'] >= 1
    # A LiDAR topic without a message: refused before the warm-up, naming it.
    empty = tmp_path / 'empty'
    writer = bagio.BagWriter(empty)
    writer.add_topic(bagio.POINTCLOUD_TOPIC, bagio.POINTCLOUD_TYPE)
    writer.close()
    assert main(['replay', str(empty), '--out', str(tmp_path / 'out2')]) == 1
    assert_one_line_error(capsys, f'{empty}: no message on the LiDAR topic '
                                  f'{bagio.POINTCLOUD_TOPIC}')


@pytest.mark.parametrize('argv, message', [
    (['demo', '--seconds', '2'], 'demo needs matplotlib: pip install '
                                 '"jax_perception_node[tools]" (or pip install matplotlib)'),
    (['replay', 'in', '--out', 'out', '--png=pictures'], 'replay --png needs matplotlib'),
    (['replay', 'in', '--out', 'out', '--pn', 'pictures'], 'replay --png needs matplotlib'),
    (['train', 'bags', '--out', 'w.npz'], 'train needs optax: pip install '
                                          '"jax_perception_node[train]"'),
    (['bench', '--quick'], 'bench needs psutil'),
])
def test_a_missing_extra_is_one_line_before_any_work(argv, message, monkeypatch, capsys):
    """Found by an independent review: a demo ran 28 s, then ended in a traceback."""
    import importlib.util
    missing = {'matplotlib', 'optax', 'psutil'}
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *args: None if name in missing else find_spec(name, *args))
    assert main(argv) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f'jax-perception: {message}'), line
    # Where the option that needs it is not given, nothing is asked for.
    if argv[0] == 'replay':
        assert main(['replay', 'in', '--out', 'out']) == 1       # not a bag: its own line
        assert 'matplotlib' not in capsys.readouterr().err
    if argv[0] == 'bench':      # rendering a results file runs nothing
        assert main(['bench', '--mark', 'absent.json']) == 1
        assert 'needs' not in capsys.readouterr().err
    if argv[0] == 'train':      # its arguments are its module's, which imports optax
        assert main(['train', '--help']) == 1
        assert capsys.readouterr().err.startswith(f'jax-perception: {message}')
        missing.remove('optax')     # and only optax: matplotlib draws the loss, not the help
        with pytest.raises(SystemExit):
            main(['train', '--help'])
        assert 'needs' not in capsys.readouterr().err
        return
    with pytest.raises(SystemExit):     # and help needs nothing
        main([argv[0], '--help'])
    assert 'needs' not in capsys.readouterr().err
