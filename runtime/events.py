"""Events: what travels with the records (stream elements, watermarks, checkpoint barriers) and
what the parts of a running job tell each other, as typed messages.

* Stream elements a source may yield: a value, ``Timestamped``, ``Watermark`` or ``IDLE``.
* Channel items between subtasks: ``(channel, kind, payload)`` with ``kind`` one of ``DATA``
  (a batch of ``(timestamp, value)``), ``BARRIER`` (a ``CheckpointBarrier``), ``WATERMARK``,
  ``EOS`` (end of stream) and ``WAKE`` (a task has mail).
* Task mail (job master and coordinator → a task): ``TriggerCheckpoint``,
  ``TriggerStopWithSavepoint``, ``NotifyCheckpointComplete``, ``NotifyCheckpointAborted``,
  ``ResumeSource``, ``FinishSource``.
* Job events (tasks and coordinator → the job master): ``TaskFinished``, ``TaskFailed``,
  ``SourceExhausted``, ``CheckpointReady``, ``CheckpointDeclined``, ``JobFailure``; each carries the
  execution attempt it belongs to, so events of an earlier attempt are ignored.
* Client requests (a ``JobClient`` → the job master): ``CheckpointRequest``, ``SavepointRequest``,
  ``StopWithSavepointRequest`` (each with the future its answer goes to), ``CancelRequest``,
  ``KillRequest``.

Below both the user API and execution; it imports neither.
"""

from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

# ---------------------------------------------------------------------------------------------
# stream elements

MIN_WATERMARK = -(1 << 63)
MAX_WATERMARK = (1 << 63) - 1


class Timestamped:
    """A value with its event timestamp (what a source yields for event time)."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: int):
        self.value = value
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"Timestamped({self.value!r}, {self.timestamp})"


class Watermark:
    __slots__ = ("timestamp",)

    def __init__(self, timestamp: int):
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"Watermark({self.timestamp})"


class _Idle:
    def __repr__(self) -> str:
        return "IDLE"


#: What a source yields when it has nothing to emit right now.
IDLE = _Idle()


@dataclass(frozen=True)
class CheckpointBarrier:
    checkpoint_id: int
    timestamp: int
    location: str  # directory the task writes its state files into
    kind: str = "checkpoint"  # checkpoint | savepoint | sync-savepoint

    @property
    def is_savepoint(self) -> bool:
        return self.kind != "checkpoint"


# kinds of the items on a channel: (channel, kind, payload)
DATA, BARRIER, WATERMARK, EOS, WAKE = 0, 1, 2, 3, 4


class CheckpointFailureReason(enum.Enum):
    """Flink's ``CheckpointFailureReason`` (pre-flight flag, message)."""

    PERIODIC_SCHEDULER_SHUTDOWN = (True, "Periodic checkpoint scheduler is shut down.")
    TOO_MANY_CHECKPOINT_REQUESTS = (True, "The maximum number of queued checkpoint requests exceeded")
    MINIMUM_TIME_BETWEEN_CHECKPOINTS = (True, "The minimum time between checkpoints is still pending. "
                                              "Checkpoint will be triggered after the minimum time.")
    NOT_ALL_REQUIRED_TASKS_RUNNING = (True, "Not all required tasks are currently running.")
    IO_EXCEPTION = (True, "An Exception occurred while triggering the checkpoint. IO-problem detected.")
    CHECKPOINT_ASYNC_EXCEPTION = (False, "Asynchronous task checkpoint failed.")
    CHECKPOINT_EXPIRED = (False, "Checkpoint expired before completing.")
    CHECKPOINT_SUBSUMED = (False, "Checkpoint has been subsumed.")
    CHECKPOINT_DECLINED = (False, "Checkpoint was declined.")
    CHECKPOINT_DECLINED_TASK_NOT_READY = (False, "Checkpoint was declined (tasks not ready)")
    CHECKPOINT_DECLINED_TASK_CLOSING = (False, "Checkpoint was declined (task is closing)")
    CHECKPOINT_DECLINED_SUBSUMED = (False, "Checkpoint was canceled because a barrier from newer checkpoint was "
                                           "received.")
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER = (False, "Task received cancellation from one of its inputs")
    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM = (False, "Checkpoint was declined because one input stream is "
                                                      "finished")
    CHECKPOINT_COORDINATOR_SHUTDOWN = (False, "CheckpointCoordinator shutdown.")
    CHECKPOINT_COORDINATOR_SUSPEND = (False, "Checkpoint Coordinator is suspending.")
    JOB_FAILOVER_REGION = (False, "FailoverRegion is restarting.")
    TASK_FAILURE = (False, "Task has failed.")
    TASK_CHECKPOINT_FAILURE = (False, "Task local checkpoint failure.")
    UNKNOWN_TASK_CHECKPOINT_NOTIFICATION_FAILURE = (False, "Unknown task for the checkpoint to notify.")
    FINALIZE_CHECKPOINT_FAILURE = (False, "Failure to finalize checkpoint.")
    TRIGGER_CHECKPOINT_FAILURE = (False, "Trigger checkpoint failure.")

    def __init__(self, pre_flight: bool, message: str):
        self.pre_flight = pre_flight
        self.message = message


# ---------------------------------------------------------------------------------------------
# task mail


class TaskMail:
    """A message to one task, handled by its thread between two records."""


@dataclass(frozen=True)
class TriggerCheckpoint(TaskMail):
    """To a source: snapshot now and send the barrier downstream."""

    barrier: CheckpointBarrier


@dataclass(frozen=True)
class TriggerStopWithSavepoint(TaskMail):
    """To a source: stop emitting (until ``ResumeSource``), then as ``TriggerCheckpoint``; with
    ``drain`` first emit the final watermark (every event-time timer fires)."""

    barrier: CheckpointBarrier
    drain: bool


@dataclass(frozen=True)
class NotifyCheckpointComplete(TaskMail):
    checkpoint_id: int


@dataclass(frozen=True)
class NotifyCheckpointAborted(TaskMail):
    checkpoint_id: int


@dataclass(frozen=True)
class ResumeSource(TaskMail):
    """The stop-with-savepoint failed: emit again."""


@dataclass(frozen=True)
class FinishSource(TaskMail):
    """End the input: the source sends end-of-stream and its task finishes."""


# ---------------------------------------------------------------------------------------------
# job events


class JobEvent:
    """A message to the job master, handled by its thread."""


@dataclass(frozen=True)
class AttemptEvent(JobEvent):
    """An event of one execution attempt (events of an earlier attempt are ignored)."""

    attempt: int


@dataclass(frozen=True)
class TaskFinished(AttemptEvent):
    task: tuple[int, int]  # (chain id, subtask)


@dataclass(frozen=True)
class TaskFailed(AttemptEvent):
    task_name: str
    error: BaseException
    traceback: str


@dataclass(frozen=True)
class SourceExhausted(AttemptEvent):
    task: tuple[int, int]


@dataclass(frozen=True)
class CheckpointReady(AttemptEvent):
    """Every task acknowledged the checkpoint: it can be finalized."""

    checkpoint_id: int


@dataclass(frozen=True)
class CheckpointDeclined(AttemptEvent):
    checkpoint_id: int
    reason: CheckpointFailureReason
    cause: BaseException | None
    task_name: str


@dataclass(frozen=True)
class JobFailure(AttemptEvent):
    """The job fails over (a crash while finalizing, too many failed checkpoints)."""

    error: BaseException


class ClientRequest(JobEvent):
    """A request of a ``JobClient``."""


@dataclass(frozen=True)
class CancelRequest(ClientRequest):
    pass


@dataclass(frozen=True)
class KillRequest(ClientRequest):
    """Test hook: end the job as a crashed process would."""


@dataclass(frozen=True)
class AnsweredRequest(ClientRequest):
    """A request whose answer (a path, or an exception) goes to ``future``."""

    operation: ClassVar[str] = "request"
    future: Future


@dataclass(frozen=True)
class CheckpointRequest(AnsweredRequest):
    operation: ClassVar[str] = "checkpoint"


@dataclass(frozen=True)
class SavepointRequest(AnsweredRequest):
    operation: ClassVar[str] = "savepoint"
    directory: str | None = None


@dataclass(frozen=True)
class StopWithSavepointRequest(AnsweredRequest):
    operation: ClassVar[str] = "stop"
    directory: str | None = None
    drain: bool = False


__all__ = [
    "AnsweredRequest", "AttemptEvent", "BARRIER", "CancelRequest", "CheckpointBarrier", "CheckpointDeclined",
    "CheckpointFailureReason", "CheckpointReady", "CheckpointRequest", "ClientRequest", "DATA", "EOS",
    "FinishSource", "IDLE", "JobEvent", "JobFailure", "KillRequest", "MAX_WATERMARK", "MIN_WATERMARK",
    "NotifyCheckpointAborted", "NotifyCheckpointComplete", "ResumeSource", "SavepointRequest", "SourceExhausted",
    "StopWithSavepointRequest", "TaskFailed", "TaskFinished", "TaskMail", "Timestamped", "TriggerCheckpoint",
    "TriggerStopWithSavepoint", "WAKE", "WATERMARK", "Watermark",
]
