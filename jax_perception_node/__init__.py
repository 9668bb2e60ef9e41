"""
jax_perception_node: LiDAR + camera BEV fusion on JAX that never recompiles after warm-up.

The public Python API::

    from jax_perception_node import BevPipeline, default_params_file, load_config
    pipe = BevPipeline(load_config(default_params_file()))     # or a params file of yours
    pipe.warmup()
    out = pipe.process(points, cameras={'front': fmap})

Names are imported on first use, so ``import jax_perception_node`` (and the light CLI
commands) do not pay for importing JAX. The subpackages are the layers, each importing only
those below it: geometry, settings, sensors, detection, core, outputs, frames, then bags and
ros side by side (docs/design.md, "Layers"); the tools stand on top.
"""

import importlib

_EXPORTS = {
    'BevPipeline': 'core.pipeline', 'FrameResult': 'core.pipeline',
    'compile_count': 'core.pipeline', 'load_config': 'settings.config',
    'default_params_file': 'settings.config',
    'config_from_parameters': 'settings.config', 'ConfigError': 'settings.parameters',
    'PipelineConfig': 'settings.config', 'kernels': 'core.kernels',
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Import a public name from its module the first time it is asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    module = importlib.import_module(f'.{_EXPORTS[name]}', __name__)
    return module if _EXPORTS[name].endswith(f'.{name}') else getattr(module, name)
