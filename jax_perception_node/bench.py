"""
Side-by-side benchmarks: ``jax-perception bench [--quick] [--json FILE] [--out DIR]``.

Everything runs on the same inputs in one run and is reported as ratios, since absolute times on
a shared machine are noisy:

1. Recompile cost: one sequence of LiDAR frames with varying point counts through the bucketed
   AOT pipeline and through a naive ``jax.jit`` of the same frame function on unpadded input
   (each new point count compiles). Mean / p99 per frame (ms), compiles, speedup.
2. Pipeline against peers at several cloud sizes and camera counts: the JAX pipeline, a NumPy
   and a PyTorch-eager implementation of the same contract (``peers.py``) and JAX without jit
   (op by op). Outputs are checked equal before anything is timed; implementations run
   interleaved so machine noise hits all alike. p50 per frame (ms) and ratios.
3. End to end through ROS: publisher -> node -> subscriber, each its own process, at several
   rates: age (receive wall time minus header stamp) p50 / p99 / max, frame-to-frame jitter
   and missed frames as ros2_benchmark reports them, the peak rate with under 5 % missed; and
   the transport floor with an echo node that republishes the same payload sizes without work.
4. Start-up: spawn to ready (cloud subscription visible) with an empty and a warm compilation
   cache, plus a per-step breakdown of the warm start.
5. Memory: the node's RSS and peak RSS (VmHWM) after one cloud per bucket.

Writes ``bench.md`` (tables), ``bench.png`` (plot) and the JSON (``json_path``, else
``out_dir/bench.json``), prints the markdown, and returns 0 when it ran; missed targets are
listed under "Targets", not an error. A peer whose output differs from the pipeline's aborts
the run (exit 1) with a message naming the implementation, size and cell.
"""

from dataclasses import dataclass, replace
import functools
import gc
import json
import math
import os
from pathlib import Path
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

import numpy as np

from . import peers
from .config import (config_from_parameters, default_params_file, PipelineConfig, read_param_file,
                     write_param_file)

RTOL = ATOL = 1e-4       # output equality check of every peer against the JAX pipeline
DROP_LIMIT_PCT = 5.0     # peak rate: the highest rate with fewer missed frames than this
MAIN_ROS_RATE_HZ = 10.0  # the headline ROS numbers (a typical spinning LiDAR)
HEADLINE_POINTS = 131072
REQUIRED_KEYS = (
    'recompile.speedup', 'recompile.naive_compiles', 'recompile.bucketed_compiles_after_warmup',
    'pipeline.speedup_vs_numpy', 'pipeline.speedup_vs_torch_min', 'pipeline.rows',
    'ros.age_p50_ms', 'ros.age_p99_ms', 'ros.floor_p50_ms', 'ros.overhead_ms',
    'ros.peak_rate_hz', 'startup.cold_s', 'startup.warm_s')


class BenchError(RuntimeError):
    """The benchmark cannot go on (a peer disagrees with the pipeline, a process failed)."""


@dataclass(frozen=True)
class Plan:
    """Sizes and durations of one benchmark run (full, --quick, or the test's tiny run)."""

    name: str
    recompile_frames: int          # frames of part 1 (distinct point counts)
    sizes: tuple[int, ...]         # cloud sizes of part 2 (points); also its buckets
    camera_counts: tuple[int, ...]  # part 2 camera rigs: 0, 1 (front) or 6 (ring)
    reps: int                      # timed runs per implementation and row (part 2)
    ros_rates: tuple[float, ...]   # Hz, the rates reported in full (node and floor)
    ros_seconds: float             # s per main rate
    peak_rates: tuple[float, ...]  # Hz, the step-up for the peak rate (node only)
    peak_seconds: float            # s per extra peak step
    ros_points: int | None         # points of the ROS cloud (None: one full synthetic sweep)
    ros_gap_s: float = 1.0         # s of silence before each rate, so no backlog carries over
    ros_warmup_s: float = 1.0      # s published (not counted) before the first rate
    tiny: bool = False             # small grid and cameras (the test)


FULL = Plan('full', 200, (32768, 65536, 131072, 262144), (0, 1, 6), 21, (10.0, 20.0, 50.0),
            10.0, (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0), 5.0, None)
QUICK = replace(FULL, name='quick', recompile_frames=40, reps=5, ros_seconds=3.0,
                peak_seconds=2.0, ros_gap_s=0.5)
TINY = Plan('tiny', 6, (256, 1024), (0, 6), 2, (10.0,), 1.0, (10.0, 20.0), 1.0, 1000,
            ros_gap_s=0.3, ros_warmup_s=0.5, tiny=True)

# The test's small world: a 32 x 48 grid and 12 x 20 x 3 feature maps (compiles in ~1 s).
TINY_GRID = {'grid.x_min': -8.0, 'grid.x_max': 8.0, 'grid.y_min': -12.0, 'grid.y_max': 12.0,
             'grid.z_min': -2.0, 'grid.z_max': 2.0, 'grid.resolution': 0.5,
             'fusion.num_heights': 3}
TINY_CAMERA = {'height': 12, 'width': 20, 'channels': 3, 'fx': 8.0, 'fy': 8.0, 'cx': 9.5,
               'cy': 5.5}
# The shipped cameras' feature maps and intrinsics, used for the 1- and 6-camera rigs.
SHIPPED_CAMERA = {'height': 32, 'width': 88, 'channels': 8, 'fx': 40.0, 'fy': 40.0,
                  'cx': 43.5, 'cy': 15.5}
# A six-camera ring at 60 degree steps: (name, yaw in degrees, CCW from +x; mount radius m).
RING = (('front', 0.0, 1.5), ('front_left', 60.0, 1.0), ('rear_left', 120.0, 1.0),
        ('rear', 180.0, 1.0), ('rear_right', -120.0, 1.0), ('front_right', -60.0, 1.0))
CAMERA_HEIGHT_M = 1.6
SWEEP_T0 = 8.0          # s into the synthetic drive: in town, ~116k returns per sweep
ROS_SWEEP_T = 13.0      # s: a ~104k-point sweep, the "realistic cloud" of the ROS part


# -- configurations -------------------------------------------------------------------------------

def optical_quaternion(yaw_deg: float) -> list[float]:
    """
    Return the unit quaternion (x, y, z, w) of an optical frame looking along ``yaw_deg``.

    The optical frame (REP-103: z forward, x right, y down) of a level camera looking along
    +x has R0 = [[0, 0, 1], [-1, 0, 0], [0, -1, 0]] (columns: optical axes in the grid frame),
    quaternion q0 = (-0.5, 0.5, -0.5, 0.5). Yawing it by psi about grid z is the Hamilton
    product qz(psi) * q0 with qz = (0, 0, sin(psi / 2), cos(psi / 2)).
    """
    half = math.radians(yaw_deg) / 2.0
    x1, y1, z1, w1 = 0.0, 0.0, math.sin(half), math.cos(half)
    x2, y2, z2, w2 = -0.5, 0.5, -0.5, 0.5
    q = np.array([w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                  w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                  w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
                  w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2])
    q /= np.linalg.norm(q)
    return [round(float(v), 12) for v in q]


def camera_block(name: str, yaw_deg: float, radius_m: float, shape: dict) -> dict:
    """Flat parameters of one ring camera: mounted at ``radius_m`` along its yaw, level."""
    yaw = math.radians(yaw_deg)
    k = f'cameras.{name}.'
    params = {k + key: value for key, value in shape.items()}
    params[k + 'translation'] = [round(radius_m * math.cos(yaw), 9),
                                 round(radius_m * math.sin(yaw), 9), CAMERA_HEIGHT_M]
    params[k + 'rotation_xyzw'] = optical_quaternion(yaw_deg)
    return params


def bench_params(plan: Plan, cameras: int | str, buckets=None, cache_dir: str = '') -> dict:
    """
    Flat parameters for a benchmark: the shipped config with a chosen camera rig.

    cameras: 0, 1 (the front camera), 6 (the ring) or 'shipped' (the shipped four cameras).
    ``buckets`` replaces the shipped ones; ``cache_dir`` '' disables the persistent cache so
    compile costs are not blurred. The tiny plan shrinks the grid and the feature maps.
    """
    shipped = read_param_file(default_params_file())
    params = {k: v for k, v in shipped.items() if not k.startswith('cameras.')}
    params['compilation_cache_dir'] = cache_dir
    if buckets is None and plan.tiny:
        buckets = (256, 1024)
    if buckets is not None:
        params['buckets'] = list(buckets)
    shape = TINY_CAMERA if plan.tiny else SHIPPED_CAMERA
    if plan.tiny:
        params.update(TINY_GRID)
    if cameras == 'shipped':
        names = list(shipped['cameras.names'])
        params.update({k: v for k, v in shipped.items() if k.startswith('cameras.')})
        for name in names:
            params.update({f'cameras.{name}.{key}': v for key, v in shape.items()})
    else:
        ring = {0: (), 1: RING[:1], 6: RING}[cameras]
        names = [r[0] for r in ring]
        for name, yaw, radius in ring:
            params.update(camera_block(name, yaw, radius, shape))
    params['cameras.names'] = names
    return params


# -- inputs ---------------------------------------------------------------------------------------

class Inputs:
    """
    Realistic inputs from the synthetic drive: LiDAR sweeps (cached) and camera maps.

    Clouds of a given size are even-stride subsamples of one sweep, or of several consecutive
    sweeps concatenated (an accumulated multi-sweep cloud) when one has too few points.
    """

    def __init__(self, cfg: PipelineConfig):
        from .synthetic_drive import SyntheticDrive
        self.drive = SyntheticDrive(cfg, num_cameras=0)
        self._sweeps: dict[float, np.ndarray] = {}

    def sweep(self, t: float) -> np.ndarray:
        """Structured sweep at time t (s), ``synthetic_drive.POINT_DTYPE``."""
        key = round(t, 6)
        if key not in self._sweeps:
            self._sweeps[key] = self.drive.lidar_frame(key)
        return self._sweeps[key]

    def records(self, n: int, t0: float = SWEEP_T0) -> np.ndarray:
        """Exactly ``n`` structured points from the sweeps at t0, t0 + 0.1 s, ..."""
        from .cloud import keep_rows
        parts, total, t = [], 0, t0
        while total < n:
            parts.append(self.sweep(t))
            total += len(parts[-1])
            t += 0.1
        cloud = np.concatenate(parts) if len(parts) > 1 else parts[0]
        rows = keep_rows(len(cloud), n, 'subsample')
        return cloud[rows]

    def points(self, n: int, t0: float = SWEEP_T0) -> np.ndarray:
        """float32[n, 4] (x, y, z, intensity) from :meth:`records`."""
        return xyzi(self.records(n, t0))

    def camera_maps(self, cfg: PipelineConfig, t: float = SWEEP_T0) -> dict[str, np.ndarray]:
        """Every configured camera's rendered feature map at time t (s)."""
        from .synthetic_drive import SyntheticDrive
        if not cfg.cameras:
            return {}
        drive = SyntheticDrive(cfg)
        return {c.name: drive.camera_features(c.name, t) for c in cfg.cameras}


def xyzi(records: np.ndarray) -> np.ndarray:
    """Structured synthetic-drive points -> float32[N, 4] (x, y, z, intensity)."""
    return np.ascontiguousarray(np.stack(
        [records['x'], records['y'], records['z'], records['intensity']], axis=1), np.float32)


# -- statistics -----------------------------------------------------------------------------------

def _r(value, digits: int = 3):
    """Round for JSON; None and non-finite values become None."""
    if value is None:
        return None
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def summary_ms(seconds) -> dict:
    """Return mean / p50 / p99 / max (ms) of durations in seconds."""
    a = np.asarray(seconds, np.float64) * 1e3
    if a.size == 0:
        return {'mean': None, 'p50': None, 'p99': None, 'max': None}
    return {'mean': _r(a.mean()), 'p50': _r(np.percentile(a, 50)),
            'p99': _r(np.percentile(a, 99)), 'max': _r(a.max())}


def _geometry_tables(cfg: PipelineConfig):
    """Compute the JAX lift tables of ``cfg`` (kernels.lift_geometry, as the pipeline does)."""
    import jax
    from . import kernels
    from .camera import calibration_arrays
    if not cfg.cameras:
        return None
    g = cfg.grid
    grid = np.array([g.x_min, g.y_min, g.z_min, g.z_max, g.resolution], np.float32)
    cam = cfg.cameras[0]
    fn = jax.jit(functools.partial(
        kernels.lift_geometry, height=g.height, width=g.width,
        num_heights=cfg.fusion.num_heights, map_height=cam.height, map_width=cam.width))
    return fn(*calibration_arrays(cfg.cameras), grid)


class FrameInputs:
    """
    Device-side arguments of ``pipeline._frame`` for one config, built with public functions.

    Used by the naive jit (part 1) and JAX without jit (part 2), so both run exactly the
    pipeline's frame function on the pipeline's calibration.
    """

    def __init__(self, cfg: PipelineConfig):
        import jax
        self.cfg = cfg
        g = cfg.grid
        self.grid = np.array([g.x_min, g.y_min, g.z_min, g.z_max, g.resolution], np.float32)
        self.rotation = jax.device_put(cfg.lidar.rotation_matrix().astype(np.float32))
        self.translation = jax.device_put(np.asarray(cfg.lidar.translation, np.float32))
        self.tables = _geometry_tables(cfg)
        self.names = tuple(c.name for c in cfg.cameras)
        cam = cfg.cameras[0] if cfg.cameras else None
        self.features = None if cam is None else np.zeros(
            (len(self.names), cam.height, cam.width, cam.channels), np.float32)
        self.valid = np.zeros(len(self.names), bool)
        from .pipeline import _frame
        self.frame = functools.partial(_frame, height=g.height, width=g.width,
                                       activation=cfg.fusion.activation)

    def args(self, points: np.ndarray, count: int, cameras: dict) -> tuple:
        """Positional arguments of the frame function (projection: none in the benchmarks)."""
        for i, name in enumerate(self.names):
            fmap = cameras.get(name)
            self.valid[i] = fmap is not None
            if fmap is not None:
                self.features[i] = fmap
        return (points, np.int32(count), self.rotation, self.translation, self.grid,
                self.features, self.valid, self.tables, None)


# -- part 1: recompile cost -----------------------------------------------------------------------

def bench_recompile(plan: Plan, log: Callable[[str], None]) -> dict:
    """
    Run the same frames through the bucketed pipeline and a naive jit on unpadded input.

    Per-frame time (s) covers ``process`` for the pipeline; for the naive jit, the call on the
    exact-size cloud (trace + compile when the size is new, run, fetch). The bucketed pass runs
    first and its compiles are the pipeline's own ``compiles_after_warmup``; the naive pass
    counts compiles with the process-wide counter around each call.
    """
    import jax
    from .pipeline import BevPipeline, compile_count
    cfg = config_from_parameters(bench_params(plan, 'shipped'))
    inputs = Inputs(cfg)
    maps = inputs.camera_maps(cfg)
    span_s = 20.0
    times = [round(i * span_s / plan.recompile_frames, 3) for i in range(plan.recompile_frames)]
    clouds = [xyzi(inputs.sweep(t)) for t in times]
    if plan.tiny:
        # Scale the counts into the tiny buckets, keeping them distinct.
        from .cloud import keep_rows
        scale = cfg.buckets[-1] / 120_000
        clouds = [c[keep_rows(len(c), max(1, int(len(c) * scale)), 'subsample')]
                  for c in clouds]
    counts = [len(c) for c in clouds]
    log(f'recompile: {len(clouds)} frames, {min(counts)}..{max(counts)} points, '
        f'{len(set(counts))} distinct counts')

    pipe = BevPipeline(cfg)
    began = time.perf_counter()
    pipe.warmup()
    warmup_s = time.perf_counter() - began
    bucketed = []
    for cloud in clouds:
        began = time.perf_counter()
        pipe.process(cloud, maps)
        bucketed.append(time.perf_counter() - began)
    bucketed_compiles = pipe.compiles_after_warmup

    frame = FrameInputs(cfg)
    naive_fn = jax.jit(frame.frame)
    naive, naive_compiles, compiled_frames = [], 0, []
    for k, cloud in enumerate(clouds):
        before = compile_count()
        began = time.perf_counter()
        out = np.asarray(naive_fn(*frame.args(cloud, len(cloud), maps)))
        naive.append(time.perf_counter() - began)
        new = compile_count() - before
        naive_compiles += new
        if new:
            compiled_frames.append(naive[-1])
        if k < 3:
            # Same function, same inputs: the naive path must agree with the pipeline.
            expected = pipe.process(cloud, maps).features
            _check_equal(f'naive jit, frame {k}', out, expected, _edge_cells(cfg, cloud))
    bucketed_ms, naive_ms = summary_ms(bucketed), summary_ms(naive)
    speedup = naive_ms['mean'] / bucketed_ms['mean']
    log(f'recompile: bucketed mean {bucketed_ms["mean"]} ms, naive mean {naive_ms["mean"]} ms '
        f'({naive_compiles} compiles): speedup {speedup:.1f}x')
    return {
        'frames': len(clouds), 'points_min': min(counts), 'points_max': max(counts),
        'distinct_point_counts': len(set(counts)), 'buckets': list(cfg.buckets),
        'cameras': len(cfg.cameras), 'grid': [cfg.grid.height, cfg.grid.width],
        'bucketed_ms': bucketed_ms, 'naive_ms': naive_ms,
        'naive_compile_frame_ms': summary_ms(compiled_frames),
        'bucketed_warmup_s': _r(warmup_s), 'bucketed_warmup_compile_s': {
            k: _r(v) for k, v in pipe.compile_seconds.items()},
        'speedup': _r(speedup, 2), 'speedup_p99': _r(naive_ms['p99'] / bucketed_ms['p99'], 2),
        'naive_compiles': naive_compiles, 'bucketed_compiles_after_warmup': bucketed_compiles,
        'outputs_equal': True,
    }


# -- part 2: pipeline against peers ---------------------------------------------------------------

def _check_equal(what: str, actual: np.ndarray, expected: np.ndarray,
                 exempt: np.ndarray | None = None) -> int:
    """
    Assert ``actual`` == ``expected`` (rtol = atol = 1e-4) outside the ``exempt`` cells.

    Returns how many exempt cells differ. Raises BenchError naming the first differing cell.
    """
    if actual.shape != expected.shape:
        raise BenchError(f'{what}: output shape {actual.shape}, the pipeline gives '
                         f'{expected.shape}')
    bad = ~np.isclose(actual, expected, rtol=RTOL, atol=ATOL).all(axis=-1)
    exempted = 0
    if exempt is not None:
        exempted = int((bad & exempt).sum())
        bad &= ~exempt
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        raise BenchError(
            f'{what} differs from the JAX pipeline in {int(bad.sum())} of {bad.size} cells, '
            f'first at cell ({i}, {j}): {np.round(actual[i, j], 5).tolist()} vs '
            f'{np.round(expected[i, j], 5).tolist()} (rtol = atol = {RTOL:g}); not timing it')
    return exempted


def _boundary_cells(cfg: PipelineConfig, jax_tables, peer_tables) -> np.ndarray | None:
    """
    Cells whose valid-sample counts differ between the JAX and the peers' lift geometry.

    Both compute the projection in float32 but in a different operation order, so a sample
    whose pixel lies within rounding (~1e-5 px) of the map border can be valid in one and not
    the other. Such cells are reported, not failed; any other difference fails.
    """
    if jax_tables is None:
        return None
    differs = np.asarray(jax_tables.samples) != peer_tables.samples
    return differs.any(axis=0).reshape(cfg.grid.height, cfg.grid.width)


def _edge_cells(cfg: PipelineConfig, points: np.ndarray, eps: float = 5e-5) -> np.ndarray:
    """
    Cells that a point within ``eps`` cells (or m, for z) of a cell or z-range border may go to.

    Float32 rounding differs between implementations (and between XLA's fused and op-by-op
    code) by an ulp or so; a point that close to a border can land in either neighbour. Such
    cells are reported, not failed. Computed in float64.
    """
    g = cfg.grid
    xyz = points[:, :3].astype(np.float64) @ cfg.lidar.rotation_matrix().T \
        + np.asarray(cfg.lidar.translation)
    u, v, z = (xyz[:, 0] - g.x_min) / g.resolution, (xyz[:, 1] - g.y_min) / g.resolution, \
        xyz[:, 2]
    with np.errstate(invalid='ignore'):
        near = ((np.abs(u - np.round(u)) < eps) | (np.abs(v - np.round(v)) < eps)
                | (np.abs(z - g.z_min) < eps) | (np.abs(z - g.z_max) < eps))
    near &= np.isfinite(xyz).all(axis=1)
    cells = np.zeros((g.height, g.width), bool)
    for du in (-eps, eps):
        for dv in (-eps, eps):
            i = np.floor(u[near] + du).astype(np.int64)
            j = np.floor(v[near] + dv).astype(np.int64)
            inside = (i >= 0) & (i < g.height) & (j >= 0) & (j < g.width)
            cells[i[inside], j[inside]] = True
    return cells


def bench_pipeline(plan: Plan, use_torch: bool, log: Callable[[str], None]) -> dict:
    """
    JAX pipeline vs NumPy, JAX without jit and PyTorch eager, per cloud size and camera count.

    Every implementation gets the same unpadded float32 cloud and camera maps; the pipeline
    pads into a bucket equal to the size, so no overflow happens. Each row first checks every
    output against the pipeline's, then runs the implementations ``plan.reps`` times
    interleaved (order reversed every other round), after one untimed call each, with the
    garbage collector off. Reports p50 per frame (ms) and ratios other / JAX.
    """
    import jax
    from .pipeline import BevPipeline
    notes = [
        'Same inputs for all: float32 (N, 4) clouds (even-stride subsamples of consecutive '
        'synthetic sweeps) and rendered camera maps; outputs checked equal '
        f'(rtol = atol = {RTOL:g}) before timing.',
        'Camera lift: every implementation precomputes the bilinear taps once per calibration '
        '(not timed) and only gathers and accumulates them per frame, like the pipeline.',
        'JAX = BevPipeline.process (pad into the bucket, transfer, AOT executable, fetch); '
        'jax_nojit = the same frame function under jax.disable_jit() (op by op, after a '
        'warm-up call); peers take the cloud unpadded.',
    ]
    torch_version = None
    if use_torch:
        import torch
        torch_version = torch.__version__
        notes.append(f'PyTorch {torch_version} eager on the CPU, '
                     f'{os.cpu_count()} threads (torch.set_num_threads).')
    else:
        notes.append('PyTorch is not installed (optional extra `bench`): torch columns '
                     'skipped, speedup_vs_torch_min is null.')
    base = Inputs(config_from_parameters(bench_params(plan, 0)))
    clouds = {n: base.points(n) for n in plan.sizes}
    rows, profile = [], {}
    for num_cameras in plan.camera_counts:
        cfg = config_from_parameters(bench_params(plan, num_cameras, buckets=plan.sizes))
        maps = base.camera_maps(cfg)
        pipe = BevPipeline(cfg)
        pipe.warmup()
        numpy_peer = peers.NumpyBev(cfg)
        torch_peer = peers.TorchBev(cfg) if use_torch else None
        frame = FrameInputs(cfg)
        boundary = _boundary_cells(cfg, frame.tables, numpy_peer.tables)

        def nojit(points, cameras, frame=frame, pipe=pipe):
            padded = pipe.padder.pad(points)
            with jax.disable_jit():
                out = frame.frame(*frame.args(jax.device_put(padded.buffer), padded.count,
                                              cameras))
            return np.asarray(out)

        impls = [('jax', lambda p, c, pipe=pipe: pipe.process(p, c).features),
                 ('numpy', numpy_peer.process), ('jax_nojit', nojit)]
        if torch_peer is not None:
            impls.append(('torch', torch_peer.process))
        for n in plan.sizes:
            points = clouds[n]
            reference = pipe.process(points, maps).features
            edges = _edge_cells(cfg, points)
            exempt = {}
            for name, fn in impls[1:]:
                # jax_nojit shares the pipeline's lift geometry: only point borders exempt.
                mask = edges if name == 'jax_nojit' or boundary is None else edges | boundary
                exempt[name] = _check_equal(
                    f'{name} ({n} points, {num_cameras} cameras)', fn(points, maps),
                    reference, mask)
            times, unstable = _timed_row(impls, points, maps, plan.reps)
            row = {'points': n, 'cameras': num_cameras}
            p50 = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
            for name, _ in impls:
                row[f'{name}_ms'] = _r(p50[name])
            row['min_ms'] = {name: _r(min(t) * 1e3) for name, t in times.items()}
            row['unstable'] = unstable
            if torch_peer is None:
                row['torch_ms'] = None
            for name in ('numpy', 'jax_nojit', 'torch'):
                row[f'speedup_vs_{name}'] = (_r(p50[name] / p50['jax'], 2) if name in p50
                                             else None)
            row['checked'] = [name for name, _ in impls[1:]]
            row['exempt_cells'] = {k: v for k, v in exempt.items() if v}
            rows.append(row)
            log(f'pipeline: {n} points, {num_cameras} cameras: ' + ', '.join(
                f'{k} {v:.2f} ms' for k, v in p50.items()))
            if n == _headline_size(plan) and num_cameras in (0, max(plan.camera_counts)):
                profile[f'{n}_points_{num_cameras}_cameras'] = _stage_profile(
                    pipe, numpy_peer, torch_peer, points, maps, plan.reps)
        del pipe
        gc.collect()
    headline = next(r for r in rows if r['points'] == _headline_size(plan)
                    and r['cameras'] == 0)
    torch_ratios = [r['speedup_vs_torch'] for r in rows if r['speedup_vs_torch'] is not None]
    return {
        'rows': rows,
        'speedup_vs_numpy': headline['speedup_vs_numpy'],
        'speedup_vs_torch_min': min(torch_ratios) if torch_ratios else None,
        'speedup_vs_nojit_min': min(r['speedup_vs_jax_nojit'] for r in rows),
        'headline': {'points': headline['points'], 'cameras': 0},
        'torch_version': torch_version,
        'reps': plan.reps,
        'grid': [cfg.grid.height, cfg.grid.width],
        'outputs_checked': True,
        'profile': profile,
        'notes': notes,
    }


def _headline_size(plan: Plan) -> int:
    """Return the size of the headline row: 131072 points, or the nearest the plan has."""
    return min(plan.sizes, key=lambda n: abs(math.log(n / HEADLINE_POINTS)))


def _timed_row(impls, points, maps, reps: int, attempts: int = 2):
    """
    Interleaved timings of one row, retried once when the machine was visibly busy.

    An implementation is unstable in a run when its p50 is over 2.5x its own best time (and
    over 1 ms more): on a shared 2-core machine, another process taking a core stalls
    PyTorch's OpenMP threads for tens to hundreds of ms. Returns the run with the fewest
    unstable implementations and their names.
    """
    best = None
    for _ in range(attempts):
        times = _interleaved(impls, points, maps, reps)
        unstable = [name for name, t in times.items()
                    if np.median(t) > 2.5 * min(t) and np.median(t) - min(t) > 1e-3]
        if best is None or len(unstable) < len(best[1]):
            best = (times, unstable)
        if not unstable:
            break
    return best


def _interleaved(impls, points, maps, reps: int) -> dict[str, list[float]]:
    """Seconds per call of each implementation, ``reps`` rounds, ABAB order, gc off."""
    for _, fn in impls:
        fn(points, maps)
    times = {name: [] for name, _ in impls}
    gc.collect()
    gc.disable()
    try:
        for rep in range(reps):
            for name, fn in (impls if rep % 2 == 0 else impls[::-1]):
                began = time.perf_counter()
                fn(points, maps)
                times[name].append(time.perf_counter() - began)
    finally:
        gc.enable()
    return times


def _stage_profile(pipe, numpy_peer, torch_peer, points, maps, reps: int) -> dict:
    """p50 per stage (ms): the pipeline's pad / compute split and the peers' voxelize / lift."""
    out = {}
    results = [pipe.process(points, maps) for _ in range(max(reps, 3))]
    out['jax_pad_ms'] = _r(np.median([r.pad_ms for r in results]))
    out['jax_compute_ms'] = _r(np.median([r.compute_ms for r in results]))
    for name, peer in (('numpy', numpy_peer), ('torch', torch_peer)):
        if peer is None:
            continue
        stages = [('voxelize', lambda: peer.voxelize(points))]
        if peer.tables is not None:
            stages.append(('lift', lambda: peer.lift(maps)))
        for stage, fn in stages:
            fn()
            samples = []
            for _ in range(max(reps, 3)):
                began = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - began)
            out[f'{name}_{stage}_ms'] = _r(np.median(samples) * 1e3)
    return out


# -- parts 3-5: ROS -------------------------------------------------------------------------------

class RosBench:
    """
    Runs the node, the echo node and the helper processes; stops every one of them on exit.

    ``work`` holds params files, the compilation cache, inputs and helper outputs; node and
    helper logs go to ``logs``.
    """

    def __init__(self, plan: Plan, work: Path, logs: Path, log: Callable[[str], None]):
        from .demo import local_ros_env
        self.plan, self.work, self.logs, self.log = plan, work, logs, log
        self.env = local_ros_env()
        self.procs: list[subprocess.Popen] = []
        self._files = []
        self.cache_dir = work / 'xla_cache'
        self.params = bench_params(plan, 'shipped', cache_dir=str(self.cache_dir))
        self.cfg = config_from_parameters(dict(self.params, compilation_cache_dir=''))
        self.params_file = write_param_file(self.params, work / 'node.param.yaml')
        self.probe = None

    def __enter__(self):
        """Start the in-process probe."""
        from .bench_ros import Probe
        self.probe = Probe()
        return self

    def __exit__(self, *exc):
        """Stop every process this run started (SIGINT, then kill) and the probe."""
        from .demo import stop_process
        for proc in reversed(self.procs):
            stop_process(proc)
        for handle in self._files:
            handle.close()
        if self.probe is not None:
            self.probe.close()
        return False

    def spawn(self, argv: list[str], log_name: str) -> subprocess.Popen:
        """Start a process with the ROS environment, output to ``logs/log_name``."""
        handle = open(self.logs / log_name, 'w')
        self._files.append(handle)
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        """Stop one process now (SIGINT, then kill)."""
        from .demo import stop_process
        stop_process(proc)

    def wait_gone(self) -> None:
        """Wait until no stopped node's cloud subscription is visible any more."""
        if not self.probe.wait_gone():
            raise BenchError('a stopped node still subscribes to the cloud topic after 15 s; '
                             'is another node running in this ROS domain?')

    def node_argv(self) -> list[str]:
        """Return the node's console script with the benchmark's params file."""
        exe = Path(sys.executable).with_name('jax_perception_node')
        return [str(exe) if exe.exists() else 'jax_perception_node', '--ros-args',
                '--params-file', str(self.params_file)]

    def start_node(self, log_name: str) -> tuple[subprocess.Popen, float, float]:
        """
        Spawn the node and wait until it subscribes; returns (process, ready s, discovered s).

        ready: spawn to the node's own 'ready:' log line (its wall-clock stamp; printed right
        after the subscriptions are created), so DDS discovery delays do not count;
        discovered: spawn to this process seeing the cloud subscription (discovery included,
        which now and then adds a second or more).
        """
        self.wait_gone()
        spawned_wall = time.time()
        began = time.perf_counter()
        proc = self.spawn(self.node_argv(), log_name)
        try:
            discovered = self.probe.wait_ready(proc, timeout_s=180.0) - began
        except RuntimeError as exc:
            raise BenchError(f'{exc}; see {self.logs / log_name}') from None
        ready = None
        deadline = time.monotonic() + 3.0
        while ready is None and time.monotonic() < deadline:
            match = re.search(r'\[([0-9]+\.[0-9]+)\] \[jax_perception\]: ready:',
                              (self.logs / log_name).read_text())
            if match:
                ready = float(match.group(1)) - spawned_wall
            else:
                time.sleep(0.02)
        return proc, discovered if ready is None else ready, discovered

    # -- part 4 ----------------------------------------------------------------------------------

    def startup(self) -> tuple[dict, subprocess.Popen]:
        """Cold (empty cache) and warm start-up (s); returns the warm node, still running."""
        if self.cache_dir.exists():
            shutil.rmtree(self.cache_dir)
        cold_proc, cold_s, cold_seen = self.start_node('node_cold.log')
        self.stop(cold_proc)
        warm_proc, warm_s, warm_seen = self.start_node('node_warm.log')
        self.log(f'start-up: cold {cold_s:.2f} s, warm {warm_s:.2f} s (seen by a subscriber '
                 f'after {cold_seen:.2f} s and {warm_seen:.2f} s)')
        return {
            'cold_s': _r(cold_s), 'warm_s': _r(warm_s), 'warm_over_cold': _r(warm_s / cold_s),
            'cold_discovered_s': _r(cold_seen), 'warm_discovered_s': _r(warm_seen),
            'cold_warmup': parse_warmup_log((self.logs / 'node_cold.log').read_text()),
            'warm_warmup': parse_warmup_log((self.logs / 'node_warm.log').read_text()),
            'definition': "spawn of the node process to its 'ready:' log line (subscriptions "
                          'created, after warm-up); *_discovered_s: until another process '
                          'sees the subscription (adds DDS discovery)',
        }, warm_proc

    def startup_profile(self) -> dict | None:
        """Per-step warm start-up breakdown from the ``startup-profile`` helper (s)."""
        from .bench_ros import helper_command
        out = self.work / 'startup_profile.json'
        proc = self.spawn(helper_command('startup-profile', '--params', str(self.params_file),
                                         '--cache', str(self.cache_dir), '--out', str(out)),
                          'startup_profile.log')
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.stop(proc)
        if proc.returncode != 0 or not out.exists():
            self.log(f'start-up profile failed; see {self.logs / "startup_profile.log"}')
            return None
        return json.loads(out.read_text())

    # -- part 5 ----------------------------------------------------------------------------------

    def memory(self, node: subprocess.Popen, inputs: 'Inputs') -> dict:
        """RSS and peak RSS (VmHWM, MiB) of the node when ready and after a cloud per bucket."""
        import psutil
        proc = psutil.Process(node.pid)
        rows = [{'bucket': None, 'points': 0, **_rss(proc)}]
        for bucket in self.cfg.buckets:
            n = max(1, bucket - 1)
            try:
                record = self.probe.process_cloud(_raw(inputs.records(n, ROS_SWEEP_T)), n)
            except RuntimeError as exc:
                raise BenchError(f'memory: {exc}; see {self.logs / "node_warm.log"}') from None
            rows.append({'bucket': bucket, 'points': n,
                         'bucket_used': int(record.get('bucket', -1)), **_rss(proc)})
        self.log('memory: ' + ', '.join(f'{r["bucket"]}: {r["rss_mib"]} MiB' for r in rows))
        return {'rows': rows, 'peak_rss_mib': max(r['hwm_mib'] for r in rows),
                'note': 'RSS after the node processed one cloud just under each bucket '
                        '(cameras masked); hwm = VmHWM, the peak since the process started '
                        '(compiles included).'}

    # -- part 3 ----------------------------------------------------------------------------------

    def stream(self, kind: str, schedule: list[tuple[str, float, float]], inputs_file: Path) \
            -> dict:
        """Run publisher and subscriber processes around whatever serves the node's topics."""
        from .bench_ros import helper_command
        done = self.work / f'{kind}.done'
        sub_out, pub_out = self.work / f'{kind}_sub.json', self.work / f'{kind}_pub.json'
        for path in (done, sub_out, pub_out):
            path.unlink(missing_ok=True)
        sub = self.spawn(helper_command('subscribe', '--out', str(sub_out), '--until', str(done)),
                         f'{kind}_subscriber.log')
        text = ','.join(f'{label}:{rate:g}:{seconds:g}' for label, rate, seconds in schedule)
        pub = self.spawn(helper_command('publish', '--inputs', str(inputs_file), '--schedule',
                                        text, '--out', str(pub_out), '--gap',
                                        str(self.plan.ros_gap_s), '--warmup',
                                        str(self.plan.ros_warmup_s)), f'{kind}_publisher.log')
        budget = sum(s for _, _, s in schedule) + 2.0 * len(schedule) + 90.0
        try:
            pub.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            self.stop(pub)
        done.touch()
        try:
            sub.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.stop(sub)
        if pub.returncode != 0 or not pub_out.exists() or not sub_out.exists():
            raise BenchError(f'ROS {kind} run failed; see {self.logs}/{kind}_*.log')
        return stream_stats(json.loads(pub_out.read_text()), json.loads(sub_out.read_text()))

    def echo_argv(self) -> list[str]:
        """Return the echo helper's command line, sized like the node's output."""
        from .bench_ros import helper_command
        g = self.cfg.grid
        return helper_command('echo', '--height', str(g.height), '--width', str(g.width),
                              '--channels', str(self.cfg.fused_channels), '--cameras',
                              ','.join(c.name for c in self.cfg.cameras))


def _raw(records: np.ndarray) -> np.ndarray:
    """
    Structured points -> their bytes (uint8) in the driver layout, as a PointCloud2 carries them.

    Copied field by field into ``synthetic_drive.POINT_DTYPE``: concatenating sweeps packs the
    dtype (drops its padding), which would no longer match the advertised point_step.
    """
    from .synthetic_drive import POINT_DTYPE
    out = np.zeros(len(records), POINT_DTYPE)
    for name in POINT_DTYPE.names:
        out[name] = records[name]
    return out.view(np.uint8).reshape(-1)


def _rss(proc) -> dict:
    """RSS now and VmHWM (peak RSS) of a process, MiB."""
    rss = proc.memory_info().rss / 2**20
    hwm = None
    try:
        status = Path(f'/proc/{proc.pid}/status').read_text()
        match = re.search(r'VmHWM:\s+(\d+) kB', status)
        hwm = int(match.group(1)) / 1024 if match else None
    except OSError:
        pass
    return {'rss_mib': _r(rss, 1), 'hwm_mib': _r(hwm if hwm is not None else rss, 1)}


def parse_warmup_log(text: str) -> dict | None:
    """Parse the node's 'warm-up: calibration 12 ms, 16384 300 ms, ...; total 1.2 s' line."""
    match = re.search(r'warm-up: (.*?); total ([0-9.]+) s', text)
    if not match:
        return None
    parts = {}
    for item in match.group(1).split(', '):
        name, _, value = item.rpartition(' ')[0].rpartition(' ')
        try:
            parts[name or item.split(' ')[0]] = float(value)
        except ValueError:
            continue
    return {'ms': parts, 'total_s': float(match.group(2))}


def stream_stats(published: dict, received: dict) -> dict:
    """
    Per segment: age p50 / p99 / max (ms), jitter, missed frames, received rate, node stages.

    Age = receive wall time minus the header stamp (the publisher's wall clock at publish).
    Missed = published minus received (ros2_benchmark's "# of Missed Frames"); jitter =
    |difference of consecutive inter-arrival intervals| (ms), mean / max / std, as
    ros2_benchmark's frame-to-frame jitter. Node stages are p50 of its ~/debug/latency values.
    """
    arrivals = {}
    for stamp, when in received['features']:
        arrivals.setdefault(stamp, when)
    latency = dict(received['latency'])   # [stamp, values] pairs
    out = {}
    for label, segment in published.items():
        stamps = segment['stamps_ns']
        got = sorted((arrivals[s], s) for s in stamps if s in arrivals)
        ages = np.array([(when - s) / 1e6 for when, s in got])
        missed = len(stamps) - len(got)
        row = {'rate_hz': segment['rate_hz'], 'published': len(stamps), 'received': len(got),
               'missed': missed, 'missed_pct': _r(100.0 * missed / max(1, len(stamps)), 2)}
        if len(ages):
            row.update({'age_p50_ms': _r(np.percentile(ages, 50)),
                        'age_p99_ms': _r(np.percentile(ages, 99)), 'age_max_ms': _r(ages.max())})
        else:
            row.update({'age_p50_ms': None, 'age_p99_ms': None, 'age_max_ms': None})
        when = np.array([w for w, _ in got], np.float64) / 1e6
        if len(when) > 2:
            jitter = np.abs(np.diff(np.diff(when)))
            row.update({'jitter_mean_ms': _r(jitter.mean()), 'jitter_max_ms': _r(jitter.max()),
                        'jitter_std_ms': _r(jitter.std()),
                        'received_rate_hz': _r((len(when) - 1) / ((when[-1] - when[0]) / 1e3),
                                               2)})
        else:
            row.update({'jitter_mean_ms': None, 'jitter_max_ms': None, 'jitter_std_ms': None,
                        'received_rate_hz': None})
        row['publisher_ms_p50'] = _r(np.median(segment['publish_ms'])) if stamps else None
        if len(stamps) > 1:
            row['published_rate_hz'] = _r((len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9),
                                          2)
        records = [latency[s] for s in stamps if s in latency]
        node = {}
        for key in ('decode_ms', 'pad_ms', 'compute_ms', 'publish_ms', 'total_ms', 'age_ms'):
            values = [r[key] for r in records if key in r]
            node[key] = _r(np.median(values)) if values else None
        pipeline = [r['pad_ms'] + r['compute_ms'] for r in records
                    if 'pad_ms' in r and 'compute_ms' in r]
        node['pipeline_ms'] = _r(np.median(pipeline)) if pipeline else None
        # Per frame: its age minus its own pipeline time (pairs each frame with itself).
        paired = [(when - s) / 1e6 - latency[s]['pad_ms'] - latency[s]['compute_ms']
                  for when, s in got if 'compute_ms' in latency.get(s, {})
                  and 'pad_ms' in latency[s]]
        node['age_minus_pipeline_ms'] = _r(np.median(paired)) if paired else None
        row['node_p50'] = node if records else None
        out[label] = row
    return out


def peak_rate(rows: list[dict]) -> float | None:
    """Return the highest rate before the first one with >= 5 % missed (None: the first)."""
    best = None
    for row in sorted(rows, key=lambda r: r['rate_hz']):
        if row['missed_pct'] is None or row['missed_pct'] >= DROP_LIMIT_PCT:
            break
        best = row['rate_hz']
    return best


def bench_ros(plan: Plan, work: Path, logs: Path, log: Callable[[str], None]) -> dict:
    """
    Parts 3-5 with one node process per start: start-up, memory, streams through node and echo.

    Returns {'startup': ..., 'memory': ..., 'ros': ...}.
    """
    from .bench_ros import save_inputs
    rates = sorted(set(plan.ros_rates) | set(plan.peak_rates))
    schedule = [(f'{rate:g}hz', rate, plan.ros_seconds if rate in plan.ros_rates
                 else plan.peak_seconds) for rate in rates]
    floor_schedule = [(f'{rate:g}hz', rate, plan.ros_seconds) for rate in plan.ros_rates]
    with RosBench(plan, work, logs, log) as rb:
        inputs = Inputs(rb.cfg)
        sweep = inputs.sweep(ROS_SWEEP_T)
        records = sweep if plan.ros_points is None else inputs.records(plan.ros_points,
                                                                       ROS_SWEEP_T)
        maps = inputs.camera_maps(rb.cfg, ROS_SWEEP_T)
        inputs_file = save_inputs(work / 'ros_inputs.npz', _raw(records), len(records),
                                  [c.name for c in rb.cfg.cameras], maps)
        startup, node = rb.startup()
        memory = rb.memory(node, inputs)
        log(f'ROS: node at {", ".join(f"{r:g}" for r in rates)} Hz, {len(records)} points, '
            f'{len(maps)} cameras')
        node_rows = rb.stream('node', schedule, inputs_file)
        rb.stop(node)
        rb.wait_gone()
        echo = rb.spawn(rb.echo_argv(), 'echo.log')
        try:
            rb.probe.wait_ready(echo, timeout_s=60.0, what='echo node')
        except RuntimeError as exc:
            raise BenchError(f'{exc}; see {logs / "echo.log"}') from None
        log(f'ROS: transport floor (echo) at {", ".join(f"{r:g}" for r in plan.ros_rates)} Hz')
        floor_rows = rb.stream('floor', floor_schedule, inputs_file)
        rb.stop(echo)
        startup['profile'] = rb.startup_profile()

    rows = []
    for label, rate, _ in schedule:
        row = dict(node_rows[label], floor=floor_rows.get(label))
        node_p50 = row.get('node_p50') or {}
        floor = row['floor']
        if floor and row['age_p50_ms'] is not None and floor['age_p50_ms'] is not None \
                and node_p50.get('pipeline_ms') is not None:
            row['overhead_ms'] = _r(row['age_p50_ms'] - floor['age_p50_ms']
                                    - node_p50['pipeline_ms'])
            row['overhead_paired_ms'] = _r(node_p50['age_minus_pipeline_ms']
                                           - floor['age_p50_ms'])
        else:
            row['overhead_ms'] = row['overhead_paired_ms'] = None
        rows.append(row)
    main = next(r for r in rows if r['rate_hz'] == _main_rate(plan))
    peak = peak_rate(rows)
    ros = {
        'rate_hz': main['rate_hz'], 'points': len(records), 'cameras': len(maps),
        'cloud_bytes': int(records.nbytes), 'output_bytes': int(
            rb.cfg.grid.height * rb.cfg.grid.width * rb.cfg.fused_channels * 4),
        'age_p50_ms': main['age_p50_ms'], 'age_p99_ms': main['age_p99_ms'],
        'age_max_ms': main['age_max_ms'],
        'floor_p50_ms': (main['floor'] or {}).get('age_p50_ms'),
        'floor_p99_ms': (main['floor'] or {}).get('age_p99_ms'),
        'pipeline_p50_ms': (main.get('node_p50') or {}).get('pipeline_ms'),
        'publisher_p50_ms': main['publisher_ms_p50'],
        'overhead_ms': main['overhead_ms'],
        'overhead_paired_ms': main['overhead_paired_ms'],
        'overhead_ms_by_rate': {f'{r["rate_hz"]:g}': r['overhead_ms'] for r in rows
                                if r['overhead_ms'] is not None},
        'peak_rate_hz': peak,
        'peak_rate_note': _peak_note(rows, peak),
        'rows': rows,
        'definitions': {
            'age': 'subscriber receive wall time minus the LiDAR header stamp (publisher wall '
                   'clock at publish), ms',
            'missed': 'published minus received by the subscriber',
            'jitter': '|difference of consecutive inter-arrival intervals| at the subscriber '
                      '(ros2_benchmark frame-to-frame jitter), ms',
            'overhead': "node age p50 - floor age p50 - pipeline p50 (the node's own "
                        'pad_ms + compute_ms p50 in the same run)',
            'overhead_paired': "p50 over frames of (age - that frame's pad_ms + compute_ms) "
                               '- floor age p50: the same quantity, less sensitive to compute '
                               'time noise',
            'publisher': 'p50 time the publisher spends in publish() for the camera maps and '
                         'the cloud of one frame; the stamp is taken before, so it is part of '
                         'every age, floor included',
        },
    }
    return {'startup': startup, 'memory': memory, 'ros': ros}


def _main_rate(plan: Plan) -> float:
    return MAIN_ROS_RATE_HZ if MAIN_ROS_RATE_HZ in plan.ros_rates else plan.ros_rates[0]


def _peak_note(rows: list[dict], peak: float | None) -> str:
    highest = max(r['rate_hz'] for r in rows)
    if peak is None:
        return f'already {rows[0]["missed_pct"]} % missed at the lowest rate'
    if peak == highest:
        return f'every step up to {highest:g} Hz stayed under {DROP_LIMIT_PCT:g} % missed ' \
               '(the real peak is higher)'
    failing = next(r for r in sorted(rows, key=lambda r: r['rate_hz']) if r['rate_hz'] > peak)
    return f'{failing["missed_pct"]} % missed at {failing["rate_hz"]:g} Hz'


# -- report ---------------------------------------------------------------------------------------

def machine_info() -> dict:
    """CPU count and model, RAM, load, library versions."""
    import jax
    import jaxlib
    import psutil
    model = platform.processor() or 'unknown'
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                model = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    torch_version = None
    if peers.torch_available():
        import torch
        torch_version = torch.__version__
    return {
        'nproc': os.cpu_count(), 'cpu': model,
        'ram_gib': _r(psutil.virtual_memory().total / 2**30, 1),
        'loadavg_at_start': [round(v, 2) for v in os.getloadavg()],
        'python': platform.python_version(), 'jax': jax.__version__,
        'jaxlib': jaxlib.__version__, 'numpy': np.__version__, 'torch': torch_version,
        'jax_backend': jax.default_backend(),
    }


def targets(results: dict) -> list[dict]:
    """List the targets with the measured value and whether each is met (None: not run)."""
    rec, pipe = results.get('recompile') or {}, results.get('pipeline') or {}
    ros, start = results.get('ros') or {}, results.get('startup') or {}

    def item(name, target, value, met):
        return {'name': name, 'target': target, 'value': value,
                'met': None if value is None else bool(met)}

    torch_min = pipe.get('speedup_vs_torch_min')
    cold, warm = start.get('cold_s'), start.get('warm_s')
    return [
        item('recompile.speedup', '>= 50', rec.get('speedup'),
             (rec.get('speedup') or 0) >= 50),
        item('recompile.bucketed_compiles_after_warmup', '== 0',
             rec.get('bucketed_compiles_after_warmup'),
             rec.get('bucketed_compiles_after_warmup') == 0),
        item('pipeline.speedup_vs_numpy (131k points, no camera)', '>= 10',
             pipe.get('speedup_vs_numpy'), (pipe.get('speedup_vs_numpy') or 0) >= 10),
        item('pipeline.speedup_vs_torch_min (faster than PyTorch eager at every size)', '> 1',
             torch_min, (torch_min or 0) > 1),
        item('ros.overhead_ms', '< 2', ros.get('overhead_ms'),
             ros.get('overhead_ms') is not None and ros['overhead_ms'] < 2),
        item('startup.warm_s / startup.cold_s', '<= 0.25',
             _r(warm / cold) if cold and warm else None,
             cold and warm and warm <= cold / 4),
    ]


def _fmt(value, digits: int = 2, suffix: str = '') -> str:
    if value is None:
        return 'n/a'
    if isinstance(value, float):
        return f'{value:.{digits}f}{suffix}'
    return f'{value}{suffix}'


def markdown(results: dict) -> str:
    """Render the report: machine, targets, then one table per part."""
    m = results['machine']
    lines = [f'# jax_perception_node benchmarks ({results["plan"]})', '',
             f'Machine: {m["nproc"]} CPUs ({m["cpu"]}), {m["ram_gib"]} GiB RAM, load average at '
             f'start {m["loadavg_at_start"]}; Python {m["python"]}, jax {m["jax"]} / jaxlib '
             f'{m["jaxlib"]} ({m["jax_backend"]}), NumPy {m["numpy"]}, PyTorch '
             f'{m["torch"] or "not installed"}. Shared machine: compare ratios, not absolute '
             'times.', '', '## Targets', '',
             '| target | wanted | measured | met |', '|---|---:|---:|:---:|']
    for t in results['targets']:
        met = {True: 'yes', False: '**MISSED**', None: 'not run'}[t['met']]
        lines.append(f'| {t["name"]} | {t["target"]} | {_fmt(t["value"])} | {met} |')
    missed = [t['name'] for t in results['targets'] if t['met'] is False]
    lines += ['', 'Missed: ' + ('; '.join(missed) if missed else 'none') + '.']
    for error in results.get('errors', []):
        lines += ['', f'**Error:** {error}']

    rec = results.get('recompile')
    if rec and rec.get('frames'):
        lines += ['', '## 1. Recompile cost', '',
                  f'{rec["frames"]} synthetic LiDAR frames, {rec["points_min"]}..'
                  f'{rec["points_max"]} points ({rec["distinct_point_counts"]} distinct counts), '
                  f'{rec["cameras"]} cameras, {rec["grid"][0]} x {rec["grid"][1]} grid, buckets '
                  f'{rec["buckets"]}; persistent cache off. Naive = jax.jit of the same frame '
                  'function on unpadded input: its per-frame time includes trace + compile.', '',
                  '| path | mean ms | p50 ms | p99 ms | max ms | compiles |',
                  '|---|---:|---:|---:|---:|---:|']
        for name, key, compiles in (('bucketed AOT', 'bucketed_ms',
                                     rec['bucketed_compiles_after_warmup']),
                                    ('naive jit', 'naive_ms', rec['naive_compiles'])):
            s = rec[key]
            lines.append(f'| {name} | {_fmt(s["mean"])} | {_fmt(s["p50"])} | {_fmt(s["p99"])} '
                         f'| {_fmt(s["max"])} | {compiles} |')
        lines += ['', f'Speedup (naive mean / bucketed mean): **{rec["speedup"]}x** (p99: '
                  f'{rec["speedup_p99"]}x). Bucketed warm-up (all buckets compiled once at '
                  f'start): {rec["bucketed_warmup_s"]} s.']

    pipe = results.get('pipeline')
    if pipe and pipe.get('rows'):
        lines += ['', '## 2. Pipeline against peers (p50 ms per frame; ratio = peer / JAX)', '',
                  '| points | cameras | JAX | NumPy | x | JAX no-jit | x | PyTorch | x |',
                  '|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
        for r in pipe['rows']:
            lines.append(
                f'| {r["points"]} | {r["cameras"]} | {_fmt(r["jax_ms"])} | '
                f'{_fmt(r["numpy_ms"])} | {_fmt(r["speedup_vs_numpy"])} | '
                f'{_fmt(r["jax_nojit_ms"], 1)} | {_fmt(r["speedup_vs_jax_nojit"], 1)} | '
                f'{_fmt(r["torch_ms"])} | {_fmt(r["speedup_vs_torch"])} |')
        lines += ['', f'Headline: {pipe["speedup_vs_numpy"]}x NumPy at '
                  f'{pipe["headline"]["points"]} points without cameras; slowest ratio to PyTorch '
                  f'{_fmt(pipe["speedup_vs_torch_min"])}x. {pipe["reps"]} interleaved runs per '
                  'implementation and row.', '']
        exempt = [f'{r["points"]} pts / {r["cameras"]} cams: {r["exempt_cells"]}'
                  for r in pipe['rows'] if r['exempt_cells']]
        notes = list(pipe['notes'])
        unstable = [f'{r["points"]} pts / {r["cameras"]} cams: {", ".join(r["unstable"])}'
                    for r in pipe['rows'] if r.get('unstable')]
        if unstable:
            notes.append('Timed while the machine was busy (p50 > 2.5x the best run, after one '
                         'retry), so these p50s are inflated; min_ms in the JSON has the best '
                         'runs: ' + '; '.join(unstable) + '.')
        notes.append('Differences allowed only in cells where float32 rounding can decide: a '
                     'point within 5e-5 cells of a cell border, or a camera sample that the '
                     "peers' lift geometry and XLA's put on opposite sides of a map border "
                     '(~1e-5 px). Such differing cells: '
                     + ('; '.join(exempt) if exempt else 'none') + '.')
        lines += [f'- {n}' for n in notes]
        for key, prof in pipe.get('profile', {}).items():
            lines.append(f'- Stage p50 at {key.replace("_", " ")}: ' + ', '.join(
                f'{k} {v}' for k, v in prof.items()))

    ros = results.get('ros')
    if ros and ros.get('rows'):
        lines += ['', '## 3. End to end through ROS', '',
                  f'Publisher -> node -> subscriber, separate processes, DDS on loopback with '
                  f'shared memory; a {ros["points"]}-point cloud ({ros["cloud_bytes"]} bytes) and '
                  f'{ros["cameras"]} camera maps per frame, output {ros["output_bytes"]} bytes. '
                  'Floor = echo node (same subscriptions, republishes a same-size Image, no '
                  'work).',
                  '', '| rate Hz | received / published | missed % | age p50 | p99 | max | '
                  'jitter mean / max / std | node pipeline p50 | node total p50 | floor age p50 '
                  '/ p99 | overhead |',
                  '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
        for r in ros['rows']:
            node = r.get('node_p50') or {}
            floor = r.get('floor') or {}
            lines.append(
                f'| {r["rate_hz"]:g} | {r["received"]} / {r["published"]} | '
                f'{_fmt(r["missed_pct"], 1)} | {_fmt(r["age_p50_ms"])} | {_fmt(r["age_p99_ms"])}'
                f' | {_fmt(r["age_max_ms"])} | {_fmt(r["jitter_mean_ms"])} / '
                f'{_fmt(r["jitter_max_ms"])} / {_fmt(r["jitter_std_ms"])} | '
                f'{_fmt(node.get("pipeline_ms"))} | {_fmt(node.get("total_ms"))} | '
                f'{_fmt(floor.get("age_p50_ms"))} / {_fmt(floor.get("age_p99_ms"))} | '
                f'{_fmt(r["overhead_ms"])} |')
        lines += ['', f'At {ros["rate_hz"]:g} Hz: age p50 {_fmt(ros["age_p50_ms"])} ms, p99 '
                  f'{_fmt(ros["age_p99_ms"])} ms; floor p50 {_fmt(ros["floor_p50_ms"])} ms; '
                  f'node pipeline p50 {_fmt(ros["pipeline_p50_ms"])} ms; publisher p50 '
                  f'{_fmt(ros["publisher_p50_ms"])} ms; node overhead '
                  f'**{_fmt(ros["overhead_ms"])} ms** (paired per frame: '
                  f'{_fmt(ros["overhead_paired_ms"])} ms). Peak rate under '
                  f'{DROP_LIMIT_PCT:g} % missed: **{_fmt(ros["peak_rate_hz"], 0)} Hz** '
                  f'({ros["peak_rate_note"]}).', '']
        lines += [f'- {k}: {v}' for k, v in ros['definitions'].items()]

    start = results.get('startup')
    if start and start.get('cold_s') is not None:
        lines += ['', '## 4. Start-up', '', '| cache | spawn to ready s | node warm-up |',
                  '|---|---:|---|']
        for name, key, warm_key in (('empty', 'cold_s', 'cold_warmup'),
                                    ('warm', 'warm_s', 'warm_warmup')):
            w = start.get(warm_key)
            text = 'n/a' if not w else ', '.join(f'{k} {v:g} ms' for k, v in w['ms'].items()) \
                + f'; total {w["total_s"]:g} s'
            lines.append(f'| {name} | {_fmt(start[key])} | {text} |')
        lines += ['', f'Warm / cold = {_fmt(start["warm_over_cold"])} (target <= 0.25). '
                  "Spawn to ready = up to the node's own 'ready:' log line; a subscriber in "
                  f'another process saw it after {_fmt(start["cold_discovered_s"])} s and '
                  f'{_fmt(start["warm_discovered_s"])} s (DDS discovery added).']
        prof = start.get('profile')
        if prof:
            lines += ['', "Warm start-up, step by step (s, one process repeating the node's "
                      'start): ' + ', '.join(f'{k} {v:g}' for k, v in prof['steps_s'].items())
                      + '.']

    mem = results.get('memory')
    if mem:
        lines += ['', '## 5. Memory', '', '| after | RSS MiB | peak RSS MiB |', '|---|---:|---:|']
        for r in mem['rows']:
            what = 'ready (warm-up done)' if r['bucket'] is None else \
                f'{r["points"]} points (bucket {r["bucket"]})'
            lines.append(f'| {what} | {_fmt(r["rss_mib"], 1)} | {_fmt(r["hwm_mib"], 1)} |')
        lines += ['', mem['note']]
    return '\n'.join(lines) + '\n'


def plot(results: dict, path: Path) -> Path | None:
    """bench.png: p50 per implementation per size (log axis) per camera count, and ROS age."""
    from .report import _pyplot
    pipe, ros = results.get('pipeline'), results.get('ros')
    pipe = pipe if pipe and pipe.get('rows') else None
    ros = ros if ros and ros.get('rows') else None
    panels = (sorted({r['cameras'] for r in pipe['rows']}) if pipe else []) + (
        ['ros'] if ros else [])
    if not panels:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), dpi=110,
                             squeeze=False)
    impls = (('jax', 'JAX (AOT)'), ('numpy', 'NumPy'), ('torch', 'PyTorch'),
             ('jax_nojit', 'JAX no-jit'))
    for ax, panel in zip(axes[0], panels):
        if panel == 'ros':
            rows = ros['rows']
            rates = [r['rate_hz'] for r in rows]
            ax.plot(rates, [r['age_p50_ms'] for r in rows], 'o-', label='node age p50')
            ax.plot(rates, [r['age_p99_ms'] for r in rows], 's--', label='node age p99')
            floor = [(r['rate_hz'], r['floor']['age_p50_ms']) for r in rows if r.get('floor')]
            if floor:
                ax.plot(*zip(*floor), '^-', label='floor (echo) age p50')
            ax.set_xlabel('publish rate (Hz)')
            ax.set_ylabel('age (ms)')
            ax.set_ylim(bottom=0)
            ax.set_title('end to end through ROS')
            missed = ax.twinx()
            missed.bar(rates, [r['missed_pct'] or 0 for r in rows], width=3.0, alpha=0.25,
                       color='tab:red', label='missed %')
            missed.axhline(DROP_LIMIT_PCT, color='tab:red', linewidth=0.8, linestyle=':')
            missed.set_ylabel('missed % (bars; dotted: 5 %)')
            missed.set_ylim(0, 100)
        else:
            rows = [r for r in pipe['rows'] if r['cameras'] == panel]
            x = np.arange(len(rows))
            shown = [(k, label) for k, label in impls if any(r[f'{k}_ms'] for r in rows)]
            width = 0.8 / max(1, len(shown))
            for i, (key, label) in enumerate(shown):
                ax.bar(x + (i - (len(shown) - 1) / 2) * width,
                       [r[f'{key}_ms'] or 0 for r in rows], width, label=label)
            ax.set_xticks(x, [str(r['points']) for r in rows], fontsize=8)
            ax.set_yscale('log')
            ax.set_xlabel('points')
            ax.set_ylabel('p50 per frame (ms, log)')
            ax.set_title(f'{panel} camera{"s" if panel != 1 else ""}')
        ax.grid(alpha=0.3, which='both')
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _get(tree: dict, dotted: str):
    node = tree
    for part in dotted.split('.'):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def missing_keys(results: dict) -> list[str]:
    """List the required JSON keys (dotted) absent from ``results``."""
    missing = []
    for key in REQUIRED_KEYS:
        try:
            _get(results, key)
        except KeyError:
            missing.append(key)
    return missing


# -- entry point ----------------------------------------------------------------------------------

def run_benchmarks(quick: bool = False, json_path: str | None = None,
                   out_dir: str | os.PathLike = 'bench_out', tiny: bool = False,
                   use_torch: bool | None = None, parts: tuple[str, ...] | None = None) -> int:
    """
    Run the benchmarks and write ``bench.md``, ``bench.png`` and the JSON; returns 0 when run.

    quick: shorter runs (under 3 minutes on a 2-core CPU). tiny: the test's sizes (small grid,
    few frames). use_torch: None = when installed. parts: a subset of ('recompile',
    'pipeline', 'ros'), all by default. Returns 1 when a peer disagrees with the pipeline or a
    process fails, with the reason printed and recorded under ``errors``.
    """
    plan = TINY if tiny else QUICK if quick else FULL
    parts = parts or ('recompile', 'pipeline', 'ros')
    if use_torch is None:
        use_torch = peers.torch_available()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_file = Path(json_path) if json_path else out / 'bench.json'
    json_file.parent.mkdir(parents=True, exist_ok=True)
    logs = out / 'logs'
    logs.mkdir(exist_ok=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f'[bench {time.perf_counter() - started:6.1f} s] {message}', flush=True)

    results: dict = {'plan': plan.name, 'machine': machine_info(), 'errors': []}
    for key in ('recompile', 'pipeline', 'ros', 'startup', 'memory'):
        results[key] = None
    status = 0
    work = Path(tempfile.mkdtemp(prefix='jax_perception_bench_'))
    try:
        if 'recompile' in parts:
            results['recompile'] = bench_recompile(plan, log)
        if 'pipeline' in parts:
            results['pipeline'] = bench_pipeline(plan, use_torch, log)
        if 'ros' in parts:
            results.update(bench_ros(plan, work, logs, log))
    except BenchError as exc:
        results['errors'].append(str(exc))
        print(f'bench: {exc}', file=sys.stderr)
        status = 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results['targets'] = targets(results)
    results['wall_s'] = _r(time.perf_counter() - started, 1)
    results = _with_required_keys(results)
    json_file.write_text(json.dumps(results, indent=2) + '\n')
    report = markdown(results)
    (out / 'bench.md').write_text(report)
    png = plot(results, out / 'bench.png')
    print(report)
    print(f'wrote {out / "bench.md"}, {png or "(no plot)"}, {json_file} '
          f'in {results["wall_s"]} s')
    return status


def _with_required_keys(results: dict) -> dict:
    """Make every required key present (null for a part that did not run)."""
    for key in REQUIRED_KEYS:
        section, name = key.split('.', 1)
        if results.get(section) is None:
            results[section] = {}
        results[section].setdefault(name, [] if name == 'rows' else None)
    return results
