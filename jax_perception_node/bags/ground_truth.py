"""The ground truth of a bag (a sample drive's ``/ground_truth/objects``), keyed by LiDAR stamp."""

from collections import Counter

from . import bagio
from ..detection.detection_eval import EVALUATED_CLASS
from ..geometry.stamps import stamp_ns
from ..outputs.objects import boxes_from_detections, GROUND_TRUTH_TOPIC


def read_ground_truth(reader, types: dict[str, str], classes: tuple[str, ...],
                      errors: list[str], left_out: Counter) -> dict[int, object] | None:
    """
    Return LiDAR stamp (ns) -> ground-truth rows (float32[n, 9]) of the bag, or None.

    None when there is nothing to evaluate: no head, a head without the evaluated class, or no
    ``GROUND_TRUTH_TOPIC`` of the Detection3DArray type. A message that does not deserialize is
    left out, with a line in ``errors``. Boxes of classes the head does not know are left out
    and counted in ``left_out`` by class_id; the rest of their message is kept.
    """
    if EVALUATED_CLASS not in classes or types.get(GROUND_TRUTH_TOPIC) != bagio.DETECTIONS_TYPE:
        return None
    truth = {}
    for _, timestamp, raw, msgtype in bagio.iter_messages(reader, [GROUND_TRUTH_TOPIC]):
        try:
            msg = bagio.deserialize(raw, msgtype)
            truth[stamp_ns(msg.header.stamp)] = boxes_from_detections(msg, classes, left_out)
        except (bagio.BagError, ValueError) as exc:
            errors.append(f'{GROUND_TRUTH_TOPIC} at {timestamp}: {exc}')
    return truth
