"""
A head or image encoder plug-in failing as its executable runs: one ConfigError naming it.

A plug-in's host callback (``jax.pure_callback``) that raises reaches the caller as XLA's
JaxRuntimeError, its text the whole Python traceback; out at the warm-up or a frame's fetch,
the node and the CLI printed several tracebacks. Turned into the config layer's error, they
print one line naming the plug-in's key and its exception (the traceback's last line). Any
other runtime error (out of memory: ``memory_refusal``; a compile or device error) and a
pipeline without a plug-in re-raise as they were.
"""

import jax

from ..settings.parameters import ConfigError


def plugin_keys(head, encoder) -> str:
    """Return the plug-in keys of a pipeline's ``head`` and ``encoder`` (either may be None)."""
    return ' or '.join(f'{key} {loaded.name}' for key, loaded in
                       (('head.module', head), ('encoder.module', encoder)) if loaded)


def plugin_failure(exc: Exception, pipeline) -> ConfigError | None:
    """
    Return the ConfigError for ``exc``, a plug-in's callback failing in ``pipeline``; else None.

    The pipeline's sweep ring, an output (and a donated input) of the failed frame, is made
    anew (``reset_sweeps(ring=True)``): every later frame read the failed one's.
    """
    text = str(exc)
    keys = getattr(pipeline, 'plugins', '')
    if not keys or not isinstance(exc, jax.errors.JaxRuntimeError) or (
            'callback' not in text.lower()):    # jaxlib: 'CpuCallback error calling callback'
        return None
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), text)
    _forget_failed_runs()
    pipeline.reset_sweeps(ring=True)
    return ConfigError(f'{keys}: failed as it ran: {last}')


def _forget_failed_runs() -> None:
    # JAX keeps a failed run's runtime token and raises its error again as the process exits
    # (two more tracebacks from its atexit hooks): said here once, it is forgotten there.
    try:
        from jax._src.dispatch import runtime_tokens
    except ImportError:         # another JAX: the exit may then repeat the error
        return
    runtime_tokens.clear()
