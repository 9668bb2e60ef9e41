"""jax-perception train with a learned image encoder: end to end through the camera lift."""

import argparse
import io

from configs import small_params
import jax
import jax.numpy as jnp
from jax_perception_node.bags import bagio
from jax_perception_node.core.compile_counter import compile_count
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.detection.encoders import learned
from jax_perception_node.detection.heads.centerpoint import CenterPointHead, mirrored
from jax_perception_node.detection.plugin import ENCODER_KEY, save_weights
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.param_file import write_param_file
from jax_perception_node.settings.parameters import REFERENCE_HEAD
from jax_perception_node.tools import train, train_images, training_set
from jax_perception_node.tools.synthetic_drive import write_sample_bag
import numpy as np
import pytest

# test_train's two-camera drive, its cameras sending 48 x 80 images to the learned encoder.
GRID = {'grid.x_min': -25.6, 'grid.x_max': 25.6, 'grid.y_min': -25.6, 'grid.y_max': 25.6,
        'grid.z_min': -2.0, 'grid.z_max': 4.0, 'grid.resolution': 0.4,
        'lidar.translation': [0.0, 0.0, 1.8], 'buckets': [65536]}
PARAMS = small_params(cameras=2, **GRID, **{
    'cameras.front.input': 'image', 'cameras.rear.input': 'image',
    'encoder.module': learned.NAME, 'encoder.stride': 4})
TRAIN_SEED = 102


def random_encoder(cfg, seed=0):
    """Return the encoder's parameters for ``cfg`` with every array random."""
    rng = np.random.default_rng(seed)
    camera = cfg.cameras[0]
    spec = learned.cnn(learned.EncoderInput(*cfg.image_shape[:2], cfg.encoder.stride,
                                            camera.height, camera.width, camera.channels))
    return jax.tree.map(lambda a: rng.normal(0, 0.3, np.shape(a)).astype(np.float32),
                        spec.params)


@pytest.fixture(scope='module')
def drive(tmp_path_factory):
    """Return (params file, a 0.8 s training drive with rgb8 images, its config)."""
    folder = tmp_path_factory.mktemp('train_images')
    cfg = config_from_parameters(PARAMS)
    weights = folder / 'encoder_start.npz'
    save_weights(weights, random_encoder(cfg))       # random: the learned part counts
    params = {**PARAMS, 'encoder.weights': str(weights)}
    cfg = config_from_parameters(params)
    bag = folder / 'drive'
    write_sample_bag(bag, cfg, seconds=0.8, seed=TRAIN_SEED, camera_images='raw',
                     image_scale=4)
    return write_param_file(params, folder / 'params.yaml'), bag, cfg


@pytest.fixture(scope='module')
def collected(drive):
    """Return (pipe, dataset, image frames) of the drive, collected as train does."""
    _, bag, cfg = drive
    pipe = BevPipeline(cfg)
    pipe.warmup()
    data = training_set.Dataset.of(cfg, pipe)
    frames = train_images.ImageFrames(pipe)
    training_set.collect([bag], cfg, pipe, data, images=frames)
    assert data.cameras == 6 and data.channels == 10 and len(data.pooled) >= 6
    return pipe, data, frames


def inputs_of(pipe, data, frames, valid=None, model=None):
    """Return the end-to-end inputs of every frame, with the pipeline's encoder parameters."""
    model = model or train_images.EndToEnd(CenterPointHead.create(data.channels),
                                           jax.tree.map(jnp.asarray, pipe.encoder.params))
    tables = jax.tree.map(lambda t: t[np.asarray(frames.calibration)], frames.stacked_tables())
    valid = np.stack(frames.valid) if valid is None else valid
    return np.asarray(jax.jit(train_images.pooled_inputs, static_argnums=(1, 6))(
        model, pipe.encoder.spec.apply, np.stack(data.pooled), np.stack(frames.images), valid,
        tables, data.cameras))


def test_the_inputs_are_the_pooled_bevs_the_node_computed(collected):
    pipe, data, frames = collected
    assert len(frames.tables) == 1 == len(set(frames.calibration))    # one calibration, kept once
    assert all(v.all() for v in frames.valid[1:])
    got = inputs_of(pipe, data, frames)
    want = np.stack(data.pooled)
    assert np.abs(want[..., 6:9]).max() > 0.1          # the cameras' channels are there
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)
    # Every camera dropped: the pooled BEV without cameras, as a frame without them.
    none = inputs_of(pipe, data, frames, np.zeros((len(want), 2), bool))
    np.testing.assert_allclose(none, data.drop_cameras(want.copy()), atol=2e-5)


def test_augmentation_mirrors_and_scales_as_the_stored_bevs_are(collected):
    _, data, _ = collected
    pooled = np.stack(data.pooled[:4])
    flips = np.array([[False, False], [True, False], [False, True], [True, True]])
    scales = np.array([1.0, 0.5, 2.0, 1.3], np.float32)
    column = 1                                       # intensity_mean
    got = np.asarray(train_images.augmented(pooled, data.channels, flips, scales, column))
    for k, (fx, fy) in enumerate(flips):
        want = mirrored(pooled[k], data.channels, fx, fy).copy()
        want[..., [column, data.channels + column]] *= scales[k]
        np.testing.assert_allclose(got[k], want, rtol=1e-6)


def test_the_samples_mask_the_dropped_cameras(collected):
    _, data, frames = collected
    keep = np.array([[True, False], [False, True], [True, True]])
    batch = train_images.samples(data, frames, [2, 3, 4], np.zeros((3, 2), bool), [0, 1, 2],
                                 np.ones(3), keep, lambda k, fx, fy: (np.zeros(1),) * 3)
    pooled, images, valid, calibration = batch[:4]
    np.testing.assert_array_equal(valid, [[True, True], [False, True], [False, False]])
    np.testing.assert_array_equal(images[1], frames.images[3])
    np.testing.assert_array_equal(pooled[2], data.pooled[4])
    assert calibration.tolist() == [0, 0, 0]


def test_the_loss_reaches_the_encoder_through_the_lift(collected, drive):
    pipe, data, frames = collected
    model = train_images.EndToEnd(CenterPointHead.create(data.channels),
                                  jax.tree.map(jnp.asarray, pipe.encoder.params))
    grid = drive[2].grid
    arrays = train_images.samples(
        data, frames, [2, 3], np.zeros((2, 2), bool), [0, 0], np.ones(2),
        np.ones((2, 2), bool), lambda k, fx, fy: train.encode_targets(
            data.boxes[k], grid, data.pooled[k].shape[:2], 4))
    tables = frames.stacked_tables()

    def loss(encoder, valid):
        m = train_images.EndToEnd(model.head, encoder)
        pooled, images, _, calibration, flips, scales, heat, reg, mask = arrays
        inputs = train_images.pooled_inputs(m, pipe.encoder.spec.apply, pooled, images, valid,
                                            jax.tree.map(lambda t: t[calibration], tables), 6)
        inputs = train_images.augmented(inputs, data.channels, flips, scales, 1)
        return train.head_loss(m.head, inputs, heat, reg, mask)[0]
    grad = jax.jit(jax.grad(loss))
    grads = grad(model.encoder, arrays[2])
    assert all(np.abs(g).max() > 0 for g in jax.tree.leaves(grads))
    dropped = grad(model.encoder, np.zeros((2, 2), bool))
    assert all(np.abs(g).max() == 0 for g in jax.tree.leaves(dropped))


def test_train_writes_a_head_and_an_encoder_the_node_runs(drive, tmp_path):
    params_file, bag, cfg = drive
    out = tmp_path / 'head.npz'
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    stream = io.StringIO()
    assert train.cmd_train(parser.parse_args([
        str(bag), '--out', str(out), '--params', str(params_file), '--steps', '3',
        '--batch', '2', '--camera-classes', 'car']), stream) == 0
    err = stream.getvalue()
    assert '\nthe camera channels reach: car\n' in err      # the encoder's features: car only
    assert ('samples with all cameras 0.4, subset cameras 0.3, none cameras 0.3; the encoder '
            f'{learned.NAME} trained with the head end to end') in err
    assert err.endswith(f'wrote {out}, {tmp_path / "head_encoder.npz"} and '
                        f'{tmp_path / "head_loss.png"}\nrun them together: head.weights {out} '
                        f'and encoder.weights {tmp_path / "head_encoder.npz"}\n')
    encoder_file = tmp_path / 'head_encoder.npz'
    with np.load(out) as head, np.load(encoder_file) as encoder:
        assert str(head[ENCODER_KEY]) == learned.NAME
        start = dict(zip(train.leaf_names(random_encoder(cfg)),
                         jax.tree.leaves(random_encoder(cfg))))
        assert set(encoder.files) == set(start)
        assert all(not np.array_equal(encoder[k], v) for k, v in start.items())   # trained
    # The pair in the node: both load, a frame runs, nothing compiles after the warm-up.
    run = config_from_parameters({**PARAMS, 'encoder.weights': str(encoder_file),
                                  'head.module': REFERENCE_HEAD, 'head.weights': str(out)})
    pipe = BevPipeline(run)
    pipe.warmup()
    before = compile_count()
    points = np.random.default_rng(0).normal(0, 5, (500, 4)).astype(np.float32)
    result = pipe.process(points, cameras={name: np.full(run.image_shape, 90, np.uint8)
                                           for name in pipe.camera_names})
    assert np.isfinite(np.asarray(result.features)).all()
    assert compile_count() == before


def test_too_many_calibrations_are_refused(collected, monkeypatch):
    pipe = collected[0]
    monkeypatch.setattr(train_images, 'MAX_CALIBRATIONS', 0)
    with pytest.raises(bagio.BagError) as err:
        train_images.ImageFrames(pipe)('drive')
    assert str(err.value).startswith('drive: end-to-end training keeps the camera lift of each')
    assert str(err.value).endswith('with extrinsics.source: parameters')
