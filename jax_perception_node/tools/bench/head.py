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
BLOCK = 8               # frames of one kind in a row (the first untimed)


def bench_head(plan: Plan, log: Callable[[str], None]) -> dict:
    """
    Time ``process`` at the shipped config (four cameras) with and without the shipped head.

    Frames of the two kinds run in blocks of ``BLOCK`` (ABBA: without, with, with, without,
    ...; the first frame of each block untimed), on the same 131k-point cloud and camera maps:
    each kind in the steady state of a node that runs it, and a load change hits both. On the
    CPU one pipeline serves both kinds, the head paused for the frames without it
    (``BevPipeline.head_paused``): two pipelines, each with its own buffers and 11 MB of lift
    tables, read 1.5x or 2.0x from process to process on one tree, where the node runs one.
    Elsewhere a second pipeline without a head serves them: a head moves the BEV's output from
    pinned host memory to the device, which the frames without a head must not pay for. Frames
    taking turns one by one were timed before: a frame without the head ran 0.8-0.9 ms slower
    after another such frame than after one with the head (an independent review,
    2026-12-06), which a node without a head never escapes. Per kind: compute_ms (transfer,
    device, fetch of the BEV), head_ms (the head's executable after the BEV, the fetch and
    threshold of its K boxes), their sum per frame, and the whole process() time; the ratio of
    the sums' medians is the head's cost, target <= 1.30. On a GPU jaxlib the part runs on the
    GPU (``jax.devices()[0]``).
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
    one_pipeline = jax.devices()[0].platform == 'cpu'
    bev = pipe
    if not one_pipeline:
        bev = BevPipeline(config_from_parameters(bench_params(plan, 'shipped')))
        bev.warmup()
    kinds = ('bev', 'bev+head')
    samples = {name: {'compute': [], 'head': [], 'frame': [], 'total': []} for name in kinds}
    objects = []
    compiles = compile_count()
    blocks = 2 + 2 * -(-max(plan.reps * 4, 20) // (BLOCK - 1))      # 2 untimed, then ABBA
    for block in range(blocks):
        name = kinds[(block + 1) // 2 % 2]
        for frame in range(BLOCK):
            with pipe.head_paused() if one_pipeline and name == 'bev' else nullcontext():
                began = time.perf_counter()
                out = (pipe if name == 'bev+head' else bev).process(cloud, maps)
                elapsed = time.perf_counter() - began
            if block < 2 or frame == 0:   # warm-up, and the first frame after a switch
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
            'device': str(jax.devices()[0]), 'one_pipeline': one_pipeline, 'block': BLOCK,
            'compiles_during_frames': compiles}
