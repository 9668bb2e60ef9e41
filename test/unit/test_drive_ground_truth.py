"""The sample drive's ground truth: visible objects at each LiDAR stamp, and its bag topic."""

from dataclasses import replace
import math

from configs import PARAMS_FILE
from jax_perception_node.bags import bagio
from jax_perception_node.bags.topics import POINTCLOUD_TOPIC
from jax_perception_node.detection.boxes import OBJECT_CLASSES
from jax_perception_node.outputs.objects import (boxes_from_detections, DETECTION_ARRAY_TYPE,
                                                 GROUND_TRUTH_TOPIC)
from jax_perception_node.settings.config import load_config, Pose
from jax_perception_node.tools.synthetic_drive import (EPOCH_NS, LidarModel, SyntheticDrive,
                                                       write_sample_bag)
import numpy as np
import pytest

SEED = 7
TIMES = (0.0, 3.3, 6.6)
SMALL_LIDAR = LidarModel(beams=32, azimuth_steps=1024)
# Scene classes (the class column of a scene box row) of OBJECT_CLASSES, in their order: car,
# large vehicle, pedestrian, cyclist (scene.OBJECT_SCENE_CLASSES).
SCENE_CLASSES = (1, 4, 5, 6)
# Box row columns of SyntheticDrive.scene: x y z vx vy hx hy hz yaw rho class.
X, Y, Z, VX, VY, HX, HY, HZ, YAW, CLS = 0, 1, 2, 3, 4, 5, 6, 7, 8, 10


@pytest.fixture(scope='module')
def cfg():
    """Return the shipped config with the LiDAR off-centre, yawed 30 deg, pitched 4 deg down."""
    base = load_config(PARAMS_FILE)
    yaw, pitch = math.radians(30.0), math.radians(4.0)
    # q = q_z(yaw) * q_y(pitch), multiplied out.
    cz, sz, cp, sp = math.cos(yaw / 2), math.sin(yaw / 2), math.cos(pitch / 2), math.sin(pitch / 2)
    q = (-sz * sp, cz * sp, sz * cp, cz * cp)
    return replace(base, lidar=Pose(translation=(0.4, -0.3, 1.9), rotation_xyzw=q))


@pytest.fixture(scope='module')
def frames(cfg):
    """(t, points, ground-truth rows, ids) at TIMES."""
    drive = SyntheticDrive(cfg, seed=SEED, num_cameras=0, lidar=SMALL_LIDAR)
    out = []
    for t in TIMES:
        points = drive.lidar_frame(t)
        rows, ids = drive.ground_truth(t, points)
        out.append((t, points, rows, ids))
    return drive, out


def rotate(q, v):
    """Rotate vectors v (N, 3) by the unit quaternion q = (x, y, z, w): v + 2w u x v + ..."""
    u, w = np.array(q[:3]), q[3]
    uv = np.cross(u, v)
    return v + 2.0 * w * uv + 2.0 * np.cross(u, uv)


def world_points(cfg, drive, t, points):
    """Each point in the world where it was fired: ego(t + tau) + lidar translation + R p."""
    p = np.stack([points['x'], points['y'], points['z']], axis=-1).astype(np.float64)
    tau = points['time'].astype(np.float64)
    ego = np.array([drive.ego_position(t + s) for s in np.unique(tau)])
    ego = ego[np.searchsorted(np.unique(tau), tau)]
    return ego + np.array(cfg.lidar.translation) + rotate(cfg.lidar.rotation_xyzw, p), tau


def count_inside(world, tau, box, grow=0.2):
    """Points inside the grown box, the box moved on by its velocity to each point's time."""
    d = world - np.array([box[X] + box[VX] * tau, box[Y] + box[VY] * tau,
                          np.full(len(tau), box[Z])]).T
    c, s = math.cos(box[YAW]), math.sin(box[YAW])
    along, across = c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]
    return int(np.sum((np.abs(along) <= box[HX] + grow) & (np.abs(across) <= box[HY] + grow)
                      & (np.abs(d[:, 2]) <= box[HZ] + grow)))


def objects_in_grid(cfg, drive, t):
    """Scene rows of objects (world, at t) whose centre lies in the grid around ego(t)."""
    ego = drive.ego_position(t)
    boxes, _ = drive.scene(ego[0] - 120.0, ego[0] + 120.0, t)
    g = cfg.grid
    rel_x, rel_y = boxes[:, X] - ego[0], boxes[:, Y] - ego[1]
    inside = (np.isin(boxes[:, CLS], SCENE_CLASSES) & (rel_x >= g.x_min) & (rel_x < g.x_max)
              & (rel_y >= g.y_min) & (rel_y < g.y_max))
    return boxes[inside]


def test_boxes_are_the_scene_objects_seen_by_enough_points(cfg, frames):
    drive, data = frames
    total, classes = 0, set()
    for t, points, rows, ids in data:
        assert rows.shape == (len(ids), 9) and len(set(ids)) == len(ids)
        world, tau = world_points(cfg, drive, t, points)
        candidates = objects_in_grid(cfg, drive, t)
        counts = [count_inside(world, tau, box) for box in candidates]
        visible = candidates[np.array(counts, int) >= 5]
        assert len(visible) == len(rows), (t, counts)
        total += len(rows)
        ego = drive.ego_position(t)
        for row in rows:
            # Back to the world: base_link at t has the world's axes (ego heading 0).
            centre = row[:3] + ego
            [match] = [b for b in visible if np.allclose(b[[X, Y, Z]], centre, atol=1e-9)]
            assert row[3:6] == pytest.approx(2.0 * match[[HX, HY, HZ]], abs=1e-12)
            assert -math.pi < row[6] <= math.pi
            assert abs(math.remainder(row[6] - match[YAW], 2 * math.pi)) < 1e-12
            assert row[7:].tolist() == [1.0, SCENE_CLASSES.index(match[CLS])]
            classes.add(row[8])
    assert total >= 10          # parked cars and traffic, or the check proves little
    assert len(classes) >= 3    # and people or cyclists: cars the most


def test_one_vehicle_counted_point_by_point(cfg, frames):
    # A plain loop over every point for the nearest visible vehicle of the last frame.
    drive, data = frames
    t, points, rows, ids = data[-1]
    k = int(np.argmin(np.hypot(rows[:, 0], rows[:, 1])))
    ego = drive.ego_position(t)
    [box] = [b for b in objects_in_grid(cfg, drive, t)
             if np.allclose(b[[X, Y]], rows[k, :2] + ego[:2], atol=1e-9)]
    q, trans = cfg.lidar.rotation_xyzw, np.array(cfg.lidar.translation)
    count = 0
    for p in points:
        tau = float(p['time'])
        fired = drive.ego_position(t + tau) + trans + rotate(
            q, np.array([[p['x'], p['y'], p['z']]], np.float64))[0]
        d = fired - np.array([box[X] + box[VX] * tau, box[Y] + box[VY] * tau, box[Z]])
        c, s = math.cos(box[YAW]), math.sin(box[YAW])
        count += (abs(c * d[0] + s * d[1]) <= box[HX] + 0.2
                  and abs(-s * d[0] + c * d[1]) <= box[HY] + 0.2
                  and abs(d[2]) <= box[HZ] + 0.2)
    assert count >= 5
    # min_points is the threshold: the box stays up to its own count, and goes above it.
    assert ids[k] in drive.ground_truth(t, points, min_points=count)[1]
    assert ids[k] not in drive.ground_truth(t, points, min_points=count + 1)[1]


def test_ids_are_stable_and_points_optional(cfg, frames):
    drive, data = frames
    (t0, _, rows0, ids0), (t1, _, rows1, ids1) = data[1], data[2]
    rows, ids = drive.ground_truth(t1)        # casts the sweep itself
    assert ids == ids1 and np.array_equal(rows, rows1)
    # Same object, same id: parked cars stay put in the world, traffic and cyclists move at
    # their lane's speed, pedestrians stand or walk (or start or stop in between).
    later = SyntheticDrive(cfg, seed=SEED, num_cameras=0, lidar=SMALL_LIDAR)
    rows_b, ids_b = later.ground_truth(t0 + 0.5)
    common = set(ids0) & set(ids_b)
    assert any(i.startswith('tile') for i in common)
    for name in common:
        a, b = rows0[ids0.index(name)], rows_b[ids_b.index(name)]
        moved = (b[:2] + drive.ego_position(t0 + 0.5)[:2]) - (a[:2] + drive.ego_position(t0)[:2])
        speed = np.hypot(*moved) / 0.5
        if name.startswith('tile'):
            assert np.allclose(moved, 0.0, atol=1e-9)
        elif name.startswith('person'):
            assert a[8] == b[8] == 2.0 and speed <= 1.5 + 1e-9
        else:
            lanes = {'lane0': 11.0, 'lane1': 10.6, 'lane2': 5.5, 'lane3': 4.5}
            assert speed == pytest.approx(lanes[name.split('-')[0]])


def test_sample_bag_has_one_ground_truth_per_sweep(cfg, tmp_path):
    summary = write_sample_bag(tmp_path / 'bag', cfg, seconds=0.5, num_cameras=0, seed=SEED,
                               lidar=SMALL_LIDAR, odometry_hz=0)
    reader = bagio.open_reader(tmp_path / 'bag')
    try:
        assert bagio.topic_types(reader)[GROUND_TRUTH_TOPIC] == DETECTION_ARRAY_TYPE
        [conn] = [c for c in reader.connections if c.topic == GROUND_TRUTH_TOPIC]
        [qos] = conn.ext.offered_qos_profiles
        assert qos == bagio.offered_qos()
        messages = list(bagio.iter_messages(reader, [POINTCLOUD_TOPIC, GROUND_TRUTH_TOPIC]))
    finally:
        reader.close()
    clouds = [(stamp, raw) for topic, stamp, raw, _ in messages if topic == POINTCLOUD_TOPIC]
    truths = [(stamp, bagio.deserialize(raw, DETECTION_ARRAY_TYPE))
              for topic, stamp, raw, _ in messages if topic == GROUND_TRUTH_TOPIC]
    assert len(clouds) == len(truths) == summary['frames'] == summary['ground_truth_messages'] == 5
    drive = SyntheticDrive(cfg, seed=SEED, num_cameras=0, lidar=SMALL_LIDAR)
    boxes = 0
    for (cloud_stamp, _), (stamp, msg) in zip(clouds, truths):
        assert stamp == cloud_stamp
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == stamp
        assert msg.header.frame_id == cfg.grid.frame_id
        rows, ids = drive.ground_truth((stamp - EPOCH_NS) * 1e-9)
        got = boxes_from_detections(msg, OBJECT_CLASSES)
        np.testing.assert_array_equal(got[:, [0, 1, 2, 3, 4, 5, 7, 8]],
                                      rows[:, [0, 1, 2, 3, 4, 5, 7, 8]].astype(np.float32))
        np.testing.assert_allclose(got[:, 6], rows[:, 6], atol=2e-6)
        assert [d.id for d in msg.detections] == ids
        # The class as the hypothesis' class_id string: OBJECT_CLASSES by name.
        assert [d.results[0].hypothesis.class_id for d in msg.detections] == [
            OBJECT_CLASSES[int(c)] for c in rows[:, 8]]
        boxes += len(rows)
    assert boxes == summary['ground_truth_boxes'] > 0
