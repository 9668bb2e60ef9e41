"""
The moving road users: traffic streams (vehicles, cyclists) and pedestrians.

Traffic (:class:`Traffic`): the ``TRAFFIC`` lanes, each a stream of objects at a fixed speed,
the n-th about ``first + n spacing`` m at t = 0, each drawn from its own generator (seed, lane,
n). Pedestrians (:class:`People`), per 40 m tile from the tile's generator, each on a plan of
up to four timed knots (standing still before the first and after the last, walking straight
between them):

- walkers on the sidewalks, on two paths per side (|y| = 9.15 and 10.05 m, between the lamp
  posts and the buildings), in town tiles most of the time, now and then on the verge in the
  country: a stretch of 10-38 m within their tile, in either direction, at 1.2-1.5 m/s, timed
  to be walking when the ego passes (they stand at its ends before and after);
- crossing pedestrians, on the towns' zebra crossings (four per town; up to three people
  each, 1.3 m apart, none on 40 %): wait at the kerb (|y| = 7.5 m), walk to the
  centre line, wait 0.5-3 s, walk to the other kerb, and wait there. Each half is timed to the
  first gap in what drives on its side of the road (traffic, cyclists, and the ego, whose lane
  they leave at least ``EGO_LEAD_S`` before it comes), so nothing drives into them.

Every plan depends on the ego speed (so that walkers walk and crossers cross when the ego comes
by) and on nothing else than the seed: each frame stays a pure function of (seed, t).
"""

import math

import numpy as np

from .scene import (BHX, BHY, BHZ, box, BVX, BVY, BX, BY, BYAW, BZ, crosswalks, EGO_FRONT,
                    EGO_HALF_WIDTH, EGO_LANE_Y, EGO_REAR, in_lake, in_town, LEAD_MARGIN,
                    PEDESTRIAN, road_user, TILE, TRAFFIC)

WALK_SPEED = (1.2, 1.5)         # m/s
WALKER_PATHS = (9.15, 10.05)    # |y| (m) of the sidewalk walkers' paths
TOWN_WALKERS, COUNTRY_WALKERS = 0.75, 0.08    # chance of a walker per tile, side and path
KERB = 7.5                      # |y| (m) where crossing pedestrians wait
CROSSING_LANES = (-1.3, 0.0, 1.3)   # x (m) about a zebra crossing's centre of its three walks
CROSSING = 0.6                  # chance of a pedestrian on each
CLEAR_X = 1.2                   # a crossing half waits for whatever comes this near along x (m)
EGO_LEAD_S = 2.0                # crossers leave the ego's lane this long before it comes (s)
SLOT_S = 0.25                   # crossing start times are tried at this step (s)
NO_PLANS = (np.zeros((0, 4)), np.zeros((0, 4)), np.zeros((0, 4)), np.zeros((0, 11)))


def pedestrian(rng: np.random.Generator, x: float, y: float, yaw: float) -> list[float]:
    """Draw a standing pedestrian's box row (nuScenes' mean pedestrian: 0.73 x 0.67 x 1.77 m)."""
    return box(x, y, 0.0, rng.uniform(1.55, 1.95), rng.uniform(0.6, 0.85),
               rng.uniform(0.55, 0.75), yaw, rng.uniform(0.15, 0.45), PEDESTRIAN)


def people_at(plans, t: float) -> np.ndarray:
    """Return the box rows (P, 11) of the people on ``plans`` at time t (s), velocity included."""
    times, xs, ys, rows = plans
    rows = rows.copy()
    if not len(rows):
        return rows
    passed = np.sum(times <= t, axis=1)                 # knots at or before t
    walking = (passed >= 1) & (passed <= 3)
    seg = np.clip(passed, 1, 3)
    idx = np.arange(len(rows))
    span = np.where(walking, times[idx, seg] - times[idx, seg - 1], 1.0)
    vx = np.where(walking, (xs[idx, seg] - xs[idx, seg - 1]) / span, 0.0)
    vy = np.where(walking, (ys[idx, seg] - ys[idx, seg - 1]) / span, 0.0)
    base = np.where(passed == 0, 0, np.where(passed == 4, 3, seg - 1))
    dt = np.where(walking, t - times[idx, base], 0.0)
    rows[:, BX] = xs[idx, base] + vx * dt
    rows[:, BY] = ys[idx, base] + vy * dt
    rows[:, BVX], rows[:, BVY] = vx, vy
    return rows


class Traffic:
    """The traffic streams of a drive: lane speeds for its ego speed, objects drawn once."""

    def __init__(self, seed: int, ego_speed: float):
        """Set the lanes' speeds: the lead vehicles keep ahead of a faster ego (LEAD_MARGIN)."""
        self.seed = seed
        self.lanes = tuple((y, max(speed, ego_speed + LEAD_MARGIN) if n_min is not None
                            else speed, first, spacing, jitter, n_min, cls)
                           for y, speed, first, spacing, jitter, n_min, cls in TRAFFIC)
        self._objects: dict[tuple[int, int], list[float]] = {}

    def member(self, lane: int, n: int) -> list[float]:
        """Return the n-th object of ``lane``: its box row at t = 0."""
        key = (lane, n)
        if key not in self._objects:
            y, speed, first, spacing, jitter, _, cls = self.lanes[lane]
            rng = np.random.default_rng([self.seed, 3, lane, n + 2**32])
            x0 = first + spacing * n + rng.uniform(-jitter, jitter)
            # Heading along the lane's direction, so the velocity is (speed, 0).
            self._objects[key] = road_user(rng, cls, x0, y, 0.0 if speed > 0 else math.pi,
                                           abs(speed))
        return self._objects[key]

    def _indices(self, lane: int, x_lo: float, x_hi: float, t_lo: float, t_hi: float) -> range:
        """Return the indices of ``lane``'s objects that may be in [x_lo, x_hi] (m) then (s)."""
        _, speed, first, spacing, jitter, n_min, _ = self.lanes[lane]
        reach = jitter + 7.0                    # plus half the longest bus
        ends = [(x - speed * t - first) / spacing for x in (x_lo, x_hi) for t in (t_lo, t_hi)]
        n_lo = math.floor(min(ends) - reach / spacing)
        n_hi = math.ceil(max(ends) + reach / spacing)
        return range(n_lo if n_min is None else max(n_lo, n_min), n_hi + 1)

    def rows(self, x_lo: float, x_hi: float, t: float) -> tuple[np.ndarray, list]:
        """Return the box rows at t = 0 (n, 11) of the objects near [x_lo, x_hi] at t, and keys."""
        rows, keys = [], []
        for lane in range(len(self.lanes)):
            for n in self._indices(lane, x_lo, x_hi, t, t):
                rows.append(self.member(lane, n))
                keys.append((lane, n))
        return np.array(rows).reshape(-1, 11), keys

    def passing(self, side: float, x: float, t_lo: float, t_hi: float) -> np.ndarray:
        """Return the box rows at t = 0 of the objects on ``side`` (sign of y) that may pass x."""
        rows = [self.member(lane, n) for lane in range(len(self.lanes))
                if self.lanes[lane][0] * side > 0
                for n in self._indices(lane, x, x, t_lo, t_hi)]
        return np.array(rows).reshape(-1, 11)


class People:
    """The pedestrians of a drive, per tile: plans (knot times, x, y (P, 4), box rows (P, 11))."""

    def __init__(self, seed: int, ego_speed: float, tile, traffic: Traffic):
        """Keep what plans depend on: ``tile(k)`` gives tile k's static boxes and cylinders."""
        self.seed, self.ego_speed, self._tile, self._traffic = seed, ego_speed, tile, traffic
        self._plans: dict[int, tuple] = {}

    def plans(self, k: int) -> tuple:
        """Return the plans of tile k's people (``people_at`` evaluates them)."""
        if k not in self._plans:
            rng = np.random.default_rng([self.seed, 6, k + 2**32])
            statics = [self._tile(j) for j in (k - 1, k, k + 1)]
            boxes = np.concatenate([s[0] for s in statics])
            cylinders = np.concatenate([s[1] for s in statics])
            plans = (self._walkers(rng, k, boxes, cylinders)
                     + self._crossers(rng, k, boxes, cylinders))
            self._plans[k] = tuple(np.array(p).reshape(-1, 11 if i == 3 else 4)
                                   for i, p in enumerate(zip(*plans))) if plans else NO_PLANS
        return self._plans[k]

    def _walkers(self, rng, k, boxes, cylinders) -> list:
        plans = []
        for side in (1.0, -1.0):
            for path in WALKER_PATHS:
                draw = rng.random(6)
                person = pedestrian(rng, 0.0, side * path, 0.0 if draw[3] < 0.5 else math.pi)
                length = 10.0 + 28.0 * draw[1]
                xa = k * TILE + 0.5 + (TILE - 1.0 - length) * draw[2]
                ends = np.array([xa, xa + length])
                town = bool(np.all(in_town(ends)))
                chance = TOWN_WALKERS if town else COUNTRY_WALKERS
                if draw[0] >= chance or np.any(in_lake(ends)) or (
                        not town and np.any(in_town(ends))) or blocked(
                        boxes, cylinders, xa - 0.45, xa + length + 0.45, side * path, 0.375,
                        0.05):
                    continue
                if person[BYAW] != 0.0:
                    ends = ends[::-1]
                speed = WALK_SPEED[0] + (WALK_SPEED[1] - WALK_SPEED[0]) * draw[4]
                walk = length / speed
                start = (xa + 0.5 * length) / self.ego_speed - 3.0 - walk * draw[5]
                plans.append(([start, start + walk, start + walk, start + walk],
                              [ends[0], ends[1], ends[1], ends[1]], [side * path] * 4, person))
        return plans

    def _crossers(self, rng, k, boxes, cylinders) -> list:
        plans = []
        for centre in crosswalks(k * TILE, (k + 1) * TILE):
            for offset in CROSSING_LANES:
                draw = rng.random(5)
                x = centre + offset
                side = 1.0 if draw[1] < 0.5 else -1.0
                person = pedestrian(rng, x, side * KERB, -side * 0.5 * math.pi)
                if draw[0] >= CROSSING or blocked(boxes, cylinders, x, x, 0.0, KERB + 0.5, 0.5):
                    continue
                speed = WALK_SPEED[0] + (WALK_SPEED[1] - WALK_SPEED[0]) * draw[2]
                half = KERB / speed
                want = x / self.ego_speed - 4.0 - 12.0 * draw[3]
                # The free start nearest the wanted one, then the first after a wait at the centre.
                steps = np.arange(-80, 81)
                first = self._free(person, side, False, speed,
                                   want + SLOT_S * steps[np.argsort(np.abs(steps), kind='stable')])
                if first is None:
                    continue
                second = self._free(person, -side, True, speed, first + half + 0.5 + 2.5 * draw[4]
                                    + SLOT_S * np.arange(160))
                if second is not None:
                    plans.append(([first, first + half, second, second + half], [x] * 4,
                                  [side * KERB, 0.0, 0.0, -side * KERB], person))
        return plans

    def _free(self, person, side: float, outward: bool, speed: float,
              starts: np.ndarray) -> float | None:
        """
        Return the first of ``starts`` (s) at which ``person`` can walk the ``side`` half, or None.

        The half runs from the kerb to the centre line (outward: back) at ``speed`` (m/s); it is
        free when nothing moving on that side (and the ego on its own) comes within CLEAR_X of
        the person's x while the person is within its lateral extent.
        """
        x, reach = person[BX], person[BHX]                 # heading across: length along y
        t_lo, t_hi = float(starts.min()) - 5.0, float(starts.max()) + KERB / speed + 5.0
        rows = self._traffic.passing(side, x, t_lo, t_hi)
        # When each object covers x +- CLEAR_X, and its |y| band.
        with np.errstate(divide='ignore'):
            a = (x - CLEAR_X - rows[:, BHX] - rows[:, BX]) / rows[:, BVX]
            b = (x + CLEAR_X + rows[:, BHX] - rows[:, BX]) / rows[:, BVX]
        come, leave = np.minimum(a, b), np.maximum(a, b)
        near = np.abs(rows[:, BY]) - rows[:, BHY] - reach
        far = np.abs(rows[:, BY]) + rows[:, BHY] + reach
        if side * EGO_LANE_Y > 0:
            v = self.ego_speed
            come = np.append(come, (x - CLEAR_X - EGO_FRONT) / v - EGO_LEAD_S)
            leave = np.append(leave, (x + CLEAR_X - EGO_REAR) / v + 0.5)
            near = np.append(near, abs(EGO_LANE_Y) - EGO_HALF_WIDTH - reach)
            far = np.append(far, abs(EGO_LANE_Y) + EGO_HALF_WIDTH + reach)
        near, far = np.clip(near, 0.0, KERB), np.clip(far, 0.0, KERB)
        if outward:
            enter, exit_ = near / speed, far / speed
        else:
            enter, exit_ = (KERB - far) / speed, (KERB - near) / speed
        inside = starts[:, None] + enter[None]
        outside = starts[:, None] + exit_[None]
        free = np.all((outside < come[None]) | (inside > leave[None]) | (near >= far)[None],
                      axis=1)
        hits = np.flatnonzero(free)
        return float(starts[hits[0]]) if len(hits) else None


def blocked(boxes: np.ndarray, cylinders: np.ndarray, x_lo: float, x_hi: float, y: float,
            half_y: float, margin: float = 0.5) -> bool:
    """Whether a static object below 2 m comes within ``margin`` of [x_lo, x_hi] x y +- half_y."""
    cos_y, sin_y = np.abs(np.cos(boxes[:, BYAW])), np.abs(np.sin(boxes[:, BYAW]))
    ex = cos_y * boxes[:, BHX] + sin_y * boxes[:, BHY] + margin
    ey = sin_y * boxes[:, BHX] + cos_y * boxes[:, BHY] + margin
    low = boxes[:, BZ] - boxes[:, BHZ] < 2.0
    hit = (low & (boxes[:, BX] + ex > x_lo) & (boxes[:, BX] - ex < x_hi)
           & (np.abs(boxes[:, BY] - y) < ey + half_y))
    reach = cylinders[:, 4] + margin                 # scene.CR
    near = ((cylinders[:, 0] + reach > x_lo) & (cylinders[:, 0] - reach < x_hi)
            & (np.abs(cylinders[:, 1] - y) < reach + half_y))
    return bool(np.any(hit) or np.any(near))
