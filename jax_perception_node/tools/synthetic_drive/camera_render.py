"""
The drive's cameras: the scene ray-cast at feature-map resolution into a feature map.

One ray per pixel centre (integer pixel coordinates) with the configured intrinsics, from the
camera pose ego(t) x calibration, against the ground plane, boxes and vertical cylinders as
they are at t (global shutter). Channels are :data:`CAMERA_CHANNELS`.
"""

from jax_perception_node.settings.config import CameraConfig
import numpy as np

from .scene import (BCLS, BHX, BHY, BHZ, box_hits, BRHO, BX, BY, BYAW, BZ, CAMERA_CHANNELS,
                    CAMERA_VIEW_M, CCLS, CR, CRHO, CX, CY, cylinder_hits, CZ0, CZ1, GROUND,
                    ground_reflectivity, POLE, SUN, VEHICLE, WALL)


def camera_rays(cam: CameraConfig) -> np.ndarray:
    """Return the ray of every pixel centre (row-major) in base_link axes, shape (H_f * W_f, 3)."""
    v, u = np.mgrid[0:cam.height, 0:cam.width].astype(float)
    # Optical z = 1: the ray parameter of a hit is its optical depth.
    rays = np.stack([(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy,
                     np.ones_like(u)], axis=-1).reshape(-1, 3)
    return rays @ cam.pose.rotation_matrix().T


def render(cam: CameraConfig, dirs: np.ndarray, origin: np.ndarray, boxes: np.ndarray,
           cylinders: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """
    Render the feature map float32 (H_f, W_f, C) a camera sees from ``origin`` (world, m).

    ``dirs``: its pixel rays in world axes (camera_rays), ``boxes`` and ``cylinders``: the
    scene at the frame's time. Channel k is ``CAMERA_CHANNELS[k % 8]``; ``rng`` draws the
    shading noise.
    """
    forward = dirs.mean(axis=0)
    forward /= np.linalg.norm(forward)
    # Culling behind the image plane holds only while every ray points ahead of it.
    cull = bool(np.all(dirs @ forward > 0))
    depth, albedo, normal, cls = _ground(dirs, origin)
    hits = []
    if len(boxes):
        hits.append(_box_hits(dirs, origin, forward, cull, boxes))
    if len(cylinders):
        hits.append(_cylinder_hits(dirs, origin, forward, cull, cylinders))
    for ray, dist, *_ in hits:
        np.minimum.at(depth, ray, dist)
    for ray, dist, k, nrm, rows, col in hits:
        win = (dist == depth[ray]) & np.isfinite(dist)
        r = ray[win]
        albedo[r] = rows[k[win], col[0]]
        cls[r] = rows[k[win], col[1]]
        normal[r] = nrm[win]
    return _features(cam, dirs, origin, depth, albedo, normal, cls, rng)


def _ground(dirs, origin):
    """Return depth, albedo, normal and class of every ray's ground hit (depth inf: none)."""
    n_rays = len(dirs)
    depth = np.full(n_rays, np.inf)
    down = dirs[:, 2] < 0
    if origin[2] > 0:
        depth[down] = origin[2] / -dirs[down, 2]
    ground = np.isfinite(depth)
    hit_xy = origin[:2] + np.where(ground[:, None], depth[:, None], 0.0) * dirs[:, :2]
    albedo = np.where(ground, ground_reflectivity(hit_xy[:, 0], hit_xy[:, 1]), 0.0)
    normal = np.zeros((n_rays, 3))
    normal[:, 2] = 1.0
    cls = np.where(ground, GROUND, -1).astype(np.int8)
    return depth, albedo, normal, cls


def _box_hits(dirs, origin, forward, cull, boxes):
    """Return (ray, depth, box, normal, boxes, columns) for every ray against every box in view."""
    n_rays = len(dirs)
    radius = np.linalg.norm(boxes[:, [BHX, BHY, BHZ]], axis=1)
    rel = boxes[:, [BX, BY, BZ]] - origin
    seen = ((np.linalg.norm(rel, axis=1) - radius < CAMERA_VIEW_M)
            & ((rel @ forward > -radius) | (not cull)))
    boxes = boxes[seen]
    k = np.repeat(np.arange(len(boxes)), n_rays)
    ray = np.tile(np.arange(n_rays), len(boxes))
    cos_y, sin_y = np.cos(boxes[k, BYAW]), np.sin(boxes[k, BYAW])
    dist, _, nrm = box_hits(origin[0] - boxes[k, BX], origin[1] - boxes[k, BY],
                            origin[2] - boxes[k, BZ], dirs[ray], cos_y, sin_y,
                            boxes[k, BHX], boxes[k, BHY], boxes[k, BHZ])
    return ray, dist, k, nrm, boxes, (BRHO, BCLS)


def _cylinder_hits(dirs, origin, forward, cull, cylinders):
    """Return (ray, depth, cylinder, normal, cylinders, columns) for the cylinders in view."""
    n_rays = len(dirs)
    rel = np.column_stack([cylinders[:, CX] - origin[0], cylinders[:, CY] - origin[1]])
    reach = np.maximum((cylinders[:, CZ0] - origin[2]) * forward[2],
                       (cylinders[:, CZ1] - origin[2]) * forward[2])
    seen = ((np.linalg.norm(rel, axis=1) - cylinders[:, CR] < CAMERA_VIEW_M)
            & ((rel @ forward[:2] + reach > -cylinders[:, CR]) | (not cull)))
    cylinders = cylinders[seen]
    k = np.repeat(np.arange(len(cylinders)), n_rays)
    ray = np.tile(np.arange(n_rays), len(cylinders))
    dist, _, nrm = cylinder_hits(origin[0] - cylinders[k, CX], origin[1] - cylinders[k, CY],
                                 origin[2], dirs[ray], cylinders[k, CR], cylinders[k, CZ0],
                                 cylinders[k, CZ1])
    return ray, dist, k, nrm, cylinders, (CRHO, CCLS)


def _features(cam, dirs, origin, depth, albedo, normal, cls, rng):
    """Compute the channels from each ray's nearest surface (depth inf: sky)."""
    n_rays = len(dirs)
    sky = ~np.isfinite(depth)
    feats = np.zeros((n_rays, len(CAMERA_CHANNELS)))
    with np.errstate(divide='ignore'):
        feats[:, 0] = np.where(sky, 0.0, 1.0 / depth)
    height = origin[2] + np.where(sky, 0.0, depth) * dirs[:, 2]
    feats[:, 1] = np.where(sky | (cls == GROUND), 0.0, np.maximum(height, 0.0))
    for c in (GROUND, VEHICLE, POLE, WALL):
        feats[:, 2 + c] = cls == c
    feats[:, 6] = sky
    shade = albedo * (0.3 + 0.7 * np.maximum(normal @ SUN, 0.0)) \
        + 0.01 * rng.standard_normal(n_rays)
    feats[:, 7] = np.where(sky, 0.9, np.clip(shade, 0.0, 1.0))
    feats = feats.reshape(cam.height, cam.width, -1)
    return np.ascontiguousarray(
        feats[..., np.arange(cam.channels) % len(CAMERA_CHANNELS)], dtype=np.float32)
