"""
The detection block of a replay's summary (and of the demo's report): one class, and every class.

``detection_summary`` gives, beside each other:

- the keys of ``detection_eval.evaluate`` for one class (``'class'``): AP at 2 m within 40 m,
  recall, precision, counts and box errors, as before the head had several classes. That
  class is the first of the head's classes with ground truth in the frames (the head's first
  class when none has any);
- ``'per_class'``, ``'mean_ap'``, ``'classes_evaluated'``, ``'mean_ap_thresholds_m'`` and
  ``'mean_ap_range_m'``: ``detection_eval.evaluate_classes`` over the head's classes
  (nuScenes-style: each class's AP the mean of its APs at 0.5, 1, 2 and 4 m, within 50 m);
- ``'frames'`` (the frames with ground truth), ``'frames_without_output'`` (those of them
  no frame was served for: their boxes count as missed) and ``'other_classes'`` (class_id ->
  ground-truth boxes of classes the head does not know, left out).
"""

from typing import Mapping, Sequence

import numpy as np

from ..detection.boxes import NUM_COLUMNS
from ..detection.detection_eval import evaluate, evaluate_classes


def detection_summary(objects: Mapping[int, np.ndarray], truth: Mapping[int, np.ndarray],
                      classes: Sequence[str], other_classes: Mapping[str, int]) -> dict:
    """
    Return the detection block (module doc): each frame's predicted rows against its truth.

    ``objects`` and ``truth``: stamp -> rows (``boxes.BOX_COLUMNS``); ``classes``: the head's
    class names, which column 8 of both indexes. A stamp with ground truth and no output (a
    cloud rejected, dropped, never sent) is scored as a frame that predicted nothing, so a
    node that serves half the frames does not score as one that serves them all; outputs
    without ground truth are left out.
    """
    nothing = np.zeros((0, NUM_COLUMNS), np.float32)
    paired = [(objects.get(stamp, nothing), rows) for stamp, rows in sorted(truth.items())]
    unserved = sum(stamp not in objects for stamp in truth)
    per_class = evaluate_classes(paired, classes)
    evaluated = per_class['classes_evaluated']
    first = evaluated[0] if evaluated else classes[0]
    return dict(
        evaluate(paired, class_index=list(classes).index(first)), frames=len(paired),
        frames_without_output=unserved,
        other_classes=dict(sorted(other_classes.items())), **{'class': first},
        per_class=per_class['per_class'], mean_ap=per_class['mean_ap'],
        classes_evaluated=evaluated, mean_ap_thresholds_m=per_class['thresholds_m'],
        mean_ap_range_m=per_class['max_range_m'])


def _number(value) -> str:
    """Two decimals, or n/a for None."""
    return 'n/a' if value is None else f'{value:.2f}'


def mean_ap_line(detection: Mapping) -> str:
    """One line: the mAP, the classes it averages, and its definition."""
    thresholds = ', '.join(f'{m:g}' for m in detection['mean_ap_thresholds_m'])
    evaluated = detection['classes_evaluated']
    return (f'mAP {_number(detection["mean_ap"])} over {len(evaluated)} of '
            f'{len(detection["per_class"])} classes ({", ".join(evaluated) or "none"} with '
            f'ground truth); AP of a class = the mean of its APs at {thresholds} m BEV centre '
            f'distance, within {detection["mean_ap_range_m"]:g} m')


def class_lines(detection: Mapping) -> list[str]:
    """One line per class of the head: AP, AP at each distance, counts, recall at 2 m."""
    lines = []
    for name, entry in detection['per_class'].items():
        at = ', '.join(f'{m} m {_number(ap)}' for m, ap in entry['ap_at_m'].items())
        lines.append(f'{name}: AP {_number(entry["ap"])} ({at}), recall@{entry["match_m"]:g}m '
                     f'{_number(entry["recall"])} ({entry["ground_truth"]} in the ground truth, '
                     f'{entry["predictions"]} predicted)')
    return lines


def class_table(detection: Mapping) -> str:
    """Return a markdown table of ``per_class``: AP, AP at each distance, counts, recall."""
    entries = detection['per_class']
    distances = list(next(iter(entries.values()))['ap_at_m']) if entries else []
    match_m = next(iter(entries.values()))['match_m'] if entries else 2.0
    lines = ['| class | AP | ' + ' | '.join(f'AP@{m}m' for m in distances)
             + f' | ground truth | predicted | recall@{match_m:g}m |',
             '|---|---:|' + '---:|' * len(distances) + '---:|---:|---:|']
    for name, entry in entries.items():
        lines.append(f'| {name} | {_number(entry["ap"])} | '
                     + ' | '.join(_number(ap) for ap in entry['ap_at_m'].values())
                     + f' | {entry["ground_truth"]} | {entry["predictions"]} | '
                     f'{_number(entry["recall"])} |')
    return '\n'.join(lines)
