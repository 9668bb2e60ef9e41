"""
What the ROS graph says about inputs that would never arrive: each said once, as a WARN.

Checked on the diagnostics timer (discovery takes a while): a subscription whose topic has
publishers, none of them of the type it reads (remapped to the wrong topic), and a camera's
CameraInfo subscription, volatile, that took none in :data:`LATCHED_GRACE_S` beside a latched
(transient local) publisher: a CameraInfo published once before the node subscribed never
arrives without ``qos_overrides``. rclpy matches neither case and says nothing. The first
check also names the QoS overrides no subscription took.
"""

import time

from rclpy.qos import DurabilityPolicy

from .node_params import qos_overrides_unapplied

# A latched CameraInfo publisher is named only when nothing was taken this long after it was
# first seen: a volatile reader misses the latched sample and waits for the next publish, and a
# slow periodic publisher (0.5 Hz) delivers within it.
LATCHED_GRACE_S = 5.0
TF_TOPICS = ('/tf', '/tf_static')


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
        self._latched: dict[str, float] = {}    # topic -> when a latched publisher was seen

    def check(self, subscriptions) -> list[str]:
        """
        Return the lines about ``subscriptions`` not said before.

        The first call (once subscribed) also names the QoS overrides no subscription took.
        """
        lines = []
        if self._first:
            self._first = False
            subscribed = {sub.topic_name for sub in subscriptions}
            later = tuple(topic for topic in map(self._node.resolve_topic_name, TF_TOPICS)
                          if topic not in subscribed)
            lines += filter(None, [qos_overrides_unapplied(self._node, later)])
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
            elif self._latched_silent(topic in waiting and sub.qos_profile.durability
                                      == DurabilityPolicy.VOLATILE, topic, infos):
                line = (f'input {topic}: its publisher latches (transient local) and no '
                        f'CameraInfo was taken in {LATCHED_GRACE_S:g} s: one published once, '
                        'before the node subscribed, never arrives; set '
                        f'qos_overrides.{topic}.subscription.durability: transient_local and '
                        '...reliability: reliable (docs/users.md, "QoS overrides")')
            else:
                continue
            if line not in self._said:
                self._said.add(line)
                lines.append(line)
        return lines

    def _latched_silent(self, volatile_waiting: bool, topic: str, infos) -> bool:
        """Whether a latched publisher has been on ``topic`` LATCHED_GRACE_S with none taken."""
        if not (volatile_waiting and any(
                info.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
                for info in infos)):
            self._latched.pop(topic, None)
            return False
        seen = self._latched.setdefault(topic, time.monotonic())
        return time.monotonic() - seen >= LATCHED_GRACE_S
