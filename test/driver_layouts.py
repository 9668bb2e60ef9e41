"""
The real LiDAR drivers' PointCloud2 layouts as test material, all carrying the same points.

The 17 layouts (``DRIVER_LAYOUTS``: field names, datatypes, offsets, point_step, organized or
not, the time's convention, each named with its driver) are written from the drivers' sources
in ``tools/bench/decode.py``, since the decode benchmark ships with the package and times the
same ones; they are packed there with NumPy structured arrays (padding bytes 0xA5) and built
into messages by the one builder, ``tools/cloud_messages.point_cloud``. Here: the points,
times and stamps the tests put in, the organized slot masks, and the messages of a flavour.
"""

from cloud_reference import ROSBAGS_TYPES
from jax_perception_node.tools.bench.decode import (driver_cloud, DRIVER_LAYOUTS, DriverLayout,
                                                    PLAIN)
from jax_perception_node.tools.cloud_messages import rclpy_types
import numpy as np

__all__ = ['DRIVER_LAYOUTS', 'DriverLayout', 'PLAIN', 'driver_message', 'layout_named',
           'no_return_slots', 'same_points', 'STAMP_NS']

# A stamp of 2023 with every nanosecond digit set: float32 or a float64 of seconds or
# nanoseconds since the epoch cannot hold it whole.
STAMP_NS = 1_700_000_000_123_456_789
SWEEP_NS = 100_000_000      # a 10 Hz sweep: the points' times lie in [0, 100 ms)


def same_points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """
    Return the points every layout carries: float32[n, 4] and their times, int64[n] ns.

    x, y, z float32 (any layout's float type holds them exactly); the intensity whole
    numbers 0..255 (a uint8 field holds them); times in [0, 100 ms) after the stamp, in ns.
    """
    rng = np.random.default_rng(seed)
    points = np.empty((n, 4), np.float32)
    points[:, :3] = rng.normal(0.0, 30.0, (n, 3))
    points[:, 3] = rng.integers(0, 256, n)
    return points, rng.integers(0, SWEEP_NS, n)


def no_return_slots(slots: int, share: float, seed: int) -> np.ndarray:
    """bool[slots]: True where a slot holds a return; ``share`` of them (rounded) hold none."""
    rng = np.random.default_rng(seed)
    valid = np.ones(slots, bool)
    valid[rng.choice(slots, round(slots * share), replace=False)] = False
    return valid


def layout_named(name: str) -> DriverLayout:
    """Return the driver layout called ``name``."""
    layout, = (layout for layout in (PLAIN,) + DRIVER_LAYOUTS if layout.name == name)
    return layout


def driver_message(layout: DriverLayout, points: np.ndarray, times_ns: np.ndarray | None = None,
                   flavour: str = 'rosbags', valid: np.ndarray | None = None, height: int = 1,
                   stamp_ns: int = STAMP_NS):
    """
    Return ``points`` (and their times) in ``layout`` as a rosbags or rclpy PointCloud2.

    ``valid`` (organized clouds): the slots holding the points, in row-major order, over
    ``height`` rows; the other slots are no-returns (NaN x, y, z).
    """
    types = rclpy_types() if flavour == 'rclpy' else ROSBAGS_TYPES
    return driver_cloud(types, layout, points, times_ns, stamp_ns, valid, height)
