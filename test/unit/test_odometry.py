"""The odometry buffer: checks and bounds, interpolation (linear, slerp), backwards stamps."""

import math

from bag_messages import odometry, yaw_quaternion
from jax_perception_node.geometry import odometry as odometry_module
from jax_perception_node.geometry.odometry import (MAX_POSITION_M, OdometryBuffer, OdometryError,
                                                   read_odometry)
from jax_perception_node.geometry.rotations import quaternion_matrix, slerp
import numpy as np
import pytest
from reference import quat_matrix

T0 = 1_700_000_000 * 10**9


def yaw_of(pose):
    return math.degrees(math.atan2(pose[1, 0], pose[0, 0]))


def test_interpolation_is_linear_in_position_and_slerps_the_orientation():
    buf = OdometryBuffer(max_gap_s=0.2)
    buf.add(odometry(T0, (10.0, 5.0, 0.0), yaw_quaternion(0.0)))
    buf.add(odometry(T0 + 100_000_000, (12.0, 4.0, 1.0), yaw_quaternion(20.0)))
    # A quarter of the way: position 10 + 0.25 * 2, 5 - 0.25, 0.25; yaw 5 degrees (slerp
    # about one axis is linear in the angle; 20 degrees in 0.1 s: a turn, no jump).
    pose = buf.pose_at(T0 + 25_000_000)
    np.testing.assert_allclose(pose[:3, 3], [10.5, 4.75, 0.25], atol=1e-12)
    assert yaw_of(pose) == pytest.approx(5.0, abs=1e-9)
    np.testing.assert_allclose(pose[:3, :3] @ pose[:3, :3].T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(pose[3], [0, 0, 0, 1])
    # Exactly on a sample: that sample.
    np.testing.assert_allclose(buf.pose_at(T0 + 100_000_000)[:3, 3], [12.0, 4.0, 1.0])
    assert yaw_of(buf.pose_at(T0 + 100_000_000)) == pytest.approx(20.0)
    # Outside the samples: no extrapolation.
    assert buf.pose_at(T0 - 1) is None
    assert buf.pose_at(T0 + 100_000_001) is None


def test_slerp_by_hand_takes_the_shorter_arc():
    # Half-way between identity and 90 degrees about x: 45 degrees about x.
    q = slerp(np.array([0.0, 0.0, 0.0, 1.0]),
              np.array([math.sin(math.pi / 4), 0.0, 0.0, math.cos(math.pi / 4)]), 0.5)
    np.testing.assert_allclose(q, [math.sin(math.pi / 8), 0.0, 0.0, math.cos(math.pi / 8)],
                               atol=1e-12)
    # 170 and -170 degrees of yaw are 20 degrees apart: the middle is 180, not 0.
    a, b = np.array(yaw_quaternion(170.0)), -np.array(yaw_quaternion(-170.0))
    mid = slerp(np.array(yaw_quaternion(170.0)), np.array(yaw_quaternion(-170.0)), 0.5)
    assert abs(abs(mid[2]) - 1.0) < 1e-9, (a, b, mid)     # +-180 degrees about z


def test_a_gap_wider_than_the_limit_gives_no_pose_and_the_limit_is_live():
    buf = OdometryBuffer(max_gap_s=0.2)
    buf.add(odometry(T0, (0.0, 0.0, 0.0)))
    buf.add(odometry(T0 + 300_000_000, (3.0, 0.0, 0.0)))
    assert buf.pose_at(T0 + 100_000_000) is None
    buf.set_max_gap(0.3)
    np.testing.assert_allclose(buf.pose_at(T0 + 100_000_000)[:3, 3], [1.0, 0.0, 0.0])


def test_quaternions_are_normalised():
    sample = read_odometry(odometry(T0, xyzw=(0.0, 0.0, 0.0, 2.0)))
    np.testing.assert_allclose(sample.quaternion, [0.0, 0.0, 0.0, 1.0])


def with_stamp(msg, sec, nanosec):
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
    return msg


@pytest.mark.parametrize('what,msg,named', [
    ('NaN position', odometry(T0, (float('nan'), 0.0, 0.0)), 'pose.position'),
    ('position beyond the bound', odometry(T0, (0.0, -2e8, 0.0)), 'pose.position.*beyond'),
    ('infinite orientation', odometry(T0, xyzw=(0.0, 0.0, float('inf'), 1.0)),
     'pose.orientation'),
    ('zero quaternion', odometry(T0, xyzw=(0.0, 0.0, 0.0, 0.0)), 'norm'),
    ('overflowing quaternion', odometry(T0, xyzw=(1e200, 1e200, 0.0, 1e200)), 'norm inf'),
    ('another child frame', odometry(T0, child='imu_link'), 'child_frame_id'),
    ('nanosec >= 1e9', with_stamp(odometry(T0), 1_700_000_000, 10**9), 'header.stamp'),
    ('negative sec', with_stamp(odometry(T0), -5, 0), 'header.stamp'),
], ids=lambda v: v if isinstance(v, str) else '')
def test_bad_messages_are_refused_naming_the_field(what, msg, named):
    buf = OdometryBuffer(max_gap_s=0.2, child_frame_id='base_link')
    buf.add(odometry(T0 - 10_000_000))
    with pytest.raises(OdometryError, match=named):
        buf.add(msg)
    # Nothing stored: the good sample is still the only one, exactly on its stamp.
    np.testing.assert_array_equal(buf.pose_at(T0 - 10_000_000), np.eye(4))
    assert buf.pose_at(T0) is None


def test_a_child_frame_with_a_leading_slash_is_the_grid_frame_as_in_tf_lookups():
    msg = odometry(T0, (1.0, 2.0, 0.0), child='/base_link')
    np.testing.assert_allclose(read_odometry(msg, 'base_link').position, [1.0, 2.0, 0.0])
    with pytest.raises(OdometryError, match='child_frame_id'):
        read_odometry(odometry(T0, child='/imu_link'), 'base_link')


def test_a_field_that_is_no_number_is_refused_naming_it():
    msg = odometry(T0)
    msg.pose.pose.position.x = None      # a hand-built message; ROS and rosbags give floats
    with pytest.raises(OdometryError, match=r'pose\.position is not numbers: \[None'):
        read_odometry(msg)
    msg = odometry(T0)
    msg.pose.pose.orientation.w = 'one'
    with pytest.raises(OdometryError, match=r'pose\.orientation is not numbers'):
        read_odometry(msg)


def test_large_map_coordinates_are_fine_in_float64():
    # UTM-sized positions: the difference between two poses keeps its millimetres.
    buf = OdometryBuffer(max_gap_s=0.2)
    buf.add(odometry(T0, (4.5e6, 5.5e6, 100.0)))
    buf.add(odometry(T0 + 100_000_000, (4.5e6 + 2.0, 5.5e6 - 1.0, 100.0)))
    pose = buf.pose_at(T0 + 50_000_000)
    np.testing.assert_allclose(pose[:3, 3] - [4.5e6, 5.5e6, 100.0], [1.0, -0.5, 0.0],
                               atol=1e-6)
    read_odometry(odometry(T0, (MAX_POSITION_M, -MAX_POSITION_M, 0.0)))   # the bound itself


def test_quaternion_matrix_is_the_textbook_rotation():
    rng = np.random.default_rng(4)
    for q in rng.normal(size=(20, 4)):
        q /= np.linalg.norm(q)
        np.testing.assert_allclose(quaternion_matrix(q), quat_matrix(q), atol=1e-12)
    # 90 degrees of yaw turns x into y.
    np.testing.assert_allclose(quaternion_matrix(yaw_quaternion(90.0)) @ [1.0, 0.0, 0.0],
                               [0.0, 1.0, 0.0], atol=1e-12)


def test_a_late_sample_goes_in_at_its_place_and_a_jump_back_resets_the_buffer():
    buf = OdometryBuffer(max_gap_s=0.2)
    for k in (0, 2, 3):
        buf.add(odometry(T0 + k * 20_000_000, (k * 0.2, 0.0, 0.0)))
    np.testing.assert_allclose(buf.pose_at(T0 + 10_000_000)[:3, 3], [0.1, 0.0, 0.0])
    # Sample 1 arrives after 3 (two publishers, a relay): stored at its place, not a reset.
    buf.add(odometry(T0 + 20_000_000, (0.2 + 1.0, 0.0, 0.0)))
    np.testing.assert_allclose(buf.pose_at(T0 + 10_000_000)[:3, 3], [0.6, 0.0, 0.0])
    np.testing.assert_allclose(buf.pose_at(T0 + 50_000_000)[:3, 3], [0.5, 0.0, 0.0])
    for repeat in (T0 + 60_000_000, T0 + 20_000_000):
        with pytest.raises(OdometryError, match='repeats'):
            buf.add(odometry(repeat, (9.0, 0.0, 0.0)))
    np.testing.assert_allclose(buf.pose_at(T0 + 60_000_000)[:3, 3], [0.6, 0.0, 0.0])
    # More than a second back: the clock jumped (a bag loop); nothing of the old timeline stays,
    # and the sample starts the new one (as tf2 stores the transform after clearing).
    assert buf.add(odometry(T0 + 60_000_000 - 1_000_000_001, (4.0, 0.0, 0.0))) is True
    for stamp in (T0, T0 + 10_000_000, T0 + 60_000_000):
        assert buf.pose_at(stamp) is None
    buf.add(odometry(T0 + 20_000_000, (5.0, 0.0, 0.0)))
    buf.add(odometry(T0 + 40_000_000, (6.0, 0.0, 0.0)))
    np.testing.assert_allclose(buf.pose_at(T0 + 30_000_000)[:3, 3], [5.5, 0.0, 0.0])
    np.testing.assert_allclose(buf.pose_at(T0 + 60_000_000 - 1_000_000_001)[:3, 3],
                               [4.0, 0.0, 0.0])


def test_a_late_sample_into_a_full_buffer_drops_the_oldest_or_is_refused_if_older():
    buf = OdometryBuffer(max_gap_s=0.2, history=3)
    for k in (0, 2, 3):
        buf.add(odometry(T0 + k * 20_000_000, (k * 0.2, 0.0, 0.0)))
    with pytest.raises(OdometryError, match='older than every sample'):
        buf.add(odometry(T0 - 20_000_000, (0.0, 0.0, 0.0)))
    buf.add(odometry(T0 + 20_000_000, (0.2, 0.0, 0.0)))      # the oldest (0) makes room
    assert buf.pose_at(T0) is None
    np.testing.assert_allclose(buf.pose_at(T0 + 30_000_000)[:3, 3], [0.3, 0.0, 0.0])


def test_history_is_bounded():
    buf = OdometryBuffer(max_gap_s=0.2, history=10)
    for k in range(50):
        buf.add(odometry(T0 + k * 20_000_000, (k * 0.2, 0.0, 0.0)))
    # The ten newest samples: 40..49.
    assert buf.pose_at(T0 + 39 * 20_000_000) is None
    np.testing.assert_allclose(buf.pose_at(T0 + 40 * 20_000_000)[:3, 3], [8.0, 0.0, 0.0])
    np.testing.assert_allclose(buf.pose_at(T0 + 970_000_000)[:3, 3], [9.7, 0.0, 0.0])


def test_a_pose_the_ego_cannot_have_reached_starts_a_new_timeline():
    from jax_perception_node.geometry.odometry import JUMP_SLACK_M, MAX_SPEED_MPS
    buf = OdometryBuffer(max_gap_s=0.2)
    assert buf.add(odometry(T0, (0.0, 0.0, 0.0))) is False
    # 70 m/s for 20 ms (1.4 m), and 0.4 m of jitter 1 us on: a vehicle, not a jump.
    assert buf.add(odometry(T0 + 20_000_000, (1.4, 0.0, 0.0))) is False
    assert buf.add(odometry(T0 + 20_001_000, (1.4, JUMP_SLACK_M * 0.8, 0.0))) is False
    # 29 m in 9 ms (a bag looped with its stamps moved on): the ego teleported.
    step = MAX_SPEED_MPS * 0.009 + JUMP_SLACK_M
    assert step < 29.0
    assert buf.add(odometry(T0 + 29_001_000, (-27.6, 0.4, 0.0))) is True
    assert buf.pose_at(T0 + 20_000_000) is None and buf.pose_at(T0 + 25_000_000) is None
    assert buf.add(odometry(T0 + 49_001_000, (-27.4, 0.4, 0.0))) is False
    np.testing.assert_allclose(buf.pose_at(T0 + 39_001_000)[:3, 3], [-27.5, 0.4, 0.0])


def test_one_sample_stamped_late_by_its_driver_is_no_jump():
    # 50 Hz at 30 m/s, stamped on receipt: one sample 19.5 ms late, the next on time, 0.5 ms
    # and 0.6 m apart. Measured over 0.5 ms that is 1200 m/s; it is no teleport.
    buf = OdometryBuffer(max_gap_s=0.2)
    for k in range(10):
        stamp = T0 + k * 20_000_000 + (19_500_000 if k == 5 else 0)
        assert buf.add(odometry(stamp, (30.0 * k * 0.02, 0.0, 0.0))) is False
    assert buf.pose_at(T0 + 50_000_000) is not None


def test_a_heading_the_ego_cannot_have_turned_to_starts_a_new_timeline():
    # A localization re-initialised facing the other way, in place: 180 degrees in 20 ms.
    buf = OdometryBuffer(max_gap_s=0.2)
    assert buf.add(odometry(T0, (5.0, 1.0, 0.0), yaw_quaternion(10.0))) is False
    # A tight turn, 1 rad/s for 20 ms (1.1 degrees), is driving.
    assert buf.add(odometry(T0 + 20_000_000, (5.2, 1.0, 0.0), yaw_quaternion(11.15))) is False
    assert buf.add(odometry(T0 + 40_000_000, (5.4, 1.0, 0.0), yaw_quaternion(191.15))) is True
    assert buf.pose_at(T0 + 30_000_000) is None
    # 0.5 rad allowed over at least 0.1 s (3 rad/s and 0.2 rad of slack): 25 degrees is no
    # jump, 35 degrees is.
    assert buf.add(odometry(T0 + 60_000_000, (5.6, 1.0, 0.0), yaw_quaternion(216.15))) is False
    assert buf.add(odometry(T0 + 80_000_000, (5.8, 1.0, 0.0), yaw_quaternion(251.15))) is True


def test_earlier_sweeps_and_a_deskew_twist_across_a_pose_jump_are_left_out():
    from jax_perception_node.core.kernel_inputs import SweepHistory
    from jax_perception_node.geometry.ego_motion import twist_at

    def at(x, yaw=0.0):
        pose = np.eye(4)
        pose[:3, :3] = quat_matrix(yaw_quaternion(yaw))
        pose[0, 3] = x
        return pose
    # Whatever the pose source (TF interpolates across a bag loop's seam): a sweep 0.1 s old
    # 2 m back is used, one 30 m back, or facing the other way, is not.
    for far, used in ((at(-2.0), 2), (at(-30.0), 1), (at(0.0, 180.0), 1)):
        history = SweepHistory(2, 13)
        history.record(T0, far, 100, np.eye(4))
        assert history.stage(T0 + 100_000_000, at(0.0), 1.0) == used
        assert history.scalars[1] == (100 if used == 2 else 0)

    class Poses:      # TF's poses about a teleport at T0 + 50 ms (interpolated across it)
        def pose_at(self, stamp):
            return at(1.0 * (stamp - T0) / 1e8 - (40.0 if stamp > T0 + 50_000_000 else 0.0))

        def newest_ns(self):
            return T0 + 10**9
    assert twist_at(Poses(), T0 + 40_000_000) is not None
    assert twist_at(Poses(), T0 + 80_000_000) is None
    assert twist_at(Poses(), T0 + 200_000_000) is not None


def test_the_buffer_judges_a_jump_as_plausible_motion_does_on_4x4_poses():
    """The buffer's check from quaternions agrees with the 4 x 4 one, near both bounds."""
    rng = np.random.default_rng(5)
    disagreements, outcomes = [], set()
    for _ in range(400):
        dt = float(rng.choice([0.001, 0.05, 0.1, 0.3]))
        reach = odometry_module.MAX_SPEED_MPS * max(dt, odometry_module.JUMP_MIN_DT_S)
        turn = odometry_module.MAX_TURN_RATE_RPS * max(dt, odometry_module.JUMP_MIN_DT_S)
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        # Within a few percent of either bound, or clearly inside or out.
        angle = (turn + odometry_module.JUMP_SLACK_RAD) * rng.uniform(0.9, 1.1)
        distance = (reach + odometry_module.JUMP_SLACK_M) * rng.uniform(0.9, 1.1)
        if rng.uniform() < 0.5:
            angle *= rng.uniform(0.0, 0.9)
        else:
            distance *= rng.uniform(0.0, 0.9)
        start_q = rng.normal(size=4)
        start_q /= np.linalg.norm(start_q)
        turn_q = np.append(axis * math.sin(angle / 2), math.cos(angle / 2))
        x, y, z, w = start_q
        a, b, c, d = turn_q      # start_q * turn_q (Hamilton, x y z w)
        end_q = np.array([w * a + x * d + y * c - z * b, w * b - x * c + y * d + z * a,
                          w * c + x * b - y * a + z * d, w * d - x * a - y * b - z * c])
        end_q *= rng.choice([1.0, -1.0])        # q and -q: the same rotation
        start_p = rng.uniform(-1e3, 1e3, 3)
        end_p = start_p + axis[::-1] * distance
        buffer = OdometryBuffer(1.0)
        buffer.add(odometry(T0, start_p, start_q))
        jumped = buffer.add(odometry(T0 + round(dt * 1e9), end_p, end_q))
        before = np.eye(4)
        before[:3, :3], before[:3, 3] = quat_matrix(start_q), start_p
        after = np.eye(4)
        after[:3, :3], after[:3, 3] = quat_matrix(end_q), end_p
        if jumped == odometry_module.plausible_motion(before, after, dt):
            disagreements.append((dt, angle, distance))
        outcomes.add(jumped)
    assert not disagreements and outcomes == {True, False}
