"""The benchmark plot (``bench.png``) from the results JSON: per-size timings and ROS age."""

from pathlib import Path

import numpy as np

from .common import DROP_LIMIT_PCT
from .report import ran


def plot(results: dict, path: Path) -> Path | None:
    """bench.png: p50 per implementation per size (log axis) per camera count, and ROS age."""
    from jax_perception_node.tools.report import pyplot
    pipe, ros = ran(results, 'pipeline'), ran(results, 'ros')
    panels = (sorted({r['cameras'] for r in pipe['rows']}) if pipe else []) + (
        ['ros'] if ros else [])
    if not panels:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), dpi=110,
                             squeeze=False)
    impls = (('jax', 'JAX (AOT)'), ('numpy', 'NumPy'), ('torch', 'PyTorch'),
             ('numba', 'Numba (1 thread)'), ('jax_nojit', 'JAX no-jit'))
    for ax, panel in zip(axes[0], panels):
        if panel == 'ros':
            rows = ros['rows']
            rates = [r['rate_hz'] for r in rows]
            ax.plot(rates, [r['age_p50_ms'] for r in rows], 'o-', label='node age p50')
            ax.plot(rates, [r['age_p99_ms'] for r in rows], 's--', label='node age p99')
            floor = [(r['rate_hz'], r['floor']['age_p50_ms']) for r in rows if r.get('floor')]
            if floor:
                ax.plot(*zip(*floor), '^-', label='floor (echo) age p50')
            ax.set_xlabel('publish rate (Hz)')
            ax.set_ylabel('age (ms)')
            ax.set_ylim(bottom=0)
            ax.set_title('end to end through ROS')
            missed = ax.twinx()
            missed.bar(rates, [r['missed_pct'] or 0 for r in rows], width=3.0, alpha=0.25,
                       color='tab:red', label='missed %')
            missed.axhline(DROP_LIMIT_PCT, color='tab:red', linewidth=0.8, linestyle=':')
            missed.set_ylabel('missed % (bars; dotted: 5 %)')
            missed.set_ylim(0, 100)
        else:
            rows = [r for r in pipe['rows'] if r['cameras'] == panel]
            x = np.arange(len(rows))
            shown = [(k, label) for k, label in impls if any(r.get(f'{k}_ms') for r in rows)]
            width = 0.8 / max(1, len(shown))
            for i, (key, label) in enumerate(shown):
                ax.bar(x + (i - (len(shown) - 1) / 2) * width,
                       [r.get(f'{key}_ms') or 0 for r in rows], width, label=label)
            ax.set_xticks(x, [str(r['points']) for r in rows], fontsize=8)
            ax.set_yscale('log')
            ax.set_xlabel('points')
            ax.set_ylabel('p50 per frame (ms, log)')
            ax.set_title(f'{panel} camera{"s" if panel != 1 else ""}')
        ax.grid(alpha=0.3, which='both')
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
