"""
The benchmark suite (``jax-perception bench``) on tiny sizes, so it cannot rot.

One tiny run goes through every part's code path (recompile, pipeline against peers, ROS
end to end with node and echo processes, start-up, memory) and its evidence is checked: the
outputs it compared and how far they differed, the accounting of every stream, the targets. The
helpers are checked on their own, the border exemption with cases that must fail.
"""

import json
import math

from jax_perception_node import BevPipeline
from jax_perception_node.settings.config import config_from_parameters, Pose
from jax_perception_node.tools import peers
from jax_perception_node.tools.bench import (checks, common, pipeline_rows, render, report, ros,
                                             run_benchmarks)
from jax_perception_node.tools.bench import images as bench_images
from jax_perception_node.tools.bench.device import bench_device
import numpy as np
import pytest


@pytest.mark.parametrize('yaw', [0.0, 60.0, 120.0, 180.0, -120.0, -60.0])
def test_optical_quaternion_looks_along_yaw(yaw):
    q = common.optical_quaternion(yaw)
    assert abs(np.linalg.norm(q) - 1.0) < 1e-9
    rot = Pose((0.0, 0.0, 0.0), tuple(q)).rotation_matrix()
    c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    # Columns: optical x (right), y (down), z (forward) in the grid frame.
    np.testing.assert_allclose(rot[:, 2], [c, s, 0.0], atol=1e-9)
    np.testing.assert_allclose(rot[:, 0], [s, -c, 0.0], atol=1e-9)
    np.testing.assert_allclose(rot[:, 1], [0.0, 0.0, -1.0], atol=1e-9)


def test_optical_quaternion_matches_the_shipped_cameras():
    np.testing.assert_allclose(common.optical_quaternion(0.0), [-0.5, 0.5, -0.5, 0.5])
    np.testing.assert_allclose(common.optical_quaternion(180.0), [-0.5, -0.5, 0.5, 0.5])


def build_peer(impl: str, cfg):
    """Return the peer ``impl`` of ``cfg`` (its optional library imported only when asked)."""
    if impl == 'numba':
        from jax_perception_node.tools.numba_peer import NumbaBev
        return NumbaBev(cfg)
    return peers.NumpyBev(cfg) if impl == 'numpy' else peers.TorchBev(cfg, threads=1)


@pytest.mark.parametrize('impl', ['numpy', 'torch', 'numba'])
def test_peers_match_the_pipeline(impl):
    if impl == 'torch' and not peers.torch_available():
        pytest.skip('PyTorch (extra bench, in requirements-dev.txt) not installed')
    if impl == 'numba' and not peers.numba_available():
        pytest.skip('Numba (requirements-dev.txt) not installed')
    cfg = config_from_parameters(common.bench_params(common.TINY, 6, buckets=(1024,)))
    inputs = common.Inputs(cfg)
    points = inputs.points(1000)
    points[::97, 2] = np.nan         # non-finite points are dropped by every implementation
    maps = inputs.camera_maps(cfg)
    maps[cfg.cameras[1].name] = None  # and a masked camera
    pipe = BevPipeline(cfg)
    pipe.warmup()
    expected = pipe.process(points, maps).features
    peer = build_peer(impl, cfg)
    border = checks.border_cells(cfg, pipe.lift_samples)
    exempt = checks.edge_cells(cfg, points) | border
    actual = peer.process(points, maps)
    assert checks.check_equal(impl, actual, expected, exempt) <= checks.MAX_BORDER_CELLS
    close = ~exempt[..., None]
    assert np.abs(np.where(close, actual - expected, 0)).max() <= 1e-4
    assert expected[..., 0].sum() > 0 and expected[..., -1].sum() > 0


@pytest.mark.parametrize('model, coefficients', [('plumb_bob', [-0.1, 0.01, 0.0, 0.0, 0.0]),
                                                 ('equidistant', [0.05, 0.0, 0.0, 0.0])])
def test_peers_refuse_a_lens_naming_the_camera(model, coefficients):
    """The peers lift through a pinhole: a lens model is refused, not silently ignored."""
    params = common.bench_params(common.TINY, 6, buckets=(1024,))
    params.update({'cameras.rear_left.distortion_model': model,
                   'cameras.rear_left.distortion': coefficients})
    cfg = config_from_parameters(params)
    named = f'cameras.rear_left.distortion_model is {model}'
    builders = [peers.NumpyBev, peers.sample_pixels]
    if peers.torch_available():
        builders.append(lambda c: peers.TorchBev(c, threads=1))
    if peers.numba_available():
        builders.append(lambda c: build_peer('numba', c))
    for build in builders:
        with pytest.raises(ValueError, match=named):
            build(cfg)


def test_fma32_rounds_once():
    a = np.float32(1 + 2.0 ** -12)
    assert a * a + np.float32(-1.0) == np.float32(2.0 ** -11)          # two roundings
    assert peers.fma32(a, a, -1.0) == np.float32(2.0 ** -11 + 2.0 ** -24)   # one, exact


@pytest.mark.parametrize('n', range(2, 8))
def test_balanced_rounds_put_each_call_right_after_every_other_once(n):
    rounds = common.balanced_rounds(n)
    assert len(rounds) == n - 1 and all(sorted(r) == list(range(n)) for r in rounds)
    calls = [i for r in rounds for i in r]
    # Round after round, the first again after the last: each ordered pair once, no repeat.
    steps = list(zip(calls, calls[1:] + calls[:1]))
    assert sorted(steps) == [(a, b) for a in range(n) for b in range(n) if a != b]
    assert common.balanced_rounds(n) == rounds      # the same orders on every run


def test_interleaved_takes_balanced_turns_on_alternating_maps():
    calls = []
    maps = ({'front': 0}, {'front': 1})
    impls = [(name, lambda p, c, name=name: calls.append((name, c['front'])))
             for name in ('jax', 'numpy', 'jax_nojit', 'torch', 'numba')]
    times = pipeline_rows._interleaved(impls, None, maps, reps=8)
    assert all(len(t) == 8 for t in times.values())
    timed = calls[5:]       # after one untimed call each
    assert [c for _, c in timed] == [rep % 2 for rep in range(8) for _ in impls]
    names = [name for name, _ in calls]
    assert all(a != b for a, b in zip(names, names[1:]))
    follows = {(a, b): 0 for a in names for b in names if a != b}
    for a, b in zip(names[4:], names[5:]):      # from the untimed last call on: 2 x 4 rounds
        follows[a, b] += 1
    assert set(follows.values()) == {2}
    # A part cycle of the orders would put some pairs once more: rounds go up to whole cycles.
    assert {len(t) for t in pipeline_rows._interleaved(impls, None, maps, reps=5).values()} == {8}


def test_peer_geometry_is_the_pipelines_on_the_quick_ring():
    """The quick and full runs' six-camera ring: every cell has the pipeline's valid samples."""
    cfg = config_from_parameters(common.bench_params(common.QUICK, 6, buckets=(1024,)))
    pipe = BevPipeline(cfg)
    pipe.warmup()
    assert not checks.border_cells(cfg, pipe.lift_samples).any()


def test_check_equal_names_the_cell():
    expected = np.zeros((4, 5, 3), np.float32)
    actual = expected.copy()
    actual[2, 3, 1] = 1.0
    with pytest.raises(common.BenchError, match=r'cell \(2, 3\)'):
        checks.check_equal('peer', actual, expected)
    exempt = np.zeros((4, 5), bool)
    exempt[2, 3] = True
    assert checks.check_equal('peer', actual, expected, exempt) == 1


def test_border_exemption_is_bounded_and_needs_a_border_sample():
    cfg = config_from_parameters(common.bench_params(common.TINY, 6, buckets=(1024,)))
    pixels = peers.sample_pixels(cfg)
    samples = np.stack([valid.sum(axis=1) for _, _, valid in pixels]).astype(np.float32)
    assert not checks.border_cells(cfg, samples).any()      # same geometry: nothing exempt
    near = np.zeros(samples.shape[1], bool)
    for cam, (u, v, valid) in zip(cfg.cameras, pixels):
        near |= ((np.abs(u - cam.width + 0.5) < 0.3) | (np.abs(v + 0.5) < 0.3)).any(axis=1)
    far = np.flatnonzero(~near & (samples.sum(axis=0) > 0))
    # A cell far from every border differing: not rounding, the run stops.
    moved = samples.copy()
    moved[0, far[0]] += 1
    with pytest.raises(common.BenchError, match='1 without a sample within'):
        checks.border_cells(cfg, moved)
    # More cells than rounding explains, even at borders: the run stops.
    moved = samples.copy()
    moved[0, :checks.MAX_BORDER_CELLS + 1] += 1
    with pytest.raises(common.BenchError, match='at most 8 border cells'):
        checks.border_cells(cfg, moved)


def test_stream_stats_and_peak_rate():
    ms = 1_000_000
    published = {f'{r}hz': {'rate_hz': float(r), 'publish_ms': [1.0] * 20,
                            'stamps_ns': [r * 10**9 + k * (1000 // r) * ms for k in range(20)]}
                 for r in (10, 20, 50)}
    features, latency = [], []
    for label, seg in published.items():
        drop = {'10hz': 0, '20hz': 1, '50hz': 5}[label]
        for k, stamp in enumerate(seg['stamps_ns'][drop:]):
            features.append([stamp, stamp + (3 + k % 2) * ms])
            latency.append([stamp, {'pad_ms': 0.5, 'compute_ms': 1.5, 'total_ms': 2.5}])
    rows = ros.stream_stats(published, {'features': features, 'latency': latency})
    ten = rows['10hz']
    assert (ten['published'], ten['received'], ten['missed']) == (20, 20, 0)
    assert ten['age_p50_ms'] == pytest.approx(3.5, abs=0.51)
    assert ten['jitter_max_ms'] == pytest.approx(2.0)    # intervals 101 / 99 ms alternate
    assert ten['node_p50']['pipeline_ms'] == pytest.approx(2.0)
    assert rows['20hz']['missed_pct'] == pytest.approx(5.0)
    # 20 Hz already misses 5 %: the peak is the step below it.
    assert ros.peak_rate(list(rows.values())) == 10.0


def test_overhead_is_the_median_of_the_measured_runs():
    rows = [{'overhead_ms': 1.5}, {'overhead_ms': 0.25}]
    assert ros.overhead_runs(3.0, rows) == {'overhead_ms_runs': [3.0, 1.5, 0.25],
                                            'overhead_ms': 1.5, 'overhead_ms_range': [0.25, 3.0]}
    # A run that received nothing has no overhead: the median is of the others.
    assert ros.overhead_runs(None, rows)['overhead_ms'] == pytest.approx(0.875)
    assert ros.overhead_runs(None, [{'overhead_ms': None}])['overhead_ms'] is None


def test_parse_warmup_log():
    line = ('[INFO] [1.2] [jax_perception]: warm-up: calibration 54 ms, 16384 220 ms, '
            '131072 171 ms; total 0.88 s, cache /tmp/x\n')
    parsed = ros.parse_warmup_log(line)
    assert parsed == {'ms': {'calibration': 54.0, '16384': 220.0, '131072': 171.0},
                      'total_s': 0.88}
    assert ros.parse_warmup_log('nothing here') is None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


# 100-120 s here; most of it scales with the CPU (node starts, compiles), so a machine a few
# times slower needs more than pytest.ini's 300 s.
@pytest.mark.timeout(900)
def test_bench_tiny_run(tmp_path, capsys):
    json_path = tmp_path / 'out' / 'bench.json'
    rc = run_benchmarks(quick=True, tiny=True, json_path=str(json_path),
                        out_dir=tmp_path / 'bench')
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert (tmp_path / 'bench' / 'bench.md').read_text() in printed
    assert (tmp_path / 'bench' / 'bench.png').stat().st_size > 1000
    results = json.loads(json_path.read_text())
    assert report.missing_keys(results) == []
    assert results['errors'] == []

    rec = results['recompile']
    assert rec['bucketed_compiles_after_warmup'] == 0
    assert 0 < rec['naive_compiles'] <= rec['frames']
    assert _number(rec['speedup']) and rec['speedup'] > 1
    assert rec['checked_frames'] == 3 and rec['max_abs_diff'] <= 1e-4

    pipe = results['pipeline']
    sizes = {(r['points'], r['cameras']) for r in pipe['rows']}
    tiny = common.TINY
    assert sizes == {(n, c) for n in tiny.sizes + tiny.fill_sizes for c in tiny.camera_counts}
    for row in pipe['rows']:
        for key in ('jax_ms', 'numpy_ms', 'jax_nojit_ms', 'torch_ms', 'numba_ms',
                    'speedup_vs_numpy', 'speedup_vs_numba'):
            assert _number(row[key]) and row[key] > 0, (key, row)
        assert set(row['checked']) == {'numpy', 'jax_nojit', 'torch', 'numba'}
        assert max(row['max_abs_diff'].values()) <= 1e-4
        assert row['border_cells'] <= checks.MAX_BORDER_CELLS
        assert row['bucket'] == min(b for b in tiny.sizes if b >= row['points'])
    fill = [r for r in pipe['rows'] if r['points'] in tiny.fill_sizes]
    assert fill and all(r['bucket'] > r['points'] for r in fill)
    assert _number(pipe['speedup_vs_torch_min']) and _number(pipe['cameras_over_lidar'])
    # Numba: the slowest target row on two cores, and the same rows in a one-CPU child.
    cases = {(1024, 0), (1024, 6)}
    assert pipeline_rows.numba_cases(tiny) == cases
    assert pipe['speedup_vs_numba'] == min(r['speedup_vs_numba'] for r in pipe['rows']
                                           if (r['points'], r['cameras']) in cases)
    pinned = pipe['pinned']
    assert pinned['affinity_seen'] == [pinned['cpu']]
    assert {(r['points'], r['cameras']) for r in pinned['rows']} == cases
    for row in pinned['rows']:
        assert row['checked'] == ['numba'] and row['max_abs_diff']['numba'] <= 1e-4
        assert _number(row['jax_ms']) and _number(row['numba_ms'])
        assert row['speedup_vs_numba'] == pytest.approx(row['numba_ms'] / row['jax_ms'],
                                                        abs=0.01, rel=0.01)
    assert pinned['speedup_vs_numba'] == min(r['speedup_vs_numba'] for r in pinned['rows'])
    assert '| Numba | x |' in printed and 'One pinned core' in printed

    ros_part = results['ros']
    for key in ('age_p50_ms', 'age_p99_ms', 'floor_p50_ms', 'overhead_ms'):
        assert _number(ros_part[key]), key
    for row in ros_part['rows']:
        assert 0 < row['published'] and 0 <= row['received'] <= row['published']
        assert row['missed'] == row['published'] - row['received']
    assert ros_part['peak_rate_hz'] == ros.peak_rate(ros_part['rows'])
    runs = ros_part['overhead_ms_runs']
    assert len(runs) == tiny.overhead_runs and all(_number(v) for v in runs), runs
    assert runs[0] == next(r['overhead_ms'] for r in ros_part['rows'] if r['rate_hz'] == 10.0)
    assert ros_part['overhead_ms'] == pytest.approx(float(np.median(runs)), abs=1e-3)
    assert ros_part['overhead_ms_range'] == [min(runs), max(runs)]
    assert f'median of {tiny.overhead_runs} runs' in printed

    start = results['startup']
    assert _number(start['cold_s']) and _number(start['warm_s'])
    assert start['cold_warmup'] and start['cold_warmup']['ms']
    memory = results['memory']
    assert [r['bucket'] for r in memory['rows']][1:] == [256, 1024]
    assert all(_number(r['rss_mib']) and r['rss_mib'] > 0 for r in memory['rows'])
    acc = results['accumulation']
    assert [r['sweeps'] for r in acc['rows']] == [1, 3, 5]
    assert acc['compiles_during_frames'] == 0
    for row in acc['rows']:
        assert row['sweeps_used_min'] == row['sweeps'], row     # the rings were full
        # 6 LiDAR (+ time_lag_mean when accumulating) + 3 camera + coverage
        assert row['output_channels'] == (10 if row['sweeps'] == 1 else 11)
        assert _number(row['frame_ms']['p50']) and row['frame_ms']['p50'] > 0
        assert row['ring_points'] == (row['sweeps'] - 1) * acc['buckets'][-1]
    points = [r['points_per_frame'] for r in acc['rows']]
    assert points[0] * 3 == points[1] and points[0] * 5 == points[2]
    assert '## 8. Multi-sweep accumulation' in printed
    images = results['images']
    assert images['compiles_after_warmup'] == 0 and images['cameras'] == 4
    assert all(_number(v) and v > 0 for v in images['frame_ms'].values())
    assert images['images_over_lidar'] == pytest.approx(
        images['frame_ms']['images'] / images['frame_ms']['lidar'], rel=0.01, abs=0.01)
    assert images['encoder']['torch_max_abs_diff'] <= 1e-4     # checked before it was timed
    assert images['learned_encoder']['torch_max_abs_diff'] <= 1e-4
    assert images['learned_over_lidar'] == pytest.approx(
        images['frame_ms']['learned'] / images['frame_ms']['lidar'], rel=0.01, abs=0.01)
    assert [r['name'] for r in images['decode']] == [case[0] for case in bench_images.CASES]
    assert all(_number(r['ms']) and r['ms'] > 0 for r in images['decode'])
    assert all((r['threads'] >= 2) == r['name'].endswith('_threads') for r in images['decode'])
    assert '## 11. Cameras as images' in printed
    names = {t['name'].split(' ')[0] for t in results['targets']}
    assert names >= {'images.images_over_lidar', 'images.decode', 'recompile.speedup',
                     'pipeline.speedup_vs_numpy', 'ros.overhead_ms', 'pipeline.cameras_over_lidar',
                     'pipeline.speedup_vs_numba', 'pipeline.pinned.speedup_vs_numba'}

    # The committed form: the JSON renders to the same tables, and --check reads its targets.
    capsys.readouterr()
    status = render(json_path, check=True)
    rendered = capsys.readouterr()
    assert rendered.out == (tmp_path / 'bench' / 'bench.md').read_text()
    assert status == (1 if report.missed(results) else 0)


def test_check_names_the_missed_target(tmp_path, capsys):
    results = {'plan': 'tiny', 'machine': {'nproc': 2, 'cpu': 'x', 'ram_gib': 1,
                                           'loadavg_at_start': [0], 'python': '3', 'jax': '0',
                                           'jaxlib': '0', 'numpy': '0', 'torch': None,
                                           'jax_backend': 'cpu'},
               'errors': [], 'recompile': {'speedup': 80.0, 'bucketed_compiles_after_warmup': 0}}
    path = tmp_path / 'r.json'
    path.write_text(json.dumps(results))
    assert render(path, check=True) == 0
    results['recompile']['bucketed_compiles_after_warmup'] = 2
    path.write_text(json.dumps(results))
    assert render(path, check=True) == 1
    assert 'missed recompile.bucketed_compiles_after_warmup' in capsys.readouterr().err
    assert render(path, check=False) == 0


def test_numba_targets_are_checked_only_when_measured(tmp_path, capsys):
    machine = {'nproc': 2, 'cpu': 'x', 'ram_gib': 1, 'loadavg_at_start': [0], 'python': '3',
               'jax': '0', 'jaxlib': '0', 'numpy': '0', 'torch': None, 'jax_backend': 'cpu'}
    results = {'plan': 'tiny', 'machine': machine, 'errors': [], 'pipeline': {}}
    names = [t['name'] for t in report.targets(results)]
    assert not any('numba' in name for name in names)     # older results: no such rows
    results['pipeline'] = {'speedup_vs_numba': 1.2, 'pinned': {'speedup_vs_numba': 0.8}}
    path = tmp_path / 'r.json'
    path.write_text(json.dumps(results))
    assert render(path, check=True) == 1
    err = capsys.readouterr().err
    assert 'missed pipeline.pinned.speedup_vs_numba (one pinned core' in err
    assert 'pipeline.speedup_vs_numba (2 cores' not in err
    results['pipeline']['pinned']['speedup_vs_numba'] = 1.0
    path.write_text(json.dumps(results))
    assert render(path, check=True) == 0


def test_numba_cases_of_the_full_plan():
    assert pipeline_rows.numba_cases(common.FULL) == {(32768, 0), (32768, 6), (131072, 0),
                                                      (131072, 6)}


def test_device_rows_on_the_cpu(capsys):
    result = bench_device(quick=True, log=print, tiny=True)
    assert result['device']['platform'] == 'cpu'
    assert result['device']['torch_device'] == 'cpu'
    for row in result['rows']:
        assert _number(row['jax_e2e_ms']['p50']) and _number(row['jax_device_ms']['p50'])
        assert _number(row['torch_e2e_ms']['p50']) and _number(row['torch_device_ms']['p50'])
        assert row['cells_differing'] <= checks.MAX_BORDER_CELLS
        assert set(row['jax_stages_p50_ms']) == {'pad', 'transfer', 'device', 'fetch'}
    assert {(r['points'], r['cameras']) for r in result['rows']} == {
        (n, c) for n in common.TINY.sizes for c in common.TINY.camera_counts}
