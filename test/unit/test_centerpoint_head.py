"""The reference CenterPoint head: its contract's outputs, and its layers against NumPy."""

import equinox as eqx
import jax
from jax_perception_node.detection.boxes import OBJECT_CLASSES
from jax_perception_node.detection.head import (HEAD_OUTPUTS, HeadInput, leaf_names, load_head,
                                                save_weights)
from jax_perception_node.detection.heads.centerpoint import (CenterPointHead, NMS_RADIUS_M,
                                                             object_head)
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest


def reference_conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                   dilation: int) -> np.ndarray:
    """Cross-correlate float[H, W, Ci] with weight[k, k, Ci, Co], zero 'same' padding."""
    h, w, _ = x.shape
    k = weight.shape[0]
    half = k // 2
    out = np.zeros((h, w, weight.shape[3]))
    for i in range(h):
        for j in range(w):
            total = bias.astype(np.float64).copy()
            for a in range(k):
                for b in range(k):
                    ii, jj = i + (a - half) * dilation, j + (b - half) * dilation
                    if 0 <= ii < h and 0 <= jj < w:
                        total += x[ii, jj] @ weight[a, b]
            out[i, j] = total
    return out


def reference_head(bev: np.ndarray, m) -> np.ndarray:
    """
    Run the head in NumPy: normalize, 4 x 4 max and mean pool, convs; float64[h, w, 12].

    Beside them, two centroids: the mean (row, column) within the block, from the block's
    centre, in cells, of the cells whose first channel is positive, then of those whose z_max
    (channel 2) stands over 0.3 m above the lowest z_min (channel 4) of the block's occupied
    cells (0 where none).
    """
    x = (bev.astype(np.float64) - np.asarray(m.mean)) / np.asarray(m.std)
    h, w, c = x.shape
    pooled = np.zeros((h // 4, w // 4, 2 * c + 4))
    for i in range(h // 4):
        for j in range(w // 4):
            block = x[4 * i:4 * i + 4, 4 * j:4 * j + 4].reshape(16, c)
            cells = bev[4 * i:4 * i + 4, 4 * j:4 * j + 4]
            occupied = cells[..., 0] > 0
            floor = cells[..., 4][occupied].min() if occupied.any() else np.inf
            centroids = []
            for mask in (occupied, occupied & (cells[..., 2] > floor + 0.3)):
                rows, cols = np.nonzero(mask)
                centroids += [rows.mean() - 1.5, cols.mean() - 1.5] if len(rows) else [0, 0]
            pooled[i, j] = np.concatenate([block.max(axis=0), block.mean(axis=0), centroids])
    y = np.maximum(reference_conv(pooled, np.asarray(m.conv1.weight, np.float64),
                                  np.asarray(m.conv1.bias), 1), 0)
    for block in m.blocks:
        # A depthwise 3 x 3 kernel is a full one that is zero between channels.
        depthwise = np.asarray(block.depthwise.weight, np.float64)
        full = depthwise[:, :, :, None] * np.eye(depthwise.shape[2])
        z = reference_conv(y, full, np.zeros(depthwise.shape[2]), block.depthwise.dilation)
        y = y + np.maximum(reference_conv(z, np.asarray(block.pointwise.weight, np.float64),
                                          np.asarray(block.pointwise.bias), 1), 0)
    return reference_conv(y, np.asarray(m.out.weight, np.float64), np.asarray(m.out.bias), 1)


def test_outputs_are_the_contracts_dict():
    spec = object_head(HeadInput(16, 24, 5, 0.5))
    bev = np.random.default_rng(1).random((16, 24, 5), np.float32)
    out = jax.jit(spec.apply)(spec.params, bev)
    assert set(out) == set(HEAD_OUTPUTS)
    for key, channels in HEAD_OUTPUTS.items():
        assert out[key].shape == (4, 6, channels or len(OBJECT_CLASSES))
        assert out[key].dtype == np.float32
    assert spec.stride == 4 and spec.classes == OBJECT_CLASSES
    assert spec.nms_radius_m == NMS_RADIUS_M and len(NMS_RADIUS_M) == len(OBJECT_CLASSES)
    assert spec.weights.name == 'centerpoint_objects.npz'
    assert all(np.asarray(leaf).dtype == np.float32 for leaf in jax.tree.leaves(spec.params))
    assert '.conv1.weight' in leaf_names(spec.params)


def test_untrained_heatmap_starts_at_the_prior():
    spec = object_head(HeadInput(16, 16, 6, 0.5))
    out = spec.apply(spec.params, np.zeros((16, 16, 6), np.float32))
    # Zero input, identity statistics: only the biases act; the first is the heatmap's.
    np.testing.assert_allclose(1 / (1 + np.exp(-np.asarray(out['heatmap']))), 0.1, rtol=1e-5)


def test_layers_match_a_numpy_reference():
    rng = np.random.default_rng(7)
    channels = 6
    model = CenterPointHead.create(channels, seed=3)
    # Statistics and biases of their own, so every term of the reference counts.
    model = eqx.tree_at(
        lambda m: (m.mean, m.std, m.conv1.bias, m.blocks[0].pointwise.bias,
                   m.blocks[1].pointwise.bias, m.out.bias), model,
        replace=(rng.normal(size=channels).astype(np.float32),
                 rng.uniform(0.5, 2.0, channels).astype(np.float32),
                 rng.normal(size=32).astype(np.float32) * 0.1,
                 rng.normal(size=32).astype(np.float32) * 0.1,
                 rng.normal(size=32).astype(np.float32) * 0.1,
                 rng.normal(size=12).astype(np.float32)))
    bev = rng.normal(size=(24, 20, channels)).astype(np.float32)
    params, static = eqx.partition(model, eqx.is_array)
    out = jax.jit(lambda p, b: eqx.combine(p, static)(b))(params, bev)
    want = reference_head(bev, model)
    got = np.concatenate([out[k] for k in ('heatmap', 'offset', 'z', 'size', 'yaw')], axis=-1)
    assert got.shape == (6, 5, 12)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_training_path_computes_what_the_head_computes_at_run_time():
    """The trainer pools once and calls ``from_pooled`` batched; the node calls the head."""
    rng = np.random.default_rng(11)
    model = CenterPointHead.create(5, seed=4)
    model = eqx.tree_at(lambda m: (m.mean, m.std), model,
                        replace=(rng.normal(size=5).astype(np.float32),
                                 rng.uniform(0.5, 2.0, 5).astype(np.float32)))
    bevs = rng.normal(size=(2, 16, 24, 5)).astype(np.float32)
    pool = jax.jit(lambda m, bev: m.pool(bev))      # as the trainer pools: unbatched
    pooled = np.stack([np.asarray(pool(model, bev)) for bev in bevs])
    trained = jax.jit(lambda m, p: m.from_pooled(p))(model, pooled)
    for k, bev in enumerate(bevs):
        run = jax.jit(lambda m, b: m(b))(model, bev)
        for name in run:
            np.testing.assert_allclose(trained[name][k], run[name], rtol=1e-6, atol=1e-6)


def test_conv_parts_must_add_up_to_the_kernels_channels():
    conv = CenterPointHead.create(3, seed=0).conv1          # takes 2 x 3 + 4 channels
    with pytest.raises(ValueError, match='5 channels in all, the kernel takes 10'):
        conv(np.zeros((1, 4, 4, 3), np.float32), np.zeros((1, 4, 4, 2), np.float32))


def test_a_grid_the_stride_does_not_divide_is_refused():
    with pytest.raises(ConfigError, match='head.module'):
        object_head(HeadInput(18, 24, 5, 0.5))


def test_a_bev_without_the_lidar_heights_is_refused():
    with pytest.raises(ConfigError, match=r'head.module: .*z_max.*got 4 channels'):
        object_head(HeadInput(16, 24, 4, 0.5))


def test_the_raised_centroid_finds_an_object_on_the_ground():
    # One 4 x 4 block of ground (z 0, every cell occupied) with a pole in its corner cell
    # (row 3, column 0) standing 1.5 m: the occupied centroid is the block's middle, the raised
    # one the pole's cell, 3 - 1.5 and 0 - 1.5 cells from the centre.
    bev = np.zeros((4, 4, 6), np.float32)
    bev[..., 0] = 1.0
    bev[3, 0, 2] = 1.5
    pooled = np.asarray(CenterPointHead.create(6).pool(bev))[0, 0]
    np.testing.assert_allclose(pooled[12:], [0.0, 0.0, 1.5, -1.5], atol=1e-7)


def test_the_shipped_weights_fit_the_shipped_parameters_and_are_trained():
    from configs import PARAMS_FILE
    from jax_perception_node.settings.config import load_config
    from jax_perception_node.detection.head import load_head
    from jax_perception_node.settings.parameters import REFERENCE_HEAD
    cfg = load_config(PARAMS_FILE)
    assert cfg.head.module == REFERENCE_HEAD and cfg.head.weights == ''
    head = load_head(cfg.head.module, '', HeadInput(256, 256, cfg.fused_channels, 0.4))
    assert head.weights_path.name == 'centerpoint_objects.npz'
    assert head.weights_path.stat().st_size < 1 << 20          # "a few MB at most"
    untrained = jax.tree.leaves(head.spec.params)
    trained = jax.tree.leaves(head.params)
    assert all(np.isfinite(t).all() for t in trained)
    assert any(not np.array_equal(t, u) for t, u in zip(trained, untrained))
    mean = next(np.asarray(v) for n, v in zip(leaf_names(head.params), trained) if n == '.mean')
    assert mean.shape == (cfg.fused_channels,) and np.abs(mean).sum() > 0   # set by training


@pytest.mark.parametrize('std, refused', [
    ([0.0] * 5, '5 of 5 channels are not, channel 0: 0.0'),     # blinded the detector, silently
    ([1.0, 2.0, 0.0, 1.0, 1.0], '1 of 5 channels are not, channel 2: 0.0'),
    ([1.0, -0.5, 1.0, 1.0, 1.0], '1 of 5 channels are not, channel 1: -0.5'),
    ([1.0, 1.0, 1.0, 1.0, 1e-39], '1 of 5 channels are not, channel 4: '),  # 1 / std: inf
    ([0.5, 2.0, 1.0, 1e-3, 7.0], None),
])
def test_a_checkpoint_whose_std_the_network_cannot_divide_by_is_refused(tmp_path, std, refused):
    from jax_perception_node.settings.parameters import REFERENCE_HEAD
    bev = HeadInput(16, 24, 5, 0.5)
    spec = object_head(bev)
    std = np.asarray(std, np.float32)
    params = jax.tree.map(np.asarray, spec.params)
    save_weights(tmp_path / 'good.npz', params)                     # std 1
    path = tmp_path / 'w.npz'
    save_weights(path, eqx.tree_at(lambda m: m.std, params, std))
    if refused is None:
        head = load_head(REFERENCE_HEAD, str(path), bev)
        np.testing.assert_array_equal(head.params.std, std)
        np.testing.assert_array_equal(head.checkpoint(str(path))[1].std, std)
        return
    match = f'^head.weights: {path}: std must be positive in every BEV channel .*{refused}'
    with pytest.raises(ConfigError, match=match):
        load_head(REFERENCE_HEAD, str(path), bev)                   # at start-up
    head = load_head(REFERENCE_HEAD, str(tmp_path / 'good.npz'), bev)
    with pytest.raises(ConfigError, match=match):
        head.checkpoint(str(path))                                  # a live swap
    np.testing.assert_array_equal(head.params.std, 1.0)
