"""CameraSync's pairing rules, each checked against stamps worked out by hand."""

from configs import absolute_imports
from jax_perception_node.frames.sync import CameraSync
import pytest

MS = 1_000_000          # ns
T = 1_000_000 * 10**9   # an arbitrary LiDAR clock origin


def pick(sync, lidar_ns):
    """Return (camera -> label of the chosen map or None, stale names, clock went back)."""
    pairing, jumped = sync.pair(lidar_ns)
    return pairing.maps, pairing.stale, jumped


def test_tolerance_boundary_is_inclusive_on_both_sides():
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T - 100 * MS, 'exactly 100 ms before')
    assert pick(sync, T) == ({'front': 'exactly 100 ms before'}, (), False)
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T - 100 * MS - 1, 'one ns too old')
    assert pick(sync, T) == ({'front': None}, ('front',), False)
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T + 100 * MS, 'exactly 100 ms after')
    assert pick(sync, T) == ({'front': 'exactly 100 ms after'}, (), False)
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T + 100 * MS + 1, 'one ns too new')
    assert pick(sync, T) == ({'front': None}, ('front',), False)


def test_tolerance_is_rounded_to_whole_nanoseconds():
    # 0.1 s is not exact in binary; the rule must still hold at exactly 100 000 000 ns.
    assert CameraSync([], 0.1).tolerance_ns == 100 * MS
    assert CameraSync([], 0.0333333333).tolerance_ns == 33_333_333


def test_the_nearest_within_tolerance_wins_and_of_two_as_near_the_newer():
    sync = CameraSync(['front'], 0.05)
    for offset_ms, label in [(-200, 'old'), (-40, 'near'), (-10, 'nearest'), (30, 'newest'),
                             (80, 'too new')]:
        sync.add('front', T + offset_ms * MS, label)
    # Within 50 ms of T: -40, -10 and +30 ms. The nearest (-10 ms), not the newest (+30 ms).
    assert pick(sync, T)[0] == {'front': 'nearest'}
    sync.add('front', T + 10 * MS, 'as near, after')
    assert pick(sync, T)[0] == {'front': 'as near, after'}


def test_equal_stamps_the_later_arrival_wins():
    sync = CameraSync(['front'], 0.05)
    sync.add('front', T, 'first')
    sync.add('front', T, 'resent')
    assert pick(sync, T)[0] == {'front': 'resent'}


def test_each_camera_pairs_on_its_own_and_stale_ones_are_named_in_order():
    sync = CameraSync(['front', 'left', 'rear'], 0.1)
    sync.add('front', T - 20 * MS, 'f')
    sync.add('rear', T - 300 * MS, 'r stale')
    maps, stale, _ = pick(sync, T)
    assert maps == {'front': 'f', 'left': None, 'rear': None}
    assert stale == ('left', 'rear')
    pairing, _ = sync.pair(T + 60 * MS)
    assert pairing.used == 1 and pairing.maps['front'] == 'f'


def test_a_masked_camera_says_how_far_its_nearest_map_is():
    """A camera on another clock (2.5 s behind) looked like a dead one: 'stale' alone."""
    sync = CameraSync(['front', 'left', 'rear'], 0.1)
    for k in range(5):
        sync.add('front', T - 2500 * MS + k * 100 * MS, 'f')
    sync.add('rear', T + 300 * MS, 'r')
    pairing, _ = sync.pair(T + 100 * MS)
    assert pairing.stale == ('front', 'left', 'rear')
    assert pairing.reasons == (
        'its nearest map 2.200 s before the LiDAR stamp (sync.max_camera_lidar_delay_s)',
        'no map held (its topic and message type?)',
        'its nearest map 0.200 s after the LiDAR stamp (sync.max_camera_lidar_delay_s)')


def test_a_map_pairs_with_every_lidar_frame_within_tolerance():
    # Cameras slower than the LiDAR: one map serves several frames, then goes stale.
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T, 'map')
    chosen = [pick(sync, T + k * 40 * MS)[0]['front'] for k in range(5)]
    assert chosen == ['map', 'map', 'map', None, None]      # 0, 40, 80 ms pair; 120, 160 not


def test_maps_are_kept_for_a_time_and_up_to_a_count():
    sync = CameraSync(['front'], 1.0, history_s=0.1, max_maps=64)
    for k in range(6):
        sync.add('front', T + k * 30 * MS, f'map {k}')
    # Kept: stamps within 100 ms of the newest (150 ms): 60, 90, 120, 150 ms. The nearest to T,
    # maps 0 and 1, are gone.
    assert pick(sync, T)[0] == {'front': 'map 2'}
    sync = CameraSync(['front'], 0.0015, history_s=1.0, max_maps=3)
    for k in range(5):
        sync.add('front', T + k * MS, f'map {k}')
    # Within 1.5 ms of T + 1 ms would be maps 0, 1, 2, but only the last 3 are kept.
    assert pick(sync, T + 1 * MS)[0] == {'front': 'map 2'}


def test_a_fast_camera_pairs_its_map_at_the_stamp_of_a_cloud_taken_late():
    # 60 Hz, the cloud taken 250 ms after its stamp (sweep, driver, set wait): 15 maps came
    # after the one at its stamp. Before, 8 maps were kept and the camera was masked as stale.
    sync = CameraSync(['front'], 0.1)
    period = 1_000_000_000 // 60
    for k in range(-60, 16):
        sync.add('front', T + k * period, k)
    assert pick(sync, T)[0] == {'front': 0}


def test_a_map_out_of_order_takes_its_place_and_resets_nothing():
    # The raw copy of an image lost, the next image's taken, then the compressed copy of the
    # first: a late map, not time going back. Before, it cleared the camera's buffer.
    sync = CameraSync(['front'], 0.02)
    assert not sync.add('front', T, 'at T')
    assert not sync.add('front', T + 66 * MS, 'at T + 66')
    assert not sync.add('front', T + 33 * MS, 'at T + 33, late')
    assert sync.holds('front', T + 33 * MS) and sync.holds('front', T)
    assert pick(sync, T)[0] == {'front': 'at T'}
    assert pick(sync, T + 30 * MS)[0] == {'front': 'at T + 33, late'}
    assert pick(sync, T + 60 * MS)[0] == {'front': 'at T + 66'}


def test_camera_stamp_going_back_clears_only_that_camera():
    sync = CameraSync(['front', 'rear'], 0.1)
    assert sync.add('front', T, 'front old timeline') is False
    assert sync.add('rear', T, 'rear') is False
    assert sync.add('front', T - 10 * 10**9, 'front new timeline') is True
    # The old front map is gone: at T only the rear camera pairs.
    assert pick(sync, T)[0] == {'front': None, 'rear': 'rear'}


def test_lidar_going_back_keeps_only_maps_near_the_new_stamp():
    sync = CameraSync(['front', 'rear'], 0.1)
    sync.add('front', T, 'front at T')
    sync.add('rear', T, 'rear at T')
    assert pick(sync, T)[2] is False
    # A bag loop: the front camera already published on the new timeline, the rear did not.
    back = T - 60 * 10**9
    sync.add('front', back + 30 * MS, 'front after the loop')  # earlier stamp: front reset
    maps, stale, jumped = pick(sync, back)
    assert jumped is True
    assert maps == {'front': 'front after the loop', 'rear': None} and stale == ('rear',)
    # The rear map of the old timeline was dropped, not merely out of range: stepping forward
    # to T again does not bring it back.
    assert pick(sync, T)[0]['rear'] is None


def test_lidar_equal_stamp_is_not_going_back():
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T, 'map')
    assert pick(sync, T)[2] is False
    assert pick(sync, T) == ({'front': 'map'}, (), False)


def test_reset_forgets_maps_and_the_lidar_clock():
    sync = CameraSync(['front'], 0.1)
    sync.add('front', T, 'map')
    pick(sync, T)
    sync.reset()
    assert pick(sync, T - 10**9) == ({'front': None}, ('front',), False)


def test_unknown_camera_is_an_error_naming_it():
    sync = CameraSync(['front'], 0.1)
    with pytest.raises(KeyError, match='side'):
        sync.add('side', T, 'map')


def test_sync_imports_no_ros():
    assert absolute_imports('sync') <= {'bisect', 'dataclasses', 'typing'}
