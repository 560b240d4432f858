"""State tables, independent of Spark: columns (name + TypeInfo), picklable partitions, and a
``read(partition)`` that yields plain tuples.

The Spark data source (``datasource.py``), the CLI's Spark-free commands and the tests share this;
nothing here imports pyspark.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..savepoint import handles
from ..savepoint import streams
from ..savepoint import keyed
from ..savepoint import keyed_state
from ..savepoint import decoders
from ..savepoint import operator as operator_state
from ..savepoint import rocksdb
from ..savepoint import sql_plan
from ..savepoint import ttl_meta
from ..savepoint import verify_structure
from ..savepoint.errors import (CorruptStateError, FStateError, InvalidArgumentError,
                                UnknownStateError)
from ..savepoint.loader import OperatorView
from ..savepoint.types import INT, LONG, STRING, TIME_WINDOW, VOID_NAMESPACE, ListType, TypeInfo
from ..savepoint.types.hashing import key_group_for_hash
from . import table_types

#: target bytes per partition when splitting a large key-group handle by key-group ranges
SPLIT_BYTES = keyed_state.SPLIT_BYTES
#: the same for a RocksDB snapshot's table files: compressed (Snappy by default), they hold about
#: twice the entries of as many bytes of a canonical stream
ROCKSDB_SPLIT_BYTES = SPLIT_BYTES // 2

Column = tuple[str, TypeInfo, bool]  # name, type, nullable


@dataclass(frozen=True)
class Partition:
    """Everything an executor needs to read one piece of a table (no driver state)."""

    kind: str
    source: streams.StreamSource
    subtask: int
    #: what is read: an operator-state stream (list, broadcast), a key-group stream, or a subtask's RocksDB files
    handle: handles.OperatorStreamHandle | handles.KeyGroupsHandle | rocksdb.RocksDBSource
    max_parallelism: int = 0
    state_names: tuple[str, ...] = ()
    key_groups: tuple[int, int] | None = None  # inclusive range within the handle
    span: tuple[int, int] | None = None  # byte range of the stream holding those key groups
    allow_external: bool = False
    #: the state header every subtask's stream must agree with (``verify_structure.header_signature``)
    header: tuple | None = None
    #: keyed and timers partitions: how the rows are shaped
    shape: decoders.RowShape = decoders.RowShape()
    #: RocksDB partitions: the key groups to read (None: all of the subtask's)
    key_group_filter: tuple[int, ...] | None = None
    #: keyed partitions: a module-level function turning the decoded rows into this table's rows
    #: (e.g. a CEP operator's states into its partial matches; picklable by reference)
    rows_of: Callable[[Iterator[tuple]], Iterator[tuple]] | None = None


@dataclass
class Table:
    kind: str
    name: str
    columns: list[Column]
    partitions: list[Partition]
    #: keys to keep (push-down), compared after decoding; None = all
    key_filter: frozenset | None = field(default=None)
    #: an SQL operator's plan description (``sql_plan.SqlOperatorPlan``) or kind (``SqlOperator``)
    sql: Any = None
    #: per state column: the names of its key / namespace / row fields (``sql_plan.field_names``)
    field_names: dict[str, sql_plan.FieldNames] = field(default_factory=dict)

    @property
    def column_names(self) -> list[str]:
        return [c[0] for c in self.columns]

    def rows(self) -> Iterator[tuple]:
        """All rows, read in this process (tests and small savepoints)."""
        for p in self.partitions:
            yield from read_partition(p, self.key_filter)


# ---------------------------------------------------------------------------------------------
# building tables on the driver


def check_bounds(op: OperatorView) -> None:
    """What Flink would refuse in the operator's metadata (a subtask index beyond the parallelism,
    overlapping key-group ranges, ...) is an error before anything is read."""
    problems = verify_structure.bounds_problems(op.parallelism, op.max_parallelism, op.state.subtasks,
                                                op.state.finished_subtasks)
    if problems:
        raise CorruptStateError(f"operator {op.display_name}: {problems[0]}", op.savepoint.location.metadata_path)


def warn_raw_bytes(op: OperatorView, names) -> None:
    """A state whose serializers fstate cannot read (an unknown class, or a damaged header naming
    one) is read as raw bytes: a warning says so, naming the state."""
    for d in op.describe_states():
        if d.name in names:
            for message in d.warnings:
                warnings.warn(f"{op.display_name}/{d.name}: {message}", stacklevel=3)


def list_state_table(op: OperatorView, state: str) -> Table:
    check_bounds(op)
    info = op.operator_state_info(state, broadcast=False)
    warn_raw_bytes(op, {state})
    parts = [Partition("list", op.savepoint.stream_source(h.delegate), subtask, h, state_names=(state,),
                       allow_external=op.savepoint.allow_external_paths, header=_operator_header(op))
             for subtask, h in op.operator_handles() if h.delegate is not None]  # (handles' names checked too)
    cols = [("subtask", INT, False), ("index", INT, False), ("value", info.value_type, True)]
    return Table("list", f"{op.display_name}/{state}", cols, parts)


def broadcast_state_table(op: OperatorView, state: str) -> Table:
    check_bounds(op)
    info = op.operator_state_info(state, broadcast=True)
    warn_raw_bytes(op, {state})
    parts = [Partition("broadcast", op.savepoint.stream_source(h.delegate), subtask, h, state_names=(state,),
                       allow_external=op.savepoint.allow_external_paths, header=_operator_header(op))
             for subtask, h in op.operator_handles() if h.delegate is not None and state in h.states][:1]
    cols = [("key", info.key_type, False), ("value", info.value_type, True)]
    return Table("broadcast", f"{op.display_name}/{state}", cols, parts)


def _operator_header(op: OperatorView) -> tuple | None:
    """The operator-state header every subtask's stream must agree with."""
    meta = op.operator_meta
    return None if meta is None else verify_structure.header_signature(meta)


def _check_header(p: Partition, meta) -> None:
    """A subtask whose header describes a state with other types than the table's (a damaged
    header) is an error, not rows of another type."""
    check_header(p.header, meta, p.source.label)


def check_header(reference: tuple | None, meta, label: str | None) -> None:
    """``meta`` (a subtask's stream header) agrees with the operator's ``reference`` signature."""
    mismatch = reference and verify_structure.signature_mismatch(reference, meta)
    if mismatch:
        raise CorruptStateError(mismatch, label)


@dataclass(frozen=True)
class OperatorStream:
    """One subtask's operator-state stream (picklable, holds nothing open): :meth:`read` it where it is
    measured or decoded."""

    subtask: int
    source: streams.StreamSource
    handle: handles.OperatorStreamHandle
    #: the operator's header signature every subtask's stream must agree with
    header: tuple | None

    def read(self) -> tuple[bytes, operator_state.OperatorBackendMeta]:
        """The stream's bytes and its header (checked against the operator's)."""
        buf = streams.read_source(self.source)  # the source carries its file-system options to the executor
        label = self.source.label
        meta = operator_state.read_operator_proxy(buf, label, operator_state.header_end(self.handle, len(buf)))
        check_header(self.header, meta, label)
        return buf, meta


def operator_streams(op: OperatorView) -> list[OperatorStream]:
    """Where an operator's operator state (list, union, broadcast) lives: a stream per subtask."""
    check_bounds(op)
    header = _operator_header(op)
    return [OperatorStream(subtask, op.savepoint.stream_source(h.delegate), h, header)
            for subtask, h in op.operator_handles() if h.delegate is not None]


def _keyed_meta(op: OperatorView) -> keyed.KeyedBackendMeta:
    op.readable_keyed_handles()  # a clear error for keyed state in a layout fstate cannot read yet
    km = op.keyed_meta
    if km is None:
        raise UnknownStateError(f"operator {op.display_name} has no keyed state",
                                op.savepoint.location.metadata_path)
    return km


def _key_partitions(op: OperatorView, kind: str, states: tuple[str, ...], key_groups: set[int] | None,
                    shape: decoders.RowShape) -> list[Partition]:
    check_bounds(op)
    parts = []
    for subtask, h in op.readable_keyed_handles():
        if isinstance(h, handles.IncrementalKeyedHandle):
            # RocksDB files: one partition per subtask, opened by the executor that reads it
            if key_groups is not None and not any(h.start_key_group <= kg <= h.end_key_group for kg in key_groups):
                continue
            # RocksDB keys start with their key group: a large database is read in key-group ranges
            rsrc = op.rocksdb_source(subtask, h)
            for lo, hi in rsrc.split(ROCKSDB_SPLIT_BYTES):
                kgs = tuple(sorted(kg for kg in key_groups if lo <= kg <= hi)) if key_groups is not None else None
                if kgs == ():
                    continue
                parts.append(Partition(kind, rsrc.metadata, subtask, rsrc, op.max_parallelism, states, (lo, hi),
                                       None, op.savepoint.allow_external_paths, shape=shape, key_group_filter=kgs))
            continue
        src = op.savepoint.stream_source(h.delegate)
        # every subtask's header must describe the states as the first one does (a damaged header)
        header = verify_structure.header_signature(op.keyed_meta)
        for lo, hi, span in _split_handle(h, src):
            if key_groups is not None and not any(lo <= kg <= hi for kg in key_groups):
                continue
            parts.append(Partition(kind, src, subtask, h, op.max_parallelism, states, (lo, hi), span,
                                   op.savepoint.allow_external_paths, header=header, shape=shape))
    return parts


def keyed_sources(op: OperatorView) -> list[keyed_state.KeyedStateSource]:
    """Where an operator's keyed state lives, in the pieces its keyed tables' partitions read: a
    subtask's RocksDB snapshot, a key-group stream (a large one in spans of about
    :data:`SPLIT_BYTES`, only that span read)."""
    check_bounds(op)
    sources = []
    for subtask, h in op.readable_keyed_handles():
        if isinstance(h, handles.IncrementalKeyedHandle):
            sources.append(keyed_state.KeyedStateSource(subtask, op.max_parallelism,
                                                        rocksdb=op.rocksdb_source(subtask, h)))
            continue
        src = op.savepoint.stream_source(h.delegate)
        for lo, hi, span in _split_handle(h, src):
            sources.append(keyed_state.KeyedStateSource(subtask, op.max_parallelism, stream=src, handle=h,
                                                        span=span, span_key_groups=(lo, hi)))
    return sources


def _split_handle(h: handles.KeyGroupsHandle, src: streams.StreamSource):
    """A handle's key-group range in pieces of about :data:`SPLIT_BYTES` (keyed_state.split_stream)."""
    return keyed_state.split_stream(h, src, SPLIT_BYTES)


def _namespace_columns(states: list) -> tuple[str, list[Column]]:
    ns_types = {s.namespace_type for s in states if s.namespace_type != VOID_NAMESPACE}
    if not ns_types:
        return "void", []
    if len(ns_types) > 1:
        raise InvalidArgumentError(
            f"states of this operator use different namespaces ({', '.join(t.name for t in ns_types)}); "
            "select one state")
    (ns,) = ns_types
    if ns == TIME_WINDOW:
        return "window", [("window_start", LONG, True), ("window_end", LONG, True)]
    return "namespace", [("namespace", ns, True)]


def _key_columns(key_type: TypeInfo, flatten: bool, names: tuple[str, ...] | None = None) -> list[Column]:
    fields = table_types.key_fields(key_type) if flatten else None
    if fields is not None:
        if names is not None and len(names) == len(fields):  # an SQL key named by the plan
            fields = [(name, None, t) for name, (_, _, t) in zip(names, fields)]
        return [(f"key_{n}", t, True) for n, _, t in fields]
    return [("key", key_type, False)]


def _is_sql_key(sql: Any, key_type: TypeInfo) -> bool:
    """Whether keys are an SQL operator's: its name or uid says so (metadata V5+), or the key is a
    table-runtime row (``RowData``), which only SQL / Table API operators key by (metadata V4 too)."""
    return sql is not None or table_types.part(key_type) == table_types.ROW_DATA


def sql_field_names(operator: Any, key_type: TypeInfo, state) -> sql_plan.FieldNames:
    """``sql_plan.field_names`` for one keyed state's decoded types (``keyed.StateMetaInfo``); the key
    and value of a sorted map held by a VALUE state are its map key and map value."""
    value = state.element_type if state.kind == "LIST" else state.value_type
    map_type = value if state.kind == "MAP" and table_types.part(value) == table_types.MAP else None
    if state.kind == "VALUE":
        map_type = table_types.sorted_map(value)
    schema = sql_plan.StateSchema(
        state.name, state.kind, key=table_types.row_arity(key_type),
        value=None if map_type is not None else table_types.row_arity(value),
        map_key=table_types.row_arity(map_type.key) if map_type is not None else None,
        map_value=table_types.row_arity(map_type.value) if map_type is not None else None)
    return sql_plan.field_names(operator, schema)


def keyed_table(op: OperatorView, states: list[str] | None = None, *, flat: bool = False,
                flatten_key: bool | None = None, keys: list[Any] | None = None, sql: Any = None,
                ttl_timestamps: bool = False) -> Table:
    """``sql``: the operator's description in the job's compiled plan (``sql_plan.SqlOperatorPlan``);
    without it, an SQL operator's kind from its name or uid names what it can. ``ttl_timestamps``: a
    TTL state's values (list elements, map values) as {value, ttl_timestamp}, the last access in
    epoch ms that Flink's TTL checks, instead of the bare value."""
    km = _keyed_meta(op)
    sql = sql if sql is not None else sql_plan.sql_operator(op.name, op.uid)
    available = [s for _, s in km.value_states]
    if states:
        by_name = {s.name: s for s in available}
        missing = [n for n in states if n not in by_name]
        if missing:
            raise UnknownStateError(
                f"operator {op.display_name} has no keyed state {', '.join(repr(m) for m in missing)} "
                f"(keyed states: {', '.join(by_name) or 'none'})", op.savepoint.location.metadata_path)
        selected = [by_name[n] for n in states]
    else:
        selected = available
    if ttl_timestamps:
        selected = [ttl_meta.timestamped_meta(s) for s in selected]
    if flat and len(selected) != 1:
        raise InvalidArgumentError("--flat needs exactly one state (--state NAME)")
    warn_raw_bytes(op, {s.name for s in selected})
    ns_mode, ns_cols = _namespace_columns(selected)
    names = {s.name: sql_field_names(sql, km.key_type, s) for s in selected} if sql is not None else {}
    first = next(iter(names.values()), None)
    slice_size = None
    if first is not None and first.namespace and ns_mode == "namespace" and len(first.namespace) == len(ns_cols):
        bounds = sql.window_bounds(0) if isinstance(sql, sql_plan.SqlOperatorPlan) else None
        if bounds is not None and ns_cols[0][1] == LONG:  # a tumbling window: its slice end is its end
            ns_mode, slice_size = "slice", -bounds[0]
            ns_cols = [("window_start", LONG, True), ("window_end", LONG, True)]
        else:
            ns_cols = [(name, t, nullable) for name, (_, t, nullable) in zip(first.namespace, ns_cols)]
    if flatten_key is None:  # an SQL operator's key (grouping / partition / join key) as columns
        flatten_key = _is_sql_key(sql, km.key_type)
    key_type = table_types.named(km.key_type, first.key) if first is not None else km.key_type
    cols = _key_columns(key_type, flatten_key) + ns_cols
    def value_type(s):
        return table_types.named_state_type(s.value_type, names[s.name]) if s.name in names else s.value_type

    def element_type(s):
        return table_types.named(s.element_type, names[s.name].value) if s.name in names else s.element_type

    if flat:
        s = selected[0]
        vt = value_type(s)
        if s.kind == "LIST":
            cols += [("index", INT, False), ("value", element_type(s), True)]
        elif s.kind == "MAP" and table_types.part(vt) == table_types.MAP:
            cols += [("map_key", vt.key, False), ("map_value", vt.value, True)]
        else:
            cols += [("value", vt, True)]
    else:
        for s in selected:
            if s.name in {c[0] for c in cols}:
                raise InvalidArgumentError(f"state name '{s.name}' clashes with a key/namespace column")
            cols.append((s.name, value_type(s) if s.kind != "LIST" else ListType(element_type(s)), True))
    kgs = _key_groups_for(km.key_type, keys, op.max_parallelism)
    shape = decoders.RowShape(flatten=cols[0][0] != "key", ns_mode=ns_mode, slice_size=slice_size or 0, flat=flat,
                              ttl_timestamps=ttl_timestamps)
    parts = _key_partitions(op, "keyed", tuple(s.name for s in selected), kgs, shape)
    return Table("keyed", op.display_name, cols, parts,
                 frozenset(decoders.hashable(k) for k in keys) if keys else None, sql, names)


def timers_table(op: OperatorView, *, flatten_key: bool | None = None, sql: Any = None) -> Table:
    km = _keyed_meta(op)
    sql = sql if sql is not None else sql_plan.sql_operator(op.name, op.uid)
    if flatten_key is None:
        flatten_key = _is_sql_key(sql, km.key_type)
    key_names = (sql_plan.field_names(sql, sql_plan.StateSchema("", key=table_types.row_arity(km.key_type))).key
                 if sql is not None else None)
    timers = [s for _, s in km.timer_states]
    ns_types = {t.value_type.namespace for t in timers if table_types.part(t.value_type) == table_types.TIMER}
    ns_type = next(iter(ns_types)) if len(ns_types) == 1 else VOID_NAMESPACE
    ns_col: list[Column] = []
    ns_mode = "void"
    if ns_type == TIME_WINDOW:
        ns_col, ns_mode = [("window_start", LONG, True), ("window_end", LONG, True)], "window"
    elif ns_type != VOID_NAMESPACE:
        ns_col, ns_mode = [("namespace", ns_type, True)], "namespace"
    cols = (_key_columns(km.key_type, flatten_key, key_names) + [("timestamp", LONG, False)] + ns_col
            + [("kind", STRING, False), ("service", STRING, False)])
    shape = decoders.RowShape(flatten=cols[0][0] != "key", ns_mode=ns_mode)
    parts = _key_partitions(op, "timers", tuple(t.name for t in timers), None, shape) if timers else []
    return Table("timers", f"{op.display_name}/timers", cols, parts, sql=sql)


def _key_groups_for(key_type: TypeInfo, keys: list[Any] | None, max_parallelism: int) -> set[int] | None:
    if keys is None:
        return None
    try:
        return {key_group_for_hash(key_type.java_hash(k), max_parallelism) for k in keys}
    except FStateError:
        return None  # no value-based hash: read everything, filter after decoding


# ---------------------------------------------------------------------------------------------
# reading a partition (on an executor)


class _Rows(decoders.TableDecoder):
    """Rows already at hand (operator state) behind the decoders' interface."""

    name = "rows"

    def __init__(self, rows: Iterator[tuple]):
        self._rows = rows

    def rows(self) -> Iterator[tuple]:
        return self._rows


class _Reshaped(decoders.TableDecoder):
    """A decoder's rows turned into this table's rows (``Partition.rows_of``, e.g. CEP matches)."""

    name = "reshaped"

    def __init__(self, inner: decoders.TableDecoder, rows_of: Callable[[Iterator[tuple]], Iterator[tuple]]):
        self.inner, self.rows_of = inner, rows_of

    def rows(self) -> Iterator[tuple]:
        return self.rows_of(self.inner.rows())


@contextmanager
def open_partition(p: Partition, key_filter: frozenset | None = None) -> Iterator[decoders.TableDecoder]:
    """The one way a partition is read: its state opened once (a RocksDB snapshot in a temporary
    directory removed when the block ends), behind one interface (:class:`.decoders.TableDecoder`:
    rows, or Arrow batches), whichever decoder makes them."""
    label = p.source.label
    if p.kind in ("list", "broadcast"):
        buf, meta = OperatorStream(p.subtask, p.source, p.handle, p.header).read()
        if p.kind == "list":
            rows = ((p.subtask, i, v) for i, v in enumerate(
                operator_state.read_list_state(buf, p.handle, meta, p.state_names[0], label)))
        else:
            rows = operator_state.read_broadcast_state(buf, p.handle, meta, p.state_names[0], label)
        yield _Rows(rows)
        return
    with _open_keyed(p) as state:
        timers = p.kind == "timers"
        decoder = decoders.new_decoder(state, () if timers else _state_ids(p, state.meta), p.shape,
                                          key_filter=key_filter, timers=timers)
        yield decoder if p.rows_of is None else _Reshaped(decoder, p.rows_of)


def read_partition(p: Partition, key_filter: frozenset | None = None) -> Iterator[tuple]:
    """The rows of a partition (decoding starts at the first)."""
    with open_partition(p, key_filter) as decoder:
        yield from decoder.rows()


@contextmanager
def _open_keyed(p: Partition) -> Iterator[keyed_state.KeyedState]:
    """The keyed state of a partition (:meth:`.keyed_state.KeyedStateSource.open`): a RocksDB snapshot
    (the database of one subtask, opened in a temporary directory that is removed when the rows are
    read, or reading fails / stops) or the key groups of a stream (only the partition's span of a
    large one). A table with TTL timestamps reads its TTL states' values with them."""
    meta_of = ttl_meta.with_timestamped_states if p.shape.ttl_timestamps else None
    if isinstance(p.handle, rocksdb.RocksDBSource):
        source = keyed_state.KeyedStateSource(p.subtask, p.max_parallelism, rocksdb=p.handle)
        with source.open(key_groups=_rocksdb_key_groups(p), meta_of=meta_of) as state:
            yield state
        return
    source = keyed_state.KeyedStateSource(p.subtask, p.max_parallelism, stream=p.source, handle=p.handle,
                                          span=p.span, span_key_groups=p.key_groups)
    handle = p.handle
    lo, hi = p.key_groups or (handle.start_key_group, handle.end_key_group)
    kg_range = range(max(lo, handle.start_key_group), min(hi, handle.end_key_group) + 1)
    with source.open(key_groups=kg_range, meta_of=meta_of) as state:
        _check_header(p, state.meta)
        yield state


def _rocksdb_key_groups(p: Partition) -> tuple[int, ...] | range | None:
    """The key groups a RocksDB partition reads: its filter, within its piece of the subtask's range."""
    handle = p.handle
    lo, hi = p.key_groups or (handle.start_key_group, handle.end_key_group)
    if p.key_group_filter is not None:
        return tuple(kg for kg in p.key_group_filter if lo <= kg <= hi)
    if (lo, hi) == (handle.start_key_group, handle.end_key_group):
        return None
    return range(lo, hi + 1)


def _state_ids(p: Partition, meta: keyed.KeyedBackendMeta) -> list[int]:
    ids = []
    for name in p.state_names:
        sid = meta.state_id(name)
        if sid is None:
            raise UnknownStateError(f"state '{name}' is missing from this key-group stream", p.source.label)
        ids.append(sid)
    return ids
