"""
When each LiDAR point was measured, and whether the node moves it to the cloud's stamp.

All live: the field is a name the decoder reads and deskew a per-frame motion the kernel takes
as a traced value, so changing any of them compiles nothing.
"""

from dataclasses import dataclass
from typing import Any, Mapping


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


def lidar_timing(v: Mapping[str, Any]) -> LidarTiming:
    """Return the ``lidar.time_*`` and ``lidar.deskew`` settings of checked parameter values."""
    return LidarTiming(v['lidar.time_field'], v['lidar.time_unit'], v['lidar.time_reference'],
                       v['lidar.deskew'])
