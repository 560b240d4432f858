"""The job master: builds the job graph (operator chains), deploys one execution attempt (a thread
per subtask, channels between them), drives the checkpoint coordinator, and on a failure cancels
the attempt, consults the restart strategy and redeploys from the latest completed checkpoint.

Bounded jobs end the way Flink 2.x ends them: when every source reached the end of its input,
a final checkpoint is taken (so two-phase-commit sinks commit the last data), then the sources
send end-of-stream and every task finishes.
"""

from __future__ import annotations

import copy
import enum
import logging
import queue
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from ..savepoint.errors import FStateError
from ..savepoint.loader import Savepoint
from .checkpointing.config import CheckpointingMode
from .checkpointing.restarts import RestartStrategies
from .api.context import OperatorInfo
from .checkpointing.coordinator import (CheckpointCoordinator, CheckpointStats, CompletedCheckpoint,
                                        StopWithSavepointError)
from .events import (AnsweredRequest, CancelRequest, CheckpointDeclined, CheckpointFailureReason, CheckpointReady,
                     CheckpointRequest, ClientRequest, FinishSource, JobEvent, JobFailure, KillRequest, ResumeSource,
                     SavepointRequest, SourceExhausted, StopWithSavepointRequest, TaskFailed, TaskFinished, TaskMail)
from .graph import Partitioning, StreamNode, build_chains
from .operators.windowing import create_operator
from .checkpointing.restore import OperatorTarget, plan_restore, read_max_parallelism
from .task import InputGate, RecordWriter, Task
from .exceptions import JobExecutionException

log = logging.getLogger("fstate.runtime.job")


class JobStatus(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.CANCELED, JobStatus.FINISHED, JobStatus.FAILED)


@dataclass
class JobExecutionResult:
    job_id: str
    job_name: str
    status: JobStatus
    net_runtime_ms: int
    restarts: int
    failures: list[str] = field(default_factory=list)
    checkpoints: list[CompletedCheckpoint] = field(default_factory=list)
    stats: CheckpointStats = field(default_factory=CheckpointStats)
    savepoint_path: str | None = None
    restored_from: str | None = None

    @property
    def completed_checkpoint_ids(self) -> list[int]:
        return [c.checkpoint_id for c in self.checkpoints if not c.is_savepoint]


class Attempt:
    """One execution attempt of the whole job (a global failover starts a new one)."""

    def __init__(self, number: int):
        self.number = number
        self.cancelled = threading.Event()
        self.tasks: dict[tuple, Task] = {}
        self.sources: list[Task] = []
        self.finished: set = set()
        self.exhausted: set = set()
        self.started = False

    def add(self, task: Task) -> None:
        self.tasks[task.key] = task
        if task.is_source:
            self.sources.append(task)

    def post_sources(self, msg: TaskMail) -> None:
        for t in self.sources:
            t.post(msg)

    def post_all(self, msg: TaskMail) -> None:
        for t in self.tasks.values():
            t.post(msg)

    def all_running(self) -> bool:
        return self.started and not self.finished and not self.cancelled.is_set()

    def start(self) -> None:
        self.started = True
        for t in self.tasks.values():
            t.start()

    def cancel(self) -> None:
        self.cancelled.set()

    def join(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for t in self.tasks.values():
            t.thread.join(max(0.0, deadline - time.monotonic()))
            if t.thread.is_alive():
                log.warning("Task %s did not stop within %.0f s of being cancelled.", t.name, timeout)


class JobMaster:
    GATE_BUFFERS_PER_CHANNEL = 8

    def __init__(self, env, job_name: str, job_id: str, nodes: list[StreamNode]):
        self.env = env
        self.job_name = job_name
        self.job_id = job_id
        self.nodes = nodes
        self.clock = env.clock
        self.injector = env.failure_injector
        cc = env.checkpoint_config
        self.aligned = cc.mode == CheckpointingMode.EXACTLY_ONCE
        self.checkpointing = cc.is_checkpointing_enabled()
        self.source_batch = env.source_batch_size
        self.batch_size = env.network_batch_size
        self.initial_restore = env.restore_path
        self.allow_non_restored = env.allow_non_restored_state
        self.events: queue.Queue = queue.Queue()
        self.attempt: Attempt | None = None
        self.status = JobStatus.CREATED
        self.failures: list[str] = []
        self.restarts = 0
        self.savepoint_path: str | None = None
        #: the answer of a stop-with-savepoint in progress, and its savepoint once completed
        self._stop_future: Future | None = None
        self._stop_savepoint: CompletedCheckpoint | None = None
        self.chains = build_chains(nodes, env.parallelism, env.max_parallelism)
        self._adopt_max_parallelism()
        first_id = 1
        if self.initial_restore:
            first_id = Savepoint.open(self.initial_restore).metadata.checkpoint_id + 1
        self.coordinator = CheckpointCoordinator(self, cc, env.savepoint_dir, self.clock, self.injector, first_id)
        self.coordinator.listener = self
        rs = env.restart_strategy
        if rs is None:
            rs = (RestartStrategies.exponential_delay_restart() if self.checkpointing
                  else RestartStrategies.no_restart())
        self.restart_strategy = rs.create(seed=0)
        self.result: Future = Future()
        self.thread = threading.Thread(target=self._main, name=f"fstate-jobmaster-{job_id[:8]}", daemon=True)
        self._poll = max(0.002, min(0.02, cc.interval_ms / 10_000)) if self.checkpointing else 0.02
        self._status_lock = threading.Lock()

    # ------------------------------------------------------------------------------------------
    def post(self, event: JobEvent) -> None:
        self.events.put(event)

    def start(self) -> None:
        self.thread.start()

    def _set_status(self, status: JobStatus) -> None:
        with self._status_lock:
            old, self.status = self.status, status
        if old != status:
            log.info("Job %s (%s) switched from state %s to %s.", self.job_name, self.job_id, old.value, status.value)

    def _targets(self) -> list[OperatorTarget]:
        return [OperatorTarget(n.operator_id, n.display, n.resolved_parallelism, n.resolved_max_parallelism,
                               n.max_parallelism is not None or self.env.max_parallelism is not None)
                for n in self.nodes]

    def _adopt_max_parallelism(self) -> None:
        if not self.initial_restore:
            return
        adopted = read_max_parallelism(self.initial_restore, self._targets())
        for n in self.nodes:
            if n.operator_id in adopted:
                n.resolved_max_parallelism = adopted[n.operator_id]

    # ------------------------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.result.set_result(self._run())
        except BaseException as e:  # noqa: BLE001
            self.result.set_exception(e)
        finally:
            self._fail_stop(f"the job ended {self.status.value} before it finished")
            self._reject_client_requests()

    def _fail_stop(self, why: str, failover: bool = False) -> None:
        """A stop-with-savepoint in progress did not end the job: it raises, no path returned."""
        future, taken = self._stop_future, self._stop_savepoint
        self._stop_future = self._stop_savepoint = None
        if future is None or future.done():
            return
        if taken is None:
            future.set_exception(StopWithSavepointError(f"Stop-with-savepoint of job {self.job_id} failed: {why}."))
            return
        then = (" The job recovers from that savepoint and, if its restart strategy allows, keeps RUNNING; "
                "stop it again." if failover else "")
        future.set_exception(StopWithSavepointError(
            f"Stop-with-savepoint of job {self.job_id} failed: {why} after savepoint {taken.checkpoint_id} was taken "
            f"({taken.path}).{then}"))

    def _reject_client_requests(self) -> None:
        """Requests that arrived too late: the job is no longer running."""
        while True:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return
            if isinstance(ev, AnsweredRequest) and not ev.future.done():
                ev.future.set_exception(RuntimeError(f"job {self.job_id} is not running ({self.status.value})"))

    def _result(self, t0: float) -> JobExecutionResult:
        return JobExecutionResult(self.job_id, self.job_name, self.status, int((time.monotonic() - t0) * 1000),
                                  self.restarts, list(self.failures), list(self.coordinator.all_completed),
                                  self.coordinator.stats, self.savepoint_path, self.initial_restore)

    def _run(self) -> JobExecutionResult:
        t0 = time.monotonic()
        self._set_status(JobStatus.RUNNING)
        number = 0
        while True:
            latest = self.coordinator.latest_completed()
            path = latest.path if latest is not None else self.initial_restore
            try:
                plan = None
                if path:
                    plan = plan_restore(path, self._targets(),
                                        self.allow_non_restored if latest is None else False)
                    log.info("Restoring job %s from %s %d @ %s.", self.job_id,
                             "Checkpoint" if latest is not None else "savepoint/checkpoint", plan.checkpoint_id, path)
                self.attempt = self._deploy(number, plan)
            except FStateError as e:
                return self._fail_terminally(t0, e, f"Could not restore the job from {path}")
            self.attempt.start()
            outcome, exc = self._monitor()
            if outcome == "finished":
                self._set_status(JobStatus.FINISHED)
                if self._stop_savepoint is not None and not self._stop_future.done():
                    self.savepoint_path = self._stop_savepoint.path
                    self._stop_future.set_result(self.savepoint_path)
                    self._stop_future = self._stop_savepoint = None
                self.coordinator.shutdown("FINISHED")
                return self._result(t0)
            if outcome == "canceled":
                self._set_status(JobStatus.CANCELLING)
                self.attempt.cancel()
                self.attempt.join()
                self._set_status(JobStatus.CANCELED)
                self.coordinator.shutdown("CANCELED")
                return self._result(t0)
            if outcome == "killed":
                self.attempt.cancel()
                self.attempt.join()
                self.coordinator.shutdown("KILLED")
                self._set_status(JobStatus.FAILED)
                raise JobExecutionException("Job was killed (simulated process crash).", self._result(t0))
            # a failure: global failover
            self.failures.append(f"{type(exc).__name__}: {exc}")
            self._set_status(JobStatus.RESTARTING)
            self.coordinator.abort_all(CheckpointFailureReason.JOB_FAILOVER_REGION)
            self._fail_stop(f"the job failed over ({type(exc).__name__}: {exc})", failover=True)
            self.attempt.cancel()
            self.attempt.join()
            if isinstance(exc, FStateError):
                return self._fail_terminally(t0, exc, "The job cannot run with its state")
            self.restart_strategy.notify_failure(self.clock.now_ms())
            if not self.restart_strategy.can_restart():
                log.error("Recovery is suppressed by %s", self.restart_strategy.describe())
                return self._fail_terminally(t0, exc, "Job execution failed")
            delay = self.restart_strategy.backoff_ms()
            log.info("Restarting job %s (attempt %d) in %d ms, from %s.", self.job_id, number + 1, delay,
                     (self.coordinator.latest_completed().path if self.coordinator.latest_completed()
                      else self.initial_restore or "no checkpoint (from the beginning)"))
            self.clock.sleep_ms(delay)
            self.restarts += 1
            number += 1
            self._set_status(JobStatus.RUNNING)

    def _fail_terminally(self, t0: float, exc: BaseException, message: str):
        if f"{type(exc).__name__}: {exc}" not in self.failures:
            self.failures.append(f"{type(exc).__name__}: {exc}")
        if self.attempt is not None:
            self.attempt.cancel()
            self.attempt.join()
        self._set_status(JobStatus.FAILED)
        self.coordinator.shutdown("FAILED")
        err = JobExecutionException(f"{message}: {type(exc).__name__}: {exc}", self._result(t0))
        raise err from exc

    # ------------------------------------------------------------------------------------------
    def _deploy(self, number: int, plan) -> Attempt:
        attempt = Attempt(number)
        chain_of = {n.id: c for c in self.chains for n in c.nodes}
        gates: dict[tuple[int, int], InputGate] = {}
        channel: dict[tuple[int, int, int], int] = {}
        for c in self.chains:
            if c.is_source:
                continue
            for i in range(c.parallelism):
                n = 0
                channel_inputs = []  # the input (type number) each channel feeds
                for e in c.head.inputs:
                    if e.partitioning == Partitioning.FORWARD:
                        channel[(id(e), i, i)] = n
                        n += 1
                        channel_inputs.append(e.type_number)
                    else:
                        for j in range(chain_of[e.source.id].parallelism):
                            channel[(id(e), j, i)] = n
                            n += 1
                            channel_inputs.append(e.type_number)
                gates[(c.id, i)] = InputGate(n, self.GATE_BUFFERS_PER_CHANNEL * n, channel_inputs)
        for c in self.chains:
            for j in range(c.parallelism):
                writers = []
                for e in c.tail.outputs:
                    down = chain_of[e.target.id]
                    if e.partitioning == Partitioning.FORWARD:
                        targets = [(gates[(down.id, j)], channel[(id(e), j, j)])]
                    else:
                        targets = [(gates[(down.id, i)], channel[(id(e), j, i)]) for i in range(down.parallelism)]
                    writers.append(RecordWriter(e, targets, j, self.batch_size, attempt.cancelled))
                ops = []
                restores = {}
                for node in c.nodes:
                    op = create_operator(node)
                    op.function = copy.deepcopy(node.function)
                    op.setup(OperatorInfo(self.job_id, self.job_name, node.name, node.effective_uid, j,
                                          node.resolved_parallelism, node.resolved_max_parallelism, number,
                                          self.clock, self.checkpointing))
                    ops.append(op)
                    if plan is not None:
                        r = plan.for_subtask(node.operator_id, j)
                        if r is not None:
                            restores[node.id] = r
                attempt.add(Task(self, attempt, c, j, ops, gates.get((c.id, j)), writers, restores,
                                 plan.checkpoint_id if plan is not None else None))
        return attempt

    # ------------------------------------------------------------------------------------------
    def _monitor(self):
        a = self.attempt
        self._finishing = False
        self._need_final = False
        coord = self.coordinator
        coord.periodic_stopped = False
        while True:
            try:
                ev = self.events.get(timeout=self._poll)
            except queue.Empty:
                ev = None
            if ev is not None:
                out = self._handle(ev, a)
                if out is not None:
                    return out
            coord.tick()
            if self._need_final:
                self._trigger_final()

    def _handle(self, ev: JobEvent, a: Attempt):
        if isinstance(ev, ClientRequest):
            return self._handle_client(ev)
        if ev.attempt != a.number:
            return None  # from an earlier attempt
        match ev:
            case TaskFailed(task_name=name, error=exc, traceback=tb):
                log.warning("%s switched from RUNNING to FAILED (attempt %d): %s: %s", name, a.number,
                            type(exc).__name__, exc)
                log.debug("%s", tb)
                return "failed", exc
            case JobFailure(error=exc):
                log.warning("Job %s fails: %s: %s", self.job_id, type(exc).__name__, exc)
                return "failed", exc
            case TaskFinished(task=task):
                a.finished.add(task)
                if len(a.finished) == len(a.tasks):
                    return "finished", None
            case SourceExhausted(task=task):
                a.exhausted.add(task)
                if len(a.exhausted) == len(a.sources) and not self._finishing:
                    self._finishing = True
                    if self.checkpointing:
                        self.coordinator.periodic_stopped = True
                        self._need_final = True
                        self._trigger_final()
                    else:
                        a.post_sources(FinishSource())
            case CheckpointReady(checkpoint_id=cid):
                self.coordinator.finalize(cid)
            case CheckpointDeclined(checkpoint_id=cid, reason=reason, cause=cause, task_name=task_name):
                self.coordinator.on_declined(cid, reason, cause, task_name)
            case _:
                raise TypeError(f"unknown job event {ev!r}")
        return None

    def _trigger_final(self) -> None:
        if any(p.final for p in self.coordinator.pending.values()):
            self._need_final = False
            return
        try:
            self.coordinator.trigger("checkpoint", final=True)
            self._need_final = False
        except Exception as e:  # noqa: BLE001 - retried on the next tick
            log.debug("final checkpoint not triggered yet: %s", e)

    def _handle_client(self, request: ClientRequest):
        if isinstance(request, CancelRequest):
            return "canceled", None
        if isinstance(request, KillRequest):
            return "killed", None
        if not isinstance(request, AnsweredRequest):
            raise TypeError(f"unknown client request {request!r}")
        future = request.future
        try:
            match request:
                case SavepointRequest(directory=directory):
                    self.coordinator.trigger("savepoint", directory=directory, future=future)
                case CheckpointRequest():
                    self.coordinator.trigger("checkpoint", future=future)
                case StopWithSavepointRequest(directory=directory, drain=drain):
                    self.coordinator.periodic_stopped = True
                    self._stop_future, self._stop_savepoint = future, None
                    self.coordinator.trigger("sync-savepoint", directory=directory, drain=drain, future=future)
                case _:
                    raise TypeError(f"unknown client request {request!r}")
        except Exception as e:  # noqa: BLE001
            if isinstance(request, StopWithSavepointRequest) and not self._finishing:
                self.coordinator.periodic_stopped = False
            if not future.done():
                future.set_exception(e)
        return None

    # coordinator listener ---------------------------------------------------------------------
    def checkpoint_completed(self, p, c: CompletedCheckpoint) -> None:
        if p.final or p.kind == "sync-savepoint":
            if p.kind == "sync-savepoint":
                self._stop_future, self._stop_savepoint = p.future, c  # answered when the job finished
            self.coordinator.periodic_stopped = True
            self.attempt.post_sources(FinishSource())

    def checkpoint_aborted(self, p, reason) -> None:
        if self.attempt is None or p.attempt != self.attempt.number:
            return
        if p.final and reason != CheckpointFailureReason.JOB_FAILOVER_REGION:
            self._need_final = True
        if p.kind == "sync-savepoint":
            self.attempt.post_sources(ResumeSource())
            if not self._finishing:
                self.coordinator.periodic_stopped = False


class JobClient:
    """Handle of a job started with ``execute_async``."""

    def __init__(self, master: JobMaster):
        self._m = master

    @property
    def job_id(self) -> str:
        return self._m.job_id

    def get_job_id(self) -> str:
        return self._m.job_id

    def get_job_status(self) -> JobStatus:
        return self._m.status

    def _request(self, request: AnsweredRequest, timeout: float | None) -> str:
        if self._m.result.done():
            raise RuntimeError(f"job {self._m.job_id} is not running ({self._m.status.value})")
        self._m.post(request)
        if self._m.result.done():  # ended while posting
            self._m._reject_client_requests()
        try:
            return request.future.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"{request.operation} did not complete within {timeout} s") from None

    def trigger_savepoint(self, directory: str | None = None, timeout: float | None = 60) -> str:
        """Take a savepoint (the job keeps running); returns its path."""
        return self._request(SavepointRequest(Future(), directory), timeout)

    def trigger_checkpoint(self, timeout: float | None = 60) -> str:
        """Take a checkpoint now; returns its ``chk-<n>`` path."""
        return self._request(CheckpointRequest(Future()), timeout)

    def stop_with_savepoint(self, directory: str | None = None, drain: bool = False,
                            timeout: float | None = 60) -> str:
        """Stop the sources, take a savepoint, commit, and finish the job; returns the savepoint's
        path once the job FINISHED. With ``drain`` the sources first emit the final watermark
        (every event-time timer fires).

        Raises CheckpointException when the savepoint could not be taken (the job keeps running)
        and StopWithSavepointError when the job failed or was cancelled after the savepoint was
        taken (a commit failed, say): no path is returned then; a job that failed over recovers
        from that savepoint (so nothing it committed is committed twice) and, if its restart
        strategy allows, keeps RUNNING."""
        path = self._request(StopWithSavepointRequest(Future(), directory, drain), timeout)
        try:
            self._m.result.result(timeout)
        except Exception:  # noqa: BLE001 - reported by get_job_execution_result
            pass
        return path

    def cancel(self, timeout: float | None = 60) -> None:
        self._m.post(CancelRequest())
        try:
            self._m.result.result(timeout)
        except Exception:  # noqa: BLE001
            pass

    def kill(self, timeout: float | None = 60) -> None:
        """Test hook: end the job the way a crashed process would (no retention clean-up, no
        final commit); restore a new job from what is on disk."""
        self._m.post(KillRequest())
        try:
            self._m.result.result(timeout)
        except Exception:  # noqa: BLE001
            pass

    def get_job_execution_result(self, timeout: float | None = None) -> JobExecutionResult:
        return self._m.result.result(timeout)

    wait = get_job_execution_result

    def get_checkpoint_stats(self) -> CheckpointStats:
        return self._m.coordinator.stats

    def completed_checkpoints(self) -> list[CompletedCheckpoint]:
        return list(self._m.coordinator.all_completed)
