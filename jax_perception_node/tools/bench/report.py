"""
The benchmark report: targets and markdown tables from the results JSON (``plot.py``: the plot).

``markdown(results)`` is what docs/performance.md holds (``docs/bench.json`` is
the run behind it; a test checks that they agree).
"""

from .common import DROP_LIMIT_PCT, rounded
from .image_report import image_part, image_targets
from .lidar_report import lidar_part, lidar_targets

REQUIRED_KEYS = (
    'recompile.speedup', 'recompile.naive_compiles', 'recompile.bucketed_compiles_after_warmup',
    'pipeline.speedup_vs_numpy', 'pipeline.speedup_vs_torch_min', 'pipeline.rows',
    'ros.age_p50_ms', 'ros.age_p99_ms', 'ros.floor_p50_ms', 'ros.overhead_ms',
    'ros.peak_rate_hz', 'startup.cold_s', 'startup.warm_s')


def targets(results: dict) -> list[dict]:
    """List the targets with the measured value and whether each is met (None: not run)."""
    rec, pipe = results.get('recompile') or {}, results.get('pipeline') or {}
    ros, start = results.get('ros') or {}, results.get('startup') or {}
    device = results.get('device') or {}

    def item(name, target, value, met):
        return {'name': name, 'target': target, 'value': value,
                'met': None if value is None else bool(met(value))}

    cold, warm = start.get('cold_s'), start.get('warm_s')
    items = [
        item('recompile.speedup', '>= 50', rec.get('speedup'), lambda v: v >= 50),
        item('recompile.bucketed_compiles_after_warmup', '== 0',
             rec.get('bucketed_compiles_after_warmup'), lambda v: v == 0),
        item('pipeline.speedup_vs_numpy (131k points, no camera)', '>= 10',
             pipe.get('speedup_vs_numpy'), lambda v: v >= 10),
        item('pipeline.speedup_vs_torch_min (faster than PyTorch eager at every size)', '> 1',
             pipe.get('speedup_vs_torch_min'), lambda v: v > 1),
        item('pipeline.cameras_over_lidar (6-camera frame / LiDAR-only frame, 131k points)',
             '<= 3', pipe.get('cameras_over_lidar'), lambda v: v <= 3),
        item('pipeline.speedup_vs_best_peer_cameras (131k points, 6 cameras)', '>= 2',
             pipe.get('speedup_vs_best_peer_cameras'), lambda v: v >= 2),
    ]
    # Only where the Numba rows ran: results from before them render as they were.
    for name, part in (('speedup_vs_numba (2 cores', pipe),
                       ('pinned.speedup_vs_numba (one pinned core', pipe.get('pinned'))):
        if part and 'speedup_vs_numba' in part:
            items.append(item(f'pipeline.{name}; slowest of 32k and 131k points, 0 and 6 '
                              'cameras)', '>= 1.0', part['speedup_vs_numba'], lambda v: v >= 1))
    head = results.get('head') or {}
    if 'compute_ratio' in head:     # results from before the head render as they were
        items.append(item('head.compute_ratio (compute_ms + head_ms with / compute_ms without '
                          'the head, 131k points, 4 cameras)', '<= 1.30', head['compute_ratio'],
                          lambda v: v <= 1.30))
    items += lidar_targets(results, item) + image_targets(results, item)
    items += [
        item('ros.overhead_ms', '< 2', ros.get('overhead_ms'), lambda v: v < 2),
        item('startup.warm_s / startup.cold_s', '<= 0.25',
             rounded(warm / cold) if cold and warm else None, lambda v: v <= 0.25),
    ]
    if device:
        items += [
            item('device.max_cells_differing (from the NumPy peer, per frame)', '<= 8',
                 device.get('max_cells_differing'), lambda v: v <= 8),
            item('device.faster_than_torch_everywhere (end to end, same device)', 'true',
                 device.get('faster_than_torch_everywhere'), lambda v: v),
        ]
        gpu = (device.get('device') or {}).get('platform') == 'gpu'
        ring = next((r for r in device.get('rows', [])
                     if r['points'] == 131072 and r['cameras'] == 6), None)
        items += [
            item('device.e2e_ms (GPU, 131k points, 6 cameras)', '<= 1.0',
                 ring['jax_e2e_ms']['p50'] if gpu and ring else None, lambda v: v <= 1.0),
            item('device.device_ms (GPU, 131k points, 6 cameras)', '<= 0.15',
                 ring['jax_device_ms']['p50'] if gpu and ring else None, lambda v: v <= 0.15),
        ]
    return items


def missed(results: dict) -> list[str]:
    """Names of the targets that were measured and missed."""
    return [t['name'] for t in results.get('targets') or targets(results) if t['met'] is False]


def _fmt(value, digits: int = 2, suffix: str = '') -> str:
    if value is None:
        return 'n/a'
    if isinstance(value, float):
        return f'{value:.{digits}f}{suffix}'
    return f'{value}{suffix}'


def markdown(results: dict, nested: bool = False) -> str:
    """
    Render the report: machine, targets, then one table per part (a part not run is left out).

    ``nested``: the parts' headings one level down, for a section of another document (the
    docs/performance.md).
    """
    lines = _header(results)
    for part in (_recompile_part, _pipeline_part, _ros_part, _startup_part, _memory_part,
                 _fleet_part, _accumulation_part, _head_part, lidar_part, image_part,
                 _device_part):
        lines += part(results)
    if nested:
        lines = ['#' + line if line.startswith('## ') else line for line in lines]
    return '\n'.join(lines) + '\n'


def ran(results: dict, part: str, key: str = 'rows') -> dict | None:
    """Return the results of ``part`` when it has run (``key`` present, not empty), else None."""
    found = results.get(part)
    return found if found and found.get(key) else None


def _table_part(title: str, intro: str | None, columns: str, align: str) -> list[str]:
    """Open a report part: its heading, the intro paragraph if any, the table's header rows."""
    return ['', f'## {title}', ''] + ([intro, ''] if intro else []) + [columns, align]


def _header(results: dict) -> list[str]:
    """Title, machine and versions, the targets table, the missed targets and any errors."""
    m = results['machine']
    title = (f'# jax_perception_node benchmarks ({results["plan"]}, {m.get("date", "undated")}, '
             f'commit {m.get("commit") or "unknown"})')
    lines = [title, '',
             f'Machine: {m["nproc"]} CPUs ({m["cpu"]}), {m["ram_gib"]} GiB RAM, load average at '
             f'start {m["loadavg_at_start"]}; Python {m["python"]}, jax {m["jax"]} / jaxlib '
             f'{m["jaxlib"]} ({m["jax_backend"]}), NumPy {m["numpy"]}, PyTorch '
             f'{m["torch"] or "not installed"}. Shared machine: compare ratios, not absolute '
             'times.', '', '## Targets', '',
             '| target | wanted | measured | met |', '|---|---:|---:|:---:|']
    for t in results['targets']:
        met = {True: 'yes', False: '**MISSED**', None: 'not run'}[t['met']]
        lines.append(f'| {t["name"]} | {t["target"]} | {_fmt(t["value"])} | {met} |')
    names = missed(results)
    lines += ['', 'Missed: ' + ('; '.join(names) if names else 'none') + '.']
    for error in results.get('errors', []):
        lines += ['', f'**Error:** {error}']
    return lines


def _recompile_part(results: dict) -> list[str]:
    """Part 1: bucketed AOT against a naive jax.jit on frames of varying size."""
    rec = ran(results, 'recompile', 'frames')
    if rec is None:
        return []
    lines = _table_part(
        '1. Recompile cost',
        f'{rec["frames"]} synthetic LiDAR frames, {rec["points_min"]}..'
        f'{rec["points_max"]} points ({rec["distinct_point_counts"]} distinct counts), '
        f'{rec["cameras"]} cameras, {rec["grid"][0]} x {rec["grid"][1]} grid, buckets '
        f'{rec["buckets"]}; persistent cache off. Naive = jax.jit of the same frame '
        'function on unpadded input: its per-frame time includes trace + compile.',
        '| path | mean ms | p50 ms | p99 ms | max ms | compiles |',
        '|---|---:|---:|---:|---:|---:|')
    for name, key, compiles in (('bucketed AOT', 'bucketed_ms',
                                 rec['bucketed_compiles_after_warmup']),
                                ('naive jit', 'naive_ms', rec['naive_compiles'])):
        s = rec[key]
        lines.append(f'| {name} | {_fmt(s["mean"])} | {_fmt(s["p50"])} | {_fmt(s["p99"])} '
                     f'| {_fmt(s["max"])} | {compiles} |')
    return lines + ['', f'Speedup (naive mean / bucketed mean): **{rec["speedup"]}x** (p99: '
                    f'{rec["speedup_p99"]}x). Bucketed warm-up (all buckets compiled once at '
                    f'start): {rec["bucketed_warmup_s"]} s.']


def _pipeline_part(results: dict) -> list[str]:
    """Part 2: the pipeline against its peers per size and rig, the headline and the notes."""
    pipe = ran(results, 'pipeline')
    if pipe is None:
        return []
    numba = any('numba_ms' in r for r in pipe['rows'])
    lines = _table_part(
        '2. Pipeline against peers (p50 ms per frame; ratio = peer / JAX)', None,
        '| points | bucket | cameras | JAX | NumPy | x | JAX no-jit | x | PyTorch | x |'
        + (' Numba | x |' if numba else ''),
        '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|' + ('---:|---:|' if numba else ''))
    for r in pipe['rows']:
        lines.append(
            f'| {r["points"]} | {r["bucket"]} | {r["cameras"]} | {_fmt(r["jax_ms"])} | '
            f'{_fmt(r["numpy_ms"])} | {_fmt(r["speedup_vs_numpy"])} | '
            f'{_fmt(r["jax_nojit_ms"], 1)} | {_fmt(r["speedup_vs_jax_nojit"], 1)} | '
            f'{_fmt(r["torch_ms"])} | {_fmt(r["speedup_vs_torch"])} |'
            + (f' {_fmt(r.get("numba_ms"))} | {_fmt(r.get("speedup_vs_numba"))} |'
               if numba else ''))
    lines += ['', f'Headline: {pipe["speedup_vs_numpy"]}x NumPy at '
              f'{pipe["headline"]["points"]} points without cameras; slowest ratio to PyTorch '
              f'{_fmt(pipe["speedup_vs_torch_min"])}x. With '
              f'{pipe["headline"]["ring_cameras"]} cameras a frame costs '
              f'{_fmt(pipe["cameras_over_lidar"])}x a LiDAR-only frame and runs '
              f'{_fmt(pipe["speedup_vs_best_peer_cameras"])}x faster than the best sparse '
              f'peer. {pipe["reps"]} interleaved runs per implementation and row.'
              + (f' Slowest ratio to Numba (one thread) at 32k and 131k points, 0 and '
                 f'{pipe["headline"]["ring_cameras"]} cameras: '
                 f'{_fmt(pipe["speedup_vs_numba"])}x.' if 'speedup_vs_numba' in pipe else ''),
              '']
    lines += [f'- {n}' for n in _pipeline_notes(pipe)]
    for key, prof in pipe.get('profile', {}).items():
        lines.append(f'- Stage p50 at {key.replace("_", " ")}: ' + ', '.join(
            f'{k} {v}' for k, v in prof.items()))
    return lines + _pinned_part(pipe)


def _pinned_part(pipe: dict) -> list[str]:
    """Render the JAX / Numba rows of the child process pinned to one CPU (when they ran)."""
    pinned = pipe.get('pinned')
    if not pinned:
        return []
    lines = ['', f'One pinned core (a child process with affinity {pinned["affinity_seen"]}, '
             'set before JAX loads, so XLA sizes its thread pools to one CPU; p50 ms, '
             'ratio = Numba / JAX):', '',
             '| points | bucket | cameras | JAX | Numba | x | outputs max abs diff |',
             '|---:|---:|---:|---:|---:|---:|---:|']
    for r in pinned['rows']:
        lines.append(f'| {r["points"]} | {r["bucket"]} | {r["cameras"]} | '
                     f'{_fmt(r["jax_ms"])} | {_fmt(r["numba_ms"])} | '
                     f'{_fmt(r["speedup_vs_numba"])} | {r["max_abs_diff"]["numba"]:.1g} |')
    return lines + ['', f'Slowest ratio on one core: **{_fmt(pinned["speedup_vs_numba"])}x**.']


def _pipeline_notes(pipe: dict) -> list[str]:
    """List the run's notes, rows timed on a busy machine, and the cells allowed to differ."""
    exempt = [f'{r["points"]} pts / {r["cameras"]} cams: {r["exempt_cells"]}'
              for r in pipe['rows'] if r['exempt_cells']]
    notes = list(pipe['notes'])
    unstable = [f'{r["points"]} pts / {r["cameras"]} cams: {", ".join(r["unstable"])}'
                for r in pipe['rows'] if r.get('unstable')]
    if unstable:
        notes.append('Timed while the machine was busy (p50 > 2.5x the best run, after one '
                     'retry), so these p50s are inflated; min_ms in the JSON has the best '
                     'runs: ' + '; '.join(unstable) + '.')
    border = max(r['border_cells'] for r in pipe['rows'])
    notes.append('Differences allowed only in cells where float32 rounding can decide: a '
                 'point within 5e-5 cells of a cell border, or one of at most 8 cells with '
                 'a camera sample within 1e-3 px of a map border that the two geometries '
                 f'put on opposite sides (here {border}). Differing cells: '
                 + ('; '.join(exempt) if exempt else 'none') + '.')
    return notes


def _ros_part(results: dict) -> list[str]:
    """Part 3: publisher -> node -> subscriber per rate, against the echo floor."""
    ros = ran(results, 'ros')
    if ros is None:
        return []
    lines = _table_part(
        '3. End to end through ROS',
        f'Publisher -> node -> subscriber, separate processes, DDS on loopback with '
        f'shared memory; a {ros["points"]}-point cloud ({ros["cloud_bytes"]} bytes) and '
        f'{ros["cameras"]} camera maps per frame, output {ros["output_bytes"]} bytes. '
        'Floor = echo node (same subscriptions, republishes a same-size Image, no work).',
        '| rate Hz | received / published | missed % | age p50 | p99 | max | '
        'jitter mean / max / std | node pipeline p50 | node total p50 | floor age p50 '
        '/ p99 | overhead |', '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    for r in ros['rows']:
        node = r.get('node_p50') or {}
        floor = r.get('floor') or {}
        lines.append(
            f'| {r["rate_hz"]:g} | {r["received"]} / {r["published"]} | '
            f'{_fmt(r["missed_pct"], 1)} | {_fmt(r["age_p50_ms"])} | {_fmt(r["age_p99_ms"])}'
            f' | {_fmt(r["age_max_ms"])} | {_fmt(r["jitter_mean_ms"])} / '
            f'{_fmt(r["jitter_max_ms"])} / {_fmt(r["jitter_std_ms"])} | '
            f'{_fmt(node.get("pipeline_ms"))} | {_fmt(node.get("total_ms"))} | '
            f'{_fmt(floor.get("age_p50_ms"))} / {_fmt(floor.get("age_p99_ms"))} | '
            f'{_fmt(r["overhead_ms"])} |')
    lines += ['', f'At {ros["rate_hz"]:g} Hz: age p50 {_fmt(ros["age_p50_ms"])} ms, p99 '
              f'{_fmt(ros["age_p99_ms"])} ms; floor p50 {_fmt(ros["floor_p50_ms"])} ms; '
              f'node pipeline p50 {_fmt(ros["pipeline_p50_ms"])} ms; publisher p50 '
              f'{_fmt(ros["publisher_p50_ms"])} ms; node overhead '
              f'**{_fmt(ros["overhead_ms"])} ms** ' + _overhead_runs(ros) + '. Peak rate under '
              f'{DROP_LIMIT_PCT:g} % missed: **{_fmt(ros["peak_rate_hz"], 0)} Hz** '
              f'({ros["peak_rate_note"]}).', '']
    return lines + [f'- {k}: {v}' for k, v in ros['definitions'].items()]


def _overhead_runs(ros: dict) -> str:
    """Say how the overhead was found: one run (older results), or the median of several."""
    paired = f'paired per frame: {_fmt(ros["overhead_paired_ms"])} ms'
    runs = ros.get('overhead_ms_runs')
    if not runs:
        return f'({paired})'
    low, high = ros['overhead_ms_range'] or (None, None)
    return (f'(median of {len(runs)} runs of node and floor at this rate, range {_fmt(low)} '
            f'to {_fmt(high)} ms: {", ".join(_fmt(v) for v in runs)}; first run {paired})')


def _startup_part(results: dict) -> list[str]:
    """Part 4: spawn to ready with an empty and a warm executable store, and the profile."""
    start = results.get('startup')
    if not (start and start.get('cold_s') is not None):
        return []
    lines = _table_part('4. Start-up', None, '| cache | spawn to ready s | node warm-up |',
                        '|---|---:|---|')
    for name, key, warm_key in (('empty', 'cold_s', 'cold_warmup'),
                                ('warm', 'warm_s', 'warm_warmup')):
        w = start.get(warm_key)
        text = 'n/a' if not w else ', '.join(f'{k} {v:g} ms' for k, v in w['ms'].items()) \
            + f'; total {w["total_s"]:g} s'
        lines.append(f'| {name} | {_fmt(start[key])} | {text} |')
    lines += ['', f'Warm / cold = {_fmt(start["warm_over_cold"])} (target <= 0.25). '
              "Spawn to ready = up to the node's own 'ready:' log line; a subscriber in "
              f'another process saw it after {_fmt(start["cold_discovered_s"])} s and '
              f'{_fmt(start["warm_discovered_s"])} s (DDS discovery added).']
    prof = start.get('profile')
    if prof:
        lines += ['', "Warm start-up, step by step (s, one process repeating the node's "
                  'start): ' + ', '.join(f'{k} {v:g}' for k, v in prof['steps_s'].items())
                  + '.']
    return lines


def _memory_part(results: dict) -> list[str]:
    """Part 5: the node's RSS after warm-up and after a cloud just under each bucket."""
    mem = results.get('memory')
    if not mem:
        return []
    lines = _table_part('5. Memory', None, '| after | RSS MiB | peak RSS MiB |', '|---|---:|---:|')
    for r in mem['rows']:
        what = 'ready (warm-up done)' if r['bucket'] is None else \
            f'{r["points"]} points (bucket {r["bucket"]})'
        lines.append(f'| {what} | {_fmt(r["rss_mib"], 1)} | {_fmt(r["hwm_mib"], 1)} |')
    return lines + ['', mem['note']]


def _fleet_part(results: dict) -> list[str]:
    """Part 7: fleet replay on Ray with one and two workers."""
    fleet = results.get('fleet')
    if not fleet:
        return []
    lines = _table_part(
        '7. Fleet replay on Ray',
        f'{fleet["bags"]} synthetic bags of {fleet["frames_per_bag"]} frames '
        f'({fleet["lidar_beams"]}-beam LiDAR, front camera); outputs of '
        f'{fleet["outputs_compared"]} fleet bags compared equal to in-process replay.',
        '| run | frames/s (whole run) | frames/s (replay) | worker start s '
        '(warm store) | compiles at start |', '|---|---:|---:|---:|---:|')
    for key, name in (('workers_1', '1 worker'), ('workers_2', '2 workers')):
        row = fleet[key]
        starts = row['worker_startup']
        lines.append(f'| {name} | {_fmt(row["frames_per_s"])} | '
                     f'{_fmt(row["replay_frames_per_s"])} | '
                     f'{_fmt(max(w["start_s"] for w in starts))} | '
                     f'{sum(w["start_compiles"] for w in starts)} |')
    return lines + ['', f'2 workers / 1 worker: {_fmt(fleet["speedup_2_vs_1"])}x over the '
                    f'whole run, {_fmt(fleet["replay_speedup_2_vs_1"])}x once running.']


def _accumulation_part(results: dict) -> list[str]:
    """Part 8: the frame cost by sweeps per frame."""
    acc = ran(results, 'accumulation')
    if acc is None:
        return []
    lines = _table_part(
        '8. Multi-sweep accumulation (frame cost by sweeps per frame)',
        f'Consecutive sweeps of the synthetic drive from t = {acc["sweep_t0_s"]} s with '
        f'their odometry, {acc["cameras"]} cameras, {acc["grid"][0]} x '
        f'{acc["grid"][1]} grid, buckets {acc["buckets"]}; the three pipelines take '
        'turns on every sweep. ms = process() (pad, transfer, device, fetch).',
        '| sweeps | points per frame | ring capacity (points) | p50 ms | p99 ms | '
        'device p50 ms | x 1 sweep | occupied cells |',
        '|---:|---:|---:|---:|---:|---:|---:|---:|')
    for r in acc['rows']:
        lines.append(
            f'| {r["sweeps"]} | {r["points_per_frame"]} | {r["ring_points"]} | '
            f'{_fmt(r["frame_ms"]["p50"])} | {_fmt(r["frame_ms"]["p99"])} | '
            f'{_fmt(r["device_ms"]["p50"])} | {_fmt(r["x_vs_1_sweep"])} | '
            f'{r["occupied_cells"]} |')
    return lines + ['', f'Compiles during the timed frames: {acc["compiles_during_frames"]}.']


def _head_part(results: dict) -> list[str]:
    """Part 9: what the learned head adds to a frame."""
    head = ran(results, 'head')
    if head is None:
        return []
    lines = _table_part(
        '9. The learned head (its executable after the BEV, on the device)',
        f'{head["points"]} points, {head["cameras"]} cameras, the shipped config with and '
        f'without `{head["head"]}` (top {head["max_objects"]} peaks decoded on the device), '
        f'on {head["device"]}; ' + _head_method(head) + '. compute = '
        "transfer, device, fetch of the BEV; head = the head's executable after the BEV and "
        'the fetch of its boxes; frame = compute + head.',
        '| pipeline | compute p50 ms | head p50 ms | frame p50 ms | frame p99 ms | '
        'process() p50 ms |',
        '|---|---:|---:|---:|---:|---:|')
    for r in head['rows']:
        lines.append(f'| {r["pipeline"]} | {_fmt(r["compute_ms"]["p50"])} | '
                     f'{_fmt(r["head_ms"]["p50"])} | {_fmt(r["frame_ms"]["p50"])} | '
                     f'{_fmt(r["frame_ms"]["p99"])} | {_fmt(r["process_ms"]["p50"])} |')
    return lines + ['', f'With / without the head: {_fmt(head["compute_ratio"])}x the frame '
                    f'(target <= {_fmt(head["budget"])}); '
                    f'{_fmt(head["objects_per_frame"], 1)} boxes per frame; compiles during '
                    f'the timed frames: {head["compiles_during_frames"]}.']


def _head_method(head: dict) -> str:
    """How part 9 ran its two kinds of frame (results before 'block' took turns frame by frame)."""
    if 'block' not in head:
        return 'the two pipelines take turns on every frame'
    return (f'blocks of {head["block"]} frames of one kind (ABBA, the first frame of each '
            'untimed), ' + ('one pipeline, the head paused for the frames without it'
                            if head['one_pipeline'] else 'a second pipeline without a head'))


def _device_part(results: dict) -> list[str]:
    """Part 6 (``--device``): the core on the accelerator against PyTorch on the same device."""
    device = ran(results, 'device')
    if device is None:
        return []
    d = device['device']
    lines = _table_part(
        f'6. On the device: {d["platform"]} ({d["kind"]})',
        f'jax {d["jax"]}, PyTorch {d["torch"] or "not installed"} on '
        f'{d["torch_device"] or "n/a"}; p50 ms over {device["reps"]} frames, camera '
        'maps changing every frame. e2e = process() from NumPy in to NumPy out; '
        'device = the compiled call on inputs already on the device.',
        '| points | cameras | JAX e2e | JAX device | pad / transfer / device / fetch '
        '| PyTorch e2e | PyTorch device | x e2e | cells differing |',
        '|---:|---:|---:|---:|---|---:|---:|---:|---:|')
    for r in device['rows']:
        s = r['jax_stages_p50_ms']
        lines.append(
            f'| {r["points"]} | {r["cameras"]} | {_fmt(r["jax_e2e_ms"]["p50"])} | '
            f'{_fmt(r["jax_device_ms"]["p50"])} | {_fmt(s["pad"])} / {_fmt(s["transfer"])} / '
            f'{_fmt(s["device"])} / {_fmt(s["fetch"])} | '
            f'{_fmt((r["torch_e2e_ms"] or {}).get("p50"))} | '
            f'{_fmt((r["torch_device_ms"] or {}).get("p50"))} | '
            f'{_fmt(r.get("speedup_e2e_vs_torch"))} | {r["cells_differing"]} |')
    return lines


def _get(tree: dict, dotted: str):
    node = tree
    for part in dotted.split('.'):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def missing_keys(results: dict) -> list[str]:
    """List the required JSON keys (dotted) absent from ``results``."""
    missing = []
    for key in REQUIRED_KEYS:
        try:
            _get(results, key)
        except KeyError:
            missing.append(key)
    return missing
