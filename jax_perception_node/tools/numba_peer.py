"""
A Numba peer of the kernel contract (docs/design.md): hand-written loops, one core, float32.

The way a careful Numba user writes BEV features: one pass over the points into per-cell
statistics, one pass over the cells that finishes them and writes the fused output in place,
and the camera lift as a CSR sparse-matrix product (the same :func:`peers.lift_matrix` the
NumPy and PyTorch peers use, computed once per calibration and not timed). Every kernel is
``@numba.njit(cache=False, nogil=True)`` without ``parallel``: single-threaded, so it compares
one core of hand-written code against the pipeline.

Arithmetic follows the NumPy peer operation by operation so that the two agree bit for bit:
the point transform and the floor in float32 (``peers.grid_cells``), sums in float64 (as
``np.bincount`` does) rounded to float32, ``sum * (1 / count)`` in float32, the density from a
table of NumPy's own float32 ``log1p`` (``channels.density_table``, which the kernels read too),
the lift accumulated in float32 in CSR order (as ``scipy.sparse`` does). Only the optional 1x1
projection differs (a loop here, BLAS there: float32 rounding, ~1e-7 relative).

Numba is in requirements-dev.txt (the ``bench`` tools); importing this module imports it.
Construction compiles every kernel with a warm-up call, so timed calls never compile.
"""

import functools
from typing import Mapping

from jax_perception_node.settings.channels import density_table, MAX_ABS_INPUT
from jax_perception_node.settings.config import load_fusion_weights, PipelineConfig
from jax_perception_node.tools import peers
import numba
import numpy as np


@numba.njit(cache=False, nogil=True)
def _accumulate(points, rot, trans, grid, height, width, count, z_sum, i_sum, z_hi, z_lo):
    """Add every kept point of float32[N, 4] to its cell's count, sums and extremes."""
    x_min, y_min, z_min, z_max, res = grid[0], grid[1], grid[2], grid[3], grid[4]
    for p in range(points.shape[0]):
        px, py, pz, intensity = points[p, 0], points[p, 1], points[p, 2], points[p, 3]
        # float32 throughout, in peers.grid_cells' order: the same cell for every point.
        x = rot[0, 0] * px + rot[0, 1] * py + rot[0, 2] * pz + trans[0]
        y = rot[1, 0] * px + rot[1, 1] * py + rot[1, 2] * pz + trans[1]
        z = rot[2, 0] * px + rot[2, 1] * py + rot[2, 2] * pz + trans[2]
        row = np.floor((x - x_min) / res)
        col = np.floor((y - y_min) / res)
        # A NaN compares False: it fails the range tests like any point outside.
        if not (row >= 0 and row < height and col >= 0 and col < width
                and z >= z_min and z < z_max and abs(intensity) <= MAX_ABS_INPUT):
            continue
        cell = int(row) * width + int(col)
        count[cell] += 1
        z_sum[cell] += np.float64(z)
        i_sum[cell] += np.float64(intensity)
        if z > z_hi[cell]:
            z_hi[cell] = z
        if z < z_lo[cell]:
            z_lo[cell] = z


@numba.njit(cache=False, nogil=True)
def _finish_lidar(count, z_sum, i_sum, z_hi, z_lo, density, out):
    """Write the six LiDAR channels into out[:, :6] and reset the statistics for the next frame."""
    one, zero = np.float32(1.0), np.float32(0.0)
    last = density.shape[0] - 1
    for cell in range(count.shape[0]):
        n = count[cell]
        if n == 0:
            for ch in range(6):
                out[cell, ch] = zero
            continue
        inv = one / np.float32(n)
        out[cell, 0] = one
        out[cell, 1] = density[min(n, last)]
        out[cell, 2] = z_hi[cell]
        out[cell, 3] = np.float32(z_sum[cell]) * inv
        out[cell, 4] = z_lo[cell]
        out[cell, 5] = np.float32(i_sum[cell]) * inv
        count[cell] = 0
        z_sum[cell] = 0.0
        i_sum[cell] = 0.0
        z_hi[cell] = -np.inf
        z_lo[cell] = np.inf


@functools.lru_cache(maxsize=None)
def lift_kernel(channels: int):
    """
    Return the lift for maps of ``channels`` channels, compiled once per count and process.

    A closure, so that the channel count is a compile-time constant: the loop over channels
    unrolls and vectorises (about 1.6x faster than a run-time count, same float32 sums).
    """
    @numba.njit(cache=False, nogil=True)
    def lift(indptr, indices, data, samples, valid, flat, out):
        """
        Camera channels and coverage into out[:, 6:] by CSR product with the stacked maps.

        samples float32[N_cam, cells] and valid float32[N_cam] give each cell's valid-sample
        count; the camera channels are the summed taps / max(count, 1) (taps summed in CSR
        order, as scipy.sparse does), coverage is count > 0.
        """
        one = np.float32(1.0)
        acc = np.empty(channels, np.float32)
        for cell in range(out.shape[0]):
            count = np.float32(0.0)
            for cam in range(samples.shape[0]):
                count += samples[cam, cell] * valid[cam]
            for c in range(channels):
                acc[c] = 0.0
            for k in range(indptr[cell], indptr[cell + 1]):
                weight, row = data[k], flat[indices[k]]
                for c in range(channels):
                    acc[c] += weight * row[c]
            denominator = max(count, one)
            for c in range(channels):
                out[cell, 6 + c] = acc[c] / denominator
            out[cell, 6 + channels] = one if count > 0 else np.float32(0.0)
    return lift


@numba.njit(cache=False, nogil=True)
def _project(fused, weights, bias, relu, out):
    """Write act(fused @ weights + bias) into out, float32, one cell at a time."""
    for cell in range(fused.shape[0]):
        for o in range(weights.shape[1]):
            acc = np.float32(0.0)
            for i in range(weights.shape[0]):
                acc += fused[cell, i] * weights[i, o]
            value = acc + bias[o]
            out[cell, o] = max(value, np.float32(0.0)) if relu else value


class NumbaBev:
    """
    The fused BEV of one frame in Numba (hand-written, one core), same API as ``NumpyBev``.

    ``process(points, cameras)`` takes float32[N, 4] (any N, no padding) and name ->
    float32[H_f, W_f, C] (left out or None: masked) and returns a new float32[H, W, C_out].
    The per-cell statistics are preallocated and reset as they are read, so a frame touches
    no memory but its own output.
    """

    name = 'numba'

    def __init__(self, cfg: PipelineConfig):
        peers.refuse_lenses(cfg)
        self.cfg = cfg
        self.height, self.width = cfg.grid.height, cfg.grid.width
        cells = self.height * self.width
        self._grid = cfg.grid.vector()
        self._rot = np.ascontiguousarray(cfg.lidar.rotation_matrix(), np.float32)
        self._trans = np.asarray(cfg.lidar.translation, np.float32)
        self._count = np.zeros(cells, np.int64)
        self._z_sum = np.zeros(cells, np.float64)
        self._i_sum = np.zeros(cells, np.float64)
        self._z_hi = np.full(cells, -np.inf, np.float32)
        self._z_lo = np.full(cells, np.inf, np.float32)
        self._density = density_table()
        self.camera_names = tuple(c.name for c in cfg.cameras)
        self.channels = cfg.camera_channels if cfg.cameras else 0
        self.tables = peers.lift_matrix(cfg)
        if self.tables is not None:
            self._flat = np.zeros((self.tables.shape[1], self.channels), np.float32)
            self._valid = np.zeros(len(cfg.cameras), np.float32)
            self._lift = lift_kernel(self.channels)
        projection = load_fusion_weights(cfg)
        self._projection = None if projection is None else tuple(
            np.ascontiguousarray(a, np.float32) for a in projection)
        self.fused_channels = 6 + self.channels + 1
        self.warmup()

    def warmup(self) -> None:
        """Compile every kernel for the types of a frame (a warm-up frame; nothing later does)."""
        maps = {c.name: np.zeros((c.height, c.width, self.channels), np.float32)
                for c in self.cfg.cameras}
        self.process(np.zeros((1, 4), np.float32), maps)

    def voxelize(self, points: np.ndarray) -> np.ndarray:
        """Six LiDAR channels float32[H, W, 6] of a float32[N, 4] cloud (contract order)."""
        out = np.empty((self.height * self.width, 6), np.float32)
        self._voxelize_into(points, out)
        return out.reshape(self.height, self.width, 6)

    def lift(self, cameras: Mapping[str, np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
        """Camera BEV float32[H, W, C] and coverage float32[H, W]."""
        out = np.empty((self.height * self.width, self.fused_channels), np.float32)
        self._lift_into(cameras, out)
        camera = out[:, 6:6 + self.channels].reshape(self.height, self.width, self.channels)
        return camera, out[:, -1].reshape(self.height, self.width)

    def process(self, points: np.ndarray,
                cameras: Mapping[str, np.ndarray | None] | None = None) -> np.ndarray:
        """Fused features float32[H, W, C_out] of one frame."""
        cells = self.height * self.width
        fused = np.empty((cells, self.fused_channels), np.float32)
        self._voxelize_into(points, fused)
        if self.tables is None:
            fused[:, 6] = 0.0       # coverage: no camera covers anything
        else:
            self._lift_into(cameras or {}, fused)
        if self._projection is None:
            return fused.reshape(self.height, self.width, self.fused_channels)
        weights, bias = self._projection
        out = np.empty((cells, weights.shape[1]), np.float32)
        _project(fused, weights, bias, self.cfg.fusion.activation == 'relu', out)
        return out.reshape(self.height, self.width, weights.shape[1])

    def _voxelize_into(self, points: np.ndarray, out: np.ndarray) -> None:
        """Write the LiDAR channels into out[:, :6] (out: float32[cells, >= 6])."""
        # One dtype and layout, so no input ever compiles a new specialisation.
        cloud = np.ascontiguousarray(points, np.float32).reshape(-1, 4)
        _accumulate(cloud, self._rot, self._trans, self._grid, self.height, self.width,
                    self._count, self._z_sum, self._i_sum, self._z_hi, self._z_lo)
        _finish_lidar(self._count, self._z_sum, self._i_sum, self._z_hi, self._z_lo,
                      self._density, out)

    def _lift_into(self, cameras: Mapping[str, np.ndarray | None], out: np.ndarray) -> None:
        """Stage the maps (a masked camera's rows zero), then the lift into out[:, 6:]."""
        offset = 0
        for i, (cam, name) in enumerate(zip(self.cfg.cameras, self.camera_names)):
            fmap, size = cameras.get(name), cam.height * cam.width
            self._valid[i] = fmap is not None
            rows = self._flat[offset:offset + size]
            if fmap is None:
                rows[:] = 0.0
            else:
                np.copyto(rows, np.asarray(fmap).reshape(size, self.channels), casting='same_kind')
            offset += size
        t = self.tables
        self._lift(t.indptr, t.indices, t.data, t.samples, self._valid, self._flat, out)
