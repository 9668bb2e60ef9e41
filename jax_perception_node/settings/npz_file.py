"""Read a parameter's .npz file of plain arrays, refusing anything else with one message."""

from collections.abc import Mapping
import io
import math
import os
import stat
import zipfile

import numpy as np

from .parameters import ConfigError

# A zip's first bytes: a local file header, or the end record of an archive with no member.
_ZIP_MAGIC = (b'PK\x03\x04', b'PK\x05\x06')
# What a member may take beyond its array's data: the .npy preamble (magic, version, header
# length: 12 bytes at most) and the header, a dict literal padded to 64 bytes. A plain array's
# is about 128 bytes, even with dozens of dimensions; 4 KiB leaves room to spare.
NPY_HEADER_BYTES = 4096
_HEADER_TEXT = NPY_HEADER_BYTES - 12
# np.savez writes stored members, np.savez_compressed deflated ones. The other methods are
# refused: zipfile inflates a bzip2 or LZMA chunk whole, however little of it is asked for.
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


def read_npz(path: str | os.PathLike, key: str, limits: Mapping[str, int],
             others: bool = False) -> dict[str, np.ndarray]:
    """
    Return the arrays of the .npz at ``path`` (``~`` expanded), read with no pickle.

    ``limits`` maps each array the file may hold to the most bytes of data it may have (its
    shape's element count times its dtype's item size); a member may inflate to that and
    :data:`NPY_HEADER_BYTES` more. Nothing is inflated before every member's name and its size
    in the zip's directory are checked, and a member is read through a reader that stops one
    byte past its bound, so a zip bomb, honest or lying about its sizes, is refused before it
    takes memory. The caller checks that the arrays it needs are there, their shapes and dtypes.

    ConfigError naming the parameter ``key`` and the file for anything that is not an .npz of
    such plain arrays: a missing or unreadable file, one that is not a regular file (a FIFO
    would block the reader, a live parameter's callback with it), a .npy or text file under
    another name, a damaged zip, a member not in ``limits`` (or twice in the zip), larger than
    its bound, compressed otherwise than np.savez and np.savez_compressed do, that does not
    inflate, is no .npy or holds pickled objects; the member is named. With ``others`` a member
    not in ``limits`` is passed over, unread (a checkpoint's records read before its arrays).
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
            archive = zipfile.ZipFile(f)
        except Exception as exc:    # noqa: B902 - zipfile raises many
            raise ConfigError(f'{key}: cannot read {path} as an .npz: '
                              f'{type(exc).__name__}: {exc}') from None
        with archive:
            members = _members(archive, path, key, limits, others)
            return {name: _read_member(archive, info, limits[name], path, key)
                    for name, info in members.items()}


def _members(archive: zipfile.ZipFile, path: str, key: str, limits: Mapping[str, int],
             others: bool = False) -> dict[str, zipfile.ZipInfo]:
    """Check every member's name, method and declared size, inflating nothing: name -> info."""
    members = {}
    for info in archive.infolist():
        member = info.filename
        if not member.endswith('.npy'):
            raise ConfigError(f'{key}: cannot read {path} as an .npz: its member {member} is '
                              f'not an .npy array')
        name = member[:-len('.npy')]
        if name not in limits and others:
            continue
        if name not in limits:
            known = sorted(limits)
            raise ConfigError(f'{key}: {path} has an array it does not take: {name} (member '
                              f'{member}); it takes {known[:6]}{" ..." if known[6:] else ""}')
        if name in members:
            raise ConfigError(f'{key}: cannot read {path} as an .npz: member {member} is in '
                              f'it twice')
        if info.compress_type not in _METHODS:
            raise ConfigError(f'{key}: cannot read {path} as an .npz: member {member} is '
                              f'compressed with zip method {info.compress_type}; only stored '
                              f'and deflated members are read')
        bound = limits[name] + NPY_HEADER_BYTES
        if info.file_size > bound:
            # Most often an array of another dtype (float64 is NumPy's default): say which.
            held = _held(archive, info)
            raise ConfigError(f'{key}: {path} member {member} ' + (
                f'holds {held}, more than the {limits[name]} bytes of data it may have'
                if held else f'inflates to {info.file_size} bytes, more than its bound of '
                f'{bound} ({limits[name]} bytes of data and {NPY_HEADER_BYTES} of .npy '
                'header)'))
        members[name] = info
    return members


def _held(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    """Return what a member's .npy header declares ('float64[34, 32]: 8704 bytes'), or None."""
    try:
        with archive.open(info) as stream:
            buffer = io.BytesIO(stream.read(NPY_HEADER_BYTES))     # the header, no more
        version = np.lib.format.read_magic(buffer)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                       np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(buffer, max_header_size=_HEADER_TEXT)
    except Exception:    # noqa: B902 - no readable header: the size alone is said
        return None
    return f'{dtype}{list(shape)}: {math.prod(shape) * dtype.itemsize} bytes of data'


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, path: str,
                 key: str) -> np.ndarray:
    """Inflate one member, at most its bound and one byte, and parse it as a plain .npy."""
    member, bound = info.filename, limit + NPY_HEADER_BYTES
    try:
        with archive.open(info) as stream:
            # At most one byte past the bound, whatever the directory says (zipfile stops at
            # its size and checks the CRC-32 where the member ends: a lie fails there).
            data = stream.read(bound + 1)
            if len(data) > bound:
                raise ConfigError(f'{key}: {path} member {member} inflates to more than its '
                                  f'bound of {bound} bytes ({limit} bytes of data and '
                                  f'{NPY_HEADER_BYTES} of .npy header)')
        buffer = io.BytesIO(data)
        version = np.lib.format.read_magic(buffer)
        if version not in ((1, 0), (2, 0)):     # 3.0: non-latin-1 field names only
            raise ValueError(f'unsupported .npy format version {version}')
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                       np.lib.format.read_array_header_2_0)
        shape, _, dtype = read_header(buffer, max_header_size=_HEADER_TEXT)
        # numpy allocates what the header declares before it reads: no more than is there.
        declared, present = math.prod(shape) * dtype.itemsize, len(data) - buffer.tell()
        if declared > present:
            raise ValueError(f'its header declares {dtype}{list(shape)}, {declared} bytes, '
                             f'it holds {present}')
        buffer.seek(0)
        value = np.lib.format.read_array(buffer, allow_pickle=False,
                                         max_header_size=_HEADER_TEXT)
    except ConfigError:
        raise
    except Exception as exc:    # noqa: B902 - zipfile, zlib and numpy's format raise many
        raise ConfigError(f'{key}: cannot read {path} as an .npz: member {member}: '
                          f'{type(exc).__name__}: {exc}') from None
    return value
