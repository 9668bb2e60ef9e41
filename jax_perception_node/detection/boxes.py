"""
The box row: what a head's decoding returns and ground truth is read into.

Box rows (``BOX_COLUMNS``): float[n, 9], columns x, y, z (box centre, m, grid frame),
length, width, height (m, full sizes, length along the heading), yaw (rad, about +z, in
(-pi, pi]), score (0..1), class (index into the class names, as a float).

``OBJECT_CLASSES`` are the classes of the sample drive's ground truth and of the reference
head, in class-index order: cars (and vans of a car's size), large vehicles (vans, trucks,
buses), pedestrians and cyclists (a bicycle with its rider).
"""

BOX_COLUMNS = ('x', 'y', 'z', 'length', 'width', 'height', 'yaw', 'score', 'class')
NUM_COLUMNS = len(BOX_COLUMNS)
OBJECT_CLASSES = ('car', 'large_vehicle', 'pedestrian', 'cyclist')
