"""Per-frame latency records and rolling percentile statistics."""

from collections import deque
from typing import Iterable, Mapping

import numpy as np

# Keys of one frame's record, in the order they are published on ~/debug/latency.
# head_ms: the head's executable after the BEV is ready, fetching its K boxes and keeping those
# above threshold (compute_ms is the BEV's alone); objects: boxes published (0 without a head).
FRAME_KEYS = ('num_points', 'bucket', 'overflow_points', 'decode_ms', 'pad_ms', 'compute_ms',
              'head_ms', 'publish_ms', 'total_ms', 'age_ms', 'cameras_used', 'objects',
              'compiles_after_warmup')
STAGES = ('decode_ms', 'pad_ms', 'compute_ms', 'head_ms', 'publish_ms', 'total_ms', 'age_ms')


def percentiles(values: Iterable[float]) -> dict[str, float]:
    """p50 / p95 / p99 / max of ``values`` (all 0.0 when empty), rounded to microseconds."""
    data = np.asarray(list(values), np.float64)
    if data.size == 0:
        return {'p50': 0.0, 'p95': 0.0, 'p99': 0.0, 'max': 0.0}
    p50, p95, p99 = np.percentile(data, [50, 95, 99])
    return {'p50': round(float(p50), 3), 'p95': round(float(p95), 3),
            'p99': round(float(p99), 3), 'max': round(float(data.max()), 3)}


def format_value(value: float | int) -> str:
    """Render a record value as the decimal string published in DiagnosticStatus values."""
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f'{float(value):.3f}'


class LatencyWindow:
    """
    The last ``size`` frame records, for rolled-up percentiles, and the frames of a recent time.

    ``stats`` covers the last ``size`` records (the published rolling statistics);
    ``recent_total`` covers the total_ms of the frames added within the last ``seconds``
    (monotonic time), which the latency budget rule judges: an outlier (warm-up, new
    calibration) leaves it ``seconds`` after its frame however many frames the count window
    holds. ``seconds`` may be changed (live parameter); it applies from the next call. Only
    (time, total_ms) pairs are kept for it: an hour (the parameter's maximum) at 20 Hz is
    72 000 pairs, not 72 000 records.
    """

    def __init__(self, size: int, seconds: float):
        """Keep ``size`` records for ``stats``, ``seconds`` of total_ms for ``recent_total``."""
        self.seconds = seconds
        self._records: deque[Mapping[str, float]] = deque(maxlen=size)
        # (monotonic time added, total_ms), oldest first; bounded by the frame rate x seconds.
        self._timed: deque[tuple[float, float]] = deque()

    def add(self, record: Mapping[str, float], now: float) -> None:
        """Append one frame's record (keys from FRAME_KEYS), done at monotonic time ``now``."""
        self._records.append(record)
        if 'total_ms' in record:
            self._timed.append((now, record['total_ms']))
        self._forget(now)

    def stats(self, key: str) -> dict[str, float]:
        """Percentiles of ``key`` over the last ``size`` records."""
        return percentiles(r[key] for r in self._records if key in r)

    def recent_total(self, now: float) -> dict[str, float]:
        """Percentiles of total_ms over the frames added in (now - seconds, now]; 0 when none."""
        self._forget(now)
        return percentiles(total for _, total in self._timed)

    def _forget(self, now: float) -> None:
        """Drop the records older than ``seconds`` before ``now``."""
        while self._timed and self._timed[0][0] <= now - self.seconds:
            self._timed.popleft()
