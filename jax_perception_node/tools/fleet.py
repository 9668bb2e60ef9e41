"""
Fleet replay: a bag archive through the pipeline on a Ray cluster, one output bag per input.

Each worker is a long-lived Ray actor (``fleet_worker.BagWorker``, one CPU) holding one warmed
BevPipeline; the driver hands out whole bags, one at a time, to whichever worker is free, so
outputs are those of the single-process replay. A bag is written under a hidden temporary folder
in the output folder and renamed to its final name only when complete. A worker that dies
mid-bag (killed process, lost node) is replaced by a new actor and the bag goes back to the
front of the queue, up to ``max_attempts`` tries; a bag that cannot be read is reported with its
reason and the others go on. Interrupted (Ctrl-C, SIGTERM), the driver removes the bags still
running and keeps those complete. Inputs and the output folder must be at the same paths on
every machine of a multi-machine cluster (a shared file system).

This module is the entry point; the scheduling loop is ``fleet_driver``, the types both use are
in the leaf ``fleet_types``, and the imports go one way: fleet -> fleet_driver -> fleet_types.

Ray is an optional extra (``pip install jax_perception_node[fleet]``), imported only here and
only when a fleet runs.
"""

import contextlib
from dataclasses import dataclass
import logging
import os
from pathlib import Path
import secrets
import socket
import sys
import time
from typing import Callable, Iterator

from jax_perception_node.bags import bagio
from jax_perception_node.settings.config import PipelineConfig

from .fleet_driver import Scheduler
from .fleet_types import BagOutcome, first_line, FleetError, FleetProgress

BAG_FILE_SUFFIXES = ('.mcap', '.db3')


def import_ray():
    """Return the ``ray`` module, or raise FleetError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise FleetError('fleet replay needs Ray: pip install "jax_perception_node[fleet]" '
                         '(or pip install ray)') from None
    return ray


def is_bag(path: Path) -> bool:
    """Return True for a rosbag2 folder (it has metadata.yaml) or a bare .mcap / .db3 file."""
    if path.is_dir():
        return (path / 'metadata.yaml').is_file()
    return path.is_file() and path.suffix in BAG_FILE_SUFFIXES


def output_name(bag: Path) -> str:
    """Name of a bag's output bag: the folder's name, or a bare file's name without suffix."""
    return bag.stem if bag.is_file() else bag.name


def expand_inputs(inputs: list[str]) -> list[Path]:
    """
    Turn bags and folders of bags into the list of bags, in the order given (folders sorted).

    Raises FleetError for a missing path, a folder without bags or with a bag folder cut short
    (its files without metadata.yaml), or two bags that would write the same output name.
    """
    bags = []
    for item in inputs:
        path = Path(item)
        if not path.exists():
            raise FleetError(f'{path}: no such bag or folder')
        if is_bag(path):
            bags.append(path)
            continue
        entries = sorted(p for p in path.iterdir() if not p.name.startswith('.')) \
            if path.is_dir() else []
        inside = [p for p in entries if is_bag(p)]
        cut = next((p for p in entries if p.is_dir() and not is_bag(p) and any(
            f.suffix in ('.mcap', '.db3') for f in p.iterdir())), None)
        if cut is not None:     # passed over in silence before
            raise FleetError(f'{cut}: a folder of bag files without metadata.yaml is no rosbag2 '
                             'bag (a recording cut short leaves one): name its files, or '
                             'rebuild the metadata with ros2 bag reindex')
        if not inside:
            raise FleetError(f'{path}: neither a bag (a rosbag2 folder, .mcap or .db3) nor a '
                             f'folder of bags')
        bags.extend(inside)
    owners = {}
    for bag in bags:
        name = output_name(bag)
        if name in owners:
            raise FleetError(f'{owners[name]} and {bag} would both write the output bag {name}')
        owners[name] = bag
    return bags


def lidar_frames(bag: Path, topics: dict[str, str]) -> int:
    """Count the LiDAR messages of a bag on ``topics`` from its metadata (0 when unreadable)."""
    try:
        reader = bagio.open_reader(bag)
    except bagio.BagError:
        return 0
    try:
        return bagio.message_count(reader, topics)
    except bagio.BagError:      # its replay says why
        return 0
    finally:
        reader.close()


def _local_token_auth() -> None:
    """
    Give a local cluster token authentication without writing the token to ~/.ray.

    Ray reads these variables when it is imported, and the cluster's processes inherit them, so
    they are set before the import and stay for the life of this process (one token per
    process, valid for every local cluster it starts). A mode the user set is respected.
    """
    if 'RAY_AUTH_MODE' in os.environ:
        return
    os.environ['RAY_AUTH_MODE'] = 'token'
    os.environ.setdefault('RAY_AUTH_TOKEN', secrets.token_hex(32))
    if sys.modules.get('ray') is not None:
        # Imported earlier without the mode: refresh its cached settings as Ray itself does
        # when it turns token mode on (ray._private.authentication).
        from ray._raylet import AuthenticationTokenLoader, Config
        Config.initialize('')
        AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def cluster(workers: int | None = None, address: str | None = None) -> Iterator[int]:
    """
    Connect to Ray for the duration of the block; yields how many workers to start.

    ``address`` joins an existing cluster (``ray start --head`` ...); without it a local cluster
    of ``workers`` CPUs starts with its node address 127.0.0.1, token authentication (see
    ``_local_token_auth``), no dashboard and no usage stats, and is shut down at the end. A
    process already connected to Ray (a notebook, a test) keeps its connection. Workers default
    to the cluster's CPU count. The node address does not confine Ray 2.60's servers: they
    listen on every interface (checked with ``ss``), so the token is what keeps others out.
    """
    os.environ.setdefault('RAY_USAGE_STATS_ENABLED', '0')
    if address is None:
        _local_token_auth()
    else:
        _check_reachable(address)
    ray = import_ray()
    if ray.is_initialized():
        yield workers or max(1, int(ray.cluster_resources().get('CPU', 1)))
        return
    quiet = {'log_to_driver': False, 'logging_level': logging.ERROR}
    try:
        if address is None:
            ray.init(num_cpus=workers, include_dashboard=False, _node_ip_address='127.0.0.1',
                     **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as exc:    # noqa: B902 - Ray raises many kinds; all mean "no cluster"
        what = f'--ray-address {address}' if address else 'local Ray cluster'
        raise FleetError(f'{what}: {first_line(exc)}') from None
    try:
        yield workers or max(1, int(ray.cluster_resources().get('CPU', 1)))
    finally:
        ray.shutdown()


def _check_reachable(address: str) -> None:
    """
    Fail fast on a HOST:PORT nobody listens on (Ray itself retries for minutes).

    Other address forms ('auto', 'ray://...') go to Ray as they are.
    """
    host, sep, port = address.rpartition(':')
    if not sep or not port.isdigit() or '/' in address:
        return
    try:
        socket.create_connection((host.strip('[]'), int(port)), timeout=10).close()
    except OSError as exc:
        raise FleetError(f'--ray-address {address}: cannot connect: '
                         f'{exc.strerror or exc}') from None


@dataclass
class FleetResult:
    """
    Every bag's outcome, every worker's start-up, and times.

    ``wall_s`` is the whole run, worker start-up included; ``replay_s`` runs from the moment
    the first worker was ready, so frames over it is the fleet's replay throughput.
    """

    bags: list[BagOutcome]
    workers: list[dict]
    wall_s: float
    replay_s: float

    @property
    def failed(self) -> list[BagOutcome]:
        """Bags that did not produce an output."""
        return [b for b in self.bags if b.error]

    def summary(self) -> dict:
        """JSON-ready summary: ``bags``, ``totals`` (frames/s over both times) and ``workers``."""
        bags = [b.report() for b in self.bags]
        frames = sum(b['frames'] for b in bags)
        return {'bags': bags, 'workers': self.workers, 'totals': {
            'bags': len(bags), 'failed': len(self.failed), 'frames': frames,
            'rejected': sum(b['rejected'] for b in bags),
            'compiles_after_warmup': sum(b['compiles_after_warmup'] for b in bags),
            'retries': sum(max(0, b['attempts'] - 1) for b in bags),
            'wall_s': round(self.wall_s, 3), 'replay_s': round(self.replay_s, 3),
            'frames_per_s': round(frames / self.wall_s, 2) if self.wall_s > 0 else 0.0,
            'replay_frames_per_s': round(frames / self.replay_s, 2) if self.replay_s > 0
            else 0.0}}


def replay_fleet(bags: list[Path], out_dir: str | Path, cfg: PipelineConfig, workers: int,
                 topics: bagio.BagTopics = bagio.BagTopics(),
                 progress: Callable[[FleetProgress], None] | None = None,
                 max_attempts: int = 3, poll_s: float = 0.1) -> FleetResult:
    """
    Replay ``bags`` into ``out_dir`` (created; must not exist) on the connected Ray cluster.

    Starts ``min(workers, len(bags))`` actors; ``progress`` is called about every ``poll_s``
    and once at the end. Raises FleetError when workers cannot start.
    """
    # Imported here: it brings JAX, which the CLI needs only once a replay runs.
    from .fleet_worker import BagWorker
    # Absolute paths: a worker on another machine does not share this process's directory.
    out_dir = Path(out_dir).absolute()
    if out_dir.exists():
        raise FleetError(f'{out_dir} exists, not overwriting')
    bags = [Path(b).absolute() for b in bags]
    out_dir.mkdir(parents=True)
    clouds = topics.clouds(tuple(lidar.name for lidar in cfg.lidars))
    outcomes = [BagOutcome(b, out_dir / output_name(b), lidar_frames(b, clouds)) for b in bags]
    ray = import_ray()
    actor = ray.remote(num_cpus=1, max_concurrency=2, max_restarts=0)(BagWorker)
    job = {'topics': topics}
    scheduler = Scheduler(ray, actor, cfg, job, outcomes, max_attempts)
    started = time.perf_counter()
    try:
        scheduler.run(min(workers, len(outcomes)), progress, poll_s)
    except BaseException:
        scheduler.stop()
        if not any(out_dir.iterdir()):
            out_dir.rmdir()     # nothing came of the run: leave no trace of it
        raise
    scheduler.stop()
    if not any(out_dir.iterdir()):
        out_dir.rmdir()     # every bag failed: OUT would refuse the same command again
    done = time.perf_counter()
    return FleetResult(outcomes, scheduler.worker_info(), done - started,
                       done - (scheduler.first_ready or done))


def bag_line(bag: dict) -> str:
    """
    Return a bag's line of the fleet's report, from its entry of the summary's ``bags``.

    Clouds off the head's intensity scale are counted there; the scale to set is in the log
    of a replay of that bag alone (``replay BAG``), which the line says.
    """
    if bag['error']:
        state = f'error: {bag["error"]}'
    else:
        state = (f'{bag["frames"]} frames, {bag["rejected"]} rejected, compiles after warm-up '
                 f'{bag["compiles_after_warmup"]}')
        if bag['frames'] == 0:
            state += ', no frame served (replay the bag alone for the reasons)'
        if bag.get('clouds_unread'):
            state += (f', {bag["clouds_unread"]} clouds the bag lists could not be read (a '
                      'damaged chunk?)')
        if bag.get('clouds_off_intensity_scale'):
            state += (f', {bag["clouds_off_intensity_scale"]} clouds off the intensity scale '
                      'the head was trained on (replay the bag alone for the '
                      'lidar.intensity_scale to set)')
    return f'{bag["input"]}: {state} (worker {bag["worker"]}, attempts {bag["attempts"]})'


def exit_code(summary: dict) -> int:
    """Return the fleet replay's exit status: 1 if a bag failed, was cut, served none, compiled."""
    short = any(not bag['error'] and (bag['frames'] == 0 or bag.get('clouds_unread'))
                for bag in summary['bags'])
    totals = summary['totals']
    return int(bool(totals['failed'] or totals['compiles_after_warmup'] or short))


def fleet_progress_bar(stream=sys.stderr) -> Callable[[FleetProgress], None]:
    """Return a one-line bar over bags and LiDAR clouds (redrawn only on a terminal)."""
    def draw(state: FleetProgress) -> None:
        finished = state.bags_done >= state.bags_total
        if not stream.isatty() and not finished:
            return
        width = 30
        filled = int(width * state.bags_done / max(state.bags_total, 1))
        stream.write(f'\r[{"#" * filled}{"." * (width - filled)}] {state.bags_done}/'
                     f'{state.bags_total} bags, {state.frames_done}/{state.frames_total} '
                     f'clouds, {len(state.busy)} busy ')
        if finished:
            stream.write('\n')
        stream.flush()
    return draw
