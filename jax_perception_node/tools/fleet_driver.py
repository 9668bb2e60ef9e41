"""
The fleet's scheduling loop: start workers, hand out bags, replace workers that die.

Used by ``fleet.replay_fleet``; ``ray`` and the actor class come in as arguments, so this module
imports no Ray itself.
"""

from collections import deque
import time

from .fleet_types import (BagOutcome, first_line, FleetError, FleetProgress, new_partial,
                          remove_partial)
from .interrupts import Terminated


class Scheduler:
    """One fleet run's state: workers starting, idle and busy, bags queued and finished."""

    def __init__(self, ray, actor_class, cfg, job: dict, outcomes: list[BagOutcome],
                 max_attempts: int):
        self.ray = ray
        self.actor_class = actor_class
        self.cfg = cfg
        self.job = job
        self.outcomes = outcomes
        self.max_attempts = max_attempts
        self.queue = deque(outcomes)
        self.finished = 0
        self.spawned = 0
        self.start_deaths = 0
        self.max_start_deaths = max_attempts
        self.starting = {}      # start() ref -> (label, actor, spawn time)
        self.idle = []          # (label, actor)
        self.running = {}       # replay() ref -> (label, actor, outcome)
        self.polls = {}         # status() ref -> label
        self.status = {}        # label -> last status() reply
        self.info = {}          # label -> worker record (worker_info)
        self.first_ready: float | None = None   # perf_counter when the first worker was ready

    def worker_info(self) -> list[dict]:
        """
        Every worker spawned, in spawn order.

        ``ready`` is False for one still warming up when the last bag finished (another worker
        took all the bags) or that died while starting; its start-up fields are then None.
        ``bags`` counts the attempts it finished (outputs and errors, not those it died in).
        """
        return [self.info[k] for k in sorted(self.info, key=lambda k: int(k[1:]))]

    def spawn(self) -> None:
        """Create one actor and ask it to warm up."""
        label = f'w{self.spawned}'
        self.spawned += 1
        self.info[label] = {'worker': label, 'ready': False, 'host': None, 'pid': None,
                            'warmup_s': None, 'start_compiles': None, 'xla_flags': None,
                            'start_s': None, 'died': False, 'bags': 0}
        actor = self.actor_class.remote(self.cfg, label)
        self.starting[actor.start.remote()] = (label, actor, time.perf_counter())

    def wait(self, refs: list, count: int, timeout: float) -> list:
        """
        Return the refs of ``refs`` ready within ``timeout`` s (at most ``count``): ray.wait's.

        A signal's exception (Ctrl-C, or ``interrupts.Terminated`` from SIGTERM) raised while
        Ray's compiled wait runs comes out of it as a SystemError: raised as itself here, so
        the command ends as interrupted (130, 143), not with a traceback.
        """
        try:
            return self.ray.wait(refs, num_returns=count, timeout=timeout)[0]
        except SystemError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, (KeyboardInterrupt, Terminated)):
                raise cause from None
            raise

    def run(self, workers: int, progress, poll_s: float) -> None:
        """Replay every queued bag; returns when each has an output or an error."""
        self.max_start_deaths = self.max_attempts * workers
        for _ in range(workers):
            self.spawn()
        while self.queue or self.running:
            self.assign()
            refs = [*self.starting, *self.running]
            if not refs:
                raise FleetError('no worker left to replay the remaining bags')
            ready = self.wait(refs, 1, poll_s)
            if ready:
                ready = self.wait(refs, len(refs), 0)
            for ref in ready:
                if ref in self.starting:
                    self.started(ref)
                else:
                    self.replayed(ref)
            if progress and (self.queue or self.running):
                self.poll()
                progress(self.snapshot())
        if progress:
            progress(self.snapshot())

    def assign(self) -> None:
        """Give queued bags to idle workers."""
        while self.queue and self.idle:
            label, actor = self.idle.pop()
            outcome = self.queue.popleft()
            outcome.attempts += 1
            outcome.worker = label
            job = dict(self.job, input=str(outcome.bag), output=str(outcome.output),
                       partial=str(new_partial(outcome)))
            self.running[actor.replay.remote(job)] = (label, actor, outcome)

    def started(self, ref) -> None:
        """Take a worker that finished warming up into service, or handle its failure."""
        label, actor, spawned = self.starting.pop(ref)
        try:
            info = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            # The process died (killed, node lost): a new actor, a bounded number of times.
            self.start_deaths += 1
            self.info[label]['died'] = True
            if self.start_deaths > self.max_start_deaths:
                raise FleetError(f'workers keep dying while starting ({label}: '
                                 f'{first_line(exc)})') from None
            self.spawn()
            return
        except self.ray.exceptions.RayTaskError as exc:
            raise FleetError(f'worker {label} could not start: {_cause(exc)}') from None
        now = time.perf_counter()
        self.first_ready = self.first_ready or now
        self.info[label].update(info, ready=True, start_s=round(now - spawned, 3))
        self.idle.append((label, actor))

    def replayed(self, ref) -> None:
        """Record a bag that came back: done, failed, or queued again when its worker died."""
        label, actor, outcome = self.running.pop(ref)
        self.status.pop(label, None)
        try:
            reply = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            self.ray.kill(actor, no_restart=True)
            remove_partial(outcome)
            self.info[label]['died'] = True
            if outcome.attempts < self.max_attempts:
                self.queue.appendleft(outcome)
            else:
                outcome.error = (f'worker died during the bag on each of {outcome.attempts} '
                                 f'attempts (last: {first_line(exc)})')
                self.finished += 1
            if self.queue:
                self.spawn()
            return
        except self.ray.exceptions.RayTaskError as exc:
            reply = {'summary': None, 'error': _cause(exc), 'seconds': 0.0, 'cpu_s': 0.0}
        remove_partial(outcome)
        outcome.summary, outcome.error = reply['summary'], reply['error']
        outcome.seconds, outcome.cpu_s = reply['seconds'], reply['cpu_s']
        self.finished += 1
        self.info[label]['bags'] += 1
        self.idle.append((label, actor))

    def poll(self) -> None:
        """Collect status replies that arrived; ask busy workers that have none pending."""
        if self.polls:
            ready = self.wait(list(self.polls), len(self.polls), 0)
            for ref in ready:
                label = self.polls.pop(ref)
                try:
                    self.status[label] = self.ray.get(ref)
                except self.ray.exceptions.RayError:
                    self.status.pop(label, None)    # its replay() reports the death
        asked = set(self.polls.values())
        for label, actor, _ in self.running.values():
            if label not in asked:
                self.polls[actor.status.remote()] = label

    def snapshot(self) -> FleetProgress:
        """Bags done and LiDAR clouds read so far, and who is busy with what."""
        # Clouds, as the workers count their progress and the totals are counted: with several
        # LiDARs a frame holds a set of clouds, and the bar fell from 15 of 15 to 5 of 15.
        frames = sum(o.frames_expected - o.summary.get('clouds_unread', 0)
                     for o in self.outcomes if o.summary)
        busy = []
        for label, _, outcome in self.running.values():
            status = self.status.get(label) or {}
            done = status.get('done', 0) if status.get('bag') == str(outcome.bag) else 0
            frames += done
            busy.append({'worker': label, 'pid': self.info.get(label, {}).get('pid'),
                         'input': outcome.bag, 'output': outcome.output, 'done': done,
                         'total': outcome.frames_expected})
        return FleetProgress(self.finished, len(self.outcomes), frames,
                             sum(o.frames_expected for o in self.outcomes), busy)

    def stop(self) -> None:
        """Kill every actor and remove the partial output of bags still running."""
        for label, actor, outcome in self.running.values():
            remove_partial(outcome)
        actors = [a for _, a, _ in self.running.values()] + [a for _, a in self.idle] + [
            a for _, a, _ in self.starting.values()]
        for actor in actors:
            self.ray.kill(actor, no_restart=True)
        self.running.clear()
        self.idle.clear()
        self.starting.clear()


def _cause(exc) -> str:
    """Describe the worker-side exception inside a RayTaskError in one line."""
    cause = getattr(exc, 'cause', None)
    if cause is not None:
        return f'{type(cause).__name__}: {first_line(cause)}'
    return first_line(exc)
