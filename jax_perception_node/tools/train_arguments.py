"""The ``jax-perception train`` command line: its options, their checks, ``--camera-classes``."""

import argparse
from pathlib import Path

from .arguments import UsageError
from .training_set import CameraDropout
from ..detection.heads.camera_routing import CameraRouting
from ..detection.heads.centerpoint import CLASSES

DEFAULT_STEPS = 6000        # the shipped weights: 20 minutes on a 2-core CPU, 26 drives
DEFAULT_BATCH = 8
# A typo's bounds: 10 million steps is years of this CPU; the steps' draws are kept in memory.
MAX_STEPS, MAX_BATCH = 10 ** 7, 4096


def _number(kind, low, high=None):
    """Return an argparse type: a ``kind`` (int or float) of at least ``low``, at most ``high``."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = 'an integer' if kind is int else 'a number'
            raise argparse.ArgumentTypeError(f'expected {what}, got {text!r}') from None
        if value < low or (high is not None and not value <= high):
            raise argparse.ArgumentTypeError(
                f'must be at least {low}, got {value}' if high is None else
                f'must be within [{low}, {high}], got {text}')
        return value
    return parse


def _picture_file(text: str) -> str:
    """Accept a file path whose suffix matplotlib writes (the loss picture is written last)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    formats = FigureCanvasAgg.get_supported_filetypes()
    if Path(text).suffix.lower().lstrip('.') not in formats:
        raise argparse.ArgumentTypeError(f'{text}: the loss picture needs one of the suffixes '
                                         f'{", ".join(sorted(formats))}')
    return text


def _classes(text: str) -> tuple[str, ...]:
    """Accept comma-separated names of the reference head's classes, each at most once."""
    names = tuple(name.strip() for name in text.split(','))
    unknown = [name for name in names if name not in CLASSES]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f'{text!r}: expected distinct names among {", ".join(CLASSES)}')
    return names


def camera_routing(classes: tuple[str, ...] | None, lidar: int, projected: bool):
    """
    Return the CameraRouting of ``--camera-classes`` for a BEV of ``lidar`` LiDAR channels.

    None for ``classes`` None (the option not given: every output may read the cameras).
    UsageError where a fusion projection mixes the LiDAR and camera channels.
    """
    if classes is None:
        return None
    if projected:
        raise UsageError('--camera-classes: fusion.weights_file projects the LiDAR and camera '
                         'channels together, so no output can read the LiDAR alone; leave '
                         "--camera-classes out or set fusion.weights_file: ''")
    return CameraRouting(lidar, tuple(CLASSES.index(name) for name in classes))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the train command's arguments to its (sub)parser."""
    parser.description = ('Train the reference CenterPoint head (four classes) on sample '
                          'drives with ground truth. Train only on drives of seeds >= 100 '
                          '(jax-perception sample-bag OUT --seed K); seeds below 100 are for '
                          'tests, the demo, '
                          'the benchmarks and evaluation. The parameter file fixes the BEV '
                          'the weights are for: cameras.names: [] for LiDAR-only weights.')
    parser.add_argument('bags', nargs='+', metavar='BAGS',
                        help='sample drives with /ground_truth/objects (seeds >= 100 only)')
    parser.add_argument('--out', required=True, metavar='WEIGHTS',
                        help='the weights (.npz) to write')
    parser.add_argument('--params', metavar='FILE',
                        help='parameter file (default: the shipped one); fixes the BEV')
    parser.add_argument('--steps', type=_number(int, 1, MAX_STEPS), default=DEFAULT_STEPS,
                        help=f'optimizer steps (default {DEFAULT_STEPS})')
    parser.add_argument('--batch', type=_number(int, 1, MAX_BATCH), default=DEFAULT_BATCH,
                        help=f'frames per step (default {DEFAULT_BATCH})')
    parser.add_argument('--seed', type=_number(int, 0), default=0,
                        help='seed of the initial weights, frame order, flips and camera '
                             'dropout (default 0); not a drive seed')
    default, share = CameraDropout(), _number(float, 0, 1)
    parser.add_argument('--camera-dropout', type=share, default=default.rate, metavar='P',
                        help='the share of training samples with cameras dropped (default '
                             f'{default.rate:g}): every camera (--drop-all-cameras), or each '
                             'kept with probability 0.5 (drawn per frame with --seed); 0: all '
                             'cameras always (half the memory); no effect without cameras')
    parser.add_argument('--drop-all-cameras', type=share, default=default.every, metavar='F',
                        help='of the samples with cameras dropped, the share with every camera '
                             f'dropped (default {default.every:g})')
    parser.add_argument('--camera-classes', type=_classes, metavar='NAMES',
                        help='the classes whose heatmaps may read the camera channels, comma-'
                             'separated (' + ', '.join(CLASSES) + '); the other heatmaps and '
                             'the box regression read the LiDAR channels only, so the cameras '
                             'never change their boxes (default: every output reads them all)')
    parser.add_argument('--class-balance', action=argparse.BooleanOptionalAction, default=True,
                        help='draw frames class-balanced, as CBGS (default); --no-class-balance'
                             ': every frame once per pass')
    parser.add_argument('--png', type=_picture_file, metavar='FILE',
                        help='the loss curve picture (default: WEIGHTS with _loss.png)')
    parser.add_argument('--init-head', metavar='WEIGHTS',
                        help='start from this head checkpoint, its input normalization kept '
                             '(default: a new head)')
    parser.add_argument('--encoder-out', metavar='WEIGHTS',
                        help='where an image encoder with parameters, trained with the head '
                             'end to end, is written (default: WEIGHTS with _encoder.npz)')
    parser.add_argument('--untrained-encoder', action='store_true',
                        help="start that encoder from its factory's parameters, not from "
                             "encoder.weights (the shipped ones for '')")
