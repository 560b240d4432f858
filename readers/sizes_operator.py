"""Operator state (list, union and broadcast state) in ``fstate sizes``: each subtask's elements and
entries decoded (:func:`..savepoint.operator.sized_list_state`, ``sized_broadcast_state``), counted
with their serialized bytes (decompressed; a broadcast entry's key and value), per state and subtask.

What each subtask's snapshot holds is counted: a union state's part of the union on each subtask, a
broadcast state's copy on each subtask (every subtask snapshots the whole broadcast state). A
subtask's stream is one piece (:class:`OperatorTask`), measured where keyed pieces are (this
process, a pool worker, a Spark task) and merged by :func:`operator_state_sizes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..savepoint import operator as operator_state
from . import tables


@dataclass
class OperatorStateSizes:
    """One operator state of one operator: its elements (a list or union state) or entries (a
    broadcast state) and their bytes, per subtask."""

    name: str
    #: SPLIT_DISTRIBUTE, UNION or BROADCAST
    kind: str
    #: per subtask (the operator's parallelism of them)
    subtask_entries: list[int]
    subtask_bytes: list[int]

    @property
    def entries(self) -> int:
        return sum(self.subtask_entries)

    @property
    def bytes(self) -> int:
        return sum(self.subtask_bytes)

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "entries": self.entries, "bytes": self.bytes,
                "subtask_entries": self.subtask_entries, "subtask_bytes": self.subtask_bytes}


@dataclass
class OperatorMeasure:
    """What one subtask's operator-state stream holds: state name → (kind, entries, bytes)."""

    subtask: int
    states: dict[str, tuple[str, int, int]]


@dataclass(frozen=True)
class OperatorTask:
    """What a worker measures: one subtask's operator-state stream (picklable)."""

    stream: tables.OperatorStream

    def measure(self) -> OperatorMeasure:
        buf, meta = self.stream.read()
        handle, label = self.stream.handle, self.stream.source.label
        found = {}
        for info in meta.states:
            if info.kind == "BROADCAST":
                sizes = [size for _, _, size in operator_state.sized_broadcast_state(buf, handle, meta, info.name,
                                                                                     label)]
            else:
                sizes = [size for _, size in operator_state.sized_list_state(buf, handle, meta, info.name, label)]
            found[info.name] = (info.kind, len(sizes), sum(sizes))
        return OperatorMeasure(self.stream.subtask, found)


def operator_tasks(op) -> list[OperatorTask]:
    """An operator's operator state in pieces: a subtask's stream each."""
    return [OperatorTask(stream) for stream in tables.operator_streams(op)]


def operator_state_sizes(parallelism: int, measured: list[OperatorMeasure]) -> list[OperatorStateSizes]:
    """The subtasks' measures merged: per state, its entries and bytes on each subtask (largest first)."""
    merged: dict[str, OperatorStateSizes] = {}
    for part in measured:
        for name, (kind, entries, size) in part.states.items():
            into = merged.get(name)
            if into is None:
                into = merged[name] = OperatorStateSizes(name, kind, [0] * parallelism, [0] * parallelism)
            into.subtask_entries[part.subtask] += entries
            into.subtask_bytes[part.subtask] += size
    return sorted(merged.values(), key=lambda state: (-state.bytes, state.name))
