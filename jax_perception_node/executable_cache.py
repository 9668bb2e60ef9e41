"""
Serialized AOT executables next to JAX's persistent cache, so a warm start skips tracing.

JAX's own cache saves the XLA compile but still traces and lowers every function to compute its
key (about 0.1-0.2 s per bucket here, more than the cached compile itself). This store keys the
finished executable by everything that determines it instead: jax/jaxlib versions, the device,
the source of the kernels, the static values and every argument's shape and dtype. A change of
any of them is a miss. Entries are pickles that XLA loads and runs, so they live only inside
the private (0700) cache directory and are written 0600; a damaged entry is recompiled.
"""

import hashlib
import os
from pathlib import Path
import tempfile

import jax
from jax.experimental.serialize_executable import deserialize_and_load, serialize
import jaxlib

_SOURCES = ('kernels.py', 'pipeline.py', 'executable_cache.py')


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
