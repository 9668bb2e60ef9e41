"""
The LiDARs of the node: one (``lidar.*``) or several (``lidars.names``, a block each).

Several LiDARs are processed together: their clouds of one moment (``frames/lidar_sets.py``)
go into one bucket, each transformed by its own pose in the same executable. How many there
are is static (it fixes the calibration vector's length); poses, fields and times are live.
"""

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .lidar_timing import LidarTiming, timing_at
from .parameters import ConfigError, is_camera_name
from ..geometry.rotations import Pose


@dataclass(frozen=True)
class LidarConfig:
    """
    One LiDAR: its name, frame, pose in the grid frame, intensity field and scale, point times.

    ``name`` is '' for the single LiDAR of ``lidar.*``; ``key`` is the parameter prefix that
    messages name (``lidar`` or ``lidars.<name>``).
    """

    name: str
    frame_id: str
    pose: Pose
    intensity_field: str = 'intensity'
    timing: LidarTiming = LidarTiming()
    intensity_scale: float = 1.0

    @property
    def key(self) -> str:
        """Return the parameter prefix of this LiDAR's keys."""
        return f'lidars.{self.name}' if self.name else 'lidar'


def block_names(group: str, names: list[str], taken: tuple[str, ...]) -> tuple[str, ...]:
    """
    Check ``<group>.names`` (cameras, lidars): unique, identifier-like, not a key of the group.

    ``taken``: the group's own keys. ConfigError naming the problem.
    """
    key = f'{group}.names'
    if len(set(names)) != len(names):
        raise ConfigError(f'{key}: duplicate names in {names}')
    for name in names:
        if not is_camera_name(name):
            raise ConfigError(f'{key}: "{name}" must be letters, digits and underscores, not a '
                              'digit first (a topic name token)')
        if name in taken:
            raise ConfigError(f'{key}: "{name}" is taken by the key {group}.{name}')
    return tuple(names)


def lidar_blocks(v: Mapping[str, Any], names: tuple[str, ...],
                 pose: Callable[[Mapping[str, Any], str], Pose]) -> tuple[LidarConfig, ...]:
    """
    Return the ``lidars.<name>`` blocks of checked values, in ``names`` order.

    ``pose(v, prefix)`` reads and checks a translation and rotation (config.py's). Each frame
    must be its own: two LiDARs in one frame could not be told apart by their clouds.
    """
    lidars = []
    for name in names:
        k = f'lidars.{name}.'
        field = v[k + 'intensity_field']
        if field in ('x', 'y', 'z'):
            raise ConfigError(f'{k}intensity_field: {field!r} is a coordinate, not an intensity')
        lidars.append(LidarConfig(
            name, v[k + 'frame_id'] or f'lidar_{name}', pose(v, k[:-1]), field,
            timing_at(v, k, v['lidar.deskew']), float(v[k + 'intensity_scale'])))
    frames = [lidar.frame_id.lstrip('/') for lidar in lidars]   # '/top' is 'top', as in tf2
    for index, lidar in enumerate(lidars):
        if frames[index] in frames[:index]:
            raise ConfigError(f'{lidar.key}.frame_id: "{lidar.frame_id}" is the frame of '
                              'another LiDAR too; each needs its own')
    return tuple(lidars)
