"""Where the state of a savepoint is: bytes and entries per operator, state, subtask and key group,
the largest keys, skew, a rescale preview and expired TTL state (``fstate sizes``).

Two sources of sizes:

* the handles (no decoding): each subtask's keyed and operator state bytes as the snapshot records
  them (:func:`..savepoint.summary.subtask_handle_bytes`, what ``fstate info`` sums);
* one decoding pass over the keyed state (:meth:`..savepoint.keyed_state.KeyedState.sized_entries`):
  every entry's bytes in Flink's canonical layout, the one savepoints and RocksDB store (key-group
  prefix, key, namespace and a map entry's user key; the value), the same for every layout and
  backend. A subtask is measured in one process (several on a process pool), keeping per state the
  ``top`` largest keys in two heaps (by bytes, by list / map elements) and one key group's keys at a
  time: memory is bounded by the largest key group, never the whole table.

Per key group the bytes are exact, so the state each subtask would own at another parallelism
(Flink's key-group ranges, :func:`..savepoint.types.hashing.key_group_range`) is exact too.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..savepoint import metainfo
from ..savepoint import pool
from ..savepoint import summary
from ..savepoint import ttl_meta
from ..savepoint.decoders import hashable
from ..savepoint.errors import InvalidArgumentError, UnknownOperatorError
from ..savepoint.keyed_state import KeyedStateSource
from ..savepoint.loader import Savepoint
from ..savepoint.types import TtlValue
from . import tables
from .sizes_stats import Skew, best_parallelism, parse_duration_ms, rescale_preview

#: how many keys each state's top lists keep
DEFAULT_TOP = 10


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


class _Top:
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
class _StateMeasure:
    """One state measured in one subtask (picklable: a pool worker returns it)."""

    sizes: StateSizes
    by_bytes: _Top
    by_elements: _Top
    watched: dict = field(default_factory=dict)

    def __getstate__(self):
        return {"sizes": self.sizes, "by_bytes": self.by_bytes.items(), "by_elements": self.by_elements.items(),
                "watched": self.watched, "n": self.by_bytes.n}

    def __setstate__(self, state):
        self.sizes, self.watched = state["sizes"], state["watched"]
        self.by_bytes, self.by_elements = _Top(state["n"], "bytes"), _Top(state["n"], "elements")
        for item in state["by_bytes"]:
            self.by_bytes.offer(item)
        for item in state["by_elements"]:
            self.by_elements.offer(item)


@dataclass
class SubtaskMeasure:
    """What the decoding pass found in one subtask's keyed state."""

    subtask: int
    states: dict[str, _StateMeasure]
    #: key group → (bytes, entries)
    key_groups: dict[int, list[int]]


@dataclass(frozen=True)
class _Task:
    """What a worker measures: one subtask's keyed state (picklable)."""

    source: KeyedStateSource
    top: int
    at: int
    ttl_ms: int | None
    #: state name → keys (hashable) whose exact sizes are wanted wherever they rank
    watch: dict


#: keys that are their own identity (no :func:`hashable` call per entry)
_PLAIN_KEYS = (str, int, bytes)


def measure_subtask(task: _Task) -> SubtaskMeasure:
    """One decoding pass over one subtask's keyed state (module level: pool workers call it): by
    the compiled scanner when it reads the state (no TTL state, whose values are looked into, and
    keys Python can hash), else entry by entry."""
    with task.source.open(meta_of=ttl_meta.with_timestamped_states) as state:
        if not any(ttl_meta.is_ttl_meta(codec.info) for codec in state.codecs):
            try:
                measured = _measure_compiled(state, task)
            except TypeError:  # a key Python cannot hash (a list, a dict): measured entry by entry
                measured = None
            if measured is not None:
                return measured
        return _measure_entries(state, task)


class _Pass:
    """What one pass over a subtask adds up."""

    def __init__(self, state, task: _Task):
        self.task = task
        self.measures: list[_StateMeasure] = []
        for codec in state.codecs:
            info = codec.info
            kind = "TIMER" if info.backend_type == metainfo.PRIORITY_QUEUE else info.kind
            sizes = StateSizes(info.name, kind, ttl=TtlSizes() if ttl_meta.is_ttl_meta(info) else None)
            self.measures.append(_StateMeasure(sizes, _Top(task.top, "bytes"), _Top(task.top, "elements")))
        self.count = len(self.measures)
        # per state: entries, bytes, key bytes, value bytes, elements (into StateSizes at the end)
        self.totals = [[0, 0, 0, 0, 0] for _ in range(self.count)]
        self.watches = [task.watch.get(m.sizes.name) for m in self.measures]
        self.kg_bytes, self.kg_entries = [0] * state.max_parallelism, [0] * state.max_parallelism

    def finish(self) -> SubtaskMeasure:
        for measure, totals in zip(self.measures, self.totals):
            sizes = measure.sizes
            sizes.entries, sizes.bytes, sizes.key_bytes, sizes.value_bytes, sizes.elements = totals
        key_groups = {kg: [self.kg_bytes[kg], self.kg_entries[kg]] for kg in range(len(self.kg_bytes))
                      if self.kg_entries[kg]}
        return SubtaskMeasure(self.task.source.subtask, {m.sizes.name: m for m in self.measures}, key_groups)


def _measure_compiled(state, task: _Task) -> SubtaskMeasure | None:
    """The compiled scanner adds up each key group's entries per key; its keys go to the top heaps."""
    counted = _Pass(state, task)
    keys: list[dict] = [{} for _ in range(counted.count)]
    groups = state.measured_key_groups(keys)
    if groups is None:
        return None
    for kg, totals in groups:
        for sid, found in enumerate(totals):
            if not found[0]:
                continue
            into = counted.totals[sid]
            for index in range(5):
                into[index] += found[index]
            counted.kg_bytes[kg] += found[1]
            counted.kg_entries[kg] += found[0]
            _flush(counted.measures[sid], kg, keys[sid], counted.watches[sid])
            keys[sid].clear()
    return counted.finish()


def _measure_entries(state, task: _Task) -> SubtaskMeasure:
    """Entry by entry (:meth:`..savepoint.keyed_state.KeyedState.sized_entries`): every layout,
    TTL state."""
    counted = _Pass(state, task)
    measures, totals, count = counted.measures, counted.totals, counted.count
    kg_bytes, kg_entries, watches = counted.kg_bytes, counted.kg_entries, counted.watches
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
                _flush(measures[sid], open_kg[sid], open_keys[sid], watches[sid])
            open_kg[sid], open_keys[sid] = kg, {}
        identity = key if type(key) in plain else hashable(key)
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
            _flush(measures[sid], open_kg[sid], open_keys[sid], watches[sid])
    return counted.finish()


def _flush(measure: _StateMeasure, kg: int, keys: dict, watch: set | None) -> None:
    """One key group's keys ({identity: [bytes, entries, elements, key]}) into the state's top heaps
    (and the watched keys' sizes)."""
    measure.sizes.keys += len(keys)
    by_bytes, by_elements = measure.by_bytes, measure.by_elements
    counts_elements = measure.sizes.kind in ("LIST", "MAP")
    for identity, (size, entries, elements, key) in keys.items():
        wanted = watch is not None and identity in watch
        if by_bytes.admits(size, key) or (counts_elements and by_elements.admits(elements, key)) or wanted:
            item = KeySize(key, kg, size, entries, elements)
            by_bytes.offer(item)
            if counts_elements:
                by_elements.offer(item)
            if wanted:
                measure.watched[identity] = item


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


# ---------------------------------------------------------------------------------------------
# the report


@dataclass
class OperatorSizes:
    """One operator: its handles' bytes and, for keyed state, what the decoding pass found."""

    uid: str | None
    uid_hash: str
    name: str | None
    sql: dict | None
    parallelism: int
    max_parallelism: int
    #: per subtask: keyed state bytes, operator state bytes (the handles)
    handle_keyed_bytes: list[int]
    handle_operator_bytes: list[int]
    states: list[StateSizes] = field(default_factory=list)
    #: per key group (max parallelism of them): canonical bytes and entries
    key_group_bytes: list[int] = field(default_factory=list)
    key_group_entries: list[int] = field(default_factory=list)
    #: per subtask: canonical bytes of its keyed state
    subtask_bytes: list[int] = field(default_factory=list)
    rescale: list[dict] = field(default_factory=list)
    best_parallelism: int | None = None
    #: the TTL expiry was counted with (``ttl_ms``, or the SQL plan's), None: not counted
    ttl_ms: int | None = None
    #: state name → {key (hashable): KeySize} of the keys asked for (``watch``)
    watched: dict = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        return self.uid or self.uid_hash

    @property
    def keyed_bytes(self) -> int:
        return sum(self.key_group_bytes)

    def to_dict(self) -> dict:
        return {"uid": self.uid, "uid_hash": self.uid_hash, "name": self.name, "sql": self.sql,
                "parallelism": self.parallelism, "max_parallelism": self.max_parallelism,
                "handle_keyed_bytes": self.handle_keyed_bytes, "handle_operator_bytes": self.handle_operator_bytes,
                "handle_bytes": sum(self.handle_keyed_bytes) + sum(self.handle_operator_bytes),
                "keyed_bytes": self.keyed_bytes, "entries": sum(self.key_group_entries),
                "states": [s.to_dict() for s in self.states],
                "key_group_bytes": self.key_group_bytes, "key_group_entries": self.key_group_entries,
                "subtask_bytes": self.subtask_bytes,
                "subtask_skew": Skew.of(self.subtask_bytes).to_dict() if self.subtask_bytes else None,
                "key_group_skew": Skew.of(self.key_group_bytes).to_dict() if self.key_group_bytes else None,
                "rescale": self.rescale, "best_parallelism": self.best_parallelism, "ttl_ms": self.ttl_ms}


@dataclass
class SizesReport:
    """What ``fstate sizes PATH`` shows (:func:`state_sizes`)."""

    path: str
    at: int
    ttl_ms: int | None
    top: int
    parallelisms: list[int]
    operators: list[OperatorSizes]

    def operator(self, uid_or_hash: str) -> OperatorSizes:
        """The operator of this uid or uid hash."""
        for op in self.operators:
            if uid_or_hash in (op.uid, op.uid_hash):
                return op
        raise UnknownOperatorError(f"{self.path}: no operator {uid_or_hash} in the report")

    def to_dict(self) -> dict:
        return {"path": self.path, "at": self.at, "ttl_ms": self.ttl_ms, "top": self.top,
                "parallelisms": self.parallelisms,
                "handle_bytes": sum(sum(o.handle_keyed_bytes) + sum(o.handle_operator_bytes) for o in self.operators),
                "keyed_bytes": sum(o.keyed_bytes for o in self.operators),
                "operators": [o.to_dict() for o in self.operators]}

    def to_html(self) -> str:
        """The report as one self-contained HTML page (:mod:`.sizes_html`)."""
        from . import sizes_html

        return sizes_html.render(self.to_dict())


def state_sizes(path: str | Savepoint, *, top: int = DEFAULT_TOP, parallelisms: Iterable[int] = (),
                at: int | None = None, ttl_ms: int | None = None, plan: str | None = None,
                operators: Iterable[str] | None = None, workers: int | None = None,
                watch: dict | None = None) -> SizesReport:
    """Where the state of the savepoint or checkpoint at ``path`` is (:class:`SizesReport`).

    ``top``: keys kept per state in each top list. ``parallelisms``: the rescale preview's
    parallelisms (besides each operator's own). ``at`` (epoch ms, default now) and ``ttl_ms`` (the
    states' time-to-live, which snapshots do not record): TTL state already expired then.
    ``plan``: the SQL job's compiled plan, naming its operators (and, without ``ttl_ms``, giving
    their states' TTL). ``operators``: only these (uids or uid hashes). ``watch``: {(uid hash, state name): keys} whose sizes are wanted whatever they
    rank (:func:`.sizes_growth.state_growth`)."""
    if top < 0:
        raise InvalidArgumentError(f"top must be 0 or more, not {top}")
    if ttl_ms is not None and ttl_ms <= 0:
        raise InvalidArgumentError(f"the TTL must be positive, not {ttl_ms} ms")
    savepoint = path if isinstance(path, Savepoint) else Savepoint.open(path)
    binding = None
    if plan:
        from ..savepoint.sql_binding import load_binding

        binding = load_binding(plan, savepoint)
    at = int(time.time() * 1000) if at is None else at
    wanted = None if operators is None else set(operators)
    chosen = [op for op in savepoint.operators if wanted is None or {op.uid, op.uid_hash} & wanted]
    if wanted is not None:
        missing = wanted - {name for op in chosen for name in (op.uid, op.uid_hash)}
        if missing:
            raise UnknownOperatorError(f"{savepoint.path}: no operator {sorted(missing)[0]}")
    parallelisms = sorted(set(parallelisms))
    tasks, owners = [], []
    ttls = {op.uid_hash: ttl_ms if ttl_ms is not None else _plan_ttl(binding, op) for op in chosen}
    for op in chosen:
        watched = {name: keys for (uid_hash, name), keys in (watch or {}).items() if uid_hash == op.uid_hash}
        for source in tables.keyed_sources(op):
            tasks.append(_Task(source, top, at, ttls[op.uid_hash], watched))
            owners.append(op.uid_hash)
    keyed_bytes = sum(keyed for op in chosen for keyed, _ in summary.subtask_handle_bytes(op).values())
    measured = _run(tasks, workers, keyed_bytes)
    by_operator: dict[str, list[SubtaskMeasure]] = {}
    for owner, result in zip(owners, measured):
        by_operator.setdefault(owner, []).append(result)
    report = [_operator_sizes(op, by_operator.get(op.uid_hash, []), binding, top, parallelisms) for op in chosen]
    for op in report:
        op.ttl_ms = ttls[op.uid_hash]
    return SizesReport(savepoint.path, at, ttl_ms, top, parallelisms, report)


def _plan_ttl(binding, op) -> int | None:
    """An SQL operator's state TTL as its plan node records it (``table.exec.state.ttl`` or a
    STATE_TTL hint), when all its states have the same one; None without a plan or TTL."""
    described = binding.operator(op) if binding is not None else None
    node = binding.plan.nodes.get(described.node_id) if described is not None else None
    states = node.spec.get("state") if node is not None and isinstance(node.spec, dict) else None
    found = {entry.get("ttl") for entry in states or () if isinstance(entry, dict)}
    if len(found) != 1:
        return None
    (text,) = found
    try:
        return parse_duration_ms(str(text), "the plan's state TTL")
    except InvalidArgumentError:  # "0 ms": no TTL
        return None


def _run(tasks: list[_Task], workers: int | None, keyed_bytes: int) -> list[SubtaskMeasure]:
    """Every subtask measured: here, or on a process pool when there is much state."""
    count = pool.pool_size(len(tasks), keyed_bytes, workers)
    if count == 1:
        return [measure_subtask(task) for task in tasks]
    with pool.spawn_pool(count) as executor:
        return list(executor.map(measure_subtask, tasks))


def _operator_sizes(op, measured: list[SubtaskMeasure], binding, top: int, parallelisms: list[int]) -> OperatorSizes:
    handle = summary.subtask_handle_bytes(op)
    result = OperatorSizes(op.uid, op.uid_hash, op.name, summary.sql_entry(op, binding), op.parallelism,
                           op.max_parallelism, [handle.get(i, (0, 0))[0] for i in range(op.parallelism)],
                           [handle.get(i, (0, 0))[1] for i in range(op.parallelism)])
    if not measured:
        return result
    merged: dict[str, _StateMeasure] = {}
    for part in measured:
        for name, measure in part.states.items():
            into = merged.get(name)
            if into is None:
                merged[name] = measure
                continue
            _merge(into, measure)
    result.states = []
    for measure in merged.values():
        measure.sizes.top_by_bytes = measure.by_bytes.items()
        measure.sizes.top_by_elements = measure.by_elements.items()
        result.states.append(measure.sizes)
    result.states.sort(key=lambda s: (-s.bytes, s.name))
    result.watched = {name: m.watched for name, m in merged.items()}
    kg_bytes, kg_entries = [0] * op.max_parallelism, [0] * op.max_parallelism
    for part in measured:
        for kg, (size, entries) in part.key_groups.items():
            kg_bytes[kg] += size
            kg_entries[kg] += entries
    result.key_group_bytes, result.key_group_entries = kg_bytes, kg_entries
    subtasks = [0] * op.parallelism
    for part in measured:
        subtasks[part.subtask] += sum(size for size, _ in part.key_groups.values())
    result.subtask_bytes = subtasks
    wanted = sorted({op.parallelism, *parallelisms})
    result.rescale = rescale_preview(kg_bytes, kg_entries, wanted, op.max_parallelism)
    result.best_parallelism = best_parallelism(result.rescale, parallelisms)
    return result


def _merge(into: _StateMeasure, other: _StateMeasure) -> None:
    a, b = into.sizes, other.sizes
    for name in ("entries", "bytes", "key_bytes", "value_bytes", "elements", "keys"):
        setattr(a, name, getattr(a, name) + getattr(b, name))
    if a.ttl is not None and b.ttl is not None:
        a.ttl.merge(b.ttl)
    for item in other.by_bytes.items():
        into.by_bytes.offer(item)
    for item in other.by_elements.items():
        into.by_elements.offer(item)
    into.watched.update(other.watched)
