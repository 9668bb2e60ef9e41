"""Message stamps (builtin_interfaces/Time, read by attribute) <-> integer nanoseconds."""

NS_PER_S = 1_000_000_000


def stamp_ns(stamp) -> int:
    """builtin_interfaces/Time (rclpy or rosbags) -> integer nanoseconds."""
    return stamp.sec * NS_PER_S + stamp.nanosec


def split_ns(ns: int) -> tuple[int, int]:
    """Integer nanoseconds -> (sec, nanosec) as a Time message holds them."""
    return divmod(int(ns), NS_PER_S)
