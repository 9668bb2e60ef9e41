"""
The package's launch files (.py, .xml) under the real ROS 2 launch system (Jazzy).

launch, launch_xml and launch_ros run them as ``ros2 launch`` would. Those packages are not on
the package index; their sources sit in ../shared/vendor (see its README). They are installed
once into a folder of the venv, never into the repository, and an install prefix like ``colcon
build``'s is laid out in a temporary folder, so launch_ros finds the package and its executables
through the ament index exactly as on a ROS install.
"""

import json
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
from ros_harness import (make_cloud, make_features, Probe, set_parameters, stamp_of,
                         wait_answering, write_params)

SHARED = Path(__file__).resolve().parents[3] / 'shared'
VENDOR = SHARED / 'vendor' / 'ros2-launch-jazzy'
PACKAGES = ('launch', 'launch_xml', 'launch_yaml', 'launch_ros', 'ros2launch')
# launch's own dependency from the index; lark and PyYAML are in the venv already.
OSRF_PYCOMMON = 'osrf-pycommon==2.0.2'
PACKAGE = 'jax_perception_node'
EXECUTABLES = ('jax_perception_node', 'jax_perception_lifecycle_node')
CLOUD_TOPIC = '/sensing/lidar/top/pointcloud'
TEST_DIR = Path(__file__).resolve().parents[1]      # toy_heads.py, for the launched node

RUN_LAUNCH = """
import sys
from launch import LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import AnyLaunchDescriptionSource
path, *pairs = sys.argv[1:]
service = LaunchService(argv=[])
service.include_launch_description(IncludeLaunchDescription(
    AnyLaunchDescriptionSource(path),
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


def launch_env(site: Path, prefix: Path, tmp: Path) -> dict:
    """Return the environment of a launch process: the launch packages, the package's prefix."""
    # The launch packages' folder is a prefix too: launch_xml's parser finds launch's grammar
    # through the ament index.
    env = dict(os.environ, AMENT_PREFIX_PATH=os.pathsep.join([str(prefix), str(site)]),
               PYTHONUNBUFFERED='1', ROS_LOG_DIR=str(tmp / 'ros_log'))
    env['PYTHONPATH'] = os.pathsep.join(
        [str(site), str(VENDOR / 'composition_interfaces_stub'), str(TEST_DIR)]
        + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
    return env


class Launch:
    """A launch file of the package run by launch.LaunchService in its own process."""

    def __init__(self, site: Path, tmp: Path, file: str = 'jax_perception.launch.py',
                 **arguments):
        prefix = install_prefix(tmp / 'install')
        launch_file = prefix / 'share' / PACKAGE / 'launch' / file
        env = launch_env(site, prefix, tmp)
        # launch sends SIGTERM to a node not gone 5 s after SIGINT (its default); a loaded CI
        # machine may take longer to stop JAX and rclpy, and a clean exit is what is checked.
        arguments.setdefault('sigterm_timeout', '30')
        self.log_path = tmp / 'launch.log'
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(
            [sys.executable, '-c', RUN_LAUNCH, str(launch_file),
             *(f'{k}:={v}' for k, v in arguments.items())],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text()

    def running(self) -> bool:
        """Return True while launch and its node run."""
        return self.proc.poll() is None and 'process has died' not in self.log()

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


# Launch argument -> the topic it names, and the node's own input it replaces (node-relative).
REMAPPED = {
    'pointcloud_topic': (CLOUD_TOPIC, 'input/pointcloud'),
    'odometry_topic': ('/localization/kinematic_state', 'input/odometry'),
    'front_features_topic': ('/perception/front/features', 'input/camera/front/features'),
    'front_camera_info_topic': ('/sensing/camera/front/camera_info',
                                'input/camera/front/camera_info'),
}
# The same for the outputs (objects_published_time_topic is left to follow objects_topic).
OUTPUTS = {
    'bev_features_topic': ('/perception/bev/features', 'output/bev_features'),
    'bev_image_topic': ('/perception/bev/image', 'output/bev_image'),
    'bev_grid_map_topic': ('/perception/bev/grid_map', 'output/bev_grid_map'),
    'objects_topic': ('/perception/bev/objects', 'output/objects'),
    'objects_markers_topic': ('/perception/bev/objects/markers', 'output/objects_markers'),
    'latency_topic': ('/perception/bev/debug/latency', 'debug/latency'),
    'processing_time_ms_topic': ('/perception/bev/debug/processing_time_ms',
                                 'debug/processing_time_ms'),
    'cyclic_time_ms_topic': ('/perception/bev/debug/cyclic_time_ms', 'debug/cyclic_time_ms'),
    'pipeline_latency_ms_topic': ('/perception/bev/debug/pipeline_latency_ms',
                                  'debug/pipeline_latency_ms'),
}
PUBLISHED_TIME = '/debug/published_time'    # Autoware's PublishedTimePublisher suffix
FOLLOWING = {'objects_published_time_topic': (OUTPUTS['objects_topic'][0] + PUBLISHED_TIME,
                                              'output/objects' + PUBLISHED_TIME)}
NODE_NAME = 'bev_fusion'
STAMP = 1_700_000_000 * 10**9


def wait_serving(launch, probe, cloud_pub) -> None:
    """Until the launched node subscribes to the cloud topic (it does once active)."""
    # launch outlives a node that dies: its log says so.
    probe.wait_for(lambda: cloud_pub.get_subscription_count() > 0 or not launch.running(),
                   timeout=120.0, what='the node subscribing')
    assert launch.running(), launch.log()


def listen(probe, msg_type, topic: str) -> list:
    """Keep every message on ``topic`` in the returned list (under the probe's lock)."""
    from rclpy.qos import QoSProfile
    store = []
    probe.node.create_subscription(msg_type, topic, lambda m: probe._keep(store, m),
                                   QoSProfile(depth=10))
    return store


def assert_output(launch, probe, cloud_pub, *stores) -> None:
    """Check that a cloud on the remapped topic comes out on every store's topic, its stamp."""
    for _ in range(20):      # best effort: a cloud sent while discovery settles may be lost
        cloud_pub.publish(make_cloud(np.ones((4, 4), np.float32), STAMP))
        deadline = time.monotonic() + 1.5
        while not all(stores) and time.monotonic() < deadline:
            time.sleep(0.01)
        if all(stores):
            break
    assert all(stores), 'no output from the launched node:\n' + launch.log()
    assert all(stamp_of(store[0]) == STAMP for store in stores)


def cloud_publisher(probe):
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import PointCloud2
    return probe.node.create_publisher(PointCloud2, CLOUD_TOPIC, qos_profile_sensor_data)


def get_use_sim_time(probe, node: str = 'jax_perception') -> bool:
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python
    client = probe.node.create_client(GetParameters, f'/{node}/get_parameters')
    wait_answering(probe, client)
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
    # Another focal length than the params' (an unchanged one is not counted as applied).
    info = CameraInfo(width=40, height=24, k=[20.0, 0.0, 19.5, 0.0, 20.0, 11.5, 0.0, 0.0, 1.0])
    info.header.frame_id = 'front_optical'
    odometry = Odometry()
    odometry.header.frame_id, odometry.child_frame_id = 'map', 'base_link'
    odometry.pose.pose.orientation.w = 1.0
    sends = []
    for arg, msg_type, msg, keys in (
            ('front_features_topic', Image,
             make_features(np.ones((12, 20, 3), np.float32), STAMP, 'front'), MAP_COUNTS),
            ('front_camera_info_topic', CameraInfo, info,
             ('camera_info_applied', 'rejected_camera_info')),
            ('odometry_topic', Odometry, odometry, ODOMETRY_COUNTS)):
        pub = probe.node.create_publisher(msg_type, REMAPPED[arg][0], qos_profile_sensor_data)
        probe.wait_for(lambda: pub.get_subscription_count() > 0, what=f'a reader on {arg}')
        sends.append((pub, msg, keys, arg))
    time.sleep(0.1)     # both ends of a match learn of it at about the same moment
    # Taken: accepted or refused, each message reached the node on the remapped topic. One at
    # a time, each sent again until its own count moves: the node's reader may match one
    # publisher later than the others.
    for pub, msg, keys, arg in sends:
        probe.publish_taken([(pub, msg)], keys, arg)


def test_launch_arguments_remap_every_topic_and_name_the_node(launch_site, tmp_path):
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection3DArray
    # use_sim_time given as an argument wins over the file's.
    params = write_params(small_params(1, **{'accumulation.num_sweeps': 2,
                                             'head.module': 'toy_heads:occupancy_head',
                                             'use_sim_time': True}),
                          tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, params_file=params, node_name=NODE_NAME,
                    use_sim_time='false', back_features_topic='/typo',
                    **{arg: topic for arg, (topic, _) in {**REMAPPED, **OUTPUTS}.items()})
    probe = Probe(features=False)
    try:
        cloud_pub = cloud_publisher(probe)
        features = listen(probe, Image, OUTPUTS['bev_features_topic'][0])
        objects = listen(probe, Detection3DArray, OUTPUTS['objects_topic'][0])
        wait_serving(launch, probe, cloud_pub)
        for arg, (topic, own) in REMAPPED.items():
            probe.wait_for(lambda: probe.node.count_subscribers(topic) > 0,
                           what=f'a reader on {topic} ({arg})')
            assert probe.node.count_subscribers(f'/{NODE_NAME}/{own}') == 0, f'{arg}: {own}'
        for arg, (topic, own) in {**OUTPUTS, **FOLLOWING}.items():
            probe.wait_for(lambda: probe.node.count_publishers(topic) > 0,
                           what=f'a writer on {topic} ({arg})')
            assert probe.node.count_publishers(f'/{NODE_NAME}/{own}') == 0, f'{arg}: {own}'
        assert_output(launch, probe, cloud_pub, features, objects)
        send_inputs(probe)
        assert get_use_sim_time(probe, NODE_NAME) is False
    except BaseException:
        launch.stop()       # launch would outlive the test
        raise
    finally:
        probe.close()
    log = assert_clean_exit(launch)
    assert 'jax_perception_node' in log and f'point clouds on {CLOUD_TOPIC}' in log
    assert 'back_features_topic:=/typo names no camera' in log


def test_xml_launch_with_autoware_arguments_managed_autostart(launch_site, tmp_path):
    from autoware_internal_debug_msgs.msg import Float64Stamped
    from diagnostic_msgs.msg import DiagnosticArray
    from lifecycle_msgs.msg import Transition
    from sensor_msgs.msg import Image
    # use_sim_time from the params file alone (no argument): a stack's /** section sets it.
    params = write_params(small_params(0, **{'diagnostics.period_s': 0.2, 'use_sim_time': True}),
                          tmp_path / 'params.yaml')
    topics = {'input/pointcloud': CLOUD_TOPIC,
              'output/bev_features': '/perception/bev/features',
              'debug/processing_time_ms': '/perception/bev/debug/processing_time_ms'}
    launch = Launch(launch_site, tmp_path, file='jax_perception.launch.xml', param_file=params,
                    node_name=NODE_NAME, managed='true', **topics)
    probe = Probe(features=False)
    try:
        cloud_pub = cloud_publisher(probe)
        features = listen(probe, Image, topics['output/bev_features'])
        timing = listen(probe, Float64Stamped, topics['debug/processing_time_ms'])
        latency = listen(probe, DiagnosticArray, f'/{NODE_NAME}/debug/latency')
        wait_serving(launch, probe, cloud_pub)       # no transition requested by anyone here
        client = LifecycleClient(probe, f'/{NODE_NAME}')
        client.wait_for_services(timeout=30.0)
        assert client.state() == 'active'
        assert_output(launch, probe, cloud_pub, features, latency)
        # Its frame status too (it was 'jax_perception: frame' under any name).
        assert [s.name for s in latency[0].status] == [f'/{NODE_NAME}: frame']
        probe.wait_for(lambda: timing, what='processing_time_ms on its remapped topic')
        for own in ('input/pointcloud', 'output/bev_features', 'debug/processing_time_ms'):
            assert not probe.node.get_subscriptions_info_by_topic(f'/{NODE_NAME}/{own}')
            assert not probe.node.get_publishers_info_by_topic(f'/{NODE_NAME}/{own}')
        # The node itself knows its name: its /diagnostics status is named after it.
        probe.wait_for(lambda: any(s.name == f'/{NODE_NAME}: pipeline'
                                   for m in probe.diagnostics for s in m.status),
                       what=f'a /diagnostics status of /{NODE_NAME}')
        assert get_use_sim_time(probe, NODE_NAME) is True
        # Autostart activates after configure only: a deactivated node stays inactive.
        assert client.transition(Transition.TRANSITION_DEACTIVATE)
        assert client.state() == 'inactive'
        # And once: a later configure (a manager's, after a cleanup) is left inactive.
        assert client.transition(Transition.TRANSITION_CLEANUP)
        assert client.transition(Transition.TRANSITION_CONFIGURE)
        time.sleep(2.0)     # launch's activate came within ~0.1 s of reaching inactive
        assert client.state() == 'inactive'
    except BaseException:
        launch.stop()       # launch would outlive the test
        raise
    finally:
        probe.close()
    assert 'jax_perception_lifecycle_node' in assert_clean_exit(launch)


def test_autostart_after_a_failed_configure_and_a_node_that_dies_before_one(launch_site,
                                                                            tmp_path):
    from lifecycle_msgs.msg import Transition
    from rcl_interfaces.srv import SetParameters
    # A configure refused (x_min above x_max): the node stays unconfigured, and the one the
    # operator asks for once the parameter is right is left inactive, as asked (before, the
    # activate of autostart was still armed and fired).
    params = write_params(small_params(0, **{'grid.x_min': 10.0}), tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, params_file=params, managed='true')
    probe = Probe(features=False)
    try:
        client = LifecycleClient(probe)
        client.wait_for_services(timeout=120.0)
        probe.wait_for(lambda: "Failed to make transition 'TRANSITION_CONFIGURE'" in launch.log(),
                       what='the refused configure', timeout=120.0)
        assert client.state() == 'unconfigured'
        setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
        wait_answering(probe, setter)
        assert set_parameters(probe, setter, grid__x_min=-8.0)[0].successful
        assert client.transition(Transition.TRANSITION_CONFIGURE)
        time.sleep(2.0)     # launch's activate came within ~0.1 s of reaching inactive
        assert client.state() == 'inactive'
    except BaseException:
        launch.stop()
        raise
    finally:
        probe.close()
    assert_clean_exit(launch)
    # A parameter the node refuses at start-up: it exits before any configure, and the launch
    # ends with it (before, launch_ros waited for its configure service until Ctrl-C).
    params = write_params(small_params(0, **{'grid.resolution': 0.0}), tmp_path / 'bad.yaml')
    launch = Launch(launch_site, tmp_path / 'bad', params_file=params, managed='true')
    try:
        launch.proc.wait(timeout=120)
    finally:
        launch.stop()
    assert ('jax_perception_lifecycle_node-1 exited (code 1) before it was configured: the '
            'launch ends') in launch.log()


def test_a_namespaced_robot_reads_tf_in_its_namespace(launch_site, tmp_path):
    # Nav2's multi-robot launch files remap /tf to tf (and /tf_static to tf_static): each
    # robot's TF in its namespace. The launch file had no argument for it.
    from geometry_msgs.msg import TransformStamped
    from tf2_msgs.msg import TFMessage
    params = write_params(small_params(0, **{'extrinsics.source': 'tf'}),
                          tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, params_file=params, namespace='robot1',
                    tf_topic='tf', tf_static_topic='tf_static')
    probe = Probe(features=False)
    try:
        for topic in ('/robot1/tf', '/robot1/tf_static'):
            probe.wait_for(lambda: probe.node.count_subscribers(topic) > 0
                           or not launch.running(), timeout=120.0, what=f'a reader on {topic}')
            assert launch.running(), launch.log()
        assert probe.node.count_subscribers('/tf') == 0
        assert probe.node.count_subscribers('/tf_static') == 0
        # A refused transform is logged under the topic it came on (it said /tf).
        bad = TFMessage(transforms=[TransformStamped()])
        bad.transforms[0].header.frame_id = 'odom'
        publisher = probe.node.create_publisher(TFMessage, '/robot1/tf', 10)
        said = '/robot1/tf: child_frame_id is empty'
        deadline = time.monotonic() + 30.0
        while said not in launch.log() and time.monotonic() < deadline:
            publisher.publish(bad)      # until discovery has matched the two
            time.sleep(0.2)
        assert said in launch.log(), launch.log()
    except BaseException:
        launch.stop()       # launch would outlive the test
        raise
    finally:
        probe.close()
    assert_clean_exit(launch)


def test_launch_managed_without_autostart_waits_unconfigured(launch_site, tmp_path):
    from lifecycle_msgs.msg import Transition
    from sensor_msgs.msg import Image
    params = write_params(small_params(0), tmp_path / 'params.yaml')
    launch = Launch(launch_site, tmp_path, pointcloud_topic=CLOUD_TOPIC, params_file=params,
                    managed='true', autostart='false')
    probe = Probe(features=False)
    try:
        cloud_pub = cloud_publisher(probe)
        features = listen(probe, Image, '/jax_perception/output/bev_features')
        client = LifecycleClient(probe)
        client.wait_for_services(timeout=120.0)
        assert client.state() == 'unconfigured'
        # These fail when anything else configured the node (configure is only valid once).
        assert client.transition(Transition.TRANSITION_CONFIGURE)
        assert client.transition(Transition.TRANSITION_ACTIVATE)
        wait_serving(launch, probe, cloud_pub)
        assert_output(launch, probe, cloud_pub, features)
    except BaseException:
        launch.stop()       # launch would outlive the test
        raise
    finally:
        probe.close()
    assert 'jax_perception_lifecycle_node' in assert_clean_exit(launch)


# Evaluates remappings() of the launch file as launch would: the arguments given, then every
# declared argument's default for the rest.
RULES = """
import json, runpy, sys
from launch import LaunchContext
from launch.actions import DeclareLaunchArgument
module = runpy.run_path(sys.argv[1])
results = []
for given in json.loads(sys.argv[2]):
    context = LaunchContext()
    context.launch_configurations.update(given)
    for entity in module['generate_launch_description']().entities:
        if isinstance(entity, DeclareLaunchArgument):
            entity.visit(context)
    results.append(module['remappings'](context))
print(json.dumps(results))
"""


def launch_rules(launch_site, tmp_path, given: list, refused: bool = False):
    """
    Return ``remappings(context)`` of the installed launch file for each of ``given``.

    ``refused``: return the last line of the error that stops it instead.
    """
    prefix = install_prefix(tmp_path / 'install')
    result = subprocess.run(
        [sys.executable, '-c', RULES,
         str(prefix / 'share' / PACKAGE / 'launch' / 'jax_perception.launch.py'),
         json.dumps(given)], env=launch_env(launch_site, prefix, tmp_path),
        capture_output=True, text=True, timeout=120)
    if refused:
        assert result.returncode != 0, result.stdout
        return result.stderr.strip().splitlines()[-1]
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_launch_rules_per_camera_and_published_time(launch_site, tmp_path):
    params = tmp_path / 'params.yaml'
    params.write_text('/**:\n  ros__parameters:\n    cameras:\n      names: [front, left]\n')
    common = {'params_file': str(params)}
    given = [
        dict(common, rear_features_topic='/typo',
             front_features_topic='/perception/front/features',
             objects_topic='/perception/objects'),
        dict(common, objects_published_time_topic='/perception/objects_published_time'),
    ]
    (rules, warnings), (default_rules, _) = launch_rules(launch_site, tmp_path, given)
    rules, default_rules = dict(map(tuple, rules)), dict(map(tuple, default_rules))
    assert rules['~/input/camera/front/features'] == '/perception/front/features'
    assert '~/input/camera/left/features' not in rules     # not given: the node's own name
    assert rules['~/output/objects'] == '/perception/objects'
    # Autoware's PublishedTimePublisher name: the objects topic + /debug/published_time.
    assert rules['~/output/objects/debug/published_time'] == (
        '/perception/objects/debug/published_time')
    assert default_rules['~/output/objects/debug/published_time'] == (
        '/perception/objects_published_time')
    assert default_rules['~/output/bev_features'] == '~/output/bev_features'
    cameras = ['front', 'left']
    assert warnings == [f'rear_features_topic:=/typo names no camera of {params} '
                        f'(cameras.names: {cameras}); ignored']


def test_launch_rules_per_lidar(launch_site, tmp_path):
    params = tmp_path / 'params.yaml'
    params.write_text('/**:\n  ros__parameters:\n    lidars:\n      names: [top, left]\n')
    given = [{'params_file': str(params), 'top_pointcloud_topic': '/sensing/lidar/top/points',
              'rear_pointcloud_topic': '/typo', 'pointcloud_topic': CLOUD_TOPIC},
             {'params_file': str(params)}]
    (rules, warnings), (_, default_warnings) = launch_rules(launch_site, tmp_path, given)
    rules = dict(map(tuple, rules))
    assert rules['~/input/top/pointcloud'] == '/sensing/lidar/top/points'
    assert '~/input/left/pointcloud' not in rules     # not given: the node's own name
    lidars = ['top', 'left']
    assert warnings == [
        f'pointcloud_topic:={CLOUD_TOPIC} is not read: {params} names several LiDARs '
        f'(lidars.names: {lidars}), each remapped by <name>_pointcloud_topic; ignored',
        f'rear_pointcloud_topic:=/typo names no LiDAR of {params} (lidars.names: {lidars}); '
        'ignored']
    assert default_warnings == []


def test_launch_reads_the_sections_of_its_node_as_rcl_merges_them(launch_site, tmp_path):
    # A stack's file: one section for every node, one for a driver, one for this node under
    # its launch name and namespace.
    params = tmp_path / 'stack.yaml'
    params.write_text('/**:\n  ros__parameters:\n    use_sim_time: true\n'
                      'velodyne_driver_node:\n  ros__parameters:\n    cameras:\n'
                      '      names: [wrong]\n'
                      '/perception/bev_fusion:\n  ros__parameters:\n    cameras:\n'
                      '      names: [front]\n')
    given = [{'params_file': str(params), 'node_name': 'bev_fusion', 'namespace': 'perception',
              'front_features_topic': '/perception/front/features'}]
    [(rules, warnings)] = launch_rules(launch_site, tmp_path, given)
    assert dict(map(tuple, rules))['~/input/camera/front/features'] == (
        '/perception/front/features')
    assert warnings == []


def test_launch_reads_the_file_for_the_name_launch_ros_gives_and_stops_without_a_section(
        launch_site, tmp_path):
    params = tmp_path / 'stack.yaml'
    params.write_text('/**:\n  ros__parameters:\n    use_sim_time: true\n'
                      'velodyne_driver_node:\n  ros__parameters:\n    rpm: 600\n'
                      '/perception/jax_perception:\n  ros__parameters:\n    cameras:\n'
                      '      names: [front]\n')
    front = {'front_features_topic': '/perception/front/features'}
    # Included under PushRosNamespace('perception'): launch_ros runs the node as
    # /perception/jax_perception, and rcl gives it that section.
    [(rules, warnings)] = launch_rules(launch_site, tmp_path, [
        {'params_file': str(params), 'ros_namespace': '/perception', **front}])
    assert dict(map(tuple, rules))['~/input/camera/front/features'] == (
        '/perception/front/features')
    assert warnings == []
    # Renamed, the node would get none of its section from rcl: the launch stops, naming them.
    keyed = tmp_path / 'keyed.yaml'
    keyed.write_text('/jax_perception:\n  ros__parameters:\n    cameras:\n'
                     '      names: [front]\n')
    (tmp_path / 'renamed').mkdir()
    error = launch_rules(launch_site, tmp_path / 'renamed', [
        {'params_file': str(keyed), 'node_name': 'bev_fusion', **front}], refused=True)
    assert error.endswith(f'params file {keyed}: /jax_perception configure this node, but no '
                          'section applies to node /bev_fusion (rcl would give it the /** '
                          'values alone); name one /bev_fusion'), error


def test_launch_warns_of_a_camera_topic_its_input_does_not_read(launch_site, tmp_path):
    params = tmp_path / 'params.yaml'
    params.write_text('/**:\n  ros__parameters:\n    cameras:\n      names: [front, left]\n'
                      '      front:\n        input: image\n')
    [(rules, warnings)] = launch_rules(launch_site, tmp_path, [{
        'params_file': str(params), 'front_features_topic': '/f/features',
        'front_compressed_topic': '/f/image/compressed', 'left_image_topic': '/l/image',
        'left_features_topic': '/l/features'}])
    rules = dict(map(tuple, rules))
    assert rules['~/input/camera/front/image/compressed'] == '/f/image/compressed'
    assert rules['~/input/camera/left/features'] == '/l/features'
    assert '~/input/camera/front/features' not in rules
    assert '~/input/camera/left/image' not in rules
    assert warnings == [
        'front_features_topic:=/f/features is not read: camera front has input: image (its '
        'topics: front_image_topic, front_compressed_topic, front_camera_info_topic); ignored',
        'left_image_topic:=/l/image is not read: camera left has input: features (its topics: '
        'left_features_topic, left_camera_info_topic); ignored']
