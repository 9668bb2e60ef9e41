"""Real-rclpy test harness: the node as its own process, a probe node in the test process."""

from contextlib import contextmanager
import os
from pathlib import Path
import subprocess
import sys
import threading
import time

import bag_messages
from jax_perception_node.settings.param_file import write_param_file as write_params  # noqa: F401
from jax_perception_node.tools.cloud_messages import rclpy_types
from jax_perception_node.tools.processes import console_script, stop_process
import numpy as np

MAX_DOMAIN = 232          # Fast DDS's highest domain id (its ports run out past it)
MIN_BLOCK = 48            # a worker's own domain and other_domain's offsets (0 to 46 in use)


def domain_block(worker: str, workers: int) -> tuple[int, int]:
    """
    Return (first domain, size) of the ROS domains of pytest-xdist worker ``worker`` ('gw3').

    Each of the ``workers`` takes a block of its own, so no two workers' nodes share a domain:
    100 domains each for make test's two, fewer for more (three shared one block before, and
    a node took a cloud of the other worker's test). A restarted worker (gw2 of two) takes the
    block of the one it replaces. Raises RuntimeError when the blocks would be too small.
    """
    blocks = max(2, workers)
    size = min(100, (MAX_DOMAIN + 1) // blocks)
    if size < MIN_BLOCK:
        raise RuntimeError(f'at most {(MAX_DOMAIN + 1) // MIN_BLOCK} pytest-xdist workers: each '
                           f'needs {MIN_BLOCK} ROS domains of its own (Fast DDS stops at '
                           f'{MAX_DOMAIN}), got {workers}')
    return size * (int(worker[2:]) % blocks), size


DOMAIN_BLOCK, DOMAIN_BLOCK_SIZE = domain_block(os.environ.get('PYTEST_XDIST_WORKER', 'gw0'),
                                               int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', 1)))


class NodeProcess:
    """jax_perception_node started through its console script, output captured to a file."""

    def __init__(self, params_file: Path, log_path: Path, extra_args=(), domain_id=None,
                 executable: str = 'jax_perception_node', env=None):
        exe = console_script(executable)
        self.log_path = log_path
        self._log = open(log_path, 'w')
        env = dict(os.environ, PYTHONUNBUFFERED='1', **(env or {}))
        if domain_id is not None:
            env['ROS_DOMAIN_ID'] = str(domain_id)
        self.proc = subprocess.Popen(
            [exe, '--ros-args', '--params-file', str(params_file), *extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        code = stop_process(self.proc)
        self._log.close()
        return code


def make_cloud(points: np.ndarray, stamp_ns: int, frame_id: str = 'lidar'):
    """float32 (N, 4) -> sensor_msgs/PointCloud2 (rclpy) with x, y, z, intensity."""
    return bag_messages.cloud(points, stamp_ns, frame_id, rclpy_types())


def make_features(fmap: np.ndarray, stamp_ns: int, name: str, frame_id: str | None = None):
    """float32 (H, W, C) -> sensor_msgs/Image 32FC<C> of camera ``name``, in its default frame."""
    from sensor_msgs.msg import Image
    import array
    msg = Image()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    msg.header.frame_id = f'{name}_optical' if frame_id is None else frame_id
    msg.height, msg.width = fmap.shape[:2]
    msg.encoding = f'32FC{fmap.shape[2]}'
    msg.is_bigendian = sys.byteorder == 'big'
    msg.step = fmap.shape[1] * fmap.shape[2] * 4
    data = array.array('B')
    data.frombytes(np.ascontiguousarray(fmap, np.float32).tobytes())
    msg.data = data
    return msg


def other_domain(offset: int) -> int:
    """Return a ROS domain next to this run's own in its block: two test nodes never share one."""
    if not 0 <= offset < MIN_BLOCK - 1:
        raise ValueError(f'offset {offset}: 0 to {MIN_BLOCK - 2} fit every block (MIN_BLOCK)')
    own = int(os.environ['ROS_DOMAIN_ID']) - DOMAIN_BLOCK
    return DOMAIN_BLOCK + (own + offset + 1) % DOMAIN_BLOCK_SIZE


@contextmanager
def params_file_node(path, node: str = '/jax_perception'):
    """Yield an rclpy Node named ``node`` (fully qualified) started with ``--params-file``."""
    import rclpy
    from rclpy.node import Node
    namespace, name = str(node).rsplit('/', 1)
    context = rclpy.Context()
    rclpy.init(args=['--ros-args', '--params-file', str(path)], context=context)
    probe = Node(name, namespace=namespace or '/', context=context)
    try:
        yield probe
    finally:
        probe.destroy_node()
        rclpy.shutdown(context=context)


def rcl_overrides(path, node: str = '/jax_perception') -> dict:
    """Return the parameter overrides rcl gives ``node`` from the params file ``path``."""
    with params_file_node(path, node) as probe:
        return {key: p.value for key, p in probe._parameter_overrides.items()}


@contextmanager
def in_process(node_class, params: dict, domain_offset: int):
    """Yield a ``node_class`` node made in this process on ``params``, in a domain of its own."""
    import rclpy
    from rclpy.parameter import Parameter
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=other_domain(domain_offset))
    node = node_class(context=context, parameter_overrides=[
        Parameter(key, value=value) for key, value in params.items()])
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def stamp_of(msg) -> int:
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def status_values(status) -> dict:
    return {kv.key: kv.value for kv in status.values}


# /diagnostics counts of the messages the node took on an input: accepted plus refused.
MAP_COUNTS = ('feature_maps_received', 'rejected_feature_maps')
ODOMETRY_COUNTS = ('odometry_received', 'rejected_odometry')
RESEND_S = 5.0      # publish_taken: far beyond a taken message's report (diagnostics.period_s)
RETRY_S = 2.0       # wait_answering: a call unanswered this long is sent again


class Probe:
    """A test-side rclpy node publishing the node's inputs and collecting its outputs."""

    _count = 0

    def __init__(self, cameras=(), ns='/jax_perception', domain_id=None, features=True,
                 odometry=False):
        """
        Publish to the node's inputs; keep every output (``features=False``: no BEV images).

        Every publisher exists before the node is ready (``wait_ready``), so the node's
        best-effort readers have matched it before the first message: a publisher created
        later can lose its first messages to discovery.
        """
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from rclpy.qos import qos_profile_sensor_data, QoSProfile
        from sensor_msgs.msg import Image, PointCloud2
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain_id)
        Probe._count += 1
        self.node = rclpy.create_node(f'probe_{Probe._count}', context=self.context)
        self.lock = threading.Lock()
        self.features, self.latency, self.diagnostics, self.images = [], [], [], []
        self.cloud_pub = self.node.create_publisher(
            PointCloud2, f'{ns}/input/pointcloud', qos_profile_sensor_data)
        self.camera_pubs = {name: self.node.create_publisher(
            Image, f'{ns}/input/camera/{name}/features', qos_profile_sensor_data)
            for name in cameras}
        self.odometry_pub = self.node.create_publisher(
            Odometry, f'{ns}/input/odometry', QoSProfile(depth=50)) if odometry else None
        keep = (lambda store: lambda msg: self._keep(store, msg))
        self._output_topics = [f'{ns}/debug/latency'] + (
            [f'{ns}/output/bev_features'] if features else [])
        if features:    # 3.9 MB each at the shipped grid: a long run would fill the memory
            self.node.create_subscription(Image, f'{ns}/output/bev_features',
                                          keep(self.features), QoSProfile(depth=50))
        self.node.create_subscription(DiagnosticArray, f'{ns}/debug/latency',
                                      keep(self.latency), QoSProfile(depth=100))
        self.node.create_subscription(DiagnosticArray, '/diagnostics', keep(self.diagnostics),
                                      QoSProfile(depth=20))
        self._spin()

    def _spin(self) -> None:
        from rclpy.executors import SingleThreadedExecutor
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def _stop_spinning(self) -> None:
        self.executor.shutdown()
        # Its spin thread may be between two waits: it made its next wait set on a context
        # shut down under it (an RCLError in that thread, a pytest warning) before this join.
        self._thread.join(timeout=10.0)

    def destroy_subscription(self, subscription) -> None:
        """
        Destroy a subscription of the probe's node with its spin thread stopped; spin on.

        Destroyed beside the spinning thread, its QoS event handler raised InvalidHandle in
        that thread's next wait set: the thread died and the probe heard nothing more.
        """
        self._stop_spinning()
        self.node.destroy_subscription(subscription)
        self._spin()

    def _keep(self, store, msg):
        with self.lock:
            store.append(msg)

    def subscribe_images(self, ns='/jax_perception'):
        from rclpy.qos import QoSProfile
        from sensor_msgs.msg import Image
        self.node.create_subscription(Image, f'{ns}/output/bev_image',
                                      lambda m: self._keep(self.images, m), QoSProfile(depth=5))

    def wait_for(self, predicate, timeout: float = 30.0, what: str = 'condition') -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate():
                    return
            time.sleep(0.002)
        raise AssertionError(f'timed out after {timeout} s waiting for {what}')

    def wait_ready(self, node_proc: NodeProcess, timeout: float = 180.0) -> None:
        """
        Until the node subscribes to the cloud topic (it does so only after warm-up).

        The shipped parameters' warm-up takes 6-8 s on this project's machine; 180 s leaves
        room for a CI machine several times slower with the other test worker compiling.
        """
        deadline = time.monotonic() + timeout
        while self.cloud_pub.get_subscription_count() == 0:
            if not node_proc.alive():
                raise AssertionError(f'node exited:\n{node_proc.log()}')
            if time.monotonic() > deadline:
                raise AssertionError(f'node not ready in {timeout} s:\n{node_proc.log()}')
            time.sleep(0.05)
        for pub in [*self.camera_pubs.values(), *filter(None, [self.odometry_pub])]:
            while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        # The node's outputs: wait until this probe sees a publisher on each topic it listens to.
        for topic in self._output_topics:
            while self.node.count_publishers(topic) == 0:
                if time.monotonic() > deadline:
                    raise AssertionError(f'no publisher on {topic} in {timeout} s')
                time.sleep(0.05)
        time.sleep(0.1)     # both ends of a match learn of it at about the same moment

    def publish_taken(self, sends, keys=MAP_COUNTS, what='feature maps') -> None:
        """
        Publish (publisher, message) pairs and wait until the node has taken every one.

        Taken: the sum of the counts ``keys`` in /diagnostics (accepted plus rejected) grew by
        their number. A cloud published next then finds them buffered however busy the
        machine is, which no fixed sleep promises. Every message on these topics must go
        through here, or the count it starts from may lag.

        Best-effort delivery may lose a publisher's first messages: its reader side can learn
        of the match later than this side does (in two of four CI runs, once each, right after the
        node was ready). While none is taken, all are sent again every ``RESEND_S``: a map
        that arrives twice is paired as once (same stamp, same values), only counted twice.
        """
        if not sends:
            return

        def taken():
            if not self.diagnostics:
                return 0
            values = status_values(self.diagnostics[-1].status[0])
            return sum(int(values[k]) for k in keys)
        with self.lock:
            before = taken()
        deadline = time.monotonic() + 30.0
        while True:
            for pub, msg in sends:
                pub.publish(msg)
            try:
                self.wait_for(lambda: taken() > before, timeout=RESEND_S)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise AssertionError(f'timed out waiting for the node to take {what}')
                print(f'none of {len(sends)} {what} taken in {RESEND_S} s: sent again',
                      file=sys.stderr)
        self.wait_for(lambda: taken() >= before + len(sends),
                      what=f'the node to take {len(sends)} {what}')

    def publish_maps(self, messages: dict) -> None:
        """Publish feature maps (camera name -> Image) and wait until the node took them."""
        self.publish_taken([(self.camera_pubs[name], msg) for name, msg in messages.items()])

    def publish_odometry(self, messages) -> None:
        """Publish Odometry messages and wait until the node took them (kept or refused)."""
        self.publish_taken([(self.odometry_pub, msg) for msg in messages],
                           ODOMETRY_COUNTS, 'odometry messages')

    def last_status(self):
        with self.lock:
            return self.diagnostics[-1].status[0] if self.diagnostics else None

    def close(self):
        import rclpy
        self._stop_spinning()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


@contextmanager
def serving_node(params: dict, folder: Path, cameras=(), domain_id=None, odometry=False):
    """
    Start the node on ``params`` and a probe beside it; yield (node, probe) once it serves.

    ``cameras`` and ``odometry``: the probe publishes feature maps and odometry too.

    The params file and the node's log go to ``folder``; both are stopped on the way out.
    """
    node = NodeProcess(write_params(params, folder / 'params.yaml'), folder / 'node.log',
                       domain_id=domain_id)
    probe = Probe(cameras=cameras, domain_id=domain_id, odometry=odometry)
    try:
        probe.wait_ready(node)
        yield node, probe
    finally:
        probe.close()
        node.stop()


def wait_answering(probe, client, timeout: float = 60.0) -> None:
    """
    Until ``client``'s service answers its default request, which changes nothing.

    (No parameter to set or get; a lifecycle transition no state offers, refused with a log
    line.) Ready is not enough: a server sends a response only once it has matched the
    client's response reader, and gives up after a short wait ("failed to send response
    (timeout)" from rmw_fastrtps), which discovery on a loaded machine can outlast (a clean
    clone's run, 2026-12-07: a first change_state never answered). Unanswered, the request is
    sent again after ``RETRY_S``.
    """
    deadline = time.monotonic() + timeout
    probe.wait_for(client.service_is_ready, timeout=timeout, what=f'service {client.srv_name}')
    while True:
        future = client.call_async(client.srv_type.Request())
        try:
            probe.wait_for(future.done, timeout=RETRY_S, what=f'an answer of {client.srv_name}')
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


def set_parameters(probe, setter, **values):
    """Set parameters through the node's service; returns the per-parameter results."""
    from rclpy.parameter import Parameter
    from rcl_interfaces.srv import SetParameters
    params = [Parameter(k.replace('__', '.'), value=v).to_parameter_msg()
              for k, v in values.items()]
    future = setter.call_async(SetParameters.Request(parameters=params))
    probe.wait_for(future.done, what='set_parameters')
    return future.result().results
