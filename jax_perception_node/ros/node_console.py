"""
The node's console scripts: SIGINT or SIGTERM while they import is one line too, never a crash.

Importing rclpy, JAX and the pipeline takes a second or more. A Ctrl-C then raised
KeyboardInterrupt inside native module code (jaxlib's nanobind: std::terminate, SIGABRT and a
93-line traceback) and SIGTERM killed the process. This module imports only the standard
library before it catches both; the signal is only noted (an exception raised inside native
code is what aborted), and the script leaves once the imports are done. ``node.run`` then
takes over the signals for the warm-up and the serving.
"""

import importlib
import signal
import sys

NODES = {'jax_perception_node': 'jax_perception_node.ros.node',
         'jax_perception_lifecycle_node': 'jax_perception_node.ros.lifecycle_node'}


def start(program: str) -> int:
    """Import the ``main`` of ``program`` (a key of NODES) with the signals noted; run it."""
    noted = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: noted.append(signum))
    main = importlib.import_module(NODES[program]).main
    if noted:
        print(f'{program}: stopped while starting (before the warm-up)', file=sys.stderr)
        return 0
    return main()


def node() -> int:
    """Console script ``jax_perception_node``."""
    return start('jax_perception_node')


def lifecycle_node() -> int:
    """Console script ``jax_perception_lifecycle_node``."""
    return start('jax_perception_lifecycle_node')
