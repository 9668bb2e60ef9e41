"""The sample bag: the drive written as a rosbag2 MCAP directory (the embedded default data)."""

from dataclasses import replace
import math
import os
from pathlib import Path
import shutil
from typing import Callable, Mapping

from jax_perception_node.config import PipelineConfig
from jax_perception_node.topics import camera_topic, ODOMETRY_TOPIC, POINTCLOUD_TOPIC
import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import get_typestore, Stores

from .drive import LidarModel, SyntheticDrive
from .scene import (EGO_SPEED, EPOCH_NS, LIDAR_FRAME_ID, ODOMETRY_FRAME_ID, POINT_FIELDS,
                    POINT_STEP)

ODOMETRY = ':odometry'      # event name: no camera name can have a colon


# -------------------------------------------------------------------- bag writing


def camera_stamp_offset(index: int) -> float:
    """Stamp offset (s) of the index-th camera against the LiDAR clock: 4, 13, 22, 31, 6 ms..."""
    return 0.004 + 0.009 * (index % 4) + 0.002 * (index // 4 % 4)


def write_sample_bag(path: str | os.PathLike, cfg: PipelineConfig, seconds: float = 8.0,
                     num_cameras: int | None = None, seed: int = 0, lidar_hz: float = 10.0,
                     camera_hz: float | Mapping[str, float] = 12.0,
                     progress: Callable[[int, int], None] | None = None,
                     lidar: LidarModel | None = None, odometry_hz: float = 50.0) -> dict:
    """
    Write the synthetic drive as a rosbag2 (version 9, MCAP) directory at ``path``.

    LiDAR sweeps go to :data:`POINTCLOUD_TOPIC` (sensor_msgs/PointCloud2, frame ``lidar``,
    fields :data:`POINT_FIELDS`, point_step 24, little-endian, is_dense) at ``lidar_hz``, which
    is also the rotation rate; frames = round(seconds * lidar_hz) with stamps k / lidar_hz.
    Camera ``name`` goes to ``camera_topic(name)`` (sensor_msgs/Image, ``32FC<C>``, frame
    ``<name>_optical``) at ``camera_hz`` (Hz, one rate or a mapping name -> rate), with stamps
    offset by :func:`camera_stamp_offset` and never later than half a LiDAR period after the
    last sweep. nav_msgs/Odometry of the grid frame (``cfg.grid.frame_id``, the ego's
    base_link) in the fixed frame ``map`` goes to :data:`ODOMETRY_TOPIC` at ``odometry_hz`` (0:
    none), stamps n / odometry_hz up to half a LiDAR period after the last sweep, each written
    before a sweep of the same stamp. Bag time = header stamp = ``EPOCH_NS`` + t. The bytes
    depend only on the arguments (of the path, its last component, which names the .mcap file)
    and the rosbags version. ``progress(done, total)`` is called after every message.
    Raises FileExistsError if ``path`` exists, ValueError on bad arguments; a failed write
    leaves nothing behind. Returns a summary: path, seconds, seed, frames, camera_messages
    (name -> count), odometry_messages, min_points, max_points, mean_points (per LiDAR
    frame).
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f'{path} already exists')
    for key, value in (('seconds', seconds), ('lidar_hz', lidar_hz)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f'{key} must be a positive number, got {value!r}')
    if not isinstance(odometry_hz, (int, float)) or not math.isfinite(odometry_hz) \
            or odometry_hz < 0:
        raise ValueError(f'odometry_hz must be a number >= 0, got {odometry_hz!r}')
    model = replace(lidar or LidarModel(), rotation_hz=float(lidar_hz))
    drive = SyntheticDrive(cfg, seed=seed, num_cameras=num_cameras, lidar=model)
    rates = {}
    for cam in drive.cameras:
        if isinstance(camera_hz, Mapping) and cam.name not in camera_hz:
            raise ValueError(f'camera_hz has no rate for camera {cam.name!r}')
        rate = camera_hz[cam.name] if isinstance(camera_hz, Mapping) else camera_hz
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f'camera_hz for {cam.name} must be a positive number, got {rate!r}')
        rates[cam.name] = float(rate)

    frames = max(1, int(round(seconds * lidar_hz)))
    events = [(int(round(i * 1e9 / lidar_hz)), 0, '') for i in range(frames)]
    end_ns = (frames - 0.5) * 1e9 / lidar_hz
    for index, cam in enumerate(drive.cameras):
        offset, n = camera_stamp_offset(index), 0
        while (stamp := int(round((offset + n / rates[cam.name]) * 1e9))) <= end_ns:
            events.append((stamp, 1 + index, cam.name))
            n += 1
    n = 0
    while odometry_hz and (stamp := int(round(n * 1e9 / odometry_hz))) <= end_ns:
        events.append((stamp, -1, ODOMETRY))
        n += 1
    events.sort()

    ts = get_typestore(Stores.ROS2_JAZZY)
    point_cloud2 = ts.types['sensor_msgs/msg/PointCloud2']
    point_field = ts.types['sensor_msgs/msg/PointField']
    image = ts.types['sensor_msgs/msg/Image']
    header = ts.types['std_msgs/msg/Header']
    time_msg = ts.types['builtin_interfaces/msg/Time']
    odometry_msg = ts.types['nav_msgs/msg/Odometry']
    fields = [point_field(name=name, offset=offset, datatype=datatype, count=1)
              for name, offset, datatype in POINT_FIELDS]

    def make_header(stamp_ns: int, frame_id: str):
        return header(stamp=time_msg(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9),
                      frame_id=frame_id)

    def make_odometry(stamp_ns: int, t: float):
        # The ego drives along +x with heading 0 (see SyntheticDrive.ego_position).
        types = ts.types
        point = types['geometry_msgs/msg/Point'](*drive.ego_position(t).tolist())
        pose = types['geometry_msgs/msg/Pose'](
            position=point, orientation=types['geometry_msgs/msg/Quaternion'](0.0, 0.0, 0.0, 1.0))
        vector = types['geometry_msgs/msg/Vector3']
        twist = types['geometry_msgs/msg/Twist'](linear=vector(EGO_SPEED, 0.0, 0.0),
                                                 angular=vector(0.0, 0.0, 0.0))
        return odometry_msg(
            header=make_header(stamp_ns, ODOMETRY_FRAME_ID), child_frame_id=cfg.grid.frame_id,
            pose=types['geometry_msgs/msg/PoseWithCovariance'](pose=pose,
                                                               covariance=np.zeros(36)),
            twist=types['geometry_msgs/msg/TwistWithCovariance'](twist=twist,
                                                                 covariance=np.zeros(36)))

    counts = {cam.name: 0 for cam in drive.cameras}
    odometry_count = 0
    points_per_frame = []
    try:
        with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            lidar_conn = writer.add_connection(POINTCLOUD_TOPIC, point_cloud2.__msgtype__,
                                               typestore=ts)
            camera_conns = {cam.name: writer.add_connection(camera_topic(cam.name),
                                                            image.__msgtype__, typestore=ts)
                            for cam in drive.cameras}
            odometry_conn = writer.add_connection(ODOMETRY_TOPIC, odometry_msg.__msgtype__,
                                                  typestore=ts) if odometry_hz else None
            for done, (rel_ns, _, name) in enumerate(events, start=1):
                stamp = EPOCH_NS + rel_ns
                t = rel_ns * 1e-9
                if name == ODOMETRY:
                    writer.write(odometry_conn, stamp, ts.serialize_cdr(
                        make_odometry(stamp, t), odometry_msg.__msgtype__))
                    odometry_count += 1
                elif not name:
                    points = drive.lidar_frame(t)
                    points_per_frame.append(len(points))
                    msg = point_cloud2(
                        header=make_header(stamp, LIDAR_FRAME_ID), height=1,
                        width=len(points), fields=fields, is_bigendian=False,
                        point_step=POINT_STEP, row_step=POINT_STEP * len(points),
                        data=points.view(np.uint8).reshape(-1), is_dense=True)
                    writer.write(lidar_conn, stamp,
                                 ts.serialize_cdr(msg, point_cloud2.__msgtype__))
                else:
                    feats = drive.camera_features(name, t).astype('<f4', copy=False)
                    height, width, channels = feats.shape
                    msg = image(header=make_header(stamp, f'{name}_optical'), height=height,
                                width=width, encoding=f'32FC{channels}', is_bigendian=0,
                                step=width * channels * 4,
                                data=feats.reshape(-1).view(np.uint8))
                    writer.write(camera_conns[name], stamp,
                                 ts.serialize_cdr(msg, image.__msgtype__))
                    counts[name] += 1
                if progress is not None:
                    progress(done, len(events))
    except BaseException:
        # The path did not exist before: whatever is there now is our partial bag.
        shutil.rmtree(path, ignore_errors=True)
        raise
    return {
        'path': str(path),
        'seconds': frames / lidar_hz,
        'seed': drive.seed,
        'frames': frames,
        'camera_messages': counts,
        'odometry_messages': odometry_count,
        'min_points': min(points_per_frame),
        'max_points': max(points_per_frame),
        'mean_points': round(float(np.mean(points_per_frame)), 1),
    }
