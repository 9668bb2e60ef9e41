"""
A deterministic synthetic drive, written as a rosbag2 MCAP bag: the project's default data.

The ego vehicle drives at 10 m/s (``ego_speed``: any speed up to 25 m/s) along a straight
four-lane road (world x axis; REP-103 axes, flat ground at z = 0) in its right-hand lane
(y = -1.75 m), from x = 0 m at t = 0 s; base_link sits on the ground, heading +x. The road
repeats every 240 m:

- towns at x in [40, 180) m + 240 k (k >= 0): building rows on both sides, sidewalks, parked
  vehicles in the outer lanes, lamp posts, four zebra crossings (x = 48, 112, 140, 168 m
  + 240 k; no parking within 5 m of them) and a 40 m underpass at x in [60, 100) m + 240 k;
- open country: grass verges, utility poles, scattered farm buildings, vehicles in lay-bys;
- a causeway across a lake at x in [-45, 25) m + 240 k: water returns almost nothing.

The default 8 s drive thus goes from the causeway over farmland into the town and the underpass,
and the LiDAR returns per frame climb from about 29k to 116k (64 x 2048 rays at most).

Road users, in the classes of ``boxes.OBJECT_CLASSES`` (``road_users.py``):

- cars (4.2-4.9 x 1.75-1.9 m, 1.15-1.4 m tall, 0.25 m off the ground) and large vehicles:
  vans (5.0-5.9 x 1.95-2.1 m, up to 2.6 m high), trucks (6-8.5 x 2.4-2.55 m, up to 3.6 m)
  and buses (10.5-12.5 x 2.5 m, up to 3.4 m), near nuScenes' mean truck and bus boxes.
  Moving traffic is 70 % cars and uses the two inner lanes: oncoming at 11 m/s, and ahead of
  the ego at 10.6 m/s (0.6 m/s faster than a faster ego); parked vehicles are 80 % cars;
- cyclists (a bicycle with its rider, 1.65-1.9 x 0.55-0.7 x 1.6-1.85 m) at the inner edge of
  the outer lanes (|y| = 3.6 m, clear of the parked vehicles and of the traffic), both ways:
  with the ego at 5.5 m/s (about one per 95 m), oncoming at 4.5 m/s (one per 110 m);
- pedestrians (0.6-0.85 x 0.55-0.75 x 1.55-1.95 m, nuScenes' mean 0.73 x 0.67 x 1.77) at
  1.2-1.5 m/s: walkers along the sidewalks in both directions (up to four per 40 m of town,
  now and then one on a country verge), each walking a stretch of 10-38 m around the time the
  ego passes and standing at its ends; and crossing pedestrians on the zebra crossings (up to
  three each), who wait at the kerb, cross to the centre line, wait, and cross on, each half
  in a gap of what drives on that side: nothing ever drives into them, and they leave the
  ego's lane at least 2 s before the ego comes, or enter it after it has passed.

The static layout is generated in 40 m tiles (their pedestrians with them), the traffic per
vehicle or cyclist and the noise per frame, each from its own seeded generator, so every frame
is a pure function of (seed, t) whatever order frames are asked for in (pedestrians are timed
to the ego speed, as the lead traffic is).

Sensors, all taken from the :class:`~jax_perception_node.settings.config.PipelineConfig`:

- LiDAR (frame ``lidar.frame_id``, mounted by ``cfg.lidar``): a spinning multi-beam scanner
  (:class:`LidarModel`; real sensors' beam tables in :data:`PRESETS`), ray-cast analytically
  against the ground plane, boxes and vertical cylinders. Each column fires at its own time
  within the sweep from where the sensor is then and hits the scene as it is then, and points
  are reported in the LiDAR frame at their firing time, as raw drivers do (not deskewed).
  Stamp = sweep start; per-point ``time`` = seconds after the stamp. ``instant_sweep``: every
  column fires at the stamp (time 0), the reference for deskewing. ``lidars='three'``: a top
  LiDAR and two side VLP-16s, each on its own topic and frame (``rig.py``).
- Cameras (frame ``cameras.<name>.frame_id``, mounted by ``cfg.cameras``): the scene rendered at
  feature-map resolution with the configured intrinsics, one ray per pixel centre at integer
  pixel coordinates, as a colour image (surface colours under the sun: vehicles in car paints,
  people in clothing tones, a per-frame exposure
  gain, sensor noise), and published as a ``float32[H_f, W_f, C]`` map of label-free
  appearance features of that image (:data:`CAMERA_CHANNELS`: RGB, luminance, edges, local
  contrast, saturation; ``camera_render.py``): no class and no depth, as a fixed backbone on a
  real image would give. ``SyntheticDrive.camera_surfaces`` holds each pixel's depth and class
  for tests; it is never published. With ``camera_images`` (``sample-bag --camera-images
  raw|jpeg``) the bag holds the images themselves instead, rendered at ``image_scale`` times the
  map (``SyntheticDrive.camera_image``; ``camera_messages.py``): rgb8 Images or JPEG
  CompressedImages on image_transport's topic names.

For training sets (``mounts.py``): the top LiDAR at another height and tilt (``mount_height``,
``mount_tilt``: published), the body pitched and rolled against the road (``body_tilt``: not
published, as a vehicle's TF does not know it), and ``draw_variation``, their draws per seed
(with range noise and dropout) for ``sample-bag --randomize``, recorded in the bag's metadata.

Odometry (nav_msgs/Odometry, 50 Hz): the pose of ``grid.frame_id`` (base_link) in the fixed
frame ``map`` = world, for multi-sweep accumulation; the same pose as map -> base_link on /tf.
/tf_static: base_link -> each LiDAR frame and -> each camera frame at their poses.
Each feature map comes with a sensor_msgs/CameraInfo of an image 8 times its size, each image
with one of that image; either K scales to the configured intrinsics exactly.

Ground truth (vision_msgs/Detection3DArray on ``/ground_truth/objects``, one per sweep, same
stamp, frame ``grid.frame_id``): the cars, large vehicles, pedestrians and cyclists, parked,
standing or moving, whose centre lies in the grid and that at least 5 of the sweep's returns
hit (``SyntheticDrive.ground_truth``), as boxes with stable ids and their class names
(``boxes.OBJECT_CLASSES``); see ``jax_perception_node.outputs.objects`` for the message layout.

Only NumPy and ``rosbags`` are used (vision_msgs' definitions come from the installed
interfaces): no ROS installation, no JAX.
"""

from .camera_render import check_pinholes, MAX_IMAGE_SCALE
from .drive import SyntheticDrive
from .lidar_model import LidarModel
from .lidar_presets import lidar_preset, PRESETS, sensor_model
from .mounts import draw_variation, option_variation, VARIATION_KEYS
from .rig import lidar_rig, lidar_topic, RIGS
from .sample_bag import camera_stamp_offset, write_sample_bag
from .scene import (CAMERA_CHANNELS, EGO_LANE_Y, EGO_SPEED, EPOCH_NS, LIDAR_FRAME_ID,
                    MAX_EGO_SPEED, ODOMETRY_FRAME_ID, POINT_DTYPE, POINT_FIELDS, POINT_STEP)

__all__ = ['CAMERA_CHANNELS', 'camera_stamp_offset', 'check_pinholes', 'draw_variation',
           'EGO_LANE_Y', 'EGO_SPEED', 'EPOCH_NS', 'LIDAR_FRAME_ID', 'lidar_preset', 'lidar_rig',
           'lidar_topic', 'LidarModel', 'MAX_EGO_SPEED', 'MAX_IMAGE_SCALE', 'ODOMETRY_FRAME_ID',
           'option_variation', 'POINT_DTYPE', 'POINT_FIELDS', 'POINT_STEP', 'PRESETS', 'RIGS',
           'sensor_model', 'SyntheticDrive', 'VARIATION_KEYS', 'write_sample_bag']
