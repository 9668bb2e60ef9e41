"""
The ``jax-perception`` console script: the CLI, with Ctrl-C during its own import one line too.

Importing the CLI (bags, settings, the argument checks) takes a few tenths of a second; a
Ctrl-C then would be a traceback. This module imports nothing but the standard library first.
"""

import sys

from .interrupts import exit_interrupted, keep_interrupts     # the standard library's only


def main() -> int:
    """Run ``cli.main`` on the process's arguments; exit 130 on a Ctrl-C while importing it."""
    keep_interrupts()
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        return exit_interrupted('interrupted', 130, script=False)
    return cli_main()


if __name__ == '__main__':
    sys.exit(main())
