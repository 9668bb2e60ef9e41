"""
Ego motion for multi-sweep accumulation: an odometry buffer and relative sweep poses.

An odometry sample is the pose of the grid frame (``child_frame_id``) in a fixed frame
(``header.frame_id``), as nav_msgs/Odometry carries it. Messages are read by attribute, so
rclpy and rosbags messages both work; nothing here imports ROS. All arithmetic is float64.

``OdometryBuffer.pose_at(stamp)`` interpolates between the two samples bracketing a stamp
(position linear, orientation slerp) when they are at most ``max_gap_s`` apart; otherwise there
is no pose for that stamp. ``sweep_transform`` composes, for an earlier sweep, the transform
from its LiDAR frame into the current grid frame; ``SweepHistory`` keeps, for the pipeline's
device ring of earlier sweeps, what each slot holds and fills each frame's small inputs.
"""

from collections import deque
import math

import numpy as np

from .stamps import stamp_ns

HISTORY = 200               # samples kept (4 s at 50 Hz)
MIN_QUATERNION_NORM = 1e-6  # below this an orientation carries no direction at all


class OdometryError(ValueError):
    """An odometry message that cannot be used; the message names the field and the problem."""


class Sample:
    """One pose of the grid frame in the fixed frame: position float64[3], unit quaternion."""

    __slots__ = ('stamp_ns', 'position', 'quaternion')

    def __init__(self, stamp: int, position: np.ndarray, quaternion: np.ndarray):
        self.stamp_ns, self.position, self.quaternion = stamp, position, quaternion


def read_odometry(msg, child_frame_id: str | None = None) -> Sample:
    """
    Check and convert a nav_msgs/Odometry message into a Sample; raises OdometryError.

    Refused: a non-finite position or orientation, an orientation of norm ~0 (others are
    normalised), a ``child_frame_id`` other than ``child_frame_id`` (when both are set).
    """
    if child_frame_id and msg.child_frame_id and msg.child_frame_id != child_frame_id:
        raise OdometryError(f'child_frame_id is {msg.child_frame_id!r}, the grid frame is '
                            f'{child_frame_id!r}')
    pose = msg.pose.pose
    p, o = pose.position, pose.orientation
    position = np.array([p.x, p.y, p.z], np.float64)
    quaternion = np.array([o.x, o.y, o.z, o.w], np.float64)
    if not np.isfinite(position).all():
        raise OdometryError(f'pose.position is not finite: {position.tolist()}')
    if not np.isfinite(quaternion).all():
        raise OdometryError(f'pose.orientation is not finite: {quaternion.tolist()}')
    norm = float(np.linalg.norm(quaternion))
    if norm < MIN_QUATERNION_NORM:
        raise OdometryError(f'pose.orientation has norm {norm:.3g}: not a rotation')
    return Sample(stamp_ns(msg.header.stamp), position, quaternion / norm)


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


def rotation_matrix(q: np.ndarray) -> np.ndarray:
    """(3, 3) float64 rotation of a unit quaternion (x, y, z, w)."""
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def pose_matrix(rotation: np.ndarray, translation) -> np.ndarray:
    """4 x 4 float64 homogeneous transform from a rotation matrix and a translation."""
    m = np.eye(4)
    m[:3, :3] = rotation
    m[:3, 3] = translation
    return m


def sweep_transform(current: np.ndarray, past: np.ndarray, lidar: np.ndarray) -> np.ndarray:
    """
    Return the 4 x 4 transform from an earlier sweep's LiDAR frame into the current grid frame.

    ``current`` and ``past``: poses of the grid frame in the fixed frame at the two stamps;
    ``lidar``: the LiDAR extrinsic (grid from LiDAR). p_now = current^-1 past lidar p_lidar.
    """
    inverse = np.eye(4)
    inverse[:3, :3] = current[:3, :3].T
    inverse[:3, 3] = -current[:3, :3].T @ current[:3, 3]
    return inverse @ past @ lidar


class OdometryBuffer:
    """
    The last ``history`` odometry samples, in stamp order, and interpolation between them.

    ``add`` refuses bad messages with OdometryError (nothing is stored); a stamp going
    backwards (a bag loop, a restarted simulator) clears the buffer first, so poses of the old
    timeline never mix with the new one, and is refused too; a repeated stamp is refused.
    """

    def __init__(self, max_gap_s: float, child_frame_id: str | None = None,
                 history: int = HISTORY):
        self.max_gap_ns = int(round(max_gap_s * 1e9))
        self.child_frame_id = child_frame_id
        self._samples: deque[Sample] = deque(maxlen=history)

    def __len__(self) -> int:
        return len(self._samples)

    def set_max_gap(self, max_gap_s: float) -> None:
        """Change the largest gap between bracketing samples (a live parameter)."""
        self.max_gap_ns = int(round(max_gap_s * 1e9))

    def reset(self) -> None:
        """Forget every sample."""
        self._samples.clear()

    def add(self, msg) -> None:
        """Check and buffer a nav_msgs/Odometry message; raises OdometryError."""
        sample = read_odometry(msg, self.child_frame_id)
        if self._samples:
            last = self._samples[-1].stamp_ns
            if sample.stamp_ns < last:
                self._samples.clear()
                raise OdometryError(f'header.stamp went backwards ({sample.stamp_ns} after '
                                    f'{last} ns): odometry buffer reset')
            if sample.stamp_ns == last:
                raise OdometryError(f'header.stamp {sample.stamp_ns} ns repeats the previous '
                                    'sample')
        self._samples.append(sample)

    def pose_at(self, stamp: int) -> np.ndarray | None:
        """
        Return the 4 x 4 pose of the grid frame at ``stamp`` (ns), or None.

        A sample at exactly ``stamp`` is used as it is; otherwise the stamp must lie between
        two consecutive samples at most ``max_gap_s`` apart (no extrapolation).
        """
        samples = self._samples
        if not samples or stamp < samples[0].stamp_ns or stamp > samples[-1].stamp_ns:
            return None
        # Newest first: clouds are looked up near the newest odometry.
        for index in range(len(samples) - 1, -1, -1):
            before = samples[index]
            if before.stamp_ns <= stamp:
                break
        if before.stamp_ns == stamp:
            return pose_matrix(rotation_matrix(before.quaternion), before.position)
        after = samples[index + 1]
        gap = after.stamp_ns - before.stamp_ns
        if gap > self.max_gap_ns:
            return None
        fraction = (stamp - before.stamp_ns) / gap
        position = before.position + fraction * (after.position - before.position)
        quaternion = slerp(before.quaternion, after.quaternion, fraction)
        return pose_matrix(rotation_matrix(quaternion), position)


class SweepHistory:
    """
    The host side of the ring of P earlier sweeps: each slot's stamp, pose and real rows.

    ``stage`` fills ``scalars`` int32[1 + P] (the slot the current sweep goes into, then the
    rows to use of each slot) and ``motion`` float32[P, size] (each used slot's transform into
    the current grid frame, row-major rotation then translation, then its lag in seconds) for
    one frame; ``record`` then notes what the frame wrote into its slot.
    """

    def __init__(self, past: int, size: int):
        self.past = past
        self.scalars = np.zeros(1 + past, np.int32)
        self.motion = np.zeros((past, size), np.float32)
        self.reset()

    def reset(self) -> None:
        """Forget every earlier sweep."""
        self._slots: list[tuple[int, np.ndarray | None, int] | None] = [None] * self.past
        self._next = 0

    def stage(self, stamp: int | None, pose: np.ndarray | None, max_age_s: float,
              lidar: np.ndarray) -> int:
        """
        Choose the earlier sweeps for a frame at ``stamp`` with ``pose``; returns sweeps used.

        A slot counts when both it and this frame have a pose and it is 0 < age <= max_age_s
        old. A slot newer than ``stamp`` (time went backwards) empties the history first.
        """
        if stamp is not None and any(s is not None and s[0] > stamp for s in self._slots):
            self.reset()
        self.scalars[:] = 0
        self.scalars[0] = self._next
        self.motion[:] = 0.0
        used = 1
        for index, slot in enumerate(self._slots):
            if slot is None or slot[1] is None or pose is None or stamp is None:
                continue
            age_ns = stamp - slot[0]
            if not 0 < age_ns <= max_age_s * 1e9:
                continue
            moved = sweep_transform(pose, slot[1], lidar)
            self.motion[index, :9] = moved[:3, :3].reshape(-1)
            self.motion[index, 9:12] = moved[:3, 3]
            self.motion[index, 12] = age_ns * 1e-9
            self.scalars[1 + index] = slot[2]
            used += 1
        return used

    def record(self, stamp: int | None, pose: np.ndarray | None, rows: int) -> None:
        """Note the sweep just written into the staged slot (without a stamp: never used)."""
        self._slots[self._next] = None if stamp is None else (stamp, pose, rows)
        self._next = (self._next + 1) % self.past
