"""Box rows <-> autoware_perception_msgs/DetectedObjects, with rosbags' and rclpy's classes."""

from collections import Counter
import math

from autoware_perception_msgs.msg import (DetectedObject, DetectedObjectKinematics,
                                          DetectedObjects, ObjectClassification, Shape)
from builtin_interfaces.msg import Time
from geometry_msgs.msg import (Point, Polygon, Pose, PoseWithCovariance, Quaternion, Twist,
                               TwistWithCovariance, Vector3)
from jax_perception_node.bags import bagio
from jax_perception_node.detection.boxes import OBJECT_CLASSES
from jax_perception_node.outputs.detected_objects import (boxes_from_detected_objects,
                                                          detected_objects_message,
                                                          DETECTED_OBJECTS_TYPE, MESSAGE_TYPES)
from jax_perception_node.outputs.grid_map import types_by_name
from jax_perception_node.settings.config import AUTOWARE_LABELS, autoware_labels
from jax_perception_node.settings.parameters import defaults
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import Header

CLASSES = ('vehicle', 'truck', 'pedestrian', 'tree')
LABELS = (('vehicle', 'CAR'), ('truck', 'TRUCK'), ('pedestrian', 'PEDESTRIAN'))
# ObjectClassification's constants, from the message definition: 'tree' is not mapped.
EXPECTED_LABEL = {0: 1, 1: 2, 2: 7, 3: 0}
STAMP = 1_700_000_004_125_000_007
RCLPY_TYPES = types_by_name(DetectedObjects, DetectedObject, ObjectClassification,
                            DetectedObjectKinematics, Shape, PoseWithCovariance, Pose, Point,
                            Quaternion, TwistWithCovariance, Twist, Vector3, Polygon, Header,
                            Time)
ROSBAGS_TYPES = bagio.TYPESTORE.types


def random_boxes(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    boxes = np.zeros((n, 9), np.float32)
    boxes[:, :3] = rng.uniform(-50, 50, (n, 3))
    boxes[:, 3:6] = rng.uniform(0.5, 12, (n, 3))
    boxes[:, 6] = rng.uniform(-math.pi, math.pi, n)
    boxes[:, 7] = rng.random(n)
    boxes[:, 8] = np.arange(n) % len(CLASSES)
    return boxes


def check_layout(msg, boxes):
    """Every field as the module doc lays it out, computed here from the rows."""
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1_700_000_004, 125_000_007)
    assert msg.header.frame_id == 'base_link'
    assert len(msg.objects) == len(boxes)
    for obj, row in zip(msg.objects, boxes.astype(np.float64)):
        assert obj.existence_probability == np.float32(row[7])
        [classification] = obj.classification
        assert classification.label == EXPECTED_LABEL[int(row[8])]
        assert classification.probability == 1.0
        k = obj.kinematics
        pose = k.pose_with_covariance.pose
        assert (pose.position.x, pose.position.y, pose.position.z) == tuple(row[:3])
        q = pose.orientation
        assert (q.x, q.y) == (0.0, 0.0)
        assert q.z == pytest.approx(math.sin(row[6] / 2), abs=1e-15)
        assert q.w == pytest.approx(math.cos(row[6] / 2), abs=1e-15)
        assert not np.any(np.asarray(k.pose_with_covariance.covariance))
        assert k.has_position_covariance is False
        # SIGN_UNKNOWN (1) for CAR, TRUCK, BUS and TRAILER (1 .. 4); else UNAVAILABLE (0).
        assert k.orientation_availability == int(1 <= classification.label <= 4)
        twist = k.twist_with_covariance.twist
        assert [twist.linear.x, twist.linear.y, twist.linear.z, twist.angular.x,
                twist.angular.y, twist.angular.z] == [0.0] * 6
        assert not np.any(np.asarray(k.twist_with_covariance.covariance))
        assert k.has_twist is False and k.has_twist_covariance is False
        assert obj.shape.type == 0                       # BOUNDING_BOX
        assert len(obj.shape.footprint.points) == 0
        d = obj.shape.dimensions
        assert (d.x, d.y, d.z) == tuple(row[3:6])


def test_constants():
    assert DETECTED_OBJECTS_TYPE == 'autoware_perception_msgs/msg/DetectedObjects'
    assert set(RCLPY_TYPES) == set(MESSAGE_TYPES)
    assert bagio.OBJECTS_TYPES == {'vision_msgs': 'vision_msgs/msg/Detection3DArray',
                                   'autoware': DETECTED_OBJECTS_TYPE}


def test_rosbags_layout_and_round_trip():
    boxes = random_boxes(12)
    msg = detected_objects_message(ROSBAGS_TYPES, boxes, CLASSES, LABELS, STAMP, 'base_link')
    check_layout(msg, boxes)
    back = bagio.deserialize(bagio.TYPESTORE.serialize_cdr(msg, DETECTED_OBJECTS_TYPE),
                             DETECTED_OBJECTS_TYPE)
    check_layout(back, boxes)
    rows = boxes_from_detected_objects(back, CLASSES, LABELS)
    assert rows.dtype == np.float32 and rows.shape == (12, 9)
    np.testing.assert_array_equal(np.delete(rows, 6, axis=1), np.delete(boxes, 6, axis=1))
    np.testing.assert_allclose(rows[:, 6], boxes[:, 6], atol=2e-6)


def test_rclpy_layout_and_the_same_bytes_decode_in_rosbags():
    boxes = random_boxes(8, seed=3)
    msg = detected_objects_message(RCLPY_TYPES, boxes, CLASSES, LABELS, STAMP, 'base_link')
    assert isinstance(msg, DetectedObjects)
    raw = serialize_message(msg)
    check_layout(deserialize_message(raw, DetectedObjects), boxes)
    check_layout(bagio.deserialize(raw, DETECTED_OBJECTS_TYPE), boxes)
    rows = boxes_from_detected_objects(deserialize_message(raw, DetectedObjects), CLASSES,
                                       LABELS)
    np.testing.assert_array_equal(np.delete(rows, 6, axis=1), np.delete(boxes, 6, axis=1))


def test_the_shipped_label_map_gives_every_class_of_the_shipped_head_its_label():
    labels = autoware_labels(defaults()['output.autoware_labels'])
    boxes = np.array([[1, 2, 0.5, 4.5, 1.9, 1.6, 0.3, 0.8, 0]], np.float32)
    msg = detected_objects_message(ROSBAGS_TYPES, boxes, ('vehicle',), labels, STAMP, 'map')
    assert msg.objects[0].classification[0].label == 1      # CAR
    rows = np.repeat(boxes, 4, axis=0)
    rows[:, 8] = np.arange(4)
    msg = detected_objects_message(ROSBAGS_TYPES, rows, OBJECT_CLASSES, labels, STAMP, 'map')
    # car CAR, large_vehicle TRUCK, pedestrian PEDESTRIAN, cyclist BICYCLE
    assert [o.classification[0].label for o in msg.objects] == [1, 2, 7, 6]
    # Every label of the default map, by name, as the message defines them.
    assert {ObjectClassification.CAR: 'CAR', ObjectClassification.TRUCK: 'TRUCK',
            ObjectClassification.BUS: 'BUS', ObjectClassification.TRAILER: 'TRAILER',
            ObjectClassification.MOTORCYCLE: 'MOTORCYCLE', ObjectClassification.BICYCLE:
            'BICYCLE', ObjectClassification.PEDESTRIAN: 'PEDESTRIAN'} == {
        1: 'CAR', 2: 'TRUCK', 3: 'BUS', 4: 'TRAILER', 5: 'MOTORCYCLE', 6: 'BICYCLE',
        7: 'PEDESTRIAN'}
    # The label names of the parameter are the message's constants, in their order.
    assert [getattr(ObjectClassification, name) for name in AUTOWARE_LABELS] == list(range(12))
    classes = tuple(name for name, _ in labels) + ('unmapped',)
    rows = np.zeros((len(classes), 9), np.float32)
    rows[:, 3:6], rows[:, 8] = 1.0, np.arange(len(classes))
    got = [o.classification[0].label for o in detected_objects_message(
        ROSBAGS_TYPES, rows, classes, labels, STAMP, 'map').objects]
    assert got == [1, 1, 2, 2, 3, 4, 5, 6, 6, 7, 0]


def test_a_hand_built_message_reads_back():
    """The inverse on a message written here: yaw from the quaternion, class through labels."""
    t = ROSBAGS_TYPES
    yaw = 2.5
    msg = detected_objects_message(t, np.zeros((0, 9)), CLASSES, LABELS, STAMP, 'map')
    template = detected_objects_message(t, random_boxes(1), CLASSES, LABELS, STAMP, 'map')
    obj = template.objects[0]
    obj.existence_probability = np.float32(0.625)
    obj.classification = [t['autoware_perception_msgs/msg/ObjectClassification'](
        label=2, probability=0.25), t['autoware_perception_msgs/msg/ObjectClassification'](
        label=7, probability=0.75)]           # the most probable decides: PEDESTRIAN
    pose = obj.kinematics.pose_with_covariance.pose
    pose.position.x, pose.position.y, pose.position.z = 3.0, -4.0, 0.5
    pose.orientation.z, pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
    d = obj.shape.dimensions
    d.x, d.y, d.z = 0.75, 0.5, 1.75
    msg.objects.append(obj)
    [row] = boxes_from_detected_objects(msg, CLASSES, LABELS)
    assert row.tolist() == pytest.approx([3.0, -4.0, 0.5, 0.75, 0.5, 1.75, yaw, 0.625, 2.0])


def test_labels_back_to_classes():
    # Two classes of one label: the first wins; UNKNOWN goes to the first class not mapped.
    classes, labels = ('car', 'vehicle', 'sign', 'tree'), (('car', 'CAR'), ('vehicle', 'CAR'))
    boxes = random_boxes(4, seed=1)
    boxes[:, 8] = [0, 1, 2, 3]
    msg = detected_objects_message(ROSBAGS_TYPES, boxes, classes, labels, STAMP, 'map')
    assert [o.classification[0].label for o in msg.objects] == [1, 1, 0, 0]
    rows = boxes_from_detected_objects(msg, classes, labels)
    assert rows[:, 8].tolist() == [0, 0, 2, 2]
    # A label no class has: an error naming it, or left out and counted by its value.
    with pytest.raises(ValueError, match=r'object 0: label 1 is no class'):
        boxes_from_detected_objects(msg, ('sign',), ())
    left_out = Counter()
    rows = boxes_from_detected_objects(msg, ('sign',), (), left_out)
    assert rows[:, 8].tolist() == [0, 0] and left_out == {1: 2}
    msg.objects[3].classification.clear()        # an error counts nothing
    with pytest.raises(ValueError, match='object 3 has no classification'):
        boxes_from_detected_objects(msg, ('sign',), (), left_out)
    assert left_out == {1: 2}


def test_empty_and_errors():
    for types in (RCLPY_TYPES, ROSBAGS_TYPES):
        msg = detected_objects_message(types, np.zeros((0, 9), np.float32), CLASSES, LABELS,
                                       STAMP, 'map')
        assert len(msg.objects) == 0 and msg.header.frame_id == 'map'
        assert boxes_from_detected_objects(msg, CLASSES, LABELS).shape == (0, 9)
    boxes = random_boxes(3)
    with pytest.raises(ValueError, match=r'\(n, 9\)'):
        detected_objects_message(ROSBAGS_TYPES, boxes[:, :8], CLASSES, LABELS, STAMP, 'map')
    boxes[1, 8] = 4
    with pytest.raises(ValueError, match='no index into'):
        detected_objects_message(ROSBAGS_TYPES, boxes, CLASSES, LABELS, STAMP, 'map')
