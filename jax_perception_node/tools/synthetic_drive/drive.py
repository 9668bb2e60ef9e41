"""The drive itself: the ego vehicle and its sensors (a LiDAR, cameras) in the world."""

import math

from jax_perception_node.settings.config import CameraConfig, PipelineConfig, Pose
import numpy as np

from .camera_render import (camera_rays, check_pinholes, check_scale, image, pinhole, render,
                            Surfaces, trace)
from .lidar_model import LidarModel
from .mounts import tilt_rotation
from .road_users import People, people_at, Traffic
from .scene import (BCLS, BHX, BHY, BHZ, box_hits, BRHO, BVX, BVY, BX, BY, BYAW, BZ, CAMERA_VIEW_M,
                    CCLS, CR, CRHO, CVX, CVY, CX, CY, cylinder_hits, CZ0, CZ1, EGO_LANE_Y,
                    EGO_SPEED, expand, GROUND, ground_reflectivity, make_tile, MAX_EGO_SPEED,
                    OBJECT_SCENE_CLASSES, POINT_DTYPE, sweep_points_in_boxes, TILE, time_key)


class SyntheticDrive:
    """
    The synthetic scene and its sensors: LiDAR sweeps and camera feature maps at any time.

    ``t`` is seconds since the start of the drive (bag stamp = ``EPOCH_NS`` + t). ``num_cameras``
    keeps the first N configured cameras (None: all, 0: LiDAR only). The ego drives at
    ``ego_speed`` (m/s, in (0, :data:`MAX_EGO_SPEED`]); traffic and cyclists keep their own
    speeds, except that the vehicles ahead in the ego's lane drive :data:`LEAD_MARGIN` faster
    than a faster ego, and pedestrians walk and cross timed to it (``road_users``), so the ego
    never runs into anything. ``lidar`` is the sensor model, mounted at ``mount`` (its
    pose in base_link; None: ``cfg.lidar``). ``instant_sweep``: every column fires at the
    stamp, from where the sensor is then into the scene as it is then, and every point's time
    is 0 (the reference a deskewed sweep is compared with); the rays and the noise and
    detection draws are the real sweep's. ``noise_stream`` > 0 gives a second or third LiDAR
    on the vehicle draws of its own (0: the drive's single LiDAR). ``camera_tilt``: the body's
    (pitch, roll) in degrees (``mounts.tilt_rotation``), which the cameras turn with about
    base_link's origin as the LiDAR's ``mount`` already has; None: level.
    """

    def __init__(self, cfg: PipelineConfig, seed: int = 0, num_cameras: int | None = None,
                 lidar: LidarModel = LidarModel(), ego_speed: float = EGO_SPEED,
                 instant_sweep: bool = False, mount: Pose | None = None,
                 noise_stream: int = 0, camera_tilt=None):
        """Set up the sensors; raises ValueError for a bad seed, camera count or speed."""
        available = len(cfg.cameras)
        if num_cameras is None:
            num_cameras = available
        if isinstance(num_cameras, bool) or not isinstance(num_cameras, int) or num_cameras < 0:
            raise ValueError(f'num_cameras must be a non-negative integer, got {num_cameras!r}')
        if num_cameras > available:
            names = ', '.join(c.name for c in cfg.cameras) or 'none'
            raise ValueError(f'num_cameras={num_cameras}, but the config has only {available} '
                             f'camera(s) ({names})')
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f'seed must be a non-negative integer, got {seed!r}')
        # Written so that NaN fails: it compares False with every bound.
        if isinstance(ego_speed, bool) or not isinstance(ego_speed, (int, float)) \
                or not 0.0 < ego_speed <= MAX_EGO_SPEED:
            raise ValueError(f'ego_speed must be a number > 0 and <= {MAX_EGO_SPEED:g} m/s, got '
                             f'{ego_speed!r}')
        self.cfg = cfg
        self.seed = int(seed)
        self.lidar = lidar
        self.cameras: tuple[CameraConfig, ...] = tuple(cfg.cameras[:num_cameras])
        check_pinholes(self.cameras)
        self.ego_speed = float(ego_speed)
        self.ego_velocity = np.array([self.ego_speed, 0.0])
        self.instant_sweep = bool(instant_sweep)
        self.mount = cfg.lidar if mount is None else mount
        self._noise_key = [self.seed, 2] if noise_stream == 0 else [self.seed, 2, 5, noise_stream]
        self._body = None if camera_tilt is None else tilt_rotation(camera_tilt)
        self._setup_rays()
        # (name, scale) -> the camera's rays, their pixel grid and its offset, made on first use.
        self._camera_grids: dict[tuple[str, int], tuple] = {}
        self._tiles: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # Traffic and cyclists with the speeds of this drive (see the class docstring), people.
        self._traffic = Traffic(self.seed, self.ego_speed)
        self._people = People(self.seed, self.ego_speed, self._tile, self._traffic)

    def _setup_rays(self):
        """Lay out the LiDAR's rays in its frame and in world axes, and their firing times."""
        lidar = self.lidar
        self._lidar_rot = self.mount.rotation_matrix()
        self._lidar_trans = np.array(self.mount.translation, dtype=float)
        el, az = lidar.elevations(), lidar.azimuths()
        self._elevations = el
        # Rays ordered column-major (ray = column * beams + ring): points come out in firing order.
        el_grid, az_grid = np.meshgrid(el, az)             # (columns, beams)
        dirs = np.stack([np.cos(el_grid) * np.cos(az_grid), np.cos(el_grid) * np.sin(az_grid),
                         np.sin(el_grid)], axis=-1)
        self._dirs_lidar = dirs.reshape(-1, 3)
        self._dirs_world = self._dirs_lidar @ self._lidar_rot.T     # ego heading is fixed at 0
        # A level LiDAR culls by beam and column; a tilted one by each ray's world azimuth
        # (rays sorted by it) and elevation.
        self._level = abs(self._lidar_rot[2, 2] - 1.0) < 1e-9
        self._lidar_yaw = math.atan2(self._lidar_rot[1, 0], self._lidar_rot[0, 0])
        ray_az = np.arctan2(self._dirs_world[:, 1], self._dirs_world[:, 0])
        self._ray_order = np.argsort(ray_az, kind='stable')
        self._sorted_az = ray_az[self._ray_order]
        self._ray_el = np.arcsin(np.clip(self._dirs_world[:, 2], -1.0, 1.0))
        if self.instant_sweep:
            self._tau = np.zeros(lidar.azimuth_steps)
        else:
            self._tau = np.arange(lidar.azimuth_steps) / (lidar.azimuth_steps * lidar.rotation_hz)

    # ---------------------------------------------------------------- ego and scene layout

    def ego_position(self, t: float) -> np.ndarray:
        """Position (m) of base_link in the world at time t (s), shape (3,); heading is +x."""
        return np.array([self.ego_speed * t, EGO_LANE_Y, 0.0])

    def scene(self, x_lo: float, x_hi: float, t: float) -> tuple[np.ndarray, np.ndarray]:
        """
        Boxes (n, 11) and cylinders (m, 9) near world x in [x_lo, x_hi] at time t (s).

        Rows are in the world frame with positions at time t: boxes ``x, y, z`` (centre, m),
        ``vx, vy`` (m/s), half sizes ``hx, hy, hz`` (m, box frame), ``yaw`` (rad), reflectivity,
        class; cylinders ``x, y, vx, vy, radius, z0, z1, reflectivity, class``. Every object
        reaching into the interval is included, and some beyond it.
        """
        boxes, cylinders, _ = self._scene(x_lo, x_hi, t)
        return boxes, cylinders

    def _scene(self, x_lo: float, x_hi: float, t: float, ids: bool = False):
        """Like ``scene``, plus the box rows' ids if ``ids`` (else None): see ground_truth."""
        tiles = range(math.floor(x_lo / TILE) - 1, math.floor(x_hi / TILE) + 1)
        parts = [self._tile(k) for k in tiles]
        traffic, keys = self._traffic.rows(x_lo - 20.0, x_hi + 20.0, t)
        boxes = np.concatenate([p[0] for p in parts] + [traffic])
        cylinders = np.concatenate([p[1] for p in parts])
        boxes[:, BX] += boxes[:, BVX] * t
        boxes[:, BY] += boxes[:, BVY] * t
        cylinders[:, CX] += cylinders[:, CVX] * t
        cylinders[:, CY] += cylinders[:, CVY] * t
        people = [people_at(self._people.plans(k), t) for k in tiles]
        boxes = np.concatenate([boxes] + people)
        names = None
        if ids:
            names = [f'tile{k}-{i}' for k, p in zip(tiles, parts) for i in range(len(p[0]))]
            names += [f'lane{lane}-{n}' for lane, n in keys]
            names += [f'person{k}-{i}' for k, p in zip(tiles, people) for i in range(len(p))]
        return boxes, cylinders, names

    def _tile(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k not in self._tiles:
            self._tiles[k] = make_tile(np.random.default_rng([self.seed, 1, k + 2**32]), k)
        return self._tiles[k]

    # ---------------------------------------------------------------- ground truth

    def ground_truth(self, t: float, points: np.ndarray | None = None, min_points: int = 5,
                     others: tuple = ()) -> tuple[np.ndarray, list[str]]:
        """
        Return the visible objects at time t (s), the LiDAR stamp: (float64[n, 9] rows, ids).

        Rows (``boxes.BOX_COLUMNS``): x, y, z (box centre, m, grid frame: base_link at t, whose
        axes are the world's), length, width, height (m), yaw (rad, in (-pi, pi]), score 1,
        class (index into ``boxes.OBJECT_CLASSES``: car, large_vehicle, pedestrian, cyclist),
        for the vehicles (parked and moving), pedestrians and cyclists whose centre at t lies in
        the grid's x and y range and that at least ``min_points`` returns of the sweep starting
        at t hit: a point counts when it lies inside the box grown by 0.2 m, both where they are
        when the point fires (tau s after t: the LiDAR frame at t + tau, the box at its centre
        at t + v tau). nuScenes likewise drops the boxes no LiDAR point falls in. ``points``:
        ``lidar_frame(t)``, when the caller has it (else it is cast here). ``others``: (drive,
        points) of the vehicle's other LiDARs (drives of the same world and ego, other mounts),
        whose returns count too. Ids are stable per object: 'tile<k>-<i>' (the i-th box of the
        40 m tile k), 'lane<l>-<n>' (traffic and cyclists) or 'person<k>-<i>' (the i-th
        pedestrian of tile k).
        """
        grid = self.cfg.grid
        ego = self.ego_position(t)
        boxes, _, ids = self._scene(ego[0] + grid.x_min, ego[0] + grid.x_max, t, ids=True)
        boxes[:, [BX, BY, BZ]] -= ego
        keep = np.flatnonzero(np.isin(boxes[:, BCLS], OBJECT_SCENE_CLASSES)
                              & (boxes[:, BX] >= grid.x_min) & (boxes[:, BX] < grid.x_max)
                              & (boxes[:, BY] >= grid.y_min) & (boxes[:, BY] < grid.y_max))
        if points is None:
            points = self.lidar_frame(t)
        counts = sweep_points_in_boxes(points, self._lidar_rot, self._lidar_trans,
                                       self.ego_velocity, boxes[keep], 0.2)
        for other, other_points in others:
            counts += sweep_points_in_boxes(other_points, other._lidar_rot, other._lidar_trans,
                                            self.ego_velocity, boxes[keep], 0.2)
        seen = counts >= min_points
        keep = keep[seen]
        rows = np.zeros((len(keep), 9))
        rows[:, :3] = boxes[keep][:, [BX, BY, BZ]]
        rows[:, 3:6] = 2.0 * boxes[keep][:, [BHX, BHY, BHZ]]
        rows[:, 6] = math.pi - np.mod(math.pi - boxes[keep, BYAW], 2.0 * math.pi)
        rows[:, 7] = 1.0
        rows[:, 8] = [OBJECT_SCENE_CLASSES.index(c) for c in boxes[keep, BCLS]]
        return rows, [ids[k] for k in keep]

    # ---------------------------------------------------------------- LiDAR

    def lidar_frame(self, t: float) -> np.ndarray:
        """
        One LiDAR sweep starting at time t (s): structured array of ``POINT_DTYPE``, shape (N,).

        Fields x, y, z (m, LiDAR frame at each point's firing time), intensity (0..255 times
        the model's ``intensity_scale``), ring (beam index, 0 = lowest), time (s after t, within
        one rotation period; 0 with ``instant_sweep``); float32 except ring (uint16). Points are
        in firing order; misses (sky, out of range, undetected) are absent, so N varies with
        the scene.
        """
        model = self.lidar
        n_beams, n_cols = model.beams, model.azimuth_steps
        n_rays = n_beams * n_cols
        dirs = self._dirs_world
        tau = self._tau
        # Culling covers the sensor-object motion over the sweep: none in an instant one.
        sweep = 0.0 if self.instant_sweep else 1.0 / model.rotation_hz
        origin = self.ego_position(t) + self._lidar_trans       # ego heading 0: no rotation
        centre = origin[:2] + self.ego_velocity * (0.5 * sweep)
        boxes, cylinders = self.scene(centre[0] - model.max_range_m - 30.0,
                                      centre[0] + model.max_range_m + 30.0, t)

        # Ground: the LiDAR moves horizontally, so its height is fixed over the sweep.
        t_best = np.full(n_rays, np.inf)
        down = dirs[:, 2] < 0
        if origin[2] > 0:
            t_best[down] = origin[2] / -dirs[down, 2]
        ground = np.flatnonzero(np.isfinite(t_best))
        at = origin[:2] + self.ego_velocity * tau[ground // n_beams, None] \
            + t_best[ground, None] * dirs[ground, :2]
        rho = np.zeros(n_rays)
        rho[ground] = ground_reflectivity(at[:, 0], at[:, 1])
        cos_inc = np.abs(dirs[:, 2])
        cls = np.full(n_rays, GROUND, dtype=np.int8)

        hits = []
        if len(boxes):
            hits.append(self._lidar_boxes(boxes, origin, centre, sweep))
        if len(cylinders):
            hits.append(self._lidar_cylinders(cylinders, origin, centre, sweep))
        for ray, dist, *_ in hits:
            np.minimum.at(t_best, ray, dist)
        for ray, dist, k, cos_k, rows, col in hits:
            win = dist == t_best[ray]
            ray, k = ray[win], k[win]
            rho[ray] = rows[k, col[0]]
            cls[ray] = rows[k, col[1]]
            cos_inc[ray] = cos_k[win]

        rng = np.random.default_rng([*self._noise_key, time_key(t)])
        uniform = rng.random(n_rays)
        range_noise = rng.standard_normal(n_rays)
        intensity_noise = rng.standard_normal(n_rays)
        with np.errstate(divide='ignore', invalid='ignore'):
            power = rho * cos_inc / np.square(t_best)
            p_ref = 0.1 / model.detection_range_m ** 2
            detect = (1.0 - model.dropout) / (1.0 + np.square(p_ref / np.maximum(power, 1e-30)))
        keep = ((t_best >= model.min_range_m) & (t_best <= model.max_range_m)
                & (uniform < detect))
        idx = np.flatnonzero(keep)
        dist = t_best[idx] + model.range_noise_m * range_noise[idx]
        points = np.zeros(len(idx), dtype=POINT_DTYPE)
        xyz = self._dirs_lidar[idx] * dist[:, None]
        points['x'], points['y'], points['z'] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        c = cos_inc[idx]
        scale = model.intensity_scale
        points['intensity'] = np.clip((255.0 * rho[idx] * (0.5 + 0.5 * c)
                                       + 1.5 * intensity_noise[idx]) * scale, 0.0, 255.0 * scale)
        points['ring'] = idx % n_beams
        points['time'] = tau[idx // n_beams]
        return points

    def _lidar_pairs(self, xy: np.ndarray, corners: np.ndarray, d_min: np.ndarray,
                     d_max: np.ndarray, z_lo: np.ndarray, z_hi: np.ndarray,
                     height: float, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """
        (object, ray) index pairs whose ray may hit the object, each shape (P,).

        xy (K, 2) object centres, corners (K, M, 2) footprint outline, d_min / d_max (K,)
        nearest / farthest horizontal distance (m) from the sensor ``centre`` (2,), z_lo / z_hi
        (K,) vertical extent (m, world), height: sensor z (m, world).
        """
        model = self.lidar
        n_beams, n_cols = model.beams, model.azimuth_steps
        n_obj = len(xy)
        el_hi = np.arctan2(z_hi - height, np.where(z_hi > height, d_min, d_max))
        el_lo = np.arctan2(z_lo - height, np.where(z_lo > height, d_max, d_min))
        # The footprint does not contain the sensor, so it spans less than half a turn and
        # corner azimuths relative to the centre's do not wrap.
        az_c = np.arctan2(xy[:, 1] - centre[1], xy[:, 0] - centre[0])
        az = np.arctan2(corners[..., 1] - centre[1], corners[..., 0] - centre[0])
        delta = np.mod(az - az_c[:, None] + math.pi, 2 * math.pi) - math.pi
        az_lo, az_hi = az_c + delta.min(axis=1), az_c + delta.max(axis=1)
        inside = d_min <= 0.0
        if not self._level:
            return self._sorted_pairs(az_lo, az_hi, inside, el_lo, el_hi)

        b_lo = np.searchsorted(self._elevations, el_lo, 'left')
        n_b = np.searchsorted(self._elevations, el_hi, 'right') - b_lo
        scale = n_cols / (2 * math.pi)
        first = (az_lo - self._lidar_yaw + math.pi) * scale - 0.5
        last = (az_hi - self._lidar_yaw + math.pi) * scale - 0.5
        c_lo = np.floor(first).astype(np.int64) - 1
        n_c = np.minimum(np.ceil(last).astype(np.int64) + 1 - c_lo + 1, n_cols)
        c_lo[inside], n_c[inside] = 0, n_cols
        k, local = expand(np.arange(n_obj), n_b * n_c)
        ring = b_lo[k] + local % n_b[k]
        col = (c_lo[k] + local // n_b[k]) % n_cols
        return k, col * n_beams + ring

    def _sorted_pairs(self, az_lo, az_hi, inside, el_lo, el_hi):
        """
        Like _lidar_pairs for a tilted LiDAR: azimuth ranges of the sorted rays, then elevation.

        az_lo, az_hi, el_lo, el_hi (K,): world azimuth and elevation bounds (rad) of each object,
        inside (K,): whether the sensor is within its footprint (every azimuth).
        """
        n_obj, n_rays = len(az_lo), len(self._ray_order)
        lo = np.mod(az_lo + math.pi, 2 * math.pi) - math.pi
        hi = lo + (az_hi - az_lo)
        start = np.searchsorted(self._sorted_az, lo, 'left')
        stop = np.searchsorted(self._sorted_az, np.minimum(hi, math.pi), 'right')
        # Past +pi the interval continues from -pi.
        stop_wrapped = np.where(hi > math.pi,
                                np.searchsorted(self._sorted_az, hi - 2 * math.pi, 'right'), 0)
        start[inside], stop[inside], stop_wrapped[inside] = 0, n_rays, 0
        objects = np.concatenate([np.arange(n_obj), np.arange(n_obj)])
        first = np.concatenate([start, np.zeros(n_obj, dtype=start.dtype)])
        idx, local = expand(np.arange(2 * n_obj), np.concatenate([stop - start, stop_wrapped]))
        k = objects[idx]
        ray = self._ray_order[first[idx] + local]
        el = self._ray_el[ray]
        keep = (el >= el_lo[k]) & (el <= el_hi[k])
        return k[keep], ray[keep]

    def _lidar_boxes(self, boxes, origin, centre, sweep):
        rel_v = self.ego_velocity - boxes[:, [BVX, BVY]]
        # Grow each footprint by the sensor-object motion over half a sweep: culling is done
        # once, at mid-sweep.
        grow = np.linalg.norm(rel_v, axis=1) * (0.5 * sweep) + 0.05
        cos_y, sin_y = np.cos(boxes[:, BYAW]), np.sin(boxes[:, BYAW])
        mid = boxes[:, [BX, BY]] + boxes[:, [BVX, BVY]] * (0.5 * sweep)
        d = centre - mid
        qx = cos_y * d[:, 0] + sin_y * d[:, 1]
        qy = -sin_y * d[:, 0] + cos_y * d[:, 1]
        ex, ey = boxes[:, BHX] + grow, boxes[:, BHY] + grow
        d_min = np.hypot(np.maximum(np.abs(qx) - ex, 0), np.maximum(np.abs(qy) - ey, 0))
        sx = np.array([1.0, 1.0, -1.0, -1.0])
        sy = np.array([1.0, -1.0, 1.0, -1.0])
        lx, ly = ex[:, None] * sx, ey[:, None] * sy
        corners = np.stack([mid[:, :1] + cos_y[:, None] * lx - sin_y[:, None] * ly,
                            mid[:, 1:] + sin_y[:, None] * lx + cos_y[:, None] * ly], axis=-1)
        d_max = np.linalg.norm(corners - centre, axis=-1).max(axis=1)
        near = d_min <= self.lidar.max_range_m
        boxes, rel_v, corners = boxes[near], rel_v[near], corners[near]
        cos_y, sin_y = cos_y[near], sin_y[near]
        k, ray = self._lidar_pairs(mid[near], corners, d_min[near], d_max[near],
                                   boxes[:, BZ] - boxes[:, BHZ], boxes[:, BZ] + boxes[:, BHZ],
                                   origin[2], centre)
        tau = self._tau[ray // self.lidar.beams]
        # Ray origin relative to the box centre at the column's firing time.
        px = origin[0] - boxes[k, BX] + rel_v[k, 0] * tau
        py = origin[1] - boxes[k, BY] + rel_v[k, 1] * tau
        pz = origin[2] - boxes[k, BZ]
        dirs = self._dirs_world[ray]
        dist, cos_inc = box_hits(px, py, pz, dirs, cos_y[k], sin_y[k], boxes[k, BHX],
                                 boxes[k, BHY], boxes[k, BHZ])[:2]
        hit = np.isfinite(dist)
        return ray[hit], dist[hit], k[hit], cos_inc[hit], boxes, (BRHO, BCLS)

    def _lidar_cylinders(self, cyl, origin, centre, sweep):
        rel_v = self.ego_velocity - cyl[:, [CVX, CVY]]
        grow = np.linalg.norm(rel_v, axis=1) * (0.5 * sweep) + 0.05
        mid = cyl[:, [CX, CY]] + cyl[:, [CVX, CVY]] * (0.5 * sweep)
        radius = cyl[:, CR] + grow
        dist_c = np.linalg.norm(mid - centre, axis=1)
        near = dist_c - radius <= self.lidar.max_range_m
        cyl, rel_v, mid, radius, dist_c = cyl[near], rel_v[near], mid[near], radius[near], \
            dist_c[near]
        # An octagon around the grown disc bounds its azimuth span.
        angle = np.linspace(0, 2 * math.pi, 8, endpoint=False)
        outline = mid[:, None, :] + (radius / math.cos(math.pi / 8))[:, None, None] * np.stack(
            [np.cos(angle), np.sin(angle)], axis=-1)[None]
        d_min = np.maximum(dist_c - radius / math.cos(math.pi / 8), 0.0)
        k, ray = self._lidar_pairs(mid, outline, d_min, dist_c + 1.1 * radius, cyl[:, CZ0],
                                   cyl[:, CZ1], origin[2], centre)
        tau = self._tau[ray // self.lidar.beams]
        px = origin[0] - cyl[k, CX] + rel_v[k, 0] * tau
        py = origin[1] - cyl[k, CY] + rel_v[k, 1] * tau
        dirs = self._dirs_world[ray]
        dist, cos_inc = cylinder_hits(px, py, origin[2], dirs, cyl[k, CR], cyl[k, CZ0],
                                      cyl[k, CZ1])[:2]
        hit = np.isfinite(dist)
        return ray[hit], dist[hit], k[hit], cos_inc[hit], cyl, (CRHO, CCLS)

    # ---------------------------------------------------------------- cameras

    def camera_features(self, name: str, t: float) -> np.ndarray:
        """
        Camera ``name``'s feature map at time t (s): float32 (H_f, W_f, C), row-major.

        Channel k is ``CAMERA_CHANNELS[k % 8]``: label-free appearance features of the colour
        image the camera takes of the scene as it is at t (global shutter) from the camera pose
        ego(t) x calibration, with the frame's exposure and noise (``camera_render.py``).
        """
        cam, rays, view, origin, boxes, cylinders = self._camera_view(name, t)
        return render(cam, rays, origin, boxes, cylinders, self._camera_rng(cam, t), view)

    def camera_image(self, name: str, t: float, scale: int = 4) -> np.ndarray:
        """
        Camera ``name``'s colour image at time t (s): uint8 (H_f k, W_f k, 3) RGB, k = ``scale``.

        The image ``camera_features`` computes its features from, rendered at ``scale`` (1..8)
        times the feature map each way with ``camera_render.scaled_intrinsics``: the same
        scene, the frame's exposure gain (the same draw) and sensor noise per pixel; each value
        is round(255 x the gamma-encoded level).
        """
        cam, rays, view, origin, boxes, cylinders = self._camera_view(name, t, check_scale(scale))
        rgb = image(rays, trace(rays, origin, boxes, cylinders, view), self._camera_rng(cam, t))
        return np.round(255.0 * rgb).astype(np.uint8).reshape(view.height, view.width, 3)

    def camera_surfaces(self, name: str, t: float, scale: int = 1) -> Surfaces:
        """
        Return what each pixel of camera ``name`` sees at time t (s): ``camera_render.Surfaces``.

        Per pixel (row-major) of the map (or of ``camera_image`` at ``scale``): optical depth
        (m; inf: sky), scene class (-1: sky), normal and albedo; the geometry behind
        ``camera_features``, never published (tests, evaluation).
        """
        _, rays, view, origin, boxes, cylinders = self._camera_view(name, t, check_scale(scale))
        return trace(rays, origin, boxes, cylinders, view)

    def _camera_rng(self, cam: CameraConfig, t: float) -> np.random.Generator:
        """Return the generator of camera ``cam``'s frame at t: exposure gain, then noise."""
        return np.random.default_rng([self.seed, 4, self.cameras.index(cam), time_key(t)])

    def _camera_view(self, name: str, t: float, scale: int = 1):
        """Return camera ``name``'s config, rays, grid, origin (world) and the scene at t."""
        cam = next((c for c in self.cameras if c.name == name), None)
        if cam is None:
            raise ValueError(f'unknown camera {name!r}; this drive has '
                             f'{[c.name for c in self.cameras]}')
        if (name, scale) not in self._camera_grids:
            rays, view, offset = camera_rays(cam, scale), pinhole(cam, scale), cam.pose.translation
            if self._body is not None:      # turned with the body about base_link's origin
                rays = rays @ self._body.T
                view = view._replace(rotation=self._body @ view.rotation)
                offset = self._body @ offset
            self._camera_grids[name, scale] = rays, view, np.array(offset, float)
        rays, view, offset = self._camera_grids[name, scale]
        origin = self.ego_position(t) + offset
        boxes, cylinders = self.scene(origin[0] - CAMERA_VIEW_M, origin[0] + CAMERA_VIEW_M, t)
        # Ego heading 0: base_link axes are world axes, so the rays need no further rotation.
        return cam, rays, view, origin, boxes, cylinders
