"""The synthetic drive: bag layout, LiDAR and camera geometry, rates, determinism."""

import math

from configs import PARAMS_FILE, small_config
from jax_perception_node.bags.bagio import TYPESTORE as TS
from jax_perception_node.bags.topics import (camera_info_topic, camera_topic, ODOMETRY_TOPIC,
                                             POINTCLOUD_TOPIC)
from jax_perception_node.outputs.objects import DETECTION_ARRAY_TYPE, GROUND_TRUTH_TOPIC
from jax_perception_node.sensors.camera import scale_camera_info
from jax_perception_node.settings.config import config_from_parameters, load_config
from jax_perception_node.settings.param_file import read_param_file
from jax_perception_node.tools.synthetic_drive import (camera_stamp_offset, EPOCH_NS, LidarModel,
                                                       POINT_DTYPE, SyntheticDrive,
                                                       write_sample_bag)
import numpy as np
import pytest
from rosbags.rosbag2 import Reader

SECONDS = 2.0
FLOAT32, UINT16 = 7, 4


@pytest.fixture(scope='module')
def cfg():
    return load_config(PARAMS_FILE)


@pytest.fixture(scope='module')
def bag(cfg, tmp_path_factory):
    """Write the 2 s default bag once; return summary, topics, messages and progress calls."""
    path = tmp_path_factory.mktemp('drive') / 'bag'
    calls = []
    summary = write_sample_bag(path, cfg, seconds=SECONDS,
                               progress=lambda done, total: calls.append((done, total)))
    with Reader(path) as reader:
        topics = {name: info.msgtype for name, info in reader.topics.items()}
        messages = [(conn.topic, stamp, TS.deserialize_cdr(raw, conn.msgtype))
                    for conn, stamp, raw in reader.messages()]
    return summary, topics, messages, calls


def stamp_ns(msg) -> int:
    if hasattr(msg, 'transforms'):      # a TFMessage: each transform has its own stamp
        (msg,) = {stamp_ns(t): t for t in msg.transforms}.values()
    return msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec


def clouds(messages):
    return [msg for topic, _, msg in messages if topic == POINTCLOUD_TOPIC]


def points_of(msg) -> np.ndarray:
    return np.frombuffer(msg.data, dtype=POINT_DTYPE, count=msg.width)


def test_topics_types_and_counts(bag, cfg):
    summary, topics, messages, calls = bag
    names = [c.name for c in cfg.cameras]
    assert topics == {POINTCLOUD_TOPIC: 'sensor_msgs/msg/PointCloud2',
                      ODOMETRY_TOPIC: 'nav_msgs/msg/Odometry',
                      '/tf': 'tf2_msgs/msg/TFMessage', '/tf_static': 'tf2_msgs/msg/TFMessage',
                      GROUND_TRUTH_TOPIC: DETECTION_ARRAY_TYPE,
                      **{camera_topic(n): 'sensor_msgs/msg/Image' for n in names},
                      **{camera_info_topic(n): 'sensor_msgs/msg/CameraInfo' for n in names}}
    assert camera_topic('front') == '/jax_perception/input/camera/front/features'
    assert len(clouds(messages)) == summary['frames'] == round(SECONDS * 10)
    assert sum(topic == GROUND_TRUTH_TOPIC for topic, _, _ in messages) == summary['frames']
    for name in names:
        count = sum(topic == camera_topic(name) for topic, _, _ in messages)
        assert count == summary['camera_messages'][name]
        assert abs(count - SECONDS * 12) <= 1
        assert count == sum(topic == camera_info_topic(name) for topic, _, _ in messages)
    assert sum(topic == '/tf' for topic, _, _ in messages) == summary['odometry_messages']
    assert [topic for topic, _, _ in messages].count('/tf_static') == 1
    assert calls[-1] == (len(messages), len(messages))
    assert [done for done, _ in calls] == list(range(1, len(messages) + 1))


def test_stamps_and_pairing(bag, cfg):
    _, _, messages, _ = bag
    times = [stamp for _, stamp, _ in messages]
    assert times == sorted(times)
    assert all(stamp == stamp_ns(msg) for _, stamp, msg in messages)
    lidar = np.array([stamp_ns(m) for m in clouds(messages)])
    assert lidar[0] == EPOCH_NS
    assert np.all(np.diff(lidar) == 100_000_000)
    for index, cam in enumerate(cfg.cameras):
        stamps = np.array([stamp for topic, stamp, _ in messages
                           if topic == camera_topic(cam.name)])
        assert stamps[0] == EPOCH_NS + round(camera_stamp_offset(index) * 1e9)
        assert np.allclose(np.diff(stamps), 1e9 / 12, atol=1)
        gap = np.abs(stamps[:, None] - lidar[None, :]).min(axis=1)
        assert gap.max() < 0.1e9
        assert gap.min() > 0        # never exactly on a LiDAR stamp: pairing is not trivial
    offsets = {camera_stamp_offset(i) for i in range(len(cfg.cameras))}
    assert len(offsets) == len(cfg.cameras) and max(offsets) <= 0.035


def test_pointcloud_layout(bag):
    for msg in clouds(bag[2]):
        assert msg.header.frame_id == 'lidar'
        assert (msg.height, msg.point_step, msg.row_step) == (1, 24, 24 * msg.width)
        assert msg.is_dense and not msg.is_bigendian
        assert len(msg.data) == msg.row_step
        assert [(f.name, f.offset, f.datatype, f.count) for f in msg.fields] == [
            ('x', 0, FLOAT32, 1), ('y', 4, FLOAT32, 1), ('z', 8, FLOAT32, 1),
            ('intensity', 12, FLOAT32, 1), ('ring', 16, UINT16, 1), ('time', 20, FLOAT32, 1)]


def test_point_counts_vary_in_a_plausible_range(bag):
    summary, _, messages, _ = bag
    counts = [msg.width for msg in clouds(messages)]
    assert len(set(counts)) > len(counts) // 2 and max(counts) - min(counts) > 2000
    assert 15_000 < min(counts) and max(counts) <= 64 * 2048
    assert (summary['min_points'], summary['max_points']) == (min(counts), max(counts))


def test_points_geometry(bag):
    for msg in clouds(bag[2])[::5]:
        p = points_of(msg)
        xyz = np.stack([p['x'], p['y'], p['z']], axis=-1)
        assert np.all(np.isfinite(xyz))
        r = np.linalg.norm(xyz, axis=1)
        assert r.min() >= 0.9 and r.max() <= 100.2
        assert p['ring'].max() < 64
        assert np.all((p['intensity'] >= 0) & (p['intensity'] <= 255))
        assert np.all((p['time'] >= 0) & (p['time'] < 0.1))
        assert np.all(np.diff(p['time']) >= 0)      # firing order
        # Ring 0 looks 15 deg down: on flat ground 1.8 m below the sensor, at 6.7 m.
        low = p[p['ring'] == 0]
        assert len(low) > 1000
        assert abs(np.median(low['z']) + 1.8) < 0.02
        assert np.mean(np.abs(low['z'] + 1.8) < 0.1) > 0.8
        elevation = np.degrees(np.arcsin(low['z'] / np.linalg.norm(
            np.stack([low['x'], low['y'], low['z']], -1), axis=1)))
        assert np.allclose(elevation, -15.0, atol=0.05)


def test_odometry_is_the_ego_motion(bag):
    summary, _, messages, _ = bag
    odometry = [(t, m) for topic, t, m in messages if topic == ODOMETRY_TOPIC]
    assert len(odometry) == summary['odometry_messages']
    stamps = [t for t, _ in odometry]
    # 50 Hz from the first sweep to half a LiDAR period past the last one.
    assert stamps == [EPOCH_NS + k * 20_000_000 for k in range(len(stamps))]
    assert (stamps[-1] - EPOCH_NS) / 1e9 >= SECONDS - 0.1
    for stamp, msg in odometry:
        t = (stamp - EPOCH_NS) / 1e9
        assert (msg.header.frame_id, msg.child_frame_id) == ('map', 'base_link')
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        # 10 m/s along +x in the right-hand lane, heading +x: written independently here.
        assert (p.x, p.y, p.z) == pytest.approx((10.0 * t, -1.75, 0.0), abs=1e-9)
        assert (q.x, q.y, q.z, q.w) == (0.0, 0.0, 0.0, 1.0)
        assert msg.twist.twist.linear.x == pytest.approx(10.0)


def test_feature_maps(bag, cfg):
    shapes = {c.name: (c.height, c.width, c.channels) for c in cfg.cameras}
    seen = set()
    maps = {camera_topic(name): name for name in shapes}
    for topic, _, msg in bag[2]:
        if topic not in maps:
            continue
        name = maps[topic]
        seen.add(name)
        h, w, c = shapes[name]
        assert msg.header.frame_id == f'{name}_optical'
        assert (msg.height, msg.width, msg.encoding, msg.step) == (h, w, f'32FC{c}', w * c * 4)
        assert not msg.is_bigendian
        feats = np.frombuffer(msg.data, dtype='<f4').reshape(h, w, c)
        assert np.all(np.isfinite(feats))
        # An image's features: RGB, luminance and saturation in [0, 1], the rest signed.
        assert np.all((feats[..., [0, 1, 2, 3, 7]] >= 0) & (feats[..., [0, 1, 2, 3, 7]] <= 1))
        assert np.all(np.abs(feats[..., 4:7]) <= 1)
    assert seen == set(shapes)


def test_camera_sees_ground_where_the_camera_model_puts_it(cfg):
    drive = SyntheticDrive(cfg)
    front = cfg.cameras[0]
    assert front.name == 'front' and front.pose.translation[2] == 1.6
    seen = drive.camera_surfaces('front', 0.0)
    depth = seen.depth.reshape(front.height, front.width)
    cls = seen.cls.reshape(front.height, front.width)
    # The front camera looks level along +x from 1.6 m: row v sees ground at the optical depth
    # z with (v - cy) / fy = 1.6 / z.
    v = np.arange(front.height)[:, None] * np.ones((1, front.width))
    ground = (cls == 0) & (v > front.cy)
    assert ground.sum() > 0.4 * front.width * (front.height - front.cy)
    assert np.allclose(1.0 / depth[ground], (v[ground] - front.cy) / (front.fy * 1.6),
                       rtol=1e-5)
    bottom = front.height - 1
    assert cls[bottom, int(front.cx)] == 0
    assert 1.0 / depth[bottom, int(front.cx)] == pytest.approx(
        (bottom - front.cy) / (front.fy * 1.6), rel=1e-6)
    sky = cls == -1
    assert sky[0].sum() > 0 and np.all(np.isinf(depth[sky]))   # open country: sky at the top
    # The image shows it: a blue sky over a grey road (asphalt: low saturation, dark).
    feats = drive.camera_features('front', 0.0)
    red, blue, luminance, saturation = (feats[..., k] for k in (0, 2, 3, 7))
    assert np.all(blue[sky] > red[sky]) and luminance[sky].mean() > 0.7
    road = (ground & (np.abs(v - front.cy) > 4))[bottom - 2:]
    assert np.median(luminance[bottom - 2:][road]) < 0.4
    assert np.median(saturation[bottom - 2:][road]) < 0.1


def test_every_camera_agrees_with_its_calibration(cfg):
    drive = SyntheticDrive(cfg)
    for cam in cfg.cameras:
        seen = drive.camera_surfaces(cam.name, 1.0)
        depth = seen.depth.reshape(cam.height, cam.width)
        cls = seen.cls.reshape(cam.height, cam.width)
        v, u = np.mgrid[0:cam.height, 0:cam.width]
        ray = np.stack([(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy, np.ones(u.shape)], -1)
        down = -(ray @ cam.pose.rotation_matrix().T)[..., 2]        # grid-frame z drop per depth
        ground = cls == 0
        assert ground.sum() > 100
        assert np.all(down[ground] > 0)
        assert np.allclose(1.0 / depth[ground], down[ground] / cam.pose.translation[2],
                           rtol=1e-5)
        sky = cls == -1
        assert np.all(down[sky] < 0) and np.all(np.isinf(depth[sky]))


def test_lidar_frames_are_pure_functions_of_seed_and_time(cfg):
    model = LidarModel(beams=16, azimuth_steps=256)
    a = SyntheticDrive(cfg, seed=3, lidar=model)
    b = SyntheticDrive(cfg, seed=3, lidar=model)
    first = a.lidar_frame(0.7)
    b.lidar_frame(5.0)
    assert np.array_equal(first, b.lidar_frame(0.7))
    assert not np.array_equal(first, SyntheticDrive(cfg, seed=4, lidar=model).lidar_frame(0.7))
    assert np.array_equal(a.camera_features('left', 0.4), b.camera_features('left', 0.4))
    assert not np.array_equal(a.camera_features('left', 0.4),
                              SyntheticDrive(cfg, seed=4).camera_features('left', 0.4))


def test_same_seed_same_bytes_other_seed_other_bytes(cfg, tmp_path):
    def write(folder, seed):
        path = tmp_path / folder / 'bag'
        path.parent.mkdir()
        write_sample_bag(path, cfg, seconds=0.3, seed=seed)
        return (path / 'bag.mcap').read_bytes(), (path / 'metadata.yaml').read_bytes()

    first = write('a', 0)
    assert first == write('b', 0)
    other = write('c', 1)
    assert other[0] != first[0]


def test_one_second_bag_holds_the_drive_message_for_message(cfg, tmp_path):
    # Decoded values, not bytes: every message is the drive's own sensor output at its stamp.
    write_sample_bag(tmp_path / 'bag', cfg, seconds=1.0, seed=4)
    drive = SyntheticDrive(cfg, seed=4)
    with Reader(tmp_path / 'bag') as reader:
        messages = [(conn.topic, stamp, TS.deserialize_cdr(raw, conn.msgtype))
                    for conn, stamp, raw in reader.messages()]
    # /tf_static first; at a shared stamp (t = 0 here) odometry and /tf precede the sweep.
    assert [topic for topic, _, _ in messages[:4]] == ['/tf_static', ODOMETRY_TOPIC, '/tf',
                                                       POINTCLOUD_TOPIC]
    topics = {camera_topic(c.name): c.name for c in cfg.cameras}
    infos = {camera_info_topic(c.name): c for c in cfg.cameras}
    seen = {POINTCLOUD_TOPIC: 0, GROUND_TRUTH_TOPIC: 0, ODOMETRY_TOPIC: 0, '/tf': 0,
            '/tf_static': 0,
            **dict.fromkeys(topics, 0), **dict.fromkeys(infos, 0)}
    for topic, stamp, msg in messages:
        t = (stamp - EPOCH_NS) * 1e-9     # bag time = EPOCH_NS + t, as the writer has it
        seen[topic] += 1
        if topic in ('/tf', '/tf_static', *infos, GROUND_TRUTH_TOPIC):
            continue                      # test_tf_and_camera_info_..., test_drive_ground_truth
        if topic == POINTCLOUD_TOPIC:
            assert np.array_equal(points_of(msg), drive.lidar_frame(t))
        elif topic == ODOMETRY_TOPIC:
            p = msg.pose.pose.position
            assert [p.x, p.y, p.z] == drive.ego_position(t).tolist()
        else:
            cam = next(c for c in cfg.cameras if c.name == topics[topic])
            feats = np.frombuffer(msg.data, '<f4').reshape(cam.height, cam.width, cam.channels)
            assert np.array_equal(feats, drive.camera_features(cam.name, t))
    # 10 sweeps; 50 Hz odometry and 12 Hz maps up to 0.95 s (cameras from a +4..31 ms offset).
    assert seen == {POINTCLOUD_TOPIC: 10, GROUND_TRUTH_TOPIC: 10, ODOMETRY_TOPIC: 48, '/tf': 48,
                    '/tf_static': 1,
                    **dict.fromkeys(topics, 12), **dict.fromkeys(infos, 12)}


def test_tf_and_camera_info_describe_the_drive(bag, cfg):
    """/tf_static is the parameters' mounting, /tf the ego pose, CameraInfo the intrinsics."""
    _, _, messages, _ = bag
    (static,) = [m for topic, _, m in messages if topic == '/tf_static']
    mounts = {(t.header.frame_id, t.child_frame_id): t.transform for t in static.transforms}
    expected = {('base_link', 'lidar'): cfg.lidar} | {
        ('base_link', f'{c.name}_optical'): c.pose for c in cfg.cameras}
    assert set(mounts) == set(expected)
    for key, pose in expected.items():
        v, q = mounts[key].translation, mounts[key].rotation
        assert (v.x, v.y, v.z) == pose.translation
        assert (q.x, q.y, q.z, q.w) == pose.rotation_xyzw
    odometry = {t: m.pose.pose for topic, t, m in messages if topic == ODOMETRY_TOPIC}
    tf = [(t, m) for topic, t, m in messages if topic == '/tf']
    assert [t for t, _ in tf] == list(odometry)
    for stamp, msg in tf:
        (pose,) = msg.transforms
        assert (pose.header.frame_id, pose.child_frame_id) == ('map', 'base_link')
        assert stamp_ns(pose) == stamp
        v, p = pose.transform.translation, odometry[stamp].position
        assert (v.x, v.y, v.z) == (p.x, p.y, p.z)
    for cam in cfg.cameras:
        infos = [m for topic, _, m in messages if topic == camera_info_topic(cam.name)]
        info = infos[0]
        assert (info.width, info.height) == (8 * cam.width, 8 * cam.height)
        assert info.header.frame_id == f'{cam.name}_optical'
        # The formula of docs/users.md by hand: fx_f = fx / 8, cx_f = (cx + 0.5) / 8 - 0.5.
        fx, cx, fy, cy = info.k[0], info.k[2], info.k[4], info.k[5]
        assert (fx / 8, fy / 8, (cx + 0.5) / 8 - 0.5, (cy + 0.5) / 8 - 0.5) == (
            cam.fx, cam.fy, cam.cx, cam.cy)
        assert tuple(scale_camera_info(info, cam.height, cam.width))[:4] == (
            cam.fx, cam.fy, cam.cx, cam.cy)


def test_lidar_only_and_camera_count_errors(cfg, tmp_path):
    summary = write_sample_bag(tmp_path / 'lidar', cfg, seconds=0.2, num_cameras=0)
    with Reader(tmp_path / 'lidar') as reader:
        assert set(reader.topics) == {POINTCLOUD_TOPIC, GROUND_TRUTH_TOPIC, ODOMETRY_TOPIC, '/tf',
                                      '/tf_static'}
        assert reader.message_count == 2 * 2 + 2 * summary['odometry_messages'] + 1
    assert summary['camera_messages'] == {}
    two = write_sample_bag(tmp_path / 'two', cfg, seconds=0.2, num_cameras=2)
    assert list(two['camera_messages']) == ['front', 'left']
    with pytest.raises(ValueError, match='num_cameras=5.*4 camera'):
        write_sample_bag(tmp_path / 'five', cfg, seconds=0.2, num_cameras=5)
    assert not (tmp_path / 'five').exists()
    with pytest.raises(ValueError, match='num_cameras'):
        SyntheticDrive(cfg, num_cameras=-1)
    with pytest.raises(FileExistsError):
        write_sample_bag(tmp_path / 'lidar', cfg, seconds=0.2)
    with pytest.raises(ValueError, match='seconds'):
        write_sample_bag(tmp_path / 'zero', cfg, seconds=0)
    with pytest.raises(ValueError, match='no rate for camera'):
        write_sample_bag(tmp_path / 'rates', cfg, seconds=0.2, camera_hz={'front': 12.0})
    with pytest.raises(ValueError, match='unknown camera'):
        SyntheticDrive(cfg, num_cameras=1).camera_features('left', 0.0)
    with pytest.raises(ValueError, match='LidarModel'):
        LidarModel(dropout=1.0)


def test_other_configs(tmp_path):
    # Tiny cameras with 3 and 10 channels, and a LiDAR 0.5 m up, off-centre, pitched down 5 deg.
    ten = small_config(cameras=1, **{'cameras.front.channels': 10})
    feats = SyntheticDrive(ten).camera_features('front', 0.5)
    assert feats.shape == (12, 20, 10) and feats.dtype == np.float32
    assert np.array_equal(feats[..., 8:], feats[..., :2])
    three = small_config(cameras=2)
    assert SyntheticDrive(three).camera_features('rear', 0.5).shape == (12, 20, 3)

    params = read_param_file(PARAMS_FILE)
    pitch = math.radians(5.0)
    params.update({'lidar.translation': [0.3, -0.2, 0.5],
                   'lidar.rotation_xyzw': [0.0, math.sin(pitch / 2), 0.0, math.cos(pitch / 2)]})
    tilted = config_from_parameters(params)
    p = SyntheticDrive(tilted, lidar=LidarModel(beams=16, azimuth_steps=512)).lidar_frame(0.0)
    xyz = np.stack([p['x'], p['y'], p['z']], axis=-1).astype(float)
    base = xyz @ tilted.lidar.rotation_matrix().T + np.array(tilted.lidar.translation)
    near_ground = np.abs(base[:, 2]) < 0.1
    assert near_ground.mean() > 0.5
    summary = write_sample_bag(tmp_path / 'bag', tilted, seconds=0.1, num_cameras=1,
                               camera_hz={'front': 30.0}, lidar_hz=20.0)
    # 20 Hz for 0.1 s: 2 sweeps; 30 Hz from +4 ms up to half a sweep after the last: 3 maps.
    assert summary['frames'] == 2 and summary['camera_messages'] == {'front': 3}


def test_ego_speed_moves_odometry_tf_and_only_the_lead_traffic(cfg, tmp_path):
    summary = write_sample_bag(tmp_path / 'fast', cfg, seconds=0.3, num_cameras=0,
                               lidar=LidarModel(beams=8, azimuth_steps=64), ego_speed=20.0)
    assert summary['ego_speed'] == 20.0
    with Reader(tmp_path / 'fast') as reader:
        messages = [(conn.topic, stamp, TS.deserialize_cdr(raw, conn.msgtype))
                    for conn, stamp, raw in reader.messages()]
    odometry = [(stamp, m) for topic, stamp, m in messages if topic == ODOMETRY_TOPIC]
    tf = [m.transforms[0].transform.translation for topic, _, m in messages if topic == '/tf']
    assert len(odometry) == len(tf) == summary['odometry_messages'] > 10
    for (stamp, msg), moved in zip(odometry, tf):
        t = (stamp - EPOCH_NS) / 1e9
        p = msg.pose.pose.position
        assert (p.x, p.y, moved.x, moved.y) == pytest.approx((20.0 * t, -1.75, 20.0 * t, -1.75))
        assert msg.twist.twist.linear.x == 20.0
    # Oncoming traffic keeps 11 m/s and parked vehicles stay; the lead vehicles in the ego's
    # lane keep 10.6 m/s unless the ego is faster: then 0.6 m/s faster than it.
    for speed, lead in ((5.0, 10.6), (10.0, 10.6), (20.0, 20.6), (25.0, 25.6)):
        boxes, _ = SyntheticDrive(cfg, num_cameras=0, ego_speed=speed).scene(0.0, 200.0, 1.0)
        boxes = boxes[np.isin(boxes[:, 10], (1, 4))]          # cars and large vehicles
        lane = np.round(boxes[:, 1], 6)
        assert set(np.round(boxes[lane == 1.75, 3], 9)) == {-11.0}
        assert set(np.round(boxes[lane == -1.75, 3], 9)) == {lead}
        assert set(boxes[np.abs(lane) > 4.0, 3]) == {0.0}
    for bad in (0.0, -1.0, 25.01, float('nan'), True):
        with pytest.raises(ValueError, match='ego_speed'):
            SyntheticDrive(cfg, ego_speed=bad)
    with pytest.raises(ValueError, match='ego_speed'):
        write_sample_bag(tmp_path / 'slow', cfg, seconds=0.1, ego_speed=0.0)
    assert not (tmp_path / 'slow').exists()


def xyz_of(points) -> np.ndarray:
    return np.stack([points['x'], points['y'], points['z']], axis=-1).astype(np.float64)


def static_cells(xyz: np.ndarray) -> np.ndarray:
    """Occupied 0.4 m cells (bool 200 x 200, +-40 m) of the points above ground off the lanes."""
    base = xyz + [0.0, 0.0, 1.8]                # the shipped mount: level, 1.8 m up
    world_y = base[:, 1] - 1.75
    # Moving traffic and cyclists keep within |world y| < 4 m; beyond it only pedestrians move,
    # too slowly to leave a 0.4 m cell within a sweep.
    keep = (np.abs(world_y) > 4.0) & (base[:, 2] > 0.3) & (np.abs(base[:, :2]) < 40.0).all(1)
    cells = np.zeros((200, 200), bool)
    i, j = (np.floor(base[keep, :2] / 0.4).astype(int) + 100).T
    cells[i, j] = True
    return cells


def beyond_a_cell(a: np.ndarray, b: np.ndarray) -> int:
    """Cells occupied in one grid with no occupied cell within one cell in the other."""
    def grown(g):
        return np.logical_or.reduce([np.roll(g, (di, dj), (0, 1)) for di in (-1, 0, 1)
                                     for dj in (-1, 0, 1)])
    return int((a & ~grown(b)).sum() + (b & ~grown(a)).sum())


def test_instant_sweep_is_what_a_deskewed_sweep_matches(cfg):
    model = LidarModel(beams=32, azimuth_steps=1024)
    for t in (1.5, 7.0):        # open country, then town; 20 m/s: 2 m within one sweep
        real = SyntheticDrive(cfg, num_cameras=0, lidar=model, ego_speed=20.0).lidar_frame(t)
        instant = SyntheticDrive(cfg, num_cameras=0, lidar=model, ego_speed=20.0,
                                 instant_sweep=True).lidar_frame(t)
        assert np.all(instant['time'] == 0.0) and real['time'].max() > 0.09
        # The same rays and draws: a ray that meets the flat ground in both sweeps (most do)
        # has the same range, noise and so the same point, bit for bit.
        ground = [set(p[np.abs(p['z'] + 1.8) < 0.1][['x', 'y', 'z', 'ring']].tolist())
                  for p in (real, instant)]
        assert len(ground[0] & ground[1]) > 0.8 * len(ground[1])
        # Deskewed with the ego motion (level LiDAR, heading +x: p + v time), static objects
        # land where the instant sweep has them; the raw sweep is smeared by up to 2 m.
        xyz = xyz_of(real)
        deskewed = xyz + np.outer(real['time'].astype(np.float64), [20.0, 0.0, 0.0])
        reference = static_cells(xyz_of(instant))
        assert reference.sum() > 150
        smear = beyond_a_cell(static_cells(xyz), reference)
        assert smear > 100
        assert beyond_a_cell(static_cells(deskewed), reference) < 0.15 * smear


def quaternion_matrix_np(q) -> np.ndarray:
    x, y, z, w = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def test_three_lidars_one_cloud_each_that_together_cover_the_sides(cfg, tmp_path):
    top = LidarModel(beams=16, azimuth_steps=512)
    summary = write_sample_bag(tmp_path / 'rig', cfg, seconds=0.2, num_cameras=0, lidar=top,
                               lidars='three')
    names = ['top', 'left', 'right']
    topics = {n: f'/jax_perception/input/{n}/pointcloud' for n in names}
    with Reader(tmp_path / 'rig') as reader:
        assert set(reader.topics) == {*topics.values(), GROUND_TRUTH_TOPIC, ODOMETRY_TOPIC,
                                      '/tf', '/tf_static'}
        messages = [(conn.topic, TS.deserialize_cdr(raw, conn.msgtype))
                    for conn, _, raw in reader.messages()]
    (static,) = [m for topic, m in messages if topic == '/tf_static']
    poses = {t.child_frame_id: t.transform for t in static.transforms
             if t.header.frame_id == 'base_link'}
    # The summary gives the poses /tf_static has.
    assert list(summary['lidars']) == names
    mounts = {}
    for name in names:
        frame = f'lidar_{name}'
        v, q = poses[frame].translation, poses[frame].rotation
        pose = ([v.x, v.y, v.z], [q.x, q.y, q.z, q.w])
        given = summary['lidars'][name]
        assert given['frame_id'] == frame
        assert (given['translation'], given['rotation_xyzw']) == pose
        mounts[name] = (quaternion_matrix_np(pose[1]), np.array(pose[0]))
    assert mounts['top'][1].tolist() == list(cfg.lidar.translation)

    base = {}
    for name in names:
        clouds = [m for topic, m in messages if topic == topics[name]]
        assert len(clouds) == summary['frames'] == 2
        assert {c.header.frame_id for c in clouds} == {f'lidar_{name}'}
        p = np.frombuffer(clouds[0].data, POINT_DTYPE, count=clouds[0].width)
        assert p['ring'].max() < 16
        # Its own rotation from the stamp, in firing order (a side LiDAR's inward half looks up
        # over the car at the sky: no returns there).
        assert np.all(np.diff(p['time']) >= 0)
        assert 0 <= p['time'].min() and p['time'].max() < 0.1
        assert p['time'].max() - p['time'].min() > 0.05
        rotation, translation = mounts[name]
        base[name] = xyz_of(p) @ rotation.T + translation
    # Ground beside the car, within 3 m of its sides: the side LiDARs see it, the top one,
    # whose lowest beam meets the ground 6.7 m out, does not.

    def beside(xyz, side):
        return int(np.sum((np.abs(xyz[:, 2]) < 0.1) & (xyz[:, 0] > -1.0) & (xyz[:, 0] < 4.0)
                          & (side * xyz[:, 1] > 1.0) & (side * xyz[:, 1] < 3.0)))
    assert beside(base['top'], 1) == beside(base['top'], -1) == 0
    assert beside(base['left'], 1) > 100 and beside(base['left'], -1) == 0
    assert beside(base['right'], -1) > 100 and beside(base['right'], 1) == 0
    union = np.concatenate(list(base.values()))
    assert beside(union, 1) > 100 and beside(union, -1) > 100
    # The ground truth counts the returns of all three: a superset of what the top one sees.
    truth = [m for topic, m in messages if topic == GROUND_TRUTH_TOPIC][0]
    ids = {d.id for d in truth.detections}
    _, top_ids = SyntheticDrive(cfg, num_cameras=0, lidar=top).ground_truth(0.0)
    assert set(top_ids) < ids


def test_the_side_lidars_take_the_drives_noise_and_dropout(cfg):
    from jax_perception_node.tools.synthetic_drive.rig import lidar_rig
    noisy = LidarModel(beams=16, azimuth_steps=512, rotation_hz=20.0, range_noise_m=0.2,
                       dropout=0.3)
    for mount in lidar_rig('three', cfg, noisy):
        # What the summary and the bag's metadata record for the drive holds for every LiDAR.
        assert (mount.model.rotation_hz, mount.model.range_noise_m, mount.model.dropout) == (
            20.0, 0.2, 0.3), mount.name
