"""Fixed-shape host buffers: each cloud is decoded or padded into the smallest bucket for it."""

from dataclasses import dataclass

import numpy as np

from .staging import DoubleBuffer
from ..sensors.cloud import keep_rows, read_points, read_times, returns


@dataclass(frozen=True)
class PaddedCloud:
    """A cloud in a bucket buffer; rows >= ``count`` are stale padding (masked)."""

    buffer: np.ndarray     # float32[bucket, 4], 64-byte aligned, owned by the padder
    count: int             # real rows
    bucket: int            # capacity of the buffer
    overflow: int          # points dropped by the overflow policy
    num_points: int        # points in the input cloud (returns: no-return slots left out)
    intensity: bool = True  # the cloud had the intensity field (else intensity reads 0)
    times: np.ndarray | None = None   # float32[bucket] s after the stamp, rows as ``buffer``
    timed: bool = False     # ``times`` holds this cloud's per-point times (else stale: unused)


class BucketPadder:
    """
    Decodes PointCloud2 messages, or pads (N, 4) float32 clouds, into per-bucket host buffers.

    Sizes are static: each is one compiled executable. A decoded cloud's bucket is chosen on
    its returns: the no-return (NaN) slots of an organized or non-dense cloud never take a
    row. A cloud above the largest bucket is cut to it by the overflow policy ('subsample':
    even stride over the whole cloud; 'truncate': the first rows) and the dropped-point count
    is reported. Padding rows are not cleared: the kernel masks every row at or past ``count``.

    Each bucket has two 64-byte aligned buffers (``staging.DoubleBuffer``) used in turn, so the
    CPU backend aliases them (the executable reads the buffer itself) and the next frame never
    rewrites the buffer of one in flight: the caller says who reads a buffer with ``read_by``.
    Beside each, a float32[bucket] buffer of per-point times (s after the stamp, for deskew),
    written only when the cloud has the time field asked for.
    """

    def __init__(self, sizes: tuple[int, ...], overflow_policy: str = 'subsample'):
        self.sizes = tuple(sorted(sizes))
        self.overflow_policy = overflow_policy
        self._buffers = {size: DoubleBuffer((size, 4)) for size in self.sizes}
        self._times = {size: DoubleBuffer((size,)) for size in self.sizes}

    @property
    def capacity(self) -> int:
        """Return the largest bucket: no frame computes on more points."""
        return self.sizes[-1]

    def bucket_for(self, num_points: int) -> int:
        """Smallest bucket holding ``num_points`` (the largest one when none does)."""
        for size in self.sizes:
            if num_points <= size:
                return size
        return self.capacity

    def decode(self, msg, intensity_field: str = 'intensity',
               time: tuple[str, str, str] | None = None) -> PaddedCloud:
        """
        Decode a PointCloud2 straight into its bucket's next buffer (no array of its own).

        The intensity is the field named ``intensity_field``; ``time``: (field, unit,
        reference) of the per-point times to read (``cloud.read_times``), None for none.
        Raises CloudFormatError (``cloud.read_points``) before any buffer is touched.
        """
        rows = returns(msg, intensity_field)
        n = int(msg.height) * int(msg.width) if rows is None else len(rows)
        bucket = self.bucket_for(n)
        buffer = self._buffers[bucket].swap()
        times = self._times[bucket].swap()
        read_points(msg, bucket, self.overflow_policy, out=buffer,
                    intensity_field=intensity_field, rows=rows)
        timed = time is not None and read_times(
            msg, *time, max_points=bucket, policy=self.overflow_policy, out=times, rows=rows)
        kept = min(n, bucket)
        return PaddedCloud(buffer, kept, bucket, n - kept, n,
                           any(f.name == intensity_field for f in msg.fields), times, timed)

    def pad(self, points: np.ndarray, times: np.ndarray | None = None) -> PaddedCloud:
        """Copy ``points`` float32[N, 4] (and ``times`` float32[N], s) into the next buffers."""
        n = points.shape[0]
        bucket = self.bucket_for(n)
        buffer, stamps = self._buffers[bucket].swap(), self._times[bucket].swap()
        kept = min(n, bucket)
        rows = keep_rows(n, bucket, self.overflow_policy) if n > bucket else slice(0, n)
        for source, target in ((points, buffer), (times, stamps)):
            if source is None:
                continue
            if isinstance(rows, slice):
                target[:kept] = source[rows]
            else:
                np.take(source, rows, axis=0, out=target)
        return PaddedCloud(buffer, kept, bucket, n - kept, n, True, stamps, times is not None)

    def read_by(self, padded: PaddedCloud, reader) -> None:
        """Note that ``reader`` (``block_until_ready()``) reads ``padded``'s buffers."""
        self._buffers[padded.bucket].read_by(reader, padded.buffer)
        self._times[padded.bucket].read_by(reader, padded.times)
