"""
The message types beyond rosbags' Jazzy store, read from their installed .msg definitions.

rosbags knows tf2_msgs and visualization_msgs already; grid_map_msgs, vision_msgs,
autoware_internal_debug_msgs, autoware_perception_msgs (DetectedObjects and what it holds),
autoware_internal_msgs (PublishedTime) and bond (Nav2's heartbeats) it learns here from the same
.msg text rclpy's bindings were generated from, so a bag written offline carries the type hashes
(RIHS01) a live node offers.
The text comes from the installed packages' ``share/<package>/msg`` folders: on a ROS install
the prefixes of AMENT_PREFIX_PATH, in this project's venv the venv itself (``make venv`` builds
the packages into it from ``interfaces/``). No ROS import: this is plain file reading.
"""

import os
from pathlib import Path
import re
import sys

from rosbags.typesys import get_types_from_msg
from rosbags.typesys.base import TypesysError

# Package -> message names this project reads and writes; a message's dependencies first.
INTERFACE_MESSAGES = {
    'grid_map_msgs': ('GridMapInfo', 'GridMap'),
    'vision_msgs': ('ObjectHypothesis', 'ObjectHypothesisWithPose', 'BoundingBox3D',
                    'Detection3D', 'Detection3DArray'),
    'autoware_internal_debug_msgs': ('Float64Stamped',),
    'autoware_perception_msgs': ('ObjectClassification', 'DetectedObjectKinematics', 'Shape',
                                 'DetectedObject', 'DetectedObjects'),
    'autoware_internal_msgs': ('PublishedTime',),
    'bond': ('Constants', 'Status'),
}


def share_folders() -> list[Path]:
    """Return the ``share`` folders searched: AMENT_PREFIX_PATH's prefixes, then sys.prefix."""
    prefixes = [p for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    folders = []
    for prefix in [*prefixes, sys.prefix]:
        folder = Path(prefix) / 'share'
        if folder not in folders:
            folders.append(folder)
    return folders


def find_definition(package: str, message: str) -> Path | None:
    """Return the first installed ``<package>/msg/<message>.msg``, or None."""
    for folder in share_folders():
        path = folder / package / 'msg' / f'{message}.msg'
        if path.is_file():
            return path
    return None


def interface_types() -> tuple[dict, list[str]]:
    """
    Parse every installed definition of INTERFACE_MESSAGES.

    Returns (rosbags type dict to ``register``, the msgtypes whose definition was not found).
    """
    types, missing = {}, []
    for package, messages in INTERFACE_MESSAGES.items():
        for message in messages:
            msgtype = f'{package}/msg/{message}'
            path = find_definition(package, message)
            if path is None:
                missing.append(msgtype)
            else:
                types.update(get_types_from_msg(path.read_text(), msgtype))
    return types, missing


def register_interface_types(typestore) -> list[str]:
    """Register the installed interface types in ``typestore``; return the ones not found."""
    types, missing = interface_types()
    typestore.register(types)
    return missing


_UNKNOWN = re.compile(r"Type '([\w/]+)' is unknown")
MAX_DEPENDENCIES = 64


def register_installed(typestore, msgtype: str) -> str | None:
    """
    Make ``msgtype`` known to ``typestore``, with what it holds, from installed .msg files.

    A type of rosbags' store or of INTERFACE_MESSAGES is known already; another (a package of a
    stack, such as an Autoware vehicle message) is read from its installed definition, and so
    is each message it holds that the store lacks. Returns None when the type is known, else
    the first type whose definition is not installed (it cannot be written to a bag).
    """
    for _ in range(MAX_DEPENDENCIES):
        try:
            typestore.generate_msgdef(msgtype)      # walks every message the type holds
            return None
        except TypesysError as exc:
            unknown = _UNKNOWN.search(str(exc))
            if unknown is None:
                return msgtype
            missing = unknown.group(1)
        package, _, name = missing.partition('/msg/')
        path = find_definition(package, name) if name else None
        if path is None:
            return missing
        typestore.register(get_types_from_msg(path.read_text(), missing))
    return msgtype
