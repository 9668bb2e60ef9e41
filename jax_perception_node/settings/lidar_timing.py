"""
When each LiDAR point was measured, and whether the node moves it to the cloud's stamp.

All live: the field is a name the decoder reads and deskew a per-frame motion the kernel takes
as a traced value, so changing any of them compiles nothing.
"""

from dataclasses import dataclass
from typing import Any, Mapping

from .parameters import ConfigError


@dataclass(frozen=True)
class LidarTiming:
    """
    The per-point time of a LiDAR's cloud and the deskew switch.

    ``field``: the PointCloud2 field holding each point's time ('' for none), in ``unit``
    (s, ms, us, ns) counted from the header stamp (``reference`` 'stamp') or from the epoch
    ('absolute'). ``deskew``: move each point by the ego motion between its time and the stamp.
    """

    field: str = ''
    unit: str = 's'
    reference: str = 'stamp'
    deskew: bool = True

    @property
    def active(self) -> bool:
        """Return True when clouds are deskewed: on, and a time field named."""
        return self.deskew and bool(self.field)


def timing_at(v: Mapping[str, Any], prefix: str, deskew: bool) -> LidarTiming:
    """
    Return the ``<prefix>time_*`` settings ('lidar.' or 'lidars.<name>.') and ``deskew``.

    ConfigError for a coordinate named as the time field (every cloud would then be refused
    for a missing coordinate, naming the wrong cause).
    """
    field = v[prefix + 'time_field']
    if field in ('x', 'y', 'z'):
        raise ConfigError(f'{prefix}time_field: {field!r} is a coordinate, not a time')
    return LidarTiming(field, v[prefix + 'time_unit'], v[prefix + 'time_reference'], deskew)


def lidar_timing(v: Mapping[str, Any]) -> LidarTiming:
    """Return the ``lidar.time_*`` and ``lidar.deskew`` settings of checked parameter values."""
    return timing_at(v, 'lidar.', v['lidar.deskew'])
