"""The node with cameras that send images: raw and JPEG in, the encoder in the executable."""

import array
import io
import os
from pathlib import Path

import bag_messages
from configs import small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.outputs.objects import boxes_from_detections
from jax_perception_node.sensors.camera import read_features
import numpy as np
from PIL import Image as PilImage
from reference import block_mean, lift_ref
from ros_harness import make_cloud, serving_node, stamp_of, status_values

RGB = 'jax_perception_node.detection.encoders.pooled:rgb'
T0 = 1_700_000_000 * 10**9
STRIDE = 4
IMAGE_H, IMAGE_W = 12 * STRIDE, 20 * STRIDE      # the small config's 12 x 20 maps x the stride


TEST_DIR = str(Path(__file__).resolve().parent.parent)      # toy_heads, for the node process


def image_params() -> dict:
    """
    Return the small one-camera config, the front camera sending images to ``rgb``.

    The toy head reads the camera's blue channel: its objects come from the images.
    """
    return small_params(1, **{'cameras.front.input': 'image', 'encoder.module': RGB,
                              'encoder.stride': STRIDE, 'diagnostics.period_s': 0.2,
                              'diagnostics.lidar_timeout_s': 60.0,
                              'head.module': 'toy_heads:camera_channel_head',
                              'head.score_threshold': 0.2})


def header(msg, stamp_ns: int) -> None:
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 10**9)
    msg.header.frame_id = 'front_optical'


def raw_image(rgb: np.ndarray, stamp_ns: int):
    """uint8[H, W, 3] -> an rgb8 sensor_msgs/Image (rclpy)."""
    from sensor_msgs.msg import Image
    msg = Image()
    header(msg, stamp_ns)
    msg.height, msg.width = rgb.shape[:2]
    msg.encoding, msg.step = 'rgb8', rgb.shape[1] * 3
    data = array.array('B')
    data.frombytes(np.ascontiguousarray(rgb).tobytes())
    msg.data = data
    return msg


def compressed_image(data: bytes, stamp_ns: int):
    """JPEG bytes -> a sensor_msgs/CompressedImage (rclpy), as image_transport names it."""
    from sensor_msgs.msg import CompressedImage
    msg = CompressedImage()
    header(msg, stamp_ns)
    msg.format = 'rgb8; jpeg compressed bgr8'
    buffer = array.array('B')
    buffer.frombytes(data)
    msg.data = buffer
    return msg


def jpeg_of(rgb: np.ndarray) -> bytes:
    out = io.BytesIO()
    PilImage.fromarray(rgb).save(out, 'JPEG', quality=90)
    return out.getvalue()


def test_the_node_lifts_raw_and_jpeg_images_and_survives_a_corrupt_one(tmp_path, monkeypatch):
    """
    Raw and JPEG images give the reference BEV of their pooled pixels; 0 compiles.

    A truncated JPEG is rejected and counted, and the next frame is served as before. Replay of
    the same messages gives the same BEVs, bit for bit, and the same objects.
    """
    from rclpy.qos import qos_profile_sensor_data, QoSProfile
    from sensor_msgs.msg import CompressedImage, Image
    from vision_msgs.msg import Detection3DArray
    from jax_perception_node.settings.config import config_from_parameters
    params = image_params()
    cfg = config_from_parameters(params)
    rng = np.random.default_rng(11)
    # Smooth pictures: JPEG keeps them within a few levels (noise would not survive it).
    v, u = np.mgrid[0:IMAGE_H, 0:IMAGE_W]
    pictures = [np.stack([(u * 3 + 40 * k) % 256, (v * 5) % 256, (u + v + 90 * k) % 256],
                         axis=-1).astype(np.uint8) for k in range(3)]
    points = rng.uniform([-6, -10, -1.5, 0], [6, 10, 1.5, 50], size=(200, 4)).astype(np.float32)
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
        filter(None, [TEST_DIR, os.environ.get('PYTHONPATH')])))
    sent, live = [], {}        # the messages as a bag holds them; stamp -> (BEV, boxes)
    with serving_node(params, tmp_path) as (node, probe):
        probe.objects = []
        probe.node.create_subscription(Detection3DArray, '/jax_perception/output/objects',
                                       lambda m: probe._keep(probe.objects, m),
                                       QoSProfile(depth=50))
        raw_pub = probe.node.create_publisher(Image, '/jax_perception/input/camera/front/image',
                                              qos_profile_sensor_data)
        jpeg_pub = probe.node.create_publisher(
            CompressedImage, '/jax_perception/input/camera/front/image/compressed',
            qos_profile_sensor_data)
        probe.wait_for(lambda: raw_pub.get_subscription_count() > 0
                       and jpeg_pub.get_subscription_count() > 0
                       and probe.node.count_publishers('/jax_perception/output/objects') > 0,
                       what='image subscriptions')

        def frame(k, pub, msg):
            stamp = T0 + k * 10**9
            header(msg, stamp)
            probe.publish_taken([(pub, msg)], what='images')
            probe.cloud_pub.publish(make_cloud(points, stamp))
            probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features)
                           and any(stamp_of(m) == stamp for m in probe.latency)
                           and any(stamp_of(m) == stamp for m in probe.objects),
                           what=f'output of frame {k}')
            out = next(m for m in probe.features if stamp_of(m) == stamp)
            latency = status_values(next(m for m in probe.latency
                                         if stamp_of(m) == stamp).status[0])
            assert latency['compiles_after_warmup'] == '0' and latency['cameras_used'] == '1'
            bev = np.frombuffer(bytes(out.data), np.float32).reshape(out.height, out.width, -1)
            live[stamp] = bev, boxes_from_detections(
                next(m for m in probe.objects if stamp_of(m) == stamp), ('car',))
            sent.append((bag_message(msg, stamp), stamp))
            sent.append((bag_messages.cloud(points, stamp), stamp))
            return bev

        out = frame(0, raw_pub, raw_image(pictures[0], 0))
        camera, coverage = lift_ref(cfg, {'front': block_mean(pictures[0], STRIDE)})
        assert 0 < coverage.sum() < coverage.size
        assert np.abs(out[..., 6:9] - camera).max() <= 1e-4
        jpeg = jpeg_of(pictures[1])
        out = frame(1, jpeg_pub, compressed_image(jpeg, 0))
        decoded = np.asarray(PilImage.open(io.BytesIO(jpeg)).convert('RGB'))
        camera, _ = lift_ref(cfg, {'front': block_mean(decoded, STRIDE)})
        assert np.abs(out[..., 6:9] - camera).max() <= 1e-4
        before = int(status_values(probe.last_status())['rejected_feature_maps'])
        # A new stamp: a copy of one the camera holds already would be skipped undecoded.
        cut = T0 + 1_500_000_000
        probe.publish_taken([(jpeg_pub, compressed_image(jpeg[:len(jpeg) // 2], cut))],
                            what='a truncated JPEG')
        sent.append((bag_messages.compressed_image(jpeg[:len(jpeg) // 2], cut), cut))
        assert int(status_values(probe.last_status())['rejected_feature_maps']) == before + 1
        out = frame(2, raw_pub, raw_image(pictures[2], 0))
        camera, _ = lift_ref(cfg, {'front': block_mean(pictures[2], STRIDE)})
        assert np.abs(out[..., 6:9] - camera).max() <= 1e-4
    assert 'image rejected: ' in (tmp_path / 'node.log').read_text()
    bevs, objects = replayed(sent, tmp_path, cfg)
    assert sorted(bevs) == sorted(objects) == sorted(live)
    for stamp, (bev, boxes) in live.items():
        np.testing.assert_array_equal(bevs[stamp], bev)
        np.testing.assert_array_equal(objects[stamp], boxes)
    assert sum(len(boxes) for _, boxes in live.values()) > 0


def replayed(sent: list, folder, cfg) -> tuple[dict, dict]:
    """Replay (message, time) pairs as a bag; return stamp -> BEV and stamp -> box rows."""
    writer = bagio.BagWriter(folder / 'in')
    for msg, stamp in sent:
        topic = {'sensor_msgs/msg/PointCloud2': bagio.POINTCLOUD_TOPIC,
                 bagio.IMAGE_TYPE: '/jax_perception/input/camera/front/image',
                 bagio.COMPRESSED_IMAGE_TYPE:
                     '/jax_perception/input/camera/front/image/compressed'}[msg.__msgtype__]
        writer.write(topic, msg, stamp)
    writer.close()
    result = replay_bag(folder / 'in', folder / 'out', cfg)
    assert (result.frames, result.rejected_feature_maps) == (3, 1), result.errors
    bevs, objects = {}, {}
    reader = bagio.open_reader(folder / 'out')
    try:
        for _, _, raw, msgtype in bagio.iter_messages(reader, [bagio.FEATURES_TOPIC,
                                                               bagio.OBJECTS_TOPIC]):
            msg = bagio.deserialize(raw, msgtype)
            if msgtype == bagio.IMAGE_TYPE:
                bevs[stamp_of(msg)] = read_features(msg)
            else:
                objects[stamp_of(msg)] = boxes_from_detections(msg, ('car',))
    finally:
        reader.close()
    return bevs, objects


def bag_message(msg, stamp: int):
    """Return the rosbags twin of an rclpy Image or CompressedImage the test sent."""
    from sensor_msgs.msg import Image
    if isinstance(msg, Image):
        rgb = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)
        return bag_messages.image(rgb, stamp)
    return bag_messages.compressed_image(bytes(msg.data), stamp)
