"""read_npz: an .npz of plain arrays is read; anything else is one ConfigError naming the key."""

import io
import os
import zipfile

from configs import small_params
from jax_perception_node.config import config_from_parameters
from jax_perception_node.npz_file import read_npz
from jax_perception_node.parameters import ConfigError
import numpy as np
import pytest


def _bad_files(tmp_path):
    """Name -> (path, what the message must say) of files that are no .npz of plain arrays."""
    good = io.BytesIO()
    np.savez(good, W=np.ones(3, np.float32))
    whole = good.getvalue()
    files = {
        'yaml': (b'fusion:\n  weights_file: x\n', 'is not an .npz file'),
        'npy': (None, 'is not an .npz file'),
        'pk_garbage': (b'PK\x03\x04' + b'\x00' * 40, 'cannot read .* as an .npz'),
        'truncated': (whole[:len(whole) // 2], 'cannot read .* as an .npz'),
        'empty': (b'', 'is not an .npz file'),
    }
    out = {}
    for name, (data, match) in files.items():
        path = tmp_path / f'{name}.npz'
        if data is None:
            np.save(tmp_path / 'a.npy', np.ones(3))
            (tmp_path / 'a.npy').rename(path)
        else:
            path.write_bytes(data)
        out[name] = (path, match)
    with zipfile.ZipFile(tmp_path / 'member.npz', 'w') as z:     # a member that is no .npy
        z.writestr('W.npy', b'not an array')
    out['member'] = (tmp_path / 'member.npz', 'cannot read .* as an .npz')
    pickled = tmp_path / 'pickled.npz'
    np.savez(pickled, W=np.array([object()], dtype=object))
    out['pickled'] = (pickled, 'cannot read .* as an .npz')
    out['absent'] = (tmp_path / 'absent.npz', 'cannot read .*absent.npz')
    os.mkfifo(tmp_path / 'fifo.npz')        # with no writer, reading it would block for ever
    out['fifo'] = (tmp_path / 'fifo.npz', 'fifo.npz is not a regular file')
    (tmp_path / 'folder.npz').mkdir()
    out['folder'] = (tmp_path / 'folder.npz', 'folder.npz')
    return out


def test_read_npz_reads_plain_arrays(tmp_path):
    np.savez(tmp_path / 'w.npz', W=np.arange(6, dtype=np.float32).reshape(2, 3), b=np.zeros(3))
    arrays = read_npz(tmp_path / 'w.npz', 'fusion.weights_file')
    assert sorted(arrays) == ['W', 'b']
    np.testing.assert_array_equal(arrays['W'], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_read_npz_refuses_everything_else_in_one_error(tmp_path):
    for name, (path, match) in _bad_files(tmp_path).items():
        with pytest.raises(ConfigError, match=f'^head.weights: .*{match}'):
            read_npz(path, 'head.weights')


def test_a_fusion_weights_file_that_is_no_npz_is_a_config_error(tmp_path):
    # Before, a file starting with a zip's magic raised zipfile.BadZipFile through the CLI.
    for name, (path, match) in _bad_files(tmp_path).items():
        with pytest.raises(ConfigError, match=f'^fusion.weights_file: .*{match}'):
            config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))
