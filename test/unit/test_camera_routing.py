"""Camera routing of the reference head: the outputs routed off the cameras never see them."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax_perception_node.detection.head import HeadInput, load_weights
from jax_perception_node.detection.heads.camera_routing import (
    CAMERA_HIDDEN, camera_outputs, CameraRouting, output_names)
from jax_perception_node.detection.heads.centerpoint import (
    CenterPointHead, CLASSES, OUTPUTS, shipped_weights, WEIGHTS)
import numpy as np
import pytest

LIDAR, CAMERA = 6, 9          # the shipped layout: 6 LiDAR channels, 8 camera ones, coverage


def dense_head(seed: int = 0) -> CenterPointHead:
    """Return a head of the shipped layout whose every weight is drawn, nonzero."""
    model = CenterPointHead.create(LIDAR + CAMERA, seed)
    rng = np.random.default_rng(seed)
    params, static = eqx.partition(model, eqx.is_array)
    params = jax.tree.map(lambda a: jnp.asarray(rng.uniform(0.5, 1.5, a.shape)
                                                * rng.choice([-1.0, 1.0], a.shape),
                                                jnp.float32), params)
    return eqx.combine(params, static)


def bev_pair(seed: int = 1):
    """Return two BEVs [64, 64, 15]: the same LiDAR channels, other camera channels."""
    rng = np.random.default_rng(seed)
    bev = rng.uniform(0.0, 2.0, (64, 64, LIDAR + CAMERA)).astype(np.float32)
    bev[..., 0] = rng.random((64, 64)) < 0.3                    # occupancy
    other = bev.copy()
    other[..., LIDAR:] = rng.uniform(-3.0, 3.0, other[..., LIDAR:].shape)
    return jnp.asarray(bev), jnp.asarray(other)


def split(outputs: dict) -> dict:
    """Return each output channel by its name in output_names() (the classes apart)."""
    flat = np.concatenate([np.asarray(outputs[name]) for name, _ in OUTPUTS], axis=-1)
    return {name: flat[..., k] for k, name in enumerate(output_names())
            if name in CLASSES} | {name: np.asarray(outputs[name]) for name, _ in OUTPUTS[1:]}


def test_output_names_follow_the_output_convolution():
    assert output_names() == CLASSES + ('offset', 'offset', 'z', 'size', 'size', 'size',
                                        'yaw', 'yaw')
    assert len(output_names()) == sum(n for _, n in OUTPUTS)


@pytest.mark.parametrize('classes', [(0, 1), (0,), (2, 3), (), (0, 1, 2, 3)])
def test_outputs_routed_off_are_bit_equal_whatever_finite_values_the_cameras_hold(classes):
    model = CameraRouting(LIDAR, classes).apply(dense_head())
    bev, other = bev_pair()
    a, b = split(model(bev)), split(model(other))
    for name in a:
        if name in [CLASSES[k] for k in classes]:
            assert not np.array_equal(a[name], b[name]), name
        else:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert camera_outputs(model, LIDAR) == tuple(CLASSES[k] for k in classes)


def test_a_dense_head_reads_the_cameras_everywhere():
    model = dense_head()
    assert camera_outputs(model, LIDAR) == tuple(dict.fromkeys(output_names()))
    bev, other = bev_pair()
    a, b = split(model(bev)), split(model(other))
    assert all(not np.array_equal(a[name], b[name]) for name in a)


def test_the_masks_zero_exactly_the_routed_off_weights():
    model = dense_head()
    routed = CameraRouting(LIDAR, (0, 1)).apply(model)
    c, hidden = LIDAR + CAMERA, model.conv1.weight.shape[-1]
    lidar_only = hidden - CAMERA_HIDDEN
    first = np.asarray(routed.conv1.weight)[0, 0]
    camera_rows = list(range(LIDAR, c)) + list(range(c + LIDAR, 2 * c))
    assert np.all(first[camera_rows, :lidar_only] == 0)
    kept = np.ones(first.shape, bool)
    kept[np.ix_(camera_rows, range(lidar_only))] = False
    np.testing.assert_array_equal(first[kept], np.asarray(model.conv1.weight)[0, 0][kept])
    for block, unrouted in zip(routed.blocks, model.blocks):
        pointwise = np.asarray(block.pointwise.weight)[0, 0]
        assert np.all(pointwise[lidar_only:, :lidar_only] == 0)
        np.testing.assert_array_equal(pointwise[:, lidar_only:],
                                      np.asarray(unrouted.pointwise.weight)[0, 0][:, lidar_only:])
    out = np.asarray(routed.out.weight)[0, 0]
    assert np.all(out[lidar_only:, 2:] == 0) and np.all(out[lidar_only:, :2] != 0)
    dense = np.asarray(model.out.weight)[0, 0]
    np.testing.assert_array_equal(out[:lidar_only], dense[:lidar_only])


def test_the_shipped_camera_checkpoint_routes_the_cameras_to_the_vehicles():
    # What the shipped weights were trained with (docs/users.md, "Objects: the learned head").
    spec_input = HeadInput(256, 256, LIDAR + CAMERA, 0.4)
    assert shipped_weights(spec_input) == WEIGHTS
    template, static = eqx.partition(CenterPointHead.create(LIDAR + CAMERA), eqx.is_array)
    model = eqx.combine(load_weights(WEIGHTS, jax.tree.map(np.asarray, template)), static)
    assert camera_outputs(model, LIDAR) == ('car', 'large_vehicle')
    bev, other = bev_pair(3)
    a, b = split(model(bev)), split(model(other))
    for name in ('pedestrian', 'cyclist', 'offset', 'z', 'size', 'yaw'):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
