"""
``jax-perception train BAGS... --out WEIGHTS``: train the reference head on sample drives.

Train only on drives written with ``jax-perception sample-bag --seed K`` for seeds K >= 100;
tests, the demo and the benchmarks use seeds below 100, and evaluation never uses a training
seed (``training_set`` refuses a held-out drive and makes the BEVs). The input normalization
is the BEVs' per-channel mean and standard deviation, never trained.

Targets (CenterPoint, ``head_targets``): a Gaussian heatmap per class at stride 4 (radius from
the box's size in output cells, CenterPoint's ``gaussian_radius`` at overlap 0.1, at least 2
cells), and in the 3 x 3 cells about the centre cell the offset to it, z, log size and sin/cos
yaw. Loss: the focal loss of the heatmaps plus 0.25 x the L1 of the regression, per object and
per taught cell. Random flips of x and y (the pooled centroid mirrored with them) and a random
intensity scale (``training_set.INTENSITY_SCALE``) augment; frames are drawn
class-balanced (``training_set.class_balanced``, as CBGS) unless ``--no-class-balance``; optax
AdamW with a warm-up and cosine decay.
Camera dropout (issue 29): a sample has all its cameras,
a random subset or none (``training_set.CameraDropout``), so the head works with them masked.
``--camera-classes`` routes the cameras to some classes' heatmaps only
(``detection.heads.camera_routing``): the other classes and the box regression read the LiDAR
channels alone, so the cameras never change their boxes.
When the cameras send images to an encoder with parameters (``encoders.learned``), the encoder
is trained with the head, end to end through the camera lift (``train_images``), and written
beside the head (``--encoder-out``); the head records that encoder. ``--init-head`` starts from
a trained head (fine-tuning) instead of a new one.

A loss that is not finite stops the training (``TrainingError``, naming the step and the
inputs' extremes), and so do final weights that are not finite: nothing non-finite is ever
written. The weights are written to a temporary file beside ``--out`` and renamed onto it, so
a failed write leaves no partial file there.
"""

from dataclasses import replace
import functools
import os
from pathlib import Path
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .arguments import check_writable, distinct_bags, outputs_apart, UsageError
from .head_targets import encode_targets, flip_boxes
# add_arguments: the command's parser, beside cmd_train (cli.py takes both from here).
from .train_arguments import add_arguments, camera_routing  # noqa: F401
from .train_images import EndToEnd, ImageFrames, make_step as end_to_end_step, samples
from .training_progress import plot_losses, progress_bar
from .training_set import CameraDropout, collect, Dataset, draws, read_truth, VARIANTS
from ..bags import bagio
from ..core.pipeline import BevPipeline
from ..detection.head import fits, HeadInput, leaf_names, load_weights, save_weights
from ..detection.heads.camera_routing import camera_outputs, CameraRouting
from ..detection.heads.centerpoint import (
    CenterPointHead, check_input, CLASSES, mirrored, object_head, validate)
from ..outputs.grid_map import GridMapLayers
from ..settings.config import default_params_file, HeadConfig, load_config
from ..settings.parameters import ConfigError, REFERENCE_HEAD

LEARNING_RATE = 3e-3
WEIGHT_DECAY = 1e-4
REG_WEIGHT = 0.25          # CenterPoint's weight of the box regression against the heatmap


class TrainingError(bagio.BagError):
    """Training gave a non-finite loss or weights: most likely from extreme values in the bags."""


def batch(dataset: Dataset, indices, flips, grid, variants=None, scales=None):
    """
    Return the pooled inputs and targets of frames ``indices`` with their (x, y) flips.

    ``variants``: each frame's cameras, an index into ``VARIANTS`` (None: all cameras); those
    without cameras are zeroed once stacked (``Dataset.variant`` without its copy).
    ``scales``: each frame's intensity factor (None: 1), applied to the pooled max and mean of
    ``intensity_mean`` alike (both commute with a positive scale).
    """
    inputs, heat, reg, mask = [], [], [], []
    variants = np.zeros(len(indices), int) if variants is None else np.asarray(variants)
    for k, (fx, fy), v in zip(indices, flips, variants):
        pooled = dataset.variant(k, 'subset' if VARIANTS[v] == 'subset' else 'all')
        pooled = mirrored(pooled, dataset.channels, fx, fy)
        inputs.append(pooled)
        targets = encode_targets(flip_boxes(dataset.boxes[k], grid, fx, fy), grid,
                                 pooled.shape[:2], len(CLASSES))
        for out, t in zip((heat, reg, mask), targets):
            out.append(t)
    inputs, heat, reg, mask = (np.stack(a) for a in (inputs, heat, reg, mask))
    for row in np.flatnonzero(variants == VARIANTS.index('none')):
        dataset.drop_cameras(inputs[row])
    if scales is not None and 'intensity_mean' in dataset.names:
        column = dataset.names.index('intensity_mean')
        factor = np.asarray(scales, np.float32)[:, None, None]
        inputs[..., column] *= factor
        inputs[..., dataset.channels + column] *= factor
    return inputs, heat, reg, mask


# -- loss and training -----------------------------------------------------------------------


def head_loss(model: CenterPointHead, pooled, heat, reg, mask,
              routing: CameraRouting | None = None):
    """
    Return (focal + REG_WEIGHT x L1, (focal, L1)), both summed over objects and per object.

    With ``routing``, the model's routed-off weights count as 0 (and so get no gradient).
    """
    if routing is not None:
        model = routing.apply(model)
    out = model.from_pooled(pooled)
    logits = out['heatmap']
    positive = (heat >= 1.0).astype(jnp.float32)
    p = jax.nn.sigmoid(logits)
    count = jnp.maximum(positive.sum(), 1.0)
    pos_loss = -((1 - p) ** 2) * jax.nn.log_sigmoid(logits) * positive
    neg_loss = -(p ** 2) * ((1 - heat) ** 4) * jax.nn.log_sigmoid(-logits) * (1 - positive)
    focal = (pos_loss.sum() + neg_loss.sum()) / count
    pred = jnp.concatenate([out['offset'], out['z'], out['size'], out['yaw']], axis=-1)
    l1 = (jnp.abs(pred - reg) * mask).sum() / jnp.maximum(mask.sum(), 1.0)
    return focal + REG_WEIGHT * l1, (focal, l1)


def trainable_mask(model: CenterPointHead | EndToEnd):
    """Return the filter of the trained leaves: all but the head's input normalization."""
    mask = jax.tree.map(lambda _: True, model)
    head = (lambda m: m.head) if isinstance(model, EndToEnd) else (lambda m: m)
    return eqx.tree_at(lambda m: (head(m).mean, head(m).std), mask, replace=(False, False))


def make_step(optimizer, frozen, loss_of):
    """Return the jitted ``step(trainable, opt_state, batch) -> (trainable, state, losses)``."""
    @jax.jit
    def step(trainable, opt_state, pooled, heat, reg, mask):
        def loss(t):
            return loss_of(eqx.combine(t, frozen), pooled, heat, reg, mask)
        (total, (focal, l1)), grads = jax.value_and_grad(loss, has_aux=True)(trainable)
        updates, opt_state = optimizer.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, jnp.stack([total, focal, l1])
    return step


def train(dataset: Dataset, grid, channels: int, steps: int, batch_size: int, seed: int,
          progress=None, learning_rate: float | None = None,
          dropout: CameraDropout | None = None, balance: bool = False,
          init: CenterPointHead | None = None, images: ImageFrames | None = None,
          encoder=None, routing: CameraRouting | None = None,
          ) -> tuple[CenterPointHead | EndToEnd, np.ndarray]:
    """
    Train a head on ``dataset``; return it and the per-step losses float32[steps, 3].

    Args
    ----
    dataset: the pooled BEVs and boxes (at least one frame).
    grid: the BEV's GridConfig.
    channels: the BEV's channels C.
    steps: optimizer steps.
    batch_size: frames per step (drawn without replacement within each pass).
    seed: of the initial weights, the frame order and the flips.
    progress: called with (step, steps, loss) after every step.
    learning_rate: the peak of the schedule (None: ``LEARNING_RATE``).
    dropout: the weights of each sample's camera variant (None: all cameras; a set without
        cameras to drop has all only: ``Dataset.variants``).
    balance: draw frames class-balanced (``training_set.class_balanced``, with replacement)
        instead of in a random order of passes.
    init: the head to start from, its normalization kept (None: a new head with the
        dataset's statistics).
    images, encoder: each frame's camera images and the LoadedEncoder to train with the head,
        end to end (``train_images``; None: the head alone).
    routing: the outputs that may read the camera channels (``camera_routing``; None: all);
        the weights it routes off stay 0 in training and are written 0.

    Returns
    -------
    (the trained CenterPointHead, or with ``images`` the EndToEnd head and encoder parameters,
    float32[steps, 3] losses: total, heatmap, regression).

    Raises
    ------
    TrainingError: at the first step whose loss is not finite, or when the trained weights are
    not (the message names the step and the inputs' extremes).

    """
    if init is None:
        mean, std = dataset.statistics()
        init = eqx.tree_at(lambda m: (m.mean, m.std), CenterPointHead.create(channels, seed),
                           replace=(mean, std))
    model = init if images is None else EndToEnd(
        init, jax.tree.map(jnp.asarray, encoder.params))
    trainable, frozen = eqx.partition(model, trainable_mask(model))
    rate = LEARNING_RATE if learning_rate is None else learning_rate
    optimizer = adamw(rate, steps)
    opt_state = optimizer.init(trainable)
    intensity = dataset.names.index('intensity_mean') if images is not None and (
        'intensity_mean' in dataset.names) else None
    loss_of = functools.partial(head_loss, routing=routing)
    step = make_step(optimizer, frozen, loss_of) if images is None else end_to_end_step(
        optimizer, frozen, encoder.spec.apply, images.stacked_tables(), dataset.cameras,
        intensity, loss_of)
    weights = dataset.variants(dropout or CameraDropout(0.0), drawn=images is not None)
    losses = np.zeros((steps, 3), np.float32)
    for n, (indices, flips, variants, scales, keep) in enumerate(draws(
            dataset, steps, batch_size, seed, weights, balance,
            0 if images is None else len(images.valid[0]))):
        if images is None:
            arrays = batch(dataset, indices, flips, grid, variants, scales)
        else:
            arrays = samples(dataset, images, indices, flips,
                             np.zeros(batch_size, int) if variants is None else variants,
                             scales, keep, targets_of(dataset, grid))
        trainable, opt_state, loss = step(trainable, opt_state, *arrays)
        losses[n] = np.asarray(loss)
        if not np.isfinite(losses[n]).all():
            total, focal, l1 = losses[n]
            raise TrainingError(
                f'training diverged: the loss is {total:g} at step {n + 1} of {steps} (heatmap '
                f'{focal:g}, box regression {l1:g}); {_hint(dataset, rate)}')
        if progress:
            progress(n + 1, steps, float(losses[n, 0]))
    model = routed(eqx.combine(trainable, frozen), routing)
    check_finite(model, steps, lambda: _hint(dataset, rate))
    return model, losses


def adamw(rate: float, steps: int):
    """Return AdamW with gradient clipping, a warm-up and a cosine decay to 2 % of ``rate``."""
    return optax.chain(optax.clip_by_global_norm(10.0), optax.adamw(
        optax.warmup_cosine_decay_schedule(0.0, rate, min(100, max(steps // 10, 1)),
                                           max(steps, 2), rate * 0.02),
        weight_decay=WEIGHT_DECAY))


def routed(model: CenterPointHead | EndToEnd, routing: CameraRouting | None):
    """Return ``model`` with its head's routed-off weights 0 (``routing`` None: as it is)."""
    if routing is None:
        return model
    if isinstance(model, EndToEnd):
        return eqx.tree_at(lambda m: m.head, model, routing.apply(model.head))
    return routing.apply(model)


def check_finite(model, steps: int, hint) -> None:
    """Raise TrainingError naming the first weights of ``model`` that are not finite."""
    arrays = eqx.filter(model, eqx.is_array)
    bad = [name for name, leaf in zip(leaf_names(arrays), jax.tree.leaves(arrays))
           if not np.all(np.isfinite(np.asarray(leaf)))]
    if bad:
        raise TrainingError(
            f'training diverged: after step {steps} the weights {", ".join(bad[:3])}'
            f'{" ..." if len(bad) > 3 else ""} are not finite (every loss was); {hint()}')


def targets_of(dataset: Dataset, grid):
    """Return ``targets(k, flip_x, flip_y)``: frame k's (heatmap, regression, mask), mirrored."""
    def targets(k: int, flip_x: bool, flip_y: bool):
        return encode_targets(flip_boxes(dataset.boxes[k], grid, flip_x, flip_y), grid,
                              dataset.pooled[k].shape[:2], len(CLASSES))
    return targets


def _hint(dataset: Dataset, rate: float) -> str:
    """Return where to look after a divergence: the inputs' extremes, a non-default rate."""
    hint = 'likely at fault: clouds or ground truth with extreme values'
    if rate != LEARNING_RATE:
        hint += f', or the learning rate {rate:g} (the default is {LEARNING_RATE:g})'
    extremes = dataset.extremes()
    return f'{hint}; {extremes}' if extremes else hint


def write_weights(path: Path, params, channel_names: tuple[str, ...] = (),
                  encoder: str = '', resolution: float = 0.0) -> None:
    """
    ``save_weights`` to a temporary file beside ``path``, renamed onto it once complete.

    ``channel_names``: the BEV channels the weights were trained on, recorded in the file;
    ``encoder``: the image encoder trained with them ('': none); ``resolution``: the BEV's
    cell size (m; 0: not recorded).
    """
    part = path.with_name(f'.{path.name}.{os.getpid()}.part')
    try:
        save_weights(part, params, channel_names, encoder, resolution)
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


# -- command line ----------------------------------------------------------------------------


def initial_head(path: str, bev: HeadInput) -> CenterPointHead:
    """
    Return the head of checkpoint ``path`` (``--init-head``) for ``bev``; ConfigError.

    Checked as the node checks ``head.weights``: trained for other channels or another image
    encoder, it is refused (its record would otherwise pass into the new checkpoint).
    """
    params, static = eqx.partition(CenterPointHead.create(bev.channels), eqx.is_array)
    path = Path(os.path.expanduser(path))
    fit = fits(REFERENCE_HEAD, object_head(bev), bev, path, False, key='--init-head')
    loaded = load_weights(path, jax.tree.map(np.asarray, params), validate, fit,
                          key='--init-head')
    return eqx.combine(jax.tree.map(jnp.asarray, loaded), static)


def cmd_train(args, stream=sys.stderr) -> int:
    """Collect the BEVs of ``args.bags``, train, write the weights and the loss picture."""
    start = time.perf_counter()
    out = Path(args.out)
    if out.name in ('', '..'):      # '', '.', '/': the other outputs' names derive from it
        raise UsageError(f'--out {args.out!r}: a file name is needed (WEIGHTS.npz)')
    png = Path(args.png) if args.png else out.with_name(out.stem + '_loss.png')
    cfg = load_config(args.params or default_params_file())
    if cfg.head.module not in ('', REFERENCE_HEAD):
        raise UsageError(f'--params names head.module {cfg.head.module}: train trains the '
                         f'reference head ({REFERENCE_HEAD}) only; train another head its own '
                         'way')
    cfg = replace(cfg, head=HeadConfig(), output_bev_features=True)   # the BEV, no head
    grid = cfg.grid
    pipe = BevPipeline(cfg)
    check_input(pipe.head_input)
    encoder = pipe.encoder if pipe.encoder and jax.tree.leaves(pipe.encoder.params) else None
    encoder_out = Path(args.encoder_out or out.with_name(out.stem + '_encoder.npz'))
    # Before the work: an output that cannot be made, or one over a training bag, loses it.
    picture = '--png' if args.png else 'the loss picture (WEIGHTS_loss.png)'
    outputs = {'--out': args.out, '--encoder-out': str(encoder_out), picture: str(png)}
    if encoder is None:
        del outputs['--encoder-out']
    for option, path in outputs.items():
        check_writable(path, option, folder=False)
    outputs_apart(args.bags, outputs)
    distinct_bags(args.bags)
    for src in args.bags:      # refuse a bag without ground truth before the warm-up
        reader = bagio.open_reader(src)
        try:
            read_truth(reader, src)
        finally:
            reader.close()
    init = initial_head(args.init_head, pipe.head_input) if args.init_head else None
    if encoder is not None and args.untrained_encoder:
        encoder = replace(encoder, params=jax.tree.map(np.asarray, encoder.spec.params))
    routing = camera_routing(args.camera_classes, len(pipe.lidar_channels), pipe.projected)
    pipe.warmup()
    names = GridMapLayers.for_pipeline(cfg, pipe).names
    dataset = Dataset.of(cfg, pipe, names)
    if encoder is not None and dataset.cameras is None:
        raise ConfigError('encoder.module: its parameters are trained through the camera lift, '
                          "which fusion.weights projects away; set fusion.weights_file: ''")
    dropout = CameraDropout(args.camera_dropout, args.drop_all_cameras)
    images = ImageFrames(pipe) if encoder is not None else None
    collect(args.bags, cfg, pipe, dataset, stream, None if images else dropout, args.seed,
            images)
    if not dataset.pooled:
        raise bagio.BagError('no LiDAR frame with ground truth at its stamp in '
                             f'{", ".join(map(str, args.bags))}')
    stream.write(f'{len(dataset.pooled)} frames, {sum(len(b) for b in dataset.boxes)} boxes, '
                 f'collected in {time.perf_counter() - start:.0f} s; '
                 f'{dataset.describe_dropout(cfg, pipe.projected, dropout, bool(images))}; '
                 + (f'the encoder {encoder.name} trained with the head end to end; '
                    if encoder else '') + f'training {args.steps} steps of {args.batch}\n')
    try:
        model, losses = train(dataset, grid, pipe.output_channels, args.steps, args.batch,
                              args.seed, progress_bar(stream), dropout=dropout,
                              balance=args.class_balance, init=init, images=images,
                              encoder=encoder, routing=routing)
    except TrainingError as exc:
        if stream.isatty():
            stream.write('\n')        # end the progress bar's line
        raise TrainingError(f'{exc}; nothing written to {out}') from None
    written = write_outputs(model, losses, names, outputs, encoder, grid.resolution)
    if routing is not None:
        reach = camera_outputs(model.head if encoder else model, routing.lidar_channels)
        stream.write(f'the camera channels reach: {", ".join(reach)}\n')
    k = max(1, min(20, len(losses) // 10))
    stream.write(f'loss {losses[:k, 0].mean():.3f} -> {losses[-k:, 0].mean():.3f} '
                 f'(mean of the first and last {k} steps); {time.perf_counter() - start:.0f} s '
                 f'in all; wrote {written}\n')
    if encoder:     # the head read this encoder's features: with another one it is lost
        stream.write(f'run them together: head.weights {outputs["--out"]} and '
                     f'encoder.weights {outputs["--encoder-out"]}\n')
    return 0


def write_outputs(model, losses: np.ndarray, names, outputs: dict[str, str], encoder,
                  resolution: float) -> str:
    """Write the head, an encoder trained with it and the loss picture (``outputs``' order)."""
    head = model.head if encoder is not None else model
    paths = [Path(path) for path in outputs.values()]
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
        write_weights(paths[0], eqx.partition(head, eqx.is_array)[0], tuple(names),
                      encoder.name if encoder else '', resolution)
        if encoder is not None:
            write_weights(paths[1], jax.tree.map(np.asarray, model.encoder))
        plot_losses(losses, paths[-1])
    except OSError as exc:
        raise ConfigError(f'head.weights: cannot write {" or ".join(map(str, paths))}: '
                          f'{exc.strerror or exc}') from None
    return ', '.join(map(str, paths[:-1])) + f' and {paths[-1]}'
