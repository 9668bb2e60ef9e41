"""
LiDAR-camera pairing: each camera contributes its feature map nearest the LiDAR stamp.

Shared by the live node and offline replay, so both pair frames identically. Stamps are
integer nanoseconds (the message header stamp).
"""

import bisect
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Pairing:
    """Feature maps chosen for one LiDAR frame: None for a masked camera."""

    maps: dict[str, Any]
    stale: tuple[str, ...]          # cameras with no map within the tolerance
    # Why, one per stale camera: how far its nearest map is from the LiDAR stamp, or none held.
    reasons: tuple[str, ...] = ()

    @property
    def used(self) -> int:
        """Cameras that contribute to this frame."""
        return sum(m is not None for m in self.maps.values())


class CameraSync:
    """
    Keeps each camera's recent feature maps in stamp order and pairs them with LiDAR stamps.

    A map pairs with a LiDAR frame when ``|t_camera - t_lidar| <= tolerance``; among those the
    nearest wins (of two as near, the newer; of equal stamps, the later arrival). The lift
    places a map with the camera's pose at the LiDAR stamp, so the nearest map is the one the
    ego motion between the two stamps moves least.

    A camera's maps are kept ``history_s`` (stamp time) after its newest, at most
    ``max_maps`` of them: a cloud is paired when the node takes it, often 0.1-0.3 s after its
    stamp, so a count alone (8 maps: 0.13 s of a 60 Hz camera) dropped the map nearest its
    stamp before it came. A map arriving out of order (a lost or late copy over best effort,
    the other image_transport copy of a stamp after the next image) is put in its place; a
    stamp more than ``history_s`` before the camera's newest is time going backwards (a bag
    loops, a simulator restarts): that camera's maps are cleared, so maps from the old
    timeline never pair with the new one.
    """

    def __init__(self, names: Iterable[str], tolerance_s: float, history_s: float = 1.0,
                 max_maps: int = 64):
        self.names = tuple(names)
        self.tolerance_ns = int(round(tolerance_s * 1e9))
        self.history_ns, self.max_maps = int(round(history_s * 1e9)), max_maps
        # camera -> (stamps ascending, maps in the same order); equal stamps in arrival order
        self._maps = {name: ([], []) for name in self.names}
        self._last_lidar_ns: int | None = None

    def reset(self) -> None:
        """Forget every buffered map and the LiDAR clock."""
        for stamps, maps in self._maps.values():
            stamps.clear()
            maps.clear()
        self._last_lidar_ns = None

    def holds(self, name: str, stamp_ns: int) -> bool:
        """Return True when camera ``name`` has a map of exactly this stamp buffered."""
        stamps = self._maps[name][0]
        k = bisect.bisect_left(stamps, stamp_ns)
        return k < len(stamps) and stamps[k] == stamp_ns

    def add(self, name: str, stamp_ns: int, features: Any) -> bool:
        """Buffer a camera's map; True when its stamp went backwards and its buffer was reset."""
        stamps, maps = self._maps[name]
        jumped = bool(stamps) and stamp_ns < stamps[-1] - self.history_ns
        if jumped:
            stamps.clear()
            maps.clear()
        k = bisect.bisect_right(stamps, stamp_ns)     # after equal stamps: the later arrival
        stamps.insert(k, stamp_ns)
        maps.insert(k, features)
        old = max(bisect.bisect_left(stamps, stamps[-1] - self.history_ns),
                  len(stamps) - self.max_maps)
        if old > 0:
            del stamps[:old], maps[:old]
        return jumped

    def pair(self, lidar_stamp_ns: int) -> tuple[Pairing, bool]:
        """
        Pick each camera's map for a LiDAR frame; also True when the LiDAR clock went back.

        On a backwards LiDAR stamp every camera buffer is cleared first, except maps that are
        already within the tolerance of the new stamp (they belong to the new timeline).
        """
        jumped = self._last_lidar_ns is not None and lidar_stamp_ns < self._last_lidar_ns
        self._last_lidar_ns = lidar_stamp_ns
        chosen, stale, reasons = {}, [], []
        for name, (stamps, maps) in self._maps.items():
            if jumped:
                lo = bisect.bisect_left(stamps, lidar_stamp_ns - self.tolerance_ns)
                hi = bisect.bisect_right(stamps, lidar_stamp_ns + self.tolerance_ns)
                stamps[:], maps[:] = stamps[lo:hi], maps[lo:hi]
            # The newest map before the stamp, and the last arrival of the first at or after.
            first = bisect.bisect_left(stamps, lidar_stamp_ns)
            near = ([first - 1] if first else []) + (
                [bisect.bisect_right(stamps, stamps[first]) - 1] if first < len(stamps) else [])
            # Within the tolerance, the nearest; of two as near, the newer (the later index).
            best = min((k for k in near if abs(stamps[k] - lidar_stamp_ns) <= self.tolerance_ns),
                       key=lambda k: (abs(stamps[k] - lidar_stamp_ns), -k), default=None)
            chosen[name] = None if best is None else maps[best]
            if best is None:
                stale.append(name)
                reasons.append(_nearest(stamps[k] - lidar_stamp_ns for k in near))
        return Pairing(chosen, tuple(stale), tuple(reasons)), jumped


def _nearest(offsets_ns: Iterable[int]) -> str:
    """Say how far the nearest of a masked camera's maps is from the LiDAR stamp (ns apart)."""
    offset = min(offsets_ns, key=abs, default=None)
    if offset is None:
        return 'no map held (its topic and message type?)'
    # A camera on another clock than the LiDAR shows as a constant offset, seconds long.
    return (f'its nearest map {abs(offset) / 1e9:.3f} s {"after" if offset > 0 else "before"} '
            'the LiDAR stamp (sync.max_camera_lidar_delay_s)')
