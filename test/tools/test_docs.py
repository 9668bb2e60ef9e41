"""The README's figures come from committed runs: docs/bench.json and docs/soak.json."""

import json
from pathlib import Path

from jax_perception_node.tools.bench.report import markdown, soak_markdown, targets

REPO = Path(__file__).resolve().parents[2]
README = (REPO / 'README.md').read_text()


def block(name: str) -> str:
    """Return the README text between ``<!-- name:begin -->`` and ``<!-- name:end -->``."""
    begin, end = f'<!-- {name}:begin -->\n', f'<!-- {name}:end -->'
    assert begin in README and end in README, f'README lacks the {name} markers'
    return README.split(begin, 1)[1].split(end, 1)[0]


def test_performance_section_is_the_committed_bench_run():
    results = json.loads((REPO / 'docs' / 'bench.json').read_text())
    results['targets'] = targets(results)
    assert results['plan'] == 'full' and not results['errors']
    # The report's title line is replaced by the README's own heading.
    expected = markdown(results, nested=True).split('\n', 2)[2]
    assert block('bench') == expected


def test_device_section_is_the_committed_gpu_run():
    results = json.loads((REPO / 'docs' / 'bench_device_gpu.json').read_text())
    results['targets'] = targets(results)
    assert results['parts'] == ['device'] and not results['errors']
    assert results['device']['device']['platform'] == 'gpu'
    assert block('bench-device') == markdown(results, nested=True).split('\n', 2)[2]


def test_soak_section_is_the_committed_soak_run():
    results = json.loads((REPO / 'docs' / 'soak.json').read_text())
    assert results['soak']['seconds'] >= 600
    assert block('soak') == soak_markdown(results)
