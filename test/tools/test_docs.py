"""The guides' figures are the committed runs: docs/bench.json, the GPU and LiDAR runs, soak."""

import json
from pathlib import Path

from jax_perception_node.tools.bench.report import markdown, targets
from jax_perception_node.tools.bench.soak_report import soak_markdown

REPO = Path(__file__).resolve().parents[2]
# Which guide holds each rendered block.
PERFORMANCE, RELIABILITY = 'docs/performance.md', 'docs/reliability.md'


def block(name: str, document: str) -> str:
    """Return the text of ``document`` between ``<!-- name:begin -->`` and its end marker."""
    text = (REPO / document).read_text()
    begin, end = f'<!-- {name}:begin -->\n', f'<!-- {name}:end -->'
    assert begin in text and end in text, f'{document} lacks the {name} markers'
    assert text.count(begin) == 1 and text.count(end) == 1, f'{document}: {name} twice'
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_each_block_lives_in_one_document_only():
    # The rendered runs are kept once: in their guide, not also in the README or another guide.
    documents = ['README.md'] + sorted(p.relative_to(REPO).as_posix()
                                       for p in (REPO / 'docs').glob('*.md'))
    homes = {'bench': PERFORMANCE, 'bench-device': PERFORMANCE, 'bench-lidar': PERFORMANCE,
             'soak': RELIABILITY}
    for name, home in homes.items():
        holders = [d for d in documents if f'<!-- {name}:begin -->' in (REPO / d).read_text()]
        assert holders == [home], f'{name} markers in {holders}, expected only in {home}'


def test_performance_section_is_the_committed_bench_run():
    results = json.loads((REPO / 'docs' / 'bench.json').read_text())
    results['targets'] = targets(results)
    assert results['plan'] == 'full' and not results['errors']
    # The report's title line is replaced by the guide's own heading.
    expected = markdown(results, nested=True).split('\n', 2)[2]
    assert block('bench', PERFORMANCE) == expected


def test_device_section_is_the_committed_gpu_run():
    results = json.loads((REPO / 'docs' / 'bench_device_gpu.json').read_text())
    results['targets'] = targets(results)
    assert results['parts'] == ['device'] and not results['errors']
    assert results['device']['device']['platform'] == 'gpu'
    assert block('bench-device', PERFORMANCE) == markdown(results, nested=True).split('\n', 2)[2]


def test_lidar_section_is_the_committed_lidar_run():
    results = json.loads((REPO / 'docs' / 'bench_lidar.json').read_text())
    results['targets'] = targets(results)
    assert results['parts'] == ['lidar'] and results['plan'] == 'full' and not results['errors']
    assert results['lidar']['deskew_cost']['compiles_during_calls'] == 0
    assert block('bench-lidar', PERFORMANCE) == markdown(results, nested=True).split('\n', 2)[2]


def test_soak_section_is_the_committed_soak_run():
    results = json.loads((REPO / 'docs' / 'soak.json').read_text())
    assert results['soak']['seconds'] >= 600
    assert block('soak', RELIABILITY) == soak_markdown(results)


def test_soak_section_adds_the_load_soak_and_slope_when_the_run_has_them():
    results = json.loads((REPO / 'docs' / 'soak.json').read_text())
    # An older run's file: the closed-loop soak alone, without slope or leak measure.
    results.pop('load_soak', None)
    for key in ('rss_slope_mib_per_min', 'private_mib_per_10k_frames'):
        results['soak'].pop(key, None)
    growth = f'({results["soak"]["rss_growth_pct"]:+.1f} %)'
    before = soak_markdown(results)
    results['soak']['rss_slope_mib_per_min'] = 0.92
    results['load_soak'] = {
        'seconds': 600.0, 'rate_hz': 100.0, 'points': 131072, 'cameras': 4,
        'published': 59000, 'published_hz': 98.3, 'received': 58000, 'processed': 24000,
        'dropped': 34000, 'not_taken': 1000, 'processed_hz': 40.0, 'frames_all_cameras': 23990,
        'compiles_after_warmup': 0, 'warmup_s': 60.0, 'rss_mib': [520.0, 523.5],
        'rss_growth_pct': 0.67, 'rss_slope_mib_per_min': 0.35,
        'rss_mib_windows': [519.5, 520.0, 523.5], 'private_mib_per_10k_frames': 0.12,
        'total_ms': {'p50': 20.5, 'p95': 30.0, 'p99': 41.25, 'max': 60.0},
        'age_ms': {'p50': 30.0, 'p95': 45.0, 'p99': 55.5, 'max': 90.0}}
    after = soak_markdown(results)
    # The closed-loop part is the same but for the slope in its RSS cell.
    head = before.replace(growth, growth[:-1] + ', +0.92 MiB/min)')
    assert head != before and after.startswith(head)
    load = after[len(head):]
    assert load.startswith('\nLoad soak of 600 s, same machine and config: ')
    assert 'a 131072-point cloud and 4 camera maps published open loop every 10 ms' in load
    assert ('| 59000 | 58000 | 24000 (40 Hz) | 34000 | 1000 | 23990 | 0 | 520 -> 523.5 MiB '
            '(+0.7 %) | +0.35 MiB/min | 20.5 / 41.25 ms | 30 / 55.5 ms |') in load
    assert 'RSS at the end of each minute (MiB): 519.5, 520, 523.5.' in load
    assert 'over the second half of the run: +0.12 MiB per 10k frames' in load


def test_the_output_sizes_the_docs_give_follow_from_the_shipped_file_and_the_schema():
    # Issue 33: 256 x 256 x 15 holds for the shipped file, not for the schema's defaults.
    from jax_perception_node.settings.config import config_from_parameters, load_config
    from jax_perception_node.settings.parameters import SCHEMA, TEMPLATES
    shipped = load_config(REPO / 'config' / 'jax_perception.param.yaml')
    defaults = config_from_parameters({s.key: s.default for s in SCHEMA
                                       if not s.key.startswith(TEMPLATES)})
    for cfg, channels, megabytes in ((shipped, 15, '3.9'), (defaults, 7, '1.8')):
        g = cfg.grid
        shape = f'{g.height} x {g.width} x {cfg.fused_channels}'
        assert (g.height, g.width, cfg.fused_channels) == (256, 256, channels)
        assert f'{g.height * g.width * channels * 4 / 1e6:.1f}' == megabytes
        parameters = (REPO / 'docs' / 'parameters.md').read_text()
        assert f'{shape} float32 = {megabytes} MB' in parameters or (
            f'{shape} (6 LiDAR channels and the coverage), {megabytes} MB' in parameters), shape
    readme = (REPO / 'README.md').read_text()
    assert '256 x 256 x 15 = 3.9 MB with the shipped parameters' in readme
