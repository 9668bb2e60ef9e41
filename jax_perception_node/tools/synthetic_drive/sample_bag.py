"""The sample bag: the drive written as a rosbag2 MCAP directory (the embedded default data)."""

from dataclasses import replace
import math
import os
from pathlib import Path
import shutil
from typing import Callable, Mapping

from jax_perception_node.bags.bagio import (message_class, offered_qos, SAMPLE_SEED_KEY, TF_TYPE,
                                            TYPESTORE)
from jax_perception_node.bags.topics import camera_info_topic, ODOMETRY_TOPIC
from jax_perception_node.detection.boxes import OBJECT_CLASSES
from jax_perception_node.geometry.transforms import TF_STATIC_TOPIC, TF_TOPIC
from jax_perception_node.outputs.objects import (DETECTION_ARRAY_TYPE, detections_message,
                                                 GROUND_TRUTH_TOPIC)
from jax_perception_node.settings.config import PipelineConfig
import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer

from .camera_messages import CameraMessages, image_custom_data, image_record
from .drive import SyntheticDrive
from .lidar_model import LidarModel
from .mounts import (body_tilted, check_variation, custom_data, mounted, tilted_boxes,
                     variation_record)
from .rig import lidar_rig, LidarMount, rig_summary
from .scene import EGO_SPEED, EPOCH_NS, ODOMETRY_FRAME_ID, POINT_FIELDS, POINT_STEP

ODOMETRY = ':odometry'      # event name: no camera name can have a colon
GROUND_TRUTH_CLASSES = OBJECT_CLASSES   # class names of the ground truth's class indices


# -------------------------------------------------------------------- bag writing


def camera_stamp_offset(index: int) -> float:
    """Stamp offset (s) of the index-th camera against the LiDAR clock: 4, 13, 22, 31, 6 ms..."""
    return 0.004 + 0.009 * (index % 4) + 0.002 * (index // 4 % 4)


def write_sample_bag(path: str | os.PathLike, cfg: PipelineConfig, seconds: float = 8.0,
                     num_cameras: int | None = None, seed: int = 0, lidar_hz: float = 10.0,
                     camera_hz: float | Mapping[str, float] = 12.0,
                     progress: Callable[[int, int], None] | None = None,
                     lidar: LidarModel | None = None, odometry_hz: float = 50.0,
                     ego_speed: float = EGO_SPEED, instant_sweep: bool = False,
                     lidars: str = 'one', mount_height: float | None = None,
                     mount_tilt: tuple[float, float] | None = None,
                     body_tilt: tuple[float, float] | None = None,
                     camera_images: str | None = None, image_scale: int = 4) -> dict:
    """
    Write the synthetic drive as a rosbag2 (version 9, MCAP) directory at ``path``.

    LiDAR sweeps go to :data:`POINTCLOUD_TOPIC` (sensor_msgs/PointCloud2, frame
    ``cfg.lidar_frame_id``, fields :data:`POINT_FIELDS`, point_step 24, little-endian,
    is_dense) at ``lidar_hz``, which is also the rotation rate; frames = round(seconds *
    lidar_hz) with stamps k / lidar_hz. ``lidar``: the sensor model (None: ``LidarModel()``;
    see ``lidar_presets``). ``lidars='three'`` (``rig.lidar_rig``): per sweep one cloud per
    LiDAR, top (``lidar`` at ``cfg.lidar``), left, right, each on ``rig.lidar_topic(name)`` in
    its frame ``lidar_<name>`` with its own per-point times (the summary gives their poses, as
    /tf_static does). The ego drives at ``ego_speed`` (m/s) and ``instant_sweep`` freezes
    every sweep at its stamp (see :class:`SyntheticDrive`). Each camera publishes in its frame
    ``cameras.<name>.frame_id`` at ``camera_hz`` (Hz, one rate or a mapping name -> rate),
    stamps offset by :func:`camera_stamp_offset`, up to half a LiDAR period after the last
    sweep: feature maps (``32FC<C>`` Images on ``camera_topic(name)``), or with
    ``camera_images`` 'raw' or 'jpeg' its images, ``image_scale`` (1..8) times the map
    (``camera_messages.py``), each followed by its CameraInfo on ``camera_info_topic(name)``
    (same stamp and frame), whose K scales to the configured intrinsics exactly.
    Each sweep is followed by its ground truth on :data:`GROUND_TRUTH_TOPIC`
    (vision_msgs/Detection3DArray, same stamp, frame ``cfg.grid.frame_id``): the visible objects,
    ``SyntheticDrive.ground_truth`` (the returns of every LiDAR count), laid out by
    ``objects.detections_message`` with the class names :data:`GROUND_TRUTH_CLASSES`
    (``boxes.OBJECT_CLASSES``: car, large_vehicle, pedestrian, cyclist).
    nav_msgs/Odometry of the grid frame (``cfg.grid.frame_id``, the ego's base_link) in the
    fixed frame ``map`` goes to :data:`ODOMETRY_TOPIC` at ``odometry_hz`` (0: none), stamps
    n / odometry_hz up to half a LiDAR period after the last sweep, each written before a
    sweep of the same stamp, and the same pose as map -> base_link to /tf. /tf_static holds
    one message first: base_link -> each LiDAR frame and -> each camera's frame, at their
    poses. The metadata's custom_data holds the seed (``bagio.SAMPLE_SEED_KEY``: the trainer
    refuses held-out seeds). ``mount_height`` (m) and ``mount_tilt`` (pitch, roll, deg) move
    the top LiDAR, published; ``body_tilt`` (pitch, roll, deg) turns base_link under every
    LiDAR and camera, unpublished (``mounts.py``), and the ground truth with it.
    With any of them, summary and custom_data record the variation
    (``mounts.VARIATION_KEYS``), as they record images' camera_images and image_scale. Bag
    time = header stamp = ``EPOCH_NS`` + t. The bytes depend only on the arguments (of the
    path, its last component, which names the .mcap file) and the rosbags (and for JPEG
    Pillow) version. ``progress(done, total)`` is called after every message.
    Raises FileExistsError if ``path`` exists, ValueError on bad arguments, bagio.BagError when
    vision_msgs is not installed; a failed write leaves nothing behind. Returns a summary:
    path, seconds, seed, frames, camera_messages (name -> count; as many CameraInfo),
    odometry_messages (as many /tf), ground_truth_messages (one per frame), ground_truth_boxes
    (in all of them), min_points, max_points, mean_points (per sweep, all LiDARs together),
    ego_speed, instant_sweep, lidars (name -> topic, frame_id, translation, rotation_xyzw,
    mean_points), camera_images, image_scale (None: maps) and a variation's entries.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f'{path} already exists')
    _check_rates(seconds, lidar_hz, odometry_hz)
    check_variation(mount_height, mount_tilt, body_tilt)
    images = image_record(camera_images, image_scale)
    model = replace(lidar or LidarModel(), rotation_hz=float(lidar_hz))
    mounts = lidar_rig(lidars, cfg, model, mounted(cfg.lidar, mount_height, mount_tilt))
    record = {} if mount_height is None and mount_tilt is None and body_tilt is None else \
        variation_record(mounts[0].pose.translation[2], mount_tilt, body_tilt, model)
    drives = _drives(cfg, mounts, body_tilt, seed=seed, num_cameras=num_cameras,
                     ego_speed=ego_speed, instant_sweep=instant_sweep)
    frames = max(1, int(round(seconds * lidar_hz)))
    events = event_schedule(frames, lidar_hz, _camera_rates(drives[0], camera_hz), odometry_hz)
    try:
        with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            for key, value in _custom_data(drives[0].seed, record, images).items():
                writer.set_custom_data(key, value)
            counts, sweeps = _write_events(writer, _Messages(drives, mounts, body_tilt, **images),
                                           events, odometry_hz > 0, progress)
    except BaseException:
        # The path did not exist before: whatever is there now is our partial bag.
        shutil.rmtree(path, ignore_errors=True)
        raise
    return _summary(path, frames / lidar_hz, drives[0], counts, sweeps, mounts) | images | record


def _custom_data(seed: int, record: dict, images: dict) -> dict[str, str]:
    """Return the metadata custom_data: the seed, then a variation's and images' records."""
    return {SAMPLE_SEED_KEY: str(seed)} | custom_data(record) | image_custom_data(images)


def _drives(cfg: PipelineConfig, mounts, body_tilt, num_cameras, **drive) -> list:
    """
    Return one SyntheticDrive per LiDAR of ``mounts``, cast from the body turned by ``body_tilt``.

    The first carries the cameras (turned with the body too) and the single LiDAR's draws, as
    a one-LiDAR drive. /tf_static has the mounts, untilted.
    """
    return [SyntheticDrive(cfg, num_cameras=num_cameras if i == 0 else 0, lidar=mount.model,
                           mount=body_tilted(mount.pose, body_tilt), noise_stream=i,
                           camera_tilt=body_tilt if i == 0 else None, **drive)
            for i, mount in enumerate(mounts)]


def _check_rates(seconds: float, lidar_hz: float, odometry_hz: float) -> None:
    """Raise ValueError for a duration or rate that is not a positive number (odometry: >= 0)."""
    for key, value in (('seconds', seconds), ('lidar_hz', lidar_hz)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f'{key} must be a positive number, got {value!r}')
    if not isinstance(odometry_hz, (int, float)) or not math.isfinite(odometry_hz) \
            or odometry_hz < 0:
        raise ValueError(f'odometry_hz must be a number >= 0, got {odometry_hz!r}')


def _summary(path: Path, seconds: float, drive: SyntheticDrive, counts: dict, sweeps: list,
             mounts) -> dict:
    """Return write_sample_bag's summary from the counts and sweeps _write_events returns."""
    odometry_messages = counts.pop(ODOMETRY)
    points = [sum(widths) for widths, _ in sweeps]
    lidars = rig_summary(mounts)
    for k, name in enumerate(lidars):
        lidars[name]['mean_points'] = round(float(np.mean([w[k] for w, _ in sweeps])), 1)
    return {
        'path': str(path),
        'seconds': seconds,
        'seed': drive.seed,
        'frames': len(sweeps),
        'camera_messages': counts,
        'odometry_messages': odometry_messages,
        'ground_truth_messages': len(sweeps),
        'ground_truth_boxes': int(sum(boxes for _, boxes in sweeps)),
        'min_points': min(points),
        'max_points': max(points),
        'mean_points': round(float(np.mean(points)), 1),
        'ego_speed': drive.ego_speed,
        'instant_sweep': drive.instant_sweep,
        'lidars': lidars,
    }


def _camera_rates(drive: SyntheticDrive, camera_hz: float | Mapping[str, float]) -> dict:
    """Return each camera's rate (Hz) from one rate or a mapping; ValueError names a bad one."""
    rates = {}
    for cam in drive.cameras:
        if isinstance(camera_hz, Mapping) and cam.name not in camera_hz:
            raise ValueError(f'camera_hz has no rate for camera {cam.name!r}')
        rate = camera_hz[cam.name] if isinstance(camera_hz, Mapping) else camera_hz
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f'camera_hz for {cam.name} must be a positive number, got {rate!r}')
        rates[cam.name] = float(rate)
    return rates


def event_schedule(frames: int, lidar_hz: float, camera_rates: Mapping[str, float],
                   odometry_hz: float) -> list[tuple[int, int, str]]:
    """
    List every message of the bag in write order: (stamp ns after the start, order, name).

    name '' is a LiDAR sweep, :data:`ODOMETRY` an odometry sample, else a camera name (order:
    its index + 1 in ``camera_rates``). Sorted by stamp, then order: at one stamp odometry
    comes first, then the sweep, then the cameras. Cameras and odometry stop half a LiDAR
    period after the last sweep.
    """
    events = [(int(round(i * 1e9 / lidar_hz)), 0, '') for i in range(frames)]
    end_ns = (frames - 0.5) * 1e9 / lidar_hz
    for index, (name, rate) in enumerate(camera_rates.items()):
        offset, n = camera_stamp_offset(index), 0
        while (stamp := int(round((offset + n / rate) * 1e9))) <= end_ns:
            events.append((stamp, 1 + index, name))
            n += 1
    n = 0
    while odometry_hz and (stamp := int(round(n * 1e9 / odometry_hz))) <= end_ns:
        events.append((stamp, -1, ODOMETRY))
        n += 1
    events.sort()
    return events


class _Messages:
    """
    The drive's messages as rosbags (ROS 2 Jazzy + interfaces) objects, and type names.

    ``drives``: one per LiDAR of ``mounts``, the first with the cameras, whose frames and
    CameraInfo ``cameras`` builds (``camera_images``, ``image_scale``: see CameraMessages).
    """

    def __init__(self, drives: list[SyntheticDrive], mounts: tuple[LidarMount, ...],
                 body_tilt=None, camera_images: str | None = None,
                 image_scale: int | None = None):
        self.drive = drives[0]
        self.body_tilt = body_tilt
        self.drives = drives
        self.mounts = mounts
        self.ts = TYPESTORE
        message_class(DETECTION_ARRAY_TYPE)     # BagError now when vision_msgs is missing
        types = self.ts.types
        self.cloud_type = types['sensor_msgs/msg/PointCloud2'].__msgtype__
        self.cameras = CameraMessages(self.drive, self.header, camera_images, image_scale)
        self.odometry_type = types['nav_msgs/msg/Odometry'].__msgtype__
        self._fields = [types['sensor_msgs/msg/PointField'](name=name, offset=offset,
                                                            datatype=datatype, count=1)
                        for name, offset, datatype in POINT_FIELDS]

    def transform(self, stamp_ns: int, parent: str, child: str, translation, xyzw):
        """Build a geometry_msgs/TransformStamped: the pose of ``child`` in ``parent``."""
        types = self.ts.types
        return types['geometry_msgs/msg/TransformStamped'](
            header=self.header(stamp_ns, parent), child_frame_id=child,
            transform=types['geometry_msgs/msg/Transform'](
                translation=types['geometry_msgs/msg/Vector3'](*map(float, translation)),
                rotation=types['geometry_msgs/msg/Quaternion'](*map(float, xyzw))))

    def tf_static(self, stamp_ns: int):
        """Build /tf_static: each LiDAR's and each camera's pose in the grid frame."""
        grid = self.drive.cfg.grid.frame_id
        transforms = [self.transform(stamp_ns, grid, m.frame_id, m.pose.translation,
                                     m.pose.rotation_xyzw) for m in self.mounts]
        transforms += [self.transform(stamp_ns, grid, c.frame_id, c.pose.translation,
                                      c.pose.rotation_xyzw) for c in self.drive.cameras]
        return self.ts.types[TF_TYPE](transforms=transforms)

    def tf(self, stamp_ns: int, t: float):
        """Build /tf at t (s): the ego pose, base_link in ``map`` (heading 0, see odometry)."""
        pose = self.transform(stamp_ns, ODOMETRY_FRAME_ID, self.drive.cfg.grid.frame_id,
                              self.drive.ego_position(t), (0.0, 0.0, 0.0, 1.0))
        return self.ts.types[TF_TYPE](transforms=[pose])

    def header(self, stamp_ns: int, frame_id: str):
        types = self.ts.types
        return types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](sec=stamp_ns // 10**9,
                                                       nanosec=stamp_ns % 10**9),
            frame_id=frame_id)

    def sweep(self, stamp_ns: int, t: float):
        """Build the sweeps starting at t (s), one cloud per LiDAR, and their ground truth."""
        points = [drive.lidar_frame(t) for drive in self.drives]
        boxes, ids = self.drive.ground_truth(t, points[0],
                                             others=tuple(zip(self.drives[1:], points[1:])))
        boxes = tilted_boxes(boxes, self.body_tilt)
        truth = detections_message(self.ts.types, boxes, GROUND_TRUTH_CLASSES, stamp_ns,
                                   self.drive.cfg.grid.frame_id, ids)
        return [self.cloud(stamp_ns, m.frame_id, p) for m, p in zip(self.mounts, points)], truth

    def cloud(self, stamp_ns: int, frame_id: str, points: np.ndarray):
        """Build a PointCloud2 in ``frame_id`` of a sweep's points (``POINT_DTYPE``)."""
        return self.ts.types['sensor_msgs/msg/PointCloud2'](
            header=self.header(stamp_ns, frame_id), height=1,
            width=len(points),
            fields=self._fields, is_bigendian=False, point_step=POINT_STEP,
            row_step=POINT_STEP * len(points), data=points.view(np.uint8).reshape(-1),
            is_dense=True)

    def odometry(self, stamp_ns: int, t: float):
        """Build the ego's pose and twist at t (s): base_link in ``map``."""
        # The ego drives along +x with heading 0 (see SyntheticDrive.ego_position).
        types = self.ts.types
        point = types['geometry_msgs/msg/Point'](*self.drive.ego_position(t).tolist())
        pose = types['geometry_msgs/msg/Pose'](
            position=point, orientation=types['geometry_msgs/msg/Quaternion'](0.0, 0.0, 0.0, 1.0))
        vector = types['geometry_msgs/msg/Vector3']
        twist = types['geometry_msgs/msg/Twist'](linear=vector(self.drive.ego_speed, 0.0, 0.0),
                                                 angular=vector(0.0, 0.0, 0.0))
        return types['nav_msgs/msg/Odometry'](
            header=self.header(stamp_ns, ODOMETRY_FRAME_ID),
            child_frame_id=self.drive.cfg.grid.frame_id,
            pose=types['geometry_msgs/msg/PoseWithCovariance'](pose=pose,
                                                               covariance=np.zeros(36)),
            twist=types['geometry_msgs/msg/TwistWithCovariance'](twist=twist,
                                                                 covariance=np.zeros(36)))


def _write_events(writer: Writer, messages: _Messages, events, odometry: bool,
                  progress: Callable[[int, int], None] | None) -> tuple[dict, list]:
    """
    Write every event's messages; return (messages per camera name and ODOMETRY, sweeps).

    sweeps: (points of each LiDAR, ground truth boxes) per sweep. /tf_static comes first.
    Connections are added in the order LiDARs, cameras, /tf_static, camera infos, odometry and
    /tf (these two only with ``odometry``), ground truth.
    """
    ts, cameras, frames = messages.ts, messages.drive.cameras, messages.cameras
    lidar_topics = [m.topic for m in messages.mounts]
    topics = {c.name: frames.topic(c.name) for c in cameras}
    infos = {c.name: camera_info_topic(c.name) for c in cameras}
    info_type = ts.types['sensor_msgs/msg/CameraInfo'].__msgtype__
    # The QoS a driver offers: sensor data best effort; TF as tf2_ros' broadcasters.
    sensor, reliable = [offered_qos(False, 5)], [offered_qos()]

    def add(topic, msgtype, qos):
        return writer.add_connection(topic, msgtype, typestore=ts, offered_qos_profiles=qos)

    conn = {topic: add(topic, messages.cloud_type, sensor) for topic in lidar_topics}
    conn |= {topic: add(topic, frames.msgtype, sensor) for topic in topics.values()}
    conn[TF_STATIC_TOPIC] = add(TF_STATIC_TOPIC, TF_TYPE,
                                [offered_qos(depth=1, transient_local=True)])
    conn |= {topic: add(topic, info_type, sensor) for topic in infos.values()}
    if odometry:
        conn[ODOMETRY_TOPIC] = add(ODOMETRY_TOPIC, messages.odometry_type, reliable)
        conn[TF_TOPIC] = add(TF_TOPIC, TF_TYPE, [offered_qos(depth=100)])
    # Reliable, as a detector's output: each array is needed, for evaluation.
    conn[GROUND_TRUTH_TOPIC] = add(GROUND_TRUTH_TOPIC, DETECTION_ARRAY_TYPE, reliable)
    # /tf_static, then per sweep its clouds and the ground truth, two per map (+ CameraInfo)
    # and per pose (+ /tf).
    total = 1 + sum(1 + len(lidar_topics) if not name else 2 for _, _, name in events)
    done = 1
    first = EPOCH_NS + (events[0][0] if events else 0)
    writer.write(conn[TF_STATIC_TOPIC], first,
                 ts.serialize_cdr(messages.tf_static(first), TF_TYPE))
    if progress is not None:
        progress(1, total)
    counts = {cam.name: 0 for cam in cameras} | {ODOMETRY: 0}
    sweeps = []
    for rel_ns, _, name in events:
        stamp, t = EPOCH_NS + rel_ns, rel_ns * 1e-9
        if name == ODOMETRY:
            out = [(ODOMETRY_TOPIC, messages.odometry(stamp, t), messages.odometry_type),
                   (TF_TOPIC, messages.tf(stamp, t), TF_TYPE)]
        elif not name:
            clouds, truth = messages.sweep(stamp, t)
            out = [(topic, cloud, messages.cloud_type)
                   for topic, cloud in zip(lidar_topics, clouds)]
            out.append((GROUND_TRUTH_TOPIC, truth, DETECTION_ARRAY_TYPE))
            sweeps.append(([cloud.width for cloud in clouds], len(truth.detections)))
        else:
            out = [(topics[name], frames.frame(name, stamp, t), frames.msgtype),
                   (infos[name], frames.info(name, stamp), info_type)]
        if name:
            counts[name] += 1
        for topic, msg, msgtype in out:
            writer.write(conn[topic], stamp, ts.serialize_cdr(msg, msgtype))
            done += 1
            if progress is not None:
                progress(done, total)
    return counts, sweeps
