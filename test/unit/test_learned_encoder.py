"""The learned image encoder: a NumPy reference, its start as the appearance encoder, its head."""

import equinox as eqx
import jax
from jax_perception_node.detection.encoder import EncoderInput, load_encoder
from jax_perception_node.detection.encoders import learned
from jax_perception_node.detection.head import HeadInput
from jax_perception_node.detection.heads import centerpoint
from jax_perception_node.detection.plugin import ENCODER_KEY, save_weights
import numpy as np
import pytest
from test_image_encoder import appearance_ref

SHIPPED = EncoderInput(128, 352, 4, 32, 88, 8)


def random_params(inp: EncoderInput, seed: int):
    """Return the encoder's parameters with every array random (the output layer too)."""
    rng = np.random.default_rng(seed)
    params = learned.cnn(inp).params
    return jax.tree.map(lambda a: rng.normal(0, 0.3, np.shape(a)).astype(np.float32), params)


def cnn_ref(image: np.ndarray, stride: int, channels: int, p) -> np.ndarray:
    """Return in NumPy float64 the module doc's network, layer by layer."""
    h, w = image.shape[0] // stride, image.shape[1] // stride
    blocks = image.astype(np.float64).reshape(h, stride, w, stride, 3)
    appearance = appearance_ref(blocks.mean(axis=(1, 3)) / 255.0)
    pixels = blocks.transpose(0, 2, 1, 3, 4).reshape(h, w, -1) / 255.0 - 0.5

    def dense(x, conv):
        return x @ np.asarray(conv.weight, np.float64)[0, 0] + np.asarray(conv.bias, np.float64)
    x = np.maximum(dense(np.concatenate([pixels, appearance], axis=-1), p.embed), 0.0)
    padded = np.pad(x, ((1, 1), (1, 1), (0, 0)))
    kernel = np.asarray(p.block.depthwise.weight, np.float64)
    spatial = sum(padded[i:i + h, j:j + w] * kernel[i, j] for i in range(3) for j in range(3))
    x = x + np.maximum(dense(spatial, p.block.pointwise), 0.0)
    return appearance[..., np.arange(channels) % 8] + dense(x, p.out)


@pytest.mark.parametrize('inp', [SHIPPED, EncoderInput(24, 40, 2, 12, 20, 11)])
def test_the_encoder_equals_a_numpy_reference(inp):
    spec = learned.cnn(inp)
    params = random_params(inp, seed=inp.stride)
    image = np.random.default_rng(1).integers(0, 256, (inp.image_height, inp.image_width, 3),
                                              dtype=np.uint8)
    got = np.asarray(jax.jit(spec.apply)(params, image))
    want = cnn_ref(image, inp.stride, inp.channels, params)
    assert got.shape == want.shape == (inp.map_height, inp.map_width, inp.channels)
    assert np.abs(want - np.asarray(cnn_ref(image, inp.stride, inp.channels, learned.cnn(
        inp).params))).max() > 0.1          # the learned part counts
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_untrained_it_is_the_appearance_encoder():
    inp = EncoderInput(24, 40, 2, 12, 20, 11)     # no shipped checkpoint for this layout
    loaded = load_encoder(learned.NAME, '', inp)
    assert loaded.weights_path is None
    image = np.random.default_rng(2).integers(0, 256, (24, 40, 3), dtype=np.uint8)
    blocks = image.astype(np.float64).reshape(12, 2, 20, 2, 3).mean(axis=(1, 3)) / 255.0
    want = appearance_ref(blocks)[..., np.arange(11) % 8]
    np.testing.assert_allclose(loaded.spec.apply(loaded.params, image), want, atol=1e-5)


def test_the_shipped_weights_are_trained_and_load():
    loaded = load_encoder(learned.NAME, '', SHIPPED)
    assert loaded.weights_path == learned.WEIGHTS
    out = np.asarray(loaded.params.out.weight)
    assert np.abs(out).max() > 1e-3             # trained: no longer the appearance encoder
    untrained = learned.cnn(SHIPPED).params
    for got, start in zip(jax.tree.leaves(loaded.params), jax.tree.leaves(untrained)):
        assert got.shape == np.shape(start) and np.all(np.isfinite(got))


def test_the_head_takes_the_checkpoint_trained_with_its_encoder(tmp_path, monkeypatch):
    names = tuple(f'c{k}' for k in range(15))
    bev = HeadInput(64, 64, 15, 0.4, names)
    params = eqx.filter(centerpoint.CenterPointHead.create(15), eqx.is_array)
    paths = {}
    for name, encoder in (('features', ''), ('lidar', ''), ('cnn', learned.NAME)):
        paths[name] = tmp_path / f'{name}.npz'
        save_weights(paths[name], params, names if name != 'lidar' else names[:7], encoder)
    monkeypatch.setattr(centerpoint, 'WEIGHTS', paths['features'])
    monkeypatch.setattr(centerpoint, 'LIDAR_WEIGHTS', paths['lidar'])
    monkeypatch.setattr(centerpoint, 'CNN_WEIGHTS', paths['cnn'])
    with np.load(paths['cnn']) as arrays:
        assert str(arrays[ENCODER_KEY]) == learned.NAME
    assert centerpoint.shipped_weights(bev._replace(encoder=learned.NAME)) == paths['cnn']
    # Feature maps, a weight-free encoder: the checkpoint that records none.
    assert centerpoint.shipped_weights(bev) == paths['features']
    assert centerpoint.shipped_weights(bev._replace(encoder='pkg.mod:other')) == \
        paths['features']
    lidar = HeadInput(64, 64, 7, 0.4, names[:7], learned.NAME)
    assert centerpoint.shipped_weights(lidar) == paths['lidar']
    # No checkpoint trained with the encoder: the one without a record serves it.
    monkeypatch.setattr(centerpoint, 'CNN_WEIGHTS', tmp_path / 'absent.npz')
    assert centerpoint.shipped_weights(bev._replace(encoder=learned.NAME)) == paths['features']
