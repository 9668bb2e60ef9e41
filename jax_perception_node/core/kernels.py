"""
Pure JAX kernels: LiDAR voxelization, fusion and the frame function onto the BEV grid.

Shapes in the signatures use B (bucket capacity), H x W (grid rows x columns), N (cameras),
K (height levels), S (lift slots per cell), H_f x W_f x C (camera feature map), P (earlier
sweeps kept for accumulation) x C (their capacity, the largest bucket). Arguments after
``*`` are static: they fix array shapes, so a new value means a new compile. Everything else is
a traced array, so calibration and grid offsets can change at run time without recompiling.
The camera lift (lens models, projection, sampling) is in ``lift.py``.

``grid`` is always ``float32[5] = (x_min, y_min, z_min, z_max, resolution)`` in metres.

No kernel leaves a float32 product to a backend's default precision: the geometry is written
out without dots, and the one matmul (the projection) asks for HIGHEST. NVIDIA GPUs otherwise
run float32 dots as TF32 (10-bit mantissa), which moved a quarter of the lifted cells.
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from .lift import lift_cameras, LiftTables
from ..sensors.cloud import MAX_POINT_TIME_S
from ..settings.channels import DENSITY_SATURATES, density_table, MAX_ABS_INPUT

# Read by the integer count: on the CPU cheaper than a log1p per cell (0.195 -> 0.171 ms for a
# 256 x 256 grid's output on one core).
_DENSITY = density_table()


def _to_grid(px, py, pz, r, t):
    # Written out per row: XLA's CPU dot for [B, 3] x [3, 3] is several times slower, and a
    # dot would leave its float32 precision to the backend.
    x = r[0, 0] * px + r[0, 1] * py + r[0, 2] * pz + t[0]
    y = r[1, 0] * px + r[1, 1] * py + r[1, 2] * pz + t[1]
    z = r[2, 0] * px + r[2, 1] * py + r[2, 2] * pz + t[2]
    return x, y, z


def _ordered_key(z):
    """int32 keys whose signed order is the order of the finite float32 values ``z``."""
    bits = jax.lax.bitcast_convert_type(z, jnp.int32)
    return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)


def _from_key(key):
    """Inverse of ``_ordered_key``."""
    bits = jnp.where(key < 0, key ^ jnp.int32(0x7FFFFFFF), key)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def _rasterize(x, y, z, intensity, real, grid, lag=None, *, height: int,
               width: int) -> list[jax.Array]:
    """Filter points by the grid contract and compute the channels; ``lag`` adds the 7th."""
    x_min, y_min, z_min, z_max, res = grid[0], grid[1], grid[2], grid[3], grid[4]
    row = jnp.floor((x - x_min) / res)
    col = jnp.floor((y - y_min) / res)
    # Coordinates need no bound of their own: the grid tests drop any far point (a NaN
    # compares False). The intensity test is as cheap as isfinite and keeps the sums finite.
    keep = (real & (jnp.abs(intensity) <= MAX_ABS_INPUT)
            & (row >= 0) & (row < height) & (col >= 0) & (col < width)
            & (z >= z_min) & (z < z_max))
    # Dropped points get index `cells`, which mode='drop' skips: the scatters keep a static
    # size without a dump cell to slice off afterwards.
    cells = height * width
    cell = jnp.where(keep, row * width + col, cells).astype(jnp.int32)
    # Measured on the CPU (docs/performance.md, "Cheaper scatters"): the scatter-add is faster
    # into one row per statistic, [3, cells], than into 12-byte rows [cells, 3], while 16-byte
    # rows [cells, 4] are as fast as [4, cells]; an int32 max beats a float max. The keys order
    # like the floats they encode, so the max of (key, ~key) gives z_max and z_min.
    summed = [jnp.ones_like(z), z, intensity] + ([] if lag is None else [lag])
    if lag is None:
        sums = jnp.zeros((3, cells), jnp.float32).at[:, cell].add(
            jnp.stack(summed), mode='drop')
    else:
        sums = jnp.zeros((cells, 4), jnp.float32).at[cell].add(
            jnp.stack(summed, axis=1), mode='drop').T
    key = _ordered_key(z)
    extremes = jnp.full((2, cells), jnp.iinfo(jnp.int32).min, jnp.int32).at[:, cell].max(
        jnp.stack([key, ~key]), mode='drop')
    count = sums[0]
    occupied = count > 0
    inv = 1.0 / jnp.maximum(count, 1.0)
    channels = [
        occupied.astype(jnp.float32),
        jnp.asarray(_DENSITY).at[jnp.minimum(count, DENSITY_SATURATES).astype(jnp.int32)].get(
            mode='promise_in_bounds'),
        jnp.where(occupied, _from_key(extremes[0]), 0.0),
        sums[1] * inv,
        jnp.where(occupied, _from_key(~extremes[1]), 0.0),
        sums[2] * inv,
    ] + ([] if lag is None else [sums[3] * inv])
    return channels


def deskew(x: jax.Array, y: jax.Array, z: jax.Array, times: jax.Array,
           twist: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """
    Move points measured ``times`` s after the stamp to where they were at the stamp.

    x, y, z: float32[...] in a frame rigidly attached to the vehicle; times: float32[...] (s,
    relative to the stamp; the host sets a point's own time to 0 when it is NaN or
    ``MAX_POINT_TIME_S`` or more away (``buckets``), then a set adds its cloud's offset, at most
    twice the stamp tolerance; beyond twice ``MAX_POINT_TIME_S`` or NaN counts as 0); twist:
    float32[6] (v m/s, w rad/s) of that frame, constant over the sweep
    (``ego_motion.deskew_motion``). q + t (v + w x q), first order in t; all zero: unchanged.
    """
    dt = jnp.where(jnp.abs(times) < 2 * MAX_POINT_TIME_S, times, 0.0)
    v, w = twist[:3], twist[3:6]
    return (x + dt * (v[0] + w[1] * z - w[2] * y),
            y + dt * (v[1] + w[2] * x - w[0] * z),
            z + dt * (v[2] + w[0] * y - w[1] * x))


def voxelize(points: jax.Array, num_valid: jax.Array, lidar_rotation: jax.Array,
             lidar_translation: jax.Array, grid: jax.Array, crop: jax.Array | None = None,
             times: jax.Array | None = None, twist: jax.Array | None = None, *,
             height: int, width: int) -> list[jax.Array]:
    """
    Rasterize a padded cloud into the six LiDAR BEV channels.

    Non-finite points, points outside the grid or z range, points whose |intensity|
    exceeds ``channels.MAX_ABS_INPUT`` and points the LiDAR filter ``crop`` drops (float32[8],
    ``kept_by_crop``; None: no filter) are dropped. With ``times`` (float32[B], s after the
    stamp) and ``twist`` (float32[6], the grid frame's), the kept points are deskewed
    (``deskew``) after the filter: the ego box holds the body where it was at each point's time.

    Args
    ----
    points: float32[B, 4] x, y, z, intensity in the LiDAR frame; rows >= num_valid are padding.
    num_valid: int32[] count of real rows.
    lidar_rotation: float32[3, 3], lidar_translation: float32[3]; LiDAR to grid frame.
    grid: float32[5] (x_min, y_min, z_min, z_max, resolution).
    height, width: the grid's H x W (static).

    Returns
    -------
    The six channels in ``LIDAR_CHANNELS`` order, each float32[H*W] (cells row-major), 0 in
    empty cells: ``fuse`` interleaves them with the camera channels in one stack.

    """
    xyz = _to_grid(points[:, 0], points[:, 1], points[:, 2], lidar_rotation, lidar_translation)
    return voxelize_grid(points, xyz, num_valid, grid, crop, times, twist, height=height,
                         width=width)


def voxelize_grid(points: jax.Array, xyz: tuple[jax.Array, jax.Array, jax.Array],
                  num_valid: jax.Array, grid: jax.Array, crop: jax.Array | None = None,
                  times: jax.Array | None = None, twist: jax.Array | None = None, *,
                  height: int, width: int) -> list[jax.Array]:
    """
    ``voxelize`` of points already in the grid frame: ``xyz`` their x, y, z float32[B] each.

    ``points`` float32[B, 4] keeps them in their LiDAR frames (the range band and the
    intensity); every other argument as ``voxelize``.
    """
    x, y, z = xyz
    real = jnp.arange(points.shape[0]) < num_valid
    if crop is not None:
        real = real & kept_by_crop(points, x, y, z, crop)
    if times is not None:
        x, y, z = deskew(x, y, z, times, twist)
    return _rasterize(x, y, z, points[:, 3], real, grid, height=height, width=width)


def kept_by_crop(points: jax.Array, x: jax.Array, y: jax.Array, z: jax.Array,
                 crop: jax.Array) -> jax.Array:
    """
    bool[B]: the rows the LiDAR filter keeps.

    points: float32[B, 4] in the LiDAR frame, x, y, z: their grid-frame coordinates.
    crop: float32[8] (``LidarFilter.vector``): kept when min range <= |p| <= max range (LiDAR
    frame) and outside the ego box [x_min, x_max) x [y_min, y_max) x [z_min, z_max) in the grid
    frame (all 0: empty).
    """
    px, py, pz = points[:, 0], points[:, 1], points[:, 2]
    range2 = px * px + py * py + pz * pz
    box = crop[2:8]
    inside = ((x >= box[0]) & (x < box[1]) & (y >= box[2]) & (y < box[3])
              & (z >= box[4]) & (z < box[5]))
    return (range2 >= crop[0] * crop[0]) & (range2 <= crop[1] * crop[1]) & ~inside


def crop_points(points: jax.Array, lidar_rotation: jax.Array, lidar_translation: jax.Array,
                crop: jax.Array) -> jax.Array:
    """Turn the rows the LiDAR filter drops (``kept_by_crop``) into NaN rows, the others kept."""
    x, y, z = _to_grid(points[:, 0], points[:, 1], points[:, 2], lidar_rotation,
                       lidar_translation)
    return jnp.where(kept_by_crop(points, x, y, z, crop)[:, None], points, jnp.nan)


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
                    height: int, width: int) -> list[jax.Array]:
    """
    Rasterize the current sweep and P earlier ones into the seven accumulated LiDAR channels.

    All points go through one scatter per statistic.

    Args
    ----
    points, num_valid, lidar_rotation, lidar_translation, grid, height, width: as for
        ``voxelize`` (the current sweep).
    ring: float32[P, C, 4] earlier sweeps in their own LiDAR frames, C the largest bucket.
    sweeps: SweepArgs; how many rows of each slot count and how each moves into the current
        grid frame.

    Returns
    -------
    Seven channels, each float32[H*W]: ``LIDAR_CHANNELS`` then ``time_lag_mean`` (mean
    seconds behind the current sweep of the points in the cell; 0 in empty cells).

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


def fuse(lidar: list[jax.Array], camera: jax.Array | None, coverage: jax.Array | None,
         projection: tuple[jax.Array, jax.Array] | None = None, *, height: int, width: int,
         activation: str = 'none') -> jax.Array:
    """
    Stack [LiDAR | C camera | coverage] per cell and apply the optional 1x1 projection.

    One stack of single channels, because XLA's CPU backend interleaves channels one element
    at a time: a concatenation of stacked blocks (or a pad to add the coverage) ran that twice
    over the whole output (docs/performance.md, "The rest of the CPU frame"). The projection
    runs at HIGHEST precision: full float32 on every backend (NVIDIA GPUs default to TF32 for
    float32 dots).

    Args
    ----
    lidar: L channels float32[H*W], L = 6, or 7 with accumulation (``time_lag_mean`` last).
    camera: float32[H*W, C] and coverage: float32[H*W], or both None without cameras (C = 0,
        coverage 0).
    projection: (W float32[L + C + 1, C_out], b float32[C_out]) or None; without it the
        output is the plain stack and ``activation`` is ignored.
    height, width: the grid's H x W (static); activation: 'none' or 'relu' after the
        projection (static).

    Returns
    -------
    float32[H, W, C_out].

    """
    if camera is None:
        columns = lidar + [jnp.zeros_like(lidar[0])]
    else:
        columns = lidar + [camera[:, c] for c in range(camera.shape[1])] + [coverage]
    fused = jnp.stack(columns, axis=1).reshape(height, width, len(columns))
    if projection is None:
        return fused
    weights, bias = projection
    out = jnp.matmul(fused, weights, precision=jax.lax.Precision.HIGHEST) + bias
    return jax.nn.relu(out) if activation == 'relu' else out


# LiDAR rotation (9, row-major), translation (3), filter (8: LidarFilter.vector), grid (5);
# with several LiDARs the rotation and translation of each further one follow (POSE_SIZE each).
CALIBRATION_SIZE = 25
POSE_SIZE = 12
GRID_SLICE = slice(20, 25)


def calibration_size(lidars: int) -> int:
    """Return the length of the calibration vector of ``lidars`` LiDARs."""
    return CALIBRATION_SIZE + POSE_SIZE * (lidars - 1)


def lidars_to_grid(points: jax.Array, calibration: jax.Array,
                   starts: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """
    Return x, y, z float32[B] in the grid frame, each row moved by its own LiDAR's pose.

    points: float32[B, 4], the rows of LiDAR 0 first, then those of LiDAR 1 from
    ``starts[0]``, and so on; calibration: float32[25 + 12 (S - 1)] (``calibration_size``);
    starts: int32[S - 1] ascending. No per-point index crosses to the device: each of the
    twelve pose coefficients of a row is a chain of S - 1 selects between scalars, which XLA
    fuses into the transform's loop (measured at 131k points, against one LiDAR's frame: this
    1.07x; every row moved by every pose and the own one selected 1.13x; a gather of a [12, S]
    table by a per-row index 1.8x).
    """
    row = jnp.arange(points.shape[0])
    c = [calibration[k] for k in range(POSE_SIZE)]
    for s in range(starts.shape[0]):
        later, first = row >= starts[s], CALIBRATION_SIZE + POSE_SIZE * s
        c = [jnp.where(later, calibration[first + k], c[k]) for k in range(POSE_SIZE)]
    px, py, pz = points[:, 0], points[:, 1], points[:, 2]
    return tuple(c[3 * i] * px + c[3 * i + 1] * py + c[3 * i + 2] * pz + c[9 + i]
                 for i in range(3))


class FrameArgs(NamedTuple):
    """
    The arguments of one frame, grouped by how often they change (and cross to the device).

    points: float32[B, 4] x, y, z, intensity in the LiDAR frame (per frame).
    scalars: int32[1 + N + S - 1] the count of real point rows, then 1 or 0 per camera: valid
    for this frame or masked, then with S > 1 LiDARs the first row of each after the first
    (``lidars_to_grid``) (per frame, one small transfer).
    times: float32[B] each point's time, s after the stamp (per frame), or None: a frame
    function without deskew (the benchmarks' baseline).
    motion: float32[12] the ego twist for deskew, in the grid frame then in the LiDAR frame
    (``ego_motion.deskew_motion``; zeros: no deskew) (per frame, one small transfer).
    calibration: float32[25 + 12 (S - 1)] LiDAR rotation (row-major), LiDAR translation, the
    LiDAR filter (``crop_points``), ``grid``, then the pose of each further LiDAR (per
    calibration; stays on the device).
    features: float32[N, H_f, W_f, C], or with an image encoder the images uint8[N, H_i, W_i,
    3], or None without cameras (only when a map or image changed).
    lift: LiftTables or None without cameras (per calibration).
    projection: (W float32[L + C + 1, C_out], b float32[C_out]) or None (fixed); L = 6 or 7.
    sweeps: SweepArgs with accumulation (per frame, two small transfers), else None.
    encoder: the image encoder's parameters (a pytree, per checkpoint), or None.
    """

    points: jax.Array
    scalars: jax.Array
    times: jax.Array
    motion: jax.Array
    calibration: jax.Array
    features: jax.Array | None
    lift: LiftTables | None
    projection: tuple[jax.Array, jax.Array] | None
    sweeps: SweepArgs | None = None
    encoder: Any = None


def bev_frame(args: FrameArgs, ring: jax.Array | None = None, *, height: int, width: int,
              activation: str, encode: Callable | None = None):
    """
    One frame: voxelize, encode the camera images (with an encoder), lift the cameras, fuse.

    Without cameras (``args.features`` None) the camera block has 0 channels and coverage is 0.
    With accumulation the current sweep is written into the ring's slot
    ``args.sweeps.scalars[0]`` (rows past B keep what they held: the count masks them).
    Compile with the ring donated, so the update is in place and only the new sweep ever
    crosses to the device.

    Args
    ----
    args: FrameArgs of the frame.
    ring: float32[P, C, 4] the earlier sweeps with accumulation (``args.sweeps`` says which
        rows count and how they move), else None.
    height, width: the grid's H x W (static); activation: as for ``fuse`` (static).
    encode: the image encoder's ``apply(params, uint8[H_i, W_i, 3]) -> float32[H_f, W_f, C]``
        (static), run on every camera's image; None: ``args.features`` are the maps.

    Returns
    -------
    float32[H, W, C_out] the fused BEV, or (that, the updated ring) with accumulation.

    """
    calibration = args.calibration
    rotation, translation = calibration[:9].reshape(3, 3), calibration[9:12]
    grid, crop = calibration[GRID_SLICE], calibration[12:20]
    cameras = 0 if args.features is None else args.features.shape[0]
    several = calibration.shape[0] > CALIBRATION_SIZE
    if ring is None:
        xyz = (lidars_to_grid(args.points, calibration, args.scalars[1 + cameras:]) if several
               else _to_grid(args.points[:, 0], args.points[:, 1], args.points[:, 2], rotation,
                             translation))
        lidar = voxelize_grid(args.points, xyz, args.scalars[0], grid, crop, args.times,
                              None if args.times is None else args.motion[:6], height=height,
                              width=width)
    else:
        points, rotation, translation = _sweep_points(args, rotation, translation, crop,
                                                      several, cameras)
        lidar = voxelize_sweeps(points, args.scalars[0], ring, args.sweeps, rotation,
                                translation, grid, height=height, width=width)
    camera = coverage = None
    if args.features is not None:
        maps = args.features
        if encode is not None:
            # Materialized once (fused into the lift's gathers, every tap would encode again),
            # zeroed where invalid as the host zeroes maps' (a black image standardised: 0 / 0).
            maps = jax.vmap(encode, in_axes=(None, 0))(args.encoder, maps)
            maps = jax.lax.optimization_barrier(jnp.where(
                jnp.abs(maps) <= MAX_ABS_INPUT, maps, 0.0))     # NaN compares False
        # Meant to materialize the lift before the stack. XLA's CPU backend (jax 0.10.2) drops
        # the barrier and fuses the slot loop into the stack; the lift materialized first (in
        # a lax.cond) measured slower (docs/performance.md, "The camera lift in the frame").
        camera, coverage = jax.lax.optimization_barrier(lift_cameras(
            maps, args.scalars[1:1 + cameras] > 0, args.lift))
    features = fuse(lidar, camera, coverage, args.projection, height=height, width=width,
                    activation=activation)
    if ring is None:
        return features
    update = jax.lax.dynamic_update_slice(
        ring, points[None], (args.sweeps.scalars[0], jnp.int32(0), jnp.int32(0)))  # cropped
    return features, update


def _sweep_points(args: FrameArgs, rotation: jax.Array, translation: jax.Array,
                  crop: jax.Array, several: bool, cameras: int):
    """
    Return the current sweep as it enters the ring, and the pose that takes it to the grid.

    Cropped, then deskewed, in the LiDAR frame: a past sweep is cropped in the frame it was
    taken and moved to its own stamp. Several LiDARs have no one LiDAR frame: their sweep is
    moved into the grid frame first (the ring's slots then move from the grid frame of their
    time, ``BevPipeline`` composes them so), and the pose returned is the identity.
    """
    if not several:
        points = crop_points(args.points, rotation, translation, crop)
        if args.times is not None:
            x, y, z = deskew(points[:, 0], points[:, 1], points[:, 2], args.times,
                             args.motion[6:12])
            points = jnp.stack([x, y, z, points[:, 3]], axis=1)
        return points, rotation, translation
    p = args.points
    x, y, z = lidars_to_grid(p, args.calibration, args.scalars[1 + cameras:])
    kept = kept_by_crop(p, x, y, z, crop)
    if args.times is not None:
        x, y, z = deskew(x, y, z, args.times, args.motion[:6])
    points = jnp.where(kept[:, None], jnp.stack([x, y, z, p[:, 3]], axis=1), jnp.nan)
    return points, jnp.eye(3, dtype=jnp.float32), jnp.zeros(3, jnp.float32)
