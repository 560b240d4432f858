"""Growth by key (``fstate sizes OLD NEW``): every key of OLD joined with the same key of NEW, in
bounded memory, keeping per state the ``top`` keys that grew most (bytes; list / map elements) and
that shrank most (a key gone counts as shrunk to nothing), with counts of new, gone, grown and
shrunk keys.

Both snapshots' keyed state is grouped by key group. When OLD and NEW have the same max parallelism
a key is in the same key group in both, whatever their parallelisms (a rescaled job moves key
groups between subtasks, never keys between key groups): the key groups are cut into ranges at
every boundary of either snapshot's pieces, and a range is one task (:class:`JoinTask`: this
process, a pool worker or a Spark task), which reads both snapshots' pieces over that range only.
When the max parallelisms differ, a key's key group differs too: the operator is one task that
partitions the keys of both by a hash of the key instead (``join: "hash"`` in the report).

Within a task each side's keys are spilled to temporary files, a bucket of key groups (or of key
hashes) a file, as the measuring pass hands over each key group's keys
(:func:`.sizes_measure.measure_subtask`'s ``on_keys``); the buckets are then joined one at a time:
memory holds one bucket of OLD's keys (about :data:`BUCKET_BYTES` of state, one key group at the
least), never the whole table."""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterator

from . import tables
from .sizes_measure import KeyedTask, SubtaskMeasure, TopKeys, key_identity, key_text, measure_subtask

#: a task's keys are spread over spill files (buckets) of about this much state each (its handles'
#: bytes), at least :data:`BUCKETS` and at most :data:`MAX_BUCKETS` of them a side
BUCKET_BYTES = 8 << 20
BUCKETS, MAX_BUCKETS = 64, 256

#: how keys of an operator in both snapshots are matched
BY_KEY_GROUP, BY_HASH = "key group", "hash"


@dataclass
class KeyGrowth:
    """One key of one state in OLD and NEW: its bytes, stored entries and list / map elements
    (absent: 0), and its key group (NEW's, OLD's for a key gone)."""

    key: Any
    key_group: int
    old_bytes: int
    new_bytes: int
    old_entries: int
    new_entries: int
    old_elements: int
    new_elements: int

    @property
    def growth(self) -> int:
        return self.new_bytes - self.old_bytes

    @property
    def element_growth(self) -> int:
        return self.new_elements - self.old_elements

    @property
    def shrink(self) -> int:
        return self.old_bytes - self.new_bytes

    def to_dict(self) -> dict:
        return {"key": key_text(self.key), "key_group": self.key_group, "old_bytes": self.old_bytes,
                "new_bytes": self.new_bytes, "growth": self.growth, "old_entries": self.old_entries,
                "new_entries": self.new_entries, "old_elements": self.old_elements,
                "new_elements": self.new_elements, "element_growth": self.element_growth}


@dataclass
class KeyChanges:
    """One state's keys, OLD against NEW: how many are new, gone, grown, shrunk (in bytes) or the
    same size, and the ``top`` that grew most, grew most in elements and shrank most."""

    name: str
    top: int
    new_keys: int = 0
    gone_keys: int = 0
    grown_keys: int = 0
    shrunk_keys: int = 0
    same_keys: int = 0
    grown: TopKeys = field(init=False)
    by_elements: TopKeys = field(init=False)
    shrunk: TopKeys = field(init=False)

    def __post_init__(self):
        self.grown = TopKeys(self.top, "growth")
        self.by_elements = TopKeys(self.top, "element_growth")
        self.shrunk = TopKeys(self.top, "shrink")

    def __getstate__(self):
        counts = {name: getattr(self, name) for name in KEY_COUNTS}
        return {"name": self.name, "top": self.top, "counts": counts, "grown": self.grown.items(),
                "by_elements": self.by_elements.items(), "shrunk": self.shrunk.items()}

    def __setstate__(self, state):
        self.name, self.top = state["name"], state["top"]
        self.__post_init__()
        for name, value in state["counts"].items():
            setattr(self, name, value)
        for heap in ("grown", "by_elements", "shrunk"):
            for item in state[heap]:
                getattr(self, heap).offer(item)

    def add(self, key: Any, key_group: int, old: list | None, new: list | None) -> None:
        """A key's [bytes, entries, elements] in OLD and NEW (None: absent there)."""
        old_bytes, new_bytes = old[0] if old else 0, new[0] if new else 0
        growth = new_bytes - old_bytes
        if old is None:
            self.new_keys += 1
        elif new is None:
            self.gone_keys += 1
        elif growth > 0:
            self.grown_keys += 1
        elif growth < 0:
            self.shrunk_keys += 1
        else:
            self.same_keys += 1
        element_growth = (new[2] if new else 0) - (old[2] if old else 0)
        if self.grown.admits(growth, key) or self.shrunk.admits(-growth, key) or \
                self.by_elements.admits(element_growth, key):
            item = KeyGrowth(key, key_group, old_bytes, new_bytes, old[1] if old else 0, new[1] if new else 0,
                             old[2] if old else 0, new[2] if new else 0)
            self.grown.offer(item)
            self.shrunk.offer(item)
            self.by_elements.offer(item)

    def merge(self, other: "KeyChanges") -> None:
        for name in KEY_COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for heap in ("grown", "by_elements", "shrunk"):
            for item in getattr(other, heap).items():
                getattr(self, heap).offer(item)

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in ("name",) + KEY_COUNTS}


#: what :class:`KeyChanges` counts (its fields and the report's)
KEY_COUNTS = ("new_keys", "gone_keys", "grown_keys", "shrunk_keys", "same_keys")


@dataclass
class Joined:
    """What a :class:`JoinTask` found: per state the key changes, and each side's pieces measured
    over its key groups as ``fstate sizes`` measures them (for the two snapshots' reports)."""

    changes: dict[str, KeyChanges]
    old: list[SubtaskMeasure]
    new: list[SubtaskMeasure]


@dataclass(frozen=True)
class JoinTask:
    """What a worker joins (picklable): OLD's and NEW's pieces of one operator over the key groups
    ``key_groups`` (inclusive; None: every key group, keys partitioned by hash), each piece measured
    once (``top`` keys, TTL state expired at ``at``: each side's :class:`.sizes_measure.KeyedTask`)."""

    old: tuple[KeyedTask, ...]
    new: tuple[KeyedTask, ...]
    key_groups: tuple[int, int] | None
    top: int
    buckets: int = BUCKETS

    def measure(self) -> Joined:
        wanted = None if self.key_groups is None else range(self.key_groups[0], self.key_groups[1] + 1)
        with tempfile.TemporaryDirectory(prefix="fstate-growth-") as directory:
            old = _Spill(os.path.join(directory, "old"), self.key_groups, self.buckets)
            new = _Spill(os.path.join(directory, "new"), self.key_groups, self.buckets)
            measured = []
            for spill, tasks in ((old, self.old), (new, self.new)):
                with spill:
                    measured.append([measure_subtask(task, wanted, spill.add) for task in tasks])
            changes: dict[str, KeyChanges] = {}
            for bucket in range(self.buckets):
                _join_bucket(old.records(bucket), new.records(bucket), changes, self.top)
            return Joined(changes, *measured)


class _Spill:
    """One side's keys in bucket files: records (state name, key group, [(bytes, entries, elements,
    key), ...]), a key group's keys of a state at a time (pickled)."""

    def __init__(self, prefix: str, key_groups: tuple[int, int] | None, buckets: int):
        self.prefix, self.key_groups, self.buckets = prefix, key_groups, buckets
        self.files: dict[int, Any] = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for handle in self.files.values():
            handle.close()
        self.files = {}

    def _file(self, bucket: int):
        handle = self.files.get(bucket)
        if handle is None:
            handle = self.files[bucket] = open(f"{self.prefix}-{bucket}", "wb")
        return handle

    def add(self, name: str, kg: int, keys: dict) -> None:
        values = [tuple(value) for value in keys.values()]
        if self.key_groups is not None:
            lo, hi = self.key_groups
            bucket = (kg - lo) * self.buckets // (hi - lo + 1)
            pickle.dump((name, kg, values), self._file(bucket), pickle.HIGHEST_PROTOCOL)
            return
        parts: dict[int, list] = {}
        for value in values:
            parts.setdefault(hash(key_identity(value[3])) % self.buckets, []).append(value)
        for bucket, part in parts.items():
            pickle.dump((name, kg, part), self._file(bucket), pickle.HIGHEST_PROTOCOL)

    def records(self, bucket: int) -> Iterator[tuple[str, int, list]]:
        path = f"{self.prefix}-{bucket}"
        if not os.path.exists(path):
            return
        with open(path, "rb") as handle:
            while True:
                try:
                    yield pickle.load(handle)
                except EOFError:
                    return


def _join_bucket(old: Iterator, new: Iterator, changes: dict[str, KeyChanges], top: int) -> None:
    """OLD's keys of one bucket held (a key of a state appears once a side: one key group holds it), NEW's
    streamed past them; what is left of OLD is gone."""
    held: dict[tuple[str, Any], tuple] = {}
    for name, kg, values in old:
        for size, entries, elements, key in values:
            held[name, key_identity(key)] = (kg, [size, entries, elements], key)
    for name, kg, values in new:
        into = changes.get(name)
        if into is None:
            into = changes[name] = KeyChanges(name, top)
        for size, entries, elements, key in values:
            was = held.pop((name, key_identity(key)), None)
            into.add(key, kg, was[1] if was else None, [size, entries, elements])
    for (name, _), (kg, sizes, key) in held.items():
        into = changes.get(name)
        if into is None:
            into = changes[name] = KeyChanges(name, top)
        into.add(key, kg, sizes, None)


def join_tasks(old_op, new_op, top: int, state: int, at: int = 0,
               ttls: tuple[int | None, int | None] = (None, None)) -> tuple[list[JoinTask], str]:
    """The tasks joining an operator's keys in OLD and NEW (either None: absent there; ``state``:
    their handles' bytes, :func:`.sizes.state_bytes`), measuring each side's pieces as ``fstate
    sizes`` does (``top`` keys; TTL state expired at ``at`` with each side's TTL, ``ttls``), and how
    they match keys (:data:`BY_KEY_GROUP` or :data:`BY_HASH`)."""
    old, new = ([KeyedTask(source, top, at, ttl) for source in tables.keyed_sources(op)] if op is not None else []
                for op, ttl in zip((old_op, new_op), ttls))
    if not old and not new:
        return [], BY_KEY_GROUP
    if old and new and old_op.max_parallelism != new_op.max_parallelism:
        return [JoinTask(tuple(old), tuple(new), None, top, _buckets(state))], BY_HASH
    max_parallelism = (new_op or old_op).max_parallelism
    cuts = sorted({edge for task in old + new for edge in (_range(task)[0], _range(task)[1] + 1)})
    tasks = []
    for lo, end in zip(cuts, cuts[1:]):
        hi = end - 1
        pick = [tuple(t for t in side if _range(t)[0] <= hi and _range(t)[1] >= lo) for side in (old, new)]
        if pick[0] or pick[1]:
            tasks.append(JoinTask(pick[0], pick[1], (lo, hi), top, _buckets(state * (end - lo) // max_parallelism)))
    return tasks, BY_KEY_GROUP


def _buckets(state: int) -> int:
    """How many buckets a task of about ``state`` bytes spills a side into."""
    return min(MAX_BUCKETS, max(BUCKETS, -(-state // BUCKET_BYTES)))


def _range(task: KeyedTask) -> tuple[int, int]:
    """The key groups a piece holds (inclusive)."""
    source = task.source
    return source.span_key_groups or (source.start_key_group, source.end_key_group)
