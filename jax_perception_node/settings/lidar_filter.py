"""
What the node keeps of a LiDAR's cloud: its intensity and its scale, a range band, the ego body.

All live: the crop is part of the frame's calibration vector (traced), and the intensity
field and scale are what the decoder reads and multiplies, so changing any of them compiles
nothing.
"""

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .parameters import ConfigError

# The intensity field of common drivers, for the docs and the WARN of a cloud without it.
INTENSITY_FIELDS = {
    'intensity': 'Velodyne, Hesai, RoboSense, Livox, Ouster original, Autoware PointXYZIRC',
    'signal': 'Ouster native (LEGACY)',
    'reflectivity': 'Ouster native (RNG15_RFL8_NIR8 and others)',
    'i': 'some PCL-based drivers',
}


@dataclass(frozen=True)
class LidarFilter:
    """
    The LiDAR points the kernels keep, besides the grid's own bounds.

    ``min_range_m`` <= |p| <= ``max_range_m`` (m, in the LiDAR frame: its origin to the point),
    and outside ``ego_box`` (x_min, x_max, y_min, y_max, z_min, z_max, m, in the grid frame:
    the vehicle's own body; all zero for none). ``intensity_field``: the PointCloud2 field read
    as the intensity, multiplied by ``intensity_scale``.
    """

    intensity_field: str = 'intensity'
    intensity_scale: float = 1.0
    min_range_m: float = 0.0
    max_range_m: float = 1e4
    ego_box: tuple[float, ...] = (0.0,) * 6

    def vector(self) -> np.ndarray:
        """float32[8]: min range, max range, then the ego box; the kernels' ``crop``."""
        return np.array([self.min_range_m, self.max_range_m, *self.ego_box], np.float32)


def lidar_filter(v: Mapping[str, Any]) -> LidarFilter:
    """Return the ``lidar.*`` filter of checked parameter values; ConfigError naming a key."""
    field = v['lidar.intensity_field']
    if field in ('x', 'y', 'z'):
        raise ConfigError(f'lidar.intensity_field: {field!r} is a coordinate, not an intensity')
    near, far = v['lidar.min_range_m'], v['lidar.max_range_m']
    if near >= far:
        raise ConfigError(f'lidar.max_range_m: must be greater than lidar.min_range_m '
                          f'({far:g} <= {near:g})')
    box = tuple(float(b) for b in v['lidar.ego_box'])
    for axis, (lo, hi) in zip('xyz', (box[0:2], box[2:4], box[4:6])):
        if lo > hi:
            raise ConfigError(f'lidar.ego_box: {axis}_min {lo:g} is above {axis}_max {hi:g} '
                              '(the box is x_min, x_max, y_min, y_max, z_min, z_max)')
    return LidarFilter(field, float(v['lidar.intensity_scale']), float(near), float(far), box)
