"""
Parts 3-5: end to end through ROS, start-up and memory, each node its own process.

Publisher -> node -> subscriber over loopback DDS at several rates, against the transport floor
of an echo node; start-up with an empty and a warm executable store; RSS after one cloud per
bucket. The helper processes live in ``ros_processes.py``.
"""

import json
from pathlib import Path
import re
import shutil
import subprocess
import time
from typing import Callable

from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.param_file import write_param_file
from jax_perception_node.tools.processes import console_script, local_ros_env, stop_process
import numpy as np

from .common import (bench_params, BenchError, DROP_LIMIT_PCT, Inputs, MAIN_ROS_RATE_HZ, Plan,
                     ROS_SWEEP_T, rounded)
from .ros_stats import parse_warmup_log, peak_rate, stream_stats


class RosBench:
    """
    Runs the node, the echo node and the helper processes; stops every one of them on exit.

    ``work`` holds params files, the compilation cache, inputs and helper outputs; node and
    helper logs go to ``logs``.
    """

    def __init__(self, plan: Plan, work: Path, logs: Path, log: Callable[[str], None]):
        self.plan, self.work, self.logs, self.log = plan, work, logs, log
        self.env = local_ros_env()
        self.procs: list[subprocess.Popen] = []
        self._files = []
        self.cache_dir = work / 'xla_cache'
        self.params = bench_params(plan, 'shipped', cache_dir=str(self.cache_dir))
        self.cfg = config_from_parameters(dict(self.params, compilation_cache_dir=''))
        self.params_file = write_param_file(self.params, work / 'node.param.yaml')
        self.probe = None

    def __enter__(self):
        """Start the in-process probe."""
        from .probe import Probe
        self.probe = Probe()
        return self

    def __exit__(self, *exc):
        """Stop every process this run started (SIGINT, then kill) and the probe."""
        for proc in reversed(self.procs):
            stop_process(proc)
        for handle in self._files:
            handle.close()
        if self.probe is not None:
            self.probe.close()
        return False

    def spawn(self, argv: list[str], log_name: str) -> subprocess.Popen:
        """Start a process with the ROS environment, output to ``logs/log_name``."""
        handle = open(self.logs / log_name, 'w')
        self._files.append(handle)
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        """Stop one process now (SIGINT, then kill)."""
        stop_process(proc)

    def wait_gone(self) -> None:
        """Wait until no stopped node's cloud subscription is visible any more."""
        from .probe import GONE_TIMEOUT_S
        if not self.probe.wait_gone():
            raise BenchError('a stopped node still subscribes to the cloud topic after '
                             f'{GONE_TIMEOUT_S:g} s; '
                             'is another node running in this ROS domain?')

    def node_argv(self) -> list[str]:
        """Return the node's console script with the benchmark's params file."""
        return [console_script('jax_perception_node'), '--ros-args', '--params-file',
                str(self.params_file)]

    def start_node(self, log_name: str) -> tuple[subprocess.Popen, float, float]:
        """
        Spawn the node and wait until it subscribes; returns (process, ready s, discovered s).

        ready: spawn to the node's own 'ready:' log line (its wall-clock stamp; printed right
        after the subscriptions are created), so DDS discovery delays do not count;
        discovered: spawn to this process seeing the cloud subscription (discovery included,
        which now and then adds a second or more).
        """
        self.wait_gone()
        spawned_wall = time.time()
        began = time.perf_counter()
        proc = self.spawn(self.node_argv(), log_name)
        try:
            discovered = self.probe.wait_ready(proc, timeout_s=180.0) - began
        except RuntimeError as exc:
            raise BenchError(f'{exc}; see {self.logs / log_name}') from None
        ready = None
        deadline = time.monotonic() + 3.0
        while ready is None and time.monotonic() < deadline:
            match = re.search(r'\[([0-9]+\.[0-9]+)\] \[jax_perception\]: ready:',
                              (self.logs / log_name).read_text())
            if match:
                ready = float(match.group(1)) - spawned_wall
            else:
                time.sleep(0.02)
        return proc, discovered if ready is None else ready, discovered

    # -- part 4 ----------------------------------------------------------------------------------

    def startup(self) -> tuple[dict, subprocess.Popen]:
        """Cold (empty cache) and warm start-up (s); returns the warm node, still running."""
        if self.cache_dir.exists():
            shutil.rmtree(self.cache_dir)
        cold_proc, cold_s, cold_seen = self.start_node('node_cold.log')
        self.stop(cold_proc)
        warm_proc, warm_s, warm_seen = self.start_node('node_warm.log')
        self.log(f'start-up: cold {cold_s:.2f} s, warm {warm_s:.2f} s (seen by a subscriber '
                 f'after {cold_seen:.2f} s and {warm_seen:.2f} s)')
        return {
            'cold_s': rounded(cold_s), 'warm_s': rounded(warm_s),
            'warm_over_cold': rounded(warm_s / cold_s),
            'cold_discovered_s': rounded(cold_seen), 'warm_discovered_s': rounded(warm_seen),
            'cold_warmup': parse_warmup_log((self.logs / 'node_cold.log').read_text()),
            'warm_warmup': parse_warmup_log((self.logs / 'node_warm.log').read_text()),
            'definition': "spawn of the node process to its 'ready:' log line (subscriptions "
                          'created, after warm-up); *_discovered_s: until another process '
                          'sees the subscription (adds DDS discovery)',
        }, warm_proc

    def startup_profile(self) -> dict | None:
        """Per-step warm start-up breakdown from the ``startup-profile`` helper (s)."""
        from .ros_processes import helper_command
        out = self.work / 'startup_profile.json'
        proc = self.spawn(helper_command('startup-profile', '--params', str(self.params_file),
                                         '--cache', str(self.cache_dir), '--out', str(out)),
                          'startup_profile.log')
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.stop(proc)
        if proc.returncode != 0 or not out.exists():
            self.log(f'start-up profile failed; see {self.logs / "startup_profile.log"}')
            return None
        return json.loads(out.read_text())

    # -- part 5 ----------------------------------------------------------------------------------

    def memory(self, node: subprocess.Popen, inputs: 'Inputs') -> dict:
        """RSS and peak RSS (VmHWM, MiB) of the node when ready and after a cloud per bucket."""
        import psutil
        proc = psutil.Process(node.pid)
        rows = [{'bucket': None, 'points': 0, **_rss(proc)}]
        for bucket in self.cfg.buckets:
            n = max(1, bucket - 1)
            try:
                record = self.probe.process_cloud(_raw(inputs.records(n, ROS_SWEEP_T)), n)
            except RuntimeError as exc:
                raise BenchError(f'memory: {exc}; see {self.logs / "node_warm.log"}') from None
            rows.append({'bucket': bucket, 'points': n,
                         'bucket_used': int(record.get('bucket', -1)), **_rss(proc)})
        self.log('memory: ' + ', '.join(f'{r["bucket"]}: {r["rss_mib"]} MiB' for r in rows))
        return {'rows': rows, 'peak_rss_mib': max(r['hwm_mib'] for r in rows),
                'note': 'RSS after the node processed one cloud just under each bucket '
                        '(cameras masked); hwm = VmHWM, the peak since the process started '
                        '(compiles included).'}

    # -- part 3 ----------------------------------------------------------------------------------

    def stream(self, kind: str, schedule: list[tuple[str, float, float]], inputs_file: Path) \
            -> dict:
        """Run publisher and subscriber processes around whatever serves the node's topics."""
        from .ros_processes import helper_command
        done, ready = self.work / f'{kind}.done', self.work / f'{kind}.ready'
        sub_out, pub_out = self.work / f'{kind}_sub.json', self.work / f'{kind}_pub.json'
        for path in (done, ready, sub_out, pub_out):
            path.unlink(missing_ok=True)
        sub = self.spawn(helper_command('subscribe', '--out', str(sub_out), '--until', str(done),
                                        '--ready', str(ready)), f'{kind}_subscriber.log')
        text = ','.join(f'{label}:{rate:g}:{seconds:g}' for label, rate, seconds in schedule)
        pub = self.spawn(helper_command('publish', '--inputs', str(inputs_file), '--schedule',
                                        text, '--out', str(pub_out), '--gap',
                                        str(self.plan.ros_gap_s), '--warmup',
                                        str(self.plan.ros_warmup_s), '--ready', str(ready)),
                         f'{kind}_publisher.log')
        budget = sum(s for _, _, s in schedule) + 2.0 * len(schedule) + 90.0
        try:
            pub.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            self.stop(pub)
        done.touch()
        try:
            sub.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.stop(sub)
        if pub.returncode != 0 or not pub_out.exists() or not sub_out.exists():
            raise BenchError(f'ROS {kind} run failed; see {self.logs}/{kind}_*.log')
        return stream_stats(json.loads(pub_out.read_text()), json.loads(sub_out.read_text()))

    def start_echo(self, log_name: str) -> subprocess.Popen:
        """Spawn the echo node (the transport floor) and wait until it subscribes."""
        self.wait_gone()
        echo = self.spawn(self.echo_argv(), log_name)
        try:
            self.probe.wait_ready(echo, timeout_s=60.0, what='echo node')
        except RuntimeError as exc:
            raise BenchError(f'{exc}; see {self.logs / log_name}') from None
        return echo

    def overhead_run(self, run: int, schedule, inputs_file: Path) -> list[dict]:
        """One more node stream and floor stream (``schedule``: the main rate): their rows."""
        self.log(f'ROS: overhead run {run + 1} of {self.plan.overhead_runs} (node, then floor)')
        node, _, _ = self.start_node(f'node_run{run + 1}.log')
        node_rows = self.stream(f'node_run{run + 1}', schedule, inputs_file)
        self.stop(node)
        echo = self.start_echo(f'echo_run{run + 1}.log')
        floor_rows = self.stream(f'floor_run{run + 1}', schedule, inputs_file)
        self.stop(echo)
        return _with_overhead(schedule, node_rows, floor_rows)

    def echo_argv(self) -> list[str]:
        """Return the echo helper's command line, sized like the node's output."""
        from .ros_processes import helper_command
        g = self.cfg.grid
        return helper_command('echo', '--height', str(g.height), '--width', str(g.width),
                              '--channels', str(self.cfg.fused_channels), '--cameras',
                              ','.join(c.name for c in self.cfg.cameras))


def _raw(records: np.ndarray) -> np.ndarray:
    """
    Structured points -> their bytes (uint8) in the driver layout, as a PointCloud2 carries them.

    Copied field by field into ``synthetic_drive.POINT_DTYPE``: concatenating sweeps packs the
    dtype (drops its padding), which would no longer match the advertised point_step.
    """
    from jax_perception_node.tools.synthetic_drive import POINT_DTYPE
    out = np.zeros(len(records), POINT_DTYPE)
    for name in POINT_DTYPE.names:
        out[name] = records[name]
    return out.view(np.uint8).reshape(-1)


def _rss(proc) -> dict:
    """RSS now and VmHWM (peak RSS) of a process, MiB."""
    rss = proc.memory_info().rss / 2**20
    hwm = None
    try:
        status = Path(f'/proc/{proc.pid}/status').read_text()
        match = re.search(r'VmHWM:\s+(\d+) kB', status)
        hwm = int(match.group(1)) / 1024 if match else None
    except OSError:
        pass
    return {'rss_mib': rounded(rss, 1), 'hwm_mib': rounded(hwm if hwm is not None else rss, 1)}


def bench_ros(plan: Plan, work: Path, logs: Path, log: Callable[[str], None]) -> dict:
    """
    Parts 3-5 with one node process per start: start-up, memory, streams through node and echo.

    Returns {'startup': ..., 'memory': ..., 'ros': ...}.
    """
    from .ros_processes import save_inputs
    rates = sorted(set(plan.ros_rates) | set(plan.peak_rates))
    schedule = [(f'{rate:g}hz', rate, plan.ros_seconds if rate in plan.ros_rates
                 else plan.peak_seconds) for rate in rates]
    floor_schedule = [(f'{rate:g}hz', rate, plan.ros_seconds) for rate in plan.ros_rates]
    with RosBench(plan, work, logs, log) as rb:
        inputs = Inputs(rb.cfg)
        sweep = inputs.sweep(ROS_SWEEP_T)
        records = sweep if plan.ros_points is None else inputs.records(plan.ros_points,
                                                                       ROS_SWEEP_T)
        maps = inputs.camera_maps(rb.cfg, ROS_SWEEP_T)
        inputs_file = save_inputs(work / 'ros_inputs.npz', _raw(records), len(records),
                                  [c.name for c in rb.cfg.cameras], maps)
        startup, node = rb.startup()
        memory = rb.memory(node, inputs)
        log(f'ROS: node at {", ".join(f"{r:g}" for r in rates)} Hz, {len(records)} points, '
            f'{len(maps)} cameras')
        node_rows = rb.stream('node', schedule, inputs_file)
        rb.stop(node)
        echo = rb.start_echo('echo.log')
        log(f'ROS: transport floor (echo) at {", ".join(f"{r:g}" for r in plan.ros_rates)} Hz')
        floor_rows = rb.stream('floor', floor_schedule, inputs_file)
        rb.stop(echo)
        main = [s for s in floor_schedule if s[1] == _main_rate(plan)]
        repeats = [rb.overhead_run(run, main, inputs_file)[0]
                   for run in range(1, plan.overhead_runs)]
        startup['profile'] = rb.startup_profile()

    rows = _with_overhead(schedule, node_rows, floor_rows)
    ros = _ros_summary(plan, rows, records, len(maps), rb.cfg)
    ros.update(overhead_runs(ros['overhead_ms'], repeats))
    return {'startup': startup, 'memory': memory, 'ros': ros}


def overhead_runs(first: float | None, repeats: list[dict]) -> dict:
    """
    ``overhead_ms`` as the median of the runs at the main rate, and every run's figure.

    first: the full run's overhead; repeats: the main-rate rows of the extra runs. A run whose
    overhead could not be measured (nothing received) is left out of the median (None if all).
    """
    runs = [first] + [row['overhead_ms'] for row in repeats]
    measured = [v for v in runs if v is not None]
    return {'overhead_ms_runs': runs,
            'overhead_ms': rounded(np.median(measured)) if measured else None,
            'overhead_ms_range': [min(measured), max(measured)] if measured else None}


def _with_overhead(schedule, node_rows: dict, floor_rows: dict) -> list[dict]:
    """Pair each rate's node row with its floor row and add the ROS overhead."""
    rows = []
    for label, _, _ in schedule:
        row = dict(node_rows[label], floor=floor_rows.get(label))
        node_p50 = row.get('node_p50') or {}
        floor = row['floor']
        if floor and row['age_p50_ms'] is not None and floor['age_p50_ms'] is not None \
                and node_p50.get('pipeline_ms') is not None:
            row['overhead_ms'] = rounded(row['age_p50_ms'] - floor['age_p50_ms']
                                         - node_p50['pipeline_ms'])
            row['overhead_paired_ms'] = rounded(node_p50['age_minus_pipeline_ms']
                                                - floor['age_p50_ms'])
        else:
            row['overhead_ms'] = row['overhead_paired_ms'] = None
        rows.append(row)
    return rows


def _ros_summary(plan: Plan, rows: list[dict], records, cameras: int, cfg) -> dict:
    """Return the ROS part's summary: the main rate's figures, the peak rate, every row."""
    main = next(r for r in rows if r['rate_hz'] == _main_rate(plan))
    peak = peak_rate(rows)
    return {
        'rate_hz': main['rate_hz'], 'points': len(records), 'cameras': cameras,
        'cloud_bytes': int(records.nbytes), 'output_bytes': int(
            cfg.grid.height * cfg.grid.width * cfg.fused_channels * 4),
        'age_p50_ms': main['age_p50_ms'], 'age_p99_ms': main['age_p99_ms'],
        'age_max_ms': main['age_max_ms'],
        'floor_p50_ms': (main['floor'] or {}).get('age_p50_ms'),
        'floor_p99_ms': (main['floor'] or {}).get('age_p99_ms'),
        'pipeline_p50_ms': (main.get('node_p50') or {}).get('pipeline_ms'),
        'publisher_p50_ms': main['publisher_ms_p50'],
        'overhead_ms': main['overhead_ms'],
        'overhead_paired_ms': main['overhead_paired_ms'],
        'overhead_ms_by_rate': {f'{r["rate_hz"]:g}': r['overhead_ms'] for r in rows
                                if r['overhead_ms'] is not None},
        'peak_rate_hz': peak,
        'peak_rate_note': _peak_note(rows, peak),
        'rows': rows,
        'definitions': {
            'age': 'subscriber receive wall time minus the LiDAR header stamp (publisher wall '
                   'clock at publish), ms',
            'missed': 'published minus received by the subscriber',
            'jitter': '|difference of consecutive inter-arrival intervals| at the subscriber '
                      '(ros2_benchmark frame-to-frame jitter), ms',
            'overhead': "node age p50 - floor age p50 - pipeline p50 (the node's own "
                        'pad_ms + compute_ms p50 in the same run)',
            'overhead_paired': "p50 over frames of (age - that frame's pad_ms + compute_ms) "
                               '- floor age p50: the same quantity, less sensitive to compute '
                               'time noise',
            'publisher': 'p50 time the publisher spends in publish() for the camera maps and '
                         'the cloud of one frame; the stamp is taken before, so it is part of '
                         'every age, floor included',
        },
    }


def _main_rate(plan: Plan) -> float:
    return MAIN_ROS_RATE_HZ if MAIN_ROS_RATE_HZ in plan.ros_rates else plan.ros_rates[0]


def _peak_note(rows: list[dict], peak: float | None) -> str:
    highest = max(r['rate_hz'] for r in rows)
    if peak is None:
        return f'already {rows[0]["missed_pct"]} % missed at the lowest rate'
    if peak == highest:
        return f'every step up to {highest:g} Hz stayed under {DROP_LIMIT_PCT:g} % missed ' \
               '(the real peak is higher)'
    failing = next(r for r in sorted(rows, key=lambda r: r['rate_hz']) if r['rate_hz'] > peak)
    return f'{failing["missed_pct"]} % missed at {failing["rate_hz"]:g} Hz'


# -- report ---------------------------------------------------------------------------------------
