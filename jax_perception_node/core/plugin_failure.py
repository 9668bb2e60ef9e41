"""
A head or image encoder plug-in failing as its executable runs: one ConfigError naming it.

A plug-in's host callback (``jax.pure_callback``) that raises reaches the caller as XLA's
JaxRuntimeError, its text the whole Python traceback; out at the warm-up or a frame's fetch,
the node and the CLI printed several tracebacks. Turned into the config layer's error, they
print one line naming the plug-in's key and its exception (the traceback's last line). Out of
memory is left to ``memory_refusal``; a pipeline without a plug-in re-raises as it was.
"""

import jax

from ..settings.parameters import ConfigError


def plugin_keys(head, encoder) -> str:
    """Return the plug-in keys of a pipeline's ``head`` and ``encoder`` (either may be None)."""
    return ' or '.join(f'{key} {loaded.name}' for key, loaded in
                       (('head.module', head), ('encoder.module', encoder)) if loaded)


def plugin_failure(exc: Exception, keys: str) -> ConfigError | None:
    """Return the ConfigError for ``exc`` raised by an executable running ``keys``; else None."""
    text = str(exc)
    if not keys or not isinstance(exc, jax.errors.JaxRuntimeError) or (
            'RESOURCE_EXHAUSTED' in text):
        return None
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), text)
    _forget_failed_runs()
    return ConfigError(f'{keys}: failed as it ran: {last}')


def _forget_failed_runs() -> None:
    # JAX keeps a failed run's runtime token and raises its error again as the process exits
    # (two more tracebacks from its atexit hooks): said here once, it is forgotten there.
    try:
        from jax._src.dispatch import runtime_tokens
    except ImportError:         # another JAX: the exit may then repeat the error
        return
    runtime_tokens.clear()
