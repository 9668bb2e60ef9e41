"""
The Numba peer (tools/numba_peer.py) against the independent NumPy reference in reference.py.

The reference is float64 and loops by cell; the peer is float32, so values agree to float32
rounding (rtol 1e-6: one or two ulps of a transformed z or a mean), and cells agree exactly
because the clouds keep clear of cell edges (edges have their own exactly representable test).
Against the NumPy peer, which does the same float32 operations in the same order, every output
is bit-equal: sums in float64, the density from NumPy's own log1p, the lift in CSR order.
"""

from configs import small_config
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.tools import numba_peer, peers
from jax_perception_node.tools.numba_peer import NumbaBev
import numpy as np
import pytest
from reference import lift_ref, quat_matrix, voxelize_ref

RNG = np.random.default_rng(11)
YAWED = {'lidar.rotation_xyzw': [0.0, 0.0, 0.38268343, 0.92387953]}   # 45 degrees about z


def clear_cloud(cfg, n: int, margin: float = 3.0) -> np.ndarray:
    """
    float32[n', 4] over and beyond the grid, clear of cell edges, with NaN, inf and far points.

    Drawn in the grid frame (a point within 1 % of a cell edge or 1e-4 m of the z range is
    dropped: float32 and float64 may floor it differently), then moved into the LiDAR frame.
    """
    g = cfg.grid
    lo = np.array([g.x_min - margin, g.y_min - margin, g.z_min - margin])
    hi = np.array([g.x_max + margin, g.y_max + margin, g.z_max + margin])
    grid_xyz = RNG.uniform(lo, hi, size=(n, 3))
    frac = ((grid_xyz[:, :2] - [g.x_min, g.y_min]) / g.resolution) % 1.0
    clear = ((np.abs(frac - 0.5) < 0.49).all(axis=1)
             & (np.abs(grid_xyz[:, 2] - g.z_min) > 1e-4)
             & (np.abs(grid_xyz[:, 2] - g.z_max) > 1e-4))
    grid_xyz = grid_xyz[clear]
    rot = quat_matrix(cfg.lidar.rotation_xyzw)
    lidar_xyz = (grid_xyz - cfg.lidar.translation) @ rot       # R^T (p - t), row-wise
    points = np.hstack([lidar_xyz, RNG.uniform(0, 255, size=(len(lidar_xyz), 1))])
    points = points.astype(np.float32)
    points[::13, 0] = np.nan
    points[5::17, 1] = np.inf
    points[7::19, 2] = -np.inf
    points[3::23, 3] = np.nan          # a NaN intensity drops the point too
    points[11::29, :3] = 1e30          # overflows to inf once transformed
    return points


@pytest.fixture(scope='module')
def lidar_only():
    cfg = small_config(cameras=0, **YAWED)
    return cfg, NumbaBev(cfg), peers.NumpyBev(cfg)


@pytest.fixture(scope='module')
def with_cameras():
    cfg = small_config(cameras=2, **YAWED)
    return cfg, NumbaBev(cfg), peers.NumpyBev(cfg)


@pytest.mark.parametrize('n', [0, 1, 50, 700, 5000])
def test_voxelize_random_clouds_match_reference(lidar_only, n):
    cfg, peer, numpy_peer = lidar_only
    points = clear_cloud(cfg, n)
    out = peer.process(points)
    assert out.shape == (32, 48, 7)          # 6 LiDAR, 0 camera, coverage
    np.testing.assert_allclose(out[..., :6], voxelize_ref(points, cfg), rtol=1e-6, atol=1e-6)
    assert not out[..., 6].any()
    np.testing.assert_array_equal(out, numpy_peer.process(points))


def test_dense_cells_saturate_the_density_like_the_reference(lidar_only):
    cfg, peer, numpy_peer = lidar_only
    g = cfg.grid
    counts = [1, 2, 7, 62, 63, 64, 65, 300]
    cells = np.array([[2 + i, 3 + 2 * i] for i in range(len(counts))])
    centre = np.array([g.x_min, g.y_min]) + (cells + 0.5) * g.resolution
    grid_xy = np.repeat(centre, counts, axis=0)
    grid_xy += RNG.uniform(-0.4, 0.4, size=grid_xy.shape) * g.resolution
    grid_xyz = np.hstack([grid_xy, RNG.uniform(-1.5, 1.5, size=(len(grid_xy), 1))])
    lidar_xyz = (grid_xyz - cfg.lidar.translation) @ quat_matrix(cfg.lidar.rotation_xyzw)
    points = np.hstack([lidar_xyz, RNG.uniform(0, 1, size=(len(grid_xy), 1))])
    out = peer.process(points.astype(np.float32))
    ref = voxelize_ref(points.astype(np.float32), cfg)
    density = out[cells[:, 0], cells[:, 1], 1]
    # float32 log1p / log(64): within one float32 ulp of the float64 value, 1 from n = 63 on.
    np.testing.assert_allclose(density, ref[cells[:, 0], cells[:, 1], 1], rtol=1.2e-7)
    assert (density[4:] == 1.0).all() and (density[:4] < 1.0).all()
    np.testing.assert_allclose(out[..., :6], ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(out, numpy_peer.process(points.astype(np.float32)))


def test_lift_matches_reference_with_masked_cameras(with_cameras):
    cfg, peer, numpy_peer = with_cameras
    maps = {name: RNG.normal(size=(12, 20, 3)).astype(np.float32) for name in ('front', 'rear')}
    empty = np.zeros((0, 4), np.float32)
    for used in (('front', 'rear'), ('front',), ('rear',), ()):
        given = {name: maps[name] for name in used}
        out = peer.process(empty, given)
        camera, coverage = lift_ref(cfg, given)
        # float32 geometry and sums against float64 (the pipeline's own test uses the same).
        np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(out[..., 9], coverage)
        np.testing.assert_array_equal(out, numpy_peer.process(empty, given))
        assert out[..., 9].any() == bool(used)


def test_fused_frame_with_cameras_matches_reference(with_cameras):
    cfg, peer, numpy_peer = with_cameras
    points = clear_cloud(cfg, 3000)
    maps = {'front': RNG.uniform(size=(12, 20, 3)).astype(np.float32), 'rear': None}
    out = peer.process(points, maps)
    camera, coverage = lift_ref(cfg, {'front': maps['front']})
    np.testing.assert_allclose(out[..., :6], voxelize_ref(points, cfg), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[..., 9], coverage)
    np.testing.assert_array_equal(out, numpy_peer.process(points, maps))
    assert out[..., 0].sum() > 100 and out[..., 9].sum() > 100


def test_projection_and_relu_match_float64(tmp_path):
    weights, bias = RNG.normal(size=(10, 5)), RNG.normal(size=5)
    path = tmp_path / 'w.npz'
    np.savez(path, W=weights, b=bias)
    plain = NumbaBev(small_config(**YAWED))
    projected = NumbaBev(small_config(**YAWED, **{'fusion.weights_file': str(path),
                                                  'fusion.activation': 'relu'}))
    points = clear_cloud(plain.cfg, 500)
    maps = {'front': RNG.uniform(size=(12, 20, 3)).astype(np.float32)}
    fused = plain.process(points, maps).astype(np.float64)
    out = projected.process(points, maps)
    assert out.shape == (32, 48, 5) and (out == 0).any()
    # A float32 dot product of 10 terms: rounding ~1e-6 relative to the largest term.
    np.testing.assert_allclose(out, np.maximum(fused @ weights + bias, 0), rtol=1e-5, atol=1e-4)


def test_nothing_compiles_after_construction(with_cameras):
    cfg, _, _ = with_cameras
    kernels = (numba_peer._accumulate, numba_peer._finish_lidar, numba_peer.lift_kernel(3),
               numba_peer._project)
    NumbaBev(small_config(cameras=0))
    before = [len(k.signatures) for k in kernels]
    peer = NumbaBev(cfg)
    assert [len(k.signatures) for k in kernels] == before      # same types: nothing new
    maps = {'front': RNG.uniform(size=(12, 20, 3)), 'rear': None}     # float64 map: cast
    for cloud in (clear_cloud(cfg, 10), clear_cloud(cfg, 900).astype(np.float64),
                  np.asfortranarray(clear_cloud(cfg, 300)), np.zeros((0, 4), np.float32)):
        peer.process(cloud, maps)
        peer.process(cloud)
    assert [len(k.signatures) for k in kernels] == before


def test_statistics_are_reset_between_frames(lidar_only):
    cfg, peer, _ = lidar_only
    first, second = clear_cloud(cfg, 800), clear_cloud(cfg, 800)
    peer.process(first)
    np.testing.assert_array_equal(peer.process(second), NumbaBev(cfg).process(second))


@pytest.mark.parametrize('model, coefficients', [('plumb_bob', [-0.1, 0.01, 0.0, 0.0, 0.0]),
                                                 ('equidistant', [0.05, 0.0, 0.0, 0.0])])
def test_a_lens_model_is_refused_naming_the_camera(model, coefficients):
    params = {'cameras.rear.distortion_model': model, 'cameras.rear.distortion': coefficients}
    cfg = small_config(**params)
    with pytest.raises(ValueError, match=f'cameras.rear.distortion_model is {model}'):
        NumbaBev(cfg)


def test_bench_rig_outputs_equal_the_numpy_peer():
    """The tiny bench rig (six cameras, a realistic cloud): bit-equal to the NumPy peer."""
    from jax_perception_node.tools.bench import common
    cfg = config_from_parameters(common.bench_params(common.TINY, 6, buckets=(1024,)))
    inputs = common.Inputs(cfg)
    points = inputs.points(1000)
    maps = inputs.camera_maps(cfg)
    maps[cfg.cameras[2].name] = None
    out = NumbaBev(cfg).process(points, maps)
    np.testing.assert_array_equal(out, peers.NumpyBev(cfg).process(points, maps))
    assert out[..., 0].sum() > 50 and out[..., -1].sum() > 50
