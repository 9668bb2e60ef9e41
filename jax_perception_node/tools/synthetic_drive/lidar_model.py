"""The spinning LiDAR of the synthetic drive: beam layout, range, noise and return statistics."""

from dataclasses import dataclass, replace
import math

import numpy as np

MAX_BEAMS, MAX_AZIMUTH_STEPS = 256, 16384
MAX_RANGE_NOISE_M = 1.0     # m: a real sensor's is a few cm


@dataclass(frozen=True)
class LidarModel:
    """
    A spinning multi-beam LiDAR: beam layout, range limits, noise and return statistics.

    Beams are evenly spaced in elevation (deg above the LiDAR's xy plane) from
    ``min_elevation_deg`` to ``max_elevation_deg``, or, with ``elevations_deg``, at the angles of
    that table (a real sensor's published vertical angles, strictly ascending, ``beams`` of them,
    whose ends are the min and max; :meth:`from_table` fills those in); ring 0 is the lowest.
    Each revolution fires ``azimuth_steps`` columns, counter-clockwise seen from above, starting
    behind the sensor (azimuth -180 deg, column c at -180 + 360 (c + 0.5) / azimuth_steps deg)
    at ``rotation_hz``: column c fires c / (azimuth_steps * rotation_hz) s after the stamp.
    A ray returns its nearest hit in [min_range_m, max_range_m], with Gaussian range noise
    (std ``range_noise_m``, m). The return is detected with probability
    (1 - dropout) / (1 + (P_ref / P)^2), where P = rho cos(incidence) / r^2 is the received power
    and P_ref = 0.1 / detection_range_m^2: a 10 % reflective target seen head-on at
    ``detection_range_m`` is detected about half the time. Seen from 1.8 m, dark asphalt fades
    out beyond ~13 m and grass beyond ~18 m, while walls return out to 60-80 m.
    Intensity is 0..255 ``intensity_scale``: 255 rho (0.5 + 0.5 cos(incidence)) plus a little
    noise, times the scale (1 for the 0-255 reflectivity most drivers publish).
    """

    beams: int = 64
    azimuth_steps: int = 2048
    min_elevation_deg: float = -15.0
    max_elevation_deg: float = 15.0
    min_range_m: float = 1.0
    max_range_m: float = 100.0
    range_noise_m: float = 0.02
    dropout: float = 0.02
    detection_range_m: float = 40.0
    rotation_hz: float = 10.0
    elevations_deg: tuple[float, ...] | None = None
    intensity_scale: float = 1.0

    @classmethod
    def from_table(cls, elevations_deg, **fields) -> 'LidarModel':
        """Build the model whose beams sit at ``elevations_deg`` (deg, ascending), and fields."""
        table = tuple(float(e) for e in elevations_deg)
        if not table:
            raise ValueError('LidarModel: elevations_deg needs at least one angle')
        return cls(beams=len(table), min_elevation_deg=table[0], max_elevation_deg=table[-1],
                   elevations_deg=table, **fields)

    def __post_init__(self):
        """Reject layouts and statistics that cannot describe a sensor."""
        # Beyond any sensor sold (128 beams, 4096 columns), and a sweep's arrays stay small.
        if not (1 <= self.beams <= MAX_BEAMS and 8 <= self.azimuth_steps <= MAX_AZIMUTH_STEPS):
            raise ValueError(f'LidarModel: need beams in 1..{MAX_BEAMS} and azimuth_steps in '
                             f'8..{MAX_AZIMUTH_STEPS}, got {self.beams} and '
                             f'{self.azimuth_steps}')
        if not -90.0 < self.min_elevation_deg <= self.max_elevation_deg < 90.0:
            raise ValueError('LidarModel: need -90 < min_elevation_deg <= max_elevation_deg < 90')
        if not 0.0 <= self.min_range_m < self.max_range_m:
            raise ValueError('LidarModel: need 0 <= min_range_m < max_range_m')
        # Written so that NaN fails: it compares False with every bound.
        if not (0.0 <= self.range_noise_m <= MAX_RANGE_NOISE_M and 0.0 <= self.dropout < 1.0):
            raise ValueError(f'LidarModel: need 0 <= range_noise_m <= {MAX_RANGE_NOISE_M:g} and '
                             '0 <= dropout < 1')
        if self.detection_range_m <= 0 or self.rotation_hz <= 0:
            raise ValueError('LidarModel: detection_range_m and rotation_hz must be > 0')
        if not 0.0 < self.intensity_scale < math.inf:
            raise ValueError(f'LidarModel: intensity_scale must be > 0, got '
                             f'{self.intensity_scale}')
        if self.elevations_deg is not None:
            self._check_table()

    def _check_table(self):
        table = tuple(float(e) for e in self.elevations_deg)
        # A frozen dataclass: store the table as a hashable tuple of floats, however given.
        object.__setattr__(self, 'elevations_deg', table)
        if len(table) != self.beams:
            raise ValueError(f'LidarModel: elevations_deg has {len(table)} angles for '
                             f'{self.beams} beams')
        if not all(a < b for a, b in zip(table, table[1:])):
            raise ValueError('LidarModel: elevations_deg must be strictly ascending (ring 0 '
                             'the lowest)')
        if (table[0], table[-1]) != (self.min_elevation_deg, self.max_elevation_deg):
            raise ValueError(f'LidarModel: min_elevation_deg and max_elevation_deg must be the '
                             f"table's ends, {table[0]:g} and {table[-1]:g} "
                             f'(LidarModel.from_table sets them)')

    def elevations(self) -> np.ndarray:
        """Elevation of every beam (rad), shape (beams,), ascending: index = ring."""
        if self.elevations_deg is not None:
            return np.radians(np.array(self.elevations_deg, dtype=float))
        return np.radians(np.linspace(self.min_elevation_deg, self.max_elevation_deg,
                                      self.beams))

    def azimuths(self) -> np.ndarray:
        """Azimuth of every column (rad, LiDAR frame), shape (azimuth_steps,), in firing order."""
        return -math.pi + 2.0 * math.pi * (np.arange(self.azimuth_steps) + 0.5) \
            / self.azimuth_steps

    def uniform(self, beams: int) -> 'LidarModel':
        """Return this sensor with ``beams`` evenly spaced over its vertical field of view."""
        return replace(self, beams=beams, elevations_deg=None)
