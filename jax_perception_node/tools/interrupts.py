"""
Ctrl-C and SIGTERM in the CLI: one line, the exit status, and nothing left half written.

A command removes its unfinished outputs as the interrupt unwinds it (``KeyboardInterrupt``,
or ``Terminated`` within ``sigterm_raises``); ``exit_interrupted`` then says so and ends.
"""

import _thread
import contextlib
import os
import signal
import sys
import threading


class Terminated(BaseException):
    """SIGTERM during a command: unwinds like Ctrl-C, so the command removes its temporary."""


def keep_interrupts() -> None:
    """
    Raise again in the main thread an interrupt that landed where Python cannot raise it.

    Ctrl-C (or SIGTERM within ``sigterm_raises``) during a callback such as JAX's garbage
    collection hook goes to ``sys.unraisablehook``, which printed a traceback and went on: the
    interrupt was lost. Installed by the console script for the process.
    """
    previous = sys.unraisablehook
    if getattr(previous, 'keeps_interrupts', False):
        return

    def hook(unraisable):
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)):
            signum = signal.SIGINT if isinstance(unraisable.exc_value, KeyboardInterrupt) \
                else signal.SIGTERM
            # As if the signal came again once the hook has returned (raised in the hook, it
            # would be lost again).
            threading.Timer(0.01, _thread.interrupt_main, (signum,)).start()
            return
        previous(unraisable)
    hook.keeps_interrupts = True
    sys.unraisablehook = hook


@contextlib.contextmanager
def sigterm_raises():
    """Within the block, SIGTERM raises ``Terminated`` in the main thread; then as before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_interrupted(what: str, code: int, script: bool) -> int:
    """
    Say ``what``; return ``code``, or as the console script end the process with it at once.

    The outputs are cleaned up by then (the commands remove theirs on the way out).
    """
    print(f'jax-perception: {what}', file=sys.stderr)
    if script:
        # XLA's threads may still be compiling or running on buffers Python frees on the way
        # out: interrupted at warm-up, the interpreter's shutdown crashed them now and then
        # (SIGSEGV instead of exit 130). Nothing is left to clean up: leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def interrupted_import(exc: ImportError) -> bool:
    """
    Return True when a KeyboardInterrupt is among the causes of ``exc``.

    rclpy's native module, interrupted by Ctrl-C while it loads, raises ImportError ('The C
    extension ... isn't present on the system') from the KeyboardInterrupt.
    """
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, KeyboardInterrupt):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
