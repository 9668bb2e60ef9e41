"""
A small ROS-free transform buffer: the TF tree of /tf_static and /tf, looked up in float64.

tf2_ros is not on PyPI, and the node needs little of it: this buffer keeps, for every child
frame, its one parent and either a static transform (valid at all times) or a bounded history
of stamped dynamic ones (the last ``cache_s`` seconds, 10 s like tf2). Messages are read by
attribute (geometry_msgs/TransformStamped: ``header.frame_id`` the parent, ``child_frame_id``,
``header.stamp``, ``transform.translation`` / ``rotation``), so rclpy and rosbags messages both
work; nothing here imports ROS.

``lookup(target, source, stamp_ns)`` returns the 4 x 4 float64 transform that maps points in
``source`` into ``target`` (tf2's lookupTransform): the chains of both frames up to their
common ancestor, each dynamic edge interpolated between its two samples bracketing the stamp
(translation linear, rotation slerp), composed in float64. A stamp past an edge's newest or
before its oldest sample by at most ``tolerance_s`` takes that sample; further is an
extrapolation, refused.

A dynamic stamp older than its edge's newest is told by how far back it goes. Up to
``clock_jump_s`` (``CLOCK_JUMP_S``, 1 s) back, it is a late sample (two publishers of one edge,
a reordering transport): as in tf2, it goes into its own edge's history at its place by stamp
(an equal stamp replaces), counted in ``reordered``; no other edge is touched. Further back, the
clock itself jumped back (a bag loop goes back by the bag's length, a restarted simulator to
about 0): every dynamic history is cleared first, counted in ``resets``, so two timelines never
mix; static transforms stay. The limit is never above ``cache_s``: a backwards sample is always
one or the other, never one too old to store that would leave its edge stuck until the new
clock passed the old. The price of a short limit: a sample late by more than it resets as a
jump would, and a jump back by less mixes the two timelines until the old samples age out.

The table of frames is bounded: at most ``max_frames`` (``MAX_FRAMES``) child frames, each
with its edge. A transform that would add one more is refused (TransformError naming the frame
and the limit) and counted in ``refused_frames``; transforms of frames already in the table are
always stored. A lookup walks parent links only, so it costs the same with 10 frames or at the
limit: a frame is known when it is a child in the table or the parent of one (children are
counted per parent on every add, re-parenting and clear).

Every problem is a :class:`TransformError` naming the frames or the field and why.
Thread safety: every method may be called from any thread (one lock, held briefly).
"""

import bisect
import math
import threading

import numpy as np

from .rotations import interpolate_pose, transform_matrix
from .stamps import NS_PER_S, stamp_fields_error, stamp_ns

TF_TOPIC, TF_STATIC_TOPIC = '/tf', '/tf_static'     # tf2_msgs/TFMessage (bagio.TF_TYPE)
CACHE_S = 10.0                 # s of dynamic history kept per edge, as tf2's default
TOLERANCE_S = 0.01             # s a lookup may lie beyond an edge's samples
# |q.q - 1| accepted (and normalised): tf2's own rule (buffer_core.cpp), so a hand-written
# static transform such as (0, 0, 0.71, 0.71) that tf2 and RViz take is taken here too.
QUATERNION_TOLERANCE = 1e-2
MAX_TRANSLATION_M = 1e8        # |x|, |y|, |z|: no place on Earth or near it is further
CLOCK_JUMP_S = 1.0             # s back on an edge that is a jump of the clock, not a late sample
MAX_FRAMES = 10_000            # child frames in a buffer: far beyond any robot, bounds memory


class TransformError(ValueError):
    """A transform that cannot be stored or looked up; the message names the frames and why."""


def invert(m: np.ndarray) -> np.ndarray:
    """Invert a rigid 4 x 4 transform exactly (transpose the rotation)."""
    inverse = np.eye(4)
    inverse[:3, :3] = m[:3, :3].T
    inverse[:3, 3] = -m[:3, :3].T @ m[:3, 3]
    return inverse


def read_transform(msg) -> tuple[str, str, int, np.ndarray, np.ndarray]:
    """
    Check a geometry_msgs/TransformStamped; return (parent, child, stamp ns, t, unit q).

    Refused with TransformError naming the field: empty frame names (a leading '/' is dropped,
    as tf2 does), a frame its own parent, a stamp with negative seconds or nanoseconds outside
    [0, 1e9), a translation not finite or beyond ``MAX_TRANSLATION_M``, a rotation not finite
    or whose squared norm is off 1 by more than ``QUATERNION_TOLERANCE`` (others are
    normalised).
    """
    parent = str(msg.header.frame_id).lstrip('/')
    child = str(msg.child_frame_id).lstrip('/')
    if not parent:
        raise TransformError(f'header.frame_id is empty (child_frame_id "{child}")')
    if not child:
        raise TransformError(f'child_frame_id is empty (header.frame_id "{parent}")')
    if parent == child:
        raise TransformError(f'child_frame_id "{child}" is its own parent (header.frame_id)')
    where = f'transform "{parent}" -> "{child}"'
    malformed = stamp_fields_error(msg.header.stamp)
    if malformed is not None:
        raise TransformError(f'{where}: {malformed}')
    t, r = msg.transform.translation, msg.transform.rotation
    translation = np.array([t.x, t.y, t.z], np.float64)
    quaternion = np.array([r.x, r.y, r.z, r.w], np.float64)
    if not np.isfinite(translation).all() or np.abs(translation).max() > MAX_TRANSLATION_M:
        raise TransformError(f'{where}: transform.translation {translation.tolist()} is not '
                             f'finite or beyond {MAX_TRANSLATION_M:.0e} m')
    norm = float(np.linalg.norm(quaternion)) if np.isfinite(quaternion).all() else math.nan
    if not abs(norm * norm - 1.0) <= QUATERNION_TOLERANCE:
        raise TransformError(f'{where}: transform.rotation {quaternion.tolist()} is not a unit '
                             f'quaternion (norm {norm:.4g})')
    return parent, child, stamp_ns(msg.header.stamp), translation, quaternion / norm


class _Edge:
    """A child's transform from its parent: one static sample, or stamped dynamic samples."""

    __slots__ = ('parent', 'static', 'stamps', 'samples')

    def __init__(self, parent: str, static: bool):
        self.parent, self.static = parent, static
        self.stamps: list[int] = []
        self.samples: list[tuple[np.ndarray, np.ndarray]] = []

    def matrix_at(self, stamp: int, tolerance_ns: int,
                  max_gap_ns: int | None = None) -> np.ndarray | str:
        """
        Return the parent-from-child transform at ``stamp``, or why there is none.

        ``max_gap_ns``: no interpolation between two samples further apart (None: any).
        """
        stamps = self.stamps
        if self.static or stamp == stamps[-1]:
            return transform_matrix(*self.samples[-1])
        if stamp > stamps[-1]:
            if stamp - stamps[-1] > tolerance_ns:
                return (f'extrapolation into the future: the newest transform is '
                        f'{(stamp - stamps[-1]) / 1e9:.3f} s older than the stamp')
            return transform_matrix(*self.samples[-1])
        if stamp < stamps[0]:
            if stamps[0] - stamp > tolerance_ns:
                return (f'extrapolation into the past: the oldest transform kept is '
                        f'{(stamps[0] - stamp) / 1e9:.3f} s newer than the stamp')
            return transform_matrix(*self.samples[0])
        after = bisect.bisect_right(stamps, stamp)
        if stamps[after - 1] == stamp:
            return transform_matrix(*self.samples[after - 1])
        gap = stamps[after] - stamps[after - 1]
        if max_gap_ns is not None and gap > max_gap_ns:
            return f'its transforms about the stamp are {gap / 1e9:.3f} s apart'
        (t0, q0), (t1, q1) = self.samples[after - 1], self.samples[after]
        fraction = (stamp - stamps[after - 1]) / gap
        return interpolate_pose(t0, q0, t1, q1, fraction)


class TransformBuffer:
    """
    The TF tree: static and dynamic edges, each child with one parent; see the module doc.

    ``add(msg, static)`` stores one TransformStamped, ``add_message(msg, static)`` every
    transform of a tf2_msgs/TFMessage; ``lookup`` composes; ``clear`` forgets everything.
    The counters ``resets``, ``reordered`` and ``refused_frames`` are totals since creation
    (``clear`` keeps them).
    """

    def __init__(self, cache_s: float = CACHE_S, tolerance_s: float = TOLERANCE_S,
                 clock_jump_s: float = CLOCK_JUMP_S, max_frames: int = MAX_FRAMES):
        self.cache_ns = int(round(cache_s * NS_PER_S))
        self.tolerance_ns = int(round(tolerance_s * NS_PER_S))
        # Never beyond the cache: a sample further back could not be stored (see the module doc).
        self.clock_jump_ns = min(int(round(clock_jump_s * NS_PER_S)), self.cache_ns)
        self.max_frames = int(max_frames)
        self.resets = 0           # dynamic histories cleared for a jump of the clock back
        self.reordered = 0        # late dynamic samples inserted into their edge's history
        self.refused_frames = 0   # transforms refused for a new frame beyond ``max_frames``
        self._edges: dict[str, _Edge] = {}    # child -> edge from its parent
        self._parents: dict[str, int] = {}    # parent -> how many children it has in _edges
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every transform, static ones included."""
        with self._lock:
            self._edges.clear()
            self._parents.clear()

    def add_message(self, msg, static: bool) -> int:
        """
        Store every transform of a TFMessage; return how many were stored.

        The good ones are stored even when some are refused; then TransformError names each
        refused transform and why.
        """
        problems, stored = [], 0
        for transform in msg.transforms:
            try:
                self.add(transform, static)
                stored += 1
            except TransformError as exc:
                problems.append(str(exc))
        if problems:
            raise TransformError('; '.join(problems))
        return stored

    def add(self, msg, static: bool) -> None:
        """Check and store one TransformStamped (see ``read_transform``); raises TransformError."""
        parent, child, stamp, translation, quaternion = read_transform(msg)
        with self._lock:
            edge = self._edges.get(child)
            if edge is None and len(self._edges) >= self.max_frames:
                self.refused_frames += 1
                raise TransformError(f'transform "{parent}" -> "{child}": frame "{child}" is '
                                     f'new and the buffer already holds {self.max_frames} '
                                     f'frames (max_frames); transforms of known frames are '
                                     f'still stored')
            ancestor = parent
            while ancestor in self._edges:
                ancestor = self._edges[ancestor].parent
                if ancestor == child:
                    raise TransformError(f'transform "{parent}" -> "{child}": "{child}" is '
                                         f'already an ancestor of "{parent}" (a loop)')
            if edge is None or edge.parent != parent or edge.static != static:
                if edge is not None:
                    self._forget_parent(edge.parent)
                edge = self._edges[child] = _Edge(parent, static)   # a new parent replaces
                self._parents[parent] = self._parents.get(parent, 0) + 1
            sample = (translation, quaternion)
            if static:
                edge.stamps, edge.samples = [stamp], [sample]
                return
            stamps = edge.stamps
            if stamps and stamp < stamps[-1]:
                # A late sample touches its own edge; a jump of the clock, every dynamic one.
                if stamps[-1] - stamp <= self.clock_jump_ns:
                    self._insert_late(edge, stamp, sample)
                    return
                self._reset_dynamic()
            if stamps and stamp == stamps[-1]:
                edge.samples[-1] = sample
                return
            stamps.append(stamp)
            edge.samples.append(sample)
            keep = bisect.bisect_left(stamps, stamp - self.cache_ns)
            if keep:
                del stamps[:keep], edge.samples[:keep]

    def _insert_late(self, edge: _Edge, stamp: int, sample) -> None:
        """Put a sample older than its edge's newest at its place; it is within the cache."""
        at = bisect.bisect_left(edge.stamps, stamp)
        if edge.stamps[at] == stamp:
            edge.samples[at] = sample
        else:
            edge.stamps.insert(at, stamp)
            edge.samples.insert(at, sample)
        self.reordered += 1

    def _forget_parent(self, parent: str) -> None:
        """Drop one child from ``parent``'s count; with none left it is no longer a frame."""
        left = self._parents[parent] - 1
        if left:
            self._parents[parent] = left
        else:
            del self._parents[parent]

    def _reset_dynamic(self) -> None:
        """Clear every dynamic history (the clock jumped back); static edges stay."""
        for edge in self._edges.values():
            if not edge.static:
                edge.stamps.clear()
                edge.samples.clear()
        self.resets += 1

    def lookup(self, target: str, source: str, stamp_ns: int, max_gap_ns: int | None = None,
               tolerance_ns: int | None = None) -> np.ndarray:
        """
        Return the float64[4, 4] transform of points in ``source`` into ``target`` at a stamp.

        Raises TransformError naming both frames: an unknown frame, no path between them (two
        trees), an edge without a transform within ``tolerance_ns`` of ``stamp_ns``
        (extrapolation; None: the buffer's ``tolerance_s``), or, with ``max_gap_ns``, a
        dynamic edge whose samples about it are further apart. A leading
        '/' is dropped, as from the transforms stored (tf2 does the same): a cloud framed
        "/lidar" finds "lidar".
        """
        target, source = target.lstrip('/'), source.lstrip('/')
        if target == source:
            return np.eye(4)
        with self._lock:
            # Known: a child in the table or a parent of one. Both are dict look-ups: never a
            # pass over the whole table, whose size must not set the cost of a lookup.
            for frame in (source, target):
                if frame not in self._edges and frame not in self._parents:
                    raise TransformError(f'cannot transform "{source}" into "{target}": frame '
                                         f'"{frame}" is unknown (not in /tf or /tf_static)')
            up_source, up_target = self._chain(source), self._chain(target)
            in_target = set(up_target)
            common = next((f for f in up_source if f in in_target), None)
            if common is None:
                raise TransformError(f'cannot transform "{source}" into "{target}": no path, '
                                     f'their trees have the roots "{up_source[-1]}" and '
                                     f'"{up_target[-1]}"')
            tolerance = self.tolerance_ns if tolerance_ns is None else tolerance_ns
            from_source = self._compose(up_source, common, stamp_ns, source, target, max_gap_ns,
                                        tolerance)
            from_target = self._compose(up_target, common, stamp_ns, source, target, max_gap_ns,
                                        tolerance)
        return invert(from_target) @ from_source

    def latest_ns(self, target: str, source: str) -> int | None:
        """
        Return the newest stamp at which ``lookup(target, source, stamp)`` needs no hold.

        tf2's latest common time: the oldest of the newest samples of the dynamic edges
        between the two frames. None when a frame is unknown, there is no path, or no edge
        between them is dynamic (a static chain has no time) or one has no sample since a reset.
        """
        target, source = target.lstrip('/'), source.lstrip('/')
        with self._lock:
            if any(f not in self._edges and f not in self._parents for f in (source, target)):
                return None
            up_source, up_target = self._chain(source), self._chain(target)
            in_target = set(up_target)
            common = next((f for f in up_source if f in in_target), None)
            if common is None:
                return None
            dynamic = [self._edges[child] for chain in (up_source, up_target)
                       for child in chain[:chain.index(common)]
                       if not self._edges[child].static]
            if not dynamic or not all(edge.stamps for edge in dynamic):
                return None
            return min(edge.stamps[-1] for edge in dynamic)

    def _chain(self, frame: str) -> list[str]:
        """Return ``frame`` and its ancestors up to the root (the tree has no loops)."""
        chain = [frame]
        while chain[-1] in self._edges:
            chain.append(self._edges[chain[-1]].parent)
        return chain

    def _compose(self, chain, common, stamp, source, target, max_gap_ns,
                 tolerance_ns) -> np.ndarray:
        """Return the transform from ``chain[0]`` into its ancestor ``common`` at ``stamp``."""
        m = np.eye(4)
        for child in chain[:chain.index(common)]:
            edge = self._edges[child]
            step = edge.matrix_at(stamp, tolerance_ns, max_gap_ns) if edge.stamps else \
                'no transform since the last reset'
            if isinstance(step, str):
                raise TransformError(f'cannot transform "{source}" into "{target}" at '
                                     f'{stamp} ns: edge "{edge.parent}" -> "{child}": {step}')
            m = step @ m
        return m
