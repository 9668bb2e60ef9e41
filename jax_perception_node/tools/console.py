"""
The ``jax-perception`` console script: the CLI, with Ctrl-C during its own import one line too.

Importing the CLI (bags, settings, the argument checks) takes a few tenths of a second; a
Ctrl-C then would be a traceback. This module imports nothing but the standard library first.
"""

import signal
import sys


def main() -> int:
    """Run ``cli.main`` on the process's arguments; exit 130 on a Ctrl-C while importing it."""
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        print('jax-perception: interrupted', file=sys.stderr)
        return 128 + signal.SIGINT
    return cli_main()


if __name__ == '__main__':
    sys.exit(main())
