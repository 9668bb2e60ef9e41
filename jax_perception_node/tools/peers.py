"""
Peer implementations of the kernel contract (docs/design.md) for the benchmarks: NumPy, PyTorch.

The third peer, hand-written Numba loops on one core, is ``numba_peer.NumbaBev``; it shares
:func:`lift_matrix` and :func:`refuse_lenses` with these.

Both compute the same fused BEV features as :class:`~jax_perception_node.core.pipeline.BevPipeline`
(``[6 LiDAR] + [C camera] + [1 coverage]``, then the optional 1x1 projection) from the same
:class:`~jax_perception_node.settings.config.PipelineConfig`, independently of the JAX kernels, in
float32 like the JAX side. They are written the way a careful user of each library would:
vectorised (``np.bincount`` / ``np.maximum.at``; ``index_add_`` / ``scatter_reduce_``), no
Python loop over points or cells.

Like the JAX pipeline, the camera lift's geometry (projection, validity, bilinear taps and
weights) depends only on grid and calibration, so it is computed once per calibration
(:func:`lift_matrix`, NumPy, shared by both peers and not timed) and, like the pipeline's
compacted samples, keeps only the valid taps: a CSR matrix (cells x feature-map pixels) whose
product with the stacked maps is the sum of samples per cell (``scipy.sparse`` /
``torch.sparse_csr_tensor``). So every ratio compares compilation, not a weaker algorithm.
Unlike the pipeline, the peers take the cloud unpadded: they have no compile to amortise, so
padding would only cost them.

PyTorch and SciPy are the optional ``bench`` extra: importing this module imports neither;
:func:`torch_available` says whether :class:`TorchBev` can be built. ``TorchBev`` runs on any
torch device (``'cuda'`` for the accelerator benchmark).
"""

import functools
import importlib.util
import os
from typing import Mapping, NamedTuple
import warnings

from jax_perception_node.settings.channels import MAX_ABS_INPUT
from jax_perception_node.settings.config import load_fusion_weights, PipelineConfig
import numpy as np

MIN_DEPTH_M = 0.1     # the contract's minimum depth for a valid camera sample


class PeerTables(NamedTuple):
    """
    Bilinear taps of the camera lift, from grid and calibration only (float32 geometry).

    index: int64[T, H*W] rows of the flattened maps (N*H_f*W_f, C), T = N*K*4 taps (camera-major).
    weight: float32[T, H*W] bilinear weights, 0 for invalid samples.
    samples: float32[N, H*W] valid samples per camera and cell (0..K).
    """

    index: np.ndarray
    weight: np.ndarray
    samples: np.ndarray


class LiftMatrix(NamedTuple):
    """
    The camera lift as a sparse matrix: only the valid taps, duplicates summed.

    indptr int64[H*W + 1], indices int64[nnz], data float32[nnz]: CSR rows = cells, columns =
    rows of the stacked flattened maps (N*H_f*W_f). samples: float32[N, H*W] as in PeerTables.
    """

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    samples: np.ndarray
    shape: tuple[int, int]


def lift_matrix(cfg: PipelineConfig) -> LiftMatrix | None:
    """Compress :func:`lift_tables` to CSR, once per calibration (None without cameras)."""
    tables = lift_tables(cfg)
    if tables is None:
        return None
    from scipy import sparse
    cells = tables.index.shape[1]
    pixels = sum(c.height * c.width for c in cfg.cameras)
    keep = tables.weight != 0
    rows = np.broadcast_to(np.arange(cells), tables.index.shape)[keep]
    csr = sparse.csr_matrix((tables.weight[keep], (rows, tables.index[keep])),
                            shape=(cells, pixels), dtype=np.float32)
    csr.sum_duplicates()
    return LiftMatrix(csr.indptr.astype(np.int64), csr.indices.astype(np.int64),
                      csr.data.astype(np.float32), tables.samples, (cells, pixels))


def refuse_lenses(cfg: PipelineConfig) -> None:
    """Raise ValueError for the first camera whose ``distortion_model`` is not 'none'."""
    for cam in cfg.cameras:
        if cam.distortion_model != 'none':
            raise ValueError(
                f'cameras.{cam.name}.distortion_model is {cam.distortion_model}: the NumPy, '
                "PyTorch and Numba peers lift through a pinhole only; use 'none' to compare "
                'with them')


def sample_pixels(cfg: PipelineConfig) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """
    Pixel coordinates and validity of every camera sample: per camera (u, v, valid), [H*W, K].

    Follows the contract: cell centres ``(x_min + (i + .5) res, y_min + (j + .5) res)``, levels
    ``z_min + (k + .5)(z_max - z_min) / K``; ``p_cam = R^T (p - t)``; valid when depth > 0.1 m
    and ``-0.5 <= u < W_f - 0.5``, ``-0.5 <= v < H_f - 0.5``. Arithmetic is float32 in the
    JAX side's order, to match it bit for bit where it matters (validity at the map border):
    XLA's CPU backend fuses ``a * b + c`` into one rounding (an FMA) for the cell centres and
    ``fx * (x / z) + cx``, so those are computed as :func:`fma32` does.

    Raises ValueError, naming the camera, for a lens model other than 'none': the peers lift
    through a pinhole only, and would compute something else than the pipeline.
    """
    refuse_lenses(cfg)
    h, w, k = cfg.grid.height, cfg.grid.width, cfg.fusion.num_heights
    x_min, y_min, z_min, z_max, res = cfg.grid.vector()
    f32 = np.float32
    xs = fma32(np.arange(h, dtype=f32) + f32(0.5), res, x_min)
    ys = fma32(np.arange(w, dtype=f32) + f32(0.5), res, y_min)
    zs = (np.arange(k, dtype=f32) + f32(0.5)) * (z_max - z_min) / f32(k) + z_min
    gx, gy, gz = np.meshgrid(xs, ys, zs, indexing='ij')     # [H, W, K]
    pts = np.stack([gx, gy, gz], axis=-1).reshape(h * w, k, 3)
    out = []
    for cam in cfg.cameras:
        rot = cam.pose.rotation_matrix().astype(f32)
        trans = np.asarray(cam.pose.translation, f32)
        rel = pts - trans
        # p_cam[i] = sum_j R[j, i] rel[j]: R^T (p - t), in float32.
        c = [rel[..., 0] * rot[0, i] + rel[..., 1] * rot[1, i] + rel[..., 2] * rot[2, i]
             for i in range(3)]
        depth = c[2]
        safe = np.where(depth > MIN_DEPTH_M, depth, f32(1.0))
        # fx * (x / z) + cx, divided first as the pipeline does (for its lens models), one
        # rounding: (fx * x) / z + cx put 10 samples of the six-camera ring on the other side
        # of a map border, more than the benchmark's check allows as rounding.
        u = fma32(c[0] / safe, cam.fx, cam.cx)
        v = fma32(c[1] / safe, cam.fy, cam.cy)
        valid = ((depth > MIN_DEPTH_M) & (u >= -0.5) & (u < cam.width - 0.5)
                 & (v >= -0.5) & (v < cam.height - 0.5))
        out.append((u, v, valid))
    return out


def fma32(a, b, c) -> np.ndarray:
    """Return ``a * b + c`` rounded once to float32, as a fused multiply-add (float32 inputs)."""
    # The float64 product of two float32 values is exact; the sum rounds to float64 and then to
    # float32, which differs from one rounding only in halfway cases far rarer than borders.
    product = np.asarray(a, np.float32).astype(np.float64) * np.float64(np.float32(b))
    return (product + np.float64(np.float32(c))).astype(np.float32)


def lift_tables(cfg: PipelineConfig) -> PeerTables | None:
    """
    Compute the four bilinear taps (edge clamping) of every sample, once per calibration.

    Samples as :func:`sample_pixels` gives them. Returns None without cameras.
    """
    if not cfg.cameras:
        return None
    f32 = np.float32
    h, w, k = cfg.grid.height, cfg.grid.width, cfg.fusion.num_heights
    index, weight, samples = [], [], []
    map_offset = 0
    for cam, (u, v, valid) in zip(cfg.cameras, sample_pixels(cfg)):
        u0, v0 = np.floor(u), np.floor(v)
        du, dv = u - u0, v - v0
        taps_i, taps_w = [], []
        for oy, wy in ((0, f32(1.0) - dv), (1, dv)):
            for ox, wx in ((0, f32(1.0) - du), (1, du)):
                col = np.clip(u0 + ox, 0, cam.width - 1).astype(np.int64)
                row = np.clip(v0 + oy, 0, cam.height - 1).astype(np.int64)
                taps_i.append(row * cam.width + col + map_offset)
                taps_w.append(np.where(valid, wx * wy, f32(0.0)).astype(f32))
        # [HW, K, 4] -> [K*4, HW]: tap order (level, tap) within the camera.
        index.append(np.stack(taps_i, axis=-1).reshape(h * w, k * 4).T)
        weight.append(np.stack(taps_w, axis=-1).reshape(h * w, k * 4).T)
        samples.append(valid.sum(axis=1).astype(f32))
        map_offset += cam.height * cam.width
    return PeerTables(np.ascontiguousarray(np.concatenate(index)),
                      np.ascontiguousarray(np.concatenate(weight)), np.stack(samples))


def grid_cells(xp, points, rot, trans, grid, height: int, width: int):
    """
    Cell of every point in the grid, for NumPy arrays and torch tensors alike.

    ``xp``: the array module (``numpy`` or ``torch``; both have ``floor``).
    points: float32[N, 4] in the LiDAR frame; rot float32[3, 3], trans float32[3] the LiDAR
    pose; grid: ``GridConfig.vector()``. Returns (row, col, z, intensity, keep): float32[N]
    each, keep bool[N] for points inside the grid with |intensity| <= ``MAX_ABS_INPUT`` (a NaN
    compares False, so it falls out of the range tests).
    """
    px, py, pz, intensity = points[:, 0], points[:, 1], points[:, 2], points[:, 3]
    r, t = rot, trans
    x_min, y_min, z_min, z_max, res = grid
    x = r[0, 0] * px + r[0, 1] * py + r[0, 2] * pz + t[0]
    y = r[1, 0] * px + r[1, 1] * py + r[1, 2] * pz + t[1]
    z = r[2, 0] * px + r[2, 1] * py + r[2, 2] * pz + t[2]
    row = xp.floor((x - x_min) / res)
    col = xp.floor((y - y_min) / res)
    keep = ((row >= 0) & (row < height) & (col >= 0) & (col < width)
            & (z >= z_min) & (z < z_max) & (abs(intensity) <= MAX_ABS_INPUT))
    return row, col, z, intensity, keep


class NumpyBev:
    """
    The fused BEV of one frame in NumPy (float32, vectorised), from a PipelineConfig.

    ``process(points, cameras)`` takes float32[N, 4] (x, y, z, intensity in the LiDAR frame, any
    N, no padding) and name -> float32[H_f, W_f, C] (a camera left out or None is masked) and
    returns float32[H, W, C_out], the same values as ``BevPipeline.process(...).features``.
    """

    name = 'numpy'

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        g = cfg.grid
        self.height, self.width = g.height, g.width
        self._grid = cfg.grid.vector()
        self._rot = cfg.lidar.rotation_matrix().astype(np.float32)
        self._trans = np.asarray(cfg.lidar.translation, np.float32)
        self.tables = lift_matrix(cfg)
        self._lift = None
        if self.tables is not None:
            from scipy import sparse
            t = self.tables
            self._lift = sparse.csr_matrix((t.data, t.indices, t.indptr), shape=t.shape)
        self.camera_names = tuple(c.name for c in cfg.cameras)
        self._projection = load_fusion_weights(cfg)
        self._log64 = np.float32(np.log(64.0))

    def voxelize(self, points: np.ndarray) -> np.ndarray:
        """Six LiDAR channels float32[H, W, 6] of a float32[N, 4] cloud (contract order)."""
        h, w = self.height, self.width
        cells = h * w
        with np.errstate(invalid='ignore', over='ignore'):
            row, col, z, intensity, keep = grid_cells(
                np, np.asarray(points, np.float32), self._rot, self._trans, self._grid, h, w)
        cell = (row[keep] * w + col[keep]).astype(np.intp)
        z, intensity = z[keep], intensity[keep]
        count = np.bincount(cell, minlength=cells).astype(np.float32)
        z_sum = np.bincount(cell, weights=z, minlength=cells).astype(np.float32)
        i_sum = np.bincount(cell, weights=intensity, minlength=cells).astype(np.float32)
        z_hi = np.full(cells, -np.inf, np.float32)
        np.maximum.at(z_hi, cell, z)
        z_lo = np.full(cells, np.inf, np.float32)
        np.minimum.at(z_lo, cell, z)
        occupied = count > 0
        inv = np.float32(1.0) / np.maximum(count, np.float32(1.0))
        out = np.empty((cells, 6), np.float32)
        out[:, 0] = occupied
        out[:, 1] = np.minimum(np.float32(1.0), np.log1p(count) / self._log64)
        out[:, 2] = np.where(occupied, z_hi, np.float32(0.0))
        out[:, 3] = z_sum * inv
        out[:, 4] = np.where(occupied, z_lo, np.float32(0.0))
        out[:, 5] = i_sum * inv
        return out.reshape(h, w, 6)

    def lift(self, cameras: Mapping[str, np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
        """Camera BEV float32[H, W, C] and coverage float32[H, W]: one sparse product."""
        channels = self.cfg.camera_channels
        maps = [cameras.get(name) for name in self.camera_names]
        valid = np.array([m is not None for m in maps], np.float32)
        # A masked camera's pixels are zeros: its columns of the matrix add nothing.
        flat = np.concatenate([
            np.zeros((c.height * c.width, channels), np.float32) if m is None
            else np.asarray(m, np.float32).reshape(-1, channels)
            for c, m in zip(self.cfg.cameras, maps)])
        summed = self._lift @ flat
        count = (self.tables.samples * valid[:, None]).sum(axis=0)
        camera = summed / np.maximum(count, np.float32(1.0))[:, None]
        coverage = (count > 0).astype(np.float32)
        return camera.reshape(self.height, self.width, channels), \
            coverage.reshape(self.height, self.width)

    def process(self, points: np.ndarray,
                cameras: Mapping[str, np.ndarray | None] | None = None) -> np.ndarray:
        """Fused features float32[H, W, C_out] of one frame."""
        lidar = self.voxelize(points)
        if self.tables is None:
            camera = np.zeros((self.height, self.width, 0), np.float32)
            coverage = np.zeros((self.height, self.width), np.float32)
        else:
            camera, coverage = self.lift(cameras or {})
        fused = np.concatenate([lidar, camera, coverage[..., None]], axis=-1)
        if self._projection is None:
            return fused
        weights, bias = self._projection
        out = fused @ weights + bias
        return np.maximum(out, 0.0) if self.cfg.fusion.activation == 'relu' else out


def torch_available() -> bool:
    """Whether PyTorch (the optional ``bench`` extra) can be imported."""
    return importlib.util.find_spec('torch') is not None


def numba_available() -> bool:
    """Whether Numba (requirements-dev.txt) can be imported, for ``numba_peer.NumbaBev``."""
    return importlib.util.find_spec('numba') is not None


class TorchBev:
    """
    The fused BEV of one frame in PyTorch eager (float32) on ``device``, same API as NumpyBev.

    Uses ``index_add_`` for counts and sums and ``scatter_reduce_(amax)`` for the extremes,
    with ``torch.set_num_threads`` = the CPU count. Inputs and output are NumPy arrays
    (``torch.from_numpy`` / ``.numpy()``, no copies), so callers time the same work.
    """

    name = 'torch'

    def __init__(self, cfg: PipelineConfig, threads: int | None = None, device: str = 'cpu'):
        import torch
        self.torch = torch
        self.device = torch.device(device)
        torch.set_num_threads(threads or os.cpu_count() or 1)
        # Full float32 on every device, like the JAX side (no TF32 matmuls on NVIDIA GPUs).
        torch.backends.cuda.matmul.allow_tf32 = False
        self.cfg = cfg
        self.height, self.width = cfg.grid.height, cfg.grid.width
        self._grid = [float(v) for v in cfg.grid.vector()]
        put = functools.partial(self._to_device, torch=torch)
        self._rot = put(cfg.lidar.rotation_matrix().astype(np.float32))
        self._trans = put(np.asarray(cfg.lidar.translation, np.float32))
        self.camera_names = tuple(c.name for c in cfg.cameras)
        self.tables = lift_matrix(cfg)
        self._lift = self._samples = None
        if self.tables is not None:
            t = self.tables
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', UserWarning)    # "CSR support is in beta"
                self._lift = torch.sparse_csr_tensor(
                    put(t.indptr), put(t.indices), put(t.data), size=t.shape,
                    check_invariants=False)
            self._samples = put(t.samples)
            # Staging for the maps, on the device: one copy per frame and camera.
            self._flat = torch.zeros((t.shape[1], cfg.camera_channels), device=self.device)
        weights = load_fusion_weights(cfg)
        self._projection = None if weights is None else tuple(put(a) for a in weights)
        self._log64 = float(np.float32(np.log(64.0)))

    def _to_device(self, array: np.ndarray, torch):
        return torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    @property
    def version(self) -> str:
        """torch.__version__."""
        return self.torch.__version__

    def upload(self, points: np.ndarray, cameras: Mapping[str, np.ndarray | None]):
        """Copy a cloud and its maps to the device: (points tensor, name -> tensor or None)."""
        torch = self.torch

        def put(a):
            return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(self.device)
        return put(points), {name: None if m is None else put(m) for name, m in cameras.items()}

    def voxelize(self, points):
        """Six LiDAR channels float32[H, W, 6] (a tensor) of a float32[N, 4] cloud."""
        torch = self.torch
        h, w = self.height, self.width
        cells = h * w
        p = points if torch.is_tensor(points) else self.upload(points, {})[0]
        row, col, z, intensity, keep = grid_cells(torch, p, self._rot, self._trans,
                                                  self._grid, h, w)
        # Dropped points go to one extra dump cell: fixed-size scatters, no compaction.
        cell = torch.where(keep, row * w + col, torch.full_like(row, cells)).long()
        z = torch.where(keep, z, torch.zeros_like(z))
        intensity = torch.where(keep, intensity, torch.zeros_like(intensity))
        sums = torch.zeros((cells + 1, 3), dtype=torch.float32, device=self.device).index_add_(
            0, cell, torch.stack([torch.ones_like(z), z, intensity], dim=1))
        extremes = torch.full((cells + 1, 2), -float('inf'), dtype=torch.float32,
                              device=self.device)
        extremes.scatter_reduce_(0, cell[:, None].expand(-1, 2), torch.stack([z, -z], dim=1),
                                 reduce='amax')
        count, sums, extremes = sums[:cells, 0], sums[:cells], extremes[:cells]
        occupied = count > 0
        inv = 1.0 / torch.clamp(count, min=1.0)
        zero = torch.zeros((), dtype=torch.float32, device=self.device)
        out = torch.stack([
            occupied.float(),
            torch.clamp(torch.log1p(count) / self._log64, max=1.0),
            torch.where(occupied, extremes[:, 0], zero),
            sums[:, 1] * inv,
            torch.where(occupied, -extremes[:, 1], zero),
            sums[:, 2] * inv,
        ], dim=1)
        return out.reshape(h, w, 6)

    def lift(self, cameras: Mapping[str, np.ndarray | None]):
        """Camera BEV float32[H, W, C] and coverage float32[H, W] (tensors): one sparse product."""
        torch = self.torch
        channels = self.cfg.camera_channels
        flat, offset = self._flat, 0
        valid = []
        for cam, name in zip(self.cfg.cameras, self.camera_names):
            fmap, size = cameras.get(name), cam.height * cam.width
            valid.append(fmap is not None)
            if fmap is None:
                flat[offset:offset + size] = 0.0     # masked: its columns add nothing
            else:
                if not torch.is_tensor(fmap):
                    fmap = torch.from_numpy(np.ascontiguousarray(fmap, np.float32))
                flat[offset:offset + size] = fmap.reshape(-1, channels)
            offset += size
        summed = self._lift @ flat
        mask = torch.tensor(valid, dtype=torch.float32).to(self.device)
        count = (self._samples * mask[:, None]).sum(dim=0)
        camera = summed / torch.clamp(count, min=1.0)[:, None]
        coverage = (count > 0).float()
        return camera.reshape(self.height, self.width, channels), \
            coverage.reshape(self.height, self.width)

    def process(self, points: np.ndarray,
                cameras: Mapping[str, np.ndarray | None] | None = None) -> np.ndarray:
        """Fused features float32[H, W, C_out] of one frame, as a NumPy array."""
        return self.compute(*self.upload(points, cameras or {})).cpu().numpy()

    def compute(self, points, cameras: Mapping[str, object | None] | None = None):
        """Fused features (a tensor on the device) from tensors or arrays."""
        torch = self.torch
        with torch.inference_mode():
            lidar = self.voxelize(points)
            if self.tables is None:
                camera = torch.zeros((self.height, self.width, 0), device=self.device)
                coverage = torch.zeros((self.height, self.width), device=self.device)
            else:
                camera, coverage = self.lift(cameras or {})
            fused = torch.cat([lidar, camera, coverage[..., None]], dim=-1)
            if self._projection is not None:
                weights, bias = self._projection
                fused = fused @ weights + bias
                if self.cfg.fusion.activation == 'relu':
                    fused = torch.relu(fused)
            return fused
