"""Decode a head's CenterPoint outputs into box rows on the device (pure JAX)."""

import jax
import jax.numpy as jnp
import numpy as np

from .kernels import CALIBRATION_SIZE, GRID_SLICE


# A neighbour's centre vote further than this (output cells) from the peak cell's own is
# another object's and is left out of the peak's mean. Measured on held-out seed 7 (reference
# head, cameras absent): a gate of 0.5 cells lost the whole gain of the votes (mAP 0.439, as
# the peak cell alone), 1.0 most of it (0.452); 1.5 kept it (0.469, 0.468 without a gate).
VOTE_GATE = 1.5


def decode_boxes(outputs: dict, grid: jax.Array, *, stride: int, max_objects: int,
                 nms_radius_m: tuple[float, ...] = (), centre_votes: int = 0) -> jax.Array:
    """
    Top-K heatmap peaks as boxes, float32[K, 9] in ``boxes.BOX_COLUMNS`` order.

    A peak is a cell whose score of a class equals the maximum of that class's 3 x 3
    neighbourhood (CenterPoint's max-pool suppression, per class: a pedestrian beside a car
    keeps its own peak); the K highest peaks over all cells and classes are kept. With
    ``nms_radius_m`` (one radius per class, m), a circle non-maximum suppression follows, as
    CenterPoint's and Autoware's centerpoint do: in descending score, a box whose BEV centre
    lies within its class's radius of a kept box of the same class is dropped. Dropped rows
    and rows past the last peak have score 0 (never above a positive threshold); the rows are
    sorted by score. Only these K rows leave the device.

    With ``centre_votes`` n > 0 (a head whose cells within n output cells of a centre regress
    their offsets to it, as the reference head is taught), a peak's BEV centre is the mean of
    the centres its (2n + 1)^2 cells vote for, each weighted by its score of the peak's class
    (votes further than :data:`VOTE_GATE` cells from the peak cell's own left out): nine
    estimates where the peak cell alone gives one. Height, size and yaw stay the peak cell's.

    Args
    ----
    outputs: the head's dict (``head.HEAD_OUTPUTS``), each float32[h, w, n].
    grid: float32[5] (x_min, y_min, z_min, z_max, resolution), traced.
    stride: BEV cells per output cell; max_objects: K; nms_radius_m: () for no circle
    suppression, else one radius per class; centre_votes: n above, 0 for the peak cell's
    offset alone (all static).

    Returns
    -------
    float32[K, 9]: x, y, z (m, grid frame), length, width, height (m), yaw (rad),
    score (sigmoid of the logit), class index.

    """
    heat = jax.nn.sigmoid(outputs['heatmap'])
    rows, cols, classes = heat.shape
    peaks = jnp.where(heat == _neighbourhood_max(heat), heat, 0.0).reshape(-1)
    # Over cells x classes: a cell may hold two objects of other classes (a cyclist beside a
    # car); keeping only a cell's best class cost 0.01 mAP on seed 7 for 0.02 ms.
    k = min(max_objects, rows * cols * classes)
    top, index = jax.lax.top_k(peaks, k)
    label = index % classes
    index = index // classes
    i = (index // cols).astype(jnp.float32)
    j = (index % cols).astype(jnp.float32)

    def at(name):
        out = outputs[name]
        return out.reshape(rows * cols, out.shape[-1])[index]

    size, yaw = jnp.exp(at('size')), at('yaw')
    if centre_votes:
        centre = _voted_centres(heat, outputs['offset'], index, label, centre_votes)
    else:
        centre = jnp.stack([i, j], axis=1) + at('offset')
    cell = stride * grid[4]
    x = grid[0] + centre[:, 0] * cell
    y = grid[1] + centre[:, 1] * cell
    if nms_radius_m:
        top = _circle_nms(x, y, top, label, jnp.asarray(nms_radius_m, jnp.float32))
        top, order = jax.lax.top_k(top, k)
        x, y, label = x[order], y[order], label[order]
        size, yaw = size[order], yaw[order]
        index = index[order]
    boxes = jnp.stack([
        x, y, at('z')[:, 0], size[:, 0], size[:, 1], size[:, 2],
        jnp.arctan2(yaw[:, 0], yaw[:, 1]), top, label.astype(jnp.float32)], axis=1)
    if k < max_objects:
        boxes = jnp.concatenate([boxes, jnp.zeros((max_objects - k, 9), jnp.float32)])
    return boxes


def _voted_centres(heat: jax.Array, offset: jax.Array, index: jax.Array, label: jax.Array,
                   reach: int) -> jax.Array:
    """
    Each peak's score-weighted mean centre vote, float32[K, 2] (output cells).

    ``index``: int32[K] the peaks' cells (row-major), ``label``: int32[K] their classes. Cell
    (a, b) votes for the centre (a, b) + offset[a, b]; a peak's mean is over the cells within
    ``reach`` of it (outside the grid: weight 0) whose vote lies within :data:`VOTE_GATE` of
    the peak cell's own, weighted by their score of the peak's class. The peak's own vote
    always counts with a positive weight (a sigmoid), so the mean is defined. Gathered at the
    K peaks only: over the whole grid the same means cost 0.25 ms a frame on the CPU.
    """
    rows, cols, _ = heat.shape
    pad = ((reach, reach), (reach, reach), (0, 0))
    heat, offset = jnp.pad(heat, pad), jnp.pad(offset, pad)
    steps = np.arange(-reach, reach + 1)
    # [K, n] rows and columns of the n = (2 reach + 1)^2 cells about each peak: one gather
    # each for the offsets and the scores (a gather per cell cost 0.08 ms more on the CPU).
    i = (index // cols)[:, None] + np.repeat(steps, steps.size)
    j = (index % cols)[:, None] + np.tile(steps, steps.size)
    votes = jnp.stack([i, j], axis=-1).astype(jnp.float32) + offset[i + reach, j + reach]
    weight = heat[i + reach, j + reach, label[:, None]]
    own = votes[:, steps.size ** 2 // 2, None]
    near = jnp.sum((votes - own) ** 2, axis=-1) <= VOTE_GATE ** 2
    weight = jnp.where(near, weight, 0.0)
    return jnp.sum(weight[..., None] * votes, axis=1) / jnp.sum(weight, axis=1)[:, None]


def _circle_nms(x: jax.Array, y: jax.Array, score: jax.Array, label: jax.Array,
                radius: jax.Array) -> jax.Array:
    """
    Greedy circle suppression of K boxes sorted by score: their scores, 0 where dropped.

    Box k is dropped when a kept box before it (a higher score) of its class lies within its
    class's radius: exactly CenterPoint's greedy ``circle_nms``. Found by whole-vector updates
    of K x K comparisons, at most :func:`nms_updates` of them, and when the answer is still
    changing then, the greedy pass from where they left it.
    """
    k = x.shape[0]
    reach = radius[label]
    near = ((x[:, None] - x[None, :]) ** 2 + (y[:, None] - y[None, :]) ** 2
            <= (reach * reach)[:, None])
    earlier = jnp.arange(k)[:, None] > jnp.arange(k)[None, :]
    suppressors = near & earlier & (label[:, None] == label[None, :])
    valid = score > 0

    # keep[k] = valid[k] and no kept box before k suppresses it: a triangular system whose
    # one solution is the greedy pass. Updating every box at once from the last estimate
    # leaves the first t boxes final after t updates: when an update changes nothing, it is
    # the answer. At K = 64 two to four updates reach it in a street scene (the greedy pass
    # alone: 64 sequential steps, 0.06 ms on the CPU, most of it the loop's own overhead); a
    # long chain of suppressions needs as many updates as it is long, so they are capped.
    def update(state):
        keep, _, done = state
        new = valid & ~jnp.any(suppressors & keep[None, :], axis=1)
        return new, jnp.any(new != keep), done + 1

    def visit(i, keep):
        return keep.at[i].set(valid[i] & ~jnp.any(suppressors[i] & keep))

    if not nms_updates(k):
        return jnp.where(jax.lax.fori_loop(0, k, visit, valid, unroll=8), score, 0.0)
    keep, changing, done = jax.lax.while_loop(
        lambda state: state[1] & (state[2] < nms_updates(k)), update,
        (valid, jnp.bool_(True), jnp.int32(0)))
    # The boxes before ``done`` are final; the greedy pass takes the others in turn.
    keep = jax.lax.fori_loop(done, jnp.where(changing, k, done), visit, keep)
    return jnp.where(keep, score, 0.0)


def nms_updates(k: int) -> int:
    """
    Return the most whole-vector updates the circle NMS of ``k`` boxes makes (0: greedy only).

    Eight at K = 64, fewer as the K x K comparisons of an update grow: none from K = 182 on,
    where one update costs what many greedy steps do (at K = 1024 an update took 0.15 ms on
    the CPU, the whole greedy pass 1.7 ms, and a frame needed 56 updates).
    """
    return 8 * 64 * 64 // (k * k)


def _neighbourhood_max(heat: jax.Array) -> jax.Array:
    """
    Return each cell's 3 x 3 neighbourhood maximum per class, float32[h, w, n] (outside: -inf).

    Nine shifted views of the padded map, which XLA fuses into one loop: on the CPU a third
    of ``reduce_window``'s time (0.036 against 0.11 ms at 64 x 64 x 4), the same values.
    """
    rows, cols, _ = heat.shape
    padded = jnp.pad(heat, ((1, 1), (1, 1), (0, 0)), constant_values=-jnp.inf)
    high = heat
    for i in range(3):
        for j in range(3):
            if (i, j) != (1, 1):
                high = jnp.maximum(high, padded[i:i + rows, j:j + cols])
    return high


def head_function(spec, max_objects: int, params, bev_shape: tuple[int, int, int],
                  output_memory: str | None, calibration_size: int = CALIBRATION_SIZE):
    """
    Build the head's executable to compile: ``f(leaves, bev, calibration) -> float32[K, 9]``.

    ``apply`` and ``decode_boxes`` in one function; ``spec`` is the head's ``head.HeadSpec``,
    ``leaves`` the parameters' leaves in ``spec.params``' tree order (:func:`param_leaves`;
    ``params`` gives their shapes), ``calibration`` the frame's float32[``calibration_size``]
    (``kernels.FrameArgs.calibration``, the grid at ``kernels.GRID_SLICE``). One executable
    for every bucket (the BEV's shape is the same), called on the frame executable's BEV
    without it leaving the device. Traced into the frame executable instead, the head changed
    how XLA's CPU backend fused the camera lift (its slot gathers materialized one by one):
    25 ms a frame instead of 3 at 131k points with 4 cameras, where the two executables take
    3 + 1 ms.

    Returns
    -------
    (jitted, argument specs, output tree) for ``ExecutableCache.get``; with ``output_memory``
    'pinned_host' the boxes are written there (on a GPU, fetched without a transfer).

    """
    tree = jax.tree.structure(spec.params)

    def head(leaves, bev, calibration):
        grid = calibration[GRID_SLICE]
        return decode_boxes(spec.apply(jax.tree.unflatten(tree, leaves), bev), grid,
                            stride=spec.stride, max_objects=max_objects,
                            nms_radius_m=spec.nms_radius_m, centre_votes=spec.centre_votes)
    device = jax.devices()[0]
    boxes = None if output_memory is None else jax.sharding.SingleDeviceSharding(
        device, memory_kind=output_memory)
    shape = jax.ShapeDtypeStruct
    specs = (tuple(shape(a.shape, a.dtype) for a in jax.tree.leaves(params)),
             shape(bev_shape, jnp.float32), shape((calibration_size,), jnp.float32))
    return jax.jit(head, out_shardings=boxes), specs, jax.tree.structure(0)


def param_leaves(params) -> tuple[jax.Array, ...]:
    """
    Return a head's parameters as :func:`head_function`'s executable takes them, on the device.

    A flat tuple of arrays: the call then skips flattening the head's own pytree (an Equinox
    module's flatten runs in Python) every frame: 0.13-0.17 ms of dispatch on the CPU before,
    0.055-0.075 after.
    """
    return tuple(jax.device_put(jax.tree.leaves(params)))
