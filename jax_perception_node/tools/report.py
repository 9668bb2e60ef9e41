"""
Human-facing output: summary table, BEV picture (with boxes), latency plot, progress bar.

matplotlib runs headless (Agg) and is imported only when a picture is drawn. Boxes are drawn
on the ``render.forward_up`` picture (+x up, +y left): a point (x, y) of the grid frame is at
row ``(x_max - x) / resolution``, column ``(y_max - y) / resolution`` of it (continuous pixel
coordinates, pixel (r, c) spanning [r, r + 1) x [c, c + 1)).
"""

import math
from pathlib import Path
import sys
from typing import Callable, Mapping, Sequence

from jax_perception_node.frames.latency import percentiles, STAGES
from jax_perception_node.outputs.object_markers import class_colour
from jax_perception_node.outputs.render import bev_to_rgb, RAMP
import numpy as np

BOX_SCALE = 4       # picture pixels per BEV cell when boxes are drawn


def latency_table(records: Sequence[Mapping[str, float]],
                  stages: Sequence[str] = STAGES) -> str:
    """Markdown table of p50 / p95 / p99 / max per stage, in ms."""
    lines = ['| stage | p50 | p95 | p99 | max |', '|---|---:|---:|---:|---:|']
    for stage in stages:
        values = [r[stage] for r in records if stage in r]
        if values:
            s = percentiles(values)
            lines.append(f'| {stage} | {s["p50"]:.2f} | {s["p95"]:.2f} | {s["p99"]:.2f} | '
                         f'{s["max"]:.2f} |')
    return '\n'.join(lines)


def replay_lines(result, summary: Mapping, cfg) -> list[str]:
    """Return what ``replay`` says of a bag: counts, LiDARs, TF, buckets, AP, latency, errors."""
    from jax_perception_node.bags.detection_summary import class_lines, mean_ap_line
    lines = [f'{result.frames} frames, {result.rejected} rejected clouds, '
             f'{result.rejected_feature_maps} rejected feature maps, '
             f'{result.overflowed} overflowed, compiles after warm-up: '
             f'{result.compiles_after_warmup}, warm-up {result.warmup_s:.2f} s']
    if cfg.accumulation.num_sweeps > 1:
        lines.append(f'accumulation: {cfg.accumulation.num_sweeps} sweeps, '
                     f'{result.frames_without_odometry} frames without odometry, '
                     f'{result.rejected_odometry} odometry messages rejected')
    if cfg.lidars:
        lines.append(f'lidars: {result.lidar_sets_incomplete} frames lacked a LiDAR ('
                     + ', '.join(f'{k} {v}' for k, v in result.lidars_missing.items())
                     + f'), {result.late_lidar_clouds} clouds too late for their set')
        lines += [f'  {line}' for line in result.lidar_clocks[:5]]
    if result.transforms_received or result.frames_without_tf or result.rejected_transforms:
        lines.append(f'tf: {result.transforms_received} messages, {result.rejected_transforms} '
                     f'rejected, {result.frames_without_tf} clouds without TF, '
                     f'{result.cameras_without_tf} camera maps without TF')
    lines.append('buckets: ' + ', '.join(f'{k}: {v}' for k, v in summary['buckets'].items()))
    if result.detection is not None:
        lines.append(detection_line(result.detection))
        lines += [f'  {line}' for line in (mean_ap_line(result.detection),
                                           *class_lines(result.detection))]
    lines.append(latency_table(result.records))
    return lines + [f'  rejected: {line}' for line in result.errors[:5]]


def detection_line(detection: Mapping) -> str:
    """One line of a ``detection_eval.evaluate`` dict: AP, recall, counts, box errors, others."""
    def number(value) -> str:
        return 'n/a' if value is None else f'{value:.2f}'
    others = ', '.join(f'{name!r} x{n}' for name, n in detection.get('other_classes', {}).items())
    errors = detection.get('errors') or {}
    error_text = ''
    if errors.get('z_m') is not None:
        error_text = ('; matched boxes, mean abs error: size {} / {} / {} m, z {} m, heading {} '
                      'rad, orientation {} rad'.format(*(number(errors[k]) for k in (
                          'length_m', 'width_m', 'height_m', 'z_m', 'yaw_rad',
                          'orientation_rad'))))
    return (f'detection: AP@{detection["match_m"]:g}m {number(detection["ap"])} within '
            f'{detection["max_range_m"]:g} m, recall {number(detection["recall"])} '
            f'({detection["ground_truth"]} {detection.get("class", "object")} boxes in the '
            f'ground truth, {detection["predictions"]} predicted)'
            + _without_output(detection.get('frames_without_output', 0))
            + error_text
            + (f'; ground truth of classes the head does not know, left out: {others}'
               if others else ''))


def _without_output(frames: int) -> str:
    """Name the frames that had ground truth and no output (dropped or failed), if any."""
    if not frames:
        return ''
    return (f'; {frames} frame{"s" if frames != 1 else ""} with ground truth had no output '
            '(their boxes count as missed)')


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def box_outline(box: Sequence[float], grid) -> np.ndarray:
    """
    Return the 4 BEV corners of a box row as (column, row) of the forward-up picture.

    ``box``: a ``boxes.BOX_COLUMNS`` row (x, y, z, length, width, height, yaw, ...).
    """
    x, y, length, width, yaw = box[0], box[1], box[3], box[4], box[6]
    along = np.array([1, 1, -1, -1]) * 0.5 * length
    across = np.array([1, -1, -1, 1]) * 0.5 * width
    xs = x + math.cos(yaw) * along - math.sin(yaw) * across
    ys = y + math.sin(yaw) * along + math.cos(yaw) * across
    return np.stack([(grid.y_max - ys) / grid.resolution,
                     (grid.x_max - xs) / grid.resolution], axis=1)


def draw_boxes(rgb: np.ndarray, grid, boxes=None, truth=None,
               scale: int = BOX_SCALE) -> np.ndarray:
    """
    Draw boxes on a forward-up BEV picture; return it ``scale`` times larger (uint8 RGB).

    ``boxes``: predicted rows, filled in their class's colour (``object_markers``) with a solid
    edge; ``truth``: ground-truth rows, white outlines. Output pixel (R, C) covers picture
    coordinates [R / scale, (R + 1) / scale) x [C / scale, (C + 1) / scale).
    """
    plt = pyplot()
    from matplotlib.patches import Polygon
    height, width = rgb.shape[:2]
    fig = plt.figure(figsize=(width * scale / 100, height * scale / 100), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.imshow(rgb, extent=(0, width, height, 0), interpolation='nearest')
    for box in np.asarray(truth if truth is not None else np.zeros((0, 9))):
        ax.add_patch(Polygon(box_outline(box, grid), closed=True, fill=False,
                             edgecolor='white', linewidth=1.0))
    for box in np.asarray(boxes if boxes is not None else np.zeros((0, 9))):
        colour = class_colour(int(box[8]))
        ax.add_patch(Polygon(box_outline(box, grid), closed=True, facecolor=(*colour, 0.45),
                             edgecolor=colour, linewidth=1.5))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    fig.canvas.draw()
    picture = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    plt.close(fig)
    return picture


def save_bev_png(features: np.ndarray, grid, path: Path, title: str = '', boxes=None,
                 truth=None) -> Path:
    """
    Draw a fused BEV frame, forward up, metres on the axes.

    Left: LiDAR heights (z_max) with camera coverage in grey, and the ``boxes`` (predicted,
    filled in their class's colour) and ``truth`` (ground truth, white outlines) when given.
    Right, when the frame has camera channels: the lifted camera channel with the most
    variance, masked outside the coverage.
    """
    plt = pyplot()
    camera_channels = features.shape[-1] - 7
    panels = 2 if camera_channels > 0 else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 6.2), dpi=100, squeeze=False)
    # Rows flipped (+x up) and columns flipped (+y left): the extent starts at y_max.
    extent = (grid.y_max, grid.y_min, grid.x_min, grid.x_max)
    ax = axes[0, 0]
    picture = bev_to_rgb(features, grid.z_min, grid.z_max)
    with_boxes = boxes is not None or truth is not None
    if with_boxes:
        picture = draw_boxes(picture, grid, boxes, truth)
    ax.imshow(picture, extent=extent, interpolation='nearest')
    sm = plt.cm.ScalarMappable(
        cmap=plt.matplotlib.colors.LinearSegmentedColormap.from_list('bev', RAMP / 255),
        norm=plt.Normalize(grid.z_min, grid.z_max))
    fig.colorbar(sm, ax=ax, shrink=0.75, label='LiDAR z_max (m)')
    ax.set_title('LiDAR heights, camera coverage (grey)'
                 + ('\nobjects (filled), ground truth (white)' if with_boxes else ''))
    if camera_channels > 0:
        camera = features[..., 6:6 + camera_channels]
        covered = features[..., -1] > 0
        k = int(np.argmax(camera[covered].var(axis=0))) if covered.any() else 0
        shown = np.where(covered, camera[..., k], np.nan)[::-1, ::-1]
        ax = axes[0, 1]
        image = ax.imshow(shown, extent=extent, interpolation='nearest', cmap='magma')
        fig.colorbar(image, ax=ax, shrink=0.75, label=f'camera channel {k}')
        ax.set_title(f'Lifted camera features (channel {k} of {camera_channels})')
    for ax in axes[0]:
        ax.set_xlabel('y (m, + is left)')
        ax.set_ylabel('x (m, + is forward)')
        ax.plot([0], [0], marker='^', color='red', markersize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def save_latency_png(records: Sequence[Mapping[str, float]], path: Path,
                     title: str = 'Per-frame latency') -> Path:
    """Timeline of total / compute / age per frame and a histogram of total_ms."""
    plt = pyplot()
    fig, (timeline, hist) = plt.subplots(1, 2, figsize=(11, 4), dpi=110,
                                         gridspec_kw={'width_ratios': [2.2, 1]})
    frames = np.arange(len(records))
    for key in ('age_ms', 'total_ms', 'compute_ms'):
        values = [r.get(key, np.nan) for r in records]
        if not np.all(np.isnan(values)):
            timeline.plot(frames, values, label=key, linewidth=1.2)
    timeline.set_xlabel('frame')
    timeline.set_ylabel('ms')
    timeline.set_ylim(bottom=0)
    timeline.grid(alpha=0.3)
    timeline.legend()
    timeline.set_title(title)
    totals = [r['total_ms'] for r in records if 'total_ms' in r]
    hist.hist(totals, bins=30, color='tab:orange')
    hist.set_xlabel('total_ms')
    hist.set_ylabel('frames')
    hist.set_title('total_ms histogram')
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def progress_bar(stream=None) -> Callable[[int, int], None]:
    """Return a one-line progress bar on ``stream`` (redrawn only on a terminal)."""
    # sys.stderr as it is now, not as it was when this module was first imported.
    stream = stream or sys.stderr

    def draw(done: int, total: int) -> None:
        if not stream.isatty() and done != total:
            return
        width = 30
        filled = int(width * done / max(total, 1))
        stream.write(f'\r[{"#" * filled}{"." * (width - filled)}] {done}/{total} clouds')
        if done >= total:
            stream.write('\n')
        stream.flush()
    return draw
