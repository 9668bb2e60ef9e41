"""
Multi-sweep scenes and their expected BEV: an independent NumPy voxelization of the union.

Poses are 4 x 4 float64 (base_link in map); clouds float32 (N, 4) in the LiDAR frame; the
reference ``accumulate_ref`` follows the contract (docs/design.md) in float64.
"""

import math

from bag_messages import odometry, yaw_quaternion
from configs import small_config
import numpy as np
from reference import quat_matrix

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


def accumulating_config():
    """small_config() with the front camera and SWEEPS sweeps per frame."""
    return small_config(1, **{'accumulation.num_sweeps': SWEEPS})


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
