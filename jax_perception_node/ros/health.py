"""
The /diagnostics roll-up rules: counts, times and latency statistics -> level and message.

No ROS import: the levels are plain ints equal to diagnostic_msgs/DiagnosticStatus' OK, WARN
and ERROR, and the node turns a :class:`Health` into a DiagnosticStatus. Rules, worst first:

- ERROR: any XLA compile after warm-up; any frame that failed since the last report (an
  unexpected error processing it, logged; the node serves the next one).
- WARN ``waiting for the first point cloud``: no cloud since the node was activated (an idle
  node is not broken; it is not OK either, as it has produced nothing).
- LiDAR timeout, ERROR: no *valid* cloud (processed, with at least one valid point) for more
  than ``lidar_timeout_s``, counted from the last valid cloud, or from the first cloud when
  none was valid yet. Rejected clouds, and clouds without a valid point (all NaN, empty), do
  not reset it. Before that, WARN ``no valid point cloud yet`` while none was valid.
- Rejected clouds since the last report: ERROR when every cloud taken since then was rejected
  (none processed), WARN when some were (``<k> of <n> clouds``; with several LiDARs ``<k>
  clouds rejected since the last report (<n> frames processed)``).
- Several LiDARs (``lidars.names``): WARN ``LiDAR <name> missing from <k> of <n> frames since
  the last report`` for each LiDAR whose cloud was absent from frames processed since then (no
  cloud of it within ``sync.max_lidar_delay_s``); a dead LiDAR among several keeps this WARN up
  while the others still make frames (the LiDAR timeout above watches frames, not LiDARs).
- WARN: total p99 over ``latency_budget_ms``, judged over the frames of the last
  ``latency_window_s`` only (a warm-up or calibration outlier clears that long after its
  frame; the published statistics cover the last ``diagnostics.window`` frames), a stale
  (masked) camera, and since the last report any cloud without a valid point or without its
  intensity field or whose intensities read off the scale the head was trained on
  (``frames.intensity_scale``), overflowed cloud, LiDAR cloud too late for its set (dropped),
  non-finite or out-of-range feature values, rejected feature map, CameraInfo, odometry or TF
  message, frame without odometry, cloud skipped for want of its TF pose
  (``extrinsics.source: tf``) or camera masked for want of its TF pose.

The TF counts are of tf2_msgs/TFMessage messages, as the messages say: ``transforms_received``
counts messages taken whole, ``rejected_transforms`` messages with at least one transform
refused (its other transforms are stored).

With several LiDARs ``processed`` and ``dropped`` count frames (one per set of clouds), while
``received``, ``rejected`` (a cloud left out of its set, or every cloud of a set refused whole)
and ``late_lidar_clouds`` count clouds; ``lidar_sets_incomplete`` counts frames without some
LiDAR and ``lidars.<name>.missing`` (a value per LiDAR) the frames without that one.
``cameras.<name>.rejected`` (a value per camera) counts that camera's share of
``rejected_feature_maps``, which the WARN names.
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
          'clouds_without_intensity', 'clouds_off_intensity_scale', 'deskewed',
          'clouds_without_time', 'frames_without_motion', 'lidar_sets_incomplete',
          'late_lidar_clouds', 'frames_failed')
# Counts also kept since the last report (the same names), for the per-report rules.
PERIOD_COUNTS = ('processed', 'dropped', 'rejected', 'rejected_feature_maps',
                 'rejected_camera_info', 'overflowed', 'nonfinite_features', 'nonfinite_objects',
                 'rejected_odometry', 'frames_without_odometry', 'rejected_transforms',
                 'frames_without_tf', 'cameras_without_tf', 'cameras_over_slots', 'empty_clouds',
                 'clouds_without_intensity', 'clouds_off_intensity_scale', 'clouds_without_time',
                 'frames_without_motion', 'late_lidar_clouds', 'frames_failed')

# Clouds (frames with several LiDARs) replaced unserved by a newer one since the last report,
# over those served or dropped, above which the node says it is slower than its LiDAR(s):
# latest wins drops one now and then (two clouds delivered together), a slow node steadily.
DROPPED_SHARE = 0.2
# Per-report WARNs: count name -> message after the number.
_PERIOD_WARNINGS = (
    ('empty_clouds', 'clouds without a single valid point (all NaN, out of range or empty)'),
    ('clouds_without_intensity', 'clouds without the lidar.intensity_field field (intensity '
                                 'read as 0)'),
    ('clouds_off_intensity_scale', 'clouds whose intensities read off the scale the head was '
                                   'trained on (the lidar.intensity_scale)'),
    ('clouds_without_time', 'clouds not deskewed: no time field (the lidar.time_field), or '
                            "its times no sweep's (the lidar.time_reference, time_unit)"),
    ('frames_without_motion', 'clouds not deskewed: no ego motion at their stamp '
                              '(accumulation.pose_source)'),
    ('late_lidar_clouds', 'LiDAR clouds too late for their set, dropped (sync.max_lidar_delay_s, '
                          'sync.lidar_stamp_tolerance_s)'),
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


def missing_key(name: str) -> str:
    """Return the count (and /diagnostics value) of frames without LiDAR ``name``'s cloud."""
    return f'lidars.{name}.missing'


def rejected_key(camera: str) -> str:
    """Return the count (and /diagnostics value) of camera ``camera``'s rejected maps or images."""
    return f'cameras.{camera}.rejected'


def count_names(lidars: tuple[str, ...] = (), cameras: tuple[str, ...] = ()
                ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Return (totals, counts kept per report): COUNTS, PERIOD_COUNTS, each LiDAR's, camera's."""
    own = tuple(missing_key(name) for name in lidars) + tuple(map(rejected_key, cameras))
    return COUNTS + own, PERIOD_COUNTS + own


def frame_counts(frame) -> dict[str, int]:
    """
    Return what one processed frame (``frame_path.Frame``) adds to the counts.

    ``rejected``: the clouds of its set left out (``Frame.lidars_refused``); the set itself is
    processed. A LiDAR with no cloud in the set, or one left out, adds to
    ``lidars.<name>.missing``.
    """
    result = frame.result
    counts = {
        'processed': 1, 'overflowed': int(result.overflow_points > 0),
        'nonfinite_features': result.nonfinite_features,
        'nonfinite_objects': result.nonfinite_objects,
        'frames_without_odometry': int(frame.without_odometry),
        'cameras_without_tf': len(frame.cameras_without_tf),
        'cameras_over_slots': len(frame.cameras_over_slots),
        # Clouds: of a set, each blank one (a frame of only blank ones is empty as well).
        'empty_clouds': max(int(frame.empty), len(frame.lidars_blank)),
        'clouds_without_intensity': int(bool(frame.fields_without_intensity)),
        'clouds_off_intensity_scale': int(frame.off_scale is not None),
        'deskewed': int(frame.deskewed),
        'clouds_without_time': int(bool(frame.fields_without_time)),
        'frames_without_motion': int(frame.without_motion),
        'rejected': len(frame.lidars_refused),
        'lidar_sets_incomplete': int(bool(frame.lidars_missing)),
    }
    counts.update((missing_key(name), 1) for name in frame.lidars_missing)
    return counts


def assess(counts: Mapping[str, int], period: Mapping[str, int], times: CloudTimes,
           now: float, latency: Mapping[str, Mapping[str, float]],
           stale: tuple[tuple[str, str], ...],
           compiles: int, capacity: int, lidar_timeout_s: float,
           latency_budget_ms: float, recent: RecentLatency = RecentLatency(),
           lidars: tuple[str, ...] = (), cameras: tuple[str, ...] = ()) -> Health:
    """
    Apply the module's rules.

    ``counts``: totals (COUNTS); ``period``: PERIOD_COUNTS since the last report; ``now``: the
    monotonic time of ``times``; ``latency``: stats (p50 / p95 / p99 / max) of 'total_ms' and
    'age_ms' over the window, published as values; ``capacity``: the largest bucket (points);
    ``recent``: what the latency budget rule judges (no recent frame: nothing over budget);
    ``stale``: (camera, why) of each camera masked in the last frame (``sync.Pairing``);
    ``lidars``: ``lidars.names`` (() for one LiDAR), whose ``missing_key`` counts ``counts``
    and ``period`` then hold too (``count_names``), as they hold the ``rejected_key`` count of
    each of ``cameras`` (the rejected maps' WARN names the cameras).
    """
    problems = []
    if compiles:
        problems.append((ERROR, f'{compiles} XLA compiles after warm-up'))
    if period['frames_failed']:
        problems.append((ERROR, f'{period["frames_failed"]} frames failed since the last report '
                                '(an internal error: see the log)'))
    problems += _cloud_problems(period, times, now, lidar_timeout_s, bool(lidars))
    problems += [(WARN, f'LiDAR {name} missing from {period[missing_key(name)]} of '
                        f'{period["processed"]} frames since the last report')
                 for name in lidars if period[missing_key(name)]]
    if recent.p99_ms > latency_budget_ms:
        problems.append((WARN, f'total p99 {recent.p99_ms:.1f} ms over the '
                               f'{latency_budget_ms:g} ms budget (last {recent.seconds:g} s)'))
    problems += [(WARN, f'camera {name} stale (masked): {why}') for name, why in stale]
    if period['overflowed']:
        problems.append((WARN, f'{period["overflowed"]} clouds above the largest bucket '
                               f'({capacity} points), cut to it (overflow_policy)'))
    problems += [(WARN, f'{period[key]} {_spelled(text, lidars)}'
                        + (_by_camera(period, cameras) if key == 'rejected_feature_maps' else ''))
                 for key, text in _PERIOD_WARNINGS if period[key]]
    values = {**{key: counts[key] for key in count_names(lidars, cameras)[0]},
              'compiles_after_warmup': compiles,
              'stale_cameras': ' '.join(name for name, _ in stale),
              'seconds_since_cloud': _age(now, times.last),
              'seconds_since_valid_cloud': _age(now, times.valid)}
    for name, stats in latency.items():
        for q, v in stats.items():
            values[f'{name}_{q}'] = v
    values['total_ms_recent_p99'] = recent.p99_ms
    return Health(max((p[0] for p in problems), default=OK),
                  '; '.join(p[1] for p in problems) or 'OK', values)


def _by_camera(period: Mapping[str, int], cameras: tuple[str, ...]) -> str:
    """Return ' (front 3, rear 1)': the cameras whose maps or images were rejected, how many."""
    named = [f'{name} {period[rejected_key(name)]}' for name in cameras
             if period.get(rejected_key(name))]
    return f' ({", ".join(named)})' if named else ''


def _spelled(text: str, lidars: tuple[str, ...]) -> str:
    """Name the parameters of several LiDARs (lidars.<name>.*) where a warning names lidar.*."""
    return text.replace('the lidar.', 'their lidars.<name>.') if lidars else text


def _cloud_problems(period, times: CloudTimes, now: float, timeout_s: float,
                    sets: bool = False) -> list:
    if times.last is None:
        return [(WARN, 'waiting for the first point cloud')]
    problems = []
    silent = now - (times.valid if times.valid is not None else times.first)
    if silent > timeout_s:
        # Still arriving (within the timeout), later than the last valid one: not once stopped.
        rejected = (times.valid is None or times.last > times.valid) and (
            now - times.last <= timeout_s)
        problems.append((ERROR, f'no valid point cloud for {silent:.2f} s (lidar_timeout_s '
                                f'{timeout_s:g})' + ('; clouds arrive but none is served with a '
                                                     'valid point (rejected, skipped for want '
                                                     'of TF, or all NaN)' if rejected else '')))
    elif times.valid is None:
        problems.append((WARN, 'no valid point cloud yet'))
    rejected, processed, dropped = period['rejected'], period['processed'], period['dropped']
    if dropped > DROPPED_SHARE * (dropped + processed):
        unit = 'frames' if sets else 'clouds'
        problems.append((WARN, f'{dropped} of {dropped + processed} {unit} dropped since the '
                               'last report: the node is slower than the LiDAR (latest wins)'))
    # The clouds taken besides the rejected: served, replaced unserved, skipped for want of
    # TF, or failed. Only when there is none was every cloud rejected.
    others = processed + dropped + period['frames_without_tf'] + period['frames_failed']
    if rejected and not others:
        problems.append((ERROR, f'all {rejected} clouds since the last report rejected'))
    elif rejected and sets:     # processed counts frames, each of several clouds
        problems.append((WARN, f'{rejected} clouds rejected since the last report '
                               f'({processed} frames processed)'))
    elif rejected:
        problems.append((WARN, f'{rejected} of {rejected + others} clouds since the last '
                               'report rejected'))
    return problems


def _age(now: float, then: float | None) -> str:
    """Seconds since ``then`` as a decimal string; 'inf' when there was none."""
    # A cloud may land between the report's clock read and its look at the times: never -0.00.
    return 'inf' if then is None else f'{max(now - then, 0.0):.2f}'
