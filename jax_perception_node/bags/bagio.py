"""
rosbag2 reading and writing on top of ``rosbags`` (MCAP or sqlite3), without a ROS install.

Messages are ``rosbags`` dataclasses of the ROS 2 Jazzy type store; the core reads them by
attribute just like rclpy messages. Raw CDR bytes from a bag are what rclpy publishes and
receives with ``raw=True``, so live play and recording never convert message types.

Every failure of this layer is a ``BagError`` naming the bag (or the message type) and the
problem: a bag that cannot be opened or read on, bytes that are no message of their type, a
bag that cannot be written. ``writing_bag`` makes a new bag appear whole or not at all.
"""

import contextlib
import os
from pathlib import Path
import shutil
import socket
import struct
from typing import Iterator, Sequence

import numpy as np
from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness, QosReliability,
                                QosTime)
from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, StoragePlugin, Writer
from rosbags.rosbag2.errors import ReaderError, WriterError
from rosbags.serde import SerdeError
from rosbags.typesys import get_typestore, Stores
from rosbags.typesys.base import TypesysError
import yaml

from .bag_metadata import custom_data, embedded_info, sibling_info  # noqa: F401
from .message_types import register_interface_types, share_folders
from .topics import (BagTopics, camera_compressed_topic, camera_image_topic,  # noqa: F401
                     camera_info_topic, camera_topic, DIAGNOSTICS_TOPIC, FEATURES_TOPIC,
                     GRID_MAP_TOPIC, IMAGE_TOPIC, LATENCY_TOPIC, lidar_topic, NAMESPACE,
                     OBJECTS_MARKERS_TOPIC, OBJECTS_TOPIC, ODOMETRY_TOPIC, POINTCLOUD_TOPIC)
from ..geometry.stamps import NS_PER_S, split_ns
from ..outputs.detected_objects import DETECTED_OBJECTS_TYPE
from ..outputs.object_markers import MARKER_ARRAY_TYPE  # noqa: F401
from ..outputs.objects import DETECTION_ARRAY_TYPE as DETECTIONS_TYPE

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
# The interface packages built in interfaces/ (message_types.INTERFACE_MESSAGES) from their
# installed .msg text; the msgtypes of those not installed (``message_class`` names them).
MISSING_TYPES = tuple(register_interface_types(TYPESTORE))
POINTCLOUD_TYPE = 'sensor_msgs/msg/PointCloud2'
IMAGE_TYPE = 'sensor_msgs/msg/Image'
COMPRESSED_IMAGE_TYPE = 'sensor_msgs/msg/CompressedImage'
# What a camera's topic may carry: feature maps, or (cameras.<name>.input: image) images.
CAMERA_TYPES = {False: (IMAGE_TYPE,), True: (IMAGE_TYPE, COMPRESSED_IMAGE_TYPE)}
CAMERA_INFO_TYPE = 'sensor_msgs/msg/CameraInfo'
ODOMETRY_TYPE = 'nav_msgs/msg/Odometry'
DIAGNOSTICS_TYPE = 'diagnostic_msgs/msg/DiagnosticArray'
TF_TYPE = 'tf2_msgs/msg/TFMessage'
GRID_MAP_TYPE = 'grid_map_msgs/msg/GridMap'
FLOAT64_STAMPED_TYPE = 'autoware_internal_debug_msgs/msg/Float64Stamped'
PUBLISHED_TIME_TYPE = 'autoware_internal_msgs/msg/PublishedTime'
# output.objects_type -> the msgtype of ~/output/objects
OBJECTS_TYPES = {'vision_msgs': DETECTIONS_TYPE, 'autoware': DETECTED_OBJECTS_TYPE}
# A topic recorded under several types (a merged MCAP; ros2 bag record skips such topics) is
# read as the first of these it has, else as its last connection's type: one type per topic.
READ_TYPES = (POINTCLOUD_TYPE, IMAGE_TYPE, COMPRESSED_IMAGE_TYPE, CAMERA_INFO_TYPE,
              ODOMETRY_TYPE, TF_TYPE, *OBJECTS_TYPES.values())


# Where a sample drive's metadata.yaml (rosbag2's custom_data) keeps its seed.
SAMPLE_SEED_KEY = 'jax_perception.sample_seed'


class BagError(Exception):
    """A bag cannot be read or written as asked; the message names the bag and the problem."""


def open_reader(path: str | Path) -> Reader:
    """
    Open a rosbag2 directory or a bare .mcap / .db3 file for reading.

    BagError for a file whose folder's metadata.yaml compresses its messages, or, named away
    from its folder, whose own bag information does (``bag_metadata.embedded_info``): read on
    its own every message would be a zstd frame (each refused as a corrupt message); the
    folder reads.
    """
    path = Path(path)
    if not path.exists():
        raise BagError(f'{path}: no such bag')
    if path.is_dir() and not (path / 'metadata.yaml').is_file():
        files = sorted(p.name for p in path.iterdir() if p.suffix in ('.mcap', '.db3'))
        raise BagError(f'{path}: a folder without metadata.yaml is no rosbag2 bag (a recording '
                       'cut short leaves one)' + (
                           f'; name its file ({", ".join(files)}), or rebuild the metadata '
                           'with ros2 bag reindex' if files else ''))
    if not path.is_dir() and not path.is_file():
        raise BagError(f'{path}: not a regular file (a FIFO or a device is no bag)')
    if path.is_dir():
        _check_metadata(path)
    if path.is_file():
        _check_file_compression(path.resolve())
    try:
        reader = Reader(path)
        reader.open()
    except (ReaderError, OSError, ValueError, KeyError) as exc:
        # One line: a broken metadata.yaml's parser error spans several.
        raise BagError(f'{path}: cannot read bag: {" ".join(str(exc).split())}') from None
    except (OverflowError, MemoryError):    # a corrupt record length, used before any check
        raise BagError(f'{path}: cannot read bag: a record length is corrupt') from None
    except Exception as exc:    # noqa: B902 - a truncated zstd file, a metadata field of a type
        # rosbags does not check: the storage plugins and codecs raise many kinds
        raise BagError(f'{path}: cannot read bag: {type(exc).__name__}: '
                       f'{" ".join(str(exc).split())}') from None
    return reader


def _check_file_compression(path: Path) -> None:
    """Refuse bag file ``path`` when its bag information says its messages are compressed."""
    beside = sibling_info(path)
    if beside is not None:
        mode = str(beside.get('compression_mode') or 'none').lower()
        if mode not in ('none', ''):
            raise BagError(f'{path}: the metadata.yaml of its folder compresses it '
                           f'(compression_mode {mode}): name the folder {path.parent}')
        return
    # The file's own copy: 'file' compression is undone already when the .mcap can be named.
    mode = str((embedded_info(path) or {}).get('compression_mode') or 'none').lower()
    if mode == 'message':
        raise BagError(
            f'{path}: its messages are compressed one by one (compression_mode message, as '
            'the bag information in the file says), which only its bag folder (with that '
            'metadata.yaml) reads: name the folder, or write it uncompressed (ros2 bag convert)')


def _check_metadata(folder: Path) -> None:
    """Refuse a folder whose metadata.yaml holds no rosbag2 bag information."""
    # rosbags' own error for an empty or a list metadata.yaml is a Python TypeError's text.
    try:
        info = yaml.safe_load((folder / 'metadata.yaml').read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BagError(f'{folder}: cannot read its metadata.yaml: '
                       f'{" ".join(str(exc).split())}') from None
    if not (isinstance(info, dict) and isinstance(info.get('rosbag2_bagfile_information'),
                                                  dict)):
        raise BagError(f'{folder}: its metadata.yaml holds no rosbag2_bagfile_information '
                       'mapping (empty, or not a rosbag2 bag)')


def message_class(msgtype: str):
    """Return the rosbags class of ``msgtype``; BagError when its definition is not installed."""
    if msgtype in TYPESTORE.types:
        return TYPESTORE.types[msgtype]
    package = msgtype.split('/')[0]
    where = ' or '.join(str(f) for f in share_folders())
    hint = ' (make venv builds it)' if msgtype in MISSING_TYPES else ''
    raise BagError(f'message type {msgtype} unknown: no {package} definition in {where}{hint}')


def deserialize(raw: bytes, msgtype: str):
    """Return the rosbags message of CDR bytes; BagError when they are no ``msgtype``."""
    try:
        return TYPESTORE.deserialize_cdr(raw, msgtype)
    except (SerdeError, ValueError, IndexError, KeyError, struct.error) as exc:
        raise BagError(f'bytes that are no {msgtype}: {exc}') from None


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


def offered_qos(reliable: bool = True, depth: int = 10, transient_local: bool = False) -> Qos:
    """One offered QoS profile as rosbag2 writes it (infinite deadline, lifespan and lease)."""
    infinite = QosTime(9223372036, 854775807)      # RMW_DURATION_INFINITE
    return Qos(QosHistory.KEEP_LAST, depth,
               QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
               QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
               infinite, infinite, QosLiveliness.AUTOMATIC, infinite, False)


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

    def add_topic(self, topic: str, msgtype: str, offered_qos: Sequence[Qos] = ()) -> None:
        """
        Add ``topic`` with the QoS profiles its publishers offered.

        One profile per publisher, as rosbag2 keeps them in the metadata's
        ``offered_qos_profiles``; a topic first met by ``write_raw`` has none.
        """
        if topic in self._connections:
            raise BagError(f'{self.path}: topic {topic} added twice')
        try:
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, typestore=TYPESTORE, offered_qos_profiles=list(offered_qos))
        except (WriterError, OSError, TypesysError) as exc:
            raise BagError(f'{self.path}: cannot write bag: {exc}') from None

    def write_raw(self, topic: str, msgtype: str, data: bytes, timestamp: int) -> None:
        """Write already-serialized CDR bytes."""
        if topic not in self._connections:
            self.add_topic(topic, msgtype)
        try:
            self._writer.write(self._connections[topic], int(timestamp), data)
        except (WriterError, OSError) as exc:     # a full disk, a removed folder
            raise BagError(f'{self.path}: cannot write bag: {exc}') from None
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def close(self) -> None:
        """Finish the bag (writes metadata.yaml)."""
        try:
            self._writer.close()
        except (WriterError, OSError) as exc:
            raise BagError(f'{self.path}: cannot write bag: {exc}') from None

    def __enter__(self) -> 'BagWriter':
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.close()
            return
        # Failing already: that exception says what went wrong, not a failed close after it.
        with contextlib.suppress(Exception):
            self._writer.close()


PARTIAL = '.partial-'    # in the name of the folder a bag is written under (``writing_bag``)


def partial_folder(dst: Path) -> Path:
    """Return ``.<name>.partial-<host>-<pid>``, where this process writes the bag ``dst``."""
    return dst.with_name(f'.{dst.name}{PARTIAL}{socket.gethostname()}-{os.getpid()}')


def remove_stale_partials(dst: Path) -> list[Path]:
    """
    Remove the partial folders of ``dst`` left by processes on this host that are gone.

    A folder of a running process (a concurrent write of the same bag) stays, and so does one
    from another host (its process cannot be checked from here). Returns what was removed.
    """
    prefix = f'.{dst.name}{PARTIAL}{socket.gethostname()}-'
    if not dst.parent.is_dir():
        return []
    removed = []
    for path in dst.parent.iterdir():
        pid = path.name[len(prefix):] if path.name.startswith(prefix) else ''
        if pid.isdigit() and (int(pid) == os.getpid() or not _alive(int(pid))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # another user's process
        return True
    return True


@contextlib.contextmanager
def writing_bag(dst: str | Path) -> Iterator[Path]:
    """
    Yield the path to write the new bag ``dst`` at; it appears at ``dst`` only when complete.

    The bag is written inside ``partial_folder(dst)`` and renamed to ``dst`` (one rename in one
    folder) when the block ends without an exception. After any exception (an error, Ctrl-C,
    a SIGTERM the CLI turned into one) neither ``dst`` nor the folder is left. A process killed
    outright (SIGKILL, power loss) leaves only the folder; the next ``writing_bag(dst)`` on
    this host removes it (``remove_stale_partials``). Raises BagError when ``dst`` exists or
    its folder cannot be written.
    """
    dst = Path(dst)
    if dst.exists():
        raise BagError(f'{dst} exists, not overwriting')
    remove_stale_partials(dst)
    partial = partial_folder(dst)
    try:
        partial.mkdir(parents=True)
    except OSError as exc:
        raise BagError(f'{dst}: cannot write bag: {exc.strerror or exc}') from None
    try:
        yield partial / dst.name
        if dst.exists():
            raise BagError(f'{dst} appeared while it was written, not overwriting')
        try:
            os.rename(partial / dst.name, dst)
        except OSError as exc:
            raise BagError(f'{dst}: cannot write bag: {exc.strerror or exc}') from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def canonical_type(msgtype: str) -> str:
    """Return ``pkg/msg/Name`` for ``pkg/Name`` (ROS 1's spelling, kept by some tools)."""
    parts = msgtype.split('/')
    return f'{parts[0]}/msg/{parts[1]}' if len(parts) == 2 else msgtype


def read_connections(reader: Reader, topics) -> list:
    """Return the connections of ``topics`` that ``iter_messages`` reads (``topic_types``)."""
    types = topic_types(reader)
    return [c for c in reader.connections
            if c.topic in topics and canonical_type(c.msgtype) == types[c.topic]]


def message_count(reader: Reader, topics) -> int:
    """Return how many messages of ``topics`` the bag information lists; BagError if no number."""
    found = read_connections(reader, topics)
    for c in found:
        if not isinstance(c.msgcount, int):
            raise BagError(f'{reader.path}: cannot read bag: the message count of {c.topic} '
                           f'is {c.msgcount!r}, not a number')
    return sum(c.msgcount for c in found)


def iter_messages(reader: Reader, topics: list[str]) -> Iterator[tuple[str, int, bytes, str]]:
    """
    Yield (topic, bag time ns, raw CDR, msgtype) for ``topics`` in bag-time order.

    The msgtype is spelled ``pkg/msg/Name`` (``canonical_type``), however the bag spells it.
    Raises BagError when the bag cannot be read on (a corrupt chunk, a file cut short).
    """
    messages = reader.messages(connections=read_connections(reader, topics))
    while True:
        try:
            conn, timestamp, raw = next(messages)
        except StopIteration:
            return
        except Exception as exc:    # noqa: B902 - storage plugins and codecs raise many kinds
            raise BagError(f'{reader.path}: cannot read bag: {type(exc).__name__}: '
                           f'{exc}') from None
        yield conn.topic, timestamp, raw, canonical_type(conn.msgtype)


def topic_types(reader: Reader) -> dict[str, str]:
    """
    Topic -> the msgtype it is read as (:data:`READ_TYPES`), of every topic in the bag.

    Spelled ``pkg/msg/Name`` (``canonical_type``): a bag merged from tools that spell one type
    two ways reads every message of it.
    """
    rank = {t: k for k, t in enumerate(READ_TYPES)}
    types: dict[str, str] = {}
    for c in reader.connections:
        held, msgtype = types.get(c.topic), canonical_type(c.msgtype)
        if held is None or rank.get(msgtype, len(rank)) <= rank.get(held, len(rank)):
            types[c.topic] = msgtype
    return types


def check_topics(types: dict[str, str], topics: BagTopics, lidars: tuple[str, ...] = (),
                 images: bool = False) -> None:
    """
    Refuse a bag without a LiDAR topic or a camera topic ``topics`` names (BagError).

    ``lidars``: the names of ``lidars.names``, each of whose topics (``BagTopics.lidar``) must
    be there; () for the one LiDAR of ``topics.pointcloud``. A camera without an entry in
    ``topics`` may be missing (its maps are masked, as for a LiDAR-only drive); one named
    explicitly (``--camera-topic``) must be there, with its type: Image, or with ``images``
    (``cameras.<name>.input: image``) also CompressedImage. An odometry topic other than the
    node's (``--odometry-topic``) must be there as nav_msgs/Odometry: read silently as none,
    deskew and accumulation would go without motion.
    """
    for topic, name in topics.clouds(lidars).items():
        found = types.get(topic)
        if found != POINTCLOUD_TYPE:
            what = f'its type is {found}' if found else \
                f'topics: {", ".join(sorted(types)) or "none"}'
            clouds = sorted(t for t, kind in types.items() if kind == POINTCLOUD_TYPE)
            hint = '; lidars.names names the LiDARs of a bag of several' if (
                not lidars and len(clouds) > 1) else ''
            of = f' of LiDAR {name} (lidars.names)' if name else ''
            raise BagError(f'no {POINTCLOUD_TYPE} topic {topic}{of} ({what}){hint}')
    for kind, named, wanted in (('camera', topics.cameras, CAMERA_TYPES[images]),
                                ('camera-info', topics.camera_infos, (CAMERA_INFO_TYPE,))):
        for name, topic in named:
            if types.get(topic) not in wanted:
                state = f'is {types[topic]}' if topic in types else 'is not in the bag'
                raise BagError(f'--{kind}-topic {name}={topic}: {state}, want '
                               f'{" or ".join(wanted)}')
    if topics.odometry != ODOMETRY_TOPIC and types.get(topics.odometry) != ODOMETRY_TYPE:
        state = f'is {types[topics.odometry]}' if topics.odometry in types else 'is not in the bag'
        raise BagError(f'--odometry-topic {topics.odometry}: {state}, want {ODOMETRY_TYPE}')
