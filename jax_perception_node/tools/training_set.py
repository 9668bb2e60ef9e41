"""
The training set of ``jax-perception train``: sample drives replayed into pooled BEVs and boxes.

Each bag is replayed through the node's own frame path (``replay``'s message handling, the
pipeline without a head), so a training BEV is exactly what the node computes; each LiDAR
frame pairs with the ``/ground_truth/objects`` message of its stamp. A bag without ground truth
is refused; boxes of classes the head does not learn are left out and counted. The BEVs are
kept 4 x 4 pooled (the head's first, parameter-free step).

Bad data is refused, never skipped: a box with a non-finite centre, size or orientation (in
float32, as the targets are made), a size <= 0 or an orientation that is no unit quaternion
is one line naming the bag, the stamp and the box; so is a BEV with non-finite values. Leaving
out a box would teach the head that nothing is there (its cells become negatives of the
heatmap), and leaving out frames would hide a broken recording from the one who made it.

A sample drive records its seed in its metadata.yaml (``bagio.SAMPLE_SEED_KEY``); one of a
seed below ``FIRST_TRAINING_SEED`` is held out for tests, the demo and evaluation, and refused,
whether named by its folder or by its .mcap (``bagio.custom_data``). A bag without that record
(a vehicle's, or a bare .mcap taken out of its folder) is not checked.
"""

from collections import Counter
import math
import sys
from typing import Sequence

import jax
import numpy as np

from ..bags import bagio
from ..bags.replay import BagFrames, cloud_count, read_ground_truth, ReplayResult
from ..core.pipeline import BevPipeline
from ..detection.heads.centerpoint import CenterPointHead, CLASSES
from ..frames.frame_path import FramePath
from ..geometry.stamps import stamp_ns
from ..outputs.objects import GROUND_TRUTH_TOPIC

FIRST_TRAINING_SEED = 100  # sample drives of lower seeds are held out (module doc)
UNIT_TOLERANCE = 0.01      # |norm - 1| of a box's orientation quaternion (module doc)
BOX_COLUMNS = ('x', 'y', 'z', 'length', 'width', 'height')    # the box values a target uses


class Dataset:
    """Pooled training BEVs, their ground-truth boxes and the BEVs' per-channel statistics."""

    def __init__(self, channels: int, names: Sequence[str] = ()):
        self.pooled: list[np.ndarray] = []        # float32[h, w, 2C] each
        self.boxes: list[np.ndarray] = []         # float32[n, 9] each
        self.origins: list[tuple[str, int]] = []  # (bag, LiDAR stamp ns) of each frame
        self.without_truth = 0                    # frames with no ground truth at their stamp
        self.names = tuple(names) or tuple(f'channel {k}' for k in range(channels))
        self._sum = np.zeros(channels)
        self._squares = np.zeros(channels)
        self._cells = 0
        self._peak = (0.0, '', -1)                # largest |BEV value|, its channel, frame
        self._box_peak = (0.0, '', -1)            # largest |box value|, its column, frame

    def add(self, features: np.ndarray, pooled: np.ndarray, boxes: np.ndarray,
            origin: tuple[str, int] = ('', 0)) -> None:
        """Keep one frame: its pooled BEV and boxes; its full BEV enters the statistics."""
        flat = features.reshape(-1, features.shape[-1]).astype(np.float64)
        self._sum += flat.sum(axis=0)
        self._squares += np.einsum('nc,nc->c', flat, flat)
        self._cells += flat.shape[0]
        frame = len(self.pooled)
        peaks = np.abs(flat).max(axis=0, initial=0.0)
        if peaks.max(initial=0.0) > self._peak[0]:
            self._peak = (float(peaks.max()), self.names[int(peaks.argmax())], frame)
        values = np.abs(np.asarray(boxes, np.float64)[:, :len(BOX_COLUMNS)])
        if values.size and values.max() > self._box_peak[0]:
            column = int(np.unravel_index(values.argmax(), values.shape)[1])
            self._box_peak = (float(values.max()), BOX_COLUMNS[column], frame)
        self.pooled.append(pooled)
        self.boxes.append(boxes)
        self.origins.append(origin)

    def extremes(self) -> str:
        """Describe the largest |value| of the BEVs and of the boxes, with their frames."""
        parts = []
        for what, (value, name, frame) in (('BEV', self._peak), ('box', self._box_peak)):
            if frame >= 0:
                bag, stamp = self.origins[frame]
                parts.append(f'the largest |{what} value| is {value:.3g} ({name}, {bag} at '
                             f'header.stamp {stamp} ns)')
        return ', '.join(parts)

    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the per-channel mean and std (float32[C]; a constant channel gets std 1)."""
        mean = self._sum / max(self._cells, 1)
        var = np.maximum(self._squares / max(self._cells, 1) - mean ** 2, 0.0)
        std = np.sqrt(var)
        return mean.astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32)


class _Collect(BagFrames):
    """Replay's message handling, but each processed frame goes to the dataset, not a bag."""

    picture = False

    def __init__(self, path: FramePath, truth: dict, dataset: Dataset, pool, total: int,
                 src: str = ''):
        super().__init__(path, ReplayResult(), total)
        self.truth, self.dataset, self.pool, self.src = truth, dataset, pool, src

    def write(self, frame, timestamp: int) -> None:
        """Pair the frame with the ground truth of its stamp and keep it (BagError: non-finite)."""
        self.result.frames += 1
        boxes = self.truth.get(frame.stamp_ns)
        if boxes is None:
            self.dataset.without_truth += 1
            return
        features = np.asarray(frame.result.features)
        finite = np.isfinite(features).reshape(-1, features.shape[-1]).all(axis=0)
        if not finite.all():
            names = [n for n, ok in zip(self.dataset.names, finite) if not ok]
            raise bagio.BagError(
                f'{self.src}: the BEV of the LiDAR frame at header.stamp {frame.stamp_ns} ns has '
                f'non-finite values in {", ".join(names)}: its cloud holds values too large for '
                'float32 sums; not trained on')
        self.dataset.add(features, np.asarray(self.pool(features)), boxes,
                         (str(self.src), frame.stamp_ns))


def read_truth(reader, src) -> tuple[dict[int, np.ndarray], Counter]:
    """
    Return stamp (ns) -> float32[n, 9] ground truth, and the boxes of other classes left out.

    BagError for a bag without ground truth, with a message that does not decode or a box
    unfit for a target (``check_boxes``), and for a sample drive of a held-out seed.
    """
    seed = str(bagio.custom_data(reader).get(bagio.SAMPLE_SEED_KEY, '')).strip()
    if seed and not (seed.isascii() and seed.isdigit() and int(seed) >= FIRST_TRAINING_SEED):
        raise bagio.BagError(
            f'{src}: metadata.yaml custom_data {bagio.SAMPLE_SEED_KEY} {seed!r}: sample drives '
            f'of seeds below {FIRST_TRAINING_SEED} are held out for tests, the demo and '
            'evaluation')
    errors, left_out = [], Counter()
    with np.errstate(over='ignore'):      # a size beyond float32 is refused below
        truth = read_ground_truth(reader, bagio.topic_types(reader), CLASSES, errors, left_out)
    if truth is None:
        raise bagio.BagError(
            f'{src}: no ground truth ({bagio.DETECTIONS_TYPE} topic {GROUND_TRUTH_TOPIC}); '
            'train on drives written by jax-perception sample-bag --seed K (K >= 100)')
    if errors:
        raise bagio.BagError(f'{src}: {errors[0]}')
    check_boxes(reader, src)
    return truth, left_out


def box_problems(centre, size, orientation) -> list[str]:
    """Return what makes a ground-truth box unfit for a target (module doc); [] if nothing."""
    problems = []
    with np.errstate(over='ignore'):
        centre32, size32 = (np.array(v, np.float64).astype(np.float32) for v in (centre, size))
    if not np.isfinite(centre32).all():
        problems.append('a non-finite centre')
    if not np.isfinite(size32).all():
        problems.append('a non-finite size')
    elif (size32 <= 0).any():
        problems.append('a size <= 0')
    if not all(math.isfinite(v) for v in orientation):
        problems.append('a non-finite orientation')
    elif abs(math.hypot(*orientation) - 1) > UNIT_TOLERANCE:
        problems.append(f'an orientation that is no unit quaternion (norm '
                        f'{math.hypot(*orientation):.3g})')
    return problems


def check_boxes(reader, src) -> None:
    """
    Refuse the first ground-truth box of a learned class unfit for a target (module doc).

    BagError naming the bag, the message's header.stamp and the box: its index in
    ``detections``, its id and its centre, size and orientation as recorded.
    """
    for _, _, raw, msgtype in bagio.iter_messages(reader, [GROUND_TRUTH_TOPIC]):
        msg = bagio.deserialize(raw, msgtype)
        for n, det in enumerate(msg.detections):
            if max(det.results, key=lambda r: r.hypothesis.score).hypothesis.class_id \
                    not in CLASSES:
                continue        # left out and counted by read_ground_truth
            c, q, s = det.bbox.center.position, det.bbox.center.orientation, det.bbox.size
            centre, size, orientation = (c.x, c.y, c.z), (s.x, s.y, s.z), (q.x, q.y, q.z, q.w)
            problems = box_problems(centre, size, orientation)
            if problems:
                name = f' (id {det.id!r})' if det.id else ''
                raise bagio.BagError(
                    f'{src}: {GROUND_TRUTH_TOPIC} at header.stamp {stamp_ns(msg.header.stamp)} '
                    f'ns: box {n}{name} has {" and ".join(problems)}: centre {_text(centre)}, '
                    f'size {_text(size)}, orientation xyzw {_text(orientation)}; fix the '
                    'ground truth (training refuses bad boxes rather than skip them)')


def _text(values) -> str:
    return '(' + ', '.join(f'{v:g}' for v in values) + ')'


def collect(bags, cfg, pipe: BevPipeline, dataset: Dataset, stream=sys.stderr) -> None:
    """Replay every bag through ``pipe`` (warmed, no head) into ``dataset``."""
    head = CenterPointHead.create(pipe.output_channels)
    pool = jax.jit(lambda bev: head.pool(bev))   # as the head pools at run time: unbatched
    topics = bagio.BagTopics()
    for n, src in enumerate(bags):
        reader = bagio.open_reader(src)
        try:
            types = bagio.topic_types(reader)
            total = cloud_count(reader, types, topics, src)
            truth, left_out = read_truth(reader, src)
            pipe.reset_sweeps()
            collector = _Collect(FramePath(cfg, pipe), truth, dataset, pool, total, src)
            collector.run(reader, types, topics, None)
        finally:
            reader.close()
        stream.write(f'bag {n + 1}/{len(bags)} {src}: {collector.result.frames} frames, '
                     f'{len(dataset.pooled)} with ground truth in all, '
                     f'{dataset.without_truth} without (not trained on)'
                     + ''.join(f', {k} {name!r} boxes left out' for name, k in left_out.items())
                     + '\n')
        stream.flush()
