"""
Box rows <-> vision_msgs/Detection3DArray: the objects a head detects, and the ground truth.

No ROS import, as in grid_map.py: messages are built from classes passed in, keyed by their ROS
type names (``'vision_msgs/msg/Detection3DArray'``, ``'std_msgs/msg/Header'``, ...): rclpy's
classes in the node (``grid_map.types_by_name``), the ``rosbags`` type store's ``types`` in replay
and in the sample bag.

Box rows: ``boxes.BOX_COLUMNS`` (x, y, z, length, width, height, yaw, score, class).

Each row is one Detection3D: header = the array's header; ``bbox.center`` = the centre with the
yaw quaternion (x = y = 0, z = sin(yaw / 2), w = cos(yaw / 2)); ``bbox.size`` = (length, width,
height); ``results`` = one ObjectHypothesisWithPose (class_id = the class name, score, pose =
the bbox centre pose, zero covariance); ``id`` = the object's id ('' when it has none).
"""

from collections import Counter
import math
from typing import Mapping, Sequence

import numpy as np

from ..detection.boxes import NUM_COLUMNS
from ..geometry.rotations import quaternion_matrix
from ..geometry.stamps import split_ns

GROUND_TRUTH_TOPIC = '/ground_truth/objects'
DETECTION_ARRAY_TYPE = 'vision_msgs/msg/Detection3DArray'
# Every message class ``detections_message`` builds, by ROS type name.
MESSAGE_TYPES = (DETECTION_ARRAY_TYPE, 'vision_msgs/msg/Detection3D',
                 'vision_msgs/msg/BoundingBox3D', 'vision_msgs/msg/ObjectHypothesisWithPose',
                 'vision_msgs/msg/ObjectHypothesis', 'geometry_msgs/msg/PoseWithCovariance',
                 'geometry_msgs/msg/Pose', 'geometry_msgs/msg/Point',
                 'geometry_msgs/msg/Quaternion', 'geometry_msgs/msg/Vector3',
                 'std_msgs/msg/Header', 'builtin_interfaces/msg/Time')


def box_rows(boxes, classes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """
    Check box rows for a message: (float64[n, 9], their class indices int64[n]).

    ValueError for rows of another shape or a class that is no index into ``classes``.
    """
    boxes = np.asarray(boxes, np.float64)
    if boxes.size == 0:
        boxes = boxes.reshape(0, NUM_COLUMNS)
    if boxes.ndim != 2 or boxes.shape[1] != NUM_COLUMNS:
        raise ValueError(f'boxes must be (n, {NUM_COLUMNS}), got {boxes.shape}')
    index = np.rint(boxes[:, 8]).astype(np.int64)
    bad = (index < 0) | (index >= len(classes)) | (index != boxes[:, 8])
    if np.any(bad):
        raise ValueError(f'class {boxes[np.argmax(bad), 8]!r} is no index into {list(classes)}')
    return boxes, index


def header(types: Mapping[str, type], stamp_ns: int, frame_id: str):
    """Return a std_msgs/Header of ``types``' class."""
    sec, nanosec = split_ns(stamp_ns)
    return types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id=frame_id)


def yaw_quaternion(yaw: float) -> tuple[float, float, float, float]:
    """Return the unit quaternion (x, y, z, w) of a rotation by ``yaw`` (rad) about +z."""
    return 0.0, 0.0, math.sin(0.5 * yaw), math.cos(0.5 * yaw)


def quaternion_yaw(x: float, y: float, z: float, w: float) -> float:
    """Return the heading (rad, in (-pi, pi]) of the rotated x axis of quaternion (x, y, z, w)."""
    m = quaternion_matrix((x, y, z, w))
    yaw = math.atan2(m[1, 0], m[0, 0])
    return math.pi if yaw == -math.pi else yaw


def detections_message(types: Mapping[str, type], boxes: np.ndarray, classes: Sequence[str],
                       stamp_ns: int, frame_id: str, ids: Sequence[str] | None = None):
    """
    Build a vision_msgs/Detection3DArray of box rows (float[n, 9], see the module doc).

    Args
    ----
    types: ROS type name -> class for every name in ``MESSAGE_TYPES``.
    boxes: the rows; column 8 indexes ``classes``.
    classes: class names, e.g. ('vehicle',).
    stamp_ns: header stamp (ns), the LiDAR stamp.
    frame_id: the boxes' frame, ``grid.frame_id``.
    ids: one id per row (None: all '').

    Raises
    ------
    ValueError: rows of the wrong shape, a class index outside ``classes`` or a count of ids
    that does not match.

    """
    boxes, index = box_rows(boxes, classes)
    ids = [''] * len(boxes) if ids is None else list(ids)
    if len(ids) != len(boxes):
        raise ValueError(f'{len(ids)} ids for {len(boxes)} boxes')
    stamped = header(types, stamp_ns, frame_id)
    point, quaternion = types['geometry_msgs/msg/Point'], types['geometry_msgs/msg/Quaternion']
    detections = []
    for row, k, name in zip(boxes.tolist(), index.tolist(), ids):
        x, y, z, length, width, height, yaw, score = row[:8]
        qx, qy, qz, qw = yaw_quaternion(yaw)

        def pose():
            return types['geometry_msgs/msg/Pose'](position=point(x=x, y=y, z=z),
                                                   orientation=quaternion(x=qx, y=qy, z=qz, w=qw))
        hypothesis = types['vision_msgs/msg/ObjectHypothesisWithPose'](
            hypothesis=types['vision_msgs/msg/ObjectHypothesis'](class_id=classes[k],
                                                                 score=score),
            pose=types['geometry_msgs/msg/PoseWithCovariance'](pose=pose(),
                                                               covariance=np.zeros(36)))
        bbox = types['vision_msgs/msg/BoundingBox3D'](
            center=pose(), size=types['geometry_msgs/msg/Vector3'](x=length, y=width, z=height))
        detections.append(types['vision_msgs/msg/Detection3D'](
            header=stamped, results=[hypothesis], bbox=bbox, id=str(name)))
    return types[DETECTION_ARRAY_TYPE](header=stamped, detections=detections)


def boxes_from_detections(msg, classes: Sequence[str],
                          left_out: Counter | None = None) -> np.ndarray:
    """
    Return the box rows (float32[n, 9]) of a Detection3DArray (rclpy or rosbags).

    Centre, size and yaw from ``bbox`` (the heading of its orientation's x axis); score and
    class from the result with the highest score. A class_id not in ``classes`` raises
    ValueError naming it, or, given a ``left_out`` Counter, leaves that detection out and counts
    its class_id there (ground truth may hold classes a head does not detect). ValueError too
    for a detection without results (``left_out`` then unchanged).
    """
    rows, unknown = [], Counter()
    for n, det in enumerate(msg.detections):
        if not len(det.results):
            raise ValueError(f'detection {n} (id {det.id!r}) has no results')
        best = max(det.results, key=lambda r: r.hypothesis.score).hypothesis
        if best.class_id not in classes:
            if left_out is None:
                raise ValueError(f'detection {n}: class_id {best.class_id!r} is not one of '
                                 f'{list(classes)}')
            unknown[best.class_id] += 1
            continue
        c, q, s = det.bbox.center.position, det.bbox.center.orientation, det.bbox.size
        rows.append((c.x, c.y, c.z, s.x, s.y, s.z, quaternion_yaw(q.x, q.y, q.z, q.w),
                     best.score, list(classes).index(best.class_id)))
    if left_out is not None:
        left_out.update(unknown)
    return np.array(rows, np.float32).reshape(len(rows), NUM_COLUMNS)
