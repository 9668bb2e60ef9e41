"""
Pure JAX kernels: LiDAR voxelization, camera lift and fusion onto the BEV grid.

Shapes in the signatures use B (bucket capacity), H x W (grid rows x columns), N (cameras),
K (height levels), S (lift slots per cell), H_f x W_f x C (camera feature map), P (earlier
sweeps kept for accumulation) x C (their capacity, the largest bucket). Arguments after
``*`` are static: they fix array shapes, so a new value means a new compile. Everything else is
a traced array, so calibration and grid offsets can change at run time without recompiling.

``grid`` is always ``float32[5] = (x_min, y_min, z_min, z_max, resolution)`` in metres.

No kernel leaves a float32 product to a backend's default precision: the geometry is written
out without dots, and the one matmul (the projection) asks for HIGHEST. NVIDIA GPUs otherwise
run float32 dots as TF32 (10-bit mantissa), which moved a quarter of the lifted cells.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

LIDAR_CHANNELS = ('occupancy', 'density', 'z_max', 'z_mean', 'z_min', 'intensity_mean')
TIME_LAG_CHANNEL = 'time_lag_mean'    # after intensity_mean when num_sweeps > 1
_LOG_64 = math.log(64.0)
MIN_DEPTH_M = 0.1


def lidar_channels(num_sweeps: int = 1) -> tuple[str, ...]:
    """Names of the LiDAR block: ``LIDAR_CHANNELS``, then ``time_lag_mean`` when accumulating."""
    return LIDAR_CHANNELS + ((TIME_LAG_CHANNEL,) if num_sweeps > 1 else ())


def _to_grid(px, py, pz, r, t):
    # Written out per row: XLA's CPU dot for [B, 3] x [3, 3] is several times slower, and a
    # dot would leave its float32 precision to the backend.
    x = r[0, 0] * px + r[0, 1] * py + r[0, 2] * pz + t[0]
    y = r[1, 0] * px + r[1, 1] * py + r[1, 2] * pz + t[1]
    z = r[2, 0] * px + r[2, 1] * py + r[2, 2] * pz + t[2]
    return x, y, z


def _rasterize(x, y, z, intensity, real, grid, lag=None, *, height: int,
               width: int) -> jax.Array:
    """Filter points by the grid contract and compute the channels; ``lag`` adds the 7th."""
    x_min, y_min, z_min, z_max, res = grid[0], grid[1], grid[2], grid[3], grid[4]
    row = jnp.floor((x - x_min) / res)
    col = jnp.floor((y - y_min) / res)
    keep = (real & jnp.isfinite(x) & jnp.isfinite(y) & jnp.isfinite(z) & jnp.isfinite(intensity)
            & (row >= 0) & (row < height) & (col >= 0) & (col < width)
            & (z >= z_min) & (z < z_max))
    # Dropped points get index `cells`, which mode='drop' skips: the scatters keep a static
    # size without a dump cell to slice off afterwards.
    cells = height * width
    cell = jnp.where(keep, row * width + col, cells).astype(jnp.int32)
    summed = [jnp.ones_like(z), z, intensity] + ([] if lag is None else [lag])
    sums = jnp.zeros((cells, len(summed)), jnp.float32).at[cell].add(
        jnp.stack(summed, axis=1), mode='drop')
    # max of (z, -z) gives z_max and -z_min in one scatter.
    extremes = jnp.full((cells, 2), -jnp.inf, jnp.float32).at[cell].max(
        jnp.stack([z, -z], axis=1), mode='drop')
    count = sums[:, 0]
    occupied = count > 0
    inv = 1.0 / jnp.maximum(count, 1.0)
    channels = [
        occupied.astype(jnp.float32),
        jnp.minimum(1.0, jnp.log1p(count) / _LOG_64),
        jnp.where(occupied, extremes[:, 0], 0.0),
        sums[:, 1] * inv,
        jnp.where(occupied, -extremes[:, 1], 0.0),
        sums[:, 2] * inv,
    ] + ([] if lag is None else [sums[:, 3] * inv])
    return jnp.stack(channels, axis=1).reshape(height, width, len(channels))


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
    x, y, z = _to_grid(points[:, 0], points[:, 1], points[:, 2], lidar_rotation,
                       lidar_translation)
    real = jnp.arange(points.shape[0]) < num_valid
    return _rasterize(x, y, z, points[:, 3], real, grid, height=height, width=width)


class SweepArgs(NamedTuple):
    """
    Per-frame inputs of multi-sweep accumulation (P = num_sweeps - 1 past sweeps).

    scalars: int32[1 + P] the ring slot the current sweep is written into, then the points of
    each slot to use this frame (0 leaves a slot out: too old, no pose, never filled).
    motion: float32[P, 13] per slot, the rotation (9, row-major) and translation (3) from that
    sweep's LiDAR frame into the current grid frame, then its time lag (s) behind the current
    sweep. Composed on the host in float64 (LiDAR extrinsic and relative odometry pose).
    """

    scalars: jax.Array
    motion: jax.Array


MOTION_SIZE = 13


def voxelize_sweeps(points: jax.Array, num_valid: jax.Array, ring: jax.Array, sweeps: SweepArgs,
                    lidar_rotation: jax.Array, lidar_translation: jax.Array, grid: jax.Array, *,
                    height: int, width: int) -> jax.Array:
    """
    Rasterize the current sweep and P earlier ones into the seven accumulated LiDAR channels.

    points, num_valid, lidar_rotation, lidar_translation, grid: as for ``voxelize`` (the
    current sweep). ring: float32[P, C, 4] earlier sweeps in their own LiDAR frames, C the
    largest bucket; ``sweeps`` says how many rows of each slot count and how each moves into
    the current grid frame. All points go through one scatter per statistic. Returns
    float32[H, W, 7]: ``LIDAR_CHANNELS`` then ``time_lag_mean`` (mean seconds behind the
    current sweep of the points in the cell; 0 in empty cells).
    """
    past, capacity = ring.shape[0], ring.shape[1]
    x0, y0, z0 = _to_grid(points[:, 0], points[:, 1], points[:, 2], lidar_rotation,
                          lidar_translation)
    motion = sweeps.motion
    # Per slot, broadcast over its rows: r[i, j] is [P, 1], t[i] is [P, 1].
    r = motion[:, :9].reshape(past, 3, 3).transpose(1, 2, 0)[..., None]
    t = motion[:, 9:12].T[..., None]
    x1, y1, z1 = _to_grid(ring[..., 0], ring[..., 1], ring[..., 2], r, t)
    real1 = jnp.arange(capacity)[None, :] < sweeps.scalars[1:, None]
    lag1 = jnp.broadcast_to(motion[:, 12:13], (past, capacity))

    def joined(current, earlier):
        return jnp.concatenate([current, earlier.reshape(-1)])

    real0 = jnp.arange(points.shape[0]) < num_valid
    return _rasterize(joined(x0, x1), joined(y0, y1), joined(z0, z1),
                      joined(points[:, 3], ring[..., 3]), joined(real0, real1), grid,
                      joined(jnp.zeros_like(x0), lag1), height=height, width=width)


class LiftTables(NamedTuple):
    """
    The camera lift's compacted bilinear samples, from grid and calibration only.

    The feature maps are read edge-padded by one pixel on every side, (H_f + 2) x (W_f + 2) per
    camera, followed by one all-zero block; ``P = (N + 1) (H_f + 2) (W_f + 2)`` rows of C. Each
    cell holds ``S`` sample slots (S is static: it fixes the shapes, see ``lift_geometry``).

    top: int32[S, H*W] flat row of a sample's top-left tap; the other taps are +1, +(W_f + 2)
    and +(W_f + 3). Unused slots point at the zero block.
    frac: float32[2, S, H*W] (du, dv) = (u - floor(u), v - floor(v)); 0 in unused slots.
    samples: float32[N, H*W] valid samples per camera and cell (0..K), for the mean.
    """

    top: jax.Array
    frac: jax.Array
    samples: jax.Array


def _project(intrinsics: jax.Array, camera_rotation: jax.Array, camera_translation: jax.Array,
             grid: jax.Array, *, height: int, width: int, num_heights: int, map_height: int,
             map_width: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pixel coordinates u, v and validity of every sample: each [N, K, H*W] (camera-major)."""
    x_min, y_min, z_min, z_max, res = grid[0], grid[1], grid[2], grid[3], grid[4]
    xs = x_min + (jnp.arange(height, dtype=jnp.float32) + 0.5) * res
    ys = y_min + (jnp.arange(width, dtype=jnp.float32) + 0.5) * res
    zs = z_min + (jnp.arange(num_heights, dtype=jnp.float32) + 0.5) * (z_max - z_min) / num_heights
    # [1, K, H*W] each: level-major so that a camera's samples of one cell are K apart.
    gx = jnp.broadcast_to(xs[:, None], (height, width)).reshape(1, 1, -1)
    gy = jnp.broadcast_to(ys[None, :], (height, width)).reshape(1, 1, -1)
    gz = zs.reshape(1, -1, 1)
    # p_cam = R^T (p_grid - t), written out: no dot, so no backend may lower its precision
    # (a TF32 dot on an NVIDIA GPU moved a quarter of the samples).
    r = camera_rotation[:, :, :, None, None]          # [N, 3, 3, 1, 1]
    t = camera_translation[:, :, None, None]          # [N, 3, 1, 1]
    rx, ry, rz = gx - t[:, 0], gy - t[:, 1], gz - t[:, 2]
    cam_x = r[:, 0, 0] * rx + r[:, 1, 0] * ry + r[:, 2, 0] * rz
    cam_y = r[:, 0, 1] * rx + r[:, 1, 1] * ry + r[:, 2, 1] * rz
    depth = r[:, 0, 2] * rx + r[:, 1, 2] * ry + r[:, 2, 2] * rz
    safe = jnp.where(depth > MIN_DEPTH_M, depth, 1.0)
    fx, fy, cx, cy = (intrinsics[:, i, None, None] for i in range(4))
    u = fx * cam_x / safe + cx
    v = fy * cam_y / safe + cy
    valid = ((depth > MIN_DEPTH_M) & (u >= -0.5) & (u < map_width - 0.5)
             & (v >= -0.5) & (v < map_height - 0.5))
    return u, v, valid


def lift_sample_counts(intrinsics: jax.Array, camera_rotation: jax.Array,
                       camera_translation: jax.Array, grid: jax.Array, *, height: int,
                       width: int, num_heights: int, map_height: int,
                       map_width: int) -> jax.Array:
    """
    Count the valid camera samples per cell, int32[H*W], over all cameras and heights.

    Its maximum is the slot count ``lift_geometry`` needs for this calibration. Arguments as
    for ``lift_geometry``.
    """
    _, _, valid = _project(intrinsics, camera_rotation, camera_translation, grid, height=height,
                           width=width, num_heights=num_heights, map_height=map_height,
                           map_width=map_width)
    return jnp.sum(valid, axis=(0, 1), dtype=jnp.int32)


def lift_geometry(intrinsics: jax.Array, camera_rotation: jax.Array,
                  camera_translation: jax.Array, grid: jax.Array, *, height: int, width: int,
                  num_heights: int, map_height: int, map_width: int,
                  slots: int) -> tuple[LiftTables, jax.Array]:
    """
    Project every cell centre at every height level into every camera and compact the samples.

    intrinsics: float32[N, 4] (fx, fy, cx, cy) at feature-map resolution, pixel centres at
    integer coordinates. camera_rotation float32[N, 3, 3] and camera_translation float32[N, 3]
    map each optical frame (z forward, x right, y down) to the grid frame. A sample is valid when
    its depth is > 0.1 m and -0.5 <= u < W_f - 0.5, -0.5 <= v < H_f - 0.5 (Simple-BEV geometry).

    Each cell keeps its first ``slots`` valid samples in (camera, level) order; ``slots`` is
    static (changing it recompiles). Returns the tables and int32[N], the valid samples of each
    camera that did not fit (all 0 when ``slots`` >= ``max(lift_sample_counts(...))``). Runs
    once per calibration, not per frame.
    """
    n = intrinsics.shape[0]
    u, v, valid = _project(intrinsics, camera_rotation, camera_translation, grid, height=height,
                           width=width, num_heights=num_heights, map_height=map_height,
                           map_width=map_width)
    padded_w = map_width + 2
    block = (map_height + 2) * padded_w
    u0, v0 = jnp.floor(u), jnp.floor(v)
    # -0.5 <= u < W_f - 0.5 puts u0 in [-1, W_f - 1]: with one pixel of edge padding all four
    # taps lie inside the camera's padded block and edge clamping comes for free.
    camera = jnp.arange(n, dtype=jnp.int32)[:, None, None]
    top = camera * block + (v0.astype(jnp.int32) + 1) * padded_w + u0.astype(jnp.int32) + 1
    top = jnp.where(valid, top, n * block).reshape(n * num_heights, height * width)
    du = jnp.where(valid, u - u0, 0.0).reshape(n * num_heights, -1)
    dv = jnp.where(valid, v - v0, 0.0).reshape(n * num_heights, -1)
    flat_valid = valid.reshape(n * num_heights, -1)
    # Valid samples first, in (camera, level) order: a stable sort of the invalid flags.
    order = jnp.argsort(~flat_valid, axis=0, stable=True)[:slots]
    rank = jnp.cumsum(flat_valid, axis=0) - 1
    dropped = jnp.sum((flat_valid & (rank >= slots)).reshape(n, -1), axis=1, dtype=jnp.int32)
    kept = jnp.take_along_axis(flat_valid, order, axis=0)
    take = functools.partial(jnp.take_along_axis, indices=order, axis=0)
    tables = LiftTables(
        top=jnp.where(kept, take(top), n * block),
        frac=jnp.stack([jnp.where(kept, take(du), 0.0), jnp.where(kept, take(dv), 0.0)]),
        samples=jnp.sum(valid, axis=1).astype(jnp.float32))
    return tables, dropped


def lift_cameras(features: jax.Array, camera_valid: jax.Array, tables: LiftTables, *,
                 height: int, width: int) -> tuple[jax.Array, jax.Array]:
    """
    Sample camera features into the BEV grid with the compacted samples.

    features: float32[N, H_f, W_f, C]; camera_valid: bool[N] (False masks a missing or stale
    camera for this frame). Returns (camera BEV float32[H, W, C], coverage float32[H, W]): the
    mean of all valid samples over cameras and heights, 0 and coverage 0 where none is valid.
    Work is S x H x W samples of four taps, S = the slots of ``tables``.
    """
    n, map_h, map_w, channels = features.shape
    masked = jnp.where(camera_valid[:, None, None, None], features, 0.0)
    padded = jnp.pad(masked, ((0, 0), (1, 1), (1, 1), (0, 0)), mode='edge')
    flat = jnp.pad(padded, ((0, 1), (0, 0), (0, 0), (0, 0))).reshape(-1, channels)
    row = map_w + 2

    def tap(index):
        # Indices are built in range by lift_geometry: skip the bounds handling of a gather.
        return flat.at[index].get(mode='promise_in_bounds')

    # Slot by slot, the four taps accumulated: XLA fuses this into one loop over the cells,
    # where a batched gather + reduce materializes [S, 4, H*W, C] and runs several times slower.
    summed = jnp.zeros((height * width, channels), jnp.float32)
    for slot in range(tables.top.shape[0]):
        top = tables.top[slot]
        du, dv = tables.frac[0, slot][:, None], tables.frac[1, slot][:, None]
        wx0, wx1, wy0, wy1 = 1.0 - du, du, 1.0 - dv, dv
        summed = (summed + (wx0 * wy0) * tap(top) + (wx1 * wy0) * tap(top + 1)
                  + (wx0 * wy1) * tap(top + row) + (wx1 * wy1) * tap(top + row + 1))
    # Summed camera by camera: a reduce over the camera axis went to XNNPACK on the CPU and
    # cost as much as the whole slot loop.
    count = sum(jnp.where(camera_valid[i], tables.samples[i], 0.0) for i in range(n))
    camera = summed / jnp.maximum(count, 1.0)[:, None]
    coverage = (count > 0).astype(jnp.float32)
    return camera.reshape(height, width, channels), coverage.reshape(height, width)


def fuse(lidar: jax.Array, camera: jax.Array, coverage: jax.Array,
         projection: tuple[jax.Array, jax.Array] | None = None, *,
         activation: str = 'none') -> jax.Array:
    """
    Concatenate [LiDAR | C camera | coverage] and apply the optional 1x1 projection.

    lidar float32[H, W, L] (L = 6, or 7 with accumulation: ``time_lag_mean`` last), camera
    float32[H, W, C], coverage float32[H, W]. projection is (W float32[L + C + 1, C_out],
    b float32[C_out]) or None; without it the output is the plain concatenation and
    ``activation`` is ignored. The projection runs at HIGHEST precision: full
    float32 on every backend (NVIDIA GPUs default to TF32 for float32 dots). Returns
    float32[H, W, C_out].
    """
    fused = jnp.concatenate([lidar, camera, coverage[..., None]], axis=-1)
    if projection is None:
        return fused
    weights, bias = projection
    out = jnp.matmul(fused, weights, precision=jax.lax.Precision.HIGHEST) + bias
    return jax.nn.relu(out) if activation == 'relu' else out


CALIBRATION_SIZE = 17   # LiDAR rotation (9, row-major), translation (3), grid (5)


class FrameArgs(NamedTuple):
    """
    The arguments of one frame, grouped by how often they change (and cross to the device).

    points: float32[B, 4] x, y, z, intensity in the LiDAR frame (per frame).
    scalars: int32[1 + N] the count of real point rows, then 1 or 0 per camera: valid for this
    frame or masked (per frame, one small transfer).
    calibration: float32[17] LiDAR rotation (row-major), LiDAR translation, ``grid``
    (per calibration; stays on the device).
    features: float32[N, H_f, W_f, C] or None without cameras (only when a map changed).
    lift: LiftTables or None without cameras (per calibration).
    projection: (W float32[L + C + 1, C_out], b float32[C_out]) or None (fixed); L = 6 or 7.
    sweeps: SweepArgs with accumulation (per frame, two small transfers), else None.
    """

    points: jax.Array
    scalars: jax.Array
    calibration: jax.Array
    features: jax.Array | None
    lift: LiftTables | None
    projection: tuple[jax.Array, jax.Array] | None
    sweeps: SweepArgs | None = None


def bev_frame(args: FrameArgs, ring: jax.Array | None = None, *, height: int, width: int,
              activation: str):
    """
    One frame: voxelize, lift the cameras, fuse. Returns float32[H, W, C_out].

    Without cameras (``args.features`` None) the camera block has 0 channels and coverage is 0.
    With accumulation, ``ring`` float32[P, C, 4] holds the earlier sweeps (``args.sweeps``
    says which rows count and how they move); the current sweep is written into the slot
    ``args.sweeps.scalars[0]`` (rows past B keep what they held: the count masks them) and the
    result is (features, updated ring). Compile with the ring donated, so the update is in
    place and only the new sweep ever crosses to the device.
    """
    calibration = args.calibration
    rotation, translation = calibration[:9].reshape(3, 3), calibration[9:12]
    if ring is None:
        lidar = voxelize(args.points, args.scalars[0], rotation, translation,
                         calibration[12:17], height=height, width=width)
    else:
        lidar = voxelize_sweeps(args.points, args.scalars[0], ring, args.sweeps, rotation,
                                translation, calibration[12:17], height=height, width=width)
    if args.features is None:
        camera = jnp.zeros((height, width, 0), jnp.float32)
        coverage = jnp.zeros((height, width), jnp.float32)
    else:
        # Materialized before the concatenation: fused into it, the slot loop ran once per
        # output channel instead of once per cell.
        camera, coverage = jax.lax.optimization_barrier(lift_cameras(
            args.features, args.scalars[1:] > 0, args.lift, height=height, width=width))
    features = fuse(lidar, camera, coverage, args.projection, activation=activation)
    if ring is None:
        return features
    update = jax.lax.dynamic_update_slice(
        ring, args.points[None], (args.sweeps.scalars[0], jnp.int32(0), jnp.int32(0)))
    return features, update
