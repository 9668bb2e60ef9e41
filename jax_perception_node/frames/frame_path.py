"""
The one frame path: cloud and camera buffer -> pairing, pipeline, picture, latency record.

The node and offline replay both drive a ``FramePath``, so replay is the node by construction.
No ROS import: messages are read by attribute, outputs are NumPy arrays and a plain dict.
The calibration it holds (parameters, CameraInfo, TF), its two locks and what each method
raises are described in docs/design.md ("FramePath API").
"""

from dataclasses import dataclass, replace
import threading
import time

import numpy as np

from .camera_info_calibration import CameraInfoCalibration
from .intensity_scale import cloud_off_scale, OffScale
from .lidar_input import blank_lidars, check_clouds, decode_clouds, lacking_fields
from .sync import CameraSync
from .tf_calibration import TfCalibration
from ..core.frame_result import class_thresholds
from ..core.pipeline import BevPipeline, FrameResult
from ..geometry.ego_motion import deskew_motion, MAX_TWIST_LEAD_NS, pose_at, twist_at
from ..geometry.odometry import OdometryBuffer, TransformPoses
from ..geometry.stamps import stamp_fields_error, stamp_ns, stamp_refused
from ..geometry.transforms import TransformBuffer
from ..outputs.render import bev_to_rgb
from ..sensors.camera import FeatureMapError, read_features, with_intrinsics
from ..sensors.camera_image import ImageDecoder
from ..sensors.cloud import CloudFormatError, has_valid_point
from ..settings.config import GridConfig, PipelineConfig


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
    cameras_without_tf: tuple[str, ...] = ()   # cameras masked for want of a TF pose
    # cameras masked because their TF pose needs more lift slots than warm-up fixed; and the
    # reason, on the frame that found it (the same pose is not tried again)
    cameras_over_slots: tuple[str, ...] = ()
    slots_refusal: str = ''
    empty: bool = False      # no point with finite x, y, z and intensity in range: not valid
    # the cloud's field names when it has no lidar.intensity_field (intensity read as 0)
    fields_without_intensity: tuple[str, ...] = ()
    deskewed: bool = False          # the points were moved to the stamp
    # deskew on, but not done: the cloud's field names when it has no lidar.time_field; or
    # without_motion, no ego pose at the stamp and BASELINE_S before it
    fields_without_time: tuple[str, ...] = ()
    without_motion: bool = False
    # whose fields those are (lidar, or lidars.<name> of several): the one without intensity
    intensity_key: str = ''
    # LiDARs of lidars.names not in the set: absent, refused (lidars_refused says why), blank
    lidars_missing: tuple[str, ...] = ()
    lidars_refused: tuple[str, ...] = ()   # 'name: reason' of each cloud of the set left out
    # the first LiDAR whose intensities read off the head's scale (HeadSpec.intensity_top)
    off_scale: OffScale | None = None
    # the grid the frame was placed in (grid.frame_id is live: label the outputs with this one)
    grid: GridConfig | None = None
    time_key: str = ''      # the LiDAR whose fields_without_time those are
    # LiDARs of the set whose cloud holds no valid point (empty, all NaN): in lidars_missing too,
    # after the absent ones
    lidars_blank: tuple[str, ...] = ()
    stale_reasons: tuple[str, ...] = ()     # one per camera of ``stale`` (sync.Pairing)


class FramePath(CameraInfoCalibration, TfCalibration):
    """
    Decode, pair, process and describe frames for one warmed pipeline; see the module doc.

    ``add_features`` feeds the camera buffer (raises ``FeatureMapError``); ``add_odometry``
    the odometry buffer (raises ``OdometryError``); ``add_transforms`` the transform buffer
    (raises ``TransformError``); ``process`` runs one PointCloud2 (raises ``CloudFormatError``,
    or ``TransformError`` with TF extrinsics); ``finish`` completes the record once the outputs
    are out.
    ``update`` applies a new live configuration, ``apply_camera_info`` a CameraInfo.
    """

    def __init__(self, cfg: PipelineConfig, pipe: BevPipeline):
        """
        Serve the warmed ``pipe`` under ``cfg``, starting from the parameters' calibration.

        The pipeline's calibration and head weights are set to ``cfg``'s (no compile), so a
        pipeline reused from an earlier path (replay of the next bag) carries none of its
        CameraInfo or live weights over.
        """
        pipe.set_calibration(lidar_poses(cfg), cfg.cameras, cfg.lidar_filter)
        if pipe.head is not None:
            pipe.set_head_weights(cfg.head.weights)
            pipe.score_threshold = class_thresholds(cfg.head, pipe.head_classes)
        if pipe.encoder is not None:
            pipe.set_encoder_weights(cfg.encoder.weights)
        self.cfg, self.pipe = cfg, pipe
        # With input image: every image is decoded and scaled to the encoder's input.
        self._images = None if cfg.image_shape is None else ImageDecoder(*cfg.image_shape[:2])
        self.cameras = cfg.cameras          # the camera calibration in force
        self._from_info: dict[str, tuple] = {}   # camera -> intrinsics a CameraInfo set
        self._buffer_lock, self._pipe_lock = threading.Lock(), threading.Lock()
        self.sync = CameraSync(pipe.camera_names, cfg.max_camera_lidar_delay_s)
        self._shapes = {c.name: (c.height, c.width, c.channels) for c in cfg.cameras}
        self.accumulating = pipe.num_sweeps > 1
        self.odometry = OdometryBuffer(cfg.accumulation.max_odometry_gap_s, cfg.grid.frame_id)
        self._new_timeline = False          # the odometry started anew: forget the sweeps
        self._posed_ns: int | None = None   # the stamp of the newest sweep with a pose
        self.transforms = TransformBuffer()
        self._map_frames: dict[str, str] = {}        # camera -> frame of its newest map
        self._info_frames: dict[str, str] = {}       # camera -> frame of its newest CameraInfo
        # camera -> (the calibration in force, the fields of the CameraInfo found to match it)
        self._info_seen: dict[str, tuple] = {}
        self._tf_applied: dict[str, np.ndarray] = {}  # sensor -> the TF pose in force
        self._tf_refused: dict[str, np.ndarray] = {}  # the camera poses the slots last refused
        self.tf_calibrations = 0                     # TF poses applied (each without a compile)
        self._intensity_top = 0.0 if pipe.head is None else pipe.head.spec.intensity_top

    # -- configuration and calibration ---------------------------------------------------------

    def update(self, cfg: PipelineConfig, intrinsics_from_params=frozenset(),
               keys_set=frozenset()) -> None:
        """
        Apply a new live configuration (the static keys must be unchanged: see live_params).

        Calibration (only when it changed; never a compile), sync tolerance, odometry gap and
        frame, sweep age, pose sources (a new source, fixed frame or grid frame forgets the
        earlier sweeps), the head's and the image encoder's weights (when the file named
        changed or its key was set again; never a compile) and score threshold.

        Args
        ----
        cfg: the new configuration.
        intrinsics_from_params: cameras whose intrinsics or lens this change set; they take
            the parameters', the other cameras keep those of their last CameraInfo (the
            newest word wins).
        keys_set: the keys of the parameter set request; ``head.weights`` or
            ``encoder.weights`` among them reads that file again even under the same name
            (retrained in place).

        Raises
        ------
        ConfigError: a calibration with more lift samples than slots, head or encoder weights
            that cannot be loaded, or head.score_thresholds not one per head class; nothing
            changed.

        """
        weights = encoder = None    # read and checked before the lock: frames go on meanwhile
        if self.pipe.head is not None and (cfg.head.weights != self.cfg.head.weights
                                           or 'head.weights' in keys_set):
            weights = self.pipe.read_head_weights(cfg.head.weights)
        if self.pipe.encoder is not None and (cfg.encoder.weights != self.cfg.encoder.weights
                                              or 'encoder.weights' in keys_set):
            encoder = self.pipe.read_encoder_weights(cfg.encoder.weights)
        thresholds = class_thresholds(cfg.head, self.pipe.head_classes)
        with self._pipe_lock:     # a CameraInfo applied meanwhile must not be lost
            from_info = {name: intrinsics for name, intrinsics in self._from_info.items()
                         if name not in intrinsics_from_params}
            cameras = cfg.cameras
            for name, intrinsics in from_info.items():
                cameras = with_intrinsics(cameras, name, intrinsics) or cameras
            lidar = lidar_poses(cfg) if lidar_poses(cfg) != lidar_poses(self.cfg) else None
            if cfg.extrinsics_source != self.cfg.extrinsics_source:
                self._tf_applied = {}       # the poses in force are the parameters' again
                lidar = lidar_poses(cfg)
            elif cfg.extrinsics_source == 'tf':   # the poses in force are TF's: keep them
                lidar = None
                cameras = tuple(replace(c, pose=old.pose)
                                for c, old in zip(cameras, self.cameras))
            changed = cameras if cameras != self.cameras else None
            crop = cfg.lidar_filter if cfg.lidar_filter != self.cfg.lidar_filter else None
            if lidar is not None or changed is not None or crop is not None:
                self.pipe.set_calibration(lidar, changed, crop)
            if weights is not None:
                self.pipe.use_head_weights(*weights)
            if encoder is not None:
                self.pipe.use_encoder_weights(*encoder)
            self.pipe.max_sweep_age_s = cfg.accumulation.max_sweep_age_s
            self.pipe.score_threshold = thresholds
            self.cameras, self._from_info = cameras, from_info
            self._tf_refused = {}     # new intrinsics or poses: a refused TF pose may fit now
            # Under the pipe lock too: a frame in flight reads it there before it applies TF
            # poses (one checked under the old source must not put them back after the switch).
            with self._buffer_lock:
                # The earlier sweeps' poses are of the old source or frames: forget them.
                poses_of = (lambda c: (c.accumulation.pose_source, c.accumulation.fixed_frame,
                                       c.grid.frame_id))
                self._new_timeline |= poses_of(cfg) != poses_of(self.cfg)
                self.sync.tolerance_ns = int(round(cfg.max_camera_lidar_delay_s * 1e9))
                self.odometry.set_max_gap(cfg.accumulation.max_odometry_gap_s)
                self.odometry.child_frame_id = cfg.grid.frame_id
                self.cfg = cfg

    # -- inputs --------------------------------------------------------------------------------

    def add_features(self, name: str, msg) -> bool:
        """
        Decode a camera's message into the buffer; True when its stamps jumped back.

        A feature Image, or with ``cameras.<name>.input: image`` an Image or CompressedImage,
        decoded and scaled to the encoder's input on arrival (``camera_image.ImageDecoder``);
        an image of a stamp the camera's buffer holds already (its other transport's copy) is
        skipped undecoded.
        Raises FeatureMapError for a map or image in another frame than
        ``cameras.<name>.frame_id`` (only with ``extrinsics.source: parameters``), with a
        malformed stamp, or of the wrong shape or encoding (CameraImageError, a
        FeatureMapError, for images).
        """
        malformed = stamp_fields_error(msg.header.stamp)
        if malformed is not None:
            raise FeatureMapError(malformed)
        expected = self._camera_frame(name)
        # With TF extrinsics any frame will do: its pose is looked up at each frame. A leading
        # '/' names the same frame, as in tf2.
        if (self.cfg.extrinsics_source != 'tf'
                and msg.header.frame_id.lstrip('/') != expected.lstrip('/')):
            raise FeatureMapError(
                f'header.frame_id "{msg.header.frame_id}" is not camera {name}\'s frame '
                f'"{expected}" (parameter cameras.{name}.frame_id): camera messages must be in '
                'the configured frame')
        stamp = stamp_ns(msg.header.stamp)
        if self._images is not None:
            with self._buffer_lock:
                # A camera with image_transport publishes each image raw and compressed, and
                # the node takes both: the second copy is neither decoded again nor, arriving
                # after the next image, a stamp going back that would clear the buffer.
                if self.sync.holds(name, stamp):
                    return False
        fmap = read_features(msg, *self._shapes[name]) if self._images is None else (
            self._images.decode(msg))
        with self._buffer_lock:
            # A map naming no frame is in its CameraInfo's (the pose TF gives that frame).
            frame = msg.header.frame_id or self._info_frames.get(name, '')
            new_frame = self._map_frames.get(name) != frame
            self._map_frames[name] = frame
            jumped = self.sync.add(name, stamp, fmap)
        if new_frame and self.cfg.extrinsics_source == 'tf':
            self.prepare_tf_cameras(stamp)
        return jumped

    def add_odometry(self, msg) -> bool:
        """
        Check and buffer a nav_msgs/Odometry message (pose of the grid frame).

        Returns True when its stamp went back (a bag loop) or the pose jumped, and the buffer
        started anew; the earlier sweeps are then forgotten before the next frame.
        """
        with self._buffer_lock:
            reset = self.odometry.add(msg)
            self._new_timeline |= reset
            return reset

    def process(self, clouds, picture: bool = True, features: bool = True,
                now_ns: int | None = None) -> Frame:
        """
        Decode the clouds, pair the cameras, run the pipeline; the record lacks output times.

        Args
        ----
        clouds: a sensor_msgs/PointCloud2 (rclpy or rosbags), or with ``lidars.names`` a
            ``lidar_sets.LidarSet`` (the frame's stamp is its oldest cloud's).
        picture: build the uint8[H, W, 3] rgb8 picture (never with a projection, whose
            channels are no longer the raw LiDAR ones).
        features: fetch the BEV to the host (``FrameResult.features``; None when neither it
            nor the picture is wanted: a head's objects are fetched on their own).
        now_ns: the node's clock when the cloud arrived (sim time when in use); a cloud
            stamped 0 or more than ``MAX_FUTURE_STAMP_S`` after it is refused
            (``stamps.stamp_refused``). None (offline, a sim clock not started yet, or a set
            whose clouds were checked as they arrived): not checked.

        Returns
        -------
        Frame: the pipeline's result (features float32[H, W, C_out]), the picture, the latency
        record without its output times (``finish`` adds them), the masked cameras.

        Raises
        ------
        CloudFormatError: a cloud in another frame than configured (with parameter
        extrinsics) or one that cannot be decoded. TransformError: with TF extrinsics, a frame
        TF cannot place in grid.frame_id at the cloud stamp. CloudFormatError also for a
        stamp of 0 or too far ahead of ``now_ns``. A set is refused only when none of its
        clouds is left: a bad one is left out and named (``Frame.lidars_refused``).

        """
        cfg = self.cfg
        taken = check_clouds(cfg, clouds, self.transforms, self.pipe.lidar_poses)
        stamp = taken.stamp_ns
        refused = stamp_refused(max(stamp_ns(m.header.stamp) for m in taken.clouds
                                    if m is not None), now_ns)
        if refused is not None:
            raise CloudFormatError(refused)
        started = time.perf_counter()
        # The clouds are decoded straight into the pipeline's bucket buffer: under the pipe
        # lock, which the buffer lock may nest in (never the other way round).
        with self._pipe_lock:
            padded, taken = decode_clouds(self.pipe, cfg, taken)
            empty = not has_valid_point(padded.buffer[:padded.count])
            blank = blank_lidars(cfg, taken, padded)     # before the buffer is reused
            decoded = time.perf_counter()
            deskew = padded.timed and cfg.lidar_timing.deskew
            with self._buffer_lock:
                pairing, jumped = self.sync.pair(stamp)
                map_frames = dict(self._map_frames)
                poses = self._poses()
                self._forget_old_timeline(poses, stamp)
                # The newest pose may trail the stamp, by max_odometry_gap_s and 0.2 s at most:
                # a twist held longer moves the frame metres off when the vehicle brakes.
                lead = min(self.odometry.max_gap_ns, MAX_TWIST_LEAD_NS)
                pose = pose_at(poses, stamp, lead) if self.accumulating else None
                twist = twist_at(poses, stamp, lead) if deskew else None
            maps, without_tf, over_slots = pairing.maps, (), ((), '')
            if taken.tf_poses is not None and self.cfg.extrinsics_source == 'tf':
                maps, without_tf, over_slots = self._apply_tf_poses(taken.tf_poses, maps,
                                                                    map_frames, stamp)
            lidar_pose = self.pipe.lidar_poses[0]      # after TF: the pose of this frame
            motion = None if twist is None else deskew_motion(
                twist, lidar_pose.rotation_matrix(), np.asarray(lidar_pose.translation))
            pending = self.pipe.dispatch(padded, maps, stamp_ns=stamp, pose=pose, motion=motion)
            self._posed_ns = stamp if pose is not None else self._posed_ns
            # While the frame runs: the rows are only read, by both.
            off = cloud_off_scale(cfg.lidar_sensors, padded, self._intensity_top)
            picture = picture and not self.pipe.projected    # a projection has no picture
            result = pending.result(features=features or picture)
        rgb = bev_to_rgb(result.features, cfg.grid.z_min, cfg.grid.z_max) if picture else None
        (intensity_key, no_intensity), (time_key, no_time) = lacking_fields(cfg, taken, padded)
        missing = taken.missing + tuple(r.split(':', 1)[0] for r in taken.refused) + blank
        return Frame(stamp, result, rgb, frame_record(result, (decoded - started) * 1e3),
                     pairing.stale, jumped, started,
                     self.accumulating and pose is None, without_tf, *over_slots, empty,
                     no_intensity, result.deskewed, no_time, deskew and twist is None,
                     intensity_key, missing, taken.refused, off, cfg.grid, time_key, blank,
                     pairing.reasons)

    def _poses(self):
        """Return the ego poses in force: the odometry buffer, or TF's (``TransformPoses``)."""
        cfg = self.cfg
        if cfg.accumulation.pose_source == 'odometry':
            return self.odometry
        return TransformPoses(self.transforms, cfg.accumulation.fixed_frame, cfg.grid.frame_id,
                              self.odometry.max_gap_ns)

    def _forget_old_timeline(self, poses, stamp: int) -> None:
        """
        Forget the sweeps once the poses started anew or broke off since the newest sweep.

        Anew: the odometry jumped (``add_odometry``) or its source changed. Broken off: no pose
        somewhere between the newest sweep with a pose and ``stamp`` (samples further apart
        than ``accumulation.max_odometry_gap_s``: an outage, a restamped loop's seam), across
        which a jump looks like driving at the speed the gap allows.
        """
        step, last = self.odometry.max_gap_ns // 2, self._posed_ns
        newest = poses.newest_ns() if last is not None and stamp - last > 2 * step else None
        if self._new_timeline or (newest is not None and any(
                poses.pose_at(t) is None for t in range(last + step, min(stamp, newest), step))):
            self.pipe.reset_sweeps()
            self._new_timeline, self._posed_ns = False, None

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


def frame_record(result: FrameResult, decode_ms: float) -> dict:
    """Return the latency record of a frame, less its output times (``FramePath.finish``)."""
    return {
        'num_points': result.num_points, 'bucket': result.bucket,
        'overflow_points': result.overflow_points, 'decode_ms': decode_ms,
        'pad_ms': result.pad_ms, 'compute_ms': result.compute_ms,
        'head_ms': result.head_ms, 'cameras_used': result.cameras_used,
        'objects': 0 if result.objects is None else len(result.objects),
        'compiles_after_warmup': result.compiles_after_warmup,
    }


def lidar_poses(cfg: PipelineConfig) -> tuple:
    """Return the parameters' pose of each LiDAR (``PipelineConfig.lidar_sensors``)."""
    return tuple(lidar.pose for lidar in cfg.lidar_sensors)


def uses_tf(cfg: PipelineConfig) -> bool:
    """Return True when ``cfg`` takes sensor poses or the ego pose from /tf_static and /tf."""
    return cfg.extrinsics_source == 'tf' or (cfg.accumulation.pose_source == 'tf'
                                             and needs_ego_poses(cfg))


def needs_ego_poses(cfg: PipelineConfig) -> bool:
    """
    Return True when ``cfg`` uses the ego pose: accumulation, or deskew with a time field.

    With several LiDARs deskew also moves each cloud of a set to the set's stamp.
    """
    return cfg.accumulation.num_sweeps > 1 or cfg.lidar_timing.active or bool(
        cfg.lidars and cfg.lidar_timing.deskew)


def rgb_image_fields(rgb: np.ndarray) -> dict:
    """Image fields of an rgb8 picture (``camera.features_image_fields`` style)."""
    h, w = rgb.shape[:2]
    return {'height': h, 'width': w, 'encoding': 'rgb8', 'is_bigendian': 0, 'step': w * 3,
            'data': rgb.reshape(-1)}
