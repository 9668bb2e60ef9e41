"""Message stamps (builtin_interfaces/Time, read by attribute) <-> integer nanoseconds."""

NS_PER_S = 1_000_000_000

# A cloud stamped further than this ahead of the node's clock is refused: once taken, every
# cloud after it would look like a jump back in time and reset the camera buffers (and, of
# several LiDARs, the others' clouds would be late for its set).
MAX_FUTURE_STAMP_S = 1.0


def stamp_ahead(stamp: int, now_ns: int | None) -> str | None:
    """Return why a cloud stamped ``stamp`` (ns) is refused at ``now_ns``, None if it is not."""
    if now_ns is None or stamp - now_ns <= MAX_FUTURE_STAMP_S * 1e9:
        return None
    return (f"header.stamp is {(stamp - now_ns) / 1e9:.3f} s ahead of the node's clock "
            f'(more than {MAX_FUTURE_STAMP_S:g} s): a sensor clock or a bag stamp is wrong')


def stamp_ns(stamp) -> int:
    """builtin_interfaces/Time (rclpy or rosbags) -> integer nanoseconds."""
    return stamp.sec * NS_PER_S + stamp.nanosec


def split_ns(ns: int) -> tuple[int, int]:
    """Integer nanoseconds -> (sec, nanosec) as a Time message holds them."""
    return divmod(int(ns), NS_PER_S)
