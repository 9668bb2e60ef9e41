"""
What the ROS graph says about inputs that would never arrive: each said once, as a WARN.

Checked on the diagnostics timer (discovery takes a while): a subscription whose topic has
publishers, none of them of the type it reads (remapped to the wrong topic), and a camera's
CameraInfo subscription, volatile, with nothing taken yet, beside a latched (transient local)
publisher: a CameraInfo published once before the node subscribed never arrives without
``qos_overrides``. rclpy matches neither case and says nothing.
"""

from rclpy.qos import DurabilityPolicy

from .node_params import qos_overrides_unapplied


def type_name(msg_type) -> str:
    """Return a message class's ROS type name, as the graph gives it (sensor_msgs/msg/Image)."""
    return f'{msg_type.__module__.split(".")[0]}/msg/{msg_type.__name__}'


class InputGraph:
    """The inputs of one activation; :meth:`check` returns what was not said yet."""

    def __init__(self, node, path):
        """``path``: the FramePath, whose cameras and CameraInfo taken so far are read."""
        self._node, self._path = node, path
        self._said: set[str] = set()
        self._first = True

    def check(self, subscriptions) -> list[str]:
        """
        Return the lines about ``subscriptions`` not said before.

        The first call (once subscribed) also names the QoS overrides no subscription took.
        """
        lines = []
        if self._first:
            self._first = False
            lines += filter(None, [qos_overrides_unapplied(self._node)])
        waiting = {self._node.resolve_topic_name(f'~/input/camera/{name}/camera_info')
                   for name in self._path.pipe.camera_names
                   if name not in self._path.cameras_with_info}
        for sub in subscriptions:
            topic, reads = sub.topic_name, type_name(sub.msg_type)
            infos = self._node.get_publishers_info_by_topic(topic)
            sent = sorted({info.topic_type for info in infos})
            if sent and reads not in sent:
                line = (f'input {topic}: its publishers send {", ".join(sent)}, this input reads '
                        f'{reads}: nothing arrives (remapped to the wrong topic?)')
            elif (topic in waiting and sub.qos_profile.durability == DurabilityPolicy.VOLATILE
                  and any(info.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
                          for info in infos)):
                line = (f'input {topic}: its publisher latches (transient local) and no '
                        'CameraInfo has been taken: one published before the node subscribed '
                        f'never arrives; set qos_overrides.{topic}.subscription.durability: '
                        'transient_local and ...reliability: reliable (docs/users.md, '
                        '"QoS overrides")')
            else:
                continue
            if line not in self._said:
                self._said.add(line)
                lines.append(line)
        return lines
