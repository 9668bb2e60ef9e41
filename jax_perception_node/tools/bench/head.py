"""Part 'head': what the learned head adds to a frame, with and without it side by side."""

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

    The two pipelines take turns on every frame (interleaved, so a load change hits them
    alike) on the same 131k-point cloud and camera maps. Per pipeline: compute_ms (transfer,
    device, fetch of the BEV), head_ms (the head's executable after the BEV, the fetch and
    threshold of its K boxes), their sum per frame, and the whole process() time; the ratio of
    the sums' medians is the head's cost, target <= 1.30. On a GPU jaxlib the same part runs on
    the GPU (``jax.devices()[0]``).
    """
    with_head = bench_params(plan, 'shipped', head=True)
    if not with_head.get('head.module'):
        return {'rows': [], 'skipped': 'the shipped parameters configure no head'}
    configs = {'bev': config_from_parameters(bench_params(plan, 'shipped')),
               'bev+head': config_from_parameters(with_head)}
    if plan.tiny:
        return {'rows': [], 'skipped': 'the tiny plan has no head sized for its grid'}
    cfg = configs['bev']
    inputs = Inputs(cfg)
    cloud = inputs.points(HEADLINE_POINTS)
    maps = inputs.camera_maps(cfg)
    pipes = {}
    for name, c in configs.items():
        pipes[name] = BevPipeline(c)
        pipes[name].warmup()
    reps = max(plan.reps * 4, 20)
    samples = {name: {'compute': [], 'head': [], 'frame': [], 'total': []} for name in pipes}
    objects = []
    compiles = compile_count()
    for k in range(reps + 3):
        for name, pipe in pipes.items():
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
    head = pipes['bev+head']
    return {'rows': rows, 'points': HEADLINE_POINTS, 'cameras': len(cfg.cameras),
            'compute_ratio': rounded(ratio, 3), 'budget': HEAD_BUDGET,
            'objects_per_frame': rounded(np.mean(objects) if objects else 0.0, 1),
            'max_objects': head.cfg.head.max_objects, 'head': head.head.name,
            'device': str(jax.devices()[0]),
            'compiles_during_frames': compiles}
