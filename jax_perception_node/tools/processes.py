"""
ROS processes of the tools and tests: the loopback environment, console scripts, stopping.

Shared by the demo, the benchmarks and the test harnesses, so every process they start stays on
loopback in a domain of its own and is stopped the same way.
"""

import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys

from jax_perception_node.settings.config import default_params_file
from jax_perception_node.tools.arguments import UsageError


def local_ros_env() -> dict:
    """
    Environment for ROS processes on this machine only; also applied to this process.

    Loopback discovery, a domain of our own unless one is set, and the Fast DDS profile with a
    shared-memory segment big enough for clouds and BEV images (see config/fastdds_local.xml).
    """
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST', PYTHONUNBUFFERED='1')
    env.setdefault('ROS_DOMAIN_ID', str(10 + os.getpid() % 80))
    env.setdefault('FASTRTPS_DEFAULT_PROFILES_FILE', str(default_params_file('fastdds_local.xml')))
    keys = ('ROS_AUTOMATIC_DISCOVERY_RANGE', 'ROS_DOMAIN_ID', 'FASTRTPS_DEFAULT_PROFILES_FILE')
    os.environ.update({k: env[k] for k in keys})
    return env


def console_script(name: str) -> str:
    """
    Return the path of a console script of this package; UsageError when none is found.

    Looked for beside the running python (a venv), beside the running script (a colcon
    install puts them in lib/jax_perception_node, off PATH, where ``ros2 run`` finds them),
    in the ament index's prefix, then on PATH.
    """
    running = sys.argv[0] if sys.argv else ''    # empty where Python is embedded
    folders = [Path(sys.executable).parent, Path(running).resolve().parent]
    try:
        from ament_index_python.packages import get_package_prefix
        folders.append(Path(get_package_prefix('jax_perception_node')) / 'lib'
                       / 'jax_perception_node')
    except (ImportError, LookupError, OSError):   # no index, not in it, AMENT_PREFIX_PATH unset
        pass
    for folder in folders:
        path = folder / name
        if path.is_file() and os.access(path, os.X_OK):   # not the package's own folder
            return str(path)
    if shutil.which(name) is None:
        raise UsageError(f'{name}: console script not found beside {sys.executable} or '
                         f'{running}, in the ament index or on PATH (pip install -e ., or '
                         f'colcon build and source install/setup.bash)')
    return name


def stop_process(proc: subprocess.Popen | None, timeout_s: float = 10.0) -> int | None:
    """SIGINT, then SIGKILL after ``timeout_s``; returns the exit code (None: never started)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    return proc.returncode
