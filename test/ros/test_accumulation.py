"""
Multi-sweep accumulation against an independent NumPy voxelization of the union of sweeps.

Also the age and odometry rules, zero compiles, the donated ring and replay from a bag; the
node over loopback DDS is test_accumulation_node.py.
"""

from dataclasses import replace

from bag_messages import odometry, read_all, yaw_quaternion
from configs import small_config
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.core.pipeline import BevPipeline, compile_count
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.settings.channels import LIDAR_CHANNELS
import numpy as np
import pytest
from sweep_scenes import (accumulating_config, check_lidar_block, drive, DT, expected_channels,
                          expected_drive, lidar_extrinsic, pose_odometry, SWEEPS, T0, two_sweeps,
                          yaw_pose)


@pytest.fixture(scope='module')
def pipe(warmed):
    """Return the module's warmed accumulating pipeline (SWEEPS sweeps, the front camera)."""
    return warmed(accumulating_config())


@pytest.fixture(scope='module')
def single(warmed):
    """Return the same rig without accumulation."""
    return warmed(small_config(1))


def test_two_sweeps_equal_the_union_moved_into_the_current_frame(pipe, single):
    cfg = pipe.cfg
    compiles = compile_count()      # both fixtures are warm: the process-wide count from here
    assert pipe.output_channels == 7 + 3 + 1
    assert pipe.lidar_channels == LIDAR_CHANNELS + ('time_lag_mean',)
    pipe.reset_sweeps()
    current, previous, before, now = two_sweeps(cfg)
    fmap = np.random.default_rng(5).uniform(size=(12, 20, 3)).astype(np.float32)
    first = pipe.process(previous, {'front': fmap}, stamp_ns=T0, pose=before)
    assert first.sweeps_used == 1
    check_lidar_block(first.features, expected_channels(cfg, previous, None, None, None, 0))
    out = pipe.process(current, {'front': fmap}, stamp_ns=T0 + DT, pose=now)
    assert out.sweeps_used == 2
    expected = expected_channels(cfg, current, previous, before, now, 0.1)
    check_lidar_block(out.features, expected)
    shared = (expected[..., 6] > 0) & (expected[..., 6] < 0.1)
    assert shared.sum() >= 20, 'cells with points of both sweeps'
    assert ((expected[..., 0] > 0) & (expected[..., 6] == 0.1)).any()
    # The camera block and coverage follow the LiDAR block unchanged.
    plain = single.process(current, {'front': fmap}).features
    np.testing.assert_array_equal(out.features[..., 7:], plain[..., 6:])
    assert compile_count() == compiles


def test_a_past_sweep_keeps_the_lidar_pose_it_was_measured_with(pipe):
    # The vehicle stands still; between the sweeps the LiDAR's calibration moves 2 m (a live
    # set, a moving TF): the earlier sweep stays where it was measured.
    cfg = pipe.cfg
    pipe.reset_sweeps()
    start = pipe.lidar_poses
    try:
        point = np.array([[1.0, 0.5, 0.2, 1.0]], np.float32)         # LiDAR frame
        pipe.process(point, stamp_ns=T0, pose=np.eye(4))
        measured = lidar_extrinsic(cfg) @ np.array([1.0, 0.5, 0.2, 1.0])
        moved = replace(start[0], translation=(start[0].translation[0] + 2.0,
                                               *start[0].translation[1:]))
        pipe.set_calibration(lidar=(moved,))
        out = pipe.process(np.zeros((0, 4), np.float32), stamp_ns=T0 + DT, pose=np.eye(4))
        assert out.sweeps_used == 2
        g = cfg.grid
        cell = (int((measured[0] - g.x_min) // g.resolution),
                int((measured[1] - g.y_min) // g.resolution))
        assert np.argwhere(out.features[..., 0] > 0).tolist() == [list(cell)]
    finally:
        pipe.set_calibration(lidar=start)
        pipe.reset_sweeps()


def test_past_sweeps_are_cropped_in_the_frame_they_were_taken_in(pipe):
    # The ego box and the range band move with the vehicle: a past sweep's hits on the body
    # are where the body was, so it is cropped before it enters the ring, never afterwards.
    from dataclasses import replace
    cfg = pipe.cfg
    crop = replace(cfg.lidar_filter, min_range_m=2.0, ego_box=(-4.0, 4.0, -3.0, 3.0, -9.0, 9.0))
    current, previous, before, now = two_sweeps(cfg, seed=2)

    def cropped(points):
        lidar = lidar_extrinsic(cfg)
        xyz = points[:, :3].astype(np.float64) @ lidar[:3, :3].T + lidar[:3, 3]
        box = np.reshape(crop.ego_box, (3, 2))
        inside = ((xyz >= box[:, 0]) & (xyz < box[:, 1])).all(axis=1)
        near = np.linalg.norm(points[:, :3].astype(np.float64), axis=1) < crop.min_range_m
        return points[~inside & ~near]
    assert len(cropped(previous)) < len(previous) and len(cropped(current)) < len(current)
    compiles = compile_count()
    pipe.reset_sweeps()
    pipe.set_calibration(lidar_filter=crop)
    try:
        pipe.process(previous, stamp_ns=T0, pose=before)
        out = pipe.process(current, stamp_ns=T0 + DT, pose=now)
    finally:
        pipe.set_calibration(lidar_filter=cfg.lidar_filter)
        pipe.reset_sweeps()
    assert out.sweeps_used == 2 and compile_count() == compiles
    check_lidar_block(out.features, expected_channels(cfg, cropped(current), cropped(previous),
                                                      before, now, 0.1))


def test_frame_path_interpolates_odometry_for_each_cloud(pipe):
    """Take the poses from odometry samples bracketing each cloud stamp (20 ms apart)."""
    cfg = pipe.cfg
    pipe.reset_sweeps()
    current, previous, before, now = two_sweeps(cfg, seed=1)
    path = FramePath(cfg, pipe)
    # Samples 10 ms either side of each cloud stamp: the midpoints are the poses above.
    for stamp, (x0, yaw0), (x1, yaw1) in (
            (T0, (9.9, -1.0), (10.1, 1.0)), (T0 + DT, (11.9, 9.0), (12.1, 11.0))):
        path.add_odometry(odometry(stamp - 10_000_000, (x0, 5.0, 0.0), yaw_quaternion(yaw0)))
        path.add_odometry(odometry(stamp + 10_000_000, (x1, 5.0, 0.0), yaw_quaternion(yaw1)))
    import bag_messages
    path.process(bag_messages.cloud(previous, T0))
    frame = path.process(bag_messages.cloud(current, T0 + DT))
    assert not frame.without_odometry and frame.result.sweeps_used == 2
    check_lidar_block(frame.result.features,
                      expected_channels(cfg, current, previous, before, now, 0.1))


def test_an_old_sweep_is_left_out(pipe):
    cfg = pipe.cfg
    compiles = compile_count()
    pipe.reset_sweeps()
    current, previous, before, now = two_sweeps(cfg, seed=2)
    pipe.process(previous, stamp_ns=T0, pose=before)
    # 0.6 s later: older than max_sweep_age_s (0.5).
    out = pipe.process(current, stamp_ns=T0 + 6 * DT, pose=now)
    assert out.sweeps_used == 1
    check_lidar_block(out.features, expected_channels(cfg, current, None, None, None, 0))
    # The limit is live: at 0.7 s the same sweep is used.
    pipe.reset_sweeps()
    pipe.max_sweep_age_s = 0.7
    try:
        pipe.process(previous, stamp_ns=T0, pose=before)
        out = pipe.process(current, stamp_ns=T0 + 6 * DT, pose=now)
    finally:
        pipe.max_sweep_age_s = cfg.accumulation.max_sweep_age_s
    check_lidar_block(out.features, expected_channels(cfg, current, previous, before, now, 0.6))
    assert compile_count() == compiles


def test_missing_odometry_uses_the_current_sweep_only(pipe):
    cfg = pipe.cfg
    pipe.reset_sweeps()
    current, previous, before, now = two_sweeps(cfg, seed=3)
    pipe.process(previous, stamp_ns=T0, pose=before)
    out = pipe.process(current, stamp_ns=T0 + DT, pose=None)
    assert out.sweeps_used == 1
    check_lidar_block(out.features, expected_channels(cfg, current, None, None, None, 0))
    # A sweep without a pose is never used later: the next frame sees `previous` only.
    later = yaw_pose(14.0, 5.0, 20.0)
    out = pipe.process(current, stamp_ns=T0 + 2 * DT, pose=later)
    assert out.sweeps_used == 2
    check_lidar_block(out.features, expected_channels(cfg, current, previous, before, later,
                                                      0.2))


def test_stamps_going_backwards_forget_the_earlier_sweeps(pipe):
    cfg = pipe.cfg
    pipe.reset_sweeps()
    current, previous, before, now = two_sweeps(cfg, seed=4)
    pipe.process(previous, stamp_ns=T0 + 5 * DT, pose=before)
    pipe.process(previous, stamp_ns=T0 + 6 * DT, pose=before)
    out = pipe.process(current, stamp_ns=T0 + DT, pose=now)      # a bag loops
    assert out.sweeps_used == 1
    check_lidar_block(out.features, expected_channels(cfg, current, None, None, None, 0))


def test_no_compile_whatever_the_sizes_ages_and_poses(pipe):
    rng = np.random.default_rng(7)
    compiles = compile_count()
    pipe.reset_sweeps()
    used = set()
    for k in range(40):
        n = int(rng.choice([0, 1, 63, 64, 65, 255, 700, 1024, 3000]))
        points = rng.normal(scale=4.0, size=(n, 4)).astype(np.float32)
        pose = None if k % 7 == 3 else yaw_pose(k * 0.5, 0.0, k * 2.0)
        stamp = T0 + k * int(rng.choice([50, 100, 300])) * 1_000_000
        used.add(pipe.process(points, stamp_ns=stamp, pose=pose).sweeps_used)
    assert used == {1, 2, 3}
    assert compile_count() == compiles


def test_the_ring_is_donated_and_updated_in_place(pipe):
    ring = pipe._ring
    pipe.process(np.zeros((10, 4), np.float32), stamp_ns=T0, pose=np.eye(4))
    assert ring.is_deleted()        # consumed by the executable, not copied
    assert pipe._ring.shape == (SWEEPS - 1, 1024, 4)


def test_the_store_keys_accumulation_apart(tmp_path):
    cache = str(tmp_path / 'xla')
    first = BevPipeline(small_config(0, compilation_cache_dir=cache))
    first.warmup()
    accumulating = BevPipeline(small_config(0, compilation_cache_dir=cache,
                                            **{'accumulation.num_sweeps': 2}))
    accumulating.warmup()
    assert accumulating.store.hits == 0 and accumulating.store.misses == 3
    again = BevPipeline(small_config(0, compilation_cache_dir=cache,
                                     **{'accumulation.num_sweeps': 2}))
    again.warmup()
    assert again.store.hits == 3 and again.store.misses == 0
    # A loaded executable still consumes the ring it is given.
    ring = again._ring
    out = again.process(np.ones((5, 4), np.float32), stamp_ns=T0, pose=np.eye(4))
    assert ring.is_deleted() and out.features.shape == (32, 48, 8)


# -- replay --------------------------------------------------------------------------------------

def test_replay_with_odometry_writes_the_time_lag_channel(tmp_path, pipe):
    import bag_messages
    cfg = pipe.cfg
    clouds, poses = drive(cfg)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k, (points, pose) in enumerate(zip(clouds, poses)):
            stamp = T0 + k * DT
            writer.write(bagio.ODOMETRY_TOPIC, pose_odometry(stamp, pose), stamp)
            if k == 1:
                bad = odometry(stamp + 1, (float('nan'), 0.0, 0.0))
                writer.write(bagio.ODOMETRY_TOPIC, bad, stamp + 1)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp + 2)
        writer.write(bagio.ODOMETRY_TOPIC, pose_odometry(T0 + len(clouds) * DT,
                                                         yaw_pose(2.0, 0.0, 2.0)), T0 + 4 * DT)
    compiles = compile_count()
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg, pipeline=pipe)
    assert result.frames == len(clouds) and compile_count() == compiles
    assert result.frames_without_odometry == 0
    assert result.rejected_odometry == 1
    assert any('odometry rejected' in e and 'pose.position' in e for e in result.errors)
    assert result.summary()['frames_without_odometry'] == 0
    outputs = [m for _, _, m in read_all(tmp_path / 'out', [bagio.FEATURES_TOPIC])]
    for k, msg in enumerate(outputs):
        assert msg.encoding == '32FC11'
        got = np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, -1)
        check_lidar_block(got, expected_drive(cfg, clouds, poses, k))
    # A static scene: every point of the last frame's cells was seen 0, 0.1 and 0.2 s ago.
    np.testing.assert_allclose(got[..., 6][got[..., 0] > 0], 0.1, atol=1e-6)


def test_a_pose_jump_starts_the_sweeps_anew(tmp_path, pipe):
    # A bag looped by a player that moves its stamps on (play --loop --restamp), or a
    # localization re-initialised: the odometry jumps 11 m between two samples 0.1 s apart
    # (110 m/s). The sweeps before it are of another timeline: composed with the new poses
    # they would land 11 m off, in the grid; the frame after the jump has its own sweep only.
    import bag_messages
    clouds, poses = drive(pipe.cfg, frames=5)
    jumped = [pose.copy() for pose in poses]
    for pose in jumped[3:]:
        pose[1, 3] += 11.0
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k, (points, pose) in enumerate(zip(clouds, jumped)):
            stamp = T0 + k * DT
            writer.write(bagio.ODOMETRY_TOPIC, pose_odometry(stamp, pose), stamp)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp + 2)
    compiles = compile_count()
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', pipe.cfg, pipeline=pipe)
    assert result.frames == 5 and result.rejected_odometry == 0
    assert compile_count() == compiles
    outputs = [m for _, _, m in read_all(tmp_path / 'out', [bagio.FEATURES_TOPIC])]
    bevs = [np.frombuffer(bytes(m.data), np.float32).reshape(m.height, m.width, -1)
            for m in outputs]
    assert (bevs[2][..., 6] > 0).any()                  # before: earlier sweeps counted
    check_lidar_block(bevs[3], expected_channels(pipe.cfg, clouds[3], None, None, None, 0))
    assert (bevs[3][..., 6] == 0).all()                 # the jump: its own sweep only
    # Then the one earlier sweep of the new timeline (a cell's mean lag, at most 0.1 s).
    assert 0 < bevs[4][..., 6].max() <= DT / 1e9 + 1e-6


def test_replay_without_odometry_counts_every_frame(tmp_path, pipe):
    import bag_messages
    clouds, _ = drive(pipe.cfg, frames=2)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k, points in enumerate(clouds):
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, T0 + k * DT),
                         T0 + k * DT)
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', pipe.cfg, pipeline=pipe)
    assert result.frames == 2 and result.frames_without_odometry == 2


def test_replay_of_the_sample_drive_uses_its_odometry(tmp_path, pipe):
    from jax_perception_node.tools.synthetic_drive import EGO_SPEED, LidarModel, write_sample_bag
    cfg = pipe.cfg
    lidar = LidarModel(beams=8, azimuth_steps=256)
    summary = write_sample_bag(tmp_path / 'drive', cfg, seconds=0.5, num_cameras=0,
                               lidar=lidar)
    assert summary['odometry_messages'] == 23     # 0, 0.02, ... 0.44 s: up to 0.4 s + 0.05 s
    odometry_msgs = [m for _, _, m in read_all(tmp_path / 'drive', [bagio.ODOMETRY_TOPIC])]
    last = odometry_msgs[-1]
    assert (last.header.frame_id, last.child_frame_id) == ('map', cfg.grid.frame_id)
    t = (last.header.stamp.sec * 10**9 + last.header.stamp.nanosec - T0) * 1e-9
    assert last.pose.pose.position.x == pytest.approx(EGO_SPEED * t)
    compiles = compile_count()
    result = replay_bag(tmp_path / 'drive', tmp_path / 'out', cfg, pipeline=pipe)
    assert result.frames == 5 and result.frames_without_odometry == 0
    assert result.rejected_odometry == 0 and compile_count() == compiles
    outputs = [m for _, _, m in read_all(tmp_path / 'out', [bagio.FEATURES_TOPIC])]
    lags = [np.frombuffer(bytes(m.data), np.float32).reshape(m.height, m.width, -1)[..., 6]
            for m in outputs]
    assert [m.encoding for m in outputs] == ['32FC11'] * 5
    # Frame 0 has no earlier sweep; from frame 2 on, two earlier sweeps (0.1 and 0.2 s) count.
    assert lags[0].max() == 0.0
    assert lags[1].max() == pytest.approx(0.1) and lags[4].max() == pytest.approx(0.2)


def test_a_pose_array_updated_in_place_still_shows_a_jump(pipe):
    # The sweep history kept the caller's array: one buffer written in place made every past
    # pose the current one, so a jump looked like no motion and the old sweep was placed.
    pipe.reset_sweeps()
    point = np.array([[1.0, 0.5, 0.2, 1.0]], np.float32)
    pose = yaw_pose(0.0, 0.0, 0.0)
    pipe.process(point, stamp_ns=T0, pose=pose)
    pose[:] = yaw_pose(11.0, 0.0, 180.0)          # 11 m and a half turn in 0.1 s: a jump
    out = pipe.process(np.zeros((0, 4), np.float32), stamp_ns=T0 + DT, pose=pose)
    assert out.sweeps_used == 1 and not out.features[..., 0].any()
