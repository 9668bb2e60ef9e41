"""ament_flake8 over the package, as on a ROS build farm."""

from pathlib import Path

from ament_flake8.main import main_with_errors
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    rc, errors = main_with_errors(argv=[str(ROOT / p) for p in (
        'jax_perception_node', 'launch', 'test', 'setup.py')])
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
