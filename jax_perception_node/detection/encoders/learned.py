"""
A small learned image encoder: the appearance features plus a residual learned end to end.

``encoder.module: jax_perception_node.detection.encoders.learned:cnn``. Per camera, on the
uint8 RGB image [H_i, W_i, 3] at ``stride`` s times the feature map [H_f, W_f]:

- ``base``: the fixed appearance features (``pooled.appearance``, channel k is
  ``APPEARANCE_CHANNELS[k % 8]``), so the untrained encoder is that encoder exactly;
- ``patches``: each s x s block's pixels, s^2 x 3 values in -0.5..0.5 (space to depth: the
  stride-s patch embedding of a vision transformer, one 1x1 layer instead of a strided conv);
- 1x1 conv (s^2 x 3 + 8 -> :data:`HIDDEN`) + ReLU over the patches and the 8 appearance
  channels, then a residual 3 x 3 depthwise + 1x1 block with ReLU (each output pixel sees
  3 x 3 map pixels, 12 x 12 image pixels at s = 4);
- 1x1 conv HIDDEN -> C, zero at initialization; the output is ``base + delta``.

The layers are the reference head's (``heads.centerpoint``: ``Conv``, ``Separable``). 1 464
parameters at s = 4, C = 8; at the sample drive's 352 x 128 images (88 x 32 map pixels, 1 424
multiply-adds each) about 4 MMAC per camera, beside the appearance features.
``jax-perception train`` trains it together with the head, through the camera lift, when the
parameter file names it (docs/users.md, "Training the image encoder"). The parameters are the
arrays of the Equinox module: traced, so a checkpoint swaps in live. The shipped checkpoint
(:data:`WEIGHTS`) was trained with the shipped head on the sample drives' JPEG images; it goes
with the head checkpoint that records this encoder (``centerpoint.shipped_weights``).
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .pooled import APPEARANCE_CHANNELS, appearance_features, pooled_rgb
from ..encoder import EncoderInput, EncoderSpec
from ..heads.centerpoint import Conv, Separable

HIDDEN = 16
NAME = 'jax_perception_node.detection.encoders.learned:cnn'
WEIGHTS = Path(__file__).with_name('learned_cnn.npz')


def patches(image: jax.Array, stride: int) -> jax.Array:
    """Return uint8[H_i, W_i, 3] as float32[H_i / s, W_i / s, s^2 x 3]: each block's pixels."""
    rows, cols = image.shape[0] // stride, image.shape[1] // stride
    blocks = image.reshape(rows, stride, cols, stride, 3).transpose(0, 2, 1, 3, 4)
    return blocks.reshape(rows, cols, stride * stride * 3).astype(jnp.float32) * np.float32(
        1.0 / 255.0) - np.float32(0.5)


class ConvEncoder(eqx.Module):
    """The network (module doc); ``order`` picks the output's appearance channels."""

    embed: Conv                  # 1x1, s^2 x 3 + 8 -> HIDDEN
    block: Separable             # 3 x 3 depthwise + 1x1, residual
    out: Conv                    # 1x1, HIDDEN -> C, zero at initialization
    stride: int = eqx.field(static=True)
    order: tuple[int, ...] = eqx.field(static=True)

    @classmethod
    def create(cls, stride: int, channels: int, seed: int = 0) -> 'ConvEncoder':
        """Return the untrained encoder: it gives the appearance features exactly."""
        rng = np.random.default_rng(seed)
        inputs = stride * stride * 3 + len(APPEARANCE_CHANNELS)
        out = Conv(np.zeros((1, 1, HIDDEN, channels), np.float32),
                   np.zeros(channels, np.float32))
        return cls(Conv.create(rng, 1, inputs, HIDDEN), Separable.create(rng, HIDDEN, 1), out,
                   stride, tuple(int(k) % len(APPEARANCE_CHANNELS) for k in range(channels)))

    def __call__(self, image: jax.Array) -> jax.Array:
        """Return the feature map float32[H_f, W_f, C] of one uint8 RGB image [H_i, W_i, 3]."""
        appearance = appearance_features(pooled_rgb(image, self.stride))
        x = jax.nn.relu(self.embed(patches(image, self.stride), appearance))
        x = self.block(x)
        base = appearance if self.order == tuple(range(len(APPEARANCE_CHANNELS))) \
            else appearance[..., list(self.order)]
        return base + self.out(x)


def cnn(inp: EncoderInput) -> EncoderSpec:
    """Return the learned encoder for ``inp``'s stride and channels, with its shipped weights."""
    params, static = eqx.partition(ConvEncoder.create(inp.stride, inp.channels), eqx.is_array)

    def apply(params, image):
        return eqx.combine(params, static)(image)
    shipped = WEIGHTS if WEIGHTS.exists() and inp.stride == 4 and inp.channels == 8 else None
    return EncoderSpec(apply, params, shipped)
