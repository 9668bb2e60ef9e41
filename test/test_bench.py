"""
The benchmark suite (``jax-perception bench``) on tiny sizes, so it cannot rot.

One tiny run goes through every part's code path (recompile, pipeline against peers, ROS
end to end with node and echo processes, start-up, memory) and its outputs are checked for the
required keys and sane values; the helpers are checked on their own. PyTorch is optional.
"""

import math

from jax_perception_node import bench, peers
from jax_perception_node.config import config_from_parameters, Pose
from jax_perception_node.pipeline import BevPipeline
import numpy as np
import pytest


@pytest.mark.parametrize('yaw', [0.0, 60.0, 120.0, 180.0, -120.0, -60.0])
def test_optical_quaternion_looks_along_yaw(yaw):
    q = bench.optical_quaternion(yaw)
    assert abs(np.linalg.norm(q) - 1.0) < 1e-9
    rot = Pose((0.0, 0.0, 0.0), tuple(q)).rotation_matrix()
    c, s = math.cos(math.radians(yaw)), math.sin(math.radians(yaw))
    # Columns: optical x (right), y (down), z (forward) in the grid frame.
    np.testing.assert_allclose(rot[:, 2], [c, s, 0.0], atol=1e-9)
    np.testing.assert_allclose(rot[:, 0], [s, -c, 0.0], atol=1e-9)
    np.testing.assert_allclose(rot[:, 1], [0.0, 0.0, -1.0], atol=1e-9)


def test_optical_quaternion_matches_the_shipped_cameras():
    np.testing.assert_allclose(bench.optical_quaternion(0.0), [-0.5, 0.5, -0.5, 0.5])
    np.testing.assert_allclose(bench.optical_quaternion(180.0), [-0.5, -0.5, 0.5, 0.5])


@pytest.mark.parametrize('impl', ['numpy', 'torch'])
def test_peers_match_the_pipeline(impl):
    if impl == 'torch' and not peers.torch_available():
        pytest.skip('PyTorch (optional extra bench) not installed')
    cfg = config_from_parameters(bench.bench_params(bench.TINY, 6, buckets=(1024,)))
    inputs = bench.Inputs(cfg)
    points = inputs.points(1000)
    points[::97, 2] = np.nan         # non-finite points are dropped by every implementation
    maps = inputs.camera_maps(cfg)
    maps[cfg.cameras[1].name] = None  # and a masked camera
    pipe = BevPipeline(cfg)
    pipe.warmup()
    expected = pipe.process(points, maps).features
    peer = peers.NumpyBev(cfg) if impl == 'numpy' else peers.TorchBev(cfg, threads=1)
    exempt = bench._edge_cells(cfg, points) | bench._boundary_cells(
        cfg, bench._geometry_tables(cfg), peer.tables if impl == 'numpy'
        else peers.lift_tables(cfg))
    bench._check_equal(impl, peer.process(points, maps), expected, exempt)
    assert expected[..., 0].sum() > 0 and expected[..., -1].sum() > 0


def test_check_equal_names_the_cell():
    expected = np.zeros((4, 5, 3), np.float32)
    actual = expected.copy()
    actual[2, 3, 1] = 1.0
    with pytest.raises(bench.BenchError, match=r'cell \(2, 3\)'):
        bench._check_equal('peer', actual, expected)
    exempt = np.zeros((4, 5), bool)
    exempt[2, 3] = True
    assert bench._check_equal('peer', actual, expected, exempt) == 1


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
    rows = bench.stream_stats(published, {'features': features, 'latency': latency})
    ten = rows['10hz']
    assert (ten['published'], ten['received'], ten['missed']) == (20, 20, 0)
    assert ten['age_p50_ms'] == pytest.approx(3.5, abs=0.51)
    assert ten['jitter_max_ms'] == pytest.approx(2.0)    # intervals 101 / 99 ms alternate
    assert ten['node_p50']['pipeline_ms'] == pytest.approx(2.0)
    assert rows['20hz']['missed_pct'] == pytest.approx(5.0)
    # 20 Hz already misses 5 %: the peak is the step below it.
    assert bench.peak_rate(list(rows.values())) == 10.0


def test_parse_warmup_log():
    line = ('[INFO] [1.2] [jax_perception]: warm-up: calibration 54 ms, 16384 220 ms, '
            '131072 171 ms; total 0.88 s, cache /tmp/x\n')
    parsed = bench.parse_warmup_log(line)
    assert parsed == {'ms': {'calibration': 54.0, '16384': 220.0, '131072': 171.0},
                      'total_s': 0.88}
    assert bench.parse_warmup_log('nothing here') is None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def test_bench_tiny_run(tmp_path, capsys):
    import json
    json_path = tmp_path / 'out' / 'bench.json'
    rc = bench.run_benchmarks(quick=True, tiny=True, json_path=str(json_path),
                              out_dir=tmp_path / 'bench')
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert (tmp_path / 'bench' / 'bench.md').read_text() in printed
    assert (tmp_path / 'bench' / 'bench.png').stat().st_size > 1000
    results = json.loads(json_path.read_text())
    assert bench.missing_keys(results) == []
    assert results['errors'] == []

    rec = results['recompile']
    assert rec['bucketed_compiles_after_warmup'] == 0
    assert rec['naive_compiles'] > 0 and rec['naive_compiles'] <= rec['frames']
    assert _number(rec['speedup']) and rec['speedup'] > 1
    assert rec['outputs_equal'] is True

    pipe = results['pipeline']
    assert pipe['outputs_checked'] is True
    sizes = {(r['points'], r['cameras']) for r in pipe['rows']}
    assert sizes == {(n, c) for n in bench.TINY.sizes for c in bench.TINY.camera_counts}
    for row in pipe['rows']:
        for key in ('jax_ms', 'numpy_ms', 'jax_nojit_ms', 'speedup_vs_numpy'):
            assert _number(row[key]) and row[key] > 0, (key, row)
        assert {'numpy', 'jax_nojit'} <= set(row['checked'])
    assert _number(pipe['speedup_vs_numpy'])
    if peers.torch_available():
        assert _number(pipe['speedup_vs_torch_min'])
        assert all('torch' in r['checked'] for r in pipe['rows'])
    else:
        assert pipe['speedup_vs_torch_min'] is None
        assert any('PyTorch is not installed' in note for note in pipe['notes'])

    ros = results['ros']
    for key in ('age_p50_ms', 'age_p99_ms', 'floor_p50_ms', 'overhead_ms'):
        assert _number(ros[key]), key
    assert 0 < ros['floor_p50_ms'] and ros['floor_p50_ms'] <= ros['age_p99_ms'] + 50
    assert ros['peak_rate_hz'] is None or ros['peak_rate_hz'] in bench.TINY.peak_rates
    assert all(r['published'] > 0 for r in ros['rows'])

    start = results['startup']
    assert _number(start['cold_s']) and _number(start['warm_s'])
    assert 0 < start['warm_s'] and 0 < start['cold_s']
    assert start['cold_warmup'] and start['cold_warmup']['ms']
    memory = results['memory']
    assert [r['bucket'] for r in memory['rows']][1:] == [256, 1024]
    assert all(_number(r['rss_mib']) and r['rss_mib'] > 0 for r in memory['rows'])
    assert {t['name'].split(' ')[0] for t in results['targets']} >= {
        'recompile.speedup', 'pipeline.speedup_vs_numpy', 'ros.overhead_ms'}
