"""
BevPipeline: one ahead-of-time compiled executable per bucket, warmed at start-up.

Static (changing it recompiles, so it is fixed at construction): grid H x W, bucket sizes,
camera count, feature-map shape and channels, height levels, projection shape, activation.
Traced (changing it never recompiles): calibration, grid offsets and resolution, point counts.
The per-frame path only touches preallocated NumPy buffers, calls of the compiled executables
and ``np.asarray`` of their results: none of these compiles, so after ``warmup()`` the
process-wide compile counter stays where it was. Executables come from the private executable
store when a previous start left them there (see executable_cache.py).
"""

from dataclasses import dataclass
import functools
import threading
import time
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from . import kernels
from .buckets import BucketPadder
from .camera import calibration_arrays
from .config import CameraConfig, ConfigError, load_fusion_weights, PipelineConfig, Pose
from .executable_cache import ExecutableCache, private_cache_dir

COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'
_compile_lock = threading.Lock()
_compile_count = 0
_listener_installed = False


def _on_duration(event: str, duration_secs: float, **_) -> None:
    global _compile_count
    if event == COMPILE_EVENT:
        with _compile_lock:
            _compile_count += 1


def compile_count() -> int:
    """Return the XLA compiles in this process since the counter was installed."""
    install_compile_counter()
    with _compile_lock:
        return _compile_count


def install_compile_counter() -> None:
    """Register the jax.monitoring listener once per process."""
    global _listener_installed
    with _compile_lock:
        if not _listener_installed:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _listener_installed = True


@dataclass(frozen=True)
class FrameResult:
    """One frame through the pipeline."""

    features: np.ndarray       # float32[H, W, C_out], row = x index, column = y index
    num_points: int            # points in the input cloud
    bucket: int                # capacity of the executable that ran
    overflow_points: int       # points dropped by the overflow policy
    cameras_used: int          # cameras that contributed (not masked)
    nonfinite_features: int    # non-finite feature values replaced by 0 this frame
    pad_ms: float              # host padding into the bucket buffer
    compute_ms: float          # transfer, kernels, block_until_ready, result to host
    compiles_after_warmup: int


def _frame(points, num_valid, lidar_rotation, lidar_translation, grid, features, camera_valid,
           tables, projection, *, height, width, activation):
    lidar = kernels.voxelize(points, num_valid, lidar_rotation, lidar_translation, grid,
                             height=height, width=width)
    if features is None:
        camera = jnp.zeros((height, width, 0), jnp.float32)
        coverage = jnp.zeros((height, width), jnp.float32)
    else:
        camera, coverage = kernels.lift_cameras(features, camera_valid, tables,
                                                height=height, width=width)
    return kernels.fuse(lidar, camera, coverage, projection, activation=activation)


class BevPipeline:
    """LiDAR + camera BEV fusion with one AOT executable per bucket; see the module doc."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.cache_dir = private_cache_dir(cfg.compilation_cache_dir)
        install_compile_counter()
        grid = cfg.grid
        self.height, self.width = grid.height, grid.width
        self.padder = BucketPadder(cfg.buckets, cfg.overflow_policy)
        self.camera_names = tuple(c.name for c in cfg.cameras)
        self._grid = np.array([grid.x_min, grid.y_min, grid.z_min, grid.z_max, grid.resolution],
                              np.float32)
        weights = load_fusion_weights(cfg)
        self._projection = None if weights is None else tuple(jax.device_put(w) for w in weights)
        self.output_channels = cfg.fused_channels if weights is None else weights[0].shape[1]
        self.projected = weights is not None     # output channels are no longer the raw ones
        if cfg.cameras:
            first = cfg.cameras[0]
            self._map_shape = (first.height, first.width, first.channels)
            for cam in cfg.cameras:
                if (cam.height, cam.width, cam.channels) != self._map_shape:
                    raise ConfigError(f'cameras.{cam.name}: every camera needs the same feature-'
                                      f'map shape, got {(cam.height, cam.width, cam.channels)} '
                                      f'and {self._map_shape}')
            self._features = np.zeros((len(cfg.cameras),) + self._map_shape, np.float32)
        else:
            self._map_shape, self._features = None, None
        self._camera_valid = np.zeros(len(cfg.cameras), bool)
        self._frame_jit = jax.jit(functools.partial(
            _frame, height=self.height, width=self.width, activation=cfg.fusion.activation))
        self._geometry_jit = jax.jit(functools.partial(
            kernels.lift_geometry, height=self.height, width=self.width,
            num_heights=cfg.fusion.num_heights,
            map_height=self._map_shape[0] if self._map_shape else 1,
            map_width=self._map_shape[1] if self._map_shape else 1))
        self._executables: dict[int, jax.stages.Compiled] = {}
        self._store = ExecutableCache(self.cache_dir)
        self._static = repr((self.height, self.width, cfg.fusion.activation,
                             cfg.fusion.num_heights, self._map_shape))
        self._geometry = None
        self._tables = None
        self._lidar_rotation = self._lidar_translation = None
        self._calibration = (cfg.lidar, cfg.cameras)
        self._baseline: int | None = None
        self.compile_seconds: dict[str, float] = {}

    # -- start-up ----------------------------------------------------------------------------

    def warmup(self) -> dict[str, float]:
        """
        Compile the calibration function and every bucket, run each once; returns seconds.

        Keys are 'calibration' and the bucket sizes as strings. After this returns, the compile
        counter's value is the baseline for ``compiles_after_warmup``.
        """
        times = {}
        start = time.perf_counter()
        if self.cfg.cameras:
            intr, rot, trans = calibration_arrays(self.cfg.cameras)
            self._geometry = self._store.get(
                'geometry', self._static, self._geometry_jit, (intr, rot, trans, self._grid),
                jax.tree.structure(kernels.LiftTables(0, 0, 0)))
        times['calibration'] = time.perf_counter() - start
        self.set_calibration(*self._calibration)
        for size in self.padder.sizes:
            start = time.perf_counter()
            self._executables[size] = self._store.get(
                'frame', self._static, self._frame_jit, self._arg_specs(size),
                jax.tree.structure(0))
            times[str(size)] = time.perf_counter() - start
        # One real call per executable pays first-run costs now, not on the first frame.
        for size in self.padder.sizes:
            self._run(size, np.zeros((size, 4), np.float32), 0)
        self.compile_seconds = times
        self._baseline = compile_count()
        return times

    def _arg_specs(self, bucket: int) -> tuple:
        spec = jax.ShapeDtypeStruct
        n = len(self.cfg.cameras)
        features = None if self._map_shape is None else spec(
            (n,) + self._map_shape, jnp.float32)
        tables = None if self._tables is None else jax.tree.map(
            lambda a: spec(a.shape, a.dtype), self._tables)
        projection = None if self._projection is None else jax.tree.map(
            lambda a: spec(a.shape, a.dtype), self._projection)
        return (spec((bucket, 4), jnp.float32), spec((), jnp.int32), spec((3, 3), jnp.float32),
                spec((3,), jnp.float32), spec((5,), jnp.float32), features,
                spec((n,), jnp.bool_), tables, projection)

    def set_calibration(self, lidar: Pose | None = None,
                        cameras: tuple[CameraConfig, ...] | None = None) -> None:
        """
        Set the LiDAR and camera calibration; recomputes the lift tables, never recompiles.

        ``cameras`` must keep the configured names, order and feature-map shapes.
        """
        if lidar is not None:
            self._lidar_rotation = jax.device_put(lidar.rotation_matrix().astype(np.float32))
            self._lidar_translation = jax.device_put(np.asarray(lidar.translation, np.float32))
        if cameras is not None and self.cfg.cameras:
            if tuple(c.name for c in cameras) != self.camera_names:
                raise ConfigError(f'cameras.names: calibration for {[c.name for c in cameras]}, '
                                  f'the pipeline has {list(self.camera_names)}')
            if self._geometry is None:
                raise RuntimeError('set_calibration(cameras=...) needs warmup() first')
            self._tables = self._geometry(*calibration_arrays(cameras), self._grid)
        self._calibration = (lidar or self._calibration[0], cameras or self._calibration[1])

    # -- per frame -----------------------------------------------------------------------------

    @property
    def compiles_after_warmup(self) -> int:
        """XLA compiles in this process since warmup() finished (0 is the only good value)."""
        if self._baseline is None:
            return 0
        return compile_count() - self._baseline

    def process(self, points: np.ndarray, cameras: Mapping[str, np.ndarray | None] | None = None,
                num_points: int | None = None) -> FrameResult:
        """
        Run one frame: pad, transfer, compute, fetch.

        points: float32[N, 4] x, y, z, intensity in the LiDAR frame (any N; above the largest
        bucket the overflow policy applies). cameras: name -> float32[H_f, W_f, C] or None; a
        camera left out or None is masked for this frame. num_points: the size of the original
        cloud when the caller already cut it to capacity (``cloud.read_points(max_points=)``),
        so the dropped points are still reported.
        """
        if not self._executables:
            raise RuntimeError('BevPipeline.process() needs warmup() first')
        start = time.perf_counter()
        points = np.asarray(points, np.float32)
        if points.ndim != 2 or points.shape[1] != 4:
            raise ValueError(f'points must be (N, 4), got {points.shape}')
        padded = self.padder.pad(points)
        total = points.shape[0] if num_points is None else max(num_points, points.shape[0])
        overflow = padded.overflow + (total - points.shape[0])
        nonfinite = self._stage_cameras(cameras or {})
        padded_at = time.perf_counter()
        features = self._run(padded.bucket, padded.buffer, padded.count)
        done = time.perf_counter()
        return FrameResult(
            features=features, num_points=total, bucket=padded.bucket, overflow_points=overflow,
            cameras_used=int(self._camera_valid.sum()), nonfinite_features=nonfinite,
            pad_ms=(padded_at - start) * 1e3, compute_ms=(done - padded_at) * 1e3,
            compiles_after_warmup=self.compiles_after_warmup)

    def _run(self, bucket: int, buffer: np.ndarray, count: int) -> np.ndarray:
        out = self._executables[bucket](
            buffer, np.int32(count), self._lidar_rotation, self._lidar_translation, self._grid,
            self._features, self._camera_valid, self._tables, self._projection)
        return np.asarray(out.block_until_ready())

    def _stage_cameras(self, cameras: Mapping[str, np.ndarray | None]) -> int:
        """Copy given maps into the preallocated batch; returns non-finite values zeroed."""
        unknown = set(cameras) - set(self.camera_names)
        if unknown:
            raise ValueError(f'unknown camera {sorted(unknown)[0]!r}; '
                             f'configured: {list(self.camera_names)}')
        nonfinite = 0
        for i, name in enumerate(self.camera_names):
            fmap = cameras.get(name)
            self._camera_valid[i] = fmap is not None
            if fmap is None:
                continue
            if fmap.shape != self._map_shape:
                raise ValueError(f'camera {name!r}: feature map {fmap.shape}, '
                                 f'expected {self._map_shape}')
            slot = self._features[i]
            np.copyto(slot, fmap)
            bad = ~np.isfinite(slot)
            if bad.any():
                # NaN * 0 is NaN: a non-finite value would poison every cell sampling near it.
                nonfinite += int(bad.sum())
                slot[bad] = 0.0
        return nonfinite
