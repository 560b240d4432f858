"""State tables, independent of Spark: columns (name + TypeInfo), picklable partitions, and a
``read(partition)`` that yields plain tuples.

The Spark data source (``datasource.py``), the CLI's Spark-free commands and the tests share this;
nothing here imports pyspark.
"""

from __future__ import annotations

import warnings
import weakref
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..savepoint import handles
from ..savepoint import streams
from ..savepoint import keyed
from ..savepoint import keyed_state
from ..savepoint import operator as operator_state
from ..savepoint import rocksdb
from ..savepoint import sql_plan
from ..savepoint import ttl_meta
from ..savepoint import verify_structure
from ..savepoint.errors import (CorruptStateError, FStateError, InvalidArgumentError, MissingStateFileError,
                                UnknownStateError)
from ..savepoint.loader import OperatorView
from ..savepoint.types import (INT, LONG, STRING, TIME_WINDOW, VOID_NAMESPACE, Composite, EitherType,
                               GenericArrayType, ListType, MapType, NullableType, PojoType, TimerType, TtlType,
                               TypeInfo)
from ..savepoint.types.hashing import key_group_for_hash
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import RowDataType

#: target bytes per partition when splitting a large key-group handle by key-group ranges
SPLIT_BYTES = 32 * 1024 * 1024

Column = tuple[str, TypeInfo, bool]  # name, type, nullable


@dataclass(frozen=True)
class Partition:
    """Everything an executor needs to read one piece of a table (no driver state)."""

    kind: str
    source: streams.StreamSource
    subtask: int
    handle: Any
    max_parallelism: int = 0
    state_names: tuple[str, ...] = ()
    key_groups: tuple[int, int] | None = None  # inclusive range within the handle
    span: tuple[int, int] | None = None  # byte range of the stream holding those key groups
    allow_external: bool = False
    options: tuple = ()
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
                       allow_external=op.savepoint.allow_external_paths, options=_operator_header(op))
             for subtask, h in op.operator_handles() if h.delegate is not None]  # (handles' names checked too)
    cols = [("subtask", INT, False), ("index", INT, False), ("value", info.value_type, True)]
    return Table("list", f"{op.display_name}/{state}", cols, parts)


def broadcast_state_table(op: OperatorView, state: str) -> Table:
    check_bounds(op)
    info = op.operator_state_info(state, broadcast=True)
    warn_raw_bytes(op, {state})
    parts = [Partition("broadcast", op.savepoint.stream_source(h.delegate), subtask, h, state_names=(state,),
                       allow_external=op.savepoint.allow_external_paths, options=_operator_header(op))
             for subtask, h in op.operator_handles() if h.delegate is not None and state in h.states][:1]
    cols = [("key", info.key_type, False), ("value", info.value_type, True)]
    return Table("broadcast", f"{op.display_name}/{state}", cols, parts)


def _operator_header(op: OperatorView) -> tuple:
    """Partition options: the operator-state header every subtask's stream must agree with."""
    meta = op.operator_meta
    return () if meta is None else (("header", verify_structure.header_signature(meta)),)


def _check_header(p: Partition, meta) -> None:
    """A subtask whose header describes a state with other types than the table's (a damaged
    header) is an error, not rows of another type."""
    reference = dict(p.options).get("header")
    mismatch = reference and verify_structure.signature_mismatch(reference, meta)
    if mismatch:
        raise CorruptStateError(mismatch, p.source.label)


def _keyed_meta(op: OperatorView) -> keyed.KeyedBackendMeta:
    op.readable_keyed_handles()  # a clear error for keyed state in a layout fstate cannot read yet
    km = op.keyed_meta
    if km is None:
        raise UnknownStateError(f"operator {op.display_name} has no keyed state",
                                op.savepoint.location.metadata_path)
    return km


def _key_partitions(op: OperatorView, kind: str, states: tuple[str, ...], key_groups: set[int] | None,
                    options: tuple = ()) -> list[Partition]:
    check_bounds(op)
    parts = []
    for subtask, h in op.readable_keyed_handles():
        if isinstance(h, handles.IncrementalKeyedHandle):
            # RocksDB files: one partition per subtask, opened by the executor that reads it
            if key_groups is not None and not any(h.start_key_group <= kg <= h.end_key_group for kg in key_groups):
                continue
            rsrc = op.rocksdb_source(subtask, h)
            kgs = (("kgs", tuple(sorted(key_groups))),) if key_groups is not None else ()
            parts.append(Partition(kind, rsrc.metadata, subtask, rsrc, op.max_parallelism, states,
                                   (h.start_key_group, h.end_key_group), None, op.savepoint.allow_external_paths,
                                   options + kgs))
            continue
        src = op.savepoint.stream_source(h.delegate)
        # every subtask's header must describe the states as the first one does (a damaged header)
        header = (("header", verify_structure.header_signature(op.keyed_meta)),)
        for lo, hi, span in _split_handle(h, src):
            if key_groups is not None and not any(lo <= kg <= hi for kg in key_groups):
                continue
            parts.append(Partition(kind, src, subtask, h, op.max_parallelism, states, (lo, hi), span,
                                   op.savepoint.allow_external_paths, options + header))
    return parts


def _split_handle(h: handles.KeyGroupsHandle, src: streams.StreamSource):
    """Split a handle's key-group range into pieces of about SPLIT_BYTES, using the offsets."""
    total = src.length if src.length is not None else len(src.data or b"")
    if src.path is not None and src.length is not None:
        actual = streams.source_io(src).size(src.path)
        if actual < src.start + src.length:
            raise MissingStateFileError(f"state file has {actual} bytes, but the savepoint's metadata says "
                                        f"{src.start + src.length}", src.path)
    if total <= SPLIT_BYTES or src.path is None:
        return [(h.start_key_group, h.end_key_group, None)]
    present = [(h.start_key_group + i, o) for i, o in enumerate(h.offsets) if o != 0 or not h.canonical]
    if not present:
        return []
    ordered = sorted(present, key=lambda x: x[1])
    # the stream is laid out in key-group order; group consecutive key groups into ~SPLIT_BYTES
    pieces = []
    start_i = 0
    for i in range(1, len(ordered) + 1):
        end_byte = ordered[i][1] if i < len(ordered) else total
        if end_byte - ordered[start_i][1] >= SPLIT_BYTES or i == len(ordered):
            lo_kg, hi_kg = ordered[start_i][0], ordered[i - 1][0]
            pieces.append((lo_kg, hi_kg, (ordered[start_i][1], end_byte)))
            start_i = i
    return pieces


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
    if flatten and hasattr(key_type, "field_names") and key_type.children:
        fields = key_type.fields if isinstance(key_type, PojoType) else list(
            zip(key_type.field_names, [None] * len(key_type.children), key_type.children))
        if names is not None and len(names) == len(fields):  # an SQL key named by the plan
            fields = [(name, None, t) for name, (_, _, t) in zip(names, fields)]
        return [(f"key_{n}", t, True) for n, _, t in fields]
    return [("key", key_type, False)]


_NOT_ROWS = (ListType, MapType, NullableType, EitherType, GenericArrayType, TimerType, TtlType)


def _row_arity(type_info: TypeInfo | None) -> int | None:
    """How many fields a state part has when it is a row (a composite with field names: Row, Tuple,
    RowData), else None; TTL wrappers are looked through."""
    while isinstance(type_info, TtlType):
        type_info = type_info.children[-1]
    if isinstance(type_info, RowDataType):
        return type_info.arity
    if isinstance(type_info, Composite) and not isinstance(type_info, _NOT_ROWS) and hasattr(type_info, "field_names"):
        return len(type_info.children)
    return None


def _is_sql_key(sql: Any, key_type: TypeInfo) -> bool:
    """Whether keys are an SQL operator's: its name or uid says so (metadata V5+), or the key is a
    table-runtime row (``RowData``), which only SQL / Table API operators key by (metadata V4 too)."""
    return sql is not None or isinstance(key_type, RowDataType)


def _named(type_info: TypeInfo, names: tuple[str, ...] | None) -> TypeInfo:
    """``type_info`` with an SQL row's field names (TTL wrappers kept); other types unchanged. Only
    the names change: values are decoded by position."""
    if names is None:
        return type_info
    if isinstance(type_info, TtlType):
        return TtlType(type_info.children[0], _named(type_info.value, names), type_info.snapshot_class,
                       type_info.timestamped)
    if isinstance(type_info, RowDataType) and type_info.types is not None and len(names) == type_info.arity:
        return RowDataType(type_info.types, type_info.children, names)
    return type_info


def _sorted_map(type_info: TypeInfo) -> SortedMapType | None:
    """The sorted map a VALUE state holds (a retractable Top-N's ``sorted-map``), TTL wrappers looked through."""
    while isinstance(type_info, TtlType):
        type_info = type_info.value
    return type_info if isinstance(type_info, SortedMapType) else None


def _named_state_type(type_info: TypeInfo, names: sql_plan.FieldNames) -> TypeInfo:
    if isinstance(type_info, MapType):
        return MapType(_named(type_info.key, names.map_key), _named(type_info.value, names.map_value))
    if isinstance(type_info, TtlType) and _sorted_map(type_info) is not None:
        return TtlType(type_info.children[0], _named_state_type(type_info.value, names), type_info.snapshot_class,
                       type_info.timestamped)
    if isinstance(type_info, SortedMapType):
        return type_info.with_entries(_named(type_info.key, names.map_key), _named(type_info.value, names.map_value))
    return _named(type_info, names.value)


def sql_field_names(operator: Any, key_type: TypeInfo, state) -> sql_plan.FieldNames:
    """``sql_plan.field_names`` for one keyed state's decoded types (``keyed.StateMetaInfo``); the key
    and value of a sorted map held by a VALUE state are its map key and map value."""
    value = state.element_type if state.kind == "LIST" else state.value_type
    map_type = value if state.kind == "MAP" and isinstance(value, MapType) else None
    if state.kind == "VALUE":
        map_type = _sorted_map(value)
    schema = sql_plan.StateSchema(
        state.name, state.kind, key=_row_arity(key_type),
        value=None if map_type is not None else _row_arity(value),
        map_key=_row_arity(map_type.key) if map_type is not None else None,
        map_value=_row_arity(map_type.value) if map_type is not None else None)
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
    key_type = _named(km.key_type, first.key) if first is not None else km.key_type
    cols = _key_columns(key_type, flatten_key) + ns_cols
    def value_type(s):
        return _named_state_type(s.value_type, names[s.name]) if s.name in names else s.value_type

    def element_type(s):
        return _named(s.element_type, names[s.name].value) if s.name in names else s.element_type

    if flat:
        s = selected[0]
        vt = value_type(s)
        if s.kind == "LIST":
            cols += [("index", INT, False), ("value", element_type(s), True)]
        elif s.kind == "MAP" and isinstance(vt, MapType):
            cols += [("map_key", vt.key, False), ("map_value", vt.value, True)]
        else:
            cols += [("value", vt, True)]
    else:
        for s in selected:
            if s.name in {c[0] for c in cols}:
                raise InvalidArgumentError(f"state name '{s.name}' clashes with a key/namespace column")
            cols.append((s.name, value_type(s) if s.kind != "LIST" else ListType(element_type(s)), True))
    kgs = _key_groups_for(km.key_type, keys, op.max_parallelism)
    options = (("ns", ns_mode), ("flat", flat), ("flatten", cols[0][0] != "key")) + (
        (("slice_size", slice_size),) if slice_size is not None else ()) + (
        (("ttl", True),) if ttl_timestamps else ())
    parts = _key_partitions(op, "keyed", tuple(s.name for s in selected), kgs, options)
    return Table("keyed", op.display_name, cols, parts, frozenset(_hashable(k) for k in keys) if keys else None,
                 sql, names)


def timers_table(op: OperatorView, *, flatten_key: bool | None = None, sql: Any = None) -> Table:
    km = _keyed_meta(op)
    sql = sql if sql is not None else sql_plan.sql_operator(op.name, op.uid)
    if flatten_key is None:
        flatten_key = _is_sql_key(sql, km.key_type)
    key_names = (sql_plan.field_names(sql, sql_plan.StateSchema("", key=_row_arity(km.key_type))).key
                 if sql is not None else None)
    timers = [s for _, s in km.timer_states]
    ns_types = {t.value_type.namespace for t in timers if isinstance(t.value_type, TimerType)}
    ns_type = next(iter(ns_types)) if len(ns_types) == 1 else VOID_NAMESPACE
    ns_col: list[Column] = []
    ns_mode = "void"
    if ns_type == TIME_WINDOW:
        ns_col, ns_mode = [("window_start", LONG, True), ("window_end", LONG, True)], "window"
    elif ns_type != VOID_NAMESPACE:
        ns_col, ns_mode = [("namespace", ns_type, True)], "namespace"
    cols = (_key_columns(km.key_type, flatten_key, key_names) + [("timestamp", LONG, False)] + ns_col
            + [("kind", STRING, False), ("service", STRING, False)])
    options = (("ns", ns_mode), ("flat", False), ("flatten", cols[0][0] != "key"))
    parts = _key_partitions(op, "timers", tuple(t.name for t in timers), None, options) if timers else []
    return Table("timers", f"{op.display_name}/timers", cols, parts, sql=sql)


def _key_groups_for(key_type: TypeInfo, keys: list[Any] | None, max_parallelism: int) -> set[int] | None:
    if keys is None:
        return None
    try:
        return {key_group_for_hash(key_type.java_hash(k), max_parallelism) for k in keys}
    except FStateError:
        return None  # no value-based hash: read everything, filter after decoding


def _hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


# ---------------------------------------------------------------------------------------------
# reading a partition (on an executor)


def _load(p: Partition) -> bytes:
    return streams.read_source(p.source)  # the source carries its file-system options to the executor


def read_partition(p: Partition, key_filter: frozenset | None = None) -> Iterator[tuple]:
    label = p.source.label
    if p.kind == "list":
        buf = _load(p)
        meta = operator_state.read_operator_proxy(buf, label, operator_state.header_end(p.handle, len(buf)))
        _check_header(p, meta)
        for i, v in enumerate(operator_state.read_list_state(buf, p.handle, meta, p.state_names[0], label)):
            yield (p.subtask, i, v)
        return
    if p.kind == "broadcast":
        buf = _load(p)
        meta = operator_state.read_operator_proxy(buf, label, operator_state.header_end(p.handle, len(buf)))
        _check_header(p, meta)
        yield from operator_state.read_broadcast_state(buf, p.handle, meta, p.state_names[0], label)
        return
    rows = _read_keyed(p, key_filter)
    yield from (p.rows_of(rows) if p.rows_of is not None else rows)


def _load_key_groups(p: Partition) -> tuple[bytes, handles.KeyGroupsHandle, keyed.KeyedBackendMeta]:
    label = p.source.label
    if p.span is None or p.source.path is None:
        buf = _load(p)
        return buf, p.handle, keyed.read_keyed_proxy(buf, label, keyed.header_end(p.handle.offsets, len(buf)))
    io = streams.source_io(p.source)
    header = b""
    size = 64 * 1024
    while True:
        header = io.read_range(p.source.path, p.source.start, min(size, p.span[0]))
        try:
            meta = keyed.read_keyed_proxy(header, label, keyed.header_end(p.handle.offsets))
            break
        except FStateError:
            if size >= p.span[0]:
                raise
            size *= 4
    lo, hi = p.span
    body = io.read_range(p.source.path, p.source.start + lo, hi - lo)
    # A handle over just this piece's key groups, with offsets shifted into the span.
    h = p.handle
    start, end = p.key_groups
    first = start - h.start_key_group
    offsets = tuple((o - lo + meta.header_size) if o else 0 for o in h.offsets[first:first + end - start + 1])
    shifted = handles.KeyGroupsHandle(h.tag, start, offsets, h.delegate, h.handle_id)
    return header[:meta.header_size] + body, shifted, meta


def _read_keyed(p: Partition, key_filter: frozenset | None) -> Iterator[tuple]:
    with _open_keyed(p) as state:
        yield from _keyed_output(p, state, key_filter)


@contextmanager
def _open_keyed(p: Partition) -> Iterator[keyed_state.KeyedState]:
    """The keyed state of a partition: a RocksDB snapshot (the database of one subtask, opened in a
    temporary directory that is removed when the rows are read, or reading fails / stops) or the
    key groups of a stream."""
    meta_of = ttl_meta.with_timestamped_states if dict(p.options).get("ttl") else None
    if isinstance(p.handle, rocksdb.RocksDBSource):
        with keyed_state.open_rocksdb(p.handle, p.max_parallelism, key_groups=dict(p.options).get("kgs"),
                                      meta_of=meta_of) as state:
            yield state
        return
    buf, handle, meta = _load_key_groups(p)
    _check_header(p, meta)
    if meta_of is not None:
        meta = meta_of(meta)
    lo, hi = p.key_groups or (handle.start_key_group, handle.end_key_group)
    kg_range = range(max(lo, handle.start_key_group), min(hi, handle.end_key_group) + 1)
    yield keyed_state.KeyedState.of_stream(buf, handle, meta, p.max_parallelism, key_groups=kg_range,
                                           source=p.source.label)


def _state_ids(p: Partition, meta: keyed.KeyedBackendMeta) -> list[int]:
    ids = []
    for name in p.state_names:
        sid = meta.state_id(name)
        if sid is None:
            raise UnknownStateError(f"state '{name}' is missing from this key-group stream", p.source.label)
        ids.append(sid)
    return ids


def keyed_batches(p: Partition, names: list[str]) -> Iterator[Any] | None:
    """The rows of a keyed partition as Arrow record batches (columns ``names``) decoded by the
    compiled columnar decoder (:meth:`.keyed_state.KeyedState.batches`), or None when the rows must
    come from :func:`read_partition`: another table kind, one row per element (``flat``), SQL
    slices, rows reshaped by ``rows_of`` (CEP), or state the columnar decoder does not take."""
    opts = dict(p.options)
    if p.kind != "keyed" or p.rows_of is not None or opts.get("flat") or opts.get("ns", "void") == "slice":
        return None
    stack = ExitStack()
    try:
        state = stack.enter_context(_open_keyed(p))
        batches = state.batches(_state_ids(p, state.meta), flatten=opts.get("flatten", False),
                                ns_mode=opts.get("ns", "void"), names=names)
    except BaseException:
        stack.close()
        raise
    if batches is None:
        stack.close()
        return None

    def held_open():
        with stack:
            yield from batches

    held = held_open()
    weakref.finalize(held, stack.close)  # also when the batches are dropped unread
    return held


def _keyed_output(p: Partition, state: keyed_state.KeyedState, key_filter: frozenset | None) -> Iterator[tuple]:
    """Rows of the keyed or timers table from the decoded (key, namespace, values) / timers."""
    meta = state.meta
    opts = dict(p.options)
    ns_mode = opts.get("ns", "void")
    flatten = opts.get("flatten", False)

    def key_part(key):
        return tuple(key) if flatten else (key,)

    def ns_part(ns):
        if ns_mode == "void":
            return ()
        if ns_mode == "window":
            return (None, None) if ns is None else (ns[0], ns[1])
        if ns_mode == "slice":  # an SQL tumbling window's namespace: its end (ms)
            return (None, None) if ns is None else (ns - opts["slice_size"], ns)
        return (ns,)

    if p.kind == "timers":
        for service, kind, ts, key, ns, _ in state.timer_rows():
            if key_filter is not None and _hashable(key) not in key_filter:
                continue
            yield key_part(key) + (ts,) + ns_part(ns) + (kind, service)
        return

    ids = _state_ids(p, meta)
    flat = opts.get("flat", False)
    if not flat and key_filter is None and ns_mode != "slice":
        rows = state.table_rows(ids, flatten=flatten, ns_mode=ns_mode)  # built by the compiled scanner (None: off)
        if rows is not None:
            yield from rows
            return
    for _, key, ns, vals in state.rows(ids):
        if key_filter is not None and _hashable(key) not in key_filter:
            continue
        head = key_part(key) + ns_part(ns)
        if not flat:
            yield head + tuple(vals)
            continue
        v = vals[0]
        kind = meta.states[ids[0]].kind
        if kind == "LIST":
            for i, x in enumerate(v or ()):
                yield head + (i, x)
        elif kind == "MAP":
            for mk, mv in (v or {}).items():
                yield head + (mk, mv)
        else:
            yield head + (v,)
