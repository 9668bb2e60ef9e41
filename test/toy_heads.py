"""Small head plug-ins for the tests: outputs simple enough to recompute in NumPy."""

from dataclasses import replace

import jax.numpy as jnp
from jax_perception_node.detection.head import HeadSpec
import numpy as np

STRIDE = 2
SIZE = (4.5, 1.8, 1.5)


def toy_outputs(params: dict, bev):
    """
    Compute the toy head's outputs from float32[H, W, C] (NumPy or JAX, same arithmetic).

    heatmap logit = scale * (occupied cells in the stride x stride block) + bias;
    offset = the block's occupied-cell share on both axes. z, size and yaw differ from cell to
    cell (by output row i and column j), so a decoding that reads them from another cell than
    the peak's gives other boxes: z = params z + 0.1 i - 0.05 j; size = SIZE + (0.1 i, 0.05 j,
    0.02 (i + j)); yaw = 0.3 + 0.2 i - 0.15 j.
    """
    xp = jnp if not isinstance(bev, np.ndarray) else np
    rows, cols = bev.shape[0] // STRIDE, bev.shape[1] // STRIDE
    block = bev[:, :, 0].reshape(rows, STRIDE, cols, STRIDE).sum(axis=(1, 3))
    i = xp.arange(rows, dtype=xp.float32)[:, None, None] * xp.ones((1, cols, 1), xp.float32)
    j = xp.arange(cols, dtype=xp.float32)[None, :, None] * xp.ones((rows, 1, 1), xp.float32)
    share = block[..., None] / (STRIDE * STRIDE)
    size = xp.asarray(SIZE, xp.float32) + xp.concatenate([0.1 * i, 0.05 * j, 0.02 * (i + j)],
                                                         axis=-1)
    yaw = 0.3 + 0.2 * i - 0.15 * j
    return {
        'heatmap': (params['scale'] * block + params['bias'])[..., None].astype(xp.float32),
        'offset': xp.concatenate([share, 1.0 - share], axis=-1).astype(xp.float32),
        'z': (params['z'] + 0.1 * i - 0.05 * j).astype(xp.float32),
        'size': xp.log(size).astype(xp.float32),
        'yaw': xp.concatenate([xp.sin(yaw), xp.cos(yaw)], axis=-1).astype(xp.float32),
    }


def occupancy_head(head_input):
    """Build a one-class head over the occupancy channel; no shipped weights."""
    params = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(0.75)}
    return HeadSpec(toy_outputs, jax_params(params), STRIDE, ('car',))


def intensity_scale_head(head_input):
    """Build the occupancy head declaring the 0-255 intensity scale (HeadSpec.intensity_top)."""
    return replace(occupancy_head(head_input), intensity_top=255.0)


def camera_channel_head(head_input):
    """Build the occupancy head on the last camera channel (the one before the coverage)."""
    params = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(0.75)}
    channel = head_input.channels - 2

    def apply(params, bev):
        return toy_outputs(params, bev[:, :, channel:channel + 1])
    return HeadSpec(apply, jax_params(params), STRIDE, ('car',))


def size_gain_head(head_input):
    """
    Build the occupancy head with its log sizes shifted by a parameter, 0 by default.

    A checkpoint with ``log_size_gain`` 100 is finite, but its boxes decode to exp(100) m:
    inf in float32, which the pipeline must drop and count (``nonfinite_objects``). It declares
    the 0-255 intensity scale (``HeadSpec.intensity_top``), as the reference head does.
    """
    def apply(params, bev):
        out = toy_outputs(params, bev)
        out['size'] = out['size'] + params['log_size_gain']
        return out
    params = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(0.75),
              'log_size_gain': np.float32(0.0)}
    return HeadSpec(apply, jax_params(params), STRIDE, ('car',), intensity_top=255.0)


def two_class_head(head_input):
    """Build the occupancy head with a second class whose logit is the negated first."""
    def apply(params, bev):
        out = toy_outputs(params, bev)
        out['heatmap'] = jnp.concatenate([out['heatmap'], -out['heatmap']], axis=-1)
        return out
    params = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(0.75)}
    return HeadSpec(apply, jax_params(params), STRIDE, ('car', 'pedestrian'))


NMS_RADIUS_M = (3.0,)


def nms_head(head_input):
    """Build the occupancy head with a circle NMS of 3 m (six 0.5 m cells)."""
    params = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(0.75)}
    return HeadSpec(toy_outputs, jax_params(params), STRIDE, ('car',),
                    nms_radius_m=NMS_RADIUS_M)


def voting_outputs(params: dict, bev):
    """
    Compute the toy outputs with offsets that vote for nearby centres.

    The offset is a block's occupied-cell share times 1.5 minus 0.25 along rows, and 1 minus
    that along columns: votes from -0.25 to 1.25 cells, into the neighbours.
    """
    out = toy_outputs(params, bev)
    out['offset'] = out['offset'][..., :1] * 1.5 - 0.25
    out['offset'] = (jnp if not isinstance(bev, np.ndarray) else np).concatenate(
        [out['offset'], 1.0 - out['offset']], axis=-1)
    return out


def voting_head(head_input):
    """Build the NMS head whose centre is the mean vote of the 3 x 3 cells about a peak."""
    params = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(0.75)}
    return HeadSpec(voting_outputs, jax_params(params), STRIDE, ('car',),
                    nms_radius_m=NMS_RADIUS_M, centre_votes=1)


def wrong_keys_head(head_input):
    """Build a head that returns the wrong outputs."""
    return HeadSpec(lambda p, bev: {'heatmap': bev[::2, ::2, :1]}, {}, STRIDE, ('car',))


def jax_params(params: dict) -> dict:
    """Return the parameters as float32 arrays of shape (): the checkpoint layout."""
    return {k: np.asarray(v, np.float32) for k, v in params.items()}


def string_top_head(head_input):
    """Build the occupancy head with an intensity_top that is no number."""
    return replace(occupancy_head(head_input), intensity_top='255')


def infinite_top_head(head_input):
    """Build the occupancy head with an infinite intensity_top."""
    return replace(occupancy_head(head_input), intensity_top=float('inf'))


def negative_votes_head(head_input):
    """Build the voting head with a negative centre_votes."""
    return replace(voting_head(head_input), centre_votes=-1)


def many_votes_head(head_input):
    """Build the occupancy head asking for more centre votes than the decoding gathers."""
    return replace(occupancy_head(head_input), centre_votes=9)


def numpy_numbers_head(head_input):
    """Build the occupancy head with its stride, votes and intensity top as NumPy scalars."""
    return replace(occupancy_head(head_input), stride=np.int64(occupancy_head(
        head_input).stride), centre_votes=np.int32(1), intensity_top=np.float32(255.0))


def float_stride_head(head_input):
    """Build the occupancy head with a stride that is no integer."""
    return replace(occupancy_head(head_input), stride=2.0)


def not_a_spec_head(head_input):
    """Return something else than a HeadSpec."""
    return {'apply': None}


def positive_scale(params: dict) -> None:
    """Raise ValueError unless the heatmap's scale is positive (validated_head's hook)."""
    if not params['scale'] > 0:
        raise ValueError(f'scale must be > 0, got {float(params["scale"])}')


def validated_head(head_input):
    """Build the occupancy head with a validate hook: a checkpoint's scale must be > 0."""
    return replace(occupancy_head(head_input), validate=positive_scale)


def argparse_factory_head(head_input):
    """Build nothing: read options with argparse, which exits on the node's own argv."""
    import argparse
    argparse.ArgumentParser().parse_args(['--ros-args'])


def exiting_apply_head(head_input):
    """Build a head whose apply exits the process as it is traced."""
    def apply(params, bev):
        raise SystemExit(3)
    return HeadSpec(apply, {}, STRIDE, ('car',))
