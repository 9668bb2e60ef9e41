"""
The rclpy executor that spins the node: parameter ``executor``, ``events`` by default.

rclpy's SingleThreadedExecutor builds its wait set in Python at every wake-up: under the load
soak's 100 Hz stream of a 131 072-point cloud and four camera maps its thread took about as
many CPU samples as the frame worker (py-spy), on a 2-core machine where the two share the
cores with XLA. rclpy's EventsExecutor (``rclpy.experimental``; in Jazzy's rclpy since 7.1.4)
does that work in C++: the node processed 90-93 frames/s there instead of 79
(docs/performance.md, "Spinning the node").
"""

from rclpy.executors import Executor, SingleThreadedExecutor

from ..settings.param_checks import check_value
from ..settings.parameters import ConfigError


def check_executor(kind: str) -> None:
    """Raise ConfigError for a ``kind`` not in the schema or not in this rclpy."""
    if check_value('executor', kind) == 'events':
        try:
            from rclpy.experimental import EventsExecutor  # noqa: F401
        except ImportError:
            raise ConfigError('executor: events needs rclpy.experimental.EventsExecutor '
                              '(rclpy >= 7.1.4), which this rclpy lacks; set executor: '
                              'single_threaded') from None


def make_executor(kind: str) -> Executor:
    """Return a new executor of ``kind``: ``events`` or ``single_threaded``; or ConfigError."""
    check_executor(kind)
    if kind == 'events':
        from rclpy.experimental import EventsExecutor
        return EventsExecutor()
    return SingleThreadedExecutor()
