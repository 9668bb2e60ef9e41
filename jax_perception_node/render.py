"""BEV pictures for people: forward up, left on the left, heights coloured, coverage tinted."""

import numpy as np

# A compact perceptual ramp (dark blue -> teal -> yellow), interpolated per cell.
RAMP = np.array([[40, 30, 120], [30, 110, 160], [40, 170, 120], [180, 210, 60],
                 [250, 230, 40]], np.float32)


def bev_to_rgb(features: np.ndarray, z_min: float, z_max: float) -> np.ndarray:
    """
    float32[H, W, C >= 7] fused BEV (unprojected) -> uint8[H, W, 3] picture.

    Occupied cells take a colour from their z_max; empty cells covered by a camera are grey,
    the rest black. Rows are flipped so +x (forward) is up and columns so +y (left) is left.
    """
    occupancy, z_top, coverage = features[..., 0], features[..., 2], features[..., -1]
    level = np.clip((z_top - z_min) / max(z_max - z_min, 1e-6), 0.0, 1.0) * (len(RAMP) - 1)
    low = np.minimum(level.astype(np.int32), len(RAMP) - 2)
    frac = (level - low)[..., None]
    colour = RAMP[low] * (1 - frac) + RAMP[low + 1] * frac
    rgb = np.where(coverage[..., None] > 0, 48.0, 0.0) * np.ones(3, np.float32)
    rgb = np.where(occupancy[..., None] > 0, colour, rgb)
    return np.ascontiguousarray(rgb[::-1, ::-1].astype(np.uint8))
