"""The ROS-free transform buffer against 4 x 4 matrices composed by hand in NumPy."""

import math

from jax_perception_node.geometry.rotations import matrix_quaternion
from jax_perception_node.geometry.transforms import (CLOCK_JUMP_S, MAX_FRAMES, TransformBuffer,
                                                     TransformError)
import numpy as np
import pytest
from reference import quat_matrix
from tf_messages import tf_message, transform

S = 10**9
MS = 10**6


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


def test_the_latest_common_time_is_the_oldest_newest_sample_of_the_dynamic_edges_between(tree):
    assert tree.latest_ns('map', 'lidar') is None       # static only: no time
    tree.add(transform('odom', 'base_link', 10 * S), static=False)
    tree.add(transform('odom', 'base_link', 11 * S, (1.0, 0.0, 0.0)), static=False)
    assert tree.latest_ns('map', 'lidar') == tree.latest_ns('/lidar', 'map') == 11 * S
    # A dynamic edge behind the other on the path bounds it; one off the path does not.
    tree.add(transform('base_link', 'arm', 10 * S + 500 * MS), static=False)
    assert tree.latest_ns('map', 'arm') == 10 * S + 500 * MS
    assert tree.latest_ns('map', 'lidar') == 11 * S
    tree.lookup('map', 'arm', tree.latest_ns('map', 'arm'))     # no extrapolation there
    assert tree.latest_ns('map', 'velodyne') is None
    tree.add(transform('world', 'gps', 0), static=True)
    assert tree.latest_ns('lidar', 'gps') is None      # two trees


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


def test_a_late_sample_goes_into_its_own_edge_and_clears_no_other():
    buffer = TransformBuffer()
    buffer.add(transform('odom', 'base_link', 10 * S), static=False)
    buffer.add(transform('odom', 'base_link', 11 * S, (1.0, 0.0, 0.0)), static=False)
    buffer.add(transform('map', 'odom', 10 * S + S // 2), static=False)
    buffer.add(transform('map', 'odom', 11 * S, (0.0, 2.0, 0.0)), static=False)
    # 1 ms older than map -> odom's newest (a second localiser, a reordering transport).
    buffer.add(transform('map', 'odom', 11 * S - MS, (0.0, 4.0, 0.0)), static=False)
    # The other edge keeps its history (it used to be wiped: "no transform since the last
    # reset"), and so does this one.
    np.testing.assert_allclose(buffer.lookup('odom', 'base_link', 10 * S + S // 2)[:3, 3],
                               [0.5, 0.0, 0.0])
    # The late sample sits at its place by stamp: at its own stamp, halfway from 10.5 s to it,
    # and the newest one is still the newest.
    np.testing.assert_allclose(buffer.lookup('map', 'odom', 11 * S - MS)[:3, 3],
                               [0.0, 4.0, 0.0])
    np.testing.assert_allclose(buffer.lookup('map', 'odom', 10 * S + 749_500_000)[:3, 3],
                               [0.0, 2.0, 0.0])
    np.testing.assert_allclose(buffer.lookup('map', 'odom', 11 * S)[:3, 3], [0.0, 2.0, 0.0])
    # An equal stamp replaces its sample; one older than the oldest kept (but within the
    # jump limit of the newest) goes first.
    buffer.add(transform('map', 'odom', 10 * S + S // 2, (0.0, 0.0, 6.0)), static=False)
    buffer.add(transform('map', 'odom', 10 * S + S // 5, (0.0, 0.0, 2.0)), static=False)
    np.testing.assert_allclose(buffer.lookup('map', 'odom', 10 * S + S // 2)[:3, 3],
                               [0.0, 0.0, 6.0])
    np.testing.assert_allclose(buffer.lookup('map', 'odom', 10 * S + 35 * S // 100)[:3, 3],
                               [0.0, 0.0, 4.0])
    np.testing.assert_allclose(buffer.lookup('map', 'base_link', 11 * S)[:3, 3],
                               [1.0, 2.0, 0.0])
    assert (buffer.resets, buffer.reordered) == (0, 3)


@pytest.mark.parametrize('back_ns, reset', [
    (int(CLOCK_JUMP_S * S), False),          # late by the limit: still a late sample
    (int(CLOCK_JUMP_S * S) + 1, True),       # beyond: the clock jumped back
    (60 * S - S // 10, True),                # a 60 s bag played again from its start
    (100 * S, True),                         # a simulator restarted at 0
])
def test_a_jump_of_the_clock_is_told_from_a_late_sample_by_how_far_back(back_ns, reset):
    buffer = TransformBuffer(cache_s=200.0)
    newest = 100 * S
    buffer.add(transform('odom', 'base_link', newest - S), static=False)
    buffer.add(transform('odom', 'base_link', newest, (1.0, 0.0, 0.0)), static=False)
    buffer.add(transform('map', 'odom', newest), static=False)
    buffer.add(transform('map', 'odom', newest - back_ns, (5.0, 0.0, 0.0)), static=False)
    assert buffer.resets == int(reset)
    np.testing.assert_allclose(buffer.lookup('map', 'odom', newest - back_ns)[:3, 3],
                               [5.0, 0.0, 0.0])
    if reset:   # every dynamic history went, the other edge's too: two timelines never mix
        with pytest.raises(TransformError, match='no transform since the last reset'):
            buffer.lookup('odom', 'base_link', newest)
        with pytest.raises(TransformError, match='extrapolation into the future'):
            buffer.lookup('map', 'odom', newest)
    else:
        np.testing.assert_allclose(buffer.lookup('odom', 'base_link', newest)[:3, 3],
                                   [1.0, 0.0, 0.0])
        np.testing.assert_allclose(buffer.lookup('map', 'odom', newest), np.eye(4))
    assert buffer.reordered == int(not reset)


def test_with_a_cache_shorter_than_the_jump_limit_a_backwards_sample_never_sticks():
    # Beyond a 0.5 s cache a sample cannot be stored: it is a jump (never dropped, which
    # would refuse the new timeline until it passed the old one).
    buffer = TransformBuffer(cache_s=0.5)
    buffer.add(transform('map', 'base_link', 10 * S), static=False)
    buffer.add(transform('map', 'base_link', 10 * S - 7 * S // 10, (3.0, 0.0, 0.0)),
               static=False)
    assert buffer.resets == 1
    np.testing.assert_allclose(buffer.lookup('map', 'base_link', 10 * S - 7 * S // 10)[:3, 3],
                               [3.0, 0.0, 0.0])


class CountingDict(dict):
    """A dict that counts every access and every pass over all its entries."""

    def __init__(self, *args):
        super().__init__(*args)
        self.accesses = self.passes = 0

    def __getitem__(self, key):
        self.accesses += 1
        return super().__getitem__(key)

    def __contains__(self, key):
        self.accesses += 1
        return super().__contains__(key)

    def get(self, key, default=None):
        self.accesses += 1
        return super().get(key, default)

    def __iter__(self):
        self.passes += 1
        return super().__iter__()

    def keys(self):
        self.passes += 1
        return super().keys()

    def values(self):
        self.passes += 1
        return super().values()

    def items(self):
        self.passes += 1
        return super().items()


def lookup_costs(unrelated_frames: int) -> list[tuple[int, int]]:
    """Look up in a tree beside ``unrelated_frames`` others; (accesses, passes) per table."""
    buffer = TransformBuffer()
    buffer.add(transform('map', 'odom', 0), static=True)
    buffer.add(transform('odom', 'base_link', 10 * S), static=False)
    buffer.add(transform('base_link', 'lidar', 0, *LIDAR), static=True)
    buffer.add(transform('world', 'gps', 0), static=True)
    for k in range(unrelated_frames):
        buffer.add(transform(f'fleet{k % 7}', f'robot{k}', 0), static=True)
    tables = [CountingDict(buffer._edges), CountingDict(getattr(buffer, '_parents', {}))]
    buffer._edges, buffer._parents = tables
    buffer.lookup('map', 'lidar', 10 * S)
    for target, source, match in [('map', 'velodyne', 'unknown'), ('gps', 'lidar', 'no path'),
                                  ('map', 'lidar', 'extrapolation')]:
        with pytest.raises(TransformError, match=match):
            buffer.lookup(target, source, 20 * S)
    return [(table.accesses, table.passes) for table in tables]


def test_a_lookup_walks_parent_links_and_never_the_whole_table():
    small, large = lookup_costs(10), lookup_costs(3000)
    assert all(passes == 0 for _, passes in small + large), (small, large)
    assert small == large


def test_the_frame_table_is_capped_and_known_frames_still_update():
    assert TransformBuffer().max_frames == MAX_FRAMES
    buffer = TransformBuffer(max_frames=3)
    for child in ('a', 'b', 'c'):
        buffer.add(transform('base', child, 0), static=True)
    with pytest.raises(TransformError, match=r'"base" -> "d": frame "d" is new and the buffer '
                                             r'already holds 3 frames \(max_frames\)'):
        buffer.add(transform('base', 'd', 0), static=True)
    with pytest.raises(TransformError, match='frame "d" is unknown'):
        buffer.lookup('base', 'd', 0)
    # Frames in the table still update, re-parent, turn dynamic; a message's good ones stay.
    buffer.add(transform('base', 'a', 0, (1.0, 0.0, 0.0)), static=True)
    buffer.add(transform('a', 'c', 0, (0.0, 1.0, 0.0)), static=True)
    with pytest.raises(TransformError, match='frame "e" is new'):
        buffer.add_message(tf_message(transform('base', 'b', 5 * S, (0.0, 0.0, 2.0)),
                                      transform('base', 'e', 5 * S)), static=False)
    assert buffer.refused_frames == 2
    np.testing.assert_allclose(buffer.lookup('base', 'c', 0)[:3, 3], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(buffer.lookup('base', 'b', 5 * S)[:3, 3], [0.0, 0.0, 2.0])
    # clear() empties the table: new frames fit again.
    buffer.clear()
    for child in ('d', 'e', 'f'):
        buffer.add(transform('base', child, 0), static=True)
    np.testing.assert_array_equal(buffer.lookup('d', 'f', 0), np.eye(4))


def test_a_parent_is_a_frame_while_it_has_children_and_clear_forgets_it():
    buffer = TransformBuffer()
    buffer.add(transform('world', 'gps', 0), static=True)
    buffer.add(transform('world', 'radar', 0), static=True)
    buffer.add(transform('world', 'radar', 0), static=False)     # same parent, now dynamic
    buffer.add(transform('map', 'gps', 0), static=True)          # re-parented
    np.testing.assert_array_equal(buffer.lookup('world', 'radar', 0), np.eye(4))
    buffer.add(transform('map', 'radar', 0), static=True)        # its last child gone
    with pytest.raises(TransformError, match='frame "world" is unknown'):
        buffer.lookup('world', 'radar', 0)
    np.testing.assert_array_equal(buffer.lookup('map', 'radar', 0), np.eye(4))
    buffer.clear()
    for frame in ('map', 'gps'):
        with pytest.raises(TransformError, match=f'frame "{frame}" is unknown'):
            buffer.lookup('radar', frame, 0)


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
    # tf2's rule, |q.q - 1| <= 0.01: a hand-written 90 degree yaw is taken, normalised.
    tree.add(transform('base_link', 'by_hand', 0, xyzw=(0.0, 0.0, 0.71, 0.71)), static=True)
    np.testing.assert_allclose(tree.lookup('base_link', 'by_hand', 0),
                               matrix((0.0, 0.0, 0.0), yaw(90.0)), atol=1e-12)
    with pytest.raises(TransformError, match='not a unit quaternion'):
        tree.add(transform('base_link', 'off', 0, xyzw=(0.0, 0.0, 0.714, 0.714)), static=True)
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
