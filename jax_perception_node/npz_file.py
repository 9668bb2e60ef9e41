"""Read a parameter's .npz file of plain arrays, refusing anything else with one message."""

import os

import numpy as np

from .parameters import ConfigError

# A zip's first bytes: a local file header, or the end record of an archive with no member.
_ZIP_MAGIC = (b'PK\x03\x04', b'PK\x05\x06')


def read_npz(path: str | os.PathLike, key: str) -> dict[str, np.ndarray]:
    """
    Return every array of the .npz at ``path`` (``~`` expanded), read with ``allow_pickle=False``.

    ConfigError naming the parameter ``key`` and the file for anything that is not an .npz of
    plain arrays: a missing or unreadable file, a .npy or text file under another name, a
    damaged zip, a member that does not inflate or holds pickled objects.
    """
    path = os.path.expanduser(path)
    try:
        with open(path, 'rb') as f:
            magic = f.read(4)
    except OSError as exc:
        raise ConfigError(f'{key}: cannot read {path}: {exc.strerror or exc}') from None
    if magic not in _ZIP_MAGIC:
        raise ConfigError(f'{key}: {path} is not an .npz file (a zip of .npy arrays)')
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as exc:    # noqa: B902 - zipfile, zlib and numpy's format raise many kinds
        raise ConfigError(f'{key}: cannot read {path} as an .npz: '
                          f'{type(exc).__name__}: {exc}') from None
    for name, value in arrays.items():
        if not isinstance(value, np.ndarray):    # numpy hands back a non-.npy member's bytes
            raise ConfigError(f'{key}: cannot read {path} as an .npz: its member {name} is '
                              f'not an .npy array')
    return arrays
