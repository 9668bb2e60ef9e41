"""The synthetic world: its layout constants and the analytic ray-casting kernels."""

import math

from jax_perception_node.detection.boxes import OBJECT_CLASSES
import numpy as np

LIDAR_FRAME_ID = 'lidar'
ODOMETRY_FRAME_ID = 'map'               # fixed frame of the recorded odometry (world axes)
EPOCH_NS = 1_700_000_000 * 10**9       # stamp of t = 0: fixed, so bags are byte-reproducible

# PointCloud2 layout: little-endian, 2 padding bytes after ring keep time 4-byte aligned.
POINT_FIELDS = (('x', 0, 7), ('y', 4, 7), ('z', 8, 7), ('intensity', 12, 7),
                ('ring', 16, 4), ('time', 20, 7))     # (name, offset, PointField datatype)
POINT_STEP = 24
POINT_DTYPE = np.dtype({'names': [f[0] for f in POINT_FIELDS],
                        'formats': ['<f4', '<f4', '<f4', '<f4', '<u2', '<f4'],
                        'offsets': [f[1] for f in POINT_FIELDS], 'itemsize': POINT_STEP})

# Camera feature channels, computed from a rendered colour image only (camera_render.py): its
# RGB (0..1, gamma-encoded), luminance, Sobel gradients along u (right) and v (down), local
# contrast (luminance minus its 5 x 5 mean) and saturation (max - min of RGB). No class, no
# depth. With C != 8 configured channels, channel k holds CAMERA_CHANNELS[k % 8].
CAMERA_CHANNELS = ('red', 'green', 'blue', 'luminance', 'grad_u', 'grad_v', 'local_contrast',
                   'saturation')

# Classes of the scene's surfaces (box and cylinder rows, the LiDAR's and camera's ray casts),
# and the scene class of each ground-truth class (index into ``boxes.OBJECT_CLASSES``).
GROUND, CAR, POLE, WALL, LARGE_VEHICLE, PEDESTRIAN, CYCLIST = range(7)
OBJECT_SCENE_CLASSES = tuple({'car': CAR, 'large_vehicle': LARGE_VEHICLE, 'pedestrian': PEDESTRIAN,
                              'cyclist': CYCLIST}[name] for name in OBJECT_CLASSES)
VEHICLES = (CAR, LARGE_VEHICLE)

# Scene layout, world frame (m, m/s).
EGO_SPEED = 10.0                 # the default ego speed (SyntheticDrive's ego_speed)
MAX_EGO_SPEED = 25.0             # 90 km/h: the drives go from 0+ up to this
LEAD_MARGIN = 0.6                # vehicles ahead in the ego lane drive this much faster than a
#                                  faster ego, so it never runs into them
EGO_LANE_Y = -1.75
EGO_REAR, EGO_FRONT, EGO_HALF_WIDTH = -1.0, 3.8, 0.95    # the ego's body about base_link (m)
ROAD_HALF_WIDTH = 7.0
TOWN_START = 40.0
TOWN_LENGTH = 140.0
TOWN_PERIOD = 240.0
UNDERPASS_OFFSET = 40.0          # underpass centre after the town entrance
UNDERPASS_HALF_LENGTH = 20.0
LAKE_START, LAKE_END = 15.0, 85.0   # m after a town's end: the causeway
CROSSWALKS = (8.0, 72.0, 100.0, 128.0)   # m after a town's start: zebra crossings' centres
CROSSWALK_HALF_WIDTH = 2.0
CAUSEWAY_HALF_WIDTH = 8.5
TILE = 40.0
CAMERA_VIEW_M = 150.0         # objects further than this are not rendered (ground still is)
# Traffic lanes: (y, speed, first x at t = 0, spacing, jitter, lowest index or None, class).
# Cyclists ride the inner edge of the outer lanes (parked vehicles keep 4 m from the centre
# line), one speed per lane so that they never run into one another.
TRAFFIC = ((1.75, -11.0, 15.0, 42.0, 8.0, None, CAR),
           (EGO_LANE_Y, 10.6, 22.0, 70.0, 5.0, 0, CAR),   # ahead of the ego only (LEAD_MARGIN)
           (-3.6, 5.5, 35.0, 95.0, 25.0, None, CYCLIST),
           (3.6, -4.5, 60.0, 110.0, 25.0, None, CYCLIST))

# Ground reflectivity (also the camera albedo, tinted in camera_render.py).
ASPHALT, PAINT, SIDEWALK, GRAVEL, GRASS, WATER = 0.07, 0.55, 0.25, 0.18, 0.20, 0.02
SUN = np.array([0.35, 0.25, 0.9]) / np.linalg.norm([0.35, 0.25, 0.9])

# Object rows: boxes (yawed about z) and vertical cylinders; positions at t = 0 plus velocity.
BX, BY, BZ, BVX, BVY, BHX, BHY, BHZ, BYAW, BRHO, BCLS = range(11)
CX, CY, CVX, CVY, CR, CZ0, CZ1, CRHO, CCLS = range(9)
NO_BOXES = np.zeros((0, 11))
NO_CYLINDERS = np.zeros((0, 9))


# -------------------------------------------------------------------- geometry kernels


def expand(ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repeat each id counts times, with a running index 0..count-1 within each, shapes (sum,)."""
    counts = np.maximum(counts, 0)
    rep = np.repeat(ids, counts)
    local = np.arange(rep.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return rep, local


def box_hits(px, py, pz, dirs, cos_y, sin_y, hx, hy, hz):
    """
    Entry distance of rays into yawed boxes (slab test in each box frame), per pair.

    px, py, pz (P,): ray origin minus box centre (m, world axes); dirs (P, 3): ray direction
    (any length; distances are in its units); cos_y, sin_y (P,): box yaw; hx, hy, hz (P,): half
    sizes (m). Returns the distance (P,), inf for a miss or a ray starting inside, the cosine of
    the incidence angle (P,) and the entry face's outward normal (P, 3), world frame.
    """
    dx, dy, dz = dirs[:, 0], dirs[:, 1], dirs[:, 2]
    axes = ((cos_y * px + sin_y * py, cos_y * dx + sin_y * dy, hx),
            (-sin_y * px + cos_y * py, -sin_y * dx + cos_y * dy, hy),
            (pz, dz, hz))
    t_near = np.full(len(px), -np.inf)
    t_far = np.full(len(px), np.inf)
    entry_axis = np.zeros(len(px), dtype=np.int8)
    entry_dir = np.zeros(len(px))
    for i, (o, u, h) in enumerate(axes):
        # A ray parallel to a slab gets a huge but finite 1/u: inside-or-out, never NaN.
        inv = 1.0 / np.where(u == 0.0, 1e-300, u)
        t1, t2 = (-h - o) * inv, (h - o) * inv
        lo = np.minimum(t1, t2)
        later = lo > t_near
        entry_axis[later] = i
        entry_dir = np.where(later, u, entry_dir)
        t_near = np.maximum(t_near, lo)
        t_far = np.minimum(t_far, np.maximum(t1, t2))
    hit = (t_near <= t_far) & (t_near > 1e-6)
    dist = np.where(hit, t_near, np.inf)
    norm = np.sqrt(dx * dx + dy * dy + dz * dz)
    cos_inc = np.abs(entry_dir) / norm
    sign = -np.sign(entry_dir)
    normal = np.zeros((len(px), 3))
    on_x, on_y = entry_axis == 0, entry_axis == 1
    normal[:, 0] = np.where(on_x, cos_y, np.where(on_y, -sin_y, 0.0)) * sign
    normal[:, 1] = np.where(on_x, sin_y, np.where(on_y, cos_y, 0.0)) * sign
    normal[:, 2] = np.where(entry_axis == 2, sign, 0.0)
    return dist, cos_inc, normal


def cylinder_hits(px, py, oz, dirs, radius, z0, z1):
    """
    Entry distance of rays into vertical cylinders (the mantle; caps are ignored), per pair.

    px, py (P,): ray origin minus cylinder axis (m, world); oz: ray origin z (m, world, scalar
    or (P,)); dirs (P, 3): ray direction; radius, z0, z1 (P,): radius and vertical extent (m).
    Returns the distance (P,), inf for a miss, the cosine of the incidence angle (P,) and the
    outward normal at the hit (P, 3).
    """
    dx, dy, dz = dirs[:, 0], dirs[:, 1], dirs[:, 2]
    a = dx * dx + dy * dy
    b = px * dx + py * dy
    disc = b * b - a * (px * px + py * py - radius * radius)
    with np.errstate(divide='ignore', invalid='ignore'):
        dist = (-b - np.sqrt(np.maximum(disc, 0.0))) / a
    z = oz + dist * dz
    hit = (disc >= 0) & (a > 1e-12) & (dist > 1e-6) & (z >= z0) & (z <= z1)
    dist = np.where(hit, dist, np.inf)
    finite = np.where(hit, dist, 0.0)
    normal = np.zeros((len(px), 3))
    normal[:, 0] = (px + finite * dx) / radius
    normal[:, 1] = (py + finite * dy) / radius
    norm = np.sqrt(a + dz * dz)
    cos_inc = np.abs(normal[:, 0] * dx + normal[:, 1] * dy) / norm
    return dist, cos_inc, normal


def points_in_boxes(points: np.ndarray, tau: np.ndarray, boxes: np.ndarray,
                    grow: float = 0.0) -> np.ndarray:
    """
    Count the points inside each moving yawed box, shape (K,) int64.

    points (N, 3): where each point was, relative to a reference position (m, world axes), at
    its time tau (N,) (s after the reference time); boxes (K, 11): box rows at the reference
    time, relative to the same position, moving with their velocity. A point is inside when it
    lies within the box grown by ``grow`` (m) on every side at the point's time.
    """
    counts = np.zeros(len(boxes), dtype=np.int64)
    if not len(points) or not len(boxes):
        return counts
    order = np.argsort(points[:, 0], kind='stable')
    xs = points[order, 0]
    late = float(np.max(np.abs(tau)))
    for k, row in enumerate(boxes):
        # A disc around the footprint, widened by the box's motion, bounds the x interval.
        speed = math.hypot(row[BVX], row[BVY])
        reach = math.hypot(row[BHX] + grow, row[BHY] + grow) + speed * late
        lo, hi = np.searchsorted(xs, [row[BX] - reach, row[BX] + reach + 1e-9])
        near = order[lo:hi]
        t = tau[near]
        dx = points[near, 0] - row[BX] - row[BVX] * t
        dy = points[near, 1] - row[BY] - row[BVY] * t
        dz = points[near, 2] - row[BZ]
        c, s = math.cos(row[BYAW]), math.sin(row[BYAW])
        inside = ((np.abs(c * dx + s * dy) <= row[BHX] + grow)
                  & (np.abs(-s * dx + c * dy) <= row[BHY] + grow)
                  & (np.abs(dz) <= row[BHZ] + grow))
        counts[k] = np.count_nonzero(inside)
    return counts


def sweep_points_in_boxes(points: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
                          ego_velocity: np.ndarray, boxes: np.ndarray,
                          grow: float) -> np.ndarray:
    """
    Count a sweep's points in each box, shape (K,) int64 (``points_in_boxes``).

    points: the sweep (``POINT_DTYPE``, LiDAR frame at each point's time); rotation (3, 3),
    translation (3,): the LiDAR's pose in base_link; ego_velocity (2,): base_link's (m/s,
    heading 0, horizontal); boxes (K, 11): rows relative to base_link at the sweep's stamp.
    """
    if not len(boxes):
        return np.zeros(0, np.int64)
    xyz = [points[axis].astype(np.float64) for axis in 'xyz']
    # Only points within the boxes' height band can count (most are ground): drop the rest
    # before the full transform. The LiDAR moves horizontally, so z needs no motion.
    z = rotation[2, 0] * xyz[0] + rotation[2, 1] * xyz[1] + rotation[2, 2] * xyz[2] \
        + translation[2]
    band = np.flatnonzero((z >= np.min(boxes[:, BZ] - boxes[:, BHZ]) - grow)
                          & (z <= np.max(boxes[:, BZ] + boxes[:, BHZ]) + grow))
    tau = points['time'][band].astype(np.float64)
    rel = np.empty((len(band), 3))
    for i in range(2):
        # Where each point was relative to base_link at the stamp: it had moved on since.
        rel[:, i] = (rotation[i, 0] * xyz[0][band] + rotation[i, 1] * xyz[1][band]
                     + rotation[i, 2] * xyz[2][band] + translation[i] + ego_velocity[i] * tau)
    rel[:, 2] = z[band]
    return points_in_boxes(rel, tau, boxes, grow)


# -------------------------------------------------------------------- scene content


def in_town(x):
    """Whether world x (m, scalar or array) lies in a town stretch."""
    return (np.asarray(x) >= TOWN_START) & (np.mod(np.asarray(x) - TOWN_START, TOWN_PERIOD)
                                            < TOWN_LENGTH)


def in_lake(x):
    """Whether world x (m, scalar or array) lies where the road crosses a lake on a causeway."""
    u = np.mod(np.asarray(x) - TOWN_START, TOWN_PERIOD) - TOWN_LENGTH
    return (u >= LAKE_START) & (u < LAKE_END)


def underpass_centres(x_lo: float, x_hi: float) -> list[float]:
    """World x (m) of underpass centres in [x_lo, x_hi)."""
    first = TOWN_START + UNDERPASS_OFFSET
    n_lo = max(0, math.ceil((x_lo - first) / TOWN_PERIOD))
    n_hi = math.floor((x_hi - first) / TOWN_PERIOD)
    return [first + n * TOWN_PERIOD for n in range(n_lo, n_hi + 1) if first + n * TOWN_PERIOD
            < x_hi]


def crosswalks(x_lo: float, x_hi: float) -> list[float]:
    """World x (m) of the zebra crossings' centres in [x_lo, x_hi)."""
    first = math.floor((x_lo - TOWN_START) / TOWN_PERIOD)
    return [x for n in range(max(first, 0), math.floor((x_hi - TOWN_START) / TOWN_PERIOD) + 1)
            for x in (TOWN_START + n * TOWN_PERIOD + u for u in CROSSWALKS) if x_lo <= x < x_hi]


def near_underpass(x0: float, x1: float, margin: float) -> bool:
    """Whether [x0, x1] (m) comes within margin of an underpass."""
    reach = UNDERPASS_HALF_LENGTH + margin
    return bool(underpass_centres(x0 - reach, x1 + reach + 1e-9))


def ground_reflectivity(x, y):
    """
    Ground reflectivity at world (x, y) (m, arrays): asphalt, paint, sidewalk, gravel, grass.

    Paint: the road's edge lines, the double centre line, the dashed lane lines, and the zebra
    crossings in towns (``CROSSWALKS``: bars 4 m long along the road, 0.5 m wide and apart).
    """
    ay = np.abs(y)
    rho = np.where(in_town(x), SIDEWALK, np.where(ay < ROAD_HALF_WIDTH + 0.8, GRAVEL, GRASS))
    rho = np.where(in_lake(x) & (ay >= CAUSEWAY_HALF_WIDTH), WATER, rho)
    rho = np.where(ay < ROAD_HALF_WIDTH, ASPHALT, rho)
    edge = (ay >= ROAD_HALF_WIDTH - 0.25) & (ay < ROAD_HALF_WIDTH - 0.1)
    centre = (ay >= 0.04) & (ay < 0.16)                            # double solid line
    dashed = (np.abs(ay - 3.5) < 0.075) & (np.mod(x, 9.0) < 3.0)
    u = np.mod(np.asarray(x) - TOWN_START, TOWN_PERIOD)
    zebra = (np.asarray(x) >= TOWN_START) & (ay < ROAD_HALF_WIDTH - 0.25) & (np.mod(y, 1.0) < 0.5)
    zebra &= np.logical_or.reduce([np.abs(u - c) < CROSSWALK_HALF_WIDTH for c in CROSSWALKS])
    return np.where(edge | centre | dashed | zebra, PAINT, rho)


def box(x, y, z0, z1, length, width, yaw, rho, cls, vx=0.0, vy=0.0):
    """One box row: centre (x, y), vertical extent [z0, z1], size along its yawed axes (m)."""
    return [x, y, 0.5 * (z0 + z1), vx, vy, 0.5 * length, 0.5 * width, 0.5 * (z1 - z0), yaw,
            rho, cls]


def vehicle(rng: np.random.Generator, x: float, y: float, yaw: float, speed: float = 0.0,
            parked: bool = False) -> list[float]:
    """
    Draw a vehicle's box row with 0.25 m ground clearance: a car, or a van, truck or bus.

    Moving and lay-by vehicles: 70 % cars, 15 % vans, 10 % trucks, 5 % buses; ``parked`` in a
    town's parking lane: 80 % cars, 14 % vans, 6 % trucks. Sizes (length, width, top; m) are
    those of common European models, and the large vehicles' come near nuScenes' per-class mean
    boxes (truck 6.9 x 2.5 x 2.8, bus 11.0 x 2.9 x 3.5; the mean anchor sizes of its detection
    benchmark), whose bus width counts the mirrors.
    """
    kind = rng.random()
    mix = (0.8, 0.94, 1.0) if parked else (0.7, 0.85, 0.95)
    if kind < mix[0]:
        sizes, cls = ((4.2, 4.9), (1.75, 1.9), (1.4, 1.65)), CAR
    elif kind < mix[1]:
        sizes, cls = ((5.0, 5.9), (1.95, 2.1), (2.0, 2.6)), LARGE_VEHICLE       # vans
    elif kind < mix[2]:
        sizes, cls = ((6.0, 8.5), (2.4, 2.55), (2.8, 3.6)), LARGE_VEHICLE       # trucks
    else:
        sizes, cls = ((10.5, 12.5), (2.5, 2.55), (3.0, 3.4)), LARGE_VEHICLE     # buses
    length, width, height = (rng.uniform(lo, hi) for lo, hi in sizes)
    return box(x, y, 0.25, height, length, width, yaw, rng.uniform(0.15, 0.6), cls,
               speed * math.cos(yaw), speed * math.sin(yaw))


def cyclist(rng: np.random.Generator, x: float, y: float, yaw: float,
            speed: float) -> list[float]:
    """Draw a bicycle with its rider, standing on the ground: about 1.8 x 0.6 x 1.7 m."""
    return box(x, y, 0.0, rng.uniform(1.6, 1.85), rng.uniform(1.65, 1.9), rng.uniform(0.55, 0.7),
               yaw, rng.uniform(0.15, 0.5), CYCLIST, speed * math.cos(yaw),
               speed * math.sin(yaw))


def road_user(rng: np.random.Generator, cls: int, x: float, y: float, yaw: float,
              speed: float) -> list[float]:
    """Draw a moving vehicle (``cls`` CAR: any vehicle) or a cyclist (CYCLIST)."""
    return (cyclist if cls == CYCLIST else vehicle)(rng, x, y, yaw, speed)


def make_tile(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Build the static boxes and cylinders of the tile x in [k TILE, (k + 1) TILE) (m)."""
    x0, x1 = k * TILE, (k + 1) * TILE
    boxes, cylinders = [], []
    for side in (1.0, -1.0):
        # Building rows; a building never straddles tiles, so neighbours cannot overlap.
        x = x0 + rng.uniform(0.0, 4.0)
        while True:
            length, depth = rng.uniform(10.0, 28.0), rng.uniform(8.0, 16.0)
            height, gap, rho = rng.uniform(7.0, 24.0), rng.uniform(0.5, 5.0), rng.uniform(
                0.25, 0.6)
            length = min(length, x1 - 0.5 - x)
            if length < 4.0:
                break
            if in_town(x) and in_town(x + length) and not near_underpass(x, x + length, 4.0):
                boxes.append(box(x + 0.5 * length, side * (10.5 + 0.5 * depth), 0.0, height,
                                 length, depth, 0.0, rho, WALL))
            x += length + gap
        # Parking lanes (outer lanes) in towns.
        x = x0 + rng.uniform(0.0, 3.0)
        while x < x1:
            car = vehicle(rng, 0.0, side * 5.3 + rng.normal(0.0, 0.08),
                          rng.normal(0.0, 0.04) + (0.0 if side < 0 else math.pi), parked=True)
            # Keep the lane's inner 0.5 m free (cyclists): no part nearer the centre than 4 m.
            reach = car[BHY] * abs(math.cos(car[BYAW])) + car[BHX] * abs(math.sin(car[BYAW]))
            car[BY] = side * max(abs(car[BY]), 4.0 + reach)
            occupied = rng.random() < 0.8
            length = 2.0 * car[BHX]
            # No parking within 5 m of a zebra crossing.
            if occupied and in_town(x) and in_town(x + length) and x + length < x1 \
                    and not crosswalks(x - 5.0 - CROSSWALK_HALF_WIDTH,
                                       x + length + 5.0 + CROSSWALK_HALF_WIDTH):
                car[BX] = x + 0.5 * length
                boxes.append(car)
            x += length + rng.uniform(1.0, 3.5)
        # Lamp posts in towns, staggered between the sides.
        for n in range(math.ceil((x0 - 11.0 * (side < 0)) / 22.0),
                       math.ceil((x1 - 11.0 * (side < 0)) / 22.0)):
            px = 22.0 * n + 11.0 * (side < 0)
            if in_town(px) and not near_underpass(px, px, 1.0) \
                    and not crosswalks(px - 3.0 - CROSSWALK_HALF_WIDTH,
                                       px + 3.0 + CROSSWALK_HALF_WIDTH):
                cylinders.append([px, side * 7.6, 0.0, 0.0, 0.12, 0.0, 7.0, 0.3, POLE])
    # Utility poles along the open road, left side.
    for n in range(math.ceil((x0 - 5.0) / 38.0), math.ceil((x1 - 5.0) / 38.0)):
        px = 38.0 * n + 5.0
        if not in_town(px):
            cylinders.append([px, 8.0, 0.0, 0.0, 0.14, 0.0, 9.0, 0.3, POLE])
    # Open country: now and then a farm building or a car in a lay-by.
    draw = rng.random(6)
    xc = x0 + TILE * draw[1]
    length, depth, height = 10.0 + 14.0 * draw[2], 8.0 + 6.0 * draw[3], 4.0 + 5.0 * draw[4]
    side = 1.0 if draw[5] < 0.5 else -1.0
    span = xc + np.array([-length, 0.0, length])
    if draw[0] < 0.4 and not np.any(in_town(span) | in_lake(span)):
        boxes.append(box(xc, side * rng.uniform(22.0, 45.0), 0.0, height, length, depth,
                         rng.uniform(-0.5, 0.5), rng.uniform(0.3, 0.55), WALL))
    draw = rng.random(3)
    xc = x0 + 5.0 + (TILE - 10.0) * draw[1]
    car = vehicle(rng, xc, (1.0 if draw[2] < 0.5 else -1.0) * 8.6, rng.normal(0.0, 0.15))
    span = xc + np.array([-6.0, 0.0, 6.0])
    if draw[0] < 0.35 and not np.any(in_town(span) | in_lake(span)):
        boxes.append(car)
    # The underpass: a deck over the road and a wall on either side.
    for xb in underpass_centres(x0, x1):
        boxes.append(box(xb, 0.0, 5.0, 6.5, 2 * UNDERPASS_HALF_LENGTH, 60.0, 0.0, 0.35, WALL))
        for side in (1.0, -1.0):
            boxes.append(box(xb, side * 8.3, 0.0, 5.0, 2 * UNDERPASS_HALF_LENGTH - 2.0, 0.8, 0.0,
                             0.35, WALL))
    return (np.array(boxes).reshape(-1, 11) if boxes else NO_BOXES,
            np.array(cylinders).reshape(-1, 9) if cylinders else NO_CYLINDERS)


def time_key(t: float) -> int:
    """Map time t (s) to a non-negative integer at 1 us resolution, to seed per-frame noise."""
    return int(round(t * 1e6)) + 2**40
