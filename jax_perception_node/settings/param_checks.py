"""
Checks of parameter values against the schema: types, bounds, lengths, as ROS types them.

:func:`check_value` is what the config layer and the node's parameter callback use;
:func:`check_ros_type` and :func:`ros_value` bridge Python's loose numbers and ROS's typed
parameters (a ROS double refuses 40, Python callers write it).
"""

import math
from numbers import Integral, Real
from typing import Any, Mapping, Sequence

import numpy as np

from .parameters import ARRAY_TYPES, ConfigError, GROUPS, number_text, ParamSpec, spec_for


def _is_int(value: Any) -> bool:
    # numbers' ABCs: NumPy's scalars too (a config built from arrays), bools never.
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))


def _as_float(value: Any) -> float | None:
    """Return a number as a finite float, None for anything else (inf, nan, 10**400, 'x')."""
    if not _is_number(value):
        return None
    try:
        value = float(value)
    except OverflowError:          # an int beyond float range
        return None
    return value if math.isfinite(value) else None


def check_value(key: str, value: Any) -> Any:
    """
    Check a value against the schema entry of ``key``; return it as plain Python.

    Doubles come back as float (an integer is accepted: Python callers write 8 for 8.0; the
    ROS node is stricter, its typed parameters refuse it), arrays as lists. Raises
    :class:`ConfigError` ``'<key>: <problem>, got <value>'``; ``None`` means 'required'.
    """
    spec = spec_for(key)
    if spec is None:
        raise ConfigError(f'{key}: unknown parameter')
    if value is None:
        raise ConfigError(f'{key}: {"required" if spec.default is None else "missing"}')
    if spec.ros_type in ARRAY_TYPES:
        return _check_array(spec, key, value)
    return _check_scalar(spec, key, value)


def _check_scalar(spec: ParamSpec, key: str, value: Any) -> Any:
    kind = spec.ros_type
    if kind == 'bool':
        if not isinstance(value, bool):
            raise ConfigError(f'{key}: expected true or false, got {value!r}')
        return value
    if kind == 'string':
        if not isinstance(value, str):
            raise ConfigError(f'{key}: expected a string, got {value!r}')
        if spec.nonempty and not value:
            raise ConfigError(f'{key}: must not be empty')
        if spec.choices and value not in spec.choices:
            raise ConfigError(f'{key}: expected one of {" | ".join(spec.choices)}, '
                              f'got {value!r}')
        return value
    if kind == 'integer' and not _is_int(value):
        raise ConfigError(f'{key}: expected an integer, got {value!r}')
    if kind == 'integer':
        value = int(value)
    if kind == 'double':
        if not _is_number(value):
            raise ConfigError(f'{key}: expected a number, got {value!r}')
        number = _as_float(value)
        if number is None:
            raise ConfigError(f'{key}: must be finite and within {spec.bounds_text()}, '
                              f'got {_shown(value)}')
        value = number
    _check_bounds(spec, key, value, value)
    return value


def _shown(value: Any) -> str:
    """Return a value for a message: floats as %g, huge integers shortened."""
    if isinstance(value, float):
        return f'{value:g}'
    if isinstance(value, list):
        return '[' + ', '.join(_shown(v) for v in value) + ']'
    text = repr(value)
    return text if len(text) <= 24 else f'{text[:8]}...({len(text)} digits)'


def _check_bounds(spec: ParamSpec, key: str, value: float, shown: Any) -> None:
    lo, hi = spec.minimum, spec.maximum
    if lo is not None and value < lo:
        raise ConfigError(f'{key}: must be >= {number_text(lo)}, got {_shown(shown)}')
    if hi is not None and value > hi:
        raise ConfigError(f'{key}: must be <= {number_text(hi)}, got {_shown(shown)}')


def _check_array(spec: ParamSpec, key: str, value: Any) -> list:
    if isinstance(value, (str, bytes)) or not hasattr(value, '__len__'):
        raise ConfigError(f'{key}: expected a list, got {value!r}')
    items = list(value)
    kind = spec.item_type
    if kind == 'double':
        floats = [_as_float(v) for v in items]
        if None in floats or (spec.length is not None and len(items) != spec.length):
            count = f'{spec.length} finite numbers' if spec.length else 'finite numbers'
            raise ConfigError(f'{key}: expected {count}, got {_shown(items)}')
        items = floats
    elif kind == 'integer' and not all(_is_int(v) for v in items):
        raise ConfigError(f'{key}: expected a list of integers, got {items!r}')
    elif kind == 'integer':
        items = [int(v) for v in items]
    elif kind == 'string' and not all(isinstance(v, str) for v in items):
        raise ConfigError(f'{key}: expected a list of strings, got {items!r}')
    elif kind == 'string' and spec.nonempty and not all(items):
        raise ConfigError(f'{key}: an empty name in {items!r}')
    if spec.length is not None and len(items) != spec.length:
        raise ConfigError(f'{key}: expected {spec.length} items, got {items!r}')
    for item in items:
        _check_bounds(spec, key, item, items)
    return items


def ros_type_error(key: str, given: str) -> str:
    """Return the message for a value of the wrong ROS type, e.g. an integer for a double."""
    spec = spec_for(key)
    hint = ' (ROS parameters are typed: write 40.0, not 40)' if spec.item_type == 'double' else ''
    return f'{key}: expected {spec.type_label}{hint}, got {given}'


def check_ros_type(key: str, value: Any) -> None:
    """Refuse what a typed ROS parameter refuses and :func:`check_value` lets by: 40 for 40.0."""
    spec = spec_for(key)
    if spec is None or spec.item_type != 'double':
        return
    items = value if spec.ros_type == 'double_array' and isinstance(value, list) else [value]
    if any(_is_int(v) for v in items):
        raise ConfigError(ros_type_error(key, f'{value!r} (integer)'))


def ros_value(key: str, value: Any) -> Any:
    """Return ``value`` with the Python types a typed ROS parameter of ``key`` needs (8 -> 8.0)."""
    spec = spec_for(key)
    if spec is None or spec.item_type != 'double':
        return value
    if spec.ros_type == 'double':
        return float(value) if _is_number(value) else value
    if isinstance(value, (list, tuple)):
        return [float(v) if _is_number(v) else v for v in value]
    return value


def unknown_key(key: str, listed: Mapping[str, Sequence[str]] | None = None) -> ConfigError:
    """
    Return the error of a key the node does not have: ``grid: 5`` is a group given a value.

    ``listed``: 'cameras' and 'lidars' -> the names configured; a block of one not among them
    (a camera left out of ``cameras.names``, its block kept) says so.
    """
    if key in GROUPS:
        return ConfigError(f'{key}: a group of parameters ({key}.*), not a value')
    group, name, *rest = key.split('.') + ['']
    if len(rest) == 2 and group in (listed or {}) and spec_for(key) is not None:
        return ConfigError(f'{key}: {name!r} is not in {group}.names {list(listed[group])}: '
                           f'add it, or remove the {group}.{name} block')
    return ConfigError(f'{key}: unknown parameter')
