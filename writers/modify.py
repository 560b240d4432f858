"""Deriving a savepoint from an existing one (the State Processor API's "modify").

    m = SavepointModifier("/sp/base", spark)
    m.remove_operator("old-op")
    m.rename_uid("counter", "counter-v2")
    m.set_max_parallelism("counter-v2", 256)
    m.transform_state("counter-v2", "total", sql="SELECT key, total * 10 AS total FROM state")
    m.writer.with_list_state("new-src", "offsets", [0], type="LONG")   # add operators like bootstrap
    m.write("/sp/new")                       # untouched operators: shallow copies pointing into BASE

Each call records an operation (writers/operations.py), applied in order to a plan of the new
savepoint: an operation names operators as the operations before it left them (``counter-v2``
above). An unknown uid, or one an earlier operation removed or renamed, fails at the call;
operators that end with one uid fail :meth:`SavepointModifier.write` before anything is written.
Operators given to ``m.writer`` are added last (one with a planned operator's id replaces it).

BASE is only read. NEW is written atomically (temp dir, `_metadata` last, rename; on object stores
the files under NEW's prefix and `_metadata` last); a failure leaves no NEW behind. Shallow copies
turn BASE's relative file handles into absolute ones (``file:/…`` or ``s3://…``), so NEW depends on
BASE's files (see :func:`dependencies`); ``deep=True`` copies them instead (streamed, between any
two file systems).
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from typing import Any, Callable

from ..savepoint import handles
from ..savepoint.builder import SavepointBuilder, metadata_version_for, operator_proxy_version_for, write_metadata_file
from ..savepoint.errors import FStateWarning, InvalidArgumentError, UnknownOperatorError
from ..savepoint.io import METADATA_FILE, canonical, family_of, io_for, is_remote, is_within, strip_file_scheme
from ..savepoint.loader import Savepoint
from ..savepoint.metadata import map_subtask_stream_handles, read_metadata, write_metadata
from .operations import (AddOperators, ModifyPlan, Operation, RemoveOperator, RenameUid, SetMaxParallelism,
                         SetMaxParallelismOfAll, SetParallelism, TransformState)
from .flink_target import operator_proxy_version_of
from .rewrite import PlanWriter
from .transforms import transform_of
from .writer import SavepointWriter


def dependencies(path: str, fs_options=None) -> dict[str, int]:
    """Directories outside the savepoint whose files it references, with the number of handles."""
    return dependencies_of(Savepoint.open(path, allow_external_paths=True, fs_options=fs_options))


def dependencies_of(savepoint: Savepoint) -> dict[str, int]:
    from ..savepoint.summary import external_dependencies

    return external_dependencies(savepoint)


class SavepointModifier:
    def __init__(self, base: str, spark=None, *, flink_version: str | None = None, fs_options=None,
                 allow_external_paths: bool = False, engine: str | None = None):
        """``flink_version``: the Flink release that will restore NEW (e.g. "1.20", "2.0", "2.3");
        by default the one that wrote BASE (NEW keeps BASE's metadata version). For another release
        NEW gets that release's metadata version and serializers (writers/flink_target.py).
        ``fs_options``: file-system options for remote BASE/NEW (see savepoint/io/).
        ``allow_external_paths``: BASE's handles may name files outside BASE (e.g. BASE is itself a
        shallow copy); without it such a file is neither copied (deep) nor referred to (shallow).
        ``engine``: what rewrites state (transforms, re-keying): ``embedded`` (in this process: DuckDB runs
        the transforms' SQL, functions of Arrow batches are called here; no JVM) or ``spark``; by default Spark when a session is given, else embedded.
        Both write the same bytes."""
        from ..readers.engine import choose_engine

        #: ``embedded`` or ``spark``
        self.engine = choose_engine(engine or ("spark" if spark is not None else "embedded"), False, 0)
        self.base = Savepoint.open(base, allow_external_paths=allow_external_paths, fs_options=fs_options)
        self.fs_options = self.base.fs_options
        #: the `_metadata` version NEW is written with
        self.metadata_version = (metadata_version_for(flink_version) if flink_version
                                 else self.base.metadata.version)
        self._flink_version = flink_version
        self._spark = spark
        #: operators to add (or replace), written like bootstrap's
        self.writer = SavepointWriter(spark=spark, fs_options=self.fs_options)
        #: the operations so far, in order
        self.operations: list[Operation] = []
        self._plan = ModifyPlan(self.base)

    @property
    def operator_proxy_version(self) -> int:
        """The operator-state header version of the streams NEW gets: the asked-for release's, else
        BASE's own (flink_target.operator_proxy_version_of)."""
        if self._flink_version:
            return operator_proxy_version_for(self._flink_version)
        return operator_proxy_version_of(self.base)

    @property
    def spark(self):
        if self._spark is None:
            from ..readers.session import get_spark

            self.spark = get_spark()
        return self._spark

    @spark.setter
    def spark(self, session) -> None:
        self._spark = session
        self.writer.spark = session

    def apply(self, operation: Operation) -> "SavepointModifier":
        """Record one operation; an unknown uid, or one an earlier operation removed or renamed,
        raises here."""
        self._plan.apply(operation)
        self.operations.append(operation)
        return self

    def remove_operator(self, uid: str) -> "SavepointModifier":
        return self.apply(RemoveOperator(uid))

    def rename_uid(self, old: str, new: str) -> "SavepointModifier":
        """State of operator ``old`` (uid or uid hash) becomes the state of uid ``new``."""
        return self.apply(RenameUid(old, new))

    def set_max_parallelism(self, uid: str, max_parallelism: int, parallelism: int | None = None
                            ) -> "SavepointModifier":
        """Re-assign keyed state to the key groups of a new max parallelism, as Flink would."""
        return self.apply(SetMaxParallelism(uid, max_parallelism, parallelism))

    def set_max_parallelism_of_all(self, max_parallelism: int) -> "SavepointModifier":
        """The max parallelism of every operator at once, stateless ones too (Flink checks every
        operator of a task against the task's max parallelism on restore). Setting it for one
        operator only warns (:class:`~fstate.savepoint.errors.FStateWarning`) when the others differ."""
        return self.apply(SetMaxParallelismOfAll(max_parallelism))

    def set_parallelism(self, uid: str, parallelism: int) -> "SavepointModifier":
        """Split or merge an operator's list, union and broadcast state over a new number of subtasks
        (list elements keep their order and are cut into contiguous runs in subtask order, the
        first ``len % parallelism`` subtasks getting one more, as Flink's round-robin repartitioner
        cuts one state: :func:`fstate.savepoint.operator.split_list_state`; every subtask gets a
        broadcast copy)."""
        return self.apply(SetParallelism(uid, parallelism))

    def transform_state(self, uid: str, state: str, *, sql: str | None = None, fn: Callable | None = None,
                        arrow: Callable | None = None, pandas: Callable | None = None,
                        type: Any = None) -> "SavepointModifier":
        """Rewrite one keyed state with exactly one of: ``sql`` over the view ``state`` (columns: key and the
        state); ``fn(DataFrame) -> DataFrame`` (Spark only); ``arrow(RecordBatch) -> RecordBatch | Table``,
        called a batch at a time (on Spark through ``mapInArrow``); ``pandas(DataFrame) -> DataFrame``, the
        same per batch in pandas (writers/transforms.py). The result's ``key`` and ``state`` columns are
        written back (rows whose value is null, or whose key is missing, drop that state for the key; keys
        the state did not have are not added). ``type`` overrides the new type."""
        return self.apply(TransformState(uid, state, transform_of(sql=sql, fn=fn, arrow=arrow, pandas=pandas), type))

    def plan(self) -> ModifyPlan:
        """The new savepoint's operators after every operation and the added operators; raises
        :class:`~fstate.savepoint.errors.ModifyConflictError` listing every conflict."""
        plan = ModifyPlan(self.base)
        for operation in self.operations:
            plan.apply(operation)
        plan.apply(AddOperators(self.writer))
        plan.check()
        return plan

    @property
    def needs_spark(self) -> bool:
        """Whether writing rewrites state (re-keyed, transformed or added operators): on Spark, or on the
        embedded engine (:attr:`engine`)."""
        plan = self.plan()
        return any(o.added is not None or o.transforms or o.rekeyed for o in plan.operators)

    def rewritten_bytes(self) -> int:
        """Bytes of the keyed state the write decodes and writes again (transformed or re-keyed
        operators): what the engine choice weighs (cli ``engine_for``)."""
        return sum(h.size for o in self.plan().operators if o.source is not None and (o.transforms or o.rekeyed)
                   for _, h in o.source.keyed_handles())

    def check_target(self, path: str) -> None:
        """NEW may not be BASE, lie inside it or contain it, nor overlap a directory whose files
        BASE refers to (writing there could replace or delete the state NEW is made of)."""
        protected = [self.base.path, *dependencies_of(self.base)]
        for directory in protected:
            if is_within(path, directory) or is_within(directory, path):
                what = "BASE" if directory == self.base.path else f"{directory}, whose files BASE refers to,"
                where = ("is" if canonical(path) == canonical(directory) else
                         "lies inside" if is_within(path, directory) else "contains")
                raise InvalidArgumentError(f"the new savepoint {where} {what}: choose another --out "
                                           "(BASE is only read)", path)

    def write(self, path: str, *, deep: bool = False, overwrite: bool = False, verify: bool = True) -> str:
        """Write NEW; ``verify``: it must pass `fstate verify`'s checks, else nothing is written (damage
        copied from BASE is reported at BASE's file)."""
        self.check_target(path)
        plan = self.plan()  # conflicts are reported here, before anything is written
        for message in plan.warnings():
            warnings.warn(message, FStateWarning, stacklevel=2)
        # NEW keeps BASE's metadata version (and so stays readable by the Flink that wrote BASE)
        # unless another Flink release was asked for
        builder = SavepointBuilder(path, overwrite=overwrite, checkpoint_id=self.base.metadata.checkpoint_id,
                                   metadata_version=self.metadata_version,
                                   operator_proxy_version=self.operator_proxy_version, fs_options=self.fs_options)
        try:
            writer = PlanWriter(self, builder, deep)
            for planned in plan.operators:
                writer.write(planned)
            return builder.commit(verify=verify)
        except BaseException:
            builder.abort()
            raise


# ---------------------------------------------------------------------------------------------
# relocate


def _canonical_path(p: str) -> str:
    """``file:/a``, ``file:///a`` and ``/a`` → ``/a``; ``s3a://b/x`` → ``s3://b/x`` (Flink's S3
    spellings name the same objects); other URIs unchanged."""
    if p.startswith("file:") or p.startswith("/"):
        return strip_file_scheme(p)
    return canonical(p) if family_of(p) in ("s3", "gcs") else p


def relocate(path: str, old_prefix: str, new_prefix: str, *, backup: bool = True, fs_options=None,
             allow_external_paths: bool = False) -> int:
    """Rewrite absolute paths starting with ``old_prefix`` in `_metadata` (a moved savepoint or
    checkpoint directory, or a moved base — also to another bucket or file system: ``s3://old/sp``
    → ``s3://new/sp``). Atomic (one PUT on object stores); returns the number of rewritten handles.
    A rewritten path outside the savepoint directory (savepoint/io/policy.py: a moved base, say)
    needs ``allow_external_paths=True``; otherwise nothing is written."""
    sp = Savepoint.open(path, allow_external_paths=allow_external_paths, fs_options=fs_options)
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
            sp.path_policy.check(moved)
            return "file:" + moved if moved.startswith("/") else moved
        return p

    def stream(h):
        if isinstance(h, handles.FileHandle):
            return dataclasses.replace(h, path=fix(h.path))
        if isinstance(h, handles.SegmentFileHandle):
            return dataclasses.replace(h, physical_path=fix(h.physical_path))
        return h

    for op in meta.operators:
        for i, s in list(op.subtasks.items()):
            op.subtasks[i] = map_subtask_stream_handles(s, stream)
    if count == 0:
        return 0
    data = write_metadata(meta)
    read_metadata(data, meta_path)  # never write what we could not read back
    if backup and is_remote(meta_path):
        io = io_for(meta_path, sp.fs_options)
        io.write(meta_path + ".before-relocate", io.read(meta_path))
    elif backup:
        shutil.copy2(meta_path, meta_path + ".before-relocate")
    write_metadata_file(meta_path, data, sp.fs_options)
    return count


__all__ = ["SavepointModifier", "dependencies", "relocate", "UnknownOperatorError", "METADATA_FILE"]
