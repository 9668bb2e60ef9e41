"""
What every part of the benchmarks shares: run plans, configurations, inputs, statistics.

Configurations are the shipped parameter file with a chosen camera rig (none, the front camera,
a six-camera ring, or the shipped four); inputs are sweeps of the synthetic drive and its
rendered camera maps, the same for every implementation in a run.
"""

from dataclasses import dataclass, replace
import math
import os
from pathlib import Path
import platform
import subprocess
import time

from jax_perception_node.settings.config import default_params_file, PipelineConfig
from jax_perception_node.settings.param_file import read_param_file
from jax_perception_node.tools import peers
import numpy as np

RTOL = ATOL = 1e-4       # output equality check of every peer against the JAX pipeline
DROP_LIMIT_PCT = 5.0     # peak rate: the highest rate with fewer missed frames than this
MAIN_ROS_RATE_HZ = 10.0  # the headline ROS numbers (a typical spinning LiDAR)
HEADLINE_POINTS = 131072


class BenchError(RuntimeError):
    """The benchmark cannot go on (a peer disagrees with the pipeline, a process failed)."""


@dataclass(frozen=True)
class Plan:
    """Sizes and durations of one benchmark run (full, --quick, or the test's tiny run)."""

    name: str
    recompile_frames: int          # frames of part 1 (distinct point counts)
    sizes: tuple[int, ...]         # cloud sizes of part 2 (points); also its buckets
    fill_sizes: tuple[int, ...]    # part 2 clouds that fill their bucket only partly
    camera_counts: tuple[int, ...]  # part 2 camera rigs: 0, 1 (front) or 6 (ring)
    reps: int                      # timed runs per implementation and row (part 2)
    ros_rates: tuple[float, ...]   # Hz, the rates reported in full (node and floor)
    ros_seconds: float             # s per main rate
    peak_rates: tuple[float, ...]  # Hz, the step-up for the peak rate (node only)
    peak_seconds: float            # s per extra peak step
    ros_points: int | None         # points of the ROS cloud (None: one full synthetic sweep)
    ros_gap_s: float = 1.0         # s of silence before each rate, so no backlog carries over
    ros_warmup_s: float = 1.0      # s published (not counted) first; longer until outputs flow
    overhead_runs: int = 3         # node and floor streams at the main rate: overhead_ms's median
    tiny: bool = False             # small grid and cameras (the test)


FULL = Plan('full', 200, (32768, 65536, 131072, 262144), (70000,), (0, 1, 6), 21,
            (10.0, 20.0, 50.0), 10.0, (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0), 5.0,
            None)
QUICK = replace(FULL, name='quick', recompile_frames=40, reps=5, ros_seconds=3.0,
                peak_seconds=2.0, ros_gap_s=0.5)
TINY = Plan('tiny', 6, (256, 1024), (700,), (0, 6), 2, (10.0,), 1.0, (10.0, 20.0), 1.0, 1000,
            ros_gap_s=0.3, ros_warmup_s=0.5, overhead_runs=2, tiny=True)
PLANS = {plan.name: plan for plan in (FULL, QUICK, TINY)}

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


def bench_params(plan: Plan, cameras: int | str, buckets=None, cache_dir: str = '',
                 head: bool = False) -> dict:
    """
    Flat parameters for a benchmark: the shipped config with a chosen camera rig.

    cameras: 0, 1 (the front camera), 6 (the ring) or 'shipped' (the shipped four cameras).
    ``buckets`` replaces the shipped ones; ``cache_dir`` '' disables the persistent cache so
    compile costs are not blurred. The tiny plan shrinks the grid and the feature maps.
    ``head``: keep the shipped head (its weights fit the shipped cameras and channels); by
    default the parts time the BEV alone (head.module '').
    """
    shipped = read_param_file(default_params_file())
    params = {k: v for k, v in shipped.items() if not k.startswith('cameras.')}
    params['compilation_cache_dir'] = cache_dir
    if not head:
        params['head.module'] = ''
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
        from jax_perception_node.tools.synthetic_drive import SyntheticDrive
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
        from jax_perception_node.sensors.cloud import keep_rows
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
        from jax_perception_node.tools.synthetic_drive import SyntheticDrive
        if not cfg.cameras:
            return {}
        drive = SyntheticDrive(cfg)
        return {c.name: drive.camera_features(c.name, t) for c in cfg.cameras}


def xyzi(records: np.ndarray) -> np.ndarray:
    """Structured synthetic-drive points -> float32[N, 4] (x, y, z, intensity)."""
    return np.ascontiguousarray(np.stack(
        [records['x'], records['y'], records['z'], records['intensity']], axis=1), np.float32)


# -- statistics -----------------------------------------------------------------------------------

def rounded(value, digits: int = 3):
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
    return {'mean': rounded(a.mean()), 'p50': rounded(np.percentile(a, 50)),
            'p99': rounded(np.percentile(a, 99)), 'max': rounded(a.max())}


def balanced_rounds(n: int) -> list[tuple[int, ...]]:
    """
    Return n - 1 orders of range(n) that balance which call comes right before which.

    Called round after round, the first again after the last, no item follows itself and each
    follows every other exactly once per n - 1 rounds. A call can run faster or slower for the
    one before it (caches, allocators, a thread pool still spinning), so side-by-side timings
    take turns in these orders (a fixed order mirrored every other round runs its first and
    last items twice in a row, which moved ratios measurably: docs/performance.md). Found by a
    depth-first search, the same on every run (well under a millisecond up to n = 8).
    """
    if n < 2:
        return [tuple(range(n))]
    total, sequence, used = n * (n - 1), [0], set()

    def extend() -> bool:
        if len(sequence) == total:      # the wrap-around from the last item to the first
            return (sequence[-1], sequence[0]) not in used
        done = sequence[len(sequence) - len(sequence) % n:]    # this round's items so far
        for item in range(n):
            step = (sequence[-1], item)
            if item in done or step in used:
                continue
            sequence.append(item)
            used.add(step)
            if extend():
                return True
            sequence.pop()
            used.discard(step)
        return False

    extend()
    return [tuple(sequence[k:k + n]) for k in range(0, total, n)]


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
        'ram_gib': rounded(psutil.virtual_memory().total / 2**30, 1),
        'loadavg_at_start': [round(v, 2) for v in os.getloadavg()],
        'python': platform.python_version(), 'jax': jax.__version__,
        'jaxlib': jaxlib.__version__, 'numpy': np.__version__, 'torch': torch_version,
        'jax_backend': jax.default_backend(),
        'date': time.strftime('%Y-%m-%d', time.gmtime()), 'commit': _commit(),
    }


def _commit() -> str | None:
    """Return the short git commit of this checkout (None outside a git checkout)."""
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True,
                             text=True, timeout=10, cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
