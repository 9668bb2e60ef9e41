"""
Host staging for the per-frame inputs: aligned so the CPU backend can alias, double-buffered.

The CPU backend aliases a NumPy array whose data address is a multiple of 64 bytes instead of
copying it, given to ``jax.device_put`` or straight to an executable (jax 0.10; at 16- or
4-byte alignment it copies), so a frame's inputs reach the executable without a host copy.
Aliased or not (on a GPU the transfer may still be reading the host array after
``device_put`` returns), a staged array must not be
rewritten while a frame that reads it is in flight: each input alternates between two arrays,
and an array is handed out again only after the last frame that read it has finished.
"""

import numpy as np

from ..settings.channels import MAX_ABS_INPUT

ALIGNMENT = 64      # bytes: what the CPU backend needs to alias a host buffer


def aligned_zeros(shape: tuple[int, ...], dtype=np.float32,
                  alignment: int = ALIGNMENT) -> np.ndarray:
    """Return a C-contiguous zeroed array whose data address is a multiple of ``alignment``."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(nbytes + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class DoubleBuffer:
    """
    Two aligned arrays of one shape used in turn; ``current`` is the one staged last.

    ``swap`` makes the other array current, first waiting for the frame that last read it;
    ``read_by`` notes that a frame (any object with ``block_until_ready``, such as its
    output) reads the current array.
    """

    def __init__(self, shape: tuple[int, ...], dtype=np.float32):
        self.arrays = (aligned_zeros(shape, dtype), aligned_zeros(shape, dtype))
        self.turn = 0
        self._readers = [None, None]

    @property
    def current(self) -> np.ndarray:
        """Return the array staged last."""
        return self.arrays[self.turn]

    def swap(self) -> np.ndarray:
        """Make the other array current, once no frame reads it any more, and return it."""
        self.turn = 1 - self.turn
        reader, self._readers[self.turn] = self._readers[self.turn], None
        if reader is not None:
            reader.block_until_ready()
        return self.arrays[self.turn]

    def read_by(self, reader, array: np.ndarray | None = None) -> None:
        """Note that ``reader`` reads ``array`` (one of ``arrays``, default current) till ready."""
        turn = self.turn if array is None else next(
            k for k, held in enumerate(self.arrays) if held is array)
        self._readers[turn] = reader


class CameraStaging:
    """
    The camera batch in two aligned arrays; a map (or image) is staged on change.

    The batch is float32[N, H_f, W_f, C] of feature maps, or uint8[N, H_i, W_i, 3] of images
    (``dtype``). A map equal to what its slot holds is not copied again; when one differs, the
    other array becomes current and receives the changed maps straight from the caller, plus
    any slot it has not caught up with (slot versions tell which), so the batch in use stays
    untouched. Non-finite values, and values beyond +-``channels.MAX_ABS_INPUT``, are zeroed
    in a float slot (NaN * 0 is NaN: one would poison every cell sampling near it; +-3e38
    summed to inf); every uint8 value is valid.
    """

    def __init__(self, names: tuple[str, ...], map_shape: tuple[int, int, int],
                 dtype=np.float32):
        self.names, self.map_shape = names, map_shape
        self.batches = DoubleBuffer((len(names),) + map_shape, dtype)
        self._checked = np.dtype(dtype).kind == 'f'
        self._versions = np.zeros((2, len(names)), np.int64)   # per array, per slot
        self._next_version = 1

    def stage(self, cameras: dict) -> tuple[np.ndarray | None, int]:
        """
        Stage the maps of ``cameras`` (name -> float32[H_f, W_f, C]; others keep their slot).

        Returns
        -------
        (batch, nonfinite): the batch now current when a map changed, else None; the
        non-finite or out-of-range values zeroed.

        Raises
        ------
        ValueError: a map of another shape, or an image that is not uint8, naming the camera.

        """
        held = self.batches.current
        changed = []
        for i, name in enumerate(self.names):
            fmap = cameras.get(name)
            if fmap is None:
                continue
            if np.shape(fmap) != self.map_shape:     # np.shape: a nested list has no .shape
                raise ValueError(f'camera {name!r}: {np.shape(fmap)}, expected {self.map_shape}')
            if held.dtype == np.uint8 and np.asarray(fmap).dtype != np.uint8:
                # A 16-bit image copied in would wrap to its low byte (mostly 0): refused.
                raise ValueError(f'camera {name!r}: an image of {np.asarray(fmap).dtype}, '
                                 'expected uint8 RGB (ImageDecoder turns any encoding into it)')
            if not np.array_equal(held[i], fmap):
                changed.append((i, fmap))
        if not changed:
            return None, 0
        held_versions = self._versions[self.batches.turn].copy()
        batch = self.batches.swap()
        staged = held_versions.copy()
        nonfinite = 0
        for i, fmap in changed:
            np.copyto(batch[i], fmap)
            bad = ~(np.abs(batch[i]) <= MAX_ABS_INPUT) if self._checked else None  # NaN: False
            if bad is not None and bad.any():
                nonfinite += int(bad.sum())
                batch[i][bad] = 0.0
            staged[i] = self._next_version
            self._next_version += 1
        behind = self._versions[self.batches.turn] != held_versions
        behind[[i for i, _ in changed]] = False
        for i in np.flatnonzero(behind):
            np.copyto(batch[i], held[i])
        self._versions[self.batches.turn] = staged
        return batch, nonfinite
