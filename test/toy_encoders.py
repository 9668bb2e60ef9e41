"""A small image encoder plug-in with weights for the tests: simple to recompute in NumPy."""

import jax
import jax.numpy as jnp
from jax_perception_node.detection.encoder import EncoderSpec
import numpy as np


def gained(inp):
    """Mean RGB of each stride x stride block (0..255) times a per-channel gain, plus a bias."""
    stride = inp.stride

    def apply(params, image):
        rows, cols = image.shape[0] // stride, image.shape[1] // stride
        pooled = image.astype(jnp.float32).reshape(rows, stride, cols, stride, 3).mean((1, 3))
        return pooled * params['gain'] + params['bias']
    if inp.channels != 3:
        raise ValueError('the toy encoder gives 3 channels')
    return EncoderSpec(apply, {'gain': np.ones(3, np.float32), 'bias': np.zeros(3, np.float32)})


def gained_ref(image: np.ndarray, stride: int, gain, bias) -> np.ndarray:
    """NumPy: ``gained`` of one uint8 image."""
    h, w = image.shape[0] // stride, image.shape[1] // stride
    pooled = image.astype(np.float64).reshape(h, stride, w, stride, 3).mean(axis=(1, 3))
    return pooled * np.asarray(gain) + np.asarray(bias)


def standardised(inp):
    """Standardise block means per image, ``(x - mean) / std``: NaN on a uniform image."""
    stride = inp.stride

    def apply(params, image):
        rows, cols = image.shape[0] // stride, image.shape[1] // stride
        pooled = image.astype(jnp.float32).reshape(rows, stride, cols, stride, 3).mean((1, 3))
        return (pooled - pooled.mean()) / pooled.std()
    return EncoderSpec(apply, ())


def standardised_ref(image: np.ndarray, stride: int) -> np.ndarray:
    """NumPy: ``standardised`` of one uint8 image, with 0 where it has no finite value."""
    h, w = image.shape[0] // stride, image.shape[1] // stride
    pooled = image.astype(np.float64).reshape(h, stride, w, stride, 3).mean(axis=(1, 3))
    with np.errstate(invalid='ignore', divide='ignore'):
        out = (pooled - pooled.mean()) / pooled.std()
    return np.where(np.isfinite(out), out, 0.0)


def host_backbone(inp):
    """Run a backbone on the host (``pure_callback``, as an ONNX or TensorRT call): no vmap."""
    shape = jax.ShapeDtypeStruct((inp.map_height, inp.map_width, inp.channels), jnp.float32)

    def apply(params, image):
        return jax.pure_callback(
            lambda im: np.zeros(shape.shape, np.float32), shape, image)
    return EncoderSpec(apply, ())


def argparse_factory(inp):
    """Build nothing: read options with argparse, which exits on the node's own argv."""
    import argparse
    argparse.ArgumentParser().parse_args(['--ros-args'])


def exiting_apply(inp):
    """Build an encoder whose apply exits the process as it is traced."""
    def apply(params, image):
        raise SystemExit(3)
    return EncoderSpec(apply, ())
