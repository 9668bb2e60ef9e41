"""
The head plug-in: a learned head on the fused BEV, loaded from ``head.module``.

A head is a pure function ``apply(params, bev) -> dict`` of CenterPoint-style outputs at a
fixed stride (:data:`HEAD_OUTPUTS`). The pipeline compiles it, with the box decoding of
``box_decode.py``, into an executable of its own that runs on each frame's BEV on the device;
``params`` are traced arguments, so a checkpoint of the same shapes and dtypes swaps in without
a compile. The executable store's key covers the source of the head's package and the
parameters' shapes (docs/design.md, "Head plug-in").
This module imports no ROS.
"""

from dataclasses import dataclass
import hashlib
import importlib
import os
from pathlib import Path
import re
import secrets
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .boxes import BOX_COLUMNS  # noqa: F401 (the decoded rows' columns, here for heads)
from ..settings.npz_file import read_npz
from ..settings.parameters import ConfigError


# What ``apply`` returns: name -> channels (None: one per class), at the head's stride.
HEAD_OUTPUTS = {'heatmap': None, 'offset': 2, 'z': 1, 'size': 3, 'yaw': 2}

_MODULE_RE = re.compile(r'^[A-Za-z_][\w.]*:[A-Za-z_]\w*$')


class HeadInput(NamedTuple):
    """What a head factory is told about its input: the fused BEV float32[H, W, C]."""

    height: int          # H, rows (x index)
    width: int           # W, columns (y index)
    channels: int        # C, the pipeline's output channels
    resolution: float    # m per cell


@dataclass(frozen=True)
class HeadSpec:
    """
    What a head factory returns.

    ``apply(params, bev float32[H, W, C])`` returns :data:`HEAD_OUTPUTS`, each
    float32[H / stride, W / stride, n]: ``heatmap`` (one logit per class), ``offset`` (the
    centre within the output cell along rows and columns, in output cells from its lower
    corner), ``z`` (centre z, m), ``size`` (log length, width, height, m), ``yaw`` (sin, cos).
    ``params`` is a pytree of float arrays: the initial values, whose shapes and dtypes are the
    checkpoint's layout. ``weights`` is the head's shipped checkpoint, used when
    ``head.weights`` is ''. ``validate(params)``, optional, checks the values of a checkpoint
    already of the right names, shapes and dtypes and finite (a pytree like ``params`` of NumPy
    arrays) and raises ValueError saying what is wrong (a normalization std of 0, say): every
    checkpoint loaded, at start-up or swapped in live, goes through it, and its message becomes
    ``ConfigError('head.weights: <file>: <message>')``.
    """

    apply: Callable[[Any, jax.Array], dict]
    params: Any
    stride: int
    classes: tuple[str, ...]
    weights: Path | None = None
    validate: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class LoadedHead:
    """A head ready for the pipeline: its spec, checked weights and the identity of its code."""

    name: str                # 'package.module:factory'
    spec: HeadSpec
    params: Any              # pytree of NumPy arrays, the checkpoint's values
    weights_path: Path | None
    source_digest: str       # sha256 of the factory's package source: part of the store key

    def checkpoint(self, path: str) -> tuple[Path | None, Any]:
        """
        Return (the file, its parameters) for ``head.weights`` = ``path``; ConfigError if bad.

        '' takes the shipped weights (a head that ships none: its factory's parameters).
        """
        target = Path(os.path.expanduser(path)) if path else self.spec.weights
        if target is None:
            return None, jax.tree.map(np.asarray, self.spec.params)
        return target, load_weights(target, self.params, self.spec.validate)

    @property
    def identity(self) -> str:
        """Return what the executable store keys on: code, stride, classes (not values)."""
        return repr((self.name, self.source_digest, self.spec.stride, self.spec.classes))


def leaf_names(tree) -> list[str]:
    """Return the checkpoint key of every leaf of ``tree``: ``jax.tree_util.keystr``."""
    return [jax.tree_util.keystr(path) for path, _ in
            jax.tree_util.tree_flatten_with_path(tree)[0]]


def save_weights(path: str | os.PathLike, params) -> None:
    """Write ``params`` as an .npz, one array per leaf, keyed by its path in the pytree."""
    leaves = jax.tree_util.tree_leaves(params)
    arrays = dict(zip(leaf_names(params), (np.asarray(leaf) for leaf in leaves)))
    with open(path, 'wb') as f:
        np.savez(f, **arrays)


def load_weights(path: str | os.PathLike, template,
                 validate: Callable[[Any], None] | None = None):
    """
    Read a checkpoint shaped like ``template`` (its leaves' shapes and dtypes).

    Loaded with ``allow_pickle=False``, each array inflating to at most its leaf's size (and an
    .npy header): a zip bomb is refused unread. Raises ConfigError('head.weights: ...') naming
    the file and the first missing, extra, too large or differently shaped array, or one with
    non-finite values; then ``validate`` (``HeadSpec.validate``), if any, checks the values and
    its ValueError becomes ConfigError('head.weights: <file>: <its message>').
    """
    names = leaf_names(template)
    leaves, treedef = jax.tree_util.tree_flatten(template)
    arrays = read_npz(path, 'head.weights',
                      {name: np.asarray(leaf).nbytes for name, leaf in zip(names, leaves)})
    values = []
    for name, leaf in zip(names, leaves):
        if name not in arrays:
            raise ConfigError(f'head.weights: {path} lacks {name}')
        value, want = arrays[name], np.asarray(leaf)
        if value.shape != want.shape or value.dtype != want.dtype:
            raise ConfigError(f'head.weights: {path} {name} is {value.dtype}{list(value.shape)}, '
                              f'the head needs {want.dtype}{list(want.shape)}')
        if not np.all(np.isfinite(value)):
            raise ConfigError(f'head.weights: {path} {name} has non-finite values')
        values.append(value)
    params = jax.tree_util.tree_unflatten(treedef, values)
    if validate is not None:
        try:
            validate(params)
        except ValueError as exc:
            raise ConfigError(f'head.weights: {path}: {exc}') from None
        except Exception as exc:    # the plug-in's own error, named as such
            raise ConfigError(f'head.weights: {path}: the head plug-in failed to validate it: '
                              f'{type(exc).__name__}: {exc}') from None
    return params


def _factory(name: str):
    """Import ``package.module:factory``; ConfigError('head.module: ...') on any failure."""
    if not _MODULE_RE.match(name):
        raise ConfigError(f"head.module: expected 'package.module:factory', got {name!r}")
    module_name, attr = name.split(':')
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:        # a plug-in's import may fail in any way: report, not crash
        raise ConfigError(f'head.module: cannot import {module_name}: '
                          f'{type(exc).__name__}: {exc}') from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f'head.module: {module_name} has no callable {attr}')
    return factory, source_digest(module)


def source_digest(module) -> str:
    """
    Return the sha256 of the source of ``module``'s top-level package (every .py, by path).

    A head's network may live in other modules of its package than the factory's. A module
    without a source file gets a digest of its own each time (its executable is never reused).
    """
    path = getattr(module, '__file__', None)
    if not path:
        return secrets.token_hex(32)
    root = Path(path).resolve().parent
    for _ in module.__name__.split('.')[1:]:
        root = root.parent
    files = sorted(root.rglob('*.py')) if '.' in module.__name__ else [Path(path).resolve()]
    digest = hashlib.sha256()
    for source in files:
        digest.update(str(source.relative_to(root)).encode() + b'\0' + source.read_bytes())
    return digest.hexdigest()


def check_outputs(spec: HeadSpec, bev: HeadInput, name: str) -> dict:
    """Trace ``apply`` on the BEV's shape; return its output shapes or raise ConfigError."""
    if bev.height % spec.stride or bev.width % spec.stride:
        raise ConfigError(f'head.module: {name} has stride {spec.stride}, which does not divide '
                          f'the grid ({bev.height} x {bev.width} cells)')
    try:
        shapes = jax.eval_shape(spec.apply, spec.params, jax.ShapeDtypeStruct(
            (bev.height, bev.width, bev.channels), jnp.float32))
    except Exception as exc:        # the plug-in's own error, named as such
        raise ConfigError(f'head.module: {name} cannot run on a {bev.height} x {bev.width} x '
                          f'{bev.channels} BEV: {type(exc).__name__}: {exc}') from None
    if not isinstance(shapes, dict) or set(shapes) != set(HEAD_OUTPUTS):
        got = sorted(shapes) if isinstance(shapes, dict) else type(shapes).__name__
        raise ConfigError(f'head.module: {name} must return {sorted(HEAD_OUTPUTS)}, got {got}')
    rows, cols = bev.height // spec.stride, bev.width // spec.stride
    for key, channels in HEAD_OUTPUTS.items():
        want = (rows, cols, len(spec.classes) if channels is None else channels)
        if shapes[key].shape != want or shapes[key].dtype != jnp.float32:
            raise ConfigError(f'head.module: {name} output {key!r} is {shapes[key].dtype}'
                              f'{list(shapes[key].shape)}, expected float32{list(want)}')
    return shapes


def load_head(name: str, weights: str, bev: HeadInput) -> LoadedHead | None:
    """
    Import, build and check the head ``name`` and load its weights; None for ''.

    ``weights`` '' takes the head's shipped checkpoint, ``HeadSpec.weights``; a head that
    ships none (``weights=None``) then runs with its factory's parameters.

    Raises
    ------
    ConfigError: naming head.module (import, factory, output shapes) or head.weights.

    """
    if not name:
        return None
    factory, digest = _factory(name)
    try:
        spec = factory(bev)
    except Exception as exc:        # the plug-in's own error, named as such
        raise ConfigError(f'head.module: {name} failed: {type(exc).__name__}: {exc}') from None
    if not isinstance(spec, HeadSpec):
        raise ConfigError(f'head.module: {name} returned {type(spec).__name__}, not a HeadSpec')
    if not spec.classes or spec.stride < 1:
        raise ConfigError(f'head.module: {name} needs at least one class and a stride >= 1')
    check_outputs(spec, bev, name)
    path = Path(os.path.expanduser(weights)) if weights else spec.weights
    params = jax.tree.map(np.asarray, spec.params)
    if path is not None:
        params = load_weights(path, params, spec.validate)
    return LoadedHead(name, spec, params, path, digest)
