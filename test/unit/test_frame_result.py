"""PendingFrame.result: the boxes it publishes are above the threshold and finite."""

import jax.numpy as jnp
from jax_perception_node.core.frame_result import PendingFrame
import numpy as np

STATS = {'num_points': 1, 'bucket': 64, 'overflow_points': 0, 'cameras_used': 0,
         'nonfinite_features': 0, 'compiles_after_warmup': 0, 'cameras_sent': False,
         'sweeps_used': 1}


def box(score: float, size: float = 4.5) -> list[float]:
    """Return a row of boxes.BOX_COLUMNS: x y z l w h yaw score class."""
    return [1.0, 2.0, 0.5, size, 1.8, 1.5, 0.3, score, 0.0]


def test_boxes_with_a_nonfinite_value_are_dropped_and_counted():
    # What a checkpoint whose numbers overflow decodes to: infinite sizes, NaN scores.
    rows = np.array([box(0.9), box(0.8, np.inf), box(np.nan), box(0.7, np.nan),
                     box(0.1, np.inf), box(0.6)], np.float32)
    pending = PendingFrame((jnp.zeros((4, 4, 3)), rows), (0.0, 0.0, 0.0), 0.3, None, dict(STATS))
    result = pending.result()
    np.testing.assert_array_equal(result.objects, rows[[0, 5]])
    # Counted: the two above the threshold and the NaN score; the one below it is no box.
    assert result.nonfinite_objects == 3


def test_finite_boxes_count_nothing():
    rows = np.array([box(0.9), box(0.2)], np.float32)
    result = PendingFrame((jnp.zeros((4, 4, 3)), rows), (0.0, 0.0, 0.0), 0.3, None,
                          dict(STATS)).result()
    np.testing.assert_array_equal(result.objects, rows[:1])
    assert result.nonfinite_objects == 0
