"""
Sensor poses from TF for the frame path, applied as they arrive or at a frame's stamp.

Camera poses from /tf_static are applied when they arrive, or when a camera's map first names
its frame; any pose (LiDAR, cameras on /tf) otherwise at the stamp of the frame that uses it.

``TfCalibration`` is the part of ``FramePath`` that keeps the TF poses in force; it works on
the path's state (pipeline, cameras, locks, transform buffer), described in docs/design.md
("FramePath API", "Transforms").
"""

from dataclasses import replace

import numpy as np

from ..geometry.rotations import matrix_quaternion
from ..geometry.stamps import stamp_ns
from ..geometry.transforms import TransformError
from ..settings.config import Pose
from ..settings.parameters import ConfigError

MOVED = 1e-9        # a pose whose 4 x 4 matrix changed by more than this is applied again


class TfCalibration:
    """The TF poses of a FramePath: stored transforms, poses applied, poses the slots refused."""

    def add_transforms(self, msg, static: bool) -> int:
        """
        Store a tf2_msgs/TFMessage (/tf_static: ``static``); see TransformBuffer.add_message.

        With TF extrinsics, the camera poses /tf_static moves are applied at once
        (``prepare_tf_cameras``), so no frame computes their lift geometry. Poses on /tf may
        move every message: a frame applies those it pairs with, as before.
        """
        try:
            return self.transforms.add_message(msg, static)
        finally:       # a refused transform does not stop the good ones from applying
            if static and self.cfg.extrinsics_source == 'tf' and msg.transforms:
                self.prepare_tf_cameras(max(stamp_ns(t.header.stamp) for t in msg.transforms))

    def prepare_tf_cameras(self, stamp: int) -> None:
        """
        Apply the TF poses at ``stamp`` of the cameras that moved, off the frame path.

        Their lift geometry (about 170 ms at the shipped size) is computed before the pipe lock
        is taken, so frames go on meanwhile; a frame's own check (``_apply_tf_poses``) then
        finds them in force. Poses the lift slots cannot hold, or a calibration changed
        meanwhile, are left to that check, which masks and reports them.
        """
        grid, before = self.cfg.grid.frame_id, self.cameras
        with self._buffer_lock:
            frames = {c.name: self._map_frames.get(c.name) or self._info_frames.get(c.name)
                      or c.frame_id for c in before}
        moved = {}
        for name, frame in frames.items():
            try:
                pose = self.transforms.lookup(grid, frame, stamp)
            except TransformError:
                continue
            if self._moved(name, pose):
                moved[name] = pose
        if not moved or (moved.keys() == self._tf_refused.keys() and not any(
                self._moved(name, m, refused=True) for name, m in moved.items())):
            return      # nothing new, or the very poses the slots refused
        cameras = tuple(replace(c, pose=pose_from_matrix(moved[c.name])) if c.name in moved
                        else c for c in before)
        try:
            tables = self.pipe.lift_tables(cameras)
        except ConfigError:
            return
        with self._pipe_lock:
            if self.cameras is not before:
                return
            self.pipe.set_calibration(cameras=cameras, tables=tables)
            self.cameras = cameras
            self._tf_applied.update(moved)
            self._tf_refused = {}
            self.tf_calibrations += 1

    def _apply_tf_poses(self, lidar: np.ndarray, maps: dict, map_frames: dict, stamp: int):
        """
        Apply the TF poses of the LiDARs and the paired cameras that moved (under the pipe lock).

        ``lidar``: the LiDAR's 4 x 4 pose, or [S, 4, 4] the poses of several.

        Returns the maps (a camera TF cannot place masked), the names of those cameras, and
        (cameras masked for lift slots, the reason or ''): when the moved cameras' TF poses put
        more lift samples in a cell than the slots of warm-up, they are masked (set
        fusion.max_samples_per_cell to cover the TF poses). The same set of poses is not tried
        again (each try runs the lift geometry on the frame's path); any other set is, a camera
        on its own included: the slots are shared, so the pair may be what did not fit.
        """
        grid = self.cfg.grid.frame_id
        maps, without_tf, moved = dict(maps), [], {}
        for name, fmap in maps.items():
            if fmap is None:
                continue
            try:
                moved[name] = self.transforms.lookup(grid, map_frames[name], stamp)
            except TransformError:
                maps[name] = None
                without_tf.append(name)
        moved = {name: m for name, m in moved.items() if self._moved(name, m)}
        over_slots = []
        if moved and moved.keys() == self._tf_refused.keys() and not any(
                self._moved(name, m, refused=True) for name, m in moved.items()):
            # The very poses the slots refused together: the same try would fail the same way.
            over_slots = list(moved)
            for name in over_slots:
                maps[name] = None
            moved = {}
        lidar_moved = self._moved(':lidar', lidar)      # no camera name has a colon
        refusal = ''
        if not moved and not lidar_moved:
            return maps, tuple(without_tf), (tuple(over_slots), refusal)
        cameras = tuple(replace(c, pose=pose_from_matrix(moved[c.name])) if c.name in moved
                        else c for c in self.cameras)
        lidar_pose = None
        if lidar_moved:     # one LiDAR's 4 x 4, or a pose each of several
            lidar_pose = pose_from_matrix(lidar) if lidar.ndim == 2 else tuple(
                pose_from_matrix(m) for m in lidar)
        try:
            self.pipe.set_calibration(lidar_pose, cameras if moved else None)
        except ConfigError as exc:  # more lift samples than the slots of warm-up: mask them
            self.pipe.set_calibration(lidar_pose)
            for name in moved:
                maps[name] = None
            self._tf_refused = dict(moved)
            over_slots += list(moved)
            refusal = str(exc)
            moved, cameras = {}, self.cameras
        self.cameras = cameras
        self._tf_applied.update(moved)
        if moved:
            self._tf_refused = {}
        if lidar_moved:
            self._tf_applied[':lidar'] = lidar
        self.tf_calibrations += 1
        return maps, tuple(without_tf), (tuple(over_slots), refusal)

    def _moved(self, sensor: str, m: np.ndarray, refused: bool = False) -> bool:
        """Whether ``m`` differs from the pose in force (or the pose refused) for ``sensor``."""
        before = (self._tf_refused if refused else self._tf_applied).get(sensor)
        return before is None or float(np.abs(before - m).max()) > MOVED


def pose_from_matrix(m: np.ndarray) -> Pose:
    """Return the Pose (translation, unit quaternion) of a rigid 4 x 4 transform."""
    return Pose(tuple(float(v) for v in m[:3, 3]),
                tuple(float(v) for v in matrix_quaternion(m[:3, :3])))
