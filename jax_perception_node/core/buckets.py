"""Fixed-shape host buffers: each cloud is decoded or padded into the smallest bucket for it."""

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .staging import DoubleBuffer
from ..sensors.cloud import (CloudFormatError, keep_rows, MAX_POINT_TIME_S, read_points,
                             read_times, returns, times_near_stamp)


def _shares(sizes: list[int], bucket: int) -> list[int]:
    """
    Split ``bucket`` rows between clouds of ``sizes`` returns in proportion, filling it.

    Largest remainders: each cloud's exact share rounded down, then the rows left one each to
    the clouds with the largest fractions (ties in the configured order), so the bucket is
    full and a small cloud whose fraction is large keeps its row.
    """
    n = sum(sizes)
    exact = [size * bucket for size in sizes]           # each share times n, in integers
    shares = [e // n for e in exact]
    by_fraction = sorted(range(len(sizes)), key=lambda k: -(exact[k] % n))
    for k in by_fraction[:bucket - sum(shares)]:
        shares[k] += 1
    return shares


def _clean_times(times: np.ndarray) -> None:
    """Set a point's time that is no number or MAX_POINT_TIME_S or more away to 0, in place."""
    # Here, before a set adds its cloud's offset: after it, a bad time would move the point
    # by the offset (NaN + offset is still NaN), and a good one could reach the kernel's bound.
    times[~(np.abs(times) < MAX_POINT_TIME_S)] = 0.0


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
    # (a set: some cloud had its time field, or the clouds' stamps differ)
    # Several LiDARs (``decode_set``): the first row of each after the first, and per LiDAR
    # (rows kept, points in its cloud, has the intensity field, has the time field); () for one.
    starts: tuple[int, ...] = ()
    lidars: tuple[tuple[int, int, bool, bool], ...] = ()

    @property
    def per_lidar(self) -> tuple[tuple[int, int, bool, bool], ...]:
        """Return ``lidars``, or for one LiDAR its one (rows, points, intensity, timed)."""
        return self.lidars or ((self.count, self.num_points, self.intensity, self.timed),)


def _scale_intensity(points: np.ndarray, scale: float) -> None:
    """Multiply the intensity column of decoded rows float32[n, 4] by ``scale``, in place."""
    if scale != 1.0:
        points[:, 3] *= np.float32(scale)


class SetCloud(NamedTuple):
    """One LiDAR's cloud of a set, for ``BucketPadder.decode_set``."""

    msg: object                  # a sensor_msgs/PointCloud2
    intensity_field: str
    time: tuple[str, str, str] | None   # (field, unit, reference) or None: no field
    offset_s: float              # its stamp after the set's stamp (s), added to its times
    intensity_scale: float = 1.0   # its intensity is multiplied by this


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
               time: tuple[str, str, str] | None = None,
               intensity_scale: float = 1.0) -> PaddedCloud:
        """
        Decode a PointCloud2 straight into its bucket's next buffer (no array of its own).

        The intensity is the field named ``intensity_field`` times ``intensity_scale`` (a pass
        over the rows only where it is not 1); ``time``: (field, unit,
        reference) of the per-point times to read (``cloud.read_times``), None for none; a
        cloud whose times are not a sweep's (``cloud.times_near_stamp``) is not timed.
        Raises CloudFormatError (``cloud.read_points``) before any buffer is touched.
        """
        rows = returns(msg, intensity_field)
        if time is not None:
            read_times(msg, *time)          # checks the time field's layout, writes nothing
        n = int(msg.height) * int(msg.width) if rows is None else len(rows)
        bucket = self.bucket_for(n)
        buffer = self._buffers[bucket].swap()
        times = self._times[bucket].swap()
        read_points(msg, bucket, self.overflow_policy, out=buffer,
                    intensity_field=intensity_field, rows=rows)
        kept = min(n, bucket)
        timed = time is not None and read_times(
            msg, *time, max_points=bucket, policy=self.overflow_policy, out=times,
            rows=rows) and times_near_stamp(times[:kept])
        if timed:
            _clean_times(times[:kept])
        _scale_intensity(buffer[:kept], intensity_scale)
        return PaddedCloud(buffer, kept, bucket, n - kept, n,
                           any(f.name == intensity_field for f in msg.fields), times, timed)

    def decode_set(self, clouds: Sequence[SetCloud | None]
                   ) -> tuple[PaddedCloud, dict[int, CloudFormatError]]:
        """
        Decode several LiDARs' clouds one after another into one bucket's next buffers.

        ``clouds``: one per LiDAR in the configured order, None for a LiDAR missing from the
        set (it gets no rows). The bucket follows the total of their returns; above the
        largest bucket each cloud keeps its share (rows in proportion to its returns, the
        bucket filled: ``_shares``) by the overflow policy. Times: each cloud's per-point times
        (its time field, NaN or a second or more away set to 0; else 0) plus its ``offset_s``,
        so every point's time counts from the set's stamp. A cloud that cannot
        be decoded is left out like a missing one: the second value maps its index to the
        CloudFormatError, found before any buffer is touched.
        """
        clouds, rows, refused = list(clouds), [], {}
        for index, cloud in enumerate(clouds):
            try:
                rows.append(None if cloud is None else returns(cloud.msg, cloud.intensity_field))
                if cloud is not None and cloud.time is not None:
                    read_times(cloud.msg, *cloud.time)      # checks the time field's layout
            except CloudFormatError as exc:
                refused[index] = exc
                clouds[index] = None
                rows[index:] = [None]
        sizes = [0 if c is None else int(c.msg.height) * int(c.msg.width) if r is None
                 else len(r) for c, r in zip(clouds, rows)]
        n = sum(sizes)
        bucket = self.bucket_for(n)
        shares = sizes if n <= bucket else _shares(sizes, bucket)
        buffer, times = self._buffers[bucket].swap(), self._times[bucket].swap()
        start, starts, lidars = 0, [], []
        for cloud, selected, size, share in zip(clouds, rows, sizes, shares):
            starts.append(start)
            if cloud is None:
                lidars.append((0, 0, True, False))
                continue
            msg, end = cloud.msg, start + share
            read_points(msg, share, self.overflow_policy, out=buffer[start:],
                        intensity_field=cloud.intensity_field, rows=selected)
            _scale_intensity(buffer[start:end], cloud.intensity_scale)
            timed = cloud.time is not None and read_times(
                msg, *cloud.time, max_points=share, policy=self.overflow_policy,
                out=times[start:], rows=selected) and times_near_stamp(times[start:end])
            if not timed:
                times[start:end] = cloud.offset_s
            else:
                _clean_times(times[start:end])
                times[start:end] += cloud.offset_s
            lidars.append((share, size, any(f.name == cloud.intensity_field
                                            for f in msg.fields), timed))
            start = end
        # Times only matter when some cloud has them or the stamps differ.
        timed = any(s[3] for s in lidars) or any(c is not None and c.offset_s for c in clouds)
        return PaddedCloud(buffer, start, bucket, n - start, n, all(s[2] for s in lidars),
                           times, timed, tuple(starts[1:]), tuple(lidars)), refused

    def pad(self, points: np.ndarray, times: np.ndarray | None = None,
            intensity_scale: float = 1.0) -> PaddedCloud:
        """
        Copy ``points`` float32[N, 4] (and ``times`` float32[N], s) into the next buffers.

        The copied intensity is multiplied by ``intensity_scale``, as ``decode``'s is. Raises
        ValueError for ``times`` of another length, before any buffer is touched.
        """
        n = points.shape[0]
        if times is not None and times.shape != (n,):
            raise ValueError(f'times must be float32[{n}], one per point, got {times.shape}')
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
        _scale_intensity(buffer[:kept], intensity_scale)
        if times is not None:
            _clean_times(stamps[:kept])
        return PaddedCloud(buffer, kept, bucket, n - kept, n, True, stamps, times is not None)

    def read_by(self, padded: PaddedCloud, reader) -> None:
        """Note that ``reader`` (``block_until_ready()``) reads ``padded``'s buffers."""
        self._buffers[padded.bucket].read_by(reader, padded.buffer)
        self._times[padded.bucket].read_by(reader, padded.times)
