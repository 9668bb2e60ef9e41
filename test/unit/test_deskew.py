"""
Deskew against NumPy: the body twist from poses, the kernel's motion, the frame path.

The contract (docs/design.md, "Deskew"): a point measured t s after the stamp, at q in the
grid frame, is moved to q + t (v + w x q) with (v, w) the grid frame's body twist over the
sweep before the stamp; in the LiDAR frame the same motion reads p + t (v_L + w_L x p).
"""

from dataclasses import replace
import math
import sys

from bag_messages import odometry, TYPES, yaw_quaternion
from configs import small_config
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.geometry.ego_motion import (BASELINE_S, body_twist, deskew_motion,
                                                     pose_at, twist_at)
from jax_perception_node.tools.cloud_messages import point_cloud
import numpy as np
import pytest
from reference import quat_matrix, voxelize_ref

T0 = 1_700_000_000 * 10**9
# A yawed, pitched and offset LiDAR: the LiDAR-frame twist differs from the grid frame's.
MOUNT = {'lidar.rotation_xyzw': [0.05, -0.03, 0.38, 0.92], 'lidar.translation': [1.2, -0.4, 1.8]}


def planar_pose(t, v, omega):
    """Pose (4 x 4) at t of a body starting at the origin with constant forward v and yaw rate."""
    yaw = omega * t
    if abs(omega) < 1e-12:
        x, y = v * t, 0.0
    else:
        x, y = v / omega * math.sin(yaw), v / omega * (1.0 - math.cos(yaw))
    m = np.eye(4)
    m[:2, :2] = [[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]]
    m[:2, 3] = x, y
    return m


def unit_quaternion(q):
    q = np.asarray(q, np.float64)
    return list(q / np.linalg.norm(q))


@pytest.fixture(scope='module')
def lidar_pipe(warmed):
    mount = dict(MOUNT, **{'lidar.rotation_xyzw': unit_quaternion(MOUNT['lidar.rotation_xyzw'])})
    return warmed(small_config(cameras=0, **mount))


def test_body_twist_of_a_constant_turn_is_exact():
    v, omega = 20.0, 0.5
    twist = body_twist(planar_pose(3.0, v, omega), planar_pose(3.1, v, omega), 0.1)
    np.testing.assert_allclose(twist, [v, 0, 0, 0, 0, omega], atol=1e-9)
    # Straight at 25 m/s: the logarithm's small-angle branch.
    np.testing.assert_allclose(body_twist(planar_pose(0, 25, 0), planar_pose(0.1, 25, 0), 0.1),
                               [25, 0, 0, 0, 0, 0], atol=1e-9)


def test_twist_at_takes_the_baseline_before_the_stamp_and_needs_both_poses():
    class Poses:
        def __init__(self, known):
            self.known, self.asked = known, []

        def pose_at(self, stamp):
            self.asked.append(stamp)
            return planar_pose(stamp / 1e9, 10.0, 0.2) if stamp in self.known else None

    stamp = 2_000_000_000
    before = stamp - int(BASELINE_S * 1e9)
    poses = Poses({stamp, before})
    np.testing.assert_allclose(twist_at(poses, stamp), [10, 0, 0, 0, 0, 0.2], atol=1e-9)
    assert sorted(poses.asked) == [before, stamp]
    assert twist_at(Poses({stamp}), stamp) is None
    assert twist_at(Poses({before}), stamp) is None


def test_twist_at_holds_the_newest_twist_for_a_stamp_at_most_the_lead_after_it():
    class Poses:            # poses up to ``newest``, none after
        def __init__(self, newest):
            self.newest = newest

        def pose_at(self, stamp):
            known = self.newest is not None and stamp <= self.newest
            return planar_pose(stamp / 1e9, 10.0, 0.2) if known else None

        def newest_ns(self):
            return self.newest

    newest, lead = 2_000_000_000, 200_000_000
    poses = Poses(newest)
    for ahead in (1, 50_000_000, lead):
        np.testing.assert_allclose(twist_at(poses, newest + ahead, lead),
                                   [10, 0, 0, 0, 0, 0.2], atol=1e-9)
    assert twist_at(poses, newest + lead + 1, lead) is None
    assert twist_at(poses, newest + 1) is None          # no lead: no pose at the stamp, none
    assert twist_at(Poses(None), newest, lead) is None  # no pose at all
    # The pose itself, carried forward at that twist: exact for a constant turn.
    for ahead in (1, 30_000_000, lead):
        np.testing.assert_allclose(pose_at(poses, newest + ahead, lead),
                                   planar_pose((newest + ahead) / 1e9, 10.0, 0.2), atol=1e-9)
    np.testing.assert_allclose(pose_at(poses, newest - 5, lead),
                               planar_pose((newest - 5) / 1e9, 10.0, 0.2), atol=1e-12)
    assert pose_at(poses, newest + lead + 1, lead) is None
    assert pose_at(poses, newest + 1) is None
    assert pose_at(Poses(None), newest, lead) is None


def test_lidar_frame_motion_moves_a_world_point_back_to_where_it_was_at_the_stamp():
    """A fixed world point seen t s later from a mounted LiDAR, moved by the L-frame twist."""
    rng = np.random.default_rng(3)
    rotation = quat_matrix(unit_quaternion(MOUNT['lidar.rotation_xyzw']))
    mount = np.eye(4)
    mount[:3, :3], mount[:3, 3] = rotation, MOUNT['lidar.translation']
    v, omega, t = 15.0, 0.4, 0.05
    motion = deskew_motion(np.array([v, 0, 0, 0, 0, omega]), rotation,
                           np.asarray(MOUNT['lidar.translation']))
    world = np.c_[rng.uniform(-40, 40, (50, 3)), np.ones(50)]
    at_stamp = (np.linalg.inv(mount) @ world.T).T[:, :3]
    later = (np.linalg.inv(planar_pose(t, v, omega) @ mount) @ world.T).T[:, :3]
    v_l, w_l = motion[6:9].astype(np.float64), motion[9:12].astype(np.float64)
    moved = later + t * (v_l + np.cross(w_l, later))
    # First order in t: the rest is t^2 w^2 |p| / 2 and smaller (under 2 cm at 40 m).
    assert np.abs(moved - at_stamp).max() < 0.02
    assert np.abs(later - at_stamp).max() > 0.7       # undeskewed: the full 0.75 m and more


def test_kernel_deskew_matches_the_contract_and_compiles_nothing(lidar_pipe):
    """Targets clear of cell edges, moved back by the inverse of the contract's motion."""
    cfg = lidar_pipe.cfg
    g = cfg.grid
    rng = np.random.default_rng(11)
    n = 900
    cells = np.stack([rng.integers(0, g.height, n), rng.integers(0, g.width, n)], 1)
    target = np.c_[g.x_min + (cells + rng.uniform(0.1, 0.9, (n, 2))) * g.resolution,
                   rng.uniform(g.z_min + 0.1, g.z_max - 0.1, n)]     # grid frame, at the stamp
    times = rng.uniform(0.0, 0.1, n)
    twist = np.array([18.0, 0.6, 0.1, 0.02, -0.03, 0.45])
    v, w = twist[:3], twist[3:]
    # Invert q' = q + t (v + w x q) per point: (I + t [w]x) q = q' - t v.
    skew = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
    measured = np.stack([np.linalg.solve(np.eye(3) + ti * skew, qi - ti * v)
                         for qi, ti in zip(target, times)])
    rotation = quat_matrix(cfg.lidar.rotation_xyzw)
    translation = np.asarray(cfg.lidar.translation)
    intensity = rng.uniform(0, 255, n)
    cloud = np.c_[(measured - translation) @ rotation, intensity].astype(np.float32)
    want = voxelize_ref(np.c_[(target - translation) @ rotation, intensity], cfg)
    smeared = voxelize_ref(cloud, cfg)
    motion = deskew_motion(twist, rotation, translation)
    before = compile_count()
    out = lidar_pipe.process(cloud, times=times.astype(np.float32), motion=motion)
    assert out.deskewed
    np.testing.assert_allclose(out.features[..., :6], want, rtol=1e-4, atol=1e-4)
    assert (smeared[..., 0] != want[..., 0]).sum() > 100     # the motion mattered
    # Without motion, or without times, the same cloud is left as measured.
    for kwargs in ({'times': times.astype(np.float32)}, {'motion': motion}):
        plain = lidar_pipe.process(cloud, **kwargs)
        assert not plain.deskewed
        np.testing.assert_allclose(plain.features[..., :6], smeared, rtol=1e-4, atol=1e-4)
    assert compile_count() == before


def test_bogus_times_count_as_the_stamp(lidar_pipe):
    cfg = lidar_pipe.cfg
    rng = np.random.default_rng(2)
    cloud = np.c_[rng.uniform(-5, 5, (200, 3)), rng.uniform(0, 9, 200)].astype(np.float32)
    times = np.full(200, np.nan, np.float32)
    times[::3], times[1::3] = 5.0, -np.inf       # beyond a sweep, or no number at all
    motion = deskew_motion(np.array([20.0, 0, 0, 0, 0, 0.3]),
                           quat_matrix(cfg.lidar.rotation_xyzw), np.asarray(cfg.lidar.translation))
    out = lidar_pipe.process(cloud, times=times, motion=motion)
    np.testing.assert_allclose(out.features[..., :6], voxelize_ref(cloud, cfg), rtol=1e-4,
                               atol=1e-4)


def test_accumulation_deskews_in_the_lidar_frame_alike(warmed, lidar_pipe):
    """The ring path moves points in the LiDAR frame: the same BEV as the plain path."""
    cfg = lidar_pipe.cfg
    acc = warmed(replace(cfg, accumulation=replace(cfg.accumulation, num_sweeps=2)))
    rng = np.random.default_rng(4)
    cloud = np.c_[rng.uniform(-9, 9, (700, 3)), rng.uniform(0, 9, 700)].astype(np.float32)
    times = rng.uniform(0, 0.1, 700).astype(np.float32)
    motion = deskew_motion(np.array([20.0, 0.5, 0, 0, 0, 0.4]),
                           quat_matrix(cfg.lidar.rotation_xyzw), np.asarray(cfg.lidar.translation))
    acc.reset_sweeps()
    ring = acc.process(cloud, stamp_ns=T0, pose=np.eye(4), times=times, motion=motion)
    plain = lidar_pipe.process(cloud, times=times, motion=motion)
    # Both first order in t; float32 in two frames: equal to float32 noise at cell level.
    mismatch = ring.features[..., 0] != plain.features[..., 0]
    assert ring.deskewed and mismatch.sum() <= 2 and ring.features[..., 0].sum() > 80
    for channel in range(6):
        np.testing.assert_allclose(ring.features[..., channel][~mismatch],
                                   plain.features[..., channel][~mismatch], atol=1e-3)
    measured = lidar_pipe.process(cloud).features[..., 0]
    assert (measured != plain.features[..., 0]).sum() > 20       # the motion mattered


def timed_cloud(points, times, stamp_ns, field='time'):
    """PointCloud2 with x, y, z, intensity and a float32 per-point time (Velodyne style)."""
    data = np.zeros(len(points), [('xyzi', '<f4', 4), (field, '<f4')])
    data['xyzi'], data[field] = points, times
    fields = [('x', 0, 7), ('y', 4, 7), ('z', 8, 7), ('intensity', 12, 7), (field, 16, 7)]
    assert sys.byteorder == 'little'
    return point_cloud(TYPES, data, fields, len(points), 20, stamp_ns, 'lidar')


STAMP = T0 + 500_000_000      # of the clouds below


def timed_scene(lidar_pipe):
    """
    Return a frame path that deskews (lidar.time_field 'time'), a cloud, its times and its BEV.

    The BEV is the NumPy reference of the cloud deskewed at 20 m/s straight ahead (``drive``).
    """
    cfg = replace(lidar_pipe.cfg, lidar_timing=replace(lidar_pipe.cfg.lidar_timing,
                                                       field='time'))
    rng = np.random.default_rng(8)
    cloud = np.c_[rng.uniform(-9, 9, (500, 3)), rng.uniform(0, 9, 500)].astype(np.float32)
    times = rng.uniform(0, 0.1, 500).astype(np.float32)
    rotation, translation = quat_matrix(cfg.lidar.rotation_xyzw), np.asarray(
        cfg.lidar.translation)
    grid = cloud[:, :3].astype(np.float64) @ rotation.T + translation
    grid[:, 0] += times * 20.0
    want = voxelize_ref(np.c_[(grid - translation) @ rotation, cloud[:, 3]], cfg)
    return FramePath(cfg, lidar_pipe), cloud, times, want


def drive(path, first: int, last: int) -> None:
    """
    Give ``path`` odometry every 50 ms from T0 + first * 50 ms to T0 + last * 50 ms.

    20 m/s straight ahead, yawed by 30 degrees in map: the body twist is (20, 0).
    """
    heading = math.radians(30)
    for k in range(first, last + 1):
        t = k * 0.05
        position = (20 * t * math.cos(heading), 20 * t * math.sin(heading), 0.0)
        path.add_odometry(odometry(T0 + int(t * 1e9), position, yaw_quaternion(30.0)))


def test_frame_path_deskews_with_odometry_and_says_when_it_cannot(lidar_pipe):
    path, cloud, times, want = timed_scene(lidar_pipe)
    # No odometry yet: processed as measured, and said so.
    frame = path.process(timed_cloud(cloud, times, STAMP))
    assert frame.without_motion and not frame.deskewed
    drive(path, 0, 12)
    frame = path.process(timed_cloud(cloud, times, STAMP))
    assert frame.deskewed and not frame.without_motion
    np.testing.assert_allclose(frame.result.features[..., :6], want, rtol=1e-4, atol=1e-4)
    # A cloud without the time field: processed as measured, its fields named.
    plain = path.process(timed_cloud(cloud, times, STAMP, field='offset'))
    assert not plain.deskewed and plain.fields_without_time == ('x', 'y', 'z', 'intensity',
                                                                'offset')
    # Deskew off (live): nothing read, nothing moved, nothing to say.
    path.update(replace(path.cfg, lidar_timing=replace(path.cfg.lidar_timing, deskew=False)))
    off = path.process(timed_cloud(cloud, times, STAMP))
    assert not off.deskewed and not off.without_motion and not off.fields_without_time


def test_times_read_with_the_wrong_reference_are_not_a_sweep_and_said_so(lidar_pipe,
                                                                         monkeypatch):
    """
    A driver's absolute times read as offsets (``time_reference: stamp``) lie ~1.7e9 s away.

    No point can be moved by them (the kernel takes |t| >= 1 s as 0): the cloud is processed
    as measured, not counted as deskewed, and the warning names the two parameters to check.
    """
    from types import SimpleNamespace
    from jax_perception_node.ros import frame_warnings
    path, cloud, times, want = timed_scene(lidar_pipe)
    drive(path, 0, 12)
    measured = voxelize_ref(cloud, path.cfg)
    # Found by an independent review: ns read as us (a few times near the stamp, the rest moved
    # tens of metres), a point clock 0.45 s from the header's, a field left at 0.
    for misread in (times + np.float32(STAMP / 1e9), times - np.float32(STAMP / 1e9),
                    times * np.float32(1e9), np.full_like(times, np.nan), times * np.float32(1e3),
                    times + np.float32(0.45), np.zeros_like(times)):
        frame = path.process(timed_cloud(cloud, misread, STAMP))
        assert not frame.deskewed and not frame.without_motion
        assert frame.fields_without_time == ('x', 'y', 'z', 'intensity', 'time')
        np.testing.assert_allclose(frame.result.features[..., :6], measured, rtol=1e-4,
                                   atol=1e-4)
    lines, clock = [], [100.0]
    monkeypatch.setattr(frame_warnings.time, 'monotonic', lambda: clock[0])
    log, throttle = SimpleNamespace(info=lines.append, warning=lines.append), \
        frame_warnings.LogThrottle()
    line = ('point cloud "time" times (s, offsets from the stamp) are no sweep\'s (not 90% of '
            'them within 0.3 s of the stamp, or all equal): check lidar.time_reference and '
            'lidar.time_unit, or that the driver fills it; not deskewed')
    # Once in 10 s, throttled before the logger is called (rclpy's throttle inspects the
    # caller's source on every call, ~0.25 ms a frame).
    for step in (0.0, 0.5, 9.0, 0.5):
        clock[0] += step
        frame_warnings.warn_frame(log, path.cfg, frame, throttle)
    assert lines == [line, line]
    # Nine in ten of the sampled times within the sweep are enough (the stride is 9 here: 1 of
    # the 56 sampled is not); one in ten is not (12 of 56).
    some = np.where(np.arange(len(times)) % 128 == 0, np.float32(5.0), times)
    assert path.process(timed_cloud(cloud, some, STAMP)).deskewed
    more = np.where(np.arange(len(times)) % 45 == 0, np.float32(5.0), times)
    assert not path.process(timed_cloud(cloud, more, STAMP)).deskewed


def test_a_cloud_stamped_after_the_newest_odometry_is_deskewed_with_its_twist(lidar_pipe):
    """
    A driver stamping at the sweep's end publishes before the odometry of that moment arrives.

    Up to accumulation.max_odometry_gap_s (0.2 s) after the newest odometry, the cloud is
    deskewed with the twist of the last 0.1 s of odometry; further, it is not, and said so.
    """
    path, cloud, times, want = timed_scene(lidar_pipe)
    assert path.cfg.accumulation.max_odometry_gap_s == 0.2
    drive(path, 0, 5)               # the newest 0.25 s before the stamp
    frame = path.process(timed_cloud(cloud, times, STAMP))
    assert frame.without_motion and not frame.deskewed
    drive(path, 6, 9)               # the newest 0.05 s before the stamp
    frame = path.process(timed_cloud(cloud, times, STAMP))
    assert frame.deskewed and not frame.without_motion
    np.testing.assert_allclose(frame.result.features[..., :6], want, rtol=1e-4, atol=1e-4)


def test_a_twist_is_held_past_the_newest_pose_for_a_sweep_whatever_the_gap_allowed(lidar_pipe):
    """
    A gap raised for a slow map -> odom (users.md) does not hold an old twist to the stamp.

    Found by an independent review: at max_odometry_gap_s 1.5 a twist 0.9 s old moved points
    by up to 1.95 m while braking, reported as deskewed.
    """
    path, cloud, times, _ = timed_scene(lidar_pipe)
    accumulation = replace(path.cfg.accumulation, max_odometry_gap_s=1.5)
    path.update(replace(path.cfg, accumulation=accumulation))
    assert path.odometry.max_gap_ns == 1_500_000_000
    drive(path, 0, 5)               # the newest 0.25 s before the stamp
    frame = path.process(timed_cloud(cloud, times, STAMP))
    assert frame.without_motion and not frame.deskewed
