"""A checkpoint for a BEV without camera channels, derived from one with them: exactly so."""

import equinox as eqx
import jax
from jax_perception_node.detection.head import save_weights
from jax_perception_node.detection.heads.centerpoint import CenterPointHead
from jax_perception_node.settings.channels import COVERAGE_CHANNEL, LIDAR_CHANNELS
from jax_perception_node.settings.parameters import ConfigError
from jax_perception_node.tools.head_layouts import derive, main
import numpy as np
import pytest

CAMERAS = ('front.red', 'front.luminance', 'rear.red')
WITH = LIDAR_CHANNELS + CAMERAS + (COVERAGE_CHANNEL,)
WITHOUT = LIDAR_CHANNELS + (COVERAGE_CHANNEL,)


@pytest.fixture()
def checkpoint(tmp_path):
    """Save a head for WITH, every array random (statistics and biases too), with its names."""
    rng = np.random.default_rng(3)
    model = CenterPointHead.create(len(WITH), seed=5)
    params, static = eqx.partition(model, eqx.is_array)
    params = jax.tree.map(lambda a: rng.normal(size=a.shape).astype(np.float32), params)
    params = eqx.tree_at(lambda m: m.std, params,
                         rng.uniform(0.5, 2.0, len(WITH)).astype(np.float32))
    save_weights(tmp_path / 'w.npz', params, WITH)
    return tmp_path / 'w.npz', eqx.combine(params, static)


def test_the_derived_head_computes_what_the_checkpoint_does_with_the_cameras_zero(checkpoint):
    path, full = checkpoint
    derived, names = derive(path, WITHOUT)
    assert names == WITH and derived.mean.shape == (len(WITHOUT),)
    rng = np.random.default_rng(8)
    bev = rng.normal(size=(16, 24, len(WITH))).astype(np.float32)
    bev[..., 0] = rng.random((16, 24)) < 0.3         # occupancy: the centroid has cells
    bev[..., len(LIDAR_CHANNELS):] = 0.0            # every camera absent, so no coverage
    want = jax.jit(lambda m, b: m(b))(full, bev)
    kept = [WITH.index(name) for name in WITHOUT]
    got = jax.jit(lambda m, b: m(b))(derived, bev[..., kept])
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
    # The camera channels did matter: with them not 0 the outputs differ.
    bev[..., len(LIDAR_CHANNELS)] = 1.0
    other = jax.jit(lambda m, b: m(b))(full, bev)
    assert not np.allclose(other['heatmap'], want['heatmap'], atol=1e-3)


@pytest.mark.parametrize('kept', [
    WITHOUT[1:],                        # a LiDAR channel left out
    LIDAR_CHANNELS + CAMERAS,           # the coverage left out
    WITHOUT[::-1],                      # reordered
    WITHOUT + ('side.red',),            # a channel it never had
])
def test_only_camera_channels_may_go(checkpoint, kept):
    with pytest.raises(ConfigError, match='only camera channels can be left out'):
        derive(checkpoint[0], kept)


def test_the_command_refuses_in_one_line(tmp_path, capsys):
    np.savez(tmp_path / 'bare.npz', x=np.zeros(1))
    assert main([str(tmp_path / 'bare.npz'), '--out', str(tmp_path / 'out.npz')]) == 1
    err = capsys.readouterr().err
    assert err.startswith('head_layouts: ') and err.count('\n') == 1 and 'records no BEV' in err
    assert not (tmp_path / 'out.npz').exists()


def test_the_command_never_writes_over_its_checkpoint_and_names_out_in_its_errors(
        checkpoint, tmp_path, capsys):
    path = checkpoint[0]
    before = path.read_bytes()
    for out, message in ((path, f'--out {path}: would write over the input {path}'),
                         (tmp_path, f'--out {tmp_path}: exists and is a folder')):
        assert main([str(path), '--out', str(out)]) == 1
        err = capsys.readouterr().err
        assert err == f'head_layouts: {message}\n'
    assert path.read_bytes() == before
    # A folder on the way is made, as train makes it (the shipped head and parameters: every
    # channel kept, the same arrays).
    from jax_perception_node.detection.heads.centerpoint import WEIGHTS
    assert main([str(WEIGHTS), '--out', str(tmp_path / 'new' / 'same.npz')]) == 0
    with np.load(tmp_path / 'new' / 'same.npz') as got, np.load(WEIGHTS) as shipped:
        assert all(np.array_equal(got[k], shipped[k]) for k in shipped.files)
