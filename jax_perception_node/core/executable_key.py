"""
What decides an executable's machine code, for the executable store's key (executable_cache.py).

Everything here is read as the key is made: the JAX settings that change lowering or compiling,
the XLA options of the environment and the command line, the host CPU's features, and the
package source as this process imported it.
"""

import hashlib
import os
from pathlib import Path
import platform
import sys

import jax

# Every module of the package, subpackages included: what the jitted functions call may move
# between modules, and a spurious miss after an edit costs one compile while a stale hit would
# run old code.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
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
    'jax_disable_most_optimizations',   # XLA at optimization level 0 (a debug build, 3-4x slower)
    'jax_xla_profile_version',
    'jax_default_device',               # the device the executable is built for
)
# Left out on purpose: jax_numpy_rank_promotion only decides whether tracing warns or raises,
# the program is the same; the PRNG settings (jax_default_prng_impl, jax_threefry_*) cannot
# matter because the kernels draw no random numbers.


def code_fingerprint(package_dir: Path | None = None) -> str:
    """Return the SHA-256 of every ``*.py`` file of the package and its subpackages, by path."""
    root = package_dir or PACKAGE_DIR
    digest = hashlib.sha256()
    for source in sorted(root.rglob('*.py')):
        name = source.relative_to(root).as_posix()
        digest.update(name.encode() + b'\0' + source.read_bytes() + b'\0')
    return digest.hexdigest()


# The source this process runs: read once, when the package is imported (the kernels are
# imported with it). An upgrade on disk under a running process must not store its old
# executables under the new source's key.
LOADED_SOURCE = code_fingerprint()


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
    return ';'.join(f'{name}={_config_value(name)!s}' for name in LOWERING_CONFIG)


def _config_value(name: str):
    """Return a JAX setting's value; a flag defined outside jax.config is only ``read``."""
    if hasattr(jax.config, name):
        return getattr(jax.config, name)
    try:
        return jax.config.read(name)
    except AttributeError:          # not in this JAX version
        return None


def xla_options() -> str:
    """
    Return the XLA options of the environment and the command line, as JAX's own cache key.

    XLA_FLAGS, LIBTPU_INIT_ARGS and any --xla* argument of the process change the machine
    code XLA emits.
    """
    argv = ' '.join(arg for arg in sys.argv if arg.startswith('--xla'))
    return '|'.join((os.environ.get('XLA_FLAGS', ''), os.environ.get('LIBTPU_INIT_ARGS', ''),
                     argv))
