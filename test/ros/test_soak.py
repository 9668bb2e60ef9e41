"""
Soaks: the node at its closed-loop peak rate, and under an open-loop 100 Hz load.

``make soak`` sets JAX_PERCEPTION_SOAK_S=600 and runs each for that long; ``make test`` runs the
closed-loop soak SOAK_TEST_S seconds and the load soak LOAD_TEST_S seconds. With
JAX_PERCEPTION_SOAK_JSON set, both write their results into that file (``soak`` and
``load_soak``; docs/soak.json is the committed run behind docs/reliability.md's soak section).

- Closed loop: frames of varying size, 5 % malformed, the next one sent as soon as the previous
  one's output is back: the node's peak rate without drops.
- Load: a 131072-point cloud and 4 camera maps every 10 ms whatever the node does; the node
  keeps up by dropping (latest wins). Its RSS over time gives the slope a leak would raise.
"""

import json
import os
from pathlib import Path
import time

from configs import PARAMS_FILE
from jax_perception_node.frames.latency import percentiles
from jax_perception_node.settings.config import load_config
from jax_perception_node.tools.synthetic_drive import SyntheticDrive
import numpy as np
import psutil
import pytest
from ros_harness import (make_cloud, make_features, NodeProcess, other_domain, Probe, stamp_of,
                         status_values)
import yaml

# The soaks in make test: their share of the suite stays small (make soak runs the long ones).
SOAK_TEST_S = 30.0
LOAD_TEST_S = 20.0
SOAK_S = float(os.environ.get('JAX_PERCEPTION_SOAK_S', SOAK_TEST_S))
LOAD_S = SOAK_S if 'JAX_PERCEPTION_SOAK_S' in os.environ else LOAD_TEST_S
LOAD_HZ = 100.0
LOAD_POINTS = 131072    # the largest shipped bucket: every frame the heaviest without overflow
# A leak of even one small object per frame (~1 KiB at the node's ~40 Hz) grows RSS by
# ~2.3 MiB/min; an allocator settling does not keep growing for ten minutes.
LONG_RUN_S = 300.0
# A leak grows private memory with every frame: 1 KiB a frame is ~9.8 MiB per 10k frames.
MAX_PRIVATE_MIB_PER_10K_FRAMES = 3.0
# A short run only guards against a gross leak: each frame's BEV or cloud kept is MiBs a frame,
# hundreds of MiB within seconds. The allocator alone moved RSS by -2.9 % to +6.2 % in 30 s
# here (three runs, one beside the rest of the suite), so 5 % failed for nothing.
MAX_SHORT_RUN_GROWTH = 0.10
T0 = 1_700_000_000 * 10**9


def set_stamp(msg, stamp):
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
    return msg


def idle(probe, since: int) -> bool:
    """
    Whether the node has nothing in flight, judged three roll-ups after ``since``.

    Nothing in flight: it has accounted for every cloud it received, and every frame it
    processed has reached the probe.
    """
    if len(probe.diagnostics) < since + 3:
        return False
    v = status_values(probe.diagnostics[-1].status[0])
    return (int(v['received']) == int(v['processed']) + int(v['dropped']) + int(v['rejected'])
            and int(v['processed']) == len(probe.latency))


def final_status(probe) -> dict:
    """Return the node's counts once all it received is accounted for (120 s: a hang)."""
    with probe.lock:
        seen = len(probe.diagnostics)
    probe.wait_for(lambda: idle(probe, seen), timeout=120.0, what='the final accounting')
    return status_values(probe.last_status())


def wait_output_or_loss(probe, stamp) -> bool:
    """
    Wait until the frame's output arrives (True) or the node is idle without it (lost).

    No fixed deadline decides it, so a busy machine cannot turn a slow frame into a lost one;
    120 s without either answer is a hang and fails.
    """
    with probe.lock:
        seen = len(probe.diagnostics)

    def answered():
        mine = bool(probe.latency) and stamp_of(probe.latency[-1]) == stamp
        return mine or idle(probe, seen)

    probe.wait_for(answered, timeout=120.0, what=f'the soak frame {stamp} or its loss')
    with probe.lock:
        return bool(probe.latency) and stamp_of(probe.latency[-1]) == stamp


def soak_config(tmp_path):
    """Write the shipped config (4 cameras) with a private executable store, 0.5 s roll-ups."""
    params = yaml.safe_load(PARAMS_FILE.read_text())
    ros = params['/**']['ros__parameters']
    ros['compilation_cache_dir'] = str(tmp_path / 'xla')
    ros['diagnostics']['period_s'] = 0.5
    params_file = tmp_path / 'params.yaml'
    params_file.write_text(yaml.safe_dump(params))
    return params_file, load_config(params_file)


def camera_maps(drive: SyntheticDrive, cfg) -> dict:
    """Build one feature map per camera, each in its optical frame, as the node expects."""
    return {c.name: make_features(drive.camera_features(c.name, 1.0), 0, c.name)
            for c in cfg.cameras}


def xyzi(frame) -> np.ndarray:
    return np.stack([frame[k] for k in ('x', 'y', 'z', 'intensity')], axis=1).astype(np.float32)


def rss_slope_mib_per_min(samples, after_s: float) -> float:
    """Return the least-squares slope (MiB/min) of (s, RSS bytes) samples after ``after_s``."""
    t, rss = np.array([(t, r) for t, r in samples if t >= after_s], float).T
    return float(np.polyfit(t / 60.0, rss / 2**20, 1)[0])


def private_mib_per_10k_frames(samples, after_s: float) -> float:
    """
    Return the least-squares slope (MiB per 10k frames) of (s, frames, private bytes) samples.

    A leak grows private (anonymous) memory with every frame, for good; the heap's high-water
    mark (glibc keeps freed multi-MB cloud buffers) grows in a few steps that stop. So the
    check is per frame, after ``after_s`` (the second half of a run), where the steps are over.
    """
    frames, private = np.array([(n, b) for t, n, b in samples if t >= after_s], float).T
    return float(np.polyfit(frames / 1e4, private / 2**20, 1)[0])


def per_window(samples, width: float, value) -> list:
    """``value(a, b)`` for consecutive samples ``width`` seconds apart (samples every ~1 s)."""
    step = int(width)
    return [value(a, b) for a, b in zip(samples[::step], samples[step::step])]


@pytest.mark.soak
@pytest.mark.timeout(int(SOAK_S) + 900)
def test_soak(tmp_path):
    params_file, cfg = soak_config(tmp_path)
    # A pool of realistic clouds of varying size (up to twice the largest bucket).
    drive = SyntheticDrive(cfg, seed=2)
    rng = np.random.default_rng(2)
    clouds = [xyzi(drive.lidar_frame(float(t))) for t in np.linspace(0.0, 7.5, 6)]
    clouds.append(np.tile(clouds[-1], (3, 1)))                        # above 131072
    clouds.append(np.zeros((0, 4), np.float32))
    pool = [make_cloud(c, 0, frame_id='lidar') for c in clouds]
    broken = make_cloud(clouds[0], 0, frame_id='lidar')
    broken.data = broken.data[: len(broken.data) // 2]
    maps = camera_maps(drive, cfg)

    domain = other_domain(3)
    node = NodeProcess(params_file, tmp_path / 'node.log', domain_id=domain)
    probe = Probe(cameras=[c.name for c in cfg.cameras], domain_id=domain, features=False)
    sent = bad = lost = 0
    rss, progress, private = [], [], []
    try:
        probe.wait_ready(node)
        proc = psutil.Process(node.proc.pid)
        start = time.monotonic()
        next_sample = start
        while (now := time.monotonic()) - start < SOAK_S:
            stamp = T0 + sent * 50_000_000
            if rng.uniform() < 0.05:
                probe.cloud_pub.publish(set_stamp(broken, stamp))
                bad += 1
                sent += 1
                time.sleep(0.01)
                continue
            for name, msg in maps.items():
                probe.camera_pubs[name].publish(set_stamp(msg, stamp))
            probe.cloud_pub.publish(set_stamp(pool[rng.integers(len(pool))], stamp))
            sent += 1
            if not wait_output_or_loss(probe, stamp):
                # Sensor-data QoS is best effort: over thousands of multi-MB clouds one may
                # not arrive. Counted, bounded below, and checked against the node's count.
                lost += 1
            if now >= next_sample:
                cpu, mem = proc.cpu_times(), proc.memory_info()
                rss.append((now - start, mem.rss))
                # Private memory is where a leak grows; shared pages (DDS segments, library and
                # XLA code) count in RSS as they are first touched, up to their size.
                private.append((now - start, sent, mem.rss - mem.shared))
                progress.append((now - start, sent, cpu.user, cpu.system))
                next_sample += 1.0
        final = final_status(probe)
    finally:
        probe.close()
        node.stop()

    for a, b in zip(progress[::20], progress[20::20]):
        print(f'  t={a[0]:5.0f} s: {(b[1] - a[1]) / (b[0] - a[0]):5.1f} frames/s, node cpu user '
              f'{(b[2] - a[2]) / (b[0] - a[0]):.2f} sys {(b[3] - a[3]) / (b[0] - a[0]):.2f}')
    # Transport losses, counted by the node itself: the good frames whose output never came
    # and any malformed cloud that never arrived either.
    lost_total = sent - int(final['received'])
    assert lost <= lost_total <= max(1, sent // 1000)
    # A bad cloud still waiting when the next good one arrives is replaced (dropped), not
    # rejected; good clouds are never dropped, as each waits for the previous output.
    assert bad - (lost_total - lost) <= int(final['rejected']) + int(final['dropped']) <= bad
    assert int(final['received']) == (int(final['processed']) + int(final['dropped'])
                                      + int(final['rejected']))
    assert final['compiles_after_warmup'] == '0'
    records = [(stamp_of(m), status_values(m.status[0])) for m in probe.latency]
    assert int(final['processed']) == len(records)
    assert all(v['compiles_after_warmup'] == '0' for _, v in records)
    assert int(final['overflowed']) > 0

    # Windows: the first and the last minute of a long soak; thirds of a short one.
    window = min(60.0, SOAK_S / 3)
    baseline = next(r for t, r in rss if t >= window)
    growth = (rss[-1][1] - baseline) / baseline
    slope = rss_slope_mib_per_min(rss, window)
    per_10k = private_mib_per_10k_frames(private, SOAK_S / 2)
    totals = [float(v['total_ms']) for _, v in records]
    n = max(1, int(len(totals) * window / SOAK_S))
    first, last = percentiles(totals[:n])['p99'], percentiles(totals[-n:])['p99']
    print(f'soak {SOAK_S:.0f} s: {len(totals)} frames ({len(totals) / SOAK_S:.1f} Hz), '
          f'{bad} malformed, {lost_total} lost in transport, RSS {baseline / 2**20:.0f} -> '
          f'{rss[-1][1] / 2**20:.0f} MiB ({growth:+.1%}, {slope:+.2f} MiB/min; private '
          f'{per_10k:+.2f} MiB per 10k frames over the second half), total_ms p99 '
          f'first {first:.1f} / last {last:.1f}')
    if os.environ.get('JAX_PERCEPTION_SOAK_JSON'):
        # The run behind docs/reliability.md's soak table (make soak writes soak_out/soak.json).
        rates = per_window(progress, 20, lambda a, b: (b[1] - a[1]) / (b[0] - a[0]))
        write_soak_json(os.environ['JAX_PERCEPTION_SOAK_JSON'], 'soak', {
            'seconds': SOAK_S, 'frames': len(totals), 'rate_hz': round(len(totals) / SOAK_S, 1),
            'malformed': bad, 'lost_in_transport': lost_total,
            'received': int(final['received']), 'processed': int(final['processed']),
            'dropped': int(final['dropped']), 'rejected': int(final['rejected']),
            'compiles_after_warmup': int(final['compiles_after_warmup']),
            'rss_mib': [round(baseline / 2**20, 1), round(rss[-1][1] / 2**20, 1)],
            'rss_growth_pct': round(growth * 100, 2), 'rss_slope_mib_per_min': round(slope, 2),
            'private_mib_per_10k_frames': round(per_10k, 2), 'window_s': window,
            'total_ms_p99': [round(first, 2), round(last, 2)],
            'rate_hz_windows': [round(r, 1) for r in rates]})
    # The latency trend is reported above, not asserted: on a shared machine it measures the
    # neighbours as much as the node. Memory is the node's own: per frame on a long run, a
    # coarse guard on a short one (where the heap's steps are not over).
    if SOAK_S >= LONG_RUN_S:
        assert per_10k < MAX_PRIVATE_MIB_PER_10K_FRAMES
    else:
        assert growth < MAX_SHORT_RUN_GROWTH


def load_inputs(cfg):
    """Build the load: a LOAD_POINTS-point cloud in the LiDAR frame and one map per camera."""
    drive = SyntheticDrive(cfg, seed=3)
    points = np.concatenate([xyzi(drive.lidar_frame(t)) for t in (6.0, 6.5)])[:LOAD_POINTS]
    assert len(points) == LOAD_POINTS
    return make_cloud(points, 0, frame_id='lidar'), camera_maps(drive, cfg)


def publish_load(probe, cloud, maps, proc, seconds: float):
    """
    Publish a frame (maps, then the cloud, one wall-clock stamp) every 1 / LOAD_HZ s.

    Open loop: the schedule does not wait for the node. A publisher more than a period behind
    skips the missed slots instead of bursting. Returns frames sent, and (s, RSS bytes, sent,
    private bytes) sampled about every second.
    """
    period = 1.0 / LOAD_HZ
    sent, tick, samples = 0, 0, []
    start = time.monotonic()
    next_sample = start
    while (now := time.monotonic()) - start < seconds:
        due = start + tick * period
        if now < due:
            time.sleep(due - now)
            continue
        tick = max(tick, int((now - start) / period)) + 1
        stamp = time.time_ns()      # real stamps: the node's age_ms is real latency
        for name, msg in maps.items():
            probe.camera_pubs[name].publish(set_stamp(msg, stamp))
        probe.cloud_pub.publish(set_stamp(cloud, stamp))
        sent += 1
        if now >= next_sample:
            mem = proc.memory_info()
            samples.append((now - start, mem.rss, sent, mem.rss - mem.shared))
            next_sample += 1.0
    return sent, samples


@pytest.mark.soak
@pytest.mark.timeout(int(LOAD_S) + 900)
def test_load_soak(tmp_path):
    params_file, cfg = soak_config(tmp_path)
    cloud, maps = load_inputs(cfg)
    domain = other_domain(4)
    node = NodeProcess(params_file, tmp_path / 'node.log', domain_id=domain)
    probe = Probe(cameras=list(maps), domain_id=domain, features=False)
    try:
        probe.wait_ready(node)
        sent, rss = publish_load(probe, cloud, maps, psutil.Process(node.proc.pid), LOAD_S)
        final = final_status(probe)
    finally:
        probe.close()
        node.stop()

    counts = {k: int(final[k]) for k in ('received', 'processed', 'dropped', 'rejected',
                                         'feature_maps_received', 'rejected_feature_maps')}
    records = [status_values(m.status[0]) for m in probe.latency]
    # Latest wins: whatever the node could not keep up with is dropped, never queued or lost
    # from the accounting; nothing here is malformed, and nothing compiles.
    assert counts['received'] == counts['processed'] + counts['dropped']
    assert counts['rejected'] == counts['rejected_feature_maps'] == 0
    assert 0 < counts['received'] <= sent and counts['feature_maps_received'] > 0
    assert counts['processed'] == len(records) > 0
    assert final['compiles_after_warmup'] == '0'
    assert all(r['compiles_after_warmup'] == '0' for r in records)
    assert all(int(r['num_points']) == LOAD_POINTS for r in records)
    cameras_used = [int(r['cameras_used']) for r in records]
    assert np.median(cameras_used) == len(maps)

    # The first seconds touch the buffers and DDS segments for good (~10-20 MiB): a short
    # run leaves half its time to that, a long one its first minute.
    warmup = min(60.0, LOAD_S / 2)
    baseline = next(r for t, r, _, _ in rss if t >= warmup)
    growth = (rss[-1][1] - baseline) / baseline
    slope = rss_slope_mib_per_min([(t, r) for t, r, _, _ in rss], warmup)
    per_10k = private_mib_per_10k_frames([(t, n, b) for t, _, n, b in rss], LOAD_S / 2)
    results = {
        'seconds': LOAD_S, 'rate_hz': LOAD_HZ, 'points': LOAD_POINTS, 'cameras': len(maps),
        'published': sent, 'published_hz': round(sent / LOAD_S, 1),
        **{k: counts[k] for k in ('received', 'processed', 'dropped')},
        'not_taken': sent - counts['received'],
        'processed_hz': round(counts['processed'] / LOAD_S, 1),
        'frames_all_cameras': sum(c == len(maps) for c in cameras_used),
        'compiles_after_warmup': int(final['compiles_after_warmup']),
        'warmup_s': warmup,
        'rss_mib': [round(baseline / 2**20, 1), round(rss[-1][1] / 2**20, 1)],
        'rss_growth_pct': round(growth * 100, 2), 'rss_slope_mib_per_min': round(slope, 2),
        'private_mib_per_10k_frames': round(per_10k, 2),
        'rss_mib_windows': per_window(rss, 60, lambda a, b: round(b[1] / 2**20, 1)),
        'total_ms': {k: round(v, 2) for k, v in percentiles(
            float(r['total_ms']) for r in records).items()},
        'age_ms': {k: round(v, 2) for k, v in percentiles(
            float(r['age_ms']) for r in records).items()},
    }
    print(f'load soak: {json.dumps(results)}')
    if os.environ.get('JAX_PERCEPTION_SOAK_JSON'):
        write_soak_json(os.environ['JAX_PERCEPTION_SOAK_JSON'], 'load_soak', results)
    # A short run's slope is mostly the allocator settling, so it is only reported; a copy
    # of every frame kept would still grow RSS by hundreds of MiB within seconds.
    if LOAD_S >= LONG_RUN_S:
        assert per_10k < MAX_PRIVATE_MIB_PER_10K_FRAMES
    else:
        assert growth < MAX_SHORT_RUN_GROWTH


def write_soak_json(path: str, key: str, results: dict) -> None:
    """
    Write one soak's results under ``key``, for docs/soak.json.

    ``soak`` (the first test) starts the file with the machine and versions; ``load_soak`` adds
    to it, so one ``make soak`` run writes both.
    """
    from jax_perception_node.tools.bench.common import machine_info
    path = Path(path)
    data = json.loads(path.read_text()) if key != 'soak' and path.exists() else {}
    data.setdefault('machine', machine_info())
    data[key] = results
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + '\n')
