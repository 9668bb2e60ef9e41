"""LidarSets' grouping rules, each checked against stamps and times worked out by hand."""

from configs import absolute_imports
from jax_perception_node.frames.lidar_sets import AHEAD_SETS, JUMP_BACK_NS, LidarSets
import numpy as np
import pytest

MS = 1_000_000          # ns
T = 1_000_000 * 10**9   # an arbitrary LiDAR clock origin
NAMES = ('top', 'left', 'right')


def three(tolerance_s=0.01, max_delay_s=0.05):
    """Return a LidarSets for top, left and right: 10 ms tolerance, 50 ms wait by default."""
    return LidarSets(NAMES, tolerance_s, max_delay_s)


def view(lidar_set):
    """Return (stamp_ns, name -> msg, missing, closed) of a set, None for None."""
    if lidar_set is None:
        return None
    return lidar_set.stamp_ns, lidar_set.clouds, lidar_set.missing, lidar_set.closed


def test_complete_set_is_returned_at_once_in_configured_order_stamped_oldest():
    sets = three()
    assert sets.add('right', T + 2 * MS, 'r', 1.0) == []
    assert sets.add('top', T, 't', 1.01) == []
    done, = sets.add('left', T - 3 * MS, 'l', 1.02)
    assert list(done.clouds) == list(NAMES) == list(done.stamps)
    assert view(done) == (T - 3 * MS, {'top': 't', 'left': 'l', 'right': 'r'}, (), 1.02)
    assert done.stamps == {'top': T, 'left': T - 3 * MS, 'right': T + 2 * MS}
    assert sets.deadline() is None and sets.due(9.0) is None and sets.flush(9.0) is None


def test_partial_set_is_due_only_at_its_deadline_and_names_the_missing():
    sets = three()
    sets.add('top', T, 't', 1.0)
    sets.add('right', T + MS, 'r', 1.03)
    assert sets.deadline() == pytest.approx(1.05)   # first arrival + max_delay_s
    assert sets.due(1.0499) is None
    done = sets.due(sets.deadline())
    assert view(done) == (T, {'top': 't', 'right': 'r'}, ('left',), pytest.approx(1.05))
    assert sets.due(2.0) is None and sets.flush(2.0) is None   # never returned twice
    assert sets.deadline() is None


def test_tolerance_is_inclusive_and_a_stamp_past_it_pushes_the_set_out():
    sets = three()
    sets.add('top', T, 't', 1.0)
    assert sets.add('left', T + 10 * MS, 'l', 1.01) == []      # exactly the tolerance: joins
    pushed, = sets.add('right', T + 10 * MS + 1, 'r', 1.02)   # one ns past it
    assert view(pushed) == (T, {'top': 't', 'left': 'l'}, ('right',), 1.02)
    assert sets.deadline() == pytest.approx(1.07)              # the new set's own wait
    assert view(sets.flush(1.03)) == (T + 10 * MS + 1, {'right': 'r'}, ('top', 'left'), 1.03)


def test_a_newer_cloud_of_a_sensor_in_the_set_pushes_it_out():
    sets = three()
    sets.add('top', T, 't0', 1.0)
    sets.add('left', T, 'l0', 1.01)
    pushed, = sets.add('top', T + 5 * MS, 't1', 1.02)        # within tolerance, but top again
    assert view(pushed) == (T, {'top': 't0', 'left': 'l0'}, ('right',), 1.02)
    assert view(sets.flush(1.03)) == (T + 5 * MS, {'top': 't1'}, ('left', 'right'), 1.03)


def test_a_repeated_or_older_cloud_of_a_sensor_in_the_set_is_a_stale_repeat():
    sets = three()
    sets.add('top', T, 't0', 1.0)
    assert sets.add('top', T, 'again', 1.01) == []
    assert sets.add('top', T - 2 * MS, 'older', 1.02) == []
    assert sets.late == 2
    assert view(sets.flush(1.03)) == (T, {'top': 't0'}, ('left', 'right'), 1.03)


def test_one_add_returns_no_set_or_one():
    # At most one: a set closed by an add leaves nothing pending, and a one-cloud set is
    # complete only with one configured name, which never leaves a set pending.
    sets = three()
    assert sets.add('top', T, 't', 1.0) == []
    assert len(sets.add('left', T + 100 * MS, 'l', 1.01)) == 1     # pushes {top} out
    assert len(sets.add('top', T + 100 * MS, 't', 2.0)) == 1       # {left} expired first
    single = LidarSets(['top'], 0.01, 0.05)
    assert [len(single.add('top', T + k * 100 * MS, k, 1.0)) for k in range(3)] == [1, 1, 1]


def test_add_closes_an_expired_set_before_deciding_as_due_would():
    # Live (a timer polls due) and replay (no timer) therefore group identically.
    sets = three()
    sets.add('top', T, 't', 1.0)
    expired, = sets.add('left', T + MS, 'l', 1.05)           # at the deadline: wait over
    assert view(expired) == (T, {'top': 't'}, ('left', 'right'), 1.05)
    assert sets.late == 1 and sets.deadline() is None         # left missed its set's wait


def test_late_cloud_is_dropped_and_counted():
    sets = three()
    sets.add('top', T, 't', 1.0)
    sets.add('left', T, 'l', 1.01)
    assert sets.due(1.05).missing == ('right',)
    assert sets.add('right', T + 10 * MS, 'r', 1.06) == []    # within tolerance of the closed set
    assert sets.late == 1 and sets.deadline() is None         # dropped: no second, older frame
    assert sets.add('right', T - JUMP_BACK_NS, 'r', 1.07) == []   # back exactly the jump: late
    assert sets.late == 2 and sets.deadline() is None
    sets.add('top', T + 100 * MS, 't', 1.1)
    assert sets.add('left', T + 50 * MS, 'l', 1.11) == []     # between closed and pending
    assert sets.late == 3
    assert view(sets.flush(1.2)) == (T + 100 * MS, {'top': 't'}, ('left', 'right'), 1.2)
    sets.add('right', T + 110 * MS + 1, 'r', 1.3)             # one ns past the closed set: new
    assert sets.late == 3 and sets.deadline() == pytest.approx(1.35)


def test_jump_back_closes_the_pending_set_and_starts_a_new_timeline():
    sets = three()
    for name in NAMES:
        sets.add(name, T, name, 1.0)
    sets.add('top', T + 100 * MS, 't', 1.1)
    sets.add('left', T + 100 * MS, 'l', 1.11)
    back = T - 5 * 10**9                                      # a bag loop
    old, = sets.add('top', back, 'T', 1.12)                   # nothing lost
    assert view(old) == (T + 100 * MS, {'top': 't', 'left': 'l'}, ('right',), 1.12)
    assert sets.add('left', back + MS, 'L', 1.13) == []
    new, = sets.add('right', back, 'R', 1.14)
    assert view(new) == (back, {'top': 'T', 'left': 'L', 'right': 'R'}, (), 1.14)
    assert sets.late == 0


def test_jump_back_with_nothing_pending_forgets_the_old_timeline():
    sets = three()
    sets.add('top', T, 't', 1.0)
    sets.flush(1.01)
    assert sets.add('top', T - JUMP_BACK_NS - 1, 'new', 1.02) == []
    assert sets.late == 0
    assert sets.add('left', T, 'l', 1.03) != []     # pushes the new set out; T is not late now
    assert sets.late == 0


def test_a_lidars_next_cloud_is_not_late_against_the_set_its_previous_one_closed():
    # 20 Hz LiDARs in phase at a 50 ms tolerance: the next cycle's clouds are a tolerance
    # after the last set, yet each is its LiDAR's next cloud, not a late one of that set.
    sets = LidarSets(('top', 'left'), 0.05, 0.03)
    stamps = []
    for k in range(8):
        now = 1.0 + k * 0.05
        assert sets.add('top', T + k * 50 * MS, k, now) == []
        done, = sets.add('left', T + k * 50 * MS, k, now + 0.001)
        assert done.missing == ()
        stamps.append(done.stamp_ns)
    assert sets.late == 0 and stamps == [T + k * 50 * MS for k in range(8)]


def test_lidars_stamped_apart_by_over_half_a_period_stay_paired_whichever_arrives_first():
    # 10 Hz, left stamped 50 ms after top, 60 ms tolerance; left's cloud arrives first in the
    # second cycle (its reference is then the later stamp), and no later top cloud is late.
    sets = LidarSets(('top', 'left'), 0.06, 0.03)
    order = [('top', 'left'), ('left', 'top'), ('top', 'left'), ('top', 'left')]
    for k, first_second in enumerate(order):
        now = 1.0 + k * 0.1
        first, second = first_second
        offset = {'top': 0, 'left': 50 * MS}
        assert sets.add(first, T + k * 100 * MS + offset[first], k, now) == []
        done, = sets.add(second, T + k * 100 * MS + offset[second], k, now + 0.001)
        assert view(done) == (T + k * 100 * MS, {'top': k, 'left': k}, (), now + 0.001)
    assert sets.late == 0


def sweeps(sets, first, last, offsets_ms):
    """
    Offer 10 Hz sweeps ``first`` to ``last - 1``; return (the sets closed, the lines said).

    Each LiDAR's cloud is stamped ``offsets_ms`` into its sweep and arrives 100 ms after it.
    """
    done, news = [], []
    for k in range(first, last):
        for name, offset in zip(NAMES, offsets_ms):
            stamp = k * 100 + offset
            done += sets.add(name, T + stamp * MS, k, 0.1 + stamp / 1000)
            news += sets.take_news()
    return done, news


def test_lidars_stamped_apart_past_the_tolerance_split_every_set_and_it_is_said_once():
    # 10 Hz, left stamped 30 ms and right 60 ms after top (tolerance and wait 50 ms): every
    # set came without one LiDAR, none late, and nothing said why (an independent review).
    sets = three(tolerance_s=0.05, max_delay_s=0.05)
    done, news = sweeps(sets, 0, 10, (0, 30, 60))
    assert sets.late == 0 and len(done) >= 12 and all(len(s.missing) == 1 for s in done)
    assert news == [f'LiDAR sets not whole {AHEAD_SETS} times in a row, though every LiDAR '
                    'sends: their clouds are stamped up to 0.070 s apart, past '
                    'sync.lidar_stamp_tolerance_s (0.05 s); if the LiDARs are stamped this far '
                    'apart, set it and sync.max_lidar_delay_s above that']
    # The advice taken, live: whole sets from the next sweep on, and nothing more said.
    sets.tolerance_ns, sets.max_delay_s = 80 * MS, 0.08
    done, news = sweeps(sets, 10, 14, (0, 30, 60))
    assert [s.missing for s in done[-3:]] == [(), (), ()] and news == []


def test_a_lidar_that_stopped_is_missing_and_not_said_to_split_the_sets():
    sets = three(tolerance_s=0.05, max_delay_s=0.05)
    done, news = sweeps(sets, 0, 5, (0, 10, 20))
    assert [s.missing for s in done] == [()] * 5 and news == []
    done, news = [], []
    for k in range(5, 15):         # right stops: top and left make every set
        for name, offset in (('top', 0), ('left', 30)):
            done += sets.add(name, T + (k * 100 + offset) * MS, k, 0.1 + k / 10 + offset / 1000)
            news += sets.take_news()
    assert all(s.missing == ('right',) for s in done[1:]) and news == []


def test_a_lidar_whose_clock_runs_behind_is_late_and_missing_not_a_new_timeline():
    # right's clock is 2 s behind top's and left's (no PTP): its clouds are late, every set
    # names it missing and set stamps keep increasing (no jump back to its time and forth).
    sets = three(max_delay_s=0.03)
    out = []
    for k in range(5):
        now = 1.0 + k * 0.1
        out += sets.add('right', T + k * 100 * MS - 2 * 10**9, k, now)
        out += sets.add('top', T + k * 100 * MS, k, now + 0.001)
        out += sets.add('left', T + k * 100 * MS, k, now + 0.002)
        out += [s for s in (sets.due(now + 0.05),) if s is not None]
    right_first = out[0]      # the first set, right's own (nothing to be behind yet)
    assert right_first.clouds == {'right': 0}
    assert [s.stamp_ns for s in out[1:]] == [T + k * 100 * MS for k in range(5)]
    assert all(s.missing == ('right',) for s in out[1:])
    assert sets.late == 4


def test_a_lidar_whose_clock_runs_behind_the_clock_is_said_once_and_when_it_is_back():
    # Found by an independent review: its clouds were counted late, and the WARN said to raise
    # sync.max_lidar_delay_s, which cannot help a clock 2.5 s behind.
    sets = three()
    clock_drift(sets, {'left': -2500}, 6)
    assert sets.take_news() == ['LiDAR left: its stamps run 2.521 s behind the clock they '
                                'arrive by (a clock not synchronised?): its clouds are too late '
                                'for the sets of the others']
    clock_drift(sets, {'left': -2500}, 6, start=6)
    assert sets.take_news() == []
    clock_drift(sets, {}, 2, start=40)
    assert sets.take_news() == ['LiDAR left: stamped with the clock again']
    # A host clock behind the whole rig (every LiDAR behind it): nothing to say, then or when
    # the host clock is set right (no 'again' without the line before it).
    sets = three()
    clock_drift(sets, dict.fromkeys(NAMES, -2500), 6)
    assert sets.take_news() == []
    clock_drift(sets, {}, 2, start=40)
    assert sets.take_news() == []
    # The LiDAR behind sends first, the others only later: said when they come.
    sets = three()
    for k in range(5):
        sets.add('left', T + (k * 100 - 2500) * MS, k, 1.0 + k * 0.1, T + k * 100 * MS)
    assert sets.take_news() == []
    clock_drift(sets, {'left': -2500}, 2, start=5)
    assert [line.split(':')[0] for line in sets.take_news()] == ['LiDAR left']


def clock_drift(sets, offsets_ms, ticks, first=None, start=0, clock=True):
    """
    Feed ticks of 10 Hz clouds from ``start``, stamps off by offsets_ms, ``first`` first.

    Each cloud arrives 20 ms after its tick, 1 ms after the one before, on the stamps' clock
    when ``clock`` (else no clock is given).
    """
    out = []
    order = sorted(NAMES, key=lambda n: n != first)
    for k in range(start, start + ticks):
        now = 1.0 + k * 0.1
        for i, name in enumerate(order):
            arrived = T + (k * 100 + 20 + i) * MS if clock else None
            out += sets.add(name, T + (k * 100 + offsets_ms.get(name, 0)) * MS, (k, name),
                            now + 0.001 * i, arrived)
        out += [s for s in (sets.due(now + 0.05),) if s is not None]
    return out


@pytest.mark.parametrize('offset_ms, between_ms, said', [
    (120, 90, 'ahead of the clock'), (-980, -510, 'behind the clock')])
def test_a_clock_jittering_about_the_threshold_is_said_once_not_in_and_out(
        offset_ms, between_ms, said):
    """Found by an independent review: 927 WARN lines in 10 minutes at a 100 +- 3 ms lead."""
    sets, jitter = three(), np.random.default_rng(0).integers(-5, 6, 600)
    news = []
    for k, ms in enumerate(jitter):     # arriving first: its lead is the offset less 20 ms
        clock_drift(sets, {'left': offset_ms + int(ms)}, 1, first='left', start=k)
        news += sets.take_news()
    assert len(news) == 1 and said in news[0]
    # Back (said) once stamped within half the threshold of the clock, not before.
    clock_drift(sets, {'left': between_ms}, 3, first='left', start=600)
    assert sets.take_news() == []
    clock_drift(sets, {}, 3, first='left', start=603)
    assert len(sets.take_news()) == 1 and sets.ahead == {}


@pytest.mark.parametrize('ahead_ms', [150, 240, 500, 5000])
@pytest.mark.parametrize('first', ['left', 'top', 'right'])
def test_a_lidar_whose_clock_runs_ahead_is_left_out_and_the_others_make_the_frames(
        first, ahead_ms):
    # left's clock runs ahead. Arriving first it opens each set, and the others' fresh clouds,
    # older than its, are late against it; arriving last (or in the middle) it closes theirs,
    # and its set, alone, makes their next ones late. Its clouds are stamped after they
    # arrive: after AHEAD_SETS of them, while the others' are not, it is taken to run ahead,
    # left out and named missing, as a LiDAR behind is, and the sets it opened are forgotten.
    # Before, arriving last it was never judged, nor 0.6-2.5 periods ahead in any order. (A
    # clock within EARLY_NS of the arrival, less the latency, is not found: 60 ms here.)
    sets = three(max_delay_s=0.03)
    out = clock_drift(sets, {'left': ahead_ms}, 12, first=first)
    [(name, ahead)] = sets.ahead.items()
    order = sorted(NAMES, key=lambda n: n != first)
    assert name == 'left' and ahead == (ahead_ms - 20 - order.index('left')) * MS
    [news] = sets.take_news()
    assert news.startswith(f'LiDAR left: its stamps run {ahead / 1e9:.3f} s ahead of the '
                           'clock they arrive by')
    judged = max((k for k, s in enumerate(out) if 'left' in s.clouds), default=-1)
    assert judged <= AHEAD_SETS
    # From the judgment on the others make the sets (the first may miss the cloud dropped
    # before it), stamped with their own clocks: strictly increasing, one step back at the
    # judgment from left's stamps ahead.
    later = out[judged + 1:]
    assert set(later[0].clouds) <= {'top', 'right'} and len(later) >= 12 - AHEAD_SETS - 1
    assert all(list(s.clouds) == ['top', 'right'] and s.missing == ('left',)
               for s in later[1:])
    assert all(a.stamp_ns < b.stamp_ns for a, b in zip(later, later[1:]))
    assert later[-1].stamp_ns == T + 1100 * MS
    # Its clock set right again: stamped with the others, it is back in the frames.
    back = clock_drift(sets, {}, 4, first='top', start=12)
    assert all(len(s.clouds) == 3 for s in back[-3:]) and sets.ahead == {}
    assert sets.take_news() == ['LiDAR left: stamped with the other LiDARs again, back in the '
                                'frames']
    # Every cloud sent is in one set or counted late.
    rest = [s for s in (sets.flush(10.0),) if s is not None]
    grouped = [msg for s in out + back + rest for msg in s.clouds.values()]
    assert len(grouped) == len(set(grouped)) and len(grouped) + sets.late == 16 * len(NAMES)


def test_without_a_clock_only_a_lidar_a_second_ahead_is_found():
    # From stamps alone a clock a period ahead is the others' clouds arriving a period later.
    sets = three(max_delay_s=0.03)
    clock_drift(sets, {'left': 500}, 12, first='left', clock=False)
    assert sets.ahead == {}
    sets = three(max_delay_s=0.03)
    clock_drift(sets, {'left': 1500}, 12, first='right', clock=False)
    [(name, ahead)] = sets.ahead.items()
    assert name == 'left' and 1400 * MS <= ahead <= 1500 * MS


def test_one_cloud_stamped_an_hour_ahead_stops_no_frame_for_long():
    # right sends one cloud stamped an hour ahead, then nothing. Before, every later cloud of
    # top and left was late against its set, for the hour: no frame at all.
    sets = three(max_delay_s=0.03)
    out = clock_drift(sets, {}, 3)
    out += sets.add('right', T + 3600 * 10**9, 'glitch', 1.3)
    for k in range(3, 15):
        now = 1.0 + k * 0.1
        for i, name in enumerate(('top', 'left')):
            out += sets.add(name, T + k * 100 * MS, (k, name), now + 0.001 * i)
        out += [s for s in (sets.due(now + 0.05),) if s is not None]
    assert 'right' in sets.ahead
    served = [s for s in out if list(s.clouds) == ['top', 'left']]
    assert len(served) >= 12 - AHEAD_SETS - 1
    assert served[-1].stamp_ns == T + 1400 * MS and served[-1].missing == ('right',)


@pytest.mark.parametrize('hz, lag_s', [(10, 0.11), (10, 0.3), (20, 0.11), (20, 0.3)])
def test_a_lidar_whose_clouds_arrive_sooner_is_not_judged_ahead(hz, lag_s):
    # One clock (equal stamps), but top's clouds reach the node a period or more before
    # left's and right's. The others are late for its set, not behind a clock ahead: no cloud
    # is stamped after it arrived. Before, a lag over a period plus the tolerance took top
    # to run ahead and left it out for good.
    period = 1.0 / hz
    sets = three(tolerance_s=0.05, max_delay_s=0.05)
    events = sorted((k * period + latency, name, T + int(round(k * period * 1e9)))
                    for k in range(40) for name, latency in (('top', 0.02),
                                                             ('left', 0.02 + lag_s),
                                                             ('right', 0.021 + lag_s)))
    for now, name, stamp in events:
        sets.due(now)
        sets.add(name, stamp, name, now, T + int(round(now * 1e9)))
    assert sets.ahead == {} and sets.take_news() == []


def test_the_cloud_pending_when_a_lidar_is_left_out_is_counted_late():
    # left's first cloud, 0.5 s ahead, waits in a set of its own; its next, a second and more
    # ahead, has it left out at once: both are dropped, and both counted (the pending one was
    # in no set and no count before).
    two = LidarSets(('top', 'left'), 0.05, 10.0)
    out = two.add('top', T, 'top', 0.0, T)
    out += two.add('left', T + 500 * MS, 'left 1', 0.1, T)
    out += two.add('left', T + 1600 * MS, 'left 2', 0.2, T + 100 * MS)
    out += [s for s in (two.flush(0.3),) if s is not None]
    assert 'left' in two.ahead
    assert [s.clouds for s in out] == [{'top': 'top'}] and two.late == 2


def test_two_lidars_the_clock_says_which_runs_ahead():
    # Without a clock no majority says which of two is wrong: the first arrival opens the sets.
    two = LidarSets(('top', 'left'), 0.01, 0.03)
    for k in range(10):
        two.add('left', T + (k * 100 + 500) * MS, k, 1.0 + k * 0.1)
        two.add('top', T + k * 100 * MS, k, 1.0 + k * 0.1 + 0.001)
    assert two.ahead == {} and two.take_news() == []
    # With it, left's clouds are stamped 480 ms after they came, top's are not.
    two = LidarSets(('top', 'left'), 0.01, 0.03)
    for k in range(10):
        arrived = T + (k * 100 + 20) * MS
        two.add('left', T + (k * 100 + 500) * MS, k, 1.0 + k * 0.1, arrived)
        two.add('top', T + k * 100 * MS, k, 1.0 + k * 0.1 + 0.001, arrived + MS)
    assert two.ahead == {'left': 480 * MS}


def test_no_lidar_is_judged_ahead_when_none_is_on_time_or_two_share_their_sets():
    # The node's clock behind every LiDAR (a host clock off): no LiDAR is on time, none ahead.
    sets = three(max_delay_s=0.03)
    for k in range(10):
        for i, name in enumerate(NAMES):
            sets.add(name, T + k * 100 * MS, k, 1.0 + k * 0.1 + 0.001 * i,
                     T + (k * 100 - 200) * MS)
    assert sets.ahead == {}
    # Without a clock, two LiDARs of three ahead together share their sets: no single clock
    # is off.
    sets = three(max_delay_s=0.03)
    clock_drift(sets, {'left': 1500, 'right': 1500}, 10, first='left', clock=False)
    assert sets.ahead == {}


def test_a_host_clock_behind_the_lidars_takes_none_of_them_ahead():
    # One clock for the LiDARs (PTP), the host's 80 ms behind it; top's clouds arrive 5 ms after
    # their stamp, left's and right's 60 ms: top's look 75 ms early, theirs 20 ms late. Before
    # (the tolerance as the margin), top was taken to run ahead and left out of every frame.
    sets = three(tolerance_s=0.05, max_delay_s=0.1)
    out = []
    for k in range(30):
        stamp = T + k * 100 * MS
        for name, latency in (('top', 5), ('left', 60), ('right', 61)):
            now = 1.0 + (k * 100 + latency) / 1000
            out += sets.add(name, stamp, name, now, stamp + (latency - 80) * MS)
        out += [s for s in (sets.due(1.0 + (k * 100 + 99) / 1000),) if s is not None]
    assert sets.ahead == {} and sets.take_news() == []
    assert all(len(s.clouds) == 3 for s in out[1:])


def test_two_lidars_behind_the_clock_do_not_take_the_one_on_time_ahead():
    # left and right stamped 1.2 s behind (no PTP), top on time. Without a clock the stamps
    # alone would take top to run ahead of both; the clock says it is on time. Before, top
    # was taken ahead and back every few clouds (a WARN line each time).
    sets = three(max_delay_s=0.03)
    clock_drift(sets, {'left': -1200, 'right': -1200}, 20, first='top')
    assert sets.ahead == {}
    assert [line.split(':')[0] for line in sets.take_news()] == ['LiDAR left', 'LiDAR right']


def test_offline_one_cloud_a_second_ahead_of_its_receive_time_counts_at_once():
    # Two LiDARs, one cloud of left stamped an hour ahead of the time the bag received it,
    # then silence: taken to run ahead at once, top makes the frames. Before, every later cloud
    # of top was late for its set, to the end of the bag.
    two = LidarSets(('top', 'left'), 0.05, 0.03)
    out = []
    for k in range(10):
        stamp = T + k * 100 * MS
        out += two.add('top', stamp, k, 1.0 + k * 0.1, stamp + 20 * MS)
        if k == 3:
            out += two.add('left', stamp + 3600 * 10**9, 'glitch', 1.0 + k * 0.1 + 0.001,
                           stamp + 21 * MS)
        out += [s for s in (two.due(1.0 + k * 0.1 + 0.05),) if s is not None]
    assert 'left' in two.ahead
    assert [list(s.clouds) for s in out[-5:]] == [['top']] * 5
    assert out[-1].stamp_ns == T + 900 * MS


def test_without_a_clock_a_lidar_back_within_a_second_of_the_others_is_back():
    # top 1.5 s ahead, then its clock set right; it arrives first (a period above the others'
    # newest). Before, it had to come within the tolerance of their newest: never.
    sets = three(max_delay_s=0.03)
    clock_drift(sets, {'top': 1500}, 8, first='top', clock=False)
    assert 'top' in sets.ahead
    sets.take_news()
    out = clock_drift(sets, {}, 6, first='top', start=8, clock=False)
    assert sets.ahead == {} and sets.take_news()[-1].endswith('back in the frames')
    assert all(len(s.clouds) == 3 for s in out[-3:])


def test_flush_closes_whatever_is_pending():
    sets = three()
    assert sets.flush(1.0) is None
    sets.add('left', T, 'l', 1.0)
    assert view(sets.flush(1.01)) == (T, {'left': 'l'}, ('top', 'right'), 1.01)
    assert sets.flush(1.02) is None


def test_reset_forgets_the_sets_but_keeps_counting_late():
    sets = three()
    sets.add('top', T, 't', 1.0)
    sets.flush(1.0)
    sets.add('top', T, 't', 1.0)
    sets.add('left', T + 100 * MS, 'l', 1.1)
    sets.reset()
    assert sets.deadline() is None and sets.late == 1
    assert sets.add('top', T, 't', 2.0) == [] and sets.late == 1   # T is not late after reset


def test_single_name_returns_every_cloud_at_once():
    sets = LidarSets(['top'], 0.01, 0.05)
    done, = sets.add('top', T, 'a', 1.0)
    assert view(done) == (T, {'top': 'a'}, (), 1.0)
    assert sets.deadline() is None
    assert sets.add('top', T, 'a again', 1.01) == [] and sets.late == 1
    done, = sets.add('top', T + 100 * MS, 'b', 1.1)
    assert view(done) == (T + 100 * MS, {'top': 'b'}, (), 1.1)


def test_unknown_name_and_bad_arguments_are_value_errors():
    sets = three()
    with pytest.raises(ValueError, match='side'):
        sets.add('side', T, 'x', 1.0)
    for bad in ((NAMES, -0.001, 0.05), (NAMES, 0.01, -0.001), ((), 0.01, 0.05),
                (('top', 'top'), 0.01, 0.05)):
        with pytest.raises(ValueError):
            LidarSets(*bad)
    zero = LidarSets(NAMES, 0.0, 0.0)
    assert zero.tolerance_ns == 0 and zero.max_delay_s == 0.0


def test_live_parameter_changes_apply_to_the_next_decision():
    sets = three()
    sets.add('top', T, 't', 1.0)
    sets.tolerance_ns = 20 * MS
    assert sets.add('left', T + 15 * MS, 'l', 1.01) == []     # joins under the new tolerance
    sets.max_delay_s = 0.2                                    # the pending set waits longer
    assert sets.deadline() == pytest.approx(1.2)
    assert sets.due(1.1) is None
    assert sets.due(1.2).clouds == {'top': 't', 'left': 'l'}
    sets.tolerance_ns = 0
    sets.add('top', T + 100 * MS, 't', 1.3)
    assert sets.add('left', T + 100 * MS + 1, 'l', 1.31)[0].clouds == {'top': 't'}


def test_lidar_sets_imports_no_ros():
    assert absolute_imports('lidar_sets') <= {'dataclasses', 'typing'}


def simulate_traffic(seed, ticks=300):
    """
    Return three LiDARs at 10 Hz: (events sorted by arrival, kind of each (tick, name)).

    Stamps jitter by +-10 ms (so a tick's clouds are within a 20 ms tolerance of each other)
    and arrive 10-40 ms after their stamp, so a tick's arrivals span at most 50 ms (the wait
    is 60 ms). 5 % of clouds are dropped and 5 % straggle 100 ms more, into the next tick's.
    """
    rng = np.random.default_rng(seed)
    events, kinds = [], {}
    for tick in range(ticks):
        for name in NAMES:
            stamp = T + tick * 100 * MS + int(rng.integers(-10 * MS, 10 * MS + 1))
            u = rng.random()
            kinds[tick, name] = 'dropped' if u < 0.05 else 'straggler' if u < 0.1 else 'normal'
            delay = rng.uniform(0.01, 0.04) + (0.1 if kinds[tick, name] == 'straggler' else 0.0)
            if kinds[tick, name] != 'dropped':
                events.append((500.0 + (stamp - T) / 1e9 + delay, name, stamp, (tick, name)))
    return sorted(events), kinds


def run_traffic(events, timer_s):
    """Feed the events (and a due() poll every timer_s, if given); return (sets, late count)."""
    sets, out = LidarSets(NAMES, 0.02, 0.06), []
    polls = np.arange(events[0][0], events[-1][0], timer_s) if timer_s else []
    calls = sorted([(t, 0, None) for t in polls] + [(e[0], 1, e) for e in events],
                   key=lambda c: c[:2])
    for now, _, event in calls:
        if event is None:
            out.extend(s for s in (sets.due(now),) if s is not None)
        else:
            closed = sets.add(event[1], event[2], event[3], now)
            assert len(closed) <= 1
            out.extend(closed)
    out.extend(s for s in (sets.flush(events[-1][0] + 1.0),) if s is not None)
    return out, sets.late


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_random_traffic_groups_every_cloud_once_by_tick(seed):
    events, kinds = simulate_traffic(seed)
    out, late = run_traffic(events, timer_s=None)
    grouped = [msg for s in out for msg in s.clouds.values()]
    assert len(grouped) == len(set(grouped))                   # no cloud in two sets
    assert len(grouped) + late == len(events)                  # every cloud in a set or late
    assert late > 0 and any(s.missing for s in out)            # the traffic exercised both
    for s in out:
        assert len({tick for tick, _ in s.clouds.values()}) == 1
        assert max(s.stamps.values()) - min(s.stamps.values()) <= 20 * MS
        assert s.stamp_ns == min(s.stamps.values())
    assert all(a.stamp_ns < b.stamp_ns for a, b in zip(out, out[1:]))
    # Independent expectation: a tick whose clouds all came on time is one complete set, and
    # an on-time cloud is never late.
    whole = {tick for tick, _ in kinds if all(kinds[tick, n] == 'normal' for n in NAMES)}
    complete = {next(iter(s.clouds.values()))[0] for s in out if not s.missing}
    assert whole <= complete
    on_time = {key for key, kind in kinds.items() if kind == 'normal'}
    assert on_time <= set(grouped)
    # A live node polling due() every 10 ms groups exactly as replay without polling.
    polled, polled_late = run_traffic(events, timer_s=0.01)
    assert polled_late == late
    assert [(s.clouds, s.missing) for s in polled] == [(s.clouds, s.missing) for s in out]
