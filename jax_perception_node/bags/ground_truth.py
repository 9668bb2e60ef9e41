"""The ground truth of a bag (a sample drive's ``/ground_truth/objects``), keyed by LiDAR stamp."""

from collections import Counter

from . import bagio
from ..geometry.stamps import stamp_ns
from ..outputs.objects import boxes_from_detections, GROUND_TRUTH_TOPIC


def read_ground_truth(reader, types: dict[str, str], classes: tuple[str, ...],
                      errors: list[str], left_out: Counter) -> dict[int, object] | None:
    """
    Return LiDAR stamp (ns) -> ground-truth rows (float32[n, 9]) of the bag, or None.

    The rows' class column indexes ``classes`` (the head's). None when there is nothing to
    evaluate: no head (``classes`` empty), no ``GROUND_TRUTH_TOPIC`` of the Detection3DArray
    type, or ground truth that shares no class with the head (boxes, none of a head class). A
    message that does not deserialize is left out, with a line in ``errors``. Boxes of classes
    the head does not know are left out and counted in ``left_out`` by class_id (also when
    None is returned); the rest of their message is kept.
    """
    if not classes or types.get(GROUND_TRUTH_TOPIC) != bagio.DETECTIONS_TYPE:
        return None
    truth, unknown = {}, Counter()
    for _, timestamp, raw, msgtype in bagio.iter_messages(reader, [GROUND_TRUTH_TOPIC]):
        try:
            msg = bagio.deserialize(raw, msgtype)
            truth[stamp_ns(msg.header.stamp)] = boxes_from_detections(msg, classes, unknown)
        except (bagio.BagError, ValueError) as exc:
            errors.append(f'{GROUND_TRUTH_TOPIC} at {timestamp}: {exc}')
    left_out.update(unknown)
    if unknown and not any(len(rows) for rows in truth.values()):
        return None         # no class in common: nothing of the head's to score
    return truth
