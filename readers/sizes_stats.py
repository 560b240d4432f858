"""Skew and the rescale preview of ``fstate sizes``: plain arithmetic over bytes per subtask or key group."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

from ..savepoint.errors import InvalidArgumentError
from ..savepoint.types.hashing import key_group_range

#: how many of the heaviest subtasks / key groups a skew names
HEAVIEST = 10


@dataclass(frozen=True)
class Skew:
    """How uneven some loads are: the largest, the mean, the 99th percentile (nearest rank) and the
    largest over the mean (1.0: even), with the heaviest indexes (ties: the lower index first)."""

    count: int
    total: int
    max: int
    mean: float
    p99: int
    max_over_mean: float
    heaviest: list[tuple[int, int]]

    @classmethod
    def of(cls, loads: Sequence[int]) -> "Skew":
        count, total = len(loads), sum(loads)
        mean = total / count if count else 0.0
        ordered = sorted(loads)
        p99 = ordered[max(0, math.ceil(0.99 * count) - 1)] if count else 0
        largest = max(loads) if count else 0
        heaviest = sorted(((i, v) for i, v in enumerate(loads) if v), key=lambda p: (-p[1], p[0]))[:HEAVIEST]
        return cls(count, total, largest, mean, p99, largest / mean if mean else 0.0, heaviest)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["heaviest"] = [{"index": i, "bytes": v} for i, v in self.heaviest]
        return data


def subtask_loads(key_group_values: Sequence[int], parallelism: int, max_parallelism: int) -> list[int]:
    """What each of ``parallelism`` subtasks would own: the sum over its key-group range (Flink's
    ``KeyGroupRangeAssignment``)."""
    loads = []
    for index in range(parallelism):
        start, end = key_group_range(index, parallelism, max_parallelism)
        loads.append(sum(key_group_values[start:end + 1]))
    return loads


def rescale_preview(key_group_bytes: Sequence[int], key_group_entries: Sequence[int], parallelisms: Sequence[int],
                    max_parallelism: int) -> list[dict]:
    """For each parallelism (at most the max parallelism), each subtask's bytes and entries, and the
    max, mean and max / mean of its bytes."""
    preview = []
    for parallelism in parallelisms:
        if parallelism > max_parallelism:
            continue
        loads = subtask_loads(key_group_bytes, parallelism, max_parallelism)
        skew = Skew.of(loads)
        preview.append({"parallelism": parallelism, "subtask_bytes": loads,
                        "subtask_entries": subtask_loads(key_group_entries, parallelism, max_parallelism),
                        "max": skew.max, "mean": skew.mean, "max_over_mean": skew.max_over_mean})
    return preview


def best_parallelism(preview: list[dict], asked: Sequence[int]) -> int | None:
    """Of the parallelisms asked for: the smallest whose heaviest subtask holds the least state (more
    parallelism than that makes no subtask lighter), None when none was asked (or none fits)."""
    candidates = [p for p in preview if p["parallelism"] in set(asked)]
    if not candidates:
        return None
    lightest = min(p["max"] for p in candidates)
    return min(p["parallelism"] for p in candidates if p["max"] == lightest)


@dataclass(frozen=True)
class OperatorLoad:
    """What the job-level preview needs of one operator: its keyed state's bytes per key group."""

    name: str
    parallelism: int
    max_parallelism: int
    key_group_bytes: Sequence[int]


def job_rescale(operators: Sequence[OperatorLoad], parallelisms: Sequence[int]) -> dict:
    """The rescale preview of the whole job under Flink's default slot sharing: subtask ``i`` of
    every operator runs in slot ``i``, so a slot holds the keyed state of every operator's subtask
    ``i``. The job's parallelism is taken to be its largest operator parallelism; operators at it
    follow a rescale to P (each its own key-group ranges at P, by its own max parallelism), operators
    at another parallelism (set on the operator) keep it and their subtask ``i`` stays in slot ``i``.
    A P above the max parallelism of an operator that follows is not possible (Flink refuses it):
    listed under ``skipped`` with the reason. Per P: each slot's bytes, the max, mean and max / mean;
    the best P is the smallest of those asked whose fullest slot holds the least."""
    keyed = [op for op in operators if any(op.key_group_bytes)]
    job = max((op.parallelism for op in operators), default=1)
    following = [op for op in keyed if op.parallelism == job]
    fixed = [op for op in keyed if op.parallelism != job]
    fixed_loads = [subtask_loads(op.key_group_bytes, op.parallelism, op.max_parallelism) for op in fixed]
    preview, skipped = [], []
    for parallelism in sorted({job, *parallelisms}):
        limited = [op for op in following if parallelism > op.max_parallelism]
        if limited:
            skipped.append({"parallelism": parallelism, "reason": f"above the max parallelism "
                            f"{limited[0].max_parallelism} of operator {limited[0].name}"})
            continue
        slots = [0] * max([parallelism] + [op.parallelism for op in fixed])
        for loads in [subtask_loads(op.key_group_bytes, parallelism, op.max_parallelism) for op in following] + \
                fixed_loads:
            for index, load in enumerate(loads):
                slots[index] += load
        skew = Skew.of(slots)
        preview.append({"parallelism": parallelism, "slot_bytes": slots, "max": skew.max, "mean": skew.mean,
                        "max_over_mean": skew.max_over_mean})
    return {"parallelism": job, "rescale": preview, "best_parallelism": best_parallelism(preview, parallelisms),
            "following": [op.name for op in following],
            "fixed": [{"operator": op.name, "parallelism": op.parallelism} for op in fixed], "skipped": skipped}


def parse_parallelisms(text: str) -> list[int]:
    """``--parallelism``: a number, a list ``2,4,8``, a range ``1..64``, or a list of both."""
    values: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        low, dots, high = part.partition("..")
        try:
            numbers = range(int(low), int(high) + 1) if dots else [int(part)]
        except ValueError:
            raise InvalidArgumentError(f"--parallelism expects numbers, lists (2,4,8) or ranges (1..64), "
                                       f"got '{text}'") from None
        if not numbers or min(numbers) < 1:
            raise InvalidArgumentError(f"--parallelism expects parallelisms of 1 or more, got '{text}'")
        values.update(numbers)
    return sorted(values)


_UNITS = {"ms": 1, "s": 1000, "min": 60_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, what: str = "--ttl") -> int:
    """``1h``, ``90 s``, ``30min``, ``1d`` or a number of milliseconds."""
    stripped = text.strip().lower()
    number = stripped.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = stripped[len(number):].strip() or "ms"
    try:
        value = float(number)
    except ValueError:
        value = None
    if value is None or unit not in _UNITS or value <= 0:
        raise InvalidArgumentError(f"{what} expects a duration such as 1h, 30min, 90s or 500ms, got '{text}'")
    return round(value * _UNITS[unit])
