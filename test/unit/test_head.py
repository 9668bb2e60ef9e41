"""The head plug-in: traced into every bucket, decoded on the device, weights swapped live."""

import functools
import os
import pathlib
import sys

from configs import small_config
import jax.numpy as jnp
from jax_perception_node.core.pipeline import BevPipeline, compile_count
from jax_perception_node.detection.head import HeadInput, load_head, load_weights, save_weights
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
import toy_heads

TOY = 'toy_heads:occupancy_head'


def head_config(module: str = TOY, **overrides):
    """small_config() without cameras (fast) and a head."""
    return small_config(cameras=0, **{'head.module': module, 'head.max_objects': 8,
                                      'head.score_threshold': 0.2, **overrides})


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def voted_centre(heat, offset, i: int, j: int, c: int, reach: int) -> tuple[float, float]:
    """
    Return the centre (output cells) the cells within ``reach`` of (i, j) vote for, by class score.

    Cell (a, b) votes (a, b) + offset[a, b]; a vote more than 1.5 cells from (i, j)'s own is
    another object's and is left out.
    """
    rows, cols = heat.shape[:2]
    own = np.array([i, j]) + offset[i, j]
    total, weighted = 0.0, np.zeros(2)
    for a in range(max(i - reach, 0), min(i + reach + 1, rows)):
        for b in range(max(j - reach, 0), min(j + reach + 1, cols)):
            vote = np.array([a, b]) + offset[a, b]
            if np.hypot(*(vote - own)) <= 1.5:
                total += heat[a, b, c]
                weighted += heat[a, b, c] * vote
    return tuple(weighted / total)


def decode_reference(outputs: dict, grid, stride: int, k: int, threshold: float,
                     nms_radius_m: tuple = (), centre_votes: int = 0) -> np.ndarray:
    """
    Decode as CenterPoint does, written out cell by cell: 3 x 3 peaks per class, best K.

    With ``centre_votes`` the centre is the neighbours' mean vote (:func:`voted_centre`). Then,
    with radii, greedy circle suppression in score order within a class; then the threshold.
    """
    heat = sigmoid(outputs['heatmap'])
    rows, cols, classes = heat.shape
    peaks = []
    for i in range(rows):
        for j in range(cols):
            for c in range(classes):
                around = heat[max(i - 1, 0):i + 2, max(j - 1, 0):j + 2, c]
                if heat[i, j, c] >= around.max():
                    peaks.append((-heat[i, j, c], (i * cols + j) * classes + c, i, j, c))
    peaks.sort()
    x_min, y_min, res = grid.x_min, grid.y_min, grid.resolution
    boxes = []
    offset = np.asarray(outputs['offset'], np.float64)
    for neg, _, i, j, c in peaks[:k]:
        u, v = offset[i, j]
        if centre_votes:
            u, v = np.subtract(voted_centre(heat, offset, i, j, c, centre_votes), (i, j))
        size = np.exp(outputs['size'][i, j])
        sin, cos = outputs['yaw'][i, j]
        boxes.append([x_min + (i + u) * stride * res, y_min + (j + v) * stride * res,
                      outputs['z'][i, j, 0], *size, np.arctan2(sin, cos), -neg, c])
    kept = []
    for box in boxes:
        if nms_radius_m and any(
                other[8] == box[8]
                and np.hypot(other[0] - box[0], other[1] - box[1]) <= nms_radius_m[int(box[8])]
                for other in kept):
            continue
        kept.append(box)
    return np.array([b for b in kept if b[7] >= threshold], np.float64).reshape(-1, 9)


def cluster_cloud(rng, centres, per=40) -> np.ndarray:
    """Points in small clusters around grid-frame centres (LiDAR frame: minus its offset)."""
    offset = np.array([0.25, -0.5, 0.5])
    pts = [np.c_[c + rng.uniform(-0.6, 0.6, (per, 3)) * [1, 1, 0.3] - offset,
                 rng.uniform(0, 50, per)] for c in centres]
    return np.concatenate(pts).astype(np.float32)


@pytest.fixture(scope='module')
def head_pipe(warmed):
    return warmed(head_config())


def test_objects_match_a_numpy_decoding_of_the_heads_outputs(head_pipe):
    rng = np.random.default_rng(3)
    params = {k: np.asarray(v) for k, v in head_pipe.head.params.items()}
    for trial in range(5):
        centres = rng.uniform([-7, -11, -1], [7, 11, 0.5], (rng.integers(1, 12), 3))
        out = head_pipe.process(cluster_cloud(rng, centres))
        want = decode_reference(toy_heads.toy_outputs(params, out.features),
                                head_pipe.cfg.grid, toy_heads.STRIDE, 8, 0.2)
        assert out.objects.dtype == np.float32 and out.objects.shape[1] == 9
        assert len(out.objects) == len(want) > 0
        np.testing.assert_allclose(out.objects, want, rtol=1e-5, atol=1e-5)
        assert out.compiles_after_warmup == 0


def test_every_bucket_runs_the_head_and_none_recompiles(head_pipe):
    before = compile_count()
    for n in (0, 10, 64, 65, 256, 1000, 1024, 5000):
        out = head_pipe.process(np.zeros((n, 4), np.float32) + [1.0, 2.0, 0.0, 5.0])
        assert out.objects is not None and out.head_ms >= 0.0
    assert compile_count() == before
    assert head_pipe.compiles_after_warmup == 0


def test_a_live_weights_swap_compiles_nothing_and_takes_effect(head_pipe, tmp_path):
    rng = np.random.default_rng(5)
    cloud = cluster_cloud(rng, [[2.0, 3.0, 0.0], [-4.0, -6.0, 0.0]])
    old = head_pipe.process(cloud).objects
    swapped = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(-1.25)}
    save_weights(tmp_path / 'w.npz', swapped)
    before = compile_count()
    try:
        head_pipe.set_head_weights(str(tmp_path / 'w.npz'))
        new = head_pipe.process(cloud).objects
    finally:
        head_pipe.set_head_weights('')   # back to the factory's parameters
    assert compile_count() == before
    # z = params z + a term of the cell: the same cells, moved by the new z minus the old.
    np.testing.assert_allclose(new[:, 2] - old[:, 2], -2.0, atol=1e-6)
    np.testing.assert_array_equal(new[:, [0, 1, 7]], old[:, [0, 1, 7]])


def test_bad_weights_are_refused_and_the_old_ones_stay(head_pipe, tmp_path):
    cloud = cluster_cloud(np.random.default_rng(6), [[1.0, 1.0, 0.0]])
    before = head_pipe.process(cloud).objects
    np.savez(tmp_path / 'shape.npz', **{"['scale']": np.ones(3, np.float32),
                                        "['bias']": np.float32(0), "['z']": np.float32(0)})
    np.savez(tmp_path / 'missing.npz', **{"['scale']": np.float32(1)})
    np.savez(tmp_path / 'dtype.npz', **{"['scale']": np.float64(1), "['bias']": np.float32(0),
                                        "['z']": np.float32(0)})
    (tmp_path / 'junk.npz').write_bytes(b'not a zip')
    np.save(tmp_path / 'array.npz.npy', np.ones(3, np.float32))
    (tmp_path / 'array.npz.npy').rename(tmp_path / 'array.npz')        # an .npy by another name
    whole = (tmp_path / 'shape.npz').read_bytes()
    (tmp_path / 'cut.npz').write_bytes(whole[:len(whole) // 2])       # a truncated download
    for name, match in (('shape', r"\['scale'\] is float32\[3\]"), ('missing', 'lacks'),
                        ('dtype', 'float64'), ('junk', 'is not an .npz file'),
                        ('absent', 'cannot read'), ('array', 'is not an .npz file'),
                        ('cut', 'cannot read .* as an .npz')):
        with pytest.raises(ConfigError, match=f'^head.weights: .*{match}'):
            head_pipe.set_head_weights(str(tmp_path / f'{name}.npz'))
    np.testing.assert_array_equal(head_pipe.process(cloud).objects, before)


class Touch:
    """Unpickling this creates a file: proof that a checkpoint was unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def test_a_pickled_checkpoint_is_never_unpickled(tmp_path):
    marker = tmp_path / 'ran'
    payload = np.array([Touch(marker)], dtype=object)
    np.savez(tmp_path / 'w.npz', **{"['scale']": payload})
    with np.load(tmp_path / 'w.npz', allow_pickle=True) as npz:   # positive control
        npz["['scale']"]
    assert marker.exists()
    marker.unlink()
    with pytest.raises(ConfigError, match='head.weights'):
        load_weights(tmp_path / 'w.npz', {'scale': np.float32(0)})
    assert not marker.exists()


def test_bfloat16_weights_load_from_their_own_file_and_raw_bytes_of_another_size_not(tmp_path):
    """np.savez keeps bfloat16 as raw 2-byte items ('|V2'): read back by the template's dtype."""
    bf16 = np.dtype(jnp.bfloat16)
    params = {'scale': np.arange(-3, 3).astype(bf16), 'bias': np.float32(0.5)}
    save_weights(tmp_path / 'w.npz', params)
    with np.load(tmp_path / 'w.npz') as npz:
        assert npz["['scale']"].dtype == np.dtype('V2')     # what makes the view needed
    loaded = load_weights(tmp_path / 'w.npz', params)
    assert loaded['scale'].dtype == bf16
    np.testing.assert_array_equal(loaded['scale'].astype(np.float32), np.arange(-3.0, 3.0))
    with pytest.raises(ConfigError, match=r"\['scale'\] is bfloat16\[6\], the head needs float8"):
        load_weights(tmp_path / 'w.npz', dict(params, scale=np.zeros(6, jnp.float8_e4m3fn)))


def test_raw_bytes_of_another_dtype_of_the_same_size_are_refused_by_the_record(tmp_path):
    # float8_e4m3fn and float8_e4m3fnuz are both '|V1' in the file: read by the template alone,
    # [2, -0.5] came back as [1, -0.25] (the same bytes, another exponent bias).
    e4m3, fnuz = np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e4m3fnuz)
    params = {'scale': np.array([2.0, -0.5], np.float32).astype(e4m3)}
    save_weights(tmp_path / 'w.npz', params)
    with np.load(tmp_path / 'w.npz') as npz:
        assert npz["['scale']"].dtype == np.dtype('V1')
        assert list(npz['raw_dtypes']) == ["['scale']=float8_e4m3fn"]
    np.testing.assert_array_equal(load_weights(tmp_path / 'w.npz', params)['scale']
                                  .astype(np.float32), [2.0, -0.5])
    with pytest.raises(ConfigError, match=r"w.npz \['scale'\] is float8_e4m3fn\[2\], the head "
                                          r'needs float8_e4m3fnuz\[2\]'):
        load_weights(tmp_path / 'w.npz', {'scale': np.zeros(2, fnuz)})
    # A checkpoint written before the record: read by the template, as then.
    with open(tmp_path / 'old.npz', 'wb') as f:
        np.savez(f, **{"['scale']": params['scale']})
    assert load_weights(tmp_path / 'old.npz', {'scale': np.zeros(2, fnuz)})['scale'].dtype == fnuz
    for bad in (np.float32(1), np.asarray(["['scale']="]), np.asarray(['=float8_e4m3fn'])):
        with open(tmp_path / 'bad.npz', 'wb') as f:
            np.savez(f, **{"['scale']": params['scale'], 'raw_dtypes': bad})
        with pytest.raises(ConfigError, match=r"raw_dtypes is .*, not 'leaf=dtype' strings"):
            load_weights(tmp_path / 'bad.npz', params)


def test_every_ml_dtype_round_trips_and_the_record_grows_with_the_names(tmp_path):
    # float8_e5m2 is no raw type to NumPy (kind 'f'): its '<f1' header was written and could not
    # be read back. The record's bound follows the leaves: 3000 long names once passed 1 MiB.
    import ml_dtypes
    names = ('bfloat16', 'float8_e5m2', 'float8_e4m3fn', 'float8_e4m3fnuz', 'int4', 'uint4')
    params = {name: np.arange(4).astype(np.dtype(getattr(ml_dtypes, name))) for name in names}
    save_weights(tmp_path / 'w.npz', params)
    loaded = load_weights(tmp_path / 'w.npz', params)
    for name in names:
        assert loaded[name].dtype == params[name].dtype
        np.testing.assert_array_equal(loaded[name].astype(np.float32), np.arange(4.0))
    many = {'x' * 80 + str(i): np.zeros(1, jnp.bfloat16) for i in range(3000)}
    save_weights(tmp_path / 'many.npz', many)
    assert len(load_weights(tmp_path / 'many.npz', many)) == 3000


def test_the_heads_validate_hook_checks_every_checkpoint_live_swaps_too(tmp_path, monkeypatch):
    calls, check = [], toy_heads.positive_scale

    def positive_scale(params):
        calls.append(float(params['scale']))
        check(params)
    monkeypatch.setattr(toy_heads, 'positive_scale', positive_scale)
    good, bad = tmp_path / 'good.npz', tmp_path / 'bad.npz'
    save_weights(good, {'scale': np.float32(2.5), 'bias': np.float32(-3.0), 'z': np.float32(0)})
    save_weights(bad, {'scale': np.float32(0), 'bias': np.float32(-3.0), 'z': np.float32(0)})
    bev = HeadInput(32, 48, 8, 0.5)
    with pytest.raises(ConfigError, match=f'^head.weights: {bad}: scale must be > 0, got 0.0$'):
        load_head('toy_heads:validated_head', str(bad), bev)          # at start-up
    head = load_head('toy_heads:validated_head', str(good), bev)
    assert head.params['scale'] == 2.5 and calls == [0.0, 2.5]
    with pytest.raises(ConfigError, match=f'^head.weights: {bad}: scale must be > 0'):
        head.checkpoint(str(bad))                                       # a live swap
    target, params = head.checkpoint(str(good))
    assert target == good and params['scale'] == 2.5 and calls == [0.0, 2.5, 0.0, 2.5]
    # No checkpoint (none shipped, head.weights ''): the factory's own parameters, unchecked.
    assert head.checkpoint('')[0] is None and len(calls) == 4


def test_a_validate_hook_that_fails_otherwise_is_named(tmp_path):
    from dataclasses import replace
    from jax_perception_node.detection.head import LoadedHead
    spec = replace(toy_heads.occupancy_head(None), validate=lambda params: params['missing'])
    head = LoadedHead('toy', spec, spec.params, None, 'digest')
    save_weights(tmp_path / 'w.npz', spec.params)
    match = r"^head.weights: .*w.npz: the head plug-in failed to validate it: KeyError: 'missing'"
    with pytest.raises(ConfigError, match=match):
        head.checkpoint(str(tmp_path / 'w.npz'))

    def exiting(params):
        raise SystemExit(4)
    head = LoadedHead('toy', replace(spec, validate=exiting), spec.params, None, 'digest')
    with pytest.raises(ConfigError, match=r'failed to validate it: SystemExit: 4$'):
        head.checkpoint(str(tmp_path / 'w.npz'))


def test_features_stay_unfetched_when_not_asked_for(head_pipe):
    cloud = cluster_cloud(np.random.default_rng(7), [[0.0, 0.0, 0.0]])
    pending = head_pipe.dispatch(cloud)
    first = pending.result(features=False)
    assert first.features is None and len(first.objects) >= 1
    full = pending.result()
    assert full.features.shape == (32, 48, 7)
    np.testing.assert_array_equal(full.objects, first.objects)


def test_a_frame_with_the_head_paused_has_no_objects_and_the_same_bev(head_pipe):
    cloud = cluster_cloud(np.random.default_rng(9), [[2.0, 3.0, 0.0], [-4.0, 5.0, 0.0]])
    before = compile_count()
    with_head = head_pipe.process(cloud)
    with head_pipe.head_paused():
        paused = head_pipe.dispatch(cloud)
        also = head_pipe.process(cloud)
    # Started inside, fetched outside: the frame was dispatched without the head.
    assert paused.result().objects is None and also.objects is None
    np.testing.assert_array_equal(also.features, with_head.features)
    again = head_pipe.process(cloud)
    assert len(with_head.objects) >= 1
    np.testing.assert_array_equal(again.objects, with_head.objects)
    with pytest.raises(RuntimeError), head_pipe.head_paused():
        raise RuntimeError('a frame failed')
    assert head_pipe.process(cloud).objects is not None      # restored on an error too
    assert compile_count() == before


def test_two_classes_keep_their_own_peaks(warmed):
    pipe = warmed(head_config('toy_heads:two_class_head', **{'head.score_threshold': 0.0}))
    assert pipe.head_classes == ('car', 'pedestrian')
    # A filled 2 m square: whole 2 x 2 blocks occupied, vehicle logit 5 beats pedestrian 3.
    x, y = np.meshgrid(np.arange(2.05, 4.0, 0.25), np.arange(-2.95, -1.0, 0.25))
    square = np.c_[x.ravel() - 0.25, y.ravel() + 0.5, np.full(x.size, -0.5), np.ones(x.size)]
    out = pipe.process(square.astype(np.float32))
    params = {k: np.asarray(v) for k, v in pipe.head.params.items()}
    outputs = toy_heads.toy_outputs(params, out.features)
    outputs['heatmap'] = np.concatenate([outputs['heatmap'], -outputs['heatmap']], -1)
    want = decode_reference(outputs, pipe.cfg.grid, toy_heads.STRIDE, 8, 0.0)
    np.testing.assert_allclose(out.objects, want, rtol=1e-5, atol=1e-5)
    assert set(out.objects[:, 8]) == {0.0, 1.0}


def decoded_scenes(warmed, module: str, outputs_of, seed: int):
    """
    Yield (boxes the pipeline decoded, their reference) for four scenes of toy head ``module``.

    The reference is ``decode_reference`` of the scene's head outputs (``outputs_of(params,
    BEV)``), K 8 and threshold 0; call it with the radii and options to compare with.
    """
    pipe = warmed(head_config(module, **{'head.score_threshold': 0.0}))
    rng = np.random.default_rng(seed)
    params = {k: np.asarray(v) for k, v in pipe.head.params.items()}
    for trial in range(4):
        centres = rng.uniform([-7, -11, -1], [7, 11, 0.5], (rng.integers(4, 14), 3))
        out = pipe.process(cluster_cloud(rng, centres))
        assert out.compiles_after_warmup == 0
        yield out.objects, functools.partial(decode_reference, outputs_of(params, out.features),
                                             pipe.cfg.grid, toy_heads.STRIDE, 8, 0.0)


def test_circle_nms_on_the_device_matches_a_greedy_reference(warmed):
    dropped = 0
    for got, reference in decoded_scenes(warmed, 'toy_heads:nms_head', toy_heads.toy_outputs, 11):
        want = reference(toy_heads.NMS_RADIUS_M)
        dropped += len(reference()) - len(want)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dropped > 0          # the suppression had something to do


def test_voted_centres_on_the_device_match_a_cell_by_cell_reference(warmed):
    moved = 0
    for got, reference in decoded_scenes(warmed, 'toy_heads:voting_head',
                                         toy_heads.voting_outputs, 5):
        want = reference(toy_heads.NMS_RADIUS_M, centre_votes=1)
        peak_cell = reference(toy_heads.NMS_RADIUS_M)
        moved += (want.shape != peak_cell.shape
                  or not np.allclose(want[:, :2], peak_cell[:, :2], atol=1e-3))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert moved > 0            # the neighbours' votes changed centres


def test_a_peak_takes_the_mean_vote_of_its_cells_and_not_a_neighbours():
    import jax.numpy as jnp
    from jax_perception_node.core.box_decode import decode_boxes
    # 1 m output cells. Object A peaks at (2, 2) (logit 4: 0.982) and its neighbours (1, 2)
    # and (2, 3) (logit 0: 0.5) vote for it too: (2.4, 2.5), (2.6, 2.5), (2.2, 2.9). Cell
    # (3, 2) votes for object B at (4.6, 1.1), 2.6 cells from A's vote: left out of A's mean.
    logits = np.full((5, 5, 1), -20.0, np.float32)
    logits[2, 2], logits[1, 2], logits[2, 3], logits[3, 2] = 4.0, 0.0, 0.0, 0.0
    offset = np.zeros((5, 5, 2), np.float32)
    offset[2, 2], offset[1, 2], offset[2, 3] = (0.4, 0.5), (1.6, 0.5), (0.2, -0.1)
    offset[3, 2] = (1.6, -0.9)
    outputs = {'heatmap': jnp.asarray(logits), 'offset': jnp.asarray(offset),
               'z': jnp.zeros((5, 5, 1)), 'size': jnp.zeros((5, 5, 3)),
               'yaw': jnp.asarray(np.dstack([np.zeros((5, 5)), np.ones((5, 5))]))}
    grid = jnp.asarray([0.0, 0.0, -2.0, 2.0, 1.0], jnp.float32)
    box = np.asarray(decode_boxes(outputs, grid, stride=1, max_objects=1, centre_votes=1))[0]
    p = 1.0 / (1.0 + np.exp(-4.0))
    want = (p * np.array([2.4, 2.5]) + 0.5 * np.array([2.6, 2.5]) + 0.5 * np.array([2.2, 2.9]))
    np.testing.assert_allclose(box[:2], want / (p + 1.0), rtol=1e-6)
    alone = np.asarray(decode_boxes(outputs, grid, stride=1, max_objects=1))[0]
    np.testing.assert_allclose(alone[:2], [2.4, 2.5], rtol=1e-6)


def test_circle_nms_is_greedy_per_class_and_keeps_sorted_rows():
    import jax.numpy as jnp
    from jax_perception_node.core.box_decode import decode_boxes
    # One output row of cells 1 m apart (stride 1, resolution 1): class 0 peaks at columns
    # 0, 2, 4 (scores falling), class 1 at column 1. Radius 2.5 m for class 0: column 2 is
    # dropped by column 0; column 4 is within 2.5 m of column 2 only, which was dropped, so
    # it stays (a suppression by suppressed boxes would lose it); class 1 is never suppressed
    # by class 0.
    logits = np.full((1, 7, 2), -9.0, np.float32)
    logits[0, [0, 2, 4], 0] = [4.0, 3.0, 2.0]
    logits[0, 1, 1] = 1.0
    zeros = np.zeros((1, 7, 2), np.float32)
    outputs = {'heatmap': jnp.asarray(logits), 'offset': jnp.asarray(zeros),
               'z': jnp.zeros((1, 7, 1)), 'size': jnp.zeros((1, 7, 3)),
               'yaw': jnp.asarray(np.dstack([np.zeros((1, 7)), np.ones((1, 7))]))}
    grid = jnp.asarray([0.0, 0.0, -2.0, 2.0, 1.0], jnp.float32)
    boxes = np.asarray(decode_boxes(outputs, grid, stride=1, max_objects=5,
                                    nms_radius_m=(2.5, 0.1)))
    kept = boxes[boxes[:, 7] > 0.5]
    assert sorted(zip(kept[:, 1], kept[:, 8])) == [(0.0, 0.0), (1.0, 1.0), (4.0, 0.0)]
    assert np.all(np.diff(boxes[:, 7]) <= 0)          # sorted by score, dropped rows last
    plain = np.asarray(decode_boxes(outputs, grid, stride=1, max_objects=5))
    assert sorted(plain[plain[:, 7] > 0.5][:, 1]) == [0.0, 1.0, 2.0, 4.0]


@pytest.mark.parametrize('peaks', [20, 64, 200])
def test_circle_nms_follows_a_long_chain_of_suppressions_exactly(peaks):
    import jax.numpy as jnp
    from jax_perception_node.core.box_decode import decode_boxes, nms_updates
    # Peaks every 2 m along one row, scores falling, radius 2.5 m: each box is within reach of
    # its neighbours only. Greedy: 0 kept, 2 dropped by 0, 4 kept (its suppressor 2 was
    # dropped), 6 dropped by 4, ...: whether a box is kept depends on every box before it.
    # 20 peaks: the whole-vector updates reach the answer; 64: they stop at their cap and the
    # greedy pass finishes; 200: the greedy pass alone.
    assert nms_updates(20) >= 20 and 0 < nms_updates(64) < 64 and nms_updates(200) == 0
    cells = 2 * peaks
    columns = np.arange(0, cells, 2)
    logits = np.full((1, cells, 1), -9.0, np.float32)
    logits[0, columns, 0] = np.linspace(5.0, 1.0, columns.size)
    zeros = np.zeros((1, cells, 2), np.float32)
    outputs = {'heatmap': jnp.asarray(logits), 'offset': jnp.asarray(zeros),
               'z': jnp.zeros((1, cells, 1)), 'size': jnp.zeros((1, cells, 3)),
               'yaw': jnp.asarray(np.dstack([np.zeros((1, cells)), np.ones((1, cells))]))}
    grid = jnp.asarray([0.0, 0.0, -2.0, 2.0, 1.0], jnp.float32)
    boxes = np.asarray(decode_boxes(outputs, grid, stride=1, max_objects=peaks,
                                    nms_radius_m=(2.5,)))
    kept = []
    for column in columns:              # the greedy pass, written out
        if all(abs(column - other) > 2.5 for other in kept):
            kept.append(column)
    assert kept == list(range(0, cells, 4))
    assert sorted(boxes[boxes[:, 7] > 0][:, 1]) == kept


def test_per_class_thresholds_apply_live_and_a_wrong_count_is_refused(warmed):
    from jax_perception_node.core.frame_result import class_thresholds
    from jax_perception_node.settings.config import HeadConfig
    pipe = warmed(head_config('toy_heads:two_class_head', **{'head.score_threshold': 0.0}))
    x, y = np.meshgrid(np.arange(2.05, 4.0, 0.25), np.arange(-2.95, -1.0, 0.25))
    square = np.c_[x.ravel() - 0.25, y.ravel() + 0.5, np.full(x.size, -0.5), np.ones(x.size)]
    every = pipe.process(square.astype(np.float32)).objects
    assert set(every[:, 8]) == {0.0, 1.0}
    pipe.score_threshold = class_thresholds(HeadConfig(score_thresholds=(0.0, 1.0)),
                                            pipe.head_classes)
    before = compile_count()
    out = pipe.process(square.astype(np.float32))
    np.testing.assert_array_equal(out.objects, every[every[:, 8] == 0.0])
    assert compile_count() == before
    with pytest.raises(ConfigError, match=r'head.score_thresholds: 3 values .* 2 classes'):
        class_thresholds(HeadConfig(score_thresholds=(0.1, 0.2, 0.3)), pipe.head_classes)
    assert class_thresholds(HeadConfig(score_threshold=0.4), pipe.head_classes) == 0.4


@pytest.mark.parametrize('module, match', [
    ('toy_heads', "expected 'package.module:factory'"),
    ('no_such_module_xyz:head', 'cannot import no_such_module_xyz'),
    ('toy_heads:missing', 'has no callable missing'),
    ('toy_heads:wrong_keys_head', 'must return'),
    ('toy_heads:not_a_spec_head', 'returned dict, not a HeadSpec'),
    ('toy_heads:string_top_head', "gives intensity_top '255': a finite number >= 0"),
    ('toy_heads:infinite_top_head', 'gives intensity_top inf: a finite number >= 0'),
    ('toy_heads:negative_votes_head', r'gives centre_votes -1: an integer 0 \.\. 8'),
    ('toy_heads:many_votes_head', r'gives centre_votes 9: an integer 0 \.\. 8'),
    ('toy_heads:float_stride_head', r'an integer stride >= 1, gives 2.0'),
])
def test_a_bad_head_module_is_refused_by_name(module, match):
    with pytest.raises(ConfigError, match=f'^head.module: .*{match}'):
        load_head(module, '', HeadInput(32, 48, 8, 0.5))


def test_a_plug_in_that_exits_at_import_build_or_trace_is_one_line_naming_the_key(
        tmp_path, monkeypatch):
    """A script made a module (argparse at module level) exits on the node's argv: no exit."""
    (tmp_path / 'script_head.py').write_text(
        'import argparse\nargparse.ArgumentParser().parse_args(["--ros-args"])\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r'^head.module: cannot import script_head: '
                                          r'SystemExit: 2$'):
        load_head('script_head:head', '', HeadInput(32, 48, 8, 0.5))
    # Or in its factory, or in its apply as it is traced: the same, naming head.module.
    with pytest.raises(ConfigError, match=r'^head.module: toy_heads:argparse_factory_head '
                                          r'failed: SystemExit: 2$'):
        load_head('toy_heads:argparse_factory_head', '', HeadInput(32, 48, 8, 0.5))
    with pytest.raises(ConfigError, match=r'^head.module: toy_heads:exiting_apply_head cannot '
                                          r'run on a 32 x 48 x 8 BEV: SystemExit: 3$'):
        load_head('toy_heads:exiting_apply_head', '', HeadInput(32, 48, 8, 0.5))


def test_a_head_may_give_its_numbers_as_numpy_scalars():
    head = load_head('toy_heads:numpy_numbers_head', '', HeadInput(32, 48, 8, 0.5))
    assert (type(head.spec.stride), type(head.spec.centre_votes)) == (int, int)
    assert head.spec.centre_votes == 1 and head.spec.intensity_top == 255.0


def test_a_checkpoint_of_another_image_encoder_is_refused(tmp_path):
    bev = HeadInput(32, 48, 8, 0.5, encoder='pkg.encoders:rgb')
    head = load_head(TOY, '', bev)
    for trained_with, fits in (('pkg.encoders:cnn', False), ('pkg.encoders:rgb', True),
                               ('', True)):        # none recorded: feature maps, taken as is
        path = tmp_path / f'{trained_with or "none"}.npz'
        save_weights(path, head.params, encoder=trained_with)
        if fits:
            load_head(TOY, str(path), bev)
            continue
        with pytest.raises(ConfigError, match='trained with the image encoder pkg.encoders:cnn, '
                                              'this configuration has pkg.encoders:rgb'):
            load_head(TOY, str(path), bev)


def test_a_stride_that_does_not_divide_the_grid_is_refused():
    with pytest.raises(ConfigError, match='stride 2, which does not divide'):
        load_head(TOY, '', HeadInput(31, 48, 8, 0.5))


def test_the_store_keys_on_the_head(tmp_path):
    """Same head: every executable from the store; another K or head: the head's compiled."""
    store = str(tmp_path / 'xla')
    first = BevPipeline(head_config(compilation_cache_dir=store))
    first.warmup()
    buckets = len(first.padder.sizes)
    assert first.store.misses == buckets + 1      # the frames, and the head's own
    again = BevPipeline(head_config(compilation_cache_dir=store))
    before = compile_count()
    again.warmup()
    assert (again.store.hits, again.store.misses) == (buckets + 1, 0)
    assert compile_count() == before       # loaded, not compiled
    other = BevPipeline(head_config(compilation_cache_dir=store, **{'head.max_objects': 9}))
    other.warmup()
    assert (other.store.hits, other.store.misses) == (buckets, 1)
    # Another head's code: its own executable; the frames do not depend on the head.
    two = BevPipeline(head_config('toy_heads:two_class_head', compilation_cache_dir=store))
    two.warmup()
    assert (two.store.hits, two.store.misses) == (buckets, 1)


def test_the_store_key_covers_the_source_of_the_heads_package(tmp_path, monkeypatch):
    """A change anywhere in the head's package, not only the factory's module, recompiles it."""
    package = tmp_path / 'plugins' / 'myheads'
    package.mkdir(parents=True)
    (package / '__init__.py').write_text('')
    (package / 'net.py').write_text('SCALE = 1.0\n')
    (package / 'toy.py').write_text('from toy_heads import occupancy_head  # noqa: F401\n')
    monkeypatch.syspath_prepend(str(tmp_path / 'plugins'))
    store = str(tmp_path / 'xla')

    def warm():
        pipe = BevPipeline(head_config('myheads.toy:occupancy_head',
                                       compilation_cache_dir=store))
        pipe.warmup()
        return pipe.store.hits, pipe.store.misses
    buckets = len(small_config(cameras=0).buckets)
    assert warm() == (0, buckets + 1)
    assert warm() == (buckets + 1, 0)
    (package / 'net.py').write_text('SCALE = 2.0\n')      # the factory's module is unchanged
    # This process runs the package it imported: its key stays (an upgrade on disk must not
    # store old code under the new source's key).
    assert warm() == (buckets + 1, 0)
    # A process importing the changed package: its head compiles anew.
    from jax_perception_node.detection import plugin
    monkeypatch.setattr(plugin, 'LOADED_DIGESTS', {})
    for name in [name for name in sys.modules if name.split('.')[0] == 'myheads']:
        monkeypatch.delitem(sys.modules, name)
    assert warm() == (buckets, 1)


def test_a_live_parameter_change_swaps_the_weights_through_the_frame_path(tmp_path):
    """FramePath.update (the node's parameter callback, replay): new weights, 0 compiles."""
    from dataclasses import replace
    from jax_perception_node.frames.frame_path import FramePath
    cfg = head_config()
    pipe = BevPipeline(cfg)
    pipe.warmup()
    path = FramePath(cfg, pipe)
    save_weights(tmp_path / 'w.npz', {'scale': np.float32(2.0), 'bias': np.float32(-3.0),
                                      'z': np.float32(-0.5)})
    before = compile_count()
    path.update(replace(cfg, head=replace(cfg.head, weights=str(tmp_path / 'w.npz'),
                                          score_threshold=0.5)))
    assert pipe.head_weights == tmp_path / 'w.npz' and pipe.score_threshold == 0.5
    out = pipe.process(cluster_cloud(np.random.default_rng(9), [[1.0, 2.0, 0.0]]))
    new = {'scale': np.float32(2.0), 'bias': np.float32(-3.0), 'z': np.float32(-0.5)}
    want = decode_reference(toy_heads.toy_outputs(new, out.features), cfg.grid,
                            toy_heads.STRIDE, 8, 0.5)
    assert len(out.objects) and (out.objects[:, 7] >= 0.5).all()
    np.testing.assert_allclose(out.objects, want, rtol=1e-5, atol=1e-5)
    # A refused change (bad weights) changes nothing, the threshold included.
    bad = replace(cfg, head=replace(cfg.head, weights=str(tmp_path / 'absent.npz'),
                                    score_threshold=0.9))
    with pytest.raises(ConfigError, match='head.weights'):
        path.update(bad)
    assert pipe.head_weights == tmp_path / 'w.npz' and pipe.score_threshold == 0.5
    # The same file retrained in place and its name set again: read again (before, the name
    # unchanged, the old weights stayed while the node said the change was applied).
    retrained = {**new, 'z': np.float32(1.25)}
    save_weights(tmp_path / 'w.npz', retrained)
    path.update(path.cfg, keys_set={'head.weights'})
    out = pipe.process(cluster_cloud(np.random.default_rng(9), [[1.0, 2.0, 0.0]]))
    want = decode_reference(toy_heads.toy_outputs(retrained, out.features), cfg.grid,
                            toy_heads.STRIDE, 8, 0.5)
    np.testing.assert_allclose(out.objects, want, rtol=1e-5, atol=1e-5)
    assert compile_count() == before


def _broken(change: dict):
    """Return a factory of the toy head with ``change`` replaced in its spec."""
    from dataclasses import replace

    def factory(head_input):
        return replace(toy_heads.occupancy_head(head_input), **change)
    return factory


def _nested_outputs(params, bev):
    out = toy_heads.toy_outputs(params, bev)
    return {**out, 'size': {'log': out['size']}}


@pytest.mark.parametrize('change, match', [
    # Names are published as class ids and matched to the ground truth: a tuple of distinct str.
    ({'classes': (0,)}, r'gives classes \(0,\): a tuple of distinct, non-empty names'),
    ({'classes': ('car', 'car')}, r"gives classes \('car', 'car'\)"),
    ({'classes': None}, 'gives classes None'),
    ({'classes': 'car'}, "gives classes 'car'"),
    ({'classes': (['car'],)}, r"gives classes \(\['car'\],\)"),     # unhashable: no set
    ({'nms_radius_m': 2.0}, 'gives nms_radius_m 2.0: one positive radius'),
    ({'nms_radius_m': ('2',)}, r"gives nms_radius_m \('2',\)"),
    ({'apply': _nested_outputs}, "output 'size' is a dict, not one array"),
])
def test_a_head_spec_of_the_wrong_kind_is_one_line_naming_it(monkeypatch, change, match):
    # These were tracebacks (AttributeError, TypeError) or passed and failed every frame.
    monkeypatch.setattr(toy_heads, 'broken_head', _broken(change), raising=False)
    with pytest.raises(ConfigError, match=f'^head.module: toy_heads:broken_head {match}'):
        load_head('toy_heads:broken_head', '', HeadInput(32, 48, 8, 0.5))


def test_a_factorys_float64_parameters_are_its_float32_checkpoints_layout(monkeypatch, tmp_path):
    """Float64 (NumPy's default) runs as float32: a float32 checkpoint of it was refused."""
    wide = {'scale': np.float64(2.0), 'bias': -3.0, 'z': np.float64(0.75)}
    monkeypatch.setattr(toy_heads, 'wide_head', _broken({'params': wide}), raising=False)
    head = load_head('toy_heads:wide_head', '', HeadInput(32, 48, 8, 0.5))
    assert {k: v.dtype for k, v in head.params.items()} == dict.fromkeys(wide, np.float32)
    trained = {'scale': np.float32(4.0), 'bias': np.float32(-1.0), 'z': np.float32(0.5)}
    save_weights(tmp_path / 'trained.npz', trained)
    loaded = load_head('toy_heads:wide_head', str(tmp_path / 'trained.npz'),
                       HeadInput(32, 48, 8, 0.5))
    assert loaded.params == trained
    # A checkpoint holds what runs: float64 arrays are refused naming their dtype.
    save_weights(tmp_path / 'wide.npz', {k: np.float64(v) for k, v in wide.items()})
    with pytest.raises(ConfigError, match=r'^head\.weights: .*wide\.npz \[.*\] is float64'):
        load_head('toy_heads:wide_head', str(tmp_path / 'wide.npz'), HeadInput(32, 48, 8, 0.5))


def test_a_factorys_non_finite_parameters_are_refused_naming_the_module(monkeypatch):
    """A NaN in the factory's own parameters: the head found nothing, the BEV held NaN, unsaid."""
    from jax_perception_node.detection.plugin import factory_params
    with pytest.raises(ConfigError, match=r"^encoder\.module: the factory's parameters hold "
                                          r"non-finite values in \['z'\]"):
        factory_params({'scale': np.float32(2.0), 'z': np.float32(np.nan)}, 'encoder.module')
    monkeypatch.setattr(toy_heads, 'nan_head', _broken({'params': {
        'scale': np.float32(2.0), 'bias': np.float32(np.inf), 'z': np.float32(0.75)}}),
        raising=False)
    with pytest.raises(ConfigError, match=r"^head\.module: the factory's parameters hold "
                                          r"non-finite values in \['bias'\]"):
        load_head('toy_heads:nan_head', '', HeadInput(32, 48, 8, 0.5))


def test_radii_given_as_an_array_are_the_nodes_tuple(monkeypatch):
    monkeypatch.setattr(toy_heads, 'array_nms_head', _broken({'nms_radius_m': np.array([2.0])}),
                        raising=False)
    head = load_head('toy_heads:array_nms_head', '', HeadInput(32, 48, 8, 0.5))
    assert head.spec.nms_radius_m == (2.0,) and head.spec.classes == ('car',)


def test_the_heads_store_key_covers_its_input_and_its_packages_data_files(tmp_path):
    from jax_perception_node.detection.plugin import source_digest
    # A factory may trace its input in as a constant (a box size in cells): the same shapes
    # on a grid of another resolution must not reuse its executable.
    head = load_head('toy_heads:occupancy_head', '', HeadInput(32, 48, 8, 0.5))
    other = load_head('toy_heads:occupancy_head', '', HeadInput(32, 48, 8, 0.25))
    assert head.identity != other.identity
    # A data file its factory reads (a table of sizes) counts as its code does.
    package = tmp_path / 'myheads'
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'head.py').write_text('SIZES = "sizes.json"\n')
    (package / 'sizes.json').write_text('[4.5, 1.9, 1.6]')
    from types import SimpleNamespace
    module = SimpleNamespace(__name__='myheads.head', __file__=str(package / 'head.py'))
    before = source_digest(module)
    (package / 'sizes.json').write_text('[6.0, 2.5, 3.0]')
    assert source_digest(module) != before
    (package / '__pycache__').mkdir()
    (package / '__pycache__' / 'head.cpython-311.pyc').write_bytes(b'compiled')
    after = source_digest(module)
    (package / '__pycache__' / 'head.cpython-311.pyc').write_bytes(b'recompiled')
    assert source_digest(module) == after             # compiled bytecode is not source
    # Beside the package (a checkout's other files, site-packages) is not the package: the
    # folder above it was hashed whole (for the shipped head, the checkout with its venv).
    (tmp_path / 'beside.txt').write_text('another package')
    assert source_digest(module) == after
    inner = SimpleNamespace(__name__='myheads', __file__=str(package / '__init__.py'))
    nested = SimpleNamespace(__name__='myheads.sub.head',
                             __file__=str(package / 'sub' / 'head.py'))
    (package / 'sub').mkdir()
    (package / 'sub' / 'head.py').write_text('')
    assert source_digest(nested) == source_digest(SimpleNamespace(
        __name__='myheads.head', __file__=str(package / 'head.py')))
    # The factory in the package's __init__ (head.module: myheads:factory): the whole package
    # too (only __init__.py was hashed: an edit to head.py loaded the old executable).
    assert source_digest(inner) == source_digest(nested)
    single = SimpleNamespace(__name__='beside', __file__=str(tmp_path / 'beside.txt'))
    digests = source_digest(single), source_digest(inner)
    (package / 'head.py').write_text('SIZES = "other.json"\n')
    # A top-level module is its own file, not its folder's; the package's __init__ sees head.py.
    assert source_digest(single) == digests[0] and source_digest(inner) != digests[1]


def test_a_single_file_heads_key_covers_the_modules_it_imports_from_its_folder(
        tmp_path, monkeypatch):
    # head.module: my_head:factory with my_layers.py beside it: an edit to my_layers.py
    # loaded the old executable from the store (only my_head.py was hashed).
    import importlib
    import sys
    from jax_perception_node.detection.plugin import source_digest
    (tmp_path / 'my_layers.py').write_text('BIAS = -3.0\n')
    (tmp_path / 'my_head.py').write_text('import my_layers\n')
    (tmp_path / 'unrelated.py').write_text('X = 1\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module('my_head')
        before = source_digest(module)
        (tmp_path / 'unrelated.py').write_text('X = 2\n')      # never imported: not its code
        assert source_digest(module) == before
        (tmp_path / 'my_layers.py').write_text('BIAS = 3.0\n')
        assert source_digest(module) != before
    finally:
        for name in ('my_head', 'my_layers'):
            sys.modules.pop(name, None)


@pytest.mark.parametrize('where', ['factory', 'apply'])
def test_a_module_a_one_file_head_imports_only_when_built_keys_it_too(
        tmp_path, monkeypatch, where):
    """Found by an independent review: the digest was taken before the factory ran."""
    from jax_perception_node.detection import plugin
    (tmp_path / 'lazy_layers.py').write_text('BIAS = 0.0\n')
    imports = {'factory': ('    import lazy_layers\n', ''),
               'apply': ('', '        import lazy_layers\n')}[where]
    (tmp_path / 'lazy_head.py').write_text(
        'import toy_heads\n'
        'from jax_perception_node.detection.head import HeadSpec\n'
        'def head(bev):\n' + imports[0]
        + '    def apply(params, bev):\n' + imports[1]
        + '        return toy_heads.toy_outputs(params, bev)\n'
        '    return HeadSpec(apply, toy_heads.occupancy_head(bev).params, toy_heads.STRIDE, '
        "('car',))\n"
        'plain = toy_heads.occupancy_head\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin, 'LOADED_DIGESTS', {})
    for name in ('lazy_head', 'lazy_layers'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    plain = load_head('lazy_head:plain', '', HeadInput(32, 48, 8, 0.5))  # imports nothing
    head = load_head('lazy_head:head', '', HeadInput(32, 48, 8, 0.5))
    assert head.source_digest != plain.source_digest     # its own, with what it imported
    (tmp_path / 'lazy_layers.py').write_text('BIAS = 3.0\n')
    assert plugin.source_digest(sys.modules['lazy_head']) != head.source_digest
    # A module it imports is in its key: the same as the digest of all it loaded.
    (tmp_path / 'lazy_layers.py').write_text('BIAS = 0.0\n')
    assert plugin.source_digest(sys.modules['lazy_head']) == head.source_digest
    for name in ('lazy_head', 'lazy_layers'):
        sys.modules.pop(name, None)


def test_a_head_with_a_host_callback_serves_though_the_store_cannot_keep_it(
        monkeypatch, tmp_path):
    # jax.debug.print in apply: the executable holds a Python callback, which cannot be
    # pickled into the store; the warm-up raised and the node did not start.
    import jax

    def apply(params, bev):
        jax.debug.callback(lambda total: None, bev.sum())
        return toy_heads.toy_outputs(params, bev)
    monkeypatch.setattr(toy_heads, 'calling_head', _broken({'apply': apply}), raising=False)
    cfg = small_config(cameras=0, **{'head.module': 'toy_heads:calling_head',
                                     'compilation_cache_dir': str(tmp_path / 'store')})
    pipe = BevPipeline(cfg)
    pipe.warmup()
    assert pipe.store.write_errors >= 1          # the head's: not stored, compiled each start
    before = compile_count()
    out = pipe.process(np.ones((10, 4), np.float32))
    assert out.objects is not None and compile_count() == before


def test_a_head_failing_as_it_runs_is_one_line_naming_it_and_the_next_frame_serves(
        monkeypatch):
    """Found by an independent review: a raising host callback came out as tracebacks."""
    import jax
    fail = {'now': True}

    def check(total):
        if fail['now']:
            raise RuntimeError('my head cannot take this BEV')
        return total

    def apply(params, bev):
        total = jax.pure_callback(check, jax.ShapeDtypeStruct((), jnp.float32), bev.sum())
        return toy_heads.toy_outputs(params, bev + 0.0 * total)
    monkeypatch.setattr(toy_heads, 'failing_head', _broken({'apply': apply}), raising=False)
    pipe = BevPipeline(head_config('toy_heads:failing_head'))
    message = (r'^head.module toy_heads:failing_head: failed as it ran: RuntimeError: my head '
               r'cannot take this BEV$')
    with pytest.raises(ConfigError, match=message):
        pipe.warmup()
    fail['now'] = False
    pipe = BevPipeline(head_config('toy_heads:failing_head'))
    pipe.warmup()
    before, cloud = compile_count(), np.ones((10, 4), np.float32)
    fail['now'] = True
    with pytest.raises(ConfigError, match=message):
        pipe.process(cloud)
    fail['now'] = False
    assert pipe.process(cloud).objects is not None and compile_count() == before


def test_a_plug_in_failing_as_it_runs_leaves_no_traceback_at_the_process_exit(tmp_path):
    """JAX raised the failed run's error again from its atexit hooks: two more tracebacks."""
    import subprocess
    script = tmp_path / 'fails.py'
    script.write_text(
        'import jax, jax.numpy as jnp, toy_heads\n'
        'from configs import small_config\n'
        'from jax_perception_node import BevPipeline, ConfigError\n'
        'from dataclasses import replace\n'
        'def boom(total):\n'
        '    raise RuntimeError("boom")\n'
        'def apply(params, bev):\n'
        '    total = jax.pure_callback(boom, jax.ShapeDtypeStruct((), jnp.float32), bev.sum())\n'
        '    return toy_heads.toy_outputs(params, bev + 0.0 * total)\n'
        'toy_heads.failing = lambda inp: replace(toy_heads.occupancy_head(inp), apply=apply)\n'
        'pipe = BevPipeline(small_config(cameras=0, **{"head.module": "toy_heads:failing"}))\n'
        'try:\n'
        '    pipe.warmup()\n'
        'except ConfigError as exc:\n'
        '    print(exc)\n')
    test_dir = pathlib.Path(__file__).parents[1]
    paths = os.pathsep.join(map(str, (test_dir, test_dir.parent)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, 'PYTHONPATH': paths})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ('head.module toy_heads:failing: failed as it ran: '
                                   'RuntimeError: boom')
    assert 'Exception ignored' not in done.stderr, done.stderr
