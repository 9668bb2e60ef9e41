"""ament_flake8 over the package, as on a ROS build farm."""

from pathlib import Path
import subprocess
import sys

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ('jax_perception_node', 'launch', 'interfaces', 'test', 'setup.py')

# flake8 forks worker processes; forking this pytest process, where JAX's threads already run,
# can deadlock. A fresh interpreter has no threads to inherit.
CHECK = """
import sys
from ament_flake8.main import main_with_errors
rc, errors = main_with_errors(argv=sys.argv[1:])
print(f'Found {len(errors)} code style errors / warnings:')
print('\\n'.join(errors))
sys.exit(rc)
"""


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    paths = [str(ROOT / p) for p in PATHS]
    result = subprocess.run([sys.executable, '-c', CHECK, *paths], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
