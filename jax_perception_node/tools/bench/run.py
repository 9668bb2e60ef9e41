"""
Entry points of ``jax-perception bench``: run the parts, or render a results JSON.

``run_benchmarks`` writes ``bench.md`` (tables), ``bench.png`` (plot) and the JSON, prints the
markdown and returns 0 when everything ran (1 when a peer disagrees with the pipeline or a
process fails, or, with ``check``, when a target is missed). ``render`` turns a committed JSON
(``docs/bench.json``) back into the same markdown, and checks its targets.
"""

import json
import os
from pathlib import Path
import shutil
import sys
import tempfile
import time

from jax_perception_node.tools import peers

from .common import BenchError, FULL, machine_info, QUICK, rounded, TINY
from .plot import plot
from .report import markdown, missed, targets

PARTS = ('fleet', 'recompile', 'pipeline', 'accumulation', 'head', 'lidar', 'images', 'ros',
         'device')


def run_benchmarks(quick: bool = False, json_path: str | None = None,
                   out_dir: str | os.PathLike = 'bench_out', tiny: bool = False,
                   use_torch: bool | None = None, parts: tuple[str, ...] | None = None,
                   check: bool = False) -> int:
    """
    Run the benchmarks and write ``bench.md``, ``bench.png`` and the JSON.

    quick: shorter runs (about 4 minutes on a 2-core CPU). tiny: the test's sizes (small grid,
    few frames). use_torch: None = when installed. parts: a subset of ``PARTS``; by default
    every part but 'device' (``bench --device`` runs that one alone), and in the tiny run also
    not 'fleet' (its test has its own). check: also return 1 when a target is missed, naming it.
    """
    plan = TINY if tiny else QUICK if quick else FULL
    parts = parts or (PARTS[1:8] if tiny else PARTS[:8])
    if use_torch is None:
        use_torch = peers.torch_available()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_file = Path(json_path) if json_path else out / 'bench.json'
    json_file.parent.mkdir(parents=True, exist_ok=True)
    logs = out / 'logs'
    logs.mkdir(exist_ok=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f'[bench {time.perf_counter() - started:6.1f} s] {message}', flush=True)

    results: dict = {'plan': plan.name, 'parts': list(parts), 'machine': machine_info(),
                     'errors': []}
    status = 0
    work = Path(tempfile.mkdtemp(prefix='jax_perception_bench_'))
    try:
        if 'fleet' in parts:
            # First: Ray starts its processes before this one has run JAX.
            from .fleet import fleet_benchmark
            from ..fleet import FleetError
            try:
                results['fleet'] = fleet_benchmark(quick)
            except FleetError as exc:
                raise BenchError(str(exc)) from None
        if 'recompile' in parts:
            from .recompile import bench_recompile
            results['recompile'] = bench_recompile(plan, log)
        if 'pipeline' in parts:
            from .pipeline_rows import bench_pipeline
            results['pipeline'] = bench_pipeline(plan, use_torch, log)
        if 'accumulation' in parts:
            from .accumulation import bench_accumulation
            results['accumulation'] = bench_accumulation(plan, log)
        if 'head' in parts:
            from .head import bench_head
            results['head'] = bench_head(plan, log)
        if 'lidar' in parts:
            from .lidar import bench_lidar
            results['lidar'] = bench_lidar(plan, log)
        if 'images' in parts:
            from .image_frames import bench_images
            results['images'] = bench_images(plan, use_torch, log)
        if 'ros' in parts:
            from .ros import bench_ros
            results.update(bench_ros(plan, work, logs, log))
        if 'device' in parts:
            from .device import bench_device
            results['device'] = bench_device(quick, log, tiny=tiny)
    except BenchError as exc:
        results['errors'].append(str(exc))
        print(f'bench: {exc}', file=sys.stderr)
        status = 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results['targets'] = targets(results)
    results['wall_s'] = rounded(time.perf_counter() - started, 1)
    json_file.write_text(json.dumps(results, indent=2) + '\n')
    report = markdown(results)
    (out / 'bench.md').write_text(report)
    png = plot(results, out / 'bench.png')
    print(report)
    print(f'wrote {out / "bench.md"}, {png or "(no plot)"}, {json_file} '
          f'in {results["wall_s"]} s')
    return status or _checked(results, check)


def render(json_path: str | os.PathLike, check: bool = False) -> int:
    """
    Print the markdown of a results JSON; with ``check``, 1 when a target is missed.

    BenchError for a file that is not one of ``bench``'s results (another JSON, a bag, text).
    """
    try:
        results = json.loads(Path(json_path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BenchError(f'--markdown {json_path}: not a bench results file '
                         f'({type(exc).__name__}: {exc})') from None
    if not isinstance(results, dict) or not {'plan', 'machine'} <= set(results):
        raise BenchError(f'--markdown {json_path}: not a bench results file (no plan and '
                         f'machine)')
    try:
        results['targets'] = targets(results)
        text = markdown(results)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError, StopIteration) as exc:
        # A results file edited by hand or cut short: name it, no traceback.
        raise BenchError(f'--markdown {json_path}: an incomplete bench results file '
                         f'({type(exc).__name__}: {exc})') from None
    print(text, end='')
    return _checked(results, check)


def _checked(results: dict, check: bool) -> int:
    names = missed(results)
    if check and names:
        print('bench --check: missed ' + '; '.join(names), file=sys.stderr)
        return 1
    return 0
