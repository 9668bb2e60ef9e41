"""
Under ``CI=true``, a test skipped for a missing part of the project's environment fails.

``make venv`` installs the PyTorch peer, SciPy, Ray and the MCAP readers, and the vendor sources
(sensor_msgs_py, launch) live in ``../shared``; a skip naming one of these means the environment
is broken, which CI must not report as green. Other skips (a test that needs root) stay skips.
Outside CI every skip stays a skip and ``-rs`` (pytest.ini) prints its reason; the run then
ends with one line per missing part naming what was not tested, so no skip passes unseen.
"""

import os
import re

import pytest

# Part of the environment -> how a skip reason names it (case-insensitive).
ENVIRONMENT_PARTS = {
    'torch': r'torch',
    'scipy': r'scipy',
    'ray': r'\bray\b',
    'mcap': r'\bmcap',
    'psutil': r'\bpsutil\b',
    'matplotlib': r'matplotlib',
    'hypothesis': r'\bhypothesis\b',
    'sensor_msgs_py': r'sensor.msgs.py',
    'launch': r'\blaunch(_ros)?\b',
    '../shared': r'\.\./shared|\bvendor\b',
}


def environment_part(reason: str) -> str | None:
    """Return the environment part a skip reason names, or None."""
    for part, pattern in ENVIRONMENT_PARTS.items():
        if re.search(pattern, reason, re.IGNORECASE):
            return part
    return None


def skip_reason(report) -> str:
    """Return the reason of a skipped test report."""
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    return str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Turn a skip for a missing environment part into a failure when CI=true."""
    outcome = yield
    report = outcome.get_result()
    if (not report.skipped or hasattr(report, 'wasxfail')
            or os.environ.get('CI', '').lower() != 'true'):
        return
    reason = skip_reason(report)
    part = environment_part(reason)
    if part is None:
        return
    report.outcome = 'failed'
    report.longrepr = (f'CI=true: skipped for a missing part of the project environment '
                       f'({part}): {reason}. `make venv` installs the Python parts; the vendor '
                       f'sources come from ../shared next to the repository.')


def pytest_terminal_summary(terminalreporter):
    """One line per missing environment part: how many tests it kept from running, and where."""
    missing: dict[str, list] = {}
    for report in terminalreporter.stats.get('skipped', []):
        part = environment_part(skip_reason(report))
        if part is not None:
            missing.setdefault(part, []).append(report)
    for part, reports in sorted(missing.items()):
        files = sorted({report.nodeid.split('::')[0] for report in reports})
        why = skip_reason(reports[0]).removeprefix('Skipped: ')
        terminalreporter.write_line(
            f'NOT TESTED: {len(reports)} tests skipped, {part} missing ({", ".join(files)}): '
            f'{why}')
