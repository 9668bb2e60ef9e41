"""
The ego vehicle's velocity at a cloud's stamp, for deskewing the sweep.

A spinning LiDAR measures its points over a whole revolution (100 ms at 10 Hz) while the
vehicle moves: at 20 m/s the first and last points are 2 m apart in the world. The pose source
(odometry or TF, as for accumulation) gives the grid frame's pose in a fixed frame; the body
twist over the ``BASELINE_S`` before the stamp, taken as constant across the sweep, moves each
point to where it was at the stamp: q_stamp = q + dt (v + w x q), to first order in dt (the
kernel's ``deskew``). The second-order rest is dt^2 / 2 (|w x v| + w^2 |q|): at 20 m/s and
0.5 rad/s of yaw over 0.1 s about 11 cm at 50 m, a quarter of a 0.4 m cell. All arithmetic here
is float64; nothing imports ROS or JAX.
"""

import math

import numpy as np

from .odometry import plausible_motion
from .stamps import NS_PER_S
from .transforms import invert

BASELINE_S = 0.1          # s: the twist is measured over the sweep before the stamp
# The longest a twist is held past the newest pose to a cloud's stamp (ns), whatever
# accumulation.max_odometry_gap_s allows accumulation: a sweep stamped at its end, with room.
MAX_TWIST_LEAD_NS = 200_000_000
# float32[12]: the twist in the grid frame (v 3, w 3), then in the LiDAR frame (v 3, w 3)
MOTION_SIZE = 12
STILL = np.zeros(MOTION_SIZE, np.float32)     # no motion: every point stays where it is


def body_twist(before: np.ndarray, after: np.ndarray, seconds: float) -> np.ndarray:
    """
    Return the constant body twist (v m/s, w rad/s) that moves ``before`` to ``after``.

    ``before``, ``after``: 4 x 4 poses of the body in a fixed frame, ``seconds`` apart. The
    twist is the SE(3) logarithm of the relative pose divided by the time, so it is exact for
    a constant twist; float64[6] in the body frame (for a constant twist, the same at both
    ends).
    """
    relative = invert(before) @ after
    rotation, translation = relative[:3, :3], relative[:3, 3]
    cos = min(1.0, max(-1.0, (np.trace(rotation) - 1.0) / 2.0))
    angle = math.acos(cos)
    skew = (rotation - rotation.T) / 2.0
    if angle < 1e-9:
        w = np.zeros((3, 3))
        v = translation
    else:
        w = skew * (angle / math.sin(angle))
        # V^-1 of the SE(3) exponential: t = V v for unit time.
        w2 = w @ w
        coef = (1.0 - angle * math.sin(angle) / (2.0 * (1.0 - math.cos(angle)))) / angle ** 2
        v = (np.eye(3) - 0.5 * w + coef * w2) @ translation
    omega = np.array([w[2, 1], w[0, 2], w[1, 0]])
    return np.concatenate([v, omega]) / seconds


def deskew_motion(twist: np.ndarray, lidar_rotation: np.ndarray,
                  lidar_translation: np.ndarray) -> np.ndarray:
    """
    Return the kernel's float32[12] motion: the twist in the grid frame, then the LiDAR's.

    ``twist``: float64[6] (v, w) of the grid frame; the LiDAR is mounted at (R, t) in it. A
    point q = R p + t moving as q + dt (v + w x q) moves in the LiDAR frame as
    p + dt (R^T (v + w x t) + (R^T w) x p).
    """
    v, w = twist[:3], twist[3:]
    rt = lidar_rotation.T
    return np.concatenate([v, w, rt @ (v + np.cross(w, lidar_translation)),
                           rt @ w]).astype(np.float32)


def twist_at(poses, stamp_ns: int, lead_ns: int = 0) -> np.ndarray | None:
    """
    Return the body twist over the ``BASELINE_S`` before ``stamp_ns``, or None.

    ``poses``: anything with ``pose_at(stamp_ns) -> 4 x 4 | None`` and ``newest_ns() -> int |
    None`` (``OdometryBuffer``, ``TransformPoses``). When there is no pose at the stamp yet
    but the newest pose is at most ``lead_ns`` older, the twist over the ``BASELINE_S`` before
    that newest pose, taken as constant up to the stamp: a driver that stamps a cloud at the
    end of its sweep publishes it before the odometry of that moment arrives, and the twist
    changes little over a sweep (Autoware's distortion corrector also takes the latest twist).
    None when either end has no pose, or when the two are further apart than the ego can move
    in that time (``odometry.plausible_motion``: TF interpolating across a bag loop's seam, a
    re-initialised localization).
    """
    baseline_ns = int(BASELINE_S * NS_PER_S)
    after = poses.pose_at(stamp_ns)
    if after is None and lead_ns > 0:
        newest = poses.newest_ns()
        if newest is not None and 0 < stamp_ns - newest <= lead_ns:
            stamp_ns, after = newest, poses.pose_at(newest)
    before = None if after is None else poses.pose_at(stamp_ns - baseline_ns)
    if before is None or not plausible_motion(before, after, baseline_ns / NS_PER_S):
        return None
    return body_twist(before, after, baseline_ns / NS_PER_S)


def twist_exp(twist: np.ndarray, seconds: float) -> np.ndarray:
    """
    Return the 4 x 4 motion of a body at constant ``twist`` (v, w, body frame) for ``seconds``.

    The SE(3) exponential, the inverse of ``body_twist``: ``before @ twist_exp(body_twist(before,
    after, s), s)`` is ``after``.
    """
    v, w = twist[:3] * seconds, twist[3:] * seconds
    angle = float(np.linalg.norm(w))
    skew = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    motion = np.eye(4)
    if angle < 1e-9:
        motion[:3, 3] = v
        return motion
    a, b = math.sin(angle) / angle, (1.0 - math.cos(angle)) / angle ** 2
    c = (angle - math.sin(angle)) / angle ** 3
    motion[:3, :3] = np.eye(3) + a * skew + b * skew @ skew
    motion[:3, 3] = (np.eye(3) + b * skew + c * skew @ skew) @ v
    return motion


def pose_at(poses, stamp_ns: int, lead_ns: int = 0) -> np.ndarray | None:
    """
    Return the 4 x 4 pose at ``stamp_ns``, or the newest pose carried forward to it, or None.

    ``poses`` as for ``twist_at``. When there is no pose at the stamp yet but the newest is at
    most ``lead_ns`` older, that pose moved on by the twist of the ``BASELINE_S`` before it,
    held up to the stamp (as deskew holds it): the odometry of a cloud's stamp often arrives a
    few ms after the cloud.
    """
    pose = poses.pose_at(stamp_ns)
    if pose is not None or lead_ns <= 0:
        return pose
    newest = poses.newest_ns()
    if newest is None or not 0 < stamp_ns - newest <= lead_ns:
        return None
    twist = twist_at(poses, newest)
    if twist is None:
        return None
    return poses.pose_at(newest) @ twist_exp(twist, (stamp_ns - newest) / NS_PER_S)
