"""
The head's outputs in the live node: ~/output/objects, its markers, the output.bev_features switch.

The node runs as its own process with the toy head (test/toy_heads.py, on its PYTHONPATH) and
``output.objects_type: autoware``, so ~/output/objects is autoware_perception_msgs/
DetectedObjects (the launch test listens to the default vision_msgs type live); the same clouds
go through replay of both types, and all must give the same objects.
"""

from dataclasses import replace
import os
from pathlib import Path
from types import SimpleNamespace

import bag_messages
from configs import small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.geometry.stamps import stamp_ns
from jax_perception_node.outputs.detected_objects import boxes_from_detected_objects
from jax_perception_node.outputs.objects import boxes_from_detections
from jax_perception_node.settings.config import config_from_parameters
import numpy as np
import pytest
from ros_harness import (make_cloud, other_domain, serving_node, set_parameters, stamp_of,
                         status_values, wait_answering)

T0 = 1_700_000_000 * 10**9
NS = '/jax_perception'
TEST_DIR = str(Path(__file__).resolve().parent.parent)
PARAMS = small_params(cameras=0, **{
    # The occupancy head with a log-size shift (0 here): a checkpoint can make it overflow.
    'head.module': 'toy_heads:size_gain_head', 'head.max_objects': 8,
    'head.score_threshold': 0.2, 'diagnostics.period_s': 0.2,
    'diagnostics.lidar_timeout_s': 60.0, 'output.objects_type': 'autoware'})
LABELS = (('car', 'CAR'),)          # what the default output.autoware_labels gives 'car'
CAR, TRUCK = 1, 2                   # ObjectClassification's labels
PUBLISHED_TIME = f'{NS}/output/objects/debug/published_time'


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
    from autoware_perception_msgs.msg import DetectedObjects
    from rcl_interfaces.srv import SetParameters
    from rclpy.qos import QoSProfile
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
        probe.node.create_subscription(DetectedObjects, f'{NS}/output/objects',
                                       lambda m: probe._keep(probe.objects, m),
                                       QoSProfile(depth=50))
        probe.wait_for(lambda: probe.node.count_publishers(f'{NS}/output/objects') > 0,
                       what='the objects publisher')
        setter = probe.node.create_client(SetParameters, f'{NS}/set_parameters')
        wait_answering(probe, setter)
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


def object_fields(msg) -> list:
    """Every field of a DetectedObjects' objects, as plain values (rclpy or rosbags)."""
    out = []
    for o in msg.objects:
        k = o.kinematics
        p, q = k.pose_with_covariance.pose.position, k.pose_with_covariance.pose.orientation
        t = k.twist_with_covariance.twist
        d = o.shape.dimensions
        out.append((o.existence_probability, [(c.label, c.probability) for c in o.classification],
                    p.x, p.y, p.z, q.x, q.y, q.z, q.w, list(k.pose_with_covariance.covariance),
                    k.has_position_covariance, k.orientation_availability,
                    t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z,
                    list(k.twist_with_covariance.covariance), k.has_twist,
                    k.has_twist_covariance, o.shape.type, len(o.shape.footprint.points),
                    d.x, d.y, d.z))
    return out


def read_objects(bag) -> dict:
    """Return LiDAR stamp -> the objects message of a replay's output bag."""
    reader = bagio.open_reader(bag)
    try:
        return {stamp_ns(m.header.stamp): m for m in (
            bagio.deserialize(raw, t) for _, _, raw, t in bagio.iter_messages(
                reader, [bagio.OBJECTS_TOPIC]))}
    finally:
        reader.close()


def test_node_and_replay_give_identical_objects(running, tmp_path, warmed):
    """Live DetectedObjects = replay's DetectedObjects = replay's Detection3DArray, boxes alike."""
    node, probe, _ = running
    cfg = config_from_parameters(PARAMS)
    clouds = [(T0 + k * 10**9, clusters(k, n)) for k, n in enumerate((5, 0, 9, 2, 12))]
    writer = bagio.BagWriter(tmp_path / 'in')
    for stamp, points in clouds:
        writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)
    writer.close()
    pipe = warmed(cfg)
    replay_bag(tmp_path / 'in', tmp_path / 'out', cfg, pipeline=pipe)
    vision_cfg = replace(cfg, output=replace(cfg.output, objects_type='vision_msgs'))
    replay_bag(tmp_path / 'in', tmp_path / 'vision', vision_cfg, pipeline=pipe)
    replayed, vision = read_objects(tmp_path / 'out'), read_objects(tmp_path / 'vision')
    assert all(m.__msgtype__ == 'autoware_perception_msgs/msg/DetectedObjects'
               for m in replayed.values())
    path = FramePath(cfg, pipe)
    found = 0
    for stamp, points in clouds:
        live = send(probe, stamp, points)
        assert stamp_of(live) == stamp and live.header.frame_id == 'base_link'
        assert object_fields(live) == object_fields(replayed[stamp])
        assert all(o.classification[0].label == CAR for o in live.objects)
        # Both are FrameResult.objects, float32 through the messages (the yaw through its
        # quaternion), and the vision_msgs run's boxes are the same numbers.
        objects = path.process(bag_messages.cloud(points, stamp)).result.objects
        boxes = boxes_from_detected_objects(live, ('car',), LABELS)
        assert boxes.shape == objects.shape
        np.testing.assert_array_equal(np.delete(boxes, 6, axis=1), np.delete(objects, 6, axis=1))
        np.testing.assert_allclose(boxes[:, 6], objects[:, 6], atol=1e-6)
        np.testing.assert_array_equal(boxes, boxes_from_detections(vision[stamp], ('car',)))
        found += len(boxes)
    assert found > 0
    empty = next(m for m in probe.objects if stamp_of(m) == clouds[1][0])
    assert len(empty.objects) == 0           # an empty array when nothing is found
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
        assert len(cubes) == len(objects.objects) > 0
        for cube, obj in zip(cubes, objects.objects):
            c = obj.kinematics.pose_with_covariance.pose.position
            assert (cube.pose.position.x, cube.pose.position.y) == (c.x, c.y)
            assert cube.header.frame_id == 'base_link'
    finally:
        probe.destroy_subscription(sub)


def node_sees_subscriber(probe) -> bool:
    info = probe.node.get_subscriptions_info_by_topic(f'{NS}/output/objects_markers')
    return len(info) > 0


def test_bev_features_switch_off_and_on_live(running):
    node, probe, setter = running
    [result] = set_parameters(probe, setter, output__bev_features=False)
    assert result.successful, result.reason
    stamp = T0 + 200 * 10**9
    objects = send(probe, stamp, clusters(7, 4))
    assert len(objects.objects) > 0
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
    assert len(sane.objects) > 0
    [result] = set_parameters(probe, setter, head__weights=str(weights))
    assert result.successful, result.reason
    try:
        stamp = T0 + 301 * 10**9
        assert len(send(probe, stamp, clusters(10, 3)).objects) == 0
        warned = f'{len(sane.objects)} decoded boxes with non-finite values dropped'

        def counted():      # called holding probe.lock
            return any(warned in m.status[0].message and m.status[0].level == m.status[0].WARN
                       and int(status_values(m.status[0])['nonfinite_objects'])
                       >= len(sane.objects) for m in probe.diagnostics)
        probe.wait_for(counted, what='the nonfinite_objects WARN')
    finally:
        [result] = set_parameters(probe, setter, head__weights='')
        assert result.successful, result.reason


def test_a_cloud_off_the_heads_intensity_scale_is_warned_with_the_scale_to_set(running):
    node, probe, _ = running
    points = clusters(12, 6)          # intensities 0-50: on the head's 0-255 scale
    send(probe, T0 + 400 * 10**9, points)
    signal = points * np.float32([1, 1, 1, 100])     # 0-5000, as an Ouster's signal might
    send(probe, T0 + 401 * 10**9, signal)
    warned = ('1 clouds whose intensities read off the scale the head was trained on (the '
              'lidar.intensity_scale)')

    def counted():      # called holding probe.lock
        return any(warned in m.status[0].message and m.status[0].level == m.status[0].WARN
                   and int(status_values(m.status[0])['clouds_off_intensity_scale']) == 1
                   for m in probe.diagnostics)
    probe.wait_for(counted, what='the clouds_off_intensity_scale WARN')
    p99 = np.percentile(signal[:, 3], 99.0)          # 180 points: every one in the sample
    probe.wait_for(lambda: 'point cloud intensities read off the scale the head was trained '
                           f'on: 99 % of them under {p99:.4g}: set lidar.intensity_scale to '
                           f'about {float(f"{127.5 / p99:.2g}"):g}' in node.log(),
                   what='the log line with the scale to set')


def test_published_time_comes_when_subscribed(running):
    """Autoware's PublishedTime: the objects' header, the wall clock when they went out."""
    import time
    from autoware_internal_msgs.msg import PublishedTime
    from rclpy.qos import QoSProfile
    node, probe, _ = running
    times = []
    sub = probe.node.create_subscription(PublishedTime, PUBLISHED_TIME,
                                         lambda m: probe._keep(times, m), QoSProfile(depth=1))
    try:
        probe.wait_for(lambda: probe.node.count_publishers(PUBLISHED_TIME) > 0,
                       what='the published_time publisher')
        # The node learns of this subscriber a moment after the probe sees its publisher: a
        # frame published before that has no PublishedTime; the next ones do.
        for k in range(50):
            stamp = T0 + (400 + k) * 10**9
            before = time.time_ns()
            objects = send(probe, stamp, clusters(11, 3))
            with probe.lock:
                mine = [m for m in times if stamp_of(m) == stamp]
            if mine:
                break
        else:
            raise AssertionError('no PublishedTime in 50 frames')
        after = time.time_ns()
        [published] = mine
        assert published.header.frame_id == objects.header.frame_id == 'base_link'
        published_ns = (published.published_stamp.sec * 10**9
                        + published.published_stamp.nanosec)
        assert before <= published_ns <= after
    finally:
        probe.destroy_subscription(sub)
    assert node.alive()


def test_autoware_labels_change_live(running):
    node, probe, setter = running
    [result] = set_parameters(probe, setter, output__autoware_labels=['car:TRUCK'])
    assert result.successful, result.reason
    try:
        objects = send(probe, T0 + 500 * 10**9, clusters(12, 4))
        assert len(objects.objects) > 0
        assert [o.classification[0].label for o in objects.objects] == [TRUCK] * len(
            objects.objects)
        [result] = set_parameters(probe, setter, output__objects_type='vision_msgs')
        assert not result.successful and 'static' in result.reason
    finally:
        [result] = set_parameters(probe, setter, output__autoware_labels=['car:CAR'])
        assert result.successful, result.reason
    objects = send(probe, T0 + 501 * 10**9, clusters(12, 4))
    assert {o.classification[0].label for o in objects.objects} == {CAR}


# -- FrameOutputs without a graph: what is built for whom ---------------------------------------

class FakePublisher:
    def __init__(self, topic, msg_type=None):
        self.topic, self.msg_type, self.sent, self.subscribers = topic, msg_type, [], 0
        self.topic_name = topic

    def get_subscription_count(self):
        return self.subscribers

    def publish(self, msg):
        self.sent.append(msg)


@pytest.mark.parametrize('rules, objects, published_time', [
    ((), '/jax_perception/output/objects',
     '/jax_perception/output/objects/debug/published_time'),
    # As Autoware's PublishedTimePublisher: after the objects' topic, wherever it is remapped.
    (('~/output/objects:=/perception/objects',), '/perception/objects',
     '/perception/objects/debug/published_time'),
    # Its own remap wins.
    (('~/output/objects:=/perception/objects',
      '~/output/objects/debug/published_time:=/timing/objects'), '/perception/objects',
     '/timing/objects'),
])
def test_published_time_follows_the_objects_topic_as_remapped(rules, objects, published_time):
    import rclpy
    from jax_perception_node.ros.node_outputs import FrameOutputs
    context = rclpy.Context()
    args = ['--ros-args', *(arg for rule in rules for arg in ('-r', rule))]
    rclpy.init(args=args, context=context, domain_id=other_domain(7))
    node = rclpy.create_node('jax_perception', context=context)
    try:
        outputs = FrameOutputs(node.create_publisher, None, ('car',),
                               resolve_topic_name=node.resolve_topic_name)
        assert outputs.publishers['objects'].topic_name == objects
        assert outputs.publishers['published_time'].topic_name == published_time
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def fake_outputs(classes, bev_features=True, **output):
    from jax_perception_node.ros.node_outputs import FrameOutputs
    from jax_perception_node.settings.config import OutputConfig
    pubs = {}

    def create(msg_type, topic, qos):
        pubs[topic] = FakePublisher(topic, msg_type)
        return pubs[topic]
    outputs = FrameOutputs(create, layers=None, classes=classes, bev_features=bev_features,
                           output=OutputConfig(**output))
    return outputs, pubs


def test_head_classes_autoware_objects_carry_as_unknown_are_said_at_start_and_on_a_change():
    """Found by an independent review: a typo in output.autoware_labels went unsaid."""
    from jax_perception_node.ros.node_outputs import FrameOutputs
    from jax_perception_node.settings.config import autoware_labels, OutputConfig
    said, classes = [], ('truck', 'person', 'traffic_cone')

    def create(msg_type, topic, qos):
        return FakePublisher(topic, msg_type)

    def output(*items, objects_type='autoware'):
        return OutputConfig(objects_type=objects_type, autoware_labels=autoware_labels(items))
    outputs = FrameOutputs(create, None, classes, output=output('truck:TRUCK', 'persn:PEDESTRIAN'),
                           warn=said.append)
    assert said == ['head classes person, traffic_cone go out as UNKNOWN: '
                    'output.autoware_labels maps none of them (class:LABEL)']
    outputs.update(None, True, output('truck:TRUCK', 'persn:PEDESTRIAN'))    # unchanged
    outputs.update(None, True, output('truck:TRUCK', 'person:PEDESTRIAN'))
    assert said[1:] == ['head classes traffic_cone go out as UNKNOWN: output.autoware_labels '
                        'maps none of them (class:LABEL)']
    outputs.update(None, True, output('truck:TRUCK', 'person:PEDESTRIAN', 'traffic_cone:UNKNOWN'))
    assert len(said) == 2
    FrameOutputs(create, None, classes, output=output('truck:TRUCK', objects_type='vision_msgs'),
                 warn=said.append)       # vision_msgs carry the class names: nothing to say
    assert len(said) == 2


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
    outputs, pubs = fake_outputs(('car',), bev_features=False)
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


def test_objects_type_and_published_time_on_request():
    from autoware_internal_msgs.msg import PublishedTime
    from autoware_perception_msgs.msg import DetectedObjects
    from jax_perception_node.settings.config import OutputConfig
    from vision_msgs.msg import Detection3DArray
    import time
    outputs, pubs = fake_outputs(('car',))
    assert pubs['~/output/objects'].msg_type is Detection3DArray       # the default
    outputs, pubs = fake_outputs(('car', 'bus'), objects_type='autoware',
                                 autoware_labels=LABELS)
    objects = pubs['~/output/objects']
    published = pubs['~/output/objects/debug/published_time']
    assert objects.msg_type is DetectedObjects and published.msg_type is PublishedTime
    boxes = np.array([[1, 2, 0.5, 4, 2, 1.5, 0.3, 0.9, 0], [5, 1, 0.5, 9, 3, 3, 0, 0.5, 1]],
                     np.float32)
    publish(outputs, fake_frame(boxes, None))
    assert len(objects.sent) == 1 and published.sent == []       # nobody asked
    assert [o.classification[0].label for o in objects.sent[0].objects] == [CAR, 0]
    published.subscribers = 1
    before = time.time_ns()
    publish(outputs, fake_frame(boxes, None))
    after = time.time_ns()
    [msg] = published.sent
    assert stamp_of(msg) == T0 and msg.header.frame_id == 'base_link'
    assert before <= msg.published_stamp.sec * 10**9 + msg.published_stamp.nanosec <= after
    # A live label change (the type stays: it is static).
    outputs.update(None, True, OutputConfig('autoware', (('bus', 'BUS'),)))
    publish(outputs, fake_frame(boxes, None))
    assert [o.classification[0].label for o in objects.sent[-1].objects] == [0, 3]


def test_latency_and_timing_are_built_only_while_subscribed_and_the_cycle_counts_on():
    import time
    from jax_perception_node.ros.timing import TIMING_TOPICS
    outputs, pubs = fake_outputs(())
    latency, timing = pubs['~/debug/latency'], {k: pubs[t] for k, t in TIMING_TOPICS.items()}
    publish(outputs, fake_frame(None, None))
    time.sleep(0.3)
    publish(outputs, fake_frame(None, None))
    assert latency.sent == [] and all(pub.sent == [] for pub in timing.values())  # nobody asked
    latency.subscribers = timing['cyclic_time_ms'].subscribers = 1
    time.sleep(0.6)
    publish(outputs, fake_frame(None, None))
    assert len(latency.sent) == 1 and len(timing['cyclic_time_ms'].sent) == 1
    assert timing['processing_time_ms'].sent == timing['pipeline_latency_ms'].sent == []
    # The cycle counted the frames nobody received: the time since the frame before (0.6 s),
    # not since the node started (0.9 s and more).
    assert 600 <= timing['cyclic_time_ms'].sent[0].data < 850
