"""
The persistent compilation cache: serialized AOT executables in a private directory.

JAX's own persistent cache (``jax_compilation_cache_dir``) saves the XLA compile but still
traces and lowers every function to compute its key, about 0.1-0.2 s per bucket here, more than
the cached compile itself; and with jax 0.10.2 an executable it returns serializes without its
object code. This store keys the finished executable by everything that determines it instead,
so any change is a miss, never a wrong hit:

- jax/jaxlib versions, the device (platform, kind, driver/runtime version);
- the machine code's target: ``XLA_FLAGS`` and the host CPU (model and feature flags from
  ``/proc/cpuinfo``), so a store copied or shared between hosts misses instead of running code
  built for instructions this CPU may lack;
- the JAX settings that change the traced program or its compile (``LOWERING_CONFIG``);
- the source of every module of the package (the kernels and everything they call);
- the static values and every argument's shape and dtype.

A warm start loads each executable without tracing, lowering or compiling. ``hits``,
``misses`` and ``damaged`` count what happened. Entries are pickles that XLA loads and runs:
they live only in a directory that is private (0700, owned by this user) and are written 0600,
each to a temporary file renamed into place, so processes warming one store at once each see
either no entry or a complete one; a damaged entry is recompiled and replaced.
"""

import hashlib
import os
from pathlib import Path
import platform
import tempfile

import jax
from jax.experimental.serialize_executable import deserialize_and_load, serialize
import jaxlib

from .config import ConfigError

# Every module of the package, subpackages included: what the jitted functions call may move
# between modules, and a spurious miss after an edit costs one compile while a stale hit would
# run old code.
PACKAGE_DIR = Path(__file__).resolve().parent
CPUINFO = Path('/proc/cpuinfo')

# JAX settings that change the program JAX emits or how XLA compiles it, read when a key is
# made (a context manager such as ``jax.default_matmul_precision`` may be active):
LOWERING_CONFIG = (
    'jax_enable_x64',                   # dtype of Python scalars, aranges, index arithmetic
    'jax_numpy_dtype_promotion',        # result dtypes of mixed-type operations
    'jax_default_matmul_precision',     # precision of every dot (TF32 or not on NVIDIA GPUs)
    'jax_use_shardy_partitioner',       # sharding dialect of the lowered module
    'jax_use_simplified_jaxpr_constants',   # constants embedded or passed as arguments
    'jax_embedded_constants_max_bytes',
    'jax_error_checking_behavior_nan',  # checks compiled into the program
    'jax_error_checking_behavior_divide',
    'jax_error_checking_behavior_oob',
    'jax_optimization_level',           # compile options handed to XLA
    'jax_memory_fitting_level',
    'jax_exec_time_optimization_effort',
    'jax_memory_fitting_effort',
    'jax_compiler_enable_remat_pass',
    'jax_enable_pgle',
    'jax_default_device',               # the device the executable is built for
)
# Left out on purpose: jax_numpy_rank_promotion only decides whether tracing warns or raises,
# the program is the same; the PRNG settings (jax_default_prng_impl, jax_threefry_*) cannot
# matter because the kernels draw no random numbers.


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


def code_fingerprint(package_dir: Path | None = None) -> str:
    """Return the SHA-256 of every ``*.py`` file of the package and its subpackages, by path."""
    root = package_dir or PACKAGE_DIR
    digest = hashlib.sha256()
    for source in sorted(root.rglob('*.py')):
        name = source.relative_to(root).as_posix()
        digest.update(name.encode() + b'\0' + source.read_bytes() + b'\0')
    return digest.hexdigest()


def host_cpu(cpuinfo: Path | None = None) -> str:
    """
    Describe the host CPU the way XLA targets it: architecture, model and feature flags.

    XLA's CPU backend compiles for the host it runs on (its instruction-set extensions), so
    the flags decide which instructions an executable may contain. Read from the first
    processor block of ``/proc/cpuinfo`` (``flags`` on x86, ``Features`` on ARM); where that
    file does not exist, ``platform.processor()`` is the best description there is.
    """
    fields = {}
    try:
        text = (cpuinfo or CPUINFO).read_text(errors='replace')
    except OSError:
        text = ''
    for line in text.split('\n\n', 1)[0].splitlines():
        name, sep, value = line.partition(':')
        name = name.strip()
        if sep and name in ('model name', 'flags', 'Features', 'CPU implementer', 'CPU part',
                            'vendor_id', 'cpu family', 'model'):
            fields[name] = ' '.join(sorted(value.split())) if name in (
                'flags', 'Features') else value.strip()
    described = ';'.join(f'{k}={v}' for k, v in sorted(fields.items()))
    return f'{platform.machine()};{described or platform.processor()}'


def lowering_config() -> str:
    """Return the current values of ``LOWERING_CONFIG`` as one string."""
    return ';'.join(f'{name}={getattr(jax.config, name, None)!s}' for name in LOWERING_CONFIG)


class ExecutableCache:
    """
    Load or compile-and-store ``jax.stages.Compiled`` objects in ``directory/aot``.

    ``hits``: executables loaded from the store; ``misses``: executables compiled (and stored
    when there is a directory); ``damaged``: entries that failed to load and were replaced;
    ``write_errors``: entries that could not be written (the executable is still returned).
    """

    def __init__(self, directory: Path | None):
        self.directory = None if directory is None else Path(directory) / 'aot'
        self.hits = self.misses = self.damaged = self.write_errors = 0
        device = jax.devices()[0]
        self._machine = '|'.join((
            jax.__version__, jaxlib.__version__, device.platform, device.device_kind,
            device.client.platform_version, os.environ.get('XLA_FLAGS', ''), host_cpu(),
            code_fingerprint()))

    def key(self, name: str, static: str, specs) -> str:
        """Hash of everything that determines the executable."""
        text = '|'.join((self._machine, lowering_config(), name, static,
                         str(jax.tree.structure(specs)), str(jax.tree.leaves(specs))))
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
                    self.damaged += 1
        self.misses += 1
        compiled = jitted.lower(*specs).compile()
        if path is not None and not self._store(path, serialize(compiled)[0]):
            self.write_errors += 1
        return compiled

    @staticmethod
    def _store(path: Path, payload: bytes) -> bool:
        """Write an entry atomically; False when the file system refused."""
        tmp = None
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            # A private temporary name, then a rename: a process loading the entry meanwhile
            # sees the old file or the new one, never half of one, and two processes writing
            # the same entry leave one complete copy (the same executable either way).
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
            with os.fdopen(fd, 'wb') as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
            return True
        except OSError:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return False
