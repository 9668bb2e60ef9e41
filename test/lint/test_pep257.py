"""ament_pep257 docstring checks over the package."""

from pathlib import Path

from ament_pep257.main import main
import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ('jax_perception_node', 'launch', 'interfaces', 'test', 'setup.py')


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    rc = main(argv=[str(ROOT / p) for p in PATHS])
    assert rc == 0, 'Found code style errors / warnings'
