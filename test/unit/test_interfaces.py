"""The interface packages built from interfaces/: hashes, CDR round trips, bags, live DDS."""

import importlib.util
import os
from pathlib import Path
import subprocess
import sys
import threading
import time

from configs import REPO
from jax_perception_node.bags import bagio, message_types
import numpy as np
import pytest
import yaml

# msgtype -> RIHS01 of the definitions in interfaces/. TFMessage's equals the one in rosbags'
# own Jazzy store (upstream tf2_msgs); Detection3DArray's equals the hash published for
# vision_msgs 4.x on Jazzy. A definition edited so that its hash moves fails here first.
EXPECTED_HASHES = {
    'tf2_msgs/msg/TFMessage':
        'RIHS01_e369d0f05a23ae52508854b66f6aa0437f3449d652e8cbf22d5abe85d020f087',
    'grid_map_msgs/msg/GridMap':
        'RIHS01_343b0e72887541beda6b035cc053f2d6fffaad9d6dcb2773c15a808dfca31fde',
    'grid_map_msgs/msg/GridMapInfo':
        'RIHS01_0a36d6b5bc9af8463d1d5a5008ef9fcac0c1373ba090f80c3594e47cc565b745',
    'vision_msgs/msg/Detection3DArray':
        'RIHS01_793f5eab9595ac1c0da07873cc859db42eae51f0ee76056db8562515d830e018',
    'vision_msgs/msg/Detection3D':
        'RIHS01_ddd703be132ab0b69d33121f1bb034132bfbb3b0ac5f9fb1516005ba1c8a265b',
    'vision_msgs/msg/ObjectHypothesisWithPose':
        'RIHS01_41c12344c0396c48b81df12467c192d99b2a0eb1463c5c37194e4223251c80bc',
    'vision_msgs/msg/ObjectHypothesis':
        'RIHS01_51da43cec11c01957a64d1e05a24acd18aae7745ec30b74348ad5f6d634f7f90',
    'vision_msgs/msg/BoundingBox3D':
        'RIHS01_bbb73a65c163d7f9bb29009c7bde9f7faa576bd2d23299c4511d19230dab4698',
    'autoware_internal_debug_msgs/msg/Float64Stamped':
        'RIHS01_588b194ed7eddc089b6ca098eb093e92f29bdad96ebd906fc9282816335942eb',
    'autoware_perception_msgs/msg/DetectedObjects':
        'RIHS01_2facd6b15786cbd1f720cdd23d22e6d60d2e7e83b8dff8fd401330e24edb187b',
    'autoware_perception_msgs/msg/DetectedObject':
        'RIHS01_395e8cae03c45c86ddb3263f9db58f5a1364bdabdcec56c24c817a372f7d566f',
    'autoware_perception_msgs/msg/ObjectClassification':
        'RIHS01_38131fef2df46486c20c12c238faf778328309f4c3e9daa6ffd621732e48dd19',
    'autoware_perception_msgs/msg/DetectedObjectKinematics':
        'RIHS01_a01b4e06aa855e7a501b1af1e7c6a9eddb70e728e8f1195372ff5801cae1c9eb',
    'autoware_perception_msgs/msg/Shape':
        'RIHS01_1a32ac3073c17e4822d39b7f4c263eb1c4a2bacbf707d6db96e77e867063562b',
    'autoware_internal_msgs/msg/PublishedTime':
        'RIHS01_21dd0f5f27787b09d004f430fa63fb6e4e9e830c6b78dbd02d4b2018b48ea4d7',
    # Constants' equals upstream bond_core's generated code.
    'bond/msg/Constants':
        'RIHS01_347874ac7a49af69eb313fc911d72cd59152a5a157b6577cafad31ad43a8d63e',
    'bond/msg/Status':
        'RIHS01_87eaccffa254ffffadc0b61600452e8251740f06c25659a2dbda4927fdb1f70a',
}


def rclpy_class(msgtype: str):
    """Return the rclpy message class of ``pkg/msg/Name``."""
    package, _, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{package}.msg'), name)


def load_build_script():
    spec = importlib.util.spec_from_file_location(
        'build_interfaces', REPO / 'interfaces' / 'build_interfaces.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def ros_node():
    """Yield an rclpy node in a context of its own, shut down after the module."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('interfaces_probe', context=context)
    yield node
    node.destroy_node()
    rclpy.try_shutdown(context=context)


def offered_hash(node, topic: str) -> str:
    """Return the RIHS01 of the type support behind the publishers of ``topic`` (graph)."""
    for _ in range(2000):
        infos = node.get_publishers_info_by_topic(topic)
        if infos:
            return str(infos[0].topic_type_hash)
        time.sleep(0.005)
    raise AssertionError(f'no publisher on {topic} in the graph')


def test_definitions_cover_every_interface_package():
    defined = sorted(p.relative_to(REPO / 'interfaces').as_posix()
                     for p in (REPO / 'interfaces').glob('*/msg/*.msg'))
    assert defined == sorted('{0}/msg/{2}.msg'.format(*t.split('/')) for t in EXPECTED_HASHES)
    assert bagio.MISSING_TYPES == ()


@pytest.mark.parametrize('msgtype', sorted(EXPECTED_HASHES))
def test_rclpy_type_hash_equals_rosbags_hash(ros_node, msgtype):
    """The hash rclpy's type support offers on the wire is the one rosbags computes."""
    topic = '/interfaces_test/' + msgtype.replace('/msg/', '_').replace('/', '_')
    publisher = ros_node.create_publisher(rclpy_class(msgtype), topic, 1)
    try:
        live = offered_hash(ros_node, topic)
    finally:
        ros_node.destroy_publisher(publisher)
    assert live == bagio.TYPESTORE.hash_rihs01(msgtype) == EXPECTED_HASHES[msgtype]


def test_tf_message_hash_equals_rosbags_builtin_definition():
    """tf2_msgs comes with rosbags' Jazzy store: our definition must hash like upstream's."""
    from rosbags.typesys import get_typestore, Stores
    from rosbags.typesys import get_types_from_msg
    store = get_typestore(Stores.ROS2_JAZZY)
    ours = get_types_from_msg((REPO / 'interfaces/tf2_msgs/msg/TFMessage.msg').read_text(),
                              'tf2_msgs/msg/TFMessage')
    assert ours['tf2_msgs/msg/TFMessage'] == store.fielddefs['tf2_msgs/msg/TFMessage']


def grid_map_rclpy():
    from grid_map_msgs.msg import GridMap
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension
    msg = GridMap(layers=['occupancy', 'density'], basic_layers=['occupancy'],
                  outer_start_index=3, inner_start_index=7)
    msg.header.frame_id, msg.header.stamp.sec, msg.header.stamp.nanosec = 'base_link', 12, 345
    msg.info.resolution, msg.info.length_x, msg.info.length_y = 0.5, 2.0, 1.5
    msg.info.pose.position.x, msg.info.pose.orientation.z = 4.25, 0.5
    for k in range(2):
        layer = Float32MultiArray(data=(np.arange(12, dtype=np.float32) * (k + 1)).tolist())
        layer.layout.dim = [MultiArrayDimension(label='column_index', size=3, stride=12),
                            MultiArrayDimension(label='row_index', size=4, stride=4)]
        msg.data.append(layer)
    return msg


def detections_rclpy():
    from vision_msgs.msg import Detection3D, Detection3DArray, ObjectHypothesisWithPose
    hypothesis = ObjectHypothesisWithPose()
    hypothesis.hypothesis.class_id, hypothesis.hypothesis.score = 'car', 0.75
    hypothesis.pose.pose.position.y = -2.5
    hypothesis.pose.covariance[7] = 0.125
    detection = Detection3D(results=[hypothesis], id='17')
    detection.bbox.center.position.x, detection.bbox.size.x = 9.0, 4.5
    msg = Detection3DArray(detections=[detection, Detection3D(id='18')])
    msg.header.frame_id = 'map'
    return msg


def float64_stamped_rclpy():
    from autoware_internal_debug_msgs.msg import Float64Stamped
    msg = Float64Stamped(data=3.625)
    msg.stamp.sec, msg.stamp.nanosec = 7, 999
    return msg


def tf_message_rclpy():
    from geometry_msgs.msg import TransformStamped
    from tf2_msgs.msg import TFMessage
    transform = TransformStamped(child_frame_id='lidar')
    transform.header.frame_id = 'base_link'
    transform.transform.translation.z, transform.transform.rotation.w = 1.8, 1.0
    return TFMessage(transforms=[transform])


def plain(msg):
    """Nested plain values of an rclpy or rosbags message: comparable across the two."""
    if hasattr(msg, 'get_fields_and_field_types'):
        return {k: plain(getattr(msg, k)) for k in msg.get_fields_and_field_types()}
    if hasattr(msg, '__dataclass_fields__'):
        return {k: plain(getattr(msg, k)) for k in msg.__dataclass_fields__
                if k != '__msgtype__'}
    if isinstance(msg, (list, tuple)) or (hasattr(msg, '__len__') and not isinstance(msg, str)):
        return [plain(v) for v in msg]
    return msg.item() if isinstance(msg, np.generic) else msg


EXAMPLES = {
    'grid_map_msgs/msg/GridMap': grid_map_rclpy,
    'vision_msgs/msg/Detection3DArray': detections_rclpy,
    'autoware_internal_debug_msgs/msg/Float64Stamped': float64_stamped_rclpy,
    'tf2_msgs/msg/TFMessage': tf_message_rclpy,
}


@pytest.mark.parametrize('msgtype', sorted(EXAMPLES))
def test_cdr_round_trip_between_rclpy_and_rosbags(msgtype):
    from rclpy.serialization import deserialize_message, serialize_message
    msg = EXAMPLES[msgtype]()
    decoded = bagio.deserialize(serialize_message(msg), msgtype)
    assert plain(decoded) == plain(msg)
    back = deserialize_message(bytes(bagio.TYPESTORE.serialize_cdr(decoded, msgtype)), type(msg))
    assert back == msg


def test_bag_keeps_interface_messages_and_their_hashes(tmp_path):
    from rclpy.serialization import serialize_message
    path = tmp_path / 'bag'
    with bagio.BagWriter(path) as writer:
        for k, msgtype in enumerate(sorted(EXAMPLES)):
            writer.write_raw(f'/t{k}', msgtype, serialize_message(EXAMPLES[msgtype]()), k)
    reader = bagio.open_reader(path)
    try:
        got = {msgtype: plain(bagio.deserialize(raw, msgtype)) for _, _, raw, msgtype
               in bagio.iter_messages(reader, [f'/t{k}' for k in range(len(EXAMPLES))])}
    finally:
        reader.close()
    assert got == {t: plain(make()) for t, make in EXAMPLES.items()}
    meta = yaml.safe_load((path / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    hashes = {e['topic_metadata']['type']: e['topic_metadata']['type_description_hash']
              for e in meta['topics_with_message_count']}
    assert hashes == {t: EXPECTED_HASHES[t] for t in EXAMPLES}
    # Foxglove's readers decode them from the definitions the bag carries.
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    with open(next(path.glob('*.mcap')), 'rb') as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        foreign = {schema.name: decoded for schema, _, _, decoded
                   in reader.iter_decoded_messages()}
    grid = foreign['grid_map_msgs/msg/GridMap']
    assert (grid.layers, grid.info.pose.position.x) == (['occupancy', 'density'], 4.25)
    assert list(grid.data[1].data) == list(np.arange(12, dtype=np.float32) * 2)
    hypothesis = foreign['vision_msgs/msg/Detection3DArray'].detections[0].results[0].hypothesis
    assert (hypothesis.class_id, hypothesis.score) == ('car', 0.75)
    assert foreign['autoware_internal_debug_msgs/msg/Float64Stamped'].data == 3.625


def test_message_class_names_an_uninstalled_type():
    assert bagio.message_class(bagio.GRID_MAP_TYPE) is bagio.TYPESTORE.types[bagio.GRID_MAP_TYPE]
    with pytest.raises(bagio.BagError, match='foo_msgs/msg/Bar unknown: no foo_msgs definition'):
        bagio.message_class('foo_msgs/msg/Bar')


def test_definitions_come_from_the_ament_prefixes_first(tmp_path, monkeypatch):
    """A ROS install's share folder (AMENT_PREFIX_PATH) wins over the venv's."""
    msg_dir = tmp_path / 'share' / 'autoware_internal_debug_msgs' / 'msg'
    msg_dir.mkdir(parents=True)
    (msg_dir / 'Float64Stamped.msg').write_text('builtin_interfaces/Time stamp\nfloat32 data\n')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path))
    assert message_types.find_definition('autoware_internal_debug_msgs', 'Float64Stamped') == \
        msg_dir / 'Float64Stamped.msg'
    types, missing = message_types.interface_types()
    assert missing == []
    fields = dict(types['autoware_internal_debug_msgs/msg/Float64Stamped'][1])
    assert fields['data'][1] == ('float32', 0)
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'nowhere'))
    monkeypatch.setattr(sys, 'prefix', str(tmp_path / 'nowhere'))
    types, missing = message_types.interface_types()
    assert types == {}
    assert set(missing) == EXPECTED_HASHES.keys() - {'tf2_msgs/msg/TFMessage'}


def test_fresh_venv_process_imports_and_serializes_every_package():
    """A process started as from a shell (no LD_LIBRARY_PATH): the venv's start-up hook sets it."""
    code = ('from rclpy.serialization import serialize_message\n'
            'from tf2_msgs.msg import TFMessage\n'
            'from grid_map_msgs.msg import GridMap\n'
            'from vision_msgs.msg import Detection3DArray\n'
            'from autoware_internal_debug_msgs.msg import Float64Stamped\n'
            'print(sum(len(serialize_message(m())) for m in '
            '(TFMessage, GridMap, Detection3DArray, Float64Stamped)))\n')
    env = {k: v for k, v in os.environ.items()
           if k not in ('LD_LIBRARY_PATH', '_ROS_WHEELS_BOOTSTRAP_COMPLETE')}
    done = subprocess.run([str(Path(sys.prefix) / 'bin' / 'python'), '-c', code], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


def test_build_order_puts_dependencies_first(tmp_path):
    build = load_build_script()
    for name, deps in (('a_msgs', ['c_msgs', 'std_msgs']), ('b_msgs', []), ('c_msgs', ['b_msgs'])):
        (tmp_path / name).mkdir()
        depends = ''.join(f'<depend>{d}</depend>' for d in deps)
        (tmp_path / name / 'package.xml').write_text(
            f'<package format="3"><name>{name}</name>{depends}</package>')
    assert build.build_order(build.interface_packages(tmp_path)) == ['b_msgs', 'c_msgs', 'a_msgs']


def test_packages_build_two_at_once_each_after_its_dependencies(capsys):
    build = load_build_script()
    packages = {'a': ('', {'c', 'std_msgs'}), 'b': ('', set()), 'c': ('', {'b'}),
                'd': ('', set()), 'e': ('', set()), 'f': ('', {'a', 'e'})}
    events, lock, running = [], threading.Lock(), set()

    def build_package(name, source, prefix, jobs, env):
        with lock:
            running.add(name)
            events.append(('start', name, len(running)))
        time.sleep(0.05)
        with lock:
            running.discard(name)
            events.append(('end', name, len(running)))
        return 0.05
    build.build_package = build_package
    build.build_all(packages, None, 2, 2, {})
    assert max(count for kind, _, count in events if kind == 'start') == 2
    ended = [name for kind, name, _ in events if kind == 'end']
    assert sorted(ended) == sorted(packages)
    for name, (_, deps) in packages.items():
        started = next(i for i, (kind, n, _) in enumerate(events) if (kind, n) == ('start', name))
        assert all(('end', dep) in [(k, n) for k, n, _ in events[:started]]
                   for dep in deps & packages.keys()), (name, events)
    assert capsys.readouterr().out.count(' built in ') == len(packages)


def test_a_failed_package_stops_the_build_once_the_running_one_ends():
    build = load_build_script()
    packages = {name: ('', set()) for name in 'abcd'}
    finished = []

    def build_package(name, source, prefix, jobs, env):
        if name == 'a':
            raise build.BuildError('a failed')
        time.sleep(0.2)
        finished.append(name)
        return 0.2
    build.build_package = build_package
    with pytest.raises(build.BuildError, match='a failed'):
        build.build_all(packages, None, 2, 2, {})
    assert finished == ['b']        # running beside it: ended; c and d never started


def test_stamp_hash_moves_with_a_definition_only(tmp_path):
    build = load_build_script()
    (tmp_path / 'p' / 'msg').mkdir(parents=True)
    (tmp_path / 'p' / 'msg' / 'A.msg').write_text('float64 data\n')
    first = build.definitions_hash(tmp_path)
    (tmp_path / 'p' / '__pycache__').mkdir()
    (tmp_path / 'p' / '__pycache__' / 'x.pyc').write_bytes(b'\0')
    assert build.definitions_hash(tmp_path) == first
    (tmp_path / 'p' / 'msg' / 'A.msg').write_text('float32 data\n')
    assert build.definitions_hash(tmp_path) != first
    stamp = (Path(sys.prefix) / '.interfaces').read_text().strip()
    assert stamp == build.definitions_hash(REPO / 'interfaces'), 'stale interfaces: make venv'


def test_live_tf_static_reaches_a_late_subscriber_and_float64_stamped_arrives():
    """Over loopback DDS between two contexts (two participants), as between two processes."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile
    contexts = [rclpy.Context(), rclpy.Context()]
    for context in contexts:
        rclpy.init(context=context)
    try:
        talker = rclpy.create_node('interfaces_talker', context=contexts[0])
        listener = rclpy.create_node('interfaces_listener', context=contexts[1])
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        static = tf_message_rclpy()
        tf_pub = talker.create_publisher(type(static), '/tf_static', latched)
        tf_pub.publish(static)      # before any subscriber exists: transient local keeps it
        timing = float64_stamped_rclpy()
        timing_pub = talker.create_publisher(type(timing), '/interfaces_test/timing', 10)
        got = {'tf': [], 'timing': []}
        listener.create_subscription(type(static), '/tf_static', got['tf'].append, latched)
        listener.create_subscription(type(timing), '/interfaces_test/timing',
                                     got['timing'].append, 10)
        executor = SingleThreadedExecutor(context=contexts[1])
        executor.add_node(listener)
        for _ in range(3000):
            if timing_pub.get_subscription_count():
                break
            executor.spin_once(timeout_sec=0.01)
        timing_pub.publish(timing)
        for _ in range(3000):
            if got['tf'] and got['timing']:
                break
            executor.spin_once(timeout_sec=0.01)
        assert got['tf'] == [static]
        assert got['timing'] == [timing]
    finally:
        for context in contexts:
            rclpy.try_shutdown(context=context)


# Imports with a rosdep key of another name, and those without one (pip: requirements.txt).
ROSDEP_KEYS = {'numpy': 'python3-numpy', 'yaml': 'python3-yaml', 'PIL': 'python3-pil'}
PIP_ONLY = {'jax', 'jaxlib', 'rosbags', 'equinox', 'simplejpeg', 'mcap'}
# The tools' extras (requirements-dev.txt), never imported by the node.
TOOLS_ONLY = {'matplotlib', 'psutil', 'scipy', 'torch', 'ray', 'mcap_ros2', 'numba', 'optax'}


def imported_packages(paths) -> set[str]:
    """Top-level names of every absolute import outside the standard library and this package."""
    import ast
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split('.')[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split('.')[0])
    return names - set(sys.stdlib_module_names) - {'jax_perception_node'}


def test_package_xml_lists_every_package_the_code_imports():
    from catkin_pkg.package import parse_package
    manifest = parse_package(str(REPO / 'package.xml'))
    exec_depends = {d.name for d in manifest.exec_depends}
    test_depends = {d.name for d in manifest.test_depends}
    code = [*(REPO / 'jax_perception_node').rglob('*.py'), *(REPO / 'launch').rglob('*.py')]
    imported = imported_packages(code)
    assert {'rclpy', 'rcl_interfaces', 'ament_index_python', 'tf2_msgs'} <= imported
    wanted = {ROSDEP_KEYS.get(name, name) for name in imported - PIP_ONLY - TOOLS_ONLY}
    assert wanted - exec_depends == set()
    assert {f'python3-{n}' for n in ('matplotlib', 'psutil', 'scipy')} <= test_depends
    interface_packages = {p.parent.name for p in (REPO / 'interfaces').glob('*/package.xml')}
    assert interface_packages <= exec_depends


def test_the_pip_only_packages_the_code_imports_are_run_time_requirements():
    # Found by an independent review: mcap was a tools extra, so an install without it read
    # no seed from a bare .mcap and trained on a held-out drive.
    pinned = {line.split('==')[0].lower() for line in
              (REPO / 'requirements.txt').read_text().splitlines()
              if line and not line.startswith('#')}
    imported = imported_packages([*(REPO / 'jax_perception_node').rglob('*.py')])
    assert PIP_ONLY <= imported and PIP_ONLY <= pinned
    setup = (REPO / 'setup.py').read_text()
    requires = setup[setup.index('install_requires'):setup.index('extras_require')]
    assert all(f"'{name}'" in requires for name in PIP_ONLY - {'jaxlib'})    # jax brings it
