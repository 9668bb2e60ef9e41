"""The executable store: what its key holds, hits and misses, damage, and concurrent writers."""

import os
from pathlib import Path
import platform
import shutil
import stat
import subprocess
import sys
import textwrap

import jax
from jax_perception_node.core import executable_cache, executable_key
from jax_perception_node.core.executable_cache import ExecutableCache, private_cache_dir
from jax_perception_node.core.executable_key import host_cpu
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def scaled(x, *, factor):
    """Tiny kernel with one static value; compiles in a few ms."""
    return x * factor + 1.0


def fetch(store, factor=2.0, shape=(8,), dtype=np.float32):
    """Get (load or compile) ``scaled`` for one static value and argument shape."""
    jitted = jax.jit(lambda x: scaled(x, factor=factor))
    spec = jax.ShapeDtypeStruct(shape, dtype)
    return store.get('scaled', repr(factor), jitted, (spec,), jax.tree.structure(0))


def counts(store):
    return store.hits, store.misses, store.damaged, store.write_errors


def entries(root):
    return sorted(p.name for p in (root / 'aot').iterdir())


def test_cold_then_warm_and_the_loaded_executable_computes(tmp_path):
    cold = ExecutableCache(tmp_path)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(fetch(cold)(x)), x * 2 + 1)
    assert counts(cold) == (0, 1, 0, 0)
    (entry,) = (tmp_path / 'aot').iterdir()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    warm = ExecutableCache(tmp_path)
    np.testing.assert_array_equal(np.asarray(fetch(warm)(x)), x * 2 + 1)
    assert counts(warm) == (1, 0, 0, 0)
    assert len(entries(tmp_path)) == 1      # a hit writes nothing


def test_no_directory_compiles_every_time():
    store = ExecutableCache(None)
    fetch(store)
    fetch(store)
    assert counts(store) == (0, 2, 0, 0)


@pytest.mark.parametrize('change', ['static value', 'shape', 'dtype'])
def test_a_changed_static_value_or_argument_misses(tmp_path, change):
    fetch(ExecutableCache(tmp_path))
    store = ExecutableCache(tmp_path)
    kwargs = {'static value': {'factor': 3.0}, 'shape': {'shape': (9,)},
              'dtype': {'dtype': np.int32}}[change]
    fetch(store, **kwargs)
    assert counts(store) == (0, 1, 0, 0)
    assert len(entries(tmp_path)) == 2
    if change == 'static value':
        x = np.ones(8, np.float32)
        np.testing.assert_array_equal(np.asarray(fetch(ExecutableCache(tmp_path), 3.0)(x)), 4.0)


def test_argument_values_do_not_change_the_key(tmp_path):
    # Calibration arrives as traced arrays: its values must load the stored executable.
    store = ExecutableCache(tmp_path)
    jitted = jax.jit(lambda x: scaled(x, factor=2.0))
    for values in (np.zeros(8, np.float32), np.full(8, 7.0, np.float32)):
        store.get('scaled', '2.0', jitted, (values,), jax.tree.structure(0))
    assert counts(store)[:2] == (1, 1)


def test_xla_flags_are_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.delenv('XLA_FLAGS', raising=False)
    fetch(ExecutableCache(tmp_path))
    # Read when a store is made; XLA itself read it at start-up, so nothing else changes here.
    monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_enable_fast_math=true')
    store = ExecutableCache(tmp_path)
    fetch(store)
    assert counts(store) == (0, 1, 0, 0)
    monkeypatch.delenv('XLA_FLAGS')
    again = ExecutableCache(tmp_path)
    fetch(again)
    assert counts(again) == (1, 0, 0, 0)


@pytest.mark.parametrize('setting', ['matmul precision', 'dtype promotion'])
def test_jax_settings_that_change_lowering_are_part_of_the_key(tmp_path, setting):
    fetch(ExecutableCache(tmp_path))
    context = {'matmul precision': jax.default_matmul_precision('highest'),
               'dtype promotion': jax.numpy_dtype_promotion('strict')}[setting]
    store = ExecutableCache(tmp_path)
    with context:
        fetch(store)
    fetch(store)            # back to the defaults: the first entry again
    assert counts(store) == (1, 1, 0, 0)


def test_another_host_cpu_misses(tmp_path, monkeypatch):
    here = tmp_path / 'cpuinfo-here'
    there = tmp_path / 'cpuinfo-there'
    here.write_text('processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2 avx512f\n\n'
                    'processor\t: 1\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2 avx512f\n')
    there.write_text('processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 avx2\n')
    store_dir = private_cache_dir(str(tmp_path / 'store'))
    monkeypatch.setattr(executable_key, 'CPUINFO', here)
    fetch(ExecutableCache(store_dir))
    monkeypatch.setattr(executable_key, 'CPUINFO', there)
    store = ExecutableCache(store_dir)
    fetch(store)
    assert counts(store) == (0, 1, 0, 0)
    # Flag order is not a feature: the same set in another order is the same CPU.
    here.write_text('model name\t: Some CPU\nflags\t\t: avx512f avx2 sse2 fpu\n')
    monkeypatch.setattr(executable_key, 'CPUINFO', here)
    same = ExecutableCache(store_dir)
    fetch(same)
    assert counts(same) == (1, 0, 0, 0)


@pytest.mark.skipif(not os.path.exists('/proc/cpuinfo') or platform.machine() != 'x86_64',
                    reason='reads x86 feature flags from /proc/cpuinfo (Linux on x86-64 only)')
def test_this_host_cpu_is_described_by_its_feature_flags():
    described = host_cpu()
    assert described.startswith('x86_64;')
    # SSE2 is part of x86-64 itself: its absence would mean the flags were not read at all.
    assert ' sse2 ' in described.split('flags=')[1] + ' '


def test_the_loaded_source_is_part_of_the_key(tmp_path, monkeypatch):
    package = tmp_path / 'package'
    shutil.copytree(executable_key.PACKAGE_DIR, package,
                    ignore=shutil.ignore_patterns('__pycache__'))
    loaded = executable_key.code_fingerprint(package)
    monkeypatch.setattr(executable_cache, 'LOADED_SOURCE', loaded)
    store_dir = private_cache_dir(str(tmp_path / 'store'))
    fetch(ExecutableCache(store_dir))
    with open(package / 'kernels.py', 'a') as f:
        f.write('\n# an edit\n')
    # This process still runs what it imported: an upgrade on disk does not change its key
    # (its old executables must not be stored under the new source's).
    store = ExecutableCache(store_dir)
    fetch(store)
    assert counts(store) == (1, 0, 0, 0)
    # A process that imports the edited source: another key.
    assert executable_key.code_fingerprint(package) != loaded
    monkeypatch.setattr(executable_cache, 'LOADED_SOURCE',
                        executable_key.code_fingerprint(package))
    store = ExecutableCache(store_dir)
    fetch(store)
    assert counts(store) == (0, 1, 0, 0)


@pytest.mark.parametrize('setting', ['env', 'argv'])
def test_xla_options_of_the_environment_and_command_line_are_part_of_the_key(
        tmp_path, monkeypatch, setting):
    monkeypatch.delenv('LIBTPU_INIT_ARGS', raising=False)
    fetch(ExecutableCache(tmp_path))
    if setting == 'env':
        monkeypatch.setenv('LIBTPU_INIT_ARGS', '--xla_tpu_some_option=true')
    else:
        monkeypatch.setattr(sys, 'argv', [*sys.argv, '--xla_cpu_enable_fast_math=true'])
    store = ExecutableCache(tmp_path)
    fetch(store)
    assert counts(store) == (0, 1, 0, 0)


def test_a_debug_build_of_xla_is_keyed_apart(tmp_path):
    fetch(ExecutableCache(tmp_path))
    jax.config.update('jax_disable_most_optimizations', True)     # JAX_DISABLE_MOST_...=1
    try:
        store = ExecutableCache(tmp_path)
        fetch(store)
    finally:
        jax.config.update('jax_disable_most_optimizations', False)
    assert counts(store) == (0, 1, 0, 0)


def test_a_damaged_entry_is_counted_recompiled_and_replaced(tmp_path):
    fetch(ExecutableCache(tmp_path))
    (entry,) = (tmp_path / 'aot').iterdir()
    entry.write_bytes(entry.read_bytes()[:100])
    store = ExecutableCache(tmp_path)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(fetch(store)(x)), x * 2 + 1)
    assert counts(store) == (0, 1, 1, 0)
    healed = ExecutableCache(tmp_path)
    np.testing.assert_array_equal(np.asarray(fetch(healed)(x)), x * 2 + 1)
    assert counts(healed) == (1, 0, 0, 0)


def test_an_unwritable_store_still_returns_the_executable(tmp_path):
    (tmp_path / 'aot').write_text('a file where the entries directory should be')
    store = ExecutableCache(tmp_path)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(fetch(store)(x)), x * 2 + 1)
    assert counts(store) == (0, 1, 0, 1)
    # Said once (a full disk, a read-only mount): every start compiles, and the log says why.
    fetch(store, shape=(4,))
    assert counts(store) == (0, 2, 0, 2)
    assert store.refused == [f'{tmp_path / "aot"}: an executable could not be written (is not '
                             'a directory); it is compiled at every start until it can']


def test_a_store_folder_a_sibling_makes_meanwhile_is_taken(tmp_path, monkeypatch):
    # Nodes started together: one checked that the folder was absent, another made it, and
    # the first's mkdir failed with "File exists": exit 1, "bad parameter". Made by the other,
    # the folder is checked like any that was there.
    target = tmp_path / 'cache' / 'xla'
    target.mkdir(mode=0o700, parents=True)
    monkeypatch.setattr(Path, 'exists', lambda self: False)    # as just before it was made
    assert private_cache_dir(str(target)) == target


WARMER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import jax
    import numpy as np
    from jax_perception_node.core.executable_cache import ExecutableCache
    store_dir, go = Path(sys.argv[1]), Path(sys.argv[2])
    store = ExecutableCache(store_dir)
    deadline = time.monotonic() + 120
    while not go.exists():          # both processes start warming together
        if time.monotonic() > deadline:
            sys.exit('no start signal')
        time.sleep(0.005)
    for n in range(1, 13):
        f = jax.jit(lambda x, n=n: x * n + 1.0)
        exe = store.get('f', str(n), f, (jax.ShapeDtypeStruct((n,), np.float32),),
                        jax.tree.structure(0))
        x = np.arange(n, dtype=np.float32)
        assert np.array_equal(np.asarray(exe(x)), x * n + 1.0), n
    print(store.hits, store.misses, store.damaged, store.write_errors)
""")


def test_two_processes_warming_one_store_at_once_both_end_valid(tmp_path):
    store_dir, go = private_cache_dir(str(tmp_path / 'store')), tmp_path / 'go'
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    procs = [subprocess.Popen([sys.executable, '-c', WARMER, str(store_dir), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    go.touch()
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            results.append(tuple(int(v) for v in out.split()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    for hits, misses, damaged, write_errors in results:
        assert hits + misses == 12 and damaged == 0 and write_errors == 0
    # Twelve complete entries, no temporary files left, and each one loads and computes.
    names = entries(store_dir)
    assert len(names) == 12 and not [n for n in names if n.endswith('.tmp')]
    store = ExecutableCache(store_dir)
    for n in range(1, 13):
        exe = store.get('f', str(n), jax.jit(lambda x, n=n: x * n + 1.0),
                        (jax.ShapeDtypeStruct((n,), np.float32),), jax.tree.structure(0))
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(np.asarray(exe(x)), x * n + 1.0)
    assert counts(store) == (12, 0, 0, 0)
