"""
The LiDARs on the synthetic ego vehicle: one (the parameters' mount) or three.

``three``: the top LiDAR at the parameters' mount (``cfg.lidar``), and a VLP-16 low on each
front corner of the body, its x axis facing outward (yawed +-90 deg) and pitched down
:data:`SIDE_PITCH_DEG`, so that its lower beams cover the ground beside the car, which the top
LiDAR cannot see (its lowest beam reaches the ground only several metres out). This is the
layout of Autoware's sample sensor kit: a top LiDAR and two side LiDARs.
"""

from dataclasses import dataclass, replace
import math
from typing import Mapping

from jax_perception_node.bags.topics import lidar_topic, POINTCLOUD_TOPIC
from jax_perception_node.geometry.rotations import matrix_quaternion
from jax_perception_node.settings.config import PipelineConfig, Pose
import numpy as np

from .lidar_model import LidarModel
from .lidar_presets import VLP_16

RIGS = ('one', 'three')
SIDE_POSITION = (1.5, 0.95, 0.9)    # m, x, |y|, z of the side LiDARs in base_link
SIDE_PITCH_DEG = 30.0               # downward tilt of the side LiDARs' outward-facing x axis


@dataclass(frozen=True)
class LidarMount:
    """One LiDAR on the vehicle: its name, topic, frame, pose in base_link and sensor model."""

    name: str
    topic: str
    frame_id: str
    pose: Pose
    model: LidarModel


def side_pose(side: float) -> Pose:
    """Pose in base_link of the side LiDAR on the left (side +1) or the right (-1)."""
    yaw, pitch = side * math.pi / 2.0, math.radians(SIDE_PITCH_DEG)
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    # R = Rz(yaw) Ry(pitch): the sensor's x axis points outward and down, its z axis outward
    # and up.
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    x, y, z = SIDE_POSITION
    return Pose((x, side * y, z), tuple(float(v) for v in matrix_quaternion(rz @ ry)))


def lidar_rig(kind: str, cfg: PipelineConfig, model: LidarModel,
              top: Pose | None = None) -> tuple[LidarMount, ...]:
    """
    Return the LiDARs of the rig ``kind`` (:data:`RIGS`), the first at the parameters' mount.

    'one': ``model`` at ``cfg.lidar`` in frame ``cfg.lidar_frame_id`` on the node's single
    input topic. 'three': top (``model`` at ``cfg.lidar``), left and right (VLP-16s with the
    ``model``'s rotation rate, range noise and dropout, :func:`side_pose`), in frames
    ``lidar_<name>`` on :func:`lidar_topic`. ``top``: the first LiDAR's pose instead of
    ``cfg.lidar`` (see ``mounts.mounted``). ValueError for another kind.
    """
    top = cfg.lidar if top is None else top
    if kind == 'one':
        return (LidarMount('lidar', POINTCLOUD_TOPIC, cfg.lidar_frame_id, top, model),)
    if kind != 'three':
        raise ValueError(f'lidars must be one of {", ".join(RIGS)}, got {kind!r}')
    # The drive's rotation rate, range noise and dropout (summary and metadata record them).
    side = replace(VLP_16, rotation_hz=model.rotation_hz, range_noise_m=model.range_noise_m,
                   dropout=model.dropout)
    return (LidarMount('top', lidar_topic('top'), 'lidar_top', top, model),
            LidarMount('left', lidar_topic('left'), 'lidar_left', side_pose(1.0), side),
            LidarMount('right', lidar_topic('right'), 'lidar_right', side_pose(-1.0), side))


def rig_summary(mounts: tuple[LidarMount, ...]) -> dict:
    """Return name -> topic, frame_id, translation, rotation_xyzw (lists) of each LiDAR."""
    return {m.name: {'topic': m.topic, 'frame_id': m.frame_id,
                     'translation': list(m.pose.translation),
                     'rotation_xyzw': list(m.pose.rotation_xyzw)} for m in mounts}


def rig_parameters(rig: Mapping[str, Mapping]) -> dict:
    """
    Return the flat ``lidars.*`` parameters that replay or serve a drive of rig ``rig``.

    ``rig``: name -> frame_id, translation, rotation_xyzw of each LiDAR (``rig_summary``, the
    ``lidars`` of ``write_sample_bag``'s summary). Several LiDARs: ``lidars.names`` and each
    one's frame_id and pose; one LiDAR: ``lidars.names`` [] (its pose is ``lidar.*``'s, the
    parameters' mount). Merge them into the parameters the drive was written with.
    """
    if len(rig) == 1:
        return {'lidars.names': []}
    params = {'lidars.names': list(rig)}
    for name, mount in rig.items():
        for key in ('frame_id', 'translation', 'rotation_xyzw'):
            value = mount[key]
            params[f'lidars.{name}.{key}'] = value if isinstance(value, str) else list(value)
    return params
