"""The /diagnostics roll-up rules of health.py, each case worked out by hand; no rclpy."""

from configs import absolute_imports
from jax_perception_node.ros import health
from jax_perception_node.ros.health import (assess, CloudTimes, COUNTS, ERROR, OK, PERIOD_COUNTS,
                                            WARN)
import pytest

TIMEOUT_S = 2.0
QUIET = {'p50': 1.0, 'p95': 2.0, 'p99': 3.0, 'max': 4.0}
NOW = 1000.0


def run(period=None, times=CloudTimes(NOW - 5.0, NOW - 0.1, NOW - 0.1), counts=None,
        stale=(), compiles=0, p99=3.0):
    """assess() with a healthy baseline; ``period`` and ``counts`` override their zeros."""
    return assess({**dict.fromkeys(COUNTS, 0), **(counts or {})},
                  {**dict.fromkeys(PERIOD_COUNTS, 0), **(period or {})}, times, NOW,
                  {'total_ms': {**QUIET, 'p99': p99}, 'age_ms': QUIET}, stale, compiles,
                  1024, TIMEOUT_S, 50.0)


def test_levels_are_the_diagnostic_msgs_values():
    # diagnostic_msgs/DiagnosticStatus: OK=0, WARN=1, ERROR=2 (byte constants).
    assert (OK, WARN, ERROR) == (0, 1, 2)


def test_healthy_is_ok():
    result = run(period={'processed': 5})
    assert (result.level, result.message) == (OK, 'OK')


def test_before_the_first_cloud_it_waits_with_a_warn_not_an_error():
    result = run(times=CloudTimes())
    assert (result.level, result.message) == (WARN, 'waiting for the first point cloud')
    assert result.values['seconds_since_cloud'] == 'inf'
    assert result.values['seconds_since_valid_cloud'] == 'inf'


def test_rejected_clouds_do_not_reset_the_lidar_timeout():
    # The last valid cloud 3 s ago, rejected clouds since, the newest 0.1 s ago.
    result = run(period={'rejected': 10}, times=CloudTimes(NOW - 9.0, NOW - 0.1, NOW - 3.0))
    assert result.level == ERROR
    assert result.message == ('no valid point cloud for 3.0 s (lidar_timeout_s 2); clouds '
                              'arrive but are rejected or hold no valid point; all 10 clouds '
                              'since the last report rejected')
    assert result.values['seconds_since_cloud'] == '0.10'
    assert result.values['seconds_since_valid_cloud'] == '3.00'


def test_clouds_without_a_valid_point_warn_and_do_not_count_as_valid():
    # Processed (published), but all NaN: the serving core leaves CloudTimes.valid alone.
    result = run(period={'processed': 4, 'empty_clouds': 4},
                 times=CloudTimes(NOW - 1.0, NOW - 0.1, None))
    assert result.level == WARN
    assert result.message == ('no valid point cloud yet; 4 clouds without a single valid point '
                              '(all NaN, out of range or empty)')
    assert run(period={'processed': 4, 'empty_clouds': 4},
               times=CloudTimes(NOW - 3.0, NOW - 0.1, None)).level == ERROR


def test_silence_after_valid_clouds_is_an_error_without_the_rejected_note():
    result = run(times=CloudTimes(NOW - 9.0, NOW - 2.5, NOW - 2.5))
    assert (result.level, result.message) == (
        ERROR, 'no valid point cloud for 2.5 s (lidar_timeout_s 2)')


def test_within_the_timeout_a_silent_lidar_is_ok():
    result = run(times=CloudTimes(NOW - 9.0, NOW - 1.9, NOW - 1.9))
    assert (result.level, result.message) == (OK, 'OK')


def test_clouds_but_none_valid_yet_is_not_ok():
    # Within the timeout, nothing rejected in this report (the first cloud is in flight): WARN.
    result = run(times=CloudTimes(NOW - 0.5, NOW - 0.5, None))
    assert (result.level, result.message) == (WARN, 'no valid point cloud yet')
    # Every cloud so far rejected: ERROR at once, and after the timeout (from the first cloud).
    result = run(period={'rejected': 3}, times=CloudTimes(NOW - 0.5, NOW - 0.1, None))
    assert result.level == ERROR
    assert result.message == ('no valid point cloud yet; all 3 clouds since the last report '
                              'rejected')
    result = run(times=CloudTimes(NOW - 2.5, NOW - 0.1, None))
    assert (result.level, result.message) == (
        ERROR, 'no valid point cloud for 2.5 s (lidar_timeout_s 2); clouds arrive but are '
        'rejected or hold no valid point')


@pytest.mark.parametrize('rejected,processed,level,message', [
    (0, 4, OK, 'OK'),
    (1, 3, WARN, '1 of 4 clouds since the last report rejected'),
    (4, 0, ERROR, 'all 4 clouds since the last report rejected'),
])
def test_share_of_rejected_clouds_since_the_last_report(rejected, processed, level, message):
    result = run(period={'rejected': rejected, 'processed': processed})
    assert (result.level, result.message) == (level, message)


def test_period_warnings_use_one_spelling_per_count():
    period = {'overflowed': 2, 'nonfinite_features': 8, 'rejected_feature_maps': 1,
              'rejected_camera_info': 3, 'rejected_odometry': 4, 'frames_without_odometry': 5,
              'processed': 5, 'nonfinite_objects': 6}
    result = run(period=period)
    assert result.level == WARN
    assert result.message.split('; ') == [
        '2 clouds above the largest bucket (1024 points), subsampled',
        '8 non-finite or out-of-range feature values zeroed',
        '6 decoded boxes with non-finite values dropped (check head.weights)',
        '1 feature maps rejected',
        '3 CameraInfo messages rejected', '4 odometry messages rejected',
        '5 frames without odometry (current sweep only)']
    # Every count kept per report is a total of the same name.
    assert set(PERIOD_COUNTS) <= set(COUNTS)


def test_clouds_without_their_intensity_field_warn():
    result = run(period={'processed': 5, 'clouds_without_intensity': 5})
    assert (result.level, result.message) == (
        WARN, '5 clouds without the lidar.intensity_field field (intensity read as 0)')


def test_compiles_budget_and_stale_cameras():
    result = run(period={'processed': 1}, compiles=2, p99=60.0, stale=('front', 'rear'))
    assert result.level == ERROR
    assert result.message.split('; ') == [
        '2 XLA compiles after warm-up', 'total p99 60.0 ms over the 50 ms budget',
        'camera front stale (masked)', 'camera rear stale (masked)']
    assert result.values['stale_cameras'] == 'front rear'
    assert result.values['compiles_after_warmup'] == 2


def test_values_hold_every_total_and_the_latency_stats():
    counts = {key: k for k, key in enumerate(COUNTS)}
    result = run(counts=counts)
    assert {key: result.values[key] for key in COUNTS} == counts
    assert result.values['total_ms_p99'] == 3.0 and result.values['age_ms_max'] == 4.0
    # One spelling each: no short aliases of the counts.
    assert not {'nonfinite', 'camera_info', 'odometry', 'without_odometry'} & set(result.values)


def test_health_imports_no_ros():
    assert absolute_imports('health') <= {'dataclasses', 'typing'}
    assert health.__doc__ and 'ERROR' in health.__doc__
