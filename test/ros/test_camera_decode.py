"""The node's camera images: decoded on a pool, several cameras at once, each camera in order."""

import collections
import threading
import time

from configs import small_params
import numpy as np
from ros_harness import other_domain
from test_camera_images import compressed_image, jpeg_of, RGB

T0 = 1_700_000_000 * 10**9
MEET_TIMEOUT_S = 5.0


def image_node(domain_offset: int):
    """Return (context, node): the node in-process, two cameras sending JPEGs, not spun."""
    import rclpy
    from rclpy.parameter import Parameter
    from jax_perception_node.ros.node import JaxPerceptionNode
    params = small_params(2, **{'cameras.front.input': 'image', 'cameras.rear.input': 'image',
                                'encoder.module': RGB, 'encoder.stride': 4,
                                'diagnostics.lidar_timeout_s': 60.0})
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=other_domain(domain_offset))
    return context, JaxPerceptionNode(context=context, parameter_overrides=[
        Parameter(key, value=value) for key, value in params.items()])


def test_two_cameras_images_are_taken_at_once_each_camera_in_order():
    """
    Two cameras' JPEGs are taken on two threads at the same moment, the executor's one thread.

    The node runs in-process, spun as ``node.run`` spins it; its ``add_features`` is wrapped
    so that a camera's call waits until the other camera's call is running too: that meeting
    happens only if the two run at once (one at a time, the first waits alone until the
    timeout). Each camera's own images never overlap and are taken in the order sent.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage
    context, node = image_node(41)
    lock, inside, overlapped = threading.Lock(), collections.Counter(), []
    met, taken = threading.Event(), collections.defaultdict(list)
    add_features = node.core.path.add_features

    def wrapped(name, msg):
        with lock:
            inside[name] += 1
            overlapped.extend([name] if inside[name] > 1 else [])
            if inside['front'] and inside['rear']:
                met.set()
        met.wait(MEET_TIMEOUT_S)
        time.sleep(0.01)        # a second image of the same camera would come in now
        with lock:
            inside[name] -= 1
            taken[name].append(msg.header.stamp.sec)
        return add_features(name, msg)

    node.core.path.add_features = wrapped
    sender = rclpy.create_node('image_sender', context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    try:
        pubs = {name: sender.create_publisher(
            CompressedImage, f'/jax_perception/input/camera/{name}/image/compressed',
            qos_profile_sensor_data) for name in ('front', 'rear')}
        deadline = time.monotonic() + 30.0
        while any(p.get_subscription_count() == 0 for p in pubs.values()):
            assert time.monotonic() < deadline, 'the node did not subscribe to the cameras'
            time.sleep(0.05)
        time.sleep(0.2)     # both ends of the match know of it
        jpeg = jpeg_of(np.full((48, 80, 3), 128, np.uint8))
        for k in range(3):
            for name, pub in pubs.items():
                msg = compressed_image(jpeg, T0 + k * 10**9)
                msg.header.frame_id = f'{name}_optical'
                pub.publish(msg)
        deadline = time.monotonic() + 2 * MEET_TIMEOUT_S
        while sum(len(stamps) for stamps in taken.values()) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        node.core._decoders.wait()
        received = int(node.core.counts['feature_maps_received'])
    finally:
        executor.shutdown(timeout_sec=10.0)
        node.destroy_node()
        sender.destroy_node()
        rclpy.try_shutdown(context=context)
    assert met.is_set(), 'the two cameras were never taken at the same time'
    assert overlapped == []
    first = T0 // 10**9
    assert dict(taken) == {'front': [first, first + 1, first + 2],
                           'rear': [first, first + 1, first + 2]}
    assert received == 6


def test_deactivate_waits_for_the_images_in_decode_and_the_nodes_end_stops_the_pool():
    """
    No image is taken in after deactivate returns; destroying the node ends the pool's threads.

    An image whose decode is held in ``add_features`` keeps ``deactivate`` waiting until it is
    in; after ``destroy_node`` no ``camera_decode`` thread is left in the process.
    """
    import rclpy
    context, node = image_node(42)
    release, events = threading.Event(), []
    add_features = node.core.path.add_features

    def held(name, msg):
        release.wait(MEET_TIMEOUT_S)
        events.append('image taken')
        return add_features(name, msg)

    node.core.path.add_features = held
    try:
        msg = compressed_image(jpeg_of(np.full((48, 80, 3), 128, np.uint8)), T0)
        msg.header.frame_id = 'front_optical'
        node.core._on_features('front', msg)     # as the executor would: on the pool
        stopping = threading.Thread(target=lambda: (node.core.deactivate(),
                                                    events.append('deactivated')))
        stopping.start()
        stopping.join(0.3)
        assert stopping.is_alive(), 'deactivate returned with an image still in decode'
        release.set()
        stopping.join(MEET_TIMEOUT_S)
        assert events == ['image taken', 'deactivated']
        assert int(node.core.counts['feature_maps_received']) == 1
    finally:
        release.set()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    alive = [t.name for t in threading.enumerate() if t.name.startswith('camera_decode')]
    assert alive == []
