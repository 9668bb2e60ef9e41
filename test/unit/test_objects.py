"""Box rows <-> vision_msgs/Detection3DArray, with rosbags' and rclpy's classes."""

from collections import Counter
import math

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Pose, PoseWithCovariance, Quaternion, Vector3
from jax_perception_node.bags import bagio
from jax_perception_node.outputs.grid_map import types_by_name
from jax_perception_node.outputs.objects import (boxes_from_detections, DETECTION_ARRAY_TYPE,
                                                 detections_message, GROUND_TRUTH_TOPIC,
                                                 MESSAGE_TYPES, quaternion_yaw, yaw_quaternion)
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import Header
from vision_msgs.msg import (BoundingBox3D, Detection3D, Detection3DArray, ObjectHypothesis,
                             ObjectHypothesisWithPose)

CLASSES = ('vehicle', 'pedestrian')
STAMP = 1_700_000_003_250_000_001
RCLPY_TYPES = types_by_name(Detection3DArray, Detection3D, BoundingBox3D,
                            ObjectHypothesisWithPose, ObjectHypothesis, PoseWithCovariance, Pose,
                            Point, Quaternion, Vector3, Header, Time)
ROSBAGS_TYPES = bagio.TYPESTORE.types


def random_boxes(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    boxes = np.zeros((n, 9), np.float32)
    boxes[:, :3] = rng.uniform(-50, 50, (n, 3))
    boxes[:, 3:6] = rng.uniform(0.5, 12, (n, 3))
    boxes[:, 6] = rng.uniform(-math.pi, math.pi, n)
    boxes[:, 7] = rng.random(n)
    boxes[:, 8] = rng.integers(0, len(CLASSES), n)
    return boxes


def check_layout(msg, boxes, ids):
    """Every field as the contract lays it out, computed here from the rows."""
    assert msg.header.stamp.sec == STAMP // 10**9
    assert msg.header.stamp.nanosec == STAMP % 10**9
    assert msg.header.frame_id == 'base_link'
    assert len(msg.detections) == len(boxes)
    for det, row, name in zip(msg.detections, boxes.astype(np.float64), ids):
        assert det.header.frame_id == 'base_link' and det.header.stamp.nanosec == 250_000_001
        assert det.id == name
        c, q, s = det.bbox.center.position, det.bbox.center.orientation, det.bbox.size
        assert (c.x, c.y, c.z) == tuple(row[:3])
        assert (s.x, s.y, s.z) == tuple(row[3:6])
        assert (q.x, q.y) == (0.0, 0.0)
        assert q.z == pytest.approx(math.sin(row[6] / 2), abs=1e-15)
        assert q.w == pytest.approx(math.cos(row[6] / 2), abs=1e-15)
        [result] = det.results
        assert result.hypothesis.class_id == CLASSES[int(row[8])]
        assert result.hypothesis.score == row[7]
        p = result.pose.pose
        assert (p.position.x, p.position.y, p.position.z) == (c.x, c.y, c.z)
        assert (p.orientation.z, p.orientation.w) == (q.z, q.w)
        assert not np.any(np.asarray(result.pose.covariance))


def test_constants():
    assert GROUND_TRUTH_TOPIC == '/ground_truth/objects'
    assert DETECTION_ARRAY_TYPE == 'vision_msgs/msg/Detection3DArray'
    assert set(RCLPY_TYPES) == set(MESSAGE_TYPES)


def test_rosbags_round_trip():
    boxes = random_boxes(12)
    ids = [f'car-{k}' for k in range(12)]
    msg = detections_message(ROSBAGS_TYPES, boxes, CLASSES, STAMP, 'base_link', ids)
    raw = bagio.TYPESTORE.serialize_cdr(msg, DETECTION_ARRAY_TYPE)
    back = bagio.deserialize(raw, DETECTION_ARRAY_TYPE)
    check_layout(back, boxes, ids)
    rows = boxes_from_detections(back, CLASSES)
    assert rows.dtype == np.float32 and rows.shape == (12, 9)
    np.testing.assert_array_equal(rows[:, [0, 1, 2, 3, 4, 5, 7, 8]],
                                  boxes[:, [0, 1, 2, 3, 4, 5, 7, 8]])
    np.testing.assert_allclose(rows[:, 6], boxes[:, 6], atol=2e-6)


def test_rclpy_round_trip_and_same_message_as_rosbags():
    boxes = random_boxes(7, seed=3)
    msg = detections_message(RCLPY_TYPES, boxes, CLASSES, STAMP, 'base_link')
    assert isinstance(msg, Detection3DArray)
    raw = serialize_message(msg)
    check_layout(deserialize_message(raw, Detection3DArray), boxes, [''] * 7)
    # The bytes rclpy publishes decode in rosbags to the message the bag writer builds.
    decoded = bagio.deserialize(raw, DETECTION_ARRAY_TYPE)
    built = detections_message(ROSBAGS_TYPES, boxes, CLASSES, STAMP, 'base_link')
    assert bagio.TYPESTORE.serialize_cdr(decoded, DETECTION_ARRAY_TYPE) == \
        bagio.TYPESTORE.serialize_cdr(built, DETECTION_ARRAY_TYPE)
    rows = boxes_from_detections(deserialize_message(raw, Detection3DArray), CLASSES)
    np.testing.assert_array_equal(rows[:, :6], boxes[:, :6])
    np.testing.assert_allclose(rows[:, 6], boxes[:, 6], atol=2e-6)


def test_empty():
    for types in (RCLPY_TYPES, ROSBAGS_TYPES):
        msg = detections_message(types, np.zeros((0, 9), np.float32), CLASSES, STAMP, 'map')
        assert msg.detections == [] and msg.header.frame_id == 'map'
        assert boxes_from_detections(msg, CLASSES).shape == (0, 9)


def test_yaw_quaternion_round_trip():
    for yaw in np.concatenate([np.linspace(-math.pi, math.pi, 721), [1e-9, -1e-9]]):
        x, y, z, w = yaw_quaternion(yaw)
        assert (x, y) == (0.0, 0.0) and z * z + w * w == pytest.approx(1.0)
        back = quaternion_yaw(x, y, z, w)
        assert -math.pi < back <= math.pi
        # Same heading (mod 2 pi); -pi comes back as pi.
        assert abs(math.remainder(back - yaw, 2 * math.pi)) < 1e-12
    assert quaternion_yaw(*yaw_quaternion(-math.pi)) == math.pi
    # A heading under a roll: q = q_z(yaw) * q_x(roll), multiplied out by hand.
    yaw, roll = 2.0, 0.4
    cz, sz, cr, sr = math.cos(yaw / 2), math.sin(yaw / 2), math.cos(roll / 2), math.sin(roll / 2)
    assert quaternion_yaw(cz * sr, sz * sr, sz * cr, cz * cr) == pytest.approx(yaw)


def test_best_result_decides():
    msg = detections_message(ROSBAGS_TYPES, random_boxes(1), CLASSES, STAMP, 'base_link')
    hypothesis = ROSBAGS_TYPES['vision_msgs/msg/ObjectHypothesis']
    extra = ROSBAGS_TYPES['vision_msgs/msg/ObjectHypothesisWithPose'](
        hypothesis=hypothesis(class_id='pedestrian', score=1.5),
        pose=msg.detections[0].results[0].pose)
    msg.detections[0].results.append(extra)
    assert boxes_from_detections(msg, CLASSES)[0, 7:].tolist() == [1.5, 1.0]


def test_errors():
    boxes = random_boxes(3)
    with pytest.raises(ValueError, match=r'\(n, 9\)'):
        detections_message(ROSBAGS_TYPES, boxes[:, :8], CLASSES, STAMP, 'base_link')
    with pytest.raises(ValueError, match='2 ids for 3 boxes'):
        detections_message(ROSBAGS_TYPES, boxes, CLASSES, STAMP, 'base_link', ['a', 'b'])
    for bad in (2.0, -1.0, 0.5):
        wrong = boxes.copy()
        wrong[1, 8] = bad
        with pytest.raises(ValueError, match='no index into'):
            detections_message(ROSBAGS_TYPES, wrong, CLASSES, STAMP, 'base_link')
    msg = detections_message(ROSBAGS_TYPES, boxes, CLASSES, STAMP, 'base_link')
    with pytest.raises(ValueError, match="class_id 'pedestrian'|class_id 'vehicle'"):
        boxes_from_detections(msg, ('cyclist',))
    msg.detections[2].results.clear()
    with pytest.raises(ValueError, match='detection 2.*no results'):
        boxes_from_detections(msg, CLASSES)


def test_unknown_classes_left_out_and_counted_when_asked():
    boxes = random_boxes(9, seed=5)
    boxes[:, 8] = [0, 1, 0, 1, 1, 0, 0, 1, 0]
    msg = detections_message(ROSBAGS_TYPES, boxes, CLASSES, STAMP, 'base_link')
    left_out = Counter()
    rows = boxes_from_detections(msg, ('vehicle',), left_out)
    vehicles = boxes[boxes[:, 8] == 0]
    assert rows.shape == (5, 9) and left_out == {'pedestrian': 4}
    np.testing.assert_array_equal(rows[:, [0, 1, 2, 3, 4, 5, 7, 8]],
                                  vehicles[:, [0, 1, 2, 3, 4, 5, 7, 8]])
    none = boxes_from_detections(msg, ('cyclist',), left_out)
    assert none.shape == (0, 9) and left_out == {'pedestrian': 8, 'vehicle': 5}
    msg.detections[8].results.clear()       # an error counts nothing
    with pytest.raises(ValueError, match='detection 8.*no results'):
        boxes_from_detections(msg, ('vehicle',), left_out)
    assert left_out == {'pedestrian': 8, 'vehicle': 5}
