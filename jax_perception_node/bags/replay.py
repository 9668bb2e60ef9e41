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
is rejected and counted like a malformed one of its kind, and the replay goes on.

The output bag is written under a temporary folder next to it and renamed into place only when
the replay completes (``bagio.writing_bag``), so it is whole or absent.
"""

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
import sys
import time
from typing import Callable

from . import bagio
from ..core.pipeline import BevPipeline
from ..detection.detection_eval import evaluate, EVALUATED_CLASS
from ..frames.frame_path import Frame, FramePath, needs_ego_poses, rgb_image_fields, uses_tf
from ..frames.latency import format_value, FRAME_KEYS, percentiles, STAGES
from ..geometry.odometry import OdometryError
from ..geometry.stamps import stamp_ns
from ..geometry.transforms import TF_STATIC_TOPIC, TF_TOPIC, TransformError
from ..outputs.detected_objects import detected_objects_message
from ..outputs.grid_map import grid_map_message, GridMapLayers
from ..outputs.object_markers import markers_message
from ..outputs.objects import boxes_from_detections, detections_message, GROUND_TRUTH_TOPIC
from ..sensors.camera import CameraInfoError, FeatureMapError, features_image_fields
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
    empty_clouds: int = 0             # frames whose cloud held no valid point (all NaN, empty)
    clouds_without_intensity: int = 0  # frames whose cloud lacked lidar.intensity_field
    deskewed: int = 0                 # frames whose points were moved to their stamp
    clouds_without_time: int = 0      # deskew on, but the cloud lacked lidar.time_field
    frames_without_motion: int = 0    # deskew on, but no ego motion at the cloud stamp
    overflowed: int = 0
    compiles_after_warmup: int = 0
    warmup_s: float = 0.0
    buckets: dict[int, int] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    store_refused: list[str] = field(default_factory=list)   # executable store entries refused
    snapshots: dict[int, object] = field(default_factory=dict)
    # detection_eval.evaluate over the bag plus 'frames' (those paired with ground truth); None
    # without a head or without ground truth in the bag
    detection: dict | None = None

    def summary(self) -> dict:
        """Return a JSON-ready dict: the keys of the replay contract (docs/design.md) first."""
        detection = {} if self.detection is None else {'detection': self.detection}
        return {
            'frames': self.frames, 'rejected': self.rejected,
            'compiles_after_warmup': self.compiles_after_warmup,
            'buckets': {str(k): v for k, v in sorted(self.buckets.items())},
            'latency_ms': {s: percentiles(r[s] for r in self.records) for s in STAGES},
            'rejected_feature_maps': self.rejected_feature_maps,
            'rejected_camera_info': self.rejected_camera_info,
            'camera_info_applied': self.camera_info_applied,
            'rejected_odometry': self.rejected_odometry,
            'frames_without_odometry': self.frames_without_odometry,
            'transforms_received': self.transforms_received,
            'rejected_transforms': self.rejected_transforms,
            'frames_without_tf': self.frames_without_tf,
            'cameras_without_tf': self.cameras_without_tf,
            'cameras_over_slots': self.cameras_over_slots,
            'nonfinite_objects': self.nonfinite_objects,
            'empty_clouds': self.empty_clouds,
            'clouds_without_intensity': self.clouds_without_intensity,
            'deskewed': self.deskewed, 'clouds_without_time': self.clouds_without_time,
            'frames_without_motion': self.frames_without_motion,
            'overflowed_frames': self.overflowed, 'warmup_s': round(self.warmup_s, 3),
            'cameras_used': percentiles(r['cameras_used'] for r in self.records),
            **detection,
        }


def replay_bag(src: str | Path, dst: str | Path, cfg: PipelineConfig,
               topics: bagio.BagTopics = bagio.BagTopics(),
               snapshot_frames: tuple[int, ...] = (),
               progress: Callable[[int, int], None] | None = None,
               pipeline: BevPipeline | None = None) -> ReplayResult:
    """
    Run every LiDAR frame of ``src`` through the pipeline and write the outputs to ``dst``.

    ``dst`` appears only when the replay completes (``bagio.writing_bag``): after an error or
    an interrupt neither it nor its temporary folder is left. A message that does not
    deserialize is rejected and counted like a malformed one. Each replay starts a given
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
    progress: called with (clouds done, clouds in the bag) after every cloud.
    pipeline: a warmed pipeline of ``cfg``'s shapes to reuse; None builds and warms one.

    Returns
    -------
    ReplayResult: counts, per-frame latency records, snapshots, warm-up time.

    Raises
    ------
    BagError: the input cannot be read or lacks the LiDAR topic, grid_map_msgs (or the
        objects' package of ``output.objects_type``) is not installed, or ``dst`` exists or
        cannot be written.

    """
    reader = bagio.open_reader(src)
    try:
        types = bagio.topic_types(reader)
        total = cloud_count(reader, types, topics, src)
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
        if truth is not None:
            result.detection = dict(evaluate(
                replay.paired, class_index=pipe.head_classes.index(EVALUATED_CLASS)),
                frames=len(replay.paired), other_classes=dict(sorted(other_classes.items())))
        result.compiles_after_warmup = pipe.compiles_after_warmup
        return result
    finally:
        reader.close()


def cloud_count(reader, types: dict[str, str], topics: bagio.BagTopics, src) -> int:
    """Return the number of LiDAR messages; BagError for a missing input (``check_topics``)."""
    try:
        bagio.check_topics(types, topics)
    except bagio.BagError as exc:
        raise bagio.BagError(f'{src}: {exc}') from None
    return next(c.msgcount for c in reader.connections if c.topic == topics.pointcloud)


def read_ground_truth(reader, types: dict[str, str], classes: tuple[str, ...],
                      errors: list[str], left_out: Counter) -> dict[int, object] | None:
    """
    Return LiDAR stamp (ns) -> ground-truth rows (float32[n, 9]) of the bag, or None.

    None when there is nothing to evaluate: no head, a head without the evaluated class, or no
    ``GROUND_TRUTH_TOPIC`` of the Detection3DArray type. A message that does not deserialize is
    left out, with a line in ``errors``. Boxes of classes the head does not know are left out
    and counted in ``left_out`` by class_id; the rest of their message is kept.
    """
    if EVALUATED_CLASS not in classes or types.get(GROUND_TRUTH_TOPIC) != bagio.DETECTIONS_TYPE:
        return None
    truth = {}
    for _, timestamp, raw, msgtype in bagio.iter_messages(reader, [GROUND_TRUTH_TOPIC]):
        try:
            msg = bagio.deserialize(raw, msgtype)
            truth[stamp_ns(msg.header.stamp)] = boxes_from_detections(msg, classes, left_out)
        except (bagio.BagError, ValueError) as exc:
            errors.append(f'{GROUND_TRUTH_TOPIC} at {timestamp}: {exc}')
    return truth


class BagFrames:
    """
    Replay's loop: each input message of a bag to its handler, in bag-time order.

    Clouds go through the frame path; each processed frame goes to ``write``, which a subclass
    defines (``_Replay`` writes the output bag; the trainer keeps the BEVs). Rejected messages
    are counted in ``result`` like a replay's.
    """

    picture = True      # build each frame's rgb8 picture (FramePath.process)

    def __init__(self, path: FramePath, result: ReplayResult, total: int):
        self.path, self.result, self.total = path, result, total

    def write(self, frame: Frame, timestamp: int) -> None:
        """Take one processed frame (bag time ``timestamp``)."""
        raise NotImplementedError

    def run(self, reader, types: dict[str, str], topics: bagio.BagTopics, progress) -> None:
        """Feed every input message of the bag to the frame path; outputs go to the writer."""
        cameras = self.path.cfg.cameras
        features = {topics.camera(c.name): c.name for c in cameras
                    if types.get(topics.camera(c.name)) == bagio.IMAGE_TYPE}
        infos = {topics.camera_info(c.name): c.name for c in cameras
                 if types.get(topics.camera_info(c.name)) == bagio.CAMERA_INFO_TYPE}
        odometry = [topics.odometry] if (needs_ego_poses(self.path.cfg) and types.get(
            topics.odometry) == bagio.ODOMETRY_TYPE) else []
        tf = [t for t in (TF_STATIC_TOPIC, TF_TOPIC)
              if uses_tf(self.path.cfg) and types.get(t) == bagio.TF_TYPE]
        result = self.result
        for topic, timestamp, raw, msgtype in bagio.iter_messages(
                reader, [topics.pointcloud, *features, *infos, *odometry, *tf]):
            if topic in tf:
                self.transforms(raw, msgtype, topic == TF_STATIC_TOPIC)
            elif topic in odometry:
                self.odometry(raw, msgtype)
            elif topic in features:
                self.features(features[topic], raw, msgtype)
            elif topic in infos:
                self.camera_info(infos[topic], raw, msgtype)
            else:
                self.cloud(raw, msgtype, timestamp)
                if progress:
                    progress(result.frames + result.rejected + result.frames_without_tf,
                             self.total)

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

    def cloud(self, raw: bytes, msgtype: str, timestamp: int) -> None:
        """Process one cloud and write its outputs, or count it rejected or skipped (no TF)."""
        try:
            frame = self.path.process(bagio.deserialize(raw, msgtype), self.picture)
        except (bagio.BagError, CloudFormatError) as exc:
            self.result.rejected += 1
            self.result.errors.append(f'point cloud at {timestamp}: {exc}')
            return
        except TransformError as exc:
            self.result.frames_without_tf += 1
            self.result.errors.append(f'point cloud at {timestamp} skipped: {exc}')
            return
        self.write(frame, timestamp)


class _Replay(BagFrames):
    """A replay: every frame's outputs into the output bag."""

    def __init__(self, path: FramePath, writer: bagio.BagWriter, result: ReplayResult,
                 snapshot_frames, total: int, truth: dict | None = None):
        super().__init__(path, result, total)
        self.writer, self.snapshot_frames = writer, snapshot_frames
        self.grid_map_layers = GridMapLayers.for_pipeline(path.cfg, path.pipe)
        self.truth = truth          # LiDAR stamp -> ground-truth rows (read_ground_truth)
        self.paired: list[tuple] = []      # (objects, ground truth) of each frame with both
        self.head = path.pipe.head is not None
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
        index = result.frames
        if index in self.snapshot_frames or (-1 in self.snapshot_frames
                                             and index == self.total - 1):
            result.snapshots[index] = out.features.copy()
        result.frames += 1
        result.frames_without_odometry += frame.without_odometry
        result.empty_clouds += frame.empty
        result.clouds_without_intensity += bool(frame.fields_without_intensity)
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
        truth = None if self.truth is None else self.truth.get(stamp)
        if truth is not None:
            self.paired.append((objects, truth))


def progress_bar(stream=sys.stderr) -> Callable[[int, int], None]:
    """Return a one-line progress bar on ``stream`` (redrawn only on a terminal)."""
    def draw(done: int, total: int) -> None:
        if not stream.isatty() and done != total:
            return
        width = 30
        filled = int(width * done / max(total, 1))
        stream.write(f'\r[{"#" * filled}{"." * (width - filled)}] {done}/{total} frames')
        if done >= total:
            stream.write('\n')
        stream.flush()
    return draw
