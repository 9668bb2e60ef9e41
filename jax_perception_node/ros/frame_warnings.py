"""
The node's log lines: about a processed frame, a refused input, and that the node is ready.

A frame's lines say what it lacked, or what was left out of it. No ROS import: the node passes
its logger. The same warning every frame would be noise, so each is throttled, by
:class:`LogThrottle` before the logger is called: rclpy's own ``throttle_duration_sec`` finds
its call site with ``inspect`` on every call, logged or not (about 0.25 ms a frame in the node
while a cloud lacked its time field, measured with py-spy on this project's 2-core AMD EPYC),
and would throttle refused inputs, which share one call site, as one (one camera's refusals
would hide another's). A warning about a LiDAR's fields names its parameter:
``lidar.intensity_field`` for the one LiDAR, ``lidars.<name>.intensity_field`` for one of
several (``Frame.intensity_key``, ``Frame.time_key``).
"""

import math
import time

from ..frames.frame_path import Frame
from ..sensors.cloud import MAX_SWEEP_S, SWEEP_SHARE
from ..settings.config import PipelineConfig

THROTTLE_S = 2.0        # a refused input's reason is logged at most this often, per input
# The INFO lines of an input's reset (LogThrottle.reset), a camera's after its name.
RESETS = {'odometry': 'odometry: stamp went backwards or the pose jumped: buffer reset',
          'camera': 'stamp went backwards, its buffer was reset'}


class LogThrottle:
    """
    The node's throttled log lines: at most one per key in each period (monotonic time).

    Called from the executor, the frame and the image-decode threads: a race at worst logs a
    line twice.
    """

    def __init__(self):
        self._last: dict[str, float] = {}

    def due(self, key: str, period_s: float) -> bool:
        """Return whether ``key`` may log now (not in the last ``period_s``); if so, note it."""
        now = time.monotonic()
        if now - self._last.get(key, -math.inf) >= period_s:
            self._last[key] = now
            return True
        return False

    def refused(self, log, what: str, reason) -> None:
        """Log ``what: reason`` unless ``what`` was logged in the last ``THROTTLE_S``."""
        if self.due(what, THROTTLE_S):
            log.warning(f'{what}: {reason}')

    def reset(self, log, what: str) -> None:
        """Log an input's reset ``what`` at INFO unless logged in the last ``THROTTLE_S``."""
        # A bag loop resets once; two sources on one topic would reset on every other message.
        if self.due(what, THROTTLE_S):
            log.info(what)

    def once(self, log, what: str, reason) -> None:
        """Log ``what: reason`` at INFO the first time only (a state, not a fault)."""
        if what not in self._last:
            self._last[what] = math.inf
            log.info(f'{what}: {reason}')


def ready_line(pipe, clouds: tuple[str, ...]) -> str:
    """
    Return the line that says the node serves: its grid, channels, cameras and inputs.

    ``clouds``: the resolved topics of its point cloud subscriptions (a remap that renamed
    nothing, as an unquoted ``-r ~/input/...`` in a shell, shows here).
    """
    return (f'ready: {pipe.height} x {pipe.width} grid, {pipe.output_channels} channels, '
            f'cameras {list(pipe.camera_names)}, point clouds on {", ".join(clouds)}'
            + (f', {pipe.num_sweeps} sweeps, {_pose_source(pipe.cfg)}' if pipe.num_sweeps > 1
               else ''))


def _pose_source(cfg: PipelineConfig) -> str:
    """Where the accumulated sweeps' poses come from, as the ready line says it."""
    if cfg.accumulation.pose_source == 'odometry':
        return 'poses on ~/input/odometry'
    return f'poses from TF ({cfg.accumulation.fixed_frame} -> {cfg.grid.frame_id})'


def warn_frame(log, cfg: PipelineConfig, frame: Frame, throttle: LogThrottle) -> None:
    """Log what ``frame`` lacked on ``log`` (an rclpy logger), under the configuration ``cfg``."""
    if frame.stamps_jumped:
        throttle.reset(log, 'LiDAR stamp went backwards (bag loop?): camera buffers reset')
    if frame.lidars_refused and throttle.due('lidars refused', THROTTLE_S):
        log.warning('point cloud rejected, left out of its set: '
                    + '; '.join(f'LiDAR {reason}' for reason in frame.lidars_refused))
    by_key = {lidar.key: lidar for lidar in cfg.lidar_sensors}
    if frame.fields_without_intensity and throttle.due('no intensity', 10.0):
        lidar = by_key[frame.intensity_key]
        log.warning(f'point cloud has no field "{lidar.intensity_field}" '
                    f'({lidar.key}.intensity_field): intensity read as 0; its fields are '
                    f'{list(frame.fields_without_intensity)}')
    if frame.off_scale is not None and throttle.due('off scale', 10.0):
        log.warning('point cloud intensities read off the scale the head was trained on: '
                    + frame.off_scale.advice())
    lidar = by_key.get(frame.time_key)
    timing = lidar.timing if frame.fields_without_time else None
    if timing is not None and timing.field in frame.fields_without_time:
        if throttle.due('no sweep times', 10.0):
            read = 'offsets from the stamp' if timing.reference == 'stamp' else 'absolute'
            log.warning(f'point cloud "{timing.field}" times ({timing.unit}, {read}) are no '
                        f"sweep's (not {SWEEP_SHARE:.0%} of them within {MAX_SWEEP_S:g} s of "
                        f'the stamp, or all equal): check {lidar.key}.time_reference and '
                        f'{lidar.key}.time_unit, or that the driver fills it; not deskewed')
    elif timing is not None:
        if throttle.due('no time field', 10.0):
            log.warning(f'point cloud has no field "{timing.field}" ({lidar.key}.time_field): '
                        f'not deskewed; its fields are {list(frame.fields_without_time)}')
    elif frame.without_motion and throttle.due('no ego motion', 10.0):
        log.warning(f'no ego motion at the cloud stamp from {cfg.accumulation.pose_source} '
                    '(accumulation.pose_source): not deskewed')
    # Once per refused set of poses; a moving edge: throttled.
    if frame.slots_refusal and throttle.due('slots refused', 5.0):
        log.warning(f'TF poses of {", ".join(frame.cameras_over_slots)} not applied, '
                    f'cameras masked: {frame.slots_refusal}')
