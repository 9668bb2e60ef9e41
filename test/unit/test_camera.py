"""Feature-map Images <-> arrays: round trips, byte order, padding, invalid Images, fuzz."""

import array
from dataclasses import dataclass, replace
import os
import struct
import sys

from configs import absolute_imports
from hypothesis import event, given, HealthCheck, settings
from hypothesis import strategies as st
from jax_perception_node.sensors.camera import (byte_array, FeatureMapError, features_image_fields,
                                                read_features)
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import get_typestore, Stores
from sensor_msgs.msg import Image

FUZZ_EXAMPLES = int(os.environ.get('JAX_PERCEPTION_FUZZ_EXAMPLES', '300'))
TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
FOREIGN_BIG = sys.byteorder == 'little'


@dataclass
class Frame:
    """Stand-in for sensor_msgs/Image (no header: the decoder must not need one)."""

    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: object


def encode(features: np.ndarray, is_bigendian: bool = False, pad: int = 0) -> Frame:
    """Pack float32[H, W, C] with struct, ``pad`` garbage bytes after each row."""
    rows, cols, channels = features.shape
    fmt = ('>' if is_bigendian else '<') + 'f' * (cols * channels)
    data = b''.join(struct.pack(fmt, *row.ravel().tolist()) + b'\xff' * pad for row in features)
    return Frame(rows, cols, f'32FC{channels}', int(is_bigendian), cols * channels * 4 + pad,
                 data)


def reference_decode(frame: Frame, height=None, width=None, channels=None) -> np.ndarray:
    """Decode value by value with struct; None when the spec says the Image is unusable."""
    enc = frame.encoding
    if not (enc.startswith('32FC') and enc[4:].isascii() and enc[4:].isdigit()):
        return None
    c = int(enc[4:])
    h, w, step, data = frame.height, frame.width, frame.step, bytes(frame.data)
    if c < 1 or h < 1 or w < 1 or step < w * c * 4 or len(data) < step * h:
        return None
    for want, got in ((height, h), (width, w), (channels, c)):
        if want is not None and want != got:
            return None
    fmt = ('>' if frame.is_bigendian else '<') + 'f' * (w * c)
    rows = [struct.unpack_from(fmt, data, r * step) for r in range(h)]
    return np.array(rows, np.float32).reshape(h, w, c)


def rclpy_image(frame: Frame) -> Image:
    return Image(height=frame.height, width=frame.width, encoding=frame.encoding,
                 is_bigendian=frame.is_bigendian, step=frame.step, data=bytes(frame.data))


def rosbags_image(frame: Frame):
    types = TYPESTORE.types
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=3, nanosec=4), frame_id='camera')
    return types['sensor_msgs/msg/Image'](
        header=header, height=frame.height, width=frame.width, encoding=frame.encoding,
        is_bigendian=frame.is_bigendian, step=frame.step,
        data=np.frombuffer(bytearray(frame.data), np.uint8))


def as_flavour(frame: Frame, flavour: str):
    if flavour == 'bytes':
        return frame
    if flavour == 'rclpy':
        return rclpy_image(frame)
    return rosbags_image(frame)


FLAVOURS = ('bytes', 'rclpy', 'rosbags')


def sample_features(shape=(4, 6, 3), seed=0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# -- round trips ------------------------------------------------------------------------------

def test_image_fields_describe_the_array():
    features = sample_features((2, 5, 7))
    fields = features_image_fields(features)
    assert set(fields) == {'height', 'width', 'encoding', 'is_bigendian', 'step', 'data'}
    assert (fields['height'], fields['width'], fields['encoding']) == (2, 5, '32FC7')
    assert fields['step'] == 5 * 7 * 4
    assert fields['is_bigendian'] == (sys.byteorder == 'big')
    data = fields['data']
    assert data.dtype == np.uint8 and data.shape == (2 * 5 * 7 * 4,)
    assert np.shares_memory(data, features)
    # The bytes are the host-order float32 values, row-major, channel-last.
    assert data.tobytes() == struct.pack('=' + 'f' * features.size, *features.ravel().tolist())


def test_image_fields_of_a_strided_or_float64_array():
    features = sample_features((6, 8, 2))
    for odd in (features[::2, ::-1], features.astype(np.float64)):
        frame = Frame(**features_image_fields(odd))
        np.testing.assert_array_equal(read_features(frame), odd.astype(np.float32))
    for bad in (np.zeros((3, 4), np.float32), np.zeros((0, 4, 2), np.float32)):
        with pytest.raises(ValueError, match='H, W, C'):
            features_image_fields(bad)


@pytest.mark.filterwarnings('ignore:module .sre_:DeprecationWarning')
def test_round_trip_through_rclpy_image():
    features = sample_features((3, 4, 5))
    fields = features_image_fields(features)
    msg = Image(**{**fields, 'data': byte_array(fields['data'])})
    assert isinstance(msg.data, array.array)
    np.testing.assert_array_equal(read_features(msg, 3, 4, 5), features)
    if os.environ.get('ROS_PYTHON_CHECK_FIELDS') != '1':
        # Assigning the NumPy data directly also works (slowly, element by element).
        direct = Image(**fields)
        np.testing.assert_array_equal(read_features(direct), features)
    # And through rclpy's own serialization, as a subscriber receives it.
    received = deserialize_message(serialize_message(msg), Image)
    np.testing.assert_array_equal(read_features(received, 3, 4, 5), features)


def test_round_trip_through_rosbags_image():
    features = sample_features((5, 2, 8))
    types = TYPESTORE.types
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=0, nanosec=0), frame_id='camera')
    msg = types['sensor_msgs/msg/Image'](header=header, **features_image_fields(features))
    out = read_features(msg, 5, 2, 8)
    np.testing.assert_array_equal(out, features)
    assert np.shares_memory(out, features)
    # And through CDR, as a bag reader returns it (data then views the read-only raw bytes).
    raw = TYPESTORE.serialize_cdr(msg, 'sensor_msgs/msg/Image')
    received = TYPESTORE.deserialize_cdr(raw, 'sensor_msgs/msg/Image')
    out = read_features(received, 5, 2, 8)
    np.testing.assert_array_equal(out, features)
    assert np.shares_memory(out, received.data)


def test_byte_array_copies_bytes_like_data():
    for data in (b'\x01\x02', bytearray(b'\x01\x02'), np.array([1, 2], np.uint8),
                 np.array([[1], [2]], np.uint8)[::-1][::-1]):
        out = byte_array(data)
        assert isinstance(out, array.array) and out.typecode == 'B'
        assert out.tolist() == [1, 2]


@pytest.mark.parametrize('flavour', FLAVOURS)
@pytest.mark.parametrize('is_bigendian', [False, True])
@pytest.mark.parametrize('pad', [0, 1, 12])
def test_byte_order_and_row_padding(flavour, is_bigendian, pad):
    features = sample_features((3, 5, 2), seed=pad)
    frame = encode(features, is_bigendian, pad)
    out = read_features(as_flavour(frame, flavour), 3, 5, 2)
    assert out.dtype == np.float32 and out.dtype.isnative and out.shape == (3, 5, 2)
    np.testing.assert_array_equal(out, features)
    np.testing.assert_array_equal(out, reference_decode(frame))


def test_native_data_is_viewed_foreign_is_copied():
    features = sample_features()
    native = rosbags_image(encode(features, not FOREIGN_BIG, pad=4))
    assert np.shares_memory(read_features(native), native.data)
    foreign = rosbags_image(encode(features, FOREIGN_BIG))
    assert not np.shares_memory(read_features(foreign), foreign.data)


def test_non_finite_values_pass_through():
    features = np.array([[[np.nan, np.inf], [-np.inf, 1.0]]], np.float32)
    for big in (False, True):
        np.testing.assert_array_equal(read_features(encode(features, big)), features)


def test_channel_count_is_parsed():
    features = sample_features((2, 3, 12))
    frame = encode(features)
    assert frame.encoding == '32FC12'
    np.testing.assert_array_equal(read_features(frame, channels=12), features)
    assert read_features(replace(frame, encoding='32FC012')).shape == (2, 3, 12)


# -- invalid images ---------------------------------------------------------------------------

def _good() -> Frame:
    return encode(sample_features((4, 6, 3)), pad=4)


INVALID = {
    'rgb8': (lambda f: replace(f, encoding='rgb8'), "encoding 'rgb8'"),
    '32FC0': (lambda f: replace(f, encoding='32FC0'), "encoding '32FC0'"),
    '64FC1': (lambda f: replace(f, encoding='64FC1'), "encoding '64FC1'"),
    '32FC': (lambda f: replace(f, encoding='32FC'), "encoding '32FC'"),
    'lower case': (lambda f: replace(f, encoding='32fc3'), "encoding '32fc3'"),
    'trailing space': (lambda f: replace(f, encoding='32FC3 '), 'encoding'),
    'negative channels': (lambda f: replace(f, encoding='32FC-3'), 'encoding'),
    'non-ASCII digit': (lambda f: replace(f, encoding='32FC\u0663'), 'encoding'),
    'not a string': (lambda f: replace(f, encoding=None), 'encoding None'),
    'height 0': (lambda f: replace(f, height=0), 'height 0'),
    'width 0': (lambda f: replace(f, width=0), 'width 0'),
    'step short': (lambda f: replace(f, step=71), 'step 71 < width 6 \\* channels 3'),
    'data short': (lambda f: replace(f, data=f.data[:-1]), 'data has 303 bytes, expected .*304'),
    'no data': (lambda f: replace(f, data=b''), 'data has 0 bytes'),
    'huge header': (lambda f: replace(f, height=2 ** 31, width=2 ** 31 - 1,
                                      step=(2 ** 31 - 1) * 12), 'bytes'),
    'data not bytes': (lambda f: replace(f, data='abc'), 'byte buffer'),
}


@pytest.mark.parametrize('case', sorted(INVALID))
def test_invalid_image_is_rejected(case):
    change, message = INVALID[case]
    with pytest.raises(FeatureMapError, match=message):
        read_features(change(_good()))


@pytest.mark.parametrize('flavour', ['rclpy', 'rosbags'])
def test_invalid_real_messages_are_rejected(flavour):
    with pytest.raises(FeatureMapError, match="'mono8'"):
        read_features(as_flavour(replace(_good(), encoding='mono8'), flavour))
    with pytest.raises(FeatureMapError, match='bytes'):
        read_features(as_flavour(replace(_good(), data=_good().data[:100]), flavour))


@pytest.mark.parametrize('expected, message', [
    ({'height': 32}, 'height 4, expected 32'),
    ({'width': 5}, 'width 6, expected 5'),
    ({'channels': 8}, 'channels 3, expected 8'),
    ({'height': 4, 'width': 6, 'channels': 2}, 'channels 3, expected 2'),
])
def test_unexpected_shape_is_named(expected, message):
    with pytest.raises(FeatureMapError, match=message):
        read_features(_good(), **expected)


def test_height_mismatch_message():
    frame = encode(sample_features((30, 2, 1)))
    with pytest.raises(FeatureMapError, match='^height 30, expected 32$'):
        read_features(frame, height=32)


def test_camera_module_imports_no_ros():
    assert absolute_imports('camera') <= {'array', 'dataclasses', 're', 'sys', 'typing',
                                          'numpy'}


# -- fuzz -------------------------------------------------------------------------------------

ENCODINGS = ['32FC1', '32FC2', '32FC3', '32FC8', '32FC16'] * 8 + [
    '32FC', '32FC0', '32FC01', '64FC1', 'rgb8', '32fc1', '32FC1 ', '32FC-1', '32SC1', '']


@st.composite
def random_images(draw):
    encoding = draw(st.sampled_from(ENCODINGS))
    digits = encoding[4:]
    channels = int(digits) if digits.isdigit() else 1
    height = draw(st.sampled_from([0] + [1, 2, 3, 4] * 3))
    width = draw(st.sampled_from([0] + [1, 2, 3, 4, 5] * 3))
    step = max(0, width * channels * 4 + draw(st.sampled_from([0] * 8 + [-1, -4, 1, 4, 7])))
    size = max(0, step * height + draw(st.sampled_from([0] * 8 + [-1, -5, 2, 9])))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    frame = Frame(height, width, encoding, int(draw(st.booleans())), step,
                  rng.integers(0, 256, size, np.uint8).tobytes())

    def expect(actual):
        return draw(st.sampled_from([None] * 3 + [actual] * 3 + [actual + 1]))

    expected = {'height': expect(height), 'width': expect(width), 'channels': expect(channels)}
    return frame, expected, draw(st.sampled_from(FLAVOURS))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(random_images())
def test_fuzz_decodes_like_the_reference_or_rejects(case):
    frame, expected_shape, flavour = case
    expected = reference_decode(frame, **expected_shape)
    event('rejected' if expected is None else 'decoded')
    msg = as_flavour(frame, flavour)
    if expected is None:
        with pytest.raises(FeatureMapError):
            read_features(msg, **expected_shape)
        return
    out = read_features(msg, **expected_shape)
    assert out.dtype == np.float32 and out.dtype.isnative
    np.testing.assert_array_equal(out, expected)
