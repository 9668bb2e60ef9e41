"""
Part 'lidar': what deskew removes and costs, several LiDARs' cost, real drivers' decode.

``smear`` measures the smear a moving sweep leaves in the BEV and how much of it deskew takes
away: the synthetic drive rendered twice at the same stamp, once as the LiDAR really sweeps
(each column fired from where the vehicle then is) and once with every column fired at the
stamp (``instant_sweep``), compared cell by cell on everything but the moving traffic. The
test (test/tools/test_deskew_drive.py) and this part share it.
"""

import functools
import time
from typing import Callable

import jax
from jax_perception_node import BevPipeline
from jax_perception_node.core import kernels
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.geometry.ego_motion import deskew_motion
from jax_perception_node.settings.config import config_from_parameters, PipelineConfig
import numpy as np

from .common import (balanced_rounds, bench_params, HEADLINE_POINTS, Plan, rounded, summary_ms,
                     xyzi)

SMEAR_SPEED = 20.0       # m/s, the drive
# Around a moving vehicle, in m: its own motion over a sweep (up to ~2.5 m at 25 m/s), which
# the ego's deskew cannot and should not remove.
TRAFFIC_MARGIN_M = (3.5, 1.0)
GROUND_CLEARANCE_M = 0.3
SMEAR_TIMES = (2.0, 5.0, 8.0, 20.0)     # s into the drive: farmland, town, underpass, town


def traffic_mask(drive, t: float, cfg: PipelineConfig) -> np.ndarray:
    """bool[H, W]: the cells near moving traffic at time t (left out of the smear count)."""
    boxes, ids = drive.ground_truth(t, min_points=1)
    g = cfg.grid
    rows = g.x_min + (np.arange(g.height) + 0.5) * g.resolution
    cols = g.y_min + (np.arange(g.width) + 0.5) * g.resolution
    mask = np.zeros((g.height, g.width), bool)
    for box, name in zip(boxes, ids):
        if not name.startswith('lane'):
            continue
        half = max(box[3], box[4]) / 2.0
        near_x = np.abs(rows - box[0]) <= half + TRAFFIC_MARGIN_M[0]
        near_y = np.abs(cols - box[1]) <= half + TRAFFIC_MARGIN_M[1]
        mask |= near_x[:, None] & near_y[None, :]
    return mask


def above_ground(points: np.ndarray, lidar) -> np.ndarray:
    """Return the points of a sweep more than ``GROUND_CLEARANCE_M`` above the ground."""
    xyz = np.stack([points['x'], points['y'], points['z']], axis=1).astype(np.float64)
    z = xyz @ lidar.rotation_matrix()[2] + lidar.translation[2]
    return points[z > GROUND_CLEARANCE_M]


def smeared(occupied: np.ndarray, want: np.ndarray) -> np.ndarray:
    """
    bool[H, W]: cells occupied in one grid and with no occupied cell within one in the other.

    A wall seen from two places along the road is hit at other spots (a few centimetres
    apart, but across a cell edge as often as not): the one-cell tolerance leaves that
    sampling out and keeps the smear, which at 20 m/s moves returns up to 2 m (5 cells).
    """
    def near(grid):
        padded = np.pad(grid, 1)
        h, w = grid.shape
        return np.any([padded[i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=0)
    return (occupied & ~near(want)) | (want & ~near(occupied))


def smear(pipe: BevPipeline, times: tuple[float, ...] = SMEAR_TIMES,
          speed: float = SMEAR_SPEED) -> dict:
    """
    Occupied cells that differ from the instant sweep's, before and after deskew, at ``speed``.

    Summed over the sweeps at ``times`` (s into the drive). The ego drives straight ahead
    (heading 0), so its twist is (speed, 0, 0, 0, 0, 0). Only returns above the ground count,
    and cells near moving traffic or the grid's x edges are left out: what is left is the
    static scene (walls, poles, parked cars, buildings). Returns the counts, ``removed`` =
    1 - after / before and ``removed_above_floor`` = (before - after) / (before - floor), the
    share of the smear any deskew could remove: the floor is what two exact sweeps from poses
    half a rotation apart still disagree on (other faces and roof lines of the same objects).
    """
    from jax_perception_node.tools.synthetic_drive import SyntheticDrive
    cfg = pipe.cfg
    drives = (SyntheticDrive(cfg, num_cameras=0, ego_speed=speed),
              SyntheticDrive(cfg, num_cameras=0, ego_speed=speed, instant_sweep=True))
    counts = np.sum([_smear_at(pipe, drives, t, speed) for t in times], axis=0)
    before, after, floor, points, occupied, left_out, deskewed = (int(c) for c in counts)
    return {'speed_m_s': speed, 'times_s': list(times), 'points': points,
            'occupied': occupied, 'differing_cells_measured': before,
            'differing_cells_deskewed': after, 'parallax_floor_cells': floor,
            'removed': rounded(1.0 - after / max(before, 1)),
            'removed_above_floor': rounded((before - after) / max(before - floor, 1)),
            'deskewed_frames': deskewed, 'cells_left_out': left_out}


def _smear_at(pipe: BevPipeline, drives, t: float, speed: float) -> tuple[int, ...]:
    """(before, after, floor, points, occupied, cells left out, deskewed) of one stamp."""
    real, instant = drives
    cfg, lidar = pipe.cfg, pipe.lidar_poses[0]
    # Objects only: flat ground looks the same from anywhere along the road (its returns sit
    # at the same place in the LiDAR frame), so its cells tell nothing about smear.
    swept, frozen = (above_ground(d.lidar_frame(t), lidar) for d in drives)
    motion = deskew_motion(np.array([speed, 0.0, 0.0, 0.0, 0.0, 0.0]), lidar.rotation_matrix(),
                           np.asarray(lidar.translation))
    want = pipe.process(xyzi(frozen)).features[..., 0] > 0
    measured = pipe.process(xyzi(swept)).features[..., 0] > 0
    deskewed = pipe.process(xyzi(swept), times=swept['time'], motion=motion)
    # The floor: the instant sweep half a rotation later (from where the vehicle is mid-sweep),
    # moved exactly back to the stamp.
    half = 0.5 / real.lidar.rotation_hz
    moved = xyzi(above_ground(instant.lidar_frame(t + half), lidar))
    moved[:, :3] += lidar.rotation_matrix().T @ np.array([speed * half, 0.0, 0.0])
    parallax = pipe.process(moved).features[..., 0] > 0
    static = ~traffic_mask(instant, t, cfg) & ~traffic_mask(instant, t + half, cfg)
    # Along the grid's x edges returns cross in or out as they move (up to speed x one
    # rotation): no smear, but what one grid holds and the other does not.
    edge = int(np.ceil(speed / real.lidar.rotation_hz / cfg.grid.resolution)) + 1
    static[:edge], static[-edge:] = False, False
    return (int((static & smeared(measured, want)).sum()),
            int((static & smeared(deskewed.features[..., 0] > 0, want)).sum()),
            int((static & smeared(parallax, want)).sum()), len(swept), int(want.sum()),
            int((~static).sum()), int(deskewed.deskewed))


def bench_lidar(plan: Plan, log: Callable[[str], None]) -> dict:
    """
    Deskew's smear removal and cost, and the decode of real drivers' layouts.

    Cost: the frame executable with deskew against the same frame function built without it
    (``FrameArgs.times`` None), both compiled alike and called in turn on one padded cloud of
    the headline size (LiDAR only), with the deskew motion on.
    """
    cfg = config_from_parameters(bench_params(plan, 0))
    pipe = BevPipeline(cfg)
    pipe.warmup()
    result = {'smear': smear(pipe)}
    s = result['smear']
    log(f'lidar: at {s["speed_m_s"]} m/s deskew removes {s["removed"]:.0%} of the smear '
        f'({s["differing_cells_measured"]} -> {s["differing_cells_deskewed"]} cells)')
    result['deskew_cost'] = _deskew_cost(pipe, plan)
    cost = result['deskew_cost']
    log(f'lidar: deskew costs {cost["ratio"]}x the frame without it '
        f'({cost["with_ms"]["p50"]} vs {cost["without_ms"]["p50"]} ms)')
    result['three_lidars'] = three_lidars_cost(pipe, plan)
    cost = result['three_lidars']
    log(f'lidar: three LiDARs cost {cost["ratio"]}x one of the same points (executable), '
        f'{cost["frame_ratio"]}x with decode')
    from .decode import decode_rows
    sizes = ({'points': 600, 'rounds': 2, 'inner': 1, 'rings': 8} if plan.tiny
             else {'points': 100_000, 'rounds': 15, 'inner': 5})
    result['decode'] = {'rows': decode_rows(**sizes)}
    worst = max(result['decode']['rows'], key=lambda r: r['ratio'])
    log(f'lidar: decode of {len(result["decode"]["rows"]) - 2} driver layouts, slowest '
        f'{worst["layout"]} at {worst["ratio"]}x the plain layout')
    return result


def _deskew_cost(pipe: BevPipeline, plan: Plan) -> dict:
    from .common import Inputs
    cfg = pipe.cfg
    n = min(HEADLINE_POINTS, cfg.buckets[-1])
    records = Inputs(cfg).records(n)
    padded = pipe.padder.pad(xyzi(records), np.ascontiguousarray(records['time'], np.float32))
    motion = deskew_motion(np.array([SMEAR_SPEED, 0, 0, 0, 0, 0.3]), np.eye(3), np.zeros(3))
    args = pipe.frame_args(padded.buffer, padded.count, padded.times, motion)
    frame = jax.jit(functools.partial(kernels.bev_frame, height=pipe.height, width=pipe.width,
                                      activation=cfg.fusion.activation))
    variants = {'with': (frame.lower(args).compile(), args),
                'without': (frame.lower(args._replace(times=None)).compile(),
                            args._replace(times=None))}
    samples = {name: [] for name in variants}
    compiles = compile_count()
    for k in range(max(plan.reps * 10, 20)):
        # Alternated, each going first every other round: neither rides on the other's cache.
        for name in sorted(variants, reverse=bool(k % 2)):
            run, call = variants[name]
            began = time.perf_counter()
            jax.block_until_ready(run(call))
            samples[name].append(time.perf_counter() - began)
    with_ms, without_ms = summary_ms(samples['with']), summary_ms(samples['without'])
    return {'points': n, 'bucket': padded.bucket, 'with_ms': with_ms, 'without_ms': without_ms,
            'ratio': rounded(with_ms['p50'] / without_ms['p50'], 3),
            'compiles_during_calls': compile_count() - compiles}


# The three-LiDAR rig's split of a frame's points: the top LiDAR, then the two side ones.
THREE_SHARES = (0.6, 0.2, 0.2)


def three_lidars_cost(single: BevPipeline, plan: Plan) -> dict:
    """
    Time a frame of three LiDARs against one LiDAR's frame of the same total points.

    The same headline cloud, split 60/20/20 into the three-LiDAR rig's clouds (as PointCloud2
    messages in their own frames), against that cloud as one LiDAR's. Two numbers: the frame
    executable alone (one bucket; the three-LiDAR one moves each row by its own pose), and the
    whole frame path (decode of one message or of three into one bucket, the executable, the
    result fetched). The four take turns in ``balanced_rounds``' orders: none runs twice in a
    row, each right after every other equally often.
    """
    from jax_perception_node.bags.bagio import TYPESTORE
    from jax_perception_node.frames.frame_path import FramePath
    from jax_perception_node.frames.lidar_sets import LidarSet
    from jax_perception_node.tools.cloud_messages import point_cloud
    from jax_perception_node.tools.synthetic_drive import lidar_rig, sensor_model
    from .common import Inputs
    mounts = lidar_rig('three', single.cfg, sensor_model())
    params = {**bench_params(plan, 0), 'lidars.names': [m.name for m in mounts]}
    for m in mounts:
        params[f'lidars.{m.name}.translation'] = list(m.pose.translation)
        params[f'lidars.{m.name}.rotation_xyzw'] = list(m.pose.rotation_xyzw)
    three = BevPipeline(config_from_parameters(params))
    three.warmup()
    n = min(HEADLINE_POINTS, single.cfg.buckets[-1])
    points = xyzi(Inputs(single.cfg).records(n))
    ends = np.cumsum([int(n * share) for share in THREE_SHARES[:-1]]).tolist()
    fields = tuple((name, 4 * k, 7) for k, name in enumerate(('x', 'y', 'z', 'intensity')))

    def cloud(part, frame_id):
        return point_cloud(TYPESTORE.types, np.ascontiguousarray(part), fields, len(part), 16,
                           1, frame_id, is_dense=True)
    # The same points in both: the side LiDARs' parts are moved into their own frames, so the
    # two frames put every point in the same cell (equal BEVs, the same scatter work).
    parts = [part if m is mounts[0] else _into_frame(part, mounts[0].pose, m.pose)
             for m, part in zip(mounts, np.split(points, ends))]
    one = cloud(points, single.cfg.lidar_frame_id)
    clouds = {m.name: cloud(part, m.frame_id) for m, part in zip(mounts, parts)}
    lidar_set = LidarSet(clouds, dict.fromkeys(clouds, 1), 1, (), 0.0)
    paths = {'one': FramePath(single.cfg, single), 'three': FramePath(three.cfg, three)}
    padded = {'one': single.padder.pad(points),
              'three': three.padder.pad(np.concatenate(parts))}
    args = {'one': single.frame_args(padded['one'].buffer, n),
            'three': three.frame_args(padded['three'].buffer, n, starts=tuple(ends))}
    runs = {
        'one': lambda: single.executable(padded['one'].bucket)(args['one']),
        'three': lambda: three.executable(padded['three'].bucket)(args['three']),
        # FramePath.process returns once the result (the BEV: features=True) is on the host.
        'one_frame': lambda: paths['one'].process(one, False, True).result.bucket,
        'three_frame': lambda: paths['three'].process(lidar_set, False, True).result.bucket}
    samples = {name: [] for name in runs}
    names, orders = list(runs), balanced_rounds(len(runs))
    compiles = compile_count()
    # Sorted names, reversed every other round, ran 'one' (the ratio's denominator) right
    # after itself every other round and 'three' never: the ratio read ~0.07 high that way.
    rounds = -(-max(plan.reps * 10, 20) // len(orders)) * len(orders)     # whole cycles
    for k in range(-1, rounds):     # round -1: untimed, the last order's
        for name in (names[i] for i in orders[k % len(orders)]):
            began = time.perf_counter()
            jax.block_until_ready(runs[name]())
            if k >= 0:
                samples[name].append(time.perf_counter() - began)
    ms = {name: summary_ms(values) for name, values in samples.items()}
    return {'points': n, 'split': [int(len(p)) for p in parts], 'bucket': padded['one'].bucket,
            'one_ms': ms['one'], 'three_ms': ms['three'],
            'ratio': rounded(ms['three']['p50'] / ms['one']['p50'], 3),
            'one_frame_ms': ms['one_frame'], 'three_frame_ms': ms['three_frame'],
            'frame_ratio': rounded(ms['three_frame']['p50'] / ms['one_frame']['p50'], 3),
            'order': 'balanced',    # balanced_rounds (runs before 2026-12-07: sorted, mirrored)
            # cells occupied in one BEV only: the same points (moved in float32, a point on a
            # cell edge may cross it)
            'cells_differing': int(np.sum(np.not_equal(*(np.asarray(runs[k]())[..., 0]
                                                         for k in ('one', 'three'))))),
            'compiles_during_calls': compile_count() - compiles}


def _into_frame(points: np.ndarray, source, target) -> np.ndarray:
    """Move float32 (N, 4) points from the frame at pose ``source`` to the one at ``target``."""
    grid = points[:, :3] @ source.rotation_matrix().T + np.asarray(source.translation)
    moved = (grid - np.asarray(target.translation)) @ target.rotation_matrix()
    return np.concatenate([moved, points[:, 3:]], axis=1).astype(np.float32)
