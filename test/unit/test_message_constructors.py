"""The node's message constructors: rclpy's messages, equal, without the discarded defaults."""

import array

from geometry_msgs.msg import _point, Point
from jax_perception_node.outputs.detected_objects import detected_objects_message
from jax_perception_node.outputs.grid_map import grid_map_message, GridMapLayers
from jax_perception_node.outputs.object_markers import markers_message
from jax_perception_node.outputs.objects import detections_message
from jax_perception_node.ros.message_constructors import MessageConstructor
from jax_perception_node.ros.node_outputs import MESSAGE_TYPES
from jax_perception_node.ros.timing import float64_stamped
from jax_perception_node.settings.channels import LIDAR_CHANNELS
from jax_perception_node.settings.config import GridConfig
import numpy as np
import pytest
from std_msgs.msg import Header
from vision_msgs.msg import BoundingBox3D

CLASSES = ('car', 'large_vehicle', 'pedestrian', 'cyclist')
LABELS = (('car', 'CAR'), ('large_vehicle', 'TRUCK'), ('pedestrian', 'PEDESTRIAN'),
          ('cyclist', 'BICYCLE'))
GRID = GridConfig(frame_id='base_link', x_min=-4.0, x_max=12.0, y_min=-10.0, y_max=14.0,
                  z_min=-2.0, z_max=2.0, resolution=0.5)


def boxes(n: int, seed: int = 0) -> np.ndarray:
    """Return n box rows (x, y, z, length, width, height, yaw, score, class), every class."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, 9))
    rows[:, :3] = rng.normal(0.0, 20.0, (n, 3))
    rows[:, 3:6] = rng.uniform(0.5, 12.0, (n, 3))
    rows[:, 6] = rng.uniform(-np.pi, np.pi, n)
    rows[:, 7] = rng.uniform(0.1, 1.0, n)
    rows[:, 8] = np.arange(n) % len(CLASSES)
    return rows


def plain_classes() -> dict:
    """Return the rclpy classes themselves, by the same names."""
    return {name: constructor.cls for name, constructor in MESSAGE_TYPES.items()}


BUILDERS = {
    'vision_msgs': lambda types: detections_message(types, boxes(9), CLASSES, 1_700_000_000_5,
                                                    'base_link', [str(k) for k in range(9)]),
    'autoware': lambda types: detected_objects_message(types, boxes(9, 1), CLASSES, LABELS,
                                                       1_700_000_000_5, 'base_link'),
    'markers': lambda types: markers_message(types, boxes(5, 2), CLASSES, 12, 'base_link'),
    'grid_map': lambda types: grid_map_message(
        types, GridMapLayers.of(LIDAR_CHANNELS, 2),
        np.random.default_rng(3).random((48, 32, len(LIDAR_CHANNELS) + 3), np.float32), GRID,
        7),
    'timing': lambda types: float64_stamped(types, 1_700_000_000_123_456_789, 2.5),
}


@pytest.mark.parametrize('check_fields', ['', '1'])
@pytest.mark.parametrize('builder', sorted(BUILDERS))
def test_every_builder_gives_the_message_the_classes_give(builder, check_fields, monkeypatch):
    # ROS_PYTHON_CHECK_FIELDS=1 in every generated module: the markers' empty NumPy byte
    # arrays failed the checked setters, which rclpy's __init__ first makes array.array.
    for constructor in MESSAGE_TYPES.values():
        monkeypatch.setattr(constructor.module, 'ros_python_check_fields', check_fields)
    fast, plain = BUILDERS[builder](MESSAGE_TYPES), BUILDERS[builder](plain_classes())
    assert type(fast) is type(plain)
    assert fast == plain


def test_a_message_of_all_its_fields_builds_no_default_sub_message(monkeypatch):
    built, init = [], BoundingBox3D.__init__

    def counted(self, **fields):
        built.append(fields)
        init(self, **fields)
    monkeypatch.setattr(BoundingBox3D, '__init__', counted)
    box = BoundingBox3D(size=MESSAGE_TYPES['geometry_msgs/msg/Vector3'](x=4.0, y=2.0, z=1.5))
    fields = {'header': Header(frame_id='base_link'), 'results': [], 'bbox': box, 'id': '7'}
    built.clear()
    detection = MESSAGE_TYPES['vision_msgs/msg/Detection3D'](**fields)
    assert built == []
    assert detection.bbox is box and detection.id == '7'
    assert detection == plain_classes()['vision_msgs/msg/Detection3D'](**fields)
    assert len(built) == 1    # the class itself builds a default box and throws it away


def test_fields_are_checked_as_rclpy_checks_them(monkeypatch):
    point = MessageConstructor(Point)
    assert not point(x=1.0, y=2.0, z=3.0)._check_fields
    assert point(x='1', y=2.0, z=3.0).x == '1'       # unchecked, as Point(x='1') is
    monkeypatch.setattr(_point, 'ros_python_check_fields', '1')
    assert point(x=1.0, y=2.0, z=3.0)._check_fields
    with pytest.raises(AssertionError, match="'x' field must be of type 'float'"):
        point(x='1', y=2.0, z=3.0)


def test_some_fields_or_other_names_are_left_to_the_class():
    point = MESSAGE_TYPES['geometry_msgs/msg/Point']
    assert point(x=1.5) == Point(x=1.5) and point(x=1.5).y == 0.0
    assert point(x=1.0, y=2.0, w=3.0) == Point(x=1.0, y=2.0)
    shape = MESSAGE_TYPES['autoware_perception_msgs/msg/Shape']
    assert shape.BOUNDING_BOX == shape.cls.BOUNDING_BOX


@pytest.mark.parametrize('check_fields', ['', '1'])
def test_a_numeric_sequence_is_an_array_kept_as_given(check_fields, monkeypatch):
    from std_msgs.msg import _float32_multi_array
    monkeypatch.setattr(_float32_multi_array, 'ros_python_check_fields', check_fields)
    build = MESSAGE_TYPES['std_msgs/msg/Float32MultiArray']
    layout = MESSAGE_TYPES['std_msgs/msg/MultiArrayLayout'](dim=[], data_offset=0)
    given = array.array('f', [1.5, 2.5])
    # The unchecked setter copied it: 3.9 MB of features a frame, a GridMap's every layer.
    assert build(layout=layout, data=given).data is given
    for other in ([1.5, 2.5], np.array([1.5, 2.5], np.float32), array.array('d', [1.5, 2.5])):
        msg = build(layout=layout, data=other)
        assert isinstance(msg.data, array.array) and msg.data == given
        assert msg == plain_classes()['std_msgs/msg/Float32MultiArray'](layout=layout, data=other)
    image = np.arange(24, dtype=np.uint8)
    fields = {'header': Header(frame_id='base_link'), 'height': 2, 'width': 4,
              'encoding': 'rgb8', 'is_bigendian': 0, 'step': 12}
    assert MESSAGE_TYPES['sensor_msgs/msg/Image'](**fields, data=array.array('B', image)) == \
        plain_classes()['sensor_msgs/msg/Image'](**fields, data=image.tolist())
