"""Replay with a head: objects and markers in the output bag, scored against the ground truth."""

import json

from configs import small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.detection.detection_eval import evaluate, evaluate_classes
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.geometry.stamps import stamp_ns
from jax_perception_node.outputs.objects import boxes_from_detections, GROUND_TRUTH_TOPIC
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.param_file import write_param_file
from jax_perception_node.tools.cli import main
import numpy as np
import pytest

TOY = 'toy_heads:occupancy_head'
# A 32 x 48 grid of 0.5 m, no cameras; buckets that hold the small LiDAR's sweeps.
HEAD_PARAMS = small_params(cameras=0, **{
    'buckets': [1024, 4096], 'head.module': TOY, 'head.max_objects': 8,
    'head.score_threshold': 0.2})


def read_all(bag, topics):
    reader = bagio.open_reader(bag)
    try:
        return [(topic, bagio.deserialize(raw, msgtype))
                for topic, _, raw, msgtype in bagio.iter_messages(reader, topics)]
    finally:
        reader.close()


def topics_of(bag) -> dict:
    reader = bagio.open_reader(bag)
    try:
        return {c.topic: c.msgcount for c in reader.connections}
    finally:
        reader.close()


@pytest.fixture(scope='module')
def head_cfg():
    return config_from_parameters(HEAD_PARAMS)


@pytest.fixture(scope='module')
def head_pipe(warmed, head_cfg):
    return warmed(head_cfg)


@pytest.fixture(scope='module')
def drive(tmp_path_factory, head_cfg):
    """Write a 1 s sample bag of seed 7 with its ground truth: 10 LiDAR frames."""
    from jax_perception_node.tools.synthetic_drive import LidarModel, write_sample_bag
    path = tmp_path_factory.mktemp('drive') / 'bag'
    write_sample_bag(path, head_cfg, seconds=1.0, num_cameras=0, seed=7,
                     lidar=LidarModel(beams=16, azimuth_steps=256), odometry_hz=0)
    return path


def test_replay_writes_the_objects_and_scores_them_against_the_ground_truth(
        tmp_path, drive, head_cfg, head_pipe):
    result = replay_bag(drive, tmp_path / 'out', head_cfg, pipeline=head_pipe)
    assert result.frames == 10 and result.compiles_after_warmup == 0
    counts = topics_of(tmp_path / 'out')
    assert counts[bagio.OBJECTS_TOPIC] == counts[bagio.OBJECTS_MARKERS_TOPIC] == 10
    # The objects are what the frame path gives for the same clouds, exactly.
    clouds = [m for _, m in read_all(drive, [bagio.POINTCLOUD_TOPIC])]
    path = FramePath(head_cfg, head_pipe)
    written = [m for _, m in read_all(tmp_path / 'out', [bagio.OBJECTS_TOPIC])]
    for cloud, msg in zip(clouds, written):
        assert stamp_ns(msg.header.stamp) == stamp_ns(cloud.header.stamp)
        assert msg.header.frame_id == head_cfg.grid.frame_id
        boxes = boxes_from_detections(msg, ('car',))
        expected = path.process(cloud).result.objects
        np.testing.assert_allclose(boxes, expected, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(boxes[:, [0, 1, 2, 3, 4, 5, 7, 8]],
                                      expected[:, [0, 1, 2, 3, 4, 5, 7, 8]])
    markers = [m for _, m in read_all(tmp_path / 'out', [bagio.OBJECTS_MARKERS_TOPIC])]
    assert [len(m.markers) for m in markers] == [1 + 2 * len(m.detections) for m in written]
    # The summary's score is detection_eval over the bag's own messages, paired by stamp.
    truth = {stamp_ns(m.header.stamp): boxes_from_detections(m, ('car',))
             for _, m in read_all(drive, [GROUND_TRUTH_TOPIC])}
    pairs = [(boxes_from_detections(m, ('car',)), truth[stamp_ns(m.header.stamp)])
             for m in written]
    assert sum(len(t) for _, t in pairs) > 0
    want = evaluate(pairs)
    assert want['predictions'] > 0 and want['ground_truth'] > 0
    summary = result.summary()
    got = summary['detection']
    assert got.pop('frames') == 10 and got.pop('other_classes') == {}
    assert got.pop('frames_without_output') == 0
    # Per class (the toy head's one class): evaluate_classes of the same pairs, beside the rest.
    classes = evaluate_classes(pairs, ('car',))
    assert got.pop('class') == 'car'
    assert got.pop('per_class') == classes['per_class']
    assert got.pop('mean_ap') == classes['mean_ap'] == classes['per_class']['car']['ap']
    assert got.pop('classes_evaluated') == ['car']
    assert got.pop('mean_ap_thresholds_m') == [0.5, 1.0, 2.0, 4.0]
    assert got.pop('mean_ap_range_m') == 50.0
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    json.dumps(summary)
    records = result.records
    assert all('head_ms' in r and r['objects'] == len(m.detections)
               for r, m in zip(records, written))


def mcap_objects(bag) -> list[tuple[str, object]]:
    """Return (schema name, message) of each objects message, decoded by the mcap readers."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    [path] = bag.glob('*.mcap')
    with open(path, 'rb') as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        return [(schema.name, decoded) for schema, _, _, decoded in
                reader.iter_decoded_messages(topics=[bagio.OBJECTS_TOPIC])]


def test_replay_writes_the_chosen_objects_type_and_both_decode_with_the_mcap_readers(
        tmp_path, drive, head_cfg, head_pipe):
    """output.objects_type autoware: DetectedObjects with the vision_msgs run's boxes."""
    from dataclasses import replace
    from jax_perception_node.outputs.detected_objects import boxes_from_detected_objects
    autoware_cfg = replace(head_cfg, output=replace(head_cfg.output, objects_type='autoware'))
    assert head_cfg.output.objects_type == 'vision_msgs'       # the default
    runs = {}
    for cfg, msgtype in ((head_cfg, 'vision_msgs/msg/Detection3DArray'),
                         (autoware_cfg, 'autoware_perception_msgs/msg/DetectedObjects')):
        out = tmp_path / cfg.output.objects_type
        assert replay_bag(drive, out, cfg, pipeline=head_pipe).frames == 10
        decoded = mcap_objects(out)
        assert [name for name, _ in decoded] == [msgtype] * 10
        rosbags = [m for _, m in read_all(out, [bagio.OBJECTS_TOPIC])]
        assert [m.__msgtype__ for m in rosbags] == [msgtype] * 10
        runs[cfg.output.objects_type] = ([m for _, m in decoded], rosbags)
    (vision, _), (autoware, autoware_rosbags) = runs['vision_msgs'], runs['autoware']
    labels = (('car', 'CAR'),)
    found = 0
    for v, a, r in zip(vision, autoware, autoware_rosbags):
        assert stamp_ns(a.header.stamp) == stamp_ns(v.header.stamp) == stamp_ns(r.header.stamp)
        assert a.header.frame_id == 'base_link'
        assert [o.classification[0].label for o in a.objects] == [1] * len(a.objects)   # CAR
        assert [o.classification[0].probability for o in a.objects] == [1.0] * len(a.objects)
        assert [o.shape.type for o in a.objects] == [0] * len(a.objects)    # BOUNDING_BOX
        assert [o.kinematics.orientation_availability for o in a.objects] == [1] * len(
            a.objects)                                                         # SIGN_UNKNOWN
        boxes = boxes_from_detections(v, ('car',))
        np.testing.assert_array_equal(boxes_from_detected_objects(a, ('car',), labels),
                                      boxes)
        np.testing.assert_array_equal(boxes_from_detected_objects(r, ('car',), labels),
                                      boxes)
        found += len(boxes)
    assert found > 0


def test_without_ground_truth_there_is_no_detection_key(tmp_path, head_cfg, head_pipe):
    import bag_messages
    writer = bagio.BagWriter(tmp_path / 'in')
    rng = np.random.default_rng(2)
    for k in range(3):
        points = rng.uniform(-6, 6, (300, 4)).astype(np.float32)
        writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, 10**9 * (k + 1)),
                     10**9 * (k + 1))
    writer.close()
    cfg = config_from_parameters(dict(HEAD_PARAMS, **{'output.bev_features': False}))
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', cfg, pipeline=head_pipe)
    assert result.frames == 3 and 'detection' not in result.summary()
    counts = topics_of(tmp_path / 'out')
    assert counts[bagio.OBJECTS_TOPIC] == 3
    assert bagio.FEATURES_TOPIC not in counts          # output.bev_features false
    assert counts[bagio.GRID_MAP_TOPIC] == 3


def test_ground_truth_of_classes_the_head_does_not_know_is_left_out_and_counted(
        tmp_path, head_cfg, head_pipe):
    """An unknown class costs its boxes, counted by class, not the rest of its message."""
    import bag_messages
    from jax_perception_node.outputs.objects import detections_message
    from jax_perception_node.tools.report import detection_line
    boxes = np.array([[4, 1, 0, 4, 2, 1.5, 0.1, 1, 0], [9, -2, 0, 1, 1, 1.8, 0, 1, 1],
                      [-6, 3, 0, 4, 2, 1.5, 0.2, 1, 0]], np.float32)
    rng = np.random.default_rng(4)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k, classes in enumerate([('car', 'pedestrian'), ('car', 'cyclist'), None]):
            stamp = 10**9 * (k + 1)
            points = rng.uniform(-6, 6, (300, 4)).astype(np.float32)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)
            if classes is None:      # a message that does not decode: its own error line
                writer.write_raw(GROUND_TRUTH_TOPIC, bagio.DETECTIONS_TYPE, b'\0\1', stamp)
            else:
                writer.write(GROUND_TRUTH_TOPIC, detections_message(
                    bagio.TYPESTORE.types, boxes, classes, stamp, 'base_link'), stamp)
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', head_cfg, pipeline=head_pipe)
    detection = result.detection
    # Both vehicles of both decoded messages are scored: frames 1 and 2 pair.
    assert (detection['frames'], detection['ground_truth']) == (2, 4)
    assert detection['other_classes'] == {'cyclist': 1, 'pedestrian': 1}
    assert list(detection['per_class']) == ['car'] and detection['class'] == 'car'
    assert detection['per_class']['car']['ground_truth'] == 4
    assert json.loads(json.dumps(result.summary()))['detection'] == detection
    assert len(result.errors) == 1 and result.errors[0].startswith(
        f'{GROUND_TRUTH_TOPIC} at {3 * 10**9}: ')
    assert detection_line(detection).endswith(
        "; ground truth of classes the head does not know, left out: 'cyclist' x1, "
        "'pedestrian' x1")


def test_ground_truth_of_only_classes_the_head_does_not_know_is_said_not_silent(
        tmp_path, head_cfg, head_pipe):
    """Found by an independent review: no detection line and no JSON key, nothing said."""
    import bag_messages
    from jax_perception_node.outputs.objects import detections_message
    from jax_perception_node.tools.report import detection_line
    boxes = np.array([[4, 1, 0, 1, 1, 1.8, 0.1, 1, 0]], np.float32)
    rng = np.random.default_rng(5)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k in range(2):
            stamp = 10**9 * (k + 1)
            points = rng.uniform(-6, 6, (300, 4)).astype(np.float32)
            writer.write(bagio.POINTCLOUD_TOPIC, bag_messages.cloud(points, stamp), stamp)
            writer.write(GROUND_TRUTH_TOPIC, detections_message(
                bagio.TYPESTORE.types, boxes, ('pedestrian',), stamp, 'base_link'), stamp)
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', head_cfg, pipeline=head_pipe)
    detection = json.loads(json.dumps(result.summary()))['detection']
    assert (detection['frames'], detection['ground_truth'], detection['ap']) == (0, 0, None)
    assert detection['other_classes'] == {'pedestrian': 2}
    line = detection_line(detection)
    assert line.startswith('detection: AP@2m n/a within 40 m, recall n/a (0 car boxes in the '
                           'ground truth, 0 predicted)'), line
    assert line.endswith('; ground truth of classes the head does not know, left out: '
                         "'pedestrian' x2")


def test_ground_truth_of_a_frame_never_served_counts_as_missed(tmp_path, head_cfg, head_pipe):
    """Half the clouds rejected: their vehicles are misses, not left out of the score."""
    import bag_messages
    from jax_perception_node.outputs.objects import detections_message
    from jax_perception_node.tools.report import detection_line
    boxes = np.array([[4, 1, 0, 4, 2, 1.5, 0.1, 1, 0]], np.float32)
    rng = np.random.default_rng(5)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k in range(4):
            stamp = 10**9 * (k + 1)
            cloud = bag_messages.cloud(rng.uniform(-6, 6, (300, 4)).astype(np.float32), stamp)
            if k % 2:
                cloud.header.frame_id = 'bogus'       # rejected: no frame is served
            writer.write(bagio.POINTCLOUD_TOPIC, cloud, stamp)
            writer.write(GROUND_TRUTH_TOPIC, detections_message(
                bagio.TYPESTORE.types, boxes, ('car',), stamp, 'base_link'), stamp)
    result = replay_bag(tmp_path / 'in', tmp_path / 'out', head_cfg, pipeline=head_pipe)
    detection = result.detection
    assert (result.frames, result.rejected) == (2, 2)
    assert (detection['frames'], detection['frames_without_output']) == (4, 2)
    assert detection['ground_truth'] == 4
    assert detection['recall'] is None or detection['recall'] <= 0.5
    assert '; 2 frames with ground truth had no output (their boxes count as missed)' in (
        detection_line(detection))
    # One such frame is 'frame'; none, no clause at all.
    assert '; 1 frame with ground truth had no output (' in detection_line(
        dict(detection, frames_without_output=1))
    assert 'had no output' not in detection_line(dict(detection, frames_without_output=0))


def test_ground_truth_is_read_when_the_head_shares_a_class_with_it(tmp_path):
    """Any shared class will do; ground truth of none of the head's classes is not scored."""
    from collections import Counter
    from jax_perception_node.bags.ground_truth import read_ground_truth
    from jax_perception_node.outputs.objects import detections_message
    boxes = np.array([[4, 1, 0, 4, 2, 1.5, 0.1, 1, 0], [9, -2, 0, 1, 1, 1.8, 0, 1, 1]],
                     np.float32)
    with bagio.BagWriter(tmp_path / 'in') as writer:
        for k in range(2):
            writer.write(GROUND_TRUTH_TOPIC, detections_message(
                bagio.TYPESTORE.types, boxes, ('car', 'pedestrian'), 10**9 * (k + 1),
                'base_link'), 10**9 * (k + 1))

    def read(classes):
        reader, errors, left_out = bagio.open_reader(tmp_path / 'in'), [], Counter()
        try:
            truth = read_ground_truth(reader, bagio.topic_types(reader), classes, errors,
                                      left_out)
        finally:
            reader.close()
        assert errors == []
        return truth, dict(left_out)
    # The head's class indices: 'pedestrian' is its 0, 'car' its 2.
    truth, left_out = read(('pedestrian', 'cyclist', 'car'))
    assert left_out == {}
    assert [rows[:, 8].tolist() for rows in truth.values()] == [[2, 0], [2, 0]]
    # One class in common: read, the other class left out and counted.
    truth, left_out = read(('truck', 'car'))
    assert [rows[:, 8].tolist() for rows in truth.values()] == [[1], [1]]
    assert left_out == {'pedestrian': 2}
    # None in common, or no head: nothing to score (the unknown boxes still counted).
    assert read(('vehicle',)) == (None, {'car': 2, 'pedestrian': 2})
    assert read(()) == (None, {})


def test_boxes_a_finite_checkpoint_decodes_to_inf_are_counted_and_never_written(
        tmp_path, drive, warmed):
    # The same toy head twice: log sizes shifted by 0, then by 100 (exp(100) m is inf).
    from jax_perception_node.detection.head import save_weights
    params = {**HEAD_PARAMS, 'head.module': 'toy_heads:size_gain_head'}
    counts = {}
    for gain in (0.0, 100.0):
        weights = tmp_path / f'gain{gain:g}.npz'
        save_weights(weights, {'scale': np.float32(2.0), 'bias': np.float32(-3.0),
                               'z': np.float32(0.75), 'log_size_gain': np.float32(gain)})
        cfg = config_from_parameters({**params, 'head.weights': str(weights)})
        result = replay_bag(drive, tmp_path / f'out{gain:g}', cfg, pipeline=warmed(cfg))
        written = [m for _, m in read_all(tmp_path / f'out{gain:g}', [bagio.OBJECTS_TOPIC])]
        counts[gain] = (sum(len(m.detections) for m in written),
                        result.summary()['nonfinite_objects'])
    boxes, dropped = counts[0.0]
    assert boxes > 0 and dropped == 0
    # Every box the sane checkpoint published is a non-finite box of the other: counted, unsent.
    assert counts[100.0] == (0, boxes)


def test_without_a_head_neither_objects_nor_detection(tmp_path, drive, warmed):
    cfg = config_from_parameters(dict(HEAD_PARAMS, **{'head.module': ''}))
    result = replay_bag(drive, tmp_path / 'out', cfg, pipeline=warmed(cfg))
    assert result.frames == 10 and 'detection' not in result.summary()
    counts = topics_of(tmp_path / 'out')
    assert bagio.OBJECTS_TOPIC not in counts and bagio.OBJECTS_MARKERS_TOPIC not in counts
    assert counts[bagio.FEATURES_TOPIC] == 10


def test_cli_replay_prints_the_detection_line_and_writes_it_to_json(tmp_path, drive, capsys):
    params = write_param_file(HEAD_PARAMS, tmp_path / 'params.yaml')
    code = main(['replay', str(drive), '--out', str(tmp_path / 'out'), '--params', str(params),
                 '--json', str(tmp_path / 'summary.json')])
    assert code == 0
    detection = json.loads((tmp_path / 'summary.json').read_text())['detection']
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith('detection:'))
    ap, recall = detection['ap'], detection['recall']
    assert detection['class'] == 'car'
    car = detection['per_class']['car']
    assert list(car['ap_at_m']) == ['0.5', '1', '2', '4']
    assert detection['mean_ap'] == car['ap'] == pytest.approx(
        sum(car['ap_at_m'].values()) / 4)
    errors = [f'{detection["errors"][k]:.2f}'
              for k in ('length_m', 'width_m', 'height_m', 'z_m', 'yaw_rad', 'orientation_rad')]
    assert line == (f'detection: AP@2m {ap:.2f} within 40 m, recall {recall:.2f} '
                    f'({detection["ground_truth"]} {detection["class"]} boxes in the ground '
                    f'truth, {detection["predictions"]} predicted); '
                    'matched boxes, mean abs error: size {} / {} / {} m, z {} m, heading {} rad, '
                    'orientation {} rad'.format(*errors))


@pytest.fixture(scope='module')
def shipped(tmp_path_factory):
    """Return (config, 2 s of held-out seed 3, folder, replay result): the shipped head."""
    from configs import PARAMS_FILE
    from jax_perception_node.settings.config import load_config
    from jax_perception_node.tools.synthetic_drive import write_sample_bag
    from dataclasses import replace
    folder = tmp_path_factory.mktemp('shipped')
    # Tests never write the user's executable store (~/.cache/jax_perception_node/xla).
    cfg = replace(load_config(PARAMS_FILE), compilation_cache_dir=str(folder / 'xla'))
    bag = folder / 'seed3'
    write_sample_bag(bag, cfg, seconds=2.0, seed=3)
    return cfg, bag, folder, replay_bag(bag, folder / 'out', cfg)


def test_the_shipped_head_finds_the_cars_of_a_drive_it_never_saw(shipped):
    """
    The shipped head on a held-out seed (training used seeds >= 100), honest cameras.

    On these 2 s of seed 3: measured car AP at 2 m 0.87, recall 0.90 over its 40 cars within
    40 m, mAP 0.47 (24 s of seed 7: 0.93, 0.94, 0.56; docs/users.md). The bounds
    catch a head that finds nothing (the head trained on the former oracle camera channels
    scored 0.004 here).
    """
    _, _, folder, result = shipped
    detection = result.summary()['detection']
    assert detection['frames'] == result.frames == 20 and detection['ground_truth'] > 30
    assert detection['other_classes'] == {}          # the head knows the drive's four classes
    assert detection['class'] == 'car' and detection['classes_evaluated'] == [
        'car', 'large_vehicle', 'pedestrian', 'cyclist']
    assert detection['ap'] >= 0.4 and detection['recall'] >= 0.6
    assert detection['mean_ap'] >= 0.2           # measured 0.47
    assert result.compiles_after_warmup == 0
    assert any((folder / 'xla').iterdir())
    # The rest of each matched box (measured: length 0.77 m, width 0.16, height 0.13, z 0.05,
    # orientation 0.01 rad; over seed 7's 24 s the length is 0.44 m): the length is the least
    # exact, as one size regression serves cars and buses. A head whose orientations were
    # random would be off by pi / 4 on average. The heading (0 or pi) is only reported.
    errors = detection['errors']
    assert errors['length_m'] <= 1.6 and errors['width_m'] <= 0.4
    assert errors['height_m'] <= 0.25 and errors['z_m'] <= 0.2
    assert errors['orientation_rad'] <= 0.2 and errors['yaw_rad'] is not None


def test_the_shipped_cameras_change_no_pedestrian_or_cyclist_box(shipped, tmp_path):
    """
    Leave the drive's camera topics out: every pedestrian and cyclist box stays, bit for bit.

    The shipped head routes the cameras to the vehicles alone (docs/design.md, "Camera
    routing"); the vehicles' scores are the cameras' to change.
    """
    cfg, bag, folder, with_cameras = shipped
    reader = bagio.open_reader(bag)
    try:
        messages = [(topic, stamp, raw, msgtype) for topic, stamp, raw, msgtype
                    in bagio.iter_messages(reader, [c.topic for c in reader.connections])]
    finally:
        reader.close()
    camera = [m for m in messages if m[0].startswith('/jax_perception/input/camera/')]
    assert {m[0].split('/')[4] for m in camera} == {c.name for c in cfg.cameras}
    with bagio.BagWriter(tmp_path / 'no_cameras') as writer:
        for topic, stamp, raw, msgtype in messages:
            if not topic.startswith('/jax_perception/input/camera/'):
                writer.write_raw(topic, msgtype, raw, stamp)
    without = replay_bag(tmp_path / 'no_cameras', tmp_path / 'out', cfg)
    assert without.compiles_after_warmup == 0 and without.frames == with_cameras.frames
    classes = ('car', 'large_vehicle', 'pedestrian', 'cyclist')
    boxes = [{stamp_ns(m.header.stamp): boxes_from_detections(m, classes)
              for _, m in read_all(out, [bagio.OBJECTS_TOPIC])}
             for out in (folder / 'out', tmp_path / 'out')]
    assert boxes[0].keys() == boxes[1].keys() and len(boxes[0]) == 20
    small = [sum(int(np.sum(rows[:, 8] >= 2)) for rows in b.values()) for b in boxes]
    assert small[0] == small[1] > 20
    for stamp, rows in boxes[0].items():
        np.testing.assert_array_equal(rows[rows[:, 8] >= 2], boxes[1][stamp][
            boxes[1][stamp][:, 8] >= 2], err_msg=str(stamp))
    vehicles = [np.concatenate([rows[rows[:, 8] < 2] for rows in b.values()]) for b in boxes]
    assert vehicles[0].shape != vehicles[1].shape or not np.array_equal(*vehicles)
