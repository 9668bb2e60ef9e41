"""
The ROS 2 node: PointCloud2 and camera feature maps in, fused BEV and latency out.

Thin by design: parameters -> PipelineConfig, messages -> NumPy, ``BevPipeline.process``,
NumPy -> messages. Subscription callbacks only store the newest cloud (latest wins: a cloud
that arrives while another waits replaces it and counts as dropped); a worker thread does the
decoding, compute and publishing, so a slow frame never queues up latency.
"""

import signal
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data, QoSProfile
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import Image, PointCloud2

from .camera import byte_array, FeatureMapError, features_image_fields, read_features
from .cloud import CloudFormatError, read_points
from .config import (CAMERA_PARAMETERS, config_from_parameters, ConfigError, parameter_type,
                     PARAMETERS)
from .latency import format_value, FRAME_KEYS, LatencyWindow
from .pipeline import BevPipeline
from .render import bev_to_rgb
from .sync import CameraSync

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR


def stamp_ns(stamp) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class JaxPerceptionNode(Node):
    """Node ``jax_perception``: warms every bucket, then subscribes and serves frames."""

    def __init__(self, **kwargs):
        super().__init__('jax_perception', **kwargs)
        self.cfg = config_from_parameters(self._declare_parameters())
        log = self.get_logger()
        started = time.perf_counter()
        self.pipe = BevPipeline(self.cfg)
        times = self.pipe.warmup()
        log.info('warm-up: ' + ', '.join(f'{k} {v * 1e3:.0f} ms' for k, v in times.items())
                 + f'; total {time.perf_counter() - started:.2f} s'
                 + (f', cache {self.pipe.cache_dir}' if self.pipe.cache_dir else ', no cache'))

        self.sync = CameraSync(self.pipe.camera_names, self.cfg.max_camera_lidar_delay_s)
        self.window = LatencyWindow(self.cfg.diagnostics.window)
        self.counts = dict.fromkeys(('received', 'processed', 'dropped', 'rejected',
                                     'rejected_feature_maps', 'overflowed',
                                     'nonfinite_features'), 0)
        self._stale: tuple[str, ...] = ()
        self._overflow_since_report = 0
        self._nonfinite_since_report = 0
        self._last_cloud = time.monotonic()
        self._lock = threading.Lock()
        self._pending = None
        self._wake = threading.Event()
        self._stop = threading.Event()

        reliable = QoSProfile(depth=5)
        self.pub_features = self.create_publisher(Image, '~/output/bev_features', reliable)
        self.pub_image = self.create_publisher(Image, '~/output/bev_image', reliable)
        self.pub_latency = self.create_publisher(DiagnosticArray, '~/debug/latency',
                                                 QoSProfile(depth=50))
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', QoSProfile(depth=5))
        # Subscriptions only after warm-up: no frame can ever meet an unwarmed bucket.
        self.create_subscription(PointCloud2, '~/input/pointcloud', self._on_cloud,
                                 qos_profile_sensor_data)
        for name in self.pipe.camera_names:
            self.create_subscription(
                Image, f'~/input/camera/{name}/features',
                lambda msg, name=name: self._on_features(name, msg), qos_profile_sensor_data)
        # Diagnostics run on the steady clock: a paused sim clock must not hide a dead LiDAR.
        self.create_timer(self.cfg.diagnostics.period_s, self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._worker = threading.Thread(target=self._serve, name='bev_worker', daemon=True)
        self._worker.start()
        log.info(f'ready: {self.pipe.height} x {self.pipe.width} grid, '
                 f'{self.pipe.output_channels} channels, cameras {list(self.pipe.camera_names)}')

    def _declare_parameters(self) -> dict:
        """Declare every parameter with its description; returns the flat values."""
        def declare(name, default, description):
            constraint = f'type {parameter_type(name)}, checked by the node at start-up'
            if default == []:
                # An empty list has no type of its own; a camera list is strings.
                descriptor = ParameterDescriptor(description=description,
                                                 additional_constraints=constraint)
                default = Parameter.Type.STRING_ARRAY
            else:
                # Types are checked by config_from_parameters, which names the key; static
                # typing would reject `fx: 40` for a double with a less helpful message.
                descriptor = ParameterDescriptor(description=description, dynamic_typing=True,
                                                 additional_constraints=constraint)
            return self.declare_parameter(name, default, descriptor).value

        values = {key: declare(key, default, text)
                  for key, (default, text) in PARAMETERS.items()}
        for camera in values['cameras.names'] or []:
            for key, text in CAMERA_PARAMETERS.items():
                values[f'cameras.{camera}.{key}'] = declare(f'cameras.{camera}.{key}', None, text)
        # rclpy hands arrays back as array.array or lists; config wants plain lists.
        return {k: list(v) if hasattr(v, 'tolist') or isinstance(v, tuple) else v
                for k, v in values.items() if v is not None}

    # -- callbacks (executor thread): cheap, never block ---------------------------------------

    def _on_cloud(self, msg: PointCloud2) -> None:
        arrived = time.perf_counter()
        with self._lock:
            self.counts['received'] += 1
            if self._pending is not None:
                self.counts['dropped'] += 1
            self._pending = (msg, arrived)
            self._last_cloud = time.monotonic()
        self._wake.set()

    def _on_features(self, name: str, msg: Image) -> None:
        cam = self.cfg.cameras[self.pipe.camera_names.index(name)]
        try:
            fmap = read_features(msg, cam.height, cam.width, cam.channels)
        except FeatureMapError as exc:
            with self._lock:
                self.counts['rejected_feature_maps'] += 1
            self.get_logger().warning(f'camera {name}: feature map rejected: {exc}',
                                      throttle_duration_sec=2.0)
            return
        with self._lock:
            jumped = self.sync.add(name, stamp_ns(msg.header.stamp), fmap)
        if jumped:
            self.get_logger().info(f'camera {name}: stamp went backwards, its buffer was reset')

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
                    self.get_logger().error(f'frame failed: {exc!r}')

    def _process(self, msg: PointCloud2, arrived: float) -> None:
        started = time.perf_counter()
        try:
            points, num_points = read_points(msg, self.pipe.padder.capacity,
                                             self.cfg.overflow_policy)
        except CloudFormatError as exc:
            with self._lock:
                self.counts['rejected'] += 1
            self.get_logger().warning(f'point cloud rejected: {exc}', throttle_duration_sec=2.0)
            return
        decoded = time.perf_counter()
        stamp = stamp_ns(msg.header.stamp)
        with self._lock:
            pairing, jumped = self.sync.pair(stamp)
        if jumped:
            self.get_logger().info('LiDAR stamp went backwards (bag loop?): camera buffers reset')
        result = self.pipe.process(points, pairing.maps, num_points=num_points)

        publish_start = time.perf_counter()
        header = msg.header
        header.frame_id = self.cfg.grid.frame_id
        self.pub_features.publish(self._image(header, features_image_fields(result.features)))
        # The picture reads the raw LiDAR channels, which a projection no longer has.
        if self.pub_image.get_subscription_count() > 0 and not self.pipe.projected:
            rgb = bev_to_rgb(result.features, self.cfg.grid.z_min, self.cfg.grid.z_max)
            h, w = rgb.shape[:2]
            self.pub_image.publish(self._image(header, {
                'height': h, 'width': w, 'encoding': 'rgb8', 'is_bigendian': 0,
                'step': w * 3, 'data': rgb.reshape(-1)}))
        done = time.perf_counter()
        age_ms = (self.get_clock().now().nanoseconds - stamp) / 1e6
        record = {
            'num_points': result.num_points, 'bucket': result.bucket,
            'overflow_points': result.overflow_points, 'decode_ms': (decoded - started) * 1e3,
            'pad_ms': result.pad_ms, 'compute_ms': result.compute_ms,
            'publish_ms': (done - publish_start) * 1e3, 'total_ms': (done - arrived) * 1e3,
            'age_ms': age_ms, 'cameras_used': result.cameras_used,
            'compiles_after_warmup': result.compiles_after_warmup,
        }
        latency = DiagnosticArray(header=header)
        latency.status.append(DiagnosticStatus(
            level=OK, name='jax_perception: frame', hardware_id=self.cfg.grid.frame_id,
            values=[KeyValue(key=k, value=format_value(record[k])) for k in FRAME_KEYS]))
        self.pub_latency.publish(latency)
        with self._lock:
            self.counts['processed'] += 1
            self.counts['overflowed'] += result.overflow_points > 0
            self.counts['nonfinite_features'] += result.nonfinite_features
            self._overflow_since_report += result.overflow_points > 0
            self._nonfinite_since_report += result.nonfinite_features
            self._stale = pairing.stale
            self.window.add(record)

    @staticmethod
    def _image(header, fields: dict) -> Image:
        msg = Image(header=header, height=fields['height'], width=fields['width'],
                    encoding=fields['encoding'], is_bigendian=fields['is_bigendian'],
                    step=fields['step'])
        msg.data = byte_array(fields['data'])
        return msg

    # -- diagnostics ---------------------------------------------------------------------------

    def diagnostic_status(self) -> DiagnosticStatus:
        """Roll up counts, latency percentiles, level and reason into one status."""
        with self._lock:
            counts = dict(self.counts)
            total, age = self.window.stats('total_ms'), self.window.stats('age_ms')
            stale, overflowed = self._stale, self._overflow_since_report
            nonfinite = self._nonfinite_since_report
            self._overflow_since_report = self._nonfinite_since_report = 0
            silent_s = time.monotonic() - self._last_cloud
        compiles = self.pipe.compiles_after_warmup
        problems = []
        if compiles:
            problems.append((ERROR, f'{compiles} XLA compiles after warm-up'))
        if silent_s > self.cfg.diagnostics.lidar_timeout_s:
            problems.append((ERROR, f'no point cloud for {silent_s:.1f} s'))
        if total['p99'] > self.cfg.diagnostics.latency_budget_ms:
            problems.append((WARN, f'total p99 {total["p99"]:.1f} ms over the '
                                   f'{self.cfg.diagnostics.latency_budget_ms:g} ms budget'))
        for name in stale:
            problems.append((WARN, f'camera {name} stale (masked)'))
        if overflowed:
            problems.append((WARN, f'{overflowed} clouds above the largest bucket '
                                   f'({self.pipe.padder.capacity} points), subsampled'))
        if nonfinite:
            problems.append((WARN, f'{nonfinite} non-finite feature values zeroed'))
        level = max((p[0] for p in problems), default=OK)
        values = {**counts, 'compiles_after_warmup': compiles,
                  'stale_cameras': ' '.join(stale), 'seconds_since_cloud': f'{silent_s:.2f}'}
        for name, stats in (('total_ms', total), ('age_ms', age)):
            for q, v in stats.items():
                values[f'{name}_{q}'] = v
        return DiagnosticStatus(
            level=level, name='jax_perception: pipeline', hardware_id=self.cfg.grid.frame_id,
            message='; '.join(p[1] for p in problems) or 'OK',
            values=[KeyValue(key=k, value=v if isinstance(v, str) else format_value(v))
                    for k, v in values.items()])

    def _publish_diagnostics(self) -> None:
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status.append(self.diagnostic_status())
        self.pub_diag.publish(array)

    def destroy_node(self) -> None:
        """Stop the worker before the publishers go away."""
        self._stop.set()
        self._worker.join(timeout=5.0)
        super().destroy_node()


def main(args=None) -> int:
    """
    Console script ``jax_perception_node``: exit 1 with one line on a bad parameter.

    SIGINT and SIGTERM stop the spin loop; the worker finishes its frame and stops before the
    context shuts down, so no frame is ever published into a dead context.
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        node = JaxPerceptionNode()
    except (ConfigError, ParameterException) as exc:
        print(f'jax_perception_node: bad parameter {exc}', file=sys.stderr)
        rclpy.try_shutdown()
        return 1
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.1)
    except ExternalShutdownException:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
