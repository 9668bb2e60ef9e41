"""
Multi-sweep accumulation against an independent NumPy voxelization of the union of sweeps.

Also the age and odometry rules, zero compiles, the donated ring, replay from a bag and the
node over loopback DDS.
"""

import math

from bag_messages import odometry, read_all, yaw_quaternion
from configs import small_config, small_params
from jax_perception_node import bagio, kernels
from jax_perception_node.frame_path import FramePath
from jax_perception_node.pipeline import BevPipeline, compile_count
from jax_perception_node.replay import replay_bag
import numpy as np
import pytest
from reference import quat_matrix
from ros_harness import make_cloud, serving_node, set_parameters, stamp_of, status_values

T0 = 1_700_000_000 * 10**9
DT = 100_000_000     # 10 Hz sweeps
SWEEPS = 3


def homogeneous(rotation, translation):
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = rotation, translation
    return m


def yaw_pose(x, y, degrees):
    """Pose of base_link in map (4 x 4, float64), by the textbook rotation about z."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return homogeneous([[c, -s, 0], [s, c, 0], [0, 0, 1]], [x, y, 0.0])


def lidar_extrinsic(cfg):
    return homogeneous(quat_matrix(cfg.lidar.rotation_xyzw), cfg.lidar.translation)


def accumulate_ref(sweeps, cfg) -> np.ndarray:
    """
    Seven LiDAR channels of the union of sweeps, by the contract, in float64.

    ``sweeps``: (xyz in the current grid frame, intensity, lag s) per sweep.
    """
    g = cfg.grid
    out = np.zeros((g.height, g.width, 7))
    cells: dict = {}
    for xyz, intensity, lag in sweeps:
        i = np.floor((xyz[:, 0] - g.x_min) / g.resolution)
        j = np.floor((xyz[:, 1] - g.y_min) / g.resolution)
        ok = ((i >= 0) & (i < g.height) & (j >= 0) & (j < g.width)
              & (xyz[:, 2] >= g.z_min) & (xyz[:, 2] < g.z_max))
        for ii, jj, z, value in zip(i[ok].astype(int), j[ok].astype(int), xyz[ok, 2],
                                    intensity[ok]):
            cells.setdefault((ii, jj), []).append((z, value, lag))
    for (ii, jj), values in cells.items():
        z, value, lag = (np.array(v) for v in zip(*values))
        n = len(z)
        out[ii, jj] = [1.0, min(1.0, math.log(1 + n) / math.log(64)), z.max(), z.mean(),
                       z.min(), value.mean(), lag.mean()]
    return out


def grid_points(cfg, rng, n, cells=None):
    """Points in the grid frame well inside cells (no float32 rounding can move them)."""
    g = cfg.grid
    if cells is None:
        cells = np.stack([rng.integers(0, g.height, n), rng.integers(0, g.width, n)], 1)
    jitter = rng.uniform(-0.3, 0.3, size=(len(cells), 2))
    x = g.x_min + (cells[:, 0] + 0.5 + jitter[:, 0]) * g.resolution
    y = g.y_min + (cells[:, 1] + 0.5 + jitter[:, 1]) * g.resolution
    z = rng.uniform(g.z_min + 0.05, g.z_max - 0.05, len(cells))
    return np.stack([x, y, z], 1), rng.uniform(0, 100, len(cells)), cells


def to_sensor(xyz_grid, grid_from_sensor):
    """Points in the grid frame -> float32 (N, 4)-ready xyz in the sensor frame."""
    inverse = np.linalg.inv(grid_from_sensor)
    return xyz_grid @ inverse[:3, :3].T + inverse[:3, 3]


def cloud(xyz, intensity):
    return np.concatenate([xyz, intensity[:, None]], 1).astype(np.float32)


def as_float64(points):
    """Return the float32 cloud in float64: the reference starts from exactly what was sent."""
    return points[:, :3].astype(np.float64), points[:, 3].astype(np.float64)


@pytest.fixture(scope='module')
def pipe():
    pipe = BevPipeline(small_config(1, **{'accumulation.num_sweeps': SWEEPS}))
    pipe.warmup()
    return pipe


@pytest.fixture(scope='module')
def single():
    pipe = BevPipeline(small_config(1))
    pipe.warmup()
    return pipe


def two_sweeps(cfg, seed=0):
    """Return a previous and a current sweep: the ego moved +2 m in x and yawed 10 degrees."""
    rng = np.random.default_rng(seed)
    lidar = lidar_extrinsic(cfg)
    before, now = yaw_pose(10.0, 5.0, 0.0), yaw_pose(12.0, 5.0, 10.0)
    cur_xyz, cur_i, cells = grid_points(cfg, rng, 150)
    # Half of the previous sweep shares cells with the current one: lags mix there.
    prev_xyz, prev_i, _ = grid_points(cfg, rng, 0, cells=np.concatenate(
        [cells[:60], np.stack([rng.integers(0, 32, 90), rng.integers(0, 48, 90)], 1)]))
    # Some points leave the grid once moved; some lie outside it in both frames.
    prev_xyz = np.concatenate([prev_xyz, [[30.0, 0.0, 0.0], [0.0, 0.0, 5.0]]])
    prev_i = np.concatenate([prev_i, [1.0, 1.0]])
    current = cloud(to_sensor(cur_xyz, lidar), cur_i)
    # current grid frame from the previous LiDAR frame: now^-1 before lidar
    previous = cloud(to_sensor(prev_xyz, np.linalg.inv(now) @ before @ lidar), prev_i)
    return current, previous, before, now


def expected_channels(cfg, current, previous, before, now, lag_s):
    lidar = lidar_extrinsic(cfg)
    xyz, value = as_float64(current)
    sweeps = [(xyz @ lidar[:3, :3].T + lidar[:3, 3], value, 0.0)]
    if previous is not None:
        moved = np.linalg.inv(now) @ before @ lidar
        xyz, value = as_float64(previous)
        sweeps.append((xyz @ moved[:3, :3].T + moved[:3, 3], value, lag_s))
    return accumulate_ref(sweeps, cfg)


def check_lidar_block(features, expected):
    np.testing.assert_array_equal(features[..., 0], expected[..., 0])
    np.testing.assert_allclose(features[..., :7], expected, rtol=2e-6, atol=2e-5)


def test_two_sweeps_equal_the_union_moved_into_the_current_frame(pipe, single):
    cfg = pipe.cfg
    compiles = compile_count()      # both fixtures are warm: the process-wide count from here
    assert pipe.output_channels == 7 + 3 + 1
    assert pipe.lidar_channels == kernels.LIDAR_CHANNELS + ('time_lag_mean',)
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


# -- replay and the node ----------------------------------------------------------------------

def drive(cfg, frames=4, seed=0):
    """Return sweeps of a static scene seen by an ego at 5 m/s along +x, yawing 5 deg/s."""
    rng = np.random.default_rng(seed)
    world, value, _ = grid_points(cfg, rng, 120)
    lidar = lidar_extrinsic(cfg)
    clouds, poses = [], []
    for k in range(frames):
        pose = yaw_pose(0.5 * k, 0.0, 0.5 * k)
        clouds.append(cloud(to_sensor(world, pose @ lidar), value))
        poses.append(pose)
    return clouds, poses


def pose_odometry(stamp, pose):
    yaw = math.degrees(math.atan2(pose[1, 0], pose[0, 0]))
    return odometry(stamp, pose[:3, 3], yaw_quaternion(yaw))


def expected_drive(cfg, clouds, poses, k):
    lidar = lidar_extrinsic(cfg)
    sweeps = []
    for past in range(max(0, k - SWEEPS + 1), k + 1):
        moved = np.linalg.inv(poses[k]) @ poses[past] @ lidar
        xyz, value = as_float64(clouds[past])
        sweeps.append((xyz @ moved[:3, :3].T + moved[:3, 3], value, (k - past) * 0.1))
    return accumulate_ref(sweeps, cfg)


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


def send_clouds(probe, clouds, base: int) -> list[np.ndarray]:
    """Send clouds DT apart from ``base``, one at a time; returns the node's BEV outputs."""
    outputs = []
    for k, points in enumerate(clouds):
        stamp = base + k * DT
        probe.cloud_pub.publish(make_cloud(points, stamp))
        probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features),
                       what=f'output of frame {k}')
        msg = next(m for m in probe.features if stamp_of(m) == stamp)
        outputs.append(np.frombuffer(bytes(msg.data), np.float32).reshape(
            msg.height, msg.width, -1))
    return outputs


@pytest.fixture(scope='module')
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('accumulation')
    params = small_params(1, **{'accumulation.num_sweeps': SWEEPS, 'diagnostics.period_s': 0.2,
                                'diagnostics.lidar_timeout_s': 60.0})
    with serving_node(params, tmp, ('front',), odometry=True) as running:
        yield running


def ros_odometry(stamp, pose=None, position=None, xyzw=None):
    from nav_msgs.msg import Odometry
    msg = Odometry()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp), 10**9)
    msg.header.frame_id, msg.child_frame_id = 'map', 'base_link'
    if pose is not None:
        yaw = math.atan2(pose[1, 0], pose[0, 0])
        position = pose[:3, 3]
        xyzw = (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = (float(v) for v in position)
    o.x, o.y, o.z, o.w = (float(v) for v in xyzw)
    return msg


def wait_status(probe, predicate, what):
    start = len(probe.diagnostics)
    probe.wait_for(lambda: len(probe.diagnostics) > start + 1
                   and predicate(status_values(probe.diagnostics[-1].status[0])),
                   timeout=20.0, what=what)
    return probe.diagnostics[-1].status[0]


def test_node_accumulates_on_odometry_and_counts_bad_messages(node, pipe):
    proc, probe = node
    cfg = pipe.cfg
    clouds, poses = drive(cfg, frames=2, seed=3)
    base = T0 + 10**9 * 100
    probe.publish_odometry([ros_odometry(base + k * DT, pose) for k, pose in enumerate(poses)])
    # Bad ones: NaN pose, quaternion of norm 0, a stamp going backwards (resets the buffer,
    # so it comes before the good samples are sent again).
    bad = [ros_odometry(base + DT + 1, position=(float('nan'), 0, 0), xyzw=(0, 0, 0, 1)),
           ros_odometry(base + DT + 2, position=(0, 0, 0), xyzw=(0, 0, 0, 0)),
           ros_odometry(base - DT, position=(0, 0, 0), xyzw=(0, 0, 0, 1))]
    probe.publish_odometry(bad)
    values = status_values(wait_status(probe, lambda v: v['rejected_odometry'] == '3',
                                       'bad odometry counted'))
    assert values['odometry_received'] == str(len(poses))
    probe.publish_odometry([ros_odometry(base + k * DT, pose) for k, pose in enumerate(poses)])
    outputs = send_clouds(probe, clouds, base)
    pipe.reset_sweeps()
    for k, points in enumerate(clouds):
        expected = pipe.process(points, stamp_ns=base + k * DT, pose=poses[k]).features
        np.testing.assert_array_equal(outputs[k], expected)
    check_lidar_block(outputs[1], expected_drive(cfg, clouds, poses, 1))
    status = wait_status(probe, lambda v: int(v['processed']) >= 2, 'frames counted')
    values = status_values(status)
    assert values['frames_without_odometry'] == '0' and values['rejected'] == '0'
    assert values['compiles_after_warmup'] == '0'

    # A cloud with no odometry near its stamp: served on its own sweep, counted and WARNed.
    lone = base + 50 * DT
    start = len(probe.diagnostics)
    probe.cloud_pub.publish(make_cloud(clouds[0], lone))
    probe.wait_for(lambda: any(stamp_of(m) == lone for m in probe.features), what='lone frame')

    def warned():
        return [m.status[0] for m in probe.diagnostics[start:]
                if 'without odometry' in m.status[0].message]
    # The WARN names what happened since the previous report: it is in one message.
    probe.wait_for(lambda: bool(warned()), timeout=20.0, what='WARN: frame without odometry')
    status = warned()[0]
    assert status.level == status.WARN
    assert status_values(status)['frames_without_odometry'] == '1'
    assert proc.alive() and 'odometry rejected' in proc.log()


def test_node_applies_the_accumulation_limits_live(node, pipe):
    from rcl_interfaces.srv import SetParameters
    proc, probe = node
    setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
    assert setter.wait_for_service(timeout_sec=10)
    results = set_parameters(probe, setter, accumulation__max_sweep_age_s=0.05,
                             accumulation__max_odometry_gap_s=0.15)
    assert all(r.successful for r in results), [r.reason for r in results]
    results = set_parameters(probe, setter, accumulation__num_sweeps=5)
    assert not results[0].successful and 'static' in results[0].reason
    clouds, poses = drive(pipe.cfg, frames=2, seed=4)
    base = T0 + 10**9 * 300
    probe.publish_odometry([ros_odometry(base + k * DT, pose) for k, pose in enumerate(poses)])
    outputs = send_clouds(probe, clouds, base)
    # 0.1 s is older than the live 0.05 s: the second frame is its own sweep only.
    check_lidar_block(outputs[1], expected_channels(pipe.cfg, clouds[1], None, None, None, 0))
    assert outputs[1][..., 6].max() == 0.0
    assert proc.alive()
