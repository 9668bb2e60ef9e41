"""
Host-side builders of the kernels' traced inputs: calibration arrays, sweep history.

``calibration_vector`` is the frame function's LiDAR calibration. ``calibration_arrays``
stacks the cameras' calibration (intrinsics, lens model, pose) into the
``lift.CameraCalibration`` the lift geometry takes, once per calibration; it also finds, in
float64, where each lens model stops being monotonic (``monotonic_radius2``). ``SweepHistory``
keeps, for the pipeline's device ring of earlier sweeps, what each slot holds and fills each
frame's small accumulation inputs (``kernels.SweepArgs``). NumPy only: nothing here compiles.
"""

import math
from typing import Sequence

import numpy as np
from numpy.polynomial import Polynomial

from .lift import CameraCalibration, DISTORTION_MODELS, DISTORTION_SIZE
from ..geometry.odometry import plausible_motion, sweep_transform
from ..settings.cameras import DISTORTION_COUNTS
from ..settings.config import CameraConfig, Pose
from ..settings.parameters import ConfigError

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_COEFFICIENTS = {'none': 0, **DISTORTION_COUNTS}    # per DISTORTION_MODELS


def calibration_vector(lidars: tuple[Pose, ...], crop: np.ndarray,
                       grid: np.ndarray) -> np.ndarray:
    """
    Return the frame function's float32[25 + 12 (S - 1)] (``kernels.calibration_size``).

    The first LiDAR's rotation (row-major) and translation, the filter (8), the grid (5), then
    the rotation and translation of each further LiDAR.
    """
    def pose(lidar: Pose) -> list:
        return [lidar.rotation_matrix().reshape(-1), lidar.translation]
    return np.concatenate(pose(lidars[0]) + [crop, grid] + [
        part for lidar in lidars[1:] for part in pose(lidar)]).astype(np.float32)


FAR_RADIUS2 = 1e12     # r^2 beyond which a lens is taken as monotonic (monotonic_radius2)


def monotonic_radius2(model: str, coefficients: Sequence[float]) -> float:
    """
    Return the squared undistorted radius r^2 = x'^2 + y'^2 up to which a lens model is usable.

    That is where the radial mapping stops increasing: beyond it the polynomial folds back
    (OpenCV's does too) and a point far outside the field of view would land inside the image.
    plumb_bob: the smallest r^2 > 0 where d/dr [r (1 + k1 r^2 + k2 r^4 + k3 r^6)] = 0 (the
    tangential terms are left out). rational_polynomial: the same for r N(r^2) / D(r^2) with
    N = 1 + k1 s + k2 s^2 + k3 s^3 and D = 1 + k4 s + k5 s^2 + k6 s^3, or the smallest root of
    D if that comes first (the mapping's pole). equidistant: the smallest theta > 0 where
    d/dtheta [theta (1 + k1 theta^2 + .. + k4 theta^8)] = 0, as r^2 = tan^2(theta), if below
    90 degrees. ``inf`` when the mapping never turns (none, all-zero coefficients).
    """
    c = [float(v) for v in coefficients]
    if model in ('plumb_bob', 'rational_polynomial'):
        k1, k2, _, _, k3, *rest = c
        # In s = r^2, lowest power first: d/dr [r N / D] = (N D + 2 s (N' D - N D')) / D^2.
        numerator = Polynomial([1.0, k1, k2, k3])
        denominator = Polynomial([1.0, *rest] if rest else [1.0])
        derivative = (numerator * denominator + Polynomial([0.0, 2.0]) * (
            numerator.deriv() * denominator - numerator * denominator.deriv()))
        return min(_smallest_positive_root(derivative.coef),
                   _smallest_positive_root(denominator.coef))
    if model == 'equidistant':
        k1, k2, k3, k4 = c
        turn = _smallest_positive_root([1.0, 3 * k1, 5 * k2, 7 * k3, 9 * k4])  # t = theta^2
        theta = math.sqrt(turn)
        return math.tan(theta) ** 2 if theta < math.pi / 2 else math.inf
    return math.inf


def _smallest_positive_root(ascending: Sequence[float]) -> float:
    """Return the smallest real root s > 0 of a polynomial with constant term 1 (or inf)."""
    # Solved in u = 1 / s: the coefficients lowest power first are the polynomial in u highest
    # power first, led by the constant 1. np.roots divides by the leading coefficient, and a
    # tiny k (a subnormal k3 from a CameraInfo) overflowed its companion matrix; in u, the
    # small roots that matter here are the large ones, found to full precision. Roots within
    # 1e-12 of u = 0 (k = 0 puts one at 0; a tiny k puts them where the eigenvalues' error,
    # ~1e-16, decides their sign) turn beyond s = 1e12, r = 1e6 (89.99994 degrees off axis):
    # never, for any camera.
    inverse = np.roots(np.asarray(ascending, np.float64))
    roots = 1.0 / inverse[np.abs(inverse) > 1.0 / FAR_RADIUS2]
    real = roots.real[(np.abs(roots.imag) <= 1e-9 * np.maximum(1.0, np.abs(roots.real)))
                      & (roots.real > 0)]
    return float(real.min()) if real.size else math.inf


def calibration_arrays(cameras: Sequence[CameraConfig]) -> CameraCalibration:
    """
    Stack camera calibrations for the lift (NumPy arrays, N = ``len(cameras)``, may be 0).

    Args
    ----
    cameras: the cameras' configs, in the pipeline's order.

    Returns
    -------
    CameraCalibration: intrinsics float32[N, 4] (fx, fy, cx, cy in feature-map pixels),
    distortion_model int32[N], distortion float32[N, 8] (the model's coefficients, then 0;
    zeros for none), max_radius2 float32[N] (``monotonic_radius2``), rotation
    float32[N, 3, 3] and translation float32[N, 3] (m), with p_grid = R p_optical + t.

    Raises
    ------
    ConfigError: an unknown model or the wrong number of coefficients, naming the camera.

    """
    n = len(cameras)
    arrays = CameraCalibration(
        intrinsics=np.zeros((n, 4), np.float32),
        distortion_model=np.zeros(n, np.int32),
        distortion=np.zeros((n, DISTORTION_SIZE), np.float32),
        max_radius2=np.zeros(n, np.float32),
        rotation=np.zeros((n, 3, 3), np.float32),
        translation=np.zeros((n, 3), np.float32))
    for k, camera in enumerate(cameras):
        if len(camera.distortion) != _COEFFICIENTS.get(camera.distortion_model, -1):
            raise ConfigError(f'cameras.{camera.name}.distortion: {camera.distortion} for '
                              f'distortion_model {camera.distortion_model!r}; expected one of '
                              f'{_COEFFICIENTS} coefficients')
        arrays.intrinsics[k] = (camera.fx, camera.fy, camera.cx, camera.cy)
        arrays.distortion_model[k] = DISTORTION_MODELS.index(camera.distortion_model)
        arrays.distortion[k, :len(camera.distortion)] = camera.distortion
        limit = monotonic_radius2(camera.distortion_model, camera.distortion)
        arrays.max_radius2[k] = limit if limit < _FLOAT32_MAX else np.inf
        arrays.rotation[k] = camera.pose.rotation_matrix()
        arrays.translation[k] = camera.pose.translation
    return arrays


_IDENTITY = np.eye(4)


class SweepHistory:
    """
    The host side of the ring of P earlier sweeps: each slot's stamp, pose and real rows.

    A slot's pose is that of the frame its points are in at the sweep's stamp: the LiDAR's
    (grid pose times the LiDAR extrinsic then), or the grid frame's for several LiDARs. The
    extrinsic of the time is kept: a sweep taken before a calibration change (TF, a live set)
    is placed by the pose it was measured with.

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
        # (stamp, pose of its points' frame, rows, pose of the grid frame) per slot
        self._slots: list[tuple[int, np.ndarray | None, int, np.ndarray | None] | None] = [
            None] * self.past
        self._next = 0

    def stage(self, stamp: int | None, pose: np.ndarray | None, max_age_s: float) -> int:
        """
        Choose the earlier sweeps for a frame at ``stamp`` with ``pose``; returns sweeps used.

        A slot counts when both it and this frame have a pose, it is 0 < age <= max_age_s old
        and the ego can have moved from its pose to this one in that time
        (``odometry.plausible_motion``: whatever the pose source, a pose that jumped, as a bag
        loop's or a re-initialised localization's, never places old points). A slot newer
        than ``stamp`` (time went backwards) empties the history first.
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
            if not (0 < age_ns <= max_age_s * 1e9
                    and plausible_motion(slot[3], pose, age_ns * 1e-9)):
                continue
            moved = sweep_transform(pose, slot[1], _IDENTITY)
            self.motion[index, :9] = moved[:3, :3].reshape(-1)
            self.motion[index, 9:12] = moved[:3, 3]
            self.motion[index, 12] = age_ns * 1e-9
            self.scalars[1 + index] = slot[2]
            used += 1
        return used

    def record(self, stamp: int | None, pose: np.ndarray | None, rows: int,
               points_frame: np.ndarray) -> None:
        """
        Note the sweep just written into the staged slot (without a stamp: never used).

        ``points_frame``: the 4 x 4 pose in the grid frame of the frame its points are in (the
        LiDAR extrinsic in force, or the identity for several LiDARs).
        """
        slot_pose = None if pose is None else pose @ points_frame
        self._slots[self._next] = None if stamp is None else (stamp, slot_pose, rows, pose)
        self._next = (self._next + 1) % self.past
