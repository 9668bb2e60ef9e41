"""
launch/jax_perception.launch.py under the real ROS 2 launch system (launch, launch_ros: Jazzy).

Those packages are not on the package index; their sources sit in ../shared/vendor (see its
README). They are installed once into a folder of the venv, never into the repository, and an
install prefix like ``colcon build``'s is laid out in a temporary folder, so launch_ros finds the
package and its executables through the ament index exactly as on a ROS install.
"""

import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from configs import REPO, small_params
from lifecycle_harness import LifecycleClient
import numpy as np
import pytest
from ros_harness import make_cloud, Probe, stamp_of, write_params

SHARED = Path(__file__).resolve().parents[3] / 'shared'
VENDOR = SHARED / 'vendor' / 'ros2-launch-jazzy'
PACKAGES = ('launch', 'launch_xml', 'launch_yaml', 'launch_ros', 'ros2launch')
# launch's own dependency from the index; lark and PyYAML are in the venv already.
OSRF_PYCOMMON = 'osrf-pycommon==2.0.2'
PACKAGE = 'jax_perception_node'
EXECUTABLES = ('jax_perception_node', 'jax_perception_lifecycle_node')
CLOUD_TOPIC = '/sensing/lidar/top/pointcloud'

RUN_LAUNCH = """
import sys
from launch import LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
path, *pairs = sys.argv[1:]
service = LaunchService(argv=[])
service.include_launch_description(IncludeLaunchDescription(
    PythonLaunchDescriptionSource(path),
    launch_arguments=[tuple(p.split(':=', 1)) for p in pairs]))
sys.exit(service.run())
"""


def install_launch() -> Path:
    """Install the vendored launch packages into the venv's own folder once; return it."""
    target = Path(sys.prefix) / 'launch-jazzy'
    stamp = target / 'INSTALLED'
    source_id = (VENDOR / 'README.md').read_text()
    if stamp.exists() and stamp.read_text() == source_id:
        return target
    with tempfile.TemporaryDirectory() as tmp:
        # The vendor folder is read-only and pip builds in the source tree: copy it first.
        src = Path(tmp) / 'src'
        shutil.copytree(VENDOR, src)
        staging = Path(tmp) / 'site'
        pip = [sys.executable, '-m', 'pip', 'install', '--quiet', '--no-deps',
               '--no-build-isolation', '--target', str(staging)]
        subprocess.run(pip + [str(src / p) for p in PACKAGES], check=True, timeout=300)
        try:
            __import__('osrf_pycommon')
        except ImportError:
            subprocess.run(pip + [OSRF_PYCOMMON], check=True, timeout=300)
        (staging / 'INSTALLED').write_text(source_id)
        # Another run may be installing too: the rename makes the finished folder appear whole.
        partial = target.with_name(f'{target.name}.{os.getpid()}')
        shutil.rmtree(partial, ignore_errors=True)
        shutil.move(str(staging), partial)
        shutil.rmtree(target, ignore_errors=True)
        try:
            partial.rename(target)
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def install_prefix(prefix: Path) -> Path:
    """Lay out ``prefix`` as ``colcon build`` would install this package."""
    share = prefix / 'share'
    index = share / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    shutil.copy(REPO / 'resource' / PACKAGE, index / PACKAGE)
    pkg_share = share / PACKAGE
    pkg_share.mkdir()
    shutil.copy(REPO / 'package.xml', pkg_share / 'package.xml')
    for folder in ('launch', 'config'):
        shutil.copytree(REPO / folder, pkg_share / folder)
    lib = prefix / 'lib' / PACKAGE
    lib.mkdir(parents=True)
    for exe in EXECUTABLES:
        script = Path(sys.executable).with_name(exe)
        if not script.exists():
            raise AssertionError(f'{script} is not installed (pip install -e .)')
        (lib / exe).symlink_to(script)
    return prefix


@pytest.fixture(scope='module')
def launch_site():
    if not VENDOR.is_dir():
        pytest.skip(f'{VENDOR} is absent: the ROS 2 launch sources live outside this '
                    'repository, in its ../shared folder')
    return install_launch()


class Launch:
    """``jax_perception.launch.py`` run by launch.LaunchService in its own process."""

    def __init__(self, site: Path, tmp: Path, **arguments):
        prefix = install_prefix(tmp / 'install')
        launch_file = prefix / 'share' / PACKAGE / 'launch' / 'jax_perception.launch.py'
        env = dict(os.environ, AMENT_PREFIX_PATH=str(prefix), PYTHONUNBUFFERED='1',
                   ROS_LOG_DIR=str(tmp / 'ros_log'))
        env['PYTHONPATH'] = os.pathsep.join(
            [str(site), str(VENDOR / 'composition_interfaces_stub')]
            + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
        self.log_path = tmp / 'launch.log'
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(
            [sys.executable, '-c', RUN_LAUNCH, str(launch_file),
             *(f'{k}:={v}' for k, v in arguments.items())],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            # Ctrl-C in a terminal: the whole process group gets SIGINT (launch counts on that
            # and does not forward it to its nodes).
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def run_launch(launch_site, tmp_path, managed: bool):
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import PointCloud2
    params = write_params(small_params(0), tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, pointcloud_topic=CLOUD_TOPIC, params_file=params,
                    use_sim_time='true' if managed else 'false',
                    managed='true' if managed else 'false')
    probe = Probe()
    try:
        cloud_pub = probe.node.create_publisher(PointCloud2, CLOUD_TOPIC,
                                                qos_profile_sensor_data)
        if managed:
            from lifecycle_msgs.msg import Transition
            client = LifecycleClient(probe)
            client.wait_for_services(timeout=120.0)
            assert client.state() == 'unconfigured'
            assert client.transition(Transition.TRANSITION_CONFIGURE)
            assert client.transition(Transition.TRANSITION_ACTIVATE)
        probe.wait_for(lambda: cloud_pub.get_subscription_count() > 0 or launch.proc.poll()
                       is not None, timeout=120.0, what='the node subscribing')
        assert launch.proc.poll() is None, launch.log()
        # Remapped: nobody listens on the default input any more.
        assert probe.cloud_pub.get_subscription_count() == 0
        stamp = 1_700_000_000 * 10**9
        for _ in range(20):      # best effort: a cloud sent while discovery settles may be lost
            cloud_pub.publish(make_cloud(np.ones((4, 4), np.float32), stamp))
            deadline = time.monotonic() + 1.5
            while not probe.features and time.monotonic() < deadline:
                time.sleep(0.01)
            if probe.features:
                break
        assert probe.features, 'no output from the launched node:\n' + launch.log()
        assert stamp_of(probe.features[0]) == stamp
        return launch, probe, get_use_sim_time(probe)
    finally:
        probe.close()
        assert launch.stop() == 0, launch.log()


def get_use_sim_time(probe) -> bool:
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python
    client = probe.node.create_client(GetParameters, '/jax_perception/get_parameters')
    assert client.wait_for_service(timeout_sec=10)
    future = client.call_async(GetParameters.Request(names=['use_sim_time']))
    probe.wait_for(future.done, what='get_parameters')
    return parameter_value_to_python(future.result().values[0])


def test_launch_file_starts_the_node_on_the_remapped_topic(launch_site, tmp_path):
    launch, _, use_sim_time = run_launch(launch_site, tmp_path, managed=False)
    assert use_sim_time is False
    log = launch.log()
    assert 'jax_perception_node' in log and 'ready:' in log
    assert 'process has finished cleanly' in log and 'SIGTERM' not in log


def test_launch_file_managed_starts_the_lifecycle_node(launch_site, tmp_path):
    launch, _, use_sim_time = run_launch(launch_site, tmp_path, managed=True)
    assert use_sim_time is True
    log = launch.log()
    assert 'jax_perception_lifecycle_node' in log
    assert 'process has finished cleanly' in log and 'SIGTERM' not in log
