"""
The persistent compilation cache: serialized AOT executables in a private directory.

JAX's own persistent cache (``jax_compilation_cache_dir``) saves the XLA compile but still
traces and lowers every function to compute its key, about 0.1-0.2 s per bucket here, more than
the cached compile itself; and with jax 0.10.2 an executable it returns serializes without its
object code. This store keys the finished executable by everything that determines it instead:
jax/jaxlib versions, the device, the source of the kernels, the static values and every
argument's shape and dtype, so any change is a miss, never a wrong hit. A warm start loads each
executable without tracing, lowering or compiling. Entries are pickles that XLA loads and runs:
they live only in a directory that is private (0700, owned by this user) and are written 0600;
a damaged entry is recompiled and replaced.
"""

import hashlib
import os
from pathlib import Path
import tempfile

import jax
from jax.experimental.serialize_executable import deserialize_and_load, serialize
import jaxlib

from .config import ConfigError

_SOURCES = ('kernels.py', 'pipeline.py', 'executable_cache.py')


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
        if not directory.exists():
            directory.mkdir(mode=0o700, parents=True)
            directory.chmod(0o700)
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


def _code_fingerprint() -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


class ExecutableCache:
    """Load or compile-and-store ``jax.stages.Compiled`` objects in ``directory/aot``."""

    def __init__(self, directory: Path | None):
        self.directory = None if directory is None else Path(directory) / 'aot'
        self.hits = self.misses = 0
        device = jax.devices()[0]
        self._salt = '|'.join((jax.__version__, jaxlib.__version__, device.platform,
                               device.device_kind, device.client.platform_version,
                               _code_fingerprint()))

    def key(self, name: str, static: str, specs) -> str:
        """Hash of everything that determines the executable."""
        text = '|'.join((self._salt, name, static, str(jax.tree.structure(specs)),
                         str(jax.tree.leaves(specs))))
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, name: str, static: str, jitted, specs: tuple, out_tree):
        """Return the executable of ``jitted`` for ``specs``, from the store when present."""
        # Shapes and dtypes only: calibration values must not change the key.
        specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), specs)
        path = None
        if self.directory is not None:
            path = self.directory / f'{name}-{self.key(name, static, specs)[:40]}.xla'
            if path.exists():
                try:
                    compiled = deserialize_and_load(
                        path.read_bytes(), jax.tree.structure((specs, {})), out_tree)
                    self.hits += 1
                    return compiled
                except Exception:       # noqa: B902 - any damage: recompile and overwrite
                    pass
        self.misses += 1
        compiled = jitted.lower(*specs).compile()
        if path is not None:
            self._store(path, serialize(compiled)[0])
        return compiled

    @staticmethod
    def _store(path: Path, payload: bytes) -> None:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        # Write then rename: a concurrent reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix='.tmp')
        try:
            with os.fdopen(fd, 'wb') as f:
                f.write(payload)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
