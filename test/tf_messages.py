"""tf2_msgs/TFMessage and TransformStamped built by hand: rosbags messages, or rclpy ones."""

from bag_messages import TYPES

TF_TYPE = 'tf2_msgs/msg/TFMessage'


def rclpy_tf_types() -> dict:
    """Return the rclpy classes of a TFMessage, by ROS type name (as bagio's TYPES has them)."""
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import Quaternion, Transform, TransformStamped, Vector3
    from std_msgs.msg import Header
    from tf2_msgs.msg import TFMessage
    return {'builtin_interfaces/msg/Time': Time, 'std_msgs/msg/Header': Header,
            'geometry_msgs/msg/Vector3': Vector3, 'geometry_msgs/msg/Quaternion': Quaternion,
            'geometry_msgs/msg/Transform': Transform,
            'geometry_msgs/msg/TransformStamped': TransformStamped, TF_TYPE: TFMessage}


def transform(parent: str, child: str, stamp_ns: int = 0, translation=(0.0, 0.0, 0.0),
              xyzw=(0.0, 0.0, 0.0, 1.0), types=TYPES):
    """geometry_msgs/TransformStamped: the pose of ``child`` in ``parent`` at ``stamp_ns``."""
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id=parent)
    x, y, z = (float(v) for v in translation)
    qx, qy, qz, qw = (float(v) for v in xyzw)
    return types['geometry_msgs/msg/TransformStamped'](
        header=header, child_frame_id=child,
        transform=types['geometry_msgs/msg/Transform'](
            translation=types['geometry_msgs/msg/Vector3'](x=x, y=y, z=z),
            rotation=types['geometry_msgs/msg/Quaternion'](x=qx, y=qy, z=qz, w=qw)))


def tf_message(*transforms, types=TYPES):
    """tf2_msgs/TFMessage of the given TransformStamped messages."""
    return types[TF_TYPE](transforms=list(transforms))
