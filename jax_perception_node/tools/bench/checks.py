"""
Output checks of the benchmarks: every implementation against the pipeline, before timing.

Differences are allowed only where float32 rounding decides, and only in a bounded number of
cells that are each shown to sit at such a border; anything else aborts the run.
"""

from jax_perception_node.settings.config import PipelineConfig
from jax_perception_node.tools import peers
import numpy as np

from .common import ATOL, BenchError, RTOL

# A camera sample this close to a map border (px) can be valid in one float32 implementation
# and not in another: the projection's operation order differs by an ulp or so (~1e-5 px).
BORDER_PX = 1e-3
# At most this many such cells per frame; more means a real disagreement, not rounding.
MAX_BORDER_CELLS = 8


def check_equal(what: str, actual: np.ndarray, expected: np.ndarray,
                exempt: np.ndarray | None = None) -> int:
    """
    Raise BenchError unless ``actual`` == ``expected`` (rtol = atol = 1e-4) outside ``exempt``.

    Returns how many exempt cells differ; the error names the first differing cell.
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


def border_cells(cfg: PipelineConfig, pipeline_samples: np.ndarray | None) -> np.ndarray | None:
    """
    Cells whose valid-sample count differs between the pipeline and the peers' geometry.

    Each such cell must hold a sample within ``BORDER_PX`` of a map border, and there may be at
    most ``MAX_BORDER_CELLS``: otherwise BenchError. Returns bool[H, W] (None without
    cameras).
    """
    if pipeline_samples is None:
        return None
    pixels = peers.sample_pixels(cfg)
    peer_samples = np.stack([valid.sum(axis=1) for _, _, valid in pixels])
    differs = (np.asarray(pipeline_samples) != peer_samples).any(axis=0)
    near = np.zeros_like(differs)
    for cam, (u, v, _) in zip(cfg.cameras, pixels):
        close = ((np.abs(u + 0.5) < BORDER_PX) | (np.abs(u - cam.width + 0.5) < BORDER_PX)
                 | (np.abs(v + 0.5) < BORDER_PX) | (np.abs(v - cam.height + 0.5) < BORDER_PX))
        near |= close.any(axis=1)
    count = int(differs.sum())
    unexplained = int((differs & ~near).sum())
    if count > MAX_BORDER_CELLS or unexplained:
        raise BenchError(
            f'lift geometry: {count} cells differ in their valid samples between the pipeline '
            f'and the peers ({unexplained} without a sample within {BORDER_PX:g} px of a map '
            f'border; at most {MAX_BORDER_CELLS} border cells are rounding)')
    return differs.reshape(cfg.grid.height, cfg.grid.width)


def edge_cells(cfg: PipelineConfig, points: np.ndarray, eps: float = 5e-5) -> np.ndarray:
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
