"""
BEV pictures for people: forward up, left on the left, heights coloured, coverage tinted.

The one orientation convention of the BEV outputs (REP-103 grid frame: x forward, y left):
- ``bev_features`` (the raw array and its Image): row ``i`` = x index from ``x_min``, column
  ``j`` = y index from ``y_min``; row 0 is the rear (x_min), column 0 the right (y_min). Shown as
  a picture as is, it is upside down and mirrored: rotated 180 degrees against ``bev_image``.
- ``bev_image`` and the GridMap (grid_map's index): ``forward_up`` of that array, so row (index)
  ``r`` = x max side first, column ``c`` = y max side first: ``[r, c] = features[H-1-r, W-1-c]``.
  Pixel (r, c) of the picture and grid_map index (r, c) are the same cell.

Boxes on a picture (``tools.report.draw_boxes``) take a fixed colour per class index,
``object_markers.class_colour`` (the markers' colours); ``class_caption`` names them.
"""

from typing import Sequence

import numpy as np

# A compact perceptual ramp (dark blue -> teal -> yellow), interpolated per cell.
RAMP = np.array([[40, 30, 120], [30, 110, 160], [40, 170, 120], [180, 210, 60],
                 [250, 230, 40]], np.float32)
# The names of ``object_markers.PALETTE``'s colours, by class index (repeating like it).
COLOUR_NAMES = ('orange', 'blue', 'green', 'magenta', 'yellow')


def forward_up(bev: np.ndarray) -> np.ndarray:
    """
    View of a BEV array ``[H, W, ...]`` with +x (forward) up and +y (left) on the left.

    ``forward_up(bev)[r, c] == bev[H-1-r, W-1-c]``: both axes reversed, a view, no copy.
    """
    return bev[::-1, ::-1]


def bev_to_rgb(features: np.ndarray, z_min: float, z_max: float) -> np.ndarray:
    """
    float32[H, W, C >= 7] fused BEV (unprojected) -> uint8[H, W, 3] picture, ``forward_up``.

    Occupied cells take a colour from their z_max; empty cells covered by a camera are grey,
    the rest black.
    """
    rgb = np.zeros(features.shape[:2] + (3,), np.uint8)
    cells = forward_up(rgb)         # cells[i, j] is rgb's pixel of grid cell (i, j)
    cells[features[..., -1] > 0] = 48
    # Only the occupied cells are coloured: over the whole grid, with a trailing axis of 3,
    # this took 6-10 ms of a 256 x 256 frame in the node.
    occupied = features[..., 0] > 0
    level = np.clip((features[..., 2][occupied] - z_min) / max(z_max - z_min, 1e-6), 0.0,
                    1.0) * (len(RAMP) - 1)
    low = np.minimum(level.astype(np.int32), len(RAMP) - 2)
    frac = (level - low)[:, None]
    cells[occupied] = (RAMP[low] * (1 - frac) + RAMP[low + 1] * frac).astype(np.uint8)
    return rgb


def class_caption(classes: Sequence[str]) -> str:
    """Return what a picture's class colours mean: 'car orange, large_vehicle blue, ...'."""
    return ', '.join(f'{name} {COLOUR_NAMES[k % len(COLOUR_NAMES)]}'
                     for k, name in enumerate(classes))
