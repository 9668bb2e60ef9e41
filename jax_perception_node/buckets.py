"""Fixed-shape host buffers: every cloud is padded into the smallest bucket that fits it."""

from dataclasses import dataclass

import numpy as np

from .cloud import keep_rows


@dataclass(frozen=True)
class PaddedCloud:
    """A cloud copied into a bucket buffer; rows >= ``count`` are stale padding (masked)."""

    buffer: np.ndarray     # float32[bucket, 4], owned by the padder and reused next frame
    count: int             # real rows
    bucket: int            # capacity of the buffer
    overflow: int          # points dropped by the overflow policy


class BucketPadder:
    """
    Pads (N, 4) float32 clouds into preallocated per-bucket buffers, without allocating.

    Sizes are static: each is one compiled executable. A cloud above the largest bucket is cut
    to it by the overflow policy ('subsample': even stride over the whole cloud; 'truncate':
    the first rows) and the dropped-point count is reported. Padding rows are not cleared: the
    kernel masks every row at or past ``count``.
    """

    def __init__(self, sizes: tuple[int, ...], overflow_policy: str = 'subsample'):
        self.sizes = tuple(sorted(sizes))
        self.overflow_policy = overflow_policy
        self._buffers = {size: np.zeros((size, 4), np.float32) for size in self.sizes}

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

    def pad(self, points: np.ndarray) -> PaddedCloud:
        """Copy ``points`` float32[N, 4] into its bucket's buffer."""
        n = points.shape[0]
        bucket = self.bucket_for(n)
        buffer = self._buffers[bucket]
        if n > bucket:
            rows = keep_rows(n, bucket, self.overflow_policy)
            if isinstance(rows, slice):
                buffer[:] = points[rows]
            else:
                np.take(points, rows, axis=0, out=buffer)
            return PaddedCloud(buffer, bucket, bucket, n - bucket)
        buffer[:n] = points
        return PaddedCloud(buffer, n, bucket, 0)
