"""
The ROS type rcl gives a parameter value's text (``-p key:=text``), by rcl's own rules.

rcl's YAML parser (rcl_yaml_param_parser, ``get_value``) types each plain scalar itself,
not by YAML's schema: a boolean word (``y``, ``yes``, ``true``, ``on`` and their negatives,
in three cases), then an integer if ``strtol`` with base 0 reads all of it (``0x1f``, ``010``
octal), then a double if ``strtod`` does (``08``, ``1e-1``, ``0x1p-2``, ``.inf``), else a
string; a quoted scalar is a string. A list takes its first item's type.
"""

import re

import yaml

_BOOLS = {word for base in ('y', 'yes', 'true', 'on', 'n', 'no', 'false', 'off')
          for word in (base, base.capitalize(), base.upper())}
_INTEGER = re.compile(r'[+-]?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)')
_HEX_FLOAT = re.compile(r'[+-]?0[xX]')
_INT64 = 2 ** 63


def rcl_type(text: str) -> str | None:
    """
    Return the ROS type rcl reads ``text`` as: 'double', 'string_array', ...

    None where rcl gives it no type or refuses it itself: ``[]``, a list of mixed types, a
    mapping, text that is not YAML.
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if isinstance(node, yaml.ScalarNode):
        return _scalar_type(node)
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        return None
    if not all(isinstance(item, yaml.ScalarNode) for item in node.value):
        return None
    types = {_scalar_type(item) for item in node.value}
    return f'{types.pop()}_array' if len(types) == 1 else None


def _scalar_type(node: yaml.ScalarNode) -> str:
    """Return the type of one scalar, as rcl's ``get_value`` decides it."""
    value = node.value
    if node.style in ("'", '"'):
        return 'string'
    if value in _BOOLS:
        return 'bool'
    if _INTEGER.fullmatch(value) and -_INT64 <= _integer(value) < _INT64:   # else ERANGE
        return 'integer'
    if _is_double(value):
        return 'double'
    return 'string'


def _integer(value: str) -> int:
    """Read ``value`` (matched by ``_INTEGER``) as strtol with base 0 does."""
    digits = value.lstrip('+-')
    base = 16 if digits[:2].lower() == '0x' else 8 if digits[:1] == '0' and digits[1:] else 10
    return int(value, base)


def _is_double(value: str) -> bool:
    """Return True when C's strtod reads all of ``value`` (Python's float, without '_')."""
    if '_' in value or not value:
        return False
    if value.lower().lstrip('+-') in ('.inf', '.nan'):
        return True
    try:
        float.fromhex(value) if _HEX_FLOAT.match(value) else float(value)
    except ValueError:
        return False
    return True
