"""sample-bag --camera-images: the cameras' images (rgb8 or JPEG) in place of feature maps."""

import io

from cli_errors import assert_one_line_error
from configs import PARAMS_FILE
from jax_perception_node.bags import bagio
from jax_perception_node.bags.topics import (camera_compressed_topic, camera_image_topic,
                                             camera_info_topic, camera_topic)
from jax_perception_node.sensors.camera import scale_camera_info
from jax_perception_node.settings.config import load_config
from jax_perception_node.tools.cli import main
from jax_perception_node.tools.synthetic_drive import (EPOCH_NS, SyntheticDrive,
                                                       write_sample_bag)
from jax_perception_node.tools.synthetic_drive.camera_render import camera_rays, trace
from jax_perception_node.tools.synthetic_drive.scene import CAMERA_VIEW_M
import numpy as np
from PIL import Image, JpegImagePlugin
import pytest
from rosbags.rosbag2 import Reader

SEED, SECONDS, CAMERAS, SCALE = 2, 0.5, 2, 4
IMAGE, COMPRESSED = 'sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage'


@pytest.fixture(scope='module')
def cfg():
    return load_config(PARAMS_FILE)


def read(path):
    """Return (topic -> type, [(topic, bag time, raw bytes, message)], custom_data) of a bag."""
    with Reader(path) as reader:
        types = {name: info.msgtype for name, info in reader.topics.items()}
        messages = [(conn.topic, stamp, bytes(raw),
                     bagio.TYPESTORE.deserialize_cdr(raw, conn.msgtype))
                    for conn, stamp, raw in reader.messages()]
        return types, messages, bagio.custom_data(reader)


@pytest.fixture(scope='module')
def bags(cfg, tmp_path_factory):
    """Write the same short drive three times: feature maps, raw and JPEG images (K = 4)."""
    root = tmp_path_factory.mktemp('images')
    out = {}
    for mode in (None, 'raw', 'jpeg'):
        path = root / str(mode)
        summary = write_sample_bag(path, cfg, seconds=SECONDS, num_cameras=CAMERAS, seed=SEED,
                                   camera_images=mode, image_scale=SCALE)
        out[mode] = (summary, *read(path))
    return out


def image_of(msg) -> np.ndarray:
    """Decode an rgb8 Image by hand: rows ``step`` bytes apart, 3 bytes per pixel."""
    rows = np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.step)
    return rows[:, :3 * msg.width].reshape(msg.height, msg.width, 3)


def test_images_replace_the_maps_and_nothing_else_changes(bags, cfg):
    cams = cfg.cameras[:CAMERAS]
    _, maps_types, maps, maps_custom = bags[None]
    for mode, topic_of, msgtype in (('raw', camera_image_topic, IMAGE),
                                    ('jpeg', camera_compressed_topic, COMPRESSED)):
        summary, types, messages, custom = bags[mode]
        assert summary['camera_images'] == mode and summary['image_scale'] == SCALE
        assert custom == maps_custom | {'jax_perception.camera_images': mode,
                                        'jax_perception.image_scale': str(SCALE)}
        rename = {camera_topic(c.name): topic_of(c.name) for c in cams}
        # The same topics but the cameras', no feature map among them.
        assert types == {rename.get(t, t): (msgtype if t in rename else m)
                         for t, m in maps_types.items()}
        assert not any(t.endswith('/features') for t in types)
        # Same order and stamps; every message but the camera frames and infos byte for byte.
        assert [(rename.get(t, t), s) for t, s, _, _ in maps] == [
            (t, s) for t, s, _, _ in messages]
        infos = {camera_info_topic(c.name) for c in cams}
        for (topic, _, raw, _), (_, _, other, _) in zip(maps, messages):
            if topic not in rename and topic not in infos:
                assert raw == other, topic
        assert summary['camera_messages'] == bags[None][0]['camera_messages']
    assert bags[None][0]['camera_images'] is None and bags[None][0]['image_scale'] is None


def test_raw_images_sizes_encodings_frames_stamps_and_camera_info(bags, cfg):
    _, _, messages, _ = bags['raw']
    seen = 0
    for cam in cfg.cameras[:CAMERAS]:
        frames = [(s, m) for t, s, _, m in messages if t == camera_image_topic(cam.name)]
        infos = [(s, m) for t, s, _, m in messages if t == camera_info_topic(cam.name)]
        assert len(frames) == len(infos) == 6          # 12 Hz up to 0.45 s
        for (stamp, msg), (info_stamp, info) in zip(frames, infos):
            h, w = SCALE * cam.height, SCALE * cam.width
            assert (msg.height, msg.width, msg.encoding, msg.step, msg.is_bigendian) == (
                h, w, 'rgb8', 3 * w, 0)
            assert len(msg.data) == h * w * 3
            for header in (msg.header, info.header):
                assert header.frame_id == f'{cam.name}_optical'
                assert header.stamp.sec * 10**9 + header.stamp.nanosec == stamp == info_stamp
            # CameraInfo describes this very image; K scales back to the map exactly.
            assert (info.height, info.width) == (h, w)
            fx, cx, fy, cy = info.k[0], info.k[2], info.k[4], info.k[5]
            assert (fx, fy, cx, cy) == (SCALE * cam.fx, SCALE * cam.fy,
                                        (cam.cx + 0.5) * SCALE - 0.5, (cam.cy + 0.5) * SCALE - 0.5)
            assert tuple(scale_camera_info(info, cam.height, cam.width))[:4] == (
                cam.fx, cam.fy, cam.cx, cam.cy)
            seen += 1
    assert seen == 12


def test_raw_image_is_the_drives_render_of_that_camera_and_time(bags, cfg):
    """
    The decoded image is camera_image at its stamp, and agrees with the feature map's RGB.

    Independent of the image path: the feature map (channels 0-2, tested on its own against
    the scene in test_drive_cameras) renders the same scene with the same exposure gain; at
    K = 1 with the same noise too, so the image is the map's RGB to half a level. The map's
    pixel centres are image pixels (K u + (K - 1) / 2, same for v), so for odd K they are the
    image's centre pixels: the same surfaces, differing only by the two frames' independent
    sensor noise (sigma 0.01 each: 0.014 for the difference) and rounding to 8 bits (0.002).
    A K x K block mean (even K) also averages across edges and texture cells: close on most
    pixels only.
    """
    _, _, messages, _ = bags['raw']
    drive = SyntheticDrive(cfg, seed=SEED, num_cameras=CAMERAS)
    names = {camera_image_topic(c.name): c for c in cfg.cameras[:CAMERAS]}
    checked = 0
    for topic, stamp, _, msg in messages:
        if topic not in names or checked >= 4:
            continue
        cam, t = names[topic], (stamp - EPOCH_NS) * 1e-9
        rgb = image_of(msg)
        assert np.array_equal(rgb, drive.camera_image(cam.name, t, SCALE))
        feats = drive.camera_features(cam.name, t)[..., :3]
        # At K = 1 the same rays and the same draws: the map's RGB rounded to 8 bits.
        same = drive.camera_image(cam.name, t, 1) / 255.0
        assert np.abs(same - feats).max() <= 0.5 / 255 + 1e-6
        centres = drive.camera_image(cam.name, t, 3)[1::3, 1::3] / 255.0
        diff = np.abs(centres - feats)
        # 6 sigma of the noise difference; a handful of grazing rays may round differently.
        # Mean |N(0, 0.014)| = 0.0113: the noise is there, drawn afresh, at the model's sigma.
        assert np.mean(diff > 0.085) < 1e-3 and 0.009 < np.mean(diff) < 0.014, (topic, t)
        blocks = rgb.reshape(cam.height, SCALE, cam.width, SCALE, 3).mean(axis=(1, 3)) / 255.0
        block_diff = np.abs(blocks - feats)
        # Noise alone gives a median near 0.007; in town up to 16 % of the blocks straddle edges.
        assert np.median(block_diff) < 0.02 and np.mean(block_diff < 0.1) > 0.8, (topic, t)
        checked += 1
    assert checked == 4


def test_jpeg_decodes_to_the_raw_image_within_a_few_levels(bags, cfg):
    """Pillow decodes each CompressedImage to the raw bag's image, 4:2:0, quality 90."""
    raw = {(t.replace('/image', ''), s): image_of(m) for t, s, _, m in bags['raw'][2]
           if t.endswith('/image')}
    n = 0
    for topic, stamp, _, msg in bags['jpeg'][2]:
        if not topic.endswith('/image/compressed'):
            continue
        assert msg.format == 'jpeg'
        assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == stamp
        picture = Image.open(io.BytesIO(bytes(msg.data)))
        assert picture.format == 'JPEG' and picture.mode == 'RGB'
        assert JpegImagePlugin.get_sampling(picture) == 2           # 4:2:0
        decoded = np.asarray(picture)
        expected = raw[topic.replace('/image/compressed', ''), stamp]
        assert decoded.shape == expected.shape
        error = np.abs(decoded.astype(int) - expected)
        # Quality 90 keeps the mean error at a few levels; colour edges, halved in chroma
        # resolution, make the largest ones.
        assert error.mean() < 4.0 and np.percentile(error, 99) < 24, (topic, stamp)
        n += 1
    assert n == 12


def test_culling_renders_exactly_what_every_ray_against_every_object_renders(cfg):
    drive = SyntheticDrive(cfg, seed=SEED)
    cam, t = cfg.cameras[0], 5.5                    # in town: buildings, parked cars, poles
    rays = camera_rays(cam, 3)
    origin = drive.ego_position(t) + np.array(cam.pose.translation)
    boxes, cylinders = drive.scene(origin[0] - CAMERA_VIEW_M, origin[0] + CAMERA_VIEW_M, t)
    everything = trace(rays, origin, boxes, cylinders)
    culled = drive.camera_surfaces(cam.name, t, 3)
    assert len(boxes) and len(cylinders)
    assert np.mean(everything.cls > 0) > 0.05          # objects: neither sky (-1) nor ground (0)
    for a, b in zip(everything, culled):
        assert np.array_equal(a, b)


def test_cli_writes_images_records_them_and_takes_zero_cameras(cfg, tmp_path):
    out = tmp_path / 'jpeg'
    assert main(['sample-bag', str(out), '--seconds', '0.2', '--cameras', '1', '--seed', '1',
                 '--camera-images', 'jpeg', '--image-scale', '2']) == 0
    types, messages, custom = read(out)
    assert types[camera_compressed_topic(cfg.cameras[0].name)] == COMPRESSED
    assert custom['jax_perception.camera_images'] == 'jpeg'
    assert custom['jax_perception.image_scale'] == '2'
    (first, *_) = [m for t, _, _, m in messages
                   if t == camera_compressed_topic(cfg.cameras[0].name)]
    front = cfg.cameras[0]
    assert Image.open(io.BytesIO(bytes(first.data))).size == (2 * front.width, 2 * front.height)
    assert main(['sample-bag', str(tmp_path / 'none'), '--seconds', '0.2', '--cameras', '0',
                 '--camera-images', 'raw']) == 0
    types, _, _ = read(tmp_path / 'none')
    assert not any('/camera/' in t for t in types)


@pytest.mark.parametrize('argv, message', [
    (['--camera-images', 'png'], "argument --camera-images: invalid choice: 'png'"),
    (['--camera-images', 'raw', '--image-scale', '0'],
     '--image-scale must be a number >= 1 and <= 8, got 0'),
    (['--camera-images', 'jpeg', '--image-scale', '9'],
     '--image-scale must be a number >= 1 and <= 8, got 9'),
    (['--camera-images', 'raw', '--image-scale', '2.5'],
     "argument --image-scale: invalid int value: '2.5'"),
    (['--image-scale', '2'], '--image-scale: only with --camera-images'),
])
def test_cli_refuses_bad_image_options_in_one_line(tmp_path, capsys, argv, message):
    out = tmp_path / 'bag'
    assert main(['sample-bag', str(out), '--seconds', '0.1', '--cameras', '1', *argv]) == 1
    assert_one_line_error(capsys, message)
    assert not out.exists()


@pytest.mark.parametrize('bad, message', [
    ({'camera_images': 'png'}, "camera_images must be None, 'raw' or 'jpeg', got 'png'"),
    ({'camera_images': 'raw', 'image_scale': 9}, 'image_scale must be an integer in 1..8'),
    ({'camera_images': 'raw', 'image_scale': 2.0}, 'image_scale must be an integer in 1..8'),
    ({'camera_images': 'jpeg', 'image_scale': True}, 'image_scale must be an integer in 1..8'),
])
def test_write_sample_bag_names_the_bad_image_argument(cfg, tmp_path, bad, message):
    with pytest.raises(ValueError, match=f'^{message}'):
        write_sample_bag(tmp_path / 'bag', cfg, seconds=0.1, num_cameras=1, **bad)
    assert not (tmp_path / 'bag').exists()
