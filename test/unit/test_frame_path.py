"""FramePath: frame checks, CameraInfo, live updates (newest word wins), locking, TF poses."""

from dataclasses import replace
import threading
from types import SimpleNamespace

import bag_messages
from configs import camera_params, FRONT, REAR, small_config
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.frames import camera_info_calibration, frame_path
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.geometry.transforms import TransformError
from jax_perception_node.ros.frame_warnings import LogThrottle, warn_frame
from jax_perception_node.ros.health import assess, CloudTimes, COUNTS, PERIOD_COUNTS, WARN
from jax_perception_node.sensors import camera
from jax_perception_node.sensors.camera import CameraInfoError, FeatureMapError
from jax_perception_node.sensors.cloud import CloudFormatError
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from reference import lift_ref, voxelize_ref
from tf_messages import tf_message, transform

T0 = 1_700_000_000 * 10**9
# A CameraInfo at 4x the 12 x 20 front map; scaled by hand (s = 1/4): fx 24 / 4 = 6,
# fy 28 / 4 = 7, cx (35.5 + 0.5) / 4 - 0.5 = 8.5, cy (19.5 + 0.5) / 4 - 0.5 = 4.5.
IMAGE = {'width': 80, 'height': 48, 'fx': 24.0, 'fy': 28.0, 'cx': 35.5, 'cy': 19.5}
SCALED = {'fx': 6.0, 'fy': 7.0, 'cx': 8.5, 'cy': 4.5}
RNG = np.random.default_rng(21)
POINTS = np.abs(RNG.normal(scale=4.0, size=(200, 4))).astype(np.float32) + [1, -4, -1, 0]
MAPS = {name: RNG.uniform(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}


@pytest.fixture
def path(pipe):
    """Return a FramePath on the shared pipeline (which it resets to the parameters')."""
    return FramePath(small_config(), pipe)


def cloud(stamp=T0, frame_id='lidar'):
    msg = bag_messages.cloud(POINTS, stamp)
    msg.header.frame_id = frame_id
    return msg


def features(name, stamp=T0, frame_id=None):
    return bag_messages.features(MAPS[name], stamp, name, frame_id)


def run_frame(path, stamp=T0):
    for name in MAPS:
        path.add_features(name, features(name, stamp))
    return path.process(cloud(stamp)).result.features


def test_a_cloud_in_another_frame_is_rejected_naming_both_frames_and_the_parameter(path):
    with pytest.raises(CloudFormatError) as info:
        path.process(cloud(frame_id='base_link'))
    assert str(info.value) == ('header.frame_id "base_link" is not the LiDAR frame "lidar" '
                               '(parameter lidar.frame_id): clouds must be in the configured '
                               'frame')
    assert path.process(cloud()).result.num_points == len(POINTS)


def test_a_cloud_stamped_ahead_of_the_clock_is_refused_and_resets_nothing(path):
    run_frame(path, T0)
    ahead = T0 + 2 * 10**9     # 2 s ahead of a clock at T0 (the margin is 1 s)
    with pytest.raises(CloudFormatError, match=r'header.stamp is 2.000 s ahead of the node\'s '
                                               r'clock \(more than 1 s\)'):
        path.process(cloud(ahead), now_ns=T0)
    # Refused before pairing: the next cloud is no jump back, and the maps are still there.
    frame = path.process(cloud(T0 + 10**8), now_ns=T0 + 10**8)
    assert not frame.stamps_jumped and frame.result.cameras_used == 2
    # Within the margin, or without a clock (offline; a sim clock not started): taken.
    assert path.process(cloud(T0 + 10**9), now_ns=T0 + 10**8).stamp_ns == T0 + 10**9
    assert path.process(cloud(ahead)).stamp_ns == ahead
    # A driver that does not stamp: refused while a clock runs, taken offline.
    with pytest.raises(CloudFormatError, match=r'header.stamp is 0: the driver does not stamp'):
        path.process(cloud(0), now_ns=T0)
    assert path.process(cloud(0)).stamp_ns == 0
    assert path.process(cloud(0), now_ns=5 * 10**6).stamp_ns == 0   # a simulation's first


@pytest.mark.parametrize('rows', [
    np.zeros((0, 4)), np.full((1000, 4), np.nan),
    np.hstack([np.ones((500, 3)), np.full((500, 1), 3e38)]),    # intensity out of range
])
def test_a_cloud_without_a_valid_point_is_processed_but_flagged_empty(path, rows):
    msg = bag_messages.cloud(rows.astype(np.float32), T0)
    msg.header.frame_id = 'lidar'
    frame = path.process(msg)
    assert frame.empty and not frame.result.features.any()
    # One valid point anywhere, even the very last and outside the grid, is a valid cloud.
    rows = np.vstack([rows, [[900.0, 0.0, 0.0, 1.0]]]).astype(np.float32)
    msg = bag_messages.cloud(rows, T0 + 10**8)
    msg.header.frame_id = 'lidar'
    assert not path.process(msg).empty
    assert not path.process(cloud(T0 + 2 * 10**8)).empty


def test_an_organized_cloud_takes_its_bucket_by_its_returns_not_its_slots(path):
    # An Ouster-like organized cloud: 2 x 1024 slots, 800 returns, NaN elsewhere. The largest
    # bucket holds 1024 points: chosen on the slots, 1024 rows of returns were cut.
    rng = np.random.default_rng(5)
    slots = np.full((2048, 4), np.nan, np.float32)
    at = np.sort(rng.choice(2048, 800, replace=False))
    slots[at] = np.abs(rng.normal(scale=4.0, size=(800, 4))) + [1, -4, -1, 0]
    msg = bag_messages.cloud(slots, T0)
    msg.header.frame_id, msg.height, msg.width = 'lidar', 2, 1024
    msg.row_step = 1024 * msg.point_step
    result = path.process(msg).result
    assert (result.num_points, result.bucket, result.overflow_points) == (800, 1024, 0)
    plain = path.process(cloud_of(slots[at], T0 + 10**8)).result
    np.testing.assert_array_equal(result.features, plain.features)


def cloud_of(points, stamp):
    msg = bag_messages.cloud(points.astype(np.float32), stamp)
    msg.header.frame_id = 'lidar'
    return msg


def test_a_cloud_without_the_intensity_field_is_served_with_zeros_and_named(path):
    from dataclasses import replace
    cfg = path.cfg
    assert path.process(cloud(T0)).fields_without_intensity == ()
    path.update(replace(cfg, lidar_filter=replace(cfg.lidar_filter, intensity_field='signal')))
    try:
        frame = path.process(cloud(T0 + 10**8))
    finally:
        path.update(cfg)
    assert frame.fields_without_intensity == ('x', 'y', 'z', 'intensity')
    assert frame.result.features[..., 0].any() and not frame.result.features[..., 5].any()


def test_the_intensity_scale_is_live_and_scales_the_intensity_alone(path):
    from dataclasses import replace
    cfg = path.cfg
    before = run_frame(path)
    compiles = compile_count()
    for k, scale in enumerate((0.125, 255.0)):
        scaled = replace(cfg, lidar_filter=replace(cfg.lidar_filter, intensity_scale=scale))
        path.update(scaled)
        try:
            bev = run_frame(path, T0 + (k + 1) * 10**8)
        finally:
            path.update(cfg)
        np.testing.assert_allclose(bev[..., :6], voxelize_ref(POINTS, scaled), rtol=1e-5,
                                   atol=1e-4)
        np.testing.assert_array_equal(bev[..., :5], before[..., :5])
        np.testing.assert_allclose(bev[..., 5], before[..., 5] * scale, rtol=1e-6)
        assert bev[..., 5].any()
    assert compile_count() == compiles


def test_a_cloud_off_the_heads_intensity_scale_is_named_with_the_scale_to_set(warmed, path):
    from dataclasses import replace
    cfg = small_config(cameras=0, **{'head.module': 'toy_heads:intensity_scale_head'})
    head_path = FramePath(cfg, warmed(cfg))
    rng = np.random.default_rng(8)
    points = np.hstack([rng.uniform(-6.0, 6.0, (600, 3)), rng.uniform(0.0, 255.0, (600, 1))])
    assert head_path.process(cloud_of(points, T0)).off_scale is None
    signal = points * [1, 1, 1, 8]              # an Ouster's signal: 8x
    frame = head_path.process(cloud_of(signal, T0 + 10**8))
    off = frame.off_scale
    sample = signal[:, 3]                       # 600 rows: every one is in the sample
    assert (off.key, off.p99) == ('lidar', pytest.approx(np.percentile(sample, 99.0)))
    assert off.suggested == float(f'{0.5 * 255.0 / off.p99:.2g}')
    lines = []
    warn_frame(SimpleNamespace(info=lines.append, warning=lines.append), cfg, frame,
               LogThrottle())
    assert lines == ['point cloud intensities read off the scale the head was trained on: 99 % '
                     f'of them under {off.p99:.4g}: set lidar.intensity_scale to about '
                     f"{off.suggested:g} (0.125 for an Ouster's signal, 255 for a 0-1 "
                     'simulator)']
    head_path.update(replace(cfg, lidar_filter=replace(cfg.lidar_filter,
                                                       intensity_scale=off.suggested)))
    assert head_path.process(cloud_of(signal, T0 + 2 * 10**8)).off_scale is None
    # Without a head that declares its scale nothing is judged.
    assert path.process(cloud_of(signal, T0 + 3 * 10**8)).off_scale is None


def test_with_a_projection_a_picture_asked_for_is_neither_built_nor_fetched(warmed, tmp_path):
    # What the node asks while only ~/output/bev_image is subscribed, output.bev_features off:
    # the projected channels have no picture, so the BEV stays on the device.
    weights = tmp_path / 'projection.npz'
    fused = small_config(cameras=0).fused_channels
    np.savez(weights, W=np.ones((fused, 2), np.float32), b=np.zeros(2, np.float32))
    cfg = small_config(cameras=0, **{'fusion.weights_file': str(weights)})
    frame = FramePath(cfg, warmed(cfg)).process(cloud(), picture=True, features=False)
    assert frame.rgb is None and frame.result.features is None
    assert FramePath(cfg, warmed(cfg)).process(cloud(T0 + 10**8)).result.features.shape[-1] == 2


def test_the_lidar_frame_is_the_parameter(pipe):
    cfg = small_config(**{'lidar.frame_id': 'velodyne'})
    path = FramePath(cfg, pipe)
    with pytest.raises(CloudFormatError, match='"lidar" is not the LiDAR frame "velodyne"'):
        path.process(cloud())
    assert path.process(cloud(frame_id='velodyne')).result.num_points == len(POINTS)
    # A ROS 1 bag's '/velodyne' names the same frame, as in tf2 (it was refused).
    assert path.process(cloud(T0 + 10**8, '/velodyne')).result.num_points == len(POINTS)


def test_a_stamp_with_nanoseconds_past_a_second_is_refused(path):
    # Taken, the outputs carried (sec + 1, nanosec - 1e9): another stamp than the input's.
    bad = cloud(T0 + 10**8)
    bad.header.stamp.nanosec += 10**9
    message = r'header.stamp is sec 1700000000, nanosec 1100000000: seconds must be >= 0 and '
    with pytest.raises(CloudFormatError, match=message):
        path.process(bad)
    bad_map = features('front', T0 + 10**8)
    bad_map.header.stamp.nanosec += 10**9
    with pytest.raises(FeatureMapError, match=message):
        path.add_features('front', bad_map)
    frame = path.process(cloud(T0 + 10**8))
    assert frame.result.num_points == len(POINTS) and frame.stale == ('front', 'rear')


def test_a_feature_map_in_another_frame_is_rejected_and_not_buffered(path):
    with pytest.raises(FeatureMapError) as info:
        path.add_features('front', features('front', frame_id='rear_optical'))
    assert str(info.value) == (
        'header.frame_id "rear_optical" is not camera front\'s frame "front_optical" '
        '(parameter cameras.front.frame_id): camera messages must be in the configured frame')
    path.add_features('rear', features('rear'))
    frame = path.process(cloud())
    assert frame.stale == ('front',) and frame.result.cameras_used == 1


def test_a_camera_frame_from_the_parameters(pipe):
    path = FramePath(small_config(**{'cameras.front.frame_id': 'cam0'}), pipe)
    with pytest.raises(FeatureMapError, match='"front_optical" is not camera front\'s frame '
                                              '"cam0"'):
        path.add_features('front', features('front'))
    path.add_features('front', features('front', frame_id='cam0'))
    path.add_features('front', features('front', T0 + 10**8, frame_id='/cam0'))


def test_camera_info_is_applied_once_and_a_bad_one_changes_nothing(path, warmed):
    reference = warmed(small_config(**camera_params('front', **SCALED)))
    before = run_frame(path, T0)
    applied = path.apply_camera_info('front', bag_messages.camera_info(**IMAGE))
    assert tuple(applied[:4]) == pytest.approx(tuple(SCALED.values()), abs=1e-12)
    assert path.apply_camera_info('front', bag_messages.camera_info(**IMAGE)) is None
    after = run_frame(path, T0 + 10**9)
    assert not np.array_equal(after, before)
    np.testing.assert_array_equal(after, reference.process(POINTS, MAPS).features)
    with pytest.raises(CameraInfoError, match='fx'):
        path.apply_camera_info('front', bag_messages.camera_info(80, 48, 0.0, 28.0, 35.5, 19.5))
    np.testing.assert_array_equal(run_frame(path, T0 + 2 * 10**9), after)
    assert (path.cameras[0].fx, path.cameras[0].cy) == (6.0, 4.5)


def test_a_repeated_camera_info_is_checked_once_until_it_or_the_calibration_changes(
        path, monkeypatch):
    checked = []

    def counting(*args, **kwargs):
        checked.append(args[0].k[0])
        return camera.scale_camera_info(*args, **kwargs)
    monkeypatch.setattr(camera_info_calibration, 'scale_camera_info', counting)
    other = dict(IMAGE, fx=20.0)
    assert path.apply_camera_info('front', bag_messages.camera_info(**IMAGE)) is not None
    assert path.apply_camera_info('front', bag_messages.camera_info(**IMAGE)) is None
    assert checked == [24.0]
    with pytest.raises(CameraInfoError, match='fx'):     # refused: the calibration stays
        path.apply_camera_info('front', bag_messages.camera_info(**dict(IMAGE, fx=0.0)))
    assert path.apply_camera_info('front', bag_messages.camera_info(**IMAGE)) is None
    assert path.apply_camera_info('front', bag_messages.camera_info(**other)).fx == 5.0
    assert path.apply_camera_info('front', bag_messages.camera_info(**IMAGE)).fx == 6.0
    assert checked == [24.0, 0.0, 20.0, 24.0]
    moved = bag_messages.camera_info(**IMAGE)
    moved.header.frame_id = 'camera_optical'
    assert path.apply_camera_info('front', moved) is None and checked[-1] == 24.0
    assert len(checked) == 5
    # The parameters set front's intrinsics: the same CameraInfo is the newest word again.
    path.update(small_config(**camera_params('front', fx=5.0)), {'front'})
    assert path.cameras[0].fx == 5.0
    assert path.apply_camera_info('front', moved).fx == 6.0
    assert path.cameras[0].fx == 6.0 and len(checked) == 6


def test_camera_info_fields_are_none_for_a_field_that_is_no_number():
    msg = bag_messages.camera_info(**IMAGE)
    assert camera.camera_info_fields(msg)[:4] == ('camera', 80, 48, 'plumb_bob')
    msg.k = ['fx', 0, 0, 0, 0, 0, 0, 0, 1]
    assert camera.camera_info_fields(msg) is None


def test_update_keeps_camera_info_until_the_parameters_set_those_intrinsics(path, warmed):
    path.apply_camera_info('front', bag_messages.camera_info(**IMAGE))
    # Another key changes: the front camera keeps the newer CameraInfo intrinsics.
    moved = small_config(**{'lidar.translation': [0.5, 0.25, 1.0]})
    path.update(moved, set())
    reference = warmed(small_config(**camera_params('front', **SCALED),
                                    **{'lidar.translation': [0.5, 0.25, 1.0]}))
    np.testing.assert_array_equal(run_frame(path), reference.process(POINTS, MAPS).features)
    # The parameters set front's fx: now theirs is the newest word, for all four values.
    count = compile_count()
    path.update(small_config(**camera_params('front', fx=5.0),
                             **{'lidar.translation': [0.5, 0.25, 1.0]}), {'front'})
    intrinsics = [(c.fx, c.fy, c.cx, c.cy) for c in path.cameras]
    assert intrinsics == [(5.0, 8.0, 9.5, 5.5), (8.0, 8.0, 9.5, 5.5)]
    assert compile_count() == count


def test_update_applies_the_live_keys_and_the_config_is_never_stale(path):
    cfg = small_config(**{'sync.max_camera_lidar_delay_s': 0.01, 'grid.frame_id': 'ego',
                          'accumulation.max_odometry_gap_s': 0.05,
                          'accumulation.max_sweep_age_s': 0.25, 'lidar.frame_id': 'velodyne'})
    path.update(cfg)
    assert path.cfg is cfg
    assert path.sync.tolerance_ns == 10_000_000
    assert (path.odometry.max_gap_ns, path.odometry.child_frame_id) == (50_000_000, 'ego')
    assert path.pipe.max_sweep_age_s == 0.25
    # A camera map 20 ms from the LiDAR stamp no longer pairs; the cloud frame is the new one.
    path.add_features('front', features('front', T0 + 20_000_000))
    frame = path.process(cloud(T0, frame_id='velodyne'))
    assert frame.stale == ('front', 'rear')


def test_an_update_the_lift_cannot_hold_changes_nothing(path):
    before = run_frame(path, T0)
    # The rear camera turned to look forward: more samples per cell than the slots of warm-up.
    crowded = small_config(**camera_params('rear', translation=(-1.0, 0.0, 1.5), rotation=FRONT),
                           **{'sync.max_camera_lidar_delay_s': 0.01})
    with pytest.raises(ConfigError, match=r'cameras\.rear: .*slots per cell'):
        path.update(crowded, {'rear'})
    assert path.sync.tolerance_ns == 100_000_000 and path.cfg is not crowded
    np.testing.assert_array_equal(run_frame(path, T0 + 10**9), before)


def test_feature_maps_are_taken_while_the_pipeline_is_busy(path):
    """Feature maps are decoded and buffered without waiting for the pipeline lock."""
    done = threading.Event()

    def feed():
        path.add_features('front', features('front'))
        done.set()

    with path._pipe_lock:        # as while a frame computes
        worker = threading.Thread(target=feed, daemon=True)
        worker.start()
        assert done.wait(timeout=60.0), 'add_features waited for the pipeline'
    worker.join()


def test_a_camera_info_repeating_the_calibration_is_taken_while_the_pipeline_is_busy(path):
    """A driver's CameraInfo beside every image does not wait for a frame; a new one does."""
    path.apply_camera_info('front', bag_messages.camera_info(**IMAGE))
    done, changed = threading.Event(), threading.Event()

    def feed(event, **info):
        path.apply_camera_info('front', bag_messages.camera_info(**info))
        event.set()

    with path._pipe_lock:        # as while a frame computes
        threading.Thread(target=feed, args=(done,), kwargs=IMAGE, daemon=True).start()
        assert done.wait(timeout=60.0), 'a repeated CameraInfo waited for the pipeline'
        threading.Thread(target=feed, args=(changed,), kwargs=dict(IMAGE, fx=20.0),
                         daemon=True).start()
        assert not changed.wait(timeout=0.2), 'a new calibration did not wait for the frame'
    assert changed.wait(timeout=60.0)
    assert path.cameras[0].fx == pytest.approx(5.0)


def test_a_new_camera_info_computes_its_lift_geometry_before_taking_the_pipeline(
        path, monkeypatch):
    """The ~170 ms lift tables of new intrinsics never hold a frame up; a race lands on both."""
    lift_tables, held = path.pipe.lift_tables, []

    def recording(cameras):
        held.append(path._pipe_lock.locked())
        return lift_tables(cameras)
    monkeypatch.setattr(path.pipe, 'lift_tables', recording)
    assert path.apply_camera_info('front', bag_messages.camera_info(**IMAGE)).fx == 6.0
    assert held == [False]
    # The cameras change while the geometry is computed: the CameraInfo lands on the newer ones.
    moved = replace(path.cameras[1], fx=7.0)

    def racing(cameras):
        path.cameras = (path.cameras[0], moved)
        return recording(cameras)
    monkeypatch.setattr(path.pipe, 'lift_tables', racing)
    assert path.apply_camera_info('front', bag_messages.camera_info(**dict(IMAGE, fx=20.0)))
    assert [(c.fx, c.name) for c in path.cameras] == [(5.0, 'front'), (7.0, 'rear')]


def test_a_new_path_starts_from_the_parameters_calibration(pipe):
    """A pipeline reused by a new path (replay's next bag) keeps no CameraInfo of the last."""
    first = FramePath(small_config(), pipe)
    params_output = run_frame(first)
    first.apply_camera_info('front', bag_messages.camera_info(**IMAGE))
    assert not np.array_equal(run_frame(first, T0 + 10**9), params_output)
    second = FramePath(small_config(), pipe)
    np.testing.assert_array_equal(run_frame(second), params_output)


# -- extrinsics.source tf and accumulation.pose_source tf (issue 17) ------------------------------

TF_LIDAR = ((0.25, -0.5, 0.5), (0.0, 0.0, 0.2588190451, 0.9659258263))     # yaw 30 degrees
TF_CAMERAS = {'front': ((1.0, 0.0, 1.5), FRONT), 'rear': ((-1.0, 0.0, 1.5), REAR)}
# Deliberately wrong parameter poses: TF must win over every one of them.
WRONG = {'lidar.translation': [3.0, 2.0, -1.0], 'lidar.rotation_xyzw': [0.0, 0.0, 0.0, 1.0],
         'cameras.front.translation': [0.5, 1.0, 1.0],
         'cameras.rear.translation': [-2.0, -1.0, 1.0], 'fusion.max_samples_per_cell': 6}


def tf_config(**overrides):
    return small_config(**{'extrinsics.source': 'tf', **WRONG, **overrides})


def truth_config():
    """Return the configuration whose parameter poses are the TF poses (for the reference)."""
    (t, q) = TF_LIDAR
    params = {'lidar.translation': list(t), 'lidar.rotation_xyzw': list(q)}
    for name, (t, q) in TF_CAMERAS.items():
        params.update({f'cameras.{name}.translation': list(t),
                       f'cameras.{name}.rotation_xyzw': list(q)})
    return small_config(**params)


def static_tf():
    return tf_message(transform('base_link', 'velodyne', 0, *TF_LIDAR),
                      *(transform('base_link', f'cam_{name}', 0, *pose)
                        for name, pose in TF_CAMERAS.items()))


@pytest.fixture(scope='module')
def tf_pipe(warmed):
    return warmed(tf_config())


def tf_frame(path, stamp=T0, lidar_frame='velodyne', camera_frame='cam_{}'):
    for name in MAPS:
        path.add_features(name, features(name, stamp, frame_id=camera_frame.format(name)))
    return path.process(cloud(stamp, frame_id=lidar_frame))


def test_tf_poses_replace_wrong_parameter_poses_without_a_compile(tf_pipe):
    path = FramePath(tf_config(), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    count = compile_count()
    frames = [tf_frame(path, T0 + k * 10**8) for k in range(3)]
    assert compile_count() == count
    truth = truth_config()
    out = frames[-1].result.features
    np.testing.assert_allclose(out[..., :6], voxelize_ref(POINTS, truth), rtol=1e-5, atol=1e-5)
    camera, coverage = lift_ref(truth, MAPS)
    assert 0 < coverage.sum() < coverage.size
    np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[..., 9], coverage)
    # Static TF: each pose applied once (the cameras as their first map named their frame, the
    # LiDAR with the first cloud), not per frame.
    assert path.tf_calibrations == 3
    # The parameters' (wrong) poses give another picture: the check above could not pass.
    assert not np.allclose(voxelize_ref(POINTS, tf_config()), voxelize_ref(POINTS, truth))


def test_static_tf_camera_poses_apply_off_the_frame_path(tf_pipe, monkeypatch):
    """The lift geometry of a /tf_static camera pose runs when the pose arrives, not in a frame."""
    path = FramePath(tf_config(), tf_pipe)
    geometry = []
    lift_tables = tf_pipe.lift_tables
    monkeypatch.setattr(tf_pipe, 'lift_tables', lambda cameras: geometry.append(
        {c.name: c.pose for c in cameras}) or lift_tables(cameras))
    for name in MAPS:       # the maps name their frames before TF knows them: nothing to apply
        path.add_features(name, features(name, T0, frame_id=f'cam_{name}'))
    assert geometry == [] and path.tf_calibrations == 0
    path.add_transforms(static_tf(), static=True)
    assert len(geometry) == 1 and path.tf_calibrations == 1
    truth = truth_config()
    assert geometry[0] == {c.name: c.pose for c in truth.cameras}
    frames = [path.process(cloud(T0 + k * 10**8, frame_id='velodyne')) for k in range(3)]
    assert len(geometry) == 1       # no frame ran the lift geometry
    camera, coverage = lift_ref(truth, MAPS)
    np.testing.assert_allclose(frames[0].result.features[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(frames[0].result.features[..., 9], coverage)
    # The same /tf_static again (a late-joining publisher's latched copy): nothing moves.
    path.add_transforms(static_tf(), static=True)
    assert len(geometry) == 1


def test_with_tf_a_cloud_in_an_unknown_frame_is_not_processed(tf_pipe):
    path = FramePath(tf_config(), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    with pytest.raises(TransformError, match='"radar" into "base_link": frame "radar" is '
                                             'unknown'):
        tf_frame(path, lidar_frame='radar')
    # The configured LiDAR frame means nothing with TF extrinsics: 'lidar' is unknown too.
    with pytest.raises(TransformError, match='frame "lidar" is unknown'):
        path.process(cloud())
    # The two cameras' poses, applied as their maps named their frames; no LiDAR pose.
    assert path.tf_calibrations == 2 and ':lidar' not in path._tf_applied
    assert tf_frame(path).result.num_points == len(POINTS)


def test_with_tf_a_camera_tf_cannot_place_is_masked_and_named(tf_pipe):
    path = FramePath(tf_config(), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    path.add_features('front', features('front', frame_id='cam_front'))
    path.add_features('rear', features('rear', frame_id='rear_unknown'))
    frame = path.process(cloud(frame_id='velodyne'))
    assert frame.cameras_without_tf == ('rear',) and frame.result.cameras_used == 1
    camera, _ = lift_ref(truth_config(), MAPS, used={'front'})
    np.testing.assert_allclose(frame.result.features[..., 6:9], camera, rtol=1e-4, atol=1e-5)


def test_tf_poses_the_lift_slots_cannot_hold_are_masked_counted_and_not_retried(
        warmed, monkeypatch):
    # Slots as the parameters' poses need them: the cameras do not overlap there.
    cfg = tf_config(**{'fusion.max_samples_per_cell': 0})
    tf_pipe = warmed(cfg)
    path = FramePath(cfg, tf_pipe)
    # The rear camera on the front camera's pose: both see the same cells, more samples per
    # cell than the slots of warm-up.
    crowded = dict(TF_CAMERAS, rear=TF_CAMERAS['front'])
    path.add_transforms(tf_message(transform('base_link', 'velodyne', 0, *TF_LIDAR),
                                   *(transform('base_link', f'cam_{name}', 0, *pose)
                                     for name, pose in crowded.items())), static=True)
    tries = []
    set_calibration = tf_pipe.set_calibration

    def counted(lidar=None, cameras=None, lidar_filter=None, tables=None):
        tries.append(cameras is not None)
        return set_calibration(lidar, cameras, lidar_filter, tables)
    monkeypatch.setattr(tf_pipe, 'set_calibration', counted)
    first = tf_frame(path)
    # The front camera's pose fits on its own and applied as its map named its frame; the
    # rear one then crowds the cells: masked, named for lift slots, not for want of TF.
    assert first.cameras_over_slots == ('rear',) and first.cameras_without_tf == ()
    assert 'slots per cell' in first.slots_refusal and first.result.cameras_used == 1
    assert first.result.num_points == len(POINTS)          # the LiDAR is still processed
    tries.clear()
    second = tf_frame(path, T0 + 10**8)
    # The same pose is not tried again: no lift geometry on this frame's path.
    assert second.cameras_over_slots == ('rear',) and second.slots_refusal == ''
    assert True not in tries
    # The front camera on its own (the rear map stale): a set not tried yet, and it fits.
    path.add_features('front', features('front', T0 + 10**9, frame_id='cam_front'))
    alone = path.process(cloud(T0 + 10**9, frame_id='velodyne'))
    assert alone.stale == ('rear',) and alone.cameras_over_slots == ()
    assert alone.result.cameras_used == 1
    # The rear camera back on its own pose: a new pose, so it is tried, fits, and applies.
    path.add_transforms(static_tf(), static=True)
    third = tf_frame(path, T0 + 2 * 10**9)
    assert third.cameras_over_slots == () and third.result.cameras_used == 2
    camera, _ = lift_ref(truth_config(), MAPS)
    np.testing.assert_allclose(third.result.features[..., 6:9], camera, rtol=1e-4, atol=1e-5)


def test_dynamic_tf_is_interpolated_at_the_cloud_stamp(tf_pipe):
    path = FramePath(tf_config(cameras=2), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    (t, q) = TF_LIDAR
    # The LiDAR on a moving mount: x 0.25 at T0, 1.25 at T0 + 1 s; the cloud at T0 + 0.25 s.
    path.add_transforms(tf_message(transform('base_link', 'velodyne', T0, t, q)), static=False)
    path.add_transforms(tf_message(transform('base_link', 'velodyne', T0 + 10**9,
                                             (t[0] + 1.0, t[1], t[2]), q)), static=False)
    out = tf_frame(path, T0 + 10**9 // 4).result.features
    moved = small_config(**{'lidar.translation': [t[0] + 0.25, t[1], t[2]],
                            'lidar.rotation_xyzw': list(q)})
    np.testing.assert_allclose(out[..., :6], voxelize_ref(POINTS, moved), rtol=1e-5, atol=1e-5)
    # Each new LiDAR pose is applied (cheap: no camera geometry), the cameras' only once (as
    # their maps named their frames): two cameras, then the LiDAR in each of two frames.
    tf_frame(path, T0 + 10**9 // 2)
    assert path.tf_calibrations == 4
    assert [c.pose.translation for c in path.cameras] == [TF_CAMERAS['front'][0],
                                                          TF_CAMERAS['rear'][0]]


def test_back_to_parameter_poses_and_live_updates_keep_tf_poses(tf_pipe):
    path = FramePath(tf_config(), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    tf_out = tf_frame(path).result.features
    # A live change of another key keeps the TF poses in force.
    path.update(tf_config(**{'sync.max_camera_lidar_delay_s': 0.05}))
    np.testing.assert_array_equal(tf_frame(path, T0 + 10**8).result.features, tf_out)
    # Back to the parameters: their (wrong) poses and frame checks apply again.
    path.update(tf_config(**{'extrinsics.source': 'parameters'}))
    with pytest.raises(CloudFormatError, match='not the LiDAR frame "lidar"'):
        path.process(cloud(T0 + 2 * 10**8, frame_id='velodyne'))
    out = run_frame(path, T0 + 3 * 10**8)
    np.testing.assert_allclose(out[..., :6], voxelize_ref(POINTS, tf_config()), rtol=1e-5,
                               atol=1e-5)


def test_a_frame_checked_under_tf_that_runs_after_the_switch_to_parameters_keeps_them(
        tf_pipe, monkeypatch):
    path = FramePath(tf_config(), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    tf_frame(path)
    checked = frame_path.check_clouds

    def switch_after_the_check(*args):
        taken = checked(*args)      # placed by TF, as extrinsics.source was tf
        monkeypatch.setattr(frame_path, 'check_clouds', checked)
        path.update(tf_config(**{'extrinsics.source': 'parameters'}))
        return taken
    monkeypatch.setattr(frame_path, 'check_clouds', switch_after_the_check)
    for name in MAPS:
        path.add_features(name, features(name, T0 + 10**8, frame_id=f'cam_{name}'))
    path.process(cloud(T0 + 10**8, frame_id='velodyne'))
    # The parameters' poses are in force for good: the next frames are theirs, not TF's.
    out = run_frame(path, T0 + 2 * 10**8)
    np.testing.assert_allclose(out[..., :6], voxelize_ref(POINTS, tf_config()), rtol=1e-5,
                               atol=1e-5)
    assert path.pipe.lidar_poses[0].translation == tuple(WRONG['lidar.translation'])


def test_a_frame_keeps_the_grid_it_was_placed_in_across_a_live_grid_frame_change(
        path, monkeypatch):
    checked = frame_path.check_clouds

    def change_after_the_check(*args):
        taken = checked(*args)
        monkeypatch.setattr(frame_path, 'check_clouds', checked)
        path.update(small_config(**{'grid.frame_id': 'vehicle'}))
        return taken
    monkeypatch.setattr(frame_path, 'check_clouds', change_after_the_check)
    assert path.process(cloud()).grid.frame_id == 'base_link'
    assert path.process(cloud(T0 + 10**8)).grid.frame_id == 'vehicle'


def test_a_cloud_whose_odometry_arrives_after_it_still_accumulates(warmed):
    # Odometry at 50 Hz, clouds at 10 Hz stamped 10 ms after the newest sample that arrived
    # before them: the pose is the newest one carried forward at its twist.
    cfg = small_config(cameras=0, **{'accumulation.num_sweeps': 2})
    pipe = warmed(cfg)
    speed = 5.0                  # m/s along x: the pose at t is x = speed t

    def odometry_until(path, stamp):
        for k in range(path.odometry_sent, stamp // (20 * 10**6) + 1):
            t = k * 20 * 10**6
            path.add_odometry(bag_messages.odometry(t, (speed * (t - T0) / 1e9, 0.0, 0.0)))
        path.odometry_sent = stamp // (20 * 10**6) + 1

    trailing, exact = FramePath(cfg, pipe), FramePath(cfg, pipe)
    trailing.odometry_sent = exact.odometry_sent = (T0 - 2 * 10**8) // (20 * 10**6)
    stamps = [T0 + 10**7 + k * 10**8 for k in range(3)]
    frames = {}
    for name, path, lag in (('trailing', trailing, 10**7), ('exact', exact, -10**7)):
        pipe.reset_sweeps()
        frames[name] = []
        for stamp in stamps:
            odometry_until(path, stamp - lag)
            frames[name].append(path.process(cloud(stamp)))
    assert [f.without_odometry for f in frames['trailing']] == [False] * 3
    assert [f.result.sweeps_used for f in frames['trailing']] == [1, 2, 2]
    for got, want in zip(frames['trailing'], frames['exact']):
        np.testing.assert_allclose(got.result.features, want.result.features, atol=1e-4)


def test_a_pose_is_carried_forward_0_2_s_at_most_however_long_the_odometry_gap(warmed):
    # A 1.5 s gap allowed (a 1 Hz localization): a cloud 0.15 s past the newest odometry takes
    # it carried forward; one 0.5 s past it has no pose (a held twist drifts metres when the
    # vehicle brakes), and says so.
    cfg = small_config(cameras=0, **{'accumulation.num_sweeps': 2,
                                     'accumulation.max_odometry_gap_s': 1.5})
    path = FramePath(cfg, warmed(cfg))
    path.pipe.reset_sweeps()
    for k in range(-10, 1):
        t = T0 + k * 20 * 10**6
        path.add_odometry(bag_messages.odometry(t, (5.0 * (t - T0) / 1e9, 0.0, 0.0)))
    assert not path.process(cloud(T0 + 15 * 10**7)).without_odometry
    assert path.process(cloud(T0 + 5 * 10**8)).without_odometry


def test_pose_source_tf_gives_the_sweeps_the_odometry_would(warmed):
    cfg = small_config(cameras=0, **{'accumulation.num_sweeps': 2})
    pipe = warmed(cfg)
    poses = [(T0, (0.0, 0.0, 0.0)), (T0 + 10**8, (1.0, 0.5, 0.0))]
    by_odometry = FramePath(cfg, pipe)
    for stamp, position in poses:
        by_odometry.add_odometry(bag_messages.odometry(stamp, position))
    expected = [by_odometry.process(cloud(stamp)) for stamp, _ in poses]
    pipe.reset_sweeps()
    tf_cfg = small_config(cameras=0, **{'accumulation.num_sweeps': 2,
                                        'accumulation.pose_source': 'tf',
                                        'accumulation.fixed_frame': 'odom'})
    by_tf = FramePath(tf_cfg, pipe)
    for stamp, position in poses:
        by_tf.add_transforms(tf_message(transform('odom', 'base_link', stamp, position)),
                             static=False)
    got = [by_tf.process(cloud(stamp)) for stamp, _ in poses]
    assert [f.without_odometry for f in got] == [False, False]
    np.testing.assert_array_equal(got[1].result.features, expected[1].result.features)
    # No TF at a stamp: the frame uses its own sweep, as without odometry.
    assert by_tf.process(cloud(T0 + 5 * 10**8)).without_odometry


def test_frames_and_cameras_without_tf_warn_in_diagnostics():
    counts = dict.fromkeys(COUNTS, 0)
    period = dict.fromkeys(PERIOD_COUNTS, 0)
    period.update(processed=3, frames_without_tf=2, cameras_without_tf=1)
    stats = {'p50': 1.0, 'p95': 1.0, 'p99': 1.0, 'max': 1.0}
    health = assess(counts, period, CloudTimes(1.0, 2.0, 2.0), 2.5,
                    {'total_ms': stats, 'age_ms': stats}, (), 0, 1024, 1.0, 100.0)
    assert health.level == WARN
    assert health.message == ('2 clouds skipped: no TF pose of their frame; 1 camera maps '
                              'masked: no TF pose of their frame')


def unnamed_frame(path, stamp):
    """Run a frame whose feature maps name no frame (header.frame_id '')."""
    for name in MAPS:
        msg = features(name, stamp)
        msg.header.frame_id = ''
        path.add_features(name, msg)
    return path.process(cloud(stamp, frame_id='velodyne'))


def test_with_tf_a_map_naming_no_frame_takes_its_camera_infos_frame(tf_pipe):
    path = FramePath(tf_config(), tf_pipe)
    path.add_transforms(static_tf(), static=True)
    # No frame on the maps and no CameraInfo yet: TF cannot place the cameras.
    assert set(unnamed_frame(path, T0).cameras_without_tf) == set(MAPS)
    for name in MAPS:
        info = bag_messages.camera_info(**IMAGE)
        info.header.frame_id = f'cam_{name}'
        path.apply_camera_info(name, info)
    # Now the CameraInfo's frame stands in for the map's: both cameras are placed and used.
    frame = unnamed_frame(path, T0 + 10**8)
    assert frame.cameras_without_tf == ()
    assert frame.result.cameras_used == len(MAPS)


def test_a_live_change_of_pose_source_forgets_the_earlier_sweeps(warmed):
    # Odometry in 'map', TF in 'odom' 3.6 m and 10 degrees away (a motion the ego could make
    # in 0.1 s): a sweep placed by one must not be moved by the other.
    cfg = small_config(cameras=0, **{'accumulation.num_sweeps': 2})
    pipe = warmed(cfg)
    pipe.reset_sweeps()
    path = FramePath(cfg, pipe)
    for stamp in (T0, T0 + 10**8, T0 + 2 * 10**8):
        path.add_odometry(bag_messages.odometry(stamp, ((stamp - T0) / 1e8, 0.0, 0.0)))
        path.add_transforms(tf_message(transform('odom', 'base_link', stamp, (
            3.0 + (stamp - T0) / 1e8, 2.0, 0.0), bag_messages.yaw_quaternion(10.0))),
            static=False)
    assert path.process(cloud(T0)).result.sweeps_used == 1
    assert path.process(cloud(T0 + 10**8)).result.sweeps_used == 2
    path.update(small_config(cameras=0, **{'accumulation.num_sweeps': 2,
                                           'accumulation.pose_source': 'tf',
                                           'accumulation.fixed_frame': 'odom'}))
    assert path.process(cloud(T0 + 2 * 10**8)).result.sweeps_used == 1


@pytest.mark.parametrize('source', ['odometry', 'tf'])
def test_sweeps_before_a_break_in_the_poses_are_forgotten(warmed, source):
    # A restamped loop's seam: 1 s without poses, then the drive 40 m back, which 100 m/s would
    # allow over 1 s. A dropped cloud with the poses going on keeps the sweeps.
    cfg = small_config(cameras=0, **{'accumulation.num_sweeps': 3,
                                     'accumulation.max_sweep_age_s': 5.0,
                                     'accumulation.pose_source': source,
                                     'accumulation.fixed_frame': 'odom'})
    pipe = warmed(cfg)
    pipe.reset_sweeps()
    path = FramePath(cfg, pipe)

    def poses(stamps, x0):
        for k, stamp in enumerate(stamps):
            position = (x0 + 10.0 * k * 0.02, 0.0, 0.0)
            if source == 'odometry':
                path.add_odometry(bag_messages.odometry(stamp, position))
            else:
                path.add_transforms(tf_message(transform('odom', 'base_link', stamp, position)),
                                    static=False)
    first = [T0 + k * 20_000_000 for k in range(21)]          # 0 .. 0.4 s at 10 m/s
    poses(first, 40.0)
    assert [path.process(cloud(T0 + k * 10**8)).result.sweeps_used for k in (0, 1, 4)] == [
        1, 2, 3]                            # 0.4 s: one cloud dropped, the poses go on
    seam = T0 + 14 * 10**8                  # 1 s after the last pose
    poses([seam + k * 20_000_000 for k in range(6)], 0.0)
    assert path.process(cloud(seam)).result.sweeps_used == 1
    assert path.process(cloud(seam + 10**8)).result.sweeps_used == 2


def test_tf_poses_are_not_interpolated_across_a_gap_longer_than_the_odometry_gap():
    from jax_perception_node.geometry.odometry import TransformPoses
    from jax_perception_node.geometry.transforms import TransformBuffer
    buffer = TransformBuffer()
    for stamp, x in ((T0, 0.0), (T0 + 10**8, 1.0), (T0 + 11 * 10**8, -40.0)):
        buffer.add_message(tf_message(transform('odom', 'base_link', stamp, (x, 0.0, 0.0))),
                           static=False)
    poses = TransformPoses(buffer, 'odom', 'base_link', max_gap_ns=2 * 10**8)
    np.testing.assert_allclose(poses.pose_at(T0 + 5 * 10**7)[:3, 3], [0.5, 0.0, 0.0])
    assert poses.pose_at(T0 + 5 * 10**8) is None                 # between samples 1 s apart
    with pytest.raises(TransformError, match='1.000 s apart'):
        buffer.lookup('odom', 'base_link', T0 + 5 * 10**8, max_gap_ns=2 * 10**8)
    # tf2's own lookups interpolate, as before.
    np.testing.assert_allclose(buffer.lookup('odom', 'base_link', T0 + 6 * 10**8)[:3, 3],
                               [-19.5, 0.0, 0.0])


def test_a_stamp_just_past_the_newest_tf_pose_is_carried_forward_like_odometry():
    from jax_perception_node.geometry.ego_motion import MAX_TWIST_LEAD_NS, pose_at, twist_at
    from jax_perception_node.geometry.odometry import TransformPoses
    from jax_perception_node.geometry.transforms import TransformBuffer
    # 20 m/s straight on, /tf at 50 Hz; a cloud stamped 5 ms after the newest pose, within
    # the buffer's 10 ms extrapolation allowance, which held that pose unmoved (0.1 m short).
    buffer, speed, lead = TransformBuffer(), 20.0, 2 * 10**8
    for k in range(50):
        buffer.add_message(tf_message(transform('odom', 'base_link', T0 + k * 20_000_000,
                                                (speed * k * 0.02, 0.0, 0.0))), static=False)
    poses = TransformPoses(buffer, 'odom', 'base_link', max_gap_ns=lead)
    newest = T0 + 49 * 20_000_000
    stamp = newest + 5_000_000
    assert poses.newest_ns() == newest and poses.pose_at(stamp) is None
    np.testing.assert_allclose(buffer.lookup('odom', 'base_link', stamp)[:3, 3],
                               [speed * 0.98, 0.0, 0.0])     # extrinsics keep the allowance
    np.testing.assert_allclose(pose_at(poses, stamp, lead)[:3, 3],
                               [speed * (stamp - T0) / 1e9, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(twist_at(poses, stamp, min(lead, MAX_TWIST_LEAD_NS)),
                               [speed, 0.0, 0.0, 0.0, 0.0, 0.0], atol=1e-6)
