"""
What the head and the image encoder plug-ins share: import, source digest, checkpoints.

A plug-in is named ``package.module:factory``; its executable is keyed on the source of its
package (:func:`source_digest`), and its checkpoints are .npz files with one array per pytree
leaf, read without pickles and within each leaf's size (:func:`load_weights`).
This module imports no ROS.
"""

import functools
import hashlib
import importlib
import os
from pathlib import Path
import re
import secrets
import sys
from typing import Any, Callable, Mapping

import jax
import numpy as np

from ..settings.npz_file import read_npz
from ..settings.parameters import ConfigError

_MODULE_RE = re.compile(r'^[A-Za-z_][\w.]*:[A-Za-z_]\w*$')
# A checkpoint's optional record of the BEV channels it was trained for: their names, a 1-D
# array of strings. No leaf is named so (``keystr`` starts with '.' or '[').
CHANNELS_KEY = 'bev_channels'
# A head checkpoint's optional record of the image encoder (encoder.module) it was trained
# with, end to end: a 0-d string array. The head picks its shipped checkpoint by it.
ENCODER_KEY = 'image_encoder'
# A head checkpoint's record of the BEV cell size it was trained on (m, a 0-d float64): on
# another, objects span other numbers of cells than it learned (at 0.2 m for 0.4 the reference
# head's car AP at 1 m fell from 0.49 to 0.06, unsaid).
RESOLUTION_KEY = 'grid_resolution'
# The dtype of each leaf saved as raw bytes (ml_dtypes' bfloat16, float8, int4: '|V2', '|V1'),
# 'leaf=dtype' strings: float8_e4m3fn bytes were otherwise read as float8_e4m3fnuz, unsaid.
RAW_DTYPES_KEY = 'raw_dtypes'
_CHANNELS_BYTES = 1 << 20       # the most bytes of names a checkpoint may hold


def import_factory(name: str, key: str = 'head.module'):
    """
    Import ``package.module:factory``; return (factory, digest): ``digest()`` its source digest.

    Call ``digest`` once the factory has run and its ``apply`` been traced: a one-file plug-in
    importing a module beside it from inside the factory has loaded it only then. Raises
    ConfigError('<key>: ...') naming the parameter ``key`` on any failure, ``digest`` too.
    """
    if not _MODULE_RE.match(name):
        raise ConfigError(f"{key}: expected 'package.module:factory', got {name!r}")
    module_name, attr = name.split(':')
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:   # any way, a module-level argparse's exit too
        raise ConfigError(f'{key}: cannot import {module_name}: '
                          f'{type(exc).__name__}: {exc}') from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f'{key}: {module_name} has no callable {attr}')
    return factory, functools.partial(_loaded_digest, module, name, key)


def _loaded_digest(module, name: str, key: str) -> str:
    try:
        # Read once per factory, when first built here: this process runs that source however
        # the files change later (an upgrade under a running node). Per factory: another of
        # the same module may import modules of its own as it builds.
        if name not in LOADED_DIGESTS:
            LOADED_DIGESTS[name] = source_digest(module)
    except OSError as exc:      # an unreadable file in its package: the store key needs it
        raise ConfigError(f'{key}: cannot read the source of its package: '
                          f'{exc.filename}: {exc.strerror or exc}') from None
    return LOADED_DIGESTS[name]


LOADED_DIGESTS: dict[str, str] = {}    # 'module:factory' -> source_digest when first built


def source_digest(module) -> str:
    """
    Return the sha256 of ``module``'s top-level package: every file in it, by path and bytes.

    A plug-in's network may live in other modules of its package than the factory's, and its
    factory may read data files of the package (a table of sizes, a config): any of them can
    change what is traced. Compiled ``__pycache__`` is left out. A top-level module keys its
    own file and those of the top-level modules loaded from its folder (``my_head.py`` with
    the ``my_layers.py`` it imports; its folder may be site-packages, never hashed whole). A
    module without a source file gets a digest of its own each time (its executable is never
    reused).
    """
    path = getattr(module, '__file__', None)
    if not path:
        return secrets.token_hex(32)
    here = Path(path).resolve()
    # The top-level package's folder: a/ for a.b.c in a/b/c.py, and for a.b in a/b/__init__.py
    # (one level above it was the folder holding the package: a checkout, site-packages).
    depth = len(module.__name__.split('.')) - (1 if here.name == '__init__.py' else 2)
    root = here.parents[depth] if depth >= 0 else here.parent
    # A package's __init__ (``head.module: mypkg:factory``) keys the whole package.
    package = '.' in module.__name__ or here.name == '__init__.py'
    files = (sorted(p for p in root.rglob('*') if '__pycache__' not in p.parts)
             if package else sorted({here} | _loaded_beside(here)))
    digest = hashlib.sha256()
    for source in files:
        if source.is_file():    # a folder or a dangling link is no source
            digest.update(str(source.relative_to(root)).encode() + b'\0' + source.read_bytes())
    return digest.hexdigest()


def _loaded_beside(here: Path) -> set[Path]:
    """Return the files of the top-level modules now loaded from ``here``'s folder."""
    files = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, '__file__', None)
        if '.' not in name and path and Path(path).resolve().parent == here.parent:
            files.add(Path(path).resolve())
    return files


def leaf_names(tree) -> list[str]:
    """Return the checkpoint key of every leaf of ``tree``: ``jax.tree_util.keystr``."""
    return [jax.tree_util.keystr(path) for path, _ in
            jax.tree_util.tree_flatten_with_path(tree)[0]]


def save_weights(path: str | os.PathLike, params, channel_names=(), encoder: str = '',
                 resolution: float = 0.0) -> None:
    """
    Write ``params`` as an .npz, one array per leaf, keyed by its path in the pytree.

    ``channel_names``, the BEV channels the weights were trained for, are recorded as
    :data:`CHANNELS_KEY` (none: not recorded); a configuration with others is then refused.
    ``encoder``, the image encoder a head was trained with, as :data:`ENCODER_KEY` ('': none);
    ``resolution``, the BEV's cell size (m), as :data:`RESOLUTION_KEY` (0: none). The dtype of
    a leaf saved as raw bytes is recorded as :data:`RAW_DTYPES_KEY`.
    """
    leaves = jax.tree_util.tree_leaves(params)
    arrays = dict(zip(leaf_names(params), (np.asarray(leaf) for leaf in leaves)))
    raw = [name for name, a in arrays.items() if _saved_raw(a.dtype)]
    if raw:
        arrays[RAW_DTYPES_KEY] = np.asarray([f'{n}={arrays[n].dtype.name}' for n in raw], np.str_)
        # As bytes: a .npy header cannot name them (float8_e5m2's '<f1' was written, unreadable).
        arrays.update({n: arrays[n].view(f'V{arrays[n].dtype.itemsize}') for n in raw})
    if channel_names:
        arrays[CHANNELS_KEY] = np.asarray(tuple(channel_names), np.str_)
    if encoder:
        arrays[ENCODER_KEY] = np.asarray(encoder, np.str_)
    if resolution:
        arrays[RESOLUTION_KEY] = np.float64(resolution)
    with open(path, 'wb') as f:
        np.savez(f, **arrays)


def _saved_raw(dtype: np.dtype) -> bool:
    """Return True for a dtype a .npy header cannot name (ml_dtypes' types): saved as bytes."""
    try:
        return np.dtype(np.lib.format.dtype_to_descr(dtype)) != dtype
    except (TypeError, ValueError):
        return True


def checked_resolution(arrays: Mapping[str, np.ndarray], what: str) -> float:
    """
    Return the BEV cell size (m) a checkpoint's ``arrays`` record (:data:`RESOLUTION_KEY`).

    0.0 when none is recorded; ConfigError('<what> whose grid_resolution is ...') when the
    record is no positive number.
    """
    if RESOLUTION_KEY not in arrays:
        return 0.0
    record = arrays[RESOLUTION_KEY]
    if record.shape != () or record.dtype.kind != 'f' or not record > 0:
        raise ConfigError(f'{what} whose {RESOLUTION_KEY} is {record.dtype}'
                          f'{list(record.shape)} {record!r}, not a cell size in m')
    return float(record)


def recorded_resolution(path: str | os.PathLike) -> float:
    """Return the BEV cell size (m) the checkpoint ``path`` records; 0.0: none."""
    with np.load(path, allow_pickle=False) as arrays:
        record = {RESOLUTION_KEY: arrays[RESOLUTION_KEY]} if RESOLUTION_KEY in arrays else {}
    return checked_resolution(record, f'{path} holds weights')


def factory_params(params, key: str = 'head.module'):
    """
    Return a factory's parameters as host arrays of the dtypes JAX runs them in.

    A float64 leaf (NumPy's default) runs as float32: taken as the checkpoint layout, it had
    every float32 checkpoint refused as not float64. Raises ConfigError('<key>: ...') for a leaf
    with non-finite values (the head then found nothing, unsaid).
    """
    def host(path, leaf):
        value = np.asarray(leaf)
        value = value.astype(jax.dtypes.canonicalize_dtype(value.dtype), copy=False)
        if value.dtype.kind in 'fc' and not np.all(np.isfinite(value)):
            raise ConfigError(f"{key}: the factory's parameters hold non-finite values in "
                              f'{jax.tree_util.keystr(path)}')
        return value
    return jax.tree_util.tree_map_with_path(host, params)


def _raw_dtypes(arrays: Mapping[str, np.ndarray], path, key: str) -> dict[str, str]:
    """Return {leaf: dtype name} of a checkpoint's :data:`RAW_DTYPES_KEY` record ({}: none)."""
    record = arrays.get(RAW_DTYPES_KEY)
    if record is None:
        return {}
    strings = record.ndim == 1 and record.dtype.kind == 'U'
    pairs = [str(r).rsplit('=', 1) for r in record] if strings else []
    if not strings or not all(len(pair) == 2 and all(pair) for pair in pairs):
        raise ConfigError(f'{key}: {path} {RAW_DTYPES_KEY} is {record.dtype}'
                          f"{list(record.shape)}, not 'leaf=dtype' strings")
    return dict(pairs)


def load_weights(path: str | os.PathLike, template,
                 validate: Callable[[Any], None] | None = None,
                 fit: Callable[[Mapping[str, np.ndarray]], None] | None = None,
                 key: str = 'head.weights'):
    """
    Read a checkpoint shaped like ``template`` (its leaves' shapes and dtypes).

    Loaded with ``allow_pickle=False``, each array inflating to at most its leaf's size (and an
    .npy header): a zip bomb is refused unread. ``fit`` (``head.fits``), if any, first checks
    the file's arrays for the BEV channels it was trained for. Raises ConfigError('<key>: ...')
    naming the parameter ``key`` (head.weights, encoder.weights), the file and the first
    missing, extra, too large or differently shaped array, or one with non-finite values; then
    ``validate`` (``HeadSpec.validate``), if any, checks the values and its ValueError becomes
    ConfigError('<key>: <file>: <its message>').
    """
    # head.weights: the head; encoder.weights: the encoder; --init-head: the head too.
    owner = 'encoder' if key.startswith('encoder') else 'head'
    names = leaf_names(template)
    leaves, treedef = jax.tree_util.tree_flatten(template)
    limits = {name: np.asarray(leaf).nbytes for name, leaf in zip(names, leaves)}
    # The dtype record: a 4-byte character per name, '=' and a dtype name (at most 32).
    longest = max(map(len, names), default=0)
    records = {CHANNELS_KEY: _CHANNELS_BYTES, ENCODER_KEY: _CHANNELS_BYTES, RESOLUTION_KEY: 8,
               RAW_DTYPES_KEY: 4 * len(names) * (longest + 33)}
    try:
        arrays = read_npz(path, key, {**limits, **records})
    except ConfigError:
        if fit is not None:
            # Weights of another layout are refused by it, naming what to do, not by the size
            # of an array that layout makes larger than this head's: its records alone.
            fit(read_npz(path, key, records, others=True))
        raise
    if fit is not None:
        fit(arrays)
    raw = _raw_dtypes(arrays, path, key)
    values = []
    for name, leaf in zip(names, leaves):
        if name not in arrays:
            raise ConfigError(f'{key}: {path} lacks {name}')
        value, want = arrays[name], np.asarray(leaf)
        if value.dtype.kind == 'V' and value.dtype.names is None:
            # Raw bytes: of the recorded dtype (a checkpoint without the record: the template's).
            saved = raw.get(name, want.dtype.name if _saved_raw(want.dtype) else None)
            if saved == want.dtype.name and value.dtype.itemsize == want.dtype.itemsize:
                value = value.view(want.dtype)
        if value.shape != want.shape or value.dtype != want.dtype:
            raise ConfigError(f'{key}: {path} {name} is {raw.get(name, value.dtype)}'
                              f'{list(value.shape)}, the {owner} needs {want.dtype}'
                              f'{list(want.shape)}')
        if not np.all(np.isfinite(value)):
            raise ConfigError(f'{key}: {path} {name} has non-finite values')
        values.append(value)
    params = jax.tree_util.tree_unflatten(treedef, values)
    if validate is not None:
        try:
            validate(params)
        except ValueError as exc:
            raise ConfigError(f'{key}: {path}: {exc}') from None
        except (Exception, SystemExit) as exc:    # the plug-in's own error, named as such
            raise ConfigError(f'{key}: {path}: the {owner} plug-in failed to validate it: '
                              f'{type(exc).__name__}: {exc}') from None
    return params
