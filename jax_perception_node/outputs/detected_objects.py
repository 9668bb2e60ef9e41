"""
Box rows <-> autoware_perception_msgs/DetectedObjects: the head's objects as Autoware takes them.

No ROS import, as in objects.py: messages are built from classes passed in, keyed by their ROS
type names (``'autoware_perception_msgs/msg/DetectedObjects'``, ``'std_msgs/msg/Header'``,
...): rclpy's classes in the node, the ``rosbags`` type store's ``types`` in replay.

Header: ``grid.frame_id`` and the LiDAR stamp. Each box row (``boxes.BOX_COLUMNS``) is one
DetectedObject:

- ``existence_probability`` = the score;
- ``classification`` = one ObjectClassification: ``label`` = the head class's label through
  ``output.autoware_labels`` (UNKNOWN for a class not listed), ``probability`` = 1.0. As in
  Autoware's lidar_centerpoint: the head gives one class per box (its best) and a score that
  says how sure it is that an object is there, not a distribution over classes; that score is
  the existence probability, and the one class is given whole;
- ``kinematics``: ``pose_with_covariance.pose`` = the centre with the yaw quaternion (x = y = 0,
  z = sin(yaw / 2), w = cos(yaw / 2)), zero covariance, ``has_position_covariance`` false;
  ``orientation_availability`` SIGN_UNKNOWN for the car-like labels (CAR, TRUCK, BUS, TRAILER):
  the heads regress the sine and cosine of a full heading, but the shipped one has not learned
  the front from the back (a nearly constant heading per class: most oncoming cars face the
  other way; docs/integrators.md), so only the axis is promised; UNAVAILABLE for the others (a
  pedestrian's or cyclist's box axis says little of its heading), as lidar_centerpoint does
  (``isCarLikeVehicle``); twist zero, ``has_twist`` and
  ``has_twist_covariance`` false (no tracking, so no velocity);
- ``shape``: BOUNDING_BOX, ``dimensions`` = (length, width, height) in m, empty footprint.
"""

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from .objects import box_rows, header, quaternion_yaw, yaw_quaternion
from ..detection.boxes import NUM_COLUMNS
from ..settings.config import AUTOWARE_LABELS

DETECTED_OBJECTS_TYPE = 'autoware_perception_msgs/msg/DetectedObjects'
_PKG = 'autoware_perception_msgs/msg/'
# Every message class ``detected_objects_message`` builds, by ROS type name.
MESSAGE_TYPES = (DETECTED_OBJECTS_TYPE, _PKG + 'DetectedObject', _PKG + 'ObjectClassification',
                 _PKG + 'DetectedObjectKinematics', _PKG + 'Shape',
                 'geometry_msgs/msg/PoseWithCovariance', 'geometry_msgs/msg/Pose',
                 'geometry_msgs/msg/Point', 'geometry_msgs/msg/Quaternion',
                 'geometry_msgs/msg/TwistWithCovariance', 'geometry_msgs/msg/Twist',
                 'geometry_msgs/msg/Vector3', 'geometry_msgs/msg/Polygon',
                 'std_msgs/msg/Header', 'builtin_interfaces/msg/Time')
UNKNOWN = 'UNKNOWN'
# Labels whose box axis is their heading's (Autoware's isCarLikeVehicle).
CAR_LIKE = frozenset(AUTOWARE_LABELS.index(name) for name in ('CAR', 'TRUCK', 'BUS', 'TRAILER'))


def class_labels(classes: Sequence[str], labels: Sequence[tuple[str, str]]) -> list[int]:
    """
    Return the ObjectClassification label value of each head class, in ``classes`` order.

    ``labels``: (head class, label name) pairs, ``cfg.output.autoware_labels``; a class not
    listed is UNKNOWN. A name's value is its place in ``AUTOWARE_LABELS``, the message's
    constants in order (UNKNOWN = 0 ... PEDESTRIAN = 7), so a message decoded without its
    constants (Foxglove's readers) reads back too.
    """
    names = dict(labels)
    return [AUTOWARE_LABELS.index(names.get(name, UNKNOWN)) for name in classes]


def unlabelled_classes(classes: Sequence[str], labels: Sequence[tuple[str, str]]) -> list[str]:
    """Return the head classes ``labels`` map to no label: they go out as UNKNOWN."""
    names = dict(labels)
    return [name for name in classes if name not in names]


def detected_objects_message(types: Mapping[str, type], boxes: np.ndarray,
                             classes: Sequence[str], labels: Sequence[tuple[str, str]],
                             stamp_ns: int, frame_id: str):
    """
    Build an autoware_perception_msgs/DetectedObjects of box rows (float[n, 9]).

    Args
    ----
    types: ROS type name -> class for every name in ``MESSAGE_TYPES``.
    boxes: the rows; column 8 indexes ``classes``.
    classes: the head's class names, e.g. ('vehicle',).
    labels: (head class, Autoware label name) pairs, ``cfg.output.autoware_labels``.
    stamp_ns: header stamp (ns), the LiDAR stamp.
    frame_id: the boxes' frame, ``grid.frame_id``.

    Raises
    ------
    ValueError: rows of the wrong shape or a class index outside ``classes``.

    """
    boxes, index = box_rows(boxes, classes)
    label_of = class_labels(classes, labels)
    t = types
    kinematics_cls = t[_PKG + 'DetectedObjectKinematics']
    shape_cls = t[_PKG + 'Shape']

    def vector(x=0.0, y=0.0, z=0.0):
        return t['geometry_msgs/msg/Vector3'](x=x, y=y, z=z)

    objects = []
    for row, k in zip(boxes.tolist(), index.tolist()):
        x, y, z, length, width, height, yaw, score = row[:8]
        qx, qy, qz, qw = yaw_quaternion(yaw)
        pose = t['geometry_msgs/msg/Pose'](
            position=t['geometry_msgs/msg/Point'](x=x, y=y, z=z),
            orientation=t['geometry_msgs/msg/Quaternion'](x=qx, y=qy, z=qz, w=qw))
        twist = t['geometry_msgs/msg/Twist'](linear=vector(), angular=vector())
        kinematics = kinematics_cls(
            pose_with_covariance=t['geometry_msgs/msg/PoseWithCovariance'](
                pose=pose, covariance=np.zeros(36)),
            has_position_covariance=False,
            orientation_availability=kinematics_cls.SIGN_UNKNOWN if label_of[k] in CAR_LIKE
            else kinematics_cls.UNAVAILABLE,
            twist_with_covariance=t['geometry_msgs/msg/TwistWithCovariance'](
                twist=twist, covariance=np.zeros(36)),
            has_twist=False, has_twist_covariance=False)
        classification = t[_PKG + 'ObjectClassification'](label=label_of[k], probability=1.0)
        objects.append(t[_PKG + 'DetectedObject'](
            existence_probability=score, classification=[classification],
            kinematics=kinematics,
            shape=shape_cls(type=shape_cls.BOUNDING_BOX,
                            footprint=t['geometry_msgs/msg/Polygon'](points=[]),
                            dimensions=vector(length, width, height))))
    return t[DETECTED_OBJECTS_TYPE](header=header(t, stamp_ns, frame_id), objects=objects)


def boxes_from_detected_objects(msg, classes: Sequence[str], labels: Sequence[tuple[str, str]],
                                left_out: Counter | None = None) -> np.ndarray:
    """
    Return the box rows (float32[n, 9]) of a DetectedObjects (rclpy, rosbags, mcap readers).

    The inverse of ``detected_objects_message`` for boxes of a head with ``classes`` and
    ``labels``: centre and yaw (the heading of the orientation's x axis) from the pose, sizes
    from ``shape.dimensions``, score = ``existence_probability``, class = the first of
    ``classes`` whose label is the most probable classification's (UNKNOWN: the first class not
    in ``labels``). A label no class has raises ValueError naming it, or, given a ``left_out``
    Counter, leaves that object out and counts its label value there. ValueError too for an
    object without a classification (``left_out`` then unchanged).
    """
    by_label: dict[int, int] = {}     # label value -> class index; a label's first class wins
    for k, value in enumerate(class_labels(classes, labels)):
        by_label.setdefault(value, k)
    rows, unknown = [], Counter()
    for n, obj in enumerate(msg.objects):
        if not len(obj.classification):
            raise ValueError(f'object {n} has no classification')
        label = int(max(obj.classification, key=lambda c: c.probability).label)
        if label not in by_label:
            if left_out is None:
                raise ValueError(f'object {n}: label {label} is no class of {list(classes)} '
                                 f'through {list(labels)}')
            unknown[label] += 1
            continue
        pose, dims = obj.kinematics.pose_with_covariance.pose, obj.shape.dimensions
        c, q = pose.position, pose.orientation
        rows.append((c.x, c.y, c.z, dims.x, dims.y, dims.z, quaternion_yaw(q.x, q.y, q.z, q.w),
                     obj.existence_probability, by_label[label]))
    if left_out is not None:
        left_out.update(unknown)
    return np.array(rows, np.float32).reshape(len(rows), NUM_COLUMNS)
