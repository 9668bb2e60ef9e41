"""
rosbag2 reading and writing on top of ``rosbags`` (MCAP or sqlite3), without a ROS install.

Messages are ``rosbags`` dataclasses of the ROS 2 Jazzy type store; the core reads them by
attribute just like rclpy messages. Raw CDR bytes from a bag are what rclpy publishes and
receives with ``raw=True``, so live play and recording never convert message types.
"""

from pathlib import Path
import struct
from typing import Iterator

import numpy as np
from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, StoragePlugin, Writer
from rosbags.rosbag2.errors import ReaderError, WriterError
from rosbags.typesys import get_typestore, Stores

from .stamps import NS_PER_S, split_ns
from .topics import (camera_info_topic, camera_topic, DIAGNOSTICS_TOPIC,  # noqa: F401
                     FEATURES_TOPIC, IMAGE_TOPIC, LATENCY_TOPIC, ODOMETRY_TOPIC,
                     POINTCLOUD_TOPIC)

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
POINTCLOUD_TYPE = 'sensor_msgs/msg/PointCloud2'
IMAGE_TYPE = 'sensor_msgs/msg/Image'
CAMERA_INFO_TYPE = 'sensor_msgs/msg/CameraInfo'
ODOMETRY_TYPE = 'nav_msgs/msg/Odometry'
DIAGNOSTICS_TYPE = 'diagnostic_msgs/msg/DiagnosticArray'


class BagError(Exception):
    """A bag cannot be read or written as asked; the message names the bag and the problem."""


def open_reader(path: str | Path) -> Reader:
    """Open a rosbag2 directory or a bare .mcap / .db3 file for reading."""
    path = Path(path)
    if not path.exists():
        raise BagError(f'{path}: no such bag')
    try:
        reader = Reader(path)
        reader.open()
    except (ReaderError, OSError, ValueError, KeyError) as exc:
        raise BagError(f'{path}: cannot read bag: {exc}') from None
    return reader


def header(stamp: int, frame_id: str):
    """std_msgs/Header for a nanosecond stamp."""
    t = TYPESTORE.types
    sec, nanosec = split_ns(stamp)
    time = t['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec)
    return t['std_msgs/msg/Header'](stamp=time, frame_id=frame_id)


def image_msg(fields: dict, stamp: int, frame_id: str):
    """sensor_msgs/Image from ``camera.features_image_fields``-style fields."""
    data = np.ascontiguousarray(fields['data']).view(np.uint8).reshape(-1)
    return TYPESTORE.types[IMAGE_TYPE](
        header=header(stamp, frame_id), height=fields['height'], width=fields['width'],
        encoding=fields['encoding'], is_bigendian=fields['is_bigendian'], step=fields['step'],
        data=data)


def diagnostic_array(stamp: int, frame_id: str, name: str, values: dict[str, str],
                     level: int = 0, message: str = ''):
    """diagnostic_msgs/DiagnosticArray with one status of string key/values."""
    t = TYPESTORE.types
    status = t['diagnostic_msgs/msg/DiagnosticStatus'](
        level=level, name=name, message=message, hardware_id=frame_id,
        values=[t['diagnostic_msgs/msg/KeyValue'](key=k, value=v) for k, v in values.items()])
    return t[DIAGNOSTICS_TYPE](header=header(stamp, frame_id), status=[status])


def shift_stamp(raw: bytes, offset_ns: int) -> bytes:
    """
    Shift the std_msgs/Header stamp at the start of a CDR message by ``offset_ns``.

    Every message this package plays starts with a Header, whose stamp (int32 sec, uint32
    nanosec) follows the 4-byte CDR encapsulation header; byte 1 of it gives the endianness.
    """
    order = '<' if raw[1] & 1 else '>'
    sec, nanosec = struct.unpack_from(order + 'iI', raw, 4)
    sec, nanosec = split_ns(sec * NS_PER_S + nanosec + offset_ns)
    out = bytearray(raw)
    struct.pack_into(order + 'iI', out, 4, sec, nanosec)
    return bytes(out)


class BagWriter:
    """
    A new MCAP (or sqlite3) bag; topics are added on first write.

    ``compress`` zstd-compresses MCAP chunks (rosbag2's 'storage' mode; BEV features are mostly
    zeros). Chunk compression is part of the MCAP format, so every MCAP reader decodes such a
    bag, where per-message compression ('message' mode) hands other readers zstd frames instead
    of CDR. sqlite3 has no storage compression: there ``compress`` compresses each message.
    """

    def __init__(self, path: str | Path, storage: str = 'mcap', compress: bool = False):
        self.path = Path(path)
        plugin = StoragePlugin.MCAP if storage == 'mcap' else StoragePlugin.SQLITE3
        try:
            self._writer = Writer(self.path, version=9, storage_plugin=plugin)
            if compress:
                mode = (CompressionMode.STORAGE if plugin == StoragePlugin.MCAP
                        else CompressionMode.MESSAGE)
                self._writer.set_compression(mode, CompressionFormat.ZSTD)
            self._writer.open()
        except (WriterError, OSError) as exc:
            raise BagError(f'{self.path}: cannot write bag: {exc}') from None
        self._connections = {}
        self.counts: dict[str, int] = {}

    def write(self, topic: str, msg, timestamp: int) -> None:
        """Serialize and write a rosbags message at bag time ``timestamp`` (ns)."""
        self.write_raw(topic, msg.__msgtype__,
                       TYPESTORE.serialize_cdr(msg, msg.__msgtype__), timestamp)

    def write_raw(self, topic: str, msgtype: str, data: bytes, timestamp: int) -> None:
        """Write already-serialized CDR bytes."""
        conn = self._connections.get(topic)
        if conn is None:
            conn = self._writer.add_connection(topic, msgtype, typestore=TYPESTORE)
            self._connections[topic] = conn
        self._writer.write(conn, int(timestamp), data)
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def close(self) -> None:
        """Finish the bag (writes metadata.yaml)."""
        self._writer.close()

    def __enter__(self) -> 'BagWriter':
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_messages(reader: Reader, topics: list[str]) -> Iterator[tuple[str, int, bytes, str]]:
    """Yield (topic, bag time ns, raw CDR, msgtype) for ``topics`` in bag-time order."""
    conns = [c for c in reader.connections if c.topic in topics]
    for conn, timestamp, raw in reader.messages(connections=conns):
        yield conn.topic, timestamp, raw, conn.msgtype


def topic_types(reader: Reader) -> dict[str, str]:
    """Topic -> msgtype of every connection in the bag."""
    return {c.topic: c.msgtype for c in reader.connections}
