"""Intrinsics from sensor_msgs/CameraInfo: scaling, rejection, the pipeline, replay, the node."""

import copy
import time

import bag_messages
from bag_messages import read_all
from configs import camera_params, small_config, small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.sensors.camera import (CameraInfoError, scale_camera_info,
                                                SCALE_TOLERANCE, with_intrinsics)
import numpy as np
import pytest
from ros_harness import (make_cloud, make_features, NodeProcess, other_domain, Probe,
                         serving_node, stamp_of, status_values, write_params)

# The front camera of small_params(): a 12 x 20 feature map with fx = fy = 8, cx 9.5, cy 5.5.
MAP_H, MAP_W = 12, 20
# A CameraInfo at 4x the map (80 x 48 image). By hand, with s = 20 / 80 = 12 / 48 = 1/4:
# fx_f = 24 / 4 = 6, fy_f = 28 / 4 = 7, cx_f = (35.5 + 0.5) / 4 - 0.5 = 8.5,
# cy_f = (19.5 + 0.5) / 4 - 0.5 = 4.5.
IMAGE = {'width': 80, 'height': 48, 'fx': 24.0, 'fy': 28.0, 'cx': 35.5, 'cy': 19.5}
SCALED = {'fx': 6.0, 'fy': 7.0, 'cx': 8.5, 'cy': 4.5}
T0 = 1_700_000_000 * 10**9


def scaled_config(cameras: int = 1):
    """Return the config a user would write with the CameraInfo's intrinsics scaled by hand."""
    return small_config(cameras, **camera_params('front', **SCALED))


def bad_infos():
    """Return (what, CameraInfo) pairs that must each be rejected."""
    good = bag_messages.camera_info(**IMAGE)
    cases = []

    def case(what, **k):
        msg = copy.deepcopy(good)
        for key, value in k.items():
            if key.startswith('k'):
                msg.k[int(key[1:])] = value
            else:
                setattr(msg, key, value)
        cases.append((what, msg))

    case('zero fx', k0=0.0)
    case('negative fy', k4=-28.0)
    case('NaN fx', k0=float('nan'))
    case('infinite cx', k2=float('inf'))
    case('zero width', width=0)
    case('zero height', height=0)
    case('aspect differs', width=80, height=60)
    case('smaller than the map', width=10, height=6)
    roi = copy.deepcopy(good.roi)
    roi.x_offset, roi.width, roi.height = 40, 60, 36     # 40 + 60 > 80: off the image
    case('roi off the image', roi=roi)
    return cases


def test_scaling_matches_the_hand_computed_values():
    msg = bag_messages.camera_info(**IMAGE)
    assert scale_camera_info(msg, MAP_H, MAP_W)[:4] == pytest.approx(
        (SCALED['fx'], SCALED['fy'], SCALED['cx'], SCALED['cy']), abs=1e-12)
    # Same size as the map: pixel-centre convention keeps everything as it is.
    same = bag_messages.camera_info(20, 12, 8.0, 9.0, 9.5, 5.5)
    assert scale_camera_info(same, MAP_H, MAP_W)[:4] == pytest.approx((8.0, 9.0, 9.5, 5.5))
    # A backbone that rounds rows (900 / 16 = 56.25 -> 56) is within the tolerance.
    rounded = bag_messages.camera_info(1600, 900, 1266.0, 1266.0, 816.0, 491.0)
    fx, fy, cx, cy = scale_camera_info(rounded, 56, 100)[:4]
    assert fx == pytest.approx(1266.0 * 100 / 1600) and fy == pytest.approx(1266.0 * 56 / 900)
    assert cx == pytest.approx(816.5 / 16 - 0.5) and cy == pytest.approx(491.5 * 56 / 900 - 0.5)
    assert abs(100 / 1600 - 56 / 900) <= SCALE_TOLERANCE * (100 / 1600)


def test_binning_changes_nothing_and_an_roi_is_the_window_it_names():
    # CameraInfo: width, height and K at full resolution, the ROI a window of it in those
    # pixels; the map covers the image sent (the window, binned or not).
    binned = bag_messages.camera_info(**IMAGE)
    binned.binning_x = binned.binning_y = 2
    assert scale_camera_info(binned, MAP_H, MAP_W)[:4] == pytest.approx(
        (SCALED['fx'], SCALED['fy'], SCALED['cx'], SCALED['cy']), abs=1e-12)
    full = bag_messages.camera_info(width=1600, height=1200, fx=900.0, fy=910.0, cx=801.5,
                                    cy=598.0)
    full.roi.x_offset, full.roi.y_offset, full.roi.width, full.roi.height = 200, 300, 800, 480
    fx, fy, cx, cy = scale_camera_info(full, MAP_H, MAP_W)[:4]
    # Points in the camera frame, projected at full resolution, moved into the window and
    # scaled to the map by pixel centres; the intrinsics must give the same pixels.
    rng = np.random.default_rng(3)
    xyz = np.column_stack([rng.uniform(-1, 1, 50), rng.uniform(-1, 1, 50), rng.uniform(2, 9, 50)])
    u = 900.0 * xyz[:, 0] / xyz[:, 2] + 801.5
    v = 910.0 * xyz[:, 1] / xyz[:, 2] + 598.0
    u_map = (u - 200 + 0.5) * MAP_W / 800 - 0.5
    v_map = (v - 300 + 0.5) * MAP_H / 480 - 0.5
    np.testing.assert_allclose(fx * xyz[:, 0] / xyz[:, 2] + cx, u_map, atol=1e-9)
    np.testing.assert_allclose(fy * xyz[:, 1] / xyz[:, 2] + cy, v_map, atol=1e-9)


def rectified_info():
    """Return a raw camera's CameraInfo (K, plumb_bob D) with other intrinsics in P."""
    msg = bag_messages.camera_info(**IMAGE)
    msg.d = np.array([-0.3, 0.1, 0.001, -0.002, 0.0])
    # P of the rectified image: by hand, at 1/4 (the map), fx 5, fy 6, cx 8, cy 4.
    msg.p = np.array([20.0, 0, 33.5, 0, 0, 24.0, 17.5, 0, 0, 0, 1, 0])
    return msg


def test_a_rectified_camera_takes_p_without_distortion_and_a_raw_one_k_and_d():
    raw = scale_camera_info(rectified_info(), MAP_H, MAP_W)
    assert raw[:4] == pytest.approx((SCALED['fx'], SCALED['fy'], SCALED['cx'], SCALED['cy']))
    assert raw.distortion_model == 'plumb_bob' and raw.distortion[0] == -0.3
    rect = scale_camera_info(rectified_info(), MAP_H, MAP_W, rectified=True)
    assert rect[:4] == pytest.approx((5.0, 6.0, 8.0, 4.0), abs=1e-12)
    assert (rect.distortion_model, rect.distortion) == ('none', ())
    for field, index, value, named in (('p', 3, -0.12, 'Tx, Ty'), ('p', 5, 0.0, r'p\[5\] \(fy\)'),
                                       ('r', 1, 0.2, 'rectification rotation')):
        msg = rectified_info()
        getattr(msg, field)[index] = value
        with pytest.raises(CameraInfoError, match=named):
            scale_camera_info(msg, MAP_H, MAP_W, rectified=True)
        scale_camera_info(msg, MAP_H, MAP_W)      # K and D: P and R are not read
    # And the other way round: a lens model the node lacks (OpenCV's thin prism terms in
    # depthai's 14 rational_polynomial coefficients) or a K left zero does not keep a
    # rectified stream from its P.
    msg = rectified_info()
    msg.distortion_model, msg.d = 'rational_polynomial', np.full(14, 0.01)
    msg.k = np.zeros(9)
    with pytest.raises(CameraInfoError):
        scale_camera_info(msg, MAP_H, MAP_W)
    assert scale_camera_info(msg, MAP_H, MAP_W, rectified=True) == rect


def test_a_rectified_camera_takes_an_roi_of_the_whole_image_and_refuses_a_window():
    # image_proc's crop_decimate writes the whole image as its ROI when it crops nothing.
    msg = rectified_info()
    msg.roi.width, msg.roi.height = IMAGE['width'], IMAGE['height']
    assert scale_camera_info(msg, MAP_H, MAP_W, rectified=True) == scale_camera_info(
        rectified_info(), MAP_H, MAP_W, rectified=True)
    for x_offset, y_offset, width, height in ((0, 0, 40, 24), (5, 3, 75, 45)):
        msg.roi.x_offset, msg.roi.y_offset = x_offset, y_offset
        msg.roi.width, msg.roi.height = width, height
        scale_camera_info(msg, MAP_H, MAP_W)      # a window of the raw image: K applies
        with pytest.raises(CameraInfoError, match='roi: a window of the raw image'):
            scale_camera_info(msg, MAP_H, MAP_W, rectified=True)


def test_the_path_reads_a_camera_info_as_its_cameras_rectified_says(warmed):
    from jax_perception_node.frames.frame_path import FramePath
    path = FramePath(small_config(1, **{'cameras.front.rectified': True}),
                     warmed(small_config(1)))
    assert path.apply_camera_info('front', rectified_info())[:4] == pytest.approx(
        (5.0, 6.0, 8.0, 4.0))
    path.update(small_config(1, **{'cameras.front.rectified': False}))
    applied = path.apply_camera_info('front', rectified_info())
    assert applied.distortion_model == 'plumb_bob'


@pytest.mark.parametrize('what,msg', bad_infos(), ids=[c[0] for c in bad_infos()])
def test_bad_camera_info_is_rejected_naming_the_field(what, msg):
    with pytest.raises(CameraInfoError) as info:
        scale_camera_info(msg, MAP_H, MAP_W)
    # K's entries are named by index, by name, or both.
    named = {'zero fx': ('k[0]', 'fx'), 'negative fy': ('k[4]', 'fy'), 'NaN fx': ('k[0]', 'fx'),
             'infinite cx': ('k[2]', 'cx'), 'zero width': ('width',), 'zero height': ('height',),
             'aspect differs': ('in y',), 'smaller than the map': ('smaller',),
             'roi off the image': ('roi: x_offset 40',)}[what]
    assert any(name in str(info.value) for name in named), str(info.value)


def test_with_intrinsics_replaces_one_camera_and_ignores_repeats():
    cameras = small_config(2).cameras
    assert with_intrinsics(cameras, 'front', (8.0, 8.0, 9.5, 5.5)) is None
    updated = with_intrinsics(cameras, 'rear', (6.0, 7.0, 8.5, 4.5))
    assert updated[0] == cameras[0]
    assert (updated[1].fx, updated[1].fy, updated[1].cx, updated[1].cy) == (6.0, 7.0, 8.5, 4.5)
    assert updated[1].pose == cameras[1].pose and updated[1].height == cameras[1].height


def frame_inputs(seed: int):
    rng = np.random.default_rng(seed)
    points = rng.normal(scale=4.0, size=(200, 4)).astype(np.float32)
    points[:, 0] = np.abs(points[:, 0]) + 1.0          # ahead, where the front camera looks
    return points, rng.uniform(size=(MAP_H, MAP_W, 3)).astype(np.float32)


@pytest.fixture(scope='module')
def scaled_reference():
    pipe = BevPipeline(scaled_config())
    pipe.warmup()
    return pipe


def test_pipeline_with_camera_info_equals_the_scaled_parameters(scaled_reference):
    pipe = BevPipeline(small_config(1))
    pipe.warmup()
    points, fmap = frame_inputs(1)
    before = pipe.process(points, {'front': fmap}).features
    intrinsics = scale_camera_info(bag_messages.camera_info(**IMAGE), MAP_H, MAP_W)
    pipe.set_calibration(cameras=with_intrinsics(pipe.cfg.cameras, 'front', intrinsics))
    after = pipe.process(points, {'front': fmap}).features
    expected = scaled_reference.process(points, {'front': fmap}).features
    assert not np.array_equal(before[..., 6:], expected[..., 6:]), 'the intrinsics must matter'
    np.testing.assert_array_equal(after, expected)
    assert pipe.compiles_after_warmup == 0


def write_bag(path, frames, infos):
    """Write LiDAR + front features per frame; ``infos``: (frame index, CameraInfo) before."""
    with bagio.BagWriter(path) as writer:
        for k, (points, fmap) in enumerate(frames):
            stamp = T0 + k * 100_000_000
            for index, info in infos:
                if index == k:
                    writer.write(bagio.camera_info_topic('front'), info, stamp - 2_000_000)
            writer.write(bagio.camera_topic('front'), bag_messages.features(fmap, stamp, 'front'),
                         stamp - 1_000_000)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)


def test_replay_reads_camera_info_from_the_bag(tmp_path, scaled_reference):
    frames = [frame_inputs(k) for k in range(4)]
    infos = [(1, bag_messages.camera_info(**IMAGE)), (2, bag_messages.camera_info(**IMAGE))]
    infos += [(3, msg) for _, msg in bad_infos()]
    # A camera without a calibration file (camera_info_manager: K, D, P all zero): no fault.
    uncalibrated = bag_messages.camera_info(**IMAGE)
    uncalibrated.k[:] = 0.0
    # camera_info_manager's message before a driver sets the size: no size either, no fault
    # (it was rejected for its size first, a WARN at camera rate).
    unsized = bag_messages.camera_info(**IMAGE)
    unsized.k[:] = 0.0
    unsized.width = unsized.height = 0
    infos += [(3, uncalibrated), (3, unsized)]
    write_bag(tmp_path / 'in', frames, infos)
    cfg = small_config(1)
    params_pipe = BevPipeline(cfg)
    params_pipe.warmup()
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg)
    assert result.compiles_after_warmup == 0
    assert result.frames == 4
    assert result.camera_info_applied == 1          # the repeat at frame 2 changes nothing
    assert result.rejected_camera_info == len(bad_infos())
    assert any('CameraInfo rejected' in e and 'fx' in e for e in result.errors)
    outputs = [m for _, _, m in read_all(tmp_path / 'out', [bagio.FEATURES_TOPIC])]
    for k, ((points, fmap), msg) in enumerate(zip(frames, outputs)):
        got = np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, -1)
        # Frame 0 precedes every CameraInfo: the parameters are the fallback.
        ref = params_pipe if k == 0 else scaled_reference
        np.testing.assert_array_equal(got, ref.process(points, {'front': fmap}).features)


# -- the node ---------------------------------------------------------------------------------

def ros_camera_info(width, height, fx, fy, cx, cy):
    from sensor_msgs.msg import CameraInfo
    msg = CameraInfo(width=width, height=height, distortion_model='plumb_bob')
    msg.k = [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]
    return msg


@pytest.fixture(scope='module')
def running(tmp_path_factory):
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo
    tmp = tmp_path_factory.mktemp('camera_info')
    params = small_params(1, **{'diagnostics.period_s': 0.2,
                                'diagnostics.lidar_timeout_s': 60.0})
    with serving_node(params, tmp, ('front',)) as (node, probe):
        info_pub = probe.node.create_publisher(
            CameraInfo, bagio.camera_info_topic('front'), qos_profile_sensor_data)
        probe.wait_for(lambda: info_pub.get_subscription_count() > 0, what='camera_info sub')
        yield node, probe, info_pub


def send_frame(probe, k, points, fmap):
    stamp = T0 + k * 10**9
    probe.publish_maps({'front': make_features(fmap, stamp, 'front')})
    probe.cloud_pub.publish(make_cloud(points, stamp))
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features)
                   and any(stamp_of(m) == stamp for m in probe.latency),
                   what=f'output of frame {k}')
    msg = next(m for m in probe.features if stamp_of(m) == stamp)
    latency = next(m for m in probe.latency if stamp_of(m) == stamp)
    assert status_values(latency.status[0])['compiles_after_warmup'] == '0'
    return np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, -1)


def wait_status(probe, predicate, what):
    start = len(probe.diagnostics)
    probe.wait_for(lambda: len(probe.diagnostics) > start + 1
                   and predicate(status_values(probe.diagnostics[-1].status[0])),
                   timeout=20.0, what=what)
    return status_values(probe.diagnostics[-1].status[0])


def test_node_applies_camera_info_without_a_compile(running, scaled_reference):
    node, probe, info_pub = running
    params_pipe = BevPipeline(small_config(1))
    params_pipe.warmup()
    points, fmap = frame_inputs(7)
    before = send_frame(probe, 0, points, fmap)
    np.testing.assert_array_equal(before, params_pipe.process(points, {'front': fmap}).features)

    info_pub.publish(ros_camera_info(**IMAGE))
    wait_status(probe, lambda v: v['camera_info_applied'] == '1', 'CameraInfo applied')
    after = send_frame(probe, 1, points, fmap)
    np.testing.assert_array_equal(after, scaled_reference.process(points, {'front': fmap})
                                  .features)

    bad = [ros_camera_info(80, 48, 0.0, 28.0, 35.5, 19.5),            # zero focal length
           ros_camera_info(80, 48, float('nan'), 28.0, 35.5, 19.5),   # NaN focal length
           ros_camera_info(0, 48, 24.0, 28.0, 35.5, 19.5),            # zero size
           ros_camera_info(80, 60, 24.0, 28.0, 35.5, 19.5)]           # x and y scale differ
    for msg in bad:
        info_pub.publish(msg)
        time.sleep(0.05)
    values = wait_status(probe, lambda v: v['rejected_camera_info'] == str(len(bad)),
                         'CameraInfo rejections counted')
    assert values['camera_info_applied'] == '1'
    # A camera without a calibration file publishes K all zero beside every image: said once
    # at INFO, never counted as rejected (its WARN would never clear), the calibration kept.
    uncalibrated = ros_camera_info(**IMAGE)
    uncalibrated.k = [0.0] * 9
    for _ in range(3):
        info_pub.publish(uncalibrated)
        time.sleep(0.05)
    probe.wait_for(lambda: 'CameraInfo: k is all zero: an uncalibrated camera' in node.log(),
                   what='the uncalibrated camera said')
    still = send_frame(probe, 2, points, fmap)
    np.testing.assert_array_equal(still, after)
    values = wait_status(probe, lambda v: True, 'a report')
    assert values['rejected_camera_info'] == str(len(bad))
    assert node.log().count('k is all zero') == 1
    assert node.alive()
    assert 'CameraInfo rejected' in node.log()


def test_a_latched_camera_info_is_received_with_qos_overrides(tmp_path):
    # Drivers that publish their CameraInfo once, latched (transient local), before the node
    # subscribes: only a subscription made transient local by qos_overrides receives it (the
    # front camera's); the rear camera's, without them, is named with the override to set.
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo, Image
    topics = {name: bagio.camera_info_topic(name) for name in ('front', 'rear')}
    prefix = f'qos_overrides.{topics["front"]}.subscription.'
    unknown = ('qos_overrides./jax_perception/input/camera/left/camera_info.subscription.depth',
               'qos_overrides./jax_perception/output/objects.publisher.reliability')
    params = small_params(2, **{'diagnostics.period_s': 0.2,
                                'diagnostics.lidar_timeout_s': 60.0,
                                prefix + 'durability': 'transient_local',
                                prefix + 'reliability': 'reliable',
                                unknown[0]: 7, unknown[1]: 'best_effort'})
    domain = other_domain(6)     # the module's running node would answer too
    probe = Probe(cameras=('front', 'rear'), domain_id=domain)
    node = None
    try:
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        for topic in topics.values():
            probe.node.create_publisher(CameraInfo, topic, latched).publish(
                ros_camera_info(**IMAGE))
        # The odometry remapped to a topic where images are published: nothing would arrive.
        probe.node.create_publisher(Image, '/sensing/camera/front/image_raw', 1)
        remap = ['-r', '/jax_perception/input/odometry:=/sensing/camera/front/image_raw']
        node = NodeProcess(write_params(params, tmp_path / 'params.yaml'), tmp_path / 'node.log',
                           remap, domain_id=domain)
        probe.wait_ready(node)
        values = wait_status(probe, lambda v: v['camera_info_applied'] == '1',
                             'the latched CameraInfo applied')
        assert values['rejected_camera_info'] == '0'
        probe.wait_for(lambda: node.log().count('WARN') >= 3, what='the three warnings')
        warnings = [line for line in node.log().splitlines() if 'WARN' in line]
        [unapplied] = [line for line in warnings if 'QoS overrides not applied' in line]
        assert all(name in unapplied for name in unknown) and prefix not in unapplied
        [wrong_type] = [line for line in warnings if 'publishers send' in line]
        assert ('/sensing/camera/front/image_raw: its publishers send sensor_msgs/msg/Image, this '
                'input reads nav_msgs/msg/Odometry') in wrong_type
        [rear] = [line for line in warnings if 'latches' in line]
        assert (f'input {topics["rear"]}: its publisher latches' in rear
                and f'qos_overrides.{topics["rear"]}.subscription.durability: transient_local'
                in rear)
        assert node.alive() and len(warnings) == 3, warnings
    finally:
        probe.close()
        if node is not None:
            node.stop()
