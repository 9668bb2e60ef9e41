"""
Camera image decode: Image and CompressedImage to the encoder's input, per frame of a rig.

:func:`decode_rows` times ``ImageDecoder.decode`` (``sensors/camera_image.py``) over every
camera of a frame, each into its own preallocated output: one after the other on one thread,
and (rows ``..._threads``) at once on a thread per CPU, each camera one task, as the node's
decode pool runs them (``frames/camera_decode_pool.py``). Raw rgb8 and JPEG (quality 90),
libjpeg's scaled decode on and off. Rigs: four cameras at 704 x 256 to a 352 x 128 encoder
input (exact 1/2), and six nuScenes-size cameras at 1600 x 900 to 400 x 225 (exact 1/4, the
same aspect ratio) and to 400 x 224 (a typical encoder size: 1/4 in x, 1/4.018 in y, within
the scale tolerance, so the non-integer area path for raw images and the 400 x 225 ->
400 x 224 step after a scaled JPEG decode).

The images are synthetic photos, different for each camera: a sky-to-ground gradient,
blocks of flat colour with sharp edges (buildings, cars), a low-frequency texture (a few
sinusoids) and mild sensor noise (sigma 3 levels). At quality 90 a JPEG of them takes about
1.2 (1600 x 900) to 1.8 (704 x 256) bits a pixel, as camera JPEGs do (nuScenes': about 1 to
1.5); pure noise would take several times that and decode unrealistically slowly.
"""

import functools
import io
import time

from jax_perception_node.bags.bagio import TYPESTORE
from jax_perception_node.frames.camera_decode_pool import CameraDecodePool, cpu_threads
from jax_perception_node.sensors.camera_image import ImageDecoder
import numpy as np
from PIL import Image

JPEG_QUALITY = 90
# (name, cameras, source (W, H), target (W, H), transport, scaled, threaded). scaled None: raw,
# where the flag does nothing; threaded: the cameras at once on a thread per CPU.
CASES = (
    ('ring4_704x256_rgb8', 4, (704, 256), (352, 128), 'rgb8', None, False),
    ('ring4_704x256_jpeg_scaled', 4, (704, 256), (352, 128), 'jpeg', True, False),
    ('ring4_704x256_jpeg_scaled_threads', 4, (704, 256), (352, 128), 'jpeg', True, True),
    ('ring4_704x256_jpeg_full', 4, (704, 256), (352, 128), 'jpeg', False, False),
    ('ring6_1600x900_rgb8', 6, (1600, 900), (400, 225), 'rgb8', None, False),
    ('ring6_1600x900_jpeg_scaled', 6, (1600, 900), (400, 225), 'jpeg', True, False),
    ('ring6_1600x900_jpeg_scaled_threads', 6, (1600, 900), (400, 225), 'jpeg', True, True),
    ('ring6_1600x900_jpeg_full', 6, (1600, 900), (400, 225), 'jpeg', False, False),
    ('ring6_1600x900_rgb8_to_224', 6, (1600, 900), (400, 224), 'rgb8', None, False),
    ('ring6_1600x900_jpeg_scaled_to_224', 6, (1600, 900), (400, 224), 'jpeg', True, False),
)


def synthetic_photo(width: int, height: int, seed: int) -> np.ndarray:
    """Return uint8[H, W, 3] RGB that compresses and decodes like a camera photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    y /= height
    x /= width
    horizon = 0.45 + 0.1 * rng.random()
    sky = np.array([110, 160, 225], np.float32) * (0.7 + 0.3 * y[..., None] / horizon)
    ground = np.array([95, 90, 80], np.float32) * (0.6 + 0.6 * y[..., None])
    picture = np.where((y < horizon)[..., None], sky, ground)
    for _ in range(12):                     # buildings and cars: flat colour, sharp edges
        x0, x1 = np.sort(rng.random(2))
        y0 = rng.uniform(0.1, horizon + 0.2)
        y1 = min(1.0, y0 + rng.uniform(0.05, 0.5))
        block = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
        picture[block] = rng.uniform(20, 235, 3)
    for _ in range(4):                      # low-frequency texture
        fx, fy = rng.uniform(2, 40, 2)
        picture += (6 * np.sin(2 * np.pi * (fx * x + fy * y) + rng.uniform(0, 6)))[..., None]
    picture += rng.normal(0.0, 3.0, picture.shape).astype(np.float32)     # sensor noise
    return np.clip(picture, 0, 255).astype(np.uint8)


def image_message(rgb: np.ndarray, transport: str):
    """Return a rosbags Image (rgb8) or CompressedImage (JPEG) of ``rgb``."""
    types = TYPESTORE.types
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=0, nanosec=0), frame_id='camera')
    if transport == 'rgb8':
        height, width = rgb.shape[:2]
        return types['sensor_msgs/msg/Image'](
            header=header, height=height, width=width, encoding='rgb8', is_bigendian=0,
            step=width * 3, data=rgb.reshape(-1))
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, 'JPEG', quality=JPEG_QUALITY)
    return types['sensor_msgs/msg/CompressedImage'](
        header=header, format='rgb8; jpeg compressed bgr8',
        data=np.frombuffer(buffer.getvalue(), np.uint8))


def decode_rows(repeats: int) -> list[dict]:
    """
    Time the decode of one frame of each rig in ``CASES``: ``repeats`` frames, the median.

    A frame is every camera's message decoded once into that camera's preallocated
    uint8[H_i, W_i, 3]: in order on this thread, or with ``threaded`` one call per camera on
    the node's ``CameraDecodePool`` (a thread per CPU), the frame done when the last one is;
    one untimed frame comes first. The same photos serve every case of a rig, so raw and JPEG
    rows see the same content.

    Returns one row per case: ``name``, ``cameras``, ``source`` and ``target`` ('WxH'),
    ``transport`` ('rgb8' raw Image or 'jpeg' CompressedImage at quality 90), ``scaled``
    (libjpeg's DCT scaling; None for raw), ``threads`` (1, or the pool's) and ``ms`` (median
    per frame, all cameras).
    """
    photos = {}
    rows = []
    pool = CameraDecodePool()       # the node's: a thread per CPU, each camera one call
    threads = cpu_threads()
    try:
        for name, cameras, source, target, transport, scaled, threaded in CASES:
            if (source, cameras) not in photos:
                photos[source, cameras] = [synthetic_photo(*source, seed=i)
                                           for i in range(cameras)]
            messages = [image_message(rgb, transport) for rgb in photos[source, cameras]]
            decoder = ImageDecoder(target[1], target[0], scaled=bool(scaled))
            outputs = [np.empty((target[1], target[0], 3), np.uint8) for _ in messages]
            samples = []
            for repeat in range(repeats + 1):
                start = time.perf_counter()
                for camera, (msg, out) in enumerate(zip(messages, outputs)):
                    if threaded:
                        pool.submit(str(camera), functools.partial(decoder.decode, msg, out))
                    else:
                        decoder.decode(msg, out=out)
                pool.wait()
                if repeat:                              # the first frame warms up
                    samples.append(time.perf_counter() - start)
            rows.append({'name': name, 'cameras': cameras, 'source': '%dx%d' % source,
                         'target': '%dx%d' % target, 'transport': transport, 'scaled': scaled,
                         'threads': threads if threaded else 1,
                         'ms': round(float(np.median(samples)) * 1e3, 3)})
    finally:
        pool.close()
    return rows
