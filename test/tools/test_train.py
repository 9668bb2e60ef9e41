"""jax-perception train: CenterPoint targets, a few steps that lower the loss, the weights."""

import argparse
import errno
import io
import math
import shutil
from types import SimpleNamespace

from cli_errors import assert_one_line_error
from configs import small_params
import equinox as eqx
import jax
from jax_perception_node.bags import bagio
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.detection.head import CHANNELS_KEY, HeadInput, load_head, load_weights
from jax_perception_node.detection.heads import centerpoint
from jax_perception_node.detection.heads.centerpoint import CenterPointHead, object_head
from jax_perception_node.geometry.stamps import stamp_ns
from jax_perception_node.outputs.objects import detections_message, GROUND_TRUTH_TOPIC
from jax_perception_node.settings.channels import COVERAGE_CHANNEL, lidar_channels
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.param_file import write_param_file
from jax_perception_node.settings.parameters import REFERENCE_HEAD
from jax_perception_node.tools import (
    head_targets, train, train_arguments, training_progress, training_set)
from jax_perception_node.tools.arguments import UsageError
from jax_perception_node.tools.cli import main
from jax_perception_node.tools.synthetic_drive import write_sample_bag
import numpy as np
import pytest

# A 51.2 m square grid without cameras: a few vehicles in view, compiles in seconds.
PARAMS = small_params(cameras=0, **{
    'grid.x_min': -25.6, 'grid.x_max': 25.6, 'grid.y_min': -25.6, 'grid.y_max': 25.6,
    'grid.z_min': -2.0, 'grid.z_max': 4.0, 'grid.resolution': 0.4,
    'lidar.translation': [0.0, 0.0, 1.8], 'buckets': [65536]})
# The same with two small cameras: the BEV has 6 LiDAR, 3 camera channels and the coverage.
CAMERA_PARAMS = {**small_params(cameras=2), **{
    key: value for key, value in PARAMS.items() if not key.startswith('cameras.')}}
TRAIN_SEED = 101        # training drives use seeds >= 100 only
SEED_KEY = bagio.SAMPLE_SEED_KEY


@pytest.fixture(scope='module')
def drive(tmp_path_factory):
    """Return (params file, a 1.5 s training drive with ground truth, its config)."""
    folder = tmp_path_factory.mktemp('train')
    cfg = config_from_parameters(PARAMS)
    bag = folder / 'drive'
    summary = write_sample_bag(bag, cfg, seconds=1.5, seed=TRAIN_SEED)
    assert summary['ground_truth_boxes'] > 0
    return write_param_file(PARAMS, folder / 'params.yaml'), bag, cfg


@pytest.fixture(scope='module')
def dataset(drive):
    """Return the drive's frames collected through a warmed pipeline without a head."""
    _, bag, cfg = drive
    pipe = BevPipeline(cfg)
    pipe.warmup()
    data = training_set.Dataset(pipe.output_channels)
    training_set.collect([bag], cfg, pipe, data)
    return data


@pytest.fixture(scope='module')
def camera_drive(tmp_path_factory):
    """Return (params file, a 0.8 s training drive with two cameras, its config)."""
    folder = tmp_path_factory.mktemp('train_cameras')
    cfg = config_from_parameters(CAMERA_PARAMS)
    bag = folder / 'drive'
    write_sample_bag(bag, cfg, seconds=0.8, seed=TRAIN_SEED)
    return write_param_file(CAMERA_PARAMS, folder / 'params.yaml'), bag, cfg


@pytest.fixture(scope='module')
def camera_dataset(camera_drive):
    """
    Return (the camera drive collected with dropout, the pooled BEVs the pipeline gives).

    For each frame, right after it: the pipeline's BEV of its cloud with every camera left out
    and with only the subset's cameras (``BevPipeline.process``), pooled as the trainer pools.
    """
    _, bag, cfg = camera_drive
    pipe = BevPipeline(cfg)
    pipe.warmup()
    data = training_set.Dataset.of(cfg, pipe)
    assert data.cameras == 6 and data.channels == 10
    head = CenterPointHead.create(data.channels)
    pool = jax.jit(lambda bev: head.pool(bev))             # as training_set.collect pools
    dispatch, subset_lift = pipe.dispatch, training_set.SubsetLift.__call__
    inputs, wanted = [], []

    def spy(points, cameras=None, *args, **kwargs):         # the frame path's call
        if kwargs:
            times = points.times[:points.count].copy() if points.timed else None
            inputs.append((points.buffer[:points.count].copy(), times, dict(cameras),
                           kwargs['motion']))
        return dispatch(points, cameras, *args, **kwargs)

    def checked(self, features):
        dropped = subset_lift(self, features)
        points, times, maps, motion = inputs[-1]
        kept = {name: maps[name] for name in self.kept}
        wanted.append(([name for name in maps if maps[name] is not None], self.kept, *(
            np.asarray(pool(pipe.process(points, cameras=given, times=times,
                                         motion=motion).features))
            for given in (maps, {}, kept))))
        return dropped
    pipe.dispatch = spy
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training_set.SubsetLift, '__call__', checked)
        training_set.collect([bag], cfg, pipe, data, dropout=training_set.CameraDropout(),
                             seed=3)
    return data, wanted


def test_targets_of_one_box_match_an_independent_computation():
    grid = config_from_parameters(PARAMS).grid
    # A car at x = 3.3, y = -7.05: output cells are 4 * 0.4 = 1.6 m.
    box = np.array([[3.3, -7.05, 0.9, 4.5, 1.8, 1.5, 2.5, 1.0, 0.0]], np.float32)
    heat, reg, mask = head_targets.encode_targets(box, grid, (32, 32))
    u, v = (3.3 + 25.6) / 1.6, (-7.05 + 25.6) / 1.6      # 18.0625, 11.59375
    i, j = int(u), int(v)
    assert np.unravel_index(np.argmax(heat[..., 0]), (32, 32)) == (i, j) == (18, 11)
    assert heat[i, j, 0] == 1.0 and mask.sum() == 9.0 and mask[i - 1:i + 2, j - 1:j + 2].all()
    # CenterPoint: a 4.5 x 1.8 m car is 2.8 x 1.1 cells, radius below 2: the minimum 2,
    # sigma (2 * 2 + 1) / 6.
    sigma = 5 / 6
    np.testing.assert_allclose(heat[i + 1, j, 0], math.exp(-1 / (2 * sigma ** 2)), rtol=1e-6)
    np.testing.assert_allclose(heat[i + 2, j + 2, 0], math.exp(-8 / (2 * sigma ** 2)),
                               rtol=1e-6)
    assert heat[i + 3, j, 0] == 0.0
    rest = [0.9, math.log(4.5), math.log(1.8), math.log(1.5), math.sin(2.5), math.cos(2.5)]
    # Every cell of the 3 x 3 about the centre cell points from itself to the centre.
    for a in (i - 1, i, i + 1):
        for b in (j - 1, j, j + 1):
            np.testing.assert_allclose(reg[a, b], [u - a, v - b, *rest], rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(reg.any(axis=-1)) == 9
    # spread 0: the centre cell alone, as CenterPoint.
    _, reg0, mask0 = head_targets.encode_targets(box, grid, (32, 32), spread=0)
    assert mask0.sum() == 1.0 and np.count_nonzero(reg0.any(axis=-1)) == 1
    np.testing.assert_array_equal(reg0[i, j], reg[i, j])


def test_a_mirrored_pooled_bev_is_the_pooled_mirrored_bev():
    # The trainer mirrors pooled BEVs; the head at run time pools the BEV it is given.
    head = CenterPointHead.create(6)
    bev = np.random.default_rng(5).normal(size=(16, 24, 6)).astype(np.float32)
    pooled = np.asarray(head.pool(bev))
    data = training_set.Dataset(6)
    data.pooled.append(pooled)
    data.boxes.append(np.zeros((0, 9), np.float32))
    grid = config_from_parameters(PARAMS).grid
    for flip in ((True, False), (False, True), (True, True)):
        mirrored = bev[::-1] if flip[0] else bev
        mirrored = mirrored[:, ::-1] if flip[1] else mirrored
        got = train.batch(data, [0], [flip], grid)[0][0]
        np.testing.assert_allclose(got, np.asarray(head.pool(mirrored)), atol=1e-6)


def test_a_cell_between_two_centres_is_taught_the_nearer_box():
    grid = config_from_parameters(PARAMS).grid
    # Centres in cells (10, 10) and (10, 12): cell (10, 11) lies between them, nearer the
    # second (v = 12.1 against 10.2, cell centre 11.5), whichever box comes first.
    boxes = np.array([[10.2 * 1.6 - 25.6, 10.2 * 1.6 - 25.6, 0, 4, 2, 1.5, 0, 1, 0],
                      [10.5 * 1.6 - 25.6, 12.1 * 1.6 - 25.6, 0, 6, 2, 3.0, 0, 1, 1]], np.float32)
    for order in (boxes, boxes[::-1]):
        heat, reg, mask = head_targets.encode_targets(order, grid, (32, 32), classes=2)
        np.testing.assert_allclose(reg[10, 11, :2], [10.5 - 10, 12.1 - 11], atol=1e-5)
        np.testing.assert_allclose(reg[10, 11, 5], math.log(3.0), atol=1e-6)
        np.testing.assert_allclose(reg[10, 9, :2], [10.2 - 10, 10.2 - 9], atol=1e-5)
        assert mask.sum() == 15        # 9 + 9 cells, 3 of them shared


def test_flipped_boxes_give_the_flipped_targets():
    grid = config_from_parameters(PARAMS).grid
    rng = np.random.default_rng(0)
    boxes = np.zeros((6, 9), np.float32)
    boxes[:, 0:2] = rng.uniform(-24, 24, (6, 2))
    boxes[:, 2:6] = (0.9, 4.5, 1.8, 1.5)
    boxes[:, 6] = rng.uniform(-3, 3, 6)
    heat, reg, mask = head_targets.encode_targets(boxes, grid, (32, 32))
    for flip_x, flip_y in ((True, False), (False, True), (True, True)):
        mirrored = head_targets.flip_boxes(boxes, grid, flip_x, flip_y)
        flipped = head_targets.encode_targets(mirrored, grid, (32, 32))
        rows = slice(None, None, -1 if flip_x else 1)
        cols = slice(None, None, -1 if flip_y else 1)
        np.testing.assert_allclose(flipped[0], heat[rows, cols], atol=1e-6)
        np.testing.assert_array_equal(flipped[2], mask[rows, cols])
        # Mirroring x negates the heading's cos, mirroring y its sin.
        sin, cos = reg[rows, cols, 6], reg[rows, cols, 7]
        np.testing.assert_allclose(flipped[1][..., 6], -sin if flip_y else sin, atol=1e-6)
        np.testing.assert_allclose(flipped[1][..., 7], -cos if flip_x else cos, atol=1e-6)


def test_a_few_steps_lower_the_loss(dataset, drive):
    grid = drive[2].grid
    assert len(dataset.pooled) == 15 and sum(map(len, dataset.boxes)) > 0
    indices = list(range(len(dataset.pooled)))
    fixed = train.batch(dataset, indices, [(False, False)] * len(indices), grid)
    mean, std = dataset.statistics()
    untrained = eqx.tree_at(lambda m: (m.mean, m.std), CenterPointHead.create(
        dataset.channels, seed=5), replace=(mean, std))
    model, losses = train.train(dataset, grid, dataset.channels, steps=8,
                                batch_size=4, seed=5)
    assert losses.shape == (8, 3) and np.all(np.isfinite(losses))
    assert losses[-2:, 0].mean() < losses[:2, 0].mean()
    before = float(train.head_loss(untrained, *fixed)[0])
    after = float(train.head_loss(model, *fixed)[0])
    assert after < 0.8 * before, (before, after)
    # The statistics are fixed, never trained.
    np.testing.assert_array_equal(np.asarray(model.mean), mean)
    np.testing.assert_array_equal(np.asarray(model.std), std)


def test_train_command_writes_weights_the_head_loads(drive, tmp_path, monkeypatch):
    # The drive's parameters are LiDAR-only (cameras.names: []): the layout of the reference
    # head's LiDAR-only checkpoint, which the factory then takes (issue 29).
    params_file, bag, cfg = drive
    assert cfg.cameras == ()
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    out = tmp_path / 'weights' / 'head.npz'
    args = parser.parse_args([str(bag), '--out', str(out), '--params', str(params_file),
                              '--steps', '3', '--batch', '2', '--seed', '100'])
    stream = io.StringIO()
    assert train.cmd_train(args, stream) == 0
    truth, _ = read_truth_of(bag)
    assert len(truth) == 15
    boxes = sum(len(rows) for rows in truth.values())
    assert f'15 frames, {boxes} boxes, collected in ' in stream.getvalue()
    assert ' s; no cameras to drop; training 3 steps of 2' in stream.getvalue()
    names = lidar_channels(1) + (COVERAGE_CHANNEL,)
    assert tuple(np.load(out)[CHANNELS_KEY]) == names
    assert float(np.load(out)['grid_resolution']) == cfg.grid.resolution
    bev = HeadInput(cfg.grid.height, cfg.grid.width, cfg.fused_channels, cfg.grid.resolution,
                    names)
    spec = object_head(bev)
    params = load_weights(out, spec.params)
    assert not np.array_equal(params.conv1.weight, spec.params.conv1.weight)
    assert np.all(np.asarray(params.std) > 0)
    assert (tmp_path / 'weights' / 'head_loss.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # As the shipped LiDAR-only checkpoint, the head takes it for that layout.
    monkeypatch.setattr(centerpoint, 'LIDAR_WEIGHTS', out)
    head = load_head(REFERENCE_HEAD, '', bev)
    assert head.weights_path == out and head.params.mean.shape == (7,)


def test_camera_dropout_variants_are_the_pipelines_bevs_without_those_cameras(camera_dataset):
    data, wanted = camera_dataset
    assert len(data.pooled) == len(data.subset) == len(wanted) == 8
    kinds = set()
    for k, (paired, kept, every, none, subset) in enumerate(wanted):
        np.testing.assert_array_equal(data.variant(k, 'all'), every)
        np.testing.assert_array_equal(data.variant(k, 'none'), none)      # bit for bit
        np.testing.assert_array_equal(data.variant(k, 'subset'), subset)
        assert set(kept) <= set(paired)
        # LiDAR channels (max and mean halves) never depend on the cameras.
        for half in (slice(0, 6), slice(10, 16)):
            np.testing.assert_array_equal(none[..., half], every[..., half])
        assert not none[..., 6:10].any() and not none[..., 16:20].any()
        np.testing.assert_array_equal(none[..., 20:], every[..., 20:])     # the centroid
        kinds.add((len(paired), len(kept)))
        if 0 < len(kept) < len(paired):
            assert every[..., 9].sum() > subset[..., 9].sum() > 0       # less coverage
        if len(kept) == len(paired):
            assert data.subset[k] is data.pooled[k]         # the same BEV: kept once
    assert (2, 1) in kinds and (2, 0) in kinds and (2, 2) in kinds, kinds


def test_the_sampler_draws_the_variants_with_their_weights(camera_dataset, camera_drive,
                                                           monkeypatch):
    data = camera_dataset[0]
    grid = camera_drive[2].grid
    drawn, real = [], train.batch

    def batch(dataset, indices, flips, grid, variants=None, scales=None):
        drawn.append(variants)
        k = indices[0]
        if variants is not None:        # a batch holds the variants drawn
            inputs = real(dataset, [k] * 3, [(False, False)] * 3, grid, [0, 1, 2])[0]
            for v, name in enumerate(training_set.VARIANTS):
                np.testing.assert_array_equal(inputs[v], dataset.variant(k, name))
        return real(dataset, indices, flips, grid, variants, scales)

    monkeypatch.setattr(train, 'batch', batch)
    monkeypatch.setattr(train, 'make_step', lambda optimizer, frozen, loss_of: (
        lambda t, state, *arrays: (t, state, np.ones(3, np.float32))))
    assert training_set.CameraDropout().weights == pytest.approx((0.4, 0.3, 0.3))

    def draws(dropout, seed=4, steps=300):
        drawn.clear()
        train.train(data, grid, data.channels, steps, 4, seed, dropout=dropout)
        return list(drawn)
    counts = np.bincount(np.concatenate(draws(training_set.CameraDropout())), minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), (0.4, 0.3, 0.3), atol=0.04)
    first = np.array(draws(training_set.CameraDropout(), steps=5))
    np.testing.assert_array_equal(first, draws(training_set.CameraDropout(), steps=5))  # seeded
    assert not np.array_equal(first, draws(training_set.CameraDropout(), seed=5, steps=5))
    counts = np.bincount(np.concatenate(draws(training_set.CameraDropout(0.5, 0.2))),
                         minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), (0.5, 0.4, 0.1), atol=0.04)
    # No dropout, or no cameras to drop: all cameras, drawn as before dropout was.
    assert draws(training_set.CameraDropout(0.0), steps=3) == [None] * 3
    assert draws(None, steps=3) == [None] * 3
    lidar_only = training_set.Dataset(7)
    assert list(lidar_only.variants(training_set.CameraDropout())) == [1.0, 0.0, 0.0]


def test_the_progress_bar_shows_the_eta_in_minutes_and_whole_seconds(monkeypatch):
    clock = iter([0.0, 59.9 / 2])      # one of three steps took 29.95 s: 59.9 s to go
    monkeypatch.setattr(training_progress.time, 'perf_counter', lambda: next(clock))
    out = io.StringIO()
    training_progress.progress_bar(out)(1, 3, 1.5)
    assert out.getvalue().rstrip().endswith('loss 1.500 29.95 s/step ETA 1:00')


def test_class_balanced_draws_give_each_class_an_equal_share():
    def frame(*classes):
        rows = np.zeros((len(classes), 9), np.float32)
        rows[:, 8] = classes
        return rows
    # car in frames 0-3, pedestrian in 3, cyclist in 4; frame 5 empty; a class id out of range
    # (a class the head does not learn) is no class.
    boxes = [frame(0, 0), frame(0), frame(0), frame(0, 2), frame(3, 7), frame()]
    p = training_set.class_balanced(boxes, 4)
    # Each of the 3 classes present: 1/3 of the balanced half, over its frames; half uniform.
    third = 1.0 / 3.0
    want = np.array([third / 4, third / 4, third / 4, third / 4 + third, third, 0.0])
    np.testing.assert_allclose(p, 0.5 * want + 0.5 / 6)
    assert training_set.class_balanced([frame(0), frame(0, 0)], 4) is None     # one class: uniform


def test_training_draws_frames_class_balanced(dataset, drive, monkeypatch):
    grid = drive[2].grid
    drawn, real = [], train.batch

    def batch(data, indices, flips, grid, variants=None, scales=None):
        drawn.extend(indices)
        return real(data, indices, flips, grid, variants, scales)

    monkeypatch.setattr(train, 'batch', batch)
    monkeypatch.setattr(train, 'make_step', lambda optimizer, frozen, loss_of: (
        lambda t, state, *arrays: (t, state, np.ones(3, np.float32))))
    channels = dataset.channels
    want = training_set.class_balanced(dataset.boxes, len(centerpoint.CLASSES))
    assert want is not None and want.std() > 0.1 / len(want)
    train.train(dataset, grid, channels, 150, 8, 3, balance=True)
    counts = np.bincount(drawn, minlength=len(want))
    np.testing.assert_allclose(counts / counts.sum(), want, atol=0.03)
    drawn.clear()
    train.train(dataset, grid, channels, 15, 8, 3)      # without: each frame once per pass
    assert np.all(np.bincount(drawn, minlength=len(want)) == 8)


def test_train_command_drops_cameras_by_its_options(camera_drive, tmp_path, capsys,
                                                    monkeypatch):
    params_file, bag, cfg = camera_drive
    out = tmp_path / 'head.npz'
    argv = [str(bag), '--out', str(out), '--params', str(params_file), '--steps', '1',
            '--batch', '2']
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    collected, collect = [], training_set.collect

    def spy(bags, cfg, pipe, dataset, *args):
        collect(bags, cfg, pipe, dataset, *args)
        collected.append(dataset)
    monkeypatch.setattr(train, 'collect', spy)
    for options, says, subsets in (
            ([], 'samples with all cameras 0.4, subset cameras 0.3, none cameras 0.3', 8),
            (['--camera-dropout', '0.5', '--drop-all-cameras', '1'],
             'samples with all cameras 0.5, none cameras 0.5', 0)):     # no subset kept
        stream = io.StringIO()
        assert train.cmd_train(parser.parse_args(argv + options), stream) == 0
        assert '8 frames, 10 boxes, collected in ' in stream.getvalue()
        assert f' s; {says}; training 1 steps of 2' in stream.getvalue(), stream.getvalue()
        assert len(collected[-1].pooled) == 8 and len(collected[-1].subset) == subsets
    assert tuple(np.load(out)[CHANNELS_KEY])[6:] == ('camera_0', 'camera_1', 'camera_2',
                                                     COVERAGE_CHANNEL)
    assert collected[-1].describe_dropout(cfg, False, training_set.CameraDropout(0.0)) == (
        'no camera dropout')
    assert collected[-1].describe_dropout(cfg, True, training_set.CameraDropout()) == (
        'no camera dropout (fusion.weights projects the camera channels away)')
    capsys.readouterr()
    for value, refused in (('1.5', 'must be within [0, 1], got 1.5'),
                           ('-0.1', 'must be within [0, 1], got -0.1'),
                           ('x', "expected a number, got 'x'")):
        assert main(['train'] + argv + ['--drop-all-cameras', value]) != 0
        assert_one_line_error(capsys, f'argument --drop-all-cameras: {refused}')


def test_train_command_routes_the_cameras_to_the_classes_it_names(camera_drive, tmp_path,
                                                                  capsys):
    params_file, bag, cfg = camera_drive
    out = tmp_path / 'head.npz'
    argv = [str(bag), '--out', str(out), '--params', str(params_file), '--steps', '2',
            '--batch', '2']
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    stream = io.StringIO()
    args = parser.parse_args(argv + ['--camera-classes', 'large_vehicle, car'])
    assert train.cmd_train(args, stream) == 0
    assert 'the camera channels reach: car, large_vehicle\n' in stream.getvalue()
    names = tuple(str(name) for name in np.load(out)[CHANNELS_KEY])
    spec = object_head(HeadInput(cfg.grid.height, cfg.grid.width, len(names),
                                 cfg.grid.resolution, names))
    params = load_weights(out, spec.params)
    rng = np.random.default_rng(4)
    bev = rng.uniform(0.0, 2.0, (cfg.grid.height, cfg.grid.width, len(names)))
    bev[..., 0] = rng.random(bev.shape[:2]) < 0.3
    other = bev.copy()
    other[..., 6:] = rng.uniform(-3.0, 3.0, other[..., 6:].shape)     # the cameras' channels
    a, b = (spec.apply(params, np.asarray(x, np.float32)) for x in (bev, other))
    np.testing.assert_array_equal(a['heatmap'][..., 2:], b['heatmap'][..., 2:])
    for name in ('offset', 'z', 'size', 'yaw'):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert not np.array_equal(a['heatmap'][..., :2], b['heatmap'][..., :2])
    capsys.readouterr()
    assert main(['train'] + argv + ['--camera-classes', 'car,bus']) != 0
    assert_one_line_error(capsys, "argument --camera-classes: 'car,bus': expected distinct "
                                  'names among car, large_vehicle, pedestrian, cyclist')
    with pytest.raises(UsageError, match='--camera-classes: fusion.weights_file projects '):
        train_arguments.camera_routing(('car',), 6, projected=True)
    assert train_arguments.camera_routing(None, 6, False) is None     # the default
    every = train_arguments.camera_routing(centerpoint.CLASSES, 6, False)
    assert every.classes == (0, 1, 2, 3) and every.lidar_channels == 6


def test_a_sample_drive_of_a_held_out_seed_is_refused_before_the_warm_up(
        drive, tmp_path, capsys, monkeypatch):
    params_file, bag, cfg = drive
    reader = bagio.open_reader(bag)
    try:
        assert bagio.custom_data(reader) == {bagio.SAMPLE_SEED_KEY: str(TRAIN_SEED)}
    finally:
        reader.close()
    held_out = tmp_path / 'seed3'
    write_sample_bag(held_out, cfg, seconds=0.2, seed=3)

    def no_warmup(self):
        raise AssertionError('warmed up before refusing the bag')
    monkeypatch.setattr(BevPipeline, 'warmup', no_warmup)
    argv = ['train', str(bag), str(held_out), '--out', str(tmp_path / 'w.npz'),
            '--params', str(params_file)]
    assert main(argv) == 1
    assert_one_line_error(capsys, f'{held_out}: metadata.yaml custom_data '
                                  f"{bagio.SAMPLE_SEED_KEY} '3': sample drives of seeds below "
                                  '100 are held out')
    assert not (tmp_path / 'w.npz').exists()
    # Its .mcap named instead of the folder: the metadata.yaml beside it still counts.
    mcap = next(held_out.glob('*.mcap'))
    assert main(['train', str(mcap), '--out', str(tmp_path / 'w.npz'),
                 '--params', str(params_file)]) == 1
    assert_one_line_error(capsys, f'{mcap}: metadata.yaml custom_data {bagio.SAMPLE_SEED_KEY} '
                                  "'3': sample drives of seeds below 100 are held out")
    # A link to that .mcap: the folder it is in decides, not the link's.
    (tmp_path / 'link.mcap').symlink_to(mcap)
    reader = bagio.open_reader(tmp_path / 'link.mcap')
    try:
        assert bagio.custom_data(reader) == {bagio.SAMPLE_SEED_KEY: '3'}
    finally:
        reader.close()
    # A bare .mcap out of its folder (or beside a metadata.yaml that does not list it): the
    # record rosbag2 writes into the file keeps the seed, and the drive is still held out.
    bare = tmp_path / 'bare'
    bare.mkdir()
    shutil.copy(mcap, bare / 'drive.mcap')
    (held_out / 'other.mcap').write_bytes(mcap.read_bytes())
    for path in (bare / 'drive.mcap', held_out / 'other.mcap'):
        reader = bagio.open_reader(path)
        try:
            assert bagio.custom_data(reader) == {bagio.SAMPLE_SEED_KEY: '3'}
        finally:
            reader.close()
    assert main(['train', str(bare / 'drive.mcap'), '--out', str(tmp_path / 'w.npz'),
                 '--params', str(params_file)]) == 1
    assert_one_line_error(capsys, f"{bagio.SAMPLE_SEED_KEY} '3': sample drives of seeds below "
                                  '100 are held out')


def read_truth_of(path):
    reader = bagio.open_reader(path)
    try:
        return training_set.read_truth(reader, path)
    finally:
        reader.close()


def test_the_seed_record_refused_below_100_and_read_whatever_its_yaml(drive, tmp_path):
    cfg = drive[2]
    for seed in (99, 100):
        write_sample_bag(tmp_path / f's{seed}', cfg, seconds=0.1, seed=seed)
    with pytest.raises(bagio.BagError, match=f"{SEED_KEY} '99': sample drives of seeds below"):
        read_truth_of(tmp_path / 's99')
    truth, left_out = read_truth_of(tmp_path / 's100')
    assert len(truth) == 1 and left_out == {}
    # metadata.yaml edited by hand: an unquoted number is still the seed; text is no seed.
    metadata = tmp_path / 's100' / 'metadata.yaml'
    text = metadata.read_text()
    assert f"{SEED_KEY}: '100'" in text
    for value, refused in (('150', False), ('7', True), ("'²'", True), ('abc', True),
                           ('[1, 2]', True)):
        metadata.write_text(text.replace(f"{SEED_KEY}: '100'", f'{SEED_KEY}: {value}'))
        if refused:
            with pytest.raises(bagio.BagError, match='sample drives of seeds below 100'):
                read_truth_of(tmp_path / 's100')
        else:
            assert len(read_truth_of(tmp_path / 's100')[0]) == 1


def test_ground_truth_of_classes_the_head_does_not_learn_is_left_out(tmp_path):
    boxes = np.array([[4, 1, 0, 4, 2, 1.5, 0.1, 1, 0], [9, -2, 0, 1, 1, 1.8, 0, 1, 1]],
                     np.float32)
    with bagio.BagWriter(tmp_path / 'gt') as writer:
        writer.write(GROUND_TRUTH_TOPIC, detections_message(
            bagio.TYPESTORE.types, boxes, ('car', 'traffic_cone'), 10**9, 'base_link'), 10**9)
    truth, left_out = read_truth_of(tmp_path / 'gt')
    assert left_out == {'traffic_cone': 1}
    np.testing.assert_array_equal(truth[10**9][:, [0, 1, 8]], boxes[:1, [0, 1, 8]])


def test_a_bag_without_ground_truth_is_refused(drive, tmp_path, capsys):
    params_file, bag, _ = drive
    # The drive's first LiDAR sweep alone, in a bag of its own.
    reader = bagio.open_reader(bag)
    try:
        topic, stamp, raw, msgtype = next(bagio.iter_messages(reader, [bagio.POINTCLOUD_TOPIC]))
    finally:
        reader.close()
    lonely = tmp_path / 'lonely'
    with bagio.BagWriter(lonely) as writer:
        writer.add_topic(topic, msgtype)
        writer.write_raw(topic, msgtype, raw, stamp)
    argv = ['train', str(bag), str(lonely), '--out', str(tmp_path / 'w.npz'),
            '--params', str(params_file)]
    assert main(argv) == 1
    assert_one_line_error(capsys, 'no ground truth')
    assert not (tmp_path / 'w.npz').exists()


def test_a_bag_named_twice_is_refused(drive, tmp_path, capsys):
    params_file, bag, _ = drive
    mcap, = bag.glob('*.mcap')
    for second in (bag, mcap):          # the folder again, or its file: the same bag
        argv = ['train', str(bag), str(second), '--out', str(tmp_path / 'w.npz'),
                '--params', str(params_file)]
        assert main(argv) == 1
        assert_one_line_error(capsys, f'{second}: the same bag as {bag}, named twice')
    assert not (tmp_path / 'w.npz').exists()


def test_outputs_on_a_training_bag_or_a_picture_that_is_no_png_are_refused_first(
        drive, tmp_path, capsys, monkeypatch):
    params_file, bag, cfg = drive
    mcap = next(bag.glob('*.mcap'))
    before = mcap.read_bytes()
    (tmp_path / 'v_loss.png').mkdir()

    def no_warmup(self):
        raise AssertionError('warmed up before refusing the options')
    monkeypatch.setattr(BevPipeline, 'warmup', no_warmup)
    for options, message in (
            (['--out', str(mcap)], f'--out {mcap}: would write inside the bag {bag}'),
            (['--out', str(tmp_path / 'w.npz'), '--png', str(mcap)],
             'the loss picture needs one of the suffixes'),
            (['--out', str(tmp_path / 'w.npz'), '--png', str(tmp_path / 'loss.txt')],
             'the loss picture needs one of the suffixes avif, eps, gif, jpeg'),
            (['--out', str(bag / 'w.npz')],
             f'--out {bag / "w.npz"}: would write inside the bag'),
            (['--out', str(mcap / 'w.npz')], f'--out {mcap / "w.npz"}: {mcap} is not a folder'),
            (['--out', str(tmp_path)], f'--out {tmp_path}: exists and is a folder'),
            (['--out', '.'], "--out '.': a file name is needed"),     # a traceback before
            (['--out', ''], "--out '': a file name is needed"),
            # The picture's default path, named as such (no --png was given).
            (['--out', str(tmp_path / 'v.npz')], f'the loss picture (WEIGHTS_loss.png) '
                                                 f'{tmp_path / "v_loss.png"}: exists and is a '
                                                 f'folder'),
            (['--out', str(tmp_path / 'w.npz'), '--png', str(mcap / 'loss.png')],
             f'--png {mcap / "loss.png"}: {mcap} is not a folder'),
            (['--out', str(tmp_path / 'w.npz'), '--png', str(tmp_path / 'w.npz.png'),
              '--png', str(bag / 'loss.png')], f'--png {bag / "loss.png"}: would write inside')):
        assert main(['train', str(bag), '--params', str(params_file), *options]) == 1, options
        assert_one_line_error(capsys, message)
        assert mcap.read_bytes() == before


# -- bad ground truth, a diverging training, a failed write ----------------------------------

CAR = [4, 1, 0, 4, 2, 1.5, 0.1, 1, 0]


def truth_bag(path, edit, boxes=(CAR, [9, -2, 0, 1, 1, 1.8, 0, 1, 1], CAR)):
    """Write one ground-truth message at 1 s (a car, a traffic cone, a car) after ``edit(msg)``."""
    msg = detections_message(bagio.TYPESTORE.types, np.array(boxes, np.float32),
                             ('car', 'traffic_cone'), 10**9, 'base_link')
    edit(msg)
    with bagio.BagWriter(path) as writer:
        writer.write(GROUND_TRUTH_TOPIC, msg, 10**9)
    return path


def set_box(n, part, values):
    """Return ``edit(msg)``: set detection ``n``'s bbox ``part`` (size, position, orientation)."""
    def edit(msg):
        bbox = msg.detections[n].bbox
        target = bbox.size if part == 'size' else getattr(bbox.center, part)
        for axis, value in zip('xyzw', values):
            setattr(target, axis, value)
    return edit


NAN, INF = float('nan'), float('inf')


@pytest.mark.parametrize('part, values, problem, shown', [
    ('size', (4, NAN, 1.5), 'a non-finite size', 'size (4, nan, 1.5)'),
    ('size', (4, 2, 0), 'a size <= 0', 'size (4, 2, 0)'),
    ('size', (-4, 2, 1.5), 'a size <= 0', 'size (-4, 2, 1.5)'),
    ('size', (4, 1e39, 1.5), 'a non-finite size', 'size (4, 1e+39, 1.5)'),   # float32: inf
    ('position', (INF, 1, 0), 'a non-finite centre', 'centre (inf, 1, 0)'),
    ('orientation', (0, 0, NAN, 1), 'a non-finite orientation', 'xyzw (0, 0, nan, 1)'),
    # Its yaw comes out finite (atan2(inf, -inf)): only the quaternion shows it.
    ('orientation', (0, 0, INF, 1), 'a non-finite orientation', 'xyzw (0, 0, inf, 1)'),
    ('orientation', (0, 0, 0, 0), 'an orientation that is no unit quaternion (norm 0)',
     'xyzw (0, 0, 0, 0)'),
])
def test_a_bad_ground_truth_box_is_refused_naming_bag_stamp_and_box(
        tmp_path, part, values, problem, shown):
    bag = truth_bag(tmp_path / 'gt', set_box(2, part, values))
    with pytest.raises(bagio.BagError) as info:
        read_truth_of(bag)
    message = str(info.value)
    assert message.startswith(f'{bag}: {GROUND_TRUTH_TOPIC} at header.stamp 1000000000 ns: '
                              f'box 2 has {problem}: centre ('), message
    assert shown in message and '\n' not in message


def test_a_bad_box_of_a_class_left_out_is_not_refused(tmp_path):
    truth, left_out = read_truth_of(truth_bag(tmp_path / 'gt', set_box(1, 'size', (NAN, 0, 0))))
    assert left_out == {'traffic_cone': 1} and len(truth[10**9]) == 2


def copy_with_truth(src, dst, edit):
    """Copy every message of the bag ``src`` to ``dst``, the first ground truth after ``edit``."""
    reader = bagio.open_reader(src)
    stamp = None
    try:
        with bagio.BagWriter(dst) as writer:
            for topic, timestamp, raw, msgtype in bagio.iter_messages(
                    reader, list(bagio.topic_types(reader))):
                if topic == GROUND_TRUTH_TOPIC and stamp is None:
                    msg = bagio.deserialize(raw, msgtype)
                    edit(msg)
                    stamp = stamp_ns(msg.header.stamp)
                    writer.write(topic, msg, timestamp)
                else:
                    writer.write_raw(topic, msgtype, raw, timestamp)
    finally:
        reader.close()
    return stamp


@pytest.mark.parametrize('size, problem', [((4.5, NAN, 1.5), 'a non-finite size'),
                                           ((4.5, 0.0, 1.5), 'a size <= 0')])
def test_train_refuses_a_drive_with_a_bad_box_before_the_warm_up(
        drive, tmp_path, capsys, monkeypatch, size, problem):
    # Was a traceback: NaN "cannot convert float NaN to integer", 0 "math domain error".
    params_file, bag, _ = drive
    bad = tmp_path / 'bad'
    stamp = copy_with_truth(bag, bad, set_box(0, 'size', size))

    def no_warmup(self):
        raise AssertionError('warmed up before refusing the bad box')
    monkeypatch.setattr(BevPipeline, 'warmup', no_warmup)
    out = tmp_path / 'w.npz'
    assert main(['train', str(bag), str(bad), '--out', str(out),
                 '--params', str(params_file)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f'jax-perception: {bad}: {GROUND_TRUTH_TOPIC} at header.stamp {stamp} '
                          'ns: box 0 '), err
    assert f'has {problem}: centre (' in err and '\n' not in err and 'Traceback' not in err
    assert f'size (4.5, {size[1]:g}, 1.5)' in err
    assert not out.exists()


def test_a_box_larger_than_the_grid_covers_it():
    # int(radius) of a 1e30 m box was an np.arange of 1e30 cells (ValueError).
    grid = config_from_parameters(PARAMS).grid
    box = np.array([[3.3, -7.05, 0.9, 1e30, 1e30, 1.5, 0.0, 1.0, 0.0]], np.float32)
    heat, reg, mask = head_targets.encode_targets(box, grid, (32, 32))
    assert heat[18, 11, 0] == 1.0 and np.all(heat > 0) and mask.sum() == 9
    np.testing.assert_allclose(reg[18, 11, 3], math.log(1e30), rtol=1e-6)


def test_the_intensity_scale_scales_the_pooled_intensity_alone():
    grid = config_from_parameters(PARAMS).grid
    data = training_set.Dataset(3, ('occupancy', 'density', 'intensity_mean'))
    rng = np.random.default_rng(2)
    for k in range(2):
        data.pooled.append(rng.uniform(0.0, 9.0, (8, 8, 8)).astype(np.float32))
        data.boxes.append(np.zeros((0, 9), np.float32))
    flips = np.zeros((2, 2), bool)
    plain = train.batch(data, [0, 1], flips, grid)[0]
    scaled = train.batch(data, [0, 1], flips, grid, scales=[0.5, 2.0])[0]
    want = plain.copy()
    want[0, ..., [2, 5]] *= 0.5     # intensity_mean in the max half and in the mean half
    want[1, ..., [2, 5]] *= 2.0
    np.testing.assert_array_equal(scaled, want)
    np.testing.assert_array_equal(data.pooled[0], plain[0])    # the dataset is not changed


def test_a_bev_with_non_finite_values_is_refused_naming_bag_stamp_and_channel():
    data = training_set.Dataset(3, ('occupancy', 'density', 'intensity_mean'))
    path = SimpleNamespace(cfg=config_from_parameters(PARAMS))
    collector = training_set._Collect(path, {7: np.zeros((0, 9), np.float32)}, data,
                                      lambda f: f, 1, 'drive')
    features = np.zeros((4, 4, 3), np.float32)
    features[1, 2, 2] = np.inf
    frame = SimpleNamespace(stamp_ns=7, result=SimpleNamespace(features=features))
    with pytest.raises(bagio.BagError, match='drive: the BEV of the LiDAR frame at header.stamp '
                                             '7 ns has non-finite values in intensity_mean'):
        collector.write(frame, 7)
    assert not data.pooled
    features[1, 2, 2] = 3e38        # finite: kept, and the largest value is on record
    collector.write(frame, 7)
    assert len(data.pooled) == 1
    assert data.extremes() == ('the largest |BEV value| is 3e+38 (intensity_mean, drive at '
                               'header.stamp 7 ns)')


def test_a_diverging_training_stops_at_its_first_non_finite_loss(dataset, drive):
    # A learning rate of 1e30: the warm-up's first step has rate 0, the second takes the
    # weights to ~1e30, the third step's loss overflows.
    grid = drive[2].grid
    channels = dataset.channels
    with pytest.raises(train.TrainingError) as info:
        train.train(dataset, grid, channels, steps=5, batch_size=2, seed=5, learning_rate=1e30)
    message = str(info.value)
    assert message.startswith('training diverged: the loss is nan at step 3 of 5 (heatmap '), \
        message
    assert ('likely at fault: clouds or ground truth with extreme values, or the learning rate '
            '1e+30 (the default is 0.003); the largest |BEV value| is ') in message, message
    assert ' ns), the largest |box value| is ' in message


def test_final_weights_that_are_not_finite_are_refused(dataset, drive, monkeypatch):
    # The last step's update is not seen by any loss: the weights are checked themselves.
    make_step, steps = train.make_step, []

    def poisoned(optimizer, frozen, loss_of):
        step = make_step(optimizer, frozen, loss_of)

        def wrapped(*args):
            trainable, state, losses = step(*args)
            steps.append(1)
            if len(steps) == 2:
                trainable = eqx.tree_at(lambda t: t.conv1.bias, trainable,
                                        replace_fn=lambda b: b * np.nan)
            return trainable, state, losses
        return wrapped
    monkeypatch.setattr(train, 'make_step', poisoned)
    channels = dataset.channels
    with pytest.raises(train.TrainingError, match=r'training diverged: after step 2 the weights '
                                                  r'\.conv1\.bias are not finite'):
        train.train(dataset, drive[2].grid, channels, steps=2, batch_size=2, seed=5)


def test_train_command_writes_nothing_when_the_loss_turns_non_finite(
        drive, tmp_path, capsys, monkeypatch):
    # Was exit 0, "loss nan -> nan" and a checkpoint of NaN weights.
    params_file, bag, _ = drive
    monkeypatch.setattr(train, 'LEARNING_RATE', 1e30)
    out = tmp_path / 'head.npz'
    out.write_bytes(b'the previous weights')
    assert main(['train', str(bag), '--out', str(out), '--params', str(params_file),
                 '--steps', '4', '--batch', '2']) == 1
    assert_one_line_error(capsys, 'training diverged: the loss is nan at step 3 of 4')
    assert out.read_bytes() == b'the previous weights'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['head.npz']


def test_a_failed_weights_write_leaves_no_partial_file(drive, tmp_path, capsys, monkeypatch):
    params_file, bag, _ = drive
    save_weights = train.save_weights

    def disk_full(path, params, *record):
        with open(path, 'wb') as f:
            f.write(b'PK\x03\x04 half a zip')
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(train, 'save_weights', disk_full)
    out = tmp_path / 'head.npz'
    assert main(['train', str(bag), '--out', str(out), '--params', str(params_file),
                 '--steps', '1', '--batch', '2']) == 1
    assert_one_line_error(capsys, f'head.weights: cannot write {out}')
    assert list(tmp_path.iterdir()) == []
    # Written whole, it is renamed into place.
    monkeypatch.setattr(train, 'save_weights', save_weights)
    params = jax.tree.map(np.asarray, CenterPointHead.create(3))
    train.write_weights(out, eqx.filter(params, eqx.is_array))
    assert [p.name for p in tmp_path.iterdir()] == ['head.npz']


def test_a_batch_larger_than_the_training_set_draws_every_frame_as_often_as_needed():
    # 3 frames, batches of 8, no class balance: each step's frames, flips, scales agree.
    from types import SimpleNamespace
    dataset = SimpleNamespace(pooled=[None] * 3, boxes=[np.zeros((0, 9))] * 3)
    for indices, flips, variants, scales, keep in training_set.draws(
            dataset, 4, 8, 0, (1.0, 0.0, 0.0), balance=False, cameras=2):
        assert len(indices) == len(flips) == len(scales) == len(keep) == 8
        assert set(indices) == {0, 1, 2} and variants is None


def test_train_options_out_of_bounds_are_one_line(capsys, tmp_path):
    for option, value, refused in (('--seed', '-1', 'must be at least 0, got -1'),
                                   ('--steps', '100000000000', 'must be within [1, 10000000]'),
                                   ('--batch', '100000', 'must be within [1, 4096]')):
        assert main(['train', str(tmp_path / 'bag'), '--out', str(tmp_path / 'w.npz'),
                     option, value]) != 0
        assert_one_line_error(capsys, f'argument {option}: {refused}')


def test_train_refuses_params_naming_another_head(tmp_path, capsys):
    # It trains the reference head: weights written for another head.module fit no head.
    from cli_errors import assert_one_line_error
    from configs import small_params
    from jax_perception_node.settings.param_file import write_param_file
    from jax_perception_node.tools.cli import main
    params = write_param_file(small_params(0, **{'head.module': 'toy_heads:occupancy_head'}),
                              tmp_path / 'params.yaml')
    assert main(['train', str(tmp_path), '--params', str(params), '--out',
                 str(tmp_path / 'w.npz')]) == 1
    assert_one_line_error(capsys, 'names head.module toy_heads:occupancy_head: train trains '
                                  'the reference head')


def test_init_head_is_checked_as_the_node_checks_head_weights(drive, tmp_path, capsys):
    # Before, --init-head took a checkpoint of other channels (or of another image encoder)
    # the node refuses, and the new checkpoint recorded this configuration's channels.
    params_file, bag, cfg = drive
    names = lidar_channels(1) + (COVERAGE_CHANNEL,)
    bev = HeadInput(cfg.grid.height, cfg.grid.width, cfg.fused_channels, cfg.grid.resolution,
                    names)
    head = train.initial_head(str(centerpoint.LIDAR_WEIGHTS), bev)   # the shipped LiDAR-only
    np.testing.assert_array_equal(head.mean, np.load(centerpoint.LIDAR_WEIGHTS)['.mean'])
    arrays = dict(np.load(centerpoint.LIDAR_WEIGHTS))
    arrays[CHANNELS_KEY] = np.array(names[:-1] + ('camera_0',))
    renamed = tmp_path / 'renamed.npz'
    np.savez(renamed, **arrays)
    assert main(['train', str(bag), '--params', str(params_file), '--out',
                 str(tmp_path / 'w.npz'), '--init-head', str(renamed), '--steps', '1']) == 1
    assert_one_line_error(capsys, f'--init-head: {renamed} holds weights trained for 7 BEV '
                                  'channels (')
    assert not (tmp_path / 'w.npz').exists()
