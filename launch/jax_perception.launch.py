"""
Launch the jax_perception node with its parameter file.

ros2 launch jax_perception_node jax_perception.launch.py \
    pointcloud_topic:=/sensing/lidar/top/pointcloud use_sim_time:=true

managed:=true starts the lifecycle variant (jax_perception_lifecycle_node) instead: it waits
unconfigured until a lifecycle manager (or ``ros2 lifecycle set``) configures and activates it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue

PACKAGE = 'jax_perception_node'
EXECUTABLE = 'jax_perception_node'
MANAGED_EXECUTABLE = 'jax_perception_lifecycle_node'
PARAMS_FILE = os.path.join('config', 'jax_perception.param.yaml')


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
        DeclareLaunchArgument('managed', default_value='false',
                              description='true: the lifecycle node, unconfigured until '
                                          'configured and activated'),
    ]
    common = {
        'package': PACKAGE,
        'name': 'jax_perception',
        'namespace': LaunchConfiguration('namespace'),
        'output': 'screen',
        'parameters': [LaunchConfiguration('params_file'),
                       {'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'),
                                                       value_type=bool)}],
        'remappings': [('~/input/pointcloud', LaunchConfiguration('pointcloud_topic'))],
        'arguments': ['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    }
    managed = LaunchConfiguration('managed')
    return LaunchDescription(args + [
        Node(executable=EXECUTABLE, condition=UnlessCondition(managed), **common),
        LifecycleNode(executable=MANAGED_EXECUTABLE, condition=IfCondition(managed), **common),
    ])
