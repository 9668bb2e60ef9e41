"""
Checks of ``jax-perception``'s command-line values, made before a command starts its work.

Every check raises :class:`UsageError` naming the option, so that ``cli.main`` prints one line
and exits 1: numbers that are not finite or out of range, topic names ROS would refuse, and
output paths that cannot be written or would land on an input (or on another output).
"""

import math
import os
from pathlib import Path

# The player's and recorder's node names: a relative topic name expands in the root namespace.
_NAMESPACE = '/'


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


def topic_name(name: str, option: str) -> str:
    """Return ``name`` if ROS accepts it as a topic name (relative ones in the root namespace)."""
    from rclpy.exceptions import InvalidTopicNameException
    from rclpy.expand_topic_name import expand_topic_name
    from rclpy.validate_full_topic_name import validate_full_topic_name
    try:
        validate_full_topic_name(expand_topic_name(name, 'jax_perception', _NAMESPACE))
    except (InvalidTopicNameException, ValueError) as exc:
        # rcl's text: "topic name 'x' is invalid: <reason>, at <source file>:<line>"
        reason = str(exc).splitlines()[0].split(' is invalid: ', 1)[-1].split(', at /')[0]
        raise UsageError(f'{option} {name!r}: not a valid ROS topic name ({reason})') from None
    return name


def check_writable(path: str, option: str, folder: bool) -> None:
    """
    Fail before a long run when ``path`` (a file, or with ``folder`` a folder) cannot be made.

    Missing folders on the way are created later; the nearest existing one must be a folder
    this user may write in. (Root may write anywhere: writes are checked again when done.)
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


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def outputs_apart(inputs: list[str], outputs: dict[str, str | None]) -> None:
    """
    Refuse an output (option -> path; None: not given) on an input or on another output.

    "On" means the same path, inside it, or around it: a replay's JSON written over the bag
    it reads, or pictures written into its own output bag, are lost work either way. Links
    are followed, so another name for the same file is caught too.
    """
    given = [(option, Path(path).resolve()) for option, path in outputs.items() if path]
    for option, out in given:
        for src in inputs:
            if _overlap(out, Path(src).resolve()):
                raise UsageError(f'{option} {outputs[option]}: would write over the input '
                                 f'{src}')
    for i, (option, out) in enumerate(given):
        for other, path in given[i + 1:]:
            if _overlap(out, path):
                raise UsageError(f'{option} {outputs[option]} and {other} {outputs[other]}: '
                                 f'one would write over the other')
