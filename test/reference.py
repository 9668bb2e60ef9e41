"""Independent NumPy reference of the kernel contracts (docs/design.md), float64, loops by cell."""

import functools

import numpy as np


def quat_matrix(q) -> np.ndarray:
    """Return the rotation matrix of a unit quaternion (x, y, z, w), by the textbook formula."""
    x, y, z, w = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([[w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z]])


def distort_ref(model: str, d, x: float, y: float) -> tuple[float, float]:
    """
    Distort normalized coordinates by the published lens equations.

    plumb_bob: Brown-Conrady as OpenCV and ROS image_geometry write it (k1, k2, p1, p2, k3);
    rational_polynomial: OpenCV's rational model (k1, k2, p1, p2, k3, k4, k5, k6), the radial
    factor divided by 1 + k4 r^2 + k5 r^4 + k6 r^6; equidistant: OpenCV's fisheye model
    (k1..k4) on theta = atan(r); none: unchanged.
    """
    if model in ('plumb_bob', 'rational_polynomial'):
        k1, k2, p1, p2, k3, k4, k5, k6 = tuple(d) + (0.0,) * (8 - len(d))
        r2 = x ** 2 + y ** 2
        radial = ((1 + k1 * r2 + k2 * r2 ** 2 + k3 * r2 ** 3)
                  / (1 + k4 * r2 + k5 * r2 ** 2 + k6 * r2 ** 3))
        return (x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x ** 2),
                y * radial + p1 * (r2 + 2 * y ** 2) + 2 * p2 * x * y)
    if model == 'equidistant':
        k1, k2, k3, k4 = d
        r = np.hypot(x, y)
        if r == 0:
            return x, y
        theta = np.arctan(r)
        theta_d = theta * (1 + k1 * theta ** 2 + k2 * theta ** 4 + k3 * theta ** 6
                           + k4 * theta ** 8)
        return x * theta_d / r, y * theta_d / r
    return x, y


@functools.lru_cache(maxsize=None)
def fold_radius2_ref(model: str, d: tuple) -> float:
    """
    Return r^2 where the radial mapping first stops increasing, found numerically (or inf).

    Scans the mapping (r -> distorted radius for plumb_bob and rational_polynomial, theta ->
    theta_d for equidistant) on a fine geometric grid and bisects the first step that does not
    increase. rational_polynomial's mapping ends where its denominator first reaches 0 (found
    the same way) if that comes first.
    """
    if model in ('plumb_bob', 'rational_polynomial'):
        k1, k2, _, _, k3, k4, k5, k6 = tuple(d) + (0.0,) * (8 - len(d))

        def denominator(r):
            return 1 + k4 * r ** 2 + k5 * r ** 4 + k6 * r ** 6

        grid = np.geomspace(1e-4, 1e4, 40001)
        below = np.nonzero(denominator(grid) <= 0)[0]
        if below.size:
            lo, hi = grid[below[0] - 1], grid[below[0]]
            for _ in range(200):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if denominator(mid) > 0 else (lo, mid)
            grid = grid[grid < lo]
            pole = lo ** 2
        else:
            pole = np.inf

        def radial(r):
            return r * (1 + k1 * r ** 2 + k2 * r ** 4 + k3 * r ** 6) / denominator(r)

    elif model == 'equidistant':
        k1, k2, k3, k4 = d

        def radial(theta):
            return theta * (1 + k1 * theta ** 2 + k2 * theta ** 4 + k3 * theta ** 6
                            + k4 * theta ** 8)

        grid = np.linspace(1e-6, np.pi / 2 - 1e-9, 40001)
    else:
        return np.inf
    values = radial(grid)
    falls = np.nonzero(np.diff(values) <= 0)[0]
    if falls.size == 0:
        return pole if model != 'equidistant' else np.inf
    lo, hi = grid[max(falls[0] - 1, 0)], grid[falls[0] + 1]
    for _ in range(200):     # the derivative's sign, by a symmetric difference
        mid = (lo + hi) / 2
        h = 1e-7 * mid
        lo, hi = (mid, hi) if radial(mid + h) > radial(mid - h) else (lo, mid)
    turn = (lo + hi) / 2
    return min(turn ** 2, pole) if model != 'equidistant' else np.tan(turn) ** 2


def project_ref(cam, c) -> tuple[float, float] | None:
    """Pixel (u, v) of a point ``c`` in the camera's optical frame, or None if not usable."""
    if c[2] <= 0.1:
        return None
    x, y = c[0] / c[2], c[1] / c[2]
    if x ** 2 + y ** 2 >= fold_radius2_ref(cam.distortion_model, tuple(cam.distortion)):
        return None
    xd, yd = distort_ref(cam.distortion_model, cam.distortion, x, y)
    return cam.fx * xd + cam.cx, cam.fy * yd + cam.cy


def grid_of(cfg):
    g = cfg.grid
    return g.x_min, g.y_min, g.z_min, g.z_max, g.resolution, g.height, g.width


def voxelize_ref(points, cfg) -> np.ndarray:
    """Compute the six LiDAR channels by the contract: transform, floor, filter, statistics."""
    x_min, y_min, z_min, z_max, res, h, w = grid_of(cfg)
    pts = np.asarray(points, np.float64).reshape(-1, 4).copy()
    # lidar.intensity_scale multiplies the intensity as it is read, before any check.
    pts[:, 3] *= np.float32(cfg.lidar_filter.intensity_scale)
    rot = quat_matrix(cfg.lidar.rotation_xyzw)
    with np.errstate(invalid='ignore', over='ignore'):
        xyz = pts[:, :3] @ rot.T + np.asarray(cfg.lidar.translation)
        # The contract's bound on intensity, written out: beyond 1e12 a point is invalid.
        finite = np.isfinite(xyz).all(axis=1) & (np.abs(pts[:, 3]) <= 1e12)
        # The LiDAR filter: a range band around the LiDAR origin, and no point in the ego box.
        crop = cfg.lidar_filter
        distance = np.linalg.norm(pts[:, :3], axis=1)
        box = np.asarray(crop.ego_box).reshape(3, 2)
        inside = ((xyz >= box[:, 0]) & (xyz < box[:, 1])).all(axis=1)
        finite &= (distance >= crop.min_range_m) & (distance <= crop.max_range_m) & ~inside
        i = np.floor((xyz[:, 0] - x_min) / res)
        j = np.floor((xyz[:, 1] - y_min) / res)
        ok = (finite & (i >= 0) & (i < h) & (j >= 0) & (j < w)
              & (xyz[:, 2] >= z_min) & (xyz[:, 2] < z_max))
    out = np.zeros((h, w, 6))
    cells: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for (ii, jj), z, inten in zip(np.stack([i[ok], j[ok]], 1).astype(int), xyz[ok, 2],
                                  pts[ok, 3]):
        cells.setdefault((ii, jj), []).append((z, inten))
    for (ii, jj), vals in cells.items():
        zs = np.array([v[0] for v in vals])
        inten = np.array([v[1] for v in vals])
        n = len(vals)
        out[ii, jj] = [1.0, min(1.0, np.log(1 + n) / np.log(64)), zs.max(), zs.mean(),
                       zs.min(), inten.mean()]
    return out


def valid_samples(cfg, cam):
    """Yield (i, j, u, v) for each cell and height level whose sample is valid in ``cam``."""
    x_min, y_min, z_min, z_max, res, h, w = grid_of(cfg)
    k = cfg.fusion.num_heights
    rot, t = quat_matrix(cam.pose.rotation_xyzw), np.asarray(cam.pose.translation)
    for ii in range(h):
        for jj in range(w):
            for kk in range(k):
                p = np.array([x_min + (ii + .5) * res, y_min + (jj + .5) * res,
                              z_min + (kk + .5) * (z_max - z_min) / k])
                pixel = project_ref(cam, rot.T @ (p - t))
                if pixel is not None and (-0.5 <= pixel[0] < cam.width - 0.5
                                          and -0.5 <= pixel[1] < cam.height - 0.5):
                    yield ii, jj, pixel[0], pixel[1]


def lift_ref(cfg, maps: dict, used=None) -> tuple[np.ndarray, np.ndarray]:
    """Camera BEV and coverage by the contract, sampling each camera pixel by pixel."""
    h, w = grid_of(cfg)[5:]
    total = np.zeros((h, w, cfg.camera_channels))
    count = np.zeros((h, w))
    for cam in cfg.cameras:
        fmap = maps.get(cam.name)
        if fmap is None or (used is not None and cam.name not in used):
            continue
        if fmap.shape[:2] != (cam.height, cam.width):   # validity is judged on the map's size
            raise ValueError(f'{cam.name}: map {fmap.shape}, camera {cam.height} x {cam.width}')
        for ii, jj, u, v in valid_samples(cfg, cam):
            total[ii, jj] += bilinear(fmap, u, v)
            count[ii, jj] += 1
    camera = np.where(count[..., None] > 0, total / np.maximum(count, 1)[..., None], 0.0)
    return camera, (count > 0).astype(np.float64)


def bilinear(fmap, u, v) -> np.ndarray:
    """Bilinear sample with edge clamping; pixel centres at integer coordinates."""
    hf, wf = fmap.shape[:2]
    u0, v0 = int(np.floor(u)), int(np.floor(v))
    du, dv = u - u0, v - v0
    value = np.zeros(fmap.shape[2])
    for dy, wy in ((0, 1 - dv), (1, dv)):
        for dx, wx in ((0, 1 - du), (1, du)):
            r = min(max(v0 + dy, 0), hf - 1)
            c = min(max(u0 + dx, 0), wf - 1)
            value += wx * wy * fmap[r, c]
    return value


def sample_counts_ref(cfg) -> np.ndarray:
    """Count the valid camera samples per cell (H, W), over every camera and height level."""
    count = np.zeros(grid_of(cfg)[5:], int)
    for cam in cfg.cameras:
        for ii, jj, _, _ in valid_samples(cfg, cam):
            count[ii, jj] += 1
    return count


def block_mean(image: np.ndarray, stride: int) -> np.ndarray:
    """NumPy: the mean of every stride x stride block of uint8[H, W, 3], in 0..1 (float64)."""
    h, w = image.shape[0] // stride, image.shape[1] // stride
    out = np.zeros((h, w, 3))
    for i in range(h):
        for j in range(w):
            out[i, j] = image[i * stride:(i + 1) * stride,
                              j * stride:(j + 1) * stride].reshape(-1, 3).mean(axis=0)
    return out / 255.0
