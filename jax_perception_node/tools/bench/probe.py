"""The benchmark's in-process probe: readiness of a node process, one-off clouds, latency."""

import subprocess
import threading
import time

from jax_perception_node.bags.topics import LATENCY_TOPIC, POINTCLOUD_TOPIC
import numpy as np

from .ros_processes import cloud_message, latency_record, set_stamp, spin_in_thread

# How long a stopped process's subscription may stay visible. It normally leaves at once, but
# when its goodbye to the graph is lost (best-effort discovery traffic on a loaded machine) it
# stays until its participant lease runs out: 20 s by Fast DDS's default.
GONE_TIMEOUT_S = 30.0


class Probe:
    """
    The benchmark's own rclpy node: readiness of a node process, one-off clouds, latency.

    Lives in its own context with a background executor; ``close()`` shuts both down.
    """

    def __init__(self, name: str = 'bench_probe'):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data, QoSProfile
        from sensor_msgs.msg import PointCloud2
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self._lock = threading.Lock()
        self.latency: dict[int, dict] = {}
        self.cloud_pub = self.node.create_publisher(PointCloud2, POINTCLOUD_TOPIC,
                                                    qos_profile_sensor_data)
        self.node.create_subscription(DiagnosticArray, LATENCY_TOPIC, self._on_latency,
                                      QoSProfile(depth=100))
        self._executor, self._thread = spin_in_thread(self.context, self.node)

    def _on_latency(self, msg) -> None:
        stamp, values = latency_record(msg)
        with self._lock:
            self.latency[stamp] = values

    def cloud_subscribers(self) -> int:
        """Subscriptions on the node's cloud input (a node subscribes only once warm)."""
        return self.node.count_subscribers(POINTCLOUD_TOPIC)

    def wait_ready(self, proc: subprocess.Popen, timeout_s: float, poll_s: float = 0.01,
                   what: str = 'node') -> float:
        """Block until the cloud input has a subscriber; returns perf_counter at that moment."""
        deadline = time.perf_counter() + timeout_s
        while self.cloud_subscribers() == 0:
            if proc.poll() is not None:
                raise RuntimeError(f'{what} exited with code {proc.returncode} during start-up')
            if time.perf_counter() > deadline:
                raise RuntimeError(f'{what} not ready within {timeout_s:g} s')
            time.sleep(poll_s)
        return time.perf_counter()

    def wait_gone(self, timeout_s: float = GONE_TIMEOUT_S) -> bool:
        """
        Block until nothing subscribes to the cloud input (a stopped node has left the graph).

        Discovery keeps a stopped process's endpoints visible for a moment; a readiness check
        right after would see the old node. Returns False on timeout.
        """
        deadline = time.perf_counter() + timeout_s
        while self.cloud_subscribers() > 0:
            if time.perf_counter() > deadline:
                return False
            time.sleep(0.02)
        return True

    def process_cloud(self, raw: np.ndarray, num_points: int, timeout_s: float = 10.0) -> dict:
        """Publish one cloud and wait for the node's latency record of it (its values)."""
        msg = cloud_message(raw, num_points)
        deadline = time.monotonic() + timeout_s
        while self.cloud_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        stamps = []
        while time.monotonic() < deadline:
            # Best effort (sensor-data QoS) may lose a message: send again every 2 s.
            stamps.append(time.time_ns())
            set_stamp(msg, stamps[-1])
            self.cloud_pub.publish(msg)
            resend = time.monotonic() + 2.0
            while time.monotonic() < min(resend, deadline):
                with self._lock:
                    for stamp in stamps:
                        if stamp in self.latency:
                            return self.latency[stamp]
                time.sleep(0.01)
        raise RuntimeError(f'no latency record for a {num_points}-point cloud in {timeout_s:g} s')

    def close(self) -> None:
        """Stop the executor and leave the context."""
        import rclpy
        self._executor.shutdown()
        self._thread.join(timeout=5.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
