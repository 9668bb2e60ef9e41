"""
Launch the jax_perception node with its parameter file, its topics and its name.

ros2 launch jax_perception_node jax_perception.launch.py \
    pointcloud_topic:=/sensing/lidar/top/pointcloud odometry_topic:=/localization/kinematic_state \
    front_features_topic:=/perception/front/features \
    front_camera_info_topic:=/sensing/camera/front/camera_info \
    bev_features_topic:=/perception/bev/features objects_topic:=/perception/objects \
    node_name:=bev_fusion use_sim_time:=true

Every topic has an argument, as Autoware launch files pass topics. Inputs:
``pointcloud_topic``, ``odometry_topic``, ``tf_topic`` and ``tf_static_topic`` (``tf`` and
``tf_static`` for a robot whose TF lives in its namespace, as Nav2's multi-robot launch files
remap it), for each camera ``<name>`` in the params file's ``cameras.names``
``<name>_features_topic`` (or, with ``input: image``, ``<name>_image_topic`` and
``<name>_compressed_topic``: image_transport's raw and compressed topics, remapped one by
one as plain ROS remapping does) and ``<name>_camera_info_topic``, and for each LiDAR
``<name>`` in its ``lidars.names`` ``<name>_pointcloud_topic`` (the node then reads those, not
``pointcloud_topic``, and a ``pointcloud_topic`` given is logged as ignored). The sensor names
are only known once the params file is read, so the node is made in an OpaqueFunction; a sensor
argument that names no configured sensor, or a topic its camera's ``input`` does not read
(``front_features_topic`` for an image camera), is logged as a warning (a typo would otherwise
remap nothing). The params file is read as rcl reads it for the node's name and namespace: a
file with no section for them (``/jax_perception:`` with ``node_name:=bev_fusion``) stops the
launch, as the node would otherwise run on its defaults. Outputs: one
argument each (``OUTPUTS``), defaulting to the node's own name;
``objects_published_time_topic`` left empty follows ``objects_topic`` with
``/debug/published_time`` appended, the name Autoware's PublishedTimePublisher gives it.
``node_name`` names the node (default jax_perception). jax_perception.launch.xml wraps this file
with Autoware's argument names (``input/pointcloud``, ``output/objects``, ``param_file``).

managed:=true starts the lifecycle variant (jax_perception_lifecycle_node). With autostart:=true
(the default) this launch file configures it once its process starts and activates it once it
is inactive, the launch_ros way (ChangeState events, OnStateTransition); autostart:=false leaves
it unconfigured for a lifecycle manager (Nav2's lifecycle_manager, ``ros2 lifecycle set``).
Autostart lives here rather than in the node so that the node never transitions itself: a
lifecycle manager that owns it sees only the transitions it asked for, and a failed configure
(bad parameter, logged) leaves the node unconfigured instead of activating anything. With
autostart, a node whose process exits before its first configure has ended (a parameter the
node refuses at start-up, a crash) ends the launch, including a launch that includes this one.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, EmitEvent, LogInfo, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessExit, OnProcessStart
from launch.events import matches_action, Shutdown
import launch.logging
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.utilities import make_namespace_absolute, prefix_namespace
from lifecycle_msgs.msg import Transition

PACKAGE = 'jax_perception_node'
EXECUTABLE = 'jax_perception_node'
MANAGED_EXECUTABLE = 'jax_perception_lifecycle_node'
PARAMS_FILE = os.path.join('config', 'jax_perception.param.yaml')
DEFAULT_NODE_NAME = 'jax_perception'
# Launch argument -> the node's own input it remaps. TF's topics are absolute, as tf2 names
# them; a namespaced robot (Nav2's multi-robot launch files) gives tf_topic:=tf.
INPUTS = {'pointcloud_topic': '~/input/pointcloud', 'odometry_topic': '~/input/odometry',
          'tf_topic': '/tf', 'tf_static_topic': '/tf_static'}
# Per-sensor arguments, <name><suffix>: the params file's list of names -> (what the warning
# calls such a sensor, suffix -> the node's own input of sensor <name>).
SENSOR_INPUTS = {
    'cameras.names': ('camera', {'_features_topic': '~/input/camera/{}/features',
                                 '_image_topic': '~/input/camera/{}/image',
                                 '_compressed_topic': '~/input/camera/{}/image/compressed',
                                 '_camera_info_topic': '~/input/camera/{}/camera_info'}),
    'lidars.names': ('LiDAR', {'_pointcloud_topic': '~/input/{}/pointcloud'}),
}
# A camera's cameras.<name>.input -> the suffixes of the topics the node reads for it.
CAMERA_INPUT_SUFFIXES = {
    'features': ('_features_topic', '_camera_info_topic'),
    'image': ('_image_topic', '_compressed_topic', '_camera_info_topic'),
}
# Launch argument -> the node's own output it remaps (node_outputs.py, timing.py).
OUTPUTS = {
    'bev_features_topic': '~/output/bev_features',
    'bev_image_topic': '~/output/bev_image',
    'bev_grid_map_topic': '~/output/bev_grid_map',
    'objects_topic': '~/output/objects',
    'objects_markers_topic': '~/output/objects_markers',
    'objects_published_time_topic': '~/output/objects/debug/published_time',
    'latency_topic': '~/debug/latency',
    'processing_time_ms_topic': '~/debug/processing_time_ms',
    'cyclic_time_ms_topic': '~/debug/cyclic_time_ms',
    'pipeline_latency_ms_topic': '~/debug/pipeline_latency_ms',
}
PUBLISHED_TIME_SUFFIX = '/debug/published_time'


def read_params(context) -> dict:
    """
    Return the node's flat parameters of its params file, as rcl will give them to it.

    The node's fully qualified name is launch_ros's: the ``namespace`` argument, when relative,
    under a namespace pushed by an including launch file (``PushRosNamespace``).
    """
    from jax_perception_node.settings.param_file import read_param_file
    given = context.launch_configurations
    namespace = make_namespace_absolute(
        prefix_namespace(given.get('ros_namespace'), given['namespace'])) or '/'
    node = namespace.rstrip('/') + '/' + given['node_name']
    return read_param_file(given['params_file'], node, strict=True)


def remappings(context) -> tuple[list, list]:
    """Return (remappings, warnings) from the topic arguments given to this launch."""
    given = context.launch_configurations
    rules = [(own, given[arg]) for arg, own in INPUTS.items()]
    outputs = dict(given, objects_published_time_topic=(
        given['objects_published_time_topic']
        or given['objects_topic'] + PUBLISHED_TIME_SUFFIX))
    rules += [(own, outputs[arg]) for arg, own in OUTPUTS.items()]
    declared = set(INPUTS) | set(OUTPUTS)
    params = read_params(context)
    warnings = []
    lidars = list(params.get('lidars.names', []))
    if lidars and given['pointcloud_topic'] != INPUTS['pointcloud_topic']:
        warnings.append(f'pointcloud_topic:={given["pointcloud_topic"]} is not read: '
                        f'{given["params_file"]} names several LiDARs (lidars.names: {lidars}), '
                        'each remapped by <name>_pointcloud_topic; ignored')
    for key, (kind, suffixes) in SENSOR_INPUTS.items():
        names = list(params.get(key, []))
        for name in names:
            read = suffixes
            if kind == 'camera':
                source = params.get(f'cameras.{name}.input', 'features')
                read = CAMERA_INPUT_SUFFIXES.get(source, suffixes)
            for suffix, own in suffixes.items():
                arg = name + suffix
                if arg in declared:     # a camera named 'bev': bev_features_topic is an output's
                    warnings.append(f'{kind} {name}: its argument {arg} is taken by another '
                                    f'topic; remap {own.format(name)} otherwise')
                elif given.get(arg) and suffix not in read:
                    warnings.append(f'{arg}:={given[arg]} is not read: camera {name} has input: '
                                    f'{source} (its topics: '
                                    f'{", ".join(name + other for other in read)}); ignored')
                elif given.get(arg):
                    rules.append((own.format(name), given[arg]))
        warnings += [f'{arg}:={value} names no {kind} of {given["params_file"]} ({key}: '
                     f'{names}); ignored'
                     for arg, value in given.items() for suffix in suffixes
                     if arg.endswith(suffix) and arg not in declared
                     and arg[:-len(suffix)] not in names]
    return rules, warnings


def make_node(context):
    """Return the node (plain or lifecycle) and, with managed autostart, its transitions."""
    rules, warnings = remappings(context)
    given = context.launch_configurations
    # use_sim_time only when given: else the params file's, or a parent launch's global
    # parameters (SetParameter), as every other node of the stack takes it.
    sim_time = [{'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'),
                                                value_type=bool)}] if given['use_sim_time'] else []
    common = {
        'package': PACKAGE,
        'name': given['node_name'],
        'namespace': given['namespace'],
        'output': 'screen',
        'parameters': [given['params_file']] + sim_time,
        'remappings': rules,
        'arguments': ['--ros-args', '--log-level', given['log_level']],
    }
    logger = launch.logging.get_logger('launch.user')
    for line in warnings:
        logger.warning(f'jax_perception.launch.py: {line}')
    actions = []
    if not is_true(given['managed']):
        return actions + [Node(executable=EXECUTABLE, **common)]
    node = LifecycleNode(executable=MANAGED_EXECUTABLE, **common)
    actions.append(node)
    if is_true(given['autostart']):
        actions += autostart(node)
    return actions


def autostart(node: LifecycleNode) -> list:
    """
    Configure ``node`` when its process starts, activate it if that configure succeeds.

    Once: a later configure (a manager's or ``ros2 lifecycle set``, after a failed first one or
    a cleanup) is left inactive, as asked. A process that exits before its first configure has
    ended (a bad parameter, a crash in warm-up) shuts the launch down: launch_ros would wait
    for its configure service for ever.
    """
    configured = []         # the goal state of the first configure, once it has ended

    def change(transition_id):
        return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                           transition_id=transition_id))

    def first_configure_ended(context):
        configured.append(context.locals.event.goal_state)
        return [change(Transition.TRANSITION_ACTIVATE)] if configured[0] == 'inactive' else []

    def exited(event, context):
        if configured or context.is_shutdown:   # Ctrl-C while it starts: the launch is ending
            return None
        why = f'{event.action.name} exited (code {event.returncode}) before it was configured'
        return [LogInfo(msg=f'{why}: the launch ends'), EmitEvent(event=Shutdown(reason=why))]
    return [
        RegisterEventHandler(OnProcessStart(
            target_action=node, on_start=[change(Transition.TRANSITION_CONFIGURE)])),
        RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, start_state='configuring',
            entities=[OpaqueFunction(function=first_configure_ended)], handle_once=True)),
        RegisterEventHandler(OnProcessExit(target_action=node, on_exit=exited)),
    ]


def is_true(value: str) -> bool:
    """Read a boolean launch argument as launch's conditions do (true/false, 1/0)."""
    return value.strip().lower() in ('true', '1')


def generate_launch_description():
    """Declare the arguments; the node itself is made when the launch runs (make_node)."""
    default_params = os.path.join(get_package_share_directory(PACKAGE), PARAMS_FILE)
    args = [
        DeclareLaunchArgument('params_file', default_value=default_params,
                              description='ROS 2 parameter file of the node'),
        DeclareLaunchArgument('node_name', default_value=DEFAULT_NODE_NAME,
                              description='name of the node'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of the node'),
        DeclareLaunchArgument('use_sim_time', default_value='',
                              description='true: use /clock (rosbag replay, simulation); '
                                          'empty: as the params file or the global parameters '
                                          'say (false if neither sets it)'),
        DeclareLaunchArgument('log_level', default_value='info',
                              description='debug | info | warn | error'),
        DeclareLaunchArgument('pointcloud_topic', default_value=INPUTS['pointcloud_topic'],
                              description='LiDAR PointCloud2 topic to subscribe to (one LiDAR; '
                                          'with lidars.names: <name>_pointcloud_topic)'),
        DeclareLaunchArgument('odometry_topic', default_value=INPUTS['odometry_topic'],
                              description='nav_msgs/Odometry topic: ego motion for deskew '
                                          '(lidar.time_field) and accumulation'),
        DeclareLaunchArgument('tf_topic', default_value=INPUTS['tf_topic'],
                              description='TF topic (extrinsics.source: tf, pose_source: '
                                          'tf); tf: in the node namespace, as Nav2 remaps it '
                                          'per robot'),
        DeclareLaunchArgument('tf_static_topic', default_value=INPUTS['tf_static_topic'],
                              description='static TF topic; tf_static: in the node namespace'),
        *[DeclareLaunchArgument(arg, default_value=own, description=f'topic of {own}')
          for arg, own in OUTPUTS.items() if arg != 'objects_published_time_topic'],
        DeclareLaunchArgument('objects_published_time_topic', default_value='',
                              description='topic of ~/output/objects/debug/published_time; '
                                          'empty: <objects_topic>/debug/published_time'),
        DeclareLaunchArgument('managed', default_value='false',
                              description='true: the lifecycle node (jax_perception_lifecycle_'
                                          'node)'),
        DeclareLaunchArgument('autostart', default_value='true',
                              description='with managed:=true: configure and activate on launch; '
                                          'false: wait unconfigured for a lifecycle manager'),
    ]
    # The per-sensor arguments (<name>_features_topic, <name>_camera_info_topic,
    # <name>_pointcloud_topic) are read in make_node: the sensor names come from the params
    # file, known only when the launch runs.
    return LaunchDescription(args + [OpaqueFunction(function=make_node)])
