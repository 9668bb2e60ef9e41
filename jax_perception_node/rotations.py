"""Rotations from unit quaternions, float64, the one formula every module uses."""

import numpy as np


def quaternion_matrix(q) -> np.ndarray:
    """
    Return the float64[3, 3] rotation matrix of a unit quaternion ``q`` = (x, y, z, w).

    ``q`` is used as given, not normalised here: the parameters and the odometry checks
    normalise it (a non-unit ``q`` gives a matrix that is no rotation).
    """
    x, y, z, w = (float(v) for v in q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ], np.float64)
