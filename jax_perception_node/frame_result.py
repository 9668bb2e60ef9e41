"""What one frame returns: its FrameResult, and the PendingFrame of a frame still running."""

from dataclasses import dataclass
import time

import jax
import numpy as np


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
    transfer_ms: float = 0.0   # putting the inputs on the device (dispatch; may overlap compute)
    device_ms: float = 0.0     # executable call until its result is ready
    fetch_ms: float = 0.0      # result to a NumPy array
    cameras_sent: bool = False  # the camera batch crossed to the device this frame
    sweeps_used: int = 1       # sweeps voxelized, the current one included


class PendingFrame:
    """A frame started on the device; ``result()`` waits for it and fetches the features."""

    def __init__(self, output: jax.Array, times: tuple[float, float, float], stats: dict):
        self._output, self._times, self._stats = output, times, stats
        self._result: FrameResult | None = None

    def result(self) -> FrameResult:
        """Wait for the frame and return its FrameResult (the same one on every call)."""
        if self._result is None:
            start, staged, put = self._times
            self._output.block_until_ready()
            ready = time.perf_counter()
            features = np.asarray(self._output)
            fetched = time.perf_counter()
            self._result = FrameResult(
                features=features, pad_ms=(staged - start) * 1e3,
                compute_ms=(fetched - staged) * 1e3, transfer_ms=(put - staged) * 1e3,
                device_ms=(ready - put) * 1e3, fetch_ms=(fetched - ready) * 1e3, **self._stats)
            self._output = None
        return self._result
