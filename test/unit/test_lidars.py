"""Several LiDARs in one executable: each cloud moved by its own pose, one bucket, no compile."""

import itertools

import bag_messages
from configs import small_params
from jax_perception_node.core.buckets import SetCloud
from jax_perception_node.core.kernels import deskew
from jax_perception_node.core.pipeline import BevPipeline, compile_count
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.frames.lidar_sets import LidarSet
from jax_perception_node.sensors.cloud import CloudFormatError
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.parameters import ConfigError
from jax_perception_node.tools.cloud_messages import point_cloud
from lidar_scenes import base_link_points, into_sensor, NAMES, POSES
import numpy as np
import pytest
from reference import voxelize_ref
import tf_messages

STAMP = 1_700_000_000_000_000_000


def lidar_params(**overrides) -> dict:
    """small_params with three LiDARs (no cameras unless asked)."""
    params = small_params(cameras=overrides.pop('cameras', 0), **{'lidars.names': list(NAMES)})
    for name, (translation, xyzw) in POSES.items():
        params[f'lidars.{name}.translation'] = list(translation)
        params[f'lidars.{name}.rotation_xyzw'] = [q / np.linalg.norm(xyzw) for q in xyzw]
    params.update(overrides)
    return params


@pytest.fixture(scope='module')
def three():
    """Warm a pipeline of three LiDARs and the union's single-LiDAR twin (identity pose)."""
    cfg = config_from_parameters(lidar_params())
    pipe = BevPipeline(cfg)
    pipe.warmup()
    union_cfg = config_from_parameters(small_params(
        cameras=0, **{'lidar.translation': [0.0, 0.0, 0.0]}))
    union = BevPipeline(union_cfg)
    union.warmup()
    return cfg, pipe, union_cfg, union


def lidar_set(clouds: dict, stamps: dict | None = None) -> LidarSet:
    """Build a LidarSet of sensor-frame clouds (name -> float32 points), the others missing."""
    stamps = stamps or dict.fromkeys(clouds, STAMP)
    msgs = {name: bag_messages.cloud(points, stamps[name], f'lidar_{name}')
            for name, points in clouds.items()}
    return LidarSet(msgs, {name: stamps[name] for name in clouds}, min(stamps.values()),
                    tuple(n for n in NAMES if n not in clouds), 0.0)


def assert_same_bev(bev: np.ndarray, expected: np.ndarray) -> None:
    """Occupancy and density exactly, heights and intensity to float32 rounding."""
    np.testing.assert_array_equal(bev[..., :2], expected[..., :2].astype(np.float32))
    np.testing.assert_allclose(bev[..., 2:6], expected[..., 2:6], rtol=1e-5, atol=1e-4)


def test_three_lidars_give_the_bev_of_their_union_in_base_link(three):
    cfg, pipe, union_cfg, union = three
    before = compile_count()
    rng = np.random.default_rng(0)
    world = {name: base_link_points(rng, n, cfg) for name, n in zip(NAMES, (300, 120, 90))}
    frame = FramePath(cfg, pipe).process(
        lidar_set({name: into_sensor(p, name) for name, p in world.items()}))
    everything = np.concatenate(list(world.values())).astype(np.float32)
    single = union.process(everything)
    assert frame.result.num_points == single.num_points == 510
    assert frame.result.bucket == 1024
    assert_same_bev(frame.result.features[..., :6], single.features[..., :6])
    assert_same_bev(frame.result.features[..., :6], voxelize_ref(everything, union_cfg))
    assert frame.lidars_missing == () and frame.lidars_refused == ()
    assert compile_count() == before


def test_each_lidar_scales_its_own_intensity(three):
    cfg, pipe, union_cfg, union = three
    scales = dict(zip(NAMES, (1.0, 0.125, 4.0)))
    scaled_cfg = config_from_parameters(lidar_params(**{
        f'lidars.{name}.intensity_scale': scale for name, scale in scales.items()}))
    assert [lidar.intensity_scale for lidar in scaled_cfg.lidars] == list(scales.values())
    before = compile_count()
    path = FramePath(cfg, pipe)
    path.update(scaled_cfg)                          # live: no compile
    rng = np.random.default_rng(5)
    world = {name: base_link_points(rng, 150, cfg) for name in NAMES}
    frame = path.process(lidar_set({name: into_sensor(p, name) for name, p in world.items()}))
    everything = np.concatenate([p * np.float32([1, 1, 1, scales[name]])
                                 for name, p in world.items()]).astype(np.float32)
    assert_same_bev(frame.result.features[..., :6], voxelize_ref(everything, union_cfg))
    assert compile_count() == before


def test_a_wrong_pose_would_show(three):
    """Positive control: the same clouds under one pose for all are another BEV."""
    cfg, pipe, _, union = three
    rng = np.random.default_rng(1)
    world = {name: base_link_points(rng, 200, cfg) for name in NAMES}
    in_sensors = np.concatenate([into_sensor(p, n) for n, p in world.items()])
    wrong = union.process(in_sensors).features[..., 0]
    right = FramePath(cfg, pipe).process(
        lidar_set({n: into_sensor(p, n) for n, p in world.items()})).result.features[..., 0]
    assert np.abs(wrong - right).sum() > 100


def test_every_subset_and_bucket_runs_without_a_compile(three):
    cfg, pipe, _, union = three
    path = FramePath(cfg, pipe)
    before = compile_count()
    rng = np.random.default_rng(2)
    subsets = [s for k in (1, 2, 3) for s in itertools.combinations(NAMES, k)]
    for subset, n in itertools.product(subsets, (0, 20, 200, 700)):
        world = {name: base_link_points(rng, n // len(subset) + i, cfg)
                 for i, name in enumerate(subset)}
        frame = path.process(lidar_set({k: into_sensor(p, k) for k, p in world.items()}))
        # Absent, or in the set with no point (n = 0: the subset's first, given 0 points).
        assert set(frame.lidars_missing) == {x for x in NAMES if x not in subset or not
                                             len(world[x])}
        expected = union.process(np.concatenate(list(world.values())).astype(np.float32))
        assert frame.result.bucket == expected.bucket
        assert_same_bev(frame.result.features[..., :6], expected.features[..., :6])
    assert compile_count() == before


def test_above_the_largest_bucket_each_lidar_keeps_its_share(three):
    cfg, pipe, _, _ = three
    rng = np.random.default_rng(3)
    sizes = {'top': 1500, 'left': 500, 'right': 0}
    world = {name: base_link_points(rng, n, cfg) for name, n in sizes.items()}
    clouds = {k: into_sensor(p, k) for k, p in world.items()}
    padded, refused = pipe.decode_set(tuple(
        None if k not in clouds else SetCloud(bag_messages.cloud(clouds[k], STAMP, f'lidar_{k}'),
                                              'intensity', None, 0.0) for k in NAMES))
    assert refused == {}
    assert (padded.bucket, padded.count, padded.overflow, padded.num_points) == (
        1024, 1024, 976, 2000)
    assert padded.starts == (768, 1024)       # 1024 * 1500 // 2000, then 1024 * 500 // 2000
    # Each keeps an even stride over its own cloud (overflow 'subsample': i * N // kept).
    np.testing.assert_array_equal(padded.buffer[:768],
                                  clouds['top'][np.arange(768) * 1500 // 768])
    np.testing.assert_array_equal(padded.buffer[768:], clouds['left'][np.arange(256) * 500 // 256])


def test_a_bad_cloud_is_left_out_and_named(three):
    cfg, pipe, _, union = three
    rng = np.random.default_rng(4)
    world = {name: base_link_points(rng, 100, cfg) for name in NAMES}
    clouds = lidar_set({k: into_sensor(p, k) for k, p in world.items()})
    clouds.clouds['left'].header.frame_id = 'somewhere'
    path = FramePath(cfg, pipe)
    frame = path.process(clouds)
    assert len(frame.lidars_refused) == 1
    assert frame.lidars_refused[0].startswith('left: header.frame_id "somewhere"')
    assert 'lidars.left.frame_id' in frame.lidars_refused[0]
    assert frame.lidars_missing == ('left',)      # so its missing count names it too
    expected = union.process(np.concatenate([world['top'], world['right']]).astype(np.float32))
    assert_same_bev(frame.result.features[..., :6], expected.features[..., :6])
    for name in ('top', 'right'):
        clouds.clouds[name].header.frame_id = 'elsewhere'
    with pytest.raises(CloudFormatError, match='lidars.top.frame_id'):
        path.process(clouds)


def test_each_cloud_is_moved_to_the_set_stamp():
    """A cloud stamped 50 ms after the set, at 10 m/s along x: 0.5 m back, by NumPy."""
    cfg = config_from_parameters(lidar_params())
    pipe = BevPipeline(cfg)
    pipe.warmup()
    path = FramePath(cfg, pipe)
    for k in range(-3, 3):     # the vehicle at 10 m/s along x, every 50 ms
        t = STAMP + k * 50_000_000
        path.add_odometry(bag_messages.odometry(t, position=(10.0 * (t - STAMP) / 1e9, 0, 0)))
    rng = np.random.default_rng(5)
    world = {name: base_link_points(rng, 150, cfg) for name in NAMES}
    later = STAMP + 50_000_000
    frame = path.process(lidar_set({k: into_sensor(p, k) for k, p in world.items()},
                                   {'top': STAMP, 'left': later, 'right': STAMP}))
    assert frame.deskewed and frame.result.deskewed
    moved = world['left'].copy()
    moved[:, 0] += 10.0 * 0.05      # seen 50 ms later, from 0.5 m further on: +0.5 m at t0
    union_cfg = config_from_parameters(small_params(
        cameras=0, **{'lidar.translation': [0.0, 0.0, 0.0]}))
    expected = voxelize_ref(np.concatenate([world['top'], moved, world['right']]), union_cfg)
    # Moved by 0.5 m = one cell exactly: the 0.1-cell margins keep every point in its cell.
    assert_same_bev(frame.result.features[..., :6], expected)
    not_moved = voxelize_ref(np.concatenate(list(world.values())), union_cfg)
    assert not np.array_equal(not_moved[..., 0], expected[..., 0])


def test_a_lidar_whose_cloud_holds_no_valid_point_is_counted_and_named(three):
    # A blocked or failed side LiDAR sends empty or all-NaN clouds while the others work:
    # the frame was not empty, so nothing counted it and /diagnostics stayed OK.
    from jax_perception_node.ros.health import frame_counts, missing_key
    cfg, pipe, _, union = three
    rng = np.random.default_rng(5)
    top = base_link_points(rng, 100, cfg)
    clouds = lidar_set({'top': into_sensor(top, 'top'),
                        'left': np.full((40, 4), np.nan, np.float32),
                        'right': np.zeros((0, 4), np.float32)})
    frame = FramePath(cfg, pipe).process(clouds)
    assert frame.lidars_blank == ('left', 'right') and not frame.empty
    assert set(frame.lidars_missing) == {'left', 'right'}
    assert_same_bev(frame.result.features[..., :6], union.process(top).features[..., :6])
    counts = frame_counts(frame)
    assert counts['empty_clouds'] == 2 and counts['lidar_sets_incomplete'] == 1
    assert counts[missing_key('left')] == counts[missing_key('right')] == 1
    assert missing_key('top') not in counts


def test_a_lidar_subsampled_to_no_row_is_not_blank(three):
    # Above the largest bucket each LiDAR keeps its share of rows: a 1-point cloud beside two
    # large ones keeps none, but it has a valid point: subsampled, not a blocked sensor.
    cfg, pipe, _, _ = three
    rng = np.random.default_rng(6)
    big = cfg.buckets[-1]
    clouds = lidar_set({'top': into_sensor(base_link_points(rng, big, cfg), 'top'),
                        'left': into_sensor(base_link_points(rng, big, cfg), 'left'),
                        'right': into_sensor(base_link_points(rng, 1, cfg), 'right')})
    frame = FramePath(cfg, pipe).process(clouds)
    assert frame.result.overflow_points > 0
    assert frame.lidars_blank == () and frame.lidars_missing == ()


def test_tf_poses_per_lidar_equal_the_parameters(three):
    cfg, pipe, _, _ = three
    shifted = {f'lidars.{name}.translation': [t + 1.0 for t in translation]
               for name, (translation, _) in POSES.items()}
    tf_cfg = config_from_parameters(lidar_params(**{'extrinsics.source': 'tf'}, **shifted))
    tf_pipe = BevPipeline(tf_cfg)
    tf_pipe.warmup()
    path = FramePath(tf_cfg, tf_pipe)
    before = compile_count()
    path.add_transforms(tf_messages.tf_message(*(
        tf_messages.transform('base_link', f'lidar_{name}', 0, translation, xyzw)
        for name, (translation, xyzw) in POSES.items())), True)
    rng = np.random.default_rng(6)
    world = {name: base_link_points(rng, 100, cfg) for name in NAMES}
    clouds = {k: into_sensor(p, k) for k, p in world.items()}
    frame = path.process(lidar_set(clouds))     # the parameters' poses are a metre off
    expected = FramePath(cfg, pipe).process(lidar_set(clouds))
    assert_same_bev(frame.result.features[..., :6], expected.result.features[..., :6])
    assert compile_count() == before


@pytest.mark.parametrize('params, message', [
    ({'lidars.names': ['top', 'top']}, 'lidars.names: duplicate'),
    ({'lidars.names': ['a b']}, 'lidars.names: "a b" must be letters'),
    ({'lidars.names': ['top', '2nd']}, 'lidars.names: "2nd" must be letters, digits and '
                                       'underscores, not a digit first'),
    ({'lidars.names': ['names']}, 'taken by the key lidars.names'),
    ({'lidars.left.frame_id': 'lidar_top'}, 'lidars.left.frame_id: "lidar_top" is the frame of'),
    ({'lidars.left.frame_id': '/lidar_top'}, 'lidars.left.frame_id: "/lidar_top" is the frame'),
    ({'lidars.left.intensity_field': 'x'}, 'lidars.left.intensity_field'),
    ({'lidars.left.intensity_scale': -1.0}, 'lidars.left.intensity_scale: must be >= 1e-06'),
    ({'lidars.left.time_unit': 'h'}, 'lidars.left.time_unit'),
    ({'lidars.left.time_field': 'z'}, "lidars.left.time_field: 'z' is a coordinate"),
    ({'lidars.rear.frame_id': 'x'}, "lidars.rear.frame_id: 'rear' is not in lidars.names "),
    ({'sync.max_lidar_delay_s': -1.0}, 'sync.max_lidar_delay_s'),
    ({'sync.lidar_stamp_tolerance_s': 0.6}, 'sync.lidar_stamp_tolerance_s: must be <= 0.5'),
])
def test_bad_lidar_parameters_are_refused_by_name(params, message):
    base = lidar_params()
    if 'lidars.names' in params:
        base = {k: v for k, v in base.items() if not k.startswith('lidars.')}
    with pytest.raises(ConfigError, match=message.replace('(', r'\(')):
        config_from_parameters({**base, **params})


def test_a_lidar_block_needs_its_pose():
    params = {k: v for k, v in lidar_params().items() if k != 'lidars.right.translation'}
    with pytest.raises(ConfigError, match='lidars.right.translation: required'):
        config_from_parameters(params)


def test_above_the_largest_bucket_the_shares_fill_it_by_largest_remainders(three):
    cfg, pipe, _, _ = three
    rng = np.random.default_rng(6)
    # Exact shares of 1024 rows: 1023.49 and 0.51. Rounded down the small LiDAR lost its one
    # point and a row stayed empty; by largest remainders it keeps it and the bucket is full.
    sizes = {'top': 2000, 'left': 1}
    clouds = {k: into_sensor(base_link_points(rng, n, cfg), k) for k, n in sizes.items()}
    padded, _ = pipe.decode_set(tuple(
        None if k not in clouds else SetCloud(bag_messages.cloud(clouds[k], STAMP, f'lidar_{k}'),
                                              'intensity', None, 0.0) for k in NAMES))
    assert (padded.count, padded.starts) == (1024, (1023, 1024))
    np.testing.assert_array_equal(padded.buffer[1023], clouds['left'][0])


def test_a_lidars_bad_times_count_as_its_own_stamp_and_a_late_cloud_is_moved_whole(three):
    cfg, pipe, _, _ = three
    rng = np.random.default_rng(7)
    sizes = {'top': 4, 'left': 20}
    points = {k: into_sensor(base_link_points(rng, n, cfg), k) for k, n in sizes.items()}
    # A sweep's times (nine in ten within the sweep: cloud.times_near_stamp), two of them bad:
    # no number, no sweep's.
    good = np.linspace(0.0, 0.095, 20, dtype=np.float32)
    own = {'top': np.zeros(4, np.float32), 'left': good.copy()}
    own['left'][2:4] = np.nan, 5.0
    for offset in (0.05, 0.95):
        padded, _ = pipe.decode_set(tuple(
            SetCloud(timed_cloud(points[k], own[k], STAMP, f'lidar_{k}'), 'intensity',
                     ('time', 's', 'stamp'), offset if k == 'left' else 0.0)
            if k in points else None for k in NAMES))
        expected = np.where(np.isin(np.arange(20), (2, 3)), 0.0, good) + np.float32(offset)
        np.testing.assert_allclose(padded.times[4:24], expected, rtol=1e-6)
    # The kernel moves a set's points by up to twice a sweep's bound: 1.0 s here is not 0.
    moved = deskew(*(np.float32([1.0]),) * 3, np.float32([1.0]),
                   np.array([20.0, 0, 0, 0, 0, 0], np.float32))
    assert float(moved[0][0]) == pytest.approx(21.0)


def timed_cloud(points: np.ndarray, times: np.ndarray, stamp: int, frame_id: str):
    """Build a PointCloud2 of x, y, z, intensity and a float32 ``time`` (s after the stamp)."""
    data = np.zeros(len(points), [('xyzi', '<f4', 4), ('time', '<f4')])
    data['xyzi'], data['time'] = points, times
    fields = [('x', 0, 7), ('y', 4, 7), ('z', 8, 7), ('intensity', 12, 7), ('time', 16, 7)]
    return point_cloud(bag_messages.TYPES, data, fields, len(points), 20, stamp, frame_id)


def test_each_lacking_field_names_its_own_lidar():
    from types import SimpleNamespace
    from jax_perception_node.frames.lidar_input import lacking_fields

    def lidar(key):
        return SimpleNamespace(key=key, timing=SimpleNamespace(active=True))

    def fields(*names):
        return SimpleNamespace(fields=[SimpleNamespace(name=name) for name in names])
    cfg = SimpleNamespace(lidar_sensors=(lidar('lidars.a'), lidar('lidars.b')))
    frame = SimpleNamespace(clouds=(fields('x', 'y', 'z', 't'), fields('x', 'y', 'z', 'i')))
    # a lacks its intensity every frame, b its time: b's must not be hidden behind a's.
    padded = SimpleNamespace(per_lidar=((10, 10, False, True), (10, 10, True, False)))
    assert lacking_fields(cfg, frame, padded) == (
        ('lidars.a', ('x', 'y', 'z', 't')), ('lidars.b', ('x', 'y', 'z', 'i')))
