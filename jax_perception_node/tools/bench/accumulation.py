"""Part 'accumulation': the frame cost with 1, 3 and 5 sweeps per frame, side by side."""

import time
from typing import Callable

from jax_perception_node import BevPipeline
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.geometry.rotations import pose_matrix
from jax_perception_node.settings.config import config_from_parameters
import numpy as np

from .common import bench_params, Inputs, Plan, rounded, summary_ms, SWEEP_T0, xyzi

SWEEP_COUNTS = (1, 3, 5)
SWEEP_PERIOD_S = 0.1


def bench_accumulation(plan: Plan, log: Callable[[str], None]) -> dict:
    """
    Time ``process`` on consecutive synthetic sweeps at the shipped config with 1, 3 and 5 sweeps.

    The three pipelines take turns on every sweep (interleaved, so a load change hits them
    alike), each fed the sweep's stamp and the ego pose at that stamp (the drive's odometry).
    The first four sweeps fill the rings and are not timed. Per row: process() and device time,
    the points voxelized per frame (current + earlier sweeps), occupied cells, sweeps used, and
    the process-wide compiles during the timed frames (must stay 0).
    """
    configs = {s: config_from_parameters({**bench_params(plan, 'shipped'),
                                          'accumulation.num_sweeps': s}) for s in SWEEP_COUNTS}
    cfg = configs[1]
    inputs = Inputs(cfg)
    maps = inputs.camera_maps(cfg)
    fill = max(SWEEP_COUNTS) - 1
    frames = fill + max(plan.reps, 3)
    times = [SWEEP_T0 + k * SWEEP_PERIOD_S for k in range(frames)]
    clouds = [xyzi(inputs.sweep(t)) for t in times]
    if plan.tiny:
        from jax_perception_node.sensors.cloud import keep_rows
        clouds = [c[keep_rows(len(c), min(len(c), cfg.buckets[-1] // 2), 'subsample')]
                  for c in clouds]
    # The drive's odometry: base_link at the ego position, heading 0, in the world frame.
    poses = [pose_matrix(np.eye(3), inputs.drive.ego_position(t)) for t in times]
    log(f'accumulation: {len(clouds)} sweeps of {min(map(len, clouds))}..'
        f'{max(map(len, clouds))} points, sweeps per frame {list(SWEEP_COUNTS)}')
    pipes, warmup_s = {}, {}
    for s, c in configs.items():
        began = time.perf_counter()
        pipes[s] = BevPipeline(c)
        pipes[s].warmup()
        warmup_s[s] = time.perf_counter() - began
    samples = {s: {'total': [], 'device': [], 'points': [], 'occupied': [], 'used': []}
               for s in SWEEP_COUNTS}
    history: dict[int, list[int]] = {s: [] for s in SWEEP_COUNTS}
    compiles = compile_count()
    for k, (t, cloud, pose) in enumerate(zip(times, clouds, poses)):
        stamp = int(round(t * 1e9))
        for s, pipe in pipes.items():
            began = time.perf_counter()
            out = pipe.process(cloud, maps, stamp_ns=stamp, pose=pose)
            elapsed = time.perf_counter() - began
            history[s].append(len(cloud))
            if k < fill:
                continue
            row = samples[s]
            row['total'].append(elapsed)
            row['device'].append(out.device_ms * 1e-3)
            row['points'].append(sum(history[s][-out.sweeps_used:]))
            row['occupied'].append(int((out.features[..., 0] > 0).sum()))
            row['used'].append(out.sweeps_used)
    compiles = compile_count() - compiles
    base = summary_ms(samples[1]['total'])
    rows = []
    for s in SWEEP_COUNTS:
        row = samples[s]
        total = summary_ms(row['total'])
        rows.append({
            'sweeps': s, 'frames': len(row['total']), 'frame_ms': total,
            'device_ms': summary_ms(row['device']),
            'points_per_frame': int(np.mean(row['points'])),
            'ring_points': (s - 1) * cfg.buckets[-1],
            'occupied_cells': int(np.mean(row['occupied'])),
            'sweeps_used_min': min(row['used']),
            'x_vs_1_sweep': rounded(total['p50'] / base['p50'], 2),
            'output_channels': pipes[s].output_channels,
            'warmup_s': rounded(warmup_s[s]),
        })
        log(f'accumulation: {s} sweeps p50 {total["p50"]} ms, device '
            f'{rows[-1]["device_ms"]["p50"]} ms, {rows[-1]["points_per_frame"]} points, '
            f'{rows[-1]["occupied_cells"]} occupied cells')
    return {'rows': rows, 'compiles_during_frames': compiles, 'buckets': list(cfg.buckets),
            'cameras': len(cfg.cameras), 'grid': [cfg.grid.height, cfg.grid.width],
            'sweep_t0_s': SWEEP_T0}
