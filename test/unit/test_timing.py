"""Autoware's timing values (processing, cyclic, pipeline latency) and Float64Stamped messages."""

from builtin_interfaces.msg import Time
from jax_perception_node.outputs.grid_map import types_by_name
from jax_perception_node.ros.timing import (AutowareTiming, float64_stamped, FLOAT64_STAMPED_TYPE,
                                            TIMING_TOPICS)
import pytest
from rclpy.serialization import serialize_message
from rosbags.typesys import get_types_from_msg, get_typestore, Stores

# autoware_internal_debug_msgs/Float64Stamped, written out here from Autoware's definition.
FLOAT64_STAMPED_MSG = """
builtin_interfaces/Time stamp
float64 data
"""


def record(total_ms: float, age_ms: float) -> dict:
    """Return the keys of a latency record, as FramePath.finish fills them, that timing reads."""
    return {'decode_ms': 1.0, 'compute_ms': 2.0, 'total_ms': total_ms, 'age_ms': age_ms}


def test_values_follow_autowares_definitions():
    timing = AutowareTiming(start=100.0)
    # Cloud arrives at 100.5 s, the worker takes it at 100.52 s, publishing ends 30 ms after
    # arrival (100.53 s); the node clock said 45.5 ms past the LiDAR stamp at publish.
    first = timing.frame(record(30.0, 45.5), started=100.52, arrived=100.5)
    assert first == pytest.approx({'processing_time_ms': 10.0, 'cyclic_time_ms': 530.0,
                                   'pipeline_latency_ms': 45.5})
    # Next: arrives 100.6, taken 100.61, done 100.65: 120 ms after the previous publish.
    second = timing.frame(record(50.0, 70.0), started=100.61, arrived=100.6)
    assert second == pytest.approx({'processing_time_ms': 40.0, 'cyclic_time_ms': 120.0,
                                    'pipeline_latency_ms': 70.0})
    assert set(first) == set(TIMING_TOPICS)


def test_topics_are_autowares_debug_names():
    assert TIMING_TOPICS == {'processing_time_ms': '~/debug/processing_time_ms',
                             'cyclic_time_ms': '~/debug/cyclic_time_ms',
                             'pipeline_latency_ms': '~/debug/pipeline_latency_ms'}


def test_float64_stamped_round_trips_through_rosbags():
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg(FLOAT64_STAMPED_MSG, FLOAT64_STAMPED_TYPE))
    msg = float64_stamped(store.types, 1_700_000_001_000_000_007, 12.5)
    back = store.deserialize_cdr(store.serialize_cdr(msg, FLOAT64_STAMPED_TYPE),
                                 FLOAT64_STAMPED_TYPE)
    assert (back.stamp.sec, back.stamp.nanosec, back.data) == (1_700_000_001, 7, 12.5)


def test_float64_stamped_builds_with_rclpy_classes():
    from autoware_internal_debug_msgs.msg import Float64Stamped   # built by make venv
    types = types_by_name(Float64Stamped, Time)
    msg = float64_stamped(types, 3_000_000_004, 7)
    assert isinstance(msg, Float64Stamped) and isinstance(msg.stamp, Time)
    assert (msg.stamp.sec, msg.stamp.nanosec, msg.data) == (3, 4, 7.0)
    store = get_typestore(Stores.ROS2_JAZZY)
    store.register(get_types_from_msg(FLOAT64_STAMPED_MSG, FLOAT64_STAMPED_TYPE))
    back = store.deserialize_cdr(serialize_message(msg), FLOAT64_STAMPED_TYPE)
    assert (back.stamp.sec, back.stamp.nanosec, back.data) == (3, 4, 7.0)
