"""
Detection quality against ground truth: AP at BEV centre distances (per class, mean), recall.

NumPy only, no ROS. Boxes are the rows of ``boxes.BOX_COLUMNS`` (x, y, z, length, width,
height, yaw, score, class), predictions and ground truth in the same frame (``grid.frame_id``),
one pair of arrays per LiDAR stamp.

The definition (``evaluate``):

- only rows of one class (column 8 == ``class_index``) whose BEV centre lies within
  ``max_range_m`` of the grid frame's origin (sqrt(x^2 + y^2) <= max_range_m) take part, ground
  truth and predictions alike;
- per frame, predictions are matched greedily in descending score: each takes the nearest
  ground-truth box (BEV centre distance) not yet taken, if that is at most ``match_m`` away (a
  true positive); otherwise it is a false positive (a duplicate of a taken box is one too);
- AP: all predictions of all frames sorted by score (descending), precision and recall after
  each score (predictions of equal score are one threshold, whatever their frames' order),
  precision made monotone (each point takes the best precision at its recall or beyond), and
  the area under that curve from recall 0 (VOC's all-point interpolation, as nuScenes'
  centre-distance AP without its 10 % cut-offs);
- recall = true positives / ground truth, precision = true positives / predictions, over the
  predictions given (those at or above the score threshold in force);
- box errors, over the true positives and the ground-truth box each matched: the mean absolute
  error of z, length, width and height (m), of the heading (``yaw_rad``: the yaw difference
  wrapped into [0, pi], as nuScenes' AOE) and of the box's orientation (``orientation_rad``:
  the same modulo pi, in [0, pi / 2], blind to a box turned end for end). AP scores centres
  only; these say whether the rest of a box was read right.

Per class, nuScenes-style (``evaluate_classes``): the classes are the head's names in
class-index order (column 8 of predictions and ground truth alike indexes them; rows of any
other index take no part). For each class, ``evaluate`` runs at every BEV centre distance of
``DISTANCE_THRESHOLDS_M`` (0.5, 1, 2 and 4 m, inclusive) within ``CLASS_RANGE_M`` (50 m for
every class, where nuScenes takes 40 m for pedestrians and bicycles) of the grid origin; the
class's AP is the mean of those four APs, and the mean AP (mAP) is the mean of the classes'
APs over the classes with ground truth in the frames given. A class without
any ground truth is reported (ground_truth 0, AP None) but left out of the mean; mAP is None
when no class has ground truth. A prediction of class A on a box of class B is a false positive
of A (and B's box stays unfound): matching never crosses classes. Recall, precision and the box
errors of a class are those at ``match_m`` (2 m).
"""

import math
from typing import Iterable, Sequence

import numpy as np

from .boxes import NUM_COLUMNS

# nuScenes' BEV centre distances (m) of the per-class AP, and the range of the boxes scored
# (m): 50 m for every class (nuScenes takes 50 m for vehicles, 40 m for pedestrians and
# bicycles; here the pedestrians' and cyclists' APs include the 40-50 m ring).
DISTANCE_THRESHOLDS_M = (0.5, 1.0, 2.0, 4.0)
CLASS_RANGE_M = 50.0

SCORE, CLASS = 7, 8
# Box errors reported (``evaluate``'s 'errors'): name -> column of a box row (yaw twice).
ERROR_COLUMNS = {'z_m': 2, 'length_m': 3, 'width_m': 4, 'height_m': 5, 'yaw_rad': 6,
                 'orientation_rad': 6}


def _rows(boxes, name: str) -> np.ndarray:
    """Return ``boxes`` as float64[n, 9]; ValueError naming ``name`` for another shape."""
    rows = np.asarray(boxes, np.float64)
    if rows.ndim == 1 and rows.size == 0:
        rows = rows.reshape(0, NUM_COLUMNS)
    if rows.ndim != 2 or rows.shape[1] != NUM_COLUMNS:
        raise ValueError(f'{name} must be (n, {NUM_COLUMNS}) box rows, got {rows.shape}')
    return rows


def _select(rows: np.ndarray, max_range_m: float, class_index: int) -> np.ndarray:
    """Rows of the class within range."""
    near = np.hypot(rows[:, 0], rows[:, 1]) <= max_range_m
    return rows[near & (rows[:, CLASS] == class_index)]


def match_frame(predictions: np.ndarray, truth: np.ndarray, match_m: float) -> np.ndarray:
    """
    Greedy matching of one frame: the ground-truth row each prediction matched, int (n,), -1 none.

    Predictions are taken in descending score (stable: equal scores in row order), each
    matching the nearest ground-truth row not yet matched within ``match_m`` (BEV centre
    distance, m). The result is in the predictions' row order; ``>= 0`` marks true positives.
    """
    matched = np.full(len(predictions), -1, np.int64)
    if not len(truth):
        return matched
    taken = np.zeros(len(truth), bool)
    for k in np.argsort(-predictions[:, SCORE], kind='stable'):
        d = np.hypot(truth[:, 0] - predictions[k, 0], truth[:, 1] - predictions[k, 1])
        d[taken] = np.inf
        j = int(np.argmin(d))
        if d[j] <= match_m:
            taken[j], matched[k] = True, j
    return matched


def box_errors(predictions: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Absolute errors of matched pairs (row k with row k), float64[n, 6] (``ERROR_COLUMNS``)."""
    columns = list(ERROR_COLUMNS.values())
    errors = np.abs(predictions[:, columns] - truth[:, columns])
    turn = predictions[:, 6] - truth[:, 6]
    names = list(ERROR_COLUMNS)
    errors[:, names.index('yaw_rad')] = np.abs(np.angle(np.exp(1j * turn)))
    errors[:, names.index('orientation_rad')] = np.abs(np.angle(np.exp(2j * turn))) / 2
    return errors


def average_precision(scores: np.ndarray, hits: np.ndarray, ground_truth: int) -> float:
    """
    Area under the monotone precision-recall curve (VOC all-point) of scored predictions.

    scores (n,), hits (n,) bool: each prediction's score and whether it is a true positive;
    ground_truth > 0: how many boxes there are to find. Predictions of equal score are one
    threshold, one point of the curve, so the AP does not depend on their order.
    """
    scores = np.asarray(scores, np.float64)
    if not len(scores):
        return 0.0
    order = np.argsort(-scores, kind='stable')
    ranked = scores[order]
    last = np.append(ranked[1:] != ranked[:-1], True)
    tp = np.cumsum(np.asarray(hits, bool)[order])[last]
    precision = tp / np.arange(1, len(order) + 1)[last]
    recall = tp / ground_truth
    # Monotone precision: the best precision at this recall or beyond.
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    steps = np.diff(np.concatenate([[0.0], recall]))
    return float(np.sum(steps * precision))


def evaluate(frames: Iterable[tuple[np.ndarray, np.ndarray]], max_range_m: float = 40.0,
             match_m: float = 2.0, class_index: int = 0) -> dict:
    """
    Evaluate predictions against ground truth over frames (see the module doc).

    Args
    ----
    frames: (predicted rows float[n, 9], ground-truth rows float[m, 9]) per frame.
    max_range_m: BEV distance (m) of a box centre from the grid origin, at most.
    match_m: BEV centre distance (m) of a match, at most.
    class_index: the class evaluated (column 8).

    Returns
    -------
    {'ap', 'recall', 'precision', 'ground_truth', 'predictions', 'true_positives',
    'max_range_m', 'match_m', 'errors'}: 'ap' is the AP at the 'match_m' beside it; AP and
    recall None without ground truth, precision None without predictions; 'errors' maps each
    name of ``ERROR_COLUMNS`` to the mean absolute error over the true positives (None without
    any).

    Raises
    ------
    ValueError: rows of another shape, or a range or distance that is not a positive number.

    """
    for key, value in (('max_range_m', max_range_m), ('match_m', match_m)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f'{key} must be a positive number, got {value!r}')
    scores, hits, errors, ground_truth = [], [], [], 0
    for predicted, truth in frames:
        predicted = _select(_rows(predicted, 'predictions'), max_range_m, class_index)
        truth = _select(_rows(truth, 'ground truth'), max_range_m, class_index)
        matched = match_frame(predicted, truth, match_m)
        scores.append(predicted[:, SCORE])
        hits.append(matched >= 0)
        errors.append(box_errors(predicted[matched >= 0], truth[matched[matched >= 0]]))
        ground_truth += len(truth)
    scores = np.concatenate(scores) if scores else np.zeros(0)
    hits = np.concatenate(hits) if hits else np.zeros(0, bool)
    errors = np.concatenate(errors) if errors else np.zeros((0, len(ERROR_COLUMNS)))
    true_positives = int(np.count_nonzero(hits))
    return {
        'ap': average_precision(scores, hits, ground_truth) if ground_truth else None,
        'recall': true_positives / ground_truth if ground_truth else None,
        'precision': true_positives / len(hits) if len(hits) else None,
        'ground_truth': ground_truth,
        'predictions': int(len(hits)),
        'true_positives': true_positives,
        'max_range_m': float(max_range_m),
        'match_m': float(match_m),
        'errors': {name: float(errors[:, k].mean()) if len(errors) else None
                   for k, name in enumerate(ERROR_COLUMNS)},
    }


def threshold_key(match_m: float) -> str:
    """Return the key of a distance in ``ap_at_m``: the metres as ``%g`` ('0.5', '1', '2', '4')."""
    return f'{float(match_m):g}'


def evaluate_classes(frames: Iterable[tuple[np.ndarray, np.ndarray]], classes: Sequence[str],
                     thresholds: Sequence[float] = DISTANCE_THRESHOLDS_M,
                     max_range_m: float = CLASS_RANGE_M, match_m: float = 2.0) -> dict:
    """
    Evaluate every class nuScenes-style: AP averaged over centre distances, and the mAP.

    Args
    ----
    frames: (predicted rows float[n, 9], ground-truth rows float[m, 9]) per frame, column 8
        an index into ``classes``.
    classes: the class names in class-index order (the head's classes).
    thresholds: the BEV centre distances (m) whose APs a class's AP averages.
    max_range_m: BEV distance (m) of a box centre from the grid origin, at most.
    match_m: the distance (m) of each class's recall, precision and box errors.

    Returns
    -------
    {'per_class': {name: {'ap', 'ap_at_m', 'ground_truth', 'predictions', 'true_positives',
    'recall', 'precision', 'match_m', 'errors'}}, 'mean_ap', 'classes_evaluated',
    'thresholds_m', 'max_range_m', 'match_m'}, plain JSON-ready values: 'ap' is the mean of
    'ap_at_m' ({``threshold_key(m)``: AP at m}), None (each 'ap_at_m' too) without ground
    truth; recall, precision, true positives and 'errors' are ``evaluate``'s at 'match_m';
    'classes_evaluated' names the classes with ground truth, in class order, 'mean_ap' is the
    mean of their 'ap' (None without any).

    Raises
    ------
    ValueError: no threshold, or ``evaluate``'s (rows of another shape, a distance or range
    that is not a positive number).

    """
    frames, thresholds = list(frames), [float(m) for m in thresholds]
    if not thresholds:
        raise ValueError('thresholds must name at least one distance')
    per_class = {}
    for k, name in enumerate(classes):
        runs = {m: evaluate(frames, max_range_m, m, k) for m in dict.fromkeys(
            [*thresholds, float(match_m)])}
        at = runs[float(match_m)]
        aps = [runs[m]['ap'] for m in thresholds]
        per_class[name] = {
            'ap': float(np.mean(aps)) if at['ground_truth'] else None,
            'ap_at_m': {threshold_key(m): runs[m]['ap'] for m in thresholds},
            **{key: at[key] for key in ('ground_truth', 'predictions', 'true_positives',
                                        'recall', 'precision', 'match_m', 'errors')},
        }
    evaluated = [name for name, entry in per_class.items() if entry['ground_truth']]
    return {
        'per_class': per_class,
        'mean_ap': float(np.mean([per_class[name]['ap'] for name in evaluated]))
        if evaluated else None,
        'classes_evaluated': evaluated,
        'thresholds_m': thresholds,
        'max_range_m': float(max_range_m),
        'match_m': float(match_m),
    }
