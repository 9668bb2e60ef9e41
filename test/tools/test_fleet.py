"""Fleet replay on a local 2-worker Ray cluster: outputs, failures, a killed worker, the CLI."""

import functools
import json
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
from types import SimpleNamespace

from cli_errors import assert_one_line_error
from configs import small_params
from jax_perception_node.bags import bagio
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.settings.config import config_from_parameters
from jax_perception_node.tools import fleet
from jax_perception_node.tools.cli import main
from jax_perception_node.tools.synthetic_drive import LidarModel, write_sample_bag
import pytest
from ros_harness import write_params

# A few hundred points per frame: each bag replays in a fraction of a second.
LIDAR = LidarModel(beams=16, azimuth_steps=256)
DRIVES = {'drive0': (1.5, 0), 'drive1': (2.0, 1), 'drive2': (2.5, 2), 'drive3': (3.0, 3)}
FRAMES = {name: round(seconds * 10) for name, (seconds, _) in DRIVES.items()}   # 10 Hz LiDAR
# Frame keys of the latency topic that do not depend on timing.
EXACT_KEYS = ('num_points', 'bucket', 'overflow_points', 'cameras_used', 'compiles_after_warmup')


@pytest.fixture(scope='module')
def ray_cluster():
    """One local 2-CPU Ray cluster for the module; fleet runs in this process reuse it."""
    with fleet.cluster(workers=2) as workers:
        ray = fleet.import_ray()
        yield SimpleNamespace(workers=workers, address=ray.get_runtime_context().gcs_address)


@pytest.fixture(scope='module')
def archive(tmp_path_factory, ray_cluster):
    """
    Four small drives, bags that fail or hold a bad cloud, and in-process reference outputs.

    The bad bags: a truncated one, a garbage .mcap, one with a cloud's bytes cut short.

    After the cluster: Ray forks its processes before this process has JAX threads running.
    """
    root = tmp_path_factory.mktemp('fleet')
    store = root / 'store'
    store.mkdir(mode=0o700)
    params = small_params(compilation_cache_dir=str(store))
    write_params(params, root / 'params.yaml')
    cfg = config_from_parameters(params)
    bags = root / 'bags'
    bags.mkdir()
    for name, (seconds, seed) in DRIVES.items():
        write_sample_bag(bags / name, cfg, seconds=seconds, seed=seed, lidar=LIDAR)
    # A bag cut off mid-write: its metadata is fine, its MCAP file ends halfway.
    shutil.copytree(bags / 'drive3', bags / 'truncated')
    mcap = bags / 'truncated' / 'drive3.mcap'
    mcap.write_bytes(mcap.read_bytes()[:mcap.stat().st_size // 2])
    (bags / 'garbage.mcap').write_bytes(b'this is not an MCAP file')
    # A bag whose 6th cloud is cut short: no PointCloud2, rejected; the other 19 are replayed.
    reader = bagio.open_reader(bags / 'drive1')
    with bagio.BagWriter(bags / 'broken') as writer:
        clouds = 0
        for topic, ts, raw, msgtype in bagio.iter_messages(reader, list(
                bagio.topic_types(reader))):
            clouds += topic == bagio.POINTCLOUD_TOPIC
            writer.write_raw(topic, msgtype, bytes(raw)[:40] if clouds == 6 and
                             topic == bagio.POINTCLOUD_TOPIC else raw, ts)
    reader.close()
    reference = root / 'reference'
    reference.mkdir()
    for name in DRIVES:
        replay_bag(bags / name, reference / name, cfg)
    return SimpleNamespace(root=root, bags=bags, cfg=cfg, params=root / 'params.yaml',
                           reference=reference, store=store)


def messages(bag, topics):
    reader = bagio.open_reader(bag)
    try:
        return [(topic, ts, bytes(raw), msgtype)
                for topic, ts, raw, msgtype in bagio.iter_messages(reader, topics)]
    finally:
        reader.close()


def latency_values(bag):
    out = []
    for _, ts, raw, msgtype in messages(bag, [bagio.LATENCY_TOPIC]):
        values = {kv.key: kv.value
                  for kv in bagio.TYPESTORE.deserialize_cdr(raw, msgtype).status[0].values}
        out.append((ts, {k: values[k] for k in EXACT_KEYS}))
    return out


def assert_same_as_reference(out_dir: Path, archive, names):
    """Features and pictures byte for byte; latency records on the timing-free keys."""
    for name in names:
        topics = [bagio.FEATURES_TOPIC, bagio.IMAGE_TOPIC]
        got, want = messages(out_dir / name, topics), messages(archive.reference / name, topics)
        assert len(got) == 2 * FRAMES[name]
        assert got == want, name
        latency = latency_values(out_dir / name)
        assert len(latency) == FRAMES[name]
        assert latency == latency_values(archive.reference / name)


def test_fleet_outputs_equal_single_process_and_bad_bags_are_reported(
        archive, ray_cluster, tmp_path, capsys):
    out, report = tmp_path / 'out', tmp_path / 'summary.json'
    code = main(['replay', str(archive.bags), '--out', str(out), '--workers', '2',
                 '--params', str(archive.params), '--json', str(report)])
    assert code == 1     # two bags failed
    summary = json.loads(report.read_text())
    bags = {Path(b['input']).name: b for b in summary['bags']}
    assert sorted(bags) == ['broken', 'drive0', 'drive1', 'drive2', 'drive3', 'garbage.mcap',
                            'truncated']
    for name, frames in FRAMES.items():
        bag = bags[name]
        assert (bag['frames'], bag['rejected'], bag['compiles_after_warmup']) == (frames, 0, 0)
        assert (bag['error'], bag['attempts'], bag['output']) == (None, 1, str(out / name))
        assert bag['worker'] in {w['worker'] for w in summary['workers'] if w['ready']}
        assert set(bag['latency_ms']['total_ms']) == {'p50', 'p95', 'p99', 'max'}
    assert 'garbage.mcap' in bags['garbage.mcap']['error']
    assert 'cannot read bag' in bags['garbage.mcap']['error']
    assert 'truncated: cannot read bag' in bags['truncated']['error']
    for name in ('garbage.mcap', 'truncated'):
        assert (bags[name]['frames'], bags[name]['attempts']) == (0, 1)
        assert bags[name]['output'] is None
    broken = bags['broken']
    assert (broken['frames'], broken['rejected'], broken['error']) == (FRAMES['drive1'] - 1, 1,
                                                                       None)
    assert broken['output'] == str(out / 'broken')
    totals = summary['totals']
    assert totals['frames'] == sum(FRAMES.values()) + 19 == 109
    assert (totals['bags'], totals['failed'], totals['retries']) == (7, 2, 0)
    assert totals['rejected'] == 1
    assert totals['frames_per_s'] > 0
    # Both workers are listed; whether the second came up before the first had replayed every
    # bag is up to the machine (a slow actor start is not an error).
    workers = summary['workers']
    assert [w['worker'] for w in workers] == ['w0', 'w1']
    assert any(w['ready'] for w in workers) and not any(w['died'] for w in workers)
    assert sum(w['bags'] for w in workers) == 7
    for w in workers:
        assert (w['pid'] is not None, w['start_s'] is not None) == (w['ready'], w['ready'])
        assert w['ready'] or w['bags'] == 0

    # Only complete bags under their final names: no partials, nothing for the failed ones.
    assert sorted(p.name for p in out.iterdir()) == sorted([*FRAMES, 'broken'])
    assert_same_as_reference(out, archive, FRAMES)
    assert len(messages(out / 'broken', [bagio.FEATURES_TOPIC])) == FRAMES['drive1'] - 1
    printed = capsys.readouterr().out
    assert 'error:' in printed and '5/7 bags, 109 frames' in printed


def test_a_worker_killed_mid_bag_has_its_bag_retried(archive, ray_cluster, tmp_path):
    """
    SIGKILL the worker while its bag's output is provably unfinished (process stopped).

    One worker, so the replacement is the one that must finish the work: it starts from the
    executable store its predecessor filled, without a compile.
    """
    killed = []

    def kill_mid_bag(state: fleet.FleetProgress) -> None:
        for busy in state.busy:
            if killed or busy['pid'] is None:
                continue
            os.kill(busy['pid'], signal.SIGSTOP)
            # Frozen: if its bag is not in place yet, the kill lands mid-bag for sure.
            if not busy['output'].exists():
                os.kill(busy['pid'], signal.SIGKILL)
                killed.append(busy)
            else:
                os.kill(busy['pid'], signal.SIGCONT)

    out = tmp_path / 'out'
    result = fleet.replay_fleet([archive.bags / name for name in FRAMES], out, archive.cfg, 1,
                                progress=kill_mid_bag, poll_s=0.01)
    assert len(killed) == 1 and killed[0]['worker'] == 'w0'
    summary = result.summary()
    bags = {Path(b['input']).name: b for b in summary['bags']}
    victim = killed[0]['input'].name
    assert {n: b['attempts'] for n, b in bags.items()} == {
        name: 2 if name == victim else 1 for name in FRAMES}
    assert bags[victim]['worker'] == 'w1'
    assert [b['error'] for b in bags.values()] == [None] * 4
    totals = summary['totals']
    assert (totals['frames'], totals['failed'], totals['retries']) == (90, 0, 1)
    assert [(w['worker'], w['died'], w['ready']) for w in summary['workers']] == [
        ('w0', True, True), ('w1', False, True)]
    # Four bags finished; the attempt w0 died in is nobody's.
    assert sum(w['bags'] for w in summary['workers']) == 4
    assert summary['workers'][1]['start_compiles'] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FRAMES)
    assert_same_as_reference(out, archive, FRAMES)


# The child execs at once; JAX's warning about forking a threaded process does not apply.
@pytest.mark.filterwarnings('ignore:os.fork\\(\\) was called')
def test_cli_joins_a_running_cluster_by_address(archive, ray_cluster, tmp_path):
    """A second process, as on another machine, joins with --ray-address (token inherited)."""
    exe = str(Path(sys.executable).with_name('jax-perception'))
    out = tmp_path / 'out'
    done = subprocess.run(
        [exe, 'replay', str(archive.bags / 'drive0'), str(archive.bags / 'drive1'),
         '--out', str(out), '--ray-address', ray_cluster.address,
         '--params', str(archive.params)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '2/2 bags, 35 frames' in done.stdout
    assert_same_as_reference(out, archive, ['drive0', 'drive1'])


@pytest.mark.parametrize('argv, message', [
    (['{bags}', '--out', '{tmp}/o', '--workers', '0'], '--workers must be at least 1'),
    (['{bags}/drive0', '{tmp}/missing', '--out', '{tmp}/o'], 'missing: no such bag or folder'),
    (['{bags}/drive0', '{bags}/drive1', '--out', '{bags}'], 'exists, not overwriting'),
    (['{bags}', '--out', '{tmp}/o'], 'is a folder of bags: replay them with --workers'),
    (['{tmp}/plain', '{bags}/drive0', '--out', '{tmp}/o', '--workers', '2'],
     'neither a bag (a rosbag2 folder, .mcap or .db3) nor a folder of bags'),
    # A bag folder cut short beside a good bag: skipped in silence before.
    (['{tmp}/archive', '--out', '{tmp}/o', '--workers', '1'],
     '{tmp}/archive/cut_short: a folder of bag files without metadata.yaml is no rosbag2 bag'),
    (['{bags}', '--out', '{bags}/drive0/outputs', '--workers', '2'],
     '--out {bags}/drive0/outputs: would write inside the bag {bags}/drive0'),
    (['{bags}/drive0', '{bags}/drive0', '--out', '{tmp}/o', '--workers', '2'],
     'would both write the output bag drive0'),
    (['{bags}', '--out', '{tmp}/o', '--workers', '2', '--png', '{tmp}/png'],
     '--png needs a single bag'),
    (['{bags}/drive0', '--out', '{tmp}/o', '--ray-address', '127.0.0.1:1'],
     '--ray-address 127.0.0.1:1: cannot connect: Connection refused'),
])
def test_user_errors_print_one_line_and_return_1(argv, message, archive, tmp_path, capsys):
    (tmp_path / 'plain').mkdir()
    (tmp_path / 'archive' / 'cut_short').mkdir(parents=True)
    os.symlink(archive.bags / 'drive0', tmp_path / 'archive' / 'drive0')
    [mcap] = (archive.bags / 'drive0').glob('*.mcap')
    os.symlink(mcap, tmp_path / 'archive' / 'cut_short' / mcap.name)
    argv = ['replay', *(a.format(bags=archive.bags, tmp=tmp_path) for a in argv),
            '--params', str(archive.params)]
    assert main(argv) == 1
    assert_one_line_error(capsys, message.format(bags=archive.bags, tmp=tmp_path))
    assert not (tmp_path / 'o').exists()


def test_missing_ray_is_a_one_line_user_error(archive, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, 'ray', None)     # what `import ray` sees without Ray
    assert main(['replay', str(archive.bags / 'drive0'), '--out', str(tmp_path / 'o'),
                 '--workers', '2', '--params', str(archive.params)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ('jax-perception: fleet replay needs Ray: pip install '
                   '"jax_perception_node[fleet]" (or pip install ray)')


def test_sigterm_mid_fleet_is_one_line_and_leaves_only_complete_bags(
        archive, ray_cluster, tmp_path, monkeypatch, capsys):
    """
    SIGTERM to the driver while a bag is provably unfinished (its worker stopped, like above).

    The driver removes that bag's partial folder and exits 143 with one line.
    """
    sent = []

    def terminate_mid_bag(stream=None):
        def draw(state: fleet.FleetProgress) -> None:
            for busy in state.busy:
                if sent or busy['pid'] is None:
                    continue
                os.kill(busy['pid'], signal.SIGSTOP)
                if busy['output'].exists():
                    os.kill(busy['pid'], signal.SIGCONT)
                    continue
                sent.append(busy)
                # The driver's cleanup kills the stopped worker.
                os.kill(os.getpid(), signal.SIGTERM)
        return draw
    monkeypatch.setattr(fleet, 'fleet_progress_bar', terminate_mid_bag)
    monkeypatch.setattr(fleet, 'replay_fleet', functools.partial(fleet.replay_fleet,
                                                                 poll_s=0.01))
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / 'out'
    assert main(['replay', *(str(archive.bags / name) for name in FRAMES), '--out', str(out),
                 '--workers', '1', '--params', str(archive.params)]) == 143
    assert_one_line_error(capsys, 'terminated (SIGTERM)')
    assert len(sent) == 1 and signal.getsignal(signal.SIGTERM) is before
    # Bags finished before the signal stay, whole; the one being replayed leaves nothing.
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert sent[0]['input'].name not in left and set(left) < set(FRAMES)
    assert_same_as_reference(out, archive, left)


def test_the_fleet_modules_import_one_way():
    """Imports go fleet -> fleet_driver -> fleet_types, at any depth (in functions too)."""
    import ast
    tools = Path(fleet.__file__).parent
    names = ('fleet', 'fleet_driver', 'fleet_worker', 'fleet_types')
    imports = {}
    for name in names:
        tree = ast.parse((tools / f'{name}.py').read_text())
        imports[name] = {node.module for node in ast.walk(tree)
                         if isinstance(node, ast.ImportFrom) and node.level == 1
                         and node.module in names}
    assert imports == {'fleet': {'fleet_driver', 'fleet_worker', 'fleet_types'},
                       'fleet_driver': {'fleet_types'}, 'fleet_worker': set(),
                       'fleet_types': set()}


def test_a_bags_line_counts_its_clouds_off_the_intensity_scale():
    bag = {'input': '/bags/ouster', 'error': None, 'frames': 30, 'rejected': 0,
           'compiles_after_warmup': 0, 'worker': 1, 'attempts': 1,
           'clouds_off_intensity_scale': 0}
    assert fleet.bag_line(bag) == ('/bags/ouster: 30 frames, 0 rejected, compiles after '
                                   'warm-up 0 (worker 1, attempts 1)')
    assert fleet.bag_line(dict(bag, clouds_off_intensity_scale=30)) == (
        '/bags/ouster: 30 frames, 0 rejected, compiles after warm-up 0, 30 clouds off the '
        'intensity scale the head was trained on (replay the bag alone for the '
        'lidar.intensity_scale to set) (worker 1, attempts 1)')
    # A failed bag has no summary of its own (fleet_types.BagOutcome.report).
    assert fleet.bag_line(dict(bag, error='boom', frames=0)) == (
        '/bags/ouster: error: boom (worker 1, attempts 1)')
    assert fleet.bag_line(dict(bag, frames=0, rejected=30)) == (
        '/bags/ouster: 0 frames, 30 rejected, compiles after warm-up 0, no frame served '
        '(replay the bag alone for the reasons) (worker 1, attempts 1)')


def test_the_fleet_exits_1_when_a_bag_failed_served_no_frame_or_compiled():
    def summary(*bags, compiles=0):
        return {'bags': list(bags), 'totals': {
            'failed': sum(bool(b['error']) for b in bags), 'compiles_after_warmup': compiles}}
    served = {'error': None, 'frames': 30}
    assert fleet.exit_code(summary(served, served)) == 0
    assert fleet.exit_code(summary(served, {'error': 'boom', 'frames': 0})) == 1
    assert fleet.exit_code(summary(served, {'error': None, 'frames': 0})) == 1
    assert fleet.exit_code(summary(served, compiles=1)) == 1


@pytest.mark.parametrize('signal_exception', ['Terminated', 'KeyboardInterrupt'])
def test_a_signal_inside_rays_wait_ends_the_fleet_as_itself(signal_exception):
    """Raised by a signal handler inside Ray's compiled wait, it came out as a SystemError."""
    from jax_perception_node.tools import interrupts
    from jax_perception_node.tools.fleet_driver import Scheduler
    raised = getattr(interrupts, signal_exception, None) or KeyboardInterrupt

    class Ray:
        def wait(self, refs, num_returns, timeout):
            try:
                raise raised()
            except raised as exc:
                raise SystemError('<cyfunction CoreWorker.wait> returned a result with an '
                                  'exception set') from exc
    with pytest.raises(raised):
        Scheduler(Ray(), None, None, {}, [], 1).wait(['ref'], 1, 0.1)


def test_progress_counts_clouds_on_both_sides_with_several_lidars():
    # A finished three-LiDAR bag of 15 clouds (5 frames of 3) counted its frames, 5, against
    # the 15 clouds expected and read by the workers: the bar fell from 15/15 to 5/15.
    from jax_perception_node.tools.fleet_driver import Scheduler
    from jax_perception_node.tools.fleet_types import BagOutcome
    done = BagOutcome(Path('/bags/three'), Path('/out/three'), 15)
    done.summary = {'frames': 5, 'rejected': 0, 'clouds_unread': 0}
    cut = BagOutcome(Path('/bags/cut'), Path('/out/cut'), 15)
    cut.summary = {'frames': 4, 'rejected': 0, 'clouds_unread': 3}     # its index lied
    state = Scheduler(None, None, None, {}, [done, cut], 1).snapshot()
    assert (state.frames_done, state.frames_total) == (15 + 12, 30)


def test_a_fleet_of_failed_bags_leaves_no_out_folder(archive, ray_cluster, tmp_path, capsys):
    # Every bag failed: OUT was left as an empty folder, which refused the same command again.
    out = tmp_path / 'out'
    code = main(['replay', str(archive.bags / 'garbage.mcap'), '--out', str(out),
                 '--workers', '1', '--params', str(archive.params)])
    assert code == 1 and not out.exists()
    assert '0/1 bags' in capsys.readouterr().out
    assert main(['replay', str(archive.bags / 'garbage.mcap'), '--out', str(out),
                 '--workers', '1', '--params', str(archive.params)]) == 1
    assert 'nothing written' in capsys.readouterr().out
