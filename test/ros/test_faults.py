"""Hardening with the real node: hostile clouds, dead sensors, restarts, and exact accounting."""

import re
import subprocess
import sys
import time

from configs import REPO, small_params
import numpy as np
import pytest
from ros_harness import (make_cloud, make_features, NodeProcess, other_domain, Probe, serving_node,
                         stamp_of, status_values, write_params)

T0 = 1_700_000_000 * 10**9
# These nodes test timeouts and stale cameras: one slow frame on a busy machine must not
# leave a p99-over-budget WARN where OK is expected.
NO_BUDGET = {'diagnostics.latency_budget_ms': 60_000.0}   # the schema's largest


def status(probe):
    return status_values(probe.last_status())


def settle(probe, predicate, what, timeout=20.0):
    """Wait for two fresh /diagnostics messages, the last satisfying ``predicate``."""
    start = len(probe.diagnostics)
    probe.wait_for(lambda: len(probe.diagnostics) > start + 1
                   and predicate(status_values(probe.diagnostics[-1].status[0]),
                                 probe.diagnostics[-1].status[0]),
                   timeout=timeout, what=what)
    return status(probe)


def balanced(v, _=None) -> bool:
    return int(v['received']) == int(v['processed']) + int(v['dropped']) + int(v['rejected'])


@pytest.fixture(scope='module')
def lidar_node(tmp_path_factory):
    """Start a LiDAR-only node with a 2 s LiDAR timeout and 5 Hz diagnostics."""
    tmp = tmp_path_factory.mktemp('faults')
    params = small_params(cameras=0, **{'diagnostics.period_s': 0.2,
                                        'diagnostics.lidar_timeout_s': 2.0, **NO_BUDGET})
    with serving_node(params, tmp) as running:
        yield running


def test_an_idle_node_waits_for_its_first_cloud_with_a_warn(lidar_node):
    """Before any cloud: WARN, never the LiDAR-timeout ERROR, however long it stays idle."""
    node, probe = lidar_node
    # 15 reports 0.2 s apart span 2.8 s: past the 2 s LiDAR timeout (this runs first).
    probe.wait_for(lambda: len(probe.diagnostics) >= 15, what='15 reports')
    with probe.lock:
        statuses = [m.status[0] for m in probe.diagnostics]
    assert {(s.level, s.message) for s in statuses} == {
        (statuses[0].WARN, 'waiting for the first point cloud')}
    assert status_values(statuses[-1])['seconds_since_cloud'] == 'inf'


def send_and_wait(probe, points, stamp):
    probe.cloud_pub.publish(make_cloud(points, stamp))
    probe.wait_for(lambda: any(stamp_of(m) == stamp for m in probe.latency),
                   what=f'frame {stamp}')
    return status_values(next(m for m in probe.latency if stamp_of(m) == stamp).status[0])


def test_hostile_clouds_are_served(lidar_node):
    node, probe = lidar_node
    rng = np.random.default_rng(4)
    cases = {
        'all NaN': np.full((500, 4), np.nan, np.float32),
        'all Inf': np.full((500, 4), np.inf, np.float32),
        'one cell': np.tile(np.array([[1.1, 1.2, 0.3, 5.0]], np.float32), (900, 1)),
        'outside': rng.uniform(100, 200, size=(700, 4)).astype(np.float32),
        'empty': np.zeros((0, 4), np.float32),
        'two million': rng.normal(scale=6, size=(2_000_000, 4)).astype(np.float32),
    }
    for k, (name, points) in enumerate(cases.items()):
        values = send_and_wait(probe, points, T0 + k * 10**8)
        # A non-dense cloud's points are its returns: NaN-x slots take no bucket row.
        assert int(values['num_points']) == np.isfinite(points[:, 0]).sum(), name
        assert values['compiles_after_warmup'] == '0', name
    big = status_values(probe.latency[-1].status[0])
    assert (big['bucket'], big['overflow_points']) == ('1024', str(2_000_000 - 1024))
    features = {stamp_of(m): np.frombuffer(bytes(m.data), np.float32) for m in probe.features}
    for k in range(4):                     # NaN, Inf and outside-grid clouds leave the grid empty
        if k != 2:
            assert not features[T0 + k * 10**8].any()
    one_cell = features[T0 + 2 * 10**8].reshape(32, 48, 7)
    assert int(one_cell[..., 0].sum()) == 1 and one_cell[..., 1].max() == 1.0
    v = settle(probe, balanced, 'accounting')
    assert int(v['overflowed']) == 1
    assert int(v['empty_clouds']) == 3         # all NaN, all Inf, empty; 'outside' is valid
    with probe.lock:
        messages = [m.status[0].message for m in probe.diagnostics]

    # Each report counts the clouds since the one before: summed, every cloud once, however
    # the 0.2 s reports fell between the clouds.
    def reported(pattern):
        return sum(int(n) for text in messages for n in re.findall(pattern, text))
    assert reported(r'(\d+) clouds above the largest bucket \(1024 points\)') == 1
    assert reported(r'(\d+) clouds without a single valid point') == 3


def test_a_cloud_stamped_ahead_of_the_clock_is_rejected_and_resets_nothing(lidar_node):
    node, probe = lidar_node
    before = settle(probe, balanced, 'accounting')
    ahead = time.time_ns() + 3600 * 10**9       # an hour ahead of the node's (wall) clock
    probe.cloud_pub.publish(make_cloud(np.ones((20, 4), np.float32), ahead))
    probe.wait_for(lambda: "s ahead of the node's clock (more than 1 s)" in node.log(),
                   what='the refusal')
    after = settle(probe, lambda v, s: balanced(v)
                   and int(v['rejected']) == int(before['rejected']) + 1, 'rejected counted')
    assert int(after['processed']) == int(before['processed'])
    # Taken, it would have made the next cloud a jump back in time.
    send_and_wait(probe, np.ones((20, 4), np.float32), T0 + 5 * 10**9 + 10**8)
    assert 'LiDAR stamp went backwards' not in node.log()


def test_duplicate_and_backwards_stamps(lidar_node):
    node, probe = lidar_node
    points = np.ones((30, 4), np.float32)
    stamp = T0 + 5 * 10**9
    before = len(probe.latency)
    # Each cloud after the previous one's output: none may be replaced (latest wins).
    for k, sent in enumerate([stamp, stamp, T0 - 60 * 10**9]):   # a duplicate, then a bag loop
        probe.cloud_pub.publish(make_cloud(points, sent))
        probe.wait_for(lambda: len(probe.latency) >= before + k + 1, what=f'frame {k}')
    assert [stamp_of(m) for m in probe.latency[before:]] == [stamp, stamp, T0 - 60 * 10**9]
    probe.wait_for(lambda: 'LiDAR stamp went backwards' in node.log(), what='the log line')


def test_lidar_timeout_is_an_error_and_recovers(lidar_node):
    node, probe = lidar_node
    send_and_wait(probe, np.ones((20, 4), np.float32), T0 + 6 * 10**9)
    settle(probe, lambda v, s: s.level == s.OK, 'OK while clouds flow')
    # The timeout is 2 s: two OK reports fit before it; the ERROR is waited for.
    settle(probe, lambda v, s: s.level == s.ERROR and 'no valid point cloud for' in s.message,
           'ERROR after the LiDAR timeout')
    for k in range(3):
        send_and_wait(probe, np.ones((20, 4), np.float32), T0 + 7 * 10**9 + k * 10**8)
    settle(probe, lambda v, s: s.level == s.OK, 'OK again when clouds resume')


def test_clouds_in_another_frame_are_rejected_and_do_not_reset_the_timeout(lidar_node):
    node, probe = lidar_node
    send_and_wait(probe, np.ones((20, 4), np.float32), T0 + 8 * 10**9)
    before = settle(probe, lambda v, s: s.level == s.OK, 'OK while valid clouds flow')
    sent = 0

    def rejected_only(values, status):
        return (status.level == status.ERROR and 'no valid point cloud for' in status.message
                and 'clouds arrive but none is served' in status.message)
    # One cloud in the wrong frame per report, until the timeout (2 s) counts them out.
    while not rejected_only(status(probe), probe.last_status()):
        assert sent < 100, f'no timeout ERROR after {sent} rejected clouds'
        seen = len(probe.diagnostics)
        probe.cloud_pub.publish(make_cloud(np.ones((20, 4), np.float32),
                                           T0 + 9 * 10**9 + sent * 10**8, frame_id='base_link'))
        sent += 1
        probe.wait_for(lambda: len(probe.diagnostics) > seen, what='the next report')
    with probe.lock:
        messages = [m.status[0].message for m in probe.diagnostics]
    assert any('clouds since the last report rejected' in m for m in messages)
    after = settle(probe, balanced, 'accounting')
    assert int(after['processed']) == int(before['processed'])
    assert int(after['rejected']) > int(before['rejected'])
    assert 'header.frame_id "base_link" is not the LiDAR frame "lidar"' in node.log()
    assert 'lidar.frame_id' in node.log()
    send_and_wait(probe, np.ones((20, 4), np.float32), T0 + 30 * 10**9)   # still serving
    settle(probe, lambda v, s: s.level == s.OK, 'OK again with a valid cloud')


PUBLISHER = """
import sys, time
import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import PointCloud2
sys.path.insert(0, {test_dir!r})
from ros_harness import make_cloud, stamp_of
rclpy.init()
node = rclpy.create_node('external_publisher')
pub = node.create_publisher(PointCloud2, '/jax_perception/input/pointcloud',
                            qos_profile_sensor_data)
served = set()
node.create_subscription(DiagnosticArray, '/jax_perception/debug/latency',
                         lambda m: served.add(stamp_of(m)), qos_profile_sensor_data)
# The node's best-effort reader must match this new writer, which its own subscription count
# cannot tell: ping until the node serves the newest ping (the earlier ones are then served
# or lost for good: one writer's samples arrive in order), then say so and wait for the go.
deadline, pings = time.monotonic() + 60, []
while not pings or pings[-1] not in served:
    if time.monotonic() > deadline:
        sys.exit('the node served no ping within 60 s')
    pings.append({t0} - 10**9 + len(pings) * 10**6)
    pub.publish(make_cloud(np.ones((40, 4), np.float32), pings[-1]))
    wait = time.monotonic() + 0.2
    while pings[-1] not in served and time.monotonic() < wait:
        rclpy.spin_once(node, timeout_sec=0.02)
print('ready', flush=True)
sys.stdin.readline()
for k in range({count}):
    pub.publish(make_cloud(np.ones((40, 4), np.float32), {t0} + k * 10**8))
    time.sleep(0.1)
# The writer goes only once the newest cloud is served (latest wins keeps it, whatever was
# dropped before it): a writer destroyed with a sample still in flight would lose it.
deadline = time.monotonic() + 60
while {t0} + ({count} - 1) * 10**8 not in served and time.monotonic() < deadline:
    rclpy.spin_once(node, timeout_sec=0.02)
node.destroy_node()
rclpy.shutdown()
"""


def test_publisher_process_restart_and_exact_accounting(lidar_node):
    node, probe = lidar_node
    for run in range(2):
        script = PUBLISHER.format(test_dir=str(REPO / 'test'), count=8,
                                  t0=T0 + (20 + 2 * run) * 10**9)
        publisher = subprocess.Popen([sys.executable, '-c', script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        try:
            assert publisher.stdout.readline().strip() == 'ready'
            # Matched both ways; the pings' frames are done and counted before this count.
            before = settle(probe, balanced, 'a settled count')
            publisher.stdin.write('go\n')
            publisher.stdin.flush()
            assert publisher.wait(timeout=120) == 0
        finally:
            publisher.kill()
        after = settle(probe, lambda v, s: balanced(v) and int(v['received'])
                       >= int(before['received']) + 8, f'publisher run {run} counted')
        assert int(after['received']) - int(before['received']) == 8
        assert int(after['processed']) + int(after['dropped']) - int(before['processed']) - int(
            before['dropped']) == 8
    assert node.alive()


@pytest.fixture(scope='module')
def camera_node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('camfaults')
    params = small_params(**{'diagnostics.period_s': 0.2, 'diagnostics.lidar_timeout_s': 30.0,
                             **NO_BUDGET})
    with serving_node(params, tmp, ('front', 'rear'), other_domain(1)) as running:
        yield running


def frame(probe, stamp, cameras):
    probe.publish_maps({name: make_features(fmap, stamp, name) for name, fmap in cameras.items()})
    return send_and_wait(probe, np.ones((10, 4), np.float32), stamp)


def test_camera_stops_and_resumes(camera_node):
    node, probe = camera_node
    fmap = np.ones((12, 20, 3), np.float32)
    both = {'front': fmap, 'rear': fmap}
    assert frame(probe, T0, both)['cameras_used'] == '2'
    settle(probe, lambda v, s: s.level == s.OK, 'OK with both cameras')
    for k in range(1, 4):
        assert frame(probe, T0 + k * 10**9, {'rear': fmap})['cameras_used'] == '1'
    settle(probe, lambda v, s: s.level == s.WARN and 'camera front stale' in s.message,
           'WARN while front is silent')
    assert frame(probe, T0 + 5 * 10**9, both)['cameras_used'] == '2'
    settle(probe, lambda v, s: s.level == s.OK, 'OK when front resumes')


def test_nan_feature_maps_are_zeroed_counted_and_malformed_maps_rejected(camera_node):
    node, probe = camera_node
    before = settle(probe, lambda v, s: True, 'counts')
    fmap = np.ones((12, 20, 3), np.float32)
    fmap[0, :5, 0] = np.nan
    fmap[3, 3, :] = np.inf
    frame(probe, T0 + 10 * 10**9, {'front': fmap, 'rear': np.ones((12, 20, 3), np.float32)})
    out = next(m for m in probe.features if stamp_of(m) == T0 + 10 * 10**9)
    assert np.isfinite(np.frombuffer(bytes(out.data), np.float32)).all()
    bad = make_features(np.ones((12, 20, 3), np.float32), T0 + 11 * 10**9, 'front')
    bad.encoding = 'rgb8'
    short = make_features(np.ones((12, 20, 3), np.float32), T0 + 11 * 10**9, 'rear')
    short.height = 10
    probe.publish_maps({'front': bad, 'rear': short})
    after = settle(probe, lambda v, s: int(v['rejected_feature_maps'])
                   >= int(before['rejected_feature_maps']) + 2, 'rejected feature maps')
    assert int(after['nonfinite_features']) - int(before['nonfinite_features']) == 8
    assert int(after['rejected_feature_maps']) - int(before['rejected_feature_maps']) == 2
    # Counted per camera too: which camera sends what the node refuses.
    for camera in ('front', 'rear'):
        key = f'cameras.{camera}.rejected'
        assert int(after[key]) - int(before[key]) == 1, key
    assert int(after['feature_maps_received']) - int(before['feature_maps_received']) == 2
    assert 'feature map rejected' in node.log() and 'encoding' in node.log()


def test_a_feature_map_in_another_frame_is_rejected_and_the_camera_masked(camera_node):
    node, probe = camera_node
    fmap = np.ones((12, 20, 3), np.float32)
    before = settle(probe, lambda v, s: True, 'counts')
    line = ('header.frame_id "rear_optical" is not camera front\'s frame "front_optical" '
            '(parameter cameras.front.frame_id)')
    sent = 0
    # Rejections are logged at most every 2 s: send until one shows (each one is counted).
    while line not in node.log():
        assert sent < 100, 'the rejection was never logged'
        probe.publish_maps({'front': make_features(fmap, T0 + 12 * 10**9, 'front',
                                                   'rear_optical')})
        sent += 1
    probe.publish_maps({'rear': make_features(fmap, T0 + 12 * 10**9, 'rear')})
    values = send_and_wait(probe, np.ones((10, 4), np.float32), T0 + 12 * 10**9)
    assert values['cameras_used'] == '1'        # front's map never reached the buffer
    after = settle(probe, lambda v, s: 'camera front stale' in s.message, 'front masked')
    assert int(after['rejected_feature_maps']) - int(before['rejected_feature_maps']) == sent
    assert int(after['cameras.front.rejected']) - int(before['cameras.front.rejected']) == sent
    assert int(after['cameras.rear.rejected']) == int(before['cameras.rear.rejected'])
    assert int(after['feature_maps_received']) - int(before['feature_maps_received']) == 1
    assert node.alive()


def test_camera_clock_going_back_resets_its_buffer(camera_node):
    node, probe = camera_node
    fmap = np.ones((12, 20, 3), np.float32)
    frame(probe, T0 + 30 * 10**9, {'front': fmap, 'rear': fmap})
    values = frame(probe, T0 + 1 * 10**9 + 1, {'front': fmap, 'rear': fmap})
    assert values['cameras_used'] == '2'    # the maps of the new timeline pair at once
    probe.wait_for(lambda: 'stamp went backwards' in node.log(), what='reset log line')


def start_until_ready(params_file, log):
    """Start a node, wait until it serves (warm-up done), stop it; return its log."""
    domain = other_domain(2)
    node = NodeProcess(params_file, log, domain_id=domain)
    probe = Probe(domain_id=domain)
    try:
        probe.wait_ready(node)
        return node.log()
    finally:
        probe.close()
        node.stop()


def store_entries(cache):
    """Entries of the executable store: name -> (inode, mtime_ns, size)."""
    return {e.name: (e.stat().st_ino, e.stat().st_mtime_ns, e.stat().st_size)
            for e in (cache / 'aot').iterdir()}


def test_restart_with_a_warm_cache_loads_every_executable(tmp_path):
    cache = tmp_path / 'xla'
    params = write_params(small_params(**{'compilation_cache_dir': str(cache)}),
                          tmp_path / 'params.yaml')
    start_until_ready(params, tmp_path / 'cold.log')
    assert (cache.stat().st_mode & 0o777) == 0o700
    cold = store_entries(cache)
    # Cold: every executable compiled and stored (the calibration function and one per
    # bucket at least), nothing half-written left behind.
    assert len(cold) >= 1 + len([64, 256, 1024])
    assert not [name for name in cold if name.endswith('.tmp')]
    start_until_ready(params, tmp_path / 'warm.log')
    # Warm: a miss would compile and write its entry anew (a new file renamed into place, so a
    # new inode); every entry untouched means every executable was loaded, none compiled.
    assert store_entries(cache) == cold
