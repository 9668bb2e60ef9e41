"""
The one frame path: cloud and camera buffer -> pairing, pipeline, picture, latency record.

The node and offline replay both drive a ``FramePath``, so replay is the node by construction;
each only moves messages in (subscriptions or a bag) and out (publishers or a bag). No ROS
import: messages are read by attribute, outputs are NumPy arrays and a plain dict.
"""

from contextlib import nullcontext
from dataclasses import dataclass
import time

import numpy as np

from .camera import read_features
from .cloud import read_points
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
    Decode, pair, process and describe frames for one pipeline.

    ``add_features`` feeds the camera buffer (raises ``FeatureMapError``); ``add_odometry``
    the odometry buffer (raises ``OdometryError``); ``process`` runs one PointCloud2 (raises
    ``CloudFormatError``); ``finish`` completes the record once the outputs are out. Not
    thread-safe: the node serialises calls with its own locks.
    """

    def __init__(self, cfg: PipelineConfig, pipe: BevPipeline):
        self.cfg, self.pipe = cfg, pipe
        self.sync = CameraSync(pipe.camera_names, cfg.max_camera_lidar_delay_s)
        self._shapes = {c.name: (c.height, c.width, c.channels) for c in cfg.cameras}
        self.accumulating = pipe.num_sweeps > 1
        self.odometry = OdometryBuffer(cfg.accumulation.max_odometry_gap_s, cfg.grid.frame_id)

    def add_features(self, name: str, msg) -> bool:
        """Decode a camera's feature Image into the buffer; True when its stamps jumped back."""
        fmap = read_features(msg, *self._shapes[name])
        return self.sync.add(name, stamp_ns(msg.header.stamp), fmap)

    def add_odometry(self, msg) -> None:
        """Check and buffer a nav_msgs/Odometry message (pose of the grid frame)."""
        self.odometry.add(msg)

    def process(self, msg, picture: bool = True, buffer_lock=None, pipe_lock=None) -> Frame:
        """
        Decode a PointCloud2, pair the cameras, run the pipeline; the record lacks output times.

        ``picture``: build the rgb8 picture (not with a projection, whose channels are no
        longer the raw LiDAR ones). ``buffer_lock`` is held while pairing reads the camera
        buffer, ``pipe_lock`` around the pipeline call; decoding needs neither.
        """
        started = time.perf_counter()
        points, num_points = read_points(msg, self.pipe.padder.capacity,
                                         self.cfg.overflow_policy)
        decoded = time.perf_counter()
        stamp = stamp_ns(msg.header.stamp)
        with buffer_lock or nullcontext():
            pairing, jumped = self.sync.pair(stamp)
            pose = self.odometry.pose_at(stamp) if self.accumulating else None
        with pipe_lock or nullcontext():
            result = self.pipe.process(points, pairing.maps, num_points=num_points,
                                       stamp_ns=stamp, pose=pose)
        rgb = None
        if picture and not self.pipe.projected:
            rgb = bev_to_rgb(result.features, self.cfg.grid.z_min, self.cfg.grid.z_max)
        record = {
            'num_points': result.num_points, 'bucket': result.bucket,
            'overflow_points': result.overflow_points, 'decode_ms': (decoded - started) * 1e3,
            'pad_ms': result.pad_ms, 'compute_ms': result.compute_ms,
            'cameras_used': result.cameras_used,
            'compiles_after_warmup': result.compiles_after_warmup,
        }
        return Frame(stamp, result, rgb, record, pairing.stale, jumped, started,
                     self.accumulating and pose is None)

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
