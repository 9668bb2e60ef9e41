"""
Part 6, ``jax-perception bench --device``: the core on whatever ``jax.devices()`` offers.

Against PyTorch on the same device (CUDA when JAX runs on an NVIDIA GPU and torch sees one).

Per row (cloud size x camera rig): end-to-end time of ``BevPipeline.process`` (pad, transfer,
compute, fetch) and of the PyTorch peer's ``process`` (upload, compute, download), device-only
time of each (inputs already on the device, synchronised), the pipeline's stage breakdown, and
both outputs checked against the NumPy peer first. The camera maps change every frame (two
sets alternate), so the camera batch crosses to the device each time, as it does live.
"""

import time
from typing import Callable

from jax_perception_node import BevPipeline
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.tools import peers
import numpy as np

from .checks import border_cells, check_equal, edge_cells
from .common import bench_params, FULL, Inputs, rounded, summary_ms, TINY

SIZES = (32768, 65536, 131072, 262144)
CAMERAS = (0, 1, 6)


def bench_device(quick: bool, log: Callable[[str], None], tiny: bool = False) -> dict:
    """Run the accelerator rows; returns a JSON-ready dict (rows, device, versions)."""
    import jax
    device = jax.devices()[0]
    torch_device = _torch_device(device.platform)
    plan = TINY if tiny else FULL
    sizes = plan.sizes if tiny else (SIZES[::2] if quick else SIZES)
    cameras = plan.camera_counts if tiny else CAMERAS
    reps = 3 if tiny else 20 if quick else 50
    base = Inputs(config_from_parameters(bench_params(plan, 0)))
    clouds = {n: base.points(n) for n in sizes}
    rows = []
    for num_cameras in cameras:
        cfg = config_from_parameters(bench_params(plan, num_cameras, buckets=sizes))
        maps = base.camera_maps(cfg)
        other = {k: v + np.float32(0.5) for k, v in maps.items()}
        pipe = BevPipeline(cfg)
        pipe.warmup()
        numpy_peer = peers.NumpyBev(cfg)
        torch_peer = None if torch_device is None else peers.TorchBev(cfg, device=torch_device)
        border = border_cells(cfg, pipe.lift_samples)
        for n in sizes:
            row = _row(pipe, numpy_peer, torch_peer, clouds[n], (maps, other), border, reps)
            row.update(points=n, cameras=num_cameras)
            rows.append(row)
            log(f'device: {n} points, {num_cameras} cameras: jax {row["jax_e2e_ms"]["p50"]} / '
                f'{row["jax_device_ms"]["p50"]} ms, torch '
                f'{(row["torch_e2e_ms"] or {}).get("p50")} / '
                f'{(row["torch_device_ms"] or {}).get("p50")} ms (end to end / device)')
        del pipe
    torch_version = None
    if torch_device is not None:
        import torch
        torch_version = torch.__version__
    compared = [r for r in rows if r['torch_e2e_ms']]
    return {
        'device': {'platform': device.platform, 'kind': device.device_kind,
                   'jax': jax.__version__, 'torch': torch_version, 'torch_device': torch_device},
        'rows': rows, 'reps': reps,
        'faster_than_torch_everywhere': (all(r['jax_e2e_ms']['p50'] < r['torch_e2e_ms']['p50']
                                             for r in compared) if compared else None),
        'max_cells_differing': max(r['cells_differing'] for r in rows),
    }


def _torch_device(platform: str) -> str | None:
    """Pick the torch device on the same hardware as JAX; None without PyTorch (or CUDA)."""
    if not peers.torch_available():
        return None
    import torch
    if platform == 'gpu':
        return 'cuda' if torch.cuda.is_available() else None
    return 'cpu' if platform == 'cpu' else None


def _row(pipe, numpy_peer, torch_peer, points, map_sets, border, reps: int) -> dict:
    import jax
    maps = map_sets[0]
    expected = numpy_peer.process(points, maps)
    exempt = edge_cells(pipe.cfg, points)
    if border is not None:
        exempt |= border
    result = pipe.process(points, maps)
    differing = check_equal('jax (device)', result.features, expected, exempt)
    if torch_peer is not None:
        differing = max(differing, check_equal(
            'torch (device)', torch_peer.process(points, maps), expected, exempt))

    results = []
    e2e = _timed(lambda k: results.append(pipe.process(points, map_sets[k % 2])), reps)
    padded = pipe.padder.pad(points)
    args = jax.device_put(pipe.frame_args(padded.buffer, padded.count))
    run = pipe.executable(padded.bucket)
    device_only = _timed(lambda k: run(args).block_until_ready(), reps)
    row = {
        'bucket': padded.bucket, 'cells_differing': differing,
        'jax_e2e_ms': summary_ms(e2e), 'jax_device_ms': summary_ms(device_only),
        'jax_stages_p50_ms': {s: rounded(np.median([getattr(r, f'{s}_ms') for r in results]))
                              for s in ('pad', 'transfer', 'device', 'fetch')},
        'torch_e2e_ms': None, 'torch_device_ms': None,
    }
    if torch_peer is not None:
        sync = _synchronize(torch_peer)
        row['torch_e2e_ms'] = summary_ms(_timed(
            lambda k: torch_peer.process(points, map_sets[k % 2]), reps))
        uploaded = torch_peer.upload(points, maps)
        row['torch_device_ms'] = summary_ms(_timed(
            lambda k: (torch_peer.compute(*uploaded), sync()), reps))
        row['speedup_e2e_vs_torch'] = rounded(
            row['torch_e2e_ms']['p50'] / row['jax_e2e_ms']['p50'], 2)
    return row


def _synchronize(torch_peer) -> Callable[[], None]:
    torch = torch_peer.torch
    if torch_peer.device.type == 'cuda':
        return torch.cuda.synchronize
    return lambda: None


def _timed(fn: Callable[[int], object], reps: int) -> list[float]:
    """Seconds per call, after one untimed call."""
    fn(1)
    out = []
    for k in range(reps):
        began = time.perf_counter()
        fn(k)
        out.append(time.perf_counter() - began)
    return out
