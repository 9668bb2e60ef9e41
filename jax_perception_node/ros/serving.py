"""
The node's serving core, shared by the plain node and the managed (lifecycle) node.

``PerceptionCore`` is composed into an rclpy node and does everything the node does, in steps
that map onto the ROS 2 lifecycle: ``declare`` (parameters and the parameter callback),
``configure`` (validate, build and warm the pipeline, create publishers), ``activate``
(subscriptions, diagnostics timer, worker), ``deactivate`` (stop serving, counters kept) and
``cleanup`` (release publishers and pipeline). The plain node runs the first three at start-up.
Latest wins, the worker (``frame_worker.py``), several LiDARs (``lidars.names``, sets closed by
the worker), images decoded on a pool (``camera_decode_pool.py``), live parameters and health:
docs/design.md ("One frame, end to end", "Several LiDARs") and docs/users.md.
"""

from dataclasses import replace
import functools
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, PointCloud2
from std_msgs.msg import Header
from tf2_msgs.msg import TFMessage

from .frame_warnings import LogThrottle, ready_line, RESETS, THROTTLE_S, warn_frame
from .frame_worker import FrameWorker
from .health import assess, CloudTimes, count_names, frame_counts, RecentLatency, rejected_key
from .input_graph import InputGraph
from .node_outputs import FrameOutputs
from .node_params import declare_parameters, read_parameters, refusal_reason
from .sensor_inputs import subscribe_cameras, subscribe_lidars, subscribe_tf
from ..core.pipeline import BevPipeline
from ..frames.camera_decode_pool import CameraDecodePool
from ..frames.frame_path import FramePath, uses_tf
from ..frames.latency import format_value, LatencyWindow
from ..frames.lidar_sets import LidarSet, LidarSets
from ..geometry.odometry import OdometryError
from ..geometry.stamps import split_ns, stamp_fields_error, stamp_ns, stamp_refused
from ..geometry.transforms import TransformError
from ..outputs.grid_map import GridMapLayers
from ..sensors.camera import CameraInfoError, FeatureMapError, UncalibratedCameraInfo
from ..sensors.cloud import CloudFormatError
from ..settings.config import config_from_parameters
from ..settings.live_params import changed_intrinsics, check_update, is_ours, set_live_line
from ..settings.parameters import ConfigError

IDLE_WAIT_S = 0.1       # the worker looks at the stop flag at least this often


class PerceptionCore:
    """Parameters, pipeline, subscriptions, worker and diagnostics of one node; see module doc."""

    def __init__(self, node, create_publisher, destroy_publisher):
        """``create_publisher`` / ``destroy_publisher``: the node's (lifecycle) publisher API."""
        self.node = node
        self._create_publisher, self._destroy_publisher = create_publisher, destroy_publisher
        self.values: dict = {}
        self.cfg = self.pipe = self.path = self.window = self.outputs = None
        self.counts, self._period = (dict.fromkeys(keys, 0) for keys in count_names())
        self._times = CloudTimes()
        self._stale: tuple[tuple[str, str], ...] = ()   # (camera, why) masked last frame
        self._lock = threading.Lock()        # counts, times, pending cloud, LiDAR sets, window
        self._sets: LidarSets | None = None  # with lidars.names: the sets being collected
        self._wake = threading.Event()
        self._pending = self._worker = self._timer = self._decoders = self._graph = None
        self._subscriptions, self._tf_subscriptions, self._diagnostics_pub = [], [], None
        self._warnings = LogThrottle()

    @property
    def log(self):
        """Return the node's logger."""
        return self.node.get_logger()

    # -- lifecycle steps -----------------------------------------------------------------------

    def declare(self) -> None:
        """Declare every parameter, then install the parameter callback."""
        declare_parameters(self.node)
        self.node.add_on_set_parameters_callback(self._on_set_parameters)

    def configure(self) -> None:
        """Validate the parameters, build and warm the pipeline; raises ConfigError."""
        values, started = read_parameters(self.node), time.perf_counter()
        cfg = config_from_parameters(values)
        pipe = BevPipeline(cfg)
        layers = GridMapLayers.for_pipeline(cfg, pipe)    # ConfigError before the warm-up
        times = pipe.warmup()
        self.log.info('warm-up: ' + ', '.join(f'{k} {v * 1e3:.0f} ms' for k, v in times.items())
                      + f'; total {time.perf_counter() - started:.2f} s'
                      + (f', cache {pipe.cache_dir} ({pipe.store.hits} loaded, '
                         f'{pipe.store.misses} compiled)' if pipe.cache_dir else ', no cache'))
        for refusal in pipe.store.refused:   # entries or folders refused, an unwritable store
            self.log.warning(f'executable store: {refusal}')
        self.values, self.cfg, self.pipe = values, cfg, pipe
        self.path = FramePath(cfg, pipe)
        self._decoders = CameraDecodePool() if cfg.camera_images else None    # maps: inline
        names = tuple(lidar.name for lidar in cfg.lidars)
        with self._lock:
            self._sets = LidarSets(names, cfg.lidar_stamp_tolerance_s,
                                   cfg.max_lidar_delay_s) if names else None
            totals, per_report = count_names(names, pipe.camera_names)    # kept on re-configure
            self.counts = {**dict.fromkeys(totals, 0), **self.counts}
            self._period = {**dict.fromkeys(per_report, 0), **self._period}
        self.window = LatencyWindow(cfg.diagnostics.window, cfg.diagnostics.latency_window_s)
        self.outputs = FrameOutputs(self._create_publisher, layers, pipe.head_classes,
                                    cfg.output_bev_features, cfg.output,
                                    self.node.resolve_topic_name, self.log.warning,
                                    self.node.get_fully_qualified_name())
        self._diagnostics_pub = self._create_publisher(DiagnosticArray, '/diagnostics',
                                                       QoSProfile(depth=5))

    def activate(self) -> None:
        """
        Subscribe (only now: no frame can meet an unwarmed bucket) and start the worker.

        Raises ConfigError for a diagnostics period rclpy cannot time; anything failing here is
        undone (``deactivate``) before it is raised: nothing is left half started.
        """
        try:
            self._graph = InputGraph(self.node, self.path)     # its first check: subscribed
            self._timer = self._make_timer(self.cfg.diagnostics.period_s)
            self._subscriptions = subscribe_lidars(
                self.node, () if self._sets is None else self._sets.names, self._on_cloud,
                self._on_lidar_cloud, self._on_odometry)
            self._subscriptions += subscribe_cameras(
                self.node, self.pipe.camera_names, self.cfg.camera_images, self._on_features,
                self._on_camera_info)
            self._subscribe_tf()
            with self._lock:
                self._times = CloudTimes()    # the LiDAR timeout counts from these clouds
                self._stale, self._period = (), dict.fromkeys(self._period, 0)  # none of the last
                if self._sets is not None:
                    self._sets.reset()        # no set of an earlier activation is completed
            self.outputs.start()
            self._worker = FrameWorker(self._serve)
        except BaseException:
            self.deactivate()
            raise
        self.log.info(ready_line(self.pipe, tuple(
            sub.topic_name for sub in self._subscriptions if sub.msg_type is PointCloud2)))

    def deactivate(self) -> None:
        """Stop serving: no subscriptions, no timer; the frame in progress finishes first."""
        for sub in self._subscriptions + self._tf_subscriptions:
            self.node.destroy_subscription(sub)
        self._subscriptions, self._tf_subscriptions = [], []
        if self._timer is not None:
            self.node.destroy_timer(self._timer)
            self._timer = None
        if self._decoders is not None:
            self._decoders.wait()       # no image taken in after this, into any buffer
        if self._worker is not None:
            self._worker.stop(self.log)
            self._worker = None
        with self._lock:
            self._bump('dropped', self._pending is not None)    # never served: latest wins
            self._pending = None
            if self._sets is not None:
                if self._sets.flush(time.monotonic()) is not None:
                    self._bump('dropped')     # a set still waiting for its other LiDARs
                self._sets.reset()

    def cleanup(self) -> None:
        """Release the publishers and the pipeline; what a failed configure built, too."""
        if self.outputs is not None:
            self.outputs.destroy(self._destroy_publisher)
        if self._diagnostics_pub is not None:
            self._destroy_publisher(self._diagnostics_pub)
        self.outputs = self._diagnostics_pub = self.pipe = self.path = self.window = None
        self.close_decoders()
        with self._lock:
            self._sets = None

    def close_decoders(self) -> None:
        """Finish the image decodes submitted and stop their threads (cleanup, node's end)."""
        decoders, self._decoders = self._decoders, None
        if decoders is not None:
            decoders.close()

    def _subscribe_tf(self) -> None:
        """Subscribe to /tf_static and /tf once the configuration needs them (kept after)."""
        if self._tf_subscriptions or not uses_tf(self.cfg):
            return
        self._tf_subscriptions = subscribe_tf(self.node, self._on_transforms)

    def _make_timer(self, period_s: float):
        # Diagnostics run on the steady clock: a paused sim clock must not hide a dead LiDAR.
        try:
            return self.node.create_timer(period_s, self._publish_diagnostics,
                                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        except (TypeError, ValueError, OverflowError):    # rclpy's answers to a huge period
            raise ConfigError(f'diagnostics.period_s: {period_s:g} s is longer than a ROS '
                              'timer can wait') from None

    # -- parameters, calibration (executor thread) ---------------------------------------------

    def _on_set_parameters(self, params) -> SetParametersResult:
        """Apply a parameter set at once or refuse it whole; no exception ever leaves here."""
        changes = {p.name: p.value for p in params}
        if self.pipe is None or not any(map(is_ours, changes)):    # qos_overrides: rclpy's
            return SetParametersResult(successful=True)   # configure() validates them
        try:
            values, cfg = check_update(self.values, changes)
            self._apply(cfg, changes)
        except ConfigError as exc:
            reason = refusal_reason(changes, exc)
        except Exception as exc:    # noqa: B902 - rclpy would answer with a traceback
            reason = f'unexpected error: {exc!r}'
            self.log.error(f'parameter change {sorted(changes)} failed: {reason}')
        else:
            self.values = values
            self.log.info(set_live_line(changes))
            return SetParametersResult(successful=True)
        self.log.warning(f'parameter change refused: {reason}')
        return SetParametersResult(successful=False, reason=reason)

    def _apply(self, cfg, changes: dict) -> None:
        """Apply a checked config whole; ConfigError leaves everything as it was."""
        layers = GridMapLayers.for_pipeline(cfg, self.pipe)   # cameras.channel_names is live
        timer = None
        if cfg.diagnostics.period_s != self.cfg.diagnostics.period_s and self._timer is not None:
            timer = self._make_timer(cfg.diagnostics.period_s)
        try:
            self.path.update(cfg, changed_intrinsics(changes), changes.keys())
        except BaseException:
            if timer is not None:
                self.node.destroy_timer(timer)
            raise
        if timer is not None:
            self.node.destroy_timer(self._timer)
            self._timer = timer
        diagnostics = cfg.diagnostics
        with self._lock:
            if diagnostics.window != self.cfg.diagnostics.window:
                self.window = LatencyWindow(diagnostics.window, diagnostics.latency_window_s)
            self.window.seconds = diagnostics.latency_window_s
        if self._sets is not None:      # the pending set's deadline moves with max_delay_s
            with self._lock:
                self._sets.tolerance_ns = int(round(cfg.lidar_stamp_tolerance_s * 1e9))
                self._sets.max_delay_s = cfg.max_lidar_delay_s
            self._wake.set()
        self.cfg = cfg
        self.outputs.update(layers, cfg.output_bev_features, cfg.output)
        if self._subscriptions:     # active: a switch to TF subscribes at once
            self._subscribe_tf()

    def _on_camera_info(self, name: str, msg: CameraInfo) -> None:
        try:
            intrinsics = self.path.apply_camera_info(name, msg)
        except UncalibratedCameraInfo as exc:    # camera_info_manager without a file: no fault
            self._warnings.once(self.log, f'camera {name}: CameraInfo', exc)
            return
        except (CameraInfoError, ConfigError) as exc:
            self._count('rejected_camera_info')
            self._warnings.refused(self.log, f'camera {name}: CameraInfo rejected', exc)
            return
        if intrinsics is None:
            return
        self._count('camera_info_applied')
        self.log.info(f'camera {name}: intrinsics from CameraInfo ({msg.width} x {msg.height}) '
                      'at feature-map resolution: fx {:.4g}, fy {:.4g}, cx {:.4g}, cy {:.4g}'
                      .format(*intrinsics[:4]))

    # -- inputs (executor thread): cheap, never block on a frame -------------------------------

    def _on_cloud(self, msg: PointCloud2) -> None:
        arrived, now = time.perf_counter(), time.monotonic()
        # The clock at arrival: a /clock gone back since (a bag's loop) must not judge the cloud.
        clock_ns = self.node.get_clock().now().nanoseconds
        with self._lock:
            self._received(now)
            self._put(msg, arrived, clock_ns)
        self._wake.set()

    def _on_lidar_cloud(self, name: str, msg: PointCloud2) -> None:
        """Add a cloud of LiDAR ``name`` to the sets; a set it closes becomes the pending item."""
        now, stamp = time.monotonic(), stamp_ns(msg.header.stamp)
        # Refused before the sets: taken, its stamp would make the others' clouds late for it.
        clock = self.node.get_clock()
        now_ns = clock.now().nanoseconds     # 0: sim time not started, nothing to judge by
        refused = stamp_fields_error(msg.header.stamp) or stamp_refused(stamp, now_ns or None)
        arrived = None if clock.ros_time_is_active else now_ns  # /clock lags: no referee
        with self._lock:
            self._received(now)
            if self._sets is None:      # cleaned up meanwhile
                return
            self._bump('rejected', refused is not None)
            for done in self._sets.add(name, stamp, msg, now, arrived) if refused is None else ():
                self._put(done, time.perf_counter(), now_ns)
            self._bump('late_lidar_clouds', self._sets.take_late())
            for news in self._sets.take_news():
                self.log.warning(news)
        if refused is not None:
            self._warnings.refused(self.log, f'LiDAR {name}: cloud rejected', refused)
        self._wake.set()     # a new pending set moves the deadline the worker waits for

    def _received(self, now: float) -> None:
        """Count a cloud and its time (under the lock)."""
        self._bump('received')
        first = self._times.first
        self._times = replace(self._times, first=now if first is None else first, last=now)

    def _put(self, item, arrived: float, clock_ns: int) -> None:
        """Make a cloud or closed set pending, latest wins (under the lock); the clock then."""
        if self._pending is not None:
            self._bump('dropped')
        self._pending = (item, arrived, clock_ns)

    def _on_odometry(self, msg: Odometry) -> None:
        if self._take(lambda: self.path.add_odometry(msg), 'odometry_received',
                      ('rejected_odometry',), 'odometry rejected', OdometryError):
            self._warnings.reset(self.log, RESETS['odometry'])

    def _on_transforms(self, msg: TFMessage, static: bool, topic: str) -> None:
        self._take(lambda: self.path.add_transforms(msg, static), 'transforms_received',
                   ('rejected_transforms',), topic, TransformError)

    def _on_features(self, name: str, msg) -> None:
        """Take a feature map, or (decoded on the pool) an Image or CompressedImage."""
        take = functools.partial(self._take_features, self.path, name, msg)
        if self._decoders is None:
            take()
        elif not self._decoders.submit(name, take, key=msg.header.stamp):
            self._count('feature_maps_received')    # the other transport's copy, skipped

    def _take_features(self, path: FramePath, name: str, msg) -> None:
        what = 'image' if path.cfg.camera_images else 'feature map'    # counted as maps
        if self._take(lambda: path.add_features(name, msg), 'feature_maps_received',
                      ('rejected_feature_maps', rejected_key(name)),
                      f'camera {name}: {what} rejected', FeatureMapError):
            self._warnings.reset(self.log, f'camera {name}: ' + RESETS['camera'])

    def _take(self, accept, taken: str, refused: tuple[str, ...], what: str, error: type):
        """Run ``accept()`` and count the message as ``taken``, or in ``refused`` with a log."""
        try:
            result = accept()
        except error as exc:
            self._count(*refused)
            self._warnings.refused(self.log, what, exc)
            return None
        except Exception as exc:    # noqa: B902 - a bug taking one message: said, serve on
            self.log.error(f'{what}: unexpected error {exc!r}')
            return None
        self._count(taken)
        return result

    def _bump(self, key: str, n: int = 1) -> None:
        """Add to a total and, for the per-report rules, to its count since the last report."""
        self.counts[key] += n
        if key in self._period:
            self._period[key] += n

    def _count(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._bump(key)

    # -- worker thread -------------------------------------------------------------------------

    def _serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._wake.wait(timeout=self._wait_s())
            with self._lock:
                if self._sets is not None:
                    done = self._sets.due(time.monotonic())
                    if done is not None:       # its wait ended: served without the others
                        self._put(done, time.perf_counter(),
                                  self.node.get_clock().now().nanoseconds)
                item, self._pending = self._pending, None
                self._wake.clear()
            if item is not None:
                try:
                    self._process(*item)
                except Exception as exc:    # noqa: B902 - a bug must not kill the node silently
                    self._count('frames_failed')
                    if self._warnings.due('frame failed', THROTTLE_S):
                        self.log.error(f'frame failed: {exc!r}')

    def _wait_s(self) -> float:
        """Return how long the worker may wait: until the pending set's deadline at most."""
        with self._lock:
            end = None if self._sets is None else self._sets.deadline()
        return IDLE_WAIT_S if end is None else min(IDLE_WAIT_S, max(0.0, end - time.monotonic()))

    def _process(self, clouds: PointCloud2 | LidarSet, arrived: float, clock_ns: int) -> None:
        decoders = self._decoders       # read once: cleanup may clear it meanwhile
        if decoders is not None:
            decoders.wait()             # the images that arrived before are in the buffers
        several = isinstance(clouds, LidarSet)
        try:
            # A set's clouds were checked as they arrived; 0: a sim clock not started.
            frame = self.path.process(clouds, picture=self.outputs.wants_picture(),
                                      features=self.outputs.wants_features(),
                                      now_ns=None if several else clock_ns or None)
        except CloudFormatError as exc:
            with self._lock:
                self._bump('rejected', len(clouds.clouds) if several else 1)
            self._warnings.refused(self.log, 'LiDAR set rejected' if several else
                                   'point cloud rejected', exc)
            return
        except TransformError as exc:
            self._count('frames_without_tf')
            self._warnings.refused(self.log, 'point cloud skipped', exc)
            return
        warn_frame(self.log, self.cfg, frame, self._warnings)
        header = Header(frame_id=frame.grid.frame_id)
        header.stamp.sec, header.stamp.nanosec = split_ns(frame.stamp_ns)
        record = self.outputs.publish(frame, header, arrived, frame.grid, self.node.get_clock(),
                                      clock_ns)
        now = time.monotonic()
        with self._lock:
            for key, n in frame_counts(frame).items():
                self._bump(key, n)
            if not frame.empty:     # published, but no sign of a working LiDAR
                self._times = replace(self._times, valid=now)
            self._stale = tuple(zip(frame.stale, frame.stale_reasons))
            self.window.add(record, now)

    # -- diagnostics ---------------------------------------------------------------------------

    def diagnostic_status(self) -> DiagnosticStatus:
        """Roll up counts, latency percentiles, level and reason into one status (health.py)."""
        diagnostics = self.cfg.diagnostics
        node_name = self.node.get_fully_qualified_name()
        now = time.monotonic()
        with self._lock:
            counts, period, times = dict(self.counts), self._period, self._times
            self._period = dict.fromkeys(self._period, 0)
            latency = {key: self.window.stats(key) for key in ('total_ms', 'age_ms')}
            recent = RecentLatency(self.window.recent_total(now)['p99'], self.window.seconds)
            stale = self._stale
        health = assess(counts, period, times, now, latency, stale,
                        self.pipe.compiles_after_warmup, self.pipe.padder.capacity,
                        diagnostics.lidar_timeout_s, diagnostics.latency_budget_ms, recent,
                        tuple(lidar.name for lidar in self.cfg.lidars), self.pipe.camera_names)
        return DiagnosticStatus(   # level is a ROS byte field: bytes, not int
            level=bytes([health.level]), name=f'{node_name}: pipeline',
            hardware_id=node_name, message=health.message,
            values=[KeyValue(key=k, value=v if isinstance(v, str) else format_value(v))
                    for k, v in health.values.items()])

    def _publish_diagnostics(self) -> None:
        for line in self._graph.check(self._subscriptions + self._tf_subscriptions):
            self.log.warning(line)
        array = DiagnosticArray(status=[self.diagnostic_status()])
        array.header.stamp = self.node.get_clock().now().to_msg()
        self._diagnostics_pub.publish(array)
