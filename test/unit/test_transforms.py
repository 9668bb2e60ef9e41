"""The ROS-free transform buffer against 4 x 4 matrices composed by hand in NumPy."""

import math

from jax_perception_node.rotations import matrix_quaternion
from jax_perception_node.transforms import TransformBuffer, TransformError
import numpy as np
import pytest
from reference import quat_matrix
from tf_messages import tf_message, transform

S = 10**9


def matrix(translation, xyzw) -> np.ndarray:
    """Return the homogeneous matrix by the reference's textbook quaternion formula."""
    m = np.eye(4)
    m[:3, :3] = quat_matrix(xyzw)
    m[:3, 3] = translation
    return m


def yaw(degrees):
    half = math.radians(degrees) / 2
    return (0.0, 0.0, math.sin(half), math.cos(half))


def roll(degrees):
    half = math.radians(degrees) / 2
    return (math.sin(half), 0.0, 0.0, math.cos(half))


# map -> odom -> base_link -> {lidar, cam}, and base_link -> mast -> cam2.
LIDAR = ((0.5, -0.25, 1.8), yaw(30.0))
CAM = ((1.0, 0.1, 1.5), (-0.5, 0.5, -0.5, 0.5))
MAST = ((-0.5, 0.0, 2.0), roll(10.0))
CAM2 = ((0.2, 0.3, 0.0), yaw(-100.0))


@pytest.fixture
def tree():
    buffer = TransformBuffer()
    buffer.add_message(tf_message(transform('base_link', 'lidar', 0, *LIDAR),
                                  transform('base_link', 'cam', 0, *CAM),
                                  transform('base_link', 'mast', 0, *MAST),
                                  transform('mast', 'cam2', 0, *CAM2)), static=True)
    buffer.add(transform('map', 'odom', 0, (100.0, 50.0, 0.0), yaw(5.0)), static=True)
    return buffer


def test_a_chain_through_the_common_ancestor_equals_the_hand_composition(tree):
    # lidar -> cam2: up to base_link, down through mast.
    expected = (np.linalg.inv(matrix(*MAST) @ matrix(*CAM2)) @ matrix(*LIDAR))
    np.testing.assert_allclose(tree.lookup('cam2', 'lidar', 5 * S), expected, atol=1e-12)
    np.testing.assert_allclose(tree.lookup('base_link', 'cam', 0), matrix(*CAM), atol=1e-12)
    np.testing.assert_allclose(tree.lookup('lidar', 'base_link', 0),
                               np.linalg.inv(matrix(*LIDAR)), atol=1e-12)
    np.testing.assert_array_equal(tree.lookup('cam', 'cam', 0), np.eye(4))
    # A leading '/' (ROS 1 style, still in some drivers' frame ids) names the same frame, as
    # it does when a transform is stored.
    np.testing.assert_allclose(tree.lookup('/base_link', '/cam', 0), matrix(*CAM), atol=1e-12)
    np.testing.assert_array_equal(tree.lookup('cam', '/cam', 0), np.eye(4))


def test_dynamic_edges_interpolate_linearly_and_by_slerp_at_the_stamp(tree):
    tree.add(transform('odom', 'base_link', 10 * S, (0.0, 0.0, 0.0), yaw(0.0)), static=False)
    tree.add(transform('odom', 'base_link', 11 * S, (4.0, -2.0, 0.4), yaw(40.0)), static=False)
    got = tree.lookup('map', 'lidar', 10 * S + S // 4)
    # A quarter of the way: position (1, -0.5, 0.1), yaw 10 degrees (slerp on one axis).
    base = matrix((1.0, -0.5, 0.1), yaw(10.0))
    expected = matrix((100.0, 50.0, 0.0), yaw(5.0)) @ base @ matrix(*LIDAR)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # At a sample's own stamp, that sample.
    np.testing.assert_allclose(tree.lookup('odom', 'base_link', 11 * S),
                               matrix((4.0, -2.0, 0.4), yaw(40.0)), atol=1e-12)


def test_extrapolation_beyond_the_tolerance_is_refused_naming_the_edge(tree):
    tree.add(transform('odom', 'base_link', 10 * S), static=False)
    tree.add(transform('odom', 'base_link', 11 * S, (1.0, 0.0, 0.0)), static=False)
    with pytest.raises(TransformError, match=r'"lidar" into "map" .* edge "odom" -> '
                                             r'"base_link": extrapolation into the future'):
        tree.lookup('map', 'lidar', 11 * S + S // 10)
    with pytest.raises(TransformError, match='extrapolation into the past'):
        tree.lookup('map', 'lidar', 9 * S)
    # Within the tolerance (10 ms), the newest sample.
    np.testing.assert_allclose(tree.lookup('odom', 'base_link', 11 * S + 5_000_000)[:3, 3],
                               [1.0, 0.0, 0.0])


def test_unknown_frames_and_separate_trees_are_named(tree):
    with pytest.raises(TransformError, match='frame "velodyne" is unknown'):
        tree.lookup('base_link', 'velodyne', 0)
    tree.add(transform('world', 'gps', 0), static=True)
    with pytest.raises(TransformError, match='no path, their trees have the roots "world" '
                                             'and "base_link"'):
        tree.lookup('lidar', 'gps', 0)


def test_history_is_bounded_by_the_cache_duration():
    buffer = TransformBuffer(cache_s=1.0)
    for k in range(31):
        buffer.add(transform('map', 'base_link', k * S // 10, (k, 0.0, 0.0)), static=False)
    np.testing.assert_allclose(buffer.lookup('map', 'base_link', 25 * S // 10)[:3, 3],
                               [25.0, 0.0, 0.0])
    with pytest.raises(TransformError, match='past'):
        buffer.lookup('map', 'base_link', 15 * S // 10)


def test_a_backwards_stamp_resets_the_dynamic_history_not_the_static(tree):
    tree.add(transform('odom', 'base_link', 10 * S), static=False)
    tree.add(transform('odom', 'base_link', 11 * S), static=False)
    tree.add(transform('odom', 'base_link', 2 * S, (7.0, 0.0, 0.0)), static=False)
    assert tree.resets == 1
    with pytest.raises(TransformError):
        tree.lookup('odom', 'base_link', 10 * S + S // 2)
    np.testing.assert_allclose(tree.lookup('odom', 'lidar', 2 * S),
                               matrix((7.0, 0.0, 0.0), (0, 0, 0, 1)) @ matrix(*LIDAR),
                               atol=1e-12)


@pytest.mark.parametrize('change, field', [
    ({'parent': ''}, 'header.frame_id is empty'),
    ({'child': ''}, 'child_frame_id is empty'),
    ({'child': 'base_link'}, 'is its own parent'),
    ({'translation': (math.nan, 0.0, 0.0)}, 'transform.translation'),
    ({'xyzw': (0.0, 0.0, 0.0, 2.0)}, 'transform.rotation .* not a unit quaternion'),
    ({'xyzw': (0.0, math.inf, 0.0, 1.0)}, 'transform.rotation'),
    ({'stamp_ns': -1}, 'header.stamp'),
])
def test_bad_transforms_are_refused_naming_the_field(change, field):
    args = {'parent': 'base_link', 'child': 'lidar', 'stamp_ns': 0,
            'translation': (0.0, 0.0, 0.0), 'xyzw': (0.0, 0.0, 0.0, 1.0)} | change
    msg = transform(args['parent'], args['child'], max(args['stamp_ns'], 0),
                    args['translation'], args['xyzw'])
    if args['stamp_ns'] < 0:
        msg.header.stamp.sec = -1
    buffer = TransformBuffer()
    with pytest.raises(TransformError, match=field):
        buffer.add(msg, static=True)
    with pytest.raises(TransformError, match='unknown'):
        buffer.lookup('base_link', 'lidar', 0)


def test_a_nearly_unit_quaternion_is_normalised_and_a_loop_is_refused(tree):
    q = np.array(yaw(30.0)) * 1.0005
    tree.add(transform('base_link', 'radar', 0, (1.0, 2.0, 3.0), q), static=True)
    np.testing.assert_allclose(tree.lookup('base_link', 'radar', 0),
                               matrix((1.0, 2.0, 3.0), yaw(30.0)), atol=1e-12)
    with pytest.raises(TransformError, match='"base_link" is already an ancestor of "lidar"'):
        tree.add(transform('lidar', 'base_link', 0), static=True)
    # The one bad transform of a message is named; the good one is stored.
    with pytest.raises(TransformError, match='"base_link" -> "bad": transform.rotation'):
        tree.add_message(tf_message(transform('base_link', 'good', 0),
                                    transform('base_link', 'bad', 0, xyzw=(0, 0, 0, 0))),
                         static=True)
    np.testing.assert_array_equal(tree.lookup('base_link', 'good', 0), np.eye(4))


@pytest.mark.parametrize('xyzw', [yaw(30.0), roll(179.0), (0.0, 1.0, 0.0, 0.0),
                                  (0.0, 0.0, 1.0, 0.0), (1.0, 0.0, 0.0, 0.0),
                                  (-0.5, 0.5, -0.5, 0.5), (0.1, -0.7, 0.3, -0.2)])
def test_matrix_quaternion_inverts_the_reference_matrix(xyzw):
    q = matrix_quaternion(quat_matrix(xyzw))
    np.testing.assert_allclose(quat_matrix(q), quat_matrix(xyzw), atol=1e-12)
    assert abs(np.linalg.norm(q) - 1.0) < 1e-12 and q[3] >= 0
