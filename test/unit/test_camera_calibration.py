"""Calibrations: the kernels' camera arrays and lens limits, CameraInfo read into intrinsics."""

import copy
from dataclasses import replace
import math

import bag_messages
from configs import small_config
from jax_perception_node.core.kernel_inputs import calibration_arrays, monotonic_radius2
from jax_perception_node.core.lift import DISTORTION_MODELS
from jax_perception_node.sensors.camera import (CameraInfoError, Intrinsics, scale_camera_info,
                                                with_intrinsics)
from jax_perception_node.settings.config import CameraConfig, Pose
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest
from reference import fold_radius2_ref


# -- calibration ------------------------------------------------------------------------------

def _camera(name, rotation_xyzw, translation, fx=40.0, fy=41.0, cx=44.0, cy=16.0,
            distortion_model='none', distortion=()):
    return CameraConfig(name=name, height=32, width=88, channels=8, fx=fx, fy=fy, cx=cx, cy=cy,
                        pose=Pose(translation=translation, rotation_xyzw=rotation_xyzw),
                        distortion_model=distortion_model, distortion=distortion)


def test_calibration_arrays_front_camera():
    front = _camera('front', (-0.5, 0.5, -0.5, 0.5), (1.5, 0.0, 1.6))
    rear = _camera('rear', (0.0, 0.0, 0.0, 1.0), (-1.0, 0.25, 2.0), 10.0, 11.0, 12.0, 13.0)
    arrays = calibration_arrays([front, rear])
    intrinsics, rotation, translation = arrays.intrinsics, arrays.rotation, arrays.translation
    assert intrinsics.dtype == rotation.dtype == translation.dtype == np.float32
    np.testing.assert_array_equal(intrinsics, [[40, 41, 44, 16], [10, 11, 12, 13]])
    # Pinholes: model 'none', no coefficients, no radius limit.
    assert [DISTORTION_MODELS[m] for m in arrays.distortion_model] == ['none', 'none']
    assert not arrays.distortion.any() and np.isinf(arrays.max_radius2).all()
    # Columns are the optical axes seen from the grid: z (forward) -> +x, x (right) -> -y,
    # y (down) -> -z.
    front_rotation = np.array([[0, 0, 1],
                               [-1, 0, 0],
                               [0, -1, 0]], np.float32)
    np.testing.assert_allclose(rotation[0], front_rotation, atol=1e-7)
    np.testing.assert_allclose(rotation[0] @ [0, 0, 1], [1, 0, 0], atol=1e-7)
    np.testing.assert_allclose(rotation[0] @ [1, 0, 0], [0, -1, 0], atol=1e-7)
    np.testing.assert_allclose(rotation[0] @ [0, 1, 0], [0, 0, -1], atol=1e-7)
    np.testing.assert_array_equal(rotation[1], np.eye(3))
    np.testing.assert_allclose(translation, [[1.5, 0.0, 1.6], [-1.0, 0.25, 2.0]])
    # A point 10 m ahead of the front camera's lens is 10 m ahead of it in the grid too.
    np.testing.assert_allclose(rotation[0] @ [0, 0, 10] + translation[0], [11.5, 0, 1.6],
                               rtol=1e-6)


def test_calibration_arrays_carry_the_lens_models():
    lenses = {'front': ('plumb_bob', (-0.5, 0.02, 0.001, -0.002, 0.0)),
              'rear': ('equidistant', (-0.2, 0.01, 0.0, 0.0)),
              # Its denominator reaches 0 at r^2 = 0.5, before the numerator's turn (1.63).
              'left': ('rational_polynomial', (-0.1, 0.0, 0.0, 0.001, 0.0, -2.0, 0.0, 0.0)),
              # A barrel lens whose rational factor turns (at r^2 = 0.49) before any pole.
              'right': ('rational_polynomial', (-0.6, 0.05, 0.0, 0.0, 0.0, 0.3, 0.0, 0.0))}
    cameras = [_camera(name, (0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0), distortion_model=model,
                       distortion=d) for name, (model, d) in lenses.items()]
    arrays = calibration_arrays(cameras)
    assert arrays.distortion_model.dtype == np.int32 and arrays.distortion.dtype == np.float32
    assert [DISTORTION_MODELS[m] for m in arrays.distortion_model] == [
        model for model, _ in lenses.values()]
    np.testing.assert_array_equal(arrays.distortion, np.float32(
        [d + (0.0,) * (8 - len(d)) for _, d in lenses.values()]))
    # The fold-back radius against the reference's numerical search.
    np.testing.assert_allclose(arrays.max_radius2, [
        fold_radius2_ref(model, d) for model, d in lenses.values()], rtol=1e-6)
    assert arrays.max_radius2[2] == pytest.approx(0.5) and 0.3 < arrays.max_radius2[3] < 0.6


def test_calibration_arrays_refuse_an_unknown_lens_naming_the_camera():
    for model, coefficients in (('fisheye', (0.1,) * 4), ('plumb_bob', (0.1,) * 4)):
        rear = _camera('rear', (0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0), distortion_model=model,
                       distortion=coefficients)
        with pytest.raises(ConfigError, match=r'cameras\.rear\.distortion: '):
            calibration_arrays([_camera('front', (0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0)), rear])


def test_monotonic_radius_by_hand():
    # r (1 - 0.5 r^2) turns where 1 - 1.5 r^2 = 0.
    assert monotonic_radius2('plumb_bob', (-0.5, 0.0, 0.0, 0.0, 0.0)) == pytest.approx(2 / 3)
    # 1 - 0.9 s + 0.25 s^2 has no real root: a barrel lens that k2 keeps monotonic.
    assert monotonic_radius2('plumb_bob', (-0.3, 0.05, 0.01, 0.01, 0.0)) == math.inf
    # theta (1 - 0.2 theta^2) turns at theta^2 = 1 / 0.6, below 90 degrees.
    assert monotonic_radius2('equidistant', (-0.2, 0.0, 0.0, 0.0)) == pytest.approx(
        math.tan(math.sqrt(1 / 0.6)) ** 2)
    # k1 = -0.1 would turn at theta = 1.83 rad, beyond the 90 degrees any ray in front has.
    assert monotonic_radius2('equidistant', (-0.1, 0.0, 0.0, 0.0)) == math.inf
    for model, zeros in (('none', ()), ('plumb_bob', (0.0,) * 5), ('equidistant', (0.0,) * 4),
                         ('rational_polynomial', (0.0,) * 8)):
        assert monotonic_radius2(model, zeros) == math.inf
    # rational_polynomial: r / (1 + k4 r^2) turns where 1 - k4 r^2 = 0 (k4 = 0.5: r^2 = 2);
    # r / (1 - 0.5 r^2) never turns but its pole is at r^2 = 2; r (1 - 0.5 r^2) / (1 - 0.5 r^2)
    # is r, and its pole is where the mapping ends.
    assert monotonic_radius2('rational_polynomial', (0, 0, 0, 0, 0, 0.5, 0, 0)) == pytest.approx(2)
    assert monotonic_radius2('rational_polynomial', (0, 0, 0, 0, 0, -0.5, 0, 0)) == pytest.approx(
        2)
    assert monotonic_radius2('rational_polynomial', (-0.5, 0, 0, 0, 0, -0.5, 0, 0)) == (
        pytest.approx(2))
    # With k4..k6 zero it is plumb_bob's.
    assert monotonic_radius2('rational_polynomial', (-0.5, 0, 0, 0, 0, 0, 0, 0)) == (
        pytest.approx(2 / 3))
    # A subnormal highest coefficient (as a CameraInfo may carry) once overflowed np.roots'
    # companion matrix and stopped the node. 1 + 7 k3 s^3 turns, if at all, at |s| =
    # (1 / 7|k3|)^(1/3) > 1e99: beyond FAR_RADIUS2, never; the other terms decide.
    for tiny in (1e-310, -1e-310, 5e-324, -5e-324, 1e-300, -1e-300, -1e-40):
        assert monotonic_radius2('plumb_bob', (0.0, 0.0, 0.0, 0.0, tiny)) == math.inf
        assert monotonic_radius2('equidistant', (0.0, 0.0, 0.0, tiny)) == math.inf
        assert monotonic_radius2('plumb_bob', (-0.5, 0.0, 0.0, 0.0, tiny)) == pytest.approx(2 / 3)
        assert monotonic_radius2('equidistant', (-0.2, 0.0, tiny, tiny)) == pytest.approx(
            math.tan(math.sqrt(1 / 0.6)) ** 2)
    # ... while a turn below it is found, far out as it is: 1 - s^3 / 1e18 turns at s = 1e6.
    assert monotonic_radius2('plumb_bob', (0.0, 0.0, 0.0, 0.0, -1 / 7e18)) == pytest.approx(1e6)


def test_calibration_arrays_without_cameras():
    arrays = calibration_arrays(())
    assert arrays.intrinsics.shape == (0, 4) and arrays.rotation.shape == (0, 3, 3)
    assert arrays.translation.shape == (0, 3) and arrays.distortion.shape == (0, 8)
    assert arrays.distortion_model.shape == arrays.max_radius2.shape == (0,)
    assert arrays.intrinsics.dtype == arrays.rotation.dtype == np.float32


# -- CameraInfo -------------------------------------------------------------------------------

# The front camera of small_params() has a 12 x 20 map. A CameraInfo at 4x (80 x 48 image);
# by hand, s = 1/4: fx_f = 24 / 4 = 6, fy_f = 28 / 4 = 7, cx_f = (35.5 + 0.5) / 4 - 0.5 = 8.5,
# cy_f = (19.5 + 0.5) / 4 - 0.5 = 4.5.
MAP_H, MAP_W = 12, 20
SCALED = (6.0, 7.0, 8.5, 4.5)


def camera_info(model='plumb_bob', d=(0.0,) * 5, **fields):
    """Return an 80 x 48 CameraInfo with ``distortion_model``, ``d``, fields (``k0``: k[0])."""
    msg = copy.deepcopy(bag_messages.camera_info(80, 48, 24.0, 28.0, 35.5, 19.5))
    msg.distortion_model = model
    msg.d = np.array(d, np.float64)
    for key, value in fields.items():
        if key[0] in 'kp' and key[1:].isdigit():
            getattr(msg, key[0])[int(key[1:])] = value
        else:
            setattr(msg, key, value)
    return msg


PLUMB = (-0.31, 0.12, 0.0011, -0.0007, -0.02)
FISHEYE = (0.05, -0.01, 0.002, -0.0003)
RATIONAL = (0.42, -0.05, 0.0009, -0.0004, 0.002, 0.75, -0.01, 0.004)   # an OAK-D-like lens


@pytest.mark.parametrize('model,d,expected_model,expected_d', [
    ('plumb_bob', PLUMB, 'plumb_bob', PLUMB),
    ('plumb_bob', PLUMB + (0.0, 0.0, 0.0), 'plumb_bob', PLUMB),
    ('rational_polynomial', PLUMB + (0.0, 0.0, 0.0), 'plumb_bob', PLUMB),
    ('rational_polynomial', RATIONAL, 'rational_polynomial', RATIONAL),
    # depthai's 14: then OpenCV's thin prism and tilt terms, zero.
    ('rational_polynomial', RATIONAL + (0.0,) * 6, 'rational_polynomial', RATIONAL),
    # 8 coefficients are the rational model to OpenCV (and image_geometry), whatever the name.
    ('plumb_bob', RATIONAL, 'rational_polynomial', RATIONAL),
    ('equidistant', FISHEYE, 'equidistant', FISHEYE),
    ('equidistant', (0.0,) * 4, 'equidistant', (0.0,) * 4),    # an ideal f-theta fisheye
    ('plumb_bob', (0.0,) * 5, 'none', ()),
    ('plumb_bob', (), 'none', ()),
    ('', (), 'none', ()),
    ('', (0.0,) * 5, 'none', ()),
], ids=['plumb_bob', 'plumb_bob 8', 'rational zero k4-k6', 'rational', 'rational 14',
        'plumb_bob with k4-k6', 'equidistant', 'f-theta', 'zero plumb_bob', 'empty d',
        'no model', 'no model zero d'])
def test_camera_info_distortion_travels_with_the_intrinsics(model, d, expected_model,
                                                            expected_d):
    intrinsics = scale_camera_info(camera_info(model, d), MAP_H, MAP_W)
    assert isinstance(intrinsics, Intrinsics)
    # Coefficients act on normalized coordinates: not scaled with the image.
    assert (intrinsics.distortion_model, intrinsics.distortion) == (expected_model, expected_d)
    assert intrinsics[:4] == pytest.approx(SCALED, abs=1e-12)
    assert 'fx {:.4g}, fy {:.4g}, cx {:.4g}, cy {:.4g}'.format(*intrinsics[:4]) == (
        'fx 6, fy 7, cx 8.5, cy 4.5')


@pytest.mark.parametrize('msg,named', [
    (camera_info('rational_polynomial', RATIONAL + (0.0, 0.0, 0.0, 0.001, 0.0, 0.0)),
     r'distortion_model rational_polynomial with s1\.\.s4, tau_x, tau_y'),
    (camera_info('rational_polynomial', np.full(14, 0.01)), 'thin prism'),
    (camera_info('rational_polynomial', RATIONAL + (0.0,) * 4), 'd has 12 values'),
    (camera_info('fisheye', FISHEYE), "distortion_model 'fisheye'"),
    (camera_info('kannala_brandt', (0.0,) * 4), "distortion_model 'kannala_brandt'"),
    (camera_info('', PLUMB), "distortion_model ''"),
    (camera_info('equidistant', FISHEYE + (0.0,)), 'd has 5 values'),
    (camera_info('plumb_bob', PLUMB[:4]), 'd has 4 values'),
    (camera_info('plumb_bob', (0.1, float('nan'), 0.0, 0.0, 0.0)), r'd\[1\] = nan'),
    (camera_info('equidistant', (1e5, 0.0, 0.0, 0.0)), r'd\[0\] = 100000'),
], ids=['rational s3', 'depthai 14', 'rational 12', 'fisheye', 'kannala_brandt', 'no model',
        'equidistant 5', 'plumb_bob 4', 'NaN d', 'huge d'])
def test_unsupported_distortion_is_refused_naming_the_field(msg, named):
    with pytest.raises(CameraInfoError, match=named):
        scale_camera_info(msg, MAP_H, MAP_W)


@pytest.mark.parametrize('msg,named', [
    (camera_info(k0=1e-300), r'k\[0\] \(fx\) = 1e-300'),      # float32: 0
    (camera_info(k4=1e300), r'k\[4\] \(fy\) = 1e\+300'),      # float32: inf
    (camera_info(k0=-24.0), r'k\[0\] \(fx\)'),
    # Fine at image resolution, but 4e-4 px on the map: what the parameters would refuse.
    (camera_info(k0=1.6e-3), r'k\[0\] \(fx\): 0.0004 px at feature-map resolution'),
    (camera_info(k2=1e300), r'k\[2\] \(cx\)'),
    (camera_info(k5=float('-inf')), r'k\[5\] \(cy\) = -inf'),
    (camera_info(k1=0.5), r'k\[1\] \(skew\)'),
    (camera_info(k8=0.0), 'not a camera matrix'),
    (camera_info(p3=float('nan')), r'p\[3\] = nan'),
    (camera_info(width=80 * 2048, height=48 * 2048), 'width 163840'),
], ids=['tiny fx', 'huge fy', 'negative fx', 'tiny fx on the map', 'huge cx', 'infinite cy',
        'skew', 'k[8]', 'NaN p', 'huge image'])
def test_out_of_range_camera_info_is_refused_naming_the_field(msg, named):
    with pytest.raises(CameraInfoError, match=named):
        scale_camera_info(msg, MAP_H, MAP_W)


def test_the_field_named_is_the_one_the_value_came_from():
    # A rectified camera's focal length is P's (the line named K's before); a window's size is
    # the ROI's (it named the image's width and height with the window's values).
    tiny_p = camera_info(p0=1.6e-3)
    with pytest.raises(CameraInfoError, match=r'^p\[0\] \(fx\): 0.0004 px at feature-map'):
        scale_camera_info(tiny_p, MAP_H, MAP_W, rectified=True)
    window = camera_info()
    window.roi.x_offset, window.roi.width, window.roi.height = 8, 16, 10
    with pytest.raises(CameraInfoError, match=r'^roi.width 16, roi.height 10: smaller than the '
                                              r'20 x 12 feature map'):
        scale_camera_info(window, MAP_H, MAP_W)
    window.roi.width, window.roi.height = 40, 40
    with pytest.raises(CameraInfoError, match=r'^roi.width 40, roi.height 40: scales to the'):
        scale_camera_info(window, MAP_H, MAP_W)


def test_k_of_zeros_but_its_last_one_is_an_uncalibrated_camera():
    from jax_perception_node.sensors.camera import UncalibratedCameraInfo
    # Some drivers send K = [0, .., 0, 1] without a calibration (image_geometry's rule: fx 0);
    # it was rejected as a bad CameraInfo, a WARN at camera rate.
    homogeneous = camera_info(**{f'k{i}': 0.0 for i in range(8)})
    with pytest.raises(UncalibratedCameraInfo, match='k is all zero'):
        scale_camera_info(homogeneous, MAP_H, MAP_W)
    rectified = camera_info(**{f'p{i}': 0.0 for i in range(12) if i != 10}, p10=1.0)
    with pytest.raises(UncalibratedCameraInfo, match='p is all zero'):
        scale_camera_info(rectified, MAP_H, MAP_W, rectified=True)
    # A zero fx beside a calibration is a bad one, named.
    with pytest.raises(CameraInfoError, match=r'k\[0\] \(fx\)') as bad:
        scale_camera_info(camera_info(k0=0.0), MAP_H, MAP_W)
    assert not isinstance(bad.value, UncalibratedCameraInfo)


def test_block_means_of_white_blocks_round_without_overflow():
    from jax_perception_node.sensors.image_scaling import _block_mean
    # 257 pixels of 255 sum to 65 535: with the half added to round, past uint16 (0 before).
    white = np.full((1, 257, 1), 255, np.uint8)
    assert _block_mean(white, 1, 257).tolist() == [[[255]]]
    assert _block_mean(np.full((16, 16, 3), 255, np.uint8), 16, 16).tolist() == [[[255] * 3]]


def test_with_intrinsics_applies_the_lens_and_ignores_repeats():
    cameras = small_config(2).cameras
    plumb = scale_camera_info(camera_info('plumb_bob', PLUMB), MAP_H, MAP_W)
    updated = with_intrinsics(cameras, 'front', plumb)
    front = updated[0]
    assert (front.fx, front.fy, front.cx, front.cy) == pytest.approx(SCALED)
    assert (front.distortion_model, front.distortion) == ('plumb_bob', PLUMB)
    assert updated[1] == cameras[1]
    # Everything else of the camera stays: pose, frame, shape.
    assert replace(front, fx=cameras[0].fx, fy=cameras[0].fy, cx=cameras[0].cx,
                   cy=cameras[0].cy, distortion_model='none', distortion=()) == cameras[0]
    assert with_intrinsics(updated, 'front', plumb) is None
    # Four values change the intrinsics only; the lens stays.
    assert with_intrinsics(updated, 'front', plumb[:4]) is None
    # A pinhole CameraInfo takes the distortion away again.
    pinhole = scale_camera_info(camera_info('plumb_bob', (0.0,) * 5), MAP_H, MAP_W)
    back = with_intrinsics(updated, 'front', pinhole)
    assert (back[0].distortion_model, back[0].distortion) == ('none', ())
    fisheye = with_intrinsics(back, 'front', pinhole._replace(
        distortion_model='equidistant', distortion=(0.0,) * 4))
    assert fisheye[0].distortion_model == 'equidistant'
