"""
The zero-copy hot path (issue 19): decode into the bucket, aligned buffers, double-buffering.

The CPU backend aliases a 64-byte aligned host array, in ``jax.device_put`` or handed to an
executable as it is (what the pipeline does there); the tests of that are about the CPU backend
and say so. Double-buffering is checked on any backend.
"""

from contextlib import contextmanager

from cloud_reference import (as_flavour, encode, Field, FLOAT32, FLOAT64, INT16, Invalid,
                             reference_decode, reference_rows, sample_values, standard_cloud,
                             UINT8)
from configs import small_config
from hypothesis import given, HealthCheck, settings
from hypothesis import strategies as st
import jax
from jax_perception_node.core.buckets import BucketPadder
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.core.staging import aligned_zeros, ALIGNMENT, CameraStaging, DoubleBuffer
from jax_perception_node.sensors.cloud import CloudFormatError, read_points
import numpy as np
import pytest
from reference import lift_ref, voxelize_ref
from test_cloud_fuzz import FUZZ_EXAMPLES, random_clouds

CPU_ONLY = pytest.mark.skipif(
    jax.default_backend() != 'cpu',
    reason="aliasing a host buffer (in device_put or an executable call) is the CPU backend's "
           'behaviour')
MAP = (12, 20, 3)


def cloud_in_grid(n: int, seed: int) -> np.ndarray:
    """Return float32[n, 4] points mostly inside small_config()'s grid."""
    rng = np.random.default_rng(seed)
    return rng.normal(scale=5.0, size=(n, 4)).astype(np.float32)


def message(points: np.ndarray):
    """Return the common-layout PointCloud2 stand-in holding ``points``."""
    fields = [Field(name, 4 * k, FLOAT32) for k, name in enumerate('x y z intensity'.split())]
    values = {name: points[:, k].tolist() for k, name in enumerate('x y z intensity'.split())}
    return as_flavour(encode(1, len(points), fields, values), 'numpy')


def mixed_message(n: int, seed: int, height: int = 1):
    """Return a cloud of mixed datatypes, organized with padded rows when ``height`` > 1."""
    rng = np.random.default_rng(seed)
    fields = [Field('x', 0, FLOAT64), Field('y', 8, INT16), Field('z', 10, FLOAT32),
              Field('intensity', 14, UINT8)]
    values = {f.name: sample_values(f.datatype, n, rng) for f in fields}
    width = n // height
    return encode(height, width, fields, values, is_bigendian=True, point_step=17,
                  row_step=width * 17 + 3)


# -- aligned, double-buffered host arrays ------------------------------------------------------

@pytest.mark.parametrize('shape,dtype', [((1, 4), np.float32), ((1023, 4), np.float32),
                                         ((3,), np.int32), ((2, 12, 20, 3), np.float32),
                                         ((5, 13), np.float32)])
def test_staging_arrays_are_64_byte_aligned_zeros(shape, dtype):
    for _ in range(8):      # several allocations: a lucky malloc address proves nothing
        array = aligned_zeros(shape, dtype)
        assert array.ctypes.data % ALIGNMENT == 0
        assert array.shape == shape and array.dtype == dtype and array.flags.c_contiguous
        assert not array.any()
    buffers = DoubleBuffer((7, 4))
    assert all(a.ctypes.data % ALIGNMENT == 0 for a in buffers.arrays)
    assert not np.shares_memory(*buffers.arrays)


class Reader:
    """A frame in flight: counts the waits on it."""

    def __init__(self):
        self.waits = 0

    def block_until_ready(self):
        self.waits += 1


def test_a_buffer_is_handed_out_again_only_after_its_reader_finished():
    buffers = DoubleBuffer((4, 4))
    first = buffers.swap()
    frame_a = Reader()
    buffers.read_by(frame_a)
    second = buffers.swap()              # the other buffer: nobody waits
    assert second is not first and frame_a.waits == 0
    frame_b = Reader()
    buffers.read_by(frame_b, second)
    assert buffers.swap() is first       # A's buffer again: A must have finished first
    assert (frame_a.waits, frame_b.waits) == (1, 0)
    buffers.swap()
    assert frame_b.waits == 1
    buffers.swap()
    assert frame_a.waits == 1            # a reader is waited for once


# -- the decoder writes into the bucket --------------------------------------------------------

def test_decode_writes_the_cloud_into_the_bucket_buffer_without_an_array_of_its_own():
    import tracemalloc
    padder = BucketPadder((1024, 65536))
    for msg in (message(cloud_in_grid(50_000, 0)), mixed_message(50_000, 1, height=50)):
        tracemalloc.start()
        try:
            padded = padder.decode(msg)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 128 << 10, peak     # the intermediate (N, 4) array alone is 800 kB
        assert padded.buffer is padder._buffers[65536].current
        assert (padded.count, padded.bucket, padded.overflow, padded.num_points) == (
            50_000, 65536, 0, 50_000)
        np.testing.assert_array_equal(padded.buffer[:50_000], reference_decode(msg))


@pytest.mark.parametrize('policy', ['subsample', 'truncate'])
def test_decode_applies_the_overflow_policy_before_conversion(policy):
    padder = BucketPadder((8, 32), policy)
    msg = mixed_message(100, 2, height=4)
    padded = padder.decode(msg)
    expected = reference_decode(msg)[reference_rows(100, 32, policy)]
    assert (padded.count, padded.bucket, padded.overflow, padded.num_points) == (32, 32, 68, 100)
    np.testing.assert_array_equal(padded.buffer, expected)


def test_a_bad_cloud_is_refused_before_any_buffer_is_touched():
    padder = BucketPadder((8,))
    good = padder.decode(message(cloud_in_grid(5, 3)))
    held = good.buffer.copy()
    broken = mixed_message(6, 4)
    broken = broken.__class__(**{**broken.__dict__, 'row_step': 1})
    with pytest.raises(CloudFormatError, match='row_step 1'):
        padder.decode(broken)
    np.testing.assert_array_equal(good.buffer, held)
    other, = (a for a in padder._buffers[8].arrays if a is not good.buffer)
    assert not other.any()
    assert padder._buffers[8].current is good.buffer


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_clouds(), st.one_of(st.none(), st.integers(0, 30)),
       st.sampled_from(['subsample', 'truncate']))
def test_fuzz_decoding_into_out_equals_decoding_alone(case, max_points, policy):
    """Any layout, valid or broken: ``out`` gets what read_points returns, and nothing more."""
    cloud, flavour = case
    msg = as_flavour(cloud, flavour)
    out = np.full((40, 4), 7.0, np.float32)
    try:
        reference_decode(cloud)
    except Invalid:
        with pytest.raises(CloudFormatError):
            read_points(msg, max_points, policy, out=out)
        assert (out == 7.0).all()
        return
    alone, n = read_points(msg, max_points, policy)
    alone = alone.copy()     # may be a view of the message
    written, n_out = read_points(msg, max_points, policy, out=out)
    assert n_out == n and written.base is out and written.ctypes.data == out.ctypes.data
    np.testing.assert_array_equal(written, alone)
    np.testing.assert_array_equal(out[:len(alone)], alone)
    assert (out[len(alone):] == 7.0).all()


def test_out_that_cannot_hold_the_cloud_is_refused():
    msg = as_flavour(standard_cloud(10, np.random.default_rng(0)), 'numpy')
    with pytest.raises(ValueError, match='out has 9 rows, the cloud needs 10'):
        read_points(msg, out=np.zeros((9, 4), np.float32))
    for wrong in (np.zeros((10, 4), np.float64), np.zeros((10, 4), np.float32).T.copy().T,
                  np.zeros((10, 3), np.float32)):
        with pytest.raises(ValueError, match='out must be'):
            read_points(msg, out=wrong)
    read_points(msg, max_points=9, out=np.zeros((9, 4), np.float32))


# -- the buffer reaches the executable without a copy (CPU backend) ---------------------------

@CPU_ONLY
def test_device_put_aliases_the_bucket_buffer_on_the_cpu(pipe):
    padded = pipe.decode(message(cloud_in_grid(200, 5)))
    on_device = jax.device_put(padded.buffer)
    assert on_device.unsafe_buffer_pointer() == padded.buffer.ctypes.data
    padded.buffer[0, 0] = 1234.5      # what the executable reads is the host buffer itself
    assert float(on_device[0, 0]) == 1234.5
    # The positive control: an unaligned copy of the same rows is copied, not aliased.
    unaligned = np.frombuffer(aligned_zeros((256 * 16 + 16,), np.uint8)[16:].data,
                              np.float32).reshape(256, 4)
    assert unaligned.ctypes.data % ALIGNMENT == 16
    assert jax.device_put(unaligned).unsafe_buffer_pointer() != unaligned.ctypes.data


@contextmanager
def executable_calls(pipe, bucket: int):
    """Yield the list of the arguments each call of ``bucket``'s executable gets meanwhile."""
    compiled, calls = pipe._executables[bucket], []

    def recording(args):
        calls.append(args)
        return compiled(args)

    pipe._executables[bucket] = recording
    try:
        yield calls
    finally:
        pipe._executables[bucket] = compiled


@CPU_ONLY
def test_the_executable_gets_the_staged_host_arrays_themselves_on_the_cpu(pipe):
    """No device_put on the CPU: the aligned host arrays go to the executable as they are."""
    padded = pipe.decode(message(cloud_in_grid(200, 5)))
    with executable_calls(pipe, padded.bucket) as calls:
        result = pipe.dispatch(padded).result()
    (args,) = calls
    assert args.points is padded.buffer and isinstance(args.points, np.ndarray)
    assert args.points.ctypes.data % ALIGNMENT == 0
    assert isinstance(args.scalars, np.ndarray) and args.scalars.ctypes.data % ALIGNMENT == 0
    assert int(args.scalars[0]) == 200
    np.testing.assert_allclose(result.features[..., :6],
                               voxelize_ref(cloud_in_grid(200, 5), pipe.cfg), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize('sweeps', [1, 3])
def test_inputs_through_device_put_give_the_same_frames(warmed, sweeps):
    """The other backends' path (device_put first) computes what the CPU's direct call does."""
    pipe = warmed(small_config(cameras=0, **{'accumulation.num_sweeps': sweeps}))
    frames = []
    for k in range(4):
        pose = np.eye(4)
        pose[:3, 3] = (0.3 * k, 0.0, 0.0)
        frames.append((cloud_in_grid(400 + 150 * k, 40 + k), 10**18 + k * 10**8, pose))
    outputs = {}
    before = compile_count()
    try:
        for host in (True, False):
            pipe.host_inputs = host
            pipe.reset_sweeps()
            outputs[host] = [pipe.process(points, stamp_ns=stamp, pose=pose).features.copy()
                             for points, stamp, pose in frames]
    finally:
        pipe.host_inputs = jax.default_backend() == 'cpu'
    assert compile_count() == before
    for direct, put in zip(outputs[True], outputs[False]):
        np.testing.assert_array_equal(put, direct)
    if sweeps > 1:      # the frames did accumulate: earlier sweeps' points lag behind
        assert outputs[True][-1][..., 6].max() > 0      # time_lag_mean


@CPU_ONLY
def test_the_executable_gets_the_staged_camera_batch_itself_on_the_cpu(pipe):
    """A changed batch goes to the executable as the aligned host array it was staged in."""
    rng = np.random.default_rng(6)
    padded = pipe.padder.pad(np.zeros((0, 4), np.float32))
    with executable_calls(pipe, padded.bucket) as calls:
        result = pipe.process(padded, {'front': rng.normal(size=MAP).astype(np.float32)})
    assert result.cameras_sent
    (args,) = calls
    staged = pipe._staging.batches.current
    assert args.features is staged and staged.ctypes.data % ALIGNMENT == 0


def test_camera_batches_through_device_put_give_the_same_frames(pipe):
    """The other backends' path (device_put first) computes what the CPU's direct call does."""
    rng = np.random.default_rng(11)
    frames = [(cloud_in_grid(300 + 50 * k, 60 + k), {'front': rng.normal(size=MAP).astype(
        np.float32)} if k != 2 else {}) for k in range(4)]      # frame 2: the camera masked
    outputs = {}
    before = compile_count()
    try:
        for host in (True, False):
            pipe.host_inputs = host
            outputs[host] = [pipe.process(points, maps).features.copy()
                             for points, maps in frames]
    finally:
        pipe.host_inputs = jax.default_backend() == 'cpu'
    assert compile_count() == before
    for direct, put in zip(outputs[True], outputs[False]):
        np.testing.assert_array_equal(put, direct)
    assert np.abs(outputs[True][0][..., 6:]).max() > 0      # the camera did reach the BEV


# -- double-buffering: a frame in flight is never overwritten ----------------------------------

def test_a_frame_fetched_late_keeps_its_own_points(warmed):
    pipe = warmed(small_config(cameras=0))
    a, b, c = (cloud_in_grid(900, seed) for seed in (7, 8, 9))
    expected = [pipe.process(points).features.copy() for points in (a, b, c)]
    before = compile_count()
    frame_a = pipe.dispatch(pipe.decode(message(a)))
    held_a = pipe.padder._buffers[1024].current
    frame_b = pipe.dispatch(pipe.decode(message(b)))      # written while A may be in flight
    held_b = pipe.padder._buffers[1024].current
    assert not np.shares_memory(held_a, held_b)
    np.testing.assert_array_equal(held_a[:900], a)         # B did not touch A's buffer
    frame_c = pipe.dispatch(c)                              # A's buffer again: waits for A
    for frame, want in zip((frame_a, frame_b, frame_c), expected):
        np.testing.assert_array_equal(frame.result().features, want)
    assert frame_a.result() is frame_a.result()
    assert compile_count() == before


def test_camera_maps_changing_while_a_frame_is_in_flight(pipe):
    rng = np.random.default_rng(10)
    points = cloud_in_grid(300, 11)
    first = {'front': rng.normal(size=MAP).astype(np.float32),
             'rear': rng.normal(size=MAP).astype(np.float32)}
    second = {'front': rng.normal(size=MAP).astype(np.float32), 'rear': first['rear']}
    third = {'front': second['front'], 'rear': rng.normal(size=MAP).astype(np.float32)}
    before = compile_count()
    frames = [pipe.dispatch(points, maps) for maps in (first, second, third, third)]
    results = [frame.result() for frame in frames]
    assert [r.cameras_sent for r in results] == [True, True, True, False]
    assert compile_count() == before
    for maps, result in zip((first, second, third), results):
        camera, coverage = lift_ref(pipe.cfg, maps)
        np.testing.assert_allclose(result.features[..., 6:9], camera, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(result.features[..., 9], coverage)
        np.testing.assert_allclose(result.features[..., :6], voxelize_ref(points, pipe.cfg),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(results[3].features, results[2].features)


def test_camera_staging_catches_the_other_batch_up():
    """Each change goes to the other batch, which also gets the slots it missed."""
    staging = CameraStaging(('a', 'b', 'c'), (2, 3, 1))
    maps = {name: np.full((2, 3, 1), k + 1.0, np.float32) for k, name in enumerate('abc')}
    sent = [staging.stage(maps)[0] is not None]
    state = dict(maps)
    for step, name in enumerate('abab'):
        state[name] = np.full((2, 3, 1), 10.0 + step, np.float32)
        state[name][0, 0, 0] = np.nan
        batch, nonfinite = staging.stage({name: state[name]})
        sent.append(batch is not None)
        assert nonfinite == 1 and batch is staging.batches.current
        for k, key in enumerate('abc'):
            np.testing.assert_array_equal(batch[k], np.nan_to_num(state[key], nan=0.0))
    assert sent == [True] * 5
    # Unchanged maps are not staged again; a NaN map never equals its zeroed slot.
    assert staging.stage({'c': state['c']}) == (None, 0)
    assert staging.stage({'a': state['a']})[1] == 1


def test_decoded_and_padded_frames_are_bit_identical(pipe):
    """The in-place decoder feeds the executable exactly what the old array path did."""
    rng = np.random.default_rng(12)
    maps = {'front': rng.normal(size=MAP).astype(np.float32), 'rear': None}
    before = compile_count()
    for n in (0, 1, 64, 65, 700, 1024, 3000):
        points = cloud_in_grid(n, n)
        decoded, _ = read_points(message(points), pipe.padder.capacity, 'subsample')
        old = pipe.process(decoded.copy(), maps, num_points=n)
        new = pipe.process(pipe.decode(message(points)), maps)
        np.testing.assert_array_equal(new.features, old.features)
        assert (new.num_points, new.bucket, new.overflow_points) == (
            old.num_points, old.bucket, old.overflow_points) == (
            n, pipe.padder.bucket_for(n), max(0, n - 1024))
        kept = points[reference_rows(n, 1024, 'subsample')]
        np.testing.assert_allclose(new.features[..., :6], voxelize_ref(kept, pipe.cfg),
                                   rtol=1e-5, atol=1e-5)
    assert compile_count() == before


def test_accumulated_frames_fetched_late_keep_their_own_sweeps(warmed):
    """With accumulation the staged sweep arrays alternate too; each frame keeps its own."""
    pipe = warmed(small_config(cameras=0, **{'accumulation.num_sweeps': 3}))
    t0 = 10**18
    frames = []
    for k in range(4):
        pose = np.eye(4)
        pose[:3, 3] = (0.4 * k, 0.1 * k, 0.0)
        frames.append((cloud_in_grid(500, 20 + k), t0 + k * 10**8, pose))
    pipe.reset_sweeps()
    expected = [pipe.process(points, stamp_ns=stamp, pose=pose).features.copy()
                for points, stamp, pose in frames]
    pipe.reset_sweeps()
    before = compile_count()
    staging = pipe._sweep_staging
    pending, staged = [], []
    for points, stamp, pose in frames:
        pending.append(pipe.dispatch(points, stamp_ns=stamp, pose=pose))
        staged.append((staging.scalars.turn, staging.scalars.current.copy(),
                       staging.motion.current.copy()))
        if len(staged) == 2:      # B was staged into the other arrays: A's are as A left them
            turn, scalars, motion = staged[0]
            assert turn != staged[1][0]
            np.testing.assert_array_equal(staging.scalars.arrays[turn], scalars)
            np.testing.assert_array_equal(staging.motion.arrays[turn], motion)
            assert not np.array_equal(scalars, staged[1][1])
    results = [frame.result() for frame in pending]
    assert [r.sweeps_used for r in results] == [1, 2, 3, 3]
    for result, want in zip(results, expected):
        np.testing.assert_array_equal(result.features, want)
    assert compile_count() == before


@pytest.mark.parametrize('start,point_step,height,row_pad', [
    (0, 16, 1, 0), (0, 22, 1, 0), (3, 23, 1, 0), (5, 24, 4, 0), (2, 21, 4, 7), (0, 16, 3, 1)])
@pytest.mark.parametrize('capacity', [None, 5, 40])
@pytest.mark.parametrize('policy', ['subsample', 'truncate'])
def test_xyzi_runs_are_copied_whole_at_any_offset(start, point_step, height, row_pad, capacity,
                                                  policy):
    """x, y, z, intensity as 16 contiguous native bytes anywhere in a point: copied as such."""
    rng = np.random.default_rng(start + point_step)
    width = 48 // height
    fields = [Field(name, start + 4 * k, FLOAT32)
              for k, name in enumerate('x y z intensity'.split())]
    fields.append(Field('ring', (start + 16) % (point_step - 1), UINT8))
    values = {f.name: sample_values(f.datatype, 48, rng) for f in fields}
    cloud = encode(height, width, fields, values, point_step=point_step,
                   row_step=width * point_step + row_pad)
    full = reference_decode(cloud)
    expected = full if capacity is None else full[reference_rows(48, capacity, policy)]
    for flavour in ('bytes', 'numpy', 'rclpy'):
        out = np.full((50, 4), -7.0, np.float32)
        written, n = read_points(as_flavour(cloud, flavour), capacity, policy, out=out)
        assert n == 48 and written.base is out
        np.testing.assert_array_equal(out[:len(expected)], expected)
        np.testing.assert_array_equal(out[len(expected):], -7.0)
