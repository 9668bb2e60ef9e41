"""
Ego motion for multi-sweep accumulation: an odometry buffer and relative sweep poses.

An odometry sample is the pose of the grid frame (``child_frame_id``) in a fixed frame
(``header.frame_id``), as nav_msgs/Odometry carries it. Messages are read by attribute, so
rclpy and rosbags messages both work; nothing here imports ROS. All arithmetic is float64.

``OdometryBuffer.pose_at(stamp)`` interpolates between the two samples bracketing a stamp
(position linear, orientation slerp) when they are at most ``max_gap_s`` apart; otherwise there
is no pose for that stamp. ``sweep_transform`` composes, for an earlier sweep, the transform
from its LiDAR frame into the current grid frame (``kernel_inputs.SweepHistory`` uses it for the
pipeline's device ring of earlier sweeps). ``TransformPoses`` gives the same ``pose_at``
from a TransformBuffer (``accumulation.pose_source: tf``), so the frame path does not care
which source the ego pose comes from.

Bounds (``read_odometry``): positions are float64 and only their differences reach the float32
kernels, so large map coordinates (UTM, ECEF) are fine; a coordinate beyond
``MAX_POSITION_M`` is no place on Earth or near it and is refused, as is a stamp whose
nanoseconds are not in [0, 1e9) or whose seconds are negative.
"""

from bisect import bisect_left
from collections import deque
import math

import numpy as np

from .rotations import interpolate_pose, transform_matrix
from .stamps import NS_PER_S, stamp_fields_error, stamp_ns
from .transforms import CLOCK_JUMP_S, TransformError

HISTORY = 200               # samples kept (4 s at 50 Hz)
MIN_QUATERNION_NORM = 1e-6  # below this an orientation carries no direction at all
MAX_POSITION_M = 1e8        # |x|, |y|, |z| in the fixed frame: 2.5 times round the Earth
# A newer sample further from the newest than a vehicle gets at this speed, plus the slack, is
# a new timeline: the ego teleported (a bag looped with its stamps moved on, a localization
# re-initialised), and no motion can be measured across it.
MAX_SPEED_MPS = 100.0
JUMP_SLACK_M = 0.5
# The same for the heading: no vehicle turns faster (a robot spinning in place reaches 2-3).
MAX_TURN_RATE_RPS = 3.0
JUMP_SLACK_RAD = 0.2
# Over at least this long: a driver stamping on receipt can stamp one sample up to a period
# late, its next one on time, and at 30 m/s the two are 0.6 m apart 0.5 ms apart.
JUMP_MIN_DT_S = 0.1


class OdometryError(ValueError):
    """An odometry message that cannot be used; the message names the field and the problem."""


class Sample:
    """One pose of the grid frame in the fixed frame: position float64[3], unit quaternion."""

    __slots__ = ('stamp_ns', 'position', 'quaternion')

    def __init__(self, stamp: int, position: np.ndarray, quaternion: np.ndarray):
        self.stamp_ns, self.position, self.quaternion = stamp, position, quaternion


def plausible_motion(before: np.ndarray, after: np.ndarray, seconds: float) -> bool:
    """
    Return whether a body can have moved from pose ``before`` to ``after`` in ``seconds``.

    4 x 4 poses in one fixed frame. No further than ``MAX_SPEED_MPS`` and no more turned than
    ``MAX_TURN_RATE_RPS`` allow over the time (at least ``JUMP_MIN_DT_S``), plus the slacks:
    anything more is a jump to another timeline (a bag loop, a re-initialised localization, a
    teleported simulator), across which no motion can be measured.
    """
    distance = float(np.linalg.norm(after[:3, 3] - before[:3, 3]))
    cos = (float(np.trace(before[:3, :3].T @ after[:3, :3])) - 1.0) / 2.0
    return _within_reach(distance, math.acos(min(1.0, max(-1.0, cos))), seconds)


def _within_reach(distance: float, angle: float, seconds: float) -> bool:
    """Return whether ``distance`` (m) and ``angle`` (rad) are reachable in ``seconds``."""
    dt = max(abs(seconds), JUMP_MIN_DT_S)
    return (distance <= MAX_SPEED_MPS * dt + JUMP_SLACK_M
            and angle <= MAX_TURN_RATE_RPS * dt + JUMP_SLACK_RAD)


def read_odometry(msg, child_frame_id: str | None = None) -> Sample:
    """
    Check and convert a nav_msgs/Odometry message into a Sample; raises OdometryError.

    Refused, naming the field: a ``child_frame_id`` other than ``child_frame_id`` (when both
    are set; a leading '/' is dropped from both, as TF lookups drop it); a ``header.stamp``
    with negative seconds or nanoseconds outside [0, 1e9); a position that is not finite or
    has a coordinate beyond ``MAX_POSITION_M``; an orientation that is not finite or whose
    norm is ~0 or overflows (others are normalised).
    """
    if (child_frame_id and msg.child_frame_id
            and msg.child_frame_id.lstrip('/') != child_frame_id.lstrip('/')):
        raise OdometryError(f'child_frame_id is {msg.child_frame_id!r}, the grid frame is '
                            f'{child_frame_id!r}')
    malformed = stamp_fields_error(msg.header.stamp)
    if malformed is not None:
        raise OdometryError(malformed)
    pose = msg.pose.pose
    p, o = pose.position, pose.orientation
    # Python floats, not NumPy: checked at the odometry's rate, 3 and 4 values.
    position = _floats('pose.position', p.x, p.y, p.z)
    quaternion = _floats('pose.orientation', o.x, o.y, o.z, o.w)
    if not all(map(math.isfinite, position)):
        raise OdometryError(f'pose.position is not finite: {position}')
    if max(map(abs, position)) > MAX_POSITION_M:
        raise OdometryError(f'pose.position {position} m: a coordinate is beyond '
                            f'{MAX_POSITION_M:.0e} m')
    if not all(map(math.isfinite, quaternion)):
        raise OdometryError(f'pose.orientation is not finite: {quaternion}')
    norm = math.sqrt(sum(v * v for v in quaternion))     # inf when the squares overflow
    if not MIN_QUATERNION_NORM <= norm < math.inf:
        raise OdometryError(f'pose.orientation has norm {norm:.3g}: not a rotation')
    return Sample(stamp_ns(msg.header.stamp), np.array(position), np.array(quaternion) / norm)


def _floats(field: str, *values) -> list[float]:
    """Return ``values`` as Python floats; OdometryError naming ``field`` for one that is none."""
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError, OverflowError):
        raise OdometryError(f'{field} is not numbers: {list(values)!r}') from None


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

    ``add`` refuses bad messages with OdometryError (nothing is stored). A sample up to
    ``CLOCK_JUMP_S`` (1 s) older than the newest is a late one (two publishers, a reordering
    relay): it goes in at its place by stamp, as tf2 stores a late transform. Further back the
    clock jumped (a bag loop, a restarted simulator): the buffer is cleared, so poses of the
    old timeline never mix with the new one, and the sample starts the new one (``add``
    returns True), as tf2 clears its buffer on a jump back. So does a newer sample the ego
    cannot have reached (:func:`plausible_motion`: further from the newest than
    ``MAX_SPEED_MPS`` allows over the time between them, at least ``JUMP_MIN_DT_S``, plus
    ``JUMP_SLACK_M``: 10.5 m at least, or turned by more than ``MAX_TURN_RATE_RPS`` allows plus
    ``JUMP_SLACK_RAD``: 0.5 rad at least): a bag looped by a player that moves its stamps on,
    or a localization re-initialised. A stamp
    already buffered is refused, as is a late sample older than a full buffer's oldest.
    """

    def __init__(self, max_gap_s: float, child_frame_id: str | None = None,
                 history: int = HISTORY):
        self.max_gap_ns = int(round(max_gap_s * 1e9))
        self.child_frame_id = child_frame_id
        self._samples: deque[Sample] = deque(maxlen=history)

    def set_max_gap(self, max_gap_s: float) -> None:
        """Change the largest gap between bracketing samples (a live parameter)."""
        self.max_gap_ns = int(round(max_gap_s * 1e9))

    def newest_ns(self) -> int | None:
        """Return the stamp (ns) of the newest sample, None when there is none."""
        return self._samples[-1].stamp_ns if self._samples else None

    def add(self, msg) -> bool:
        """
        Check and buffer a nav_msgs/Odometry message; raises OdometryError.

        Returns True when its stamp went back by more than ``CLOCK_JUMP_S``, or its pose
        jumped, and the buffer was reset (the sample is the first of the new timeline).
        """
        sample = read_odometry(msg, self.child_frame_id)
        samples, stamp = self._samples, sample.stamp_ns
        if not samples or stamp > samples[-1].stamp_ns:
            newest = samples[-1] if samples else None
            # plausible_motion from the samples themselves: the angle between unit
            # quaternions is 2 acos|q1 . q2| (no 4 x 4 matrices at the odometry's rate).
            jumped = newest is not None and not _within_reach(
                math.dist(newest.position, sample.position),
                2.0 * math.acos(min(1.0, abs(float(newest.quaternion @ sample.quaternion)))),
                (stamp - newest.stamp_ns) / NS_PER_S)
            if jumped:
                samples.clear()
            samples.append(sample)
            return jumped
        if samples[-1].stamp_ns - stamp > CLOCK_JUMP_S * NS_PER_S:
            samples.clear()
            samples.append(sample)
            return True
        stamps = [s.stamp_ns for s in samples]
        index = bisect_left(stamps, stamp)
        if stamps[index] == stamp:
            raise OdometryError(f'header.stamp {stamp} ns repeats a buffered sample')
        if len(samples) == samples.maxlen:
            if index == 0:
                raise OdometryError(f'header.stamp {stamp} ns is older than every sample of '
                                    f'the full buffer')
            samples.popleft()
            index -= 1
        samples.insert(index, sample)
        return False

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
            return transform_matrix(before.position, before.quaternion)
        after = samples[index + 1]
        gap = after.stamp_ns - before.stamp_ns
        if gap > self.max_gap_ns:
            return None
        return interpolate_pose(before.position, before.quaternion, after.position,
                                after.quaternion, (stamp - before.stamp_ns) / gap)


class TransformPoses:
    """
    Poses of the grid frame in a fixed frame from a TransformBuffer: OdometryBuffer's interface.

    ``pose_at(stamp)`` is the 4 x 4 pose of ``child_frame_id`` in ``fixed_frame`` at ``stamp``
    (interpolated by the buffer), or None where TF has none, or, as for odometry, where a
    dynamic edge's transforms about the stamp are further apart than ``max_gap_ns`` (tf2
    would interpolate across a bag loop's seam or a localization's outage), or where the
    stamp lies outside a dynamic edge's samples: the buffer's extrapolation allowance would
    hold its newest pose unmoved up to 10 ms past it (0.2 m at 20 m/s), where
    ``ego_motion.pose_at`` carries it forward by the twist.
    """

    def __init__(self, transforms, fixed_frame: str, child_frame_id: str,
                 max_gap_ns: int | None = None):
        """Look up ``child_frame_id`` in ``fixed_frame`` in ``transforms``."""
        self.transforms, self.max_gap_ns = transforms, max_gap_ns
        self.fixed_frame, self.child_frame_id = fixed_frame, child_frame_id

    def pose_at(self, stamp: int) -> np.ndarray | None:
        """Return the 4 x 4 pose at ``stamp`` (ns), or None."""
        try:
            return self.transforms.lookup(self.fixed_frame, self.child_frame_id, stamp,
                                          self.max_gap_ns, tolerance_ns=0)
        except TransformError:
            return None

    def newest_ns(self) -> int | None:
        """Return the newest stamp (ns) with a pose (tf2's latest common time), or None."""
        return self.transforms.latest_ns(self.fixed_frame, self.child_frame_id)
