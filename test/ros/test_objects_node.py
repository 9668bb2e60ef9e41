"""
The head's outputs in the live node: ~/output/objects, its markers, the output.bev_features switch.

The node runs as its own process with the toy head (test/toy_heads.py, on its PYTHONPATH); the
same clouds go through replay, and the two must give the same objects.
"""

import os
from pathlib import Path
from types import SimpleNamespace

import bag_messages
from configs import small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.geometry.stamps import stamp_ns
from jax_perception_node.outputs.objects import boxes_from_detections
from jax_perception_node.settings.config import config_from_parameters
import numpy as np
import pytest
from ros_harness import make_cloud, serving_node, set_parameters, stamp_of, status_values

T0 = 1_700_000_000 * 10**9
NS = '/jax_perception'
TEST_DIR = str(Path(__file__).resolve().parent.parent)
PARAMS = small_params(cameras=0, **{
    # The occupancy head with a log-size shift (0 here): a checkpoint can make it overflow.
    'head.module': 'toy_heads:size_gain_head', 'head.max_objects': 8,
    'head.score_threshold': 0.2, 'diagnostics.period_s': 0.2,
    'diagnostics.lidar_timeout_s': 60.0})


def clusters(seed: int, count: int) -> np.ndarray:
    """Points in ``count`` small clusters in the grid (LiDAR frame), float32 (N, 4)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform([-6, -10, -1], [6, 10, 0.5], (count, 3))
    pts = [np.c_[c + rng.uniform(-0.6, 0.6, (30, 3)) * [1, 1, 0.3], rng.uniform(0, 50, 30)]
           for c in centres]
    return np.concatenate(pts).astype(np.float32) if count else np.zeros((0, 4), np.float32)


@pytest.fixture(scope='module')
def running(tmp_path_factory):
    """Start the node with the toy head and a probe that also listens to the objects."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.qos import QoSProfile
    from vision_msgs.msg import Detection3DArray
    before = os.environ.get('PYTHONPATH')
    os.environ['PYTHONPATH'] = os.pathsep.join(filter(None, [TEST_DIR, before]))
    try:
        context = serving_node(PARAMS, tmp_path_factory.mktemp('objects'))
        node, probe = context.__enter__()
    finally:
        if before is None:
            del os.environ['PYTHONPATH']
        else:
            os.environ['PYTHONPATH'] = before
    try:
        probe.objects, probe.markers = [], []
        probe.node.create_subscription(Detection3DArray, f'{NS}/output/objects',
                                       lambda m: probe._keep(probe.objects, m),
                                       QoSProfile(depth=50))
        probe.wait_for(lambda: probe.node.count_publishers(f'{NS}/output/objects') > 0,
                       what='the objects publisher')
        setter = probe.node.create_client(SetParameters, f'{NS}/set_parameters')
        assert setter.wait_for_service(timeout_sec=10)
        yield node, probe, setter
    finally:
        context.__exit__(None, None, None)


def send(probe, stamp: int, points: np.ndarray):
    """Publish one cloud; return its objects message (and wait for its latency record)."""
    probe.cloud_pub.publish(make_cloud(points, stamp))
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.objects)
                   and any(stamp_of(m) == stamp for m in probe.latency),
                   what=f'objects of the cloud at {stamp}')
    return next(m for m in probe.objects if stamp_of(m) == stamp)


def detection_fields(msg) -> list:
    """Every number and name of a Detection3DArray's boxes (rclpy or rosbags)."""
    out = []
    for d in msg.detections:
        c, q, s = d.bbox.center.position, d.bbox.center.orientation, d.bbox.size
        [r] = d.results
        p = r.pose.pose.position
        out.append((c.x, c.y, c.z, q.x, q.y, q.z, q.w, s.x, s.y, s.z, r.hypothesis.class_id,
                    r.hypothesis.score, p.x, p.y, p.z, d.id, d.header.frame_id,
                    stamp_ns(d.header.stamp)))
    return out


def test_node_and_replay_give_identical_objects(running, tmp_path, warmed):
    node, probe, _ = running
    cfg = config_from_parameters(PARAMS)
    clouds = [(T0 + k * 10**9, clusters(k, n)) for k, n in enumerate((5, 0, 9, 2, 12))]
    writer = bagio.BagWriter(tmp_path / 'in')
    for stamp, points in clouds:
        writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)
    writer.close()
    pipe = warmed(cfg)
    replay_bag(tmp_path / 'in', tmp_path / 'out', cfg, pipeline=pipe)
    reader = bagio.open_reader(tmp_path / 'out')
    replayed = {stamp_ns(m.header.stamp): m for m in (
        bagio.deserialize(raw, t) for _, _, raw, t in bagio.iter_messages(
            reader, [bagio.OBJECTS_TOPIC]))}
    reader.close()
    path = FramePath(cfg, pipe)
    found = 0
    for stamp, points in clouds:
        live = send(probe, stamp, points)
        assert stamp_of(live) == stamp and live.header.frame_id == 'base_link'
        assert detection_fields(live) == detection_fields(replayed[stamp])
        # Both are FrameResult.objects, float32 through the messages' float64 (the yaw through
        # its quaternion).
        objects = path.process(bag_messages.cloud(points, stamp)).result.objects
        boxes = boxes_from_detections(live, ('vehicle',))
        assert boxes.shape == objects.shape
        np.testing.assert_array_equal(np.delete(boxes, 6, axis=1), np.delete(objects, 6, axis=1))
        np.testing.assert_allclose(boxes[:, 6], objects[:, 6], atol=1e-6)
        found += len(boxes)
    assert found > 0
    empty = next(m for m in probe.objects if stamp_of(m) == clouds[1][0])
    assert len(empty.detections) == 0           # an empty array when nothing is found
    assert node.alive()


def test_markers_come_while_subscribed(running):
    from rclpy.qos import QoSProfile
    from visualization_msgs.msg import MarkerArray
    node, probe, _ = running
    sub = probe.node.create_subscription(MarkerArray, f'{NS}/output/objects_markers',
                                         lambda m: probe._keep(probe.markers, m),
                                         QoSProfile(depth=50))
    try:
        probe.wait_for(lambda: probe.node.count_publishers(f'{NS}/output/objects_markers') > 0
                       and node_sees_subscriber(probe), what='the markers match')
        stamp = T0 + 100 * 10**9
        objects = send(probe, stamp, clusters(42, 6))
        probe.wait_for(lambda: any(stamp_of(m.markers[0]) == stamp for m in probe.markers),
                       what='the markers of the frame')
        markers = next(m for m in probe.markers if stamp_of(m.markers[0]) == stamp).markers
        assert markers[0].action == 3
        cubes = [m for m in markers[1:] if m.type == 1]
        assert len(cubes) == len(objects.detections) > 0
        for cube, det in zip(cubes, objects.detections):
            c = det.bbox.center.position
            assert (cube.pose.position.x, cube.pose.position.y) == (c.x, c.y)
            assert cube.header.frame_id == 'base_link'
    finally:
        probe.node.destroy_subscription(sub)


def node_sees_subscriber(probe) -> bool:
    info = probe.node.get_subscriptions_info_by_topic(f'{NS}/output/objects_markers')
    return len(info) > 0


def test_bev_features_switch_off_and_on_live(running):
    node, probe, setter = running
    [result] = set_parameters(probe, setter, output__bev_features=False)
    assert result.successful, result.reason
    stamp = T0 + 200 * 10**9
    objects = send(probe, stamp, clusters(7, 4))
    assert len(objects.detections) > 0
    later = T0 + 201 * 10**9
    send(probe, later, clusters(8, 4))
    # Reliable and in order: had the features of either frame been published, they were here
    # before the objects of the next frame.
    assert not any(stamp_of(m) in (stamp, later) for m in probe.features)
    [result] = set_parameters(probe, setter, output__bev_features=True)
    assert result.successful, result.reason
    back = T0 + 202 * 10**9
    send(probe, back, clusters(9, 4))
    probe.wait_for(lambda: any(stamp_of(m) == back for m in probe.features),
                   what='features again')
    assert node.alive()


def test_boxes_a_live_checkpoint_decodes_to_inf_are_dropped_counted_and_warned(
        running, tmp_path):
    from jax_perception_node.detection.head import save_weights
    node, probe, setter = running
    weights = tmp_path / 'overflow.npz'         # finite; its sizes decode to exp(100) m = inf
    save_weights(weights, {'scale': np.float32(2.0), 'bias': np.float32(-3.0),
                           'z': np.float32(0.75), 'log_size_gain': np.float32(100.0)})
    sane = send(probe, T0 + 300 * 10**9, clusters(10, 3))
    assert len(sane.detections) > 0
    [result] = set_parameters(probe, setter, head__weights=str(weights))
    assert result.successful, result.reason
    try:
        stamp = T0 + 301 * 10**9
        assert len(send(probe, stamp, clusters(10, 3)).detections) == 0
        warned = f'{len(sane.detections)} decoded boxes with non-finite values dropped'

        def counted():      # called holding probe.lock
            return any(warned in m.status[0].message and m.status[0].level == m.status[0].WARN
                       and int(status_values(m.status[0])['nonfinite_objects'])
                       >= len(sane.detections) for m in probe.diagnostics)
        probe.wait_for(counted, what='the nonfinite_objects WARN')
    finally:
        [result] = set_parameters(probe, setter, head__weights='')
        assert result.successful, result.reason


# -- FrameOutputs without a graph: what is built for whom ---------------------------------------

class FakePublisher:
    def __init__(self, topic):
        self.topic, self.sent, self.subscribers = topic, [], 0

    def get_subscription_count(self):
        return self.subscribers

    def publish(self, msg):
        self.sent.append(msg)


def fake_outputs(classes, bev_features=True):
    from jax_perception_node.ros.node_outputs import FrameOutputs
    pubs = {}

    def create(msg_type, topic, qos):
        pubs[topic] = FakePublisher(topic)
        return pubs[topic]
    outputs = FrameOutputs(create, layers=None, classes=classes, bev_features=bev_features)
    return outputs, pubs


def fake_frame(objects, features):
    from jax_perception_node.frames.frame_path import Frame
    result = SimpleNamespace(features=features, objects=objects)
    record = dict.fromkeys(('num_points', 'bucket', 'overflow_points', 'decode_ms', 'pad_ms',
                            'compute_ms', 'head_ms', 'cameras_used', 'objects',
                            'compiles_after_warmup'), 0)
    return Frame(T0, result, None, record, (), False, 0.0)


def publish(outputs, frame):
    from builtin_interfaces.msg import Time
    from rclpy.clock import Clock
    from std_msgs.msg import Header
    header = Header(stamp=Time(sec=T0 // 10**9), frame_id='base_link')
    outputs.publish(frame, header, 0.0, None, Clock())


def test_without_a_head_there_is_no_objects_publisher():
    _, pubs = fake_outputs(())
    assert '~/output/objects' not in pubs and '~/output/objects_markers' not in pubs


def test_markers_are_built_only_while_subscribed_and_features_follow_the_switch():
    outputs, pubs = fake_outputs(('vehicle',), bev_features=False)
    markers, objects = pubs['~/output/objects_markers'], pubs['~/output/objects']
    boxes = np.array([[1, 2, 0.5, 4, 2, 1.5, 0.3, 0.9, 0]], np.float32)
    assert not outputs.wants_features()
    publish(outputs, fake_frame(boxes, None))
    assert len(objects.sent) == 1 and markers.sent == []
    assert pubs['~/output/bev_features'].sent == []
    markers.subscribers = 1
    publish(outputs, fake_frame(boxes, None))
    assert len(objects.sent) == 2 and len(markers.sent) == 1
    assert len(markers.sent[0].markers) == 3
    pubs['~/output/bev_grid_map'].subscribers = 1
    assert outputs.wants_features()          # the GridMap needs the BEV
    pubs['~/output/bev_grid_map'].subscribers = 0
    outputs.update(None, True)
    assert outputs.wants_features()
    publish(outputs, fake_frame(boxes, np.zeros((4, 6, 10), np.float32)))
    assert len(pubs['~/output/bev_features'].sent) == 1
