"""Clocks: the system clock, and a manual one for deterministic tests.

Everything in the runtime that depends on time (checkpoint interval, min pause and timeout,
restart delays, processing-time timers, checkpoint timestamps) reads it from a clock.
"""

from __future__ import annotations

import threading
import time


class Clock:
    def now_ms(self) -> int:
        raise NotImplementedError

    def sleep_ms(self, ms: float) -> None:
        raise NotImplementedError


class SystemClock(Clock):
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def sleep_ms(self, ms: float) -> None:
        if ms > 0:
            time.sleep(ms / 1000)


class ManualClock(Clock):
    """Time only moves when told to. ``sleep_ms`` advances the clock instead of waiting, so
    restart delays and backoffs take no wall time in tests."""

    def __init__(self, start_ms: int = 0):
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        with self._lock:
            self._now += int(ms)
            return self._now

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = int(now_ms)

    def sleep_ms(self, ms: float) -> None:
        if ms > 0:
            self.advance(int(ms))
