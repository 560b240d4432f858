"""Job configuration: checkpointing, state backend, restart strategies, and Flink-style config keys.

The names follow Flink (``CheckpointConfig``, ``RestartStrategies``, ``execution.checkpointing.*``,
``restart-strategy.*``); the same settings can be made in code or read from a Flink ``config.yaml``
(flat ``a.b.c: v`` keys or nested mappings).
"""

from __future__ import annotations

import enum
import os
import random
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping

from ..savepoint.errors import InvalidArgumentError
from ..savepoint.io.uri import strip_file_scheme


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
# durations and values from config text

_UNITS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000, "m": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration_ms(value: Any, key: str = "duration") -> int:
    """``10 s``, ``500ms``, ``1 min``, ``2h`` or a plain number of milliseconds."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    m = _DURATION.match(str(value))
    if not m:
        raise InvalidArgumentError(f"{key}: cannot parse duration {value!r} (e.g. '10 s', '500 ms', '1 min')")
    unit = m.group(2).lower() or "ms"
    if unit not in _UNITS:
        raise InvalidArgumentError(f"{key}: unknown time unit {m.group(2)!r} in {value!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def _parse_int(value: Any, key: str) -> int:
    try:
        if isinstance(value, str) and value.strip().lower() in ("inf", "infinite", "unlimited"):
            return 2**31 - 1
        return int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{key}: expected an integer, got {value!r}") from None


def _parse_float(value: Any, key: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{key}: expected a number, got {value!r}") from None


def _enum_value(enum_cls, value: Any, key: str):
    if isinstance(value, enum_cls):
        return value
    text = str(value).strip().upper().replace("-", "_")
    try:
        return enum_cls[text]
    except KeyError:
        names = ", ".join(e.name for e in enum_cls)
        raise InvalidArgumentError(f"{key}: {value!r} is not one of {names}") from None


# ---------------------------------------------------------------------------------------------
# restart strategies (RestartBackoffTimeStrategy in Flink)


class RestartBackoffTimeStrategy:
    """Decides after each failure whether the job may restart and after how long."""

    def notify_failure(self, now_ms: int) -> None:
        raise NotImplementedError

    def can_restart(self) -> bool:
        raise NotImplementedError

    def backoff_ms(self) -> int:
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


class NoRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    def notify_failure(self, now_ms: int) -> None:
        pass

    def can_restart(self) -> bool:
        return False

    def backoff_ms(self) -> int:
        return 0

    def describe(self) -> str:
        return "NoRestartBackoffTimeStrategy"


class FixedDelayRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    def __init__(self, attempts: int, delay_ms: int):
        self.attempts = attempts
        self.delay_ms = delay_ms
        self.current = 0

    def notify_failure(self, now_ms: int) -> None:
        self.current += 1

    def can_restart(self) -> bool:
        return self.current <= self.attempts

    def backoff_ms(self) -> int:
        return self.delay_ms

    def describe(self) -> str:
        return f"FixedDelayRestartBackoffTimeStrategy(maxNumberRestartAttempts={self.attempts}, backoffTimeMS={self.delay_ms})"


class ExponentialDelayRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    """Backoff starts at ``initial``, is multiplied per failure up to ``max``, gets +-jitter, and
    goes back to ``initial`` after ``reset_threshold`` ms without failure."""

    def __init__(self, initial_ms: int, max_ms: int, multiplier: float, reset_threshold_ms: int, jitter: float,
                 attempts_before_reset: int = 2**31 - 1, seed: int | None = None):
        if initial_ms < 1 or max_ms < initial_ms or multiplier < 1 or not 0 <= jitter <= 1:
            raise InvalidArgumentError("exponential-delay: need 1 <= initial-backoff <= max-backoff, "
                                       "backoff-multiplier >= 1 and 0 <= jitter-factor <= 1")
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.multiplier = multiplier
        self.reset_threshold_ms = reset_threshold_ms
        self.jitter = jitter
        self.attempts_before_reset = attempts_before_reset
        self.current_backoff = 0
        self.attempt = 0
        self.last_failure: int | None = None
        self._rng = random.Random(seed)
        self._jittered = 0

    def notify_failure(self, now_ms: int) -> None:
        if self.last_failure is None or now_ms - self.last_failure >= self.reset_threshold_ms:
            self.current_backoff = self.initial_ms
            self.attempt = 0
        else:
            self.current_backoff = min(int(self.current_backoff * self.multiplier), self.max_ms)
        self.attempt += 1
        self.last_failure = now_ms
        spread = int(self.current_backoff * self.jitter)
        delta = self._rng.randint(-spread, spread) if spread else 0
        self._jittered = max(0, min(self.current_backoff + delta, self.max_ms))

    def can_restart(self) -> bool:
        return self.attempt <= self.attempts_before_reset

    def backoff_ms(self) -> int:
        return self._jittered

    def describe(self) -> str:
        return (f"ExponentialDelayRestartBackoffTimeStrategy(initialBackoffMS={self.initial_ms}, "
                f"maxBackoffMS={self.max_ms}, backoffMultiplier={self.multiplier}, "
                f"resetBackoffThresholdMS={self.reset_threshold_ms}, jitterFactor={self.jitter})")


class FailureRateRestartBackoffTimeStrategy(RestartBackoffTimeStrategy):
    """Restart unless more than ``max_failures`` failures happened within ``interval_ms``."""

    def __init__(self, max_failures: int, interval_ms: int, delay_ms: int):
        self.max_failures = max_failures
        self.interval_ms = interval_ms
        self.delay_ms = delay_ms
        self.failures: deque[int] = deque()
        self._now = 0

    def notify_failure(self, now_ms: int) -> None:
        self._now = now_ms
        if len(self.failures) >= self.max_failures:
            self.failures.popleft()
        self.failures.append(now_ms)

    def can_restart(self) -> bool:
        if len(self.failures) >= self.max_failures and self.max_failures > 0:
            return self._now - self.failures[0] > self.interval_ms
        return True

    def backoff_ms(self) -> int:
        return self.delay_ms

    def describe(self) -> str:
        return (f"FailureRateRestartBackoffTimeStrategy(maxFailuresPerInterval={self.max_failures}, "
                f"failuresIntervalMS={self.interval_ms}, backoffTimeMS={self.delay_ms})")


@dataclass(frozen=True)
class RestartStrategyConfiguration:
    kind: str  # none | fixed-delay | exponential-delay | failure-rate
    params: tuple = ()

    def create(self, seed: int | None = None) -> RestartBackoffTimeStrategy:
        p = dict(self.params)
        if self.kind == "none":
            return NoRestartBackoffTimeStrategy()
        if self.kind == "fixed-delay":
            return FixedDelayRestartBackoffTimeStrategy(p["attempts"], p["delay_ms"])
        if self.kind == "exponential-delay":
            return ExponentialDelayRestartBackoffTimeStrategy(
                p["initial_ms"], p["max_ms"], p["multiplier"], p["reset_ms"], p["jitter"],
                p.get("attempts_before_reset", 2**31 - 1), seed)
        if self.kind == "failure-rate":
            return FailureRateRestartBackoffTimeStrategy(p["max_failures"], p["interval_ms"], p["delay_ms"])
        raise InvalidArgumentError(f"unknown restart strategy {self.kind}")


class RestartStrategies:
    """Factories like Flink's ``RestartStrategies`` (times in milliseconds)."""

    @staticmethod
    def no_restart() -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration("none")

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts_ms: int = 1000) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration("fixed-delay", (("attempts", int(restart_attempts)),
                                                            ("delay_ms", int(delay_between_attempts_ms))))

    @staticmethod
    def exponential_delay_restart(initial_backoff_ms: int = 1000, max_backoff_ms: int = 60_000,
                                  backoff_multiplier: float = 1.5, reset_backoff_threshold_ms: int = 3_600_000,
                                  jitter_factor: float = 0.1,
                                  attempts_before_reset_backoff: int = 2**31 - 1) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration("exponential-delay", (
            ("initial_ms", int(initial_backoff_ms)), ("max_ms", int(max_backoff_ms)),
            ("multiplier", float(backoff_multiplier)), ("reset_ms", int(reset_backoff_threshold_ms)),
            ("jitter", float(jitter_factor)), ("attempts_before_reset", int(attempts_before_reset_backoff))))

    @staticmethod
    def failure_rate_restart(max_failures_per_interval: int, failure_interval_ms: int,
                             delay_between_attempts_ms: int = 1000) -> RestartStrategyConfiguration:
        return RestartStrategyConfiguration("failure-rate", (
            ("max_failures", int(max_failures_per_interval)), ("interval_ms", int(failure_interval_ms)),
            ("delay_ms", int(delay_between_attempts_ms))))


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
        self.mode = _enum_value(CheckpointingMode, mode, "checkpointing mode")
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
        self.retention = _enum_value(ExternalizedCheckpointRetention, retention, "checkpoint retention")
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


# ---------------------------------------------------------------------------------------------
# Configuration (Flink keys)


class Configuration:
    """A flat ``key -> value`` map of Flink configuration keys."""

    def __init__(self, values: Mapping[str, Any] | None = None):
        self._values: dict[str, Any] = {}
        if values:
            self._values.update(_flatten(values))

    @classmethod
    def from_yaml(cls, source: str) -> "Configuration":
        """Parse a Flink ``config.yaml``: a path, or YAML text."""
        import yaml

        text = source
        if "\n" not in source and os.path.exists(source):
            with open(source, encoding="utf-8") as f:
                text = f.read()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise InvalidArgumentError("a Flink configuration must be a YAML mapping")
        return cls(data)

    def set(self, key: str, value: Any) -> "Configuration":
        self._values[key] = value
        return self

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def contains(self, key: str) -> bool:
        return key in self._values

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def first(self, *keys: str) -> Any:
        for k in keys:
            if k in self._values:
                return self._values[k]
        return None

    def restart_strategy(self) -> RestartStrategyConfiguration | None:
        kind = self.get("restart-strategy.type", self.get("restart-strategy"))
        if kind is None:
            return None
        k = str(kind).strip().lower().replace("_", "-")
        g = self.get
        if k in ("none", "off", "disable", "disabled", "norestart"):
            return RestartStrategies.no_restart()
        if k in ("fixed-delay", "fixeddelay"):
            return RestartStrategies.fixed_delay_restart(
                _parse_int(g("restart-strategy.fixed-delay.attempts", 1), "restart-strategy.fixed-delay.attempts"),
                parse_duration_ms(g("restart-strategy.fixed-delay.delay", "1 s"), "restart-strategy.fixed-delay.delay"))
        if k in ("exponential-delay", "exponentialdelay"):
            p = "restart-strategy.exponential-delay."
            return RestartStrategies.exponential_delay_restart(
                parse_duration_ms(g(p + "initial-backoff", "1 s"), p + "initial-backoff"),
                parse_duration_ms(g(p + "max-backoff", "1 min"), p + "max-backoff"),
                _parse_float(g(p + "backoff-multiplier", 1.5), p + "backoff-multiplier"),
                parse_duration_ms(g(p + "reset-backoff-threshold", "1 h"), p + "reset-backoff-threshold"),
                _parse_float(g(p + "jitter-factor", 0.1), p + "jitter-factor"),
                _parse_int(g(p + "attempts-before-reset-backoff", "inf"), p + "attempts-before-reset-backoff"))
        if k in ("failure-rate", "failurerate"):
            p = "restart-strategy.failure-rate."
            return RestartStrategies.failure_rate_restart(
                _parse_int(g(p + "max-failures-per-interval", 1), p + "max-failures-per-interval"),
                parse_duration_ms(g(p + "failure-rate-interval", "1 min"), p + "failure-rate-interval"),
                parse_duration_ms(g(p + "delay", "1 s"), p + "delay"))
        raise InvalidArgumentError(f"restart-strategy.type: unknown strategy {kind!r} "
                                   "(none, fixed-delay, exponential-delay, failure-rate)")

    def apply_checkpointing(self, cc: CheckpointConfig) -> None:
        f = self.first
        interval = f("execution.checkpointing.interval")
        if interval is not None:
            ms = parse_duration_ms(interval, "execution.checkpointing.interval")
            if ms > 0:
                cc.set_checkpoint_interval(ms)
        mode = f("execution.checkpointing.mode")
        if mode is not None:
            cc.set_checkpointing_mode(_enum_value(CheckpointingMode, mode, "execution.checkpointing.mode"))
        v = f("execution.checkpointing.timeout")
        if v is not None:
            cc.set_checkpoint_timeout(parse_duration_ms(v, "execution.checkpointing.timeout"))
        v = f("execution.checkpointing.min-pause")
        if v is not None:
            cc.set_min_pause_between_checkpoints(parse_duration_ms(v, "execution.checkpointing.min-pause"))
        v = f("execution.checkpointing.max-concurrent-checkpoints")
        if v is not None:
            cc.set_max_concurrent_checkpoints(_parse_int(v, "execution.checkpointing.max-concurrent-checkpoints"))
        v = f("execution.checkpointing.tolerable-failed-checkpoints")
        if v is not None:
            cc.set_tolerable_checkpoint_failure_number(
                _parse_int(v, "execution.checkpointing.tolerable-failed-checkpoints"))
        v = f("execution.checkpointing.externalized-checkpoint-retention")
        if v is not None:
            cc.set_externalized_checkpoint_retention(
                _enum_value(ExternalizedCheckpointRetention, v, "execution.checkpointing.externalized-checkpoint-retention"))
        v = f("state.checkpoints.num-retained", "execution.checkpointing.num-retained")
        if v is not None:
            cc.set_num_retained_checkpoints(_parse_int(v, "state.checkpoints.num-retained"))
        for key in UNALIGNED_KEYS:
            v = self.get(key)
            if v is not None and str(v).strip().lower() not in ("false", "0", "no", "off"):
                raise InvalidArgumentError(f"{key}: {v!r}: {UNALIGNED_REFUSED}")
        v = f("state.checkpoints.dir", "execution.checkpointing.dir")
        if v is not None:
            cc.set_checkpoint_storage(str(v))

    def state_backend(self) -> StateBackend | None:
        v = self.first("state.backend.type", "state.backend")
        if v is None:
            return None
        name = str(v).strip().lower()
        if name in ("hashmap", "heap", "filesystem", "jobmanager", "memory"):
            return HashMapStateBackend()
        raise InvalidArgumentError(f"state.backend.type: {v!r} is not supported by fstate's runtime "
                                   "(only 'hashmap'; its snapshots restore into any Flink backend)")

    def savepoint_dir(self) -> str | None:
        v = self.first("state.savepoints.dir", "execution.checkpointing.savepoint-dir")
        return strip_file_scheme(str(v)) if v is not None else None

    def restore_path(self) -> str | None:
        v = self.first("execution.state-recovery.path", "execution.savepoint.path")
        return strip_file_scheme(str(v)) if v is not None else None

    def allow_non_restored_state(self) -> bool:
        v = self.first("execution.state-recovery.ignore-unclaimed-state",
                       "execution.savepoint.ignore-unclaimed-state")
        return str(v).strip().lower() == "true" if v is not None else False


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
