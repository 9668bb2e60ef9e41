"""
LiDAR-camera pairing: each camera contributes its feature map nearest the LiDAR stamp.

Shared by the live node and offline replay, so both pair frames identically. Stamps are
integer nanoseconds (the message header stamp).
"""

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Pairing:
    """Feature maps chosen for one LiDAR frame: None for a masked camera."""

    maps: dict[str, Any]
    stale: tuple[str, ...]          # cameras with no map within the tolerance

    @property
    def used(self) -> int:
        """Cameras that contribute to this frame."""
        return sum(m is not None for m in self.maps.values())


class CameraSync:
    """
    Keeps the last few feature maps per camera and pairs them with LiDAR stamps.

    A map pairs with a LiDAR frame when ``|t_camera - t_lidar| <= tolerance``; among those the
    nearest wins (of two as near, the newer; of equal stamps, the later arrival). The lift
    places a map with the camera's pose at the LiDAR stamp, so the nearest map is the one the
    ego motion between the two stamps moves least. When time goes backwards (a bag loops, a
    simulator restarts) the buffers are cleared, so maps from the old timeline never pair with
    the new one.
    """

    def __init__(self, names: Iterable[str], tolerance_s: float, history: int = 8):
        self.names = tuple(names)
        self.tolerance_ns = int(round(tolerance_s * 1e9))
        self._maps = {name: deque(maxlen=history) for name in self.names}
        self._last_lidar_ns: int | None = None

    def reset(self) -> None:
        """Forget every buffered map and the LiDAR clock."""
        for maps in self._maps.values():
            maps.clear()
        self._last_lidar_ns = None

    def holds(self, name: str, stamp_ns: int) -> bool:
        """Return True when camera ``name`` has a map of exactly this stamp buffered."""
        return any(stamp == stamp_ns for stamp, _ in self._maps[name])

    def add(self, name: str, stamp_ns: int, features: Any) -> bool:
        """Buffer a camera's map; True when its stamp went backwards and its buffer was reset."""
        maps = self._maps[name]
        jumped = bool(maps) and stamp_ns < maps[-1][0]
        if jumped:
            maps.clear()
        maps.append((stamp_ns, features))
        return jumped

    def pair(self, lidar_stamp_ns: int) -> tuple[Pairing, bool]:
        """
        Pick each camera's map for a LiDAR frame; also True when the LiDAR clock went back.

        On a backwards LiDAR stamp every camera buffer is cleared first, except maps that are
        already within the tolerance of the new stamp (they belong to the new timeline).
        """
        jumped = self._last_lidar_ns is not None and lidar_stamp_ns < self._last_lidar_ns
        if jumped:
            for maps in self._maps.values():
                keep = [m for m in maps if abs(m[0] - lidar_stamp_ns) <= self.tolerance_ns]
                maps.clear()
                maps.extend(keep)
        self._last_lidar_ns = lidar_stamp_ns
        chosen, stale = {}, []
        for name, maps in self._maps.items():
            best, best_key = None, None
            for stamp, features in maps:
                gap = abs(stamp - lidar_stamp_ns)
                key = (gap, -stamp)
                if gap <= self.tolerance_ns and (best is None or key <= best_key):
                    best, best_key = (stamp, features), key
            chosen[name] = None if best is None else best[1]
            if best is None:
                stale.append(name)
        return Pairing(chosen, tuple(stale)), jumped
