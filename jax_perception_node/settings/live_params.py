"""
Which parameters may change while the node runs, and the check of a change.

Live parameters are read arithmetically at run time: calibrations (applied through
``BevPipeline.set_calibration``, which never compiles), the sync tolerance, the diagnostics
thresholds and the output frame id. Static parameters fix array shapes or what the executables
were built with: changing one means building and compiling a new pipeline, so a running node
refuses the change with a reason that says so. Which is which is the schema's ``static`` field
(parameters.py). This module imports no ROS.
"""

from typing import Any, Mapping

from .config import config_from_parameters, PipelineConfig
from .parameters import ConfigError, spec_for

# What a CameraInfo also sets: a parameter set of one of these makes the parameters the newest
# word for that camera again.
INTRINSIC_KEYS = ('fx', 'fy', 'cx', 'cy', 'distortion_model', 'distortion')


def is_ours(key: str) -> bool:
    """Return True for the node's own parameters (not use_sim_time, QoS overrides, ...)."""
    return spec_for(key) is not None or key.startswith(('cameras.', 'lidars.'))


def static_reason(key: str) -> str | None:
    """Why ``key`` cannot change while the pipeline runs (from the schema), or None if live."""
    spec = spec_for(key)
    return spec.static if spec is not None else None


def plain(value: Any) -> Any:
    """Return an rclpy parameter value as plain Python (array.array and tuples as lists)."""
    return list(value) if hasattr(value, 'tolist') or isinstance(value, tuple) else value


def check_update(values: Mapping[str, Any],
                 changes: Mapping[str, Any]) -> tuple[dict[str, Any], PipelineConfig]:
    """
    Validate ``changes`` against the running ``values``; return the new values and config.

    Keys that are not the node's own are ignored. Raises :class:`ConfigError`: for a static key
    whose value changes, ``'<key> is static (<why>): restart the node (a managed node: cleanup,
    set it, configure) to change it'``; for a bad value, the config layer's message naming the
    key.
    """
    ours = {key: plain(value) for key, value in changes.items() if is_ours(key)}
    for key, value in ours.items():
        reason = static_reason(key)
        if reason is not None and plain(values.get(key)) != value:
            raise ConfigError(f'{key} is static ({reason}): restart the node (a managed node: '
                              'cleanup, set it, configure) to change it')
    merged = {**values, **ours}
    return merged, config_from_parameters(merged)


def changed_intrinsics(changes: Mapping[str, Any]) -> set[str]:
    """Return the cameras whose intrinsics or lens (``INTRINSIC_KEYS``) are among ``changes``."""
    return {key.split('.')[1] for key in changes
            if key.startswith('cameras.') and key.rsplit('.', 1)[1] in INTRINSIC_KEYS}


def set_live_line(changes: Mapping[str, Any]) -> str:
    """
    Return the log line of an accepted parameter set: the keys set, the static ones apart.

    A static key is accepted only at the value in force (``check_update``), so nothing of it
    changed: it is named as kept, never as set live.
    """
    kept = sorted(key for key in changes if is_ours(key) and static_reason(key) is not None)
    live = sorted(key for key in changes if key not in kept)
    line = 'parameters set live: ' + ', '.join(live) if live else 'no parameter set live'
    return line + (f' (static, at the value in force: {", ".join(kept)})' if kept else '')
