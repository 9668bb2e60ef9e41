"""
The one frame path: cloud and camera buffer -> pairing, pipeline, picture, latency record.

The node and offline replay both drive a ``FramePath``, so replay is the node by construction;
each only moves messages in (subscriptions or a bag) and out (publishers or a bag) and counts.
No ROS import: messages are read by attribute, outputs are NumPy arrays and a plain dict.

A FramePath also holds the calibration in force: the parameters' (``update``, live) and the
intrinsics from CameraInfo (``apply_camera_info``); for a camera, the newest word wins.

Thread safety: every method may be called from any thread. Two locks of its own: one for the
camera and odometry buffers (held only to store or pick), one for the pipeline (held around a
frame's compute and around a calibration change, so a frame never sees half a calibration).
Decoding a message takes neither, so a cloud or feature map is never held up by a frame.
"""

from dataclasses import dataclass
import threading
import time

import numpy as np

from .camera import FeatureMapError, read_features, scale_camera_info, with_intrinsics
from .cloud import CloudFormatError, read_points
from .config import PipelineConfig
from .odometry import OdometryBuffer
from .pipeline import BevPipeline, FrameResult
from .render import bev_to_rgb
from .stamps import stamp_ns
from .sync import CameraSync


@dataclass
class Frame:
    """One processed cloud: its stamp, the pipeline's result, the picture, the latency record."""

    stamp_ns: int
    result: FrameResult
    rgb: np.ndarray | None      # uint8[H, W, 3] rgb8 picture, when asked for and meaningful
    record: dict                # the per-frame latency keys (see ``latency.FRAME_KEYS``)
    stale: tuple[str, ...]      # cameras masked for being too far from the LiDAR stamp
    stamps_jumped: bool         # the LiDAR stamp went backwards: camera buffers were reset
    started: float              # perf_counter at decode start
    without_odometry: bool = False   # accumulating, but no pose at this stamp: own sweep only


class FramePath:
    """
    Decode, pair, process and describe frames for one warmed pipeline; see the module doc.

    ``add_features`` feeds the camera buffer (raises ``FeatureMapError``); ``add_odometry``
    the odometry buffer (raises ``OdometryError``); ``process`` runs one PointCloud2 (raises
    ``CloudFormatError``); ``finish`` completes the record once the outputs are out.
    ``update`` applies a new live configuration, ``apply_camera_info`` a CameraInfo.
    """

    def __init__(self, cfg: PipelineConfig, pipe: BevPipeline):
        """
        Serve the warmed ``pipe`` under ``cfg``, starting from the parameters' calibration.

        The pipeline's calibration is set to ``cfg``'s (no compile), so a pipeline reused from
        an earlier path (replay of the next bag) carries none of its CameraInfo over.
        """
        pipe.set_calibration(cfg.lidar, cfg.cameras)
        self.cfg, self.pipe = cfg, pipe
        self.cameras = cfg.cameras          # the camera calibration in force
        self._from_info: dict[str, tuple] = {}   # camera -> intrinsics a CameraInfo set
        self._buffer_lock = threading.Lock()
        self._pipe_lock = threading.Lock()
        self.sync = CameraSync(pipe.camera_names, cfg.max_camera_lidar_delay_s)
        self._shapes = {c.name: (c.height, c.width, c.channels) for c in cfg.cameras}
        self.accumulating = pipe.num_sweeps > 1
        self.odometry = OdometryBuffer(cfg.accumulation.max_odometry_gap_s, cfg.grid.frame_id)

    # -- configuration and calibration ---------------------------------------------------------

    def update(self, cfg: PipelineConfig, intrinsics_from_params=frozenset()) -> None:
        """
        Apply a new live configuration (the static keys must be unchanged: see live_params).

        Calibration (only when it changed; never a compile), sync tolerance, odometry gap and
        frame, sweep age. ``intrinsics_from_params``: cameras whose fx, fy, cx or cy this
        change set; they take the parameters' intrinsics, the other cameras keep those of
        their last CameraInfo (the newest word wins). Raises ConfigError (a calibration with
        more lift samples than slots) with nothing changed.
        """
        with self._pipe_lock:     # a CameraInfo applied meanwhile must not be lost
            from_info = {name: intrinsics for name, intrinsics in self._from_info.items()
                         if name not in intrinsics_from_params}
            cameras = cfg.cameras
            for name, intrinsics in from_info.items():
                cameras = with_intrinsics(cameras, name, intrinsics) or cameras
            lidar = cfg.lidar if cfg.lidar != self.cfg.lidar else None
            changed = cameras if cameras != self.cameras else None
            if lidar is not None or changed is not None:
                self.pipe.set_calibration(lidar, changed)
            self.pipe.max_sweep_age_s = cfg.accumulation.max_sweep_age_s
            self.cameras, self._from_info = cameras, from_info
        with self._buffer_lock:
            self.sync.tolerance_ns = int(round(cfg.max_camera_lidar_delay_s * 1e9))
            self.odometry.set_max_gap(cfg.accumulation.max_odometry_gap_s)
            self.odometry.child_frame_id = cfg.grid.frame_id
            self.cfg = cfg

    def apply_camera_info(self, name: str, msg):
        """
        Set camera ``name``'s intrinsics from a CameraInfo, scaled to its feature map.

        Returns the intrinsics applied (``camera.Intrinsics``), or None when they equal those in
        force (nothing to do). Raises CameraInfoError (a bad CameraInfo) or ConfigError (more
        lift samples than the slots fixed at warm-up) with the calibration in force kept.
        """
        height, width, _ = self._shapes[name]
        intrinsics = scale_camera_info(msg, height, width)
        with self._pipe_lock:
            updated = with_intrinsics(self.cameras, name, intrinsics)
            if updated is None:
                return None
            self.pipe.set_calibration(cameras=updated)
            self.cameras = updated
            self._from_info[name] = intrinsics
        return intrinsics

    # -- inputs --------------------------------------------------------------------------------

    def add_features(self, name: str, msg) -> bool:
        """
        Decode a camera's feature Image into the buffer; True when its stamps jumped back.

        Raises FeatureMapError for a map in another frame than ``cameras.<name>.frame_id`` or
        of the wrong shape or encoding.
        """
        expected = self._camera_frame(name)
        if msg.header.frame_id != expected:
            raise FeatureMapError(
                f'header.frame_id "{msg.header.frame_id}" is not camera {name}\'s frame '
                f'"{expected}" (parameter cameras.{name}.frame_id): feature maps must be in '
                'the configured frame')
        fmap = read_features(msg, *self._shapes[name])
        with self._buffer_lock:
            return self.sync.add(name, stamp_ns(msg.header.stamp), fmap)

    def add_odometry(self, msg) -> None:
        """Check and buffer a nav_msgs/Odometry message (pose of the grid frame)."""
        with self._buffer_lock:
            self.odometry.add(msg)

    def process(self, msg, picture: bool = True) -> Frame:
        """
        Decode a PointCloud2, pair the cameras, run the pipeline; the record lacks output times.

        Raises CloudFormatError for a cloud in another frame than ``lidar.frame_id`` or one that
        cannot be decoded. ``picture``: build the rgb8 picture (not with a projection, whose
        channels are no longer the raw LiDAR ones).
        """
        cfg = self.cfg
        if msg.header.frame_id != cfg.lidar_frame_id:
            raise CloudFormatError(
                f'header.frame_id "{msg.header.frame_id}" is not the LiDAR frame '
                f'"{cfg.lidar_frame_id}" (parameter lidar.frame_id): clouds must be in the '
                'configured frame')
        started = time.perf_counter()
        points, num_points = read_points(msg, self.pipe.padder.capacity, cfg.overflow_policy)
        decoded = time.perf_counter()
        stamp = stamp_ns(msg.header.stamp)
        with self._buffer_lock:
            pairing, jumped = self.sync.pair(stamp)
            pose = self.odometry.pose_at(stamp) if self.accumulating else None
        with self._pipe_lock:
            result = self.pipe.process(points, pairing.maps, num_points=num_points,
                                       stamp_ns=stamp, pose=pose)
        rgb = None
        if picture and not self.pipe.projected:
            rgb = bev_to_rgb(result.features, cfg.grid.z_min, cfg.grid.z_max)
        record = {
            'num_points': result.num_points, 'bucket': result.bucket,
            'overflow_points': result.overflow_points, 'decode_ms': (decoded - started) * 1e3,
            'pad_ms': result.pad_ms, 'compute_ms': result.compute_ms,
            'cameras_used': result.cameras_used,
            'compiles_after_warmup': result.compiles_after_warmup,
        }
        return Frame(stamp, result, rgb, record, pairing.stale, jumped, started,
                     self.accumulating and pose is None)

    def _camera_frame(self, name: str) -> str:
        return next(c.frame_id for c in self.cfg.cameras if c.name == name)

    @staticmethod
    def finish(frame: Frame, publish_start: float, arrived: float,
               age_ms: float | None = None) -> dict:
        """
        Add publish_ms, total_ms (``arrived`` to now) and age_ms; returns the full record.

        ``age_ms`` None: the frame's total time (offline, a frame is available the moment it
        is read).
        """
        done = time.perf_counter()
        total_ms = (done - arrived) * 1e3
        frame.record.update(publish_ms=(done - publish_start) * 1e3, total_ms=total_ms,
                            age_ms=total_ms if age_ms is None else age_ms)
        return frame.record


def rgb_image_fields(rgb: np.ndarray) -> dict:
    """Image fields of an rgb8 picture (``camera.features_image_fields`` style)."""
    h, w = rgb.shape[:2]
    return {'height': h, 'width': w, 'encoding': 'rgb8', 'is_bigendian': 0, 'step': w * 3,
            'data': rgb.reshape(-1)}
