"""Checkpointing settings (Flink's ``CheckpointConfig``, ``CheckpointingMode``, retention) and the
state backend."""

from __future__ import annotations

import enum

from ...savepoint.errors import InvalidArgumentError
from ...savepoint.io.uri import strip_file_scheme
from ..config_values import enum_value

class CheckpointingMode(enum.Enum):
    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"


class ExternalizedCheckpointRetention(enum.Enum):
    """What happens to completed checkpoints when the job terminates (Flink's names)."""

    #: keep them when the job is cancelled (and when it fails); delete them when it finishes
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"
    #: delete them when the job is cancelled or finishes; keep them when it fails
    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"
    #: delete them whenever the job terminates (Flink 2.x's default)
    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"


#: Flink 1.x name of the same enum.
ExternalizedCheckpointCleanup = ExternalizedCheckpointRetention



# ---------------------------------------------------------------------------------------------
# checkpoint config and state backend


UNALIGNED_KEYS = ("execution.checkpointing.unaligned.enabled", "execution.checkpointing.unaligned")
UNALIGNED_REFUSED = ("unaligned checkpoints are not supported by fstate's runtime (its checkpoints are aligned, "
                     "EXACTLY_ONCE, or at-least-once with AT_LEAST_ONCE): leave "
                     "execution.checkpointing.unaligned.enabled false")


class CheckpointConfig:
    """Checkpointing settings (``env.get_checkpoint_config()``)."""

    DEFAULT_TIMEOUT_MS = 10 * 60 * 1000

    def __init__(self) -> None:
        self.interval_ms = -1  # disabled
        self.mode = CheckpointingMode.EXACTLY_ONCE
        self.min_pause_ms = 0
        self.timeout_ms = self.DEFAULT_TIMEOUT_MS
        self.max_concurrent = 1
        self.retention = ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS
        self.tolerable_failures = 0
        self.num_retained = 1
        self.checkpoint_dir: str | None = None

    # Flink-style setters/getters -------------------------------------------------------------
    def is_checkpointing_enabled(self) -> bool:
        return self.interval_ms > 0

    def set_checkpoint_interval(self, interval_ms: int) -> "CheckpointConfig":
        if interval_ms < 10:
            raise InvalidArgumentError("checkpoint interval must be at least 10 ms")
        self.interval_ms = int(interval_ms)
        return self

    def get_checkpoint_interval(self) -> int:
        return self.interval_ms

    def set_checkpointing_mode(self, mode: CheckpointingMode) -> "CheckpointConfig":
        self.mode = enum_value(CheckpointingMode, mode, "checkpointing mode")
        return self

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self.mode

    def set_min_pause_between_checkpoints(self, min_pause_ms: int) -> "CheckpointConfig":
        if min_pause_ms < 0:
            raise InvalidArgumentError("min pause must be >= 0")
        self.min_pause_ms = int(min_pause_ms)
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self.min_pause_ms

    def set_checkpoint_timeout(self, timeout_ms: int) -> "CheckpointConfig":
        if timeout_ms < 1:
            raise InvalidArgumentError("checkpoint timeout must be positive")
        self.timeout_ms = int(timeout_ms)
        return self

    def get_checkpoint_timeout(self) -> int:
        return self.timeout_ms

    def set_max_concurrent_checkpoints(self, n: int) -> "CheckpointConfig":
        if n < 1:
            raise InvalidArgumentError("max concurrent checkpoints must be >= 1")
        self.max_concurrent = int(n)
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self.max_concurrent

    def set_externalized_checkpoint_retention(self, retention: ExternalizedCheckpointRetention) -> "CheckpointConfig":
        self.retention = enum_value(ExternalizedCheckpointRetention, retention, "checkpoint retention")
        return self

    #: Flink 1.x name
    enable_externalized_checkpoints = set_externalized_checkpoint_retention

    def get_externalized_checkpoint_retention(self) -> ExternalizedCheckpointRetention:
        return self.retention

    def set_tolerable_checkpoint_failure_number(self, n: int) -> "CheckpointConfig":
        if n < 0:
            raise InvalidArgumentError("tolerable checkpoint failure number must be >= 0")
        self.tolerable_failures = int(n)
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self.tolerable_failures

    def set_checkpoint_storage(self, directory: str) -> "CheckpointConfig":
        """Where checkpoints go: ``<directory>/<job id>/chk-<n>`` (``state.checkpoints.dir``)."""
        self.checkpoint_dir = strip_file_scheme(str(directory))
        return self

    set_checkpoint_storage_dir = set_checkpoint_storage

    def get_checkpoint_storage(self) -> str | None:
        return self.checkpoint_dir

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> "CheckpointConfig":
        """Unaligned checkpoints are not supported: enabling them is an error (disabling is a no-op)."""
        if enabled:
            raise InvalidArgumentError(UNALIGNED_REFUSED)
        return self

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return False

    def set_num_retained_checkpoints(self, n: int) -> "CheckpointConfig":
        if n < 1:
            raise InvalidArgumentError("number of retained checkpoints must be >= 1")
        self.num_retained = int(n)
        return self


class StateBackend:
    name = "?"


class HashMapStateBackend(StateBackend):
    """Keyed state as Python objects on the heap (Flink's ``hashmap`` backend). Snapshots are
    written in the canonical savepoint layout, which every Flink backend restores."""

    name = "hashmap"
