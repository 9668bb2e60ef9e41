"""
Every repository path that README.md and the guides in docs/ name exists; every guide is linked.

The documents are README.md and every ``docs/*.md`` (the guides); each guide must be linked from
README.md, so a newcomer reaches it in one click.

What counts as a named path (the rules, kept simple on purpose):

1. Inline code (`...` outside fenced blocks): each whitespace-separated token.
   - A token with a ``/`` is a path when its first component is one of ``ROOTS`` (relative to
     the repository) or ``PACKAGE_ROOTS`` (the package's folders, relative to
     ``jax_perception_node/``, as in ``tools/live.py`` or ``core/``); it must exist there.
     Other tokens with a ``/`` are ROS names, message types or paths outside the repository
     (``~/input/pointcloud``, ``sensor_msgs/Image``, ``../shared/vendor``), and are not
     checked.
   - A whole span that is one bare file name with an ``EXTENSIONS`` suffix (``serving.py``,
     ``test_schema.py``) must be the name of some file in the repository.
2. Markdown links and images ``[text](target)``: the target, relative to the document's folder,
   must exist (web addresses and anchors are not checked).
3. Module trees: a fenced block whose first line starts with ``jax_perception_node/``. A line
   that starts at column 0 with a folder (``jax_perception_node/tools/``) makes it the current
   folder; on an indented line each token ending in ``.py`` or ``/`` names an entry of the
   current folder; on a line at column 0 every token with a ``/`` or an ``EXTENSIONS`` suffix
   is relative to the repository.

Not checked in any rule: tokens with a placeholder (``<``, ``*``, ``{``, ``[``), and paths under
what ``make clean`` removes (``demo_out/``, ``bench_out/``, ``soak_out/``: made by runs, not
committed). Other fenced blocks (commands, YAML, Python) hold example paths of a user's own
files and are not read.
"""

import os
import re
import shlex

from configs import REPO
import pytest

GUIDES = tuple(sorted(p.relative_to(REPO).as_posix() for p in (REPO / 'docs').glob('*.md')))
DOCUMENTS = ('README.md',) + GUIDES
ROOTS = ('jax_perception_node', 'test', 'docs', 'config', 'launch', 'schema', 'resource', '.ci',
         'interfaces', 'foxglove')
# The package's own folders (the layers and the tools), named without the package in front.
PACKAGE_ROOTS = tuple(sorted(p.name for p in (REPO / 'jax_perception_node').iterdir()
                             if p.is_dir() and p.name != '__pycache__'))
EXTENSIONS = ('.py', '.md', '.json', '.yaml', '.xml', '.txt', '.cfg', '.ini', '.lock', '.png')
PLACEHOLDERS = ('<', '*', '{', '[')
SKIPPED_FOLDERS = {'.git', '__pycache__', '.pytest_cache', '.venv'}


def generated() -> tuple[str, ...]:
    """Return the folders ``make clean`` removes: run outputs, not part of the repository."""
    line = next(line for line in (REPO / 'Makefile').read_text().splitlines()
                if line.strip().startswith('rm -rf'))
    return tuple(shlex.split(line)[2:])


def repo_file_names() -> set[str]:
    """Return the name of every file in the checkout (not caches, the venv, run outputs)."""
    skip = SKIPPED_FOLDERS | set(generated())
    names = set()
    for _, folders, files in os.walk(REPO):
        folders[:] = [f for f in folders if f not in skip]
        names.update(files)
    return names


def split_fences(text: str):
    """Yield ('prose', text) and ('fence', lines) parts of a markdown document, in order."""
    parts = re.split(r'^```[^\n]*\n', text, flags=re.M)
    for i, part in enumerate(parts):
        yield ('fence', part.splitlines()) if i % 2 else ('prose', part)


def inline_paths(prose: str) -> list[tuple[str, str]]:
    """Rule 1: (kind, name) pairs from inline code; kind 'path' (with a /) or 'name' (bare)."""
    found = []
    for span in re.findall(r'`([^`\n]+)`', prose):
        span = span.strip()
        if '/' not in span and ' ' not in span and span.endswith(EXTENSIONS):
            found.append(('name', span))
            continue
        for token in span.split():
            token = token.strip('(),;:\'"')
            if '/' in token and token.split('/')[0] in ROOTS + PACKAGE_ROOTS:
                found.append(('path', token))
    return found


def link_paths(prose: str, folder: str) -> list[tuple[str, str]]:
    """Rule 2: ('path', target) for markdown link targets, made relative to the repository."""
    found = []
    for target in re.findall(r'\]\(([^)\s]+)\)', prose):
        if re.match(r'[a-z]+:', target) or target.startswith('#'):
            continue
        found.append(('path', (folder + '/' if folder else '') + target.split('#')[0]))
    return found


def tree_paths(lines: list[str]) -> list[tuple[str, str]]:
    """Rule 3: ('path', name) for every entry of a module tree block."""
    if not lines or not lines[0].startswith('jax_perception_node/'):
        return []
    found, folder = [], ''
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if not line[0].isspace():
            if tokens[0].endswith('/'):
                folder = tokens[0]
            found += [('path', t.rstrip('/')) for t in tokens
                      if '/' in t or t.endswith(EXTENSIONS)]
        else:
            found += [('path', folder + t.rstrip('/')) for t in tokens
                      if t.endswith('.py') or t.endswith('/')]
    return found


def named_paths(document: str) -> list[tuple[str, str]]:
    """List what a document names by the three rules, placeholders and outputs left out."""
    folder = (REPO / document).parent.relative_to(REPO).as_posix()
    folder = '' if folder == '.' else folder
    found = []
    for kind, part in split_fences((REPO / document).read_text()):
        if kind == 'prose':
            found += inline_paths(part) + link_paths(part, folder)
        else:
            found += tree_paths(part)
    outputs = generated()
    return [(kind, name) for kind, name in found
            if not any(p in name for p in PLACEHOLDERS)
            and name.split('/')[0].rstrip('/') not in outputs]


def exists(kind: str, name: str, names: set[str]) -> bool:
    if kind == 'name':
        return name in names
    if name.split('/')[0] in PACKAGE_ROOTS:
        return (REPO / 'jax_perception_node' / name).exists()
    return (REPO / name).exists()


def unlinked_guides(readme: str, guides: tuple[str, ...]) -> list[str]:
    """Return the guides that no markdown link of the README text points to."""
    linked = {name for part_kind, part in split_fences(readme) if part_kind == 'prose'
              for _, name in link_paths(part, '')}
    return [guide for guide in guides if guide not in linked]


def test_the_documents_are_the_readme_and_every_guide():
    assert DOCUMENTS[0] == 'README.md' and 'docs/design.md' in DOCUMENTS
    assert {'docs/users.md', 'docs/integrators.md', 'docs/parameters.md', 'docs/performance.md',
            'docs/reliability.md'} <= set(GUIDES)
    assert {'tools', 'core', 'ros'} <= set(PACKAGE_ROOTS)


def test_every_guide_is_linked_from_the_readme():
    missing = unlinked_guides((REPO / 'README.md').read_text(), GUIDES)
    assert not missing, f'README.md links no {missing}: every guide must be one click away'


def test_the_link_check_finds_a_guide_left_out():
    # Positive control: a guide named only in code, or only in a fenced block, is not linked.
    readme = ('See [users](docs/users.md) and `docs/design.md`.\n'
              '```\n[perf](docs/performance.md)\n```\n')
    guides = ('docs/design.md', 'docs/performance.md', 'docs/users.md')
    assert unlinked_guides(readme, guides) == ['docs/design.md', 'docs/performance.md']


@pytest.mark.parametrize('document', DOCUMENTS)
def test_every_named_path_exists(document):
    names = repo_file_names()
    missing = sorted({name for kind, name in named_paths(document)
                      if not exists(kind, name, names)})
    assert not missing, f'{document} names paths that do not exist: {missing}'


def test_the_rules_find_paths_and_leave_the_rest():
    # Positive controls: each rule finds what it should, so a pass above means something.
    prose = ('See `test/unit/test_config.py`, `tools/live.py` and `serving.py`; run '
             '`jax-perception bench --markdown docs/bench.json`. Not paths: `sensor_msgs/Image`, '
             '`~/input/pointcloud`, `../shared/vendor`, `make test`. [design](docs/design.md), '
             '[web](https://example.com/x.md).')
    assert inline_paths(prose) == [('path', 'test/unit/test_config.py'),
                                   ('path', 'tools/live.py'), ('name', 'serving.py'),
                                   ('path', 'docs/bench.json')]
    assert link_paths(prose, 'docs') == [('path', 'docs/docs/design.md')]
    tree = ['jax_perception_node/     the product', '  node.py  lifecycle_node.py   nodes',
            'jax_perception_node/tools/    tools', '  bench/   one module per part; x.py: y',
            'launch/ config/ Makefile .ci/run']
    assert tree_paths(tree) == [
        ('path', 'jax_perception_node'), ('path', 'jax_perception_node/node.py'),
        ('path', 'jax_perception_node/lifecycle_node.py'), ('path', 'jax_perception_node/tools'),
        ('path', 'jax_perception_node/tools/bench'), ('path', 'launch'), ('path', 'config'),
        ('path', '.ci/run')]
    names = repo_file_names()
    assert exists('path', 'tools/live.py', names) and exists('name', 'serving.py', names)
    assert not exists('path', 'test/test_precision.py', names)
    assert not exists('name', 'no_such_module.py', names)
    assert {'demo_out', 'bench_out', 'soak_out'} <= set(generated())
