"""Independent NumPy reference of the kernel contracts (docs/design.md), float64, loops by cell."""

import numpy as np


def quat_matrix(q) -> np.ndarray:
    """Return the rotation matrix of a unit quaternion (x, y, z, w), by the textbook formula."""
    x, y, z, w = np.asarray(q, np.float64) / np.linalg.norm(q)
    return np.array([[w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z]])


def grid_of(cfg):
    g = cfg.grid
    return g.x_min, g.y_min, g.z_min, g.z_max, g.resolution, g.height, g.width


def voxelize_ref(points, cfg) -> np.ndarray:
    """Compute the six LiDAR channels by the contract: transform, floor, filter, statistics."""
    x_min, y_min, z_min, z_max, res, h, w = grid_of(cfg)
    pts = np.asarray(points, np.float64).reshape(-1, 4)
    rot = quat_matrix(cfg.lidar.rotation_xyzw)
    with np.errstate(invalid='ignore', over='ignore'):
        xyz = pts[:, :3] @ rot.T + np.asarray(cfg.lidar.translation)
        finite = np.isfinite(xyz).all(axis=1) & np.isfinite(pts[:, 3])
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


def lift_ref(cfg, maps: dict, used=None) -> tuple[np.ndarray, np.ndarray]:
    """Camera BEV and coverage by the contract, sampling each camera pixel by pixel."""
    x_min, y_min, z_min, z_max, res, h, w = grid_of(cfg)
    k = cfg.fusion.num_heights
    channels = cfg.camera_channels
    total = np.zeros((h, w, channels))
    count = np.zeros((h, w))
    for cam in cfg.cameras:
        fmap = maps.get(cam.name)
        if fmap is None or (used is not None and cam.name not in used):
            continue
        rot, t = quat_matrix(cam.pose.rotation_xyzw), np.asarray(cam.pose.translation)
        hf, wf = fmap.shape[:2]
        for ii in range(h):
            for jj in range(w):
                for kk in range(k):
                    p = np.array([x_min + (ii + .5) * res, y_min + (jj + .5) * res,
                                  z_min + (kk + .5) * (z_max - z_min) / k])
                    c = rot.T @ (p - t)
                    if c[2] <= 0.1:
                        continue
                    u = cam.fx * c[0] / c[2] + cam.cx
                    v = cam.fy * c[1] / c[2] + cam.cy
                    if not (-0.5 <= u < wf - 0.5 and -0.5 <= v < hf - 0.5):
                        continue
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
    x_min, y_min, z_min, z_max, res, h, w = grid_of(cfg)
    k = cfg.fusion.num_heights
    count = np.zeros((h, w), int)
    ii, jj, kk = np.meshgrid(np.arange(h), np.arange(w), np.arange(k), indexing='ij')
    p = np.stack([x_min + (ii + .5) * res, y_min + (jj + .5) * res,
                  z_min + (kk + .5) * (z_max - z_min) / k], axis=-1)
    for cam in cfg.cameras:
        rot, t = quat_matrix(cam.pose.rotation_xyzw), np.asarray(cam.pose.translation)
        c = (p - t) @ rot          # row vectors: (R^T (p - t))^T = (p - t)^T R
        depth = c[..., 2]
        with np.errstate(divide='ignore', invalid='ignore'):
            u = cam.fx * c[..., 0] / depth + cam.cx
            v = cam.fy * c[..., 1] / depth + cam.cy
        ok = ((depth > 0.1) & (u >= -0.5) & (u < cam.width - 0.5)
              & (v >= -0.5) & (v < cam.height - 0.5))
        count += ok.sum(axis=-1)
    return count
