"""BevPipeline: buckets, overflow, warm-up and the never-recompile guarantee."""

import os
import stat

import bag_messages
from configs import camera_params, small_config
import jax
from jax_perception_node.core.executable_cache import private_cache_dir
from jax_perception_node.core.pipeline import BevPipeline, compile_count
from jax_perception_node.sensors.camera import scale_camera_info, with_intrinsics
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from reference import lift_ref, quat_matrix, voxelize_ref


def test_warmup_compiles_every_bucket(pipe):
    assert set(pipe.compile_seconds) == {'calibration', '64', '256', '1024'}


def test_the_compile_counter_sees_a_cold_warmup(tmp_path):
    """Positive control: a warm-up on an empty store compiles, and the counter says so."""
    pipe = BevPipeline(small_config(compilation_cache_dir=str(tmp_path / 'xla')))
    before = compile_count()
    pipe.warmup()
    # At least the calibration function and one executable per bucket, all compiled here,
    # each stored once.
    stored = len(list((tmp_path / 'xla' / 'aot').iterdir()))
    assert (pipe.store.hits, pipe.store.misses) == (0, stored)
    assert stored >= 1 + len(pipe.padder.sizes)
    assert compile_count() - before >= stored


def test_the_compile_counter_sees_a_compile_after_warmup():
    """Positive control: any compile in the process after warm-up shows in every count."""
    pipe = BevPipeline(small_config(cameras=0))
    pipe.warmup()
    points = np.ones((10, 4), np.float32)
    assert pipe.process(points).compiles_after_warmup == 0
    before = compile_count()
    doubled = jax.jit(lambda x: x * 2.0 - 1.0)(np.arange(7, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(doubled), np.arange(7) * 2.0 - 1.0)
    assert compile_count() == before + 1
    assert pipe.compiles_after_warmup == 1
    assert pipe.process(points).compiles_after_warmup == 1


def test_process_needs_warmup():
    with pytest.raises(RuntimeError, match='warmup'):
        BevPipeline(small_config()).process(np.zeros((1, 4), np.float32))


def test_200_random_frames_never_recompile():
    pipe = BevPipeline(small_config())
    pipe.warmup()
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 3000, size=200)
    sizes[:4] = [0, 1, 1024, 1025]
    before = compile_count()
    buckets = set()
    for i, n in enumerate(sizes):
        points = rng.normal(scale=6.0, size=(n, 4)).astype(np.float32)
        cameras = {}
        if i % 3:
            cameras['front'] = rng.uniform(size=(12, 20, 3)).astype(np.float32)
        if i % 5:
            cameras['rear'] = None if i % 2 else rng.uniform(size=(12, 20, 3)).astype(np.float32)
        result = pipe.process(points, cameras)
        buckets.add(result.bucket)
        assert result.compiles_after_warmup == 0
        assert result.overflow_points == max(0, n - 1024)
        assert result.num_points == n
    assert compile_count() == before
    assert pipe.compiles_after_warmup == 0
    assert buckets == {64, 256, 1024}


def test_overflow_subsample_is_an_even_stride(pipe):
    rng = np.random.default_rng(1)
    points = rng.normal(scale=5.0, size=(5000, 4)).astype(np.float32)
    result = pipe.process(points)
    assert (result.bucket, result.overflow_points) == (1024, 5000 - 1024)
    kept = points[(np.arange(1024) * 5000) // 1024]
    np.testing.assert_allclose(result.features[..., :6], voxelize_ref(kept, pipe.cfg),
                               rtol=1e-5, atol=1e-5)


def test_overflow_truncate_keeps_first_rows(warmed):
    pipe = warmed(small_config(cameras=0, overflow_policy='truncate'))
    points = np.random.default_rng(2).normal(scale=5.0, size=(3000, 4)).astype(np.float32)
    result = pipe.process(points)
    np.testing.assert_allclose(result.features[..., :6], voxelize_ref(points[:1024], pipe.cfg),
                               rtol=1e-5, atol=1e-5)


def test_precut_cloud_reports_original_count(pipe):
    result = pipe.process(np.zeros((1024, 4), np.float32), num_points=9000)
    assert (result.num_points, result.overflow_points) == (9000, 9000 - 1024)


def test_the_python_api_applies_the_configs_intensity_scale_and_field(warmed):
    # lidar.intensity_scale and intensity_field reach process(points) and decode(msg) as they
    # reach the node's frames (before, the array path and decode's defaults ignored them).
    cfg = small_config(cameras=0, **{'lidar.intensity_scale': 0.125,
                                     'lidar.intensity_field': 'signal'})
    pipe = warmed(cfg)
    points = np.random.default_rng(5).uniform([-6, -9, -1.5, 0], [6, 9, 3.5, 2000], (200, 4))
    points = points.astype(np.float32)
    want = voxelize_ref(points, cfg)
    assert want[..., 5].max() < 250       # scaled: 2000 * 0.125
    np.testing.assert_allclose(pipe.process(points).features[..., :6], want, atol=1e-4)
    msg = bag_messages.cloud(points, 0)
    next(f for f in msg.fields if f.name == 'intensity').name = 'signal'
    np.testing.assert_allclose(pipe.process(pipe.decode(msg)).features[..., :6], want,
                               atol=1e-4)
    with pytest.raises(ValueError, match=r'times must be float32\[200\], one per point'):
        pipe.process(points, times=np.zeros(150, np.float32))


def test_nonfinite_features_are_zeroed_and_counted(pipe):
    fmap = np.ones((12, 20, 3), np.float32)
    fmap[0, 0, 0] = np.nan
    fmap[5, 5, 1] = np.inf
    result = pipe.process(np.zeros((0, 4), np.float32), {'front': fmap})
    assert result.nonfinite_features == 2
    assert np.isfinite(result.features).all()


def test_huge_finite_features_are_zeroed_and_counted_so_the_output_stays_finite(pipe):
    # +-3e38 is finite, but a bilinear tap or a mean over heights of two sums to inf.
    fmap = np.full((12, 20, 3), 3e38, np.float32)
    fmap[::2] = -3e38
    fmap[0, 0, 0] = 1e12          # the limit itself is a valid value
    result = pipe.process(np.zeros((0, 4), np.float32), {'front': fmap})
    assert result.nonfinite_features == fmap.size - 1
    assert np.isfinite(result.features).all()


def test_wrong_camera_inputs_are_rejected_by_name(pipe):
    with pytest.raises(ValueError, match='side'):
        pipe.process(np.zeros((0, 4), np.float32), {'side': np.zeros((12, 20, 3), np.float32)})
    with pytest.raises(ValueError, match='front'):
        pipe.process(np.zeros((0, 4), np.float32), {'front': np.zeros((2, 2, 3), np.float32)})
    with pytest.raises(ValueError, match=r"camera 'front': \(2, 3\), expected"):
        pipe.process(np.zeros((0, 4), np.float32), {'front': [[0.0] * 3] * 2})


def test_compilation_cache_dir_is_private(tmp_path):
    target = tmp_path / 'a' / 'cache'
    assert private_cache_dir(str(target)) == target
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    shared = tmp_path / 'shared'
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match='compilation_cache_dir: .*writable by group or others'):
        private_cache_dir(str(shared))


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to create a directory for another uid')
def test_compilation_cache_dir_of_another_user_is_refused(tmp_path):
    other = tmp_path / 'other'
    other.mkdir(mode=0o700)
    os.chown(other, 12345, 12345)
    with pytest.raises(ConfigError, match='owned by uid 12345'):
        private_cache_dir(str(other))


def test_huge_clouds_are_capped_before_any_big_allocation():
    """A 2 M-point message costs the capped output, not a copy of the cloud."""
    import tracemalloc
    from types import SimpleNamespace
    from jax_perception_node.sensors.cloud import read_points
    n = 2_000_000
    data = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32).view(np.uint8)
    field = (lambda name, offset: SimpleNamespace(name=name, offset=offset, datatype=7, count=1))
    msg = SimpleNamespace(height=1, width=n, point_step=16, row_step=16 * n, is_bigendian=False,
                          fields=[field(k, 4 * i) for i, k in enumerate('xyz')]
                          + [field('intensity', 12)], data=data.reshape(-1))
    tracemalloc.start()
    try:
        points, total = read_points(msg, max_points=1024, policy='subsample')
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (points.shape, total) == ((1024, 4), n)
    assert peak < 64 * 1024, peak        # vs 32 MB for the cloud itself


def test_warm_start_loads_stored_executables(tmp_path):
    """A second pipeline on the same cache compiles nothing; a damaged entry is recompiled."""
    cache = tmp_path / 'xla'
    cfg = small_config(compilation_cache_dir=str(cache))
    cold = BevPipeline(cfg)
    cold.warmup()
    stored = len(list((cache / 'aot').iterdir()))
    assert stored >= 4 and (cold.store.hits, cold.store.misses) == (0, stored)
    points = np.random.default_rng(5).normal(scale=5, size=(300, 4)).astype(np.float32)
    maps = {'front': np.ones((12, 20, 3), np.float32)}
    before = compile_count()
    warm = BevPipeline(cfg)
    warm.warmup()
    assert compile_count() == before
    assert (warm.store.hits, warm.store.misses) == (stored, 0)
    np.testing.assert_array_equal(warm.process(points, maps).features,
                                  cold.process(points, maps).features)
    entries = sorted((cache / 'aot').iterdir())
    assert all(stat.S_IMODE(e.stat().st_mode) == 0o600 for e in entries)
    entries[0].write_bytes(b'not an executable')
    again = BevPipeline(cfg)
    again.warmup()
    assert (again.store.hits, again.store.misses, again.store.damaged) == (stored - 1, 1, 1)
    np.testing.assert_array_equal(again.process(points, maps).features,
                                  cold.process(points, maps).features)
    # Rebuilt from scratch in a used directory, the entries still load and run.
    for entry in (cache / 'aot').iterdir():
        entry.unlink()
    BevPipeline(cfg).warmup()
    last = BevPipeline(cfg)
    last.warmup()
    assert (last.store.hits, last.store.misses) == (stored, 0)
    np.testing.assert_array_equal(last.process(points, maps).features,
                                  cold.process(points, maps).features)


def cell_centre_cloud(cfg, rng, n=400):
    """
    Points near cell centres of the grid (never within 0.2 cells of an edge), in the LiDAR frame.

    Drawn in the grid frame and moved into the LiDAR frame with the inverse of the configured
    pose, so float32 rounding cannot move a point across a cell edge or the z range.
    """
    g = cfg.grid
    rows = rng.integers(0, g.height, n)
    cols = rng.integers(0, g.width, n)
    offset = rng.uniform(0.2, 0.8, size=(n, 2))
    x = g.x_min + (rows + offset[:, 0]) * g.resolution
    y = g.y_min + (cols + offset[:, 1]) * g.resolution
    z = rng.uniform(g.z_min + 0.1, g.z_max - 0.1, n)
    grid_xyz = np.stack([x, y, z], axis=1)
    rot = quat_matrix(cfg.lidar.rotation_xyzw)
    lidar_xyz = (grid_xyz - np.asarray(cfg.lidar.translation)) @ rot
    intensity = rng.uniform(0, 100, size=(n, 1))
    return np.hstack([lidar_xyz, intensity]).astype(np.float32)


def test_set_calibration_matches_the_reference_on_features():
    """Moved LiDAR and cameras: every output channel equals the NumPy reference, no compile."""
    pipe = BevPipeline(small_config())
    pipe.warmup()
    moved = small_config(**camera_params('front', translation=(0.5, 0.3, 2.5), fx=6.0,
                                         cx=10.0, rotation=[-0.56085, 0.43065, -0.43065, 0.56085]),
                         **camera_params('rear', translation=(-1.5, 0.4, 1.2), fy=11.0,
                                         rotation=[-0.5, -0.5, 0.5, 0.5]),
                         **{'lidar.translation': [-0.6, 1.1, 0.8],
                            'lidar.rotation_xyzw': [0.0, 0.0, 0.25881905, 0.96592583]})
    rng = np.random.default_rng(21)
    maps = {name: rng.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    points = cell_centre_cloud(moved, rng)
    before = compile_count()
    pipe.set_calibration(moved.lidar, moved.cameras)
    out = pipe.process(points, maps).features
    assert compile_count() == before
    np.testing.assert_allclose(out[..., :6], voxelize_ref(points, moved), rtol=1e-5, atol=1e-5)
    camera, coverage = lift_ref(moved, maps)
    assert 0 < coverage.sum() < coverage.size      # the moved cameras see part of the grid
    np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[..., 9], coverage)
    # The original calibration's reference differs: the check above could not pass unchanged.
    original_camera, _ = lift_ref(pipe.cfg, maps)
    assert not np.allclose(original_camera, camera, atol=1e-3)
    # A refused call changes nothing: not the cameras' lift either.
    with pytest.raises(ValueError, match='2 LiDAR poses for 1 LiDARs'):
        pipe.set_calibration((moved.lidar, moved.lidar), small_config().cameras)
    np.testing.assert_array_equal(pipe.process(points, maps).features, out)


@pytest.mark.parametrize('model,d', [
    ('plumb_bob', (-0.12, 0.02, 0.003, -0.002, 0.001)),
    ('equidistant', (0.06, -0.015, 0.003, -0.0004)),
    ('rational_polynomial', (0.5, -0.04, 0.002, -0.001, 0.01, 0.8, 0.04, 0.002)),
])
def test_camera_info_distortion_reaches_the_lift_without_a_compile(model, d):
    """A CameraInfo with a lens model: the lift equals the reference with that lens."""
    pipe = BevPipeline(small_config(1, **{'fusion.max_samples_per_cell': 3}))
    pipe.warmup()
    msg = bag_messages.camera_info(80, 48, 24.0, 28.0, 35.5, 19.5)
    msg.distortion_model, msg.d = model, np.array(d)
    rng = np.random.default_rng(5)
    maps = {'front': rng.normal(size=(12, 20, 3)).astype(np.float32)}
    empty = np.zeros((0, 4), np.float32)
    before = compile_count()
    intrinsics = scale_camera_info(msg, 12, 20)
    pipe.set_calibration(cameras=with_intrinsics(pipe.cfg.cameras, 'front', intrinsics))
    out = pipe.process(empty, maps).features
    assert compile_count() == before
    # What a user would write by hand: K scaled by 1/4, the coefficients as they are.
    by_hand = small_config(1, **camera_params('front', fx=6.0, fy=7.0, cx=8.5, cy=4.5),
                           **{'cameras.front.distortion_model': model,
                              'cameras.front.distortion': list(d)})
    camera, coverage = lift_ref(by_hand, maps)
    np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[..., 9], coverage)
    pinhole, _ = lift_ref(small_config(1, **camera_params('front', fx=6.0, fy=7.0, cx=8.5,
                                                          cy=4.5)), maps)
    assert np.abs(pinhole - camera).max() > 0.1      # the lens is not ignored
