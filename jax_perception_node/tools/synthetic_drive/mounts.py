"""
Mount and body variations of the sample drive, for training sets: height, tilts, noise draws.

Angles are in degrees, about base_link's axes (REP-103, right-handed): pitch about y, positive
nose (or the sensor's x axis) down; roll about x, positive left side up. A tilt (pitch, roll)
is the rotation ``tilt_rotation`` = R_y(pitch) R_x(roll), applied in base_link.

- ``mount_height`` (m, in (0.3, 4]): the top LiDAR's z in base_link, in place of the
  parameters' (``cfg.lidar``); ``mount_tilt`` (|each| <= 10): the top LiDAR's extra pitch and
  roll, R = tilt R_params, about its own origin (``mounted``). Both are the LiDAR's real pose:
  /tf_static publishes it (replay such a bag with ``extrinsics.source: tf``, or with
  parameters that match).
- ``body_tilt`` (|each| <= 5): the body pitched and rolled against the road (a change of slope
  under the vehicle, braking, a load on the suspension). Every LiDAR is cast as if base_link
  were rotated by it about its origin (``body_tilted``: rotation tilt R, translation tilt t),
  while /tf_static keeps the nominal mounts, as on a vehicle whose TF does not know. The
  cloud moved into base_link by the published pose is the level world turned by tilt^T: the
  ground there is a plane through the origin, z = tan(pitch) x - tan(roll) y (small angles).
  The ground truth turns with the cloud (``tilted_boxes``): boxes in the base_link the node
  sees, as a dataset's labels in the vehicle frame are. Against the level boxes, a centre at
  horizontal range r moves r (1 - cos a) in xy (a: the tilt; 0.03 m at 50 m for 2 deg) and
  r sin a in z (1.7 m at 50 m for 2 deg); the boxes stay upright (sizes and yaw only).
  The cameras turn with the body (``SyntheticDrive(camera_tilt=...)``), their /tf_static
  poses nominal as the LiDARs' are: on a vehicle every sensor moves with the body.

``draw_variation``: ``sample-bag --randomize``'s draws, from the seed but from a generator of
their own (:data:`VARIATION_STREAM`), so the drive's objects and noise draws are unchanged.
"""

import math

from jax_perception_node.geometry.rotations import matrix_quaternion
from jax_perception_node.settings.config import Pose
import numpy as np

from .lidar_model import LidarModel

MOUNT_HEIGHT_M = (0.3, 4.0)         # (low, high]: mount_height's bounds
MAX_MOUNT_TILT_DEG = 10.0           # |pitch|, |roll| of mount_tilt
MAX_BODY_TILT_DEG = 5.0             # |pitch|, |roll| of body_tilt
VARIATION_STREAM = 7                # np.random.default_rng([seed, 7]): no drive stream uses it
# --randomize: height default z + [-0.3, 0.4] m, tilts +-2 deg, range noise, dropout.
DRAW_HEIGHT_M = (-0.3, 0.4)
DRAW_TILT_DEG = 2.0
DRAW_RANGE_NOISE_M = (0.01, 0.04)
DRAW_DROPOUT = (0.0, 0.1)
# The bag's metadata custom_data records the variation (with one), as bagio.SAMPLE_SEED_KEY.
VARIATION_KEYS = {'mount_height_m': 'jax_perception.mount_height_m',
                  'mount_tilt_deg': 'jax_perception.mount_tilt_deg',
                  'body_tilt_deg': 'jax_perception.body_tilt_deg',
                  'range_noise_m': 'jax_perception.range_noise_m',
                  'dropout': 'jax_perception.dropout'}
# sample-bag's option of each argument, for its refusals.
OPTIONS = {'mount_height': '--mount-height', 'mount_tilt': '--mount-tilt',
           'body_tilt': '--body-tilt'}


def tilt_rotation(tilt) -> np.ndarray:
    """Return R_y(pitch) R_x(roll), float64[3, 3], of a tilt (pitch, roll) in degrees."""
    pitch, roll = (math.radians(float(v)) for v in tilt)
    cp, sp, cr, sr = math.cos(pitch), math.sin(pitch), math.cos(roll), math.sin(roll)
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    return ry @ rx


def mounted(pose: Pose, height: float | None = None, tilt=None) -> Pose:
    """Return ``pose`` with its z replaced by ``height`` and ``tilt`` turning it in place."""
    if height is None and tilt is None:
        return pose
    x, y, z = pose.translation
    rotation = pose.rotation_xyzw
    if tilt is not None:
        rotation = matrix_quaternion(tilt_rotation(tilt) @ pose.rotation_matrix())
    return Pose((x, y, float(z if height is None else height)),
                tuple(float(v) for v in rotation))


def body_tilted(pose: Pose, tilt=None) -> Pose:
    """Return ``pose`` (in base_link) with base_link turned by ``tilt`` about its origin."""
    if tilt is None:
        return pose
    rot = tilt_rotation(tilt)
    return Pose(tuple(float(v) for v in rot @ np.array(pose.translation, float)),
                tuple(float(v) for v in matrix_quaternion(rot @ pose.rotation_matrix())))


def tilted_boxes(boxes: np.ndarray, tilt=None) -> np.ndarray:
    """
    Return ground-truth rows float64[n, 9] (``boxes.BOX_COLUMNS``) as the tilted body sees them.

    A cloud cast from base_link turned by ``tilt`` and moved by the nominal mounts is the
    level world turned by tilt^T; the boxes are turned with it, as a dataset's labels in the
    vehicle frame are: each centre by tilt^T, each heading by tilt^T and projected on the
    ground plane (yaw). Sizes stay. ``tilt`` None: ``boxes`` itself.
    """
    if tilt is None:
        return boxes
    rot = tilt_rotation(tilt)
    out = np.array(boxes, np.float64)
    out[:, :3] = out[:, :3] @ rot                   # rows: (tilt^T p)^T = p^T tilt
    heading = np.stack([np.cos(out[:, 6]), np.sin(out[:, 6]), np.zeros(len(out))], axis=1)
    heading = heading @ rot
    out[:, 6] = np.arctan2(heading[:, 1], heading[:, 0])
    return out


def check_variation(mount_height=None, mount_tilt=None, body_tilt=None,
                    names: dict | None = None) -> None:
    """Raise ValueError naming the argument (``names``: its name there) of a bad value."""
    names = names or {}
    low, high = MOUNT_HEIGHT_M
    if mount_height is not None and not (_finite(mount_height) and low < mount_height <= high):
        raise ValueError(f'{names.get("mount_height", "mount_height")} must be a number > '
                         f'{low:g} and <= {high:g} m, got {mount_height!r}')
    for key, tilt, bound in (('mount_tilt', mount_tilt, MAX_MOUNT_TILT_DEG),
                             ('body_tilt', body_tilt, MAX_BODY_TILT_DEG)):
        if tilt is None:
            continue
        name = names.get(key, key)
        if isinstance(tilt, str) or len(tilt) != 2:
            raise ValueError(f'{name} must be a pitch and a roll (deg), got {tilt!r}')
        if not all(_finite(v) and abs(v) <= bound for v in tilt):
            raise ValueError(f'{name} must be a pitch and a roll within +-{bound:g} deg, '
                             f'got {tilt!r}')


def _finite(value) -> bool:
    """Tell whether ``value`` is a finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def draw_variation(seed: int, default_height: float) -> dict:
    """
    Return ``--randomize``'s draws for ``seed``, rounded to what is recorded: a dict of keys.

    mount_height (m, uniform ``default_height`` + :data:`DRAW_HEIGHT_M`, kept in the bounds),
    mount_tilt and body_tilt (deg, each uniform +-:data:`DRAW_TILT_DEG`), range_noise_m (m) and
    dropout (uniform in their ranges), drawn in that order from ``default_rng([seed,
    VARIATION_STREAM])``, each whether it is used or not: an option given leaves the others'
    draws as they were.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f'seed must be a non-negative integer, got {seed!r}')
    rng = np.random.default_rng([int(seed), VARIATION_STREAM])
    height = default_height + rng.uniform(*DRAW_HEIGHT_M)
    tilts = rng.uniform(-DRAW_TILT_DEG, DRAW_TILT_DEG, 4)
    noise, dropout = rng.uniform(*DRAW_RANGE_NOISE_M), rng.uniform(*DRAW_DROPOUT)
    low, high = MOUNT_HEIGHT_M
    return {'mount_height': min(max(round(float(height), 3), low + 0.001), high),
            'mount_tilt': (round(float(tilts[0]), 2), round(float(tilts[1]), 2)),
            'body_tilt': (round(float(tilts[2]), 2), round(float(tilts[3]), 2)),
            'range_noise_m': round(float(noise), 4), 'dropout': round(float(dropout), 4)}


def option_variation(seed: int, default_height: float, randomize: bool, mount_height=None,
                     mount_tilt: str | None = None, body_tilt: str | None = None,
                     range_noise_m=None, dropout=None) -> dict:
    """
    Return the variation of ``sample-bag``'s options (tilts as text 'PITCH,ROLL').

    A dict of mount_height, mount_tilt, body_tilt (``write_sample_bag``'s arguments), and
    range_noise_m, dropout (the LiDAR model's): each option given, else with ``randomize``
    its :func:`draw_variation`, else None. ValueError names the option of a bad value.
    """
    given = {'mount_height': mount_height, 'mount_tilt': _pair(mount_tilt, '--mount-tilt'),
             'body_tilt': _pair(body_tilt, '--body-tilt'), 'range_noise_m': range_noise_m,
             'dropout': dropout}
    check_variation(given['mount_height'], given['mount_tilt'], given['body_tilt'], OPTIONS)
    if randomize:
        drawn = draw_variation(seed, default_height)
        given = {k: drawn[k] if v is None else v for k, v in given.items()}
    return given


def _pair(text: str | None, option: str) -> tuple[float, float] | None:
    """Parse 'PITCH,ROLL' (degrees); ValueError names ``option``."""
    if text is None:
        return None
    try:
        pitch, roll = (float(v) for v in text.split(','))
    except ValueError:
        raise ValueError(f'{option} expects PITCH,ROLL in degrees (e.g. 1.5,-1; a negative '
                         f'first: {option}=-1,0.5), got {text!r}') from None
    return pitch, roll


def variation_record(height: float, mount_tilt, body_tilt, model: LidarModel) -> dict:
    """Return the summary's variation entries: mount_height_m, the tilts, noise, dropout."""
    return {'mount_height_m': float(height),
            'mount_tilt_deg': [float(v) for v in mount_tilt or (0.0, 0.0)],
            'body_tilt_deg': [float(v) for v in body_tilt or (0.0, 0.0)],
            'range_noise_m': model.range_noise_m, 'dropout': model.dropout}


def custom_data(record: dict) -> dict[str, str]:
    """Return ``variation_record``'s entries as metadata custom_data: key -> text."""
    def text(value):
        return ','.join(f'{v:.10g}' for v in value) if isinstance(value, list) \
            else f'{value:.10g}'
    return {VARIATION_KEYS[k]: text(v) for k, v in record.items()}
