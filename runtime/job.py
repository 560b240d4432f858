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
from ..savepoint.types.hashing import default_max_parallelism
from .config import CheckpointingMode, RestartStrategies
from .coordinator import CheckpointCoordinator, CheckpointFailureReason, CheckpointStats, CompletedCheckpoint
from .datastream import FORWARD, REBALANCE, StreamNode
from .operators import OperatorInfo, create_operator
from .restore import OperatorTarget, plan_restore, read_max_parallelism
from .task import InputGate, RecordWriter, Task

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


class JobExecutionException(RuntimeError):
    def __init__(self, message: str, result: JobExecutionResult):
        super().__init__(message)
        self.result = result


@dataclass(eq=False)
class Chain:
    id: int
    nodes: list[StreamNode]

    @property
    def head(self) -> StreamNode:
        return self.nodes[0]

    @property
    def tail(self) -> StreamNode:
        return self.nodes[-1]

    @property
    def parallelism(self) -> int:
        return self.head.resolved_parallelism

    @property
    def is_source(self) -> bool:
        return self.head.kind == "source"

    @property
    def name(self) -> str:
        return " -> ".join(n.name for n in self.nodes)


def build_chains(nodes: list[StreamNode], default_parallelism: int, env_max_parallelism: int | None) -> list[Chain]:
    for n in nodes:
        n.resolved_parallelism = n.parallelism or default_parallelism
        maxp = n.max_parallelism or env_max_parallelism or default_max_parallelism(n.resolved_parallelism)
        if n.resolved_parallelism > maxp:
            raise FStateError(f"operator {n.display}: parallelism {n.resolved_parallelism} exceeds its max "
                              f"parallelism {maxp}")
        n.resolved_max_parallelism = maxp
    for n in nodes:
        for e in n.outputs:
            if e.partitioning == FORWARD and e.source.resolved_parallelism != e.target.resolved_parallelism:
                e.partitioning = REBALANCE
    chains: list[Chain] = []
    chain_of: dict[int, Chain] = {}
    for n in nodes:  # nodes are in creation order: inputs come first
        prev = None
        if len(n.inputs) == 1 and n.kind != "source":
            e = n.inputs[0]
            up = e.source
            if (e.partitioning == FORWARD and len(up.outputs) == 1 and up.chaining and n.chaining
                    and up.resolved_parallelism == n.resolved_parallelism):
                prev = chain_of[up.id]
        if prev is not None and prev.tail is n.inputs[0].source:
            prev.nodes.append(n)
            chain_of[n.id] = prev
        else:
            c = Chain(len(chains), [n])
            chains.append(c)
            chain_of[n.id] = c
    return chains


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

    def post_sources(self, msg: tuple) -> None:
        for t in self.sources:
            t.post(msg)

    def post_all(self, msg: tuple) -> None:
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
        self.chains = build_chains(nodes, env.parallelism, env.max_parallelism)
        self._adopt_max_parallelism()
        first_id = 1
        if self.initial_restore:
            from ..savepoint.loader import Savepoint

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
    def post(self, event: tuple) -> None:
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
            self._reject_client_requests()

    def _reject_client_requests(self) -> None:
        """Requests that arrived too late: the job is no longer running."""
        while True:
            try:
                ev = self.events.get_nowait()
            except queue.Empty:
                return
            if ev[0].startswith("client_") and len(ev) > 1 and isinstance(ev[1], Future) and not ev[1].done():
                ev[1].set_exception(RuntimeError(f"job {self.job_id} is not running ({self.status.value})"))

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
                for e in c.head.inputs:
                    if e.partitioning == FORWARD:
                        channel[(id(e), i, i)] = n
                        n += 1
                    else:
                        for j in range(chain_of[e.source.id].parallelism):
                            channel[(id(e), j, i)] = n
                            n += 1
                gates[(c.id, i)] = InputGate(n, self.GATE_BUFFERS_PER_CHANNEL * n)
        for c in self.chains:
            for j in range(c.parallelism):
                writers = []
                for e in c.tail.outputs:
                    down = chain_of[e.target.id]
                    if e.partitioning == FORWARD:
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
        self._stop: tuple | None = None
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

    def _handle(self, ev: tuple, a: Attempt):
        kind = ev[0]
        if kind.startswith("client_"):
            return self._handle_client(ev)
        if ev[1] != a.number:
            return None  # from an earlier attempt
        if kind == "task_failed":
            _, _, name, exc, tb = ev
            log.warning("%s switched from RUNNING to FAILED (attempt %d): %s: %s", name, a.number,
                        type(exc).__name__, exc)
            log.debug("%s", tb)
            return "failed", exc
        if kind == "job_failure":
            log.warning("Job %s fails: %s: %s", self.job_id, type(ev[2]).__name__, ev[2])
            return "failed", ev[2]
        if kind == "task_finished":
            a.finished.add(ev[2])
            if len(a.finished) == len(a.tasks):
                return "finished", None
        elif kind == "source_exhausted":
            a.exhausted.add(ev[2])
            if len(a.exhausted) == len(a.sources) and not self._finishing:
                self._finishing = True
                if self.checkpointing:
                    self.coordinator.periodic_stopped = True
                    self._need_final = True
                    self._trigger_final()
                else:
                    a.post_sources(("finish",))
        elif kind == "checkpoint_ready":
            self.coordinator.finalize(ev[2])
        elif kind == "checkpoint_declined":
            _, _, cid, reason, cause, task_name = ev
            self.coordinator.on_declined(cid, reason, cause, task_name)
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

    def _handle_client(self, ev: tuple):
        kind = ev[0]
        if kind == "client_cancel":
            return "canceled", None
        if kind == "client_kill":
            return "killed", None
        fut: Future = ev[1]
        try:
            if kind == "client_savepoint":
                self.coordinator.trigger("savepoint", directory=ev[2], future=fut)
            elif kind == "client_checkpoint":
                self.coordinator.trigger("checkpoint", future=fut)
            elif kind == "client_stop":
                self.coordinator.periodic_stopped = True
                self._stop = (fut,)
                self.coordinator.trigger("sync-savepoint", directory=ev[2], drain=ev[3], future=fut)
        except Exception as e:  # noqa: BLE001
            if kind == "client_stop" and not self._finishing:
                self.coordinator.periodic_stopped = False
            if not fut.done():
                fut.set_exception(e)
        return None

    # coordinator listener ---------------------------------------------------------------------
    def checkpoint_completed(self, p, c: CompletedCheckpoint) -> None:
        if p.final or p.kind == "sync-savepoint":
            if p.kind == "sync-savepoint":
                self.savepoint_path = c.path
            self.coordinator.periodic_stopped = True
            self.attempt.post_sources(("finish",))

    def checkpoint_aborted(self, p, reason) -> None:
        if self.attempt is None or p.attempt != self.attempt.number:
            return
        if p.final and reason != CheckpointFailureReason.JOB_FAILOVER_REGION:
            self._need_final = True
        if p.kind == "sync-savepoint":
            self.attempt.post_sources(("resume",))
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

    def _request(self, event: tuple, timeout: float | None) -> str:
        if self._m.result.done():
            raise RuntimeError(f"job {self._m.job_id} is not running ({self._m.status.value})")
        fut: Future = Future()
        self._m.post((event[0], fut, *event[1:]))
        if self._m.result.done():  # ended while posting
            self._m._reject_client_requests()
        try:
            return fut.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"{event[0][len('client_'):]} did not complete within {timeout} s") from None

    def trigger_savepoint(self, directory: str | None = None, timeout: float | None = 60) -> str:
        """Take a savepoint (the job keeps running); returns its path."""
        return self._request(("client_savepoint", directory), timeout)

    def trigger_checkpoint(self, timeout: float | None = 60) -> str:
        """Take a checkpoint now; returns its ``chk-<n>`` path."""
        return self._request(("client_checkpoint",), timeout)

    def stop_with_savepoint(self, directory: str | None = None, drain: bool = False,
                            timeout: float | None = 60) -> str:
        """Stop the sources, take a savepoint, commit, and finish the job. With ``drain`` the
        sources first emit the final watermark (every event-time timer fires)."""
        path = self._request(("client_stop", directory, drain), timeout)
        try:
            self._m.result.result(timeout)
        except Exception:  # noqa: BLE001 - reported by get_job_execution_result
            pass
        return path

    def cancel(self, timeout: float | None = 60) -> None:
        self._m.post(("client_cancel",))
        try:
            self._m.result.result(timeout)
        except Exception:  # noqa: BLE001
            pass

    def kill(self, timeout: float | None = 60) -> None:
        """Test hook: end the job the way a crashed process would (no retention clean-up, no
        final commit); restore a new job from what is on disk."""
        self._m.post(("client_kill",))
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
