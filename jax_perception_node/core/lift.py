"""
The camera lift: lens models, the grid's projection into the cameras, bilinear sampling.

Shapes use N (cameras), K (height levels), H x W (grid rows x columns), S (lift slots per cell)
and H_f x W_f x C (camera feature map). Arguments after ``*`` are static (a new value
compiles); everything else is traced. The geometry (``lift_sample_counts``, ``lift_geometry``)
depends only on grid and calibration: it runs once per calibration, so a lens model costs
nothing per frame. ``lift_cameras`` is the per-frame part, inside ``kernels.bev_frame``.

Lens models (``DISTORTION_MODELS``, a traced id per camera, so changing a model or its
coefficients never compiles), on normalized coordinates (x', y') = (x / z, y / z):
plumb_bob (Brown-Conrady as in OpenCV and ROS image_geometry),
x'' = x' (1 + k1 r^2 + k2 r^4 + k3 r^6) + 2 p1 x' y' + p2 (r^2 + 2 x'^2),
y'' = y' (1 + k1 r^2 + k2 r^4 + k3 r^6) + p1 (r^2 + 2 y'^2) + 2 p2 x' y';
rational_polynomial (OpenCV's rational model), the same with the radial factor divided by
(1 + k4 r^2 + k5 r^4 + k6 r^6);
equidistant (OpenCV fisheye), theta = atan(r), x'' = theta (1 + k1 theta^2 + k2 theta^4 +
k3 theta^6 + k4 theta^8) x' / r; none, x'' = x'. Then u = fx x'' + cx, v = fy y'' + cy.
Everything is written out elementwise: no dot, so no backend may lower the float32 precision.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

MIN_DEPTH_M = 0.1

# index = the traced model id
DISTORTION_MODELS = ('none', 'plumb_bob', 'equidistant', 'rational_polynomial')
NONE, PLUMB_BOB, EQUIDISTANT, RATIONAL_POLYNOMIAL = range(4)
DISTORTION_SIZE = 8


class CameraCalibration(NamedTuple):
    """
    The cameras' calibration as the lift takes it: traced, so changing any of it never compiles.

    intrinsics: float32[N, 4] (fx, fy, cx, cy) at feature-map resolution, pixel centres at
    integer coordinates.
    distortion_model: int32[N] index into ``DISTORTION_MODELS``.
    distortion: float32[N, 8] the model's coefficients in normalized image coordinates:
    rational_polynomial (k1, k2, p1, p2, k3, k4, k5, k6), plumb_bob the same with k4..k6 0,
    equidistant (k1, k2, k3, k4, 0, 0, 0, 0), none all 0.
    max_radius2: float32[N] the squared undistorted radius x'^2 + y'^2 up to which the model's
    radial mapping is monotonic; samples beyond it are invalid (inf: no limit).
    rotation: float32[N, 3, 3] and translation: float32[N, 3] map each optical frame (z
    forward, x right, y down) into the grid frame: p_grid = R p_optical + t.
    """

    intrinsics: jax.Array
    distortion_model: jax.Array
    distortion: jax.Array
    max_radius2: jax.Array
    rotation: jax.Array
    translation: jax.Array


class LiftTables(NamedTuple):
    """
    The camera lift's compacted bilinear samples, from grid and calibration only.

    The feature maps are read edge-padded by one pixel on every side, (H_f + 2) x (W_f + 2) per
    camera, followed by one all-zero block; ``P = (N + 1) (H_f + 2) (W_f + 2)`` rows of C. Each
    cell holds ``S`` sample slots (S is static: it fixes the shapes, see ``lift_geometry``).

    top: int32[S, H*W] flat row of a sample's top-left tap; the other taps are +1, +(W_f + 2)
    and +(W_f + 3). Unused slots point at the zero block.
    weights: float32[S, H*W, 4] the bilinear weights of the four taps in that order,
    ((1 - du)(1 - dv), du (1 - dv), (1 - du) dv, du dv) with (du, dv) = (u - floor(u),
    v - floor(v)); computed once here rather than once per channel in every frame.
    samples: float32[N, H*W] valid samples per camera and cell (0..K), for the mean.
    """

    top: jax.Array
    weights: jax.Array
    samples: jax.Array


def _distort(x, y, model, coefficients):
    """Apply each camera's model to normalized coordinates [N, K, H*W]; returns x'', y'', r^2."""
    c0, c1, c2, c3, c4, c5, c6, c7 = (coefficients[:, i, None, None]
                                      for i in range(DISTORTION_SIZE))
    r2 = x * x + y * y
    # plumb_bob, Brown-Conrady as in OpenCV: (k1, k2, p1, p2, k3) = (c0, c1, c2, c3, c4);
    # rational_polynomial divides its radial factor by 1 + k4 r^2 + k5 r^4 + k6 r^6 with
    # (k4, k5, k6) = (c5, c6, c7), which are 0 for plumb_bob: a division by exactly 1.
    # Within max_radius2 the divisor stays positive (monotonic_radius2).
    radial = (1.0 + r2 * (c0 + r2 * (c1 + r2 * c4))) / (1.0 + r2 * (c5 + r2 * (c6 + r2 * c7)))
    xy2 = 2.0 * x * y
    brown_x = x * radial + c2 * xy2 + c3 * (r2 + 2.0 * x * x)
    brown_y = y * radial + c2 * (r2 + 2.0 * y * y) + c3 * xy2
    # equidistant, OpenCV's fisheye: (k1, k2, k3, k4) = (c0, c1, c2, c3) on theta = atan(r),
    # theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8).
    r = jnp.sqrt(r2)
    theta = jnp.arctan(r)
    t2 = theta * theta
    theta_d = theta * (1.0 + t2 * (c0 + t2 * (c1 + t2 * (c2 + t2 * c3))))
    # theta_d / r -> 1 as r -> 0: the centre ray keeps its place.
    scale = jnp.where(r > 0.0, theta_d / jnp.where(r > 0.0, r, 1.0), 1.0)
    model = model[:, None, None]
    brown = (model == PLUMB_BOB) | (model == RATIONAL_POLYNOMIAL)
    x_d = jnp.where(brown, brown_x, jnp.where(model == EQUIDISTANT, x * scale, x))
    y_d = jnp.where(brown, brown_y, jnp.where(model == EQUIDISTANT, y * scale, y))
    return x_d, y_d, r2


def _project(cameras: CameraCalibration, grid: jax.Array, *, height: int, width: int,
             num_heights: int, map_height: int,
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
    r = cameras.rotation[:, :, :, None, None]          # [N, 3, 3, 1, 1]
    t = cameras.translation[:, :, None, None]          # [N, 3, 1, 1]
    rx, ry, rz = gx - t[:, 0], gy - t[:, 1], gz - t[:, 2]
    cam_x = r[:, 0, 0] * rx + r[:, 1, 0] * ry + r[:, 2, 0] * rz
    cam_y = r[:, 0, 1] * rx + r[:, 1, 1] * ry + r[:, 2, 1] * rz
    depth = r[:, 0, 2] * rx + r[:, 1, 2] * ry + r[:, 2, 2] * rz
    safe = jnp.where(depth > MIN_DEPTH_M, depth, 1.0)
    x_d, y_d, r2 = _distort(cam_x / safe, cam_y / safe, cameras.distortion_model,
                            cameras.distortion)
    fx, fy, cx, cy = (cameras.intrinsics[:, i, None, None] for i in range(4))
    u = fx * x_d + cx
    v = fy * y_d + cy
    # Beyond the monotonic region a lens model folds back: far-off points would land inside
    # the image as ghosts, so they are invalid.
    valid = ((depth > MIN_DEPTH_M) & (r2 < cameras.max_radius2[:, None, None])
             & (u >= -0.5) & (u < map_width - 0.5) & (v >= -0.5) & (v < map_height - 0.5))
    return u, v, valid


def lift_sample_counts(cameras: CameraCalibration, grid: jax.Array, *, height: int, width: int,
                       num_heights: int, map_height: int, map_width: int) -> jax.Array:
    """
    Count the valid camera samples per cell over all cameras and heights.

    Its maximum is the slot count ``lift_geometry`` needs for this calibration.

    Args
    ----
    cameras, grid, height, width, num_heights, map_height, map_width: as for
        ``lift_geometry``.

    Returns
    -------
    int32[H*W] valid samples per cell (0..N K).

    """
    _, _, valid = _project(cameras, grid, height=height, width=width, num_heights=num_heights,
                           map_height=map_height, map_width=map_width)
    return jnp.sum(valid, axis=(0, 1), dtype=jnp.int32)


def lift_geometry(cameras: CameraCalibration, grid: jax.Array, *, height: int, width: int,
                  num_heights: int, map_height: int, map_width: int,
                  slots: int) -> tuple[LiftTables, jax.Array]:
    """
    Project every cell centre at every height level into every camera and compact the samples.

    A cell centre goes into each camera's optical frame, to normalized coordinates
    (x', y') = (x / z, y / z), through the camera's lens model (``CameraCalibration``) and
    then to pixels u = fx x'' + cx, v = fy y'' + cy. A sample is valid when its depth is
    > 0.1 m, its undistorted radius is inside the model's monotonic region and
    -0.5 <= u < W_f - 0.5, -0.5 <= v < H_f - 0.5 (Simple-BEV geometry). Each cell keeps its
    first ``slots`` valid samples in (camera, level) order. Runs once per calibration, not
    per frame.

    Args
    ----
    cameras: CameraCalibration of N cameras (traced).
    grid: float32[5] (x_min, y_min, z_min, z_max, resolution).
    height, width: the grid's H x W (static).
    num_heights: K height levels per cell (static).
    map_height, map_width: H_f x W_f of the feature maps (static).
    slots: S samples kept per cell (static: changing it recompiles).

    Returns
    -------
    (LiftTables, int32[N]): the tables and, per camera, the valid samples that did not fit
    (all 0 when ``slots`` >= ``max(lift_sample_counts(...))``).

    """
    n = cameras.intrinsics.shape[0]
    u, v, valid = _project(cameras, grid, height=height, width=width, num_heights=num_heights,
                           map_height=map_height, map_width=map_width)
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
    du, dv = jnp.where(kept, take(du), 0.0), jnp.where(kept, take(dv), 0.0)
    tables = LiftTables(
        top=jnp.where(kept, take(top), n * block),
        weights=jnp.stack([(1.0 - du) * (1.0 - dv), du * (1.0 - dv), (1.0 - du) * dv, du * dv],
                          axis=-1),
        samples=jnp.sum(valid, axis=1).astype(jnp.float32))
    return tables, dropped


def lift_cameras(features: jax.Array, camera_valid: jax.Array,
                 tables: LiftTables) -> tuple[jax.Array, jax.Array]:
    """
    Sample camera features into the BEV grid with the compacted samples (per frame).

    Work is S x H x W samples of four taps, S = the slots of ``tables``.

    Args
    ----
    features: float32[N, H_f, W_f, C] the cameras' feature maps.
    camera_valid: bool[N]; False masks a missing or stale camera for this frame.
    tables: LiftTables from ``lift_geometry`` (per calibration).

    Returns
    -------
    (float32[H*W, C], float32[H*W]), cells row-major: the camera BEV, the mean of all valid
    samples over cameras and heights (0 where none is valid), and the coverage (1 where one
    is, else 0).

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
    # The taps are added in pairs, not one after the other: the shorter chain of dependent adds
    # made the six-camera lift 1.3-1.5x faster on the CPU (docs/performance.md, "The rest of the
    # CPU frame").
    summed = jnp.zeros((tables.top.shape[1], channels), jnp.float32)
    for slot in range(tables.top.shape[0]):
        top, weight = tables.top[slot], tables.weights[slot]
        summed = summed + ((weight[:, 0:1] * tap(top) + weight[:, 1:2] * tap(top + 1))
                           + (weight[:, 2:3] * tap(top + row)
                              + weight[:, 3:4] * tap(top + row + 1)))
    # Summed camera by camera: a reduce over the camera axis went to XNNPACK on the CPU and
    # cost as much as the whole slot loop.
    count = sum(jnp.where(camera_valid[i], tables.samples[i], 0.0) for i in range(n))
    camera = summed / jnp.maximum(count, 1.0)[:, None]
    coverage = (count > 0).astype(jnp.float32)
    return camera, coverage
