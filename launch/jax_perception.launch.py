"""
Launch the jax_perception node with its parameter file and its input topics.

ros2 launch jax_perception_node jax_perception.launch.py \
    pointcloud_topic:=/sensing/lidar/top/pointcloud odometry_topic:=/localization/kinematic_state \
    front_features_topic:=/perception/front/features \
    front_camera_info_topic:=/sensing/camera/front/camera_info use_sim_time:=true

Every input has an argument, as Autoware launch files pass topics: ``pointcloud_topic``,
``odometry_topic`` and, for each camera ``<name>`` in the params file's ``cameras.names``,
``<name>_features_topic`` and ``<name>_camera_info_topic``. The camera names are only known once
the params file is read, so the node is made in an OpaqueFunction; a camera argument that names
no configured camera is logged as a warning (a typo would otherwise remap nothing).

managed:=true starts the lifecycle variant (jax_perception_lifecycle_node). With autostart:=true
(the default) this launch file configures it once its process starts and activates it once it
is inactive, the launch_ros way (ChangeState events, OnStateTransition); autostart:=false leaves
it unconfigured for a lifecycle manager (Nav2's lifecycle_manager, ``ros2 lifecycle set``).
Autostart lives here rather than in the node so that the node never transitions itself: a
lifecycle manager that owns it sees only the transitions it asked for, and a failed configure
(bad parameter, logged) leaves the node unconfigured instead of activating anything.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, EmitEvent, LogInfo, OpaqueFunction,
                            RegisterEventHandler)
from launch.event_handlers import OnProcessStart
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition

PACKAGE = 'jax_perception_node'
EXECUTABLE = 'jax_perception_node'
MANAGED_EXECUTABLE = 'jax_perception_lifecycle_node'
PARAMS_FILE = os.path.join('config', 'jax_perception.param.yaml')
# Launch argument suffix -> the node's own input name of camera <name>.
CAMERA_INPUTS = {'_features_topic': '~/input/camera/{}/features',
                 '_camera_info_topic': '~/input/camera/{}/camera_info'}


def camera_names(params_file: str) -> list:
    """Return ``cameras.names`` of a params file (the node's own reader: same rules)."""
    from jax_perception_node.settings.config import read_param_file
    return list(read_param_file(params_file).get('cameras.names', []))


def remappings(context) -> tuple[list, list]:
    """Return (remappings, warnings) from the topic arguments given to this launch."""
    given = context.launch_configurations
    rules = [('~/input/pointcloud', given['pointcloud_topic']),
             ('~/input/odometry', given['odometry_topic'])]
    names = camera_names(given['params_file'])
    for name in names:
        for suffix, input_topic in CAMERA_INPUTS.items():
            if given.get(name + suffix):
                rules.append((input_topic.format(name), given[name + suffix]))
    warnings = [f'{key}:={value} names no camera of {given["params_file"]} (cameras.names: '
                f'{names}); ignored'
                for key, value in given.items() for suffix in CAMERA_INPUTS
                if key.endswith(suffix) and key[:-len(suffix)] not in names]
    return rules, warnings


def make_node(context):
    """Return the node (plain or lifecycle) and, with managed autostart, its transitions."""
    rules, warnings = remappings(context)
    given = context.launch_configurations
    common = {
        'package': PACKAGE,
        'name': 'jax_perception',
        'namespace': given['namespace'],
        'output': 'screen',
        'parameters': [given['params_file'],
                       {'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'),
                                                       value_type=bool)}],
        'remappings': rules,
        'arguments': ['--ros-args', '--log-level', given['log_level']],
    }
    actions = [LogInfo(msg=f'jax_perception.launch.py: {line}') for line in warnings]
    if not is_true(given['managed']):
        return actions + [Node(executable=EXECUTABLE, **common)]
    node = LifecycleNode(executable=MANAGED_EXECUTABLE, **common)
    actions.append(node)
    if is_true(given['autostart']):
        actions += autostart(node)
    return actions


def autostart(node: LifecycleNode) -> list:
    """Configure ``node`` when its process starts, activate it when it reaches inactive."""
    def change(transition_id):
        return EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                           transition_id=transition_id))
    return [
        RegisterEventHandler(OnProcessStart(
            target_action=node, on_start=[change(Transition.TRANSITION_CONFIGURE)])),
        RegisterEventHandler(OnStateTransition(
            target_lifecycle_node=node, start_state='configuring', goal_state='inactive',
            entities=[change(Transition.TRANSITION_ACTIVATE)])),
    ]


def is_true(value: str) -> bool:
    """Read a boolean launch argument as launch's conditions do (true/false, 1/0)."""
    return value.strip().lower() in ('true', '1')


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory(PACKAGE), PARAMS_FILE)
    args = [
        DeclareLaunchArgument('params_file', default_value=default_params,
                              description='ROS 2 parameter file of the node'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of the node'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='use /clock (rosbag replay, simulation)'),
        DeclareLaunchArgument('log_level', default_value='info',
                              description='debug | info | warn | error'),
        DeclareLaunchArgument('pointcloud_topic', default_value='~/input/pointcloud',
                              description='LiDAR PointCloud2 topic to subscribe to'),
        DeclareLaunchArgument('odometry_topic', default_value='~/input/odometry',
                              description='nav_msgs/Odometry topic (accumulation.num_sweeps > 1)'),
        DeclareLaunchArgument('managed', default_value='false',
                              description='true: the lifecycle node (jax_perception_lifecycle_'
                                          'node)'),
        DeclareLaunchArgument('autostart', default_value='true',
                              description='with managed:=true: configure and activate on launch; '
                                          'false: wait unconfigured for a lifecycle manager'),
    ]
    # <name>_features_topic and <name>_camera_info_topic per camera are read in make_node: the
    # camera names come from the params file, known only when the launch runs.
    return LaunchDescription(args + [OpaqueFunction(function=make_node)])
