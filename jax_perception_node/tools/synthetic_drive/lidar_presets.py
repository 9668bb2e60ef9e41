"""
Real spinning LiDARs as :class:`LidarModel` presets, from their published specifications.

``PRESETS`` maps a name to the sensor at 10 Hz: its beams at the published vertical angles
(ring 0 the lowest), the columns one revolution fires at 10 Hz, the maximum range, and the
scale of the intensity it reports. Range noise, dropout and the detection model stay the
synthetic world's (:class:`LidarModel`'s defaults), so presets differ only in what the
specifications give. The project's own default (``LidarModel()``, 64 even beams over +-15 deg,
2048 columns) and the demo's are not presets and do not change.
"""

from dataclasses import replace

from .lidar_model import LidarModel

# Velodyne VLP-16 (Puck): VLP-16 User Manual 63-9243, vertical angles -15 to +15 deg in 2 deg
# steps; 0.2 deg azimuth resolution at 600 rpm (1800 firings); range 100 m; intensity 0-255
# (calibrated reflectivity).
VLP_16 = LidarModel.from_table([-15.0 + 2.0 * k for k in range(16)], azimuth_steps=1800,
                               max_range_m=100.0)

# Velodyne HDL-32E: HDL-32E User Manual, vertical angles -30.67 to +10.67 deg in 4/3 deg steps
# (the table as the manual prints it, 2 decimals); one firing cycle every 46.08 us, so 2170
# columns per 100 ms; range 100 m; intensity 0-255.
HDL_32E = LidarModel.from_table(
    [-30.67, -29.33, -28.0, -26.67, -25.33, -24.0, -22.67, -21.33, -20.0, -18.67, -17.33, -16.0,
     -14.67, -13.33, -12.0, -10.67, -9.33, -8.0, -6.67, -5.33, -4.0, -2.67, -1.33, 0.0, 1.33,
     2.67, 4.0, 5.33, 6.67, 8.0, 9.33, 10.67], azimuth_steps=2170, max_range_m=100.0)

# Velodyne HDL-64E (S2/S3): the vert_correction column of the default HDL-64E calibration that
# VeloView / LidarView ship (CalibrationFiles/HDL-64.xml), sorted: the lower block's 32 lasers
# from -23.95 to -8.11 deg (about 1/2 deg apart), the upper block's from -7.63 to +2.81 deg
# (about 1/3 deg apart), 26.8 deg in all as the S3 datasheet gives; ~1.33 M points/s, so 2083
# columns at 10 Hz; range 120 m; intensity 0-255.
HDL_64E = LidarModel.from_table(
    [-23.95, -23.44, -22.82, -22.27, -21.77, -21.28, -20.91, -20.34, -19.74, -19.14, -18.72,
     -18.19, -17.77, -17.3, -16.71, -16.2, -15.58, -15.15, -14.72, -14.16, -13.73, -13.13,
     -12.37, -12.05, -11.59, -11.12, -10.67, -9.99, -9.37, -9.15, -8.65, -8.11,
     -7.63, -7.26, -7.0, -6.64, -6.29, -5.89, -5.61, -5.29, -4.96, -4.57, -4.26, -3.84, -3.58,
     -3.2, -2.91, -2.53, -2.22, -1.84, -1.55, -1.18, -0.88, -0.52, -0.15, 0.23, 0.48, 0.89,
     1.15, 1.52, 1.86, 2.19, 2.51, 2.81], azimuth_steps=2083, max_range_m=120.0)

# Ouster OS1-128: OS1 datasheet, 128 channels evenly over a 45 deg vertical field of view
# (+-22.5 deg, the uniform beam spacing option), 2048 columns at 10 Hz, range 120 m. The ROS
# driver's ``intensity`` is the return's signal in photons (16 bit), not a 0-255 reflectivity:
# the scale of 8 puts these targets at 0-2040, the order of magnitude the driver publishes; it
# is a stand-in, not a datasheet value.
OS1_128 = LidarModel(beams=128, azimuth_steps=2048, min_elevation_deg=-22.5,
                     max_elevation_deg=22.5, max_range_m=120.0, intensity_scale=8.0)

# Hesai Pandar64: Pandar64 User Manual, "Channel Distribution" (nominal angles): +15, +11, +8,
# +5, +3, +2 deg, then 1/6 deg (0.167) steps from +1.833 down to -6 deg, 1 deg steps from -7 to
# -14 deg, and -19 and -25 deg; 0.2 deg azimuth resolution at 10 Hz (1800 columns); range
# 200 m; intensity 0-255 (reflectivity).
PANDAR64 = LidarModel.from_table(
    [-25.0, -19.0] + [-14.0 + k for k in range(8)] + [-6.0 + k / 6.0 for k in range(48)]
    + [2.0, 3.0, 5.0, 8.0, 11.0, 15.0], azimuth_steps=1800, max_range_m=200.0)

PRESETS: dict[str, LidarModel] = {'VLP-16': VLP_16, 'HDL-32E': HDL_32E, 'HDL-64E': HDL_64E,
                                  'OS1-128': OS1_128, 'Pandar64': PANDAR64}


def lidar_preset(name: str) -> LidarModel:
    """Return the preset ``name`` (case-insensitive); ValueError lists the presets."""
    found = {key.lower(): model for key, model in PRESETS.items()}.get(str(name).lower())
    if found is None:
        raise ValueError(f'no LiDAR preset {name!r}; the presets are {", ".join(PRESETS)}')
    return found


def sensor_model(preset: str | None = None, beams: int | None = None,
                 **changes) -> LidarModel:
    """
    Return the preset (None: ``LidarModel()``) with ``beams`` and ``changes`` applied.

    ``beams`` spreads that many beams evenly over the sensor's vertical field of view (a
    preset's angle table gives way); ``changes``: other :class:`LidarModel` fields, None
    values ignored (options left out). ValueError for an unknown preset or a bad value.
    """
    model = lidar_preset(preset) if preset is not None else LidarModel()
    if beams is not None:
        model = model.uniform(beams)
    return replace(model, **{k: v for k, v in changes.items() if v is not None})
