"""Several LiDARs through the node: a topic each, sets by stamp, one BEV per set (real rclpy)."""

import re
import time

import bag_messages
from configs import small_params
from jax_perception_node.core.pipeline import BevPipeline
from jax_perception_node.frames.frame_path import FramePath
from jax_perception_node.frames.lidar_sets import LidarSet
from jax_perception_node.settings.config import config_from_parameters
from lidar_scenes import base_link_points, into_sensor, NAMES, POSES
import numpy as np
import pytest
from ros_harness import (make_cloud, NodeProcess, other_domain, Probe, set_parameters, stamp_of,
                         status_values, wait_answering, write_params)

MAX_DELAY_S = 0.3
PARAMS = small_params(cameras=0, **{
    'lidars.names': list(NAMES), 'lidar.deskew': False,
    'sync.max_lidar_delay_s': MAX_DELAY_S, 'sync.lidar_stamp_tolerance_s': 0.05,
    'diagnostics.period_s': 0.2, 'diagnostics.lidar_timeout_s': 30.0,
    **{f'lidars.{name}.translation': list(t) for name, (t, _) in POSES.items()},
    **{f'lidars.{name}.rotation_xyzw': list(np.asarray(q) / np.linalg.norm(q))
       for name, (_, q) in POSES.items()}})
T0 = 1_700_000_000 * 10**9
NS = '/jax_perception'


@pytest.fixture(scope='module')
def running(tmp_path_factory):
    """Return (node process, probe, LiDAR name -> publisher) once the node serves."""
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import PointCloud2
    folder = tmp_path_factory.mktemp('lidars')
    node = NodeProcess(write_params(PARAMS, folder / 'params.yaml'), folder / 'node.log')
    probe = Probe()
    pubs = {name: probe.node.create_publisher(PointCloud2, f'{NS}/input/{name}/pointcloud',
                                              qos_profile_sensor_data) for name in NAMES}
    try:
        wait_ready(node, probe, pubs)
        yield node, probe, pubs
    finally:
        probe.close()
        node.stop()


@pytest.fixture(scope='module')
def offline(running):
    """Return the configuration and the frame path the node runs, built and warmed here."""
    cfg = config_from_parameters(PARAMS)
    pipe = BevPipeline(cfg)
    pipe.warmup()
    return cfg, FramePath(cfg, pipe)


def wait_ready(node, probe, pubs, timeout: float = 180.0) -> None:
    """Until the node reads every LiDAR topic (only after warm-up) and the probe sees outputs."""
    deadline = time.monotonic() + timeout
    topics = [f'{NS}/debug/latency', f'{NS}/output/bev_features']
    while not (all(pub.get_subscription_count() for pub in pubs.values())
               and all(probe.node.count_publishers(topic) for topic in topics)):
        if not node.alive():
            raise AssertionError(f'node exited:\n{node.log()}')
        if time.monotonic() > deadline:
            raise AssertionError(f'node not ready in {timeout} s:\n{node.log()}')
        time.sleep(0.05)
    time.sleep(0.1)     # both ends of a match learn of it at about the same moment


def occupancy(points: np.ndarray, cfg) -> np.ndarray:
    """Return the occupancy channel of grid-frame points by NumPy (all inside the grid)."""
    g = cfg.grid
    grid = np.zeros((g.height, g.width), np.float32)
    grid[np.floor((points[:, 0] - g.x_min) / g.resolution).astype(int),
         np.floor((points[:, 1] - g.y_min) / g.resolution).astype(int)] = 1.0
    return grid


def image_array(msg) -> np.ndarray:
    channels = int(msg.encoding[4:])
    return np.frombuffer(bytes(msg.data), np.float32).reshape(msg.height, msg.width, channels)


def send(pubs, clouds: dict, stamps: dict, frames: dict | None = None) -> float:
    """Publish sensor-frame clouds (name -> points) at their stamps; return when (monotonic)."""
    # Built first, then published back to back: a set must reach the node within its wait.
    messages = {name: make_cloud(points, stamps[name], (frames or {}).get(name, f'lidar_{name}'))
                for name, points in clouds.items()}
    sent = time.monotonic()
    for name, msg in messages.items():
        pubs[name].publish(msg)
    return sent


def output_at(probe, stamp: int):
    """Wait for the BEV stamped ``stamp``; return it and when it was seen (monotonic)."""
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.features),
                   what=f'the BEV stamped {stamp}')
    seen = time.monotonic()
    with probe.lock:
        return next(m for m in probe.features if stamp_of(m) == stamp), seen


def status_saying(probe, text: str, timeout: float = 10.0) -> dict:
    """Wait for a /diagnostics status whose message holds ``text``; return its values."""
    def found():
        return next((s for m in reversed(probe.diagnostics) for s in m.status
                     if text in s.message), None)
    probe.wait_for(lambda: found() is not None, timeout=timeout, what=f'/diagnostics "{text}"')
    with probe.lock:
        return status_values(found())


def test_a_set_of_three_is_one_bev_equal_to_the_frame_path_offline(running, offline):
    node, probe, pubs = running
    cfg, path = offline
    rng = np.random.default_rng(0)
    world = {name: base_link_points(rng, n, cfg) for name, n in zip(NAMES, (300, 120, 90))}
    clouds = {name: into_sensor(points, name) for name, points in world.items()}
    # Within the 50 ms tolerance, in any order: the set's stamp is its oldest cloud's.
    stamps = {'top': T0 + 20_000_000, 'left': T0, 'right': T0 + 10_000_000}
    send(pubs, clouds, stamps)
    out, _ = output_at(probe, T0)
    assert out.header.frame_id == 'base_link' and len(probe.features) == 1
    expected = path.process(LidarSet(
        {name: bag_messages.cloud(clouds[name], stamps[name], f'lidar_{name}')
         for name in NAMES}, stamps, T0, (), 0.0)).result.features
    bev = image_array(out)
    np.testing.assert_array_equal(bev, expected)
    np.testing.assert_array_equal(bev[..., 0], occupancy(np.concatenate(list(world.values())),
                                                         cfg))
    probe.wait_for(lambda: any(stamp_of(m) == T0 for m in probe.latency), what='latency')
    with probe.lock:
        record = status_values(next(m for m in probe.latency if stamp_of(m) == T0).status[0])
    assert (record['num_points'], record['bucket'], record['compiles_after_warmup']) == (
        '510', '1024', '0')


def test_a_lidar_missing_is_waited_for_then_named(running, offline):
    node, probe, pubs = running
    cfg, _ = offline
    rng = np.random.default_rng(1)
    world = {name: base_link_points(rng, 100, cfg) for name in ('top', 'left')}
    stamp = T0 + 10**9
    clouds = {name: into_sensor(points, name) for name, points in world.items()}
    sent = send(pubs, clouds, dict.fromkeys(world, stamp))
    out, seen = output_at(probe, stamp)
    assert seen - sent >= MAX_DELAY_S      # the set waited for right as long as it may
    np.testing.assert_array_equal(image_array(out)[..., 0],
                                  occupancy(np.concatenate(list(world.values())), cfg))
    values = status_saying(probe, 'LiDAR right missing from 1 of 1 frames since the last report')
    assert (values['lidars.right.missing'], values['lidars.left.missing'],
            values['lidars.top.missing'], values['lidar_sets_incomplete']) == ('1', '0', '0', '1')


def test_a_live_delay_applies_to_the_next_set(running, offline):
    from rcl_interfaces.srv import SetParameters
    node, probe, pubs = running
    setter = probe.node.create_client(SetParameters, f'{NS}/set_parameters')
    wait_answering(probe, setter)
    assert set_parameters(probe, setter, sync__max_lidar_delay_s=0.8)[0].successful
    stamp = T0 + 2 * 10**9
    sent = send(pubs, {'top': np.ones((5, 4), np.float32)}, {'top': stamp})
    _, seen = output_at(probe, stamp)
    assert seen - sent >= 0.8
    assert set_parameters(probe, setter, sync__max_lidar_delay_s=MAX_DELAY_S)[0].successful


def test_a_bad_cloud_is_left_out_a_late_one_dropped_and_nothing_compiles(running, offline):
    node, probe, pubs = running
    cfg, _ = offline
    rng = np.random.default_rng(2)
    world = {name: base_link_points(rng, 50, cfg) for name in NAMES}
    stamp = T0 + 3 * 10**9
    send(pubs, {k: into_sensor(p, k) for k, p in world.items()}, dict.fromkeys(NAMES, stamp),
         {'right': 'somewhere'})
    out, _ = output_at(probe, stamp)     # complete at once: no wait
    np.testing.assert_array_equal(image_array(out)[..., 0],
                                  occupancy(np.concatenate([world['top'], world['left']]), cfg))
    # The previous test's frame may share this report: its frames are not counted here.
    values = status_saying(probe, '1 clouds rejected since the last report (')
    assert values['rejected'] == '1'
    send(pubs, {'left': np.ones((5, 4), np.float32)}, {'left': stamp - 10**8})   # before the set
    values = status_saying(probe, '1 LiDAR clouds too late for their set, dropped')
    assert values['late_lidar_clouds'] == '1' and values['compiles_after_warmup'] == '0'
    log = node.log()
    assert 'point cloud rejected, left out of its set: LiDAR right: header.frame_id ' \
           '"somewhere"' in log and 'lidars.right.frame_id' in log
    assert node.alive()


def test_a_cloud_stamped_an_hour_ahead_is_refused_before_it_joins_a_set(running, offline):
    # Taken into a set, its stamp made every later cloud of top and left late for the hour.
    node, probe, pubs = running
    cfg, _ = offline
    rng = np.random.default_rng(3)
    send(pubs, {'right': np.ones((5, 4), np.float32)}, {'right': time.time_ns() + 3600 * 10**9})
    world = {name: base_link_points(rng, 50, cfg) for name in ('top', 'left')}
    stamp = T0 + 4 * 10**9
    send(pubs, {k: into_sensor(p, k) for k, p in world.items()}, dict.fromkeys(world, stamp))
    out, _ = output_at(probe, stamp)
    np.testing.assert_array_equal(image_array(out)[..., 0],
                                  occupancy(np.concatenate(list(world.values())), cfg))
    values = status_saying(probe, 'LiDAR right missing from 1 of 1 frames since the last report')
    assert values['compiles_after_warmup'] == '0'
    assert re.search(r'LiDAR right: cloud rejected: header.stamp is 3(599|600)\.\d+ s ahead '
                     "of the node's clock", node.log())


def test_under_sim_time_no_lidar_is_judged_ahead_of_a_coarse_clock(tmp_path, offline):
    # /clock at 10 Hz lags the stamps by up to its period: right, stamped 60 ms after each
    # tick, comes before the next one, as if 60 ms ahead of the node's clock. The sim clock
    # is no referee: right is never taken to run ahead.
    from rclpy.qos import qos_profile_sensor_data, QoSProfile
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import PointCloud2
    cfg, _ = offline
    domain = other_domain(5)
    node = NodeProcess(write_params({**PARAMS, 'use_sim_time': True}, tmp_path / 'p.yaml'),
                       tmp_path / 'n.log', domain_id=domain)
    probe = Probe(domain_id=domain)
    try:
        pubs = {name: probe.node.create_publisher(PointCloud2, f'{NS}/input/{name}/pointcloud',
                                                  qos_profile_sensor_data) for name in NAMES}
        clock = probe.node.create_publisher(Clock, '/clock', QoSProfile(depth=10))
        wait_ready(node, probe, pubs)
        rng = np.random.default_rng(4)
        world = {name: base_link_points(rng, 50, cfg) for name in NAMES}
        clouds = {k: into_sensor(p, k) for k, p in world.items()}
        tick = T0 + 10 * 10**9
        for k in range(8):
            tick = T0 + 10 * 10**9 + k * 10**8
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(tick, 10**9)
            clock.publish(msg)
            time.sleep(0.02)
            send(pubs, clouds, {'top': tick, 'left': tick, 'right': tick + 60_000_000})
            time.sleep(0.08)
        output_at(probe, tick + 60_000_000)      # right's set of the last tick: it served
        assert 'its stamps run' not in node.log(), node.log()
    finally:
        probe.close()
        node.stop()
