"""The runtime's exceptions, in one place (input errors derive from fstate's FStateError)."""

from __future__ import annotations

from typing import Any

from ..savepoint.errors import FStateError


class TaskCancelled(Exception):
    pass


class CheckpointException(Exception):
    def __init__(self, reason: Any, cause: BaseException | None = None):  # reason: events.CheckpointFailureReason
        self.reason = reason
        text = reason.message + (f" ({type(cause).__name__}: {cause})" if cause is not None else "")
        super().__init__(text)
        if cause is not None:
            self.__cause__ = cause


class CheckpointFailureThresholdExceeded(RuntimeError):
    pass


class StopWithSavepointError(RuntimeError):
    """Stop-with-savepoint did not end the job: the savepoint was taken, but the job failed (a
    commit of its completion failed, a task failed) or was cancelled before it finished. No path is
    returned; a job that failed over recovers from that savepoint and, if its restart strategy
    allows, keeps RUNNING."""


class StateMigrationError(FStateError):
    """Restored state cannot be used with the state (or key) the job now declares."""


class InjectedFailure(RuntimeError):
    """A failure the test asked for (never raised by the runtime on its own)."""


class RestoreError(FStateError):
    """The snapshot cannot be mapped onto this job."""


class JobExecutionException(RuntimeError):
    def __init__(self, message: str, result: Any):  # result: job.JobExecutionResult
        super().__init__(message)
        self.result = result


class TransactionConflictError(FStateError):
    """A commit found another transaction's output where its own belongs: it never replaces it."""
