"""The files a replay writes beside its output bag: the summary JSON and the pictures."""

import contextlib
import json
import os
from pathlib import Path

from .arguments import UsageError


def write_json(path: str, summary: dict) -> None:
    """Write the summary beside ``path`` first, then rename it over: never half a file."""
    target = Path(path)
    part = target.with_name(f'.{target.name}.{os.getpid()}.part')
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(json.dumps(summary, indent=2) + '\n')
        os.replace(part, target)
    except OSError as exc:
        with contextlib.suppress(OSError):     # its folder may be gone, or a file now
            part.unlink(missing_ok=True)
        raise UsageError(f'--json {path}: cannot write: {exc.strerror or exc}') from None


def write_pictures(png: Path, result, cfg) -> None:
    """Write the BEV snapshots and the latency plot of a replay into folder ``png``."""
    from .report import save_bev_png, save_latency_png
    try:
        png.mkdir(parents=True, exist_ok=True)
        for index, features in result.snapshots.items():
            save_bev_png(features, cfg.grid, png / f'bev_{index:04d}.png',
                         f'frame {index}: LiDAR z_max with camera coverage')
        if result.records:
            save_latency_png(result.records, png / 'latency.png', 'replay latency per frame')
    except OSError as exc:
        raise UsageError(f'--png {png}: cannot write: {exc.strerror or exc}') from None
    print(f'pictures in {png}')
