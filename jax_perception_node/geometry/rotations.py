"""Rotations and rigid poses from unit quaternions, float64: the one set of formulas used."""

from dataclasses import dataclass
import math

import numpy as np

# A quaternion within this of unit norm is normalised; further off it is refused (a typo).
UNIT_NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Pose:
    """Rigid transform from a sensor frame into the grid frame: p_grid = R p_sensor + t."""

    translation: tuple[float, float, float]
    rotation_xyzw: tuple[float, float, float, float]   # unit quaternion

    def rotation_matrix(self) -> np.ndarray:
        """(3, 3) float64 rotation matrix R."""
        return quaternion_matrix(self.rotation_xyzw)


def checked_norm(q, name: str) -> float:
    """
    Return the norm of quaternion ``q``; ValueError naming ``name`` beyond the tolerance.

    The one rule for every pose given by hand (parameters, the Python API): within
    ``UNIT_NORM_TOLERANCE`` of 1 the caller normalises, further off it is a typo.
    """
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > UNIT_NORM_TOLERANCE:
        raise ValueError(f'{name}: not a unit quaternion (norm {norm:.4f})')
    return norm


def quaternion_matrix(q) -> np.ndarray:
    """
    Return the float64[3, 3] rotation matrix of a unit quaternion ``q`` = (x, y, z, w).

    ``q`` is used as given, not normalised here: the parameters, the Python API's
    ``set_calibration`` and the odometry checks normalise it (a non-unit ``q`` gives a matrix
    that is no rotation).
    """
    x, y, z, w = (float(v) for v in q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ], np.float64)


def matrix_quaternion(rotation: np.ndarray) -> np.ndarray:
    """
    Return the unit quaternion (x, y, z, w), w >= 0, of a float64[3, 3] rotation matrix.

    Shepperd's method: the largest of the four diagonal combinations is the divisor, so the
    result is accurate for every rotation (no division by a small number).
    """
    m = np.asarray(rotation, np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    candidates = (trace, m[0, 0], m[1, 1], m[2, 2])
    largest = int(np.argmax(candidates))
    if largest == 0:
        s = 2.0 * math.sqrt(1.0 + trace)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, s / 4]
    else:
        i = largest - 1
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(max(1.0 + m[i, i] - m[j, j] - m[k, k], 0.0))
        q = [0.0, 0.0, 0.0, (m[k, j] - m[j, k]) / s]
        q[i], q[j], q[k] = s / 4, (m[j, i] + m[i, j]) / s, (m[k, i] + m[i, k]) / s
    q = np.array(q, np.float64)
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def slerp(q0: np.ndarray, q1: np.ndarray, fraction: float) -> np.ndarray:
    """Spherical linear interpolation of unit quaternions (x, y, z, w), the shorter arc."""
    dot = float(np.dot(q0, q1))
    if dot < 0.0:       # q and -q are the same rotation: take the shorter way round
        q1, dot = -q1, -dot
    if dot > 0.9995:    # nearly equal: the linear formula is exact to rounding and stable
        q = q0 + fraction * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = math.acos(min(dot, 1.0))
    s = math.sin(theta)
    return (math.sin((1.0 - fraction) * theta) / s) * q0 + (math.sin(fraction * theta) / s) * q1


def pose_matrix(rotation: np.ndarray, translation) -> np.ndarray:
    """Return the float64[4, 4] homogeneous transform of a rotation matrix and a translation."""
    m = np.eye(4)
    m[:3, :3] = rotation
    m[:3, 3] = translation
    return m


def transform_matrix(translation, quaternion) -> np.ndarray:
    """Return the float64[4, 4] homogeneous transform of a translation and unit quaternion."""
    return pose_matrix(quaternion_matrix(quaternion), translation)


def interpolate_pose(t0: np.ndarray, q0: np.ndarray, t1: np.ndarray, q1: np.ndarray,
                     fraction: float) -> np.ndarray:
    """Return the float64[4, 4] pose ``fraction`` of the way: translation linear, slerp."""
    return transform_matrix(t0 + fraction * (t1 - t0), slerp(q0, q1, fraction))
