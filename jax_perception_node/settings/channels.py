"""The BEV channels' names (docs/users.md, "BEV channels") and density table; no JAX."""

import math

import numpy as np

LIDAR_CHANNELS = ('occupancy', 'density', 'z_max', 'z_mean', 'z_min', 'intensity_mean')
TIME_LAG_CHANNEL = 'time_lag_mean'    # after intensity_mean when num_sweeps > 1
COVERAGE_CHANNEL = 'coverage'         # the last channel: 1 where a camera sample is valid


DENSITY_SATURATES = 64   # the density min(1, log1p(n) / log(64)) is 1 from n = 63 on

# A LiDAR intensity or a camera feature value beyond +-1e12 is invalid, like NaN: no sensor
# reports one, and a cell's sums of such values stay far below float32's 3.4e38 (two points
# of intensity 3e38 in one cell summed to inf). Points are dropped, feature values zeroed.
MAX_ABS_INPUT = 1e12


def density_table() -> np.ndarray:
    """
    Return the density of every count 0..``DENSITY_SATURATES``, float32[65].

    NumPy's float32 ``log1p(n) / log(64)``, capped at 1, as the NumPy peer computes it per
    cell: the kernels and the Numba peer read it by the integer count (clamped to the last
    entry), so their densities equal the NumPy peer's bit for bit.
    """
    counts = np.arange(DENSITY_SATURATES + 1, dtype=np.float32)
    return np.minimum(np.float32(1.0), np.log1p(counts) / np.float32(math.log(64.0)))


def lidar_channels(num_sweeps: int = 1) -> tuple[str, ...]:
    """Names of the LiDAR block: ``LIDAR_CHANNELS``, then ``time_lag_mean`` when accumulating."""
    return LIDAR_CHANNELS + ((TIME_LAG_CHANNEL,) if num_sweeps > 1 else ())


def projected_channels(count: int) -> tuple[str, ...]:
    """Names of the channels of a fusion projection's output: ``feature_0`` ... (GridMap's)."""
    return tuple(f'feature_{k}' for k in range(count))
