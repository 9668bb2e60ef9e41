"""
End-to-end training of a learned image encoder with the head, through the camera lift.

When the parameter file's cameras send images to an encoder with parameters (``encoder.module:
...encoders.learned:cnn``), ``jax-perception train`` trains both (issue 31, as Simple-BEV and
BEVFusion do). Each training frame keeps, beside its pooled BEV (``training_set.Dataset``), what
the frame's executable read for its cameras (:class:`ImageFrames`): the decoded images uint8
[N, H_i, W_i, 3], the camera flags and the lift tables of the calibration. A training step runs
the encoder on the images, lifts its maps with the pipeline's own ``lift.lift_cameras``, pools
the camera channels as the head pools and puts them in place of the pooled BEV's camera
channels (:func:`pooled_inputs`); the LiDAR channels and the centroid are the frame's as the
node computed them, which the cameras never change. The loss is the head's; its gradient
reaches the encoder through the lift's bilinear taps. With the parameters the frame was
collected with, the inputs equal the pooled BEV of the frame (tested).

Camera dropout is exact here and drawn per sample: a dropped camera's flag is cleared before
the lift, as the node masks a missing one. Flips and the intensity scale apply to the
assembled inputs (:func:`augmented`), as ``train.batch`` applies them to a stored BEV.

The lift tables are kept once per calibration; a drive whose calibration changes at every
frame (``extrinsics.source: tf`` on a drive with body motion) would keep one per frame, so
more than :data:`MAX_CALIBRATIONS` are refused (replay those drives with ``extrinsics.source:
parameters`` for this training).
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..bags import bagio
from ..core import lift
from ..core.pipeline import BevPipeline
from ..detection.heads.centerpoint import CenterPointHead, CENTROID

MAX_CALIBRATIONS = 16       # lift tables kept for one training (module doc)


class EndToEnd(eqx.Module):
    """The head and the image encoder's parameters, trained together."""

    head: CenterPointHead
    encoder: Any                   # the encoder's parameter pytree (``EncoderSpec.params``)


class ImageFrames:
    """
    What each training frame's cameras gave its executable: images, flags, lift tables.

    Called right after each frame enters the dataset, while the pipeline still holds that
    frame's staged images (``BevPipeline.frame_args`` runs nothing).
    """

    def __init__(self, pipe: BevPipeline):
        self.pipe = pipe
        self.images: list[np.ndarray] = []      # uint8[N, H_i, W_i, 3] each
        self.valid: list[np.ndarray] = []       # bool[N] each
        self.calibration: list[int] = []        # index into ``tables`` of each frame
        self.tables: list[lift.LiftTables] = []
        self._last = None                       # the pipeline's tables object of the last frame

    def __call__(self, src: str = '') -> None:
        """Keep the frame the pipeline processed last; BagError past MAX_CALIBRATIONS."""
        n = len(self.pipe.camera_names)
        args = self.pipe.frame_args(np.zeros((1, 4), np.float32), 0)
        self.images.append(np.array(args.features, np.uint8, copy=True))
        self.valid.append(args.scalars[1:1 + n] > 0)
        if args.lift is not self._last:
            tables = jax.tree.map(np.asarray, args.lift)
            if not self.tables or not all(jax.tree.leaves(jax.tree.map(
                    np.array_equal, tables, self.tables[-1]))):
                if len(self.tables) == MAX_CALIBRATIONS:
                    raise bagio.BagError(
                        f'{src}: end-to-end training keeps the camera lift of each calibration'
                        f', and this training set has more than {MAX_CALIBRATIONS}; replay '
                        'drives whose sensors move on the body with extrinsics.source: '
                        'parameters')
                self.tables.append(tables)
            self._last = args.lift
        self.calibration.append(len(self.tables) - 1)

    def stacked_tables(self) -> lift.LiftTables:
        """Return the kept tables stacked along a first axis, on the device."""
        return jax.tree.map(lambda *t: jnp.asarray(np.stack(t)), *self.tables)


def pooled_inputs(model: EndToEnd, encode, pooled, images, valid, tables, first: int):
    """
    Return the head's inputs [B, h, w, 2C + 4] with the camera channels encoded and lifted.

    ``pooled``: the frames' pooled BEVs [B, h, w, 2C + 4] (``CenterPointHead.pool``), whose
    channels ``first`` .. C - 1 (the cameras and the coverage) are replaced; ``images`` uint8
    [B, N, H_i, W_i, 3]; ``valid`` bool[B, N]; ``tables`` a LiftTables of each frame (leading
    axis B); ``encode``: the encoder's ``apply``.
    """
    batch, h, w, _ = pooled.shape
    c = model.head.mean.shape[0]
    s = model.head.stride
    maps = jax.vmap(jax.vmap(encode, in_axes=(None, 0)), in_axes=(None, 0))(
        model.encoder, images)
    camera, coverage = jax.vmap(lift.lift_cameras)(maps, valid, tables)
    bev = jnp.concatenate([camera, coverage[..., None]], axis=-1).reshape(
        batch, h * s, w * s, c - first)
    high, mean, _ = model.head.pool_parts(bev)
    return jnp.concatenate([pooled[..., :first], high, pooled[..., c:c + first], mean,
                            pooled[..., 2 * c:]], axis=-1)


def augmented(inputs, channels: int, flips, scales, intensity: int | None):
    """
    Return inputs [B, h, w, 2C + 4] mirrored per sample and their intensity scaled.

    ``flips`` bool[B, 2] (rows, columns), as ``centerpoint.mirrored``; ``scales`` float32[B]
    multiply the pooled max and mean of channel ``intensity`` (None: none).
    """
    flip_x, flip_y = flips[:, 0, None, None, None], flips[:, 1, None, None, None]
    out = jnp.where(flip_x, inputs[:, ::-1], inputs)
    out = jnp.where(flip_y, out[:, :, ::-1], out)
    signs = jnp.tile(jnp.where(flips, -1.0, 1.0), CENTROID // 2)[:, None, None, :]
    factors = jnp.ones(2 * channels, jnp.float32)[None]
    if intensity is not None:
        factors = jnp.broadcast_to(factors, (scales.shape[0], 2 * channels))
        factors = factors.at[:, intensity].set(scales).at[:, channels + intensity].set(scales)
    factors = jnp.concatenate([jnp.broadcast_to(factors[:, None, None, :], (
        out.shape[0], 1, 1, 2 * channels)), signs], axis=-1)
    return out * factors


def make_step(optimizer, frozen, encode, tables, first: int, intensity: int | None,
              head_loss):
    """
    Return the jitted end-to-end ``step(trainable, opt_state, *batch)``.

    The batch is that of :func:`samples`; ``tables``: all calibrations' LiftTables, stacked.
    """
    @jax.jit
    def step(trainable, opt_state, pooled, images, valid, calibration, flips, scales, heat,
             reg, mask):
        def loss(t):
            model = eqx.combine(t, frozen)
            frames = jax.tree.map(lambda table: table[calibration], tables)
            inputs = pooled_inputs(model, encode, pooled, images, valid, frames, first)
            inputs = augmented(inputs, model.head.mean.shape[0], flips, scales, intensity)
            return head_loss(model.head, inputs, heat, reg, mask)
        (total, (focal, l1)), grads = jax.value_and_grad(loss, has_aux=True)(trainable)
        updates, opt_state = optimizer.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, jnp.stack([total, focal, l1])
    return step


def samples(dataset, frames: ImageFrames, indices, flips, variants, scales, keep, targets):
    """
    Return one end-to-end batch: the frames' stored parts and the draws of their samples.

    ``variants``: each sample's index into ``training_set.VARIANTS`` (all, subset, none);
    ``keep`` bool[B, N]: the cameras a subset sample keeps; ``targets(k, fx, fy)``: the
    (heatmap, regression, mask) of frame k mirrored.
    """
    valid = np.stack([frames.valid[k] for k in indices])
    variants = np.asarray(variants)
    valid &= np.where((variants == 1)[:, None], keep, True) & (variants != 2)[:, None]
    heat, reg, mask = (np.stack(t) for t in zip(*(
        targets(k, fx, fy) for k, (fx, fy) in zip(indices, flips))))
    return (np.stack([dataset.pooled[k] for k in indices]),
            np.stack([frames.images[k] for k in indices]), valid,
            np.asarray([frames.calibration[k] for k in indices], np.int32),
            np.asarray(flips, bool), np.asarray(scales, np.float32), heat, reg, mask)
