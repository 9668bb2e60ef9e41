"""Kernels against the independent NumPy reference in reference.py."""

from configs import camera_params, FRONT, small_config
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from reference import distort_ref, lift_ref, quat_matrix, sample_counts_ref, voxelize_ref

RNG = np.random.default_rng(7)


def random_cloud(n: int, cfg, rng=RNG, margin: float = 3.0) -> np.ndarray:
    """
    Points spread over and beyond the grid, keeping clear of cell edges.

    float32 kernel vs float64 reference may floor a point sitting within rounding of an edge
    differently; edges are tested separately with exactly representable values.
    """
    g = cfg.grid
    lo = np.array([g.x_min - margin, g.y_min - margin, g.z_min - margin])
    hi = np.array([g.x_max + margin, g.y_max + margin, g.z_max + margin])
    xyz = rng.uniform(lo, hi, size=(n, 3))
    t = np.asarray(cfg.lidar.translation)
    frac = ((xyz[:, :2] + t[:2] - [g.x_min, g.y_min]) / g.resolution) % 1.0
    zrel = xyz[:, 2] + t[2]
    clear = ((np.abs(frac - 0.5) < 0.499).all(axis=1)
             & (np.abs(zrel - g.z_min) > 1e-4) & (np.abs(zrel - g.z_max) > 1e-4))
    xyz = xyz[clear]
    intensity = rng.uniform(0, 255, size=(len(xyz), 1))
    return np.hstack([xyz, intensity]).astype(np.float32)


def lidar_part(features):
    return features[..., :6]


@pytest.fixture(scope='module')
def lidar_pipe(warmed):
    """No cameras, the LiDAR yawed 45 degrees: cells get points from rotated coordinates."""
    return warmed(small_config(
        cameras=0, **{'lidar.rotation_xyzw': [0.0, 0.0, 0.38268343, 0.92387953]}))


def test_voxelize_random_clouds_match_reference(lidar_pipe):
    for n in (1, 50, 700, 1024):
        points = random_cloud(n, lidar_pipe.cfg)
        out = lidar_pipe.process(points).features
        np.testing.assert_allclose(lidar_part(out), voxelize_ref(points, lidar_pipe.cfg),
                                   rtol=1e-5, atol=1e-5)


def test_voxelize_dense_cells_match_reference(lidar_pipe):
    # Many points per cell: exercises the density saturation (n >= 63) and the means.
    cfg = lidar_pipe.cfg
    g = cfg.grid
    cells = np.array([[3, 4], [3, 5], [20, 40], [31, 0]])
    centre = np.array([g.x_min, g.y_min]) + (cells + 0.5) * g.resolution
    grid_xy = np.repeat(centre, [300, 100, 40, 5], axis=0)
    grid_xy += RNG.uniform(-0.2, 0.2, size=grid_xy.shape) * g.resolution
    grid_xyz = np.hstack([grid_xy, RNG.uniform(-1.5, 1.5, size=(len(grid_xy), 1))])
    rot = quat_matrix(cfg.lidar.rotation_xyzw)
    lidar_xyz = (grid_xyz - cfg.lidar.translation) @ rot      # R^T (p - t), row-wise
    points = np.hstack([lidar_xyz, RNG.uniform(0, 1, size=(len(grid_xy), 1))]).astype(np.float32)
    out = lidar_pipe.process(points).features
    ref = voxelize_ref(points, lidar_pipe.cfg)
    assert ref[..., 1].max() == 1.0
    np.testing.assert_allclose(lidar_part(out), ref, rtol=1e-5, atol=1e-5)


def test_density_equals_numpys_float32_formula_bit_for_bit(warmed):
    """Counts 0..70, one cell each: the density is NumPy's float32 min(1, log1p(n) / log 64)."""
    cfg = small_config(cameras=0, **{'lidar.translation': [0.0, 0.0, 0.0]})
    pipe = warmed(cfg)
    g = cfg.grid
    for counts in (range(0, 45), range(45, 60), range(60, 71)):     # each frame <= 1024 points
        cells = np.array([(n // g.width, n % g.width) for n in counts])
        centre = np.array([g.x_min, g.y_min]) + (cells + 0.5) * g.resolution
        xy = np.repeat(centre, list(counts), axis=0)
        points = np.hstack([xy, np.zeros((len(xy), 2))]).astype(np.float32)
        density = pipe.process(points).features[..., 1]
        for n, (row, col) in zip(counts, cells):
            want = np.minimum(np.float32(1.0),
                              np.log1p(np.float32(n)) / np.float32(np.log(64.0)))
            assert density[row, col] == want, n


def test_huge_intensities_are_dropped_like_nan_so_every_cell_stays_finite(lidar_pipe):
    cfg = lidar_pipe.cfg
    points = random_cloud(600, cfg)
    # Two points in one cell with intensity 3e38 summed to inf; at 1e12 (the limit) kept.
    twins = np.repeat(points[:1], 2, axis=0)
    twins[:, 3] = [3e38, -3e38]
    points[1:40, 3] = np.where(np.arange(39) % 2, 3e38, 1e12)
    cloud = np.vstack([points, twins])
    out = lidar_pipe.process(cloud).features
    assert np.isfinite(out).all()
    np.testing.assert_allclose(lidar_part(out), voxelize_ref(cloud, cfg), rtol=1e-5, atol=1e-5)
    # The reference keeps the 1e12 points: they did reach the output.
    assert lidar_part(out)[..., 5].max() > 1e10


def test_the_lidar_filter_crops_range_and_ego_box_live_without_a_compile(lidar_pipe):
    from dataclasses import replace
    cfg = lidar_pipe.cfg
    rng = np.random.default_rng(12)
    points = random_cloud(700, cfg, rng)       # with the body's, within the 1024 bucket
    # Hits on the sensor and the body: near the LiDAR, and inside a box around the origin.
    body = rng.uniform([-1.9, -0.8, -1.3], [1.9, 0.8, -0.4], (200, 3))      # grid frame
    body = (body - cfg.lidar.translation) @ quat_matrix(cfg.lidar.rotation_xyzw)  # LiDAR frame
    cloud = np.vstack([points, np.c_[body, np.full(200, 7.0)]]).astype(np.float32)
    crop = replace(cfg.lidar_filter, min_range_m=1.0, max_range_m=9.0,
                   ego_box=(-2.0, 2.0, -1.0, 1.0, -1.5, 0.0))
    before = compile_count()
    lidar_pipe.set_calibration(lidar_filter=crop)
    try:
        out = lidar_part(lidar_pipe.process(cloud).features)
    finally:
        lidar_pipe.set_calibration(lidar_filter=cfg.lidar_filter)
    assert compile_count() == before
    want = voxelize_ref(cloud, replace(cfg, lidar_filter=crop))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # The crop took something away, and it is the default (no crop) once set back.
    assert want[..., 0].sum() < voxelize_ref(cloud, cfg)[..., 0].sum()
    np.testing.assert_allclose(lidar_part(lidar_pipe.process(cloud).features),
                               voxelize_ref(cloud, cfg), rtol=1e-5, atol=1e-5)


def test_voxelize_edges_range_and_nonfinite(warmed):
    # Identity extrinsic and a power-of-two resolution: every edge is exact in float32 too.
    cfg = small_config(cameras=0, **{'lidar.translation': [0.0, 0.0, 0.0]})
    pipe = warmed(cfg)
    g = cfg.grid
    edge = [
        [g.x_min, g.y_min, 0.0, 1.0],               # lower corner: cell (0, 0)
        [g.x_min + 0.5, g.y_min + 1.0, 0.0, 2.0],   # on inner edges: cell (1, 2)
        [g.x_max, 0.0, 0.0, 3.0],                   # x == x_max: outside
        [0.0, g.y_max, 0.0, 3.0],                   # y == y_max: outside
        [g.x_max - 1e-3, g.y_max - 1e-3, 0.0, 4.0],  # last cell
        [0.0, 0.0, g.z_min, 5.0],                   # z == z_min: inside
        [0.0, 0.0, g.z_max, 6.0],                   # z == z_max: outside
        [0.0, 0.0, g.z_max + 5, 6.0],
        [0.0, 0.0, g.z_min - 5, 6.0],
        [g.x_min - 0.01, 0.0, 0.0, 7.0],
        [0.0, g.y_min - 100.0, 0.0, 7.0],
        [np.nan, 1.0, 0.0, 1.0], [1.0, np.inf, 0.0, 1.0], [1.0, 1.0, -np.inf, 1.0],
        [1.0, 1.0, 0.0, np.nan], [1.0, 1.0, 0.0, np.inf],
    ]
    points = np.array(edge, np.float32)
    out = lidar_part(pipe.process(points).features)
    ref = voxelize_ref(points, cfg)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    occupied = {tuple(ij) for ij in np.argwhere(out[..., 0] == 1)}
    assert occupied == {(0, 0), (1, 2), (g.height - 1, g.width - 1), (16, 24)}
    assert out[16, 24, 2] == out[16, 24, 4] == g.z_min   # the z == z_min point alone


def test_voxelize_empty_and_all_outside(lidar_pipe):
    assert not lidar_pipe.process(np.zeros((0, 4), np.float32)).features.any()
    far = np.full((300, 4), 1e6, np.float32)
    nan = np.full((300, 4), np.nan, np.float32)
    for cloud in (far, nan):
        assert not lidar_pipe.process(cloud).features.any()


def test_same_output_whichever_bucket(warmed):
    points = random_cloud(60, small_config())
    maps = {'front': RNG.uniform(size=(12, 20, 3)).astype(np.float32)}
    outputs = []
    for buckets in ([64], [256], [1024]):
        pipe = warmed(small_config(buckets=buckets))
        # Stale rows of a full earlier frame stay in the padding: they must not leak.
        full = pipe.process(np.tile(np.float32([1.0, 1.0, 0.0, 3.0]), (buckets[0], 1)), maps)
        assert full.bucket == buckets[0] and full.features[..., 0].any()
        result = pipe.process(points, maps)
        assert result.bucket == buckets[0]
        outputs.append(result.features)
    for other in outputs[1:]:
        np.testing.assert_array_equal(outputs[0], other)


def test_lift_matches_reference_with_random_maps(pipe):
    cfg = pipe.cfg
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    for used in (('front', 'rear'), ('front',), ('rear',), ()):
        given = {name: maps[name] for name in used}
        out = pipe.process(np.zeros((0, 4), np.float32), given).features
        camera, coverage = lift_ref(cfg, given)
        np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out[..., 9], coverage)
        assert out.shape[-1] == 10


def test_lift_constant_map_reads_constant_where_covered(pipe):
    maps = {name: np.full((12, 20, 3), 2.5, np.float32) for name in ('front', 'rear')}
    out = pipe.process(np.zeros((0, 4), np.float32), maps).features
    covered = out[..., 9] == 1
    assert 0.1 < covered.mean() < 0.9     # both cameras see part of the grid, not all of it
    np.testing.assert_allclose(out[covered][:, 6:9], 2.5, rtol=1e-6)
    assert not out[~covered][:, 6:9].any()
    _, coverage = lift_ref(pipe.cfg, maps)
    np.testing.assert_array_equal(out[..., 9], coverage)


def test_single_bright_pixel_lands_in_the_hand_computed_cell(warmed):
    # Camera 2 m above the ground at the origin looking along +x; one height level at z = 0.
    # Pixel (row 9, col 3) with cx = 8, cy = 4, fx = fy = 10 is 5 px below and 5 px left of
    # the centre: its ray meets the ground at x = 2 m * 10 / 5 = 4 m, y = +5 * 4 / 10 = 2 m.
    # Cell centres sit at integer metres (x_min = -0.5, y_min = -8.5): row 4, column 10.
    params = {
        'grid.x_min': -0.5, 'grid.x_max': 15.5, 'grid.y_min': -8.5, 'grid.y_max': 8.5,
        'grid.z_min': -1.0, 'grid.z_max': 1.0, 'grid.resolution': 1.0,
        'buckets': [16], 'compilation_cache_dir': '', 'fusion.num_heights': 1,
        'cameras.names': ['front'],
        **camera_params('front', height=12, width=17, channels=1, fx=10.0, fy=10.0, cx=8.0,
                        cy=4.0, translation=(0.0, 0.0, 2.0)),
    }
    from jax_perception_node.settings.config import config_from_parameters
    pipe = warmed(config_from_parameters(params))
    fmap = np.zeros((12, 17, 1), np.float32)
    fmap[9, 3, 0] = 1.0
    camera = pipe.process(np.zeros((0, 4), np.float32), {'front': fmap}).features[..., 6]
    assert np.unravel_index(np.argmax(camera), camera.shape) == (4, 10)
    assert camera[4, 10] == pytest.approx(1.0, abs=1e-5)


def test_calibration_change_does_not_recompile(pipe):
    cfg = pipe.cfg
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    points = random_cloud(300, cfg)
    before = pipe.process(points, maps).features
    # Fewer samples per cell than at warm-up (a narrower front camera, a higher LiDAR).
    moved = small_config(**camera_params('front', translation=(1.0, 0.0, 3.0), fx=5.0),
                         **{'lidar.translation': [0.0, 0.0, 1.0]})
    count = compile_count()
    pipe.set_calibration(moved.lidar, moved.cameras)
    after = pipe.process(points, maps).features
    assert compile_count() == count
    assert not np.array_equal(before[..., 9], after[..., 9])
    camera, coverage = lift_ref(moved, maps)
    np.testing.assert_allclose(after[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(after[..., 9], coverage)
    np.testing.assert_allclose(after[..., :6], voxelize_ref(points, moved), rtol=1e-5, atol=1e-5)
    pipe.set_calibration(cfg.lidar, cfg.cameras)
    np.testing.assert_array_equal(pipe.process(points, maps).features, before)


def test_lift_slots_are_the_most_samples_any_cell_has(pipe):
    counts = sample_counts_ref(pipe.cfg)
    # Two cameras back to back with three levels: no cell is seen by both, so the compacted
    # lift does half the dense work (cameras x levels = 6 samples per cell).
    assert pipe.lift_slots == counts.max() == 3
    assert pipe.lift_slots < 2 * pipe.cfg.fusion.num_heights


def _facing_front(**overrides):
    # The rear camera turned to look forward: cells now hold samples of both cameras.
    return small_config(**camera_params('rear', translation=(-1.0, 0.0, 1.5), rotation=FRONT),
                        **overrides)


def test_calibration_needing_more_slots_is_refused_and_changes_nothing(pipe):
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    empty = np.zeros((0, 4), np.float32)
    before = pipe.process(empty, maps).features
    both = _facing_front()
    assert sample_counts_ref(both).max() > pipe.lift_slots
    count = compile_count()
    # Samples fill the slots in camera order, so the rear camera's are the ones that do not fit.
    with pytest.raises(ConfigError, match=r'cameras\.rear: .*3 slots per cell.*'
                                          r'fusion\.max_samples_per_cell'):
        pipe.set_calibration(both.lidar, both.cameras)
    assert compile_count() == count
    np.testing.assert_array_equal(pipe.process(empty, maps).features, before)


def test_max_samples_per_cell_makes_room_for_later_calibrations(warmed):
    pipe = warmed(small_config(**{'fusion.max_samples_per_cell': 6}))
    assert pipe.lift_slots == 6
    both = _facing_front()
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    count = compile_count()
    pipe.set_calibration(both.lidar, both.cameras)
    out = pipe.process(np.zeros((0, 4), np.float32), maps).features
    assert compile_count() == count
    camera, coverage = lift_ref(both, maps)
    np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[..., 9], coverage)
    with pytest.raises(ConfigError, match='fusion.max_samples_per_cell: at most'):
        small_config(**{'fusion.max_samples_per_cell': 7})


def test_camera_batch_crosses_only_when_a_map_changed(pipe):
    cfg = pipe.cfg
    a = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    b = dict(a, front=RNG.normal(size=(12, 20, 3)).astype(np.float32))
    empty = np.zeros((0, 4), np.float32)
    steps = [(a, True), ({k: v.copy() for k, v in a.items()}, False), (b, True),
             ({'rear': b['rear']}, False), (b, False), ({}, False), (a, True)]
    for maps, sent in steps:
        result = pipe.process(empty, maps)
        assert result.cameras_sent is sent
        camera, coverage = lift_ref(cfg, maps)
        np.testing.assert_allclose(result.features[..., 6:9], camera, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(result.features[..., 9], coverage)


def test_fusion_projection_and_relu(tmp_path, pipe, warmed):
    rng = np.random.default_rng(3)
    weights, bias = rng.normal(size=(10, 5)), rng.normal(size=5)
    path = tmp_path / 'w.npz'
    np.savez(path, W=weights, b=bias)
    cfg = small_config(**{'fusion.weights_file': str(path), 'fusion.activation': 'relu'})
    plain, projected = pipe, warmed(cfg)
    points = random_cloud(200, cfg)
    maps = {'front': rng.uniform(size=(12, 20, 3)).astype(np.float32)}
    fused = plain.process(points, maps).features.astype(np.float64)
    out = projected.process(points, maps).features
    assert out.shape == (32, 48, 5)
    np.testing.assert_allclose(out, np.maximum(fused @ weights + bias, 0), rtol=1e-4, atol=1e-4)


# -- lens distortion --------------------------------------------------------------------------

def lens(front=('none', []), rear=('none', []), **overrides):
    """small_config() with the cameras' distortion models and coefficients."""
    return small_config(**{'cameras.front.distortion_model': front[0],
                           'cameras.front.distortion': list(front[1]),
                           'cameras.rear.distortion_model': rear[0],
                           'cameras.rear.distortion': list(rear[1])}, **overrides)


# Barrel plumb_bob with tangential terms (monotonic: 1 - 0.3 s + 0.05 s^2 has no real root)
# and a fisheye: both move most samples by pixels at these maps' edges.
PLUMB_BOB = ('plumb_bob', (-0.1, 0.01, 0.004, -0.003, 0.001))
EQUIDISTANT = ('equidistant', (0.08, -0.02, 0.004, -0.0005))
# A wide lens as OAK-D and Azure Kinect calibrations write it: k4..k6 tame the k1..k3 terms.
RATIONAL = ('rational_polynomial', (0.6, -0.05, 0.002, -0.001, 0.01, 0.9, 0.05, 0.002))


def test_lift_with_lens_models_matches_reference(warmed):
    cfg = lens(PLUMB_BOB, EQUIDISTANT)
    pipe = warmed(cfg)
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    out = pipe.process(np.zeros((0, 4), np.float32), maps).features
    camera, coverage = lift_ref(cfg, maps)
    np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[..., 9], coverage)
    # The lenses matter: the pinhole reference differs.
    pinhole, pinhole_coverage = lift_ref(small_config(), maps)
    assert not np.array_equal(coverage, pinhole_coverage)
    assert np.abs(camera - pinhole).max() > 0.1


def test_changing_the_distortion_compiles_nothing(pipe):
    cfg = pipe.cfg
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    empty = np.zeros((0, 4), np.float32)
    before = pipe.process(empty, maps).features
    count = compile_count()
    for front, rear in ((PLUMB_BOB, EQUIDISTANT), (EQUIDISTANT, PLUMB_BOB), (RATIONAL, RATIONAL),
                        (('plumb_bob', (-0.2, 0.03, 0.0, 0.0, 0.0)), ('none', ()))):
        changed = lens(front, rear)
        pipe.set_calibration(cameras=changed.cameras)
        out = pipe.process(empty, maps).features
        camera, coverage = lift_ref(changed, maps)
        np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out[..., 9], coverage)
    assert compile_count() == count
    pipe.set_calibration(cameras=cfg.cameras)
    np.testing.assert_array_equal(pipe.process(empty, maps).features, before)
    # The rational lens's k4..k6 matter: without them (its plumb_bob part) the lift differs.
    plumb_part = ('plumb_bob', RATIONAL[1][:5])
    assert np.abs(lift_ref(lens(RATIONAL, RATIONAL), maps)[0]
                  - lift_ref(lens(plumb_part, plumb_part), maps)[0]).max() > 0.1


def test_all_zero_plumb_bob_is_the_pinhole_bit_for_bit(pipe):
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    points = random_cloud(300, pipe.cfg)
    pinhole = pipe.process(points, maps).features
    zeros = lens(('plumb_bob', (0.0,) * 5), ('plumb_bob', (0.0,) * 5))
    assert zeros.cameras[0].distortion_model == 'plumb_bob'
    pipe.set_calibration(cameras=zeros.cameras)
    np.testing.assert_array_equal(pipe.process(points, maps).features, pinhole)
    pipe.set_calibration(cameras=pipe.cfg.cameras)


def test_samples_beyond_the_fold_of_the_lens_model_are_invalid(warmed):
    # One camera 2 m up looking along +x, one height level at z = 0, plumb_bob k1 = -0.5:
    # r (1 - 0.5 r^2) peaks at r^2 = 2/3 (r'' = 0.544) and folds back; until r'' reaches
    # -0.85 (r ~ 1.75) the folded points land inside the map (|x''| < 8.5 / 10), ghosts of
    # cells the lens never sees there. They must not count.
    params = {
        'grid.x_min': -0.5, 'grid.x_max': 15.5, 'grid.y_min': -8.5, 'grid.y_max': 8.5,
        'grid.z_min': -1.0, 'grid.z_max': 1.0, 'grid.resolution': 1.0,
        'buckets': [16], 'compilation_cache_dir': '', 'fusion.num_heights': 1,
        'cameras.names': ['front'],
        **camera_params('front', height=12, width=17, channels=1, fx=10.0, fy=10.0, cx=8.0,
                        cy=5.5, translation=(0.0, 0.0, 2.0)),
        'cameras.front.distortion_model': 'plumb_bob',
        'cameras.front.distortion': [-0.5, 0.0, 0.0, 0.0, 0.0],
    }
    from jax_perception_node.settings.config import config_from_parameters
    cfg = config_from_parameters(params)
    pipe = warmed(cfg)
    coverage = pipe.process(np.zeros((0, 4), np.float32),
                            {'front': np.ones((12, 17, 1), np.float32)}).features[..., 7]
    np.testing.assert_array_equal(coverage, lift_ref(cfg, {'front': np.ones((12, 17, 1))})[1])
    # The ghosts, by the published equation without the limit: cells ahead whose folded
    # projection is inside the map although r^2 > 2/3.
    cam = cfg.cameras[0]
    rot = quat_matrix(cam.pose.rotation_xyzw)
    ghosts = []
    for i in range(cfg.grid.height):
        for j in range(cfg.grid.width):
            c = rot.T @ (np.array([i, j - 8.0, 0.0]) - cam.pose.translation)
            if c[2] <= 0.1:
                continue
            x, y = c[0] / c[2], c[1] / c[2]
            u, v = (np.array(distort_ref('plumb_bob', cam.distortion, x, y))
                    * [cam.fx, cam.fy] + [cam.cx, cam.cy])
            if x * x + y * y > 2 / 3 and -0.5 <= u < 16.5 and -0.5 <= v < 11.5:
                ghosts.append((i, j))
    assert len(ghosts) > 10
    assert not any(coverage[ij] for ij in ghosts)
    assert coverage.sum() > 10                       # the lens does see the cells inside
