"""Replay of bags whose cameras send images: both transports, topics named or found."""

from configs import small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.sensors.camera import read_features
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.tools.synthetic_drive import write_sample_bag
import numpy as np
import pytest

RGB = 'jax_perception_node.detection.encoders.pooled:rgb'


@pytest.fixture(scope='module')
def cfg():
    """Return the small two-camera config with both cameras sending images to ``rgb``."""
    return config_from_parameters(small_params(2, **{
        'cameras.front.input': 'image', 'cameras.rear.input': 'image', 'encoder.module': RGB,
        'encoder.stride': 4}))


@pytest.fixture(scope='module')
def bags(cfg, tmp_path_factory):
    """One short drive twice: its cameras as rgb8 Images and as JPEG CompressedImages."""
    root = tmp_path_factory.mktemp('image_bags')
    for mode in ('raw', 'jpeg'):
        write_sample_bag(root / mode, cfg, seconds=0.5, seed=3, camera_images=mode,
                         image_scale=4)
    return root


def bevs(path) -> list[np.ndarray]:
    """Return the BEVs a replay wrote, in order."""
    reader = bagio.open_reader(path)
    try:
        return [read_features(bagio.deserialize(raw, msgtype)).copy()
                for _, _, raw, msgtype in bagio.iter_messages(reader, [bagio.FEATURES_TOPIC])]
    finally:
        reader.close()


def test_replay_encodes_raw_and_jpeg_images_alike(cfg, bags, tmp_path):
    """The LiDAR channels equal; the pooled colour within JPEG's error; every camera used."""
    outputs = {}
    for mode in ('raw', 'jpeg'):
        result = replay_bag(bags / mode, tmp_path / mode, cfg)
        assert (result.frames, result.rejected_feature_maps) == (5, 0), result.errors
        # The first sweep comes before the first images (the drive's camera stamps).
        assert [r['cameras_used'] for r in result.records] == [0, 2, 2, 2, 2]
        assert all(r['compiles_after_warmup'] == 0 for r in result.records)
        outputs[mode] = bevs(tmp_path / mode)
    for raw, jpeg in zip(outputs['raw'][1:], outputs['jpeg'][1:]):
        np.testing.assert_array_equal(raw[..., :6], jpeg[..., :6])
        np.testing.assert_array_equal(raw[..., 9], jpeg[..., 9])
        seen = raw[..., 9] > 0
        assert seen.sum() > 100
        diff = np.abs(raw[..., 6:9] - jpeg[..., 6:9])[seen]
        assert diff.mean() < 3 / 255 and 0 < diff.max() < 0.1      # JPEG, not the same bytes


def test_a_named_camera_topic_may_be_either_transport_and_nothing_else(cfg, bags, tmp_path):
    named = bagio.BagTopics(cameras={'front': bagio.camera_compressed_topic('front'),
                                     'rear': bagio.camera_compressed_topic('rear')})
    result = replay_bag(bags / 'jpeg', tmp_path / 'named', cfg, named)
    assert [r['cameras_used'] for r in result.records] == [0, 2, 2, 2, 2]
    wrong = bagio.BagTopics(cameras={'front': bagio.POINTCLOUD_TOPIC})
    with pytest.raises(bagio.BagError, match=r'--camera-topic front=/jax_perception/input/'
                                             r'pointcloud: is sensor_msgs/msg/PointCloud2, want '
                                             r'sensor_msgs/msg/Image or sensor_msgs/msg/'
                                             r'CompressedImage'):
        replay_bag(bags / 'jpeg', tmp_path / 'wrong', cfg, wrong)
