"""The node's executor (parameter ``executor``): the kinds, and an rclpy without one."""

import sys

from jax_perception_node.ros.executors import check_executor, make_executor
from jax_perception_node.settings.parameters import ConfigError
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor


def test_each_kind_is_its_rclpy_executor():
    from rclpy.experimental import EventsExecutor
    rclpy.init()
    try:
        events, single = make_executor('events'), make_executor('single_threaded')
        assert type(events) is type(EventsExecutor())
        assert type(single) is SingleThreadedExecutor
    finally:
        rclpy.shutdown()


def test_another_kind_is_refused_naming_the_parameter():
    with pytest.raises(ConfigError, match='^executor: expected one of events \\| '
                                          "single_threaded, got 'multi_threaded'$"):
        check_executor('multi_threaded')


def test_events_without_rclpys_events_executor_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, 'rclpy.experimental', None)
    with pytest.raises(ConfigError, match=r'^executor: events needs rclpy\.experimental\.'
                                          r'EventsExecutor \(rclpy >= 7\.1\.4\)'):
        check_executor('events')
    check_executor('single_threaded')
