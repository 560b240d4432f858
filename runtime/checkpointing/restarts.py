"""Restart strategies (Flink's ``RestartBackoffTimeStrategy`` and ``RestartStrategies``): whether and
when a failed job is restarted."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from ...savepoint.errors import InvalidArgumentError

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
