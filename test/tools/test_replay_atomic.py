"""
Replay output is whole or absent: Ctrl-C, errors, SIGTERM, SIGKILL; bad messages; bad outputs.

The subprocess tests run the CLI's ``main`` with one hook: the progress callback marks the
moment the replay is mid-run (its writer open, frames written) and then waits to be signalled,
so the signal lands mid-run every time, without racing the replay.
"""

import json
import os
from pathlib import Path
import signal
import socket
import subprocess
import sys
import time

from bag_messages import read_all
from cli_errors import assert_one_line_error
from configs import small_params
from jax_perception_node.bags import bagio, replay
from jax_perception_node.core.pipeline import BevPipeline, compile_count
from jax_perception_node.settings.config import config_from_parameters, load_config
from jax_perception_node.settings.param_file import write_param_file
from jax_perception_node.tools import report
from jax_perception_node.tools.cli import main
import pytest

HOST = socket.gethostname()
FRAMES = 10     # a one-second sample drive at 10 Hz


@pytest.fixture(scope='module')
def drive(tmp_path_factory):
    """Small params (accumulation on, to read odometry) and a one-second, few-point drive."""
    root = tmp_path_factory.mktemp('atomic')
    params = write_param_file(small_params(**{'accumulation.num_sweeps': 2}),
                              root / 'params.yaml')
    bag = root / 'drive'
    assert main(['sample-bag', str(bag), '--seconds', '1', '--beams', '16',
                 '--azimuth-steps', '256', '--params', str(params)]) == 0
    assert len(read_all(bag, [bagio.POINTCLOUD_TOPIC])) == FRAMES
    return root, bag, params


@pytest.fixture(scope='module')
def pipe(drive):
    """One warmed pipeline of the drive's params for the in-process replays."""
    _, _, params = drive
    pipeline = BevPipeline(load_config(params))
    pipeline.warmup()
    return pipeline


def leftovers(folder: Path) -> list[str]:
    """Names of temporary folders a replay left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if bagio.PARTIAL in p.name)


def hooked_progress(monkeypatch, action):
    """Make the CLI's progress bar call ``action(done)`` at each frame."""
    monkeypatch.setattr(report, 'progress_bar', lambda stream=None: lambda done, total: action(
        done))


def test_ctrl_c_mid_replay_leaves_no_output_and_no_temporary(
        drive, tmp_path, monkeypatch, capsys):
    _, bag, params = drive

    def interrupt(done):
        if done == 3:
            raise KeyboardInterrupt
    hooked_progress(monkeypatch, interrupt)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / 'out'
    assert main(['replay', str(bag), '--out', str(out), '--params', str(params)]) == 130
    assert_one_line_error(capsys, 'interrupted')
    assert not out.exists() and leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is before      # the SIGTERM handler is restored


def test_an_error_mid_replay_leaves_no_output_and_no_temporary(drive, pipe, tmp_path):
    _, bag, _ = drive
    written = []

    def fail(done, total):
        written.append(done)
        if done == 4:
            raise RuntimeError('disk on fire')
    out = tmp_path / 'out'
    with pytest.raises(RuntimeError, match='disk on fire'):
        replay.replay_bag(bag, out, pipe.cfg, progress=fail, pipeline=pipe)
    assert written == [1, 2, 3, 4]
    assert not out.exists() and leftovers(tmp_path) == []
    # And the same output name is free for the next run.
    assert replay.replay_bag(bag, out, pipe.cfg, pipeline=pipe).frames == FRAMES
    assert len(read_all(out, [bagio.FEATURES_TOPIC])) == FRAMES and leftovers(tmp_path) == []


def test_a_bag_unreadable_mid_way_is_a_bag_error():
    """A storage error while reading on (a corrupt chunk) is the bag layer's error, named."""
    class Connection:
        topic, msgtype = bagio.POINTCLOUD_TOPIC, bagio.POINTCLOUD_TYPE

    class Reader:
        path = Path('/bags/corrupt')
        connections = [Connection()]

        def messages(self, connections):
            yield Connection(), 1, b'\x00\x01\x00\x00'
            raise ValueError('Unable to decompress Zstandard data: Data corruption detected')

    messages = bagio.iter_messages(Reader(), [bagio.POINTCLOUD_TOPIC])
    assert next(messages)[:2] == (bagio.POINTCLOUD_TOPIC, 1)
    with pytest.raises(bagio.BagError, match='/bags/corrupt: cannot read bag: ValueError: '
                                             'Unable to decompress'):
        next(messages)


GARBAGE = b'\x00\x01\x00\x00\xff\xff\xff\xff not a message'


def corrupt_copy(bag: Path, dst: Path) -> None:
    """Copy ``bag`` with garbage for the 3rd cloud, 2nd front map, 5th odometry, one CameraInfo."""
    corrupt = {bagio.POINTCLOUD_TOPIC: 3, bagio.camera_topic('front'): 2,
               bagio.ODOMETRY_TOPIC: 5}
    seen = {}
    reader = bagio.open_reader(bag)
    with bagio.BagWriter(dst) as writer:
        for topic, ts, raw, msgtype in bagio.iter_messages(reader, list(
                bagio.topic_types(reader))):
            seen[topic] = seen.get(topic, 0) + 1
            writer.write_raw(topic, msgtype, GARBAGE if corrupt.get(topic) == seen[topic]
                             else raw, ts)
            if topic == bagio.POINTCLOUD_TOPIC and seen[topic] == 1:
                writer.write_raw(bagio.camera_info_topic('front'), bagio.CAMERA_INFO_TYPE,
                                 GARBAGE, ts + 1)
    reader.close()


def test_messages_that_do_not_deserialize_are_rejected_and_the_replay_goes_on(
        drive, tmp_path, capsys):
    _, bag, params = drive
    corrupt_copy(bag, tmp_path / 'corrupt')
    out, report = tmp_path / 'out', tmp_path / 'summary.json'
    assert main(['replay', str(tmp_path / 'corrupt'), '--out', str(out), '--params',
                 str(params), '--json', str(report)]) == 0
    summary = json.loads(report.read_text())
    assert (summary['frames'], summary['rejected']) == (FRAMES - 1, 1)
    assert (summary['rejected_feature_maps'], summary['rejected_camera_info'],
            summary['rejected_odometry'], summary['camera_info_applied']) == (1, 1, 1, 0)
    assert len(read_all(out, [bagio.FEATURES_TOPIC])) == FRAMES - 1
    printed = capsys.readouterr().out
    for msgtype in (bagio.POINTCLOUD_TYPE, bagio.IMAGE_TYPE, bagio.CAMERA_INFO_TYPE,
                    bagio.ODOMETRY_TYPE):
        assert f'bytes that are no {msgtype}' in printed


@pytest.mark.parametrize('option, value, message', [
    ('--json', '{tmp}/file.txt/out.json', '{tmp}/file.txt is not a folder'),
    ('--json', '{tmp}', 'exists and is a folder'),
    ('--png', '{tmp}/file.txt/png', '{tmp}/file.txt is not a folder'),
    ('--png', '{tmp}/file.txt', 'exists and is not a folder'),
])
def test_an_unwritable_json_or_png_fails_before_the_replay(
        option, value, message, drive, tmp_path, monkeypatch, capsys):
    _, bag, params = drive
    # A path under a regular file cannot be made, whatever the user (root ignores modes).
    (tmp_path / 'file.txt').write_text('a regular file')
    replays = []
    monkeypatch.setattr(replay, 'replay_bag', lambda *a, **k: replays.append(a))
    out = tmp_path / 'out'
    value = value.format(tmp=tmp_path)
    assert main(['replay', str(bag), '--out', str(out), '--params', str(params),
                 option, value]) == 1
    assert_one_line_error(capsys, f'{option} {value}: {message.format(tmp=tmp_path)}')
    assert replays == [] and not out.exists()


def test_a_json_that_became_unwritable_during_the_replay_is_one_line(
        drive, tmp_path, monkeypatch, capsys):
    """Checked before, still caught when written: its folder turned into a file meanwhile."""
    _, bag, params = drive
    blocker = tmp_path / 'reports'

    def block(done):
        if done == 1:
            blocker.write_text('now a file')
    hooked_progress(monkeypatch, block)
    out = tmp_path / 'out'
    assert main(['replay', str(bag), '--out', str(out), '--params', str(params),
                 '--json', str(blocker / 'summary.json')]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f'jax-perception: --json {blocker / "summary.json"}: cannot write: ')
    assert '\n' not in err and 'Traceback' not in err
    assert out.exists()     # the replay itself completed


HOOKED_CLI = """
import pathlib, sys, time
from jax_perception_node.tools import report
from jax_perception_node.tools.cli import main

def progress_bar(stream=None):
    def draw(done, total):
        if done == 3:
            pathlib.Path(sys.argv[1]).write_text('mid-run')
            for _ in range(600):
                time.sleep(1)
    return draw

report.progress_bar = progress_bar
sys.exit(main(sys.argv[2:]))
"""


def start_mid_run(drive, tmp_path, out: Path) -> subprocess.Popen:
    """Start the CLI replaying into ``out``; return once it is provably mid-run."""
    _, bag, params = drive
    marker = tmp_path / 'mid-run'
    proc = subprocess.Popen(
        [sys.executable, '-c', HOOKED_CLI, str(marker), 'replay', str(bag), '--out', str(out),
         '--params', str(params)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, 'the replay never got to its third frame'
        time.sleep(0.05)
    partial = out.with_name(f'.{out.name}{bagio.PARTIAL}{HOST}-{proc.pid}')
    assert (partial / out.name).is_dir() and not out.exists()
    return proc


def test_sigterm_mid_replay_is_one_line_and_leaves_nothing(drive, tmp_path):
    out = tmp_path / 'out'
    proc = start_mid_run(drive, tmp_path, out)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines[-1] == 'jax-perception: terminated (SIGTERM)'
    assert 'Traceback' not in stderr and sum('jax-perception:' in x for x in lines) == 1
    assert not out.exists() and leftovers(tmp_path) == []


def test_after_sigkill_only_the_named_temporary_remains_and_the_next_run_removes_it(
        drive, tmp_path):
    _, bag, params = drive
    out = tmp_path / 'out'
    proc = start_mid_run(drive, tmp_path, out)
    proc.kill()
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    killed = f'.out{bagio.PARTIAL}{HOST}-{proc.pid}'
    assert not out.exists() and leftovers(tmp_path) == [killed]
    # Temporaries of a live process (a concurrent replay) and of another host are not ours.
    live = tmp_path / f'.out{bagio.PARTIAL}{HOST}-{os.getppid()}'
    remote = tmp_path / f'.out{bagio.PARTIAL}{HOST}x-1'
    live.mkdir()
    remote.mkdir()
    assert main(['replay', str(bag), '--out', str(out), '--params', str(params)]) == 0
    assert len(read_all(out, [bagio.FEATURES_TOPIC])) == FRAMES
    assert leftovers(tmp_path) == sorted([live.name, remote.name])


def test_stale_partials_of_dead_processes_only_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, '-c', 'pass'])
    dead.wait()
    dst = tmp_path / 'bag'
    names = {f'.bag{bagio.PARTIAL}{HOST}-{dead.pid}': False,        # dead: removed
             f'.bag{bagio.PARTIAL}{HOST}-{os.getpid()}': False,     # this process, earlier
             f'.bag{bagio.PARTIAL}{HOST}-{os.getppid()}': True,     # alive
             f'.other{bagio.PARTIAL}{HOST}-{dead.pid}': True,       # another output's
             f'.bag{bagio.PARTIAL}{HOST}-{dead.pid}x': True}        # not a temporary's name
    for name in names:
        (tmp_path / name).mkdir()
    removed = bagio.remove_stale_partials(dst)
    assert sorted(p.name for p in removed) == sorted(n for n, kept in names.items() if not kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n, kept in names.items() if kept)


def test_an_output_that_cannot_be_written_fails_before_the_warm_up(drive, tmp_path):
    _, bag, _ = drive
    (tmp_path / 'file.txt').write_text('x')
    # Grid and buckets of their own: a warm-up would have to compile.
    cfg = config_from_parameters(small_params(**{'grid.resolution': 0.25, 'buckets': [96]}))
    before = compile_count()
    with pytest.raises(bagio.BagError, match='file.txt/out: cannot write bag'):
        replay.replay_bag(bag, tmp_path / 'file.txt' / 'out', cfg)
    assert compile_count() == before


def test_sigterm_mid_sample_bag_is_one_line_and_leaves_no_bag(tmp_path):
    # The console script's own path (python -m ... cli, argv from the process): a bag cut
    # short would have no metadata.yaml, and --force would then refuse to replace it.
    out = tmp_path / 'drive'
    proc = subprocess.Popen(
        [sys.executable, '-m', 'jax_perception_node.tools.cli', 'sample-bag', str(out),
         '--seconds', '60', '--cameras', '0'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    deadline = time.monotonic() + 300
    while not any(out.glob('*.mcap')):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, 'the bag was never started'
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert [line for line in stderr.splitlines() if line.strip()] == [
        'jax-perception: terminated (SIGTERM)']
    assert not out.exists()


def test_a_replay_onto_a_dangling_link_is_refused_before_it_starts(drive, tmp_path, capsys):
    _, bag, params = drive
    (tmp_path / 'out').symlink_to(tmp_path / 'gone')
    assert main(['replay', str(bag), '--out', str(tmp_path / 'out'), '--params',
                 str(params)]) == 1
    assert f'{tmp_path / "out"} exists, not overwriting' in capsys.readouterr().err


def test_ctrl_c_after_the_bag_is_whole_says_so(drive, tmp_path, monkeypatch, capsys):
    # The output bag is renamed into place before the summary is printed and --json / --png
    # written: interrupted there, the bag stays and the line says what may be missing (before,
    # "interrupted" alone, as if nothing were left, and the same command then refused OUT).
    from jax_perception_node.tools import cli
    _, bag, params = drive

    def interrupt(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, 'write_pictures', interrupt)
    out = tmp_path / 'out'
    assert main(['replay', str(bag), '--out', str(out), '--params', str(params), '--json',
                 str(tmp_path / 'summary.json'), '--png', str(tmp_path / 'png')]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f'jax-perception: interrupted: {out} is complete; --json and --png may be '
                   'missing or cut short')
    assert (out / 'metadata.yaml').is_file() and leftovers(tmp_path) == []


def test_a_ctrl_c_that_lands_in_a_finalizer_reaches_the_main_thread(monkeypatch):
    # As in JAX's garbage-collection callback: Python cannot raise it there, so it went to
    # sys.unraisablehook, a traceback was printed and the command ran on to exit 0.
    import time
    from jax_perception_node.tools.interrupts import keep_interrupts
    reported = []
    monkeypatch.setattr(sys, 'unraisablehook', reported.append)
    keep_interrupts()
    keep_interrupts()           # once is enough: not a chain of hooks

    class Finalized:
        def __del__(self):
            raise KeyboardInterrupt
    # Ctrl-C as in a terminal: a process started in the background of a shell without job
    # control (a CI script, nohup) ignores SIGINT from birth, and then no Ctrl-C can come.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            Finalized()
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, previous)
    Finalized.__del__ = lambda self: 1 / 0      # anything else goes to the hook before
    Finalized()
    assert [type(r.exc_value) for r in reported] == [ZeroDivisionError]


def test_the_console_script_says_a_ctrl_c_while_importing_the_cli_in_one_line(
        monkeypatch, capsys, tmp_path):
    from jax_perception_node.tools import console

    class Interrupting:
        def find_spec(self, name, path=None, target=None):
            if name == 'jax_perception_node.tools.cli':
                raise KeyboardInterrupt
            return None
    monkeypatch.delitem(sys.modules, 'jax_perception_node.tools.cli')
    monkeypatch.setattr(sys, 'meta_path', [Interrupting(), *sys.meta_path])
    assert console.main() == 130
    assert capsys.readouterr().err == 'jax-perception: interrupted\n'
    monkeypatch.setattr(sys, 'meta_path', [m for m in sys.meta_path
                                           if not isinstance(m, Interrupting)])
    monkeypatch.setattr(sys, 'argv', ['jax-perception', 'replay', str(tmp_path / 'none'),
                                      '--out', str(tmp_path / 'o')])
    assert console.main() == 1          # the CLI itself, on the process's arguments
    assert 'no such bag' in capsys.readouterr().err
