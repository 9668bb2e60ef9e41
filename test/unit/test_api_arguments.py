"""The Python API's per-frame and calibration arguments: refused by name, never half-applied."""

from dataclasses import replace

from configs import small_config, small_params
from jax_perception_node.core.pipeline import compile_count
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.settings.parameters import ConfigError
import numpy as np
import pytest

POINTS = np.random.default_rng(4).normal(scale=3.0, size=(100, 4)).astype(np.float32)


@pytest.mark.parametrize('arguments,message', [
    ({'cameras': [np.zeros((12, 20, 3), np.float32)]},
     'cameras must be a mapping of camera name to map, got list'),
    ({'num_points': 5000.5}, 'num_points must be an integer >= 0, got 5000.5'),
    ({'num_points': '5000'}, "num_points must be an integer >= 0, got '5000'"),
    ({'stamp_ns': -1}, 'stamp_ns must be an integer >= 0, got -1'),
    ({'motion': np.zeros(6, np.float32)}, r'motion must be float\[12\] of finite numbers'),
    ({'motion': np.full(12, np.nan, np.float32)}, r'motion must be float\[12\] of finite'),
    ({'pose': np.eye(3)}, r'pose must be float\[4, 4\] of finite numbers'),
    ({'pose': [[1.0, 0.0], 'x']}, r'pose must be float\[4, 4\] of finite numbers'),
    ({'times': np.zeros((50, 2), np.float32)},
     r'times must be float32\[100\], one per point, got \(50, 2\)'),
])
def test_a_malformed_frame_argument_is_refused_by_name(pipe, arguments, message):
    compiles = compile_count()
    with pytest.raises(ValueError, match=message):
        pipe.process(POINTS, **arguments)
    assert pipe.process(POINTS).num_points == len(POINTS)
    assert compile_count() == compiles


def test_times_may_be_a_column(pipe):
    # An (N, 1) column, as a structured cloud's field gives it, was taken before the checks.
    column = pipe.process(POINTS, times=np.zeros((len(POINTS), 1), np.float32))
    assert column.num_points == len(POINTS)


def test_numpy_numbers_pass_as_python_ones(pipe):
    out = pipe.process(POINTS, num_points=np.int64(150), stamp_ns=np.uint64(7))
    assert (out.num_points, out.overflow_points) == (150, 50)
    cfg = config_from_parameters(small_params(**{'grid.resolution': np.float32(0.5),
                                                 'fusion.num_heights': np.int64(3)}))
    assert cfg == small_config()
    assert type(cfg.fusion.num_heights) is int


def test_set_calibration_refuses_what_is_not_a_calibration(pipe):
    before = pipe.process(POINTS).features
    with pytest.raises(ValueError, match=r'lidar must be a Pose or one per LiDAR, got array'):
        pipe.set_calibration(np.eye(4))
    bad = tuple(replace(c, fx=float('nan')) if c.name == 'rear' else c
                for c in pipe.cfg.cameras)
    with pytest.raises(ConfigError, match=r'cameras\.rear\.fx: must be finite'):
        pipe.set_calibration(cameras=bad)
    np.testing.assert_array_equal(pipe.process(POINTS).features, before)


def test_a_pose_of_no_unit_quaternion_is_refused_and_a_nearly_unit_one_normalised(pipe):
    """Found by an independent review: q = (0, 0, 1, 1) scaled and sheared every point."""
    from jax_perception_node.geometry.rotations import Pose
    before = pipe.process(POINTS).features
    lidar = pipe.lidar_poses[0]
    with pytest.raises(ValueError, match=r'^lidar pose 0\.rotation_xyzw: not a unit quaternion '
                                         r'\(norm 1\.4142\)$'):
        pipe.set_calibration(Pose(lidar.translation, (0.0, 0.0, 1.0, 1.0)))
    rear = next(c for c in pipe.cfg.cameras if c.name == 'rear')
    skewed = replace(rear, pose=Pose(rear.pose.translation, (0.0, 0.0, 1.0, 1.0)))
    with pytest.raises(ConfigError, match=r'^cameras\.rear\.rotation_xyzw: not a unit '):
        pipe.set_calibration(cameras=tuple(skewed if c.name == 'rear' else c
                                           for c in pipe.cfg.cameras))
    np.testing.assert_array_equal(pipe.process(POINTS).features, before)
    # Rounded to four decimals (norm 0.9999 here): taken as the unit quaternion it stands for.
    q = np.array([0.0, 0.0, 0.6, 0.8])
    try:
        pipe.set_calibration(Pose(lidar.translation, tuple(q)))
        exact = pipe.process(POINTS).features
        pipe.set_calibration(Pose(lidar.translation, tuple(q * 0.9999)))
        np.testing.assert_array_equal(pipe.process(POINTS).features, exact)
        assert not np.array_equal(exact, before)
    finally:
        pipe.set_calibration(lidar)      # the module's pipeline: as the next test expects it
