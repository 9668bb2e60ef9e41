"""What one frame returns: its FrameResult, and the PendingFrame of a frame still running."""

from dataclasses import dataclass, replace
import time

import jax
import numpy as np

from .plugin_failure import plugin_failure
from ..settings.parameters import ConfigError


@dataclass(frozen=True)
class FrameResult:
    """One frame through the pipeline."""

    features: np.ndarray       # float32[H, W, C_out], row = x index, column = y index
    num_points: int            # points in the input cloud
    bucket: int                # capacity of the executable that ran
    overflow_points: int       # points dropped by the overflow policy
    cameras_used: int          # cameras that contributed (not masked)
    nonfinite_features: int    # non-finite feature values replaced by 0 this frame
    pad_ms: float              # host: padding, staging the camera maps (and their transfer)
    compute_ms: float          # transfer_ms + device_ms + fetch_ms
    compiles_after_warmup: int
    # putting the inputs on the device (dispatch; may overlap compute); on the CPU only staging
    # the frame's arguments: the executable reads the host arrays in place, within device_ms
    transfer_ms: float = 0.0
    device_ms: float = 0.0     # executable call until its result is ready
    fetch_ms: float = 0.0      # result to a NumPy array
    cameras_sent: bool = False  # the camera batch crossed to the device this frame
    sweeps_used: int = 1       # sweeps voxelized, the current one included
    deskewed: bool = False     # the points were moved to the stamp (times and an ego twist)
    # float32[n, 9] boxes (``boxes.BOX_COLUMNS``) scoring at least the threshold, best first;
    # None without a head
    objects: np.ndarray | None = None
    # the head: its executable after the BEV is ready, the fetch of its K box rows and the
    # threshold (compute_ms is the BEV's alone; the frame costs compute_ms + head_ms)
    head_ms: float = 0.0
    # decoded boxes with a NaN or inf value, never published (a checkpoint whose numbers
    # overflow: a box of infinite size is no box)
    nonfinite_objects: int = 0


class PendingFrame:
    """
    A frame started on the device; ``result()`` waits for it and fetches its outputs.

    ``output`` is the features, or (features, boxes float32[K, 9]) with a head; boxes scoring
    below ``score_threshold`` (one for every class, or float32[C], one per class index, as
    :func:`class_thresholds` gives), and boxes with a non-finite value (counted), are dropped
    on the host. A NaN score is never kept.
    """

    def __init__(self, output, times: tuple[float, float, float],
                 score_threshold: float | np.ndarray, pipeline, stats: dict):
        self._output, self._times, self._stats, self._pipeline = output, times, stats, pipeline
        self._threshold = score_threshold
        self._result: FrameResult | None = None

    def result(self, features: bool = True) -> FrameResult:
        """
        Wait for the frame and return its FrameResult (the same one on every call).

        ``features=False`` leaves the BEV where the executable wrote it (``features`` None),
        for a caller that only wants the objects; a later call with True still fetches it.
        """
        if self._result is None:
            start, staged, put = self._times
            bev, boxes = self._output if isinstance(self._output, tuple) else (self._output, None)
            try:
                bev.block_until_ready()
                ready = time.perf_counter()
                rows = None if boxes is None else np.asarray(boxes)
            except jax.errors.JaxRuntimeError as exc:
                failed = plugin_failure(exc, self._pipeline)
                if failed is None:
                    raise
                raise failed from None
            objects, nonfinite = None, 0
            if rows is not None:
                score, finite = rows[:, 7], np.isfinite(rows).all(axis=1)
                kept = (score >= _row_thresholds(self._threshold, rows[:, 8])) & (score > 0)
                nonfinite = int(np.count_nonzero(~finite & (kept | np.isnan(score))))
                objects = rows[kept & finite]
            head = time.perf_counter()
            fetched = np.asarray(bev) if features else None
            done = time.perf_counter()
            self._result = FrameResult(
                features=fetched, pad_ms=(staged - start) * 1e3,
                compute_ms=(done - staged) * 1e3 - (head - ready) * 1e3,
                transfer_ms=(put - staged) * 1e3, device_ms=(ready - put) * 1e3,
                fetch_ms=(done - head) * 1e3, objects=objects, head_ms=(head - ready) * 1e3,
                nonfinite_objects=nonfinite, **self._stats)
            self._output = None if features else bev
        elif features and self._result.features is None:
            self._result = replace(self._result, features=np.asarray(self._output))
            self._output = None
        return self._result


def class_thresholds(head, classes: tuple[str, ...]) -> float | np.ndarray:
    """
    Return the score thresholds in force: ``head.score_threshold``, or float32[C] per class.

    ``head`` is the config's HeadConfig; ``classes`` the head's class names (() without a
    head: nothing to threshold). A ``head.score_thresholds`` of another length than
    ``classes`` is a ConfigError naming both.
    """
    given = head.score_thresholds
    if not given or not classes:
        return head.score_threshold
    if len(given) != len(classes):
        raise ConfigError(f'head.score_thresholds: {len(given)} values {list(given)} for the '
                          f"head's {len(classes)} classes {list(classes)}: give one per class, "
                          'in that order, or [] for head.score_threshold in every class')
    return np.asarray(given, np.float32)


def _row_thresholds(threshold: float | np.ndarray, labels: np.ndarray) -> float | np.ndarray:
    """Return each box row's threshold: its class's (a label out of range gets the highest)."""
    if not np.ndim(threshold):
        return threshold
    index = np.nan_to_num(labels, nan=-1.0)
    inside = (index >= 0) & (index < len(threshold))
    return np.where(inside, threshold[np.where(inside, index, 0).astype(np.intp)],
                    threshold.max())


def result_placement(head: bool, past: int):
    """
    Where a frame executable writes its results: (output memory, features memory, shardings).

    The features go into pinned host memory where the device has it: on a GPU the result then
    needs no device-to-host transfer of its own when fetched (an H200 fetched the 3.9 MB result
    in 3.2-3.5 ms from device memory). With a ``head``, the BEV stays on the device for the
    head's executable, whose boxes go to pinned host memory. ``past``: accumulated sweeps (the
    ring stays on the device). Shardings None: the backend's default.
    """
    device = jax.devices()[0]
    kinds = {m.kind for m in device.addressable_memories()}
    output_memory = 'pinned_host' if 'pinned_host' in kinds else None
    features_memory = None if head else output_memory
    if features_memory is None:
        return output_memory, features_memory, None
    host = jax.sharding.SingleDeviceSharding(device, memory_kind='pinned_host')
    return output_memory, features_memory, (
        (host, jax.sharding.SingleDeviceSharding(device)) if past else host)
