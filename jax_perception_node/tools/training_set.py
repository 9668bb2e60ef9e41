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

Camera dropout (issue 29: a head that works with cameras masked or absent): each frame gives up
to three BEV variants, drawn by the trainer with the weights of :class:`CameraDropout`: all
cameras (the frame as processed), a random subset (each camera kept with probability
``KEEP_CAMERA``, drawn once per frame, seeded) and none. The camera channels and the coverage
come from the lift alone, and the LiDAR channels do not depend on the cameras. So the subset
variant is the frame's BEV with its camera channels and coverage lifted again by the
pipeline's own lift (``lift.lift_cameras`` on the frame's staged maps and lift tables, from
``BevPipeline.frame_args``) with the other cameras masked; and with every camera masked the
lift gives 0 in every camera channel and in the coverage, so that variant is the frame's
pooled BEV with those zeroed (made when drawn, never stored). Both equal what
``BevPipeline.process`` gives with those cameras left out, bit for bit (tested). A BEV without
cameras, or projected by ``fusion.weights`` (no camera channel to drop), has the one variant.

What each training step takes from the set is drawn here too (:func:`draws`): the frames
(class-balanced, :func:`class_balanced`, or in passes), their mirrors, camera variants and
intensity scales.

A sample drive records its seed in its metadata.yaml (``bagio.SAMPLE_SEED_KEY``); one of a
seed below ``FIRST_TRAINING_SEED`` is held out for tests, the demo and evaluation, and refused,
whether named by its folder or by its .mcap (``bagio.custom_data``). A bag without that record
(a vehicle's, or a bare .mcap taken out of its folder) is not checked.
"""

from collections import Counter
from dataclasses import dataclass
import math
import sys
from typing import Sequence

import jax
import numpy as np

from ..bags import bagio
from ..bags.replay import BagFrames, cloud_count, lidar_names, read_ground_truth, ReplayResult
from ..core import lift
from ..core.pipeline import BevPipeline
from ..detection.heads.centerpoint import CenterPointHead, CLASSES
from ..frames.frame_path import FramePath
from ..geometry.stamps import stamp_ns
from ..outputs.objects import GROUND_TRUTH_TOPIC

FIRST_TRAINING_SEED = 100  # sample drives of lower seeds are held out (module doc)
UNIT_TOLERANCE = 0.01      # |norm - 1| of a box's orientation quaternion (module doc)
BOX_COLUMNS = ('x', 'y', 'z', 'length', 'width', 'height')    # the box values a target uses
VARIANTS = ('all', 'subset', 'none')    # the cameras of a frame's BEV variants (module doc)
KEEP_CAMERA = 0.5          # the subset variant keeps each camera with this probability
# Each sample's intensity is scaled by a log-uniform factor in this range: drivers and units
# scale it differently (0-255 Velodyne, Ouster's signal, uint8 Autoware clouds).
INTENSITY_SCALE = (0.5, 2.0)


@dataclass(frozen=True)
class CameraDropout:
    """
    The share of training samples drawn with their cameras dropped (module doc).

    ``rate``: the share of samples with cameras dropped (0: every sample has all its cameras,
    and one BEV per frame is kept); ``every``: of those, the share with every camera dropped,
    the rest with each dropped independently (kept with probability ``KEEP_CAMERA``).
    """

    rate: float = 0.6
    every: float = 0.5

    @property
    def weights(self) -> tuple[float, float, float]:
        """Return the weights of ``VARIANTS``: all, subset, none (0.4, 0.3, 0.3 by default)."""
        return (1.0 - self.rate, self.rate * (1.0 - self.every), self.rate * self.every)


class Dataset:
    """Pooled training BEVs, their ground-truth boxes and the BEVs' per-channel statistics."""

    def __init__(self, channels: int, names: Sequence[str] = (), cameras: int | None = None):
        self.pooled: list[np.ndarray] = []        # float32[h, w, 2C + 4] each: all cameras
        self.subset: list[np.ndarray] = []        # the same with a random subset, if collected
        self.channels = channels
        self.cameras = cameras                    # first camera channel; None: no dropout
        self.boxes: list[np.ndarray] = []         # float32[n, 9] each
        self.origins: list[tuple[str, int]] = []  # (bag, LiDAR stamp ns) of each frame
        self.without_truth = 0                    # frames with no ground truth at their stamp
        self.names = tuple(names) or tuple(f'channel {k}' for k in range(channels))
        self._sum = np.zeros(channels)
        self._squares = np.zeros(channels)
        self._cells = 0
        self._peak = (0.0, '', -1)                # largest |BEV value|, its channel, frame
        self._box_peak = (0.0, '', -1)            # largest |box value|, its column, frame

    @classmethod
    def of(cls, cfg, pipe: BevPipeline, names: Sequence[str] = ()) -> 'Dataset':
        """Return an empty set for ``pipe``'s BEV; its cameras can be dropped (module doc)."""
        droppable = bool(cfg.cameras) and not pipe.projected
        return cls(pipe.output_channels, names, len(pipe.lidar_channels) if droppable else None)

    def add(self, features: np.ndarray, pooled: np.ndarray, boxes: np.ndarray,
            origin: tuple[str, int] = ('', 0), subset: np.ndarray | None = None) -> None:
        """
        Keep one frame: its pooled BEV and boxes; its full BEV enters the statistics.

        ``subset``: the pooled BEV with a random subset of its cameras, if collected.
        """
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
        if subset is not None:
            self.subset.append(subset)
        self.boxes.append(boxes)
        self.origins.append(origin)

    def variants(self, dropout: CameraDropout, drawn: bool = False) -> np.ndarray:
        """
        Return the probabilities of ``VARIANTS`` (all cameras only where none can drop).

        ``drawn``: the subset variant is drawn per sample (end to end), not stored.
        """
        weights = np.asarray(dropout.weights if self.cameras is not None else (1.0, 0.0, 0.0))
        if not (self.subset or drawn):
            weights[1] = 0.0
        return weights / weights.sum() if weights.sum() > 0 else np.array([1.0, 0.0, 0.0])

    def variant(self, k: int, which: str = 'all') -> np.ndarray:
        """Return frame ``k``'s pooled BEV [h, w, 2C + 4] with ``which`` cameras (VARIANTS)."""
        if which == 'all' or self.cameras is None:
            return self.pooled[k]
        if which == 'subset':
            return self.subset[k]
        return self.drop_cameras(self.pooled[k].copy())

    def drop_cameras(self, pooled: np.ndarray) -> np.ndarray:
        """Zero the camera channels and the coverage of pooled BEVs [..., 2C + 4] in place."""
        if self.cameras is not None:        # in the max and the mean (the centroid is LiDAR's)
            pooled[..., self.cameras:self.channels] = 0.0
            pooled[..., self.channels + self.cameras:2 * self.channels] = 0.0
        return pooled

    def describe_dropout(self, cfg, projected: bool, dropout: CameraDropout,
                         drawn: bool = False) -> str:
        """Say the samples' camera variants: their weights, or why there are none."""
        if not cfg.cameras:
            return 'no cameras to drop'
        if projected:
            return 'no camera dropout (fusion.weights projects the camera channels away)'
        weights = self.variants(dropout, drawn)
        if weights[0] == 1.0:
            return 'no camera dropout'
        return 'samples with ' + ', '.join(f'{name} cameras {w:.2g}' for name, w in
                                           zip(VARIANTS, weights) if w > 0)

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


class SubsetLift:
    """Each frame's BEV with a random subset of its cameras: the pipeline's lift (module doc)."""

    def __init__(self, pipe: BevPipeline, seed: int = 0):
        self.pipe, self.first = pipe, len(pipe.lidar_channels)
        self.rng = np.random.default_rng(seed)
        self.lift = jax.jit(lift.lift_cameras)
        self.kept: tuple[str, ...] = ()          # the cameras of the last frame's subset

    def __call__(self, features: np.ndarray) -> np.ndarray | None:
        """
        Return the BEV ``features`` (the frame ``pipe`` processed last) with a camera subset.

        Each camera is kept with probability ``KEEP_CAMERA``; None when every camera the frame
        had is kept (the BEV is ``features``).
        """
        n = len(self.pipe.camera_names)
        keep = self.rng.random(n) < KEEP_CAMERA
        # The frame's staged maps, camera flags and lift tables (frame_args runs nothing).
        args = self.pipe.frame_args(np.zeros((1, 4), np.float32), 0)
        valid = args.scalars[1:1 + n] > 0
        self.kept = tuple(name for name, k in zip(self.pipe.camera_names, valid & keep) if k)
        if np.array_equal(valid & keep, valid):
            return None
        camera, coverage = self.lift(args.features, valid & keep, args.lift)
        out = np.array(features, np.float32, copy=True)
        h, w, _ = out.shape
        out[..., self.first:-1] = np.asarray(camera).reshape(h, w, -1)
        out[..., -1] = np.asarray(coverage).reshape(h, w)
        return out


class _Collect(BagFrames):
    """Replay's message handling, but each processed frame goes to the dataset, not a bag."""

    picture = False

    def __init__(self, path: FramePath, truth: dict, dataset: Dataset, pool, total: int,
                 src: str = '', subset: SubsetLift | None = None, images=None):
        super().__init__(path, ReplayResult(), total)
        self.truth, self.dataset, self.pool, self.src = truth, dataset, pool, src
        self.subset, self.images = subset, images

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
        pooled = np.asarray(self.pool(features))
        subset = None
        if self.subset is not None:
            dropped = self.subset(features)
            subset = pooled if dropped is None else np.asarray(self.pool(dropped))
        self.dataset.add(features, pooled, boxes, (str(self.src), frame.stamp_ns), subset)
        if self.images is not None:
            self.images(str(self.src))


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


def collect(bags, cfg, pipe: BevPipeline, dataset: Dataset, stream=sys.stderr,
            dropout: CameraDropout | None = None, seed: int = 0, images=None) -> None:
    """
    Replay every bag through ``pipe`` (warmed, no head) into ``dataset``.

    With ``dropout`` (its subset variant weighted) and a dataset whose cameras can be dropped,
    each frame's subset variant is kept too, drawn with ``seed``. ``images``
    (``train_images.ImageFrames``), if any, is called with the bag after each frame is kept.
    """
    head = CenterPointHead.create(pipe.output_channels)
    pool = jax.jit(lambda bev: head.pool(bev))   # as the head pools at run time: unbatched
    subset = SubsetLift(pipe, seed) if (dropout is not None and dataset.cameras is not None
                                        and dropout.weights[1] > 0) else None
    topics = bagio.BagTopics()
    for n, src in enumerate(bags):
        reader = bagio.open_reader(src)
        try:
            types = bagio.topic_types(reader)
            total = cloud_count(reader, types, topics, src, lidar_names(cfg))
            truth, left_out = read_truth(reader, src)
            pipe.reset_sweeps()
            collector = _Collect(FramePath(cfg, pipe), truth, dataset, pool, total, src,
                                 subset, images)
            collector.run(reader, types, topics, None)
        finally:
            reader.close()
        stream.write(f'bag {n + 1}/{len(bags)} {src}: {collector.result.frames} frames, '
                     f'{len(dataset.pooled)} with ground truth in all, '
                     f'{dataset.without_truth} without (not trained on)'
                     + ''.join(f', {k} {name!r} boxes left out' for name, k in left_out.items())
                     + '\n')
        stream.flush()


# -- the draws of a training ---------------------------------------------------------------


def class_balanced(boxes: list[np.ndarray], classes: int) -> np.ndarray | None:
    """
    Return each frame's probability of being drawn, class-balanced; None if one class or none.

    As CBGS (Zhu et al. 2019, CenterPoint's nuScenes training): each class with ground truth
    gets an equal share of the draws, spread evenly over the frames that contain it; a frame
    with several classes collects a share from each. Half the draws stay uniform over all
    frames, so frames without objects (the heatmaps' negatives) are still drawn.
    """
    present = np.zeros((len(boxes), classes), bool)
    for k, frame in enumerate(boxes):
        ids = np.asarray(frame, np.float64)[:, 8].astype(int)
        present[k, ids[(ids >= 0) & (ids < classes)]] = True
    frames = present.sum(axis=0)
    if np.count_nonzero(frames) < 2:
        return None
    share = (present[:, frames > 0] / frames[frames > 0]).sum(axis=1) / np.count_nonzero(frames)
    return 0.5 * share + 0.5 / len(boxes)


def draws(dataset: Dataset, steps: int, batch_size: int, seed: int, weights, balance: bool,
          cameras: int = 0):
    """
    Yield each step's frames, (x, y) flips, camera variants, intensity scales, cameras kept.

    The variants (indices into ``VARIANTS`` drawn with ``weights``) are None without dropout;
    the kept cameras bool[B, ``cameras``] (each with probability ``KEEP_CAMERA``) are drawn
    only for ``cameras`` > 0, the end-to-end training's subset variant.
    """
    rng = np.random.default_rng(seed)
    augment = np.random.default_rng([seed, 1])      # apart: rng's draws stay those before
    frames = class_balanced(dataset.boxes, len(CLASSES)) if balance else None
    order: list[int] = []
    for _ in range(steps):
        if frames is not None:
            order = list(rng.choice(len(frames), batch_size, p=frames))
        while frames is None and len(order) < batch_size:    # a batch above the set's size
            order += list(rng.permutation(len(dataset.pooled)))
        indices, order = order[:batch_size], order[batch_size:]
        flips = rng.random((batch_size, 2)) < 0.5
        # Drawn only with dropout: without, the draws are those of the training before it.
        variants = rng.choice(len(VARIANTS), batch_size, p=weights) if weights[0] < 1 else None
        scales = np.exp(augment.uniform(*np.log(INTENSITY_SCALE), batch_size))
        keep = augment.random((batch_size, cameras)) < KEEP_CAMERA if cameras else None
        yield indices, flips, variants, scales, keep
