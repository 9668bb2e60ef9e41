"""
Pure JAX kernels: LiDAR voxelization, camera lift and fusion onto the BEV grid.

Shapes in the signatures use B (bucket capacity), H x W (grid rows x columns), N (cameras),
K (height levels), H_f x W_f x C (camera feature map). Arguments after ``*`` are static: they fix
array shapes, so a new value means a new compile. Everything else is a traced array, so
calibration and grid offsets can change at run time without recompiling.

``grid`` is always ``float32[5] = (x_min, y_min, z_min, z_max, resolution)`` in metres.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

LIDAR_CHANNELS = ('occupancy', 'density', 'z_max', 'z_mean', 'z_min', 'intensity_mean')
_LOG_64 = math.log(64.0)
MIN_DEPTH_M = 0.1


def voxelize(points: jax.Array, num_valid: jax.Array, lidar_rotation: jax.Array,
             lidar_translation: jax.Array, grid: jax.Array, *, height: int,
             width: int) -> jax.Array:
    """
    Rasterize a padded cloud into the six LiDAR BEV channels.

    points: float32[B, 4] x, y, z, intensity in the LiDAR frame; rows >= num_valid are padding.
    num_valid: int32[] count of real rows. lidar_rotation float32[3, 3] and lidar_translation
    float32[3] map LiDAR to grid frame. Returns float32[H, W, 6] in ``LIDAR_CHANNELS`` order,
    0 in empty cells. Non-finite points and points outside the grid or z range are dropped.
    """
    px, py, pz, intensity = points[:, 0], points[:, 1], points[:, 2], points[:, 3]
    # Written out per row: XLA's CPU dot for [B, 3] x [3, 3] is several times slower.
    r, t = lidar_rotation, lidar_translation
    x = r[0, 0] * px + r[0, 1] * py + r[0, 2] * pz + t[0]
    y = r[1, 0] * px + r[1, 1] * py + r[1, 2] * pz + t[1]
    z = r[2, 0] * px + r[2, 1] * py + r[2, 2] * pz + t[2]
    x_min, y_min, z_min, z_max, res = grid[0], grid[1], grid[2], grid[3], grid[4]
    row = jnp.floor((x - x_min) / res)
    col = jnp.floor((y - y_min) / res)
    keep = ((jnp.arange(points.shape[0]) < num_valid)
            & jnp.isfinite(x) & jnp.isfinite(y) & jnp.isfinite(z) & jnp.isfinite(intensity)
            & (row >= 0) & (row < height) & (col >= 0) & (col < width)
            & (z >= z_min) & (z < z_max))
    # Dropped points get index `cells`, which mode='drop' skips: the scatters keep a static
    # size without a dump cell to slice off afterwards.
    cells = height * width
    cell = jnp.where(keep, row * width + col, cells).astype(jnp.int32)
    sums = jnp.zeros((cells, 3), jnp.float32).at[cell].add(
        jnp.stack([jnp.ones_like(z), z, intensity], axis=1), mode='drop')
    # max of (z, -z) gives z_max and -z_min in one scatter.
    extremes = jnp.full((cells, 2), -jnp.inf, jnp.float32).at[cell].max(
        jnp.stack([z, -z], axis=1), mode='drop')
    count = sums[:, 0]
    occupied = count > 0
    inv = 1.0 / jnp.maximum(count, 1.0)
    channels = jnp.stack([
        occupied.astype(jnp.float32),
        jnp.minimum(1.0, jnp.log1p(count) / _LOG_64),
        jnp.where(occupied, extremes[:, 0], 0.0),
        sums[:, 1] * inv,
        jnp.where(occupied, -extremes[:, 1], 0.0),
        sums[:, 2] * inv,
    ], axis=1)
    return channels.reshape(height, width, len(LIDAR_CHANNELS))


class LiftTables(NamedTuple):
    """
    Precomputed bilinear taps of the camera lift, from grid and calibration only.

    index: int32[N*K*4, H*W] rows of the flattened feature maps (N*H_f*W_f, C), one row per tap.
    weight: float32[N*K*4, H*W] bilinear weights, 0 for invalid samples.
    samples: float32[N, H*W] valid samples per camera and cell (0..K).
    """

    index: jax.Array
    weight: jax.Array
    samples: jax.Array


def lift_geometry(intrinsics: jax.Array, camera_rotation: jax.Array,
                  camera_translation: jax.Array, grid: jax.Array, *, height: int, width: int,
                  num_heights: int, map_height: int, map_width: int) -> LiftTables:
    """
    Project every cell centre at every height level into every camera (Simple-BEV geometry).

    intrinsics: float32[N, 4] (fx, fy, cx, cy) at feature-map resolution, pixel centres at
    integer coordinates. camera_rotation float32[N, 3, 3] and camera_translation float32[N, 3]
    map each optical frame (z forward, x right, y down) to the grid frame. A sample is valid when
    its depth is > 0.1 m and -0.5 <= u < W_f - 0.5, -0.5 <= v < H_f - 0.5. Runs once per
    calibration, not per frame.
    """
    x_min, y_min, z_min, z_max, res = grid[0], grid[1], grid[2], grid[3], grid[4]
    xs = x_min + (jnp.arange(height, dtype=jnp.float32) + 0.5) * res
    ys = y_min + (jnp.arange(width, dtype=jnp.float32) + 0.5) * res
    zs = z_min + (jnp.arange(num_heights, dtype=jnp.float32) + 0.5) * (z_max - z_min) / num_heights
    gx, gy, gz = jnp.meshgrid(xs, ys, zs, indexing='ij')
    pts = jnp.stack([gx, gy, gz], axis=-1).reshape(height * width, num_heights, 3)

    # p_cam = R^T (p_grid - t), for every camera: [N, HW, K, 3]
    rel = pts[None] - camera_translation[:, None, None, :]
    cam = jnp.einsum('nij,nckj->ncki', jnp.swapaxes(camera_rotation, 1, 2), rel)
    depth = cam[..., 2]
    safe = jnp.where(depth > MIN_DEPTH_M, depth, 1.0)
    fx, fy, cx, cy = (intrinsics[:, i, None, None] for i in range(4))
    u = fx * cam[..., 0] / safe + cx
    v = fy * cam[..., 1] / safe + cy
    valid = ((depth > MIN_DEPTH_M) & (u >= -0.5) & (u < map_width - 0.5)
             & (v >= -0.5) & (v < map_height - 0.5))

    u0, v0 = jnp.floor(u), jnp.floor(v)
    du, dv = u - u0, v - v0
    taps_index, taps_weight = [], []
    for oy, wy in ((0, 1.0 - dv), (1, dv)):
        for ox, wx in ((0, 1.0 - du), (1, du)):
            # Edge clamping: the border pixel repeats beyond the map.
            col = jnp.clip(u0 + ox, 0, map_width - 1).astype(jnp.int32)
            row = jnp.clip(v0 + oy, 0, map_height - 1).astype(jnp.int32)
            taps_index.append(row * map_width + col)
            taps_weight.append(jnp.where(valid, wx * wy, 0.0))
    cam_offset = (jnp.arange(intrinsics.shape[0], dtype=jnp.int32)
                  * (map_height * map_width))[:, None, None, None]
    index = jnp.stack(taps_index, axis=-1) + cam_offset            # [N, HW, K, 4]
    weight = jnp.stack(taps_weight, axis=-1)
    n = intrinsics.shape[0]
    to_taps = (lambda a: jnp.moveaxis(a, 1, 3).reshape(n * num_heights * 4, height * width))
    return LiftTables(index=to_taps(index), weight=to_taps(weight).astype(jnp.float32),
                      samples=jnp.sum(valid, axis=2).astype(jnp.float32))


def lift_cameras(features: jax.Array, camera_valid: jax.Array, tables: LiftTables, *,
                 height: int, width: int) -> tuple[jax.Array, jax.Array]:
    """
    Sample camera features into the BEV grid with the precomputed taps.

    features: float32[N, H_f, W_f, C]; camera_valid: bool[N] (False masks a missing or stale
    camera for this frame). Returns (camera BEV float32[H, W, C], coverage float32[H, W]): the
    mean of all valid samples over cameras and heights, 0 and coverage 0 where none is valid.
    """
    n, map_h, map_w, channels = features.shape
    taps, cells = tables.index.shape
    flat = features.reshape(n * map_h * map_w, channels)
    valid = camera_valid.astype(jnp.float32)
    # One gather per tap, accumulated: XLA fuses this into a single loop, while a batched
    # gather + einsum materializes [T, H*W, C] and runs ~10x slower on the CPU.
    summed = jnp.zeros((cells, channels), jnp.float32)
    for tap in range(taps):
        weight = tables.weight[tap] * valid[tap // (taps // n)]
        summed = summed + weight[:, None] * flat[tables.index[tap]]
    count = valid @ tables.samples
    camera = summed / jnp.maximum(count, 1.0)[:, None]
    coverage = (count > 0).astype(jnp.float32)
    return camera.reshape(height, width, channels), coverage.reshape(height, width)


def fuse(lidar: jax.Array, camera: jax.Array, coverage: jax.Array,
         projection: tuple[jax.Array, jax.Array] | None = None, *,
         activation: str = 'none') -> jax.Array:
    """
    Concatenate [6 LiDAR | C camera | coverage] and apply the optional 1x1 projection.

    lidar float32[H, W, 6], camera float32[H, W, C], coverage float32[H, W]. projection is
    (W float32[6 + C + 1, C_out], b float32[C_out]) or None; without it the output is the plain
    concatenation and ``activation`` is ignored. Returns float32[H, W, C_out].
    """
    fused = jnp.concatenate([lidar, camera, coverage[..., None]], axis=-1)
    if projection is None:
        return fused
    weights, bias = projection
    out = fused @ weights + bias
    return jax.nn.relu(out) if activation == 'relu' else out
