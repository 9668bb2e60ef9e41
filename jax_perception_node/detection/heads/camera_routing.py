"""
Which of the reference head's outputs may read the camera channels: the rest see the LiDAR only.

A head trained with camera dropout still learns to lean on what the cameras add, and on the
sample drive that cost the small classes a little: a pedestrian 20 m away is 1.4 pixels of the
map the lift samples, spread along its ray, and pedestrians and cyclists scored up to 0.014
lower with the cameras than without (docs/users.md, "Subsets of the cameras"). Routing makes
"the cameras never change these classes' boxes" a property of the weights instead of a hope:

- the last :data:`CAMERA_HIDDEN` of the head's hidden channels may read every BEV channel;
  the others never read a camera-derived one (the camera features and their coverage, every
  channel after the LiDAR block), nor, in the residual blocks, a camera-reading channel;
- the heatmaps of the classes routed to the cameras read every hidden channel; the other
  classes' heatmaps and the box regression (offset, z, size, yaw: shared by all classes) read
  the LiDAR-only ones.

The network and its cost are unchanged: routing is a pattern of zeros in three weights (the
first 1 x 1 convolution, the blocks' pointwise ones and the output's). ``train
--camera-classes`` trains with them multiplied by the masks (so they act as 0 and get no
gradient) and writes them 0. :func:`camera_outputs` reads the pattern back from any
checkpoint's weights, trained so or not. A zero weight adds an exact 0 for any finite camera
value (the node zeroes non-finite camera features and values beyond ``MAX_ABS_INPUT`` before
the BEV is made).
"""

from dataclasses import dataclass

import equinox as eqx
import numpy as np

from .centerpoint import CenterPointHead, CLASSES, OUTPUTS

# Hidden channels that may read the cameras (the last ones of the head's 32).
CAMERA_HIDDEN = 8


def output_names() -> tuple[str, ...]:
    """Name each of the output convolution's channels: the classes, then 'offset', 'z', ..."""
    names = list(CLASSES)
    for name, n in OUTPUTS[1:]:
        names += [name] * n
    return tuple(names)


@dataclass(frozen=True)
class CameraRouting:
    """
    The zero pattern that keeps all but ``classes``' heatmaps off the camera channels.

    ``lidar_channels``: the BEV's leading LiDAR channels (``settings.channels.lidar_channels``);
    every channel after them is camera-derived. ``classes``: indices into
    ``centerpoint.CLASSES`` whose heatmaps may read the cameras.
    """

    lidar_channels: int
    classes: tuple[int, ...]

    def masks(self, model: CenterPointHead) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return float32 masks of conv1's, every pointwise and the output's weight (1: kept)."""
        c = model.mean.shape[0]
        hidden = model.conv1.weight.shape[-1]
        lidar_only = hidden - CAMERA_HIDDEN
        first = np.ones(model.conv1.weight.shape, np.float32)
        for start in (self.lidar_channels, c + self.lidar_channels):
            first[:, :, start:start + c - self.lidar_channels, :lidar_only] = 0.0
        pointwise = np.ones((1, 1, hidden, hidden), np.float32)
        pointwise[:, :, lidar_only:, :lidar_only] = 0.0
        out = np.ones(model.out.weight.shape, np.float32)
        kept = [k for k in range(out.shape[-1]) if k not in self.classes]
        out[:, :, lidar_only:, kept] = 0.0
        return first, pointwise, out

    def apply(self, model: CenterPointHead) -> CenterPointHead:
        """Return ``model`` with the routed-off weights multiplied by 0 (traceable)."""
        first, pointwise, out = self.masks(model)
        return eqx.tree_at(
            lambda m: (m.conv1.weight, *(b.pointwise.weight for b in m.blocks), m.out.weight),
            model, (model.conv1.weight * first,
                    *(b.pointwise.weight * pointwise for b in model.blocks),
                    model.out.weight * out))


def camera_outputs(model: CenterPointHead, lidar_channels: int) -> tuple[str, ...]:
    """
    Return the names (:func:`output_names`) of the outputs a camera-derived channel reaches.

    Read from the weights' nonzero pattern through the network (a hidden channel reads the
    cameras if a nonzero weight joins it to a camera channel or to such a hidden channel; the
    depthwise convolutions and the residuals keep channels apart), so an output not named
    here is, bit for bit, the same whatever finite values the camera channels hold.
    """
    c = model.mean.shape[0]
    weight = np.asarray(model.conv1.weight)[0, 0]                 # [2C + 4, hidden]
    camera = np.r_[lidar_channels:c, c + lidar_channels:2 * c]
    reached = np.any(weight[camera] != 0, axis=0)
    for block in model.blocks:
        pointwise = np.asarray(block.pointwise.weight)[0, 0]      # [hidden, hidden]
        reached = reached | np.any(pointwise[reached] != 0, axis=0)
    out = np.asarray(model.out.weight)[0, 0]
    return tuple(dict.fromkeys(name for name, hit in zip(
        output_names(), np.any(out[reached] != 0, axis=0)) if hit))
