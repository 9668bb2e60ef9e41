"""
The training set of ``jax-perception train``: sample drives replayed into pooled BEVs and boxes.

Each bag is replayed through the node's own frame path (``replay``'s message handling, the
pipeline without a head), so a training BEV is exactly what the node computes; each LiDAR
frame pairs with the ``/ground_truth/objects`` message of its stamp. A bag without ground truth
is refused; boxes of classes the head does not learn are left out and counted. The BEVs are
kept 4 x 4 pooled (the head's first, parameter-free step).

A sample drive records its seed in its metadata.yaml (``bagio.SAMPLE_SEED_KEY``); one of a
seed below ``FIRST_TRAINING_SEED`` is held out for tests, the demo and evaluation, and refused,
whether named by its folder or by its .mcap (``bagio.custom_data``). A bag without that record
(a vehicle's, or a bare .mcap taken out of its folder) is not checked.
"""

from collections import Counter
import sys

import jax
import numpy as np

from .. import bagio
from ..frame_path import FramePath
from ..heads.centerpoint import CenterPointHead, CLASSES
from ..objects import GROUND_TRUTH_TOPIC
from ..pipeline import BevPipeline
from ..replay import BagFrames, cloud_count, read_ground_truth, ReplayResult

FIRST_TRAINING_SEED = 100  # sample drives of lower seeds are held out (module doc)


class Dataset:
    """Pooled training BEVs, their ground-truth boxes and the BEVs' per-channel statistics."""

    def __init__(self, channels: int):
        self.pooled: list[np.ndarray] = []        # float32[h, w, 2C] each
        self.boxes: list[np.ndarray] = []         # float32[n, 9] each
        self.without_truth = 0                    # frames with no ground truth at their stamp
        self._sum = np.zeros(channels)
        self._squares = np.zeros(channels)
        self._cells = 0

    def add(self, features: np.ndarray, pooled: np.ndarray, boxes: np.ndarray) -> None:
        """Keep one frame: its pooled BEV and boxes; its full BEV enters the statistics."""
        flat = features.reshape(-1, features.shape[-1]).astype(np.float64)
        self._sum += flat.sum(axis=0)
        self._squares += np.einsum('nc,nc->c', flat, flat)
        self._cells += flat.shape[0]
        self.pooled.append(pooled)
        self.boxes.append(boxes)

    def statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the per-channel mean and std (float32[C]; a constant channel gets std 1)."""
        mean = self._sum / max(self._cells, 1)
        var = np.maximum(self._squares / max(self._cells, 1) - mean ** 2, 0.0)
        std = np.sqrt(var)
        return mean.astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32)


class _Collect(BagFrames):
    """Replay's message handling, but each processed frame goes to the dataset, not a bag."""

    picture = False

    def __init__(self, path: FramePath, truth: dict, dataset: Dataset, pool, total: int):
        super().__init__(path, ReplayResult(), total)
        self.truth, self.dataset, self.pool = truth, dataset, pool

    def write(self, frame, timestamp: int) -> None:
        """Pair the frame with the ground truth of its stamp and keep it."""
        self.result.frames += 1
        boxes = self.truth.get(frame.stamp_ns)
        if boxes is None:
            self.dataset.without_truth += 1
            return
        features = frame.result.features
        self.dataset.add(features, np.asarray(self.pool(features)), boxes)


def read_truth(reader, src) -> tuple[dict[int, np.ndarray], Counter]:
    """
    Return stamp (ns) -> float32[n, 9] ground truth, and the boxes of other classes left out.

    BagError for a bag without ground truth or with a message that does not decode, and for a
    sample drive of a held-out seed.
    """
    seed = str(bagio.custom_data(reader).get(bagio.SAMPLE_SEED_KEY, '')).strip()
    if seed and not (seed.isascii() and seed.isdigit() and int(seed) >= FIRST_TRAINING_SEED):
        raise bagio.BagError(
            f'{src}: metadata.yaml custom_data {bagio.SAMPLE_SEED_KEY} {seed!r}: sample drives '
            f'of seeds below {FIRST_TRAINING_SEED} are held out for tests, the demo and '
            'evaluation')
    errors, left_out = [], Counter()
    truth = read_ground_truth(reader, bagio.topic_types(reader), CLASSES, errors, left_out)
    if truth is None:
        raise bagio.BagError(
            f'{src}: no ground truth ({bagio.DETECTIONS_TYPE} topic {GROUND_TRUTH_TOPIC}); '
            'train on drives written by jax-perception sample-bag --seed K (K >= 100)')
    if errors:
        raise bagio.BagError(f'{src}: {errors[0]}')
    return truth, left_out


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
            collector = _Collect(FramePath(cfg, pipe), truth, dataset, pool, total)
            collector.run(reader, types, topics, None)
        finally:
            reader.close()
        stream.write(f'bag {n + 1}/{len(bags)} {src}: {collector.result.frames} frames, '
                     f'{len(dataset.pooled)} with ground truth in all, '
                     f'{dataset.without_truth} without (not trained on)'
                     + ''.join(f', {k} {name!r} boxes left out' for name, k in left_out.items())
                     + '\n')
        stream.flush()
