"""
Launch the jax_perception node with its parameter file.

ros2 launch jax_perception_node jax_perception.launch.py \
    pointcloud_topic:=/sensing/lidar/top/pointcloud use_sim_time:=true
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

PACKAGE = 'jax_perception_node'
EXECUTABLE = 'jax_perception_node'
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
    ]
    node = Node(
        package=PACKAGE,
        executable=EXECUTABLE,
        name='jax_perception',
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        parameters=[LaunchConfiguration('params_file'),
                    {'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'),
                                                    value_type=bool)}],
        remappings=[('~/input/pointcloud', LaunchConfiguration('pointcloud_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )
    return LaunchDescription(args + [node])
