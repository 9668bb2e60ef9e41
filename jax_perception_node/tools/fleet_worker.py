"""
One fleet worker: a long-lived, warmed BevPipeline that replays whole bags.

The driver (fleet.py) wraps :class:`BagWorker` into a Ray actor; this module itself never imports
Ray, so it is plain Python to read and to test. A bag is replayed by ``replay.replay_bag`` with
the worker's pipeline, so its output is the one the single-process replay writes, and it is
written under a temporary folder next to its final place, renamed there only when complete.
"""

import os
from pathlib import Path
import shutil
import socket
import threading
import time

from jax_perception_node.bags.bagio import BagError
from jax_perception_node.bags.replay import replay_bag
from jax_perception_node.core.pipeline import BevPipeline, compile_count
from jax_perception_node.settings.config import PipelineConfig
from jax_perception_node.settings.parameters import ConfigError

# Eigen's own thread pool in every one-core actor would make the actors on a machine fight for
# its cores. (The often-quoted companion ``intra_op_parallelism_threads=1`` is no XLA flag:
# XLA ignores the bare word, so it is left out.)
SINGLE_CORE_XLA_FLAG = '--xla_cpu_multi_thread_eigen=false'


def single_core_xla_flags() -> str:
    """
    Add SINGLE_CORE_XLA_FLAG to this process's XLA_FLAGS, if JAX has not started yet.

    XLA reads the variable once, when JAX first needs a device; a worker process that already
    ran JAX keeps what it has (and the executable store keys by the variable, so it must keep
    saying what the process really runs with). Returns the XLA_FLAGS in effect.
    """
    from jax._src.xla_bridge import backends_are_initialized
    flags = os.environ.get('XLA_FLAGS', '').split()
    if not backends_are_initialized() and not any(
            f.startswith('--xla_cpu_multi_thread_eigen') for f in flags):
        os.environ['XLA_FLAGS'] = ' '.join([*flags, SINGLE_CORE_XLA_FLAG])
    return os.environ.get('XLA_FLAGS', '')


class BagWorker:
    """
    Replay bags one after another through one warmed pipeline.

    ``start`` warms the pipeline (from the executable store in ``compilation_cache_dir``, so a
    start with a warm store compiles nothing) and ``replay`` runs one bag; ``status`` answers
    while a bag runs (the actor has two threads), for the driver's progress bar.
    """

    def __init__(self, cfg: PipelineConfig, label: str):
        # Set in the actor rather than by a Ray runtime_env: an env_vars runtime_env makes
        # Ray start a fresh worker process, about 3 s more per worker here.
        self.xla_flags = single_core_xla_flags()
        self.cfg = cfg
        self.label = label
        self._pipe: BevPipeline | None = None
        self._lock = threading.Lock()
        self._bag: str | None = None
        self._done = self._total = 0

    def start(self) -> dict:
        """Build and warm the pipeline; returns who and where this worker is and what it cost."""
        started = time.perf_counter()
        before = compile_count()
        pipe = BevPipeline(self.cfg)
        pipe.warmup()
        self._pipe = pipe
        return {'worker': self.label, 'host': socket.gethostname(), 'pid': os.getpid(),
                'warmup_s': round(time.perf_counter() - started, 3),
                'start_compiles': compile_count() - before, 'xla_flags': self.xla_flags}

    def status(self) -> dict:
        """Return the bag being replayed (None when idle) and its frames done and total."""
        with self._lock:
            return {'bag': self._bag, 'done': self._done, 'total': self._total}

    def _progress(self, done: int, total: int) -> None:
        with self._lock:
            self._done, self._total = done, total

    def replay(self, job: dict) -> dict:
        """
        Replay ``job['input']`` into ``job['output']`` by way of the folder ``job['partial']``.

        A bag that fails leaves no output and comes back with ``error`` set (the reason, for
        the summary); the worker keeps serving. ``job['topics']`` is the ``bagio.BagTopics``
        the single-process replay takes.
        """
        if self._pipe is None:
            raise RuntimeError('BagWorker.replay() needs start() first')
        partial, final = Path(job['partial']), Path(job['output'])
        with self._lock:
            self._bag, self._done, self._total = job['input'], 0, 0
        started, cpu = time.perf_counter(), time.process_time()
        compiles_before = self._pipe.compiles_after_warmup
        summary, error = None, None
        try:
            partial.mkdir()
            result = replay_bag(job['input'], partial / final.name, self.cfg, job['topics'],
                                progress=self._progress, pipeline=self._pipe)
            # A rename within one folder: the bag appears under its name whole or not at all.
            os.rename(partial / final.name, final)
            # The pipeline counts since its warm-up; the summary is this bag's.
            result.compiles_after_warmup -= compiles_before
            summary = result.summary()
        except Exception as exc:    # noqa: B902 - any bag's failure is reported, others go on
            # Our own errors already name the bag and the problem; others get their type.
            error = str(exc) if isinstance(exc, (BagError, ConfigError)) else (
                f'{type(exc).__name__}: {exc}')
        finally:
            shutil.rmtree(partial, ignore_errors=True)
            with self._lock:
                self._bag = None
        # CPU seconds of all the process's threads: above ``seconds`` means more than one core.
        return {'worker': self.label, 'summary': summary, 'error': error,
                'seconds': round(time.perf_counter() - started, 3),
                'cpu_s': round(time.process_time() - cpu, 3)}
