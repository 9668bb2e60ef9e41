"""The sample drive's four object classes: cars, large vehicles, pedestrians and cyclists."""

import math

from configs import PARAMS_FILE
from jax_perception_node.detection.boxes import OBJECT_CLASSES
from jax_perception_node.settings.config import load_config
from jax_perception_node.tools.synthetic_drive import SyntheticDrive
import numpy as np
import pytest

# Box row columns of SyntheticDrive.scene: x y z vx vy hx hy hz yaw rho class.
X, Y, Z, VX, VY, HX, HY, HZ, YAW, CLS = 0, 1, 2, 3, 4, 5, 6, 7, 8, 10
CAR, LARGE_VEHICLE, PEDESTRIAN, CYCLIST = 1, 4, 5, 6        # scene classes of those rows
# Sizes (length, width, height; m, min and max) the module doc of synthetic_drive gives.
SIZES = {'car': ((4.2, 4.9), (1.75, 1.9), (1.15, 1.4)),
         'large_vehicle': ((5.0, 12.5), (1.95, 2.55), (1.75, 3.35)),
         'pedestrian': ((0.6, 0.85), (0.55, 0.75), (1.55, 1.95)),
         'cyclist': ((1.65, 1.9), (0.55, 0.7), (1.6, 1.85))}
TIMES = np.round(np.arange(0.0, 8.0, 0.5), 6)


@pytest.fixture(scope='module')
def cfg():
    return load_config(PARAMS_FILE)


@pytest.fixture(scope='module')
def truth(cfg):
    """Ground truth of the default 8 s drive (seed 0) every 0.5 s: {t: (rows, ids)}."""
    drive = SyntheticDrive(cfg, num_cameras=0)
    return drive, {t: drive.ground_truth(t) for t in TIMES}


def world_tracks(drive, truth):
    """Return {id: [(t, world row)]}: grid-frame rows moved back to the world."""
    tracks = {}
    for t, (rows, ids) in truth.items():
        for row, name in zip(rows, ids):
            world = row.copy()
            world[:3] += drive.ego_position(t)
            tracks.setdefault(name, []).append((t, world))
    return tracks


def test_every_class_appears_with_its_sizes(truth):
    drive, frames = truth
    seen = {name: set() for name in OBJECT_CLASSES}
    for rows, ids in frames.values():
        assert set(rows[:, 8]) <= {0.0, 1.0, 2.0, 3.0}
        for row, name in zip(rows, ids):
            cls = OBJECT_CLASSES[int(row[8])]
            seen[cls].add(name)
            for value, (lo, hi) in zip(row[3:6], SIZES[cls]):
                assert lo - 1e-9 <= value <= hi + 1e-9, (cls, row[3:6])
    counts = {name: len(ids) for name, ids in seen.items()}
    # Mostly cars; then a few of each of the others in 8 s through farmland and a town.
    assert counts['car'] >= 10 and counts['pedestrian'] >= 5, counts
    assert counts['large_vehicle'] >= 2 and counts['cyclist'] >= 1, counts
    assert counts['car'] > counts['large_vehicle']
    # Ids name what they are: people by their tile, cyclists by their lane (2, 3).
    assert all(name.startswith('person') for name in seen['pedestrian'])
    assert all(name.split('-')[0] in ('lane2', 'lane3') for name in seen['cyclist'])


def test_pedestrians_walk_and_cross_at_walking_speed(truth):
    drive, frames = truth
    tracks = world_tracks(drive, frames)
    walking, crossing = 0, 0
    for name, track in tracks.items():
        cls = OBJECT_CLASSES[int(track[0][1][8])]
        if cls != 'pedestrian' or len(track) < 2:
            continue
        for (t0, a), (t1, b) in zip(track, track[1:]):
            speed = np.hypot(*(b[:2] - a[:2])) / (t1 - t0)
            assert speed <= 1.5 + 1e-9, (name, speed)     # standing, starting or walking
            walking += speed >= 1.2
        ys = [row[1] for _, row in track]
        xs = [row[0] for _, row in track]
        if max(ys) - min(ys) > 1.5:
            # Crossing the road: straight across it, from one kerb towards the other.
            crossing += 1
            assert max(xs) - min(xs) < 1e-9
            assert max(np.abs(ys)) <= 7.5 + 1e-9
    assert walking >= 10 and crossing >= 1, (walking, crossing)


def test_scene_velocities_per_class(cfg):
    for speed in (10.0, 25.0):
        drive = SyntheticDrive(cfg, num_cameras=0, ego_speed=speed)
        for t in (0.0, 3.0, 6.0, 9.0):
            boxes, _ = drive.scene(-50.0, 400.0, t)
            v = np.hypot(boxes[:, VX], boxes[:, VY])
            people = v[boxes[:, CLS] == PEDESTRIAN]
            assert len(people) > 10
            assert np.all((people == 0.0) | ((people >= 1.2) & (people <= 1.5)))
            cyclists = boxes[boxes[:, CLS] == CYCLIST]
            assert len(cyclists) >= 2
            # Both ways, at the inner edge of the outer lanes, 4.5 and 5.5 m/s.
            assert set(np.round(cyclists[:, VX] * np.sign(cyclists[:, Y]), 9)) <= {-4.5, -5.5}
            assert np.allclose(np.abs(cyclists[:, Y]), 3.6)
            vehicles = boxes[np.isin(boxes[:, CLS], (CAR, LARGE_VEHICLE))]
            assert {round(float(u), 9) for u in vehicles[:, VX]} <= {
                0.0, -11.0, max(10.6, speed + 0.6)}


def footprint(rows):
    """Axis-aligned bounds (x_lo, x_hi, y_lo, y_hi) of yawed box rows, each (n,)."""
    c, s = np.abs(np.cos(rows[:, YAW])), np.abs(np.sin(rows[:, YAW]))
    ex, ey = c * rows[:, HX] + s * rows[:, HY], s * rows[:, HX] + c * rows[:, HY]
    return rows[:, X] - ex, rows[:, X] + ex, rows[:, Y] - ey, rows[:, Y] + ey


@pytest.mark.parametrize('speed', [5.0, 10.0, 25.0])
def test_nothing_moving_gets_into_the_egos_path(cfg, speed):
    # The ego's body (1 m behind base_link to 3.8 m ahead, 1.9 m wide), and 0.5 s of travel
    # ahead of it, over 20 s: no moving object or person is ever in it, nor anything on the
    # ground in its lane.
    ahead = set()
    for seed in (0, 1, 2):
        drive = SyntheticDrive(cfg, seed=seed, num_cameras=0, ego_speed=speed)
        for t in np.arange(0.0, 20.0, 0.05):
            ego = drive.ego_position(t)
            boxes, _ = drive.scene(ego[0] - 20.0, ego[0] + 120.0, t)
            low = boxes[:, Z] - boxes[:, HZ] < 2.0
            x_lo, x_hi, y_lo, y_hi = footprint(boxes[low])
            lane = (y_hi > ego[1] - 0.95) & (y_lo < ego[1] + 0.95)
            inside = lane & (x_hi > ego[0] - 1.0) & (x_lo < ego[0] + 3.8 + 0.5 * speed)
            assert not np.any(inside), (seed, t, boxes[low][inside])
            # The check can fail: lead vehicles and crossing pedestrians are in the lane ahead.
            ahead.update(boxes[low][lane & (x_lo > ego[0])][:, CLS].tolist())
    assert {CAR, PEDESTRIAN} <= ahead


def test_people_and_cyclists_are_pure_functions_of_seed_and_time(cfg):
    a = SyntheticDrive(cfg, num_cameras=0)
    rows, ids = a.ground_truth(5.0)
    b = SyntheticDrive(cfg, num_cameras=0)
    b.scene(300.0, 600.0, 30.0)                 # other tiles and traffic first
    b.ground_truth(7.5)
    rows_b, ids_b = b.ground_truth(5.0)
    assert ids == ids_b and np.array_equal(rows, rows_b)
    assert any(i.startswith('person') for i in ids)
    other, _ = SyntheticDrive(cfg, seed=1, num_cameras=0).scene(0.0, 200.0, 5.0)
    mine, _ = a.scene(0.0, 200.0, 5.0)
    people = [s[s[:, CLS] == PEDESTRIAN][:, [X, Y]] for s in (mine, other)]
    assert people[0].shape != people[1].shape or not np.allclose(*people)


def test_lidar_returns_fall_inside_every_class_box(cfg):
    # The shipped LiDAR is level at cfg.lidar.translation: a point fired tau s after t lies at
    # ego(t + tau) + translation + p in the world; the box moves on by its velocity.
    assert cfg.lidar.rotation_xyzw == (0.0, 0.0, 0.0, 1.0)
    drive = SyntheticDrive(cfg, num_cameras=0)
    classes = set()
    for t in (4.5, 6.0):
        points = drive.lidar_frame(t)
        rows, _ = drive.ground_truth(t, points)
        tau = points['time'].astype(np.float64)
        xyz = np.stack([points[k] for k in 'xyz'], -1).astype(np.float64)
        world = xyz + np.array(cfg.lidar.translation) + drive.ego_position(t)
        world[:, 0] += drive.ego_speed * tau
        boxes, _ = drive.scene(drive.ego_position(t)[0] - 60.0, drive.ego_position(t)[0] + 60.0,
                               t)
        for row in rows:
            centre = row[:3] + drive.ego_position(t)
            [box] = [b for b in boxes if np.allclose(b[[X, Y, Z]], centre, atol=1e-9)]
            moved = np.outer(tau, [box[VX], box[VY], 0.0])
            d = world - np.array([box[X], box[Y], box[Z]]) - moved
            c, s = math.cos(box[YAW]), math.sin(box[YAW])
            inside = ((np.abs(c * d[:, 0] + s * d[:, 1]) <= box[HX] + 0.2)
                      & (np.abs(-s * d[:, 0] + c * d[:, 1]) <= box[HY] + 0.2)
                      & (np.abs(d[:, 2]) <= box[HZ] + 0.2))
            assert inside.sum() >= 5
            classes.add(OBJECT_CLASSES[int(row[8])])
    assert classes == set(OBJECT_CLASSES)
