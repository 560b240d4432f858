"""Deriving a savepoint from an existing one (the State Processor API's "modify").

    m = SavepointModifier("/sp/base", spark)
    m.remove_operator("old-op")
    m.rename_uid("counter", "counter-v2")
    m.set_max_parallelism("sessions", 256)
    m.transform_state("counter-v2", "total", sql="SELECT key, total * 10 AS total FROM state")
    m.writer.with_list_state("new-src", "offsets", [0], type="LONG")   # add operators like bootstrap
    m.write("/sp/new")                       # untouched operators: shallow copies pointing into BASE

BASE is only read. NEW is written atomically (temp dir, `_metadata` last, rename; on object stores
the files under NEW's prefix and `_metadata` last); a failure leaves no NEW behind. Shallow copies
turn BASE's relative file handles into absolute ones (``file:/…`` or ``s3://…``), so NEW depends on
BASE's files (see :func:`dependencies`); ``deep=True`` copies them instead (streamed, between any
two file systems).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from typing import Any, Callable

from ..savepoint import handles as H
from ..savepoint import keyed as K
from ..savepoint.builder import SavepointBuilder, resolve_operator_id
from ..savepoint.errors import InvalidArgumentError, UnknownOperatorError
from ..savepoint.io import (METADATA_FILE, canonical, copy_range, family_of, io_for, is_remote, join,
                            strip_file_scheme)
from ..savepoint.loader import OperatorView, Savepoint
from ..savepoint.metadata import OperatorState, SubtaskState, read_metadata, write_metadata
from ..savepoint.types.hashing import check_parallelism, key_group_for_hash, operator_index_for_key_group
from .writer import SavepointWriter, write_keyed_pairs


# ---------------------------------------------------------------------------------------------
# handle rewriting


def _file_uri(path: str) -> str:
    return path if is_remote(path) else "file:" + os.path.abspath(strip_file_scheme(path))


class _HandleMapper:
    """Rewrites the stream handles of one operator: shallow (absolute paths into BASE) or deep
    (copies into NEW's directory, relative handles)."""

    def __init__(self, base_dir: str, new_dir: str | None, deep: bool, fs_options=None):
        self.base_dir = base_dir if is_remote(base_dir) else strip_file_scheme(base_dir)
        self.new_dir = new_dir
        self.deep = deep
        self.fs_options = fs_options
        self.copied: dict[str, str] = {}

    def stream(self, h):
        if h is None or isinstance(h, (H.ByteStreamHandle, H.EmptySegmentFileHandle)):
            return h
        if isinstance(h, H.KeyGroupsHandle):
            return dataclasses.replace(h, delegate=self.stream(h.delegate))
        if isinstance(h, H.RelativeFileHandle):
            src = join(self.base_dir, h.relative_path)
            return self._copy(src, 0, h.size) if self.deep else H.FileHandle(_file_uri(src), h.size)
        if isinstance(h, H.FileHandle):
            return self._copy(_plain(h.path), 0, h.size) if self.deep else h
        if isinstance(h, H.SegmentFileHandle):
            return self._copy(_plain(h.physical_path), h.start, h.size) if self.deep else h
        raise InvalidArgumentError(f"cannot copy a {type(h).__name__}")

    def _copy(self, src: str, start: int, size: int) -> H.RelativeFileHandle:
        key = f"{src}@{start}"
        name = self.copied.get(key)
        if name is None:
            name = str(uuid.uuid4())
            copy_range(src, start, size, join(self.new_dir, name), self.fs_options)
            self.copied[key] = name
        return H.RelativeFileHandle(name, size)

    def keyed(self, h):
        if h is None or isinstance(h, H.KeyGroupsHandle):
            return self.stream(h)
        if isinstance(h, H.IncrementalKeyedHandle):
            return dataclasses.replace(
                h, metadata_state=self.stream(h.metadata_state),
                shared=tuple((n, self.stream(x)) for n, x in h.shared),
                private=tuple((n, self.stream(x)) for n, x in h.private))
        raise InvalidArgumentError(f"cannot copy keyed state stored as {type(h).__name__}")

    def operator(self, h):
        if h is None:
            return None
        return dataclasses.replace(h, delegate=self.stream(h.delegate))

    def subtask(self, s: SubtaskState) -> SubtaskState:
        if s.input_channels or s.result_subpartitions:
            raise InvalidArgumentError("in-flight channel state (unaligned checkpoint) cannot be carried over")
        return SubtaskState(self.operator(s.managed_operator), self.operator(s.raw_operator),
                            self.keyed(s.managed_keyed), self.keyed(s.raw_keyed))

    def operator_state(self, op: OperatorState, **changes) -> OperatorState:
        return dataclasses.replace(op, subtasks={i: self.subtask(s) for i, s in op.subtasks.items()},
                                   entry_order=(), **changes)


def dependencies(path: str, fs_options=None) -> dict[str, int]:
    """Directories outside the savepoint whose files it references, with the number of handles."""
    from ..savepoint.summary import _dependencies

    return _dependencies(Savepoint.open(path, allow_external_paths=True, fs_options=fs_options))


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Rescale:
    max_parallelism: int
    parallelism: int | None


@dataclasses.dataclass
class _Transform:
    state: str
    sql: str | None
    fn: Callable | None
    type: Any


class SavepointModifier:
    def __init__(self, base: str, spark=None, *, fs_options=None):
        """``fs_options``: file-system options for remote BASE/NEW (see savepoint/io.py)."""
        # the base may itself be a shallow copy of another savepoint: its handles are followed
        self.base = Savepoint.open(base, allow_external_paths=True, fs_options=fs_options)
        self.fs_options = self.base.fs_options
        self._spark = spark
        self.writer = SavepointWriter(spark=spark, fs_options=self.fs_options)
        self._removed: set[bytes] = set()
        self._renamed: dict[bytes, tuple[bytes, str | None]] = {}
        self._rescaled: dict[bytes, _Rescale] = {}
        self._transforms: dict[bytes, list[_Transform]] = {}
        self._resplit: dict[bytes, int] = {}

    @property
    def spark(self):
        if self._spark is None:
            from ..readers.session import get_spark

            self._spark = get_spark()
            self.writer._spark = self._spark
        return self._spark

    def _find(self, uid: str) -> OperatorView:
        return self.base.operator(uid)

    def remove_operator(self, uid: str) -> "SavepointModifier":
        self._removed.add(self._find(uid).state.operator_id)
        return self

    def rename_uid(self, old: str, new: str) -> "SavepointModifier":
        """State of operator ``old`` (uid or uid hash) becomes the state of uid ``new``."""
        op = self._find(old)
        self._renamed[op.state.operator_id] = (resolve_operator_id(new, None), new)
        return self

    def set_max_parallelism(self, uid: str, max_parallelism: int, parallelism: int | None = None
                            ) -> "SavepointModifier":
        """Re-assign keyed state to the key groups of a new max parallelism, as Flink would."""
        op = self._find(uid)
        p = parallelism or min(op.parallelism, max_parallelism)
        check_parallelism(p, max_parallelism)
        self._rescaled[op.state.operator_id] = _Rescale(max_parallelism, p)
        return self

    def set_parallelism(self, uid: str, parallelism: int) -> "SavepointModifier":
        """Split or merge an operator's list, union and broadcast state over a new number of subtasks
        (list elements keep their order and are cut into contiguous runs, as Flink's round-robin
        repartitioner does; every subtask gets a broadcast copy)."""
        op = self._find(uid)
        if op.has_keyed_state:
            raise InvalidArgumentError(f"operator {uid} has keyed state: change its max parallelism instead "
                                       "(Flink redistributes keyed state by key group on restore)")
        check_parallelism(parallelism, op.max_parallelism)
        self._resplit[op.state.operator_id] = parallelism
        return self

    def transform_state(self, uid: str, state: str, *, sql: str | None = None,
                        fn: Callable | None = None, type: Any = None) -> "SavepointModifier":
        """Rewrite one keyed state: ``sql`` over the view ``state`` (columns: key and the state), or
        ``fn(DataFrame) -> DataFrame``; the result's ``key`` and ``state`` columns are written back
        (rows whose value is null drop that state for the key). ``type`` overrides the new type."""
        if (sql is None) == (fn is None):
            raise InvalidArgumentError("give exactly one of sql= or fn=")
        op = self._find(uid)
        km = op.keyed_meta
        if km is None or km.state_id(state) is None:
            raise InvalidArgumentError(f"operator {uid} has no keyed state '{state}'")
        self._transforms.setdefault(op.state.operator_id, []).append(_Transform(state, sql, fn, type))
        return self

    # -----------------------------------------------------------------------------------------
    def write(self, path: str, *, deep: bool = False, overwrite: bool = False) -> str:
        # NEW keeps BASE's metadata version (and so stays readable by the Flink that wrote BASE)
        builder = SavepointBuilder(path, overwrite=overwrite, checkpoint_id=self.base.metadata.checkpoint_id,
                                   metadata_version=self.base.metadata.version, fs_options=self.fs_options)
        try:
            mapper = _HandleMapper(self.base.path, builder.temp_dir, deep, builder.fs_options)
            new_ids = {resolve_operator_id(u, h) for u, h in
                       ((o.uid, o.uid_hash) for o in self.writer._ops.values())}
            for view in self.base.operators:
                op = view.state
                oid = op.operator_id
                if oid in self._removed:
                    continue
                if oid in new_ids:
                    continue  # replaced by a new operator written below
                if oid in self._transforms:
                    self._write_transformed(builder, mapper, view)
                    continue
                if oid in self._rescaled:
                    self._write_rescaled(builder, mapper, view, self._rescaled[oid])
                    continue
                if oid in self._resplit:
                    self._write_resplit(builder, view, self._resplit[oid])
                    continue
                changes = {}
                if oid in self._renamed:
                    new_id, new_uid = self._renamed[oid]
                    changes = dict(operator_id=new_id, uid=new_uid,
                                   name=new_uid if op.name in (None, op.uid) else op.name)
                builder.add_operator_state(mapper.operator_state(op, **changes))
            for op in self.writer._ops.values():
                self.writer._spark = self.spark
                self.writer._write_operator(builder, op)
            return builder.commit()
        except BaseException:
            builder.abort()
            raise

    def _write_rescaled(self, builder: SavepointBuilder, mapper: _HandleMapper, view: OperatorView,
                        r: _Rescale) -> None:
        km = view.keyed_meta
        handles = view.key_group_handles()
        if km is None:
            builder.add_operator_state(mapper.operator_state(view.state, max_parallelism=r.max_parallelism))
            return
        sources = [(view.savepoint.stream_source(h.delegate), h) for _, h in handles]
        old_max, new_max, p = view.max_parallelism, r.max_parallelism, r.parallelism
        meta = K.KeyedBackendMeta(K.CURRENT_VERSION, False, km.key_type, km.states)
        key_type = km.key_type

        def rekey(item):
            src, h = item
            buf = H.read_source(src)
            m = K.read_keyed_proxy(buf, src.label)
            encoders = [K.PairEncoder(meta, i, new_max) for i in range(len(m.states))]
            for sid, _, _, key, ns, value in K.iter_entries(buf, h, m, old_max, source=src.label):
                kg = key_group_for_hash(key_type.java_hash(key), new_max)
                sub = operator_index_for_key_group(kg, p, new_max)
                enc = encoders[sid]
                if enc.kind == "MAP" and isinstance(value, tuple):
                    value = [value]
                for pair in enc.pairs(kg, key, value, ns):
                    yield (sub, kg), (sid, pair)

        rdd = self.spark.sparkContext.parallelize(sources, max(1, len(sources))).flatMap(rekey)
        keyed = dict(write_keyed_pairs(rdd, meta, p, new_max, builder.temp_dir, builder.inline_threshold,
                                       builder.fs_options))
        # operator (non-keyed) state is redistributed by Flink itself on restore: keep it as is
        subtasks = {}
        for i in range(p):
            old = view.state.subtasks.get(i)
            mapped = mapper.subtask(old) if old is not None else SubtaskState()
            subtasks[i] = SubtaskState(mapped.managed_operator, mapped.raw_operator, keyed.get(i), None)
        extra = {i: mapper.subtask(s) for i, s in view.state.subtasks.items() if i >= p}
        for i, s in extra.items():
            if s.managed_operator is not None or s.raw_operator is not None:
                subtasks[i] = SubtaskState(s.managed_operator, s.raw_operator)
        new_op = dataclasses.replace(view.state, parallelism=max(p, max(subtasks) + 1), max_parallelism=new_max,
                                     subtasks=subtasks, entry_order=())
        builder.add_operator_state(new_op)

    def _write_resplit(self, builder: SavepointBuilder, view: OperatorView, parallelism: int) -> None:
        from ..savepoint import operator as O

        om = view.operator_meta
        states = []
        for info in (om.states if om else []):
            if info.kind == "BROADCAST":
                states.append((info, dict(view.broadcast_state(info.name))))
            else:
                states.append((info, [v for _, _, v in view.list_state(info.name)]))
        op = view.state
        b = builder.operator(op.uid, uid_hash=op.operator_id.hex(), parallelism=parallelism,
                             max_parallelism=op.max_parallelism, name=op.name)
        b.uid = op.uid
        for i in range(parallelism):
            part = []
            for info, values in states:
                if info.kind == "BROADCAST":
                    part.append((info, values))
                else:
                    n = len(values)
                    lo, hi = i * n // parallelism, (i + 1) * n // parallelism
                    part.append((info, values[lo:hi]))
            data, offsets = O.encode_operator_stream(part, O.proxy_version_for_metadata(builder.metadata_version))
            b.subtask(i).managed_operator = H.OperatorStreamHandle(offsets, builder.stream(data))

    def _write_transformed(self, builder: SavepointBuilder, mapper: _HandleMapper, view: OperatorView) -> None:
        from ..readers.reader import SavepointReader

        km = view.keyed_meta
        if any(s.namespace_type.name != "VoidNamespace" for _, s in km.value_states):
            raise InvalidArgumentError(f"operator {view.display_name}: windowed (namespaced) state cannot be transformed")
        services = {s.name for _, s in km.timer_states}
        unsupported = services - {"_timer_state/event_user-timers", "_timer_state/processing_user-timers"}
        if unsupported:
            raise InvalidArgumentError(f"operator {view.display_name}: timers of {', '.join(sorted(unsupported))} "
                                       "cannot be carried through a transform")
        reader = SavepointReader(self.base.location.metadata_path, self.spark, allow_external_paths=True,
                                 fs_options=self.fs_options)
        df = reader.keyed(view.uid_hash)
        specs: dict[str, Any] = {}
        for _, s in km.value_states:
            specs[s.name] = {"kind": s.kind, "type": s.element_type if s.kind != "LIST" else _list_of(s)}
        for t in self._transforms[view.state.operator_id]:
            sub = df.select("key", t.state)
            if t.sql is not None:
                sub.createOrReplaceTempView("state")
                new = self.spark.sql(t.sql)
            else:
                new = t.fn(sub)
            missing = {"key", t.state} - set(new.columns)
            if missing:
                raise InvalidArgumentError(f"transform of '{t.state}' must return columns key and {t.state}")
            df = df.drop(t.state).join(new.select("key", t.state), on="key", how="left")
            specs[t.state] = {"kind": specs[t.state]["kind"], "type": t.type} if t.type else None
        # timers of the operator are carried over as per-key timestamp lists
        timer_cols = {}
        if services:
            from pyspark.sql import functions as F

            timers = reader.timers(view.uid_hash)
            for kind in ("event", "processing"):
                if f"_timer_state/{kind}_user-timers" in services:
                    col = f"__fstate_{kind}_timers"
                    agg = timers.where(F.col("kind") == kind).groupBy("key").agg(F.collect_list("timestamp").alias(col))
                    df = df.join(agg, on="key", how="full_outer")
                    timer_cols[kind] = col
        op = view.state
        # a max-parallelism change of the same operator happens here too: keys are hashed afresh
        r = self._rescaled.get(op.operator_id) or _Rescale(view.max_parallelism, view.parallelism)
        w = SavepointWriter(r.max_parallelism, self.spark, inline_threshold=builder.inline_threshold,
                            fs_options=self.fs_options)
        w.with_keyed_state(None, df, key="key", states=specs, key_type=km.key_type, parallelism=r.parallelism,
                           uid_hash=op.operator_id.hex(), name=op.name, event_timers=timer_cols.get("event"),
                           processing_timers=timer_cols.get("processing"))
        ops = list(w._ops.values())
        w._write_operator(builder, ops[0])
        built = builder.operators.pop(op.operator_id)
        for i, s in op.subtasks.items():
            mapped = mapper.subtask(s)
            sub = built.subtask(i)
            sub.managed_operator, sub.raw_operator = mapped.managed_operator, mapped.raw_operator
        builder.add_operator_state(OperatorState(op.operator_id, built.parallelism, built.max_parallelism,
                                                 {i: s for i, s in built.subtasks.items() if not s.is_empty},
                                                 name=op.name, uid=op.uid))


def _list_of(s):
    from ..savepoint.types import ListType

    return ListType(s.element_type)


# ---------------------------------------------------------------------------------------------
# relocate


def _plain(p: str) -> str:
    """A handle's path as fstate opens it: ``file:`` stripped, URIs unchanged."""
    return p if is_remote(p) else strip_file_scheme(p)


def _canonical_path(p: str) -> str:
    """``file:/a``, ``file:///a`` and ``/a`` → ``/a``; ``s3a://b/x`` → ``s3://b/x`` (Flink's S3
    spellings name the same objects); other URIs unchanged."""
    if p.startswith("file:") or p.startswith("/"):
        return strip_file_scheme(p)
    return canonical(p) if family_of(p) in ("s3", "gcs") else p


def relocate(path: str, old_prefix: str, new_prefix: str, *, backup: bool = True, fs_options=None) -> int:
    """Rewrite absolute paths starting with ``old_prefix`` in `_metadata` (a moved savepoint or
    checkpoint directory, or a moved base — also to another bucket or file system: ``s3://old/sp``
    → ``s3://new/sp``). Atomic (one PUT on object stores); returns the number of rewritten handles."""
    sp = Savepoint.open(path, allow_external_paths=True, fs_options=fs_options)
    meta_path = sp.location.metadata_path
    meta = sp.metadata
    count = 0
    old_canon = _canonical_path(old_prefix).rstrip("/")
    new_canon = (new_prefix if is_remote(new_prefix) else _canonical_path(new_prefix)).rstrip("/")

    def fix(p: str) -> str:
        nonlocal count
        c = _canonical_path(p)
        if c == old_canon or c.startswith(old_canon + "/"):
            count += 1
            moved = new_canon + c[len(old_canon):]
            return "file:" + moved if moved.startswith("/") else moved
        return p

    def stream(h):
        if isinstance(h, H.FileHandle):
            return dataclasses.replace(h, path=fix(h.path))
        if isinstance(h, H.SegmentFileHandle):
            return dataclasses.replace(h, physical_path=fix(h.physical_path))
        if isinstance(h, H.KeyGroupsHandle):
            return dataclasses.replace(h, delegate=stream(h.delegate))
        return h

    def keyed(h):
        if isinstance(h, H.IncrementalKeyedHandle):
            return dataclasses.replace(h, metadata_state=stream(h.metadata_state),
                                       shared=tuple((n, stream(x)) for n, x in h.shared),
                                       private=tuple((n, stream(x)) for n, x in h.private))
        return stream(h)

    def oper(h):
        return None if h is None else dataclasses.replace(h, delegate=stream(h.delegate))

    for op in meta.operators:
        for i, s in list(op.subtasks.items()):
            op.subtasks[i] = dataclasses.replace(s, managed_operator=oper(s.managed_operator),
                                                 raw_operator=oper(s.raw_operator), managed_keyed=keyed(s.managed_keyed),
                                                 raw_keyed=keyed(s.raw_keyed))
    if count == 0:
        return 0
    data = write_metadata(meta)
    read_metadata(data, meta_path)  # never write what we could not read back
    if is_remote(meta_path):
        io = io_for(meta_path, sp.fs_options)
        if backup:
            io.write(meta_path + ".before-relocate", io.read(meta_path))
        io.write(meta_path, data)  # one PUT replaces the object whole
        return count
    tmp = meta_path + ".fstate-tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if backup:
        shutil.copy2(meta_path, meta_path + ".before-relocate")
    os.replace(tmp, meta_path)
    return count


__all__ = ["SavepointModifier", "dependencies", "relocate", "UnknownOperatorError", "METADATA_FILE"]
