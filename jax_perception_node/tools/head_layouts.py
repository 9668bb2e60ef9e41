"""
A reference-head checkpoint for a BEV without camera channels, derived exactly from one with.

``python -m jax_perception_node.tools.head_layouts CHECKPOINT --params FILE --out WEIGHTS``

A head trained with camera dropout (``train --drop-all-cameras``) has learned to detect from the
LiDAR alone: with every camera absent, its camera channels and the coverage are 0. A LiDAR-only
configuration (``cameras.names: []``) makes the same BEV without the camera channels (the
coverage stays, 0). The head's first layer is a 1 x 1 convolution of the normalized pooled max
and mean, so a channel that is always 0 adds the constant ``W_max[k] + W_mean[k]`` times
``(0 - mean[k]) / std[k]`` to every cell: folded into the bias, its weights can go.
:func:`without_channels` does that; the derived head computes, on the smaller BEV, what the
checkpoint computes on the larger one with those channels 0 (to float32 rounding; tested).
Only camera channels may go (the LiDAR's and the coverage are never 0 by construction).
"""

import argparse
from dataclasses import replace
from pathlib import Path
import sys

import equinox as eqx
import jax
import numpy as np

from ..bags.bagio import BagError
from ..core.pipeline import BevPipeline
from ..detection.head import CHANNELS_KEY, load_weights
from ..detection.heads.centerpoint import CenterPointHead, recorded
from ..detection.plugin import recorded_resolution
from ..outputs.grid_map import GridMapLayers
from ..settings.channels import COVERAGE_CHANNEL, LIDAR_CHANNELS, TIME_LAG_CHANNEL
from ..settings.config import default_params_file, HeadConfig, load_config
from ..settings.parameters import ConfigError


def without_channels(model: CenterPointHead, names: tuple[str, ...],
                     kept: tuple[str, ...]) -> CenterPointHead:
    """
    Return ``model`` (for BEV channels ``names``) for a BEV of the channels ``kept`` alone.

    ``kept`` is ``names`` less some channels, in the same order; the channels left out are
    taken as 0 (the max and the mean of a channel that is 0 are 0): their share of the first
    layer is folded into its bias.
    """
    index = [names.index(name) for name in kept]
    dropped = [k for k, name in enumerate(names) if name not in kept]
    c = len(names)
    mean, std = np.asarray(model.mean, np.float64), np.asarray(model.std, np.float64)
    weight = np.asarray(model.conv1.weight, np.float64)           # [1, 1, 2C + 4, hidden]
    zero = -mean[dropped] / std[dropped]                           # a 0 channel, normalized
    shift = (zero @ weight[0, 0, dropped] + zero @ weight[0, 0, [c + k for k in dropped]])
    rows = index + [c + k for k in index] + list(range(2 * c, weight.shape[2]))
    conv1 = replace(model.conv1, weight=np.asarray(weight[:, :, rows], np.float32),
                    bias=np.asarray(np.asarray(model.conv1.bias, np.float64) + shift,
                                    np.float32))
    return replace(model, mean=np.asarray(mean[index], np.float32),
                   std=np.asarray(std[index], np.float32), conv1=conv1)


def layout_names(params_file: str | None) -> tuple[str, ...]:
    """Return the BEV channel names of a parameters file's configuration (no warm-up)."""
    cfg = load_config(params_file or default_params_file())
    cfg = replace(cfg, head=HeadConfig(), output_bev_features=True)
    pipe = BevPipeline(cfg)
    if pipe.projected:
        raise ConfigError('fusion.weights projects the BEV: its channels have no names to '
                          'derive a head for')
    return tuple(GridMapLayers.for_pipeline(cfg, pipe).names)


def derive(checkpoint: Path, kept: tuple[str, ...]) -> tuple[CenterPointHead, tuple[str, ...]]:
    """
    Return the head of ``checkpoint`` for a BEV of the channels ``kept``, and its channels.

    Raises ConfigError when the checkpoint records no channels, or when ``kept`` is not its
    channels less some camera channels (in the same order).
    """
    record = recorded(checkpoint)
    if record is None:
        raise ConfigError(f'{checkpoint}: records no BEV channels ({CHANNELS_KEY}), or cannot '
                          'be read')
    names = record[0]
    lidar = set(LIDAR_CHANNELS) | {TIME_LAG_CHANNEL, COVERAGE_CHANNEL}
    dropped = [name for name in names if name not in kept]
    if [name for name in names if name in kept] != list(kept) or lidar & set(dropped):
        raise ConfigError(f'{checkpoint} was trained for {list(names)}; the configuration has '
                          f'{list(kept)}: only camera channels can be left out, the others '
                          'kept in their order')
    template = CenterPointHead.create(len(names))
    params, static = eqx.partition(template, eqx.is_array)
    loaded = load_weights(checkpoint, jax.tree.map(np.asarray, params))
    return without_channels(eqx.combine(loaded, static), names, kept), names


def main(argv: list[str] | None = None) -> int:
    """Derive and write the checkpoint (module doc); 1 with one line on a user's error."""
    parser = argparse.ArgumentParser(
        prog='python -m jax_perception_node.tools.head_layouts',
        description='Derive a reference-head checkpoint for a configuration without cameras.')
    parser.add_argument('checkpoint', type=Path, help='a checkpoint written by train')
    parser.add_argument('--params', metavar='FILE', help="the configuration's parameters")
    parser.add_argument('--out', type=Path, required=True, metavar='WEIGHTS')
    args = parser.parse_args(argv)
    from .arguments import check_writable, outputs_apart, UsageError
    from .train import write_weights
    try:
        # Before the derivation: never over the checkpoint it reads (a shipped one, say).
        outputs_apart([str(args.checkpoint)], {'--out': str(args.out)})
        check_writable(str(args.out), '--out', folder=False)
        kept = layout_names(args.params)
        model, names = derive(args.checkpoint, kept)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_weights(args.out, eqx.partition(model, eqx.is_array)[0], kept,
                      resolution=recorded_resolution(args.checkpoint))
    except (ConfigError, BagError, OSError, UsageError) as exc:
        print(f'head_layouts: {exc}', file=sys.stderr)
        return 1
    print(f'wrote {args.out}: {len(kept)} channels of the {len(names)} of {args.checkpoint} '
          f'(left out, taken as 0: {", ".join(n for n in names if n not in kept)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
