"""Message stamps (builtin_interfaces/Time, read by attribute) <-> integer nanoseconds."""

NS_PER_S = 1_000_000_000

# A cloud stamped further than this ahead of the node's clock is refused: once taken, every
# cloud after it would look like a jump back in time and reset the camera buffers (and, of
# several LiDARs, the others' clouds would be late for its set).
MAX_FUTURE_STAMP_S = 1.0


def stamp_refused(stamp: int, now_ns: int | None) -> str | None:
    """
    Return why the node refuses a cloud stamped ``stamp`` (ns) that arrived at ``now_ns``.

    None when it takes it, and always without a clock (``now_ns`` None: offline, or a sim
    clock before its first /clock). Refused: a stamp of 0 (a driver that does not stamp: the
    cameras, TF, deskew and accumulation pair by stamps), and one more than
    :data:`MAX_FUTURE_STAMP_S` ahead of the clock.
    """
    if now_ns is None:
        return None
    if stamp == 0 and now_ns > MAX_FUTURE_STAMP_S * 1e9:    # a simulation's first sweep: 0
        return ('header.stamp is 0: the driver does not stamp its clouds (the cameras, TF, '
                'deskew and accumulation pair by stamps)')
    if stamp - now_ns <= MAX_FUTURE_STAMP_S * 1e9:
        return None
    return (f"header.stamp is {(stamp - now_ns) / 1e9:.3f} s ahead of the node's clock "
            f'(more than {MAX_FUTURE_STAMP_S:g} s): a sensor clock or a bag stamp is wrong, '
            'or under use_sim_time /clock has stopped')


def stamp_fields_error(stamp) -> str | None:
    """
    Return why a header stamp (builtin_interfaces/Time) is malformed; None when it is not.

    Negative seconds, or nanoseconds outside [0, 1e9): rclpy takes either, and the stamp's
    nanoseconds would then name a time the message does not say (published with the node's
    outputs as another stamp, so nothing could pair them by stamp).
    """
    sec, nanosec = int(stamp.sec), int(stamp.nanosec)
    if sec < 0 or not 0 <= nanosec < NS_PER_S:
        return (f'header.stamp is sec {sec}, nanosec {nanosec}: seconds must be >= 0 and '
                f'nanoseconds in [0, {NS_PER_S})')
    return None


def stamp_ns(stamp) -> int:
    """builtin_interfaces/Time (rclpy or rosbags) -> integer nanoseconds."""
    return stamp.sec * NS_PER_S + stamp.nanosec


def split_ns(ns: int) -> tuple[int, int]:
    """Integer nanoseconds -> (sec, nanosec) as a Time message holds them."""
    return divmod(int(ns), NS_PER_S)
