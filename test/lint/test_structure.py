"""The package's shape: imports point one way, modules and functions stay small."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'jax_perception_node'
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def package_imports(path: Path) -> set[str]:
    """Return the package modules ``path`` imports, at any depth (function-level ones too)."""
    name = module_name(path)
    is_package = path.name == '__init__.py'
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PACKAGE.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split('.')
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                target = '.'.join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ''
            if not target.startswith(PACKAGE.name):
                continue
            # ``from . import x`` and ``from .a import b`` may name submodules.
            found.add(target)
            found.update(f'{target}.{a.name}' for a in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob('*.py')}
    graph = {}
    for name, path in modules.items():
        # The package root's lazy attribute table imports nothing at import time.
        if name == PACKAGE.name:
            continue
        graph[name] = {m for m in package_imports(path) if m in modules and m != name
                       and m != PACKAGE.name and not name.startswith(m + '.')}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Return one import cycle as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_cycle_finder_finds_a_planted_cycle():
    # Positive control: the checker itself must see a cycle when there is one.
    assert find_cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == ['a', 'b', 'c', 'a']
    assert find_cycle({'a': {'b'}, 'b': set()}) is None


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert 'jax_perception_node.tools.cli' in graph   # the walk saw the tools
    assert find_cycle(graph) is None, ' -> '.join(find_cycle(graph))


def test_the_product_never_imports_the_tools():
    graph = import_graph()
    tools = f'{PACKAGE.name}.tools'
    upward = sorted(f'{name} -> {dep}' for name, deps in graph.items()
                    if not name.startswith(tools) for dep in deps if dep.startswith(tools))
    assert not upward


@pytest.mark.parametrize('path', sorted(PACKAGE.rglob('*.py')), ids=lambda p: p.name)
def test_module_and_function_size(path):
    text = path.read_text()
    assert text.count('\n') <= MAX_MODULE_LINES, f'{path.name}: {text.count(chr(10))} lines'
    long = [f'{node.name} ({node.end_lineno - node.lineno + 1} lines)'
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f'{path.name}: ' + ', '.join(long)


# The layers, lowest first: a folder imports only folders of lower rank (docs/design.md,
# "Layers"). bags and ros share a rank: neither imports the other. The tools stand on top.
LAYERS = {'geometry': 0, 'settings': 1, 'sensors': 2, 'detection': 3, 'core': 4, 'outputs': 5,
          'frames': 6, 'bags': 7, 'ros': 7, 'tools': 8}


def layer_of(module: str) -> str | None:
    """Return the layer folder of a package module, or None for the package's face."""
    parts = module.split('.')
    return parts[1] if len(parts) > 2 else None


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Return 'a -> b' for every import of a module into a layer not below its own."""
    found = []
    for name, deps in graph.items():
        here = layer_of(name)
        for dep in deps:
            there = layer_of(dep)
            if here is None or there is None or here == there:
                continue
            if layers[there] >= layers[here]:
                found.append(f'{name} -> {dep}')
    return sorted(found)


def test_layer_check_finds_a_planted_upward_import():
    # Positive control: core reaching frames, and bags reaching ros (same rank), are caught;
    # downward and same-folder imports are not.
    graph = {'p.core.pipeline': {'p.frames.frame_path', 'p.core.kernels', 'p.geometry.stamps'},
             'p.bags.replay': {'p.ros.health', 'p.frames.sync'}}
    assert upward_imports(graph, LAYERS) == ['p.bags.replay -> p.ros.health',
                                             'p.core.pipeline -> p.frames.frame_path']


def test_every_import_points_down_the_layers():
    graph = import_graph()
    assert {layer_of(name) for name in graph} - {None} == set(LAYERS)
    assert not upward_imports(graph, LAYERS)


def test_no_product_module_at_the_package_root():
    # The root is the package's face only; the executables live in ros/ (setup.py names them).
    assert sorted(p.name for p in PACKAGE.glob('*.py')) == ['__init__.py']
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir()
                  and p.name != '__pycache__') == sorted(LAYERS)
