"""
The process's XLA compile counter: every compile request, from any code, counts.

``jax.monitoring`` reports ``backend_compile_duration`` for each compile (a persistent-cache
hit included), so the count is what the never-recompile guarantee checks.
"""

import threading

import jax

COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'
_compile_lock = threading.Lock()
_compile_count = 0
_listener_installed = False


def _on_duration(event: str, duration_secs: float, **_) -> None:
    global _compile_count
    if event == COMPILE_EVENT:
        with _compile_lock:
            _compile_count += 1


def compile_count() -> int:
    """Return the XLA compiles in this process since the counter was installed."""
    install_compile_counter()
    with _compile_lock:
        return _compile_count


def install_compile_counter() -> None:
    """Register the jax.monitoring listener once per process."""
    global _listener_installed
    with _compile_lock:
        if not _listener_installed:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _listener_installed = True
