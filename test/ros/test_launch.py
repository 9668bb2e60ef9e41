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
from ros_harness import make_cloud, make_features, Probe, stamp_of, write_params

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


# Launch argument -> the topic it names, and the node's own input it replaces.
REMAPPED = {
    'pointcloud_topic': (CLOUD_TOPIC, '/jax_perception/input/pointcloud'),
    'odometry_topic': ('/localization/kinematic_state', '/jax_perception/input/odometry'),
    'front_features_topic': ('/perception/front/features',
                             '/jax_perception/input/camera/front/features'),
    'front_camera_info_topic': ('/sensing/camera/front/camera_info',
                                '/jax_perception/input/camera/front/camera_info'),
}


def wait_serving(launch, probe, cloud_pub) -> None:
    """Until the launched node subscribes to the cloud topic (it does once active)."""
    probe.wait_for(lambda: cloud_pub.get_subscription_count() > 0 or launch.proc.poll()
                   is not None, timeout=120.0, what='the node subscribing')
    assert launch.proc.poll() is None, launch.log()


def assert_output(launch, probe, cloud_pub) -> None:
    """Check that a cloud on the remapped topic comes out as bev_features with its stamp."""
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


def cloud_publisher(probe):
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import PointCloud2
    return probe.node.create_publisher(PointCloud2, CLOUD_TOPIC, qos_profile_sensor_data)


def get_use_sim_time(probe) -> bool:
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python
    client = probe.node.create_client(GetParameters, '/jax_perception/get_parameters')
    assert client.wait_for_service(timeout_sec=10)
    future = client.call_async(GetParameters.Request(names=['use_sim_time']))
    probe.wait_for(future.done, what='get_parameters')
    return parameter_value_to_python(future.result().values[0])


def assert_clean_exit(launch) -> str:
    assert launch.stop() == 0, launch.log()
    log = launch.log()
    assert 'process has finished cleanly' in log and 'SIGTERM' not in log
    return log


def send_inputs(probe) -> None:
    """Send a feature map, a CameraInfo and an odometry message on their remapped topics."""
    from nav_msgs.msg import Odometry
    from rclpy.qos import qos_profile_sensor_data
    from ros_harness import MAP_COUNTS, ODOMETRY_COUNTS
    from sensor_msgs.msg import CameraInfo, Image
    stamp = 1_700_000_000 * 10**9
    # Another focal length than the params' (an unchanged one is not counted as applied).
    info = CameraInfo(width=40, height=24, k=[20.0, 0.0, 19.5, 0.0, 20.0, 11.5, 0.0, 0.0, 1.0])
    info.header.frame_id = 'front_optical'
    odometry = Odometry()
    odometry.header.frame_id, odometry.child_frame_id = 'map', 'base_link'
    odometry.pose.pose.orientation.w = 1.0
    sends = []
    for arg, msg_type, msg in (
            ('front_features_topic', Image,
             make_features(np.ones((12, 20, 3), np.float32), stamp, 'front')),
            ('front_camera_info_topic', CameraInfo, info), ('odometry_topic', Odometry, odometry)):
        pub = probe.node.create_publisher(msg_type, REMAPPED[arg][0], qos_profile_sensor_data)
        probe.wait_for(lambda: pub.get_subscription_count() > 0, what=f'a reader on {arg}')
        sends.append((pub, msg))
    time.sleep(0.1)     # both ends of a match learn of it at about the same moment
    # Taken: accepted or refused, each message reached the node on the remapped topic.
    probe.publish_taken(sends, MAP_COUNTS + ODOMETRY_COUNTS
                        + ('camera_info_applied', 'rejected_camera_info'), 'remapped inputs')


def test_launch_arguments_remap_every_input(launch_site, tmp_path):
    params = write_params(small_params(1, **{'accumulation.num_sweeps': 2}),
                          tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, params_file=params, back_features_topic='/typo',
                    **{arg: topic for arg, (topic, _) in REMAPPED.items()})
    probe = Probe()
    try:
        cloud_pub = cloud_publisher(probe)
        wait_serving(launch, probe, cloud_pub)
        for arg, (topic, own) in REMAPPED.items():
            probe.wait_for(lambda: probe.node.count_subscribers(topic) > 0,
                           what=f'a reader on {topic} ({arg})')
            assert probe.node.count_subscribers(own) == 0, f'{arg}: still reads {own}'
        assert_output(launch, probe, cloud_pub)
        send_inputs(probe)
        assert get_use_sim_time(probe) is False
    finally:
        probe.close()
    log = assert_clean_exit(launch)
    assert 'jax_perception_node' in log and 'ready:' in log
    assert 'back_features_topic:=/typo names no camera' in log


def test_launch_managed_autostart_configures_and_activates(launch_site, tmp_path):
    from lifecycle_msgs.msg import Transition
    params = write_params(small_params(0), tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, pointcloud_topic=CLOUD_TOPIC, params_file=params,
                    use_sim_time='true', managed='true')
    probe = Probe()
    try:
        cloud_pub = cloud_publisher(probe)
        wait_serving(launch, probe, cloud_pub)       # no transition requested by anyone here
        client = LifecycleClient(probe)
        client.wait_for_services(timeout=30.0)
        assert client.state() == 'active'
        assert_output(launch, probe, cloud_pub)
        assert get_use_sim_time(probe) is True
        # Autostart activates after configure only: a deactivated node stays inactive.
        assert client.transition(Transition.TRANSITION_DEACTIVATE)
        assert client.state() == 'inactive'
    finally:
        probe.close()
    assert 'jax_perception_lifecycle_node' in assert_clean_exit(launch)


def test_launch_managed_without_autostart_waits_unconfigured(launch_site, tmp_path):
    from lifecycle_msgs.msg import Transition
    params = write_params(small_params(0), tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, pointcloud_topic=CLOUD_TOPIC, params_file=params,
                    managed='true', autostart='false')
    probe = Probe()
    try:
        cloud_pub = cloud_publisher(probe)
        client = LifecycleClient(probe)
        client.wait_for_services(timeout=120.0)
        assert client.state() == 'unconfigured'
        # These fail when anything else configured the node (configure is only valid once).
        assert client.transition(Transition.TRANSITION_CONFIGURE)
        assert client.transition(Transition.TRANSITION_ACTIVATE)
        wait_serving(launch, probe, cloud_pub)
        assert_output(launch, probe, cloud_pub)
    finally:
        probe.close()
    assert 'jax_perception_lifecycle_node' in assert_clean_exit(launch)
