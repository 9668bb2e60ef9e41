"""
Checks of ``BevPipeline``'s arguments from the Python API, at its boundary.

The node builds these itself (decoded clouds, buffered poses, its own twist, validated
calibrations); a caller of the Python API may pass anything, and a malformed one would
otherwise fail deep in NumPy with a message naming nothing, or pass silently (a NaN twist
drops every point, a NaN focal length every camera sample). Each check raises before anything
is staged: ValueError naming the argument, or ConfigError naming the camera's key.
"""

from dataclasses import replace
from numbers import Integral
from typing import Mapping

import numpy as np

from ..geometry.ego_motion import MOTION_SIZE
from ..geometry.rotations import checked_norm, Pose
from ..settings.cameras import CameraConfig
from ..settings.param_checks import check_value
from ..settings.parameters import ConfigError


def checked_frame_arguments(cameras, num_points, stamp_ns, pose, motion) -> np.ndarray | None:
    """
    Raise ValueError for a malformed argument of ``dispatch``; return ``pose`` copied.

    ``pose`` (4 x 4, the grid frame in the fixed frame) comes back as a float64 copy of its
    own: the sweep history keeps each sweep's pose, and a caller that updates one array in
    place would otherwise change the kept poses too, so a pose jump (a bag's loop, a
    relocalisation) would never be seen and old sweeps placed where they never were.
    """
    if cameras is not None and not isinstance(cameras, Mapping):
        raise ValueError(f'cameras must be a mapping of camera name to map, got '
                         f'{type(cameras).__name__}')
    for name, value in (('num_points', num_points), ('stamp_ns', stamp_ns)):
        if value is not None and (not isinstance(value, Integral) or isinstance(value, bool)
                                  or value < 0):
            raise ValueError(f'{name} must be an integer >= 0, got {value!r}')
    if motion is not None:
        _check_finite('motion', motion, (MOTION_SIZE,), ' (ego_motion.deskew_motion)')
    return None if pose is None else _check_finite('pose', pose, (4, 4), '').copy()


def checked_points(points, times) -> tuple[np.ndarray, np.ndarray | None]:
    """Return ``points`` as float32[N, 4], ``times`` as float32[N] (a column [N, 1] too)."""
    points = np.asarray(points, np.float32)
    if points.ndim != 2 or points.shape[1] != 4:
        raise ValueError(f'points must be (N, 4), got {points.shape}')
    if times is None:
        return points, None
    times = np.asarray(times, np.float32)
    # pad() refuses any other shape than [N], naming it.
    return points, times[:, 0] if times.ndim == 2 and times.shape[1] == 1 else times


def _check_finite(name: str, value, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Return ``value`` as a float64 array of ``shape`` with finite values; else ValueError."""
    try:
        array = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.shape != shape or not np.isfinite(array).all():
        raise ValueError(f'{name} must be float[{", ".join(map(str, shape))}] of finite '
                         f'numbers{what}, got {value!r}')
    return array


def checked_lidar_poses(lidar, in_force: tuple[Pose, ...]) -> tuple[Pose, ...]:
    """Return ``set_calibration``'s LiDAR poses (a Pose, a sequence, None: ``in_force``)."""
    if lidar is None:
        return in_force
    lidar = (lidar,) if isinstance(lidar, Pose) else lidar
    if (isinstance(lidar, (str, bytes, np.ndarray)) or not hasattr(lidar, '__len__')
            or not all(isinstance(pose, Pose) for pose in lidar)):
        raise ValueError(f'lidar must be a Pose or one per LiDAR, got {lidar!r}')
    if len(lidar) != len(in_force):
        raise ValueError(f'{len(lidar)} LiDAR poses for {len(in_force)} LiDARs')
    return tuple(unit_pose(pose, f'lidar pose {k}') for k, pose in enumerate(lidar))


def checked_cameras(cameras: tuple[CameraConfig, ...]) -> tuple[CameraConfig, ...]:
    """
    Return ``cameras`` with unit rotations; ConfigError naming the camera's key otherwise.

    Its fx, fy, cx or cy outside its parameter's bounds, or a rotation not a unit quaternion.
    """
    checked = []
    for camera in cameras:
        for field in ('fx', 'fy', 'cx', 'cy'):
            check_value(f'cameras.{camera.name}.{field}', getattr(camera, field))
        try:
            checked.append(replace(camera, pose=unit_pose(camera.pose,
                                                          f'cameras.{camera.name}')))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return tuple(checked)


def unit_pose(pose: Pose, name: str) -> Pose:
    """
    Return ``pose`` with its quaternion normalised, as the parameters' are; else ValueError.

    The rotation is built from the quaternion as given: one of norm 1.41 scaled and sheared
    every point, unsaid. Refused beyond 1e-3 of unit norm, as ``lidar.rotation_xyzw`` is.
    """
    translation = _check_finite(f'{name}.translation', pose.translation, (3,), '')
    q = _check_finite(f'{name}.rotation_xyzw', pose.rotation_xyzw, (4,), '')
    norm = checked_norm(q, f'{name}.rotation_xyzw')
    if abs(norm - 1.0) < 1e-12:     # unit already (the parameters', TF's): kept to the bit
        return pose
    return Pose(tuple(map(float, translation)), tuple(map(float, q / norm)))
