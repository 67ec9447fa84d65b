"""Rollouts on a Ray cluster: worker actors play episodes, the driver schedules and records.

`RayRollout` starts (or joins) a cluster, one `TeacherService` actor and `workers` rollout
worker actors, each with `episodes_per_worker` episodes in flight. Episodes are handed out
by id and collected in any order (`ray.wait`). A worker that dies loses only its episodes in
flight: they are re-queued and played again (elsewhere, or on the restarted actor); an
episode id is reported at most once, so each finished episode is recorded exactly once.

`run_ray_rollout` is the CLI's runner: the same run directory, resume, progress bar,
summary and report as `opd_gym.rollout.run_rollout`, with rows appended (fsync'd) by the
driver through `RunDirectory`. A trainer's own Ray driver uses `RayRollout.batches`.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opd_gym.errors import ConfigError, OPDGymError
from opd_gym.rollout_core import FROM_CONFIG, EpisodeOutcome, RowSink, mark_interrupted, opd_config
from opd_gym.runs import EpisodeRow, RunDirectory, RunSummary
from opd_gym.runs.config import RolloutConfig, plain_config
from opd_gym.runs.interrupt import DEFAULT_GRACE_S, Interrupt
from opd_gym.runs.progress import Progress
from opd_gym.tasks.resolve import resolve_tasks

SERVED_TEACHERS = ("vllm:", "openai:")  # a server URL: every worker talks to it directly
RETRY_PING_S = 0.5  # how often a restarting worker is asked whether it is back
RESTART_TIMEOUT_S = 300.0  # a worker not back this long after dying is given up


@dataclass
class RayOptions:
    """How the rollout uses Ray (cluster, workers, placement, fault budget)."""

    address: str | None = None  # None: start a local cluster; "auto"; "host:port"; "ray://..."
    workers: int = 2
    episodes_per_worker: int = 2  # episodes in flight per worker (its threads and envs)
    worker_cpus: float = 1.0
    worker_gpus: float = 0.0
    teacher_cpus: float = 1.0
    teacher_gpus: float = 0.0  # e.g. 1 to place the teacher actor on a GPU node
    max_restarts: int = 3  # per worker actor (Ray restarts it; its episodes are re-queued)
    teacher_restarts: int = 0
    max_attempts: int = 3  # times one episode is tried when its workers keep dying
    teacher_timeout: float = 300.0  # a teacher answer later than this leaves turns unscored
    spread: bool = True  # place workers on different nodes when the cluster has several
    num_cpus: int | None = None  # logical CPUs of a local cluster (default: enough for all)
    runtime_env: Mapping[str, Any] | None = None
    log_to_driver: bool = False  # show the workers' logs on the driver's terminal

    def __post_init__(self) -> None:
        if self.workers < 1 or self.episodes_per_worker < 1:
            raise ConfigError("Ray rollout needs at least one worker and one episode per worker")
        if self.max_attempts < 1 or self.max_restarts < 0:
            raise ConfigError("max_attempts must be >= 1 and max_restarts >= 0")


@dataclass
class EpisodeResult:
    """One episode as the driver got it: its row, or why there is none (or only a partial one)."""

    episode: int
    row: EpisodeRow | None
    error: str | None = None
    attempts: int = 1
    worker: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.row is not None


@dataclass
class _Worker:
    handle: Any
    state: str = "ready"  # ready, recovering (dead, waiting for Ray's restart), dead
    load: int = 0
    deaths: int = 0
    recover_by: float = 0.0  # recovering: give up on the restart after this time
    ping_at: float | None = None  # recovering: when to ask again (None: a ping is in flight)


@dataclass
class _Stats:
    submitted: int = 0
    requeued: int = 0
    worker_deaths: int = 0
    wait_seconds: float = 0.0
    schedule_seconds: float = 0.0
    per_worker: dict[int, int] = field(default_factory=dict)


class RayRollout:
    """Episodes played by Ray worker actors, returned as they finish (see module docstring)."""

    def __init__(
        self,
        config: RolloutConfig,
        make_agent: Callable[[Any], Any],
        *,
        teacher: Any = None,
        judge: Any = FROM_CONFIG,
        options: RayOptions | None = None,
    ) -> None:
        self.config = config
        self.make_agent = make_agent
        self.options = options or RayOptions()
        self.opd_config = opd_config(config, teacher, judge) if config.opd else None
        self.tasks = resolve_tasks(config.tasks)
        self.task_ids = list(config.task_ids or [t.id for t in self.tasks])
        if not self.task_ids:
            raise ConfigError("the rollout has no tasks")
        self.teacher_actor: Any = None
        self.workers: list[_Worker] = []
        self.stats = _Stats()
        self._started_ray = False
        self._started = False
        self._tasks_ref: Any = None

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> RayRollout:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> RayRollout:
        """Join or start the cluster, start the teacher service and the workers."""
        if self._started:
            return self
        import ray

        opts = self.options
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"log_to_driver": opts.log_to_driver}
            if opts.runtime_env:
                kwargs["runtime_env"] = dict(opts.runtime_env)
            if opts.address is None:
                need = opts.workers * opts.worker_cpus + opts.teacher_cpus
                kwargs.update(num_cpus=opts.num_cpus or max(int(need + 0.999), os.cpu_count() or 1),
                              include_dashboard=False)
            else:
                kwargs["address"] = opts.address
            ray.init(**kwargs)
            self._started_ray = True
        self._started = True
        try:
            worker_opd = self._start_teacher()
            self._start_workers(worker_opd)
        except BaseException:
            self.close()
            raise
        return self

    def _start_teacher(self) -> dict[str, Any] | None:
        """The OPD options the workers get: the teacher as a RemoteTeacher (or a served URL)."""
        if self.opd_config is None:
            return None
        import ray

        from opd_gym.distributed.teacher import RemoteTeacher, TeacherService

        cfg = self.opd_config
        spec = cfg.teacher
        if isinstance(spec, str) and spec.startswith(SERVED_TEACHERS):
            return cfg.to_kwargs()  # each worker builds a client of the one server
        opts = self.options
        self.teacher_actor = (
            ray.remote(TeacherService)
            .options(max_concurrency=max(8, opts.workers * opts.episodes_per_worker),
                     max_restarts=opts.teacher_restarts, num_cpus=opts.teacher_cpus,
                     num_gpus=opts.teacher_gpus)
            .remote(spec, dict(cfg.teacher_options))
        )
        remote = RemoteTeacher.connect(self.teacher_actor, timeout=opts.teacher_timeout)
        kwargs = cfg.to_kwargs()
        kwargs.update(teacher=remote, teacher_options={})
        return kwargs

    def _start_workers(self, opd_options: dict[str, Any] | None) -> None:
        import ray

        from opd_gym.distributed.worker import RolloutWorker

        opts = self.options
        self._tasks_ref = tasks = ray.put(self.tasks)  # kept alive: a restart needs it
        actor = ray.remote(RolloutWorker).options(
            max_restarts=opts.max_restarts,
            max_task_retries=0,  # the driver re-queues: an episode is never run twice at once
            max_concurrency=opts.episodes_per_worker + 1,  # + 1: info/ping while busy
            num_cpus=opts.worker_cpus,
            num_gpus=opts.worker_gpus,
            scheduling_strategy="SPREAD" if opts.spread else "DEFAULT",
        )
        for _ in range(opts.workers):
            handle = actor.remote(
                self.config,  # the whole run config: tool format, turns, sandbox
                tasks,
                make_agent=self.make_agent,
                opd_options=opd_options,
                slots=opts.episodes_per_worker,
            )
            self.workers.append(_Worker(handle))
        try:  # fail here if they cannot start (a tokenizer mismatch included)
            ray.get([w.handle.prepare.remote() for w in self.workers])
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, OPDGymError):
                raise exc.cause from None  # one line, not the actor's traceback
            raise

    def worker_info(self) -> list[dict[str, Any]]:
        """Each live worker's pid, host, Ray node id and episodes played.

        A worker Ray is still restarting is waited for (up to RESTART_TIMEOUT_S), since
        a run may end while a killed worker comes back.
        """
        import ray
        from ray.exceptions import ActorUnavailableError

        infos = []
        for worker in (w for w in self.workers if w.state != "dead"):
            deadline = time.monotonic() + RESTART_TIMEOUT_S
            while True:
                try:
                    infos.append(ray.get(worker.handle.info.remote()))
                    break
                except ActorUnavailableError:  # restarting: ask again shortly
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(RETRY_PING_S)
        return infos

    def close(self) -> None:
        """Close the workers (their sandboxes go), the teacher service, and a cluster we started."""
        import ray

        if not ray.is_initialized():
            return
        closing = [w.handle.close.remote() for w in self.workers if w.state != "dead"]
        if self.teacher_actor is not None:
            closing.append(self.teacher_actor.close.remote())
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        for handle in [w.handle for w in self.workers] + [self.teacher_actor]:
            if handle is not None:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # already gone
                    pass
        self.workers, self.teacher_actor = [], None
        _reap_local_containers(self.config.sandbox)
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
        self._started = False

    # -- scheduling ---------------------------------------------------------------------------

    def plan(self, episode: int) -> tuple[str, int]:
        """(task id, seed) of an episode id: the local runner's numbering."""
        return self.config.plan(episode, self.task_ids)

    def play(self, episodes: Iterable[int], *, stop: Interrupt | None = None
             ) -> Iterator[EpisodeResult]:
        """Play `episodes` (ids), yielding each as it finishes, in any order, each id once.

        With `stop`: nothing new is submitted once it is stopping, and once it is cancelled
        the episodes still in flight are abandoned (not yielded)."""
        import ray
        from ray.exceptions import RayActorError

        self.start()
        pending: deque[tuple[int, int]] = deque((int(e), 1) for e in dict.fromkeys(episodes))
        inflight: dict[Any, tuple[str, int, int, int]] = {}  # ref -> (kind, worker, ep, attempt)
        reported: set[int] = set()
        k = self.options.episodes_per_worker
        while pending or inflight:
            if stop is not None and stop.stopping.is_set():
                pending.clear()
                if stop.cancelled.is_set() or stop.overdue():
                    if not stop.cancelled.is_set():
                        stop.say("grace period over: cancelling the running episodes")
                        stop.cancel()
                    for ref, (kind, *_rest) in list(inflight.items()):
                        if kind == "play":
                            ray.cancel(ref, force=False)
                    return
                if not any(kind == "play" for kind, *_rest in inflight.values()):
                    return
            tick = time.perf_counter()
            for index, worker in sorted(enumerate(self.workers), key=lambda w: w[1].load):
                while worker.state == "ready" and worker.load < k and pending:
                    episode, attempt = pending.popleft()
                    task_id, seed = self.plan(episode)
                    ref = worker.handle.play.remote(episode, task_id, seed)
                    inflight[ref] = ("play", index, episode, attempt)
                    worker.load += 1
                    self.stats.submitted += 1
            self.stats.schedule_seconds += time.perf_counter() - tick
            if not inflight and all(w.state == "dead" for w in self.workers):
                for episode, attempt in pending:
                    yield EpisodeResult(episode, None, "every Ray worker died", attempt - 1)
                return
            self._ping_recovering(inflight)
            if not inflight:
                time.sleep(RETRY_PING_S)
                continue
            tick = time.perf_counter()
            waiting = any(w.ping_at is not None for w in self.workers)
            ready, _ = ray.wait(list(inflight), num_returns=1,  # a timeout: Ctrl-C is seen
                                timeout=RETRY_PING_S if waiting or stop is not None else None)
            self.stats.wait_seconds += time.perf_counter() - tick
            for ref in ready:
                kind, index, episode, attempt = inflight.pop(ref)
                worker = self.workers[index]
                if kind == "ping":  # a restarted worker answers, or Ray gave up on it
                    try:
                        ray.get(ref)
                        worker.state, worker.ping_at = "ready", None
                    except RayActorError:  # still restarting, or gone for good
                        gone = (worker.deaths > self.options.max_restarts
                                or time.monotonic() > worker.recover_by)
                        worker.state = "dead" if gone else "recovering"
                        worker.ping_at = None if gone else time.monotonic() + RETRY_PING_S
                    continue
                worker.load -= 1
                try:
                    result = ray.get(ref)
                except RayActorError as exc:
                    self._lost(index)
                    if attempt < self.options.max_attempts:
                        pending.appendleft((episode, attempt + 1))
                        self.stats.requeued += 1
                    elif episode not in reported:
                        reported.add(episode)
                        yield EpisodeResult(episode, None, f"its worker died {attempt} times "
                                            f"({type(exc).__name__})", attempt, index)
                    continue
                if episode in reported:
                    continue
                reported.add(episode)
                self.stats.per_worker[index] = self.stats.per_worker.get(index, 0) + 1
                outcome = EpisodeOutcome.from_dict(result)
                yield EpisodeResult(episode, outcome.row, outcome.error, attempt, index)

    def verify(self, episodes: Iterable[int]) -> list[str]:
        """Check the tasks `episodes` would play before any is played, as `run_rollout` does
        (`opd_gym.runs.verify`), in the first worker (where the sandboxes are; its episodes
        reuse those calibrations): UnverifiableTaskError names the tasks that no grade can
        vouch for, or with `config.skip_unverifiable` the plan goes on without them. Returns
        (and plans with) the task ids kept."""
        import ray

        self.start()
        try:
            ids, said = ray.get(self.workers[0].handle.verify.remote(
                list(self.task_ids), [int(e) for e in episodes]))
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, OPDGymError):
                raise exc.cause from None  # one line, not the actor's traceback
            raise
        for line in said:
            print(f"opd-gym rollout: {line}", file=sys.stderr, flush=True)
        self.task_ids = list(ids)
        return self.task_ids

    def _lost(self, index: int) -> None:
        """A worker died: count it once and watch for Ray's restart with a ping."""
        worker = self.workers[index]
        if worker.state != "ready":
            return
        worker.state = "recovering"
        worker.deaths += 1
        worker.recover_by = time.monotonic() + RESTART_TIMEOUT_S
        worker.ping_at = time.monotonic()
        self.stats.worker_deaths += 1

    def _ping_recovering(self, inflight: dict[Any, tuple[str, int, int, int]]) -> None:
        """Ask each recovering worker whose time has come whether Ray restarted it."""
        now = time.monotonic()
        for index, worker in enumerate(self.workers):
            if worker.state == "recovering" and worker.ping_at is not None \
                    and worker.ping_at <= now:
                worker.ping_at = None
                inflight[worker.handle.info.remote()] = ("ping", index, -1, 0)

    def record(
        self,
        *,
        on_episode: Callable[[dict[str, Any], dict[str, float]], None] | None = None,
        progress: bool = True,
        grace: float = DEFAULT_GRACE_S,
    ) -> RunSummary:
        """Play the config's episodes into its run directory (resume, summary, progress bar).

        The driver alone appends rows (one fsync'd write each, through `RunDirectory`), so a
        killed driver resumes with `resume=True` like the local runner; an episode that
        raised is counted as a failure and its partial row kept (`finished: false`). Ctrl-C
        works as in the local runner (`opd_gym.runs.interrupt`); the summary counts every row
        of the run."""
        config = self.config
        run = RunDirectory(config.out_dir)
        done = run.open_for_run(resume=config.resume)
        todo = [i for i in range(config.episodes) if i not in done]
        started = time.perf_counter()
        if config.calibrations is not None and todo:  # the store as this host sees it
            from opd_gym.runs.verify import calibrated_line

            line = calibrated_line(config.calibrations, self.tasks, self.task_ids)
            print(f"opd-gym rollout: {line}", file=sys.stderr, flush=True)
        if config.verify_tasks and todo:  # before the first episode, as the local runner
            self.verify(todo)
        bar = Progress(len(todo), progress)
        sink = RowSink(run, on_episode=on_episode, progress=bar)
        in_flight = self.options.workers * self.options.episodes_per_worker
        stop = Interrupt(grace, running=lambda: min(in_flight, len(todo)))
        aborted = False
        with stop.installed():
            try:
                for result in self.play(todo, stop=stop):
                    row, error = result.row, result.error
                    if stop.cancelled.is_set():  # ended on a closed sandbox: not a result
                        row, error = (None if row is None else mark_interrupted(row)), None
                    sink(EpisodeOutcome(result.episode, row, error))
            except KeyboardInterrupt:  # the second Ctrl-C: abort now
                aborted = True
                stop.cancel()
            finally:
                bar.close()
        summary = RunSummary.of_rows(
            run.episodes(), repeat=config.repeat, skipped=len(done), failures=sink.failures,
            config=plain_config(config),
            seconds=time.perf_counter() - started,
            interrupted=aborted or stop.deadline is not None)
        summary.config["ray"] = {k: v for k, v in vars(self.options).items()
                                 if k != "runtime_env"}
        run.write_summary(summary.to_dict())
        if aborted:
            raise KeyboardInterrupt
        return summary

    def batches(self, episodes: Iterable[int], batch_size: int) -> Iterator[list[EpisodeRow]]:
        """Finished episodes (rows with their OPD records) in batches as they complete.

        Episodes that failed are left out (see `play` for every outcome); the last batch may
        be smaller."""
        batch: list[EpisodeRow] = []
        for result in self.play(episodes):
            if result.ok:
                batch.append(result.row)  # type: ignore[arg-type]
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch


def run_ray_rollout(
    config: RolloutConfig,
    make_agent: Callable[[Any], Any],
    *,
    teacher: Any = None,
    judge: Any = FROM_CONFIG,
    options: RayOptions | None = None,
    on_episode: Callable[[dict[str, Any], dict[str, float]], None] | None = None,
    progress: bool = True,
    grace: float = DEFAULT_GRACE_S,
) -> RunSummary:
    """`run_rollout` on Ray: same run directory, resume, Ctrl-C, progress bar and summary."""
    with RayRollout(config, make_agent, teacher=teacher, judge=judge, options=options) as ray_run:
        return ray_run.record(on_episode=on_episode, progress=progress, grace=grace)


def _reap_local_containers(sandbox: Any) -> None:
    """Remove this host's containers whose owner process died (a killed worker's)."""
    name = sandbox if isinstance(sandbox, str) else (sandbox or {}).get("backend", "")
    if name != "docker":
        return
    try:
        from opd_gym.sandboxes.docker import DockerEngine
        from opd_gym.sandboxes.reaper import prune

        prune(DockerEngine())
    except Exception:  # best effort: the next pool on this node reaps them too
        pass


__all__ = ["EpisodeResult", "RayOptions", "RayRollout", "run_ray_rollout"]
