"""
ROS 2 parameter files: read as rcl reads them, written as the typed node needs them.

The layout is ``<node or /**>: ros__parameters: <nested keys>``; ROS flattens nested keys to
dotted names (``grid.x_min``) and so does :func:`read_param_file`.
"""

import os
from pathlib import Path
import re
from typing import Any, Mapping

import yaml

from .param_checks import ros_value
from .parameters import ConfigError


def flatten(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
    """Nested YAML mapping -> dotted keys, as ROS 2 does for parameters."""
    flat = {}
    for key, value in tree.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + '.'))
        else:
            flat[name] = value
    return flat


class _RosLoader(yaml.SafeLoader):
    """
    A safe YAML loader that reads numbers as ROS does: ``1e300`` and ``1.0e5`` are doubles.

    PyYAML (YAML 1.1) wants a dot and a signed exponent (``1.0e+5``) and reads the rest as
    strings; rcl's parser takes whatever strtod takes. Reading them alike means a value the CLI
    refuses is the value the node would refuse, with the same message.
    """


_RosLoader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$'),
    list('-+.0123456789'))


def read_param_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ROS 2 param YAML and return its flat ``ros__parameters`` (first node section)."""
    path = Path(path)
    try:
        text = path.read_text(encoding='utf-8')
    except OSError as exc:
        raise ConfigError(f'params file {path}: {exc.strerror or exc}') from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f'params file {path}: not UTF-8 text ({exc.reason} at byte '
                          f'{exc.start})') from None
    try:
        doc = yaml.load(text, Loader=_RosLoader)   # a SafeLoader: builds plain data only
    except yaml.YAMLError as exc:
        raise ConfigError(f'params file {path}: not valid YAML ({exc})') from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f'params file {path}: expected a mapping of node names')
    for section in doc.values():
        if isinstance(section, Mapping) and isinstance(section.get('ros__parameters'), Mapping):
            return flatten(section['ros__parameters'])
    raise ConfigError(f'params file {path}: no "<node>: ros__parameters:" section')


def write_param_file(params: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """
    Write flat dotted parameters as a ROS 2 param file (``/**: ros__parameters:``).

    Values are written with the types the node's typed parameters need (8 for a double is
    written 8.0), so a file written here starts the node as it loads in Python.
    """
    tree: dict = {}
    for key, value in params.items():
        *parents, leaf = key.split('.')
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = ros_value(key, list(value) if isinstance(value, tuple) else value)
    path = Path(path)
    path.write_text(yaml.safe_dump({'/**': {'ros__parameters': tree}}))
    return path
