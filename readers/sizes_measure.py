"""One decoding pass over a piece of keyed state (a subtask's RocksDB snapshot, a key-group stream or
a span of its key groups): what ``fstate sizes`` adds up there, as a mergeable partial result
(:class:`SubtaskMeasure`: counters, per-key-group arrays, each state's bounded top-key heaps), made in
this process, a pool worker or a Spark task, and merged by :mod:`.sizes` into one report.

Every entry's bytes are its bytes in Flink's canonical layout, the one savepoints and RocksDB store
(key-group prefix, key, namespace and a map entry's user key; the value), the same for every layout
and backend. One key group's keys are held at a time: memory is bounded by the largest key group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import heapq
import itertools
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..savepoint import metainfo
from ..savepoint import ttl_meta
from ..savepoint.keyed_codecs import frozen
from ..savepoint.keyed_state import KeyedStateSource
from ..savepoint.types import TtlValue


@dataclass
class KeySize:
    """One key of one state: its stored entries (namespaces, map entries), their bytes, and its
    list elements / map entries."""

    key: Any
    key_group: int
    bytes: int = 0
    entries: int = 0
    elements: int = 0

    def to_dict(self) -> dict:
        return {"key": key_text(self.key), "key_group": self.key_group, "bytes": self.bytes,
                "entries": self.entries, "elements": self.elements}


def key_text(key: Any) -> str:
    """A key as text: a string as it is, anything else as JSON (tuples as lists, bytes as hex)."""
    if isinstance(key, str):
        return key
    return json.dumps(_plain(key), ensure_ascii=False, default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    if isinstance(value, dict):
        return {str(k): _plain(x) for k, x in value.items()}
    return value


@dataclass
class TtlSizes:
    """A TTL state's entries already expired at ``at`` (last access + ttl <= at): an entry whose
    value, every list element, or map value has expired; for lists also the expired elements."""

    expired_entries: int = 0
    expired_bytes: int = 0
    expired_elements: int = 0
    oldest_access: int | None = None
    newest_access: int | None = None

    def seen(self, timestamp: int) -> None:
        if self.oldest_access is None or timestamp < self.oldest_access:
            self.oldest_access = timestamp
        if self.newest_access is None or timestamp > self.newest_access:
            self.newest_access = timestamp

    def merge(self, other: "TtlSizes") -> None:
        self.expired_entries += other.expired_entries
        self.expired_bytes += other.expired_bytes
        self.expired_elements += other.expired_elements
        for timestamp in (other.oldest_access, other.newest_access):
            if timestamp is not None:
                self.seen(timestamp)


class TopKeys:
    """The ``n`` largest keys by one measure (ties: the smaller key text first): a bounded heap."""

    def __init__(self, n: int, measure: str):
        self.n, self.measure = n, measure
        self.heap: list = []
        self.counter = itertools.count()

    def admits(self, value: int, key: Any) -> bool:
        """Whether a key of ``value`` ranks (cheap: before any object is made for it)."""
        if value <= 0 or self.n <= 0:
            return False
        if len(self.heap) < self.n:
            return True
        (lowest, text, _), _ = self.heap[0]
        return value > lowest or (value == lowest and str.__lt__(key_text(key), text))

    def threshold(self) -> tuple[int, str]:
        """What a key must beat to rank, as ``(value, text)``: a greater value, or the same value and a
        smaller key text (ranks nothing below a value of 1: ``(0, "")``, since no text is below "")."""
        if self.n <= 0:
            return sys.maxsize, ""
        if len(self.heap) < self.n:
            return 0, ""
        (lowest, text, _), _ = self.heap[0]
        return lowest, str(text)

    def offer(self, item: KeySize) -> None:
        value = getattr(item, self.measure)
        if not self.admits(value, item.key):
            return
        rank = (value, _Reversed(key_text(item.key)), next(self.counter))
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, (rank, item))
        elif rank > self.heap[0][0]:
            heapq.heapreplace(self.heap, (rank, item))

    def items(self) -> list[KeySize]:
        return [item for _, item in sorted(self.heap, key=lambda pair: pair[0], reverse=True)]


class _Reversed(str):
    """A string ordered backwards (the heap keeps the greatest ranks)."""

    def __lt__(self, other):
        return str.__gt__(self, other)

    def __gt__(self, other):
        return str.__lt__(self, other)


@dataclass
class StateSizes:
    """One keyed state of one operator, from the decoding pass."""

    name: str
    kind: str
    entries: int = 0
    bytes: int = 0
    key_bytes: int = 0
    value_bytes: int = 0
    elements: int = 0
    keys: int = 0
    top_by_bytes: list[KeySize] = field(default_factory=list)
    top_by_elements: list[KeySize] = field(default_factory=list)
    ttl: TtlSizes | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "entries": self.entries, "bytes": self.bytes,
                "key_bytes": self.key_bytes, "value_bytes": self.value_bytes, "elements": self.elements,
                "keys": self.keys, "top_by_bytes": [k.to_dict() for k in self.top_by_bytes],
                "top_by_elements": [k.to_dict() for k in self.top_by_elements],
                "ttl": dataclasses.asdict(self.ttl) if self.ttl is not None else None}


@dataclass
class StateMeasure:
    """One state measured in one subtask (picklable: a pool worker returns it)."""

    sizes: StateSizes
    by_bytes: TopKeys
    by_elements: TopKeys

    @property
    def counts_elements(self) -> bool:
        """Whether the state's keys rank by their elements too (lists, maps)."""
        return self.sizes.kind in ("LIST", "MAP")

    def elements_threshold(self) -> tuple[int, str]:
        """What a key's elements must beat to rank (nothing does in a state without elements)."""
        return self.by_elements.threshold() if self.counts_elements else (sys.maxsize, "")

    def __getstate__(self):
        return {"sizes": self.sizes, "by_bytes": self.by_bytes.items(), "by_elements": self.by_elements.items(),
                "n": self.by_bytes.n}

    def __setstate__(self, state):
        self.sizes = state["sizes"]
        self.by_bytes, self.by_elements = TopKeys(state["n"], "bytes"), TopKeys(state["n"], "elements")
        for item in state["by_bytes"]:
            self.by_bytes.offer(item)
        for item in state["by_elements"]:
            self.by_elements.offer(item)

    def merge(self, other: "StateMeasure") -> None:
        """Another piece's measure of the same state added to this one (its top keys offered to these heaps)."""
        a, b = self.sizes, other.sizes
        for name in ("entries", "bytes", "key_bytes", "value_bytes", "elements", "keys"):
            setattr(a, name, getattr(a, name) + getattr(b, name))
        if a.ttl is not None and b.ttl is not None:
            a.ttl.merge(b.ttl)
        for item in other.by_bytes.items():
            self.by_bytes.offer(item)
        for item in other.by_elements.items():
            self.by_elements.offer(item)


@dataclass
class SubtaskMeasure:
    """What the decoding pass found in one subtask's keyed state."""

    subtask: int
    states: dict[str, StateMeasure]
    #: key group → (bytes, entries)
    key_groups: dict[int, list[int]]


@dataclass(frozen=True)
class KeyedTask:
    """What a worker measures: one piece of a subtask's keyed state (picklable)."""

    source: KeyedStateSource
    top: int
    at: int
    ttl_ms: int | None

    def measure(self) -> SubtaskMeasure:
        return measure_subtask(self)


def measure(task) -> SubtaskMeasure:
    """One piece measured (module level: pool workers and Spark tasks call it)."""
    return task.measure()


#: keys that are their own identity (no :func:`..savepoint.keyed_codecs.frozen` call per entry)
_PLAIN_KEYS = (str, int, bytes)


def key_identity(key: Any) -> Any:
    """The identity of a decoded key across passes and snapshots (the growth join's)."""
    return key if type(key) in _PLAIN_KEYS else frozen(key)


#: what a pass hands each key group's keys to, besides the top heaps: (state name, key group,
#: {identity: [bytes, entries, elements, key]}) (the growth join's spill, :mod:`.sizes_join`)
OnKeys = Callable[[str, int, dict], None]


def measure_subtask(task: KeyedTask, key_groups: Iterable[int] | None = None,
                    on_keys: OnKeys | None = None) -> SubtaskMeasure:
    """One decoding pass over one subtask's keyed state (module level: pool workers call it), only
    ``key_groups`` when given: by the compiled scanner when it reads the state (canonical and
    uncompressed heap-native streams, RocksDB snapshots; TTL states whose wrappers it decodes, their
    last accesses recorded as it goes; a key Python cannot hash, a list or a map or a row holding one,
    counted under :func:`..savepoint.keyed_codecs.frozen` of it), else entry by entry (TTL values
    decoded with their timestamps). Without ``on_keys``, a canonical key group's keys stay in C
    (``Scanner.measure_top``: each key known by its bytes) and only those that may rank reach the
    top heaps here (:func:`_rank`); with it (growth by key: every key is wanted) they all come."""
    with _no_cycle_collection(), task.source.open(key_groups=key_groups) as state:
        ttl = any(ttl_meta.is_ttl_meta(codec.info) for codec in state.codecs)
        if not ttl or state.records_ttl():
            measured = _measure_compiled(state, task, on_keys)
            if measured is not None:
                return measured
        if not ttl:
            return _measure_entries(state, task, on_keys)
    with _no_cycle_collection(), task.source.open(key_groups=key_groups,
                                                  meta_of=ttl_meta.with_timestamped_states) as state:
        return _measure_entries(state, task, on_keys)


@contextlib.contextmanager
def _no_cycle_collection():
    """Python's cycle collector off for a pass: the pass makes no cycles, but the objects it keeps
    (a key group's candidate keys, the top heaps) made every collection walk more of them as the
    state grew (at 100 M keys, 60 % of a pass's CPU was the collector)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Pass:
    """What one pass over a subtask adds up."""

    def __init__(self, state, task: KeyedTask, on_keys: OnKeys | None):
        self.task, self.on_keys = task, on_keys
        self.measures: list[StateMeasure] = []
        for codec in state.codecs:
            info = codec.info
            kind = "TIMER" if info.backend_type == metainfo.PRIORITY_QUEUE else info.kind
            sizes = StateSizes(info.name, kind, ttl=TtlSizes() if ttl_meta.is_ttl_meta(info) else None)
            self.measures.append(StateMeasure(sizes, TopKeys(task.top, "bytes"), TopKeys(task.top, "elements")))
        self.count = len(self.measures)
        # per state: entries, bytes, key bytes, value bytes, elements (into StateSizes at the end)
        self.totals = [[0, 0, 0, 0, 0] for _ in range(self.count)]
        self.kg_bytes, self.kg_entries = [0] * state.max_parallelism, [0] * state.max_parallelism

    def finish(self) -> SubtaskMeasure:
        for measure, totals in zip(self.measures, self.totals):
            sizes = measure.sizes
            sizes.entries, sizes.bytes, sizes.key_bytes, sizes.value_bytes, sizes.elements = totals
        key_groups = {kg: [self.kg_bytes[kg], self.kg_entries[kg]] for kg in range(len(self.kg_bytes))
                      if self.kg_entries[kg]}
        return SubtaskMeasure(self.task.source.subtask, {m.sizes.name: m for m in self.measures}, key_groups)


def _measure_compiled(state, task: KeyedTask, on_keys: OnKeys | None = None) -> SubtaskMeasure | None:
    """The compiled scanner adds up each key group's entries per key; its keys go to the top heaps
    (without ``on_keys``, only those that may rank past the heaps' thresholds are handed over)."""
    counted = _Pass(state, task, on_keys)
    keys: list[dict] = [{} for _ in range(counted.count)]
    measures = counted.measures

    def ranks() -> tuple[int, list[tuple[int, str, int, str]]]:
        return task.top, [(*m.by_bytes.threshold(), *m.elements_threshold()) for m in measures]

    groups = state.measured_key_groups(keys, None if task.ttl_ms is None else task.at - task.ttl_ms,
                                       None if on_keys is not None else ranks)
    if groups is None:
        return None
    ttls = [m.sizes.ttl for m in counted.measures]
    for kg, totals, ranked in groups:
        for sid, found in enumerate(totals):
            if not found[0]:
                continue
            into = counted.totals[sid]
            for index in range(5):
                into[index] += found[index]
            ttl = ttls[sid]
            if ttl is not None and found[5]:  # its TTL timestamps: oldest, newest, what expired
                ttl.seen(found[6])
                ttl.seen(found[7])
                ttl.expired_entries += found[8]
                ttl.expired_bytes += found[9]
                ttl.expired_elements += found[10]
            counted.kg_bytes[kg] += found[1]
            counted.kg_entries[kg] += found[0]
            if ranked is None:
                _flush(counted.measures[sid], kg, keys[sid], on_keys)
                keys[sid].clear()
            else:  # the key group's keys counted in C, only those that may rank here
                number, candidates = ranked[sid]
                counted.measures[sid].sizes.keys += number
                _rank(counted.measures[sid], kg, candidates)
    return counted.finish()


def _measure_entries(state, task: KeyedTask, on_keys: OnKeys | None = None) -> SubtaskMeasure:
    """Entry by entry (:meth:`..savepoint.keyed_state.KeyedState.sized_entries`): every layout,
    TTL state."""
    counted = _Pass(state, task, on_keys)
    measures, totals, count = counted.measures, counted.totals, counted.count
    kg_bytes, kg_entries = counted.kg_bytes, counted.kg_entries
    lists = [m.sizes.kind == "LIST" for m in measures]
    maps = [m.sizes.kind == "MAP" for m in measures]
    ttls = [m.sizes.ttl for m in measures]
    open_kg: list[int | None] = [None] * count  # per state: the key group whose keys are open
    open_keys: list[dict] = [{} for _ in range(count)]
    deadline = None if task.ttl_ms is None else task.at - task.ttl_ms
    plain = _PLAIN_KEYS
    for (sid, kg, _, key, _, value), key_bytes, value_bytes in state.sized_entries():
        size = key_bytes + value_bytes
        total = totals[sid]
        total[0] += 1
        total[1] += size
        total[2] += key_bytes
        total[3] += value_bytes
        elements = 1 if maps[sid] else (len(value) if lists[sid] and value is not None else 0)
        total[4] += elements
        kg_bytes[kg] += size
        kg_entries[kg] += 1
        if ttls[sid] is not None:
            _count_ttl(ttls[sid], measures[sid].sizes.kind, value, size, deadline)
        if open_kg[sid] != kg:
            if open_kg[sid] is not None:
                _flush(measures[sid], open_kg[sid], open_keys[sid], on_keys)
            open_kg[sid], open_keys[sid] = kg, {}
        identity = key if type(key) in plain else frozen(key)
        keys = open_keys[sid]
        per_key = keys.get(identity)
        if per_key is None:
            keys[identity] = [size, 1, elements, key]
        else:
            per_key[0] += size
            per_key[1] += 1
            per_key[2] += elements
    for sid in range(count):
        if open_kg[sid] is not None:
            _flush(measures[sid], open_kg[sid], open_keys[sid], on_keys)
    return counted.finish()


def _flush(measure: StateMeasure, kg: int, keys: dict, on_keys: OnKeys | None) -> None:
    """One key group's keys ({identity: [bytes, entries, elements, key]}) into the state's top heaps
    (and to ``on_keys``)."""
    measure.sizes.keys += len(keys)
    if on_keys is not None:
        on_keys(measure.sizes.name, kg, keys)
    _rank(measure, kg, keys.values())


def _rank(measure: StateMeasure, kg: int, keys: Iterable[list]) -> None:
    """Keys of one key group ([bytes, entries, elements, key] each, in the order they came) offered to
    the state's top heaps."""
    by_bytes, by_elements = measure.by_bytes, measure.by_elements
    counts_elements = measure.counts_elements
    # the heaps' thresholds held here and renewed on each admission: a string key that does not rank
    # (most of them) costs two comparisons, no call (key_text of a string is the string itself)
    floor, text = by_bytes.threshold()
    e_floor, e_text = measure.elements_threshold()
    for size, entries, elements, key in keys:
        if type(key) is str:
            ranks = (size > floor or (size == floor and key < text)
                     or elements > e_floor or (elements == e_floor and key < e_text))
        else:
            ranks = by_bytes.admits(size, key) or (counts_elements and by_elements.admits(elements, key))
        if ranks:
            item = KeySize(key, kg, size, entries, elements)
            by_bytes.offer(item)
            floor, text = by_bytes.threshold()
            if counts_elements:
                by_elements.offer(item)
                e_floor, e_text = by_elements.threshold()


def _count_ttl(ttl: TtlSizes, kind: str, value: Any, entry_bytes: int, deadline: int | None) -> None:
    """Expired: last access <= at - ttl (Flink's ``TtlUtils.expired``: last access + ttl <= now)."""
    if kind == "LIST":
        stamps = [element.last_access_timestamp for element in value or () if isinstance(element, TtlValue)]
    elif kind == "MAP":
        stamps = [value[1].last_access_timestamp] if isinstance(value[1], TtlValue) else []
    else:
        stamps = [value.last_access_timestamp] if isinstance(value, TtlValue) else []
    for stamp in stamps:
        ttl.seen(stamp)
    if deadline is None or not stamps:
        return
    expired = sum(1 for stamp in stamps if stamp <= deadline)
    if kind == "LIST":
        ttl.expired_elements += expired
    if expired == len(stamps):
        ttl.expired_entries += 1
        ttl.expired_bytes += entry_bytes
