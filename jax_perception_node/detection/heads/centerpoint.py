"""
The reference head: a small CenterPoint-style object detector on the fused BEV, in Equinox.

``object_head`` is the factory named by ``head.module:
'jax_perception_node.detection.heads.centerpoint:object_head'``. Four classes
(``boxes.OBJECT_CLASSES``: car, large_vehicle, pedestrian, cyclist), one heatmap each, and a
circle non-maximum suppression on the device with CenterPoint's per-class radii
(:data:`NMS_RADIUS_M`). The network, channel-last throughout (XLA on the CPU is faster with
NHWC, and the BEV is channel-last), sized for the budget of issue 18 (at most 30 % on a CPU
frame):

- 4 x 4 pooling of the BEV float32[H, W, C] to stride 4: max and mean of every channel, the
  centroid (mean row and column within the block) of the occupied cells, and that of the
  raised cells (standing :data:`RAISED_M` above the block's lowest point: objects, not the
  ground), 2C + 4 channels;
- a fixed per-channel input normalization ``(x - mean) / std``, the statistics of the training
  BEVs (set by the trainer, never trained). It is applied after the pooling, which is the same
  as before it (max and mean commute with a positive affine map per channel) at 1/16 the cost;
- conv 1x1 2C + 4 -> 32 + ReLU (per cell);
- two residual depthwise-separable blocks, ``x + relu(pointwise(depthwise(x)))``: a 3 x 3
  kernel per channel, then 1x1 32 -> 32; the second's 3 x 3 dilated by 2 (:data:`DILATIONS`).
  Each output cell sees 7 x 7 cells, 11.2 m: a bus's length, and a car with the ground about
  it, where the former single 3 x 3 convolution 32 -> 16 saw 4.8 m, at about three quarters of
  its cost (a grouped convolution would cost 25x more on the CPU: :class:`Depthwise`);
- conv 1x1 32 -> 12: one heatmap logit per class (bias -2.19, a prior of 0.1 as in
  CenterPoint), centre offset (2), centre z (1), log size (3), sin and cos of the yaw (2).

The parameters are the arrays of the Equinox module (``eqx.partition(model, eqx.is_array)``);
``apply`` combines them with the static rest and calls it, so they are traced arguments.

The head ships one checkpoint per BEV layout the shipped parameters make (issue 29): with the
cameras (:data:`WEIGHTS`, 15 channels) and LiDAR-only, ``cameras.names: []``
(:data:`LIDAR_WEIGHTS`, 7 channels), and one trained end to end with the learned image
encoder (:data:`CNN_WEIGHTS`, ``encoders.learned``; 15 channels). Each records the channels it
was trained for, the last also its encoder, and ``object_head`` takes the one whose record is
the BEV's layout and encoder (:func:`shipped_weights`).
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..boxes import OBJECT_CLASSES
from ..head import CHANNELS_KEY, HeadInput, HeadSpec
from ..plugin import ENCODER_KEY
from ...settings.channels import LIDAR_CHANNELS
from ...settings.parameters import ConfigError

STRIDE = 4
CLASSES = OBJECT_CLASSES
# Circle NMS radius per class (m): CenterPoint's nuScenes min_radius (squared distances 4, 12,
# 0.175, 0.85: car, truck, pedestrian, bicycle), as Autoware's centerpoint configures it.
NMS_RADIUS_M = (2.0, 3.46, 0.42, 0.92)
# Cells within this many output cells of a centre are taught their offset to it
# (tools/head_targets.py), and a decoded centre is the score-weighted mean of their votes
# (box_decode.decode_boxes): on held-out seed 7 (deskewed, LiDAR only, the head before the
# raised centroid) the mean AP rose from 0.44 to 0.47, the pedestrians' AP at 1 m from 0.51
# to 0.64.
CENTRE_VOTES = 1
HIDDEN = 32                # channels of every layer between the pooling and the outputs
CENTROID = 4               # pooled channels: the occupied and the raised cells' mean row, column
# A cell is raised when its highest point stands this much above the lowest point of its 4 x 4
# block (m): a pedestrian, a car's side or a pole, not the ground about it. Within 15 m of the
# sensor 45 % of the cells hold ground returns, which drew the occupied cells' centroid to the
# block's middle; the raised cells' centroid places the object inside its 1.6 m block.
RAISED_M = 0.3
# The BEV channels the raised cells are found from (the LiDAR block leads every layout).
Z_MAX, Z_MIN = LIDAR_CHANNELS.index('z_max'), LIDAR_CHANNELS.index('z_min')
DILATIONS = (1, 2)         # of the separable blocks' 3 x 3 kernels: 7 x 7 cells seen (11.2 m)
# The training drives' LiDARs report 0-255 (the OS1-128's signal is brought to it by
# lidar.intensity_scale): the top of the scale the head reads (HeadSpec.intensity_top).
INTENSITY_TOP = 255.0
# The head's outputs (the head contract's keys) and their channels, in the last conv's order.
OUTPUTS = (('heatmap', len(CLASSES)), ('offset', 2), ('z', 1), ('size', 3), ('yaw', 2))
HEATMAP_PRIOR = 0.1        # initial score everywhere: bias log(p / (1 - p)) = -2.19
WEIGHTS = Path(__file__).with_name('centerpoint_objects.npz')             # with the cameras
LIDAR_WEIGHTS = Path(__file__).with_name('centerpoint_objects_lidar.npz')   # cameras.names: []
CNN_WEIGHTS = Path(__file__).with_name('centerpoint_objects_cnn.npz')   # encoders.learned


class Conv(eqx.Module):
    """A 2-D convolution, NHWC input, HWIO kernel, 'same' padding."""

    weight: jax.Array              # float32[k, k, C_in, C_out]
    bias: jax.Array                # float32[C_out]

    @classmethod
    def create(cls, rng: np.random.Generator, k: int, c_in: int, c_out: int,
               gain: float = 2.0) -> 'Conv':
        """Return a conv with He-normal weights (variance ``gain / fan_in``) and zero bias."""
        std = np.sqrt(gain / (k * k * c_in))
        weight = (rng.standard_normal((k, k, c_in, c_out)) * std).astype(np.float32)
        return cls(weight, np.zeros(c_out, np.float32))

    def __call__(self, *parts: jax.Array) -> jax.Array:
        """
        Convolve float32[N, H, W, C_in] to float32[N, H, W, C_out].

        Given several parts [N, H, W, C_i] (sum C_i = C_in), convolves them as their
        concatenation along channels without building it: one conv per part with its slice of
        the kernel, summed. A 1 x 1 kernel is a matrix product over the channels (on the CPU
        15 % faster than XLA's convolution of it).
        """
        k = self.weight.shape[0]
        y, start = self.bias, 0
        for x in parts:
            kernel = self.weight[:, :, start:start + x.shape[-1]]
            # HIGHEST: NVIDIA GPUs would run a float32 product as TF32 (kernels.py: no product
            # is left to a backend's default precision), and the weights were trained in float32.
            if k == 1:
                y = y + jnp.matmul(x, kernel[0, 0], precision=jax.lax.Precision.HIGHEST)
            else:
                y = y + jax.lax.conv_general_dilated(
                    x, kernel, window_strides=(1, 1), padding=((k // 2, k // 2),) * 2,
                    dimension_numbers=('NHWC', 'HWIO', 'NHWC'),
                    precision=jax.lax.Precision.HIGHEST)
            start += x.shape[-1]
        if start != self.weight.shape[2]:
            raise ValueError(f'conv parts have {start} channels in all, the kernel takes '
                             f'{self.weight.shape[2]}')
        return y


class Depthwise(eqx.Module):
    """A 3 x 3 depthwise convolution (one kernel per channel, no bias), 'same' zero padding."""

    weight: jax.Array              # float32[3, 3, C]
    dilation: int = eqx.field(static=True, default=1)

    @classmethod
    def create(cls, rng: np.random.Generator, channels: int,
               dilation: int = 1) -> 'Depthwise':
        """Return one with normal weights of variance 1/9 (a pointwise layer follows)."""
        weight = (rng.standard_normal((3, 3, channels)) / 3.0).astype(np.float32)
        return cls(weight, dilation)

    def __call__(self, x: jax.Array) -> jax.Array:
        """
        Convolve float32[N, H, W, C] to [N, H, W, C], each channel with its own 3 x 3 kernel.

        Nine shifted views multiplied and added, which XLA fuses into one loop: on the CPU
        25x faster than its grouped convolution (``feature_group_count``).
        """
        d = self.dilation
        h, w = x.shape[-3], x.shape[-2]
        padded = jnp.pad(x, ((0, 0),) * (x.ndim - 3) + ((d, d), (d, d), (0, 0)))
        y = 0.0
        for i in range(3):
            for j in range(3):
                y = y + padded[..., i * d:i * d + h, j * d:j * d + w, :] * self.weight[i, j]
        return y


class Separable(eqx.Module):
    """A residual depthwise-separable block: ``x + relu(pointwise(depthwise(x)))``."""

    depthwise: Depthwise
    pointwise: Conv

    @classmethod
    def create(cls, rng: np.random.Generator, channels: int, dilation: int) -> 'Separable':
        """Return an untrained block of ``channels`` channels and the depthwise ``dilation``."""
        return cls(Depthwise.create(rng, channels, dilation), Conv.create(rng, 1, channels,
                                                                          channels))

    def __call__(self, x: jax.Array) -> jax.Array:
        """Return the block of float32[N, H, W, C]: the same shape."""
        return x + jax.nn.relu(self.pointwise(self.depthwise(x)))


def _centroid(masks: list[jax.Array], s: int) -> jax.Array:
    """
    Return the mean (row, column) of a block's cells in a mask, float32[..., h, w, 2].

    ``masks``: the mask's s * s views, bool[..., h, w] each, view (i, j) at ``i * s + j``. In
    BEV cells from the block's centre (within +-(s - 1) / 2); 0 in a block without a cell.
    In cells, not blocks: the normalized max and mean are of order 1, and centroids in blocks
    (+-0.375) were too small for the first layer to pass on (trained with them, the head
    placed a pedestrian's centre no better than its cell's middle: 0.51 m median error at the
    centre cell, where the raised cells' centroid alone is within 0.21 m of the target).
    """
    count = row = col = 0.0
    for k, mask in enumerate(masks):
        i, j = divmod(k, s)
        cell = mask.astype(jnp.float32)
        count = count + cell
        row = row + cell * (i - (s - 1) / 2)
        col = col + cell * (j - (s - 1) / 2)
    inverse = 1.0 / jnp.maximum(count, 1.0)
    return jnp.stack([row * inverse, col * inverse], axis=-1)


class CenterPointHead(eqx.Module):
    """The network; see the module doc. ``mean`` and ``std`` are fixed, not trained."""

    mean: jax.Array                # float32[C], per BEV channel
    std: jax.Array                 # float32[C], per BEV channel, > 0
    conv1: Conv
    blocks: tuple[Separable, ...]
    out: Conv
    stride: int = eqx.field(static=True, default=STRIDE)

    @classmethod
    def create(cls, channels: int, seed: int = 0) -> 'CenterPointHead':
        """Return an untrained head for a BEV of ``channels`` channels (identity statistics)."""
        rng = np.random.default_rng(seed)
        outputs = sum(n for _, n in OUTPUTS)
        out = Conv.create(rng, 1, HIDDEN, outputs, gain=1.0)
        bias = np.zeros(outputs, np.float32)
        bias[:len(CLASSES)] = np.log(HEATMAP_PRIOR / (1.0 - HEATMAP_PRIOR))
        return cls(np.zeros(channels, np.float32), np.ones(channels, np.float32),
                   Conv.create(rng, 1, 2 * channels + CENTROID, HIDDEN),
                   tuple(Separable.create(rng, HIDDEN, d) for d in DILATIONS),
                   eqx.tree_at(lambda c: c.bias, out, bias))

    def pool_parts(self, bev: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """
        Pool float32[..., H, W, C] to (max, mean, centroids) at stride s.

        max and mean: [..., H/s, W/s, C]; centroids [..., H/s, W/s, 4]: the mean row and
        column, in cells from the block's centre (within +-(s - 1) / 2), of the block's
        occupied cells (first channel positive, in every layout the node makes), then of its
        raised cells (occupied, ``z_max`` over :data:`RAISED_M` above the lowest ``z_min`` of
        the block's occupied cells); 0 where a block has none. Max and mean keep no position
        inside a 1.6 m block; the centroids give the head the sub-block position it needs for
        its centre offsets.
        """
        *lead, h, w, c = bev.shape
        s = self.stride
        blocks = bev.reshape(*lead, h // s, s, w // s, s, c)
        # Everything from the s * s strided views, combined elementwise: on the CPU about 2x
        # faster than XLA's reductions over the two window axes (0.28 -> 0.14 ms on one core at
        # 256 x 256 x 15), and the centroids from the same views at 0.2 ms less than from
        # blocked single channels.
        views = [blocks[..., i, :, j, :] for i in range(s) for j in range(s)]
        high, total = views[0], views[0]
        for view in views[1:]:
            high, total = jnp.maximum(high, view), total + view
        occupied = [view[..., 0] > 0 for view in views]
        floor = jnp.inf
        for view, here in zip(views, occupied):
            floor = jnp.minimum(floor, jnp.where(here, view[..., Z_MIN], jnp.inf))
        raised = [here & (view[..., Z_MAX] > floor + RAISED_M)
                  for view, here in zip(views, occupied)]
        centroids = [_centroid(masks, s) for masks in (occupied, raised)]
        return high, total / (s * s), jnp.concatenate(centroids, axis=-1)

    def pool(self, bev: jax.Array) -> jax.Array:
        """Pool float32[..., H, W, C] to [..., H/s, W/s, 2C + 4]: max, mean, centroids."""
        return jnp.concatenate(self.pool_parts(bev), axis=-1)

    def from_pooled(self, pooled: jax.Array) -> dict[str, jax.Array]:
        """Return the outputs, each float32[N, H/s, W/s, n], of pooled features [..., 2C + 4]."""
        c = self.mean.shape[0]
        return self._from_parts(pooled[..., :c], pooled[..., c:2 * c], pooled[..., 2 * c:])

    def _from_parts(self, high: jax.Array, average: jax.Array,
                    centroid: jax.Array) -> dict[str, jax.Array]:
        """Return the outputs of the pooled max, mean [N, h, w, C] and centroids [N, h, w, 4]."""
        scale = 1.0 / self.std
        # The parts go through conv1 apart: no concatenated input (XLA's CPU backend
        # interleaves channels element by element). The centroids' four channels are a
        # broadcast multiply-add, fused with the ReLU: a convolution of its own cost more.
        c, weight = self.mean.shape[0], self.conv1.weight
        x = Conv(weight[:, :, :2 * c], self.conv1.bias)(
            (high - self.mean) * scale, (average - self.mean) * scale)
        for k in range(CENTROID):
            x = x + centroid[..., k:k + 1] * weight[0, 0, 2 * c + k]
        x = jax.nn.relu(x)
        for block in self.blocks:
            x = block(x)
        y = self.out(x)
        outputs, start = {}, 0
        for name, n in OUTPUTS:
            outputs[name] = y[..., start:start + n]
            start += n
        return outputs

    def __call__(self, bev: jax.Array) -> dict[str, jax.Array]:
        """Return the head contract's dict for one BEV float32[H, W, C]."""
        # Pooled unbatched: XLA's CPU code for the batched reduction took twice as long.
        outputs = self._from_parts(*(part[None] for part in self.pool_parts(bev)))
        return {name: value[0] for name, value in outputs.items()}


def mirrored(pooled: np.ndarray, channels: int, flip_x: bool, flip_y: bool) -> np.ndarray:
    """
    Return pooled features [h, w, 2C + 4] (:meth:`CenterPointHead.pool`) mirrored.

    ``flip_x`` reverses the rows, ``flip_y`` the columns: the pooled features of the mirrored
    BEV. A block's centroids change sign along a mirrored axis (about the block's centre).
    """
    out = pooled[::-1] if flip_x else pooled
    out = out[:, ::-1] if flip_y else out
    if not (flip_x or flip_y):
        return out
    factors = np.ones(2 * channels + CENTROID, np.float32)
    signs = (-1.0 if flip_x else 1.0, -1.0 if flip_y else 1.0)
    factors[2 * channels:] = signs * (CENTROID // 2)
    return out * factors


def check_input(head_input: HeadInput) -> None:
    """
    Raise ConfigError unless the grid is a multiple of the stride and the BEV holds z_max, z_min.

    The pooling reads ``z_max`` and ``z_min`` at their places in the LiDAR block, which leads
    every layout the node makes.
    """
    if head_input.height % STRIDE or head_input.width % STRIDE:
        raise ConfigError(
            f'head.module: the CenterPoint head needs a grid of rows and columns divisible by '
            f'{STRIDE}, got {head_input.height} x {head_input.width} (set grid.x_min, x_max, '
            'y_min, y_max and resolution so)')
    if head_input.channels <= max(Z_MAX, Z_MIN):
        raise ConfigError(
            f'head.module: the CenterPoint head needs the LiDAR channels {LIDAR_CHANNELS} first '
            f'in the BEV, got {head_input.channels} channels')


def validate(params: CenterPointHead) -> None:
    """
    Raise ValueError unless a checkpoint's values are ones the network can run with.

    ``std`` scales the input by ``1 / std``: every channel's must be positive and finite,
    with a finite reciprocal in float32, or the outputs turn infinite or NaN and the head
    finds nothing (a std of 0 took a demo frame's 14 boxes to 0, silently). The other arrays
    (``mean``, the convolutions' weights and biases) may hold any finite value, and the loader
    has checked that they do.
    """
    std = np.asarray(params.std)
    with np.errstate(divide='ignore', over='ignore'):
        scale = np.float32(1.0) / std.astype(np.float32)
    bad = np.flatnonzero(~((std > 0) & np.isfinite(std) & np.isfinite(scale)))
    if bad.size:
        raise ValueError(f'std must be positive in every BEV channel (the input is scaled by '
                         f'1 / std): {bad.size} of {std.size} channels are not, channel '
                         f'{int(bad[0])}: {float(std[bad[0]])}')


def checkpoint_channels(params: CenterPointHead) -> int:
    """Return the BEV channels a checkpoint was trained for: the length of its ``mean``."""
    return int(np.shape(params.mean)[0])


def recorded(path: Path) -> tuple[tuple[str, ...], str] | None:
    """
    Return (BEV channels, image encoder) a shipped checkpoint records; None if unreadable.

    The encoder is '' where none is recorded (trained on feature maps or on a weight-free
    encoder's features, which they equal).
    """
    try:
        with np.load(path, allow_pickle=False) as arrays:
            names = arrays[CHANNELS_KEY]
            encoder = str(arrays[ENCODER_KEY]) if ENCODER_KEY in arrays.files else ''
    except Exception:               # absent (not trained yet) or damaged: not a candidate
        return None
    return (tuple(str(name) for name in names), encoder) if names.ndim == 1 else None


def shipped_weights(head_input: HeadInput) -> Path:
    """
    Return the shipped checkpoint for the BEV of ``head_input``: the one trained for it.

    The checkpoint whose recorded channels are the BEV's names (where the pipeline names them,
    else its channel count) and whose recorded encoder is ``head_input.encoder``, else one
    with those channels that records no encoder: :data:`WEIGHTS`, :data:`LIDAR_WEIGHTS` or
    :data:`CNN_WEIGHTS`. When none is, one of the BEV's channel count if there is one (its
    channels then differ by name), else :data:`WEIGHTS`: the loader refuses it in one line
    naming head.module, the layout it was trained for and the BEV's.
    """
    names = head_input.channel_names
    named = len(names) == head_input.channels
    layouts = [(path, recorded(path)) for path in (WEIGHTS, LIDAR_WEIGHTS, CNN_WEIGHTS)]
    layouts = [(path, *record) for path, record in layouts if record is not None]
    fitting = [(path, encoder) for path, record, encoder in layouts
               if ((record == names) if named else len(record) == head_input.channels)]
    for wanted in (head_input.encoder, ''):
        match = next((path for path, encoder in fitting if encoder == wanted), None)
        if match is not None:
            return match
    return next((path for path, record, _ in layouts if len(record) == head_input.channels),
                WEIGHTS)


def object_head(head_input: HeadInput) -> HeadSpec:
    """
    Return the reference object head for a BEV of ``head_input``'s shape.

    Args
    ----
    head_input: the BEV's rows, columns, channels and cell size.

    Returns
    -------
    HeadSpec: ``apply(params, bev)`` -> the CenterPoint outputs at stride 4, the untrained
    parameters (the checkpoint layout), the four :data:`CLASSES` with their circle NMS radii
    (:data:`NMS_RADIUS_M`), the shipped weights that fit the BEV
    (:func:`shipped_weights`: the 15 channels of the shipped configuration, or its 7 with
    ``cameras.names: []``), :func:`validate`, which refuses a checkpoint's non-positive
    ``std``, and :func:`checkpoint_channels`, and the 0-255 intensity scale it was trained on
    (:data:`INTENSITY_TOP`). The shipped weights record the BEV channels they were trained
    for, so another layout is refused by its channels.

    Raises
    ------
    ConfigError: rows or columns not divisible by 4.

    """
    check_input(head_input)
    params, static = eqx.partition(CenterPointHead.create(head_input.channels), eqx.is_array)

    def apply(params, bev):
        return eqx.combine(params, static)(bev)

    return HeadSpec(apply, params, STRIDE, CLASSES, shipped_weights(head_input), validate,
                    checkpoint_channels, NMS_RADIUS_M, CENTRE_VOTES, INTENSITY_TOP)
