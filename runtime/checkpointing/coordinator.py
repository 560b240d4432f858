"""The checkpoint coordinator: triggers checkpoints and savepoints by sending barriers into the
sources, collects every task's acknowledgement (its state handles), declines and expires
checkpoints with Flink's failure reasons, and completes a checkpoint by writing ``_metadata``
last (``SavepointBuilder``: state files first, then ``_metadata``, then one rename).

Layout as in Flink: checkpoints in ``<checkpoint dir>/<job id>/chk-<n>/`` (plus empty ``shared/``
and ``taskowned/``), savepoints in ``<savepoint dir>/savepoint-<job id prefix>-<random>/``.

Acknowledgements and declines arrive from task threads; everything else (trigger, finalize,
abort, expiry, retention) runs in the job master's thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field

from ...savepoint.builder import SavepointBuilder
from ...savepoint.trailers import CANONICAL_SAVEPOINT_PROPERTIES, CHECKPOINT_PROPERTIES
from .config import CheckpointConfig, ExternalizedCheckpointRetention
from ..events import (CheckpointBarrier, CheckpointDeclined, CheckpointFailureReason, CheckpointReady, JobFailure,
                      NotifyCheckpointAborted, NotifyCheckpointComplete, TriggerCheckpoint, TriggerStopWithSavepoint)
from .failures import InjectedFailure
from ..exceptions import CheckpointException, CheckpointFailureThresholdExceeded, StopWithSavepointError

log = logging.getLogger("fstate.runtime.checkpoint")


#: Failures that count towards ``tolerable-failed-checkpoints`` (Flink's CheckpointFailureManager).
COUNTED_REASONS = {
    CheckpointFailureReason.IO_EXCEPTION, CheckpointFailureReason.CHECKPOINT_ASYNC_EXCEPTION,
    CheckpointFailureReason.CHECKPOINT_DECLINED, CheckpointFailureReason.CHECKPOINT_EXPIRED,
    CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE,
}


class CheckpointFailureManager:
    def __init__(self, tolerable: int):
        self.tolerable = tolerable
        self.continuous = 0
        self._counted: set[int] = set()

    def on_failure(self, checkpoint_id: int, reason: CheckpointFailureReason, is_savepoint: bool) -> bool:
        """True when the job must fail (more continuous failures than tolerable)."""
        if is_savepoint or reason not in COUNTED_REASONS:
            return False
        if checkpoint_id not in self._counted:
            self._counted.add(checkpoint_id)
            self.continuous += 1
        return self.continuous > self.tolerable

    def on_success(self, checkpoint_id: int) -> None:
        self.continuous = 0
        self._counted = {c for c in self._counted if c > checkpoint_id}


@dataclass
class CompletedCheckpoint:
    checkpoint_id: int
    timestamp: int
    path: str
    kind: str  # checkpoint | savepoint | sync-savepoint
    duration_ms: int
    discarded: bool = False

    @property
    def is_savepoint(self) -> bool:
        return self.kind != "checkpoint"


@dataclass(eq=False)
class PendingCheckpoint:
    checkpoint_id: int
    timestamp: int
    kind: str
    builder: SavepointBuilder
    attempt: int
    not_acked: set
    periodic: bool
    final: bool = False
    drain: bool = False
    acks: dict = field(default_factory=dict)
    future: Future | None = None
    ready_posted: bool = False

    @property
    def is_savepoint(self) -> bool:
        return self.kind != "checkpoint"

    @property
    def label(self) -> str:
        return "savepoint" if self.is_savepoint else "checkpoint"


@dataclass
class CheckpointStats:
    triggered: int = 0
    completed: list[int] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)


class CheckpointCoordinator:
    def __init__(self, master, config: CheckpointConfig, savepoint_dir: str | None, clock, injector=None,
                 first_checkpoint_id: int = 1):
        self.master = master
        self.config = config
        self.savepoint_dir = savepoint_dir
        self.clock = clock
        self.injector = injector
        self.next_id = first_checkpoint_id
        self.pending: dict[int, PendingCheckpoint] = {}
        self.completed: list[CompletedCheckpoint] = []  # retained checkpoints, oldest first
        #: the savepoint of the latest stop-with-savepoint: its completion commits, so a failover
        #: after it recovers from it (until a newer checkpoint completes)
        self.latest_stop_savepoint: CompletedCheckpoint | None = None
        self.all_completed: list[CompletedCheckpoint] = []
        self.stats = CheckpointStats()
        self.failure_manager = CheckpointFailureManager(config.tolerable_failures)
        self.listener = None
        self.periodic_enabled = config.is_checkpointing_enabled()
        self.periodic_stopped = False
        self.shut_down = False
        self._lock = threading.Lock()
        now = clock.now_ms()
        self.last_trigger_ms = now
        self.last_completion_ms = now - config.min_pause_ms
        self._temp_storage = None
        base = config.checkpoint_dir
        if base is None:
            base = self._temp_storage = tempfile.mkdtemp(prefix="fstate-checkpoints-")
        self.job_dir = os.path.join(os.path.abspath(base), master.job_id)
        os.makedirs(os.path.join(self.job_dir, "shared"), exist_ok=True)
        os.makedirs(os.path.join(self.job_dir, "taskowned"), exist_ok=True)

    # ------------------------------------------------------------------------------------------
    # triggering (master thread)

    def latest_completed(self) -> CompletedCheckpoint | None:
        """What a failover restores: the newest completed checkpoint, or the savepoint of a
        stop-with-savepoint when it is newer (its completion notified the tasks, so sinks may have
        committed what it covers)."""
        latest = self.completed[-1] if self.completed else None
        stop = self.latest_stop_savepoint
        if stop is not None and (latest is None or stop.checkpoint_id > latest.checkpoint_id):
            return stop
        return latest

    def _savepoint_target(self, directory: str | None) -> str:
        d = directory or self.savepoint_dir
        if not d:
            raise CheckpointException(CheckpointFailureReason.IO_EXCEPTION,
                                      ValueError("No savepoint directory has been specified (state.savepoints.dir "
                                                 "or a target directory)"))
        d = os.path.abspath(d[len("file:"):] if d.startswith("file:") else d)
        return os.path.join(d, f"savepoint-{self.master.job_id[:6]}-{uuid.uuid4().hex[:12]}")

    def trigger(self, kind: str = "checkpoint", *, directory: str | None = None, periodic: bool = False,
                final: bool = False, drain: bool = False, future: Future | None = None) -> PendingCheckpoint:
        """Start a checkpoint or savepoint. Raises CheckpointException when it cannot start."""
        attempt = self.master.attempt
        if self.shut_down:
            raise CheckpointException(CheckpointFailureReason.CHECKPOINT_COORDINATOR_SHUTDOWN)
        if attempt is None or not attempt.all_running():
            raise CheckpointException(CheckpointFailureReason.NOT_ALL_REQUIRED_TASKS_RUNNING)
        if periodic:
            running = [p for p in self.pending.values() if not p.is_savepoint]
            if len(running) >= self.config.max_concurrent:
                raise CheckpointException(CheckpointFailureReason.TOO_MANY_CHECKPOINT_REQUESTS)
            if self.clock.now_ms() - self.last_completion_ms < self.config.min_pause_ms:
                raise CheckpointException(CheckpointFailureReason.MINIMUM_TIME_BETWEEN_CHECKPOINTS)
        cid = self.next_id
        self.next_id += 1  # an id is used up even when the trigger fails (as in Flink)
        ts = self.clock.now_ms()
        try:
            if kind == "checkpoint":
                target, props = os.path.join(self.job_dir, f"chk-{cid}"), CHECKPOINT_PROPERTIES
            else:
                target, props = self._savepoint_target(directory), CANONICAL_SAVEPOINT_PROPERTIES
            builder = SavepointBuilder(target, checkpoint_id=cid, properties=props, overwrite=False)
        except CheckpointException:
            raise
        except Exception as e:  # noqa: BLE001
            raise CheckpointException(CheckpointFailureReason.IO_EXCEPTION, e) from e
        self.last_trigger_ms = ts
        p = PendingCheckpoint(cid, ts, kind, builder, attempt.number, set(attempt.tasks), periodic, final, drain,
                              future=future)
        with self._lock:
            self.pending[cid] = p
        self.stats.triggered += 1
        log.info("Triggering %s %d (type=%s) @ %d for job %s.", p.label, cid,
                 {"checkpoint": "CHECKPOINT", "savepoint": "SAVEPOINT", "sync-savepoint": "SAVEPOINT_SUSPEND"}[kind],
                 ts, self.master.job_id)
        barrier = CheckpointBarrier(cid, ts, builder.temp_dir, kind)
        if kind == "sync-savepoint":
            attempt.post_sources(TriggerStopWithSavepoint(barrier, drain))
        else:
            attempt.post_sources(TriggerCheckpoint(barrier))
        return p

    def tick(self) -> None:
        now = self.clock.now_ms()
        for p in list(self.pending.values()):
            if now - p.timestamp >= self.config.timeout_ms:
                log.info("Checkpoint %d of job %s expired before completing.", p.checkpoint_id, self.master.job_id)
                self.abort(p.checkpoint_id, CheckpointFailureReason.CHECKPOINT_EXPIRED)
        if not self.periodic_enabled or self.periodic_stopped or self.shut_down:
            return
        due = max(self.last_trigger_ms + self.config.interval_ms, self.last_completion_ms + self.config.min_pause_ms)
        if now < due:
            return
        try:
            self.trigger("checkpoint", periodic=True)
        except CheckpointException as e:
            if e.reason in (CheckpointFailureReason.TOO_MANY_CHECKPOINT_REQUESTS,
                            CheckpointFailureReason.MINIMUM_TIME_BETWEEN_CHECKPOINTS):
                return
            log.info("Failed to trigger checkpoint for job %s: %s", self.master.job_id, e)
            self.last_trigger_ms = now

    # ------------------------------------------------------------------------------------------
    # messages from tasks (task threads)

    def acknowledge(self, checkpoint_id: int, attempt: int, task_key, states: dict) -> None:
        with self._lock:
            p = self.pending.get(checkpoint_id)
            if p is None or p.attempt != attempt or task_key not in p.not_acked:
                log.debug("Received late acknowledgement of checkpoint %d from %s", checkpoint_id, task_key)
                return
            p.acks[task_key] = states
            p.not_acked.discard(task_key)
            ready = not p.not_acked and not p.ready_posted
            if ready:
                p.ready_posted = True
        if ready:
            self.master.post(CheckpointReady(attempt, checkpoint_id))

    def decline(self, checkpoint_id: int, attempt: int, task_key, reason: CheckpointFailureReason,
                cause: BaseException | None, task_name: str) -> None:
        with self._lock:
            p = self.pending.get(checkpoint_id)
            if p is None or p.attempt != attempt:
                return
        self.master.post(CheckpointDeclined(attempt, checkpoint_id, reason, cause, task_name))

    # ------------------------------------------------------------------------------------------
    # completion and abort (master thread)

    def on_declined(self, checkpoint_id: int, reason: CheckpointFailureReason, cause, task_name: str) -> None:
        if checkpoint_id not in self.pending:
            return
        log.info("Decline checkpoint %d by task %s of job %s: %s%s", checkpoint_id, task_name, self.master.job_id,
                 reason.message, f" ({cause!r})" if cause is not None else "")
        self.abort(checkpoint_id, reason, cause)

    def finalize(self, checkpoint_id: int) -> CompletedCheckpoint | None:
        p = self.pending.get(checkpoint_id)
        if p is None:
            return None
        t0 = self.clock.now_ms()
        try:
            if self.injector:
                self.injector.check("finalize", "checkpoint coordinator", p.attempt, f"checkpoint {checkpoint_id}")
            ops = {}
            for node in self.master.nodes:
                ops[node.operator_id] = p.builder.operator(
                    node.uid, uid_hash=None if node.uid else node.operator_id.hex(),
                    parallelism=node.resolved_parallelism, max_parallelism=node.resolved_max_parallelism,
                    name=node.name)
            for (_, subtask), states in p.acks.items():
                for op_id, st in states.items():
                    if not st.is_empty:
                        ops[op_id].subtasks[subtask] = st
            path = p.builder.commit()
        except InjectedFailure as e:
            self.abort(checkpoint_id, CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE, e)
            # a crash of the job master between the state files and `_metadata`
            self.master.post(JobFailure(p.attempt, e))
            return None
        except Exception as e:  # noqa: BLE001
            log.warning("Failed to finalize %s %d: %r", p.label, checkpoint_id, e)
            self.abort(checkpoint_id, CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE, e)
            return None
        with self._lock:
            self.pending.pop(checkpoint_id, None)
        now = self.clock.now_ms()
        c = CompletedCheckpoint(checkpoint_id, p.timestamp, path, p.kind, now - p.timestamp)
        self.all_completed.append(c)
        self.stats.completed.append(checkpoint_id)
        log.info("Completed %s %d for job %s (%d operators, checkpointDuration=%d ms, finalizationTime=%d ms) at %s.",
                 p.label, checkpoint_id, self.master.job_id, len(self.master.nodes), c.duration_ms, now - t0, path)
        if not p.is_savepoint:
            self.last_completion_ms = now
            self.failure_manager.on_success(checkpoint_id)
            for older in [q for q in self.pending.values() if q.checkpoint_id < checkpoint_id and not q.is_savepoint]:
                self.abort(older.checkpoint_id, CheckpointFailureReason.CHECKPOINT_SUBSUMED)
            self.completed.append(c)
            while len(self.completed) > self.config.num_retained:
                self._discard(self.completed.pop(0))
        if p.kind == "sync-savepoint":
            self.latest_stop_savepoint = c
        if p.kind != "savepoint":
            # savepoints taken while the job keeps running are not committed (as in Flink)
            self.master.attempt.post_all(NotifyCheckpointComplete(checkpoint_id))
        if p.future is not None and not p.future.done() and p.kind != "sync-savepoint":
            # stop-with-savepoint answers when the job finished (the master does)
            p.future.set_result(path)
        if self.listener is not None:
            self.listener.checkpoint_completed(p, c)
        return c

    def abort(self, checkpoint_id: int, reason: CheckpointFailureReason, cause: BaseException | None = None) -> None:
        with self._lock:
            p = self.pending.pop(checkpoint_id, None)
        if p is None:
            return
        p.builder.abort()
        self.stats.failed.append((checkpoint_id, reason.name))
        attempt = self.master.attempt
        if attempt is not None and attempt.number == p.attempt:
            attempt.post_all(NotifyCheckpointAborted(checkpoint_id))
        if p.future is not None and not p.future.done():
            p.future.set_exception(CheckpointException(reason, cause))
        fail = self.failure_manager.on_failure(checkpoint_id, reason, p.is_savepoint)
        if reason not in (CheckpointFailureReason.CHECKPOINT_SUBSUMED,):
            log.warning("Failed to trigger or complete %s %d for job %s. (%d consecutive failed attempts so far): %s",
                        p.label, checkpoint_id, self.master.job_id, self.failure_manager.continuous,
                        CheckpointException(reason, cause))
        if fail:
            self.master.post(JobFailure(p.attempt, CheckpointFailureThresholdExceeded(
                "Exceeded checkpoint tolerable failure threshold. The latest checkpoint failed due to "
                f"{reason.message}, view the Checkpoint History tab or the Job Manager log to find out why "
                "continuous checkpoints failed.")))
        if self.listener is not None:
            self.listener.checkpoint_aborted(p, reason)

    def abort_all(self, reason: CheckpointFailureReason) -> None:
        for cid in sorted(self.pending):
            self.abort(cid, reason)

    # ------------------------------------------------------------------------------------------
    # retention

    def _discard(self, c: CompletedCheckpoint) -> None:
        if c.discarded:
            return
        c.discarded = True
        shutil.rmtree(c.path, ignore_errors=True)

    def shutdown(self, status: str) -> None:
        """Apply the retention policy for a job that ended with ``status`` (FINISHED, CANCELED,
        FAILED); ``KILLED`` (a simulated crash) leaves everything as it is on disk."""
        self.shut_down = True
        if status == "KILLED":
            return
        self.abort_all(CheckpointFailureReason.CHECKPOINT_COORDINATOR_SHUTDOWN)
        retention = self.config.retention
        discard = (status == "FINISHED" or retention == ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
                   or (status == "CANCELED" and retention == ExternalizedCheckpointRetention.DELETE_ON_CANCELLATION)
                   or self._temp_storage is not None)
        if discard:
            for c in self.completed:
                self._discard(c)
            self.completed = []
        self._sweep_temp_dirs()
        if discard:
            for sub in ("shared", "taskowned"):
                _rmdir_quiet(os.path.join(self.job_dir, sub))
            _rmdir_quiet(self.job_dir)
        if self._temp_storage is not None:
            shutil.rmtree(self._temp_storage, ignore_errors=True)

    def _sweep_temp_dirs(self) -> None:
        try:
            names = os.listdir(self.job_dir)
        except OSError:
            return
        for n in names:
            if ".fstate-tmp-" in n:
                shutil.rmtree(os.path.join(self.job_dir, n), ignore_errors=True)


def _rmdir_quiet(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def find_latest_checkpoint(directory: str) -> str | None:
    """The newest complete ``chk-<n>`` (one with ``_metadata``) under ``directory`` (a job's checkpoint
    directory, or the checkpoint storage directory holding job directories)."""
    best: tuple[int, float, str] | None = None
    for root, dirs, files in os.walk(directory):
        name = os.path.basename(root)
        if name.startswith("chk-") and "_metadata" in files:
            try:
                n = int(name[4:])
            except ValueError:
                continue
            key = (n, os.path.getmtime(os.path.join(root, "_metadata")), root)
            if best is None or key > best:
                best = key
            dirs[:] = []
    return best[2] if best else None
