"""Read a parameter's .npz file of plain arrays, refusing anything else with one message."""

import os
import stat

import numpy as np

from .parameters import ConfigError

# A zip's first bytes: a local file header, or the end record of an archive with no member.
_ZIP_MAGIC = (b'PK\x03\x04', b'PK\x05\x06')


def read_npz(path: str | os.PathLike, key: str) -> dict[str, np.ndarray]:
    """
    Return every array of the .npz at ``path`` (``~`` expanded), read with ``allow_pickle=False``.

    ConfigError naming the parameter ``key`` and the file for anything that is not an .npz of
    plain arrays: a missing or unreadable file, one that is not a regular file (a FIFO would
    block the reader, a live parameter's callback with it), a .npy or text file under another
    name, a damaged zip, a member that does not inflate, is no .npy or holds pickled objects.
    """
    path = os.path.expanduser(path)
    try:
        # Opened without blocking, then checked on the descriptor: no window for a swap.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f'{key}: cannot read {path}: {exc.strerror or exc}') from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f'{key}: {path} is not a regular file')
    with os.fdopen(fd, 'rb') as f:
        if f.read(4) not in _ZIP_MAGIC:
            raise ConfigError(f'{key}: {path} is not an .npz file (a zip of .npy arrays)')
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except Exception as exc:    # noqa: B902 - zipfile, zlib and numpy's format raise many
            raise ConfigError(f'{key}: cannot read {path} as an .npz: '
                              f'{type(exc).__name__}: {exc}') from None
    for name, value in arrays.items():
        if not isinstance(value, np.ndarray):    # numpy hands back a non-.npy member's bytes
            raise ConfigError(f'{key}: cannot read {path} as an .npz: its member {name} is '
                              f'not an .npy array')
    return arrays
