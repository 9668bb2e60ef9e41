"""What ``jax-perception train`` shows as it works and after: its progress, the loss curves."""

from pathlib import Path
import sys
import time

import numpy as np


def progress_bar(stream=sys.stderr, width: int = 30):
    """Return ``draw(step, steps, loss)``: a text bar with the loss and ETA on ``stream``."""
    start = time.perf_counter()
    tty = stream.isatty()

    def draw(done: int, total: int, loss: float) -> None:
        if not tty and done != total and done % max(total // 10, 1):
            return
        elapsed = time.perf_counter() - start
        eta = round(elapsed / done * (total - done))      # whole seconds: never "16:60"
        filled = int(width * done / max(total, 1))
        line = (f'[{"#" * filled}{"." * (width - filled)}] step {done}/{total} loss '
                f'{loss:.3f} {elapsed / done:.2f} s/step ETA {eta // 60}:{eta % 60:02d}')
        stream.write(('\r' + line) if tty else line + '\n')
        if tty and done >= total:
            stream.write('\n')
        stream.flush()
    return draw


def plot_losses(losses: np.ndarray, path: Path) -> None:
    """Write the loss curves (total, heatmap focal, box L1; raw and smoothed); format by suffix."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    steps = np.arange(1, len(losses) + 1)
    window = max(1, len(losses) // 50)
    for column, label, color in ((0, 'total', 'black'), (1, 'heatmap (focal)', 'tab:red'),
                                 (2, 'box regression (L1)', 'tab:blue')):
        ax.plot(steps, losses[:, column], color=color, alpha=0.2, linewidth=0.8)
        smooth = np.convolve(losses[:, column], np.ones(window) / window, mode='valid')
        ax.plot(steps[window - 1:], smooth, color=color, label=label)
    ax.set_yscale('log')
    ax.set_xlabel('step')
    ax.set_ylabel('loss')
    ax.set_title('CenterPoint object head: training loss')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
