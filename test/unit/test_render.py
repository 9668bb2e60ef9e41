"""The BEV picture against a cell-by-cell reference: heights coloured, coverage grey."""

from jax_perception_node.outputs.render import bev_to_rgb, RAMP
import numpy as np
import pytest


def reference_rgb(features: np.ndarray, z_min: float, z_max: float) -> np.ndarray:
    """One cell at a time: occupied -> the ramp at z_max; else covered -> grey 48; else black."""
    rows, cols = features.shape[:2]
    out = np.zeros((rows, cols, 3), np.uint8)
    for i in range(rows):
        for j in range(cols):
            pixel = out[rows - 1 - i, cols - 1 - j]     # +x up, +y on the left
            if features[i, j, 0] > 0:
                t = (float(features[i, j, 2]) - z_min) / max(z_max - z_min, 1e-6)
                t = min(max(t, 0.0), 1.0) * (len(RAMP) - 1)
                k = min(int(t), len(RAMP) - 2)
                pixel[:] = RAMP[k] * (1.0 - (t - k)) + RAMP[k + 1] * (t - k)
            elif features[i, j, -1] > 0:
                pixel[:] = 48
    return out


@pytest.mark.parametrize('seed', range(4))
def test_the_picture_is_the_cell_by_cell_reference(seed):
    rng = np.random.default_rng(seed)
    rows, cols, channels = rng.integers(1, 40), rng.integers(1, 40), rng.integers(7, 16)
    features = rng.normal(0.0, 2.0, (rows, cols, channels)).astype(np.float32)
    features[..., 0] = rng.random((rows, cols)) < 0.3           # occupancy
    features[..., -1] = rng.random((rows, cols)) < 0.5          # camera coverage
    z_min, z_max = (-2.0, 2.0) if seed < 3 else (1.0, 1.0)      # a flat z range as well
    rgb = bev_to_rgb(features, z_min, z_max)
    want = reference_rgb(features, z_min, z_max)
    assert rgb.dtype == np.uint8 and rgb.shape == (rows, cols, 3) and rgb.flags.c_contiguous
    np.testing.assert_array_equal(rgb.any(axis=2), want.any(axis=2))
    # float32 heights against the reference's float64: a channel may truncate one lower.
    assert np.abs(rgb.astype(int) - want).max() <= 1
