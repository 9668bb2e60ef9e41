"""
Autoware's timing topics from the per-frame latency record, and their Float64Stamped messages.

Autoware's nodes (lidar_centerpoint, the pointcloud filters) publish, after each output,
``debug/processing_time_ms`` (the callback's own processing: a StopWatch reset at callback
start, read after publishing), ``debug/cyclic_time_ms`` (a StopWatch read and reset at that
same point: the time since the previous frame's, so the output period) and
``debug/pipeline_latency_ms`` (node clock now minus the input's header stamp), as
autoware_internal_debug_msgs/Float64Stamped with ``stamp`` = node clock now, QoS depth 1.

Here a frame's processing runs in the worker, from taking the cloud (decode start) to publish
done; the wait for the worker is queueing, as the executor's queue is in Autoware, and shows in
``~/debug/latency`` (``total_ms``). No ROS import: messages are built from a class passed in.
"""

from typing import Mapping

from ..geometry.stamps import split_ns

FLOAT64_STAMPED_TYPE = 'autoware_internal_debug_msgs/msg/Float64Stamped'
# Value key -> the node's topic (relative: under the node's name).
TIMING_TOPICS = {
    'processing_time_ms': '~/debug/processing_time_ms',
    'cyclic_time_ms': '~/debug/cyclic_time_ms',
    'pipeline_latency_ms': '~/debug/pipeline_latency_ms',
}


class AutowareTiming:
    """
    The three Autoware timing values of each published frame, in ms.

    ``start``: ``time.perf_counter()`` where the first frame's cyclic time counts from (the
    activation, as Autoware's StopWatch starts with the node). Not thread-safe: one caller
    (the worker) per instance.
    """

    def __init__(self, start: float):
        """Count the first frame's cyclic time from ``start`` (perf_counter seconds)."""
        self._previous_done = start

    def frame(self, record: Mapping[str, float], started: float, arrived: float) -> dict:
        """
        Values of a finished frame: its record (``FramePath.finish``) and perf_counter times.

        ``started``: decode start (``Frame.started``); ``arrived``: the cloud's callback entry
        (``total_ms`` runs from it to publish done). ``pipeline_latency_ms`` is the record's
        ``age_ms`` (node clock at publish minus the LiDAR stamp).
        """
        done = arrived + record['total_ms'] / 1e3
        cyclic_ms = (done - self._previous_done) * 1e3
        self._previous_done = done
        return {'processing_time_ms': (done - started) * 1e3, 'cyclic_time_ms': cyclic_ms,
                'pipeline_latency_ms': float(record['age_ms'])}


def float64_stamped(types: Mapping[str, type], stamp_ns: int, value: float):
    """
    autoware_internal_debug_msgs/Float64Stamped of ``value`` at ``stamp_ns``.

    ``types``: ROS type name -> class for ``FLOAT64_STAMPED_TYPE`` and
    ``'builtin_interfaces/msg/Time'`` (rclpy's classes via ``grid_map.types_by_name``, or the
    rosbags type store's ``types``).
    """
    sec, nanosec = split_ns(stamp_ns)
    return types[FLOAT64_STAMPED_TYPE](
        stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), data=float(value))
