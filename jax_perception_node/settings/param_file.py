"""
ROS 2 parameter files: read as rcl reads them, written as the typed node needs them.

The layout is ``<node or /**>: ros__parameters: <nested keys>``; ROS flattens nested keys to
dotted names (``grid.x_min``) and so does :func:`read_param_file`. A file may hold several
sections (a stack's file: other nodes', a ``/**`` one for all): as rcl, the sections whose name
matches the node's fully qualified name are merged, later ones over earlier ones.
"""

import os
from pathlib import Path
import re
from typing import Any, Mapping

import yaml

from .param_checks import ros_value
from .parameters import ConfigError, spec_for


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
    A safe YAML loader that reads scalars as ROS does: ``1e300`` a double, ``n`` false.

    PyYAML (YAML 1.1) wants a dot and a signed exponent (``1.0e+5``) and reads the rest as
    strings; rcl's parser takes whatever strtod takes. rcl also reads ``y``, ``Y``, ``n`` and
    ``N`` as booleans, where PyYAML has strings. Reading them alike means a value the CLI
    refuses is the value the node would refuse, with the same message.
    """

    bool_values = {**yaml.SafeLoader.bool_values, 'y': True, 'n': False}

    def construct_mapping(self, node, deep=False):
        """Read every plain key as a name, as rcl does: ``n:`` is a camera named n."""
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.style is None:
                key.tag = 'tag:yaml.org,2002:str'
        return super().construct_mapping(node, deep)


_RosLoader.add_implicit_resolver(
    'tag:yaml.org,2002:float',
    re.compile(r'^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$'),
    list('-+.0123456789'))
_RosLoader.add_implicit_resolver('tag:yaml.org,2002:bool', re.compile(r'^[yYnN]$'), list('yYnN'))


def read_value(text: str) -> Any:
    """Return a ``-p key:=value`` value as rcl reads it (YAML, ROS's scalars)."""
    return yaml.load(text, Loader=_RosLoader)


NODE = '/jax_perception'     # the node's fully qualified name, unless a launch renames it


def node_matches(section: str, node: str) -> bool:
    """
    Return True when a params file's section name applies to fully qualified ``node``.

    As rcl: a name without a leading '/' is taken from the root, ``*`` matches one token of a
    name and ``/**`` any number of them, none included (``/**`` is every node).
    """
    name = section if section.startswith('/') else '/' + section
    pattern = re.escape(name).replace(r'/\*\*', '(?:/.*)?').replace(r'\*', '[^/]*')
    return re.fullmatch(pattern, node) is not None


def read_param_file(path: str | os.PathLike, node: str = NODE,
                    strict: bool = False) -> dict[str, Any]:
    """
    Read a ROS 2 param YAML and return ``node``'s flat ``ros__parameters``.

    The sections matching ``node`` (a fully qualified name) are merged in file order, as rcl
    does. A section "holds this node's parameters" when it has a key the node has
    (``grid.resolution``, ``cameras.front.fx``; a camera driver's ``cameras: [...]`` is not).
    With ``strict`` (a launch file, for the node it starts) a file whose sections other than
    ``/**`` hold this node's parameters but none applies to ``node`` is refused: rcl would
    give the node the ``/**`` values alone, and the file's configuration of it would be lost;
    unless those sections are ``node``'s own name in other namespaces beside a ``/**`` that
    holds its parameters (a file of several robots: ``/robot1/<name>`` for ``/robot2/<name>``).
    Otherwise (the CLI, which runs no node), when no section applies to ``node`` itself, the
    file is read for the node it configures: the one section of ``node``'s own name in
    another namespace (``/perception/jax_perception``), or else the one section that holds
    this node's parameters (a node a launch file renamed), with the ``/**`` sections; two such
    sections are refused, and so is a file of several sections none of which applies.
    """
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
        # PyYAML's text spans lines (the mark, a caret under it): one line, as every error.
        raise ConfigError(f'params file {path}: not valid YAML ({" ".join(str(exc).split())})'
                          ) from None
    except RecursionError:
        raise ConfigError(f'params file {path}: nested too deeply to read') from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f'params file {path}: expected a mapping of node names')
    sections = [(str(name), section['ros__parameters']) for name, section in doc.items()
                if isinstance(section, Mapping)
                and isinstance(section.get('ros__parameters'), Mapping)]
    if not sections:
        raise ConfigError(f'params file {path}: no "<node>: ros__parameters:" section')
    try:
        return _read_sections(path, sections, node, strict)
    except RecursionError:      # an alias inside itself (grid: &a {x: *a}): no end to it
        raise ConfigError(f'params file {path}: a mapping nested in itself (a YAML alias of '
                          'its own anchor) or nested too deeply') from None


def _read_sections(path: Path, sections: list[tuple[str, Mapping]], node: str,
                   strict: bool) -> dict[str, Any]:
    """Merge the sections that apply to ``node`` (see ``read_param_file``)."""
    specific = [(name, tree) for name, tree in sections if name.strip('/') != '**']
    if not strict:
        node = _node_of_file(path, specific, node)
    elif not any(node_matches(name, node) for name, _ in specific):
        ours = [name for name, tree in specific if _holds_ours(tree)]
        # Other robots' sections of this node's name, on a /** that configures it too.
        robots = all(name.rstrip('/').rsplit('/', 1)[-1] == node.rsplit('/', 1)[-1]
                     for name in ours) and any(
            _holds_ours(tree) for name, tree in sections if name.strip('/') == '**')
        if ours and not robots:
            raise ConfigError(f'params file {path}: {", ".join(ours)} configure this node, '
                              f'but no section applies to node {node} (rcl would give it the '
                              f'/** values alone); name one {node}')
    matching = [tree for name, tree in sections if node_matches(name, node)]
    if not matching and len(sections) > 1:
        raise ConfigError(f'params file {path}: no section for node {node} among '
                          f'{", ".join(name for name, _ in sections)} (name one {node} or /**)')
    flat: dict[str, Any] = {}
    for tree in matching or [sections[0][1]]:
        flat.update(flatten(tree))
    return flat


def _holds_ours(tree: Mapping) -> bool:
    """Return True when a section has a key this node has (grid.resolution, cameras.names)."""
    # A key the node has, not only a first word of its groups: a camera driver's own
    # 'cameras: [cam0, cam1]' is that driver's.
    return any(spec_for(key) is not None for key in flatten(tree))


def _node_of_file(path: Path, specific: list[tuple[str, Mapping]], node: str) -> str:
    """Return the node a file configures: ``node``, or the one its sections name."""
    if any(node_matches(name, node) for name, _ in specific):
        return node
    named = [('/' + name.lstrip('/'), tree) for name, tree in specific if '*' not in name]
    base = node.rsplit('/', 1)[1]
    for candidates, what in (([name for name, _ in named if name.rsplit('/', 1)[1] == base],
                              f'name a node {base}'),
                             ([name for name, tree in named if _holds_ours(tree)],
                              "hold this node's parameters")):
        if len(candidates) > 1:
            raise ConfigError(f'params file {path}: sections {", ".join(candidates)} each '
                              f'{what}; give a file with one of them')
        if candidates:
            return candidates[0]
    return node


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
