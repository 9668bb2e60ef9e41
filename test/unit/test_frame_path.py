"""FramePath: frame checks, CameraInfo, live updates (newest word wins) and its own locking."""

import threading

import bag_messages
from configs import camera_params, FRONT, small_config
from jax_perception_node.camera import CameraInfoError, FeatureMapError
from jax_perception_node.cloud import CloudFormatError
from jax_perception_node.frame_path import FramePath
from jax_perception_node.parameters import ConfigError
from jax_perception_node.pipeline import BevPipeline, compile_count
import numpy as np
import pytest

T0 = 1_700_000_000 * 10**9
# A CameraInfo at 4x the 12 x 20 front map; scaled by hand (s = 1/4): fx 24 / 4 = 6,
# fy 28 / 4 = 7, cx (35.5 + 0.5) / 4 - 0.5 = 8.5, cy (19.5 + 0.5) / 4 - 0.5 = 4.5.
IMAGE = {'width': 80, 'height': 48, 'fx': 24.0, 'fy': 28.0, 'cx': 35.5, 'cy': 19.5}
SCALED = {'fx': 6.0, 'fy': 7.0, 'cx': 8.5, 'cy': 4.5}
RNG = np.random.default_rng(21)
POINTS = np.abs(RNG.normal(scale=4.0, size=(200, 4))).astype(np.float32) + [1, -4, -1, 0]
MAPS = {name: RNG.uniform(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}


def warmed(cfg) -> BevPipeline:
    pipe = BevPipeline(cfg)
    pipe.warmup()
    return pipe


@pytest.fixture(scope='module')
def pipe():
    return warmed(small_config())


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


def test_the_lidar_frame_is_the_parameter(pipe):
    cfg = small_config(**{'lidar.frame_id': 'velodyne'})
    path = FramePath(cfg, pipe)
    with pytest.raises(CloudFormatError, match='"lidar" is not the LiDAR frame "velodyne"'):
        path.process(cloud())
    assert path.process(cloud(frame_id='velodyne')).result.num_points == len(POINTS)


def test_a_feature_map_in_another_frame_is_rejected_and_not_buffered(path):
    with pytest.raises(FeatureMapError) as info:
        path.add_features('front', features('front', frame_id='rear_optical'))
    assert str(info.value) == (
        'header.frame_id "rear_optical" is not camera front\'s frame "front_optical" '
        '(parameter cameras.front.frame_id): feature maps must be in the configured frame')
    path.add_features('rear', features('rear'))
    frame = path.process(cloud())
    assert frame.stale == ('front',) and frame.result.cameras_used == 1


def test_a_camera_frame_from_the_parameters(pipe):
    path = FramePath(small_config(**{'cameras.front.frame_id': 'cam0'}), pipe)
    with pytest.raises(FeatureMapError, match='"front_optical" is not camera front\'s frame '
                                              '"cam0"'):
        path.add_features('front', features('front'))
    path.add_features('front', features('front', frame_id='cam0'))


def test_camera_info_is_applied_once_and_a_bad_one_changes_nothing(path):
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


def test_update_keeps_camera_info_until_the_parameters_set_those_intrinsics(path):
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


def test_inputs_are_taken_while_the_pipeline_is_busy(path):
    """Decoding and buffering never wait for the pipeline (a frame or a calibration change)."""
    done = threading.Event()

    def feed():
        path.add_features('front', features('front'))
        done.set()

    with path._pipe_lock:        # as while a frame computes
        worker = threading.Thread(target=feed, daemon=True)
        worker.start()
        assert done.wait(timeout=60.0), 'add_features waited for the pipeline'
    worker.join()


def test_a_new_path_starts_from_the_parameters_calibration(pipe):
    """A pipeline reused by a new path (replay's next bag) keeps no CameraInfo of the last."""
    first = FramePath(small_config(), pipe)
    params_output = run_frame(first)
    first.apply_camera_info('front', bag_messages.camera_info(**IMAGE))
    assert not np.array_equal(run_frame(first, T0 + 10**9), params_output)
    second = FramePath(small_config(), pipe)
    np.testing.assert_array_equal(run_frame(second), params_output)
