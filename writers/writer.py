"""SavepointWriter: new savepoints from DataFrames (the State Processor API's bootstrap).

    (SavepointWriter(max_parallelism=128)
        .with_keyed_state("counter", df, key="user", states={"total": "LONG", "events": "LIST<STRING>"},
                          event_timers="wakeup")
        .with_list_state("src", "offsets", [42, 43], type="LONG")
        .with_broadcast_state("rules-op", "rules", rules_df, key_type="STRING", value_type="STRING")
        .write("/savepoints/bootstrapped"))

Executors encode and write the state files (one per subtask) into a temporary directory next to
the target (for s3://, gs://, hdfs:// targets: under the final prefix, through savepoint/io/);
the driver only gathers their handles and writes `_metadata` last, then renames (locally).
Sources that are not Spark DataFrames (the embedded engine's Arrow frames, writers/arrow_frames.py;
Python lists and dicts) are written on this machine without Spark (writers/keyed_stream.py), the same
bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..savepoint import handles
from ..savepoint import keyed
from ..savepoint import operator as operator_state
from ..savepoint.builder import (INLINE_THRESHOLD, SavepointBuilder, metadata_version_for, operator_proxy_version_for,
                                 resolve_operator_id, write_stream)
from ..savepoint.errors import FStateError, InvalidArgumentError
from ..savepoint.metainfo import StateMetaInfo
from ..savepoint.types import ListType, TypeInfo
from ..savepoint.types import roles
from ..savepoint.types.hashing import check_parallelism
from ..savepoint.types.key_hash import has_value_hash
from .flink_target import state_meta_for_target, type_for_target
from .keyed_stream import encoding_for, write_keyed_batches, write_subtask_stream
from .spec import from_spark, parse_type
from .validation import check_column, check_timer_column, require_column, row_error

DEFAULT_MAX_PARALLELISM = 128
_KINDS = ("VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING")


@dataclass
class KeyedStateSpec:
    name: str
    kind: str
    type: TypeInfo  # element type for LIST, MapType for MAP, else the value type
    column: str

    def meta(self) -> StateMetaInfo:
        return keyed.value_state_meta(self.name, self.kind, self.type)


def resolve_state_spec(name: str, spec: Any, column_type=None) -> KeyedStateSpec:
    """``spec``: None (infer from the column), a type string, or {kind, type, column}."""
    kind = None
    column = name
    type_spec = spec
    if isinstance(spec, dict) and not ("pojo" in spec or "class" in spec):
        kind = (spec.get("kind") or "").upper() or None
        column = spec.get("column", name)
        type_spec = spec.get("type")
    if type_spec is None:
        if column_type is None:
            raise InvalidArgumentError(f"state '{name}': no type given and no column to infer it from")
        t = from_spark(column_type)
    else:
        t = parse_type(type_spec)
    if kind is None:
        kind = {roles.LIST: "LIST", roles.MAP: "MAP"}.get(roles.role(t), "VALUE")
    if kind not in _KINDS:
        raise InvalidArgumentError(f"state '{name}': unknown kind '{kind}' ({', '.join(_KINDS)})")
    if kind == "LIST":
        if roles.as_list(t) is None:
            raise InvalidArgumentError(f"state '{name}': a LIST state needs a LIST<...> type, got {t.name}")
        t = t.element
    if kind == "MAP" and roles.as_map(t) is None:
        raise InvalidArgumentError(f"state '{name}': a MAP state needs a MAP<...> type, got {t.name}")
    return KeyedStateSpec(name, kind, t, column)


@dataclass
class _KeyedPart:
    df: Any
    key: str
    key_type: TypeInfo
    states: list[KeyedStateSpec]
    event_timers: str | None
    processing_timers: str | None
    what: str = "keyed state"  # the operator and source, for errors about its rows


@dataclass
class _OperatorPart:
    state: StateMetaInfo
    data: Any  # DataFrame or Python list/dict
    column: str | None
    key_column: str | None = None
    what: str = "operator state"  # the operator, state and source, for errors about its values


@dataclass
class OperatorSpec:
    """One operator a SavepointWriter will write."""

    uid: str | None
    uid_hash: str | None
    name: str | None
    parallelism: int | None
    max_parallelism: int
    keyed: _KeyedPart | None = None
    operator_states: list[_OperatorPart] = field(default_factory=list)


class SavepointWriter:
    def __init__(self, max_parallelism: int = DEFAULT_MAX_PARALLELISM, spark=None, *,
                 inline_threshold: int = INLINE_THRESHOLD, flink_version: str | None = None, fs_options=None):
        """``flink_version``: the Flink release that will restore the savepoint (default 2.3: metadata
        V6; 2.0 reads only up to V5, 1.16–1.20 up to V4, 1.11–1.15 V3). ``fs_options``: file-system
        options for a remote target (endpoint, region, credentials; see savepoint/io/)."""
        self.fs_options = fs_options
        self.max_parallelism = max_parallelism
        self.metadata_version = metadata_version_for(flink_version)
        self.operator_proxy_version = operator_proxy_version_for(flink_version)
        self._spark = spark
        self.inline_threshold = inline_threshold
        self._ops: dict[bytes, OperatorSpec] = {}

    @property
    def spark(self):
        if self._spark is None:
            from ..readers.session import get_spark

            self._spark = get_spark()
        return self._spark

    @spark.setter
    def spark(self, session) -> None:
        self._spark = session

    @property
    def operators(self) -> list[OperatorSpec]:
        """The operators to write, in the order they were first given."""
        return list(self._ops.values())

    def include(self, other: "SavepointWriter") -> "SavepointWriter":
        """Take over the operators of ``other`` (one given twice: ``other``'s wins)."""
        self._ops.update(other._ops)
        return self

    def _op(self, uid, uid_hash, name, parallelism, max_parallelism) -> OperatorSpec:
        op_id = resolve_operator_id(uid, uid_hash)
        op = self._ops.get(op_id)
        mp = max_parallelism or self.max_parallelism
        if op is None:
            op = self._ops[op_id] = OperatorSpec(uid, uid_hash, name, parallelism, mp)
        else:
            if parallelism is not None:
                if op.parallelism not in (None, parallelism):
                    raise InvalidArgumentError(f"operator {uid or uid_hash}: conflicting parallelism")
                op.parallelism = parallelism
            if max_parallelism is not None and max_parallelism != op.max_parallelism:
                raise InvalidArgumentError(f"operator {uid or uid_hash}: conflicting max parallelism")
            op.name = op.name or name
        return op

    # -- keyed state ---------------------------------------------------------------------------
    def with_keyed_state(self, uid: str | None, df, *, key: str = "key", states: dict[str, Any] | None = None,
                         key_type: Any = None, event_timers: str | None = None,
                         processing_timers: str | None = None, parallelism: int | None = None,
                         max_parallelism: int | None = None, name: str | None = None,
                         uid_hash: str | None = None, origin: str | None = None) -> "SavepointWriter":
        """Keyed state of an operator: one row per key, one column per state (None = no value).
        Every column is checked against its declared type here, before any Spark job runs;
        ``origin`` (e.g. "spec s.yaml, source data.csv") is named in the errors about the data."""
        what = _described(f"operator {uid or uid_hash}", origin)
        fields = {f.name: f.dataType for f in df.schema.fields}
        if key not in fields:
            raise InvalidArgumentError(f"{what}: key column '{key}' is not in the DataFrame "
                                       f"(columns: {', '.join(fields)})")
        with _prefixed(f"{what}, key"):
            kt = parse_type(key_type) if key_type is not None else from_spark(fields[key])
            check_column(kt, fields, key, f"{what}, key")
        if not has_value_hash(kt):
            raise InvalidArgumentError(
                f"{what}: key type {kt.name} has no value-based hashCode in Flink, so its key groups cannot be "
                "computed (String, Long, Integer, Short, Byte, Boolean, Double, Float, Character, Tuple and Row "
                "keys can)")
        timer_cols = {c for c in (event_timers, processing_timers) if c}
        for c in timer_cols:
            check_timer_column(fields, c, f"{what}, timers")
        if states is None:
            states = {c: None for c in fields if c != key and c not in timer_cols}
        specs = []
        for sname, sspec in states.items():
            is_options = isinstance(sspec, dict) and not ("pojo" in sspec or "class" in sspec)
            col = sspec.get("column", sname) if is_options else sname
            if col not in fields:
                raise InvalidArgumentError(f"{what}, state '{sname}': column '{col}' is not in the DataFrame "
                                           f"(columns: {', '.join(fields)})")
            with _prefixed(f"{what}, state '{sname}'", strip=f"state '{sname}': "):
                spec = resolve_state_spec(sname, sspec, fields[col])
                check_column(_column_type(spec), fields, col, f"{what}, state '{sname}'")
            specs.append(spec)
        if not specs and not timer_cols:
            raise InvalidArgumentError(f"{what}: no keyed state to write")
        op = self._op(uid, uid_hash, name, parallelism, max_parallelism)
        if op.keyed is not None:
            raise InvalidArgumentError(f"operator {uid or uid_hash} already has keyed state")
        op.keyed = _KeyedPart(df, key, kt, specs, event_timers, processing_timers, what)
        return self

    # -- operator state ------------------------------------------------------------------------
    def with_list_state(self, uid: str | None, state: str, data, *, type: Any = None, column: str = "value",
                        union: bool = False, parallelism: int | None = None, max_parallelism: int | None = None,
                        name: str | None = None, uid_hash: str | None = None,
                        origin: str | None = None) -> "SavepointWriter":
        """Operator list state (or union state): a DataFrame column or a Python list of elements.
        A ``subtask`` column in the DataFrame places elements; otherwise they are spread round-robin."""
        what = _described(f"operator {uid or uid_hash}, list state '{state}'", origin)
        t = self._column_type(data, column, type, what)
        if hasattr(data, "schema") and "subtask" in data.columns:
            from ..savepoint.types import INT

            check_column(INT, {f.name: f.dataType for f in data.schema.fields}, "subtask", what)
        op = self._op(uid, uid_hash, name, parallelism, max_parallelism)
        meta = operator_state.list_state_meta(state, t, "UNION" if union else "SPLIT_DISTRIBUTE")
        op.operator_states.append(_OperatorPart(meta, data, column, what=what))
        return self

    def with_union_state(self, uid, state, data, **kw) -> "SavepointWriter":
        return self.with_list_state(uid, state, data, union=True, **kw)

    def with_broadcast_state(self, uid: str | None, state: str, data, *, key_type: Any = None,
                             value_type: Any = None, key: str = "key", value: str = "value",
                             parallelism: int | None = None, max_parallelism: int | None = None,
                             name: str | None = None, uid_hash: str | None = None,
                             origin: str | None = None) -> "SavepointWriter":
        """Broadcast state from a DataFrame (key, value columns) or a dict; every subtask gets a copy."""
        what = _described(f"operator {uid or uid_hash}, broadcast state '{state}'", origin)
        kt = self._column_type(data, key, key_type, f"{what}, key")
        vt = self._column_type(data, value, value_type, f"{what}, value")
        op = self._op(uid, uid_hash, name, parallelism, max_parallelism)
        op.operator_states.append(_OperatorPart(operator_state.broadcast_state_meta(state, kt, vt), data, value, key,
                                                what))
        return self

    @staticmethod
    def _column_type(data, column, type_spec, what) -> TypeInfo:
        """The declared type (checked against the DataFrame's column) or the column's natural type."""
        fields = {f.name: f.dataType for f in data.schema.fields} if hasattr(data, "schema") else None
        with _prefixed(what):
            if type_spec is not None:
                t = parse_type(type_spec)
            elif fields is None:
                raise InvalidArgumentError("give its type (type=...) for Python data")
            else:
                require_column(fields, column, what)
                t = from_spark(fields[column])
            if fields is not None:
                check_column(t, fields, column, what)
        return t

    # -- writing ---------------------------------------------------------------------------------
    def write(self, path: str, *, overwrite: bool = False, verify: bool = True) -> str:
        """Write the savepoint; ``verify``: it must pass `fstate verify`'s checks, else nothing is written."""
        if not self._ops:
            raise InvalidArgumentError("nothing to write: add keyed, list, union or broadcast state")
        builder = SavepointBuilder(path, overwrite=overwrite, inline_threshold=self.inline_threshold,
                                   metadata_version=self.metadata_version,
                                   operator_proxy_version=self.operator_proxy_version, fs_options=self.fs_options)
        try:
            for op in self._ops.values():
                self.write_operator(builder, op)
            return builder.commit(verify=verify)
        except BaseException:
            builder.abort()
            raise

    def write_operator(self, builder: SavepointBuilder, op: OperatorSpec) -> None:
        """Write one operator's state files and add it to ``builder`` (used by modify too), with the
        serializers of the Flink release ``builder``'s metadata version is for."""
        op = operator_for_target(op, builder.metadata_version)
        here = not _reads_spark(op)  # no Spark DataFrame among its sources: written in this process
        p = op.parallelism or (1 if op.keyed is None else min(
            default_parallelism() if here else self.spark.sparkContext.defaultParallelism, op.max_parallelism))
        check_parallelism(p, op.max_parallelism)
        b = builder.operator(op.uid, uid_hash=op.uid_hash, parallelism=p, max_parallelism=op.max_parallelism,
                             name=op.name)
        if op.keyed is not None:
            spark = None if here else self.spark
            for subtask, handle in write_keyed(spark, op.keyed, p, op.max_parallelism, builder.temp_dir,
                                               self.inline_threshold, builder.fs_options):
                b.subtask(subtask).managed_keyed = handle
        if op.operator_states:
            if here:
                written = write_operator_states_here(op.operator_states, p, builder.temp_dir, self.inline_threshold,
                                                     builder.operator_proxy_version, builder.fs_options)
            else:
                written = write_operator_states(self.spark, op.operator_states, p, builder.temp_dir,
                                                self.inline_threshold, builder.operator_proxy_version,
                                                builder.fs_options)
            for subtask, handle in written:
                b.subtask(subtask).managed_operator = handle


def default_parallelism() -> int:
    """The parallelism of a keyed operator none was given for, on the embedded engine: this machine's
    cores (what Spark's ``local[*]`` gives)."""
    return os.cpu_count() or 1


def _reads_spark(op: OperatorSpec) -> bool:
    """Whether a source of ``op`` is a Spark DataFrame (else its state is written in this process)."""
    sources = ([op.keyed.df] if op.keyed is not None else []) + [part.data for part in op.operator_states]
    return any(hasattr(source, "rdd") for source in sources)


def _described(what: str, origin: str | None) -> str:
    return f"{what} ({origin})" if origin else what


def _column_type(spec: KeyedStateSpec) -> TypeInfo:
    """The type of the column that fills a keyed state: a list of the elements for LIST state."""
    return ListType(spec.type) if spec.kind == "LIST" else spec.type


@contextmanager
def _prefixed(what: str, strip: str = ""):
    """InvalidArgumentErrors raised inside name ``what`` (once)."""
    try:
        yield
    except InvalidArgumentError as e:
        if str(e).startswith(what):
            raise
        detail = e.detail[len(strip):] if strip and e.detail.startswith(strip) else e.detail
        raise InvalidArgumentError(f"{what}: {detail}", e.path) from None


def operator_for_target(op: OperatorSpec, metadata_version: int) -> OperatorSpec:
    """``op`` with its types as the Flink release writing ``metadata_version`` has them."""
    what = f"operator {op.uid or op.uid_hash}"
    keyed_part = op.keyed
    if keyed_part is not None:
        keyed_part = dataclasses.replace(
            keyed_part, key_type=type_for_target(keyed_part.key_type, metadata_version, f"{what}, key"),
            states=[dataclasses.replace(s, type=type_for_target(s.type, metadata_version, f"{what}, state '{s.name}'"))
                    for s in keyed_part.states])
    states = [dataclasses.replace(part, state=state_meta_for_target(part.state, metadata_version, what))
              for part in op.operator_states]
    return dataclasses.replace(op, keyed=keyed_part, operator_states=states)


# ---------------------------------------------------------------------------------------------
# executor side


def keyed_backend_meta(part: _KeyedPart) -> keyed.KeyedBackendMeta:
    states = [s.meta() for s in part.states]
    if part.event_timers:
        states.append(keyed.timer_state_meta("event", part.key_type))
    if part.processing_timers:
        states.append(keyed.timer_state_meta("processing", part.key_type))
    return keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, part.key_type, states)


def write_keyed(spark, part: _KeyedPart, parallelism: int, max_parallelism: int, directory: str,
                inline_threshold: int, fs_options=None) -> list[tuple[int, handles.KeyGroupsHandle]]:
    meta = keyed_backend_meta(part)
    encoding, columns = encoding_for(meta, part.key_type, part.states, part.event_timers, part.processing_timers,
                                     part.what, part.key, parallelism, max_parallelism)
    if not hasattr(part.df, "rdd"):  # an Arrow source: the embedded engine, on this machine
        return write_keyed_batches(part.df.open(columns), encoding, directory, inline_threshold, fs_options,
                                   size=part.df.size)

    def to_pairs(rows):
        subtask_of = encoding.subtask_of
        for kg, sid, pair in encoding.pairs(rows):
            yield (subtask_of(kg), kg), (sid, pair)

    rdd = part.df.select(*columns).rdd.mapPartitions(to_pairs)
    return write_keyed_pairs(rdd, meta, parallelism, max_parallelism, directory, inline_threshold, fs_options)


def write_keyed_pairs(rdd, meta: keyed.KeyedBackendMeta, parallelism: int, max_parallelism: int, directory: str,
                      inline_threshold: int, fs_options=None) -> list[tuple[int, handles.KeyGroupsHandle]]:
    """Write canonical keyed state streams from an RDD of ((subtask, key group), (state id, (key bytes,
    value bytes))): one Spark partition per subtask, sorted by key group, so each stream is written
    in order without holding it in memory. Returns each subtask's handle. ``directory`` may be
    remote (``fs_options`` reach the executors with the task)."""

    def write_subtask(index, items):
        groups = ((kg, _by_state(group)) for (_, kg), group in itertools.groupby(items, key=lambda x: x[0]))
        yield index, write_subtask_stream(index, groups, meta, parallelism, max_parallelism, directory,
                                          inline_threshold, fs_options)

    sorted_rdd = rdd.repartitionAndSortWithinPartitions(numPartitions=parallelism, partitionFunc=lambda k: k[0])
    results = dict(sorted_rdd.mapPartitionsWithIndex(write_subtask).collect())
    # subtasks without any key still get a (header-only) stream, as Flink writes them
    for i in range(parallelism):
        if i not in results:
            results[i] = write_subtask_stream(i, (), meta, parallelism, max_parallelism, directory, inline_threshold,
                                              fs_options)
    return sorted(results.items())


def _by_state(group) -> dict[int, list]:
    by_state: dict[int, list] = {}
    for _, (sid, pair) in group:
        by_state.setdefault(sid, []).append(pair)
    return by_state


def _operator_value_error(states: list[tuple[StateMetaInfo, Any]], whats: list[str],
                          cause: BaseException) -> FStateError:
    """The error naming the first value of a subtask's operator states that its type cannot hold
    (looked for only once the stream failed to encode)."""
    for (meta, values), what in zip(states, whats):
        if meta.kind == "BROADCAST":
            encoders = {"key": meta.key_type.encoder(), "value": meta.value_type.encoder()}
            items = list(values.items() if isinstance(values, dict) else values or ())
            checks = [(f"{what}, {part}", value, encoders[part]) for pair in items
                      for part, value in zip(("key", "value"), pair)]
        else:
            encoder = meta.value_type.encoder()
            checks = [(what, value, encoder) for value in values or ()]
        for label, value, encoder in checks:
            try:
                if value is None and meta.kind != "BROADCAST":
                    raise ValueError("list state elements cannot be null")
                encoder(bytearray(), value)
            except Exception as e:
                return row_error(label, value, e)
    return InvalidArgumentError(f"{', '.join(whats)}: {cause}")


def write_operator_states(spark, parts: list[_OperatorPart], parallelism: int, directory: str,
                          inline_threshold: int, proxy_version: int = operator_state.CURRENT_VERSION, fs_options=None
                          ) -> list[tuple[int, handles.OperatorStreamHandle]]:
    metas = [p.state for p in parts]
    whats = [p.what for p in parts]
    sc = spark.sparkContext
    rdds = []
    for idx, p in enumerate(parts):
        if p.state.kind == "BROADCAST":
            if hasattr(p.data, "schema"):
                rdd = p.data.select(p.key_column, p.column).rdd.map(tuple)
            else:
                items = list(p.data.items()) if isinstance(p.data, dict) else list(p.data)
                rdd = sc.parallelize(items, 1)
            rdds.append(rdd.zipWithIndex().flatMap(
                lambda kv, idx=idx: [(s, (idx, kv[1], kv[0])) for s in range(parallelism)]))
        else:
            if hasattr(p.data, "schema"):
                has_subtask = "subtask" in p.data.columns
                cols = [p.column] + (["subtask"] if has_subtask else [])
                rdd = p.data.select(*cols).rdd.map(tuple)
            else:
                has_subtask = False
                rdd = sc.parallelize([(v,) for v in p.data], 1)

            def place(vi, idx=idx, has_subtask=has_subtask, what=p.what):
                row, i = vi
                sub = row[1] if has_subtask else i % parallelism
                if sub is None or not 0 <= sub < parallelism:
                    raise InvalidArgumentError(f"{what}: subtask {sub} is outside 0..{parallelism - 1}")
                return sub, (idx, i, row[0])

            rdds.append(rdd.zipWithIndex().map(place))
    all_rdd = sc.union(rdds) if len(rdds) > 1 else rdds[0]

    def write_subtask(index, items):
        values: dict[int, list] = {i: [] for i in range(len(metas))}
        for _, (idx, seq, v) in sorted(items, key=lambda x: (x[1][0], x[1][1])):
            values[idx].append(v)
        yield index, _operator_subtask_handle(metas, whats, values, directory, inline_threshold, proxy_version,
                                              fs_options)

    results = dict(all_rdd.partitionBy(parallelism, lambda s: s).mapPartitionsWithIndex(write_subtask).collect())
    for i in range(parallelism):
        if i not in results:
            results[i] = _operator_subtask_handle(metas, whats, {}, directory, inline_threshold, proxy_version,
                                                  fs_options)
    return sorted(results.items())


def _operator_subtask_handle(metas: list[StateMetaInfo], whats: list[str], values: dict[int, list], directory: str,
                             inline_threshold: int, proxy_version: int, fs_options) -> handles.OperatorStreamHandle:
    """One subtask's operator state stream: ``values`` (by state index) of each state of ``metas``."""
    states = [(m, values.get(i, [])) for i, m in enumerate(metas)]
    try:
        data, offsets = operator_state.encode_operator_stream(states, proxy_version)
    except FStateError:
        raise
    except Exception as e:
        raise _operator_value_error(states, whats, e) from None
    return handles.OperatorStreamHandle(offsets, write_stream(directory, data, inline_threshold, fs_options))


def write_operator_states_here(parts: list[_OperatorPart], parallelism: int, directory: str, inline_threshold: int,
                               proxy_version: int = operator_state.CURRENT_VERSION, fs_options=None
                               ) -> list[tuple[int, handles.OperatorStreamHandle]]:
    """:func:`write_operator_states` in this process, from Python values or Arrow sources (the embedded
    engine): elements placed as Spark places them, the same bytes."""
    from .arrow_frames import frame_rows

    by_subtask: list[dict[int, list]] = [{} for _ in range(parallelism)]
    for idx, p in enumerate(parts):
        if p.state.kind == "BROADCAST":
            if hasattr(p.data, "schema"):
                items = list(frame_rows(p.data, [p.key_column, p.column]))
            else:
                items = list(p.data.items()) if isinstance(p.data, dict) else [tuple(item) for item in p.data]
            for values in by_subtask:
                values[idx] = items
            continue
        has_subtask = hasattr(p.data, "schema") and "subtask" in p.data.columns
        if hasattr(p.data, "schema"):
            rows = frame_rows(p.data, [p.column] + (["subtask"] if has_subtask else []))
        else:
            rows = ((v,) for v in p.data)
        for i, row in enumerate(rows):
            sub = row[1] if has_subtask else i % parallelism
            if sub is None or not 0 <= sub < parallelism:
                raise InvalidArgumentError(f"{p.what}: subtask {sub} is outside 0..{parallelism - 1}")
            by_subtask[sub].setdefault(idx, []).append(row[0])
    metas, whats = [p.state for p in parts], [p.what for p in parts]
    return [(i, _operator_subtask_handle(metas, whats, values, directory, inline_threshold, proxy_version, fs_options))
            for i, values in enumerate(by_subtask)]
