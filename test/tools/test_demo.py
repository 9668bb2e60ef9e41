"""The demo end to end on a short drive: node process, player process, recorder, report."""

import os
import re

from cli_errors import assert_one_line_error
from configs import PARAMS_FILE
from jax_perception_node.settings.param_file import read_param_file, write_param_file
from jax_perception_node.tools.cli import main
import numpy as np
import pytest


def test_demo_runs_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / 'demo'
    # The shipped parameters with a store of the test's own: tests never write to ~/.cache.
    params = write_param_file(dict(read_param_file(PARAMS_FILE),
                                   compilation_cache_dir=str(tmp_path / 'xla')),
                              tmp_path / 'params.yaml')
    assert main(['demo', '--out', str(out), '--seconds', '1.5', '--params', str(params)]) == 0
    printed = capsys.readouterr().out
    for name in ('report.md', 'bev.png', 'latency.png', 'recording/metadata.yaml',
                 '.jax-perception-demo'):
        assert (out / name).exists(), name
    assert any((tmp_path / 'xla').iterdir())
    report = (out / 'report.md').read_text()
    assert report in printed
    rows = dict(line.strip('|').split('|')[:2] for line in report.splitlines()
                if line.startswith('| ') and line.count('|') == 3)
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows['LiDAR frames in the bag'] == '15'
    # By default the cameras send the drive's JPEGs, encoded in the node by the learned encoder.
    assert rows['cameras'] == '4, JPEG images (encoder learned:cnn)'
    assert len(list(out.glob('sample_drive_1.5s_*_jpeg'))) == 1
    assert rows['compiles after warm-up'] == '0'
    # Accounting, not a rate: played in real time on a shared machine, the node may drop
    # frames (latest wins), but every frame it received is an output, a drop or a rejection.
    received, out_frames = int(rows['frames received by the node']), int(
        rows['frames out (bev_features)'])
    assert 1 <= out_frames <= received <= 15
    assert received == out_frames + int(rows['dropped (latest wins)']) + int(rows['rejected'])
    assert rows['rejected'] == '0'          # the sample drive holds no malformed cloud
    # The shipped parameters have a head: its objects scored against the drive's ground truth.
    # A frame the node dropped under load is named, and its boxes count as missed.
    assert re.search(r'^Head: detection: AP@2m (\d\.\d\d) within 40 m, recall (\d\.\d\d) '
                     r'\(\d+ car boxes in the ground truth, \d+ predicted\); '
                     r'(\d+ frames? with ground truth had no output \(their boxes count as '
                     r'missed\); )?matched boxes, mean '
                     r'abs error: size '
                     r'(\d\.\d\d) / (\d\.\d\d) / (\d\.\d\d) m, z (\d\.\d\d) m, heading '
                     r'(\d\.\d\d) rad, orientation (\d\.\d\d) rad over \d+ frames', report,
                     re.M), report
    # Per class: the mAP line and a table row per class scored, each with its four APs.
    assert re.search(r'^Per class: mAP (\d\.\d\d|n/a) over \d+ of \d+ classes \(.*\); AP of a '
                     r'class = the mean of its APs at 0\.5, 1, 2, 4 m BEV centre distance, '
                     r'within 50 m\.$', report, re.M), report
    assert '| class | AP | AP@0.5m | AP@1m | AP@2m | AP@4m | ground truth | predicted | ' \
        'recall@2m |' in report
    assert re.search(r'^\| \w+ \| (\d\.\d\d|n/a)( \| (\d\.\d\d|n/a)){4} \| \d+ \| \d+ \| '
                     r'(\d\.\d\d|n/a) \|$', report, re.M), report


def test_the_demo_writes_only_in_a_folder_of_its_own(tmp_path, capsys):
    from jax_perception_node.tools.arguments import UsageError
    from jax_perception_node.tools.demo import claim_out, MARKER
    # A new folder, and one holding only what a demo writes (an earlier demo's), are its own.
    claim_out(tmp_path / 'new')
    assert (tmp_path / 'new' / MARKER).is_file()
    earlier = tmp_path / 'earlier'
    (earlier / 'recording').mkdir(parents=True)
    (earlier / 'sample_drive_8s_1700000000').mkdir()
    (earlier / 'report.md').write_text('old')
    claim_out(earlier)
    # Once marked, a file of the user's beside its outputs is left alone.
    (earlier / 'notes.txt').write_text('mine')
    claim_out(earlier)
    # Anything else is refused before a file is touched (before, the demo deleted or
    # overwrote what bore its names and crashed on a file where it wanted a folder).
    mine = tmp_path / 'mine'
    (mine / 'sample_drive_mine').mkdir(parents=True)
    (mine / 'recording').write_text('a file')
    with pytest.raises(UsageError, match=r'holds recording, which the demo did not write'):
        claim_out(mine)
    assert not (mine / MARKER).exists() and (mine / 'recording').read_text() == 'a file'
    with pytest.raises(UsageError, match=r'is a file; the demo writes a folder'):
        claim_out(mine / 'recording')
    # On the command line, one line.
    assert main(['demo', '--out', str(mine), '--seconds', '1']) == 1
    assert_one_line_error(capsys, 'holds recording, which the demo did not write')


def test_the_report_scores_every_class_seen_on_either_topic():
    """Demo helpers on synthetic messages: classes in OBJECT_CLASSES order, then the rest."""
    from jax_perception_node.bags import bagio
    from jax_perception_node.bags.detection_summary import class_lines, class_table, mean_ap_line
    from jax_perception_node.outputs.objects import detections_message, GROUND_TRUTH_TOPIC
    from jax_perception_node.settings.config import load_config
    from jax_perception_node.tools.demo import _detection, box_classes
    cfg = load_config(PARAMS_FILE)

    def message(boxes, classes):
        return detections_message(bagio.TYPESTORE.types, np.array(boxes, np.float32).reshape(
            -1, 9), classes, 10**9, 'base_link')
    # The node found a pedestrian where there is one, and a car where there is a cyclist.
    objects = message([[5, 5, 0, 0.6, 0.6, 1.7, 0, 0.9, 0], [9, 0, 0, 4, 2, 1.5, 0, 0.8, 1]],
                      ('pedestrian', 'car'))
    truth = message([[5, 5.5, 0, 0.6, 0.6, 1.7, 0, 1, 0], [9, 0, 0, 1.8, 0.6, 1.7, 0, 1, 1],
                     [20, 0, 0, 9, 2.5, 3, 0, 1, 2]], ('pedestrian', 'cyclist', 'tram'))
    boxes = {bagio.OBJECTS_TOPIC: {10**9: objects}, GROUND_TRUTH_TOPIC: {10**9: truth}}
    classes = box_classes(boxes, cfg)
    assert classes == ('car', 'pedestrian', 'cyclist', 'tram')
    rows, gt, detection = _detection(boxes, classes, cfg)
    assert rows[10**9][:, 8].tolist() == [1, 0] and gt[10**9][:, 8].tolist() == [1, 2, 3]
    # car: no ground truth (left out of the mean); pedestrian found at 0.5 m: AP 1; cyclist
    # and tram missed: AP 0. mAP = 1/3; the AP@2m block is the first class with ground truth.
    per_class = detection['per_class']
    assert [per_class[c]['ap'] for c in classes] == [None, 1.0, 0.0, 0.0]
    assert detection['mean_ap'] == pytest.approx(1 / 3) and detection['class'] == 'pedestrian'
    assert detection['ap'] == 1.0 and detection['frames'] == 1
    assert mean_ap_line(detection) == (
        'mAP 0.33 over 3 of 4 classes (pedestrian, cyclist, tram with ground truth); AP of a '
        'class = the mean of its APs at 0.5, 1, 2, 4 m BEV centre distance, within 50 m')
    assert class_table(detection).splitlines()[2:4] == [
        '| car | n/a | n/a | n/a | n/a | n/a | 0 | 1 | n/a |',
        '| pedestrian | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 | 1 | 1 | 1.00 |']
    assert class_lines(detection)[1] == ('pedestrian: AP 1.00 (0.5 m 1.00, 1 m 1.00, 2 m 1.00, '
                                         '4 m 1.00), recall@2m 1.00 (1 in the ground truth, 1 '
                                         'predicted)')
    # No box on either topic: nothing to score.
    empty = {bagio.OBJECTS_TOPIC: {}, GROUND_TRUTH_TOPIC: {}}
    assert box_classes(empty, cfg) == () and _detection(empty, (), cfg)[2] is None


def test_the_caption_names_each_class_colour_of_the_boxes():
    from jax_perception_node.outputs.object_markers import PALETTE
    from jax_perception_node.outputs.render import class_caption, COLOUR_NAMES
    assert len(COLOUR_NAMES) == len(PALETTE)
    # The names say the palette's colours: orange is mostly red, blue mostly blue, ...
    dominant = {'orange': 0, 'blue': 2, 'green': 1}
    for name, channel in dominant.items():
        assert np.argmax(PALETTE[COLOUR_NAMES.index(name)]) == channel
    assert class_caption(('car', 'large_vehicle', 'pedestrian', 'cyclist')) == (
        'car orange, large_vehicle blue, pedestrian green, cyclist magenta')


# -- boxes on the BEV picture (report.draw_boxes) -------------------------------------------------

def pixels(mask):
    rows, cols = np.nonzero(mask)
    return np.stack([rows, cols], axis=1).astype(np.float64)


def test_a_box_lands_on_its_cell_of_the_forward_up_picture():
    from configs import small_config
    from jax_perception_node.outputs.render import bev_to_rgb
    from jax_perception_node.tools.report import draw_boxes
    grid = small_config(cameras=0).grid          # x -8..8, y -12..12, 0.5 m: 32 x 48 cells
    scale = 4
    x, y, length, width, yaw = 3.25, -5.25, 4.0, 1.5, 0.4
    # The cell under the box centre, occupied, so the picture shows where render.py puts it.
    i, j = int((x - grid.x_min) // grid.resolution), int((y - grid.y_min) // grid.resolution)
    features = np.zeros((32, 48, 7), np.float32)
    features[i, j, 0], features[i, j, 2] = 1.0, 1.5
    rgb = bev_to_rgb(features, grid.z_min, grid.z_max)
    box = np.array([[x, y, 0.5, length, width, 1.5, yaw, 0.9, 0]], np.float32)
    picture = draw_boxes(rgb, grid, boxes=box, scale=scale)
    assert picture.shape == (32 * scale, 48 * scale, 3) and picture.dtype == np.uint8
    # Written out: x up from x_max, y to the left from y_max, in output pixels.
    centre = np.array([(grid.x_max - x) / grid.resolution, (grid.y_max - y) / grid.resolution])
    drawn = pixels(picture.any(axis=-1))
    np.testing.assert_allclose(drawn.mean(axis=0) + 0.5, centre * scale, atol=1.0)
    # The occupied cell of the plain picture is under the box centre.
    [[r, c]] = pixels(rgb.any(axis=-1))
    np.testing.assert_allclose([r + 0.5, c + 0.5], centre, atol=0.5)
    # Area and heading: the long axis of the drawn pixels is the box's heading, (cos, sin) in
    # (x, y), i.e. (-cos, -sin) in (row, column).
    # (The edge, about 2 pixels wide, reaches 1 pixel = 1/8 m beyond the outline.)
    area = len(drawn) / scale**2 * grid.resolution**2
    assert length * width <= area <= (length + 0.5) * (width + 0.5)
    _, vectors = np.linalg.eigh(np.cov((drawn - drawn.mean(axis=0)).T))
    major = vectors[:, -1]
    heading = np.array([-np.cos(yaw), -np.sin(yaw)])
    assert abs(major @ heading) == pytest.approx(1.0, abs=2e-3)


def test_ground_truth_is_a_white_outline_where_it_belongs():
    from configs import small_config
    from jax_perception_node.tools.report import draw_boxes
    grid = small_config(cameras=0).grid
    x, y = -4.0, 7.0
    truth = np.array([[x, y, 0.5, 4.0, 2.0, 1.5, 0.0, 1.0, 0]], np.float32)
    picture = draw_boxes(np.zeros((32, 48, 3), np.uint8), grid, truth=truth, scale=4)
    white = pixels(picture.min(axis=-1) > 200)
    assert len(white) > 0 and not picture[tuple(white.mean(axis=0).astype(int))].any()  # hollow
    rows, cols = white[:, 0] + 0.5, white[:, 1] + 0.5
    # yaw 0: 4 m along x (rows), 2 m along y (columns), centred on the box.
    np.testing.assert_allclose([rows.mean(), cols.mean()],
                               [(grid.x_max - x) / 0.5 * 4, (grid.y_max - y) / 0.5 * 4], atol=1)
    assert rows.max() - rows.min() == pytest.approx(4.0 / 0.5 * 4, abs=2.5)
    assert cols.max() - cols.min() == pytest.approx(2.0 / 0.5 * 4, abs=2.5)


def test_a_bad_params_file_is_refused_before_anything_is_made(tmp_path, capsys):
    from cli_errors import assert_one_line_error
    bad = tmp_path / 'bad.yaml'
    bad.write_text('/**:\n  ros__parameters:\n    grid:\n      resolution: -1.0\n')
    out = tmp_path / 'demo'
    assert main(['demo', '--out', str(out), '--params', str(bad)]) == 1
    assert_one_line_error(capsys, 'grid.resolution')
    assert not out.exists()         # it was left behind, empty


def test_the_demos_node_reads_what_the_cli_read_of_a_stack_file(tmp_path):
    from jax_perception_node.tools.demo import demo_params
    from ros_harness import rcl_overrides
    # A stack's file: the node's section under a namespace. The CLI reads it for the demo's
    # drive and report; the node, named /jax_perception, would get none of it from rcl.
    stack = tmp_path / 'stack.yaml'
    stack.write_text('/**:\n  ros__parameters:\n    use_sim_time: false\n'
                     '/perception/jax_perception:\n  ros__parameters:\n    grid:\n'
                     '      resolution: 0.8\n')
    for images in (False, True):
        path = demo_params(stack, tmp_path, images)
        got = rcl_overrides(path)
        assert got == read_param_file(path) == read_param_file(stack)
        assert got['grid.resolution'] == 0.8


def test_the_cached_sample_drive_follows_the_params_content(tmp_path, monkeypatch):
    # The cache was keyed by the params' modification time in whole seconds: an edit within
    # the same second (a script writing its params and running the demo) replayed the old drive.
    from jax_perception_node.tools import synthetic_drive
    from jax_perception_node.tools.demo import sample_bag
    written = []

    def write(bag, cfg, **kwargs):
        (bag / 'metadata.yaml').parent.mkdir(parents=True)
        (bag / 'metadata.yaml').write_text('')
        written.append((bag.name, cfg.lidar.translation[2]))
    monkeypatch.setattr(synthetic_drive, 'write_sample_bag', write)
    params = read_param_file(PARAMS_FILE)
    path = write_param_file(params, tmp_path / 'params.yaml')
    first = sample_bag(tmp_path, path, 1.0)
    assert sample_bag(tmp_path, path, 1.0) == first and len(written) == 1     # cached
    mtime = path.stat().st_mtime_ns
    write_param_file({**params, 'lidar.translation': [0.0, 0.0, 2.5]}, path)
    os.utime(path, ns=(mtime, mtime))          # the same second, the same time even
    second = sample_bag(tmp_path, path, 1.0)
    assert second != first and written[-1] == (second.name, 2.5)
    assert [p.name for p in tmp_path.glob('sample_drive_*')] == [second.name]   # old one gone
