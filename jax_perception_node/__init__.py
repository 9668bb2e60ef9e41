"""
jax_perception_node: LiDAR + camera BEV fusion on JAX that never recompiles after warm-up.

The public Python API::

    from jax_perception_node import BevPipeline, load_config
    pipe = BevPipeline(load_config('config/jax_perception.param.yaml'))
    pipe.warmup()
    out = pipe.process(points, cameras={'front': fmap})

Names are imported on first use, so ``import jax_perception_node`` (and the light CLI
commands) do not pay for importing JAX.
"""

import importlib

_EXPORTS = {
    'BevPipeline': 'pipeline', 'FrameResult': 'pipeline', 'compile_count': 'pipeline',
    'load_config': 'config', 'config_from_parameters': 'config', 'ConfigError': 'parameters',
    'PipelineConfig': 'config', 'kernels': None,
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import a public name from its module the first time it is asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    module = _EXPORTS[name]
    if module is None:
        return importlib.import_module(f'.{name}', __name__)
    return getattr(importlib.import_module(f'.{module}', __name__), name)
