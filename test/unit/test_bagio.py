"""bagio.open_reader: a bag file named on its own, where its folder compresses every message."""

import shutil

from jax_perception_node.bags import bagio
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.writer import CompressionFormat, CompressionMode
from rosbags.typesys import get_typestore, Stores

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)


def write_bag(path, compress: bool, storage=StoragePlugin.SQLITE3,
              mode=CompressionMode.MESSAGE) -> None:
    """Write three std_msgs/String messages, zstd-compressed (each or all) if ``compress``."""
    string = TYPESTORE.types['std_msgs/msg/String']
    writer = Writer(path, version=8 if storage == StoragePlugin.SQLITE3 else 9,
                    storage_plugin=storage)
    if compress:
        writer.set_compression(mode, CompressionFormat.ZSTD)
    writer.open()
    try:
        connection = writer.add_connection('/chatter', string.__msgtype__, typestore=TYPESTORE)
        for k in range(3):
            writer.write(connection, k, TYPESTORE.serialize_cdr(string(data=f'hi {k}'),
                                                                string.__msgtype__))
    finally:
        writer.close()


def messages(reader) -> list[str]:
    try:
        return [TYPESTORE.deserialize_cdr(raw, c.msgtype).data
                for c, _, raw in reader.messages()]
    finally:
        reader.close()


@pytest.mark.parametrize('compress', [False, True])
def test_a_folders_file_is_read_alone_only_when_its_messages_are_not_compressed(tmp_path,
                                                                                compress):
    write_bag(tmp_path / 'bag', compress)
    assert messages(bagio.open_reader(tmp_path / 'bag')) == ['hi 0', 'hi 1', 'hi 2']
    file, = [f for f in (tmp_path / 'bag').iterdir() if f.name != 'metadata.yaml']
    if not compress:
        assert messages(bagio.open_reader(file)) == ['hi 0', 'hi 1', 'hi 2']
        return
    # Alone, each message would be a zstd frame (rejected one by one, the replay empty).
    with pytest.raises(bagio.BagError, match=f'compression_mode message\\): name the folder '
                                             f'{tmp_path / "bag"}'):
        bagio.open_reader(file)


@pytest.mark.parametrize('storage', [StoragePlugin.SQLITE3, StoragePlugin.MCAP])
@pytest.mark.parametrize('compress', [False, True])
def test_a_file_copied_out_of_its_folder_says_itself_whether_its_messages_are_compressed(
        tmp_path, storage, compress):
    # rosbag2 keeps its bag information in the file too (an .mcap's rosbag2 record, a .db3's
    # metadata table): alone, a message-compressed file is refused in one line, not read as
    # zstd frames; an uncompressed one reads.
    write_bag(tmp_path / 'bag', compress, storage)
    file, = [f for f in (tmp_path / 'bag').iterdir() if f.name != 'metadata.yaml']
    (tmp_path / 'elsewhere').mkdir()
    bare = tmp_path / 'elsewhere' / f'copied{file.suffix}'
    shutil.copy(file, bare)
    if not compress:
        assert messages(bagio.open_reader(bare)) == ['hi 0', 'hi 1', 'hi 2']
        return
    with pytest.raises(bagio.BagError, match='compressed one by one .compression_mode message, '
                                             'as the bag information in the file says.'):
        bagio.open_reader(bare)


def test_a_truncated_compressed_bag_file_is_one_line(tmp_path):
    write_bag(tmp_path / 'bag', True, StoragePlugin.MCAP, CompressionMode.FILE)
    assert messages(bagio.open_reader(tmp_path / 'bag')) == ['hi 0', 'hi 1', 'hi 2']
    file, = (tmp_path / 'bag').glob('*.zstd')
    file.write_bytes(file.read_bytes()[:len(file.read_bytes()) // 2])
    # An EOFError traceback from the decompressor before.
    with pytest.raises(bagio.BagError, match=r'cannot read bag: EOFError: '):
        messages(bagio.open_reader(tmp_path / 'bag'))


def test_a_message_count_that_is_no_number_is_one_line(tmp_path):
    write_bag(tmp_path / 'bag', False, StoragePlugin.MCAP)
    metadata = tmp_path / 'bag' / 'metadata.yaml'
    metadata.write_text(metadata.read_text().replace('message_count: 3', "message_count: 'x'"))
    reader = bagio.open_reader(tmp_path / 'bag')
    try:    # a TypeError traceback summing the counts before
        with pytest.raises(bagio.BagError, match=r"the message count of /chatter is 'x', not a"):
            bagio.message_count(reader, ['/chatter'])
    finally:
        reader.close()


def test_a_topic_recorded_under_both_spellings_of_its_type_reads_every_message(tmp_path):
    # A bag merged from tools that spell the type pkg/Type and pkg/msg/Type: one type.
    from jax_perception_node.tools.live import ros_type
    string = TYPESTORE.types['std_msgs/msg/String']
    writer = Writer(tmp_path / 'bag', version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    try:
        msgdef, _ = TYPESTORE.generate_msgdef(string.__msgtype__, ros_version=2)
        both = [writer.add_connection('/chatter', string.__msgtype__, typestore=TYPESTORE),
                writer.add_connection('/chatter', 'std_msgs/String', msgdef=msgdef,
                                      rihs01=TYPESTORE.hash_rihs01(string.__msgtype__))]
        for k in range(4):
            writer.write(both[k % 2], k, TYPESTORE.serialize_cdr(string(data=f'hi {k}'),
                                                                 string.__msgtype__))
    finally:
        writer.close()
    reader = bagio.open_reader(tmp_path / 'bag')
    try:
        assert bagio.topic_types(reader) == {'/chatter': 'std_msgs/msg/String'}
        read = [(bagio.deserialize(raw, msgtype).data, msgtype)
                for _, _, raw, msgtype in bagio.iter_messages(reader, ['/chatter'])]
        assert sum(c.msgcount for c in bagio.read_connections(reader, ['/chatter'])) == 4
    finally:
        reader.close()
    assert read == [(f'hi {k}', 'std_msgs/msg/String') for k in range(4)]
    assert ros_type('std_msgs/String') is ros_type('std_msgs/msg/String')   # play: one class
    for name in ('std_msgs', 'no_such_pkg/Thing', 'std_msgs/msg/Nothing'):
        with pytest.raises(bagio.BagError, match=f'message type {name} is not installed'):
            ros_type(name)


def test_a_bare_db3_keeps_its_custom_data_too(tmp_path):
    writer = Writer(tmp_path / 'bag', version=9, storage_plugin=StoragePlugin.SQLITE3)
    writer.set_custom_data(bagio.SAMPLE_SEED_KEY, '7')
    writer.open()
    writer.close()
    bare = tmp_path / 'drive.db3'
    shutil.copy(next((tmp_path / 'bag').glob('*.db3')), bare)
    reader = bagio.open_reader(bare)
    try:
        assert bagio.custom_data(reader) == {bagio.SAMPLE_SEED_KEY: '7'}
    finally:
        reader.close()


def test_an_odometry_topic_named_must_be_there_as_odometry():
    cloud = (bagio.POINTCLOUD_TOPIC, bagio.POINTCLOUD_TYPE)
    types = dict([cloud, ('/localization/pose', 'geometry_msgs/msg/PoseWithCovarianceStamped'),
                  ('/odom', bagio.ODOMETRY_TYPE)])
    bagio.check_topics(types, bagio.BagTopics())            # the node's own name: may be absent
    bagio.check_topics(types, bagio.BagTopics(odometry='/odom'))
    for topic, state in (('/localization/pose', 'is geometry_msgs/msg/PoseWithCovarianceStamped'),
                         ('/odometry', 'is not in the bag')):
        with pytest.raises(bagio.BagError, match=f'--odometry-topic {topic}: {state}, want '
                                                 'nav_msgs/msg/Odometry'):
            bagio.check_topics(types, bagio.BagTopics(odometry=topic))


@pytest.mark.parametrize('order', [('string', 'tf'), ('tf', 'string')])
def test_a_topic_of_several_types_is_read_as_the_nodes_input_type_alone(tmp_path, order):
    # A merged MCAP may hold one topic under two types (ros2 bag record skips such a topic):
    # whatever the connections' order, it reads as the type the node takes, and only that.
    t = TYPESTORE.types
    made = {'string': t['std_msgs/msg/String'](data='not a transform'),
            'tf': t['tf2_msgs/msg/TFMessage'](transforms=[])}
    writer = Writer(tmp_path / 'bag', version=8)
    writer.open()
    try:
        for k, kind in enumerate(order):
            msg = made[kind]
            connection = writer.add_connection('/x', msg.__msgtype__, typestore=TYPESTORE)
            writer.write(connection, k, TYPESTORE.serialize_cdr(msg, msg.__msgtype__))
        other = writer.add_connection('/y', 'std_msgs/msg/String', typestore=TYPESTORE)
        writer.write(other, 5, TYPESTORE.serialize_cdr(made['string'], 'std_msgs/msg/String'))
    finally:
        writer.close()
    reader = bagio.open_reader(tmp_path / 'bag')
    try:
        assert bagio.topic_types(reader) == {'/x': bagio.TF_TYPE, '/y': 'std_msgs/msg/String'}
        read = [(topic, msgtype) for topic, _, _, msgtype in bagio.iter_messages(reader, ['/x'])]
    finally:
        reader.close()
    assert read == [('/x', bagio.TF_TYPE)]


def test_a_bare_mcap_keeps_the_custom_data_rosbag2_writes_into_it(tmp_path):
    # A held-out drive copied out of its folder: its seed is still read (the training refuses
    # held-out seeds by it), from the rosbag2 record inside the file.
    writer = Writer(tmp_path / 'bag', version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_custom_data(bagio.SAMPLE_SEED_KEY, '5')
    writer.open()
    try:
        string = TYPESTORE.types['std_msgs/msg/String']
        connection = writer.add_connection('/chatter', string.__msgtype__, typestore=TYPESTORE)
        writer.write(connection, 1, TYPESTORE.serialize_cdr(string(data='hi'),
                                                            string.__msgtype__))
    finally:
        writer.close()
    (tmp_path / 'elsewhere').mkdir()
    bare = tmp_path / 'elsewhere' / 'drive.mcap'
    shutil.copy(next((tmp_path / 'bag').glob('*.mcap')), bare)
    for path in (tmp_path / 'bag', bare):
        reader = bagio.open_reader(path)
        try:
            assert bagio.custom_data(reader) == {bagio.SAMPLE_SEED_KEY: '5'}, path
        finally:
            reader.close()


@pytest.mark.parametrize('metadata, message', [
    (None, 'a folder without metadata.yaml is no rosbag2 bag (a recording cut short leaves '
           'one); name its file (b_0.mcap), or rebuild the metadata with ros2 bag reindex'),
    ('', 'its metadata.yaml holds no rosbag2_bagfile_information mapping'),
    ('- 1\n- 2\n', 'its metadata.yaml holds no rosbag2_bagfile_information mapping'),
    ('a: [\n', 'cannot read its metadata.yaml'),
])
def test_a_bag_folder_without_usable_metadata_is_named_so(tmp_path, metadata, message):
    folder = tmp_path / 'b'
    folder.mkdir()
    (folder / 'b_0.mcap').write_bytes(b'\x89MCAP0\r\n')
    if metadata is not None:
        (folder / 'metadata.yaml').write_text(metadata)
    with pytest.raises(bagio.BagError, match=f'^{folder}: ' + message.replace('(', r'\(')
                       .replace(')', r'\)')):
        bagio.open_reader(folder)


def test_a_fifo_is_no_bag(tmp_path):
    import os
    fifo = tmp_path / 'x.mcap'
    os.mkfifo(fifo)
    with pytest.raises(bagio.BagError, match='not a regular file'):    # it would block
        bagio.open_reader(fifo)


def test_an_mcap_whose_record_length_is_corrupt_is_one_line(tmp_path):
    import struct
    bag = tmp_path / 'x.mcap'
    # The magic, then a header record (opcode 1) claiming 2^63 + 5 bytes.
    bag.write_bytes(b'\x89MCAP0\r\n\x01' + struct.pack('<Q', 2**63 + 5) + b'abc' * 10)
    with pytest.raises(bagio.BagError, match=f'^{bag}: cannot read bag: a record length is '
                                             'corrupt$'):
        bagio.open_reader(bag)
