"""read_npz: an .npz of plain arrays is read; anything else is one ConfigError naming the key."""

import io
import math
import os
import re
import tracemalloc
import zipfile

from configs import small_params
from jax_perception_node.detection.head import load_weights
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.npz_file import NPY_HEADER_BYTES, read_npz
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest

LIMITS = {'W': 1024, 'b': 1024}
BOMB = 64 << 20            # bytes a bomb's member inflates to (its zip: about 64 KiB)


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
    arrays = read_npz(tmp_path / 'w.npz', 'fusion.weights_file', LIMITS)
    assert sorted(arrays) == ['W', 'b']
    np.testing.assert_array_equal(arrays['W'], np.arange(6, dtype=np.float32).reshape(2, 3))


def test_read_npz_refuses_everything_else_in_one_error(tmp_path):
    for name, (path, match) in _bad_files(tmp_path).items():
        with pytest.raises(ConfigError, match=f'^head.weights: .*{match}'):
            read_npz(path, 'head.weights', LIMITS)


def test_a_fusion_weights_file_that_is_no_npz_is_a_config_error(tmp_path):
    # Before, a file starting with a zip's magic raised zipfile.BadZipFile through the CLI.
    for name, (path, match) in _bad_files(tmp_path).items():
        with pytest.raises(ConfigError, match=f'^fusion.weights_file: .*{match}'):
            config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))


def npy_header(shape, dtype='<f4') -> bytes:
    """Return the .npy preamble and header of an array (version 1.0)."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {'descr': dtype, 'fortran_order': False, 'shape': tuple(shape)})
    return out.getvalue()


def zip_bomb(path, member: str, shape, dtype='<f4', declare: int | None = None,
             header: bytes | None = None):
    """
    Write an .npz whose ``member`` holds zeros of ``shape``: tiny on disk, large inflated.

    ``declare``: the inflated size the zip's directory and local header claim instead.
    ``header``: the member's first bytes instead of its .npy header.
    """
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    chunk = bytes(1 << 20)
    header = npy_header(shape, dtype) if header is None else header
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open(member, 'w') as f:
            f.write(header)
            for start in range(0, nbytes, len(chunk)):
                f.write(chunk[:min(len(chunk), nbytes - start)])
    if declare is not None:                  # a directory that lies: patch both headers
        data = bytearray(path.read_bytes())
        for signature, offset in ((b'PK\x03\x04', 22), (b'PK\x01\x02', 24)):
            at = data.index(signature) + offset
            data[at:at + 4] = declare.to_bytes(4, 'little')
        path.write_bytes(bytes(data))
    assert path.stat().st_size < 1 << 20
    return nbytes + len(header)


def peak_bytes(call) -> int:
    """Run ``call`` and return the most memory it held at once (Python's and NumPy's)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def refused(call, match: str):
    """Call it, expecting ConfigError matching ``match``; return the peak memory it took."""
    def run():
        with pytest.raises(ConfigError, match=match):
            call()
    return peak_bytes(run)


def test_a_head_checkpoint_zip_bomb_is_refused_before_it_inflates(tmp_path):
    # Before, np.load inflated every member: a 0.8 MiB file took +518 MiB before it was refused.
    path = tmp_path / 'bomb.npz'
    zip_bomb(path, "['scale'].npy", (BOMB // 4,))
    template = {'scale': np.float32(0), 'bias': np.float32(0)}
    peak = refused(lambda: load_weights(path, template), re.escape(
        f"head.weights: {path} member ['scale'].npy holds float32[{BOMB // 4}]: {BOMB} bytes "
        'of data, more than the 4 bytes of data it may have'))
    assert peak < 4 << 20


def test_a_fusion_weights_zip_bomb_is_refused_before_it_inflates(tmp_path):
    path = tmp_path / 'bomb.npz'
    c_in = config_from_parameters(small_params()).fused_channels
    # A header that cannot be read (the bomb's, cut): the size alone is said.
    size = zip_bomb(path, 'W.npy', (c_in, BOMB // 4 // c_in), header=b'\x93NUMPY')
    bound = c_in * 4096 * 8 + NPY_HEADER_BYTES
    params = small_params(**{'fusion.weights_file': str(path)})
    peak = refused(lambda: config_from_parameters(params), re.escape(
        f'fusion.weights_file: {path} member W.npy inflates to {size} bytes, more than its '
        f'bound of {bound}'))
    assert peak < 4 << 20


def test_a_zip_that_lies_about_a_members_size_inflates_no_further(tmp_path):
    path = tmp_path / 'liar.npz'
    # It says 100 kB, within the bounds, and holds 64 MiB, which its .npy header declares:
    # numpy would allocate that before reading.
    zip_bomb(path, 'W.npy', (BOMB // 4,), declare=100_000)
    assert zipfile.ZipFile(path).getinfo('W.npy').file_size == 100_000
    params = small_params(**{'fusion.weights_file': str(path)})
    for call in (lambda: read_npz(path, 'fusion.weights_file', {'W': 1 << 20}),
                 lambda: config_from_parameters(params)):
        peak = refused(call, '^fusion.weights_file: cannot read .*liar.npz as an .npz: member '
                             'W.npy: BadZipFile')
        assert peak < 4 << 20


def test_a_header_declaring_more_than_its_member_holds_allocates_nothing(tmp_path):
    # numpy allocates what an .npy header declares before it reads the data.
    path = tmp_path / 'header.npz'
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr("['scale'].npy", npy_header((BOMB // 4,)) + bytes(16))
    peak = refused(lambda: load_weights(path, {'scale': np.float32(0)}),
                   r"^head.weights: cannot read .* as an .npz: member \['scale'\].npy: "
                   r'ValueError: its header declares float32\[16777216\], 67108864 bytes, it '
                   r'holds 16')
    assert peak < 4 << 20


def test_unknown_members_are_refused_before_anything_inflates(tmp_path, monkeypatch):
    path = tmp_path / 'extra.npz'
    np.savez(path, W=np.ones((2, 3)), b=np.zeros(3), notes=np.zeros(3))
    opened = []
    real_open = zipfile.ZipFile.open

    def spy(self, name, mode='r', *args, **kwargs):
        if mode == 'r':
            opened.append(getattr(name, 'filename', name))
        return real_open(self, name, mode, *args, **kwargs)
    monkeypatch.setattr(zipfile.ZipFile, 'open', spy)
    with pytest.raises(ConfigError, match=r'^fusion.weights_file: .*extra.npz has an array it '
                                          r'does not take: notes \(member notes.npy\); it takes '
                                          r"\['W', 'b'\]"):
        read_npz(path, 'fusion.weights_file', LIMITS)
    assert opened == []
    np.savez(tmp_path / 'head.npz', **{"['W']": np.ones(3), "['notes']": np.zeros(3)})
    with pytest.raises(ConfigError, match=r'^head.weights: .*head.npz has an array it does not '
                                          r"take: \['notes'\]"):
        load_weights(tmp_path / 'head.npz', {'W': np.ones(3)})
    with pytest.raises(ConfigError, match='^fusion.weights_file: .*does not take: notes'):
        config_from_parameters(small_params(**{'fusion.weights_file': str(path)}))
    assert opened == []
    np.savez(path, W=np.ones((2, 3)), b=np.zeros(3))       # the same without: read
    assert sorted(read_npz(path, 'fusion.weights_file', LIMITS)) == ['W', 'b']
    assert sorted(opened) == ['W.npy', 'b.npy']


def test_a_member_inflates_to_its_bound_and_no_further(tmp_path):
    path = tmp_path / 'w.npz'
    np.savez(path, W=np.ones(4096, np.float32))          # 16 KiB of data, a 128-byte header
    size = zipfile.ZipFile(path).getinfo('W.npy').file_size
    assert size == (16 << 10) + 128
    np.testing.assert_array_equal(read_npz(path, 'head.weights', {'W': 16 << 10})['W'], 1)
    limit = size - NPY_HEADER_BYTES
    assert len(read_npz(path, 'head.weights', {'W': limit})['W']) == 4096
    with pytest.raises(ConfigError, match=f'^head.weights: .*member W.npy holds float32'
                                          fr'\[4096\]: 16384 bytes of data, more than the '
                                          f'{limit - 1} bytes of data it may have$'):
        read_npz(path, 'head.weights', {'W': limit - 1})


def test_only_stored_and_deflated_members_are_read(tmp_path):
    # zipfile inflates a bzip2 or LZMA chunk whole, however little is asked for.
    data = io.BytesIO()
    np.save(data, np.ones(3, np.float32))
    for method, name in ((zipfile.ZIP_STORED, 'stored'), (zipfile.ZIP_DEFLATED, 'deflated'),
                         (zipfile.ZIP_BZIP2, 'bzip2'), (zipfile.ZIP_LZMA, 'lzma')):
        with zipfile.ZipFile(tmp_path / f'{name}.npz', 'w', method) as z:
            z.writestr('W.npy', data.getvalue())
        if name in ('stored', 'deflated'):
            arrays = read_npz(tmp_path / f'{name}.npz', 'head.weights', LIMITS)
            np.testing.assert_array_equal(arrays['W'], 1)
        else:
            with pytest.raises(ConfigError, match=f'^head.weights: cannot read .*{name}.npz as '
                                                  f'an .npz: member W.npy is compressed with zip '
                                                  f'method {method}'):
                read_npz(tmp_path / f'{name}.npz', 'head.weights', LIMITS)


def test_a_member_twice_in_the_zip_is_refused(tmp_path):
    path = tmp_path / 'twice.npz'
    data = io.BytesIO()
    np.save(data, np.ones(3, np.float32))
    with zipfile.ZipFile(path, 'w') as z, pytest.warns(UserWarning, match='Duplicate'):
        z.writestr('W.npy', data.getvalue())
        z.writestr('W.npy', data.getvalue())
    with pytest.raises(ConfigError, match='^head.weights: .*member W.npy is in it twice'):
        read_npz(path, 'head.weights', LIMITS)


def test_an_array_of_another_dtype_is_named_by_its_dtype_not_as_a_bomb(tmp_path):
    # NumPy saves float64 by default: the file is twice its bound, and said so by dtype.
    path = tmp_path / 'f64.npz'
    np.savez(path, scale=np.ones((34, 32)))
    with pytest.raises(ConfigError, match=re.escape(
            f'head.weights: {path} member scale.npy holds float64[34, 32]: 8704 bytes of data, '
            'more than the 4352 bytes of data it may have')):
        read_npz(path, 'head.weights', {'scale': 34 * 32 * 4})
