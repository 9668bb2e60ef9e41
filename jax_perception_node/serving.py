"""
The node's serving core, shared by the plain node and the managed (lifecycle) node.

``PerceptionCore`` is composed into an rclpy node and does everything the node does, in steps
that map onto the ROS 2 lifecycle: ``declare`` (parameters and the parameter callback),
``configure`` (validate, build and warm the pipeline, create publishers), ``activate``
(subscriptions, diagnostics timer, worker), ``deactivate`` (stop serving, counters kept) and
``cleanup`` (release publishers and pipeline). The plain node runs the first three at start-up.

Subscription callbacks only store the newest cloud (latest wins: a cloud that arrives while
another waits replaces it and counts as dropped); a worker thread decodes, computes and
publishes, so a slow frame never queues up latency. Calibration changes (live parameters,
CameraInfo) and frames take turns on the pipeline, so a frame never sees half a calibration.
With accumulation (``accumulation.num_sweeps`` > 1) the node also subscribes to
``~/input/odometry``; bad odometry is refused and counted, a frame without a pose uses its own
sweep only, and both show in /diagnostics as a WARN.
"""

import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.qos import qos_profile_sensor_data, QoSProfile
from sensor_msgs.msg import CameraInfo, Image, PointCloud2

from .camera import (byte_array, CameraInfoError, FeatureMapError, features_image_fields,
                     scale_camera_info, with_intrinsics)
from .cloud import CloudFormatError
from .config import config_from_parameters, ConfigError
from .frame_path import FramePath, rgb_image_fields
from .latency import format_value, FRAME_KEYS, LatencyWindow
from .live_params import changed_intrinsics, check_update
from .node_params import declare_parameters, read_parameters
from .odometry import OdometryError
from .pipeline import BevPipeline

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
COUNTS = ('received', 'processed', 'dropped', 'rejected', 'feature_maps_received',
          'rejected_feature_maps', 'rejected_camera_info', 'camera_info_applied', 'overflowed',
          'nonfinite_features', 'odometry_received', 'rejected_odometry',
          'frames_without_odometry')


class PerceptionCore:
    """Parameters, pipeline, subscriptions, worker and diagnostics of one node; see module doc."""

    def __init__(self, node, create_publisher, destroy_publisher):
        """``create_publisher`` / ``destroy_publisher``: the node's (lifecycle) publisher API."""
        self.node = node
        self._create_publisher, self._destroy_publisher = create_publisher, destroy_publisher
        self.values: dict = {}
        self.cfg = self.pipe = self.path = self.window = None
        self.cameras, self.lidar = (), None
        self._info_intrinsics: dict[str, tuple] = {}
        self.counts = dict.fromkeys(COUNTS, 0)
        self._stale: tuple[str, ...] = ()
        self._since_report = dict.fromkeys(
            ('overflowed', 'nonfinite', 'camera_info', 'odometry', 'without_odometry'), 0)
        self._last_cloud = time.monotonic()
        self._lock = threading.Lock()        # counts, pending cloud, camera buffer, window
        self._pipe_lock = threading.Lock()   # one frame or one calibration change at a time
        self._pending = None
        self._wake, self._stop = threading.Event(), threading.Event()
        self._worker = self._timer = None
        self._subscriptions, self._publishers = [], {}

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
        values = read_parameters(self.node)
        cfg = config_from_parameters(values)
        started = time.perf_counter()
        pipe = BevPipeline(cfg)
        times = pipe.warmup()
        self.log.info('warm-up: ' + ', '.join(f'{k} {v * 1e3:.0f} ms' for k, v in times.items())
                      + f'; total {time.perf_counter() - started:.2f} s'
                      + (f', cache {pipe.cache_dir}' if pipe.cache_dir else ', no cache'))
        self.values, self.cfg, self.pipe = values, cfg, pipe
        self.cameras, self.lidar, self._info_intrinsics = cfg.cameras, cfg.lidar, {}
        self.path = FramePath(cfg, pipe)
        self.window = LatencyWindow(cfg.diagnostics.window)
        reliable = QoSProfile(depth=5)
        self._publishers = {
            'features': self._create_publisher(Image, '~/output/bev_features', reliable),
            'image': self._create_publisher(Image, '~/output/bev_image', reliable),
            'latency': self._create_publisher(DiagnosticArray, '~/debug/latency',
                                              QoSProfile(depth=50)),
            'diagnostics': self._create_publisher(DiagnosticArray, '/diagnostics', reliable),
        }

    def activate(self) -> None:
        """Subscribe (only now: no frame can meet an unwarmed bucket) and start the worker."""
        node = self.node
        subs = [node.create_subscription(PointCloud2, '~/input/pointcloud', self._on_cloud,
                                         qos_profile_sensor_data)]
        for name in self.pipe.camera_names:
            subs.append(node.create_subscription(
                Image, f'~/input/camera/{name}/features',
                lambda msg, name=name: self._on_features(name, msg), qos_profile_sensor_data))
            # Sensor-data QoS matches reliable and best-effort camera drivers alike.
            subs.append(node.create_subscription(
                CameraInfo, f'~/input/camera/{name}/camera_info',
                lambda msg, name=name: self._on_camera_info(name, msg), qos_profile_sensor_data))
        if self.pipe.num_sweeps > 1:
            # Sensor-data QoS matches reliable and best-effort localization publishers alike.
            subs.append(node.create_subscription(Odometry, '~/input/odometry',
                                                 self._on_odometry, qos_profile_sensor_data))
        self._subscriptions = subs
        self._start_timer()
        with self._lock:
            self._last_cloud = time.monotonic()
        self._stop.clear()
        self._worker = threading.Thread(target=self._serve, name='bev_worker', daemon=True)
        self._worker.start()
        pipe = self.pipe
        self.log.info(f'ready: {pipe.height} x {pipe.width} grid, {pipe.output_channels} '
                      f'channels, cameras {list(pipe.camera_names)}'
                      + (f', {pipe.num_sweeps} sweeps on ~/input/odometry'
                         if pipe.num_sweeps > 1 else ''))

    def deactivate(self) -> None:
        """Stop serving: no subscriptions, no timer; the frame in progress finishes first."""
        for sub in self._subscriptions:
            self.node.destroy_subscription(sub)
        self._subscriptions = []
        if self._timer is not None:
            self.node.destroy_timer(self._timer)
            self._timer = None
        if self._worker is not None:
            self._stop.set()
            self._worker.join(timeout=10.0)
            self._worker = None
        with self._lock:
            self._pending = None

    def cleanup(self) -> None:
        """Release the publishers and the pipeline (its executables and device buffers)."""
        for pub in self._publishers.values():
            self._destroy_publisher(pub)
        self._publishers = {}
        self.pipe = self.path = self.window = None

    def _start_timer(self) -> None:
        # Diagnostics run on the steady clock: a paused sim clock must not hide a dead LiDAR.
        self._timer = self.node.create_timer(self.cfg.diagnostics.period_s,
                                             self._publish_diagnostics,
                                             clock=Clock(clock_type=ClockType.STEADY_TIME))

    # -- parameters, calibration (executor thread) ---------------------------------------------

    def _on_set_parameters(self, params) -> SetParametersResult:
        if self.pipe is None:
            return SetParametersResult(successful=True)   # configure() validates them
        changes = {p.name: p.value for p in params}
        try:
            values, cfg = check_update(self.values, changes)
            self._apply(cfg, changed_intrinsics(changes))
        except ConfigError as exc:
            self.log.warning(f'parameter change refused: {exc}')
            return SetParametersResult(successful=False, reason=str(exc))
        self.values = values
        self.log.info('parameters set live: ' + ', '.join(sorted(changes)))
        return SetParametersResult(successful=True)

    def _apply(self, cfg, intrinsics_from_params: set[str]) -> None:
        cameras = cfg.cameras
        for name, intrinsics in list(self._info_intrinsics.items()):
            if name in intrinsics_from_params:
                del self._info_intrinsics[name]   # the newest word wins: this parameter set
            else:
                cameras = with_intrinsics(cameras, name, intrinsics) or cameras
        lidar = cfg.lidar if cfg.lidar != self.lidar else None
        changed_cameras = cameras if cameras != self.cameras else None
        if lidar is not None or changed_cameras is not None:
            with self._pipe_lock:
                self.pipe.set_calibration(lidar, changed_cameras)
        with self._pipe_lock:
            self.pipe.max_sweep_age_s = cfg.accumulation.max_sweep_age_s
        with self._lock:
            self.path.sync.tolerance_ns = int(round(cfg.max_camera_lidar_delay_s * 1e9))
            self.path.odometry.set_max_gap(cfg.accumulation.max_odometry_gap_s)
            if cfg.diagnostics.window != self.cfg.diagnostics.window:
                self.window = LatencyWindow(cfg.diagnostics.window)
        period_changed = cfg.diagnostics.period_s != self.cfg.diagnostics.period_s
        self.cfg, self.cameras, self.lidar = cfg, cameras, cfg.lidar
        if period_changed and self._timer is not None:
            self.node.destroy_timer(self._timer)
            self._start_timer()

    def _on_camera_info(self, name: str, msg: CameraInfo) -> None:
        cam = self.cameras[self.pipe.camera_names.index(name)]
        try:
            intrinsics = scale_camera_info(msg, cam.height, cam.width)
            updated = with_intrinsics(self.cameras, name, intrinsics)
            if updated is None:
                return
            with self._pipe_lock:
                # ConfigError: more lift samples than the slots fixed at warm-up.
                self.pipe.set_calibration(cameras=updated)
        except (CameraInfoError, ConfigError) as exc:
            with self._lock:
                self.counts['rejected_camera_info'] += 1
                self._since_report['camera_info'] += 1
            self.log.warning(f'camera {name}: CameraInfo rejected: {exc}',
                             throttle_duration_sec=2.0)
            return
        self.cameras = updated
        self._info_intrinsics[name] = intrinsics
        with self._lock:
            self.counts['camera_info_applied'] += 1
        self.log.info(f'camera {name}: intrinsics from CameraInfo ({msg.width} x {msg.height}) '
                      'at feature-map resolution: fx {:.4g}, fy {:.4g}, cx {:.4g}, cy {:.4g}'
                      .format(*intrinsics))

    # -- inputs (executor thread): cheap, never block on a frame -------------------------------

    def _on_cloud(self, msg: PointCloud2) -> None:
        arrived = time.perf_counter()
        with self._lock:
            self.counts['received'] += 1
            if self._pending is not None:
                self.counts['dropped'] += 1
            self._pending = (msg, arrived)
            self._last_cloud = time.monotonic()
        self._wake.set()

    def _on_odometry(self, msg: Odometry) -> None:
        try:
            with self._lock:
                self.path.add_odometry(msg)
                self.counts['odometry_received'] += 1
        except OdometryError as exc:
            with self._lock:
                self.counts['rejected_odometry'] += 1
                self._since_report['odometry'] += 1
            self.log.warning(f'odometry rejected: {exc}', throttle_duration_sec=2.0)

    def _on_features(self, name: str, msg: Image) -> None:
        try:
            with self._lock:
                jumped = self.path.add_features(name, msg)
                self.counts['feature_maps_received'] += 1
        except FeatureMapError as exc:
            with self._lock:
                self.counts['rejected_feature_maps'] += 1
            self.log.warning(f'camera {name}: feature map rejected: {exc}',
                             throttle_duration_sec=2.0)
            return
        if jumped:
            self.log.info(f'camera {name}: stamp went backwards, its buffer was reset')

    # -- worker thread -------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._wake.wait(timeout=0.1):
                continue
            with self._lock:
                item, self._pending = self._pending, None
                self._wake.clear()
            if item is not None:
                try:
                    self._process(*item)
                except Exception as exc:    # noqa: B902 - a bug must not kill the node silently
                    self.log.error(f'frame failed: {exc!r}')

    def _process(self, msg: PointCloud2, arrived: float) -> None:
        image_pub = self._publishers['image']
        try:
            frame = self.path.process(msg, picture=image_pub.get_subscription_count() > 0,
                                      buffer_lock=self._lock, pipe_lock=self._pipe_lock)
        except CloudFormatError as exc:
            with self._lock:
                self.counts['rejected'] += 1
            self.log.warning(f'point cloud rejected: {exc}', throttle_duration_sec=2.0)
            return
        if frame.stamps_jumped:
            self.log.info('LiDAR stamp went backwards (bag loop?): camera buffers reset')
        publish_start = time.perf_counter()
        header = msg.header
        header.frame_id = self.cfg.grid.frame_id
        result = frame.result
        self._publishers['features'].publish(
            _image(header, features_image_fields(result.features)))
        if frame.rgb is not None:
            image_pub.publish(_image(header, rgb_image_fields(frame.rgb)))
        age_ms = (self.node.get_clock().now().nanoseconds - frame.stamp_ns) / 1e6
        record = FramePath.finish(frame, publish_start, arrived, age_ms)
        latency = DiagnosticArray(header=header)
        latency.status.append(DiagnosticStatus(
            level=OK, name='jax_perception: frame', hardware_id=self.cfg.grid.frame_id,
            values=[KeyValue(key=k, value=format_value(record[k])) for k in FRAME_KEYS]))
        self._publishers['latency'].publish(latency)
        with self._lock:
            self.counts['processed'] += 1
            self.counts['overflowed'] += result.overflow_points > 0
            self.counts['nonfinite_features'] += result.nonfinite_features
            self.counts['frames_without_odometry'] += frame.without_odometry
            self._since_report['without_odometry'] += frame.without_odometry
            self._since_report['overflowed'] += result.overflow_points > 0
            self._since_report['nonfinite'] += result.nonfinite_features
            self._stale = frame.stale
            self.window.add(record)

    # -- diagnostics ---------------------------------------------------------------------------

    def diagnostic_status(self) -> DiagnosticStatus:
        """Roll up counts, latency percentiles, level and reason into one status."""
        cfg = self.cfg
        with self._lock:
            counts = dict(self.counts)
            total, age = self.window.stats('total_ms'), self.window.stats('age_ms')
            stale, since = self._stale, dict(self._since_report)
            self._since_report = dict.fromkeys(since, 0)
            silent_s = time.monotonic() - self._last_cloud
        compiles = self.pipe.compiles_after_warmup
        problems = []
        if compiles:
            problems.append((ERROR, f'{compiles} XLA compiles after warm-up'))
        if silent_s > cfg.diagnostics.lidar_timeout_s:
            problems.append((ERROR, f'no point cloud for {silent_s:.1f} s'))
        if total['p99'] > cfg.diagnostics.latency_budget_ms:
            problems.append((WARN, f'total p99 {total["p99"]:.1f} ms over the '
                                   f'{cfg.diagnostics.latency_budget_ms:g} ms budget'))
        for name in stale:
            problems.append((WARN, f'camera {name} stale (masked)'))
        if since['overflowed']:
            problems.append((WARN, f'{since["overflowed"]} clouds above the largest bucket '
                                   f'({self.pipe.padder.capacity} points), subsampled'))
        if since['nonfinite']:
            problems.append((WARN, f'{since["nonfinite"]} non-finite feature values zeroed'))
        if since['camera_info']:
            problems.append((WARN, f'{since["camera_info"]} CameraInfo messages rejected'))
        if since['odometry']:
            problems.append((WARN, f'{since["odometry"]} odometry messages rejected'))
        if since['without_odometry']:
            problems.append((WARN, f'{since["without_odometry"]} frames without odometry '
                                   '(current sweep only)'))
        level = max((p[0] for p in problems), default=OK)
        values = {**counts, 'compiles_after_warmup': compiles,
                  'stale_cameras': ' '.join(stale), 'seconds_since_cloud': f'{silent_s:.2f}'}
        for name, stats in (('total_ms', total), ('age_ms', age)):
            for q, v in stats.items():
                values[f'{name}_{q}'] = v
        return DiagnosticStatus(
            level=level, name='jax_perception: pipeline', hardware_id=cfg.grid.frame_id,
            message='; '.join(p[1] for p in problems) or 'OK',
            values=[KeyValue(key=k, value=v if isinstance(v, str) else format_value(v))
                    for k, v in values.items()])

    def _publish_diagnostics(self) -> None:
        array = DiagnosticArray()
        array.header.stamp = self.node.get_clock().now().to_msg()
        array.status.append(self.diagnostic_status())
        self._publishers['diagnostics'].publish(array)


def _image(header, fields: dict) -> Image:
    msg = Image(header=header, height=fields['height'], width=fields['width'],
                encoding=fields['encoding'], is_bigendian=fields['is_bigendian'],
                step=fields['step'])
    msg.data = byte_array(fields['data'])
    return msg
