"""The CI rule for skips, run on a throw-away test file in a separate pytest process."""

from pathlib import Path
import re
import subprocess
import sys

from ci_skips import environment_part
import pytest

INNER = """
import pytest


def test_missing_torch():
    pytest.importorskip('torch_that_is_not_there')


def test_missing_peer():
    pytest.skip('PyTorch (optional extra bench) not installed')


def test_missing_shared():
    pytest.skip('../shared is absent: no vendor sources')


@pytest.mark.skipif(True, reason='needs root to chown')
def test_needs_root():
    pass


@pytest.mark.xfail(reason='known', strict=True)
def test_known_failure():
    assert False


def test_passes():
    pass
"""


def run_inner(tmp_path: Path, ci: str | None) -> str:
    (tmp_path / 'test_inner.py').write_text(INNER)
    (tmp_path / 'pytest.ini').write_text('[pytest]\n')
    env = {'PATH': '/usr/bin:/bin', 'PYTHONPATH': str(Path(__file__).resolve().parents[1])}
    if ci is not None:
        env['CI'] = ci
    result = subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'ci_skips', '-p', 'no:cacheprovider',
         str(tmp_path / 'test_inner.py')], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120)
    return result.stdout + result.stderr


def summary(output: str) -> dict:
    line = output.strip().splitlines()[-1]
    return {kind: int(n) for n, kind in re.findall(r'(\d+) (\w+)', line)}


@pytest.mark.parametrize('ci', [None, 'false'])
def test_outside_ci_every_skip_stays_a_skip_with_its_reason(tmp_path, ci):
    output = run_inner(tmp_path, ci)
    assert summary(output) == {'passed': 1, 'skipped': 4, 'xfailed': 1}, output
    assert 'PyTorch (optional extra bench) not installed' in output
    # One line per missing part says what was not tested and why; a plain skip gets none.
    loud = [line for line in output.splitlines() if line.startswith('NOT TESTED:')]
    assert loud == [
        'NOT TESTED: 1 tests skipped, ../shared missing (test_inner.py): ../shared is absent: '
        'no vendor sources',
        'NOT TESTED: 2 tests skipped, torch missing (test_inner.py): could not import '
        "'torch_that_is_not_there': No module named 'torch_that_is_not_there'"], output


def test_under_ci_a_missing_environment_part_fails(tmp_path):
    output = run_inner(tmp_path, 'true')
    assert summary(output) == {'failed': 3, 'passed': 1, 'skipped': 1, 'xfailed': 1}, output
    assert 'missing part of the project environment (torch)' in output
    assert 'missing part of the project environment (../shared)' in output
    assert 'needs root to chown' in output


@pytest.mark.parametrize('reason, part', [
    ("could not import 'ray': No module named 'ray'", 'ray'),
    ("could not import 'mcap_ros2'", 'mcap'),
    ('launch_ros is not on PyPI (full ROS install only)', 'launch'),
    ('sensor_msgs_py not found in ../shared/vendor', 'sensor_msgs_py'),
    ('needs root to create a directory for another uid', None),
    ('an array of one element', None),
])
def test_reasons_name_their_part(reason, part):
    assert environment_part(reason) == part
