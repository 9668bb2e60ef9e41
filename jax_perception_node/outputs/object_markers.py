"""
Box rows -> visualization_msgs/MarkerArray: the head's objects for RViz and Foxglove.

No ROS import, as in grid_map.py and objects.py: messages are built from classes passed in,
keyed by their ROS type names (``MESSAGE_TYPES``): rclpy's classes in the node
(``grid_map.types_by_name``), the ``rosbags`` type store's ``types`` in replay.

The array: first one DELETEALL marker (ns '': the previous frame's markers all go), then per
box row (``boxes.BOX_COLUMNS``) a CUBE (ns ``objects``, id = the row index) at the box centre,
turned by its yaw (quaternion x = y = 0, z = sin(yaw / 2), w = cos(yaw / 2)), scale = (length,
width, height), the class's colour at alpha 0.5; and a TEXT_VIEW_FACING (ns ``objects_text``,
same id) reading ``"<class> <score>"`` ``TEXT_LIFT_M`` above the box's top. Lifetime
``LIFETIME_S``: the next array replaces them, and when none comes (the LiDAR stopped, its clouds
are refused, the node was deactivated or died) RViz and Foxglove drop them on their own rather
than show the last boxes as if they were live. Not frame-locked, stamped with the LiDAR stamp.
"""

from typing import Mapping, Sequence

import numpy as np

from .objects import box_rows, header, yaw_quaternion

MARKER_ARRAY_TYPE = 'visualization_msgs/msg/MarkerArray'
# Every message class ``markers_message`` builds, by ROS type name.
MESSAGE_TYPES = (MARKER_ARRAY_TYPE, 'visualization_msgs/msg/Marker',
                 'visualization_msgs/msg/MeshFile', 'sensor_msgs/msg/CompressedImage',
                 'std_msgs/msg/Header', 'std_msgs/msg/ColorRGBA', 'builtin_interfaces/msg/Time',
                 'builtin_interfaces/msg/Duration', 'geometry_msgs/msg/Pose',
                 'geometry_msgs/msg/Point', 'geometry_msgs/msg/Quaternion',
                 'geometry_msgs/msg/Vector3')
NAMESPACE, TEXT_NAMESPACE = 'objects', 'objects_text'
CUBE, TEXT_VIEW_FACING = 1, 9          # visualization_msgs/Marker types
ADD, DELETEALL = 0, 3                  # and actions
ALPHA = 0.5
LIFETIME_S = 1.0     # ten frames of a 10 Hz LiDAR: no flicker for a dropped frame or two
TEXT_HEIGHT_M = 0.8                    # a TEXT_VIEW_FACING's scale.z: its letters' height
TEXT_LIFT_M = 0.5                      # the label's centre above the box's top
# Class index -> RGB (0..1), repeating for more classes: orange, blue, green, magenta, yellow.
PALETTE = ((1.0, 0.55, 0.1), (0.2, 0.6, 1.0), (0.3, 0.85, 0.35), (0.9, 0.3, 0.9),
           (0.95, 0.9, 0.2))


def class_colour(k: int) -> tuple[float, float, float]:
    """Return the RGB (0..1) of class index ``k``."""
    return PALETTE[int(k) % len(PALETTE)]


def markers_message(types: Mapping[str, type], boxes: np.ndarray, classes: Sequence[str],
                    stamp_ns: int, frame_id: str):
    """
    Build the visualization_msgs/MarkerArray of box rows (see the module doc).

    Args
    ----
    types: ROS type name -> class for every name in ``MESSAGE_TYPES``.
    boxes: float[n, 9] rows (``boxes.BOX_COLUMNS``); column 8 indexes ``classes``.
    classes: class names, e.g. ('vehicle',).
    stamp_ns: header stamp (ns), the LiDAR stamp.
    frame_id: the boxes' frame, ``grid.frame_id``.

    Raises
    ------
    ValueError: rows of the wrong shape or a class index outside ``classes``.

    """
    boxes, index = box_rows(boxes, classes)
    stamped = header(types, stamp_ns, frame_id)
    marker = _Markers(types, stamped)
    markers = [marker('', 0, CUBE, DELETEALL, (0.0, 0.0, 0.0), 0.0, (1.0, 1.0, 1.0),
                      (0.0, 0.0, 0.0, 0.0))]
    for n, (row, k) in enumerate(zip(boxes.tolist(), index.tolist())):
        x, y, z, length, width, height, yaw, score = row[:8]
        markers.append(marker(NAMESPACE, n, CUBE, ADD, (x, y, z), yaw, (length, width, height),
                              (*class_colour(k), ALPHA)))
        markers.append(marker(TEXT_NAMESPACE, n, TEXT_VIEW_FACING, ADD,
                              (x, y, z + 0.5 * height + TEXT_LIFT_M), 0.0,
                              (TEXT_HEIGHT_M, TEXT_HEIGHT_M, TEXT_HEIGHT_M),
                              (1.0, 1.0, 1.0, 1.0), f'{classes[k]} {score:.2f}'))
    return types[MARKER_ARRAY_TYPE](markers=markers)


class _Markers:
    """
    Makes the Markers of one array, every field set (a ``rosbags`` class takes no defaults).

    The fields no marker of ours uses (its lifetime, texture and mesh, and its empty points,
    colours and uv lists) are one object each, shared by the array's markers: built per marker
    they were half of a MarkerArray's time. So a caller must not edit one marker's in place.
    """

    def __init__(self, types, header):
        self.types, self.header = types, header
        empty = np.zeros(0, np.uint8)
        self.unused = {
            'lifetime': types['builtin_interfaces/msg/Duration'](
                sec=int(LIFETIME_S), nanosec=int(round(LIFETIME_S % 1 * 1e9))),
            'frame_locked': False, 'points': [], 'colors': [], 'texture_resource': '',
            'texture': types['sensor_msgs/msg/CompressedImage'](header=header, format='',
                                                                data=empty),
            'uv_coordinates': [], 'mesh_resource': '',
            'mesh_file': types['visualization_msgs/msg/MeshFile'](filename='', data=empty),
            'mesh_use_embedded_materials': False}

    def __call__(self, ns: str, ident: int, kind: int, action: int, centre, yaw: float, scale,
                 rgba, text: str = ''):
        """Return one Marker."""
        types = self.types
        qx, qy, qz, qw = yaw_quaternion(yaw)
        point, vector = types['geometry_msgs/msg/Point'], types['geometry_msgs/msg/Vector3']
        return types['visualization_msgs/msg/Marker'](
            header=self.header, ns=ns, id=ident, type=kind, action=action,
            pose=types['geometry_msgs/msg/Pose'](
                position=point(x=float(centre[0]), y=float(centre[1]), z=float(centre[2])),
                orientation=types['geometry_msgs/msg/Quaternion'](x=qx, y=qy, z=qz, w=qw)),
            scale=vector(x=float(scale[0]), y=float(scale[1]), z=float(scale[2])),
            color=types['std_msgs/msg/ColorRGBA'](r=rgba[0], g=rgba[1], b=rgba[2], a=rgba[3]),
            text=text, **self.unused)
