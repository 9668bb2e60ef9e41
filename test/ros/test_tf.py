"""
Sensor poses from TF: replay of a bag with /tf_static and /tf, and the node over loopback DDS.

The parameters carry deliberately wrong poses (``extrinsics.source: tf``): every output is
checked against the NumPy reference at the TF poses, with zero compiles.
"""

import math

import bag_messages
from bag_messages import read_all
from configs import FRONT, small_config, small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.core.pipeline import BevPipeline, compile_count
import numpy as np
import pytest
from reference import lift_ref, voxelize_ref
from ros_harness import (make_cloud, make_features, serving_node, stamp_of, status_values,
                         wait_answering)
from tf_messages import rclpy_tf_types, tf_message, transform

T0 = 1_700_000_000 * 10**9
DT = 100_000_000
RNG = np.random.default_rng(17)
POINTS = [np.abs(RNG.normal(scale=4.0, size=(300, 4))).astype(np.float32) + [1, -4, -1, 0]
          for _ in range(3)]
MAP = RNG.uniform(size=(12, 20, 3)).astype(np.float32)
VELODYNE = ((0.5, 0.25, 0.75), (0.0, 0.0, math.sin(math.radians(10)), math.cos(math.radians(10))))
CAMERA = ((1.0, 0.0, 1.5), tuple(FRONT))
# Wrong on purpose: TF must win over each of these.
WRONG = {'lidar.translation': [-3.0, 2.0, 0.0], 'lidar.frame_id': 'lidar',
         'cameras.front.translation': [0.0, 2.0, 1.0], 'fusion.max_samples_per_cell': 3,
         'extrinsics.source': 'tf'}


def tf_config(**overrides):
    return small_config(1, **{**WRONG, **overrides})


def truth_config():
    """Return the configuration whose parameters hold the TF poses, for the reference."""
    return small_config(1, **{'lidar.translation': list(VELODYNE[0]),
                              'lidar.rotation_xyzw': list(VELODYNE[1]),
                              'cameras.front.translation': list(CAMERA[0]),
                              'cameras.front.rotation_xyzw': list(CAMERA[1])})


def static_transforms(types=bag_messages.TYPES):
    return tf_message(transform('base_link', 'velodyne', 0, *VELODYNE, types=types),
                      transform('base_link', 'cam_front', 0, *CAMERA, types=types), types=types)


def check_output(features, points):
    truth = truth_config()
    np.testing.assert_allclose(features[..., :6], voxelize_ref(points, truth), rtol=1e-5,
                               atol=1e-5)
    camera, coverage = lift_ref(truth, {'front': MAP})
    assert 0 < coverage.sum() < coverage.size
    np.testing.assert_allclose(features[..., 6:9], camera, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(features[..., 9], coverage)


def send_velodyne_frame_and_check(probe):
    """Send a map in cam_front and a cloud in velodyne; the output is the one at the TF poses."""
    probe.publish_maps({'front': make_features(MAP, T0, 'front', 'cam_front')})
    probe.cloud_pub.publish(make_cloud(POINTS[0], T0, 'velodyne'))
    probe.wait_for(lambda: any(stamp_of(m) == T0 for m in probe.features),
                   what='the output of the velodyne cloud')
    msg = next(m for m in probe.features if stamp_of(m) == T0)
    check_output(np.frombuffer(bytes(msg.data), np.float32).reshape(
        msg.height, msg.width, -1), POINTS[0])


def test_replay_takes_the_poses_from_tf_static(tmp_path):
    cfg = tf_config()
    pipe = BevPipeline(cfg)
    pipe.warmup()
    with bagio.BagWriter(tmp_path / 'in') as writer:
        writer.write('/tf_static', static_transforms(), T0 - 1)
        for k, points in enumerate(POINTS):
            stamp = T0 + k * DT
            writer.write(bagio.camera_topic('front'),
                         bag_messages.features(MAP, stamp, 'front', 'cam_front'), stamp)
            frame = 'radar' if k == 1 else 'velodyne'      # radar: in no TF tree
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp, frame),
                         stamp + 1)
    compiles = compile_count()
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg, pipeline=pipe)
    assert compile_count() == compiles and result.compiles_after_warmup == 0
    assert (result.frames, result.rejected, result.frames_without_tf) == (2, 0, 1)
    assert result.summary()['transforms_received'] == 1
    assert any('frame "radar" is unknown' in e for e in result.errors)
    outputs = [m for _, _, m in read_all(tmp_path / 'out', [bagio.FEATURES_TOPIC])]
    assert [stamp_of(m) for m in outputs] == [T0, T0 + 2 * DT]
    for msg, points in zip(outputs, (POINTS[0], POINTS[2])):
        check_output(np.frombuffer(bytes(msg.data), np.float32).reshape(
            msg.height, msg.width, -1), points)


def test_replay_with_parameter_poses_does_not_read_tf(tmp_path):
    cfg = tf_config(**{'extrinsics.source': 'parameters'})
    with bagio.BagWriter(tmp_path / 'in') as writer:
        writer.write('/tf_static', static_transforms(), T0 - 1)
        writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(POINTS[0], T0, 'lidar'), T0)
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg)
    assert (result.frames, result.transforms_received) == (1, 0)
    (msg,) = [m for _, _, m in read_all(tmp_path / 'out', [bagio.FEATURES_TOPIC])]
    got = np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, -1)
    np.testing.assert_allclose(got[..., :6], voxelize_ref(POINTS[0], cfg), rtol=1e-5, atol=1e-5)


def static_publisher(domain_id=None):
    """Return (context, node, publisher) of a latched /tf_static, as robot_state_publisher."""
    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from tf2_msgs.msg import TFMessage
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = rclpy.create_node('static_tf', context=context)
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
    return context, node, node.create_publisher(TFMessage, '/tf_static', qos)


@pytest.fixture
def latched():
    """Publish the static transforms before the node starts; they stay latched."""
    import rclpy
    context, node, pub = static_publisher()
    pub.publish(static_transforms(rclpy_tf_types()))
    yield
    node.destroy_node()
    rclpy.try_shutdown(context=context)


def test_node_places_a_cloud_by_tf_static_and_skips_an_unknown_frame(latched, tmp_path):
    params = {**WRONG, 'diagnostics.lidar_timeout_s': 60.0, 'diagnostics.period_s': 0.2}
    with serving_node(small_params(1, **params), tmp_path, cameras=['front']) as (node, probe):
        probe.wait_for(lambda: probe.diagnostics and status_values(
            probe.diagnostics[-1].status[0])['transforms_received'] == '1',
            what='the latched /tf_static')
        send_velodyne_frame_and_check(probe)
        probe.cloud_pub.publish(make_cloud(POINTS[1], T0 + DT, 'radar'))
        probe.wait_for(lambda: status_values(probe.diagnostics[-1].status[0])[
            'frames_without_tf'] == '1', what='the radar cloud counted')
        probe.wait_for(lambda: 'no TF pose' in probe.diagnostics[-1].status[0].message,
                       what='the WARN')
        status = probe.diagnostics[-1].status[0]
        assert status.level == b'\x01', status.message
        values = status_values(status)
        assert values['compiles_after_warmup'] == '0' and values['rejected'] == '0'
        assert values['processed'] == '1'
        assert not any(stamp_of(m) == T0 + DT for m in probe.features)
        assert 'frame "radar" is unknown' in node.log()


def test_a_live_switch_to_tf_subscribes_and_back_checks_frames_again(latched, tmp_path):
    from rcl_interfaces.srv import SetParameters
    from ros_harness import set_parameters
    params = {**WRONG, 'extrinsics.source': 'parameters', 'diagnostics.lidar_timeout_s': 60.0,
              'diagnostics.period_s': 0.2}
    with serving_node(small_params(1, **params), tmp_path, cameras=['front']) as (node, probe):
        setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
        wait_answering(probe, setter)
        probe.wait_for(lambda: len(probe.diagnostics) > 1, what='diagnostics')
        # Parameters: no TF is taken; a velodyne cloud is rejected by the frame check.
        assert status_values(probe.diagnostics[-1].status[0])['transforms_received'] == '0'
        (result,) = set_parameters(probe, setter, extrinsics__source='tf')
        assert result.successful, result.reason
        probe.wait_for(lambda: status_values(probe.diagnostics[-1].status[0])[
            'transforms_received'] == '1', what='the latched /tf_static after the switch')
        send_velodyne_frame_and_check(probe)
        (result,) = set_parameters(probe, setter, extrinsics__source='parameters')
        assert result.successful, result.reason
        probe.cloud_pub.publish(make_cloud(POINTS[1], T0 + DT, 'velodyne'))
        probe.wait_for(lambda: status_values(probe.diagnostics[-1].status[0])[
            'rejected'] == '1', what='the velodyne cloud rejected by the frame check')
        assert status_values(probe.diagnostics[-1].status[0])['compiles_after_warmup'] == '0'
