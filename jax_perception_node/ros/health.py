"""
The /diagnostics roll-up rules: counts, times and latency statistics -> level and message.

No ROS import: the levels are plain ints equal to diagnostic_msgs/DiagnosticStatus' OK, WARN
and ERROR, and the node turns a :class:`Health` into a DiagnosticStatus. Rules, worst first:

- ERROR: any XLA compile after warm-up.
- WARN ``waiting for the first point cloud``: no cloud since the node was activated (an idle
  node is not broken; it is not OK either, as it has produced nothing).
- LiDAR timeout, ERROR: no *valid* cloud (processed, with at least one valid point) for more
  than ``lidar_timeout_s``, counted from the last valid cloud, or from the first cloud when
  none was valid yet. Rejected clouds, and clouds without a valid point (all NaN, empty), do
  not reset it. Before that, WARN ``no valid point cloud yet`` while none was valid.
- Rejected clouds since the last report: ERROR when every cloud taken since then was rejected
  (none processed), WARN when some were.
- WARN: total p99 over ``latency_budget_ms``, judged over the frames of the last
  ``latency_window_s`` only (a warm-up or calibration outlier clears that long after its
  frame; the published statistics cover the last ``diagnostics.window`` frames), a stale
  (masked) camera, and since the last report any cloud without a valid point or without its
  intensity field, overflowed cloud, non-finite or out-of-range feature values, rejected
  feature map, CameraInfo, odometry or TF message, frame without odometry, cloud skipped for
  want of its TF pose (``extrinsics.source: tf``) or camera masked for want of its TF pose.

The TF counts are of tf2_msgs/TFMessage messages, as the messages say: ``transforms_received``
counts messages taken whole, ``rejected_transforms`` messages with at least one transform
refused (its other transforms are stored).
"""

from dataclasses import dataclass
from typing import Mapping

OK, WARN, ERROR = 0, 1, 2

# Totals since start, published as /diagnostics values under these names.
COUNTS = ('received', 'processed', 'dropped', 'rejected', 'feature_maps_received',
          'rejected_feature_maps', 'rejected_camera_info', 'camera_info_applied', 'overflowed',
          'nonfinite_features', 'nonfinite_objects', 'odometry_received', 'rejected_odometry',
          'frames_without_odometry', 'transforms_received', 'rejected_transforms',
          'frames_without_tf', 'cameras_without_tf', 'cameras_over_slots', 'empty_clouds',
          'clouds_without_intensity', 'deskewed', 'clouds_without_time', 'frames_without_motion')
# Counts also kept since the last report (the same names), for the per-report rules.
PERIOD_COUNTS = ('processed', 'rejected', 'rejected_feature_maps', 'rejected_camera_info',
                 'overflowed', 'nonfinite_features', 'nonfinite_objects', 'rejected_odometry',
                 'frames_without_odometry', 'rejected_transforms', 'frames_without_tf',
                 'cameras_without_tf', 'cameras_over_slots', 'empty_clouds',
                 'clouds_without_intensity', 'clouds_without_time', 'frames_without_motion')

# Per-report WARNs: count name -> message after the number.
_PERIOD_WARNINGS = (
    ('empty_clouds', 'clouds without a single valid point (all NaN, out of range or empty)'),
    ('clouds_without_intensity', 'clouds without the lidar.intensity_field field (intensity '
                                 'read as 0)'),
    ('clouds_without_time', 'clouds without the lidar.time_field field (not deskewed)'),
    ('frames_without_motion', 'clouds not deskewed: no ego motion at their stamp '
                              '(accumulation.pose_source)'),
    ('nonfinite_features', 'non-finite or out-of-range feature values zeroed'),
    ('nonfinite_objects', 'decoded boxes with non-finite values dropped (check head.weights)'),
    ('rejected_feature_maps', 'feature maps rejected'),
    ('rejected_camera_info', 'CameraInfo messages rejected'),
    ('rejected_odometry', 'odometry messages rejected'),
    ('frames_without_odometry', 'frames without odometry (current sweep only)'),
    ('rejected_transforms', 'TF messages with a rejected transform'),
    ('frames_without_tf', 'clouds skipped: no TF pose of their frame'),
    ('cameras_without_tf', 'camera maps masked: no TF pose of their frame'),
    ('cameras_over_slots', 'camera maps masked: their TF pose needs more lift slots than '
                           'start-up fixed (fusion.max_samples_per_cell)'),
)


@dataclass(frozen=True)
class CloudTimes:
    """Monotonic times (s) of clouds since activation; None: no such cloud yet."""

    first: float | None = None     # the first cloud received
    last: float | None = None      # the newest cloud received, valid or not
    valid: float | None = None     # the newest cloud processed


@dataclass(frozen=True)
class RecentLatency:
    """The p99 of total_ms over the frames of the last ``seconds``; 0.0 when there were none."""

    p99_ms: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True)
class Health:
    """A rolled-up status: level (OK / WARN / ERROR), message ('OK' when fine) and values."""

    level: int
    message: str
    values: dict


def assess(counts: Mapping[str, int], period: Mapping[str, int], times: CloudTimes,
           now: float, latency: Mapping[str, Mapping[str, float]], stale: tuple[str, ...],
           compiles: int, capacity: int, lidar_timeout_s: float,
           latency_budget_ms: float, recent: RecentLatency = RecentLatency()) -> Health:
    """
    Apply the module's rules.

    ``counts``: totals (COUNTS); ``period``: PERIOD_COUNTS since the last report; ``now``: the
    monotonic time of ``times``; ``latency``: stats (p50 / p95 / p99 / max) of 'total_ms' and
    'age_ms' over the window, published as values; ``capacity``: the largest bucket (points);
    ``recent``: what the latency budget rule judges (no recent frame: nothing over budget).
    """
    problems = []
    if compiles:
        problems.append((ERROR, f'{compiles} XLA compiles after warm-up'))
    problems += _cloud_problems(period, times, now, lidar_timeout_s)
    if recent.p99_ms > latency_budget_ms:
        problems.append((WARN, f'total p99 {recent.p99_ms:.1f} ms over the '
                               f'{latency_budget_ms:g} ms budget (last {recent.seconds:g} s)'))
    problems += [(WARN, f'camera {name} stale (masked)') for name in stale]
    if period['overflowed']:
        problems.append((WARN, f'{period["overflowed"]} clouds above the largest bucket '
                               f'({capacity} points), subsampled'))
    problems += [(WARN, f'{period[key]} {text}') for key, text in _PERIOD_WARNINGS
                 if period[key]]
    values = {**{key: counts[key] for key in COUNTS}, 'compiles_after_warmup': compiles,
              'stale_cameras': ' '.join(stale),
              'seconds_since_cloud': _age(now, times.last),
              'seconds_since_valid_cloud': _age(now, times.valid)}
    for name, stats in latency.items():
        for q, v in stats.items():
            values[f'{name}_{q}'] = v
    values['total_ms_recent_p99'] = recent.p99_ms
    return Health(max((p[0] for p in problems), default=OK),
                  '; '.join(p[1] for p in problems) or 'OK', values)


def _cloud_problems(period, times: CloudTimes, now: float, timeout_s: float) -> list:
    if times.last is None:
        return [(WARN, 'waiting for the first point cloud')]
    problems = []
    silent = now - (times.valid if times.valid is not None else times.first)
    if silent > timeout_s:
        rejected = times.valid is None or times.last > times.valid
        problems.append((ERROR, f'no valid point cloud for {silent:.1f} s (lidar_timeout_s '
                                f'{timeout_s:g})' + ('; clouds arrive but are rejected or '
                                                     'hold no valid point' if rejected else '')))
    elif times.valid is None:
        problems.append((WARN, 'no valid point cloud yet'))
    rejected, processed = period['rejected'], period['processed']
    if rejected and not processed:
        problems.append((ERROR, f'all {rejected} clouds since the last report rejected'))
    elif rejected:
        problems.append((WARN, f'{rejected} of {rejected + processed} clouds since the last '
                               'report rejected'))
    return problems


def _age(now: float, then: float | None) -> str:
    """Seconds since ``then`` as a decimal string; 'inf' when there was none."""
    return 'inf' if then is None else f'{now - then:.2f}'
