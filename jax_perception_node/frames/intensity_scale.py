"""
Whether a LiDAR's intensities read on the scale the head was trained on (issue 29, 30).

Drivers report the intensity on scales up to 250x apart (0-255 reflectivity, an Ouster's signal
in photons, a simulator's 0-1), and a head trained on one scale loses objects on another:
the reference head, trained on 0-255, lost 0.03-0.04 mAP on the OS1-128's 8x signal, 0.20 with
no intensity at all (docs/users.md, "Real drivers' clouds"). ``lidar.intensity_scale`` fixes
it; this check tells the user to set it. No ROS import.

A head declares the top of the scale it was trained on (``HeadSpec.intensity_top``, 255 for
the reference head). A cloud is off that scale when the 99th percentile of its intensities (as
scaled, ``lidar.intensity_scale`` applied) is above twice the top, which no sensor on that
scale reaches, or below 1/64 of it, which no real scene on it stays under. The percentile is
taken on at most ``SAMPLE`` evenly strided rows of the decoded bucket, so the check costs about
20 microseconds a frame. The suggested scale brings the percentile to half the top, where the
training drives have it (the sample drive's 0-255 LiDARs: 100-137 over a drive).
"""

from dataclasses import dataclass

import numpy as np

from ..core.buckets import PaddedCloud
from ..settings.channels import MAX_ABS_INPUT
from ..settings.lidars import LidarConfig

SAMPLE = 2048           # rows of a cloud the percentile is taken on, evenly strided
MIN_SAMPLE = 64         # fewer finite intensities than this: not judged
HIGH, LOW = 2.0, 1.0 / 64.0   # off the scale: the 99th percentile above / below top times this


@dataclass(frozen=True)
class OffScale:
    """A LiDAR whose cloud read off the head's intensity scale, and what to set."""

    key: str                # its parameters' prefix: lidar, or lidars.<name>
    p99: float              # the 99th percentile of the cloud's intensities, as scaled
    suggested: float        # the lidar.intensity_scale that brings it to half the top (0: none)

    def advice(self) -> str:
        """Return what to do, naming the parameter."""
        if self.suggested == 0.0:
            return (f'99 % of them are 0 or below: check that {self.key}.intensity_field names '
                    'the field that carries the intensity')
        return (f'99 % of them under {self.p99:.4g}: set {self.key}.intensity_scale to about '
                f"{self.suggested:g} (0.125 for an Ouster's signal, 255 for a 0-1 simulator)")


def off_scale(intensity: np.ndarray, top: float) -> float | None:
    """
    Return the 99th percentile of ``intensity`` when it is off the scale 0..``top``, else None.

    ``intensity``: float32[n], one cloud's decoded intensities (a strided view will do); judged
    on at most ``SAMPLE`` evenly strided values, those the kernel keeps (finite, within
    +-``MAX_ABS_INPUT``); not judged (None) with fewer than ``MIN_SAMPLE`` of them.
    """
    stride = max(1, -(-len(intensity) // SAMPLE))      # ceil: at most SAMPLE values
    sample = np.ascontiguousarray(intensity[::stride])
    # A point the kernel drops for its intensity (NaN, beyond +-1e12) is not judged either.
    valid = np.abs(sample) <= MAX_ABS_INPUT
    count = np.count_nonzero(valid)
    if count < MIN_SAMPLE:
        return None
    # Counted, not sorted, frame by frame (a percentile took 0.1 ms).
    share = 0.01 * count
    if (np.count_nonzero(valid & (sample > HIGH * top)) <= share
            and np.count_nonzero(valid & (sample >= LOW * top)) >= share):
        return None
    return float(np.percentile(sample[valid], 99.0))


def suggested_scale(scale: float, p99: float, top: float) -> float:
    """
    Return the intensity scale that moves ``p99`` (read at ``scale``) to half of ``top``.

    Two significant digits, within the parameter's bounds; 0 when ``p99`` is not positive
    (99 % of the intensities 0 or below: no scale brings them back).
    """
    if p99 <= 0.0:
        return 0.0
    return float(f'{min(max(scale * 0.5 * top / p99, 1e-6), 1e6):.2g}')


def cloud_off_scale(lidars: tuple[LidarConfig, ...], padded: PaddedCloud,
                    top: float) -> OffScale | None:
    """
    Return the first of ``lidars`` whose rows in ``padded`` read off the scale 0..``top``.

    One LiDAR's rows are ``padded.buffer[:count]``; several LiDARs' follow one another
    (``padded.starts``, ``padded.lidars``). A cloud without its intensity field (read as 0,
    warned on its own) is not judged; ``top`` 0 judges nothing.
    """
    if top <= 0.0:
        return None
    starts = (0,) + padded.starts
    for lidar, start, (count, _, intensity, _) in zip(lidars, starts, padded.per_lidar):
        if intensity and count:
            p99 = off_scale(padded.buffer[start:start + count, 3], top)
            if p99 is not None:
                return OffScale(lidar.key, p99, suggested_scale(lidar.intensity_scale, p99,
                                                                top))
    return None
