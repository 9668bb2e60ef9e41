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

from dataclasses import dataclass, replace
import math
import numbers
import os
from pathlib import Path
import re
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .boxes import BOX_COLUMNS  # noqa: F401 (the decoded rows' columns, here for heads)
# The plug-in machinery, here under the names heads and tools have always imported.
from .plugin import (CHANNELS_KEY, checked_resolution, ENCODER_KEY,  # noqa: F401
                     factory_params, import_factory, leaf_names, load_weights, save_weights,
                     source_digest)
from ..settings.parameters import ConfigError, REFERENCE_HEAD


# What ``apply`` returns: name -> channels (None: one per class), at the head's stride.
HEAD_OUTPUTS = {'heatmap': None, 'offset': 2, 'z': 1, 'size': 3, 'yaw': 2}
# A head's centre_votes at most: (2n + 1)^2 cells are gathered per box, 9 for the reference
# head's 1, 289 at 8 (and 400 million at 10 000, which nothing bounded before).
MAX_CENTRE_VOTES = 8

_RUN_RE = re.compile(r'^(.*?)(\d+)$')
# The image encoder that computes, from the sample drive's images, the feature maps it sends:
# shipped weights that record no encoder (trained on those maps) serve it, and no other.
FEATURE_MAP_ENCODER = 'jax_perception_node.detection.encoders.pooled:appearance'


class HeadInput(NamedTuple):
    """What a head factory is told about its input: the fused BEV float32[H, W, C]."""

    height: int          # H, rows (x index)
    width: int           # W, columns (y index)
    channels: int        # C, the pipeline's output channels
    resolution: float    # m per cell
    channel_names: tuple[str, ...] = ()     # the C channels' names; () where not known
    encoder: str = ''    # the image encoder (encoder.module) of the camera channels; '' none


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
    ``ConfigError('head.weights: <file>: <message>')``. It and ``checkpoint_channels`` run on
    the host: NumPy, not ``jax.numpy`` (whose operations compile, and a live swap's compiles
    count as compiles after warm-up). ``checkpoint_channels(params)``,
    optional, returns the number of BEV channels a checkpoint was trained for, from a pytree
    like ``params`` of the file's arrays, whatever their shapes: a checkpoint that records no
    channel names (:data:`CHANNELS_KEY`) and was trained for another channel count is then
    refused by its channels, not by an array's shape. ``nms_radius_m``, optional, one radius
    per class (m): the decoded boxes then go through a circle non-maximum suppression on the
    device (``box_decode.decode_boxes``); () keeps every 3 x 3 peak. ``centre_votes``,
    optional, n > 0 for a head whose cells within n output cells of an object's centre
    cell regress ``offset`` to that centre (relative to themselves): the decoded centre is then
    the score-weighted mean of those cells' votes; 0 takes the peak cell's offset alone
    (CenterPoint's decoding, for a head taught offsets at the centre cell only).
    ``intensity_top``, optional, the top of the LiDAR intensity scale the head was trained on
    (255 for 0-255): clouds read far off it are counted and warned, with the
    ``lidar.intensity_scale`` to set (``frames.intensity_scale``); 0 checks nothing.
    """

    apply: Callable[[Any, jax.Array], dict]
    params: Any
    stride: int
    classes: tuple[str, ...]
    weights: Path | None = None
    validate: Callable[[Any], None] | None = None
    checkpoint_channels: Callable[[Any], int] | None = None
    nms_radius_m: tuple[float, ...] = ()
    centre_votes: int = 0
    intensity_top: float = 0.0


@dataclass(frozen=True)
class LoadedHead:
    """A head ready for the pipeline: its spec, checked weights and the identity of its code."""

    name: str                # 'package.module:factory'
    spec: HeadSpec
    params: Any              # pytree of NumPy arrays, the checkpoint's values
    weights_path: Path | None
    source_digest: str       # sha256 of the factory's package source: part of the store key
    bev: HeadInput | None = None     # the BEV it runs on: a checkpoint must fit its channels

    def checkpoint(self, path: str) -> tuple[Path | None, Any]:
        """
        Return (the file, its parameters) for ``head.weights`` = ``path``; ConfigError if bad.

        '' takes the shipped weights (a head that ships none: its factory's parameters). A
        checkpoint trained for other BEV channels than ``bev``'s is refused (:func:`fits`).
        """
        target = Path(os.path.expanduser(path)) if path else self.spec.weights
        if target is None:
            return None, factory_params(self.spec.params)
        fit = None if self.bev is None else fits(self.name, self.spec, self.bev, target,
                                                 shipped=not path)
        return target, load_weights(target, self.params, self.spec.validate, fit,
                                    'head.weights' if path else 'head.module')   # it ships it

    @property
    def identity(self) -> str:
        """Return what the store keys on: code, its input, stride, classes, NMS, votes."""
        # The BEV the factory was given (resolution, channels, encoder): a factory may trace
        # them in as constants (a box size in cells), with the same shapes on another grid.
        return repr((self.name, self.source_digest, self.bev, self.spec.stride,
                     self.spec.classes, self.spec.nms_radius_m, self.spec.centre_votes))


def trained_channels(arrays: Mapping[str, np.ndarray], spec: HeadSpec,
                     path) -> tuple[int | None, tuple[str, ...]]:
    """
    Return (count, names) of the BEV channels a checkpoint's arrays were trained for.

    The names its :data:`CHANNELS_KEY` records (ConfigError if that is no list of strings);
    without them (), and the count its head's ``checkpoint_channels`` finds, None where that
    fails or the head has none.
    """
    recorded = arrays.get(CHANNELS_KEY)
    if recorded is not None:
        if recorded.ndim != 1 or recorded.dtype.kind != 'U':
            raise ConfigError(f'head.weights: {path} {CHANNELS_KEY} is {recorded.dtype}'
                              f'{list(recorded.shape)}, not a list of BEV channel names')
        return len(recorded), tuple(str(name) for name in recorded)
    names = leaf_names(spec.params)
    if spec.checkpoint_channels is None or not all(name in arrays for name in names):
        return None, ()
    tree = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(spec.params),
                                        [arrays[name] for name in names])
    try:
        return int(spec.checkpoint_channels(tree)), ()
    except Exception:               # a malformed file: its arrays' own checks say what
        return None, ()


def describe_channels(count: int, names: tuple[str, ...] = ()) -> str:
    """Return '15 BEV channels (occupancy, ..., camera_0 .. camera_7, coverage)'."""
    parts, k = [], 0
    while k < len(names):
        end, match = k + 1, _RUN_RE.match(names[k])
        while match and end < len(names) and names[end] == (
                f'{match[1]}{int(match[2]) + end - k}'):
            end += 1
        parts.append(f'{names[k]} .. {names[end - 1]}' if end - k > 2 else
                     ', '.join(names[k:end]))
        k = end
    listed = ', '.join(parts[:12]) + (', ...' if len(parts) > 12 else '')
    return f'{count} BEV channels' + (f' ({listed})' if names else '')


def fits(name: str, spec: HeadSpec, bev: HeadInput, path, shipped: bool,
         key: str = 'head.weights'):
    """
    Return ``load_weights``' ``fit``: ConfigError unless a checkpoint fits ``bev``'s channels.

    A checkpoint fits when it was trained for as many channels (:func:`trained_channels`) and,
    where it and ``bev`` name them, for the same names in the same order; and, where it records
    the image encoder it was trained with (:data:`ENCODER_KEY`), with ``bev``'s (the camera
    channels of another encoder carry the same names but other features). The head's shipped
    weights (``shipped``: ``head.weights`` is '') are refused naming ``head.module``, never by
    an array's shape of a file the user did not set; a file the user set is refused naming
    ``key`` (``head.weights``, or train's ``--init-head``) and the file. Both lines say what
    to do.
    """
    # jax-perception train trains the reference head only: another head trains its own way.
    how = ' (jax-perception train)' if name == REFERENCE_HEAD else ''
    if shipped:
        prefix, advice = f'head.module: {name} ships weights', (
            f"set head.module: '' for no head, or train weights for these channels{how} and "
            'set head.weights to them')
    else:
        prefix, advice = f'{key}: {path} holds weights', (
            f'set {key} to weights trained for these channels{how}, '
            "or head.module: '' for no head")
    ours = bev.channel_names if len(bev.channel_names) == bev.channels else ()

    def check(arrays: Mapping[str, np.ndarray]) -> None:
        encoder = str(arrays[ENCODER_KEY]) if ENCODER_KEY in arrays else ''
        # Shipped weights of no encoder were trained on the feature maps; another encoder's
        # channels, however named, carry other features.
        unknown = shipped and not encoder and bev.encoder not in ('', FEATURE_MAP_ENCODER)
        if (encoder and encoder != bev.encoder) or unknown:
            raise ConfigError(f'{prefix} trained with the image encoder '
                              f'{encoder or FEATURE_MAP_ENCODER + " (feature maps)"}, this '
                              f'configuration has {bev.encoder or "none (feature maps)"}; '
                              f'{advice}')
        count, names = trained_channels(arrays, spec, path)
        if count is None:
            _check_resolution(arrays, bev, prefix, how)
            if shipped:
                _check_shipped_shapes(arrays, spec, f'{prefix} that', advice,
                                      describe_channels(bev.channels, ours))
            return
        differs = count == bev.channels and bool(names) and bool(ours) and names != ours
        if count == bev.channels and not differs:
            _check_resolution(arrays, bev, prefix, how)
            return
        first = next((k for k, (a, b) in enumerate(zip(names, ours)) if a != b), None)
        where = (f' (channel {first} is {names[first]} in the weights, {ours[first]} here)'
                 if differs else '')
        raise ConfigError(f'{prefix} trained for {describe_channels(count, names)}, this '
                          f'configuration has {describe_channels(bev.channels, ours)}{where}; '
                          f'{advice}')
    return check


def _check_resolution(arrays, bev: HeadInput, prefix: str, how: str) -> None:
    """Raise ConfigError if a checkpoint records another BEV cell size than ``bev``'s."""
    trained = checked_resolution(arrays, prefix)
    if trained and not math.isclose(trained, bev.resolution, rel_tol=1e-6):
        raise ConfigError(f'{prefix} trained on a grid of {trained:g} m cells, this '
                          f'configuration has grid.resolution {bev.resolution:g} m (its objects '
                          f'span other numbers of cells); set grid.resolution: {trained:g}, or '
                          f'train weights on this grid{how}')


def _check_shipped_shapes(arrays, spec: HeadSpec, prefix: str, advice: str, ours: str) -> None:
    """Raise ConfigError naming head.module if a shipped array's shape is not the head's."""
    for leaf, want in zip(leaf_names(spec.params), jax.tree_util.tree_leaves(spec.params)):
        got = arrays.get(leaf)
        if got is not None and got.shape != np.shape(want):
            raise ConfigError(f'{prefix} do not fit this configuration, {ours}: their {leaf} '
                              f'has shape {list(got.shape)}, the head builds '
                              f'{list(np.shape(want))}; {advice}')


def check_outputs(spec: HeadSpec, bev: HeadInput, name: str) -> dict:
    """Trace ``apply`` on the BEV's shape; return its output shapes or raise ConfigError."""
    if bev.height % spec.stride or bev.width % spec.stride:
        raise ConfigError(f'head.module: {name} has stride {spec.stride}, which does not divide '
                          f'the grid ({bev.height} x {bev.width} cells)')
    try:
        shapes = jax.eval_shape(spec.apply, spec.params, jax.ShapeDtypeStruct(
            (bev.height, bev.width, bev.channels), jnp.float32))
    except (Exception, SystemExit) as exc:   # the plug-in's own error (argparse's exit)
        raise ConfigError(f'head.module: {name} cannot run on a {bev.height} x {bev.width} x '
                          f'{bev.channels} BEV: {type(exc).__name__}: {exc}') from None
    if not isinstance(shapes, dict) or set(shapes) != set(HEAD_OUTPUTS):
        got = sorted(shapes) if isinstance(shapes, dict) else type(shapes).__name__
        raise ConfigError(f'head.module: {name} must return {sorted(HEAD_OUTPUTS)}, got {got}')
    for key, value in shapes.items():
        if not isinstance(value, jax.ShapeDtypeStruct):    # a nested dict, a tuple
            raise ConfigError(f'head.module: {name} output {key!r} is a '
                              f'{type(value).__name__}, not one array')
    rows, cols = bev.height // spec.stride, bev.width // spec.stride
    for key, channels in HEAD_OUTPUTS.items():
        want = (rows, cols, len(spec.classes) if channels is None else channels)
        if shapes[key].shape != want or shapes[key].dtype != jnp.float32:
            raise ConfigError(f'head.module: {name} output {key!r} is {shapes[key].dtype}'
                              f'{list(shapes[key].shape)}, expected float32{list(want)}')
    return shapes


def _integer(value) -> bool:
    """Whether ``value`` is an integer, a NumPy one included, and no bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def load_head(name: str, weights: str, bev: HeadInput) -> LoadedHead | None:
    """
    Import, build and check the head ``name`` and load its weights; None for ''.

    ``weights`` '' takes the head's shipped checkpoint, ``HeadSpec.weights``; a head that
    ships none (``weights=None``) then runs with its factory's parameters.

    Raises
    ------
    ConfigError: naming head.module (import, factory, output shapes, shipped weights trained
    for other BEV channels than ``bev``'s) or head.weights (a file that cannot be read or does
    not fit, by its channels where it says them).

    """
    if not name:
        return None
    factory, digest_of = import_factory(name)
    try:
        spec = factory(bev)
    except ConfigError:             # the factory's own line, naming the parameter to set
        raise
    except (Exception, SystemExit) as exc:   # the plug-in's own error (argparse's exit)
        raise ConfigError(f'head.module: {name} failed: {type(exc).__name__}: {exc}') from None
    if not isinstance(spec, HeadSpec):
        raise ConfigError(f'head.module: {name} returned {type(spec).__name__}, not a HeadSpec')
    classes = spec.classes
    # Names: published as class ids and matched to ground truth by name (one heatmap each).
    if (not isinstance(classes, (tuple, list)) or not classes
            or not all(isinstance(c, str) and c for c in classes)
            or len(set(classes)) != len(classes)):
        raise ConfigError(f'head.module: {name} gives classes {classes!r}: a tuple of distinct, '
                          'non-empty names (str) is needed')
    if not _integer(spec.stride) or spec.stride < 1:
        raise ConfigError(f'head.module: {name} needs an integer stride >= 1, gives '
                          f'{spec.stride!r}')
    votes = spec.centre_votes
    if not _integer(votes) or not 0 <= votes <= MAX_CENTRE_VOTES:
        raise ConfigError(f'head.module: {name} gives centre_votes {votes!r}: an integer 0 .. '
                          f'{MAX_CENTRE_VOTES} (0: no votes) is needed')
    radii = spec.nms_radius_m
    try:
        bad = radii is not None and len(radii) > 0 and (len(radii) != len(classes) or not all(
            not isinstance(r, bool) and math.isfinite(r) and r > 0 for r in radii))
    except (TypeError, ValueError):      # a scalar, strings, an array's truth value
        bad = True
    if bad:
        raise ConfigError(f'head.module: {name} gives nms_radius_m {radii!r}: one positive '
                          f'radius (a number) per class of {list(classes)} is needed')
    # As the rest of the node reads them (an array's truth value would be ambiguous there).
    spec = replace(spec, classes=tuple(classes), stride=int(spec.stride),
                   centre_votes=int(votes),
                   nms_radius_m=tuple(float(r) for r in radii) if radii is not None else ())
    top = spec.intensity_top
    if isinstance(top, (bool, np.bool_)) or not isinstance(top, numbers.Real) or not (
            0 <= top < math.inf):
        raise ConfigError(f'head.module: {name} gives intensity_top {top!r}: a finite number '
                          '>= 0 (0: no intensity-scale check) is needed')
    check_outputs(spec, bev, name)
    digest = digest_of()        # after the trace: what it imported is loaded by now
    path = Path(os.path.expanduser(weights)) if weights else spec.weights
    params = factory_params(spec.params)
    if path is not None:
        params = load_weights(path, params, spec.validate,
                              fits(name, spec, bev, path, shipped=not weights),
                              'head.weights' if weights else 'head.module')     # it ships it
    return LoadedHead(name, spec, params, path, digest, bev)
