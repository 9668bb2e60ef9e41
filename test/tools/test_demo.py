"""The demo end to end on a short drive: node process, player process, recorder, report."""

import re

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
    for name in ('report.md', 'bev.png', 'latency.png', 'recording/metadata.yaml'):
        assert (out / name).exists(), name
    assert any((tmp_path / 'xla').iterdir())
    report = (out / 'report.md').read_text()
    assert report in printed
    rows = dict(line.strip('|').split('|')[:2] for line in report.splitlines()
                if line.startswith('| ') and line.count('|') == 3)
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows['LiDAR frames in the bag'] == '15'
    assert rows['compiles after warm-up'] == '0'
    # Accounting, not a rate: played in real time on a shared machine, the node may drop
    # frames (latest wins), but every frame it received is an output, a drop or a rejection.
    received, out_frames = int(rows['frames received by the node']), int(
        rows['frames out (bev_features)'])
    assert 1 <= out_frames <= received <= 15
    assert received == out_frames + int(rows['dropped (latest wins)']) + int(rows['rejected'])
    assert rows['rejected'] == '0'          # the sample drive holds no malformed cloud
    # The shipped parameters have a head: its objects scored against the drive's ground truth.
    assert re.search(r'^Head: detection: AP@2m (\d\.\d\d) within 40 m, recall (\d\.\d\d) '
                     r'\(\d+ vehicles, \d+ boxes\); matched boxes, mean abs error: size '
                     r'(\d\.\d\d) / (\d\.\d\d) / (\d\.\d\d) m, z (\d\.\d\d) m, heading '
                     r'(\d\.\d\d) rad, orientation (\d\.\d\d) rad over \d+ frames', report,
                     re.M), report


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
