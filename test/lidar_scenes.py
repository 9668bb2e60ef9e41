"""Three LiDARs on a small vehicle, and grid-frame points away from every cell edge (tests)."""

import numpy as np
from reference import quat_matrix

NAMES = ('top', 'left', 'right')
# Poses in the grid frame: a rolled and yawed side LiDAR each, the top one raised.
POSES = {
    'top': ((0.5, 0.0, 1.5), (0.0, 0.0, 0.0, 1.0)),
    'left': ((1.0, 0.75, 0.5), (0.1830127, 0.1830127, 0.6830127, 0.6830127)),
    'right': ((1.0, -0.75, 0.5), (-0.1830127, 0.1830127, -0.6830127, 0.6830127)),
}


def base_link_points(rng, n: int, cfg) -> np.ndarray:
    """Return float32 (n, 4) in the grid frame, 0.1 of a cell from any cell or z edge."""
    g = cfg.grid
    rows, cols = rng.integers(0, g.height, n), rng.integers(0, g.width, n)
    offsets = rng.uniform(0.1, 0.9, (n, 2)) * g.resolution
    x = g.x_min + rows * g.resolution + offsets[:, 0]
    y = g.y_min + cols * g.resolution + offsets[:, 1]
    z = rng.uniform(g.z_min + 0.1, g.z_max - 0.1, n)
    return np.stack([x, y, z, rng.uniform(0, 100, n)], axis=1)


def into_sensor(points: np.ndarray, name: str) -> np.ndarray:
    """Move grid-frame points into LiDAR ``name``'s frame (float64 inverse pose, float32)."""
    translation, xyzw = POSES[name]
    rotation = quat_matrix(np.asarray(xyzw) / np.linalg.norm(xyzw))
    xyz = (points[:, :3] - np.asarray(translation)) @ rotation     # R^T (p - t), row-wise
    return np.concatenate([xyz, points[:, 3:]], axis=1).astype(np.float32)
