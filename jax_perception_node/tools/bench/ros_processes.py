"""
Helper processes for the ROS part of the benchmarks (``jax-perception bench``).

Run as ``python -m jax_perception_node.tools.bench.ros_processes COMMAND ...``:

- ``publish``: publishes one prepared cloud (and the cameras' feature maps, same stamp) on the
  node's inputs at a schedule of rates, header stamp = wall clock at publish, and writes the
  published stamps per segment as JSON.
- ``subscribe``: records, for every ``~/output/bev_features`` message, the receive wall time
  and the header stamp (raw CDR, no deserialization of the 4 MB payload) and the node's
  ``~/debug/latency`` records, until a stop file appears; writes JSON.
- ``echo``: the transport floor. Subscribes to the same inputs as the node and republishes, for
  every cloud, an Image of the node's output size with the cloud's stamp, without any work.
- ``startup-profile``: repeats the node's start-up steps in one process and times each (imports,
  JAX backend, rclpy, node construction with its per-bucket compile or cache-load times).

The in-process side (readiness of a node, one-off clouds, latency records) is ``probe.py``.
Every process here honours the ROS environment it is given (``processes.local_ros_env()``).
"""

import argparse
import itertools
import json
import os
from pathlib import Path
import struct
import sys
import threading
import time

from jax_perception_node.bags.topics import (camera_topic, FEATURES_TOPIC, LATENCY_TOPIC,
                                             POINTCLOUD_TOPIC)
import numpy as np

# Header stamp of a raw CDR message: int32 sec, uint32 nanosec after the 4-byte encapsulation.
_STAMP = struct.Struct('<iI')


def cloud_message(raw: np.ndarray, num_points: int, stamp_ns: int = 0, frame_id: str = 'lidar'):
    """
    sensor_msgs/PointCloud2 (rclpy) of ``num_points`` synthetic-drive points.

    raw: uint8 bytes in ``synthetic_drive.POINT_DTYPE`` layout (x, y, z, intensity float32,
    ring uint16, time float32; 24 bytes a point, little-endian), as a LiDAR driver sends them.
    """
    from jax_perception_node.tools.cloud_messages import point_cloud, rclpy_types
    from jax_perception_node.tools.synthetic_drive import POINT_FIELDS, POINT_STEP
    n = int(num_points)
    return point_cloud(rclpy_types(), np.ascontiguousarray(raw, np.uint8)[:POINT_STEP * n],
                       POINT_FIELDS, n, POINT_STEP, stamp_ns, frame_id)


def features_message(fmap: np.ndarray, stamp_ns: int = 0, frame_id: str = 'camera'):
    """sensor_msgs/Image 32FC<C> (rclpy) of a float32[H_f, W_f, C] feature map."""
    from sensor_msgs.msg import Image
    from jax_perception_node.sensors.camera import byte_array, features_image_fields
    fields = features_image_fields(fmap)
    msg = Image(height=fields['height'], width=fields['width'], encoding=fields['encoding'],
                is_bigendian=fields['is_bigendian'], step=fields['step'])
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    msg.header.frame_id = frame_id
    msg.data = byte_array(fields['data'])
    return msg


def set_stamp(msg, stamp_ns: int) -> None:
    """Set ``msg.header.stamp`` from integer nanoseconds."""
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)


def raw_stamp_ns(raw: bytes) -> int:
    """Header stamp (ns) of a raw little-endian CDR message that starts with a Header."""
    sec, nanosec = _STAMP.unpack_from(raw, 4)
    return sec * 1_000_000_000 + nanosec


def save_inputs(path: Path, raw: np.ndarray, num_points: int, camera_names, maps) -> Path:
    """Write the publisher's inputs (cloud bytes, camera names and maps) to an .npz."""
    names = list(camera_names)
    stacked = (np.stack([np.asarray(maps[n], np.float32) for n in names]) if names
               else np.zeros((0, 1, 1, 1), np.float32))
    np.savez(path, cloud=np.ascontiguousarray(raw, np.uint8), num_points=np.int64(num_points),
             camera_names=np.array(names, dtype='U64'), maps=stacked)
    return Path(path)


def latency_record(msg) -> tuple[int, dict[str, float]]:
    """Return (stamp ns, numeric values) of a ~/debug/latency DiagnosticArray."""
    stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
    values = {}
    for kv in msg.status[0].values if msg.status else ():
        try:
            values[kv.key] = float(kv.value)
        except ValueError:
            pass
    return stamp, values


def spin_in_thread(context, node):
    """Spin ``node`` in a daemon thread of its own; returns (executor, thread)."""
    from rclpy.executors import SingleThreadedExecutor
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return executor, thread


# -- publish ------------------------------------------------------------------------------------

def publish(inputs: Path, schedule: list[tuple[str, float, float]], out: Path,
            gap_s: float = 1.0, warmup_s: float = 1.0, wait_s: float = 60.0,
            ready: Path | None = None) -> int:
    """
    Publish the prepared inputs at each (label, rate Hz, seconds) of ``schedule``.

    Starts once the cloud topic and the output topic both have a subscriber (the node or echo,
    and our subscriber), then publishes at the first rate (recorded as label 'warmup') for
    ``warmup_s`` and until the file ``ready`` exists: the subscriber creates it on its first
    output, so every endpoint of the chain has matched (a subscription count only says that
    one side did; on a loaded machine the other can lag by seconds, and best-effort readers
    drop what they receive before). Then each segment, with ``gap_s`` of silence before it so
    no backlog crosses segments. Each frame publishes the camera maps first, then the cloud,
    all with one stamp = wall clock (``time.time_ns()``) just before publishing. Writes
    ``{label: {rate_hz, stamps_ns, publish_ms}}`` to ``out``.
    """
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image, PointCloud2
    with np.load(inputs, allow_pickle=False) as npz:
        raw, num_points = npz['cloud'], int(npz['num_points'])
        names, maps = [str(n) for n in npz['camera_names']], npz['maps']
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('bench_publisher', context=context)
    try:
        cloud_pub = node.create_publisher(PointCloud2, POINTCLOUD_TOPIC, qos_profile_sensor_data)
        cam_pubs = [node.create_publisher(Image, camera_topic(n), qos_profile_sensor_data)
                    for n in names]
        cloud = cloud_message(raw, num_points)
        cams = [features_message(maps[i], frame_id=f'{n}_optical') for i, n in enumerate(names)]
        deadline = time.monotonic() + wait_s
        while (cloud_pub.get_subscription_count() == 0
               or node.count_subscribers(FEATURES_TOPIC) == 0
               or any(p.get_subscription_count() == 0 for p in cam_pubs)):
            if time.monotonic() > deadline:
                print('bench_ros publish: no subscribers', file=sys.stderr)
                return 1
            time.sleep(0.02)
        time.sleep(0.5)     # the camera readers: the ready file vouches for the cloud path only
        result = {}
        segments = [('warmup', schedule[0][1], warmup_s)] if warmup_s > 0 or ready else []
        for label, rate, seconds in segments + list(schedule):
            time.sleep(gap_s)
            stamps, costs = [], []
            period = 1.0 / rate
            start = time.perf_counter()
            frames = max(1, int(round(rate * seconds)))
            for k in itertools.count():
                if k >= frames and (label != 'warmup' or ready is None or ready.exists()):
                    break
                if label == 'warmup' and time.perf_counter() - start > wait_s:
                    print(f'bench_ros publish: no output reached the subscriber in {wait_s:g} s',
                          file=sys.stderr)
                    return 1
                delay = start + k * period - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                began = time.perf_counter()
                stamp = time.time_ns()
                for pub, msg in zip(cam_pubs, cams):
                    set_stamp(msg, stamp)
                    pub.publish(msg)
                set_stamp(cloud, stamp)
                cloud_pub.publish(cloud)
                stamps.append(stamp)
                costs.append((time.perf_counter() - began) * 1e3)
            result[label] = {'rate_hz': rate, 'stamps_ns': stamps, 'publish_ms': costs}
        time.sleep(0.2)
        out.write_text(json.dumps(result))
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


# -- subscribe ----------------------------------------------------------------------------------

def subscribe(out: Path, until: Path, grace_s: float = 1.0, timeout_s: float = 600.0,
              ready: Path | None = None) -> int:
    """
    Record output arrivals and the node's latency records until ``until`` exists.

    Creates the file ``ready`` when the first output arrives (the publisher waits for it).

    ``features``: [stamp_ns, receive wall time ns] per ``bev_features`` message (receive time
    taken at callback entry, before anything else); ``latency``: [stamp_ns, {key: value}] per
    ``~/debug/latency`` message. Keeps recording ``grace_s`` after the stop file appears.
    """
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import Image
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('bench_subscriber', context=context)
    lock = threading.Lock()
    features, latency = [], []

    def on_features(raw: bytes) -> None:
        received = time.time_ns()
        with lock:
            features.append((raw_stamp_ns(raw), received))

    def on_latency(msg) -> None:
        stamp, values = latency_record(msg)
        with lock:
            latency.append((stamp, values))

    node.create_subscription(Image, FEATURES_TOPIC, on_features, QoSProfile(depth=50), raw=True)
    node.create_subscription(DiagnosticArray, LATENCY_TOPIC, on_latency, QoSProfile(depth=100))
    executor, thread = spin_in_thread(context, node)
    try:
        deadline = time.monotonic() + timeout_s
        while not until.exists() and time.monotonic() < deadline:
            if ready is not None and features and not ready.exists():
                ready.touch()
            time.sleep(0.05)
        time.sleep(grace_s)
    finally:
        executor.shutdown()
        thread.join(timeout=5.0)
        with lock:
            out.write_text(json.dumps({'features': features, 'latency': latency}))
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    return 0


# -- echo ---------------------------------------------------------------------------------------

def echo(height: int, width: int, channels: int, cameras: list[str]) -> int:
    """
    Republish every cloud as a zero Image of the node's output size with the cloud's stamp.

    Subscribes exactly like the node (cloud and camera maps with sensor-data QoS, deserialized
    by rclpy), publishes on the node's output topic with the node's QoS, from the executor
    thread, reusing one prebuilt message: no decoding, no compute, no copies of our own. Runs
    until SIGINT.
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data, QoSProfile
    from sensor_msgs.msg import Image, PointCloud2
    from jax_perception_node.sensors.camera import byte_array
    rclpy.init()
    node = rclpy.create_node('bench_echo')
    reply = Image(height=height, width=width, encoding=f'32FC{channels}',
                  is_bigendian=int(sys.byteorder == 'big'), step=width * channels * 4)
    reply.header.frame_id = 'base_link'
    reply.data = byte_array(np.zeros(height * width * channels * 4, np.uint8))
    pub = node.create_publisher(Image, FEATURES_TOPIC, QoSProfile(depth=5))

    def on_cloud(msg) -> None:
        reply.header.stamp = msg.header.stamp
        pub.publish(reply)

    node.create_subscription(PointCloud2, POINTCLOUD_TOPIC, on_cloud, qos_profile_sensor_data)
    for name in cameras:
        node.create_subscription(Image, camera_topic(name), lambda msg: None,
                                 qos_profile_sensor_data)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


# -- start-up profile ---------------------------------------------------------------------------

def startup_profile(params: Path, cache_dir: str, out: Path) -> int:
    """
    Time the node's start-up steps in this process (seconds) and write them as JSON.

    ``interpreter``: process creation to this function (Python start-up, ``-m`` import of this
    module and NumPy); then ``import_jax``, ``jax_backend`` (first ``jax.devices()``),
    ``import_rclpy`` (rclpy and the message packages), ``import_node`` (the node module and
    the rest of this package), ``rclpy_init``, and ``node_init`` (``JaxPerceptionNode()``:
    parameters, pipeline, warm-up, publishers and subscriptions) split into
    ``node_init.compile`` (per executable: XLA compile, or persistent-cache load when warm) and
    ``node_init.other`` (everything else in the constructor, mostly the first run of each
    bucket). ``total`` is process creation to a ready node.
    """
    steps = {'interpreter': process_age_s()}
    began_s = time.perf_counter() - steps['interpreter']

    def timed(name, fn):
        began = time.perf_counter()
        value = fn()
        steps[name] = time.perf_counter() - began
        return value

    jax = timed('import_jax', lambda: __import__('jax'))
    timed('jax_backend', jax.devices)
    timed('import_rclpy', lambda: (__import__('rclpy'), __import__('sensor_msgs.msg'),
                                   __import__('diagnostic_msgs.msg')))
    import rclpy
    node_module = timed('import_node', lambda: __import__('jax_perception_node.ros.node',
                                                          fromlist=['JaxPerceptionNode']))
    args = ['bench_profile', '--ros-args', '--params-file', str(params),
            '-p', f'compilation_cache_dir:={cache_dir}', '--log-level', 'warn']
    timed('rclpy_init', lambda: rclpy.init(args=args))
    node = timed('node_init', node_module.JaxPerceptionNode)
    compile_s = {k: round(v, 4) for k, v in node.pipe.compile_seconds.items()}
    steps['node_init.compile'] = sum(compile_s.values())
    steps['node_init.other'] = steps['node_init'] - steps['node_init.compile']
    steps['total'] = time.perf_counter() - began_s
    steps.update(_lowering_split(node.pipe.cfg))
    node.destroy_node()
    rclpy.try_shutdown()
    out.write_text(json.dumps({'steps_s': {k: round(v, 4) for k, v in steps.items()},
                               'compile_s': compile_s}))
    return 0


def process_age_s() -> float:
    """
    Seconds since this process was created (Linux, 10 ms resolution).

    From /proc/self/stat's start time (clock ticks since boot) and /proc/uptime; psutil's
    create_time() is anchored to the boot time in whole seconds and can be off by up to 1 s.
    """
    fields = Path('/proc/self/stat').read_text().rsplit(')', 1)[1].split()
    start_s = int(fields[19]) / os.sysconf('SC_CLK_TCK')
    return float(Path('/proc/uptime').read_text().split()[0]) - start_s


def _lowering_split(cfg) -> dict:
    """
    Time the JAX-cache path for the largest bucket, for reference (s).

    A fresh ``jit(frame).lower(shapes)`` (Python tracing and lowering) then ``.compile()``,
    which with a warm JAX persistent cache is a cache load: what a warm start pays per bucket
    without the pipeline's serialized-executable store.
    """
    import functools
    import jax
    from jax_perception_node import BevPipeline, kernels
    pipe = BevPipeline(cfg)
    pipe.warmup()
    bucket = cfg.buckets[-1]
    args = pipe.frame_args(np.zeros((bucket, 4), np.float32), 0)
    frame = functools.partial(kernels.bev_frame, height=pipe.height, width=pipe.width,
                              activation=cfg.fusion.activation)
    began = time.perf_counter()
    lowered = jax.jit(frame).lower(args)
    lowered_at = time.perf_counter()
    lowered.compile()
    done = time.perf_counter()
    return {'reference.trace_lower_largest_bucket': lowered_at - began,
            'reference.jax_cache_compile_or_load_largest_bucket': done - lowered_at}


def helper_command(*args: str) -> list[str]:
    """Command line running this module (``python -m ... ARGS``) in this venv."""
    return [sys.executable, '-m', 'jax_perception_node.tools.bench.ros_processes', *args]


def parse_schedule(text: str) -> list[tuple[str, float, float]]:
    """'label:rate:seconds,...' -> [(label, rate Hz, seconds)]."""
    out = []
    for item in text.split(','):
        label, rate, seconds = item.split(':')
        out.append((label, float(rate), float(seconds)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m jax_perception_node.tools.bench.ros_processes``."""
    parser = argparse.ArgumentParser(
        prog='python -m jax_perception_node.tools.bench.ros_processes')
    sub = parser.add_subparsers(dest='command', required=True)
    p = sub.add_parser('publish')
    p.add_argument('--inputs', required=True, type=Path)
    p.add_argument('--schedule', required=True, help='label:rate:seconds,...')
    p.add_argument('--out', required=True, type=Path)
    p.add_argument('--gap', type=float, default=1.0)
    p.add_argument('--warmup', type=float, default=1.0)
    p.add_argument('--ready', type=Path, help='wait for this file (the subscriber makes it)')
    p = sub.add_parser('subscribe')
    p.add_argument('--out', required=True, type=Path)
    p.add_argument('--until', required=True, type=Path)
    p.add_argument('--ready', type=Path, help='create this file on the first output')
    p.add_argument('--timeout', type=float, default=600.0)
    p = sub.add_parser('echo')
    p.add_argument('--height', type=int, required=True)
    p.add_argument('--width', type=int, required=True)
    p.add_argument('--channels', type=int, required=True)
    p.add_argument('--cameras', default='')
    p = sub.add_parser('startup-profile')
    p.add_argument('--params', required=True, type=Path)
    p.add_argument('--cache', required=True)
    p.add_argument('--out', required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == 'publish':
        return publish(args.inputs, parse_schedule(args.schedule), args.out, gap_s=args.gap,
                       warmup_s=args.warmup, ready=args.ready)
    if args.command == 'subscribe':
        return subscribe(args.out, args.until, timeout_s=args.timeout, ready=args.ready)
    if args.command == 'echo':
        return echo(args.height, args.width, args.channels,
                    [c for c in args.cameras.split(',') if c])
    return startup_profile(args.params, args.cache, args.out)


if __name__ == '__main__':
    os.environ.setdefault('PYTHONUNBUFFERED', '1')
    sys.exit(main())
