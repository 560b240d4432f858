"""Writing the operators of a modify plan (writers/operations.py) into a SavepointBuilder.

Each planned operator is written the one way its plan asks for: added by a SavepointWriter, its keyed
state transformed (re-keyed at the same time), re-keyed for a new max parallelism, its list state
split over a new parallelism, or copied (shallow: absolute handles into BASE; deep: copies of the
files). Renames need no rewrite: every way writes the planned operator id, uid and name. State whose
serializers differ in the Flink release NEW is for (writers/flink_target.py: ``carry_for_target``,
``operator_carry_for_target``) is re-encoded with that release's serializers instead of copied
(writers/reencode.py), re-keyed at the same time when its max parallelism changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
from typing import Any

from ..savepoint import handles
from ..savepoint import keyed
from ..savepoint import operator as operator_state
from ..savepoint.builder import SavepointBuilder, stream_name
from ..savepoint.errors import FStateWarning, InvalidArgumentError
from ..savepoint.io import copy_range, is_remote, join, strip_file_scheme
from ..savepoint.metadata import OperatorState, SubtaskState, map_subtask_stream_handles
from ..savepoint.types.hashing import key_group_for_hash, operator_index_for_key_group
from .flink_target import carry_for_target, keyed_meta_for_target, operator_carry_for_target
from .operations import PlannedOperator
from .reencode import KeyedReencode, StateSource, reencode_keyed, reencode_operator
from .writer import SavepointWriter, write_keyed_pairs


def plain_path(path: str) -> str:
    """A handle's path as fstate opens it: ``file:`` stripped, URIs unchanged."""
    return path if is_remote(path) else strip_file_scheme(path)


def _file_uri(path: str) -> str:
    return path if is_remote(path) else "file:" + os.path.abspath(strip_file_scheme(path))


class HandleMapper:
    """Rewrites the stream handles of BASE's subtasks: shallow (absolute paths into BASE) or deep
    (copies into NEW's directory, relative handles). Every file is checked by BASE's path policy
    first (savepoint/io/policy.py): a file outside BASE is neither copied nor referred to unless
    BASE was opened with ``allow_external_paths=True``."""

    def __init__(self, base, builder: SavepointBuilder, deep: bool):
        self.base = base
        self.base_dir = plain_path(base.path)
        self.builder = builder
        self.deep = deep
        self.copied: dict[str, str] = {}

    def stream(self, h):
        if isinstance(h, (handles.ByteStreamHandle, handles.EmptySegmentFileHandle)):
            return h
        if not isinstance(h, (handles.RelativeFileHandle, handles.FileHandle, handles.SegmentFileHandle)):
            raise InvalidArgumentError(f"cannot copy state stored as {type(h).__name__}")
        src = self.base.stream_source(h)  # the path policy: raises for a file outside BASE
        if self.deep:
            return self._copy(src.path, src.start, h.size)
        if isinstance(h, handles.RelativeFileHandle):
            return handles.FileHandle(_file_uri(join(self.base_dir, h.relative_path)), h.size)
        return h

    def _copy(self, src: str, start: int, size: int) -> handles.RelativeFileHandle:
        key = f"{src}@{start}"
        name = self.copied.get(key)
        if name is None:  # named by what it copies (the same modify gives the same savepoint)
            where = "/".join(src.replace("\\", "/").rstrip("/").split("/")[-2:])
            name = stream_name(hashlib.sha256(f"{where}@{start}+{size}".encode()).digest())
            copy_range(src, start, size, join(self.builder.temp_dir, name), self.builder.fs_options)
            self.copied[key] = name
            self.builder.note_copy(name, src, start)  # damage the commit's verify finds is named at src
        return handles.RelativeFileHandle(name, size)

    def subtask(self, s: SubtaskState) -> SubtaskState:
        if s.input_channels or s.result_subpartitions:
            raise InvalidArgumentError("in-flight channel state (unaligned checkpoint) cannot be carried over")
        return map_subtask_stream_handles(s, self.stream)


class PlanWriter:
    """Writes planned operators into ``builder``; ``spark()`` gives the session when one is needed."""

    def __init__(self, modifier, builder: SavepointBuilder, deep: bool):
        self.modifier = modifier
        self.builder = builder
        self.mapper = HandleMapper(modifier.base, builder, deep)

    @property
    def spark(self):
        return self.modifier.spark

    def write(self, planned: PlannedOperator) -> None:
        if planned.added is not None:
            if self.modifier.engine == "spark":
                self.modifier.writer.spark = self.spark
            self.modifier.writer.write_operator(self.builder, planned.added)
        elif planned.transforms:
            self.transformed(planned)  # re-encoded with the target release's serializers
        else:
            self.reused(planned)

    def reused(self, planned: PlannedOperator) -> None:
        """State re-used: carried as it is when the target release serializes it as BASE's did,
        else re-encoded with the target's serializers."""
        view, target = planned.source, self.builder.metadata_version
        keyed_plan = carry_for_target(view, target)
        operator_meta = operator_carry_for_target(view, target, self.builder.operator_proxy_version)
        if planned.split_parallelism is not None:
            self.split(planned, operator_meta)  # (no keyed state) decoded and written again anyway
        elif keyed_plan is not None or operator_meta is not None:
            self.reencoded(planned, keyed_plan, operator_meta)
        elif planned.rekeyed and self.modifier.engine == "embedded":
            self.reencoded(planned, None, None)  # re-assigned to key groups in this process
        elif planned.rekeyed:
            self.rekeyed(planned)
        else:
            self.copied(planned)

    @staticmethod
    def _identity(planned: PlannedOperator) -> dict[str, Any]:
        return dict(operator_id=planned.operator_id, uid=planned.uid, name=planned.name)

    def copied(self, planned: PlannedOperator) -> None:
        state = planned.source.state
        self.builder.add_operator_state(dataclasses.replace(
            state, subtasks={i: self.mapper.subtask(s) for i, s in state.subtasks.items()}, entry_order=(),
            max_parallelism=planned.max_parallelism, **self._identity(planned)))

    def rekeyed(self, planned: PlannedOperator) -> None:
        """Keyed state re-assigned to the key groups of the planned max parallelism, as Flink would."""
        view = planned.source
        km = view.keyed_meta
        sources = view.keyed_states()  # key-group streams or RocksDB snapshots, read where Spark runs
        new_max, p = planned.max_parallelism, planned.parallelism
        meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, km.key_type, km.states)
        key_type = km.key_type

        def rekey(source):
            with source.open() as state:
                encoders = [keyed.PairEncoder(meta, i, new_max) for i in range(len(state.meta.states))]
                for sid, _, _, key, ns, value in state.entries():
                    kg = key_group_for_hash(key_type.java_hash(key), new_max)
                    sub = operator_index_for_key_group(kg, p, new_max)
                    enc = encoders[sid]
                    if enc.kind == "MAP" and isinstance(value, tuple):
                        value = [value]
                    for pair in enc.pairs(kg, key, value, ns):
                        yield (sub, kg), (sid, pair)

        builder = self.builder
        rdd = self.spark.sparkContext.parallelize(sources, max(1, len(sources))).flatMap(rekey)
        keyed_handles = dict(write_keyed_pairs(rdd, meta, p, new_max, builder.temp_dir, builder.inline_threshold,
                                       builder.fs_options))
        # operator (non-keyed) state is redistributed by Flink itself on restore: keep it as is
        subtasks = {}
        for i in range(p):
            old = view.state.subtasks.get(i)
            mapped = self.mapper.subtask(old) if old is not None else SubtaskState()
            subtasks[i] = SubtaskState(mapped.managed_operator, mapped.raw_operator, keyed_handles.get(i), None)
        for i, s in view.state.subtasks.items():
            if i >= p and (s.managed_operator is not None or s.raw_operator is not None):
                mapped = self.mapper.subtask(s)
                subtasks[i] = SubtaskState(mapped.managed_operator, mapped.raw_operator)
        builder.add_operator_state(dataclasses.replace(
            view.state, parallelism=max(p, max(subtasks) + 1), max_parallelism=new_max, subtasks=subtasks,
            entry_order=(), **self._identity(planned)))

    def reencoded(self, planned: PlannedOperator, keyed_plan: KeyedReencode | None,
                  operator_meta: operator_state.OperatorBackendMeta | None) -> None:
        """Keyed state (``keyed_plan``) and operator state (``operator_meta``) re-encoded with the
        target release's serializers (see :func:`reencoded_state`)."""
        self.builder.add_operator_state(reencoded_state(
            planned.source, self.builder, self.mapper, keyed_plan, operator_meta, parallelism=planned.parallelism,
            max_parallelism=planned.max_parallelism, **self._identity(planned)))

    def split(self, planned: PlannedOperator, operator_meta: operator_state.OperatorBackendMeta | None = None) -> None:
        """List state split (union state too), broadcast state copied, over the planned parallelism
        (with the headers of ``operator_meta`` when the target release's serializers differ)."""
        view, parallelism = planned.source, planned.split_parallelism
        om = operator_meta or view.operator_meta
        infos = om.states if om else []
        broadcast = {i.name: dict(view.broadcast_state(i.name)) for i in infos if i.kind == "BROADCAST"}
        lists = {i.name: [v for _, _, v in view.list_state(i.name)] for i in infos if i.kind != "BROADCAST"}
        # each state's runs in subtask order (Flink's rule for one state; on restore Flink also
        # rotates the first subtask from state to state, which would reorder the elements here)
        parts = {name: operator_state.split_list_state(values, parallelism) for name, values in lists.items()}
        b = self.builder.operator(planned.uid, uid_hash=planned.uid_hash, parallelism=parallelism,
                                  max_parallelism=planned.max_parallelism, name=planned.name)
        b.uid = planned.uid
        version = self.builder.operator_proxy_version
        for i in range(parallelism):
            part = [(info, broadcast[info.name] if info.kind == "BROADCAST" else parts[info.name][i])
                    for info in infos]
            data, offsets = operator_state.encode_operator_stream(part, version)
            b.subtask(i).managed_operator = handles.OperatorStreamHandle(offsets, self.builder.stream(data))

    def transformed(self, planned: PlannedOperator) -> None:
        """Keyed state read into a DataFrame, transformed, written back (hashed afresh: a max
        parallelism change of the same operator happens here too), by the modifier's engine."""
        view = planned.source
        # the states' serializers as the target release has them
        km = keyed_meta_for_target(view.keyed_meta, self.builder.metadata_version, f"operator {view.display_name}",
                                   view.savepoint.metadata.version)
        if any(s.namespace_type.name != "VoidNamespace" for _, s in km.value_states):
            raise InvalidArgumentError(f"operator {view.display_name}: windowed (namespaced) state cannot be transformed")
        services = {s.name for _, s in km.timer_states}
        unsupported = services - {"_timer_state/event_user-timers", "_timer_state/processing_user-timers"}
        if unsupported:
            raise InvalidArgumentError(f"operator {view.display_name}: timers of {', '.join(sorted(unsupported))} "
                                       "cannot be carried through a transform")
        base = self.modifier.base
        specs: dict[str, Any] = {}
        for _, s in km.value_states:
            specs[s.name] = {"kind": s.kind, "type": s.element_type if s.kind != "LIST" else _list_of(s)}
        kinds = [kind for kind in ("event", "processing") if f"_timer_state/{kind}_user-timers" in services]
        if self.modifier.engine == "embedded":
            from .transform_embedded import EmbeddedTransform

            embedded = EmbeddedTransform(base, view.uid_hash, self.builder.temp_dir, planned.display_name)
            try:
                frame, types, timer_cols = embedded.run(planned.transforms, kinds)
                self._write_transformed(planned, view, km, frame, specs, types, timer_cols, None)
            finally:
                embedded.close()
            return
        spark = self.spark
        df, types, timer_cols = _transformed_on_spark(spark, base, view, planned.transforms, kinds,
                                                       planned.display_name)
        self._write_transformed(planned, view, km, df, specs, types, timer_cols, spark)

    def _write_transformed(self, planned: PlannedOperator, view, km, df, specs: dict[str, Any], types: list,
                           timer_cols: dict[str, str], spark) -> None:
        """The transformed keyed table ``df`` (a DataFrame, or the embedded engine's frame) written back:
        each state with its own serializer unless its type changed (``types``: each transform's old and
        new Spark type), the timers from their columns, operator state carried."""
        for t, (old_type, new_type) in zip(planned.transforms, types):
            specs[t.state] = _transformed_spec(view.display_name, t, specs[t.state], new_type, old_type)
        builder = self.builder
        base = self.modifier.base
        writer = SavepointWriter(planned.max_parallelism, spark, inline_threshold=builder.inline_threshold,
                                 fs_options=base.fs_options)
        writer.with_keyed_state(None, df, key="key", states=specs, key_type=km.key_type,
                                parallelism=planned.parallelism, uid_hash=planned.uid_hash, name=planned.name,
                                event_timers=timer_cols.get("event"), processing_timers=timer_cols.get("processing"))
        if spark is None:
            writer.write_operator(builder, writer.operators[0])
        else:  # the transforms run here: their runtime errors (a cast that fails) are the query's
            from ..readers.views import spark_sql_errors
            from ..savepoint.errors import spark_errors

            with spark_errors(), spark_sql_errors(["state"]):  # (an fstate error of a function's task as itself)
                writer.write_operator(builder, writer.operators[0])
        built = builder.operators.pop(planned.operator_id)
        operator_meta = operator_carry_for_target(view, builder.metadata_version, builder.operator_proxy_version)
        converted = {} if operator_meta is None else reencode_operator(
            view, operator_meta, proxy_version=builder.operator_proxy_version, directory=builder.temp_dir,
            inline_threshold=builder.inline_threshold, fs_options=builder.fs_options)
        for i, s in view.state.subtasks.items():
            mapped = self.mapper.subtask(s)
            sub = built.subtask(i)
            sub.managed_operator = mapped.managed_operator if operator_meta is None else converted.get(i)
            sub.raw_operator = mapped.raw_operator
        builder.add_operator_state(OperatorState(planned.operator_id, built.parallelism, built.max_parallelism,
                                                 {i: s for i, s in built.subtasks.items() if not s.is_empty},
                                                 name=planned.name, uid=planned.uid))


def _transformed_on_spark(spark, base, view, transforms, kinds: list[str], name: str):
    """The transformed keyed table as a DataFrame, each transformed state's old and new Spark types, and
    the timers columns by kind (``kinds``: the kinds of user timers the operator has); ``name``: the
    operator's, in messages."""
    from ..readers.reader import SavepointReader

    reader = SavepointReader(base.location.metadata_path, spark, allow_external_paths=base.allow_external_paths,
                             fs_options=base.fs_options)
    df = reader.keyed(view.uid_hash, flatten=False)  # transforms see one key column
    types = []
    transformed: set[str] = set()
    for t in transforms:
        # a state's first transform reads a scan of its own: a key filter its query pushes down into a
        # scan the table shares would leave out the other keys' other states too
        sub = (df if t.state in transformed else reader.keyed(view.uid_hash, flatten=False)).select("key", t.state)
        transformed.add(t.state)
        new = t.how.spark_result(spark, sub, t.state, f"operator {name}, state '{t.state}'")
        if {"key", t.state} - set(new.columns):
            raise InvalidArgumentError(f"transform of '{t.state}' must return columns key and {t.state}")
        df = df.drop(t.state).join(new.select("key", t.state), on="key", how="left")
        types.append((sub.schema[t.state].dataType, new.schema[t.state].dataType))
    # timers of the operator are carried over as per-key timestamp lists
    timer_cols = {}
    if kinds:
        from pyspark.sql import functions

        timers = reader.timers(view.uid_hash, flatten=False)
        for kind in kinds:
            col = f"__fstate_{kind}_timers"
            agg = (timers.where(functions.col("kind") == kind).groupBy("key")
                   .agg(functions.collect_list("timestamp").alias(col)))
            df = df.join(agg, on="key", how="full_outer")
            timer_cols[kind] = col
    return df, types, timer_cols


def reencoded_state(view, builder: SavepointBuilder, mapper: HandleMapper, keyed_plan: KeyedReencode | None,
                    operator_meta: operator_state.OperatorBackendMeta | None, *, parallelism: int, max_parallelism: int,
                    operator_id: bytes, uid: str | None, name: str | None) -> OperatorState:
    """The state of ``view`` (a loader.OperatorView) for the new savepoint: keyed state re-encoded by
    ``keyed_plan`` (or, without one but under another max parallelism or parallelism, re-assigned to
    key groups with its own serializers), operator state re-encoded with ``operator_meta``; each part
    without a plan carried as it is (files copied or referred to by ``mapper``)."""
    rekeyed = view.has_keyed_state and view.keyed_meta is not None and (
        (max_parallelism, parallelism) != (view.max_parallelism, view.parallelism))
    if keyed_plan is None and rekeyed:  # the same serializers, new key groups
        keyed_plan = KeyedReencode(view.keyed_meta, {s.name: StateSource(s.name) for s in view.keyed_meta.states})
    keyed_handles = {}
    if keyed_plan is not None:
        keyed_handles = reencode_keyed(view, keyed_plan, parallelism=parallelism, max_parallelism=max_parallelism,
                                       directory=builder.temp_dir, inline_threshold=builder.inline_threshold,
                                       fs_options=builder.fs_options)
    operator_handles = {}
    if operator_meta is not None:
        operator_handles = reencode_operator(view, operator_meta, proxy_version=builder.operator_proxy_version,
                                             directory=builder.temp_dir, inline_threshold=builder.inline_threshold,
                                             fs_options=builder.fs_options)
    subtasks = {}
    # operator state stays with the subtask that held it (Flink redistributes it on restore)
    for i in sorted(set(range(parallelism)) | set(view.state.subtasks)):
        old = view.state.subtasks.get(i)
        mapped = mapper.subtask(old) if old is not None else SubtaskState()
        managed_operator = operator_handles.get(i) if operator_meta is not None else mapped.managed_operator
        if keyed_plan is None:
            managed_keyed, raw_keyed = mapped.managed_keyed, mapped.raw_keyed
        else:  # raw keyed state cannot be re-keyed: kept only where the key groups stay
            managed_keyed = keyed_handles.get(i)
            raw_keyed = None if rekeyed else mapped.raw_keyed
        sub = SubtaskState(managed_operator, mapped.raw_operator, managed_keyed, raw_keyed)
        if i < parallelism or not sub.is_empty:
            subtasks[i] = sub
    return dataclasses.replace(view.state, parallelism=max(parallelism, max(subtasks) + 1),
                               max_parallelism=max_parallelism, subtasks=subtasks, entry_order=(),
                               operator_id=operator_id, uid=uid, name=name)


def _transformed_spec(operator: str, t, spec: dict[str, Any], new_type, old_type) -> dict[str, Any] | None:
    """The type a transformed state is written with: the one given to the transform; else the
    state's own serializer (TTL, SQL RowData, POJO ... kept) when the result has the state's shape;
    else one inferred from the result's Spark type, with a warning, because Flink refuses to restore
    a state whose serializer changed unless the job changed too."""
    if t.type:
        return {"kind": spec["kind"], "type": t.type}
    if _same_shape(new_type, old_type):
        return spec
    warnings.warn(f"operator {operator}: transform of '{t.state}' changes its type from "
                  f"{old_type.simpleString()} to {new_type.simpleString()}; the state is written with a "
                  "serializer inferred from the new type, which the job must declare to restore it "
                  "(give the type to the transform to choose it)", FStateWarning, stacklevel=2)
    return None


def _same_shape(a, b) -> bool:
    """Spark SQL types equal up to nullability (SQL expressions change nullability, not shape); pyspark's
    types or the embedded engine's (writers/column_types.py), compared by their class names."""
    kind = type(a).__name__
    if kind != type(b).__name__:
        return False
    if kind == "StructType":
        return (len(a.fields) == len(b.fields)
                and all(_same_shape(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields)))
    if kind == "ArrayType":
        return _same_shape(a.elementType, b.elementType)
    if kind == "MapType":
        return _same_shape(a.keyType, b.keyType) and _same_shape(a.valueType, b.valueType)
    return a.simpleString() == b.simpleString()


def _list_of(s):
    from ..savepoint.types import ListType

    return ListType(s.element_type)
