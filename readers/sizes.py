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
  time: memory is bounded by the largest key group, never the whole table. The compiled scanner
  adds each key group's keys up in C and hands over only the keys that may enter the heaps.

Per key group the bytes are exact, so the state each subtask would own at another parallelism
(Flink's key-group ranges, :func:`..savepoint.types.hashing.key_group_range`) is exact too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..savepoint import pool
from ..savepoint import summary
from ..savepoint.errors import InvalidArgumentError, UnknownOperatorError
from ..savepoint.loader import Savepoint
from . import tables
from .sizes_measure import KeyedTask, KeySize, StateMeasure, StateSizes, SubtaskMeasure, TtlSizes, key_text, measure
from .sizes_operator import OperatorMeasure, OperatorStateSizes, operator_state_sizes, operator_tasks
from .sizes_stats import OperatorLoad, Skew, best_parallelism, job_rescale, parse_duration_ms, rescale_preview

#: how many keys each state's top lists keep
DEFAULT_TOP = 10
#: whether ``auto`` measures a snapshot's sizes on Spark when its state is large (as ``read`` does):
#: no. A pass holds one key group's keys at most (a state whose keys come once each: only its top
#: keys) and drops the pages it has read, whatever the state's size, and Spark on this machine's cores
#: measures the same pieces no faster (8.5 GB, 100 M keys: 7 s here, 110 s on local Spark). Spark
#: measures when asked for (``--engine spark``, ``--master``, ``--conf``, a session); growth
#: (``sizes OLD NEW``) joins every key and still goes by size.
MEASURED_BY_SIZE = False


# ---------------------------------------------------------------------------------------------
# the report


@dataclass
class OperatorSizes:
    """One operator: its handles' bytes and what the decoding pass found in its keyed state and its
    operator state."""

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
    #: list, union and broadcast states: elements / entries and their bytes per subtask
    operator_states: list[OperatorStateSizes] = field(default_factory=list)

    @property
    def display_name(self) -> str:
        return self.uid or self.uid_hash

    @property
    def keyed_bytes(self) -> int:
        return sum(self.key_group_bytes)

    @property
    def operator_state_bytes(self) -> int:
        return sum(state.bytes for state in self.operator_states)

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
                "rescale": self.rescale, "best_parallelism": self.best_parallelism, "ttl_ms": self.ttl_ms,
                "operator_state_bytes": self.operator_state_bytes,
                "operator_state_entries": sum(state.entries for state in self.operator_states),
                "operator_states": [state.to_dict() for state in self.operator_states]}


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

    @property
    def job(self) -> dict:
        """The rescale preview of the whole job, slot by slot (:func:`.sizes_stats.job_rescale`)."""
        return job_rescale([OperatorLoad(op.display_name, op.parallelism, op.max_parallelism, op.key_group_bytes)
                            for op in self.operators], self.parallelisms)

    def to_dict(self) -> dict:
        return {"path": self.path, "at": self.at, "ttl_ms": self.ttl_ms, "top": self.top,
                "parallelisms": self.parallelisms, "job": self.job,
                "handle_bytes": sum(sum(o.handle_keyed_bytes) + sum(o.handle_operator_bytes) for o in self.operators),
                "keyed_bytes": sum(o.keyed_bytes for o in self.operators),
                "operator_state_bytes": sum(o.operator_state_bytes for o in self.operators),
                "operators": [o.to_dict() for o in self.operators]}

    def to_html(self) -> str:
        """The report as one self-contained HTML page (:mod:`.sizes_html`)."""
        from . import sizes_html

        return sizes_html.render(self.to_dict())


def state_sizes(path: str | Savepoint, *, top: int = DEFAULT_TOP, parallelisms: Iterable[int] = (),
                at: int | None = None, ttl_ms: int | None = None, plan: str | None = None,
                operators: Iterable[str] | None = None, workers: int | None = None,
                engine: str = "auto", spark=None) -> SizesReport:
    """Where the state of the savepoint or checkpoint at ``path`` is (:class:`SizesReport`).

    ``top``: keys kept per state in each top list. ``parallelisms``: the rescale preview's
    parallelisms (besides each operator's own). ``at`` (epoch ms, default now) and ``ttl_ms`` (the
    states' time-to-live, which snapshots do not record): TTL state already expired then.
    ``plan``: the SQL job's compiled plan, naming its operators (and, without ``ttl_ms``, giving
    their states' TTL). ``operators``: only these (uids or uid hashes).
    ``engine``: where the pieces are measured, as :func:`.engine.choose_engine` picks (``auto``:
    Spark when a session ``spark`` is given, else this process and its pool, whatever the state's
    size: :data:`MEASURED_BY_SIZE`); both give the same report."""
    planned = plan_sizes(path, top=top, parallelisms=parallelisms, at=at, ttl_ms=ttl_ms, plan=plan,
                         operators=operators)
    tasks, owners = planned.tasks()
    measured = run_tasks(tasks, workers, state_bytes(planned.operators), engine, spark, by_size=MEASURED_BY_SIZE)
    parts: dict[tuple[str, str], list] = {}
    for owner, result in zip(owners, measured):
        parts.setdefault(owner, []).append(result)
    return planned.report(parts)


@dataclass
class SizesPlan:
    """One snapshot's ``fstate sizes`` before measuring (:func:`plan_sizes`): the operators, each one's
    TTL, and what the report is made of once its pieces are measured."""

    savepoint: Savepoint
    binding: Any
    top: int
    parallelisms: list[int]
    at: int
    ttl_ms: int | None
    operators: list
    #: uid hash → the TTL its states are counted with (None: not counted)
    ttls: dict[str, int | None]

    def tasks(self, keyed: bool = True) -> tuple[list, list[tuple[str, str]]]:
        """The pieces to measure, and each one's owner (uid hash, "keyed" or "operator"): keyed state
        a piece each (:class:`.sizes_measure.KeyedTask`; ``keyed`` False: none, measured elsewhere) and
        a subtask's operator state each."""
        tasks, owners = [], []
        for op in self.operators:
            for source in tables.keyed_sources(op) if keyed else ():
                tasks.append(KeyedTask(source, self.top, self.at, self.ttls[op.uid_hash]))
                owners.append((op.uid_hash, "keyed"))
            for task in operator_tasks(op):
                tasks.append(task)
                owners.append((op.uid_hash, "operator"))
        return tasks, owners

    def report(self, parts: dict[tuple[str, str], list]) -> SizesReport:
        """The report from the measured pieces, by owner (uid hash, "keyed" or "operator")."""
        report = []
        for op in self.operators:
            sizes = _operator_sizes(op, parts.get((op.uid_hash, "keyed"), []), self.binding, self.top,
                                    self.parallelisms)
            sizes.operator_states = operator_state_sizes(op.parallelism, parts.get((op.uid_hash, "operator"), []))
            sizes.ttl_ms = self.ttls[op.uid_hash]
            report.append(sizes)
        return SizesReport(self.savepoint.path, self.at, self.ttl_ms, self.top, self.parallelisms, report)


def plan_sizes(path: str | Savepoint, *, top: int = DEFAULT_TOP, parallelisms: Iterable[int] = (),
               at: int | None = None, ttl_ms: int | None = None, plan: str | None = None,
               operators: Iterable[str] | None = None, required: bool = True) -> SizesPlan:
    """:func:`state_sizes`'s arguments checked and its operators chosen (``required``: see
    :func:`chosen_operators`)."""
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
    chosen = chosen_operators(savepoint, operators, required)
    ttls = {op.uid_hash: ttl_ms if ttl_ms is not None else _plan_ttl(binding, op) for op in chosen}
    return SizesPlan(savepoint, binding, top, sorted(set(parallelisms)), at, ttl_ms, chosen, ttls)


def chosen_operators(savepoint: Savepoint, operators: Iterable[str] | None = None, required: bool = True) -> list:
    """The savepoint's operators, or only ``operators`` (uids or uid hashes; one it lacks is an error
    when ``required``: growth takes operators that only one of its two snapshots has)."""
    wanted = None if operators is None else set(operators)
    chosen = [op for op in savepoint.operators if wanted is None or {op.uid, op.uid_hash} & wanted]
    if wanted is not None and required:
        missing = wanted - {name for op in chosen for name in (op.uid, op.uid_hash)}
        if missing:
            raise UnknownOperatorError(f"{savepoint.path}: no operator {sorted(missing)[0]}")
    return chosen


def state_bytes(operators: Iterable) -> int:
    """The state ``fstate sizes`` reads of these operators (their handles' bytes): what the engine
    choice weighs (:func:`.engine.choose_engine`)."""
    return sum(keyed + operator for op in operators for keyed, operator in summary.subtask_handle_bytes(op).values())


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


def run_tasks(tasks: list, workers: int | None, state: int, engine: str, spark, by_size: bool = True) -> list:
    """Every piece measured (a task's ``measure()``: :class:`.sizes_measure.KeyedTask`,
    :class:`.sizes_operator.OperatorTask`, :class:`.sizes_join.JoinTask`): here or on a process pool
    when there is much state, or a Spark task each (:func:`.spark_tasks.map_tasks`), as
    :func:`.engine.choose_engine` says; ``by_size`` False: ``auto`` never picks Spark for the state's
    size (:data:`MEASURED_BY_SIZE`)."""
    from .engine import choose_engine

    if choose_engine(engine, spark is not None, state, by_size) == "spark":
        from ..savepoint.errors import spark_errors
        from . import spark_tasks
        from .session import get_spark

        with spark_errors():
            return spark_tasks.map_tasks(spark or get_spark(), "fstate sizes", measure, [(task,) for task in tasks])
    count = pool.pool_size(len(tasks), state, workers)
    if count == 1:
        return [measure(task) for task in tasks]
    with pool.spawn_pool(count) as executor:
        return list(executor.map(measure, tasks))


def _operator_sizes(op, measured: list[SubtaskMeasure], binding, top: int, parallelisms: list[int]) -> OperatorSizes:
    handle = summary.subtask_handle_bytes(op)
    result = OperatorSizes(op.uid, op.uid_hash, op.name, summary.sql_entry(op, binding), op.parallelism,
                           op.max_parallelism, [handle.get(i, (0, 0))[0] for i in range(op.parallelism)],
                           [handle.get(i, (0, 0))[1] for i in range(op.parallelism)])
    if not measured:
        return result
    merged: dict[str, StateMeasure] = {}
    for part in measured:
        for name, measure in part.states.items():
            into = merged.get(name)
            if into is None:
                merged[name] = measure
                continue
            into.merge(measure)
    result.states = []
    for measure in merged.values():
        measure.sizes.top_by_bytes = measure.by_bytes.items()
        measure.sizes.top_by_elements = measure.by_elements.items()
        result.states.append(measure.sizes)
    result.states.sort(key=lambda s: (-s.bytes, s.name))
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
