"""
The LiDAR clouds of one frame: one cloud, or a set of several LiDARs' (``lidar_sets.py``).

Checks each cloud's frame (or finds its TF pose) before any buffer is touched, then decodes
the clouds into the pipeline's bucket. A cloud of a set that fails a check is left out of the
set, named with its reason, and the others are processed; a frame with no cloud left is
refused like a single bad cloud. No ROS import.
"""

from dataclasses import dataclass

import numpy as np

from .lidar_sets import LidarSet
from ..core.buckets import PaddedCloud, SetCloud
from ..core.pipeline import BevPipeline
from ..geometry.rotations import pose_matrix
from ..geometry.stamps import NS_PER_S, stamp_fields_error, stamp_ns
from ..geometry.transforms import TransformBuffer, TransformError
from ..sensors.cloud import CloudFormatError, has_valid_point
from ..settings.config import LidarConfig, PipelineConfig


@dataclass(frozen=True)
class FrameClouds:
    """The checked clouds of a frame, before decoding."""

    stamp_ns: int                      # the frame's stamp (a set's: its oldest cloud's)
    clouds: tuple                      # per configured LiDAR its message, None when absent
    tf_poses: np.ndarray | None        # with TF: 4 x 4 pose (one LiDAR) or [S, 4, 4] (a set)
    missing: tuple[str, ...] = ()      # LiDARs of lidars.names not in the set
    refused: tuple[str, ...] = ()      # 'name: reason' of each cloud of the set left out


def check_clouds(cfg: PipelineConfig, clouds, transforms: TransformBuffer,
                 in_force: tuple) -> FrameClouds:
    """
    Check the frame of each cloud of ``clouds`` (a PointCloud2 or a ``LidarSet``).

    With ``extrinsics.source: tf`` each cloud's pose in the grid frame at its stamp is looked
    up; a LiDAR absent from the set keeps its pose in force (``in_force``, the pipeline's
    poses). Raises CloudFormatError (a cloud in another frame than configured) or
    TransformError (TF cannot place it): for a single cloud at once, for a set only when no
    cloud is left (the first cloud's reason).
    """
    use_tf = cfg.extrinsics_source == 'tf'
    lidars = cfg.lidar_sensors
    if not isinstance(clouds, LidarSet):
        pose = _check(cfg, lidars[0], clouds, transforms, use_tf)
        return FrameClouds(stamp_ns(clouds.header.stamp), (clouds,), pose)
    kept, poses, refused, first = [], [], [], None
    for lidar, force in zip(lidars, in_force):
        msg = clouds.clouds.get(lidar.name)
        pose = None
        if msg is not None:
            try:
                pose = _check(cfg, lidar, msg, transforms, use_tf)
            except (CloudFormatError, TransformError) as exc:
                first = first or exc
                refused.append(f'{lidar.name}: {exc}')
                msg = None
        kept.append(msg)
        poses.append(pose if pose is not None else pose_matrix(force.rotation_matrix(),
                                                               force.translation))
    if not any(msg is not None for msg in kept):
        raise first or CloudFormatError('the set holds no cloud')
    return FrameClouds(clouds.stamp_ns, tuple(kept), np.stack(poses) if use_tf else None,
                       clouds.missing, tuple(refused))


def _check(cfg: PipelineConfig, lidar: LidarConfig, msg, transforms: TransformBuffer,
           use_tf: bool) -> np.ndarray | None:
    """Return the TF pose of a cloud (None without TF); raise for another frame or a bad stamp."""
    malformed = stamp_fields_error(msg.header.stamp)
    if malformed is not None:
        raise CloudFormatError(malformed)
    frame = msg.header.frame_id
    if use_tf:
        return transforms.lookup(cfg.grid.frame_id, frame, stamp_ns(msg.header.stamp))
    if frame.lstrip('/') != lidar.frame_id.lstrip('/'):     # as tf2 names frames
        raise CloudFormatError(
            f'header.frame_id "{frame}" is not the LiDAR frame "{lidar.frame_id}" (parameter '
            f'{lidar.key}.frame_id): clouds must be in the configured frame')
    return None


def decode_clouds(pipe: BevPipeline, cfg: PipelineConfig,
                  frame: FrameClouds) -> tuple[PaddedCloud, FrameClouds]:
    """
    Decode the checked clouds into the pipeline's next bucket buffers (under its lock).

    One cloud: ``BevPipeline.decode`` (raises CloudFormatError). A set: ``decode_set``, each
    cloud's times counted from the set's stamp; a cloud that cannot be decoded is left out and
    named in the returned ``FrameClouds.refused`` (CloudFormatError when none is left).
    """
    lidars = cfg.lidar_sensors
    if not cfg.lidars:
        timing = lidars[0].timing
        return pipe.decode(frame.clouds[0], lidars[0].intensity_field, (
            timing.field, timing.unit, timing.reference) if timing.active else None,
            lidars[0].intensity_scale), frame
    reads = tuple(None if msg is None else SetCloud(
        msg, lidar.intensity_field, (lidar.timing.field, lidar.timing.unit,
                                     lidar.timing.reference) if lidar.timing.active else None,
        (stamp_ns(msg.header.stamp) - frame.stamp_ns) / NS_PER_S, lidar.intensity_scale)
        for lidar, msg in zip(lidars, frame.clouds))
    padded, refused = pipe.decode_set(reads)
    if not refused:
        return padded, frame
    if len(refused) == sum(read is not None for read in reads):
        raise next(iter(refused.values()))
    names = tuple(f'{lidars[i].name}: {exc}' for i, exc in refused.items())
    clouds = tuple(None if i in refused else msg for i, msg in enumerate(frame.clouds))
    return padded, FrameClouds(frame.stamp_ns, clouds, frame.tf_poses, frame.missing,
                               frame.refused + names)


def blank_lidars(cfg: PipelineConfig, frame: FrameClouds,
                 padded: PaddedCloud) -> tuple[str, ...]:
    """
    Return the LiDARs of a set whose cloud is in it but holds no valid point (empty, all NaN).

    Read from each LiDAR's rows of the decoded buffer (read it before the buffer is reused).
    Such a LiDAR adds nothing to the frame, as one missing from the set: a blocked or failed
    sensor among several that work would otherwise go unreported. () for one LiDAR.
    """
    if not cfg.lidars:
        return ()
    starts = (0, *padded.starts)
    # No returns at all, or rows of which none is valid; a cloud with returns but no rows (the
    # set cut to the largest bucket by shares) is subsampled, not blank.
    return tuple(lidar.name for lidar, msg, start, (rows, returns, *_) in zip(
        cfg.lidar_sensors, frame.clouds, starts, padded.lidars)
        if msg is not None and (returns == 0 or rows > 0 and not has_valid_point(
            padded.buffer[start:start + rows])))


def lacking_fields(cfg: PipelineConfig, frame: FrameClouds, padded: PaddedCloud
                   ) -> tuple[tuple[str, tuple[str, ...]], tuple[str, tuple[str, ...]]]:
    """
    Return the frame's LiDARs lacking a field: ((key, fields), (key, fields)).

    The first for the intensity field, the second for the time field: the parameter prefix
    (``lidar`` or ``lidars.<name>``) of the first LiDAR whose cloud lacks that field (or whose
    times are not a sweep's), and that cloud's field names; ('', ()) where none does. Each is
    looked for on its own, so one LiDAR lacking its intensity does not hide another's time.
    Field names are built only then (not per frame).
    """
    lacking = [('', ()), ('', ())]
    lidars = cfg.lidar_sensors
    for lidar, msg, (_, _, intensity, timed) in zip(lidars, frame.clouds, padded.per_lidar):
        if msg is None:
            continue
        for k, lacks in enumerate((not intensity, lidar.timing.active and not timed)):
            if lacks and not lacking[k][0]:
                lacking[k] = (lidar.key, tuple(f.name for f in msg.fields))
    return lacking[0], lacking[1]
