"""
The ROS 2 node: PointCloud2 and camera feature maps in, fused BEV and latency out.

Thin by design: the serving core (serving.py) turns parameters into a warmed ``BevPipeline``,
messages into NumPy and results into messages. This plain node configures and activates it at
start-up; the managed variant (lifecycle_node.py) runs the same core on lifecycle transitions.
"""

import os
import signal
import sys
import threading

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from .executors import check_executor, make_executor
from .node_params import command_line_overrides
from .serving import PerceptionCore
from ..settings.parameters import ConfigError

NODE_NAME = 'jax_perception'


class JaxPerceptionNode(Node):
    """Node ``jax_perception``: warms every bucket, then subscribes and serves frames."""

    def __init__(self, **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self.core = PerceptionCore(self, self.create_publisher, self.destroy_publisher)
        self.core.declare()
        check_executor(self.get_parameter('executor').value)    # before the warm-up
        self.core.configure()
        self.core.activate()

    @property
    def pipe(self):
        """Return the warmed BevPipeline."""
        return self.core.pipe

    @property
    def cfg(self):
        """Return the configuration in force (live parameters included)."""
        return self.core.cfg

    def diagnostic_status(self):
        """Return the rolled-up /diagnostics status."""
        return self.core.diagnostic_status()

    def destroy_node(self) -> None:
        """Stop the worker and the image decodes before the publishers go away."""
        self.core.deactivate()
        self.core.close_decoders()
        super().destroy_node()


def _leave_while_starting(program: str):
    """
    Return a SIGINT / SIGTERM handler that ends the process at once, with one line (exit 0).

    It leaves from inside the handler: an exception raised there to unwind the warm-up was lost
    when the signal landed in a callback that native code calls (JAX's garbage-collection hook
    prints "Exception ignored" and goes on), and the node then warmed up and served. XLA's
    threads may still compile on buffers an interpreter shutdown would free under them (the
    CLI's interrupts.exit_interrupted), so nothing is unwound: ``os._exit``. The line is
    written with ``os.write``, which cannot meet a ``print`` the signal interrupted.
    """
    line = f'{program}: stopped while starting (warm-up not finished)\n'.encode()

    def leave(signum, frame):
        os.write(2, line)
        os._exit(0)
    return leave


def run(program: str, make_node, args=None) -> int:
    """
    Create the node with ``make_node()`` and spin it until SIGINT / SIGTERM or ``node.done``.

    Returns 1 with one line on stderr, and no traceback, for a bad parameter (the config
    layer's checks, rclpy's type and range checks, a period no timer can wait) or a params
    file rcl cannot parse. SIGINT or SIGTERM while the node is made ends the process at once
    (exit 0, one line): the warm-up is left, not finished. The worker finishes its frame and
    stops before the context shuts
    down (waited for up to ``frame_worker.JOIN_S``; one still running then is logged, and its
    publish fails with a logged error, never a crash).
    """
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except _rclpy.RCLError as exc:
        # rcl's own parse of --params-file (a list mixing 0 and 0.0, say), before any node:
        # its text, without the C source locations it appends.
        print(f'{program}: cannot start: {str(exc).split(", at /")[0]}', file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _leave_while_starting(program))   # a warm-up can take a minute
    try:
        overrides = command_line_overrides(sys.argv if args is None else args)
        node = make_node(parameter_overrides=overrides)
        executor = make_executor(node.get_parameter('executor').value)
    except (ConfigError, ParameterException) as exc:
        # ParameterException: rclpy's own checks (type, descriptor range) of the overrides.
        print(f'{program}: bad parameter {" ".join(str(exc).split())}', file=sys.stderr)
        rclpy.try_shutdown()
        return 1
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    executor.add_node(node)
    done = getattr(node, 'done', None)
    try:
        while not stop.is_set() and not (done is not None and done.is_set()):
            executor.spin_once(timeout_sec=0.1)
    except ExternalShutdownException:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def main(args=None) -> int:
    """Console script ``jax_perception_node``: exit 1 with one line on a bad parameter."""
    return run('jax_perception_node', JaxPerceptionNode, args)


if __name__ == '__main__':
    sys.exit(main())
