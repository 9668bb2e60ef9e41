"""
The drive's cameras: the scene rendered as a colour image, and label-free features of it.

Geometry (:func:`trace`): one ray per pixel centre (integer pixel coordinates) with the
configured intrinsics, from the camera pose ego(t) x calibration, against the ground plane,
boxes and vertical cylinders as they are at t (global shutter), at feature-map resolution, or
at ``scale`` times it for a published image (:func:`scaled_intrinsics`: pixel centres stay at
integer coordinates at both resolutions). Each object is tested only against the rays within
its image rectangle (:class:`Pinhole`), which changes no hit and saves most of the work.

Image: each surface has a colour (linear RGB): the ground asphalt grey, lane paint white,
sidewalk light grey, gravel verge brown, grass green and water dark blue-grey, each with a
texture hashed from the hit's world position (0.5 m cells, +-10 %); buildings and the underpass
one of six beige, brick, concrete and render tones, buildings with a grid of dark windows;
lamp posts dark grey, utility poles wooden brown; vehicles (cars and large vehicles alike) one
of ten paints (mostly white, black, silver and grey; red, blue, green, beige), with a dark
glass band along their sides; pedestrians a top (one of ten clothing tones: navy, black,
charcoal, grey, white, red, olive, camel, sky blue, mustard) over their legs (denim, black,
grey, khaki, brown), cyclists a top over their bicycle (black, silver, red, blue), split at
47 % of their height.
An object's tones are a hash of its reflectivity, so it keeps its colour over time. Surfaces are
lit by Lambert shading under ``SUN`` (0.3 ambient + 0.7 max(n . sun, 0)); the sky is a blue
gradient by elevation, pale at the horizon. The camera then applies the frame's exposure gain
(uniform in [0.8, 1.2]), clips to 1, gamma-encodes (1 / 2.2) and adds sensor noise (sigma 0.01,
clipped to [0, 1]); gain and noise come from the frame's generator, so a bag is reproducible
for its seed.

Features (:data:`CAMERA_CHANNELS`): what a fixed hand-made backbone computes from that image
alone: ``red``, ``green``, ``blue`` (0..1); ``luminance`` (0.299 R + 0.587 G + 0.114 B);
``grad_u``, ``grad_v`` (Sobel of luminance / 8, per pixel, +u right, +v down: edges);
``local_contrast`` (luminance minus its 5 x 5 box mean); ``saturation`` (max - min of RGB);
borders replicate the edge pixels. No channel is a class or a depth: a head has to find
objects by their appearance, as in a real camera's features.
"""

from typing import NamedTuple

from jax_perception_node.settings.config import CameraConfig
import numpy as np

from .scene import (ASPHALT, BCLS, BHX, BHY, BHZ, box_hits, BRHO, BX, BY, BYAW, BZ,
                    CAMERA_CHANNELS, CAMERA_VIEW_M, CCLS, CR, CX, CY, CYCLIST, cylinder_hits, CZ0,
                    CZ1, expand, GRASS, GRAVEL, GROUND, ground_reflectivity, PAINT, PEDESTRIAN,
                    SIDEWALK, SUN, VEHICLES, WALL, WATER)

# Ground tints per reflectivity (the colour is reflectivity x tint, x the texture).
GROUND_TINTS = ((ASPHALT, (1.0, 1.0, 1.03)), (PAINT, (1.0, 1.0, 0.95)),
                (SIDEWALK, (1.03, 1.0, 0.93)), (GRAVEL, (1.15, 1.0, 0.78)),
                (GRASS, (0.6, 1.25, 0.45)), (WATER, (0.6, 1.0, 1.5)))
# Linear RGB albedos.
VEHICLE_PAINTS = np.array([(0.75, 0.75, 0.73), (0.75, 0.75, 0.73), (0.03, 0.03, 0.035),
                           (0.03, 0.03, 0.035), (0.42, 0.43, 0.45), (0.16, 0.16, 0.17),
                           (0.45, 0.03, 0.03), (0.04, 0.08, 0.30), (0.05, 0.18, 0.08),
                           (0.50, 0.42, 0.28)])
WALL_TONES = np.array([(0.55, 0.48, 0.36), (0.40, 0.17, 0.10), (0.32, 0.31, 0.29),
                       (0.62, 0.60, 0.55), (0.45, 0.33, 0.22), (0.25, 0.14, 0.10)])
GLASS = np.array([0.05, 0.06, 0.08])
# People: tops (coats, jackets, shirts: navy, black, charcoal, grey, white, red, olive, camel,
# sky blue, mustard) and legs (denim, black, grey, khaki, dark brown); bicycles' frames.
CLOTHING = np.array([(0.04, 0.05, 0.12), (0.03, 0.03, 0.03), (0.10, 0.10, 0.11),
                     (0.30, 0.30, 0.30), (0.70, 0.70, 0.68), (0.45, 0.05, 0.06),
                     (0.15, 0.17, 0.08), (0.45, 0.30, 0.16), (0.25, 0.40, 0.60),
                     (0.55, 0.42, 0.08)])
TROUSERS = np.array([(0.08, 0.12, 0.25), (0.13, 0.18, 0.32), (0.03, 0.03, 0.03),
                     (0.20, 0.20, 0.21), (0.40, 0.35, 0.24), (0.12, 0.08, 0.05)])
BICYCLES = np.array([(0.04, 0.04, 0.04), (0.35, 0.36, 0.38), (0.40, 0.04, 0.04),
                     (0.05, 0.10, 0.35)])
LAMP_POST, WOODEN_POLE = np.array([0.12, 0.13, 0.13]), np.array([0.25, 0.17, 0.10])
SKY_HORIZON, SKY_ZENITH = np.array([0.55, 0.65, 0.80]), np.array([0.15, 0.30, 0.70])
LUMA = np.array([0.299, 0.587, 0.114])
EXPOSURE = (0.8, 1.2)         # per-frame gain range
NOISE = 0.01                  # sensor noise sigma, after gamma
MAX_IMAGE_SCALE = 8           # images up to 8 x the map each way (256 x 704 for 32 x 88)
# Every hit lies over 1e-6 m in front of the camera (box_hits, cylinder_hits): in the part of an
# object beyond this depth (m), whose image is bounded. The edges of a box around an object join
# the corners (4 a + 2 b + c for sign bits a, b, c) that differ in one bit.
CLIP_M = 1e-7
EDGES = np.array([(i, i | bit) for bit in (1, 2, 4) for i in range(8) if not i & bit])


class Surfaces(NamedTuple):
    """What each ray hits first: depth inf and class -1 for the sky."""

    depth: np.ndarray       # (N,) optical depth (m)
    cls: np.ndarray         # (N,) int8 scene class (scene.GROUND, CAR, POLE, WALL, ...)
    normal: np.ndarray      # (N, 3) outward normal, world axes
    colour: np.ndarray      # (N, 3) linear RGB albedo


class Pinhole(NamedTuple):
    """A camera's rays as a pixel grid: which rays can hit an object (``trace``'s culling)."""

    rotation: np.ndarray    # (3, 3) base_link (= world) axes from the optical frame
    fx: float               # px, at this grid's resolution
    fy: float
    cx: float
    cy: float
    width: int
    height: int


def scaled_intrinsics(cam: CameraConfig, scale: int = 1) -> tuple[float, float, float, float]:
    """
    Return (fx, fy, cx, cy) of ``cam`` for an image ``scale`` times its feature map each way.

    fx_i = fx k, cx_i = (cx + 0.5) k - 0.5, the same for y: pixel centres at integer coordinates
    at both resolutions, the inverse of ``sensors.camera.scale_camera_info``. Scale 1 gives the
    configured values themselves, bit for bit.
    """
    if scale == 1:
        return cam.fx, cam.fy, cam.cx, cam.cy
    return (cam.fx * scale, cam.fy * scale, (cam.cx + 0.5) * scale - 0.5,
            (cam.cy + 0.5) * scale - 0.5)


def check_scale(scale: int) -> int:
    """Return ``scale`` when it is an integer in 1..MAX_IMAGE_SCALE, else raise ValueError."""
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) \
            or not 1 <= scale <= MAX_IMAGE_SCALE:
        raise ValueError(f'image_scale must be an integer in 1..{MAX_IMAGE_SCALE}, got {scale!r}')
    return int(scale)


def check_pinholes(cameras) -> None:
    """Raise ValueError for a camera with a lens model: the renderer casts pinhole rays."""
    for cam in cameras:
        # Its CameraInfo would carry the lens and its pictures would not: the node would lift
        # them out of register with the cloud.
        if cam.distortion_model != 'none' and not cam.rectified:
            raise ValueError(f'cameras.{cam.name}.distortion_model is {cam.distortion_model}: '
                             'the sample drive renders pinhole cameras; set none (or '
                             f'cameras.{cam.name}.rectified: true)')


def pinhole(cam: CameraConfig, scale: int = 1) -> Pinhole:
    """Return the pixel grid of ``cam`` at ``scale`` times its feature map."""
    fx, fy, cx, cy = scaled_intrinsics(cam, scale)
    return Pinhole(cam.pose.rotation_matrix(), fx, fy, cx, cy, cam.width * scale,
                   cam.height * scale)


def camera_rays(cam: CameraConfig, scale: int = 1) -> np.ndarray:
    """Return the ray of every pixel centre (row-major) in base_link axes, shape (H * W, 3)."""
    view = pinhole(cam, scale)
    v, u = np.mgrid[0:view.height, 0:view.width].astype(float)
    # Optical z = 1: the ray parameter of a hit is its optical depth.
    rays = np.stack([(u - view.cx) / view.fx, (v - view.cy) / view.fy,
                     np.ones_like(u)], axis=-1).reshape(-1, 3)
    return rays @ view.rotation.T


def render(cam: CameraConfig, dirs: np.ndarray, origin: np.ndarray, boxes: np.ndarray,
           cylinders: np.ndarray, rng: np.random.Generator,
           view: Pinhole | None = None) -> np.ndarray:
    """
    Render the feature map float32 (H_f, W_f, C) a camera sees from ``origin`` (world, m).

    ``dirs``: its pixel rays in world axes (camera_rays), ``boxes`` and ``cylinders``: the
    scene at the frame's time, ``view``: the rays' pixel grid (see ``trace``). Channel k is
    ``CAMERA_CHANNELS[k % 8]``; ``rng`` draws the exposure gain, then the sensor noise.
    """
    rgb = image(dirs, trace(dirs, origin, boxes, cylinders, view), rng)
    return features(cam, rgb.reshape(cam.height, cam.width, 3))


def trace(dirs: np.ndarray, origin: np.ndarray, boxes: np.ndarray, cylinders: np.ndarray,
          view: Pinhole | None = None) -> Surfaces:
    """
    Return the nearest surface along each ray ``dirs`` (N, 3) from ``origin`` (world, m).

    ``view``: the pixel grid ``dirs`` are the rays of (``camera_rays``, row-major), with which
    each object is tested only against the rays in its image rectangle; None: every ray.
    Either way the surfaces are the same.
    """
    forward = dirs.mean(axis=0)
    forward /= np.linalg.norm(forward)
    # Culling behind the image plane holds only while every ray points ahead of it.
    cull = bool(np.all(dirs @ forward > 0))
    depth, colour, normal, cls = _ground(dirs, origin)
    hits = []
    if len(boxes):
        hits.append(_box_hits(dirs, origin, forward, cull, boxes, view))
    if len(cylinders):
        hits.append(_cylinder_hits(dirs, origin, forward, cull, cylinders, view))
    for ray, dist, *_ in hits:
        np.minimum.at(depth, ray, dist)
    for ray, dist, k, nrm, rows, col, paint in hits:
        win = (dist == depth[ray]) & np.isfinite(dist)
        r, k = ray[win], k[win]
        cls[r] = rows[k, col]
        normal[r] = nrm[win]
        colour[r] = paint(rows, k, origin + depth[r, None] * dirs[r], nrm[win])
    return Surfaces(depth, cls, normal, colour)


def image(dirs: np.ndarray, surfaces: Surfaces, rng: np.random.Generator) -> np.ndarray:
    """Return the camera's image of ``surfaces``, float64 (N, 3) RGB in [0, 1], gamma-encoded."""
    gain = rng.uniform(*EXPOSURE)
    sky = ~np.isfinite(surfaces.depth)
    shade = 0.3 + 0.7 * np.maximum(surfaces.normal @ SUN, 0.0)
    linear = surfaces.colour * shade[:, None]
    up = dirs[sky, 2] / np.linalg.norm(dirs[sky], axis=1)
    blend = np.clip(np.arcsin(np.clip(up, -1.0, 1.0)) / (0.25 * np.pi), 0.0, 1.0)[:, None]
    linear[sky] = (1.0 - blend) * SKY_HORIZON + blend * SKY_ZENITH
    encoded = np.clip(gain * linear, 0.0, 1.0) ** (1.0 / 2.2)
    return np.clip(encoded + NOISE * rng.standard_normal(linear.shape), 0.0, 1.0)


def features(cam: CameraConfig, rgb: np.ndarray) -> np.ndarray:
    """Compute the feature map float32 (H_f, W_f, C) of the image ``rgb`` (H_f, W_f, 3)."""
    red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    lum = LUMA[0] * red + LUMA[1] * green + LUMA[2] * blue
    height, width = lum.shape
    rows = np.clip(np.arange(-2, height + 2), 0, height - 1)
    cols = np.clip(np.arange(-2, width + 2), 0, width - 1)
    pad = lum[rows[:, None], cols]                 # edge-replicated by 2 pixels
    across = pad[1:-1, 2:] - pad[1:-1, :-2]
    down = pad[2:, 1:-1] - pad[:-2, 1:-1]
    grad_u = (across[:-2, 1:-1] + 2.0 * across[1:-1, 1:-1] + across[2:, 1:-1]) / 8.0
    grad_v = (down[1:-1, :-2] + 2.0 * down[1:-1, 1:-1] + down[1:-1, 2:]) / 8.0
    strip = pad[:-4] + pad[1:-3] + pad[2:-2] + pad[3:-1] + pad[4:]
    box = strip[:, :-4] + strip[:, 1:-3] + strip[:, 2:-2] + strip[:, 3:-1] + strip[:, 4:]
    saturation = (np.maximum(np.maximum(red, green), blue)
                  - np.minimum(np.minimum(red, green), blue))
    feats = np.stack([red, green, blue, lum, grad_u, grad_v, lum - box / 25.0, saturation],
                     axis=-1)
    return np.ascontiguousarray(
        feats[..., np.arange(cam.channels) % len(CAMERA_CHANNELS)], dtype=np.float32)


def _hash01(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hash integer arrays a, b to [0, 1), exactly (unsigned wrap-around arithmetic)."""
    h = a.astype(np.int64).astype(np.uint64) * np.uint64(0x9E3779B1)
    h ^= b.astype(np.int64).astype(np.uint64) * np.uint64(0x85EBCA77)
    h ^= h >> np.uint64(15)
    h *= np.uint64(0x2C1B3C6D)
    h ^= h >> np.uint64(12)
    return (h & np.uint64(0xFFFF)).astype(float) / 65536.0


def _tone(rho: np.ndarray, palette: np.ndarray, salt: int = 0) -> np.ndarray:
    """Pick each object's palette entry by a hash of its reflectivity rho, shape (K, 3)."""
    pick = _hash01(np.floor(rho * 2**30), np.full(len(rho), salt))
    return palette[(pick * len(palette)).astype(int)]


def _ground(dirs, origin):
    """Return depth, colour, normal and class of every ray's ground hit (depth inf: none)."""
    n_rays = len(dirs)
    depth = np.full(n_rays, np.inf)
    down = dirs[:, 2] < 0
    if origin[2] > 0:
        depth[down] = origin[2] / -dirs[down, 2]
    ground = np.flatnonzero(np.isfinite(depth))
    hit_xy = origin[:2] + depth[ground, None] * dirs[ground, :2]
    rho = ground_reflectivity(hit_xy[:, 0], hit_xy[:, 1])[:, None]
    tint = np.select([rho == value for value, _ in GROUND_TINTS],
                     [np.array(rgb) for _, rgb in GROUND_TINTS], 1.0)
    cell = np.floor(hit_xy / 0.5)
    texture = 0.9 + 0.2 * _hash01(cell[:, 0], cell[:, 1])
    colour = np.zeros((n_rays, 3))
    colour[ground] = rho * tint * texture[:, None]
    normal = np.zeros((n_rays, 3))
    normal[:, 2] = 1.0
    cls = np.full(n_rays, -1, np.int8)
    cls[ground] = GROUND
    return depth, colour, normal, cls


def _paint_boxes(boxes, k, hit, normal):
    """Colour box k's hits at world points hit (P, 3): vehicles' glass, buildings' windows."""
    cls, rho = boxes[k, BCLS], boxes[k, BRHO]
    vehicle = np.isin(cls, VEHICLES)
    z0, z1 = boxes[k, BZ] - boxes[k, BHZ], boxes[k, BZ] + boxes[k, BHZ]
    band = (hit[:, 2] - z0) / (z1 - z0)
    # People: a top over legs (pedestrians) or over a bicycle (cyclists), from the waist up.
    lower = np.where((cls == CYCLIST)[:, None], _tone(rho, BICYCLES, 1), _tone(rho, TROUSERS, 1))
    person = np.where((band > 0.47)[:, None], _tone(rho, CLOTHING), lower)
    colour = np.where(vehicle[:, None], _tone(rho, VEHICLE_PAINTS),
                      np.where(np.isin(cls, (PEDESTRIAN, CYCLIST))[:, None], person,
                               _tone(rho, WALL_TONES)))
    side = normal[:, 2] == 0.0
    glass = vehicle & side & (band > 0.62) & (band < 0.9)
    # Windows on buildings (walls standing on the ground, over 6 m tall and 4 m deep), 3.2 m
    # floors, 3 m bays: along a face, the in-plane box coordinate plus the constant other one.
    cos_y, sin_y = np.cos(boxes[k, BYAW]), np.sin(boxes[k, BYAW])
    dx, dy = hit[:, 0] - boxes[k, BX], hit[:, 1] - boxes[k, BY]
    along = cos_y * dx + sin_y * dy - sin_y * dx + cos_y * dy
    building = ((boxes[k, BCLS] == WALL) & (z0 <= 0.0) & (z1 - z0 > 6.0)
                & (np.minimum(boxes[k, BHX], boxes[k, BHY]) > 2.0))
    floor, bay = np.mod(hit[:, 2], 3.2), np.mod(along, 3.0)
    window = (building & side & (floor > 1.0) & (floor < 2.3) & (bay > 0.8) & (bay < 2.2)
              & (hit[:, 2] < z1 - 0.5))
    return np.where((glass | window)[:, None], GLASS, colour)


def _paint_cylinders(cylinders, k, hit, normal):
    """Colour cylinder k's hits: lamp posts (radius under 0.13 m) dark grey, others wooden."""
    return np.where((cylinders[k, CR] < 0.13)[:, None], LAMP_POST, WOODEN_POLE)


def _view_pairs(view: Pinhole | None, origin: np.ndarray, corners: np.ndarray,
                n_rays: int) -> tuple[np.ndarray, np.ndarray]:
    """
    Return the (object, ray) pairs to test, each shape (P,), object-major, rays ascending.

    corners (K, 8, 3): world corners of a box around each object (in :data:`EDGES`' order).
    Every hit lies in the box's part beyond the depth ``CLIP_M``, a convex body whose corners
    are the box's corners beyond it and the points where its edges cross it, so a ray outside
    the bounding rectangle of their projections (grown by a pixel against rounding) cannot hit
    the object. Without ``view``: every ray.
    """
    n_obj = len(corners)
    if view is None:
        return np.repeat(np.arange(n_obj), n_rays), np.tile(np.arange(n_rays), n_obj)
    optical = (corners - origin) @ view.rotation
    near, far = optical[:, EDGES[:, 0]], optical[:, EDGES[:, 1]]
    with np.errstate(divide='ignore', invalid='ignore'):
        cross = near + (CLIP_M - near[..., 2:]) / (far[..., 2:] - near[..., 2:]) * (far - near)
    points = np.concatenate([optical, cross], axis=1)
    valid = np.concatenate([optical[..., 2] >= CLIP_M,
                            (near[..., 2] > CLIP_M) != (far[..., 2] > CLIP_M)], axis=1)
    depth = np.where(valid, np.maximum(points[..., 2], CLIP_M), 1.0)
    bounds = []
    for axis, focal, centre, size in ((0, view.fx, view.cx, view.width),
                                      (1, view.fy, view.cy, view.height)):
        with np.errstate(invalid='ignore'):
            pixel = focal * points[..., axis] / depth + centre
        low = np.where(valid, pixel, np.inf).min(axis=1)
        high = np.where(valid, pixel, -np.inf).max(axis=1)
        # An object wholly behind the camera gets an empty range (low inf, high -inf).
        bounds.append((np.clip(np.floor(low) - 1, 0, size).astype(int),
                       np.clip(np.ceil(high) + 2, 0, size).astype(int)))
    (u0, u1), (v0, v1) = bounds
    cols = np.maximum(u1 - u0, 0)
    k, local = expand(np.arange(n_obj), cols * np.maximum(v1 - v0, 0))
    return k, (v0[k] + local // cols[k]) * view.width + u0[k] + local % cols[k]


def _box_hits(dirs, origin, forward, cull, boxes, view):
    """Return (ray, depth, box, normal, boxes, class column, paint) for the boxes in view."""
    n_rays = len(dirs)
    radius = np.linalg.norm(boxes[:, [BHX, BHY, BHZ]], axis=1)
    rel = boxes[:, [BX, BY, BZ]] - origin
    seen = ((np.linalg.norm(rel, axis=1) - radius < CAMERA_VIEW_M)
            & ((rel @ forward > -radius) | (not cull)))
    boxes = boxes[seen]
    sign = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    half = boxes[:, None, [BHX, BHY, BHZ]] * sign
    cos_b, sin_b = np.cos(boxes[:, BYAW, None]), np.sin(boxes[:, BYAW, None])
    corners = boxes[:, None, [BX, BY, BZ]] + np.stack(
        [cos_b * half[..., 0] - sin_b * half[..., 1], sin_b * half[..., 0] + cos_b * half[..., 1],
         half[..., 2]], axis=-1)
    k, ray = _view_pairs(view, origin, corners, n_rays)
    cos_y, sin_y = np.cos(boxes[k, BYAW]), np.sin(boxes[k, BYAW])
    dist, _, nrm = box_hits(origin[0] - boxes[k, BX], origin[1] - boxes[k, BY],
                            origin[2] - boxes[k, BZ], dirs[ray], cos_y, sin_y,
                            boxes[k, BHX], boxes[k, BHY], boxes[k, BHZ])
    return ray, dist, k, nrm, boxes, BCLS, _paint_boxes


def _cylinder_hits(dirs, origin, forward, cull, cylinders, view):
    """Return (ray, depth, cylinder, normal, cylinders, class column, paint) for those in view."""
    n_rays = len(dirs)
    rel = np.column_stack([cylinders[:, CX] - origin[0], cylinders[:, CY] - origin[1]])
    reach = np.maximum((cylinders[:, CZ0] - origin[2]) * forward[2],
                       (cylinders[:, CZ1] - origin[2]) * forward[2])
    seen = ((np.linalg.norm(rel, axis=1) - cylinders[:, CR] < CAMERA_VIEW_M)
            & ((rel @ forward[:2] + reach > -cylinders[:, CR]) | (not cull)))
    cylinders = cylinders[seen]
    # The square prism around each cylinder holds it.
    sign = np.array([[sx, sy] for sx in (-1, 1) for sy in (-1, 1)] * 2, float)
    corners = np.concatenate([
        cylinders[:, None, [CX, CY]] + cylinders[:, None, [CR]] * sign,
        np.repeat(cylinders[:, [CZ0, CZ1]], 4, axis=1)[..., None]], axis=-1)
    k, ray = _view_pairs(view, origin, corners, n_rays)
    dist, _, nrm = cylinder_hits(origin[0] - cylinders[k, CX], origin[1] - cylinders[k, CY],
                                 origin[2], dirs[ray], cylinders[k, CR], cylinders[k, CZ0],
                                 cylinders[k, CZ1])
    return ray, dist, k, nrm, cylinders, CCLS, _paint_cylinders
