"""Where the tools find the package's console scripts: a venv, a colcon install, PATH."""

import sys

from jax_perception_node.tools.arguments import UsageError
from jax_perception_node.tools.processes import console_script
import pytest


def script(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('#!/bin/sh\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """Run outside any venv, nothing on PATH, an empty ament index, in tmp_path; return it."""
    monkeypatch.setattr(sys, 'executable', str(tmp_path / 'usr' / 'bin' / 'python3'))
    monkeypatch.setattr(sys, 'argv', ['-c'])
    monkeypatch.setenv('PATH', str(tmp_path / 'empty'))
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'no-prefix'))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_colcon_installs_script_is_found_beside_the_running_one(nowhere, monkeypatch):
    # colcon puts them in <prefix>/lib/jax_perception_node, off PATH: `ros2 run ... demo`
    # said the node's script was not installed.
    lib = nowhere / 'install' / 'lib' / 'jax_perception_node'
    running, node = script(lib / 'jax-perception'), script(lib / 'jax_perception_node')
    monkeypatch.setattr(sys, 'argv', [str(running), 'demo'])
    assert console_script('jax_perception_node') == str(node)


def test_the_ament_index_prefix_is_looked_in(nowhere, monkeypatch):
    prefix = nowhere / 'install'
    marker = prefix / 'share' / 'ament_index' / 'resource_index' / 'packages'
    marker.mkdir(parents=True)
    (marker / 'jax_perception_node').write_text('')
    node = script(prefix / 'lib' / 'jax_perception_node' / 'jax_perception_node')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(prefix))
    assert console_script('jax_perception_node') == str(node)


def test_the_venv_comes_first_and_the_package_folder_is_no_script(nowhere, monkeypatch):
    (nowhere / 'jax_perception_node').mkdir()    # the source tree's package, in the cwd
    with pytest.raises(UsageError, match=r'^jax_perception_node: console script not found '):
        console_script('jax_perception_node')
    venv = script(nowhere / 'venv' / 'bin' / 'jax_perception_node')
    monkeypatch.setattr(sys, 'executable', str(venv.with_name('python')))
    assert console_script('jax_perception_node') == str(venv)
