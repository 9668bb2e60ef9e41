"""The node with cameras that send images: raw and JPEG in, the encoder in the executable."""

import array
import io

from configs import small_params
import numpy as np
from PIL import Image as PilImage
from reference import block_mean, lift_ref
from ros_harness import make_cloud, serving_node, stamp_of, status_values

RGB = 'jax_perception_node.detection.encoders.pooled:rgb'
T0 = 1_700_000_000 * 10**9
STRIDE = 4
IMAGE_H, IMAGE_W = 12 * STRIDE, 20 * STRIDE      # the small config's 12 x 20 maps x the stride


def image_params() -> dict:
    """Return the small one-camera config with the front camera sending images to ``rgb``."""
    return small_params(1, **{'cameras.front.input': 'image', 'encoder.module': RGB,
                              'encoder.stride': STRIDE, 'diagnostics.period_s': 0.2,
                              'diagnostics.lidar_timeout_s': 60.0})


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


def test_the_node_lifts_raw_and_jpeg_images_and_survives_a_corrupt_one(tmp_path):
    """
    Raw and JPEG images give the reference BEV of their pooled pixels; 0 compiles.

    A truncated JPEG is rejected and counted, and the next frame is served as before.
    """
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage, Image
    from jax_perception_node.settings.config import config_from_parameters
    params = image_params()
    cfg = config_from_parameters(params)
    rng = np.random.default_rng(11)
    # Smooth pictures: JPEG keeps them within a few levels (noise would not survive it).
    v, u = np.mgrid[0:IMAGE_H, 0:IMAGE_W]
    pictures = [np.stack([(u * 3 + 40 * k) % 256, (v * 5) % 256, (u + v + 90 * k) % 256],
                         axis=-1).astype(np.uint8) for k in range(3)]
    points = rng.uniform([-6, -10, -1.5, 0], [6, 10, 1.5, 50], size=(200, 4)).astype(np.float32)
    with serving_node(params, tmp_path) as (node, probe):
        raw_pub = probe.node.create_publisher(Image, '/jax_perception/input/camera/front/image',
                                              qos_profile_sensor_data)
        jpeg_pub = probe.node.create_publisher(
            CompressedImage, '/jax_perception/input/camera/front/image/compressed',
            qos_profile_sensor_data)
        probe.wait_for(lambda: raw_pub.get_subscription_count() > 0
                       and jpeg_pub.get_subscription_count() > 0, what='image subscriptions')

        def frame(k, pub, msg):
            stamp = T0 + k * 10**9
            header(msg, stamp)
            probe.publish_taken([(pub, msg)], what='images')
            probe.cloud_pub.publish(make_cloud(points, stamp))
            probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features)
                           and any(stamp_of(m) == stamp for m in probe.latency),
                           what=f'output of frame {k}')
            out = next(m for m in probe.features if stamp_of(m) == stamp)
            latency = status_values(next(m for m in probe.latency
                                         if stamp_of(m) == stamp).status[0])
            assert latency['compiles_after_warmup'] == '0' and latency['cameras_used'] == '1'
            return np.frombuffer(bytes(out.data), np.float32).reshape(out.height, out.width, -1)

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
        probe.publish_taken([(jpeg_pub, compressed_image(jpeg[:len(jpeg) // 2], T0))],
                            what='a truncated JPEG')
        assert int(status_values(probe.last_status())['rejected_feature_maps']) == before + 1
        out = frame(2, raw_pub, raw_image(pictures[2], 0))
        camera, _ = lift_ref(cfg, {'front': block_mean(pictures[2], STRIDE)})
        assert np.abs(out[..., 6:9] - camera).max() <= 1e-4
    assert 'image rejected: ' in (tmp_path / 'node.log').read_text()
