"""
Offline replay: every LiDAR frame of a bag through BevPipeline, outputs into a new bag.

No ROS graph is needed. Cameras pair with LiDAR through the node's own ``CameraSync``, fed in
bag-time order, which is the order a live node receives them in. CameraInfo messages in the bag
set the intrinsics the way they do in the node: scaled to the feature map, applied without a
compile, and counted when rejected. With accumulation, nav_msgs/Odometry messages in the bag
feed the node's odometry buffer the same way, in bag-time order.
"""

from dataclasses import dataclass, field
from pathlib import Path
import sys
import time
from typing import Callable

from . import bagio
from .camera import (CameraInfoError, FeatureMapError, features_image_fields, scale_camera_info,
                     with_intrinsics)
from .cloud import CloudFormatError
from .config import ConfigError, PipelineConfig
from .frame_path import FramePath, rgb_image_fields
from .latency import format_value, FRAME_KEYS, percentiles, STAGES
from .odometry import OdometryError
from .pipeline import BevPipeline


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
    overflowed: int = 0
    compiles_after_warmup: int = 0
    warmup_s: float = 0.0
    buckets: dict[int, int] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    snapshots: dict[int, object] = field(default_factory=dict)

    def summary(self) -> dict:
        """Return a JSON-ready dict: the keys of the replay contract (docs/design.md) first."""
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
            'overflowed_frames': self.overflowed, 'warmup_s': round(self.warmup_s, 3),
            'cameras_used': percentiles(r['cameras_used'] for r in self.records),
        }


def replay_bag(src: str | Path, dst: str | Path, cfg: PipelineConfig,
               pointcloud_topic: str = bagio.POINTCLOUD_TOPIC,
               camera_topics: dict[str, str] | None = None,
               snapshot_frames: tuple[int, ...] = (),
               progress: Callable[[int, int], None] | None = None,
               pipeline: BevPipeline | None = None,
               camera_info_topics: dict[str, str] | None = None,
               odometry_topic: str = bagio.ODOMETRY_TOPIC) -> ReplayResult:
    """
    Run every LiDAR frame of ``src`` through the pipeline and write the outputs to ``dst``.

    Raises BagError when the input cannot be read, lacks the LiDAR topic, or ``dst`` exists.
    ``snapshot_frames`` are frame indices whose features are kept in the result (-1 = last).
    ``camera_topics`` / ``camera_info_topics`` map camera names to bag topics; unnamed cameras
    use the node's input names. A given ``pipeline`` must be warmed; each replay starts it from
    the parameters' calibration, so one bag's CameraInfo never carries over to the next (nor
    one bag's sweeps). ``odometry_topic`` (nav_msgs/Odometry) is read only with accumulation
    (``accumulation.num_sweeps`` > 1); a bag without it replays every frame on its own sweep,
    counted in ``frames_without_odometry``.
    """
    reader = bagio.open_reader(src)
    try:
        types = bagio.topic_types(reader)
        if types.get(pointcloud_topic) != bagio.POINTCLOUD_TYPE:
            raise bagio.BagError(f'{src}: no {bagio.POINTCLOUD_TYPE} topic {pointcloud_topic} '
                                 f'(topics: {", ".join(sorted(types)) or "none"})')
        camera_topics = {c.name: (camera_topics or {}).get(c.name, bagio.camera_topic(c.name))
                         for c in cfg.cameras}
        total = next(c.msgcount for c in reader.connections if c.topic == pointcloud_topic)
        pipe = pipeline or BevPipeline(cfg)
        result = ReplayResult()
        start = time.perf_counter()
        if pipeline is None:
            pipe.warmup()
        result.warmup_s = time.perf_counter() - start
        by_topic = {t: name for name, t in camera_topics.items()
                    if types.get(t) == bagio.IMAGE_TYPE}
        info_topics = {c.name: (camera_info_topics or {}).get(
            c.name, bagio.camera_info_topic(c.name)) for c in cfg.cameras}
        info_by_topic = {t: name for name, t in info_topics.items()
                         if types.get(t) == bagio.CAMERA_INFO_TYPE}
        path = FramePath(cfg, pipe)
        pipe.reset_sweeps()
        calibration = _Intrinsics(pipe, cfg.cameras, result)
        odometry = [odometry_topic] if (
            path.accumulating and types.get(odometry_topic) == bagio.ODOMETRY_TYPE) else []
        with bagio.BagWriter(dst, compress=True) as writer:
            for topic, timestamp, raw, msgtype in bagio.iter_messages(
                    reader, [pointcloud_topic, *by_topic, *info_by_topic, *odometry]):
                msg = bagio.TYPESTORE.deserialize_cdr(raw, msgtype)
                if topic in odometry:
                    _add_odometry(path, msg, result)
                    continue
                if topic in by_topic:
                    _add_camera(path, by_topic[topic], msg, result)
                    continue
                if topic in info_by_topic:
                    calibration.update(info_by_topic[topic], msg)
                    continue
                _frame(path, msg, timestamp, writer, result, snapshot_frames, total)
                if progress:
                    progress(result.frames + result.rejected, total)
        result.compiles_after_warmup = pipe.compiles_after_warmup
        return result
    finally:
        reader.close()


class _Intrinsics:
    """The camera intrinsics in force: parameters until a CameraInfo replaces them."""

    def __init__(self, pipe: BevPipeline, cameras, result: ReplayResult):
        self.pipe, self.cameras, self.result = pipe, tuple(cameras), result
        if self.cameras:
            pipe.set_calibration(cameras=self.cameras)

    def update(self, name: str, msg) -> None:
        cam = self.cameras[[c.name for c in self.cameras].index(name)]
        try:
            intrinsics = scale_camera_info(msg, cam.height, cam.width)
            updated = with_intrinsics(self.cameras, name, intrinsics)
            if updated is None:
                return
            # ConfigError: more lift samples than the slots fixed at warm-up.
            self.pipe.set_calibration(cameras=updated)
        except (CameraInfoError, ConfigError) as exc:
            self.result.rejected_camera_info += 1
            self.result.errors.append(f'camera {name}: CameraInfo rejected: {exc}')
            return
        self.cameras = updated
        self.result.camera_info_applied += 1


def _add_camera(path: FramePath, name: str, msg, result: ReplayResult) -> None:
    try:
        path.add_features(name, msg)
    except FeatureMapError as exc:
        result.rejected_feature_maps += 1
        result.errors.append(f'camera {name}: {exc}')


def _add_odometry(path: FramePath, msg, result: ReplayResult) -> None:
    try:
        path.add_odometry(msg)
    except OdometryError as exc:
        result.rejected_odometry += 1
        result.errors.append(f'odometry rejected: {exc}')


def _frame(path: FramePath, msg, timestamp: int, writer, result: ReplayResult,
           snapshot_frames, total: int) -> None:
    try:
        frame = path.process(msg)
    except CloudFormatError as exc:
        result.rejected += 1
        result.errors.append(f'point cloud at {timestamp}: {exc}')
        return
    write_start = time.perf_counter()
    frame_id = path.cfg.grid.frame_id
    out = frame.result
    writer.write(bagio.FEATURES_TOPIC,
                 bagio.image_msg(features_image_fields(out.features), frame.stamp_ns, frame_id),
                 timestamp)
    if frame.rgb is not None:
        writer.write(bagio.IMAGE_TOPIC,
                     bagio.image_msg(rgb_image_fields(frame.rgb), frame.stamp_ns, frame_id),
                     timestamp)
    record = FramePath.finish(frame, write_start, frame.started)
    writer.write(bagio.LATENCY_TOPIC, bagio.diagnostic_array(
        frame.stamp_ns, frame_id, 'jax_perception: frame',
        {k: format_value(record[k]) for k in FRAME_KEYS}), timestamp)
    index = result.frames
    if index in snapshot_frames or (-1 in snapshot_frames and index == total - 1):
        result.snapshots[index] = out.features.copy()
    result.frames += 1
    result.frames_without_odometry += frame.without_odometry
    result.overflowed += out.overflow_points > 0
    result.buckets[out.bucket] = result.buckets.get(out.bucket, 0) + 1
    result.records.append(record)


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
