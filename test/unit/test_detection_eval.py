"""Detection evaluation: AP at 2 m, per-class AP and mAP, on hand-worked cases and a reference."""

import json
import math

from jax_perception_node.detection.detection_eval import evaluate, evaluate_classes
import numpy as np
import pytest


def box(x, y, score=1.0, cls=0):
    """One box row at (x, y) with a car's size."""
    return [x, y, 0.9, 4.5, 1.8, 1.5, 0.0, score, cls]


def rows(*boxes):
    return np.array(boxes, np.float32).reshape(-1, 9)


def test_two_frames_worked_by_hand():
    # Frame 1: ground truth A (10, 0) and B (20, 5).
    #   p1 (10.5, 0) 0.9 -> A (0.5 m): TP
    #   p2 (10.2, 0.1) 0.8 -> A is taken, B is 10 m away: FP (a duplicate)
    #   p3 (21, 5) 0.6 -> B (1 m): TP
    #   (50, 0) 0.95 is beyond 40 m, (12, 0) and (12.5, 0) are class 1: all ignored.
    # Frame 2: ground truth C (-5, -5), and (0, 45) beyond 40 m (ignored).
    #   p4 (-5, -8) 0.7 -> C is 3 m away: FP
    # Ranked: p1 TP, p2 FP, p4 FP, p3 TP; 3 ground truth boxes.
    #   precision 1, 1/2, 1/3, 2/4; recall 1/3, 1/3, 1/3, 2/3
    #   monotone precision 1, 1/2, 1/2, 1/2
    #   AP = 1/3 * 1 (recall 0 -> 1/3) + 1/3 * 1/2 (recall 1/3 -> 2/3) = 1/2
    frames = [(rows(box(10.5, 0, 0.9), box(10.2, 0.1, 0.8), box(21, 5, 0.6), box(50, 0, 0.95),
                    box(12, 0, 0.99, cls=1)),
               rows(box(10, 0), box(20, 5), box(12.5, 0, cls=1))),
              (rows(box(-5, -8, 0.7)), rows(box(-5, -5), box(0, 45)))]
    result = evaluate(frames)
    assert result['ap'] == pytest.approx(0.5)
    assert result['recall'] == pytest.approx(2 / 3)
    assert result['precision'] == pytest.approx(0.5)
    assert (result['ground_truth'], result['predictions'], result['true_positives']) == (3, 4, 2)
    assert (result['max_range_m'], result['match_m']) == (40.0, 2.0)
    # Class 1 alone: its one prediction finds its one box.
    other = evaluate(frames, class_index=1)
    assert (other['ap'], other['recall'], other['predictions']) == (1.0, 1.0, 1)


def test_box_errors_of_the_matched_pairs_worked_by_hand():
    # p1 (score 0.9) matches A, p2 matches B; p3 matches nothing (an FP): its box never counts.
    #   z: |1.2 - 0.9| = 0.3, |0.4 - 0.9| = 0.5 -> 0.4; length |5.0 - 4.5| = 0.5, 0 -> 0.25
    #   width 0, |2.2 - 1.8| = 0.4 -> 0.2; height 0, |1.0 - 1.5| = 0.5 -> 0.25
    #   yaw 3.1 against -3.1: 0.0832 the short way round, heading and orientation alike;
    #   0.5 + pi against 0: heading pi - 0.5, but the box is only turned by 0.5 (end for end)
    truth = rows([10, 0, 0.9, 4.5, 1.8, 1.5, -3.1, 1, 0], [20, 5, 0.9, 4.5, 1.8, 1.5, 0.0, 1, 0])
    predicted = rows([10.5, 0, 1.2, 5.0, 1.8, 1.5, 3.1, 0.9, 0],
                     [20, 5.5, 0.4, 4.5, 2.2, 1.0, 0.5 + math.pi, 0.8, 0],
                     [-30, 0, 9.0, 9.0, 9.0, 9.0, 2.0, 0.7, 0])
    errors = evaluate([(predicted, truth)])['errors']
    wrap = 2 * math.pi - 6.2
    assert errors == pytest.approx({'z_m': 0.4, 'length_m': 0.25, 'width_m': 0.2,
                                    'height_m': 0.25, 'yaw_rad': (wrap + math.pi - 0.5) / 2,
                                    'orientation_rad': (wrap + 0.5) / 2}, abs=1e-5)
    # No true positive, no error to report.
    assert set(evaluate([(rows(box(-30, 0)), truth)])['errors'].values()) == {None}


def test_ranking_order_matters():
    # Same matches as above but the false positives ranked first:
    #   FP 0.9, FP 0.8, TP 0.7, TP 0.6 of 2 ground truth boxes
    #   precision 0, 0, 1/3, 2/4 -> monotone 1/2, 1/2, 1/2, 1/2
    #   AP = 1/2 * 1/2 + 1/2 * 1/2 = 1/2; perfect ranking would give 1.
    truth = rows(box(0, 0), box(10, 10))
    bad = rows(box(30, 0, 0.9), box(0, 30, 0.8), box(0, 0.5, 0.7), box(10, 9, 0.6))
    good = rows(box(30, 0, 0.5), box(0, 30, 0.4), box(0, 0.5, 0.7), box(10, 9, 0.6))
    assert evaluate([(bad, truth)])['ap'] == pytest.approx(0.5)
    assert evaluate([(good, truth)])['ap'] == pytest.approx(1.0)


def test_equal_scores_are_one_threshold_whatever_their_order():
    # A TP and an FP of the same score, in two frames, 2 ground truth boxes: one point of the
    # curve, recall 1/2 at precision 1/2, AP 1/4 in either frame order (a stable sort gave
    # 1/2 with the TP's frame first, 1/4 with the other).
    found = (rows(box(10, 0, 1.0)), rows(box(10, 0)))
    missed = (rows(box(20, 0, 1.0)), rows(box(30, 0)))
    assert evaluate([found, missed])['ap'] == pytest.approx(0.25)
    assert evaluate([missed, found])['ap'] == pytest.approx(0.25)
    # A lower score after the tie adds its own point: of 3 boxes, recall 1/3 at precision 1/2,
    # then 2/3 at 2/3; the monotone envelope lifts the first to 2/3: AP = 2 * 1/3 * 2/3.
    late = (rows(box(-5, 0, 0.5)), rows(box(-5, 0)))
    assert evaluate([missed, found, late])['ap'] == pytest.approx(4 / 9)


def test_greedy_matching_in_score_order():
    # Ground truth at x = 0 and x = 3; p (1.4, 0) 0.9 takes the nearer x = 0 (1.4 m vs 1.6 m);
    # q (0.2, 0) 0.8 then only has x = 3 at 2.8 m: FP. Reversed scores: q takes 0, p takes 3.
    truth = rows(box(0, 0), box(3, 0))
    first = evaluate([(rows(box(1.4, 0, 0.9), box(0.2, 0, 0.8)), truth)])
    assert first['true_positives'] == 1 and first['ap'] == pytest.approx(0.5)
    second = evaluate([(rows(box(1.4, 0, 0.8), box(0.2, 0, 0.9)), truth)])
    assert second['true_positives'] == 2 and second['ap'] == pytest.approx(1.0)


def test_edges():
    truth = rows(box(5, 5), box(-20, 3))
    # No predictions: nothing found, precision undefined.
    none = evaluate([(rows(), truth), (np.zeros((0, 9)), rows())])
    assert (none['ap'], none['recall'], none['precision']) == (0.0, 0.0, None)
    assert none['ground_truth'] == 2
    # No ground truth: AP and recall undefined (None, not NaN); every prediction is false.
    empty = evaluate([(rows(box(1, 1, 0.5)), rows())])
    assert (empty['ap'], empty['recall'], empty['precision']) == (None, None, 0.0)
    assert evaluate([])['ap'] is None
    # Duplicates on one box: one TP, the rest FP after it: AP 1/2 (one of two found at
    # precision 1), recall 1/2, precision 1/3.
    dup = evaluate([(rows(box(5, 5.1, 0.9), box(5, 5.2, 0.8), box(5.1, 5, 0.7)), truth)])
    assert (dup['true_positives'], dup['predictions']) == (1, 3)
    assert dup['ap'] == pytest.approx(0.5) and dup['precision'] == pytest.approx(1 / 3)
    # Range is inclusive at 40 m; beyond, a prediction of a box is no longer counted.
    at = evaluate([(rows(box(0, 40, 0.9)), rows(box(-24, 32)))])      # 3-4-5: 40 m
    assert (at['ground_truth'], at['predictions'], at['true_positives']) == (1, 1, 0)
    out = evaluate([(rows(box(0, 40.5, 0.9)), rows(box(0, 41)))])
    assert (out['ground_truth'], out['predictions'], out['ap']) == (0, 0, None)
    # Match distance is inclusive; a smaller match distance and range are honoured.
    assert evaluate([(rows(box(0, 2, 0.9)), rows(box(0, 0)))])['true_positives'] == 1
    assert evaluate([(rows(box(0, 2, 0.9)), rows(box(0, 0)))],
                    match_m=1.0)['true_positives'] == 0
    assert evaluate([(rows(box(0, 25)), rows(box(0, 25)))], max_range_m=20.0)['predictions'] == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match='predictions must be'):
        evaluate([(np.zeros((2, 7)), rows())])
    with pytest.raises(ValueError, match='ground truth must be'):
        evaluate([(rows(), np.zeros(9))])
    with pytest.raises(ValueError, match='match_m'):
        evaluate([], match_m=0.0)
    with pytest.raises(ValueError, match='max_range_m'):
        evaluate([], max_range_m=float('nan'))


def reference(frames, max_range_m, match_m, class_index):
    """Brute force: Python loops, AP as the sum over true positives of interpolated precision."""
    ranked, total = [], 0
    for f, (predicted, truth) in enumerate(frames):
        def keep(r):
            return r[8] == class_index and math.hypot(r[0], r[1]) <= max_range_m
        gts = [r for r in truth.tolist() if keep(r)]
        total += len(gts)
        preds = sorted([r for r in predicted.tolist() if keep(r)], key=lambda r: -r[7])
        free = [True] * len(gts)
        for p in preds:
            best, best_d = None, None
            for j, g in enumerate(gts):
                d = math.hypot(p[0] - g[0], p[1] - g[1])
                if free[j] and d <= match_m and (best_d is None or d < best_d):
                    best, best_d = j, d
            if best is not None:
                free[best] = False
            ranked.append((p[7], best is not None))
    ranked.sort(key=lambda s: -s[0])
    tp, precisions, flags = 0, [], []
    for n, (_, hit) in enumerate(ranked, 1):
        tp += hit
        precisions.append(tp / n)
        flags.append(hit)
    ap = sum(max(precisions[k:]) for k in range(len(ranked)) if flags[k]) / total \
        if total else None
    return ap, (tp / total if total else None), tp, len(ranked), total


@pytest.mark.parametrize('seed', range(6))
def test_random_frames_against_a_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(rng.integers(1, 6)):
        truth = np.zeros((rng.integers(0, 12), 9))
        truth[:, :2] = rng.uniform(-50, 50, (len(truth), 2))
        truth[:, 8] = rng.integers(0, 2, len(truth))
        # Predictions: noisy copies of some boxes (some duplicated), plus clutter.
        picks = rng.integers(0, max(len(truth), 1), rng.integers(0, 14)) if len(truth) else []
        near = truth[picks].copy() if len(truth) else np.zeros((0, 9))
        near[:, :2] += rng.normal(0, 1.0, (len(near), 2))
        clutter = np.zeros((rng.integers(0, 6), 9))
        clutter[:, :2] = rng.uniform(-50, 50, (len(clutter), 2))
        clutter[:, 8] = rng.integers(0, 2, len(clutter))
        predicted = np.concatenate([near, clutter]).astype(np.float32)
        predicted[:, 7] = rng.random(len(predicted))
        frames.append((predicted, truth.astype(np.float32)))
    for max_range_m, match_m, class_index in ((40.0, 2.0, 0), (30.0, 1.0, 1), (60.0, 3.0, 0)):
        ap, recall, tp, count, total = reference(frames, max_range_m, match_m, class_index)
        result = evaluate(iter(frames), max_range_m, match_m, class_index)
        assert (result['true_positives'], result['predictions'], result['ground_truth']) == (
            tp, count, total)
        if total:
            assert result['ap'] == pytest.approx(ap, abs=1e-12)
            assert result['recall'] == pytest.approx(recall, abs=1e-12)
        else:
            assert result['ap'] is None and result['recall'] is None


# -- per class, nuScenes-style (evaluate_classes) -------------------------------------------------

CAR, PEDESTRIAN, CYCLIST = 0, 1, 2
CLASSES = ('car', 'pedestrian', 'cyclist')


def test_per_class_ap_and_map_worked_by_hand():
    # Cars: ground truth A (10, 0), B (20, 0); pedestrians: P (5, 5), Q (-10, -10); no cyclist.
    # Car predictions, ranked: c4 (5, 5) 0.95 sits on pedestrian P: a false positive of car at
    #   every distance (P stays unfound by it); c1 (10.3, 0) 0.9 -> A at 0.3 m; c2 (21.5, 0)
    #   0.8 -> B at 1.5 m; c3 (30, 0) 0.7 -> 10 m from anything: FP.
    #   0.5 m and 1 m: FP, TP, FP, FP: precision 0, 1/2, 1/3, 1/4, recall 0, 1/2, 1/2, 1/2
    #     monotone 1/2, 1/2, 1/3, 1/4 -> AP = 1/2 * 1/2 = 1/4
    #   2 m and 4 m: FP, TP, TP, FP: precision 0, 1/2, 2/3, 2/4, recall 0, 1/2, 1, 1
    #     monotone 2/3, 2/3, 2/3, 1/2 -> AP = 1/2 * 2/3 + 1/2 * 2/3 = 2/3
    #   car AP = (1/4 + 1/4 + 2/3 + 2/3) / 4 = 11/24; at 2 m recall 1, precision 2/4.
    # Pedestrian predictions: p1 (5.5, 5) 0.6 -> P at exactly 0.5 m (inclusive: a match at
    #   0.5 m); p2 (-10, -11.5) 0.3 -> Q at 1.5 m.
    #   0.5 m and 1 m: TP, FP -> AP 1/2 * 1 = 1/2; 2 m and 4 m: TP, TP -> AP 1
    #   pedestrian AP = (1/2 + 1/2 + 1 + 1) / 4 = 3/4
    # Cyclist: one prediction, no ground truth: AP None, left out of the mean.
    # mAP = (11/24 + 3/4) / 2 = 29/48. Class 3 (no class of the head's) takes no part.
    predicted = rows(box(5, 5, 0.95, CAR), box(10.3, 0, 0.9, CAR), box(21.5, 0, 0.8, CAR),
                     box(30, 0, 0.7, CAR), box(5.5, 5, 0.6, PEDESTRIAN),
                     box(-10, -11.5, 0.3, PEDESTRIAN), box(0, 8, 0.5, CYCLIST),
                     box(1, 1, 0.99, 3))
    truth = rows(box(10, 0, cls=CAR), box(20, 0, cls=CAR), box(5, 5, cls=PEDESTRIAN),
                 box(-10, -10, cls=PEDESTRIAN), box(1, 1, cls=3))
    result = evaluate_classes([(predicted, truth)], CLASSES)
    assert list(result['per_class']) == list(CLASSES)
    car, pedestrian, cyclist = (result['per_class'][name] for name in CLASSES)
    assert car['ap_at_m'] == pytest.approx({'0.5': 1 / 4, '1': 1 / 4, '2': 2 / 3, '4': 2 / 3})
    assert car['ap'] == pytest.approx(11 / 24)
    assert (car['ground_truth'], car['predictions'], car['true_positives']) == (2, 4, 2)
    assert (car['recall'], car['precision'], car['match_m']) == (1.0, 0.5, 2.0)
    assert pedestrian['ap_at_m'] == pytest.approx({'0.5': 0.5, '1': 0.5, '2': 1.0, '4': 1.0})
    assert pedestrian['ap'] == pytest.approx(3 / 4)
    assert cyclist == {'ap': None, 'ap_at_m': {'0.5': None, '1': None, '2': None, '4': None},
                       'ground_truth': 0, 'predictions': 1, 'true_positives': 0,
                       'recall': None, 'precision': 0.0, 'match_m': 2.0,
                       'errors': dict.fromkeys(car['errors'])}
    assert result['mean_ap'] == pytest.approx(29 / 48)
    assert result['classes_evaluated'] == ['car', 'pedestrian']
    assert (result['thresholds_m'], result['max_range_m'], result['match_m']) == (
        [0.5, 1.0, 2.0, 4.0], 50.0, 2.0)
    # The box errors at 2 m are evaluate's for the class (same sizes here: 0 but for z).
    assert car['errors'] == evaluate([(predicted, truth)], 50.0, 2.0, CAR)['errors']
    json.dumps(result)


def test_distance_thresholds_are_inclusive():
    # 1 m exactly: not a match at 0.5 m, a match at 1, 2 and 4 m.
    result = evaluate_classes([(rows(box(1, 0, 0.9)), rows(box(0, 0)))], ('car',))
    car = result['per_class']['car']
    assert car['ap_at_m'] == {'0.5': 0.0, '1': 1.0, '2': 1.0, '4': 1.0}
    assert car['ap'] == pytest.approx(0.75) and result['mean_ap'] == pytest.approx(0.75)
    # Other distances, keyed by their %g.
    other = evaluate_classes([(rows(box(1, 0, 0.9)), rows(box(0, 0)))], ('car',),
                             thresholds=(0.25, 1.5), match_m=0.25)
    assert other['per_class']['car']['ap_at_m'] == {'0.25': 0.0, '1.5': 1.0}
    assert other['per_class']['car']['recall'] == 0.0


def test_per_class_range_is_50_m_inclusive():
    # (30, 40) is 50 m away: in; (0, 50.5) out, truth and prediction alike; the prediction at
    # (30, 39.6) is 49.7 m away. (evaluate's own default range stays 40 m.)
    frames = [(rows(box(30, 39.6, 0.9), box(0, 50.5, 0.8)), rows(box(30, 40), box(0, 50.5)))]
    car = evaluate_classes(frames, ('car',))['per_class']['car']
    assert (car['ground_truth'], car['predictions'], car['true_positives']) == (1, 1, 1)
    assert car['ap'] == 1.0
    assert evaluate(frames)['ground_truth'] == 0
    near = evaluate_classes(frames, ('car',), max_range_m=45.0)['per_class']['car']
    assert (near['ground_truth'], near['predictions'], near['ap']) == (0, 0, None)


def test_classes_without_ground_truth_and_classes_the_head_lacks():
    # The head knows only 'car' (index 0): rows of index 1 and 2 are no class of it.
    frames = [(rows(box(3, 3, 0.9, 1), box(7, 0, 0.8, 2)), rows(box(3, 3, cls=1)))]
    result = evaluate_classes(frames, ('car',))
    assert list(result['per_class']) == ['car']
    assert result['per_class']['car']['ground_truth'] == 0
    assert (result['mean_ap'], result['classes_evaluated']) == (None, [])
    # No frames at all: every class reported, none evaluated.
    empty = evaluate_classes([], CLASSES)
    assert [e['ground_truth'] for e in empty['per_class'].values()] == [0, 0, 0]
    assert empty['mean_ap'] is None
    # A class with ground truth and no prediction is evaluated: AP 0, in the mean.
    truth = rows(box(3, 3, cls=CAR), box(9, 9, cls=CYCLIST))
    missed = evaluate_classes([(rows(box(3, 3, 0.9, CAR)), truth)], CLASSES)
    assert missed['per_class']['cyclist']['ap'] == 0.0
    assert missed['classes_evaluated'] == ['car', 'cyclist']
    assert missed['mean_ap'] == pytest.approx(0.5)


def test_per_class_bad_arguments():
    with pytest.raises(ValueError, match='thresholds'):
        evaluate_classes([], CLASSES, thresholds=())
    with pytest.raises(ValueError, match='match_m'):
        evaluate_classes([], CLASSES, thresholds=(1.0, -1.0))


@pytest.mark.parametrize('seed', range(4))
def test_per_class_ap_against_the_brute_force_reference(seed):
    rng = np.random.default_rng(100 + seed)
    frames = []
    for _ in range(rng.integers(1, 5)):
        truth = np.zeros((rng.integers(0, 14), 9))
        truth[:, :2] = rng.uniform(-60, 60, (len(truth), 2))
        truth[:, 8] = rng.integers(0, 4, len(truth))
        near = truth[rng.integers(0, len(truth), rng.integers(0, 16))] if len(truth) else \
            np.zeros((0, 9))
        near[:, :2] += rng.normal(0, 1.5, (len(near), 2))
        near[:, 8] = np.where(rng.random(len(near)) < 0.2, rng.integers(0, 4, len(near)),
                              near[:, 8])        # some predictions of the wrong class
        predicted = near.astype(np.float32)
        predicted[:, 7] = rng.random(len(predicted))
        frames.append((predicted, truth.astype(np.float32)))
    result = evaluate_classes(frames, CLASSES + ('truck',))
    means = []
    for k, name in enumerate(CLASSES + ('truck',)):
        entry = result['per_class'][name]
        aps = [reference(frames, 50.0, m, k)[0] for m in (0.5, 1.0, 2.0, 4.0)]
        _, recall, tp, count, total = reference(frames, 50.0, 2.0, k)
        assert (entry['true_positives'], entry['predictions'], entry['ground_truth']) == (
            tp, count, total)
        if total:
            assert entry['ap'] == pytest.approx(sum(aps) / 4, abs=1e-12)
            assert entry['recall'] == pytest.approx(recall, abs=1e-12)
            means.append(sum(aps) / 4)
        else:
            assert entry['ap'] is None
    assert result['mean_ap'] == (pytest.approx(sum(means) / len(means), abs=1e-12)
                                 if means else None)
