"""
LiDAR sets: clouds from several LiDARs grouped by stamp, like Autoware's concatenate-and-time-sync.

Shared by the live node (``now`` = ``time.monotonic()``) and offline replay (``now`` = the bag's
receive time in seconds), so both group clouds identically: nothing here reads a clock, every
decision depends only on the arguments. Stamps are integer nanoseconds (the message header stamp).
"""

from dataclasses import dataclass, field
from typing import Any, Iterable

# A stamp more than this before its own LiDAR's newest one taken starts a new timeline.
JUMP_BACK_NS = 1_000_000_000
# Fresh clouds in a row that show a LiDAR's clock ahead (stamped after they arrived, or a
# second above every other LiDAR's) before it is taken to run ahead.
AHEAD_SETS = 3
# A cloud stamped more than this (or the set tolerance, if larger) after it arrived shows its
# LiDAR's clock ahead: above the host clock error of a synchronised system and the lag of a
# 10 Hz /clock (a recorded sim). One stamped more than JUMP_BACK_NS after counts at once.
EARLY_NS = 100_000_000


@dataclass(frozen=True)
class LidarSet:
    """One set of clouds to process together."""

    clouds: dict[str, Any]          # name -> message, configured order, only those that arrived
    stamps: dict[str, int]          # name -> header stamp (ns) of each cloud in the set
    stamp_ns: int                   # the oldest cloud stamp (Autoware's reference)
    missing: tuple[str, ...]        # configured names with no cloud in the set, configured order
    closed: float                   # ``now`` when the set was closed


class LidarSets:
    """
    Groups LiDAR clouds into sets stamped within a tolerance, waiting a bounded time for each set.

    A pending set starts with a cloud that belongs to no other set: that cloud's stamp is the
    set's reference and its ``now`` + ``max_delay_s`` its deadline. ``add`` decides, in order:

    1. The pending set is closed first if its wait has ended (exactly as ``due(now)`` would), so
       the outcome does not depend on how often the caller polls ``due``.
    2. Jump back: a stamp more than ``JUMP_BACK_NS`` before the newest stamp taken from the same
       LiDAR starts a new timeline (a bag loop, a simulation restart). The pending set is closed
       and returned, so nothing is lost, the old timeline is forgotten (no cloud of the new one
       counts as late against it), and the cloud starts a new set. One LiDAR whose clock runs
       behind the others' is no jump: its clouds are late (3), and every set names it missing.
    3. Late: the cloud is dropped and counted in ``late`` when it is not newer than its own
       LiDAR's cloud in the last closed set, or, its LiDAR missing from that set, when its stamp
       is ``<=`` that set's reference + tolerance (it belonged there and came after it closed);
       or before the pending set's reference - tolerance (between the closed set and the pending
       one); or not newer than its own LiDAR's cloud already in the pending set (a stale
       repeat). A LiDAR's next cloud is never late against the set its previous one closed,
       whatever the tolerance (20 Hz LiDARs at a 50 ms tolerance, or LiDARs stamped apart by
       more than half the period). Set stamps strictly increase within a timeline (but for that
       one step back, below): every member is newer than its own LiDAR's previous one.
       A LiDAR whose clock runs ahead of the others' would open every set and make theirs late
       (one cloud stamped far ahead, then silence, alike). From stamps alone, a clock a period
       ahead cannot be told from the others' clouds arriving a period later; the clock they
       arrive by can (``clock_ns``: the node's clock, live; the bag's receive time, offline).
       With that clock, a LiDAR runs ahead (``ahead``: name -> by how much, ns) when
       ``AHEAD_SETS`` of its fresh clouds in a row (each newer than its last one received;
       one is enough a second ahead) are stamped more than ``EARLY_NS`` (or the tolerance)
       after they arrived while another LiDAR's latest is not, and comes back when stamped
       within half that of the clock. Without it, with three LiDARs or more, one runs ahead when
       its newest stamp lies more than ``JUMP_BACK_NS`` above ``AHEAD_SETS`` fresh clouds in a
       row of every other LiDAR (no latency explains a second), and comes back when stamped
       within half a second of their newest. Its pending cloud is dropped (counted late) and the
       sets it opened are forgotten, so the others' clouds count against their own last ones
       again (the set stamps step back once, from its stamps to theirs); its clouds are then
       dropped as late, the others form the sets and it is named missing, as a LiDAR running
       behind is.
       ``take_news`` says when it is left out and when it is back, and when sets keep closing
       before they are whole though every LiDAR sends (``_note_split``).
    4. The cloud joins the pending set when within the tolerance of its reference and its sensor
       is not in it yet; a set holding every configured sensor is closed and returned at once.
    5. Otherwise (a newer stamp past the tolerance, or a newer cloud of a sensor already in the
       set) the pending set is closed and returned, and the cloud starts a new set.

    So one ``add`` returns at most one set: a closed set leaves nothing pending, and a one-cloud
    set is complete only with one configured name, which never leaves a set pending. Members are
    within the tolerance of the reference, so a set's stamps span at most twice the tolerance.
    ``tolerance_ns`` and ``max_delay_s`` may be set at any time (live parameters); the deadline
    is computed when asked, so a new ``max_delay_s`` applies to the pending set too.
    """

    def __init__(self, names: Iterable[str], tolerance_s: float, max_delay_s: float):
        self.names = tuple(names)
        if not self.names or len(set(self.names)) != len(self.names):
            raise ValueError(f'LiDAR names must be distinct and not empty, got {self.names}')
        if tolerance_s < 0 or max_delay_s < 0:
            raise ValueError(f'tolerance_s ({tolerance_s}) and max_delay_s ({max_delay_s}) '
                             'must be >= 0')
        self.tolerance_ns = int(round(tolerance_s * 1e9))
        self.max_delay_s = float(max_delay_s)
        self.late = 0
        self._late_taken = 0                            # of ``late``, by ``take_late``
        self._clouds: dict[str, tuple[int, Any]] = {}   # the pending set: name -> (stamp, msg)
        self._ref_ns: int | None = None                 # the pending set's reference stamp
        self._opened = 0.0                              # ``now`` of the pending set's first cloud
        self._last_ref_ns: int | None = None            # the last closed set's reference stamp
        self._last_stamps: dict[str, int] = {}          # the last closed set: name -> stamp
        self._newest: dict[str, int] = {}               # name -> newest stamp taken, this timeline
        self.ahead: dict[str, int] = {}                 # name -> how far its clock runs ahead (ns)
        self._seen: dict[str, int] = {}                 # name -> its newest stamp received
        self._early: dict[str, int] = {}      # name -> fresh clouds stamped after they came
        self._behind: dict[str, int] = {}     # name -> fresh clouds stamped a second before
        self._said_behind: set[str] = set()   # the LiDARs said to run behind, not yet back
        self._below: dict[tuple[str, str], int] = {}    # (above, a second below) -> in a row
        self._split = _SplitRun()
        self._news: list[str] = []

    def reset(self) -> None:
        """Forget the pending set and the last closed set; the ``late`` count keeps running."""
        self._clouds = {}
        self._ref_ns = None
        self._forget_timeline()

    def _forget_timeline(self) -> None:
        self._last_ref_ns = None
        self._last_stamps, self._newest = {}, {}
        self.ahead, self._seen, self._early, self._below = {}, {}, {}, {}
        self._behind, self._said_behind = {}, set()
        self._split = _SplitRun()

    def deadline(self) -> float | None:
        """Return when the pending set's wait ends (first arrival + max_delay_s), None if none."""
        return None if self._ref_ns is None else self._opened + self.max_delay_s

    def due(self, now: float) -> LidarSet | None:
        """Close and return the pending set if its wait has ended (now >= deadline), else None."""
        end = self.deadline()
        return None if end is None or now < end else self._close(now)

    def flush(self, now: float) -> LidarSet | None:
        """Close and return the pending set whatever its state (end of a bag), None if none."""
        return None if self._ref_ns is None else self._close(now)

    def add(self, name: str, stamp_ns: int, msg: Any, now: float,
            clock_ns: int | None = None) -> list[LidarSet]:
        """
        Offer one cloud; return the sets this closed, oldest first (see the class docstring).

        ``now``: seconds, for the waits; ``clock_ns``: when the cloud arrived on the clock of
        the stamps (None: unknown, no LiDAR is found ahead of it).
        """
        if name not in self.names:
            raise ValueError(f'unknown LiDAR {name!r}; configured: {", ".join(self.names)}')
        closed = [s for s in (self.due(now),) if s is not None]
        newest = self._newest.get(name)
        if newest is not None and stamp_ns < newest - JUMP_BACK_NS:
            closed.extend(s for s in (self.flush(now),) if s is not None)
            self._news.extend(map(_back, self.ahead))   # a new timeline: every LiDAR is back
            self._forget_timeline()
        self._judge_clock(name, stamp_ns, clock_ns)
        if name in self.ahead and not self._caught_up(name, stamp_ns, clock_ns):
            self.late += 1
            return closed
        if self._is_late(name, stamp_ns):
            self.late += 1
            return closed
        if self._ref_ns is not None and name not in self._clouds:
            # Not late, so not below the window: it fits unless past the window's top.
            if stamp_ns <= self._ref_ns + self.tolerance_ns:
                self._clouds[name] = (stamp_ns, msg)
                self._newest[name] = stamp_ns
                if len(self._clouds) == len(self.names):
                    closed.append(self._close(now))
                return closed
        closed.extend(s for s in (self.flush(now),) if s is not None)
        self._clouds = {name: (stamp_ns, msg)}
        self._newest[name] = stamp_ns
        self._ref_ns = stamp_ns
        self._opened = now
        if len(self.names) == 1:
            closed.append(self._close(now))
        return closed

    def _is_late(self, name: str, stamp_ns: int) -> bool:
        """Return True for a cloud that belongs with, or before, a set already closed or open."""
        last = self._last_stamps.get(name)
        if last is not None:
            if stamp_ns <= last:
                return True
        elif self._last_ref_ns is not None and stamp_ns <= self._last_ref_ns + self.tolerance_ns:
            return True
        if self._ref_ns is None:
            return False
        if stamp_ns < self._ref_ns - self.tolerance_ns:
            return True
        held = self._clouds.get(name)
        return held is not None and stamp_ns <= held[0]

    def _caught_up(self, name: str, stamp_ns: int, clock_ns: int | None) -> bool:
        """Return True (and take it back) when a LiDAR ahead is stamped with the others again."""
        # Back within half the lead that took it out: a clock drifting about the threshold,
        # jitter on it, flipped the LiDAR in and out (and said so) every second or so.
        if clock_ns is not None:
            back = stamp_ns - clock_ns <= self._early_ns() // 2
        else:       # the rule that found it, the other way round
            others = [s for n, s in self._seen.items() if n != name]
            back = bool(others) and stamp_ns <= max(others) + JUMP_BACK_NS // 2
        if not back:
            return False
        del self.ahead[name]
        self._seen[name], self._early[name] = stamp_ns, 0    # its stamps ahead: no evidence
        self._news.append(_back(name))
        return True

    def _early_ns(self) -> int:
        return max(EARLY_NS, self.tolerance_ns)

    def _judge_clock(self, name: str, stamp_ns: int, clock_ns: int | None) -> None:
        """Count a fresh cloud as evidence of a clock ahead or behind; act on it when due."""
        newest = self._seen.get(name)
        if newest is not None and stamp_ns <= newest:
            return                      # a repeat or out of order: no evidence either way
        self._seen[name] = stamp_ns
        if clock_ns is not None:
            lead = stamp_ns - clock_ns
            early = AHEAD_SETS if lead > JUMP_BACK_NS else self._early.get(name, 0) + 1
            self._early[name] = early if lead > self._early_ns() else 0
            if (name not in self.ahead and self._early[name] >= AHEAD_SETS
                    and any(self._early.get(n) == 0 for n in self.names if n != name)):
                self._take_ahead(name, lead, 'the clock they arrive by')
            self._judge_behind(name, lead)
            return
        if len(self.names) < 3:
            return
        for other, last in list(self._seen.items()):
            if other == name or other in self.ahead:
                continue
            far = last - stamp_ns > JUMP_BACK_NS
            self._below[other, name] = self._below.get((other, name), 0) + 1 if far else 0
            if all(self._below.get((other, n), 0) >= AHEAD_SETS
                   for n in self.names if n != other):
                self._take_ahead(other, last - max(s for n, s in self._seen.items()
                                                   if n != other), "the other LiDARs'")

    def _judge_behind(self, name: str, lead: int) -> None:
        """
        Say once when a LiDAR's clock runs a second or more behind the clock, and when half that.

        Its clouds are then late for the others' sets whatever sync.max_lidar_delay_s; it is
        left as it is (counted late and missing), only said. Not while every LiDAR is behind (a
        host clock behind the rig's: the sets are made alike).
        """
        behind = lead < -JUMP_BACK_NS
        self._behind[name] = min(self._behind.get(name, 0) + 1, AHEAD_SETS) if behind else 0
        others = any(self._behind.get(n) == 0 for n in self.names if n != name)
        if (self._behind[name] == AHEAD_SETS and others
                and name not in self._said_behind):
            self._said_behind.add(name)
            self._news.append(
                f'LiDAR {name}: its stamps run {-lead / 1e9:.3f} s behind the clock they arrive '
                'by (a clock not synchronised?): its clouds are too late for the sets of the '
                'others')
        elif lead >= -JUMP_BACK_NS // 2 and name in self._said_behind:   # as ahead: half
            self._said_behind.discard(name)
            self._news.append(f'LiDAR {name}: stamped with the clock again')

    def _take_ahead(self, name: str, by_ns: int, than: str) -> None:
        """Leave LiDAR ``name`` out: its pending cloud, and the sets it made the others late to."""
        self.ahead[name] = by_ns
        self._below = {pair: n for pair, n in self._below.items() if name not in pair}
        if self._clouds.pop(name, None) is not None:
            self.late += 1              # dropped as its next clouds will be: counted alike
            self._ref_ns = min((s for s, _ in self._clouds.values()), default=None)
        # The others' clouds are late against their own last ones again, not against its sets.
        self._last_stamps = {n: s for n, s in self._newest.items() if n != name}
        self._last_ref_ns = min(self._last_stamps.values(), default=None)
        self._news.append(
            f'LiDAR {name}: its stamps run {by_ns / 1e9:.3f} s ahead of {than} (a clock not '
            'synchronised?): its clouds are left out and the others make the frames until it '
            'is stamped with them')

    def take_late(self) -> int:
        """Return how many clouds were dropped as late since the last call."""
        new, self._late_taken = self.late - self._late_taken, self.late
        return new

    def take_news(self) -> list[str]:
        """Return what changed about a LiDAR's clock since the last call (a line each)."""
        news, self._news = self._news, []
        return news

    def _note_split(self, stamps: dict[str, int]) -> None:
        """
        Follow sets closed before they were whole; say when the LiDARs' stamps lie too far apart.

        LiDARs stamped steadily further apart than the tolerance (but less than a period)
        never share a set: each set closes missing one, the next holds it, and no cloud is
        late, while the health names every LiDAR missing in turn. Told apart from a LiDAR that
        stopped (never in the run) and from a clock ahead or behind (their clouds are late):
        ``AHEAD_SETS`` sets in a row not whole that hold every LiDAR between them, no cloud
        late meanwhile. Said once, until a set is whole.
        """
        run = self._split
        if len(stamps) == len(self.names):
            self._split = _SplitRun()
            return
        if not run.sets or run.late != self.late:       # a run starts, or starts over
            run.sets, run.seen, run.spread_ns, run.late = 0, set(), 0, self.late
        elif self._last_ref_ns is not None:             # the previous set of the run
            run.spread_ns = max([run.spread_ns] + [s - self._last_ref_ns for n, s in
                                                   stamps.items() if n not in self._last_stamps])
        run.sets += 1
        run.seen |= set(stamps)
        if (run.sets >= AHEAD_SETS and len(run.seen) == len(self.names) and not run.said
                and not self.ahead):
            run.said = True
            self._news.append(
                f'LiDAR sets not whole {run.sets} times in a row, though every LiDAR sends: '
                f'their clouds are stamped up to {run.spread_ns / 1e9:.3f} s apart, past '
                f'sync.lidar_stamp_tolerance_s ({self.tolerance_ns / 1e9:g} s); if the LiDARs '
                'are stamped this far apart, set it and sync.max_lidar_delay_s above that')

    def _close(self, now: float) -> LidarSet:
        """Close the pending set and return it; its reference becomes the last closed one."""
        order = [n for n in self.names if n in self._clouds]
        stamps = {n: self._clouds[n][0] for n in order}
        self._note_split(stamps)
        done = LidarSet(clouds={n: self._clouds[n][1] for n in order}, stamps=stamps,
                        stamp_ns=min(stamps.values()),
                        missing=tuple(n for n in self.names if n not in self._clouds),
                        closed=now)
        self._last_ref_ns, self._last_stamps = self._ref_ns, stamps
        self._clouds = {}
        self._ref_ns = None
        return done


@dataclass
class _SplitRun:
    """Sets closed in a row before they were whole (``LidarSets._note_split``)."""

    sets: int = 0
    seen: set = field(default_factory=set)     # the LiDARs in them
    spread_ns: int = 0                         # the widest stamp spread seen between them
    late: int = 0                              # ``LidarSets.late`` when the run started
    said: bool = False


def _back(name: str) -> str:
    """Return the line that says a LiDAR left out for a clock ahead is back in the frames."""
    return f'LiDAR {name}: stamped with the other LiDARs again, back in the frames'
