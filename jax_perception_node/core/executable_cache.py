"""
The persistent compilation cache: signed, serialized AOT executables in a private directory.

JAX's own persistent cache still traces and lowers every function to compute its key (about
0.1-0.2 s per bucket here, more than the cached compile), so this store keys the finished
executable by everything that determines it (versions, device, XLA_FLAGS, host CPU flags,
lowering settings, the package source, static values, argument shapes): any change is a miss,
never a wrong hit, and a warm start neither traces nor compiles. An entry is a pickle that XLA
runs, so nothing is unpickled that this user did not write: owner and mode of every folder and
entry, and an HMAC under a per-store secret, are checked first; the layout and each check are
in docs/design.md ("Never recompile"). A refused entry is counted in ``damaged``, recompiled and
replaced; each refusal is kept once in ``refused`` for the caller to report.
"""

import errno
import hashlib
import hmac
import json
import os
from pathlib import Path
import secrets
import stat
import struct

import jax
from jax.experimental.serialize_executable import deserialize_and_load, serialize
import jaxlib
import numpy as np

from .executable_key import host_cpu, LOADED_SOURCE, lowering_config, xla_options
from ..settings.parameters import ConfigError


def private_cache_dir(path: str) -> Path | None:
    """
    Create or check the cache directory: private (0700) and owned by this user.

    A directory owned by another user or writable by group or others is refused with a
    ConfigError naming ``compilation_cache_dir``. An empty path means no cache (None).
    """
    if not path:
        return None
    key = 'compilation_cache_dir'
    directory = Path(os.path.expanduser(path))
    try:
        try:
            directory.mkdir(mode=0o700, parents=True)
            directory.chmod(0o700)      # ours, just made: mkdir's mode is masked by the umask
        except FileExistsError:         # there already, or a sibling node made it meanwhile
            pass
        info = directory.stat()
    except OSError as exc:
        raise ConfigError(f'{key}: cannot create {directory}: {exc.strerror or exc}') from None
    if not directory.is_dir():
        raise ConfigError(f'{key}: {directory} is not a directory')
    if info.st_uid != os.geteuid():
        raise ConfigError(f'{key}: {directory} is owned by uid {info.st_uid}, not by this user '
                          f'(uid {os.geteuid()}); refusing to execute code cached there')
    if info.st_mode & 0o022:
        raise ConfigError(f'{key}: {directory} is writable by group or others (mode '
                          f'{info.st_mode & 0o777:o}); run chmod 700 on it')
    return directory


# Store layout under the root: the secret, and the entries in their own folder.
SECRET_NAME = 'store.key'
SECRET_BYTES = 32
ENTRIES = 'aot'
# An entry: MAGIC, HMAC-SHA256 (32 bytes), then the signed body: the length of a JSON header
# (4 bytes, big-endian), the header (the outputs' shapes and dtypes), the serialized executable.
MAGIC = b'JPNXLA\x00\x01'
DIGEST_BYTES = 32
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeStore(Exception):
    """A folder or the secret of the store that someone else may have written; names the path."""


def describe(avals) -> list:
    """Shapes and dtypes of a flat list of arrays or avals, as JSON-ready ``[shape, dtype]``."""
    return [[list(a.shape), np.dtype(a.dtype).name] for a in avals]


def entry_digest(secret: bytes, key: str, body: bytes) -> bytes:
    """HMAC-SHA256 of an entry's body under the store's secret, bound to the entry's full key."""
    return hmac.new(secret, MAGIC + key.encode() + b'\0' + body, hashlib.sha256).digest()


def seal_entry(secret: bytes, key: str, outputs: list, executable: bytes) -> bytes:
    """Return the bytes of an entry: header, digest and body (see ``MAGIC``)."""
    header = json.dumps({'outputs': outputs}).encode()
    body = struct.pack('>I', len(header)) + header + executable
    return MAGIC + entry_digest(secret, key, body) + body


def open_entry(secret: bytes, key: str, data: bytes) -> tuple[list, bytes]:
    """Verify an entry's digest, split it into (outputs, executable); ValueError says why not."""
    if not data.startswith(MAGIC):
        raise ValueError('has no store header (written by an older version, or not an entry)')
    start = len(MAGIC) + DIGEST_BYTES
    if len(data) < start + 4:
        raise ValueError(f'is truncated ({len(data)} bytes)')
    body = data[start:]
    if not hmac.compare_digest(data[len(MAGIC):start], entry_digest(secret, key, body)):
        raise ValueError('fails its digest (not written by this store for this key)')
    (size,) = struct.unpack('>I', body[:4])
    header = json.loads(body[4:4 + size])
    return header['outputs'], body[4 + size:]


def unsafe_reason(info: os.stat_result, directory: bool, mask: int) -> str | None:
    """Why a file or folder (its ``fstat``) cannot be trusted, or None."""
    if not (stat.S_ISDIR if directory else stat.S_ISREG)(info.st_mode):
        return 'is not a directory' if directory else 'is not a regular file'
    if info.st_uid != os.geteuid():
        return f'is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})'
    if info.st_mode & mask:
        access = 'writable' if mask == 0o022 else 'readable or writable'
        return f'is {access} by group or others (mode {stat.S_IMODE(info.st_mode):o})'
    return None


class ExecutableCache:
    """
    Load or compile-and-store ``jax.stages.Compiled`` objects in ``directory/aot``.

    ``hits``: executables loaded from the store; ``misses``: executables compiled (and stored
    when the store is usable); ``damaged``: entries refused (unsafe file, bad digest, failed
    load, wrong shapes), recompiled and replaced; ``write_errors``: entries that could not be
    written (the executable is still returned); ``refused``: one message per refused path,
    entries and unsafe folders or secret alike, for the caller to report.
    """

    def __init__(self, directory: Path | None):
        self.root = None if directory is None else Path(directory)
        self.directory = None if directory is None else self.root / ENTRIES
        self.hits = self.misses = self.damaged = self.write_errors = 0
        self.refused: list[str] = []
        self._reported = set()
        self._refusal: tuple[Path, str] | None = None    # the entry get() just refused
        device = jax.devices()[0]
        self._machine = '|'.join((
            jax.__version__, jaxlib.__version__, device.platform, device.device_kind,
            device.client.platform_version, xla_options(), host_cpu(), LOADED_SOURCE))

    def key(self, name: str, static: str, specs) -> str:
        """Hash of everything that determines the executable."""
        text = '|'.join((self._machine, lowering_config(), name, static,
                         str(jax.tree.structure(specs)), str(jax.tree.leaves(specs))))
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, name: str, static: str, jitted, specs: tuple, out_tree):
        """Return the executable of ``jitted`` for ``specs``, from the store when present."""
        # Shapes and dtypes only: calibration values must not change the key.
        specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), specs)
        store = unavailable = None
        if self.root is not None:
            key = self.key(name, static, specs)
            file_name = f'{name}-{key[:40]}.xla'
            try:
                store = self._open_store()
            except OSError as exc:
                unavailable = exc.strerror or str(exc)
        try:
            self._refusal = None
            if store is not None:
                compiled = self._load(store, file_name, key, specs, out_tree)
                if compiled is not None:
                    self.hits += 1
                    return compiled
            self.misses += 1
            compiled = jitted.lower(*specs).compile()
            failure = unavailable or (store and self._store(store, file_name, key, compiled))
            self.write_errors += bool(failure)
            self._report_outcome(failure)
            return compiled
        finally:
            if store is not None:
                os.close(store[0])

    def _report_outcome(self, failure: str | None) -> None:
        """Report an entry refused (replaced or not), or the first entry that failed to write."""
        if self._refusal is not None:
            path, reason = self._refusal
            self._report(path, f'{path} {reason}: refused and recompiled, ' + (
                f'not replaced ({failure}): remove it' if failure else 'replaced'))
        elif failure:
            self._report(self.root, f'{self.directory}: an executable could not be written '
                                    f'({failure}); it is compiled at every start until it can')

    def _report(self, path: Path, message: str):
        """Keep a refusal, once per path."""
        if path not in self._reported:
            self._reported.add(path)
            self.refused.append(message)

    def _open_store(self) -> tuple[int, bytes] | None:
        """
        Open ``aot/`` and read the secret, both checked: (folder descriptor, secret).

        None when a folder or the secret is unsafe (reported; nothing is loaded or stored);
        OSError when the store cannot be used at all (missing, not a directory, read-only).
        """
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            reason = unsafe_reason(os.fstat(root_fd), True, 0o022)
            if reason:
                raise UnsafeStore(self.root, reason)
            secret = self._secret(root_fd)
            return self._entries_folder(root_fd), secret
        except UnsafeStore as exc:
            path, reason = exc.args
            fix = (f'chmod 700 {path}' if 'mode' in reason else f'chown {os.geteuid()} {path}'
                   if 'owned' in reason else f'remove {path}')
            if path.name == SECRET_NAME:
                fix = f'remove {path}; a new secret is created 0600 and the entries rewritten'
            self._report(path, f'{path} {reason}: the executable store is not trusted, '
                               f'executables are compiled but not loaded or stored; to fix: {fix}')
            return None
        finally:
            os.close(root_fd)

    def _secret(self, root_fd: int) -> bytes:
        """Read the store's secret, creating it first when there is none."""
        path = self.root / SECRET_NAME
        for _ in range(2):
            try:
                fd = os.open(SECRET_NAME, READ, dir_fd=root_fd)
            except FileNotFoundError:
                self._create_secret(root_fd)
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafeStore(path, 'is a symbolic link') from None
                raise
            try:
                reason = unsafe_reason(os.fstat(fd), False, 0o077)
                secret = b'' if reason else os.read(fd, SECRET_BYTES + 1)
            finally:
                os.close(fd)
            if not reason and len(secret) != SECRET_BYTES:
                reason = f'holds {len(secret)} bytes, not {SECRET_BYTES}'
            if reason:
                raise UnsafeStore(path, reason)
            return secret
        raise FileNotFoundError(errno.ENOENT, 'the store secret disappeared', str(path))

    @staticmethod
    def _create_secret(root_fd: int):
        """Write a new secret 0600 under a private name, then link it into place."""
        tmp = f'.{SECRET_NAME}.{secrets.token_hex(8)}.tmp'
        fd = os.open(tmp, CREATE, 0o600, dir_fd=root_fd)
        try:
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, secrets.token_bytes(SECRET_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
            # link() never replaces: when two processes create a secret at once, both end up
            # reading the one that was linked first, complete.
            os.link(tmp, SECRET_NAME, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp, dir_fd=root_fd)

    def _entries_folder(self, root_fd: int) -> int:
        """Open (or create 0700) ``aot/`` and check it; returns its descriptor."""
        for _ in range(2):
            try:
                fd = os.open(ENTRIES, READ, dir_fd=root_fd)
            except FileNotFoundError:
                try:
                    os.mkdir(ENTRIES, 0o700, dir_fd=root_fd)
                except FileExistsError:
                    pass
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafeStore(self.directory, 'is a symbolic link') from None
                raise
            info = os.fstat(fd)
            reason = unsafe_reason(info, True, 0o022)
            if reason:
                os.close(fd)
                if not stat.S_ISDIR(info.st_mode):
                    # Nothing is read from a file in its place: the store is just unusable.
                    raise NotADirectoryError(errno.ENOTDIR, reason, str(self.directory))
                raise UnsafeStore(self.directory, reason)
            return fd
        raise FileNotFoundError(errno.ENOENT, 'cannot create', str(self.directory))

    def _load(self, store, file_name: str, key: str, specs, out_tree):
        """Return the checked, verified executable of an entry; None if absent or refused."""
        folder_fd, secret = store
        path = self.directory / file_name
        try:
            fd = os.open(file_name, READ, dir_fd=folder_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = 'is a symbolic link' if exc.errno == errno.ELOOP else (
                f'cannot be opened ({exc.strerror})')
            return self._refuse_entry(path, why)
        try:
            # The descriptor that was checked is the one read: a file swapped in between
            # cannot be read instead.
            reason = unsafe_reason(os.fstat(fd), False, 0o022)
            if not reason:
                with open(fd, 'rb', closefd=False) as f:
                    data = f.read()
        except OSError as exc:
            reason = f'cannot be read ({exc.strerror})'
        finally:
            os.close(fd)
        if reason:
            return self._refuse_entry(path, reason)
        try:
            outputs, executable = open_entry(secret, key, data)
        except (ValueError, KeyError, TypeError) as exc:
            return self._refuse_entry(path, str(exc))
        try:
            compiled = deserialize_and_load(executable, jax.tree.structure((specs, {})),
                                            out_tree)
            inputs, loaded = (describe(jax.tree.leaves(compiled.in_avals)),
                              describe(jax.tree.leaves(compiled.out_info)))
        except Exception as exc:        # noqa: B902 - anything XLA raises: recompile
            return self._refuse_entry(path, f'does not load ({type(exc).__name__}: {exc})')
        if inputs != describe(jax.tree.leaves(specs)):
            return self._refuse_entry(path, f'takes arguments {inputs}, not '
                                            f'{describe(jax.tree.leaves(specs))}')
        if loaded != outputs:
            return self._refuse_entry(path, f'returns {loaded}, not the recorded {outputs}')
        return compiled

    def _refuse_entry(self, path: Path, reason: str):
        """Count an entry refused; ``get`` reports it once it knows whether it was replaced."""
        self.damaged += 1
        self._refusal = (path, reason)
        return None

    @staticmethod
    def _store(store, file_name: str, key: str, compiled) -> str | None:
        """Write a signed entry atomically; None, or why the file system or pickle refused."""
        folder_fd, secret = store
        try:
            payload = serialize(compiled)[0]
        except Exception as exc:    # noqa: B902 - a host callback (jax.debug.print) cannot
            return f'not serializable: {type(exc).__name__}'     # pickle; the executable serves
        data = seal_entry(secret, key, describe(jax.tree.leaves(compiled.out_info)), payload)
        tmp = f'.{file_name}.{secrets.token_hex(8)}.tmp'
        try:
            # A private temporary name, then a rename: a process loading the entry meanwhile
            # sees the old file or the new one, never half of one, and two processes writing
            # the same entry leave one complete copy (the same executable either way).
            fd = os.open(tmp, CREATE, 0o600, dir_fd=folder_fd)
            with os.fdopen(fd, 'wb') as f:
                os.fchmod(fd, 0o600)
                f.write(data)
                f.flush()
                os.fsync(fd)
            os.replace(tmp, file_name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
            return None
        except OSError as exc:
            try:
                os.unlink(tmp, dir_fd=folder_fd)
            except OSError:
                pass
            return exc.strerror or str(exc)
