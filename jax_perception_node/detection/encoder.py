"""
The image encoder plug-in: camera images into feature maps, loaded from ``encoder.module``.

An encoder is a pure function ``apply(params, image uint8[H_i, W_i, 3]) -> float32[H_f, W_f,
C]`` with static shapes: the image is RGB, decoded and scaled on the host to the feature map's
size times ``encoder.stride``; the output is the map the camera lift samples. The pipeline
traces it, once per camera (``jax.vmap``), into each frame's executable before the lift.
``params`` are traced arguments, so a checkpoint of the same shapes and dtypes swaps in
without a compile; the executable store's key covers the source of the encoder's package.
This module imports no ROS.
"""

from dataclasses import dataclass
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from .plugin import factory_params, import_factory, load_weights
from ..settings.parameters import ConfigError


class EncoderInput(NamedTuple):
    """What an encoder factory is told: its image in, the feature map out."""

    image_height: int    # H_i, rows of the uint8 RGB image
    image_width: int     # W_i, columns
    stride: int          # image pixels per feature-map pixel: H_i = stride H_f
    map_height: int      # H_f, the feature map's rows
    map_width: int       # W_f, its columns
    channels: int        # C, its channels (cameras.<name>.channels)


@dataclass(frozen=True)
class EncoderSpec:
    """
    What an encoder factory returns.

    ``apply(params, image uint8[H_i, W_i, 3])`` returns float32[H_f, W_f, C]. ``params`` is a
    pytree of float arrays (() for none): the initial values, whose shapes and dtypes are the
    checkpoint's layout. ``weights`` is the encoder's shipped checkpoint, used when
    ``encoder.weights`` is '' (None: the factory's ``params``). ``validate(params)``, optional,
    checks a checkpoint's values and raises ValueError saying what is wrong.
    """

    apply: Callable[[Any, jax.Array], jax.Array]
    params: Any = ()
    weights: Path | None = None
    validate: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class LoadedEncoder:
    """An encoder ready for the pipeline: its spec, checked weights, the identity of its code."""

    name: str                # 'package.module:factory'
    spec: EncoderSpec
    params: Any              # pytree of NumPy arrays
    weights_path: Path | None
    source_digest: str       # sha256 of the factory's package source: part of the store key

    def checkpoint(self, path: str) -> tuple[Path | None, Any]:
        """Return (the file, its parameters) for ``encoder.weights`` = ``path``; ConfigError."""
        target = Path(os.path.expanduser(path)) if path else self.spec.weights
        if target is None:
            return None, factory_params(self.spec.params, 'encoder.module')
        return target, load_weights(target, self.params, self.spec.validate,
                                    key='encoder.weights' if path else 'encoder.module')

    @property
    def identity(self) -> str:
        """Return what the executable store keys on: the code, not the weights' values."""
        return repr((self.name, self.source_digest))


def check_encoder_output(spec: EncoderSpec, inp: EncoderInput, name: str) -> None:
    """
    Trace ``apply`` as the frame does; ConfigError unless it gives the feature map.

    The frame maps it over the cameras (``jax.vmap``): an ``apply`` that cannot be mapped (a
    ``pure_callback`` without a ``vmap_method``) is refused here, not at the warm-up.
    """
    images = jax.ShapeDtypeStruct((1, inp.image_height, inp.image_width, 3), jnp.uint8)
    try:
        out = jax.eval_shape(jax.vmap(spec.apply, in_axes=(None, 0)), spec.params, images)
        out = jax.ShapeDtypeStruct(out.shape[1:], out.dtype) if hasattr(out, 'shape') else out
    except (Exception, SystemExit) as exc:   # the plug-in's own error (argparse's exit)
        raise ConfigError(f'encoder.module: {name} cannot run on a {inp.image_height} x '
                          f'{inp.image_width} RGB image: {type(exc).__name__}: {exc}') from None
    want = (inp.map_height, inp.map_width, inp.channels)
    if getattr(out, 'shape', None) != want or out.dtype != jnp.float32:
        got = (f'{out.dtype}{list(out.shape)}' if hasattr(out, 'shape')
               else type(out).__name__)
        raise ConfigError(f'encoder.module: {name} turns a {inp.image_height} x '
                          f'{inp.image_width} image into {got}, the cameras need float32'
                          f'{list(want)} (cameras.<name>.height, width, channels)')


def load_encoder(name: str, weights: str, inp: EncoderInput) -> LoadedEncoder | None:
    """
    Import, build and check the encoder ``name`` and load its weights; None for ''.

    Raises
    ------
    ConfigError: naming encoder.module (import, factory, output shape) or encoder.weights (a
    file that cannot be read or does not fit).

    """
    if not name:
        return None
    factory, digest_of = import_factory(name, 'encoder.module')
    try:
        spec = factory(inp)
    except ConfigError:             # the factory's own line, naming the parameter to set
        raise
    except (Exception, SystemExit) as exc:   # the plug-in's own error (argparse's exit)
        raise ConfigError(f'encoder.module: {name} failed: {type(exc).__name__}: '
                          f'{exc}') from None
    if not isinstance(spec, EncoderSpec):
        raise ConfigError(f'encoder.module: {name} returned {type(spec).__name__}, not an '
                          'EncoderSpec')
    check_encoder_output(spec, inp, name)
    digest = digest_of()        # after the trace: what it imported is loaded by now
    loaded = LoadedEncoder(name, spec, factory_params(spec.params, 'encoder.module'), None,
                           digest)
    path, params = loaded.checkpoint(weights)
    return LoadedEncoder(name, spec, params, path, digest)
