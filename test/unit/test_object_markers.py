"""object_markers.py: one CUBE and one label per box, after a DELETEALL, in rclpy and rosbags."""

import math

from jax_perception_node.bags import bagio
from jax_perception_node.outputs.grid_map import types_by_name
from jax_perception_node.outputs.object_markers import markers_message, MESSAGE_TYPES
import numpy as np
import pytest

CLASSES = ('vehicle', 'pedestrian')


def rclpy_types():
    from builtin_interfaces.msg import Duration, Time
    from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
    from sensor_msgs.msg import CompressedImage
    from std_msgs.msg import ColorRGBA, Header
    from visualization_msgs.msg import Marker, MarkerArray, MeshFile
    return types_by_name(MarkerArray, Marker, MeshFile, CompressedImage, Header, ColorRGBA, Time,
                         Duration, Pose, Point, Quaternion, Vector3)


def random_boxes(rng, n) -> np.ndarray:
    boxes = np.zeros((n, 9), np.float32)
    boxes[:, :3] = rng.uniform(-30, 30, (n, 3))
    boxes[:, 3:6] = rng.uniform(0.5, 6.0, (n, 3))
    boxes[:, 6] = rng.uniform(-math.pi, math.pi, n)
    boxes[:, 7] = rng.uniform(0, 1, n)
    boxes[:, 8] = rng.integers(0, len(CLASSES), n)
    return boxes


def heading(q) -> float:
    """Heading of the x axis rotated by unit quaternion q (x, y, z, w), written out in NumPy."""
    x, y, z, w = q
    r00 = 1 - 2 * (y * y + z * z)
    r10 = 2 * (x * y + z * w)
    return math.atan2(r10, r00)


@pytest.mark.parametrize('source', ['rclpy', 'rosbags'])
def test_markers_place_each_box_with_its_yaw_sizes_and_label(source):
    types = rclpy_types() if source == 'rclpy' else bagio.TYPESTORE.types
    assert set(MESSAGE_TYPES) <= set(types)
    rng = np.random.default_rng(4)
    boxes = random_boxes(rng, 7)
    msg = markers_message(types, boxes, CLASSES, 1_700_000_000_123_456_789, 'base_link')
    markers = list(msg.markers)
    assert len(markers) == 1 + 2 * len(boxes)
    assert markers[0].action == 3 and markers[0].ns == ''          # DELETEALL first
    cubes = [m for m in markers[1:] if m.type == 1]
    texts = [m for m in markers[1:] if m.type == 9]
    assert [m.id for m in cubes] == [m.id for m in texts] == list(range(len(boxes)))
    for box, cube, text in zip(boxes.astype(np.float64), cubes, texts):
        for m in (cube, text):
            assert m.header.frame_id == 'base_link' and m.action == 0
            assert (m.header.stamp.sec, m.header.stamp.nanosec) == (1_700_000_000, 123_456_789)
            # A second: boxes of a LiDAR that stopped do not stay on screen as if live.
            assert (m.lifetime.sec, m.lifetime.nanosec) == (1, 0)
        assert cube.ns == 'objects' and text.ns == 'objects_text'
        p, q = cube.pose.position, cube.pose.orientation
        np.testing.assert_allclose([p.x, p.y, p.z], box[:3], rtol=1e-12)
        np.testing.assert_allclose([cube.scale.x, cube.scale.y, cube.scale.z], box[3:6])
        quat = np.array([q.x, q.y, q.z, q.w])
        np.testing.assert_allclose(np.linalg.norm(quat), 1.0, atol=1e-12)
        assert quat[0] == quat[1] == 0.0
        turned = heading(quat) - box[6]
        assert abs(math.atan2(math.sin(turned), math.cos(turned))) < 1e-9
        assert cube.color.a == pytest.approx(0.5)
        assert text.text == f'{CLASSES[int(box[8])]} {box[7]:.2f}'
        t = text.pose.position
        np.testing.assert_allclose([t.x, t.y], box[:2])
        assert t.z > box[2] + box[5] / 2       # above the top
    colours = {int(b[8]): (c.color.r, c.color.g, c.color.b) for b, c in zip(boxes, cubes)}
    assert len(set(colours.values())) == len(colours) == 2     # one colour per class


def test_the_rosbags_array_serializes():
    msg = markers_message(bagio.TYPESTORE.types, random_boxes(np.random.default_rng(1), 3),
                          CLASSES, 5, 'base_link')
    raw = bagio.TYPESTORE.serialize_cdr(msg, msg.__msgtype__)
    back = bagio.deserialize(raw, msg.__msgtype__)
    assert [m.id for m in back.markers] == [m.id for m in msg.markers]


def test_no_boxes_is_just_the_deleteall():
    msg = markers_message(bagio.TYPESTORE.types, np.zeros((0, 9), np.float32), CLASSES, 0, 'b')
    assert [m.action for m in msg.markers] == [3]


@pytest.mark.parametrize('boxes', [np.zeros((2, 8)), np.array([[0] * 8 + [2.0]]),
                                   np.array([[0] * 8 + [0.5]])])
def test_bad_rows_are_refused(boxes):
    with pytest.raises(ValueError):
        markers_message(bagio.TYPESTORE.types, boxes, CLASSES, 0, 'b')
