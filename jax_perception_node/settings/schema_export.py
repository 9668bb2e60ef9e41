"""
Documents generated from the parameter schema: the parameter guide's table and the JSON schema.

``python -m jax_perception_node.settings.schema_export --check`` exits 1 when
``docs/parameters.md`` (between ``<!-- parameters:begin -->`` and ``<!-- parameters:end -->``) or
``schema/jax_perception.schema.json`` differ from what :data:`parameters.SCHEMA` generates;
``--write`` rewrites them. The JSON schema follows Autoware's layout (draft-07, the parameters
under ``definitions/jax_perception``, nested like the YAML), so editors and Autoware's schema
checks validate a parameter file against it.
"""

import argparse
import json
from pathlib import Path
import sys
from typing import Any

from .parameters import CAMERA_PREFIX, LIDAR_PREFIX, ParamSpec, SCHEMA, TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
PARAMETERS_DOC = ROOT / 'docs' / 'parameters.md'
JSON_SCHEMA = ROOT / 'schema' / 'jax_perception.schema.json'
BEGIN, END = '<!-- parameters:begin -->', '<!-- parameters:end -->'
NODE = 'jax_perception'
JSON_TYPES = {'bool': 'boolean', 'integer': 'integer', 'double': 'number', 'string': 'string'}


class ExportError(Exception):
    """A generated document cannot be read or written; the message names the file."""


def _restart_note(spec: ParamSpec) -> str:
    return f'static ({spec.static}): restart to change' if spec.static else 'live'


def _display(value: Any) -> str:
    if value is None:
        return 'required'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"'{value}'" if value == '' else value
    if isinstance(value, list):
        return '[' + ', '.join(_display(v) for v in value) + ']'
    return repr(value)


def _cell(text: str) -> str:
    """Escape a table cell: pipes always, angle brackets outside code (HTML would eat them)."""
    text = text.replace('|', '\\|')
    return text if text.startswith('`') else text.replace('<', '&lt;')


def parameter_table() -> str:
    """Return the Markdown parameter table, one row per schema entry."""
    rows = ['| key | type | default | unit | bounds | changes | meaning |',
            '|---|---|---|---|---|---|---|']
    for spec in SCHEMA:
        default = _display(spec.default)
        cells = [f'`{spec.key}`', spec.type_label,
                 default if default == 'required' else f'`{default}`', spec.unit,
                 spec.bounds_text(), 'live' if spec.static is None else f'restart: {spec.static}',
                 spec.description]
        rows.append('| ' + ' | '.join(_cell(c) for c in cells) + ' |')
    return '\n'.join(rows) + '\n'


def _property(spec: ParamSpec) -> dict:
    item: dict[str, Any] = {'type': JSON_TYPES[spec.item_type]}
    if spec.minimum is not None:
        item['minimum'] = spec.minimum
    if spec.maximum is not None:
        item['maximum'] = spec.maximum
    if spec.choices:
        item['enum'] = list(spec.choices)
    if spec.nonempty:
        item['minLength'] = 1
    if spec.ros_type.endswith('_array'):
        prop: dict[str, Any] = {'type': 'array', 'items': item}
        if spec.length is not None:
            prop['minItems'] = prop['maxItems'] = spec.length
    else:
        prop = item
    prop = {'type': prop.pop('type'), 'description': f'{spec.summary} [{_restart_note(spec)}]',
            **prop}
    if spec.default is not None:
        prop['default'] = spec.default
    return prop


def _nest(specs: list[ParamSpec], strip: str = '') -> dict:
    """Return a draft-07 object for specs whose dotted keys (less ``strip``) nest like YAML."""
    root: dict[str, Any] = {'type': 'object', 'properties': {}}
    for spec in specs:
        *parents, leaf = spec.key[len(strip):].split('.')
        node = root
        for part in parents:
            node = node['properties'].setdefault(
                part, {'type': 'object', 'properties': {}, 'additionalProperties': False})
        node['properties'][leaf] = _property(spec)
        if spec.default is None:
            node.setdefault('required', []).append(leaf)
    return root


def json_schema() -> dict:
    """Return the Autoware-style JSON schema (draft-07) of the parameter file."""
    node = _nest([s for s in SCHEMA if not s.key.startswith(TEMPLATES)])
    definitions = {NODE: node}
    for group, prefix in (('camera', CAMERA_PREFIX), ('lidar', LIDAR_PREFIX)):
        node['properties'][f'{group}s']['additionalProperties'] = {
            '$ref': f'#/definitions/{group}'}
        definitions[group] = _nest([s for s in SCHEMA if s.key.startswith(prefix)], prefix)
        definitions[group]['additionalProperties'] = False
    return {
        '$schema': 'http://json-schema.org/draft-07/schema#',
        'title': 'Parameters for the jax_perception node',
        'type': 'object',
        'definitions': definitions,
        'properties': {'/**': {
            'type': 'object',
            'properties': {'ros__parameters': {'$ref': f'#/definitions/{NODE}'}},
            'required': ['ros__parameters'],
        }},
        'required': ['/**'],
    }


def json_text() -> str:
    """Return the JSON schema as the committed file holds it."""
    return json.dumps(json_schema(), indent=2) + '\n'


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise ExportError(f'{path}: {exc.strerror or exc}') from None


def with_table(text: str) -> str:
    """Return the parameter guide's text with the generated table between the markers."""
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise ExportError(f'{PARAMETERS_DOC}: needs the markers {BEGIN} and {END}, in that order')
    return text[:begin + len(BEGIN)] + '\n' + parameter_table() + text[end:]


def stale() -> list[str]:
    """Return the generated files that differ from the schema (empty when all are current)."""
    out = []
    guide = _read(PARAMETERS_DOC)
    if with_table(guide) != guide:
        out.append(str(PARAMETERS_DOC))
    if not JSON_SCHEMA.exists() or _read(JSON_SCHEMA) != json_text():
        out.append(str(JSON_SCHEMA))
    return out


def write() -> list[str]:
    """Rewrite the stale generated files; return their paths."""
    paths = stale()
    if str(PARAMETERS_DOC) in paths:
        PARAMETERS_DOC.write_text(with_table(_read(PARAMETERS_DOC)))
    if str(JSON_SCHEMA) in paths:
        JSON_SCHEMA.parent.mkdir(exist_ok=True)
        JSON_SCHEMA.write_text(json_text())
    return paths


def main(argv: list[str] | None = None) -> int:
    """Console entry: ``--check`` (exit 1 when stale) or ``--write``."""
    parser = argparse.ArgumentParser(prog='python -m jax_perception_node.settings.schema_export',
                                     description=__doc__.strip().splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument('--check', action='store_true', help='exit 1 when a file is stale')
    mode.add_argument('--write', action='store_true', help='rewrite the stale files')
    args = parser.parse_args(argv)
    try:
        if args.write:
            for path in write():
                print(f'wrote {path}')
            return 0
        paths = stale()
    except ExportError as exc:
        print(f'schema_export: {exc}', file=sys.stderr)
        return 1
    for path in paths:
        print(f'schema_export: {path} is stale: run python -m '
              'jax_perception_node.settings.schema_export --write', file=sys.stderr)
    return 1 if paths else 0


if __name__ == '__main__':
    sys.exit(main())
