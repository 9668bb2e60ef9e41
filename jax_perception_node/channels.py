"""The names of the BEV channels (README "BEV channels"); no JAX, so config and tools use them."""

LIDAR_CHANNELS = ('occupancy', 'density', 'z_max', 'z_mean', 'z_min', 'intensity_mean')
TIME_LAG_CHANNEL = 'time_lag_mean'    # after intensity_mean when num_sweeps > 1
COVERAGE_CHANNEL = 'coverage'         # the last channel: 1 where a camera sample is valid


def lidar_channels(num_sweeps: int = 1) -> tuple[str, ...]:
    """Names of the LiDAR block: ``LIDAR_CHANNELS``, then ``time_lag_mean`` when accumulating."""
    return LIDAR_CHANNELS + ((TIME_LAG_CHANNEL,) if num_sweeps > 1 else ())
