"""Offline replay of a three-LiDAR drive: one frame per sweep, the BEV of the three clouds."""

import json
import struct

import bag_messages
from cli_errors import assert_one_line_error
from configs import camera_params, small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.param_file import write_param_file
from jax_perception_node.tools.cli import main
from jax_perception_node.tools.synthetic_drive import LidarModel, POINT_DTYPE, write_sample_bag
from jax_perception_node.tools.synthetic_drive.rig import rig_parameters
import numpy as np
import pytest
from reference import quat_matrix, voxelize_ref

NAMES = ('top', 'left', 'right')
TOPICS = {name: bagio.lidar_topic(name) for name in NAMES}
FRAMES = 3
# A 32 x 48 grid of 0.5 m, no cameras, one bucket for the three clouds of a sweep (30k points),
# and a head, so that the ground truth pairs with each frame. The top LiDAR at the shipped
# mount, 1.8 m up: its lowest beam meets the ground 6.7 m out, the side LiDARs see it nearer.
PARAMS = small_params(cameras=0, **{
    'buckets': [32768], 'head.module': 'toy_heads:occupancy_head', 'head.max_objects': 8,
    'head.score_threshold': 0.2, 'lidar.translation': [0.0, 0.0, 1.8]})


@pytest.fixture(scope='module')
def drive(tmp_path_factory):
    """Write 0.3 s of the sample drive with three LiDARs; return its folder and summary."""
    path = tmp_path_factory.mktemp('drive') / 'bag'
    summary = write_sample_bag(path, config_from_parameters(PARAMS), seconds=0.3,
                               num_cameras=0, lidar=LidarModel(beams=16, azimuth_steps=512),
                               lidars='three')
    assert summary['frames'] == FRAMES
    return path, summary


@pytest.fixture(scope='module')
def rig_params(drive):
    """Return the parameters with the rig's lidars.* (what a user replays the drive with)."""
    return {**PARAMS, **rig_parameters(drive[1]['lidars'])}


@pytest.fixture(scope='module')
def rig(warmed, rig_params):
    """Return the three-LiDAR config and its warmed pipeline."""
    cfg = config_from_parameters(rig_params)
    assert [lidar.name for lidar in cfg.lidars] == list(NAMES)
    return cfg, warmed(cfg)


def clouds_in_base_link(bag, mounts) -> dict[str, list[np.ndarray]]:
    """Return name -> each sweep's points (x, y, z, intensity) moved into base_link, float64."""
    reader = bagio.open_reader(bag)
    try:
        found = {name: [] for name in NAMES}
        for topic, _, raw, msgtype in bagio.iter_messages(reader, list(TOPICS.values())):
            name = next(n for n, t in TOPICS.items() if t == topic)
            msg = bagio.deserialize(raw, msgtype)
            p = np.frombuffer(msg.data, POINT_DTYPE, count=msg.width)
            xyz = np.stack([p['x'], p['y'], p['z']], axis=1).astype(np.float64)
            mount = mounts[name]
            xyz = xyz @ quat_matrix(mount['rotation_xyzw']).T + np.asarray(mount['translation'])
            found[name].append(np.concatenate([xyz, p['intensity'][:, None]], axis=1))
        return found
    finally:
        reader.close()


def union_bev(clouds: dict, frame: int, names=NAMES) -> np.ndarray:
    """Return the NumPy BEV of the named LiDARs' points of one sweep, all in base_link."""
    base = config_from_parameters(small_params(0, **{'lidar.translation': [0.0, 0.0, 0.0]}))
    return voxelize_ref(np.concatenate([clouds[n][frame] for n in names]), base)


def assert_same_bev(bev: np.ndarray, expected: np.ndarray) -> None:
    """Occupancy exactly; density, heights and intensity to float32 rounding."""
    np.testing.assert_array_equal(bev[..., 0], expected[..., 0])
    np.testing.assert_allclose(bev[..., 1:6], expected[..., 1:6], rtol=1e-5, atol=1e-4)


def rewrite(src, dst, edit, extra=()) -> None:
    """
    Write the clouds of ``src`` to ``dst`` in bag-time order, as ``edit`` has them.

    ``edit(name, sweep, timestamp, raw)`` -> (topic, timestamp, raw), or None to leave it out.
    ``extra``: more messages, (timestamp, topic, raw, msgtype).
    """
    reader = bagio.open_reader(src)
    kept, sweeps = list(extra), dict.fromkeys(NAMES, 0)
    try:
        for topic, timestamp, raw, msgtype in bagio.iter_messages(reader, list(TOPICS.values())):
            name = next(n for n, t in TOPICS.items() if t == topic)
            edited = edit(name, sweeps[name], timestamp, raw)
            sweeps[name] += 1
            if edited is not None:
                kept.append((edited[1], edited[0], edited[2], msgtype))
    finally:
        reader.close()
    with bagio.BagWriter(dst) as writer:
        for timestamp, topic, raw, msgtype in sorted(kept, key=lambda m: m[0]):
            writer.write_raw(topic, msgtype, raw, timestamp)


def test_each_sweep_is_one_frame_with_the_bev_of_its_three_clouds(drive, rig, tmp_path):
    bag, summary = drive
    cfg, pipe = rig
    calls = []
    result = replay_bag(bag, tmp_path / 'out', cfg, snapshot_frames=(0, 1, -1), pipeline=pipe,
                        progress=lambda done, total: calls.append((done, total)))
    assert (result.frames, result.rejected, result.compiles_after_warmup) == (FRAMES, 0, 0)
    assert calls == [(k, 3 * FRAMES) for k in range(1, 3 * FRAMES + 1)]   # progress: clouds
    got = result.summary()
    assert (got['lidar_sets_incomplete'], got['lidars_missing'], got['late_lidar_clouds']) == (
        0, dict.fromkeys(NAMES, 0), 0)
    assert got['buckets'] == {'32768': FRAMES} and result.errors == []
    json.dumps(got)
    # The ground truth pairs with every frame: a set is stamped as its (equal) cloud stamps.
    assert result.detection['frames'] == FRAMES
    reader = bagio.open_reader(tmp_path / 'out')
    try:
        counts = {c.topic: c.msgcount for c in reader.connections}
    finally:
        reader.close()
    assert counts[bagio.GRID_MAP_TOPIC] == counts[bagio.OBJECTS_TOPIC] == FRAMES
    # The BEV is the one of the three clouds moved into base_link by the rig's poses (NumPy);
    # the top LiDAR alone gives another, without the ground beside the car.
    clouds = clouds_in_base_link(bag, summary['lidars'])
    g = cfg.grid
    rows = slice(int((-1.0 - g.x_min) / g.resolution), int((4.0 - g.x_min) / g.resolution))
    left = slice(int((1.5 - g.y_min) / g.resolution), int((3.0 - g.y_min) / g.resolution))
    right = slice(int((-3.0 - g.y_min) / g.resolution), int((-1.5 - g.y_min) / g.resolution))
    assert sorted(result.snapshots) == [0, 1, FRAMES - 1]
    for frame, bev in result.snapshots.items():
        assert_same_bev(bev, union_bev(clouds, frame))
        top = union_bev(clouds, frame, ('top',))
        assert np.sum(bev[..., 0] != top[..., 0]) > 100
        for side in (left, right):
            assert top[rows, side, 0].sum() == 0 and bev[rows, side, 0].mean() > 0.5


def test_a_lidar_missing_on_some_sweeps_is_counted_per_name(drive, rig, tmp_path):
    """Left lost on sweep 1, right on sweep 2: their sets wait, then go without them."""
    bag, summary = drive
    cfg, pipe = rig
    lost = {('left', 1), ('right', 2)}
    rewrite(bag, tmp_path / 'lossy', lambda name, sweep, t, raw: None if (
        name, sweep) in lost else (TOPICS[name], t, raw))
    result = replay_bag(tmp_path / 'lossy', tmp_path / 'out', cfg, snapshot_frames=(1, 2),
                        pipeline=pipe)
    assert (result.frames, result.rejected, result.compiles_after_warmup) == (FRAMES, 0, 0)
    assert (result.lidar_sets_incomplete, result.lidars_missing, result.late_lidar_clouds) == (
        2, {'top': 0, 'left': 1, 'right': 1}, 0)
    assert result.summary()['lidars_missing'] == {'top': 0, 'left': 1, 'right': 1}
    clouds = clouds_in_base_link(bag, summary['lidars'])
    assert_same_bev(result.snapshots[1], union_bev(clouds, 1, ('top', 'right')))
    assert_same_bev(result.snapshots[2], union_bev(clouds, 2, ('top', 'left')))


def test_a_late_cloud_is_dropped_and_a_broken_one_rejected(drive, rig, tmp_path):
    """
    Sweep 0's right cloud arrives 80 ms late, after its set's 50 ms wait; sweep 1's is garbage.

    The late cloud is seen after the set was processed (due before each message), so the set
    goes without it and the cloud is counted late; the broken one is rejected, and its set
    goes without it too.
    """
    bag, _ = drive
    cfg, pipe = rig
    assert cfg.max_lidar_delay_s == 0.05

    def edit(name, sweep, t, raw):
        if name == 'right' and sweep == 0:
            return TOPICS[name], t + 80_000_000, raw
        return TOPICS[name], t, raw[:40] if (name, sweep) == ('right', 1) else raw
    rewrite(bag, tmp_path / 'late', edit)
    result = replay_bag(tmp_path / 'late', tmp_path / 'out', cfg, pipeline=pipe)
    assert (result.frames, result.rejected, result.late_lidar_clouds) == (FRAMES, 1, 1)
    assert (result.lidar_sets_incomplete, result.lidars_missing) == (
        2, {'top': 0, 'left': 0, 'right': 2})
    assert len(result.errors) == 1 and 'point cloud of LiDAR right' in result.errors[0]
    assert result.compiles_after_warmup == 0


def test_a_cloud_with_a_malformed_stamp_is_rejected_before_the_sets(drive, rig, tmp_path):
    # Taken into the sets, sweep 1's right cloud with nanosec + 1e9 (1 s later) made the
    # others late for it: 21 clouds dropped, about 1 s of every LiDAR.
    bag, _ = drive
    cfg, pipe = rig

    def edit(name, sweep, t, raw):
        if (name, sweep) != ('right', 1):
            return TOPICS[name], t, raw
        nanosec, = struct.unpack_from('<I', raw, 8)     # after the CDR header and sec
        return TOPICS[name], t, raw[:8] + struct.pack('<I', nanosec + 10**9) + raw[12:]
    rewrite(bag, tmp_path / 'bad', edit)
    result = replay_bag(tmp_path / 'bad', tmp_path / 'out', cfg, pipeline=pipe)
    assert (result.frames, result.rejected, result.late_lidar_clouds) == (FRAMES, 1, 0)
    assert result.lidars_missing == {'top': 0, 'left': 0, 'right': 1}
    assert 'nanoseconds in [0, 1000000000)' in result.errors[0]


def test_a_set_whose_wait_ended_goes_before_later_messages(drive, warmed, rig_params, tmp_path):
    """
    Sweep 0 lacks its right cloud; a camera map of its stamp arrives 30 or 80 ms after it.

    The set waits 50 ms: the map 30 ms later is in it, the one 80 ms later came after the set
    was processed (as in the node, whose set went at its deadline), though the next cloud
    that would close the set arrives later still.
    """
    bag, _ = drive
    cfg = config_from_parameters({**rig_params, **camera_params('front'),
                                  'cameras.names': ['front']})
    pipe = warmed(cfg)
    reader = bagio.open_reader(bag)
    try:
        start = next(t for _, t, _, _ in bagio.iter_messages(reader, [TOPICS['top']]))
    finally:
        reader.close()
    fmap = bag_messages.features(np.ones((12, 20, 3), np.float32), start, 'front')
    raw = bytes(bagio.TYPESTORE.serialize_cdr(fmap, bagio.IMAGE_TYPE))
    used = []
    for delay_ms in (30, 80):
        lossy = tmp_path / f'map_{delay_ms}'
        rewrite(bag, lossy, lambda name, sweep, t, raw: None if (name, sweep) == ('right', 0)
                else (TOPICS[name], t, raw),
                [(start + delay_ms * 1_000_000, bagio.camera_topic('front'), raw,
                  bagio.IMAGE_TYPE)])
        result = replay_bag(lossy, tmp_path / f'out_{delay_ms}', cfg, pipeline=pipe)
        assert (result.frames, result.lidars_missing['right']) == (FRAMES, 1)
        used.append(result.records[0]['cameras_used'])
    assert used == [1, 0]


def test_a_bag_without_a_configured_lidar_is_refused_naming_its_topic(
        drive, rig, rig_params, tmp_path, capsys):
    bag, _ = drive
    cfg, pipe = rig
    rewrite(bag, tmp_path / 'two', lambda name, sweep, t, raw: None if name == 'right' else (
        TOPICS[name], t, raw))
    with pytest.raises(bagio.BagError, match=f'no sensor_msgs/msg/PointCloud2 topic '
                                             f'{TOPICS["right"]} of LiDAR right'):
        replay_bag(tmp_path / 'two', tmp_path / 'out', cfg, pipeline=pipe)
    assert not (tmp_path / 'out').exists()
    # One LiDAR's parameters on a bag of three: named, and lidars.names suggested.
    with pytest.raises(bagio.BagError, match=r'input/pointcloud \(topics: .*lidars.names'):
        replay_bag(bag, tmp_path / 'out', config_from_parameters(PARAMS))
    params = write_param_file(rig_params, tmp_path / 'params.yaml')
    code = main(['replay', str(tmp_path / 'two'), '--out', str(tmp_path / 'out'),
                 '--params', str(params)])
    assert code == 1
    assert_one_line_error(capsys, f'{TOPICS["right"]} of LiDAR right')


def test_cli_replays_a_lidar_from_another_topic_and_prints_the_sets(
        drive, rig_params, tmp_path, capsys):
    bag, _ = drive
    moved = '/sensing/lidar/right/pointcloud'
    rewrite(bag, tmp_path / 'moved', lambda name, sweep, t, raw: (
        moved if name == 'right' else TOPICS[name], t, raw))
    params = write_param_file(rig_params, tmp_path / 'params.yaml')
    code = main(['replay', str(tmp_path / 'moved'), '--out', str(tmp_path / 'out'),
                 '--params', str(params), '--lidar-topic', f'right={moved}',
                 '--json', str(tmp_path / 'summary.json')])
    assert code == 0
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert (summary['frames'], summary['lidar_sets_incomplete'], summary['lidars_missing'],
            summary['late_lidar_clouds']) == (FRAMES, 0, dict.fromkeys(NAMES, 0), 0)
    out = capsys.readouterr().out
    assert 'lidars: 0 frames lacked a LiDAR (top 0, left 0, right 0), 0 clouds too late' in out


def test_cli_prints_a_lidar_ahead_of_its_stamps_with_the_sets_not_as_rejected(
        drive, rig_params, tmp_path, capsys):
    """The right LiDAR's last cloud is stamped 2 s after it was received: its clock ran ahead."""
    bag, _ = drive

    def ahead(name, sweep, t, raw):
        if (name, sweep) != ('right', FRAMES - 1):
            return TOPICS[name], t, raw
        msg = bagio.deserialize(raw, bagio.POINTCLOUD_TYPE)
        msg.header.stamp.sec += 2
        return TOPICS[name], t, bytes(bagio.TYPESTORE.serialize_cdr(msg, bagio.POINTCLOUD_TYPE))
    rewrite(bag, tmp_path / 'ahead', ahead)
    params = write_param_file(rig_params, tmp_path / 'params.yaml')
    code = main(['replay', str(tmp_path / 'ahead'), '--out', str(tmp_path / 'out'),
                 '--params', str(params), '--json', str(tmp_path / 'summary.json')])
    assert code == 0
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert (summary['frames'], summary['lidars_missing']) == (
        FRAMES, {'top': 0, 'left': 0, 'right': 1})
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = next(k for k, line in enumerate(lines) if line.startswith('lidars: '))
    assert lines[at + 1].startswith('  LiDAR right: its stamps run 2.0')
    assert 'rejected:' not in out


def test_rig_parameters_of_one_lidar_name_none():
    assert rig_parameters({'lidar': {'topic': bagio.POINTCLOUD_TOPIC, 'frame_id': 'lidar',
                                     'translation': [0.0, 0.0, 1.8],
                                     'rotation_xyzw': [0.0, 0.0, 0.0, 1.0]}}) == {
        'lidars.names': []}
