"""The node accumulating sweeps over loopback DDS: odometry in, lag channel out, live limits."""

import math

from configs import small_params
import numpy as np
import pytest
from ros_harness import (make_cloud, serving_node, set_parameters, stamp_of, status_values,
                         wait_answering)
from sweep_scenes import (accumulating_config, check_lidar_block, drive, DT, expected_channels,
                          expected_drive, SWEEPS, T0)


@pytest.fixture(scope='module')
def pipe(warmed):
    """Return the node's pipeline, warmed here: what the node must output, frame by frame."""
    return warmed(accumulating_config())


def send_clouds(probe, clouds, base: int) -> list[np.ndarray]:
    """Send clouds DT apart from ``base``, one at a time; returns the node's BEV outputs."""
    outputs = []
    for k, points in enumerate(clouds):
        stamp = base + k * DT
        probe.cloud_pub.publish(make_cloud(points, stamp))
        probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features),
                       what=f'output of frame {k}')
        msg = next(m for m in probe.features if stamp_of(m) == stamp)
        outputs.append(np.frombuffer(bytes(msg.data), np.float32).reshape(
            msg.height, msg.width, -1))
    return outputs


@pytest.fixture(scope='module')
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('accumulation')
    params = small_params(1, **{'accumulation.num_sweeps': SWEEPS, 'diagnostics.period_s': 0.2,
                                'diagnostics.lidar_timeout_s': 60.0})
    with serving_node(params, tmp, ('front',), odometry=True) as running:
        yield running


def ros_odometry(stamp, pose=None, position=None, xyzw=None):
    from nav_msgs.msg import Odometry
    msg = Odometry()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp), 10**9)
    msg.header.frame_id, msg.child_frame_id = 'map', 'base_link'
    if pose is not None:
        yaw = math.atan2(pose[1, 0], pose[0, 0])
        position = pose[:3, 3]
        xyzw = (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = (float(v) for v in position)
    o.x, o.y, o.z, o.w = (float(v) for v in xyzw)
    return msg


def wait_status(probe, predicate, what):
    start = len(probe.diagnostics)
    probe.wait_for(lambda: len(probe.diagnostics) > start + 1
                   and predicate(status_values(probe.diagnostics[-1].status[0])),
                   timeout=20.0, what=what)
    return probe.diagnostics[-1].status[0]


def test_node_accumulates_on_odometry_and_counts_bad_messages(node, pipe):
    proc, probe = node
    cfg = pipe.cfg
    clouds, poses = drive(cfg, frames=2, seed=3)
    base = T0 + 10**9 * 100
    probe.publish_odometry([ros_odometry(base + k * DT, pose) for k, pose in enumerate(poses)])
    # Bad ones: NaN pose, quaternion of norm 0. Then a stamp going back more than a second (a
    # bag loop): it resets the buffer and starts it anew, taken and said at INFO, not refused
    # (it comes before the good samples are sent again).
    bad = [ros_odometry(base + DT + 1, position=(float('nan'), 0, 0), xyzw=(0, 0, 0, 1)),
           ros_odometry(base + DT + 2, position=(0, 0, 0), xyzw=(0, 0, 0, 0)),
           ros_odometry(base - 2 * 10**9, position=(0, 0, 0), xyzw=(0, 0, 0, 1))]
    probe.publish_odometry(bad)
    values = status_values(wait_status(
        probe, lambda v: v['odometry_received'] == str(len(poses) + 1), 'odometry counted'))
    assert values['rejected_odometry'] == '2'
    probe.wait_for(lambda: 'odometry: stamp went backwards or the pose jumped: buffer reset'
                   in proc.log(),
                   what='the reset said')
    probe.publish_odometry([ros_odometry(base + k * DT, pose) for k, pose in enumerate(poses)])
    outputs = send_clouds(probe, clouds, base)
    pipe.reset_sweeps()
    for k, points in enumerate(clouds):
        expected = pipe.process(points, stamp_ns=base + k * DT, pose=poses[k]).features
        np.testing.assert_array_equal(outputs[k], expected)
    check_lidar_block(outputs[1], expected_drive(cfg, clouds, poses, 1))
    status = wait_status(probe, lambda v: int(v['processed']) >= 2, 'frames counted')
    values = status_values(status)
    assert values['frames_without_odometry'] == '0' and values['rejected'] == '0'
    assert values['compiles_after_warmup'] == '0'

    # A cloud with no odometry near its stamp: served on its own sweep, counted and WARNed.
    lone = base + 50 * DT
    start = len(probe.diagnostics)
    probe.cloud_pub.publish(make_cloud(clouds[0], lone))
    probe.wait_for(lambda: any(stamp_of(m) == lone for m in probe.features), what='lone frame')

    def warned():
        return [m.status[0] for m in probe.diagnostics[start:]
                if 'without odometry' in m.status[0].message]
    # The WARN names what happened since the previous report: it is in one message.
    probe.wait_for(lambda: bool(warned()), timeout=20.0, what='WARN: frame without odometry')
    status = warned()[0]
    assert status.level == status.WARN
    assert status_values(status)['frames_without_odometry'] == '1'
    assert proc.alive() and 'odometry rejected' in proc.log()


def test_node_applies_the_accumulation_limits_live(node, pipe):
    from rcl_interfaces.srv import SetParameters
    proc, probe = node
    setter = probe.node.create_client(SetParameters, '/jax_perception/set_parameters')
    wait_answering(probe, setter)
    results = set_parameters(probe, setter, accumulation__max_sweep_age_s=0.05,
                             accumulation__max_odometry_gap_s=0.15)
    assert all(r.successful for r in results), [r.reason for r in results]
    results = set_parameters(probe, setter, accumulation__num_sweeps=5)
    assert not results[0].successful and 'static' in results[0].reason
    clouds, poses = drive(pipe.cfg, frames=2, seed=4)
    base = T0 + 10**9 * 300
    probe.publish_odometry([ros_odometry(base + k * DT, pose) for k, pose in enumerate(poses)])
    outputs = send_clouds(probe, clouds, base)
    # 0.1 s is older than the live 0.05 s: the second frame is its own sweep only.
    check_lidar_block(outputs[1], expected_channels(pipe.cfg, clouds[1], None, None, None, 0))
    assert outputs[1][..., 6].max() == 0.0
    assert proc.alive()
