"""
What the fleet's modules share: its error, a bag's outcome and progress, an attempt's folder.

A leaf: ``fleet`` (the entry point), ``fleet_driver`` (the scheduling loop) and the CLI import
it; it imports nothing of theirs, so the fleet's imports point one way.
"""

from dataclasses import dataclass, field
from pathlib import Path
import shutil
import uuid


class FleetError(Exception):
    """A fleet replay cannot run as asked (inputs, output folder, Ray); the message says why."""


def first_line(exc: BaseException) -> str:
    """First line of an exception's message (Ray's run to many lines)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


@dataclass
class BagOutcome:
    """One input bag: where it goes, how many tries, and what came back."""

    bag: Path
    output: Path
    frames_expected: int
    attempts: int = 0
    worker: str | None = None
    error: str | None = None
    summary: dict | None = None
    seconds: float = 0.0
    cpu_s: float = 0.0
    partial: Path | None = None

    def report(self) -> dict:
        """JSON-ready entry of the summary's ``bags`` list."""
        entry = {'input': str(self.bag), 'output': None if self.error else str(self.output),
                 'worker': self.worker, 'attempts': self.attempts, 'error': self.error,
                 'seconds': self.seconds, 'cpu_s': self.cpu_s}
        entry.update(self.summary or {'frames': 0, 'rejected': 0, 'compiles_after_warmup': 0,
                                      'latency_ms': {}})
        return entry


@dataclass
class FleetProgress:
    """
    What the driver knows now; ``busy`` lists worker, pid, input, output, done, total.

    ``frames_done`` / ``frames_total`` count LiDAR clouds (one per frame with one LiDAR).
    """

    bags_done: int
    bags_total: int
    frames_done: int
    frames_total: int
    busy: list[dict] = field(default_factory=list)


def remove_partial(outcome: BagOutcome) -> None:
    """Remove the temporary folder of an attempt that did not finish."""
    if outcome.partial is not None:
        shutil.rmtree(outcome.partial, ignore_errors=True)
        outcome.partial = None


def new_partial(outcome: BagOutcome) -> Path:
    """Hidden temporary sibling of the output bag, unique per attempt."""
    outcome.partial = outcome.output.with_name(
        f'.{outcome.output.name}.partial-{uuid.uuid4().hex[:12]}')
    return outcome.partial
