"""
The executable store loads nothing this user did not write, and survives a swapped entry.

Every place an entry can be read from gets a planted pickle whose unpickling creates a marker
file: the marker must never appear, a refusal must name the path, the executable is compiled
(and where the folder is safe, replaced by an entry the next start loads).
"""

import os
from pathlib import Path
import pickle
import stat

from configs import small_config
import jax
from jax.experimental.serialize_executable import deserialize_and_load, serialize
from jax_perception_node.core.executable_cache import describe, ExecutableCache, seal_entry
from jax_perception_node.core.pipeline import BevPipeline
import numpy as np
import pytest

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason='chown to another uid needs root')


class Payload:
    """Unpickling this creates ``marker``: stands for any command a pickle may run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def fetch(store, shape=(8,)):
    jitted = jax.jit(lambda x: x * 2.0 + 1.0)
    return store.get('scaled', '2.0', jitted, (jax.ShapeDtypeStruct(shape, np.float32),),
                     jax.tree.structure(0))


def counts(store):
    return store.hits, store.misses, store.damaged, store.write_errors


def computes(executable, n=8):
    x = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(executable(x)), x * 2 + 1)


def key_of(store, shape=(8,)):
    return store.key('scaled', '2.0', (jax.ShapeDtypeStruct(shape, np.float32),))


@pytest.fixture
def store(tmp_path):
    """Return a private store holding one valid entry: (root, entry path, marker path)."""
    root = tmp_path / 'store'
    root.mkdir(mode=0o700)
    fetch(ExecutableCache(root))
    (entry,) = (root / 'aot').iterdir()
    return root, entry, tmp_path / 'marker'


def test_the_planted_pickle_runs_when_deserialized(tmp_path):
    """Positive control: the old loader (deserialize_and_load on the bytes) runs the payload."""
    marker = tmp_path / 'marker'
    with pytest.raises(Exception):      # noqa: B017 - it fails after the payload has run
        deserialize_and_load(pickle.dumps(Payload(marker)), jax.tree.structure(((0,), {})),
                             jax.tree.structure(0))
    assert marker.exists()


def plant(case, root, entry, marker):
    """Put a payload where ``entry`` is read from, the way ``case`` says."""
    payload = pickle.dumps(Payload(marker))
    if case == 'symlink to a payload elsewhere':
        elsewhere = root.parent / 'elsewhere.xla'
        elsewhere.write_bytes(payload)
        elsewhere.chmod(0o600)
        entry.unlink()
        entry.symlink_to(elsewhere)
        return
    if case == 'forged digest':
        payload = seal_entry(bytes(32), key_of(ExecutableCache(root)), [[[8], 'float32']],
                             payload)
    entry.write_bytes(payload)
    entry.chmod(0o666 if case == 'mode 0666' else 0o600)
    if case == 'owned by another user':
        os.chown(entry, NOBODY, NOBODY)


ENTRY_CASES = ['mode 0666', pytest.param('owned by another user', marks=needs_root),
               'symlink to a payload elsewhere', 'no digest (old format)', 'forged digest']


@pytest.mark.parametrize('case', ENTRY_CASES)
def test_a_planted_entry_is_never_unpickled_and_is_replaced(store, case):
    root, entry, marker = store
    plant(case, root, entry, marker)
    cache = ExecutableCache(root)
    computes(fetch(cache))
    assert not marker.exists()
    assert counts(cache) == (0, 1, 1, 0)
    (message,) = cache.refused
    assert str(entry) in message and 'refused and recompiled, replaced' in message
    info = entry.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    healed = ExecutableCache(root)
    computes(fetch(healed))
    assert counts(healed) == (1, 0, 0, 0) and healed.refused == []


def test_a_folder_at_an_entry_is_refused_and_said_not_replaced(store):
    # os.replace cannot put a file over a folder: the message said "replaced", at every start.
    root, entry, _ = store
    entry.unlink()
    entry.mkdir()
    cache = ExecutableCache(root)
    computes(fetch(cache))
    assert counts(cache) == (0, 1, 1, 1)
    assert cache.refused == [f'{entry} is not a regular file: refused and recompiled, not '
                             'replaced (Is a directory): remove it']


def unsafe_folder(case, root, entry):
    """Make the entries folder unsafe; return it."""
    folder = entry.parent
    if case == 'world-writable':
        folder.chmod(0o777)
    elif case == 'owned by another user':
        os.chown(folder, NOBODY, NOBODY)
    else:       # a link to a folder holding the payload under the entry's name
        moved = root.parent / 'elsewhere'
        folder.rename(moved)
        folder.symlink_to(moved)
    return folder


@pytest.mark.parametrize('case', ['world-writable', 'a symlink',
                                  pytest.param('owned by another user', marks=needs_root)])
def test_an_unsafe_entries_folder_is_neither_read_nor_written(store, case):
    root, entry, marker = store
    entry.write_bytes(pickle.dumps(Payload(marker)))
    planted = entry.read_bytes()
    folder = unsafe_folder(case, root, entry)
    cache = ExecutableCache(root)
    computes(fetch(cache))
    computes(fetch(cache))
    assert not marker.exists()
    assert counts(cache) == (0, 2, 0, 0)
    (message,) = cache.refused          # once, not once per executable
    assert message.startswith(f'{folder} ') and 'not loaded or stored' in message
    if case == 'world-writable':
        assert f'chmod 700 {folder}' in message
    assert entry.read_bytes() == planted        # nothing written there either
    if case == 'world-writable':
        # Fixed as the message says, the planted entry is refused by its digest and replaced.
        folder.chmod(0o700)
        fixed = ExecutableCache(root)
        computes(fetch(fixed))
        assert not marker.exists() and counts(fixed) == (0, 1, 1, 0)
        healed = ExecutableCache(root)
        computes(fetch(healed))
        assert counts(healed) == (1, 0, 0, 0)


def test_a_world_writable_store_root_is_neither_read_nor_written(store):
    root, entry, marker = store
    entry.write_bytes(pickle.dumps(Payload(marker)))
    root.chmod(0o777)
    cache = ExecutableCache(root)
    computes(fetch(cache))
    assert not marker.exists() and counts(cache) == (0, 1, 0, 0)
    (message,) = cache.refused
    assert message.startswith(f'{root} ') and f'chmod 700 {root}' in message


def replace_secret(case, root, secret):
    """Replace the store's secret by ``secret`` in a file that is not private to this user."""
    path = root / 'store.key'
    path.unlink()
    if case == 'symlink':
        elsewhere = root.parent / 'their.key'
        elsewhere.write_bytes(secret)
        elsewhere.chmod(0o600)
        path.symlink_to(elsewhere)
        return path
    path.write_bytes(secret)
    path.chmod(0o620 if case == 'group-writable' else 0o600)
    if case == 'owned by another user':
        os.chown(path, NOBODY, NOBODY)
    return path


@pytest.mark.parametrize('case', ['group-writable', 'symlink',
                                  pytest.param('owned by another user', marks=needs_root)])
def test_a_secret_that_is_not_private_makes_the_store_untrusted(store, case):
    # Whoever could write the secret signs a payload with it: it must still not load.
    root, entry, marker = store
    theirs = bytes(range(32))
    entry.write_bytes(seal_entry(theirs, key_of(ExecutableCache(root)), [[[8], 'float32']],
                                 pickle.dumps(Payload(marker))))
    planted = entry.read_bytes()
    secret = replace_secret(case, root, theirs)
    cache = ExecutableCache(root)
    computes(fetch(cache))
    assert not marker.exists()
    assert counts(cache) == (0, 1, 0, 0)
    (message,) = cache.refused
    assert message.startswith(f'{secret} ') and 'not loaded or stored' in message
    assert entry.read_bytes() == planted


def test_a_new_secret_is_private_and_old_entries_are_replaced(store):
    root, entry, _ = store
    secret = root / 'store.key'
    info = secret.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_size == 32
    secret.unlink()                     # a store from before the secret, or a lost secret
    cache = ExecutableCache(root)
    computes(fetch(cache))
    assert counts(cache) == (0, 1, 1, 0)
    assert stat.S_IMODE(secret.lstat().st_mode) == 0o600
    assert [n for n in os.listdir(root) if n.endswith('.tmp')] == []


def test_an_entry_renamed_from_another_shape_is_refused_and_replaced(store):
    root, entry, _ = store
    other = ExecutableCache(root)
    computes(fetch(other, (9,)), 9)
    (renamed,) = set((root / 'aot').iterdir()) - {entry}
    renamed.replace(entry)
    cache = ExecutableCache(root)
    computes(fetch(cache))              # the swapped executable would raise on (8,) arguments
    assert counts(cache) == (0, 1, 1, 0)
    assert 'fails its digest' in cache.refused[0]


def sign_with_the_store_secret(root, entry, key, compiled, outputs):
    secret = (root / 'store.key').read_bytes()
    entry.write_bytes(seal_entry(secret, key, outputs, serialize(compiled)[0]))


@pytest.mark.parametrize('mismatch', ['arguments', 'outputs'])
def test_a_correctly_signed_entry_of_the_wrong_shapes_is_refused(store, mismatch):
    # The digest binds the key, so only the store's own secret can make such an entry: this
    # checks the shape check on its own.
    root, entry, _ = store
    x9 = jax.ShapeDtypeStruct((9,), np.float32)
    if mismatch == 'arguments':
        compiled = jax.jit(lambda x: x * 2.0 + 1.0).lower(x9).compile()
        outputs = describe(jax.tree.leaves(compiled.out_info))
    else:
        compiled = jax.jit(lambda x: x * 2.0 + 1.0).lower(
            jax.ShapeDtypeStruct((8,), np.float32)).compile()
        outputs = [[[9], 'float32']]
    sign_with_the_store_secret(root, entry, key_of(ExecutableCache(root)), compiled, outputs)
    cache = ExecutableCache(root)
    computes(fetch(cache))
    assert counts(cache) == (0, 1, 1, 0)
    (message,) = cache.refused
    assert (' takes arguments ' if mismatch == 'arguments' else ' returns ') in message
    healed = ExecutableCache(root)
    computes(fetch(healed))
    assert counts(healed) == (1, 0, 0, 0)


def test_the_pipeline_warms_up_through_a_swapped_entry_and_a_planted_folder(tmp_path):
    """The issue's two scenarios at start-up: neither crashes warm-up nor runs the payload."""
    cache_dir, marker = tmp_path / 'xla', tmp_path / 'marker'
    cfg = small_config(compilation_cache_dir=str(cache_dir))
    cold = BevPipeline(cfg)
    cold.warmup()
    stored = cold.store.misses
    frames = sorted((cache_dir / 'aot').glob('frame-*.xla'))
    assert len(frames) == 3                     # one per bucket
    frames[0].write_bytes(frames[1].read_bytes())
    swapped = BevPipeline(cfg)
    swapped.warmup()
    assert (swapped.store.hits, swapped.store.misses, swapped.store.damaged) == (
        stored - 1, 1, 1)
    assert str(frames[0]) in swapped.store.refused[0]
    healed = BevPipeline(cfg)
    healed.warmup()
    assert (healed.store.hits, healed.store.misses) == (stored, 0)
    for entry in (cache_dir / 'aot').iterdir():
        entry.write_bytes(pickle.dumps(Payload(marker)))
    (cache_dir / 'aot').chmod(0o777)
    planted = BevPipeline(cfg)
    planted.warmup()
    assert not marker.exists()
    assert (planted.store.hits, planted.store.misses) == (0, stored)
    (message,) = planted.store.refused
    assert f'chmod 700 {cache_dir / "aot"}' in message
