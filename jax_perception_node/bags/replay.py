"""
Offline replay: every LiDAR frame of a bag through BevPipeline, outputs into a new bag.

No ROS graph is needed. Cameras pair with LiDAR through the node's own ``CameraSync``, fed in
bag-time order, which is the order a live node receives them in. CameraInfo messages in the bag set
the intrinsics the way they do in the node: scaled to the feature map, applied without a compile,
and counted when rejected. With accumulation or deskew, nav_msgs/Odometry messages in the bag feed
the node's odometry buffer the same way, in bag-time order. With ``extrinsics.source: tf`` or
``accumulation.pose_source: tf``, /tf_static and /tf (tf2_msgs/TFMessage) feed the frame path's
transform buffer the same way; a cloud TF cannot place is skipped and counted
(``frames_without_tf``), a camera masked and counted (``cameras_without_tf``). Otherwise TF in the
bag is not read, and a bag without TF replays as before. A message whose bytes do not deserialize
is rejected and counted like a malformed one of its kind; the replay goes on.

With ``lidars.names`` each LiDAR's clouds (``BagTopics.lidar``) go into the node's
``LidarSets`` with the bag time as its clock; before each message a set whose wait has ended
is processed, the last one at the end. A frame is a set (stamped with its oldest cloud, as the
ground truth pairs); a set lacking a LiDAR is processed and counted per name, a cloud too late
for its set dropped and counted (``late_lidar_clouds``).

The output bag is written under a temporary folder next to it and renamed into place only when
the replay completes (``bagio.writing_bag``), so it is whole or absent.
"""

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
import time
from typing import Callable

from . import bagio
from .detection_summary import detection_summary
from .ground_truth import read_ground_truth
from ..core.pipeline import BevPipeline
from ..frames.frame_path import Frame, FramePath, needs_ego_poses, rgb_image_fields, uses_tf
from ..frames.intensity_scale import OffScale
from ..frames.latency import format_value, FRAME_KEYS, percentiles, STAGES
from ..frames.lidar_sets import LidarSet, LidarSets
from ..geometry.odometry import OdometryError
from ..geometry.stamps import NS_PER_S, stamp_fields_error, stamp_ns
from ..geometry.transforms import TF_STATIC_TOPIC, TF_TOPIC, TransformError
from ..outputs.detected_objects import detected_objects_message
from ..outputs.grid_map import grid_map_message, GridMapLayers
from ..outputs.object_markers import markers_message
from ..outputs.objects import detections_message
from ..sensors.camera import (CameraInfoError, FeatureMapError, features_image_fields,
                              UncalibratedCameraInfo)
from ..sensors.cloud import CloudFormatError
from ..settings.config import PipelineConfig
from ..settings.parameters import ConfigError

# The output topics, their types and the publisher depth the node offers them with; the
# objects' type is output.objects_type's (bagio.OBJECTS_TYPES).
OUTPUTS = ((bagio.FEATURES_TOPIC, bagio.IMAGE_TYPE, 5), (bagio.IMAGE_TOPIC, bagio.IMAGE_TYPE, 5),
           (bagio.GRID_MAP_TOPIC, bagio.GRID_MAP_TYPE, 5),
           (bagio.LATENCY_TOPIC, bagio.DIAGNOSTICS_TYPE, 50))
HEAD_OUTPUTS = ((bagio.OBJECTS_TOPIC, None, 5),
                (bagio.OBJECTS_MARKERS_TOPIC, bagio.MARKER_ARRAY_TYPE, 5))


# The counts of the summary after latency_ms, in its order (ReplayResult's fields of these names).
SUMMARY_COUNTS = (
    'rejected_feature_maps', 'rejected_camera_info', 'camera_info_applied', 'rejected_odometry',
    'frames_without_odometry', 'transforms_received', 'rejected_transforms', 'frames_without_tf',
    'cameras_without_tf', 'cameras_over_slots', 'nonfinite_objects', 'empty_clouds',
    'clouds_without_intensity', 'clouds_off_intensity_scale', 'deskewed', 'clouds_without_time',
    'frames_without_motion', 'lidar_sets_incomplete', 'clouds_unread')


@dataclass
class ReplayResult:
    """What a replay did: counts, per-frame records, and a few frames kept for pictures."""

    frames: int = 0
    rejected: int = 0
    rejected_feature_maps: int = 0
    rejected_camera_info: int = 0
    camera_info_applied: int = 0
    rejected_odometry: int = 0
    frames_without_odometry: int = 0
    transforms_received: int = 0      # TFMessages stored from /tf_static and /tf
    rejected_transforms: int = 0      # TFMessages with a transform refused
    frames_without_tf: int = 0        # clouds skipped: TF could not place their frame
    cameras_without_tf: int = 0       # camera maps masked: TF could not place their frame
    cameras_over_slots: int = 0       # camera maps masked: their TF pose needs more lift slots
    nonfinite_objects: int = 0        # decoded boxes with a non-finite value, not written
    empty_clouds: int = 0             # clouds without a valid point (all NaN, empty; a set: each)
    clouds_without_intensity: int = 0  # frames whose cloud lacked lidar.intensity_field
    clouds_off_intensity_scale: int = 0  # frames whose cloud read off the head's intensity scale
    off_scale: OffScale | None = None    # the last of them: which LiDAR, what to set
    deskewed: int = 0                 # frames whose points were moved to their stamp
    clouds_without_time: int = 0      # deskew on, no lidar.time_field or no sweep's times
    frames_without_motion: int = 0    # deskew on, but no ego motion at the cloud stamp
    lidar_sets_incomplete: int = 0    # lidars.names: frames whose set lacked some LiDAR
    lidars_missing: dict[str, int] = field(default_factory=dict)   # name -> frames without it
    late_lidar_clouds: int = 0        # lidars.names: clouds dropped, too late for their set
    lidar_clocks: list[str] = field(default_factory=list)   # LidarSets.take_news' lines
    clouds_unread: int = 0            # clouds the bag's index lists that could not be read
    overflowed: int = 0
    compiles_after_warmup: int = 0
    warmup_s: float = 0.0
    buckets: dict[int, int] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    store_refused: list[str] = field(default_factory=list)   # executable store entries refused
    snapshots: dict[int, object] = field(default_factory=dict)
    # detection_summary.detection_summary of the bag (one class's AP at 2 m, every class's
    # AP and the mAP); None without a head or without ground truth of its classes in the bag
    detection: dict | None = None

    def summary(self) -> dict:
        """Return a JSON-ready dict: the keys of the replay contract (docs/design.md) first."""
        detection = {} if self.detection is None else {'detection': self.detection}
        return {
            'frames': self.frames, 'rejected': self.rejected,
            'compiles_after_warmup': self.compiles_after_warmup,
            'buckets': {str(k): v for k, v in sorted(self.buckets.items())},
            'latency_ms': {s: percentiles(r[s] for r in self.records) for s in STAGES},
            **{key: getattr(self, key) for key in SUMMARY_COUNTS},
            'lidars_missing': dict(self.lidars_missing), 'warmup_s': round(self.warmup_s, 3),
            'late_lidar_clouds': self.late_lidar_clouds, 'overflowed_frames': self.overflowed,
            'cameras_used': percentiles(r['cameras_used'] for r in self.records), **detection,
        }

    def warnings(self) -> list[str]:
        """Return the lines to warn about at the end: store entries refused, off-scale clouds."""
        lines = [f'warning: executable store: {refusal}' for refusal in self.store_refused]
        if self.off_scale is not None:
            lines.append(f'warning: {self.clouds_off_intensity_scale} of {self.frames} clouds '
                         'read off the intensity scale the head was trained on; the last one: '
                         f'{self.off_scale.advice()} (docs/users.md, "Real drivers\' clouds")')
        return lines


def replay_bag(src: str | Path, dst: str | Path, cfg: PipelineConfig,
               topics: bagio.BagTopics = bagio.BagTopics(),
               snapshot_frames: tuple[int, ...] = (),
               progress: Callable[[int, int], None] | None = None,
               pipeline: BevPipeline | None = None) -> ReplayResult:
    """
    Run every LiDAR frame of ``src`` through the pipeline and write the outputs to ``dst``.

    ``dst`` appears only when the replay completes (``bagio.writing_bag``): after an error or
    an interrupt neither it nor its temporary folder is left. Each replay starts a given
    pipeline from the parameters' calibration, so one bag's CameraInfo or sweeps never carry
    over to the next. Odometry is read only with accumulation or deskew (``needs_ego_poses``),
    TF only when a pose source is ``tf``.

    Args
    ----
    src: an MCAP or sqlite3 rosbag2 folder or file.
    dst: the output bag folder (must not exist).
    cfg: the parameters.
    topics: where the bag keeps the node's inputs.
    snapshot_frames: frame indices whose features are kept in the result (-1 = the last).
    progress: called with (clouds read, clouds in the bag) after every cloud.
    pipeline: a warmed pipeline of ``cfg``'s shapes to reuse; None builds and warms one.

    Returns
    -------
    ReplayResult: counts, per-frame latency records, snapshots, warm-up time.

    Raises
    ------
    BagError: the input cannot be read or lacks a LiDAR topic, grid_map_msgs (or the
        objects' package of ``output.objects_type``) is not installed, or ``dst`` exists or
        cannot be written.

    """
    reader = bagio.open_reader(src)
    try:
        types = bagio.topic_types(reader)
        total = cloud_count(reader, types, topics, src, lidar_names(cfg), cfg.camera_images)
        bagio.message_class(bagio.GRID_MAP_TYPE)   # BagError naming the package if not installed
        if cfg.head.module:
            bagio.message_class(bagio.OBJECTS_TYPES[cfg.output.objects_type])
        # Before the warm-up: an output that cannot be written fails at once.
        with bagio.writing_bag(dst) as path:
            pipe = pipeline or BevPipeline(cfg)
            result = ReplayResult()
            start = time.perf_counter()
            if pipeline is None:
                pipe.warmup()
            result.warmup_s = time.perf_counter() - start
            result.store_refused = list(pipe.store.refused)
            pipe.reset_sweeps()   # FramePath resets the calibration: nothing carries over
            other_classes = Counter()
            truth = read_ground_truth(reader, types, pipe.head_classes, result.errors,
                                      other_classes)
            with bagio.BagWriter(path, compress=True) as writer:
                replay = _Replay(FramePath(cfg, pipe), writer, result, snapshot_frames, total,
                                 truth)
                replay.run(reader, types, topics, progress)
                if -1 in snapshot_frames and replay.last is not None:
                    result.snapshots[result.frames - 1] = replay.last.copy()
            if truth is not None or other_classes:  # none in common: said, 0 boxes scored
                result.detection = detection_summary(replay.objects, truth or {},
                                                     pipe.head_classes, other_classes)
        result.compiles_after_warmup = pipe.compiles_after_warmup
        return result
    finally:
        reader.close()


def lidar_names(cfg: PipelineConfig) -> tuple[str, ...]:
    """Return the names of ``lidars.names``; () for one LiDAR (``lidar.*``)."""
    return tuple(lidar.name for lidar in cfg.lidars)


def cloud_count(reader, types: dict[str, str], topics: bagio.BagTopics, src,
                lidars: tuple[str, ...] = (), images: bool = False) -> int:
    """
    Return the clouds of the LiDAR topic, or of every one of ``lidars`` (``lidar_names``).

    BagError for a missing input (``check_topics``; ``images``: images in), or no cloud at all.
    """
    try:
        bagio.check_topics(types, topics, lidars, images)
    except bagio.BagError as exc:
        raise bagio.BagError(f'{src}: {exc}') from None
    clouds = topics.clouds(lidars)
    count = bagio.message_count(reader, clouds)
    if count == 0:
        raise bagio.BagError(f'{src}: no message on the LiDAR topic {", ".join(clouds)}')
    return count


class BagFrames:
    """
    Replay's loop: each input message of a bag to its handler, in bag-time order.

    Clouds (or sets, module doc) go through the frame path; each processed frame goes to
    ``write``, which a subclass defines (``_Replay`` writes the output bag; the trainer keeps
    the BEVs). Rejected messages are counted in ``result`` like a replay's.
    """

    picture = True      # build each frame's rgb8 picture (FramePath.process)

    def __init__(self, path: FramePath, result: ReplayResult, total: int):
        self.path, self.result, self.total = path, result, total
        self.sets: LidarSets | None = None      # with lidars.names, while ``run`` runs

    def write(self, frame: Frame, timestamp: int) -> None:
        """Take one processed frame (bag time ``timestamp``)."""
        raise NotImplementedError

    def run(self, reader, types: dict[str, str], topics: bagio.BagTopics, progress) -> None:
        """Feed every input message of the bag to the frame path; outputs go to the writer."""
        cfg = self.path.cfg
        clouds = topics.clouds(lidar_names(cfg))
        self.sets = LidarSets(lidar_names(cfg), cfg.lidar_stamp_tolerance_s,
                              cfg.max_lidar_delay_s) if cfg.lidars else None
        for name in lidar_names(cfg):
            self.result.lidars_missing.setdefault(name, 0)
        features = {topic: name for topic, name in topics.camera_inputs(
            self.path.pipe.camera_names, cfg.camera_images).items()
            if types.get(topic) in bagio.CAMERA_TYPES[cfg.camera_images]}
        infos = {topics.camera_info(c.name): c.name for c in cfg.cameras
                 if types.get(topics.camera_info(c.name)) == bagio.CAMERA_INFO_TYPE}
        odometry = [topics.odometry] if (needs_ego_poses(cfg) and types.get(
            topics.odometry) == bagio.ODOMETRY_TYPE) else []
        tf = [t for t in (TF_STATIC_TOPIC, TF_TOPIC)
              if uses_tf(cfg) and types.get(t) == bagio.TF_TYPE]
        done = timestamp = 0
        for topic, timestamp, raw, msgtype in bagio.iter_messages(
                reader, [*clouds, *features, *infos, *odometry, *tf]):
            if self.sets is not None:   # a set whose wait has ended, before what came later
                self.lidar_sets([self.sets.due(timestamp / NS_PER_S)], timestamp)
            if topic in tf:
                self.transforms(raw, msgtype, topic == TF_STATIC_TOPIC)
            elif topic in odometry:
                self.odometry(raw, msgtype)
            elif topic in features:
                self.features(features[topic], raw, msgtype)
            elif topic in infos:
                self.camera_info(infos[topic], raw, msgtype)
            else:
                self.cloud(raw, msgtype, timestamp, clouds[topic])
                done += 1
                if progress:
                    progress(done, self.total)
        if self.sets is not None:
            self.lidar_sets([self.sets.flush(timestamp / NS_PER_S)], timestamp)
            self.result.late_lidar_clouds += self.sets.late
        # The reader skips what it cannot read (a damaged MCAP chunk): counted, never silent.
        self.result.clouds_unread = max(0, self.total - done)

    def features(self, name: str, raw: bytes, msgtype: str) -> None:
        """Buffer a camera's feature map, or count it rejected."""
        try:
            self.path.add_features(name, bagio.deserialize(raw, msgtype))
        except (bagio.BagError, FeatureMapError) as exc:
            self.result.rejected_feature_maps += 1
            self.result.errors.append(f'camera {name}: {exc}')

    def camera_info(self, name: str, raw: bytes, msgtype: str) -> None:
        """Apply a CameraInfo's intrinsics (never a compile), or count it rejected."""
        try:
            applied = self.path.apply_camera_info(name, bagio.deserialize(raw, msgtype))
        except UncalibratedCameraInfo:      # no calibration to apply: the parameters stay
            return
        except (bagio.BagError, CameraInfoError, ConfigError) as exc:
            self.result.rejected_camera_info += 1
            self.result.errors.append(f'camera {name}: CameraInfo rejected: {exc}')
            return
        self.result.camera_info_applied += applied is not None

    def odometry(self, raw: bytes, msgtype: str) -> None:
        """Buffer an odometry message, or count it rejected."""
        try:
            self.path.add_odometry(bagio.deserialize(raw, msgtype))
        except (bagio.BagError, OdometryError) as exc:
            self.result.rejected_odometry += 1
            self.result.errors.append(f'odometry rejected: {exc}')

    def transforms(self, raw: bytes, msgtype: str, static: bool) -> None:
        """Store a TFMessage's transforms, or count it rejected (its good ones are stored)."""
        try:
            self.path.add_transforms(bagio.deserialize(raw, msgtype), static)
        except (bagio.BagError, TransformError) as exc:
            self.result.rejected_transforms += 1
            self.result.errors.append(f'{TF_STATIC_TOPIC if static else TF_TOPIC}: {exc}')
            return
        self.result.transforms_received += 1

    def cloud(self, raw: bytes, msgtype: str, timestamp: int, name: str = '') -> None:
        """Process a cloud, or offer it to its set (LiDAR ``name``); count it if it is no cloud."""
        try:
            msg = bagio.deserialize(raw, msgtype)
            # Refused before the sets, as the node does: its stamp would make the others late.
            if self.sets is not None and (refused := stamp_fields_error(msg.header.stamp)):
                raise bagio.BagError(refused)
        except bagio.BagError as exc:
            self.result.rejected += 1
            self.result.errors.append(f'point cloud{f" of LiDAR {name}" if name else ""} at '
                                      f'{timestamp}: {exc}')
            return
        if self.sets is None:
            self.frame(msg, timestamp)
        else:
            self.lidar_sets(self.sets.add(name, stamp_ns(msg.header.stamp), msg,
                                          timestamp / NS_PER_S, timestamp), timestamp)

    def lidar_sets(self, sets: list[LidarSet | None], timestamp: int) -> None:
        """Process the closed sets (None: none) as frames at bag time ``timestamp``."""
        self.result.lidar_clocks.extend(self.sets.take_news())
        for closed in sets:
            if closed is not None:
                self.frame(closed, timestamp)

    def frame(self, clouds, timestamp: int) -> None:
        """
        Process a cloud or a set and write its outputs, or count it rejected or skipped (no TF).

        ``rejected`` counts clouds: those a set left out, or all of a set refused as a whole.
        """
        result, what = self.result, 'point cloud'
        if isinstance(clouds, LidarSet):
            what = f'LiDAR set stamped {clouds.stamp_ns}'
        try:
            frame = self.path.process(clouds, self.picture)
        except CloudFormatError as exc:
            result.rejected += len(clouds.clouds) if isinstance(clouds, LidarSet) else 1
            result.errors.append(f'{what} at {timestamp}: {exc}')
            return
        except TransformError as exc:
            result.frames_without_tf += 1
            result.errors.append(f'{what} at {timestamp} skipped: {exc}')
            return
        result.rejected += len(frame.lidars_refused)
        result.errors.extend(f'{what} at {timestamp}: {refused}'
                             for refused in frame.lidars_refused)
        result.lidar_sets_incomplete += bool(frame.lidars_missing)
        for name in frame.lidars_missing:
            result.lidars_missing[name] += 1
        self.write(frame, timestamp)


class _Replay(BagFrames):
    """A replay: every frame's outputs into the output bag."""

    def __init__(self, path: FramePath, writer: bagio.BagWriter, result: ReplayResult,
                 snapshot_frames, total: int, truth: dict | None = None):
        super().__init__(path, result, total)
        self.writer, self.snapshot_frames = writer, snapshot_frames
        self.grid_map_layers = GridMapLayers.for_pipeline(path.cfg, path.pipe)
        self.truth = truth          # LiDAR stamp -> ground-truth rows (read_ground_truth)
        self.objects: dict = {}     # stamp -> objects of the frames the ground truth has
        self.head = path.pipe.head is not None
        self.last = None            # the features of the last frame (snapshot -1)
        # The QoS the node's publishers offer, as a recording of the live node would keep it.
        objects_type = bagio.OBJECTS_TYPES[path.cfg.output.objects_type]
        for topic, msgtype, depth in OUTPUTS + (HEAD_OUTPUTS if self.head else ()):
            if topic != bagio.FEATURES_TOPIC or path.cfg.output_bev_features:
                writer.add_topic(topic, msgtype or objects_type, [bagio.offered_qos(depth=depth)])

    def write(self, frame: Frame, timestamp: int) -> None:
        """Write a frame's features, objects, picture and latency record; count it."""
        result, writer = self.result, self.writer
        write_start = time.perf_counter()
        frame_id = self.path.cfg.grid.frame_id
        out = frame.result
        if self.path.cfg.output_bev_features:
            writer.write(bagio.FEATURES_TOPIC, bagio.image_msg(
                features_image_fields(out.features), frame.stamp_ns, frame_id), timestamp)
        if self.head:
            self.write_objects(out.objects, frame.stamp_ns, timestamp)
        if frame.rgb is not None:
            writer.write(bagio.IMAGE_TOPIC, bagio.image_msg(
                rgb_image_fields(frame.rgb), frame.stamp_ns, frame_id), timestamp)
        writer.write(bagio.GRID_MAP_TOPIC, grid_map_message(
            bagio.TYPESTORE.types, self.grid_map_layers, out.features, self.path.cfg.grid,
            frame.stamp_ns), timestamp)
        record = FramePath.finish(frame, write_start, frame.started)
        writer.write(bagio.LATENCY_TOPIC, bagio.diagnostic_array(
            frame.stamp_ns, frame_id, 'jax_perception: frame',
            {k: format_value(record[k]) for k in FRAME_KEYS}), timestamp)
        if result.frames in self.snapshot_frames:
            result.snapshots[result.frames] = out.features.copy()
        self.last = out.features
        result.frames += 1
        result.frames_without_odometry += frame.without_odometry
        result.empty_clouds += max(int(frame.empty), len(frame.lidars_blank))
        result.clouds_without_intensity += bool(frame.fields_without_intensity)
        result.clouds_off_intensity_scale += frame.off_scale is not None
        result.off_scale = frame.off_scale or result.off_scale
        result.deskewed += frame.deskewed
        result.clouds_without_time += bool(frame.fields_without_time)
        result.frames_without_motion += frame.without_motion
        result.cameras_without_tf += len(frame.cameras_without_tf)
        result.cameras_over_slots += len(frame.cameras_over_slots)
        result.nonfinite_objects += out.nonfinite_objects
        result.overflowed += out.overflow_points > 0
        result.buckets[out.bucket] = result.buckets.get(out.bucket, 0) + 1
        result.records.append(record)

    def write_objects(self, objects, stamp: int, timestamp: int) -> None:
        """Write a frame's objects and markers; pair them with the ground truth of its stamp."""
        classes, cfg = self.path.pipe.head_classes, self.path.cfg
        frame_id, types = cfg.grid.frame_id, bagio.TYPESTORE.types
        if cfg.output.objects_type == 'autoware':
            msg = detected_objects_message(types, objects, classes, cfg.output.autoware_labels,
                                           stamp, frame_id)
        else:
            msg = detections_message(types, objects, classes, stamp, frame_id)
        self.writer.write(bagio.OBJECTS_TOPIC, msg, timestamp)
        self.writer.write(bagio.OBJECTS_MARKERS_TOPIC, markers_message(
            types, objects, classes, stamp, frame_id), timestamp)
        if self.truth is not None and stamp in self.truth:
            self.objects[stamp] = objects
