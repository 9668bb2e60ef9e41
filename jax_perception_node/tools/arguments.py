"""
Checks of ``jax-perception``'s command-line values, made before a command starts its work.

Every check raises :class:`UsageError` naming the option, so that ``cli.main`` prints one line
and exits 1: numbers that are not finite or out of range, topic names ROS would refuse, and
output paths that cannot be written or would land on an input (or on another output).
"""

import importlib.util
import math
import os
from pathlib import Path
import tempfile


class UsageError(Exception):
    """Bad command-line arguments, or an output they name that cannot be written."""


def pairs(values: list[str] | None, option: str, separator: str = '=',
          form: str = 'NAME=TOPIC') -> dict[str, str]:
    """Return the KEY -> VALUE of repeated ``option`` values written KEY<separator>VALUE."""
    mapping = {}
    for pair in values or []:
        key, sep, value = pair.partition(separator)
        if not sep or not key or not value:
            raise UsageError(f'{option} expects {form}, got {pair!r}')
        if mapping.get(key, value) != value:    # the last would win without a word
            raise UsageError(f'{option} gives {key} twice: {mapping[key]} and {value}')
        mapping[key] = value
    return mapping


def number(value: float | None, option: str, low: float, high: float = math.inf,
           low_open: bool = False, unit: str = '') -> float | None:
    """
    Return ``value`` when it is finite and in [low, high] ((low, high] with ``low_open``).

    None passes (an option left out). NaN fails every comparison, so it is refused here
    rather than let through by a ``value <= 0`` test.
    """
    if value is None:
        return None
    above = value > low if low_open else value >= low
    if not (math.isfinite(value) and above and value <= high):
        bound = f'> {low:g}' if low_open else f'>= {low:g}'
        if math.isfinite(high):
            bound += f' and <= {high:g}'
        raise UsageError(f'{option} must be a number {bound}{unit}, got {value:g}')
    return value


def topic_name(name: str, option: str, node: str = 'jax_perception') -> str:
    """
    Return ``name`` as the full topic name a node ``node`` in the root namespace uses.

    The player and the recorder are such nodes: a relative name expands under '/', '~' under
    the node. UsageError when ROS would refuse the name.
    """
    from rclpy.exceptions import InvalidTopicNameException
    from rclpy.expand_topic_name import expand_topic_name
    from rclpy.validate_full_topic_name import validate_full_topic_name
    try:
        full = expand_topic_name(name, node, '/')
        validate_full_topic_name(full)
    except (InvalidTopicNameException, ValueError) as exc:
        # rcl's text: "topic name 'x' is invalid: <reason>, at <source file>:<line>"
        reason = str(exc).splitlines()[0].split(' is invalid: ', 1)[-1].split(', at /')[0]
        raise UsageError(f'{option} {name!r}: not a valid ROS topic name ({reason})') from None
    return full


def check_writable(path: str, option: str, folder: bool) -> None:
    """
    Fail before a long run when ``path`` (a file, or with ``folder`` a folder) cannot be made.

    Missing folders on the way are created later; the nearest existing one must be a folder
    this user may write in, checked by creating (and removing) a file there: permission bits
    say nothing of a read-only mount or of /proc, where even root cannot create a file.
    """
    if not path:
        raise UsageError(f'{option}: an empty path')
    target = Path(path).absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == target:
        if folder and not target.is_dir():
            raise UsageError(f'{option} {path}: exists and is not a folder')
        if not folder and target.is_dir():
            raise UsageError(f'{option} {path}: exists and is a folder')
        existing = target if folder else target.parent
    elif not existing.is_dir():
        raise UsageError(f'{option} {path}: {existing} is not a folder')
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f'{option} {path}: cannot write in {existing}')
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix='.jax-perception-probe-')
    except OSError as exc:
        raise UsageError(f'{option} {path}: cannot write in {existing}: '
                         f'{exc.strerror or exc}') from None
    os.close(fd)
    os.unlink(probe)


def _bag_holding(path: Path) -> Path | None:
    """Return the rosbag2 folder ``path`` is in (or is), if any."""
    from .fleet import is_bag
    return next((p for p in (path, *path.parents) if p.is_dir() and is_bag(p)), None)


def outputs_apart(inputs: list[str], outputs: dict[str, str | None],
                  bag: str | None = None) -> None:
    """
    Refuse an output (option -> path; None: not given) that would spoil an input or an output.

    Refused: an output on an input's path, one inside a bag folder (an input's or any other:
    rosbag2 folders hold only their own files), two outputs on one path, and one inside the
    output bag that option ``bag`` names. A plain folder that holds inputs is fine. Links are
    followed, so another name for the same file is caught too.
    """
    given = [(option, path, Path(path).resolve()) for option, path in outputs.items() if path]
    sources = [(src, Path(src).resolve()) for src in inputs]
    for option, path, out in given:
        for src, resolved in sources:
            if out == resolved:
                raise UsageError(f'{option} {path}: would write over the input {src}')
        holder = _bag_holding(out.parent)
        if holder is not None:
            raise UsageError(f'{option} {path}: would write inside the bag {holder}')
    for i, (option, path, out) in enumerate(given):
        for other, other_path, elsewhere in given[i + 1:]:
            if out == elsewhere:
                raise UsageError(f'{option} {path} and {other} {other_path}: one would write '
                                 f'over the other')
    if bag and outputs.get(bag):
        inside = Path(outputs[bag]).resolve()
        for option, path, out in given:
            if inside in out.parents:
                raise UsageError(f'{option} {path}: would write inside the output bag {bag} '
                                 f'{outputs[bag]}')


def distinct_bags(bags: list[str]) -> None:
    """
    Refuse a bag named twice (its folder and its file count as one): it would weigh double.

    A file inside a rosbag2 folder is that folder's bag (``_bag_holding``); links are followed.
    """
    seen: dict[Path, str] = {}
    for src in bags:
        path = Path(src).resolve()
        bag = _bag_holding(path) or path
        if bag in seen:
            raise UsageError(f'{src}: the same bag as {seen[bag]}, named twice (its frames would '
                             'count twice)')
        seen[bag] = src


# What a command imports beyond the node's requirements, and the setup.py extra that brings
# it: (module, extra, given an option only / '' always, not given an option / ''). A fleet
# replay's Ray says so itself (FleetError).
EXTRAS = {'demo': (('matplotlib', 'tools', '', ''),),
          'replay': (('matplotlib', 'tools', '--png', ''),),
          'train': (('optax', 'train', '', ''), ('matplotlib', 'train', '', '')),
          'bench': (('psutil', 'tools', '', '--markdown'),
                    ('matplotlib', 'tools', '', '--markdown'))}
# What a command's --help imports: train's arguments are its module's, which imports optax.
HELP_IMPORTS = {'train': ('optax',)}


def check_extras(argv: list[str]) -> None:
    """
    Raise UsageError naming the extra a command needs and lacks, before any of its work.

    Without it the command ran (a demo's 30 s, a whole replay) and ended in an ImportError.
    """
    def given(option: str) -> bool:     # argparse's abbreviations too (--pn for --png)
        return any(len(name) > 3 and option.startswith(name)
                   for name in (arg.split('=', 1)[0] for arg in argv if arg.startswith('--')))
    command = argv[0] if argv else ''
    helping = '-h' in argv or '--help' in argv
    for module, extra, only, unless in EXTRAS.get(command, ()):
        if helping and module not in HELP_IMPORTS.get(command, ()):
            continue
        if ((not only or given(only)) and not (unless and given(unless))
                and importlib.util.find_spec(module) is None):
            raise UsageError(f'{command}{" " + only if only else ""} needs {module}: pip install '
                             f'"jax_perception_node[{extra}]" (or pip install {module})')
