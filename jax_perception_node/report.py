"""
Human-facing output: the summary table, the BEV picture and the latency plot.

matplotlib runs headless (Agg) and is imported only when a picture is drawn.
"""

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .latency import percentiles, STAGES
from .render import bev_to_rgb


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


def _pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def save_bev_png(features: np.ndarray, grid, path: Path, title: str = '') -> Path:
    """Draw LiDAR heights (z_max) with camera coverage, forward up, metres on the axes."""
    plt = _pyplot()
    rgb = bev_to_rgb(features, grid.z_min, grid.z_max)
    fig, ax = plt.subplots(figsize=(7.2, 7.6), dpi=110)
    # bev_to_rgb puts +x up and +y left, so the extent runs from y_max on the left.
    ax.imshow(rgb, extent=(grid.y_max, grid.y_min, grid.x_min, grid.x_max),
              interpolation='nearest')
    ax.set_xlabel('y (m, + is left)')
    ax.set_ylabel('x (m, + is forward)')
    ax.set_title(title or 'BEV: LiDAR z_max (colour), camera coverage (grey)')
    ax.plot([0], [0], marker='^', color='red', markersize=8)
    sm = plt.cm.ScalarMappable(
        cmap=plt.matplotlib.colors.LinearSegmentedColormap.from_list(
            'bev', [c / 255 for c in (np.array([[40, 30, 120], [30, 110, 160], [40, 170, 120],
                                                [180, 210, 60], [250, 230, 40]]))]),
        norm=plt.Normalize(grid.z_min, grid.z_max))
    fig.colorbar(sm, ax=ax, shrink=0.7, label='z_max (m)')
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def save_latency_png(records: Sequence[Mapping[str, float]], path: Path,
                     title: str = 'Per-frame latency') -> Path:
    """Timeline of total / compute / age per frame and a histogram of total_ms."""
    plt = _pyplot()
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
