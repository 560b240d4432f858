"""Replayable sources: their read positions are operator list state, so a restored job resumes
exactly where the checkpoint was taken, at any parallelism (positions are per split, and splits
are re-distributed like any list state)."""

from __future__ import annotations

import os
import time
from typing import Any, Iterable

from ..events import IDLE
from .functions import CheckpointedFunction, SourceFunction
from ..state.keyed_backend import ListStateDescriptor
from .typeinfo import Types


class _RateLimit:
    def __init__(self, per_second: float | None):
        self.per_second = per_second
        self.start = None
        self.count = 0

    def wait(self) -> bool:
        """True when the source is ahead of its rate and should yield IDLE; False counts the record
        the caller is about to emit (idle calls are not records)."""
        if not self.per_second:
            return False
        now = time.monotonic()
        if self.start is None:
            self.start = now
        if self.count + 1 > (now - self.start) * self.per_second + 1:
            return True
        self.count += 1
        return False


class SequenceSource(SourceFunction, CheckpointedFunction):
    """The numbers ``start..end`` (inclusive), cut into ``splits`` ranges shared out over the
    subtasks. State: list state ``splits`` of ``Tuple2<Long, Long>`` = (next value, last value).

    ``idle_at_end`` keeps the source alive (idle) after its last number, so the job keeps running
    until it is stopped or cancelled; ``records_per_second`` throttles each subtask.
    """

    STATE = "splits"

    def __init__(self, start: int, end: int, *, splits: int | None = None, idle_at_end: bool = False,
                 records_per_second: float | None = None):
        if end < start - 1:
            raise ValueError("end must be >= start - 1")
        self.start = start
        self.end = end
        self.splits = splits
        self.idle_at_end = idle_at_end
        self.records_per_second = records_per_second
        self._splits: list[list[int]] = []
        self._state = None

    def initialize_state(self, context) -> None:
        store = context.get_operator_state_store()
        restored = self.STATE in store.get_registered_state_names()
        self._state = store.get_list_state(ListStateDescriptor(self.STATE, Types.TUPLE(Types.LONG, Types.LONG)))
        if restored:
            self._splits = [[a, b] for a, b in self._state.get()]
            return
        rc = self.get_runtime_context()
        p, i = rc.get_number_of_parallel_subtasks(), rc.get_index_of_this_subtask()
        n = self.splits or max(8, p)
        total = self.end - self.start + 1
        bounds = [self.start + (total * k) // n for k in range(n + 1)]
        self._splits = [[bounds[k], bounds[k + 1] - 1] for k in range(n) if k % p == i and bounds[k + 1] > bounds[k]]

    def snapshot_state(self, context) -> None:
        self._state.update([(a, b) for a, b in self._splits])

    def run(self, ctx) -> Iterable[Any]:
        limit = _RateLimit(self.records_per_second)
        for sp in self._splits:
            if not self.records_per_second:
                while sp[0] <= sp[1]:
                    v = sp[0]
                    sp[0] = v + 1
                    yield v
            while sp[0] <= sp[1]:
                if limit.wait():
                    yield IDLE
                    continue
                v = sp[0]
                sp[0] = v + 1
                yield v
        while self.idle_at_end:
            yield IDLE


class CollectionSource(SourceFunction, CheckpointedFunction):
    """The given values, in order, from one subtask. State: list state ``offset`` (Long)."""

    STATE = "offset"

    def __init__(self, values: Iterable[Any], *, idle_at_end: bool = False):
        self.values = list(values)
        self.idle_at_end = idle_at_end
        self._pos = 0
        self._state = None

    def initialize_state(self, context) -> None:
        self._state = context.get_operator_state_store().get_list_state(ListStateDescriptor(self.STATE, Types.LONG))
        restored = self._state.get()
        self._pos = restored[0] if restored else 0

    def snapshot_state(self, context) -> None:
        self._state.update([self._pos])

    def run(self, ctx) -> Iterable[Any]:
        vals = self.values
        while self._pos < len(vals):
            v = vals[self._pos]
            self._pos += 1
            yield v
        while self.idle_at_end:
            yield IDLE


class FileSource(SourceFunction, CheckpointedFunction):
    """Lines of text files (one split per file, shared out over the subtasks). State: list state
    ``splits`` of ``Tuple2<String, Long>`` = (path, byte offset of the next line)."""

    STATE = "splits"

    def __init__(self, paths: str | list[str], *, encoding: str = "utf-8", idle_at_end: bool = False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        files: list[str] = []
        for p in paths:
            p = os.fspath(p)
            if os.path.isdir(p):
                files += [os.path.join(p, f) for f in sorted(os.listdir(p))
                          if not f.startswith((".", "_")) and os.path.isfile(os.path.join(p, f))]
            else:
                files.append(p)
        self.paths = [os.path.abspath(f) for f in files]
        self.encoding = encoding
        self.idle_at_end = idle_at_end
        self._splits: list[list] = []
        self._state = None

    def initialize_state(self, context) -> None:
        store = context.get_operator_state_store()
        restored = self.STATE in store.get_registered_state_names()
        self._state = store.get_list_state(ListStateDescriptor(self.STATE, Types.TUPLE(Types.STRING, Types.LONG)))
        if restored:
            self._splits = [[p, o] for p, o in self._state.get()]
            return
        rc = self.get_runtime_context()
        p, i = rc.get_number_of_parallel_subtasks(), rc.get_index_of_this_subtask()
        self._splits = [[f, 0] for k, f in enumerate(self.paths) if k % p == i]

    def snapshot_state(self, context) -> None:
        self._state.update([(p, o) for p, o in self._splits])

    def run(self, ctx) -> Iterable[Any]:
        for sp in self._splits:
            size = os.path.getsize(sp[0])
            if sp[1] >= size:
                continue
            with open(sp[0], "rb") as f:
                f.seek(sp[1])
                for line in iter(f.readline, b""):
                    sp[1] += len(line)
                    yield line.decode(self.encoding).rstrip("\r\n")
        while self.idle_at_end:
            yield IDLE
