"""Part 1: the recompile cost, bucketed AOT executables against a naive jit of the same frame."""

import functools
import time
from typing import Callable

from jax_perception_node import BevPipeline, kernels
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.settings.config import config_from_parameters
import numpy as np

from .checks import check_equal, edge_cells
from .common import bench_params, Inputs, Plan, rounded, summary_ms, xyzi


def bench_recompile(plan: Plan, log: Callable[[str], None]) -> dict:
    """
    Run the same frames through the bucketed pipeline and a naive jit on unpadded input.

    Per-frame time (s) covers ``process`` for the pipeline; for the naive jit, the call on the
    exact-size cloud (trace + compile when the size is new, run, fetch). The bucketed pass runs
    first and its compiles are the pipeline's own ``compiles_after_warmup``; the naive pass
    counts compiles with the process-wide counter around each call.
    """
    import jax
    cfg = config_from_parameters(bench_params(plan, 'shipped'))
    inputs = Inputs(cfg)
    maps = inputs.camera_maps(cfg)
    span_s = 20.0
    times = [round(i * span_s / plan.recompile_frames, 3) for i in range(plan.recompile_frames)]
    clouds = [xyzi(inputs.sweep(t)) for t in times]
    if plan.tiny:
        # Scale the counts into the tiny buckets, keeping them distinct.
        from jax_perception_node.sensors.cloud import keep_rows
        scale = cfg.buckets[-1] / 120_000
        clouds = [c[keep_rows(len(c), max(1, int(len(c) * scale)), 'subsample')]
                  for c in clouds]
    counts = [len(c) for c in clouds]
    log(f'recompile: {len(clouds)} frames, {min(counts)}..{max(counts)} points, '
        f'{len(set(counts))} distinct counts')

    pipe = BevPipeline(cfg)
    began = time.perf_counter()
    pipe.warmup()
    warmup_s = time.perf_counter() - began
    bucketed = []
    for cloud in clouds:
        began = time.perf_counter()
        pipe.process(cloud, maps)
        bucketed.append(time.perf_counter() - began)
    bucketed_compiles = pipe.compiles_after_warmup

    # The same frame function on the pipeline's own device state (calibration, lift, the maps
    # staged by the bucketed pass), but unpadded: every new point count traces and compiles.
    naive_fn = jax.jit(functools.partial(kernels.bev_frame, height=pipe.height,
                                         width=pipe.width, activation=cfg.fusion.activation))
    naive, naive_compiles, compiled_frames, max_diff = [], 0, [], 0.0
    for k, cloud in enumerate(clouds):
        before = compile_count()
        began = time.perf_counter()
        out = np.asarray(naive_fn(pipe.frame_args(cloud, len(cloud))))
        naive.append(time.perf_counter() - began)
        new = compile_count() - before
        naive_compiles += new
        if new:
            compiled_frames.append(naive[-1])
        if k < 3:
            # Same function, same inputs: the naive path must agree with the pipeline.
            expected = pipe.process(cloud, maps).features
            check_equal(f'naive jit, frame {k}', out, expected, edge_cells(cfg, cloud))
            max_diff = max(max_diff, float(np.abs(out - expected).max()))
    bucketed_ms, naive_ms = summary_ms(bucketed), summary_ms(naive)
    speedup = naive_ms['mean'] / bucketed_ms['mean']
    log(f'recompile: bucketed mean {bucketed_ms["mean"]} ms, naive mean {naive_ms["mean"]} ms '
        f'({naive_compiles} compiles): speedup {speedup:.1f}x')
    return {
        'frames': len(clouds), 'points_min': min(counts), 'points_max': max(counts),
        'distinct_point_counts': len(set(counts)), 'buckets': list(cfg.buckets),
        'cameras': len(cfg.cameras), 'grid': [cfg.grid.height, cfg.grid.width],
        'bucketed_ms': bucketed_ms, 'naive_ms': naive_ms,
        'naive_compile_frame_ms': summary_ms(compiled_frames),
        'bucketed_warmup_s': rounded(warmup_s), 'bucketed_warmup_compile_s': {
            k: rounded(v) for k, v in pipe.compile_seconds.items()},
        'speedup': rounded(speedup, 2),
        'speedup_p99': rounded(naive_ms['p99'] / bucketed_ms['p99'], 2),
        'naive_compiles': naive_compiles, 'bucketed_compiles_after_warmup': bucketed_compiles,
        'checked_frames': min(3, len(clouds)), 'max_abs_diff': max_diff,
    }
