"""Part 'head': what the learned head adds to a frame, with and without it side by side."""

from contextlib import nullcontext
import time
from typing import Callable

import jax
from jax_perception_node import BevPipeline
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.settings.config import config_from_parameters
import numpy as np

from .common import bench_params, HEADLINE_POINTS, Inputs, Plan, rounded, summary_ms

HEAD_BUDGET = 1.30      # issue 18: the head adds at most 30 % to compute_ms


def bench_head(plan: Plan, log: Callable[[str], None]) -> dict:
    """
    Time ``process`` at the shipped config (four cameras) with and without the shipped head.

    One pipeline with the head; every other frame runs with the head paused
    (``BevPipeline.head_paused``), the two kinds of frame taking turns, first one and then the
    other (so a load change, and the frame before, hit them alike), on the same 131k-point
    cloud and camera maps. Two pipelines, one without a head, were timed before: each reads
    its own 11 MB of lift tables and buffers, and which of the two ran slower changed from
    process to process (the ratio 1.5x or 2.0x on one tree), where the node runs one. Per kind
    of frame: compute_ms (transfer, device, fetch of the BEV), head_ms (the head's executable
    after the BEV, the fetch and threshold of its K boxes), their sum per frame, and the whole
    process() time; the ratio of the sums' medians is the head's cost, target <= 1.30. On a
    GPU jaxlib the same part runs on the GPU (``jax.devices()[0]``).
    """
    params = bench_params(plan, 'shipped', head=True)
    if not params.get('head.module'):
        return {'rows': [], 'skipped': 'the shipped parameters configure no head'}
    if plan.tiny:
        return {'rows': [], 'skipped': 'the tiny plan has no head sized for its grid'}
    cfg = config_from_parameters(params)
    inputs = Inputs(cfg)
    cloud = inputs.points(HEADLINE_POINTS)
    maps = inputs.camera_maps(cfg)
    pipe = BevPipeline(cfg)
    pipe.warmup()
    reps = max(plan.reps * 4, 20)
    kinds = ('bev', 'bev+head')
    samples = {name: {'compute': [], 'head': [], 'frame': [], 'total': []} for name in kinds}
    objects = []
    compiles = compile_count()
    for k in range(reps + 3):
        for name in kinds if k % 2 else kinds[::-1]:
            with pipe.head_paused() if name == 'bev' else nullcontext():
                began = time.perf_counter()
                out = pipe.process(cloud, maps)
                elapsed = time.perf_counter() - began
            if k < 3:       # first frames: caches and allocator warm-up, not timed
                continue
            samples[name]['compute'].append(out.compute_ms * 1e-3)
            samples[name]['head'].append(out.head_ms * 1e-3)
            samples[name]['frame'].append((out.compute_ms + out.head_ms) * 1e-3)
            samples[name]['total'].append(elapsed)
            if out.objects is not None:
                objects.append(len(out.objects))
    compiles = compile_count() - compiles
    rows = [{'pipeline': name, 'compute_ms': summary_ms(s['compute']),
             'head_ms': summary_ms(s['head']), 'frame_ms': summary_ms(s['frame']),
             'process_ms': summary_ms(s['total'])} for name, s in samples.items()]
    ratio = rows[1]['frame_ms']['p50'] / rows[0]['frame_ms']['p50']
    log(f'head: compute + head p50 {rows[0]["frame_ms"]["p50"]} ms without, '
        f'{rows[1]["frame_ms"]["p50"]} ms with the head ({ratio:.2f}x)')
    return {'rows': rows, 'points': HEADLINE_POINTS, 'cameras': len(cfg.cameras),
            'compute_ratio': rounded(ratio, 3), 'budget': HEAD_BUDGET,
            'objects_per_frame': rounded(np.mean(objects) if objects else 0.0, 1),
            'max_objects': pipe.cfg.head.max_objects, 'head': pipe.head.name,
            'device': str(jax.devices()[0]), 'one_pipeline': True,
            'compiles_during_frames': compiles}
