"""Failure injection: crash a task (or the checkpoint finalization) at chosen or random points.

Sites:

* ``record``    while a task processes a record (between checkpoints)
* ``snapshot``  in a task's snapshot, after the barrier went downstream, before the acknowledgement
* ``notify``    in a task, on "checkpoint complete", before any operator is notified (so a
                two-phase-commit sink has not committed yet)
* ``finalize``  in the checkpoint coordinator, after all acknowledgements, before ``_metadata``
                is written (the checkpoint must then be invisible; the job fails over)

Random failures are seeded per (site, task, attempt), so a task that sees the same records
fails at the same record again; ``max_failures`` bounds the total so every run terminates.
"""

from __future__ import annotations

import math
import random
import threading
import zlib
from dataclasses import dataclass
from ..exceptions import InjectedFailure


@dataclass(frozen=True)
class FailAt:
    """Fail at the ``nth`` (1-based) call of ``site`` in tasks whose name contains ``where``,
    in execution attempt ``attempt`` (``None``: any)."""

    site: str
    where: str = ""
    nth: int = 1
    attempt: int | None = 0


class _RecordChecker:
    __slots__ = ("inj", "where", "attempt", "rng", "p", "count", "next_at", "targets")

    def __init__(self, inj: "FailureInjector", where: str, attempt: int, p: float, targets: list[int]):
        self.inj = inj
        self.where = where
        self.attempt = attempt
        self.rng = inj._rng("record", where, attempt)
        self.p = p
        self.count = 0
        self.targets = sorted(targets)
        self.next_at = self._draw()

    def _draw(self) -> float:
        nxt = math.inf
        if self.p > 0:
            u = self.rng.random()
            nxt = self.count + 1 + int(math.log(1.0 - u) / math.log(1.0 - self.p)) if self.p < 1 else self.count + 1
        while self.targets and self.targets[0] <= self.count:
            self.targets.pop(0)
        if self.targets:
            nxt = min(nxt, self.targets[0])
        return nxt

    def __call__(self) -> None:
        self.count += 1
        if self.count >= self.next_at:
            self.next_at = self._draw()
            self.inj._fire("record", self.where, self.attempt, f"record #{self.count}")


class FailureInjector:
    def __init__(self, seed: int = 0, *, record: float = 0.0, snapshot: float = 0.0, notify: float = 0.0,
                 finalize: float = 0.0, max_failures: int | None = 10, fail_at: tuple[FailAt, ...] | list = ()):
        self.seed = seed
        self.probability = {"record": record, "snapshot": snapshot, "notify": notify, "finalize": finalize}
        self.max_failures = max_failures
        self.fail_at = list(fail_at)
        self.injected: list[str] = []
        self._calls: dict[tuple, int] = {}
        self._rngs: dict[tuple, random.Random] = {}
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.injected)

    def sites(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.injected:
            site = s.split(" ", 1)[0]
            out[site] = out.get(site, 0) + 1
        return out

    def _rng(self, site: str, where: str, attempt: int) -> random.Random:
        return random.Random(zlib.crc32(f"{self.seed}|{site}|{where}|{attempt}".encode()))

    def _exhausted(self) -> bool:
        return self.max_failures is not None and len(self.injected) >= self.max_failures

    def _fire(self, site: str, where: str, attempt: int, detail: str = "") -> None:
        with self._lock:
            if self._exhausted():
                return
            n = len(self.injected) + 1
            text = f"{site} in {where}, attempt {attempt}" + (f", {detail}" if detail else "")
            self.injected.append(text)
        raise InjectedFailure(f"injected failure #{n}: {text}")

    def check(self, site: str, where: str, attempt: int, detail: str = "") -> None:
        """Raise InjectedFailure if this call of ``site`` should fail."""
        if self._exhausted():
            return
        with self._lock:
            key = (site, where, attempt)
            n = self._calls[key] = self._calls.get(key, 0) + 1
            rng = self._rngs.get(key)
            if rng is None:
                rng = self._rngs[key] = self._rng(site, where, attempt)
            hit = rng.random() < self.probability.get(site, 0.0)
        if not hit:
            hit = any(f.site == site and f.where in where and f.nth == n and f.attempt in (None, attempt)
                      for f in self.fail_at)
        if hit:
            self._fire(site, where, attempt, detail)

    def record_checker(self, where: str, attempt: int):
        """A per-record callable for one task attempt, or None when no record failures are planned."""
        p = self.probability["record"]
        targets = [f.nth for f in self.fail_at
                   if f.site == "record" and f.where in where and f.attempt in (None, attempt)]
        if not p and not targets:
            return None
        return _RecordChecker(self, where, attempt, p, targets)
