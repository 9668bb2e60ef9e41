"""
A deterministic synthetic drive, written as a rosbag2 MCAP bag: the project's default data.

The ego vehicle drives at 10 m/s along a straight four-lane road (world x axis; REP-103 axes,
flat ground at z = 0) in its right-hand lane (y = -1.75 m), from x = 0 m at t = 0 s; base_link
sits on the ground, heading +x. The road repeats every 240 m:

- towns at x in [40, 180) m + 240 k (k >= 0): building rows on both sides, parked cars in the
  outer lanes, lamp posts, and a 40 m underpass at x in [60, 100) m + 240 k;
- open country: grass verges, utility poles, scattered farm buildings, cars in lay-bys;
- a causeway across a lake at x in [-45, 25) m + 240 k: water returns almost nothing.

The default 8 s drive thus goes from the causeway over farmland into the town and the underpass,
and the LiDAR returns per frame climb from about 29k to 116k (64 x 2048 rays at most). Moving
traffic uses the two inner lanes: oncoming vehicles at 11 m/s, and vehicles ahead of the ego at
10.6 m/s. The static layout is generated in 40 m tiles, the traffic per vehicle and the noise
per frame, each from its own seeded generator, so every frame is a pure function of (seed, t)
whatever order frames are asked for in.

Sensors, all taken from the :class:`~jax_perception_node.config.PipelineConfig`:

- LiDAR (frame ``lidar``, mounted by ``cfg.lidar``): a spinning multi-beam scanner
  (:class:`LidarModel`), ray-cast analytically against the ground plane, boxes and vertical
  cylinders. Each column fires at its own time within the sweep from where the sensor is then
  and hits the scene as it is then, and points are reported in the LiDAR frame at their firing
  time, as raw drivers do (not deskewed). Stamp = sweep start; per-point ``time`` = seconds
  after the stamp.
- Cameras (frame ``<name>_optical``, mounted by ``cfg.cameras``): the scene rendered at
  feature-map resolution with the configured intrinsics, one ray per pixel centre at integer
  pixel coordinates, as a ``float32[H_f, W_f, C]`` feature map (channels in
  :data:`CAMERA_CHANNELS`).

Only NumPy and ``rosbags`` are used: no ROS installation, no JAX.
"""

from dataclasses import dataclass, replace
import math
import os
from pathlib import Path
import shutil
from typing import Callable, Mapping

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import get_typestore, Stores

from .config import CameraConfig, PipelineConfig
from .topics import camera_topic, POINTCLOUD_TOPIC

LIDAR_FRAME_ID = 'lidar'
EPOCH_NS = 1_700_000_000 * 10**9       # stamp of t = 0: fixed, so bags are byte-reproducible

# PointCloud2 layout: little-endian, 2 padding bytes after ring keep time 4-byte aligned.
POINT_FIELDS = (('x', 0, 7), ('y', 4, 7), ('z', 8, 7), ('intensity', 12, 7),
                ('ring', 16, 4), ('time', 20, 7))     # (name, offset, PointField datatype)
POINT_STEP = 24
POINT_DTYPE = np.dtype({'names': [f[0] for f in POINT_FIELDS],
                        'formats': ['<f4', '<f4', '<f4', '<f4', '<u2', '<f4'],
                        'offsets': [f[1] for f in POINT_FIELDS], 'itemsize': POINT_STEP})

# Camera feature channels: 1 / optical depth (1/m, 0 for sky), hit height above ground (m, 0 for
# ground and sky), one-hot classes ground / vehicle / pole / wall (buildings, underpass) / sky,
# and a grey shading (albedo x sun, 0..1). With C != 8 configured channels, channel k holds
# CAMERA_CHANNELS[k % 8].
CAMERA_CHANNELS = ('inverse_depth', 'height', 'ground', 'vehicle', 'pole', 'wall', 'sky',
                   'shading')

# Classes (also the camera one-hot channel minus 2).
GROUND, VEHICLE, POLE, WALL = 0, 1, 2, 3

# Scene layout, world frame (m, m/s).
EGO_SPEED = 10.0
EGO_LANE_Y = -1.75
ROAD_HALF_WIDTH = 7.0
TOWN_START = 40.0
TOWN_LENGTH = 140.0
TOWN_PERIOD = 240.0
UNDERPASS_OFFSET = 40.0          # underpass centre after the town entrance
UNDERPASS_HALF_LENGTH = 20.0
LAKE_START, LAKE_END = 15.0, 85.0   # m after a town's end: the causeway
CAUSEWAY_HALF_WIDTH = 8.5
TILE = 40.0
CAMERA_VIEW_M = 150.0         # objects further than this are not rendered (ground still is)
# Traffic lanes: (y, speed, first x at t = 0, spacing, jitter, lowest vehicle index or None).
TRAFFIC = ((1.75, -11.0, 15.0, 42.0, 8.0, None),
           (EGO_LANE_Y, 10.6, 22.0, 70.0, 5.0, 0))   # ahead of the ego only: never caught up

# Ground reflectivity (also the camera albedo).
ASPHALT, PAINT, SIDEWALK, GRAVEL, GRASS, WATER = 0.07, 0.55, 0.25, 0.18, 0.20, 0.02
SUN = np.array([0.35, 0.25, 0.9]) / np.linalg.norm([0.35, 0.25, 0.9])

# Object rows: boxes (yawed about z) and vertical cylinders; positions at t = 0 plus velocity.
BX, BY, BZ, BVX, BVY, BHX, BHY, BHZ, BYAW, BRHO, BCLS = range(11)
CX, CY, CVX, CVY, CR, CZ0, CZ1, CRHO, CCLS = range(9)
_NO_BOXES = np.zeros((0, 11))
_NO_CYLINDERS = np.zeros((0, 9))


@dataclass(frozen=True)
class LidarModel:
    """
    A spinning multi-beam LiDAR: beam layout, range limits, noise and return statistics.

    Beams are evenly spaced in elevation (deg above the LiDAR's xy plane), ring 0 the lowest.
    Each revolution fires ``azimuth_steps`` columns, counter-clockwise seen from above, starting
    behind the sensor (azimuth -180 deg, column c at -180 + 360 (c + 0.5) / azimuth_steps deg)
    at ``rotation_hz``: column c fires c / (azimuth_steps * rotation_hz) s after the stamp.
    A ray returns its nearest hit in [min_range_m, max_range_m], with Gaussian range noise
    (std ``range_noise_m``, m). The return is detected with probability
    (1 - dropout) / (1 + (P_ref / P)^2), where P = rho cos(incidence) / r^2 is the received power
    and P_ref = 0.1 / detection_range_m^2: a 10 % reflective target seen head-on at
    ``detection_range_m`` is detected about half the time. Seen from 1.8 m, dark asphalt fades
    out beyond ~13 m and grass beyond ~18 m, while walls return out to 60-80 m.
    Intensity is 0..255: 255 rho (0.5 + 0.5 cos(incidence)) plus a little noise.
    """

    beams: int = 64
    azimuth_steps: int = 2048
    min_elevation_deg: float = -15.0
    max_elevation_deg: float = 15.0
    min_range_m: float = 1.0
    max_range_m: float = 100.0
    range_noise_m: float = 0.02
    dropout: float = 0.02
    detection_range_m: float = 40.0
    rotation_hz: float = 10.0

    def __post_init__(self):
        """Reject layouts and statistics that cannot describe a sensor."""
        if self.beams < 1 or self.azimuth_steps < 8:
            raise ValueError(f'LidarModel: need beams >= 1 and azimuth_steps >= 8, got '
                             f'{self.beams} and {self.azimuth_steps}')
        if not -90.0 < self.min_elevation_deg <= self.max_elevation_deg < 90.0:
            raise ValueError('LidarModel: need -90 < min_elevation_deg <= max_elevation_deg < 90')
        if not 0.0 <= self.min_range_m < self.max_range_m:
            raise ValueError('LidarModel: need 0 <= min_range_m < max_range_m')
        if self.range_noise_m < 0 or not 0.0 <= self.dropout < 1.0:
            raise ValueError('LidarModel: need range_noise_m >= 0 and 0 <= dropout < 1')
        if self.detection_range_m <= 0 or self.rotation_hz <= 0:
            raise ValueError('LidarModel: detection_range_m and rotation_hz must be > 0')

    def elevations(self) -> np.ndarray:
        """Elevation of every beam (rad), shape (beams,), ascending: index = ring."""
        return np.radians(np.linspace(self.min_elevation_deg, self.max_elevation_deg,
                                      self.beams))

    def azimuths(self) -> np.ndarray:
        """Azimuth of every column (rad, LiDAR frame), shape (azimuth_steps,), in firing order."""
        return -math.pi + 2.0 * math.pi * (np.arange(self.azimuth_steps) + 0.5) \
            / self.azimuth_steps


class SyntheticDrive:
    """
    The synthetic scene and its sensors: LiDAR sweeps and camera feature maps at any time.

    ``t`` is seconds since the start of the drive (bag stamp = ``EPOCH_NS`` + t). ``num_cameras``
    keeps the first N configured cameras (None: all, 0: LiDAR only).
    """

    def __init__(self, cfg: PipelineConfig, seed: int = 0, num_cameras: int | None = None,
                 lidar: LidarModel = LidarModel()):
        """Set up the sensors; raises ValueError for a bad seed or camera count."""
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
        self.cfg = cfg
        self.seed = int(seed)
        self.lidar = lidar
        self.cameras: tuple[CameraConfig, ...] = tuple(cfg.cameras[:num_cameras])
        self.ego_velocity = np.array([EGO_SPEED, 0.0])

        self._lidar_rot = cfg.lidar.rotation_matrix()
        self._lidar_trans = np.array(cfg.lidar.translation, dtype=float)
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
        self._tau = np.arange(lidar.azimuth_steps) / (lidar.azimuth_steps * lidar.rotation_hz)

        self._camera_rays = {}
        for cam in self.cameras:
            v, u = np.mgrid[0:cam.height, 0:cam.width].astype(float)
            # Optical z = 1: the ray parameter of a hit is its optical depth.
            rays = np.stack([(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy,
                             np.ones_like(u)], axis=-1).reshape(-1, 3)
            self._camera_rays[cam.name] = (cam, rays @ cam.pose.rotation_matrix().T)
        self._tiles: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._vehicles: dict[tuple[int, int], list[float]] = {}

    # ---------------------------------------------------------------- ego and scene layout

    def ego_position(self, t: float) -> np.ndarray:
        """Position (m) of base_link in the world at time t (s), shape (3,); heading is +x."""
        return np.array([EGO_SPEED * t, EGO_LANE_Y, 0.0])

    def scene(self, x_lo: float, x_hi: float, t: float) -> tuple[np.ndarray, np.ndarray]:
        """
        Boxes (n, 11) and cylinders (m, 9) near world x in [x_lo, x_hi] at time t (s).

        Rows are in the world frame with positions at time t: boxes ``x, y, z`` (centre, m),
        ``vx, vy`` (m/s), half sizes ``hx, hy, hz`` (m, box frame), ``yaw`` (rad), reflectivity,
        class; cylinders ``x, y, vx, vy, radius, z0, z1, reflectivity, class``. Every object
        reaching into the interval is included, and some beyond it.
        """
        tiles = range(math.floor(x_lo / TILE) - 1, math.floor(x_hi / TILE) + 1)
        parts = [self._tile(k) for k in tiles]
        boxes = [p[0] for p in parts] + [self._traffic(x_lo - 20.0, x_hi + 20.0, t)]
        boxes = np.concatenate(boxes)
        cylinders = np.concatenate([p[1] for p in parts])
        boxes[:, BX] += boxes[:, BVX] * t
        boxes[:, BY] += boxes[:, BVY] * t
        cylinders[:, CX] += cylinders[:, CVX] * t
        cylinders[:, CY] += cylinders[:, CVY] * t
        return boxes, cylinders

    def _tile(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k not in self._tiles:
            self._tiles[k] = _make_tile(np.random.default_rng([self.seed, 1, k + 2**32]), k)
        return self._tiles[k]

    def _traffic(self, x_lo: float, x_hi: float, t: float) -> np.ndarray:
        rows = []
        for lane, (y, speed, first, spacing, jitter, n_min) in enumerate(TRAFFIC):
            n_lo = math.floor((x_lo - speed * t - first - jitter) / spacing)
            n_hi = math.ceil((x_hi - speed * t - first + jitter) / spacing)
            if n_min is not None:
                n_lo = max(n_lo, n_min)
            for n in range(n_lo, n_hi + 1):
                key = (lane, n)
                if key not in self._vehicles:
                    rng = np.random.default_rng([self.seed, 3, lane, n + 2**32])
                    x0 = first + spacing * n + rng.uniform(-jitter, jitter)
                    self._vehicles[key] = _vehicle(rng, x0, y, 0.0 if speed > 0 else math.pi,
                                                   speed)
                rows.append(self._vehicles[key])
        return np.array(rows).reshape(-1, 11)

    # ---------------------------------------------------------------- LiDAR

    def lidar_frame(self, t: float) -> np.ndarray:
        """
        One LiDAR sweep starting at time t (s): structured array of ``POINT_DTYPE``, shape (N,).

        Fields x, y, z (m, LiDAR frame at each point's firing time), intensity (0..255), ring
        (beam index, 0 = lowest), time (s after t, within one rotation period); float32 except
        ring (uint16). Points are in firing order; misses (sky, out of range, undetected) are
        absent, so N varies with the scene.
        """
        model = self.lidar
        n_beams, n_cols = model.beams, model.azimuth_steps
        n_rays = n_beams * n_cols
        dirs = self._dirs_world
        tau = self._tau
        sweep = 1.0 / model.rotation_hz
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
        rho[ground] = _ground_reflectivity(at[:, 0], at[:, 1])
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

        rng = np.random.default_rng([self.seed, 2, _time_key(t)])
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
        points['intensity'] = np.clip(255.0 * rho[idx] * (0.5 + 0.5 * c)
                                      + 1.5 * intensity_noise[idx], 0.0, 255.0)
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
        k, local = _expand(np.arange(n_obj), n_b * n_c)
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
        idx, local = _expand(np.arange(2 * n_obj), np.concatenate([stop - start, stop_wrapped]))
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
        dist, cos_inc = _box_hits(px, py, pz, dirs, cos_y[k], sin_y[k], boxes[k, BHX],
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
        dist, cos_inc = _cylinder_hits(px, py, origin[2], dirs, cyl[k, CR], cyl[k, CZ0],
                                       cyl[k, CZ1])[:2]
        hit = np.isfinite(dist)
        return ray[hit], dist[hit], k[hit], cos_inc[hit], cyl, (CRHO, CCLS)

    # ---------------------------------------------------------------- cameras

    def camera_features(self, name: str, t: float) -> np.ndarray:
        """
        Camera ``name``'s feature map at time t (s): float32 (H_f, W_f, C), row-major.

        Channel k is ``CAMERA_CHANNELS[k % 8]``; the scene is rendered as it is at t (global
        shutter) from the camera pose ego(t) x calibration.
        """
        if name not in self._camera_rays:
            raise ValueError(f'unknown camera {name!r}; this drive has '
                             f'{[c.name for c in self.cameras]}')
        cam, rays_base = self._camera_rays[name]
        origin = self.ego_position(t) + np.array(cam.pose.translation)
        dirs = rays_base                                   # ego heading 0: base = world axes
        n_rays = len(dirs)
        forward = dirs.mean(axis=0)
        forward /= np.linalg.norm(forward)
        # Culling behind the image plane holds only while every ray points ahead of it.
        cull = bool(np.all(dirs @ forward > 0))
        boxes, cylinders = self.scene(origin[0] - CAMERA_VIEW_M, origin[0] + CAMERA_VIEW_M, t)

        depth = np.full(n_rays, np.inf)
        down = dirs[:, 2] < 0
        if origin[2] > 0:
            depth[down] = origin[2] / -dirs[down, 2]
        ground = np.isfinite(depth)
        hit_xy = origin[:2] + np.where(ground[:, None], depth[:, None], 0.0) * dirs[:, :2]
        albedo = np.where(ground, _ground_reflectivity(hit_xy[:, 0], hit_xy[:, 1]), 0.0)
        normal = np.zeros((n_rays, 3))
        normal[:, 2] = 1.0
        cls = np.where(ground, GROUND, -1).astype(np.int8)

        hits = []
        if len(boxes):
            radius = np.linalg.norm(boxes[:, [BHX, BHY, BHZ]], axis=1)
            rel = boxes[:, [BX, BY, BZ]] - origin
            seen = ((np.linalg.norm(rel, axis=1) - radius < CAMERA_VIEW_M)
                    & ((rel @ forward > -radius) | (not cull)))
            boxes = boxes[seen]
            k = np.repeat(np.arange(len(boxes)), n_rays)
            ray = np.tile(np.arange(n_rays), len(boxes))
            cos_y, sin_y = np.cos(boxes[k, BYAW]), np.sin(boxes[k, BYAW])
            dist, _, nrm = _box_hits(origin[0] - boxes[k, BX], origin[1] - boxes[k, BY],
                                     origin[2] - boxes[k, BZ], dirs[ray], cos_y, sin_y,
                                     boxes[k, BHX], boxes[k, BHY], boxes[k, BHZ])
            hits.append((ray, dist, k, nrm, boxes, (BRHO, BCLS)))
        if len(cylinders):
            rel = np.column_stack([cylinders[:, CX] - origin[0], cylinders[:, CY] - origin[1]])
            reach = np.maximum((cylinders[:, CZ0] - origin[2]) * forward[2],
                               (cylinders[:, CZ1] - origin[2]) * forward[2])
            seen = ((np.linalg.norm(rel, axis=1) - cylinders[:, CR] < CAMERA_VIEW_M)
                    & ((rel @ forward[:2] + reach > -cylinders[:, CR]) | (not cull)))
            cylinders = cylinders[seen]
            k = np.repeat(np.arange(len(cylinders)), n_rays)
            ray = np.tile(np.arange(n_rays), len(cylinders))
            dist, _, nrm = _cylinder_hits(origin[0] - cylinders[k, CX],
                                          origin[1] - cylinders[k, CY], origin[2], dirs[ray],
                                          cylinders[k, CR], cylinders[k, CZ0], cylinders[k, CZ1])
            hits.append((ray, dist, k, nrm, cylinders, (CRHO, CCLS)))
        for ray, dist, *_ in hits:
            np.minimum.at(depth, ray, dist)
        for ray, dist, k, nrm, rows, col in hits:
            win = (dist == depth[ray]) & np.isfinite(dist)
            r = ray[win]
            albedo[r] = rows[k[win], col[0]]
            cls[r] = rows[k[win], col[1]]
            normal[r] = nrm[win]

        sky = ~np.isfinite(depth)
        feats = np.zeros((n_rays, len(CAMERA_CHANNELS)))
        with np.errstate(divide='ignore'):
            feats[:, 0] = np.where(sky, 0.0, 1.0 / depth)
        height = origin[2] + np.where(sky, 0.0, depth) * dirs[:, 2]
        feats[:, 1] = np.where(sky | (cls == GROUND), 0.0, np.maximum(height, 0.0))
        for c in (GROUND, VEHICLE, POLE, WALL):
            feats[:, 2 + c] = cls == c
        feats[:, 6] = sky
        rng = np.random.default_rng([self.seed, 4, self.cameras.index(cam), _time_key(t)])
        shade = albedo * (0.3 + 0.7 * np.maximum(normal @ SUN, 0.0)) \
            + 0.01 * rng.standard_normal(n_rays)
        feats[:, 7] = np.where(sky, 0.9, np.clip(shade, 0.0, 1.0))
        feats = feats.reshape(cam.height, cam.width, -1)
        return np.ascontiguousarray(
            feats[..., np.arange(cam.channels) % len(CAMERA_CHANNELS)], dtype=np.float32)


# -------------------------------------------------------------------- geometry kernels


def _expand(ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repeat each id counts times, with a running index 0..count-1 within each, shapes (sum,)."""
    counts = np.maximum(counts, 0)
    rep = np.repeat(ids, counts)
    local = np.arange(rep.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return rep, local


def _box_hits(px, py, pz, dirs, cos_y, sin_y, hx, hy, hz):
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


def _cylinder_hits(px, py, oz, dirs, radius, z0, z1):
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


# -------------------------------------------------------------------- scene content


def _in_town(x):
    """Whether world x (m, scalar or array) lies in a town stretch."""
    return (np.asarray(x) >= TOWN_START) & (np.mod(np.asarray(x) - TOWN_START, TOWN_PERIOD)
                                            < TOWN_LENGTH)


def _in_lake(x):
    """Whether world x (m, scalar or array) lies where the road crosses a lake on a causeway."""
    u = np.mod(np.asarray(x) - TOWN_START, TOWN_PERIOD) - TOWN_LENGTH
    return (u >= LAKE_START) & (u < LAKE_END)


def _underpass_centres(x_lo: float, x_hi: float) -> list[float]:
    """World x (m) of underpass centres in [x_lo, x_hi)."""
    first = TOWN_START + UNDERPASS_OFFSET
    n_lo = max(0, math.ceil((x_lo - first) / TOWN_PERIOD))
    n_hi = math.floor((x_hi - first) / TOWN_PERIOD)
    return [first + n * TOWN_PERIOD for n in range(n_lo, n_hi + 1) if first + n * TOWN_PERIOD
            < x_hi]


def _near_underpass(x0: float, x1: float, margin: float) -> bool:
    """Whether [x0, x1] (m) comes within margin of an underpass."""
    reach = UNDERPASS_HALF_LENGTH + margin
    return bool(_underpass_centres(x0 - reach, x1 + reach + 1e-9))


def _ground_reflectivity(x, y):
    """Ground reflectivity at world (x, y) (m, arrays): asphalt, paint, sidewalk, gravel, grass."""
    ay = np.abs(y)
    rho = np.where(_in_town(x), SIDEWALK, np.where(ay < ROAD_HALF_WIDTH + 0.8, GRAVEL, GRASS))
    rho = np.where(_in_lake(x) & (ay >= CAUSEWAY_HALF_WIDTH), WATER, rho)
    rho = np.where(ay < ROAD_HALF_WIDTH, ASPHALT, rho)
    edge = (ay >= ROAD_HALF_WIDTH - 0.25) & (ay < ROAD_HALF_WIDTH - 0.1)
    centre = (ay >= 0.04) & (ay < 0.16)                            # double solid line
    dashed = (np.abs(ay - 3.5) < 0.075) & (np.mod(x, 9.0) < 3.0)
    return np.where(edge | centre | dashed, PAINT, rho)


def _box(x, y, z0, z1, length, width, yaw, rho, cls, vx=0.0, vy=0.0):
    """One box row: centre (x, y), vertical extent [z0, z1], size along its yawed axes (m)."""
    return [x, y, 0.5 * (z0 + z1), vx, vy, 0.5 * length, 0.5 * width, 0.5 * (z1 - z0), yaw,
            rho, cls]


def _vehicle(rng: np.random.Generator, x: float, y: float, yaw: float,
             speed: float = 0.0) -> list[float]:
    """Draw a car (70 %), van (20 %) or truck (10 %) box row with 0.25 m ground clearance."""
    kind = rng.random()
    if kind < 0.7:
        length, width, height = rng.uniform(4.2, 4.9), rng.uniform(1.75, 1.9), rng.uniform(
            1.4, 1.65)
    elif kind < 0.9:
        length, width, height = rng.uniform(5.0, 5.8), rng.uniform(1.95, 2.05), rng.uniform(
            2.0, 2.5)
    else:
        length, width, height = rng.uniform(8.0, 11.0), 2.5, rng.uniform(3.2, 3.8)
    return _box(x, y, 0.25, height, length, width, yaw, rng.uniform(0.15, 0.6), VEHICLE,
                speed * math.cos(yaw), speed * math.sin(yaw))


def _make_tile(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
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
            if _in_town(x) and _in_town(x + length) and not _near_underpass(x, x + length, 4.0):
                boxes.append(_box(x + 0.5 * length, side * (10.5 + 0.5 * depth), 0.0, height,
                                  length, depth, 0.0, rho, WALL))
            x += length + gap
        # Parking lanes (outer lanes) in towns.
        x = x0 + rng.uniform(0.0, 3.0)
        while x < x1:
            car = _vehicle(rng, 0.0, side * 5.3 + rng.normal(0.0, 0.08),
                           rng.normal(0.0, 0.04) + (0.0 if side < 0 else math.pi))
            occupied = rng.random() < 0.8
            length = 2.0 * car[BHX]
            if occupied and _in_town(x) and _in_town(x + length) and x + length < x1:
                car[BX] = x + 0.5 * length
                boxes.append(car)
            x += length + rng.uniform(1.0, 3.5)
        # Lamp posts in towns, staggered between the sides.
        for n in range(math.ceil((x0 - 11.0 * (side < 0)) / 22.0),
                       math.ceil((x1 - 11.0 * (side < 0)) / 22.0)):
            px = 22.0 * n + 11.0 * (side < 0)
            if _in_town(px) and not _near_underpass(px, px, 1.0):
                cylinders.append([px, side * 7.6, 0.0, 0.0, 0.12, 0.0, 7.0, 0.3, POLE])
    # Utility poles along the open road, left side.
    for n in range(math.ceil((x0 - 5.0) / 38.0), math.ceil((x1 - 5.0) / 38.0)):
        px = 38.0 * n + 5.0
        if not _in_town(px):
            cylinders.append([px, 8.0, 0.0, 0.0, 0.14, 0.0, 9.0, 0.3, POLE])
    # Open country: now and then a farm building or a car in a lay-by.
    draw = rng.random(6)
    xc = x0 + TILE * draw[1]
    length, depth, height = 10.0 + 14.0 * draw[2], 8.0 + 6.0 * draw[3], 4.0 + 5.0 * draw[4]
    side = 1.0 if draw[5] < 0.5 else -1.0
    span = xc + np.array([-length, 0.0, length])
    if draw[0] < 0.4 and not np.any(_in_town(span) | _in_lake(span)):
        boxes.append(_box(xc, side * rng.uniform(22.0, 45.0), 0.0, height, length, depth,
                          rng.uniform(-0.5, 0.5), rng.uniform(0.3, 0.55), WALL))
    draw = rng.random(3)
    xc = x0 + 5.0 + (TILE - 10.0) * draw[1]
    car = _vehicle(rng, xc, (1.0 if draw[2] < 0.5 else -1.0) * 8.6, rng.normal(0.0, 0.15))
    span = xc + np.array([-6.0, 0.0, 6.0])
    if draw[0] < 0.35 and not np.any(_in_town(span) | _in_lake(span)):
        boxes.append(car)
    # The underpass: a deck over the road and a wall on either side.
    for xb in _underpass_centres(x0, x1):
        boxes.append(_box(xb, 0.0, 5.0, 6.5, 2 * UNDERPASS_HALF_LENGTH, 60.0, 0.0, 0.35, WALL))
        for side in (1.0, -1.0):
            boxes.append(_box(xb, side * 8.3, 0.0, 5.0, 2 * UNDERPASS_HALF_LENGTH - 2.0, 0.8, 0.0,
                              0.35, WALL))
    return (np.array(boxes).reshape(-1, 11) if boxes else _NO_BOXES,
            np.array(cylinders).reshape(-1, 9) if cylinders else _NO_CYLINDERS)


def _time_key(t: float) -> int:
    """Map time t (s) to a non-negative integer at 1 us resolution, to seed per-frame noise."""
    return int(round(t * 1e6)) + 2**40


# -------------------------------------------------------------------- bag writing


def camera_stamp_offset(index: int) -> float:
    """Stamp offset (s) of the index-th camera against the LiDAR clock: 4, 13, 22, 31, 6 ms..."""
    return 0.004 + 0.009 * (index % 4) + 0.002 * (index // 4 % 4)


def write_sample_bag(path: str | os.PathLike, cfg: PipelineConfig, seconds: float = 8.0,
                     num_cameras: int | None = None, seed: int = 0, lidar_hz: float = 10.0,
                     camera_hz: float | Mapping[str, float] = 12.0,
                     progress: Callable[[int, int], None] | None = None,
                     lidar: LidarModel | None = None) -> dict:
    """
    Write the synthetic drive as a rosbag2 (version 9, MCAP) directory at ``path``.

    LiDAR sweeps go to :data:`POINTCLOUD_TOPIC` (sensor_msgs/PointCloud2, frame ``lidar``,
    fields :data:`POINT_FIELDS`, point_step 24, little-endian, is_dense) at ``lidar_hz``, which
    is also the rotation rate; frames = round(seconds * lidar_hz) with stamps k / lidar_hz.
    Camera ``name`` goes to ``camera_topic(name)`` (sensor_msgs/Image, ``32FC<C>``, frame
    ``<name>_optical``) at ``camera_hz`` (Hz, one rate or a mapping name -> rate), with stamps
    offset by :func:`camera_stamp_offset` and never later than half a LiDAR period after the
    last sweep. Bag time = header stamp = ``EPOCH_NS`` + t. The bytes depend only on the
    arguments (of the path, its last component, which names the .mcap file) and the rosbags
    version. ``progress(done, total)`` is called after every message.
    Raises FileExistsError if ``path`` exists, ValueError on bad arguments; a failed write
    leaves nothing behind. Returns a summary: path, seconds, seed, frames, camera_messages
    (name -> count), min_points, max_points, mean_points (per LiDAR frame).
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f'{path} already exists')
    for key, value in (('seconds', seconds), ('lidar_hz', lidar_hz)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f'{key} must be a positive number, got {value!r}')
    model = replace(lidar or LidarModel(), rotation_hz=float(lidar_hz))
    drive = SyntheticDrive(cfg, seed=seed, num_cameras=num_cameras, lidar=model)
    rates = {}
    for cam in drive.cameras:
        if isinstance(camera_hz, Mapping) and cam.name not in camera_hz:
            raise ValueError(f'camera_hz has no rate for camera {cam.name!r}')
        rate = camera_hz[cam.name] if isinstance(camera_hz, Mapping) else camera_hz
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f'camera_hz for {cam.name} must be a positive number, got {rate!r}')
        rates[cam.name] = float(rate)

    frames = max(1, int(round(seconds * lidar_hz)))
    events = [(int(round(i * 1e9 / lidar_hz)), 0, '') for i in range(frames)]
    end_ns = (frames - 0.5) * 1e9 / lidar_hz
    for index, cam in enumerate(drive.cameras):
        offset, n = camera_stamp_offset(index), 0
        while (stamp := int(round((offset + n / rates[cam.name]) * 1e9))) <= end_ns:
            events.append((stamp, 1 + index, cam.name))
            n += 1
    events.sort()

    ts = get_typestore(Stores.ROS2_JAZZY)
    point_cloud2 = ts.types['sensor_msgs/msg/PointCloud2']
    point_field = ts.types['sensor_msgs/msg/PointField']
    image = ts.types['sensor_msgs/msg/Image']
    header = ts.types['std_msgs/msg/Header']
    time_msg = ts.types['builtin_interfaces/msg/Time']
    fields = [point_field(name=name, offset=offset, datatype=datatype, count=1)
              for name, offset, datatype in POINT_FIELDS]

    def make_header(stamp_ns: int, frame_id: str):
        return header(stamp=time_msg(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9),
                      frame_id=frame_id)

    counts = {cam.name: 0 for cam in drive.cameras}
    points_per_frame = []
    try:
        with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            lidar_conn = writer.add_connection(POINTCLOUD_TOPIC, point_cloud2.__msgtype__,
                                               typestore=ts)
            camera_conns = {cam.name: writer.add_connection(camera_topic(cam.name),
                                                            image.__msgtype__, typestore=ts)
                            for cam in drive.cameras}
            for done, (rel_ns, _, name) in enumerate(events, start=1):
                stamp = EPOCH_NS + rel_ns
                t = rel_ns * 1e-9
                if not name:
                    points = drive.lidar_frame(t)
                    points_per_frame.append(len(points))
                    msg = point_cloud2(
                        header=make_header(stamp, LIDAR_FRAME_ID), height=1,
                        width=len(points), fields=fields, is_bigendian=False,
                        point_step=POINT_STEP, row_step=POINT_STEP * len(points),
                        data=points.view(np.uint8).reshape(-1), is_dense=True)
                    writer.write(lidar_conn, stamp,
                                 ts.serialize_cdr(msg, point_cloud2.__msgtype__))
                else:
                    feats = drive.camera_features(name, t).astype('<f4', copy=False)
                    height, width, channels = feats.shape
                    msg = image(header=make_header(stamp, f'{name}_optical'), height=height,
                                width=width, encoding=f'32FC{channels}', is_bigendian=0,
                                step=width * channels * 4,
                                data=feats.reshape(-1).view(np.uint8))
                    writer.write(camera_conns[name], stamp,
                                 ts.serialize_cdr(msg, image.__msgtype__))
                    counts[name] += 1
                if progress is not None:
                    progress(done, len(events))
    except BaseException:
        # The path did not exist before: whatever is there now is our partial bag.
        shutil.rmtree(path, ignore_errors=True)
        raise
    return {
        'path': str(path),
        'seconds': frames / lidar_hz,
        'seed': drive.seed,
        'frames': frames,
        'camera_messages': counts,
        'min_points': min(points_per_frame),
        'max_points': max(points_per_frame),
        'mean_points': round(float(np.mean(points_per_frame)), 1),
    }
