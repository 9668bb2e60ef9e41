"""
BevPipeline: one ahead-of-time compiled executable per bucket, warmed at start-up.

What is static (changing it recompiles) and what is traced, the per-frame path that cannot
compile, the lift's slots per cell and the accumulation ring are described in docs/design.md
("Static and traced", "One frame, end to end", "Kernels"). Executables come from the private
executable store when a previous start left them there (executable_cache.py).
"""

import functools
import time
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from . import kernels, lift
from .api_arguments import (checked_cameras, checked_frame_arguments, checked_lidar_poses,
                            checked_points)
from .box_decode import head_function, param_leaves
from .buckets import BucketPadder, PaddedCloud, SetCloud
from .compile_counter import compile_count, install_compile_counter
from .executable_cache import ExecutableCache, private_cache_dir
from .frame_result import class_thresholds, FrameResult, PendingFrame, result_placement
from .kernel_inputs import calibration_arrays, calibration_vector, SweepHistory
from .memory_refusal import refused_out_of_memory
from .plugin_failure import plugin_keys
from .plugin_weights import EncoderWeights, HeadWeights
from .staging import CameraStaging, DoubleBuffer
from ..detection.head import HeadInput, load_head
from ..geometry.ego_motion import MOTION_SIZE, STILL
from ..geometry.rotations import pose_matrix
from ..settings.channels import COVERAGE_CHANNEL, lidar_channels, projected_channels
from ..settings.config import CameraConfig, load_fusion_weights, PipelineConfig, Pose
from ..settings.lidar_filter import LidarFilter
from ..settings.parameters import ConfigError


class BevPipeline(HeadWeights, EncoderWeights):
    """
    LiDAR + camera BEV fusion with one AOT executable per bucket; one thread at a time.

    Args
    ----
    cfg: the validated PipelineConfig; its static values are fixed for the pipeline's life.

    Raises
    ------
    ConfigError: unreadable fusion weights, a head or encoder that cannot be loaded, no memory.

    """

    @refused_out_of_memory
    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.cache_dir = private_cache_dir(cfg.compilation_cache_dir)
        install_compile_counter()
        grid = cfg.grid
        self.height, self.width = grid.height, grid.width
        self.padder = BucketPadder(cfg.buckets, cfg.overflow_policy)
        self.camera_names = tuple(c.name for c in cfg.cameras)
        self.lidar_count = len(cfg.lidar_sensors)    # static: the calibration vector's length
        self._grid = grid.vector()
        self.lidar_filter = cfg.lidar_filter     # the crop in force (set_calibration)
        weights = load_fusion_weights(cfg)
        self._projection = None if weights is None else tuple(jax.device_put(w) for w in weights)
        self.num_sweeps = cfg.accumulation.num_sweeps
        self.max_sweep_age_s = cfg.accumulation.max_sweep_age_s     # live: set it any time
        self.lidar_channels = lidar_channels(self.num_sweeps)
        self.output_channels = cfg.fused_channels if weights is None else weights[0].shape[1]
        self.projected = weights is not None     # output channels are no longer the raw ones
        n = len(cfg.cameras)
        self._map_shape = cfg.map_shape         # the config checked that every camera has it
        self.load_image_encoder(cfg, self._map_shape)
        # The batch that crosses to the device: the maps, or the images the encoder reads.
        self._staging = None if not n else CameraStaging(self.camera_names, *(
            (cfg.image_shape, np.uint8) if self.encoder else (self._map_shape,)))
        # per frame, in one transfer: the real rows, a flag per camera, each further LiDAR's start
        self._scalars = DoubleBuffer((n + self.lidar_count,), np.int32)
        self._motion = DoubleBuffer((MOTION_SIZE,))      # the deskew twist, per frame
        self._camera_valid, self._features_device = np.zeros(n, bool), None
        self.head_input = HeadInput(    # what a head reads: train checks its checkpoints by it
            self.height, self.width, self.output_channels, grid.resolution, projected_channels(
                self.output_channels) if self.projected else self.lidar_channels
            + cfg.camera_channel_names + (COVERAGE_CHANNEL,),
            self.encoder.name if self.encoder else '')
        self.head = load_head(cfg.head.module, cfg.head.weights, self.head_input)
        self.plugins = plugin_keys(self.head, self.encoder)     # named if one fails as it runs
        self.head_classes, self._head_params, self.head_weights = ((), None, None) if (
            self.head is None) else (self.head.spec.classes, param_leaves(self.head.params),
                                     self.head.weights_path)
        # live: set it any time (a float, or float32[C] per class: class_thresholds)
        self.score_threshold = class_thresholds(cfg.head, self.head_classes)
        past = self.num_sweeps - 1
        self.output_memory, self.features_memory, shardings = result_placement(
            self.head is not None, past)
        # The CPU backend reads aligned host arrays in place, through device_put or not: not
        # saves its dispatch (docs/performance.md, "The rest of the CPU frame"; the camera
        # batch's, 0.25-0.4 ms a frame at four cameras). Other backends get device_put.
        self.host_inputs = jax.devices()[0].platform == 'cpu'
        self._frame_jit = jax.jit(functools.partial(
            kernels.bev_frame, height=self.height, width=self.width,
            activation=cfg.fusion.activation, encode=self.encoder and self.encoder.spec.apply),
            donate_argnums=(1,) if past else (), out_shardings=shardings)
        self._head_executable = self._ring = None    # set by warmup (the ring: accumulation)
        # Accumulation state on the host: what each slot of the device ring holds.
        self._sweeps = SweepHistory(past, kernels.MOTION_SIZE)
        self._sweep_staging = kernels.SweepArgs(
            DoubleBuffer(self._sweeps.scalars.shape, np.int32),
            DoubleBuffer(self._sweeps.motion.shape)) if past else None
        self._executables: dict[int, jax.stages.Compiled] = {}
        self.store = ExecutableCache(self.cache_dir)
        self.lift_slots = 0          # static, set by warmup() (0 without cameras)
        self._counts = self._geometry = self._tables = self._calibration_device = None
        self._calibration = (tuple(lidar.pose for lidar in cfg.lidar_sensors), cfg.cameras)
        self._baseline: int | None = None
        self.compile_seconds: dict[str, float] = {}

    def _static(self) -> str:
        return repr((self.height, self.width, self.cfg.fusion.activation,
                     self.cfg.fusion.num_heights, self._map_shape, self.lift_slots,
                     self.num_sweeps, self.features_memory,
                     self.encoder and (self.encoder.identity, self.cfg.image_shape)))

    def _geometry_jit(self, function, **static):
        map_h, map_w = self._map_shape[:2]
        return jax.jit(functools.partial(
            function, height=self.height, width=self.width,
            num_heights=self.cfg.fusion.num_heights, map_height=map_h, map_width=map_w, **static))

    # -- start-up ----------------------------------------------------------------------------

    @refused_out_of_memory
    def warmup(self) -> dict[str, float]:
        """
        Compile (or load) the calibration functions and every bucket, and run each once.

        Sets ``lift_slots``; the compile counter's value after it is the baseline.

        Returns
        -------
        dict[str, float]: seconds per part, keys 'calibration' and the bucket sizes as strings.

        """
        times = {}
        start = time.perf_counter()
        if self.cfg.cameras:
            calibration = (calibration_arrays(self._calibration[1]), self._grid)
            self._counts = self.store.get(
                'lift_counts', self._static(), self._geometry_jit(lift.lift_sample_counts),
                calibration, jax.tree.structure(0))
            needed = int(np.asarray(self._counts(*calibration)).max())
            self.lift_slots = self.cfg.fusion.max_samples_per_cell or max(needed, 1)
            tables = lift.LiftTables(0, 0, 0)
            self._geometry = self.store.get(
                'geometry', self._static(),
                self._geometry_jit(lift.lift_geometry, slots=self.lift_slots), calibration,
                jax.tree.structure((tables, 0)))
        times['calibration'] = time.perf_counter() - start
        self.set_calibration(*self._calibration)
        accumulating = self.num_sweeps > 1
        ring = jax.ShapeDtypeStruct(self._ring_shape, jnp.float32)
        if self.head is not None:
            start = time.perf_counter()
            self._head_executable = self.store.get('head', self.head_key(), *head_function(
                self.head.spec, self.cfg.head.max_objects, self._head_params,
                (self.height, self.width, self.output_channels), self.output_memory,
                kernels.calibration_size(self.lidar_count)))
            times['head'] = time.perf_counter() - start
        for size in self.padder.sizes:
            start = time.perf_counter()
            specs = (self._frame_specs(size),) + ((ring,) if accumulating else ())
            self._executables[size] = self.store.get(
                'frame', self._static(), self._frame_jit, specs,
                jax.tree.structure((0, 0) if accumulating else 0))
            times[str(size)] = time.perf_counter() - start
        # One real call per executable pays first-run costs now, not on the first frame.
        batch = None if self._staging is None else self._staging.batches.current
        self._features_device = batch if self.host_inputs else jax.device_put(batch)
        self.reset_sweeps(ring=True)
        for size in self.padder.sizes:
            jax.block_until_ready(self._launch(self.padder.pad(np.zeros((size, 4),
                                                                        np.float32)))[0])
        self.reset_sweeps()
        self.compile_seconds = times
        self._baseline = compile_count()
        return times

    @property
    def _ring_shape(self) -> tuple[int, int, int]:
        return (self.num_sweeps - 1, self.padder.capacity, 4)

    def _frame_specs(self, bucket: int) -> kernels.FrameArgs:
        spec = jax.ShapeDtypeStruct
        shape_of = functools.partial(jax.tree.map, lambda a: spec(a.shape, a.dtype))
        return kernels.FrameArgs(
            points=spec((bucket, 4), jnp.float32),
            scalars=spec(self._scalars.current.shape, jnp.int32),
            times=spec((bucket,), jnp.float32), motion=spec((MOTION_SIZE,), jnp.float32),
            calibration=spec((kernels.calibration_size(self.lidar_count),), jnp.float32),
            features=None if self._staging is None else spec(
                self._staging.batches.current.shape, self._staging.batches.current.dtype),
            lift=None if self._tables is None else shape_of(self._tables),
            projection=None if self._projection is None else shape_of(self._projection),
            sweeps=None if self.num_sweeps == 1 else shape_of(
                kernels.SweepArgs(self._sweeps.scalars, self._sweeps.motion)),
            encoder=None if self.encoder is None else shape_of(self._encoder_params))

    def frame_args(self, points: np.ndarray, count: int, times: np.ndarray | None = None,
                   motion: np.ndarray | None = None,
                   starts: tuple[int, ...] = ()) -> kernels.FrameArgs:
        """
        Return the frame function's arguments for a padded cloud and the staged cameras.

        Also for running ``kernels.bev_frame`` some other way (the benchmarks' naive jit and
        no-jit rows) on exactly this pipeline's state. ``points``: float32[B, 4], a bucket-sized
        buffer; ``count``: its real rows; ``times``: float32[B] s after the stamp (None: 0);
        ``motion``: the deskew twist (``ego_motion.deskew_motion``; None: no deskew);
        ``starts``: with several LiDARs the first row of each after the first (() puts every
        row on the first). Per-frame
        parts are on the host (the next of two aligned arrays each, kept while a frame that
        reads them is in flight), the rest on the device.
        """
        scalars = self._scalars.swap()
        scalars[0] = count
        cameras = len(self._camera_valid)
        scalars[1:1 + cameras] = self._camera_valid
        scalars[1 + cameras:] = starts or count
        twist = self._motion.swap()
        twist[:] = STILL if motion is None else motion
        if times is None:
            times = np.zeros(points.shape[0], np.float32)
        sweeps = None
        if self._sweep_staging is not None:
            sweeps = kernels.SweepArgs(self._sweep_staging.scalars.swap(),
                                       self._sweep_staging.motion.swap())
            np.copyto(sweeps.scalars, self._sweeps.scalars)
            np.copyto(sweeps.motion, self._sweeps.motion)
        return kernels.FrameArgs(points, scalars, times, twist, self._calibration_device,
                                 self._features_device, self._tables, self._projection, sweeps,
                                 self._encoder_params)

    def set_calibration(self, lidar: Pose | tuple[Pose, ...] | None = None,
                        cameras: tuple[CameraConfig, ...] | None = None,
                        lidar_filter: LidarFilter | None = None, tables=None) -> None:
        """
        Set the LiDAR and camera calibration; recomputes the lift tables, never recompiles.

        ``lidar`` (its pose; with several LiDARs a pose each, in ``lidars.names`` order: ValueError
        for another count), ``cameras`` (all of them: names, order, map shapes; intrinsics,
        lenses and poses are traced), ``lidar_filter`` (range band, ego box): None keeps the one
        in force. ``tables``: ``lift_tables(cameras)`` computed beforehand (off the frame path),
        else here. Raises ConfigError as ``lift_tables``; nothing changes then.
        """
        lidar = checked_lidar_poses(lidar, self._calibration[0])
        if cameras is not None and self.cfg.cameras:
            self._tables = self.lift_tables(cameras) if tables is None else tables
        self.lidar_filter = lidar_filter or self.lidar_filter
        self._calibration_device = jax.device_put(
            calibration_vector(lidar, self.lidar_filter.vector(), self._grid))
        self._calibration = (lidar, cameras or self._calibration[1])

    def lift_tables(self, cameras: tuple[CameraConfig, ...]):
        """
        Return the lift tables of ``cameras`` (for ``set_calibration``); changes nothing.

        The lift geometry: about 170 ms at the shipped size. ConfigError for other camera names,
        or samples that do not fit the slots per cell fixed at warm-up (naming the camera).
        """
        if tuple(c.name for c in cameras) != self.camera_names:
            raise ConfigError(f'cameras.names: calibration for {[c.name for c in cameras]}, '
                              f'the pipeline has {list(self.camera_names)}')
        cameras = checked_cameras(cameras)      # rotations normalised as the parameters'
        if self._geometry is None:
            raise RuntimeError('set_calibration(cameras=...) needs warmup() first')
        tables, dropped = self._geometry(calibration_arrays(cameras), self._grid)
        if (dropped := np.asarray(dropped)).any():
            raise ConfigError(
                f'cameras.{self.camera_names[int(np.argmax(dropped))]}: this calibration puts '
                f'more camera samples in some cells than the {self.lift_slots} slots per cell '
                f'fixed at start-up ({int(dropped.sum())} samples would be lost); set '
                f'fusion.max_samples_per_cell (up to cameras x num_heights) and restart')
        return tables

    def executable(self, bucket: int) -> jax.stages.Compiled:
        """Return a bucket's frame ``f(args)``; accumulating ``f(args, ring)``, ring donated."""
        return self._executables[bucket]

    @property
    def lidar_poses(self) -> tuple[Pose, ...]:
        """Return the LiDAR poses in force (parameters or the last TF poses applied)."""
        return self._calibration[0]

    def reset_sweeps(self, ring: bool = False) -> None:
        """Forget the earlier sweeps: the next frame uses its own sweep only (``ring``: anew)."""
        self._sweeps.reset()
        if ring and self.num_sweeps > 1:    # warm-up, or the ring went with a failed frame
            self._ring = jax.device_put(np.zeros(self._ring_shape, np.float32))

    @property
    def lift_samples(self) -> np.ndarray | None:
        """Count valid camera samples per camera and cell, float32[N, H*W] (this calibration)."""
        return None if self._tables is None else np.asarray(self._tables.samples)

    # -- per frame -----------------------------------------------------------------------------

    @property
    def compiles_after_warmup(self) -> int:
        """XLA compiles in this process since warmup() finished (0 is the only good value)."""
        return 0 if self._baseline is None else compile_count() - self._baseline

    def decode(self, msg, intensity_field: str | None = None,
               time: tuple[str, str, str] | None = None,
               intensity_scale: float | None = None) -> PaddedCloud:
        """
        Decode a PointCloud2 straight into its bucket's next host buffers, for ``process``.

        ``time``: (field, unit, reference) of the per-point times, None for none;
        ``intensity_field``, ``intensity_scale`` (a multiplier): None takes ``lidar.*``'s. Pass
        the result to ``process`` or ``dispatch`` before the next decode: a bucket has two
        buffers, and the one after next is this one again. Raises CloudFormatError
        (``cloud.read_points``) before any buffer is touched.
        """
        field, scale = self.lidar_filter.intensity_field, self.lidar_filter.intensity_scale
        return self.padder.decode(msg, field if intensity_field is None else intensity_field,
                                  time, scale if intensity_scale is None else intensity_scale)

    def decode_set(self, clouds: tuple[SetCloud | None, ...]):
        """Decode several LiDARs' clouds into one bucket (``BucketPadder.decode_set``)."""
        return self.padder.decode_set(clouds)

    def process(self, points: np.ndarray | PaddedCloud,
                cameras: Mapping[str, np.ndarray | None] | None = None,
                num_points: int | None = None, stamp_ns: int | None = None,
                pose: np.ndarray | None = None, times: np.ndarray | None = None,
                motion: np.ndarray | None = None) -> FrameResult:
        """
        Run one frame: pad, transfer, compute, fetch (``dispatch(...).result()``).

        Args
        ----
        points: float32[N, 4] x, y, z, intensity in the LiDAR frame (any N; above the largest
            bucket the overflow policy applies), or what ``decode`` returned.
        cameras: name -> float32[H_f, W_f, C] or None; a camera left out or None is masked.
        num_points: the size of the original cloud when the caller already cut it to
            capacity (``cloud.read_points(max_points=)``), so the dropped points are reported.
        stamp_ns, pose: with accumulation, the sweep's stamp and the 4 x 4 pose of the grid
            frame in the fixed frame then (``OdometryBuffer.pose_at``); without both, the
            frame uses its own sweep only.
        times: float32[N] s after the stamp, with ``points`` an array (decoded: its own).
        motion: float32[12] the deskew twist (``ego_motion.deskew_motion``); None: not moved.

        Returns
        -------
        FrameResult with the features float32[H, W, C_out] and the frame's statistics.

        """
        return self.dispatch(points, cameras, num_points, stamp_ns, pose, times, motion).result()

    def dispatch(self, points: np.ndarray | PaddedCloud,
                 cameras: Mapping[str, np.ndarray | None] | None = None,
                 num_points: int | None = None, stamp_ns: int | None = None,
                 pose: np.ndarray | None = None, times: np.ndarray | None = None,
                 motion: np.ndarray | None = None) -> PendingFrame:
        """
        Stage one frame and start it on the device without waiting; arguments as ``process``.

        The frame's host buffers are not rewritten until it has finished, however many frames
        follow before its ``result()`` is fetched.
        """
        if not self._executables:
            raise RuntimeError('BevPipeline.process() needs warmup() first')
        start = time.perf_counter()
        pose = checked_frame_arguments(cameras, num_points, stamp_ns, pose, motion)
        if isinstance(points, PaddedCloud):
            padded = points
        else:
            padded = self.padder.pad(*checked_points(points, times),
                                     self.lidar_filter.intensity_scale)
        total = padded.num_points if num_points is None else max(num_points, padded.num_points)
        nonfinite, changed = self.stage_cameras(cameras or {})
        used = 1
        if self.num_sweeps > 1:
            lidar = self.lidar_poses[0]
            # Several LiDARs enter the ring in the grid frame (kernels._sweep_points).
            points_frame = np.eye(4) if self.lidar_count > 1 else pose_matrix(
                lidar.rotation_matrix(), lidar.translation)
            used = self._sweeps.stage(stamp_ns, pose, self.max_sweep_age_s)
        staged = time.perf_counter()
        motion = motion if padded.timed else None
        out, put = self._launch(padded, motion)
        if self.num_sweeps > 1:
            self._sweeps.record(stamp_ns, pose, padded.count, points_frame)
        return PendingFrame(out, (start, staged, put), self.score_threshold, self, {
            'num_points': total, 'bucket': padded.bucket, 'overflow_points': total - padded.count,
            'cameras_used': int(self._camera_valid.sum()), 'nonfinite_features': nonfinite,
            'compiles_after_warmup': self.compiles_after_warmup, 'cameras_sent': changed,
            'sweeps_used': used, 'deskewed': motion is not None})

    @refused_out_of_memory      # and a plug-in failing as it runs (a host callback: at once)
    def _launch(self, padded: PaddedCloud, motion: np.ndarray | None = None):
        """Hand a frame's inputs to its executable; return (output, when they were handed)."""
        args = call = self.frame_args(padded.buffer, padded.count, padded.times, motion,
                                      padded.starts)
        if not self.host_inputs:
            per_frame = ('points', 'scalars', 'times', 'motion', 'sweeps')
            call = args._replace(**dict(zip(per_frame, jax.device_put(
                tuple(getattr(args, name) for name in per_frame)))))
        put = time.perf_counter()
        if args.sweeps is None:
            out = self._executables[padded.bucket](call)
        else:
            out, self._ring = self._executables[padded.bucket](call, self._ring)
        # Until ``out`` is ready its host inputs (aliased on the CPU backend) must stay put.
        self.padder.read_by(padded, out)
        self._scalars.read_by(out, args.scalars)
        self._motion.read_by(out, args.motion)
        if args.sweeps is not None:
            self._sweep_staging.scalars.read_by(out, args.sweeps.scalars)
            self._sweep_staging.motion.read_by(out, args.sweeps.motion)
        if self._staging is not None:
            self._staging.batches.read_by(out)
        if self._head_executable is not None:
            out = (out, self._head_executable(self._head_params, out, args.calibration))
        return out, put

    def stage_cameras(self, cameras: Mapping[str, np.ndarray | None]) -> tuple[int, bool]:
        """
        Stage the next frame's maps (``cameras`` as for ``process``); return (zeroed, sent).

        ``process`` calls it; ``frame_args`` reads what it staged. A map equal to what its slot
        holds is not copied again, and the batch crosses to the device only when a map changed
        (on the CPU backend without a copy: the aligned batch is aliased). A masked camera
        keeps its slot: its flag masks it. Returns the non-finite or out-of-range values zeroed
        and whether the batch was sent.
        """
        unknown = set(cameras) - set(self.camera_names)
        if unknown:
            raise ValueError(f'unknown camera {sorted(unknown)[0]!r}; '
                             f'configured: {list(self.camera_names)}')
        for i, name in enumerate(self.camera_names):
            self._camera_valid[i] = cameras.get(name) is not None
        if self._staging is None:
            return 0, False
        batch, nonfinite = self._staging.stage(cameras)
        if batch is None:
            return 0, False
        self._features_device = batch if self.host_inputs else jax.device_put(batch)
        return nonfinite, True
