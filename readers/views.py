"""Savepoint state as a database: temp views for Spark SQL, and diffs between two savepoints.

View names (non-identifier characters become ``_``; ``prefix`` is prepended as ``<prefix>_``):

* ``<uid>``            the keyed table of an operator (key, [window_start, window_end], one column
                       per keyed state); if the states use different namespaces, one view per
                       state instead: ``<uid>__<state>``
* ``<uid>__<state>``   operator list / union state (subtask, index, value) and broadcast state
                       (key, value)
* ``<uid>__timers``    timers (key, timestamp, kind, service)
* ``<uid>__matches``   a CEP operator's pending partial matches (key, state_name, version,
                       start_timestamp, events)
* ``savepoint_metadata``  one row per state: operator uid, name, uid hash, parallelism, max
                       parallelism, state name, backend, kind, type (like Flink's savepoint_metadata)

Operators without a recorded uid (metadata V3/V4) are named ``op_<uid hash>``. An SQL operator
without uid is named after its exec node, ``<kind>_<node id>`` (``group_aggregate_4``): from its
compiled plan (``plan=``, ``--plan``), or without a plan from its name in the metadata
(``GroupAggregate[4]``, metadata V5 and later).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import pyarrow

from ..savepoint.errors import FStateError, SqlError, spark_errors
from ..savepoint.loader import Savepoint
from ..savepoint.sql_binding import load_binding
from ..savepoint.sql_plan import PlanBinding, sql_operator
from ..savepoint.summary import summarize
from . import cep
from . import register
from .options import FORMAT, savepoint_source_options

_NON_IDENT = re.compile(r"[^A-Za-z0-9_]")


def view_name(text: str) -> str:
    name = _NON_IDENT.sub("_", text)
    return name if name and not name[0].isdigit() else "_" + name


def _operator_view_name(op, plan: PlanBinding | None) -> str:
    if op.uid:
        return view_name(op.uid)
    described = plan.operator(op) if plan is not None else None
    if described is None:
        described = sql_operator(op.name)  # the kind and node id in the name, e.g. GroupAggregate[4]
    if described is not None and described.node_id is not None:
        return view_name(f"{described.kind}_{described.node_id}")
    return f"op_{op.uid_hash}"


def plan_views(sp: Savepoint, prefix: str | None = None, plan: PlanBinding | None = None) -> list[dict[str, Any]]:
    """Which views a savepoint gives (name, operator, table kind, state) without Spark; ``plan``: the
    job's compiled plan bound to ``sp`` (names SQL operators without uid)."""
    from . import tables

    pre = f"{view_name(prefix)}_" if prefix else ""
    views = []
    for op in sp.operators:
        base = _operator_view_name(op, plan)
        ident = op.uid_hash
        om = op.operator_meta
        for s in (om.states if om else []):
            kind = "broadcast" if s.kind == "BROADCAST" else "list"
            views.append({"view": f"{pre}{base}__{view_name(s.name)}", "uid": ident, "table": kind, "state": s.name})
        if op.has_keyed_state:
            km = op.keyed_meta
            if km is None:
                continue
            try:
                tables.keyed_table(op)
                views.append({"view": f"{pre}{base}", "uid": ident, "table": "keyed", "state": None})
            except FStateError:
                for _, s in km.value_states:
                    views.append({"view": f"{pre}{base}__{view_name(s.name)}", "uid": ident, "table": "keyed",
                                  "state": s.name})
            if km.timer_states:
                views.append({"view": f"{pre}{base}__timers", "uid": ident, "table": "timers", "state": None})
            if cep.is_cep_operator(op):
                views.append({"view": f"{pre}{base}__matches", "uid": ident, "table": "matches", "state": None})
    views.append({"view": f"{pre}savepoint_metadata", "uid": None, "table": "metadata", "state": None})
    return views


def metadata_rows(sp: Savepoint) -> list[tuple]:
    rows = []
    for o in summarize(sp)["operators"]:
        for s in o["states"] or [{"name": None, "backend": None, "kind": None, "type": None}]:
            rows.append((o["uid"], o["name"], o["uid_hash"], o["parallelism"], o["max_parallelism"], s["name"],
                         s["backend"], s["kind"], s["type"]))
    return rows


#: the columns of the ``savepoint_metadata`` view (name, SQL type), on both engines
METADATA_COLUMNS = (("operator_uid", "string"), ("operator_name", "string"), ("uid_hash", "string"),
                    ("parallelism", "int"), ("max_parallelism", "int"), ("state_name", "string"),
                    ("backend", "string"), ("kind", "string"), ("type", "string"))
METADATA_SCHEMA = ", ".join(f"{name} {sql_type}" for name, sql_type in METADATA_COLUMNS)
#: the same columns as Arrow (the embedded engine's view, ``fstate.open``)
METADATA_ARROW_SCHEMA = pyarrow.schema([(name, {"string": pyarrow.string(), "int": pyarrow.int32()}[sql_type])
                                        for name, sql_type in METADATA_COLUMNS])


def metadata_table(sp: Savepoint) -> pyarrow.Table:
    """The ``savepoint_metadata`` view as an Arrow table."""
    names = METADATA_ARROW_SCHEMA.names
    return pyarrow.Table.from_pylist([dict(zip(names, row)) for row in metadata_rows(sp)], schema=METADATA_ARROW_SCHEMA)


def open_views(path: str, prefix: str | None = None, *, allow_external_paths: bool = False,
               checkpoint_base_dir: str | None = None, fs_options=None,
               plan: str | None = None) -> tuple[Savepoint, list[dict[str, Any]]]:
    """The savepoint at ``path`` and the views it gives (:func:`plan_views`); ``plan``: the SQL job's
    compiled plan (a file), checked against it. What both engines' SQL registers."""
    sp = Savepoint.open(path, allow_external_paths=allow_external_paths, checkpoint_base_dir=checkpoint_base_dir,
                        fs_options=fs_options)
    binding = load_binding(plan, sp) if plan else None
    return sp, plan_views(sp, prefix, binding)


def describe_view(view: dict[str, Any]) -> str:
    """What a view of :func:`plan_views` holds, in words (``fstate sql --views``)."""
    if view["table"] == "metadata":
        return "operators and states of the savepoint"
    return f"{view['table']} state" + (f" '{view['state']}'" if view["state"] else "") + f" of {view['uid']}"


def register_views(spark, path: str, prefix: str | None = None, *, allow_external_paths: bool = False,
                   checkpoint_base_dir: str | None = None, fs_options=None, plan: str | None = None) -> dict[str, str]:
    """Register every state table of the savepoint at ``path`` as a temp view; returns
    {view name: what it holds}. ``plan``: the SQL job's compiled plan (a file), checked against it.
    (``readers.engine_sql``: the same views without Spark.)"""
    register(spark)
    sp, views = open_views(path, prefix, allow_external_paths=allow_external_paths,
                           checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options, plan=plan)
    out = {}
    for v in views:
        if v["table"] == "metadata":
            spark.createDataFrame(metadata_rows(sp), METADATA_SCHEMA).createOrReplaceTempView(v["view"])
        else:
            _load(spark, sp, v["uid"], v["table"], v["state"], plan).createOrReplaceTempView(v["view"])
        out[v["view"]] = describe_view(v)
    return out


#: SQLSTATE classes of a mistake in the query itself (Spark's error conditions): syntax or an unknown
#: name (42), a value the query cannot compute (22: a bad cast, division by zero under ANSI), a
#: construct Spark does not support (0A), a subquery giving more than one row (21)
QUERY_MISTAKES = ("42", "22", "0A", "21")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\.?")


@contextmanager
def spark_sql_errors(views: Iterable[str]) -> Iterator[None]:
    """Spark's errors about a query as :class:`SqlError` (one line, with the views it could use); around
    ``spark.sql`` and what runs the query. Errors of fstate's own inside a task pass through."""
    from pyspark.errors.exceptions.captured import CapturedException

    try:
        yield
    except CapturedException as error:
        if "fstate.savepoint.errors." in str(error) or (error.getSqlState() or "")[:2] not in QUERY_MISTAKES:
            raise
        first = (error.getMessage() or str(error)).strip().splitlines()[0]
        raise SqlError(_SQLSTATE.sub("", first).rstrip(";").strip(), views) from None


# ---------------------------------------------------------------------------------------------
# diff


def diff(spark, old_path: str, new_path: str, uid: str | None = None, examples: int = 3, *,
         allow_external_paths: bool = False, checkpoint_base_dir: str | None = None,
         fs_options=None) -> list[dict[str, Any]]:
    """Per operator and state: rows added, removed and changed from OLD to NEW, with example keys, on
    Spark. ``checkpoint_base_dir``: new place of the job checkpoint directory both were taken in, if it
    moved. (``readers.engine_diff.diff``: the same without Spark.)"""
    register(spark)
    with spark_errors():
        return compare_savepoints(SparkComparer(spark), old_path, new_path, uid, examples,
                                  allow_external_paths=allow_external_paths, checkpoint_base_dir=checkpoint_base_dir,
                                  fs_options=fs_options)


def compare_savepoints(comparer, old_path: str, new_path: str, uid: str | None = None, examples: int = 3, *,
                       allow_external_paths: bool = False, checkpoint_base_dir: str | None = None,
                       fs_options=None) -> list[dict[str, Any]]:
    """The diff of two savepoints, with ``comparer`` (:class:`SparkComparer` or the embedded engine's)
    loading and comparing each pair of tables."""
    old_sp = Savepoint.open(old_path, allow_external_paths=allow_external_paths,
                            checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options)
    new_sp = Savepoint.open(new_path, allow_external_paths=allow_external_paths,
                            checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options)
    old_views = {(v["uid"], v["table"], v["state"]): v for v in plan_views(old_sp) if v["table"] != "metadata"}
    new_views = {(v["uid"], v["table"], v["state"]): v for v in plan_views(new_sp) if v["table"] != "metadata"}
    if uid is not None:
        wanted = {old_sp.operator(uid).uid_hash} if _has(old_sp, uid) else set()
        wanted |= {new_sp.operator(uid).uid_hash} if _has(new_sp, uid) else set()
        if not wanted:
            raise FStateError(f"no operator '{uid}' in either savepoint")
        old_views = {k: v for k, v in old_views.items() if k[0] in wanted}
        new_views = {k: v for k, v in new_views.items() if k[0] in wanted}
    names = {v["uid"]: _display(old_sp, v["uid"]) for v in old_views.values()}
    names.update({v["uid"]: _display(new_sp, v["uid"]) for v in new_views.values()})
    results = []
    for key in sorted(set(old_views) | set(new_views), key=lambda k: (names[k[0]], k[1], k[2] or "")):
        op_id, table, state = key
        label = state if state else ("(all keyed states)" if table == "keyed" else table)
        row = {"operator": names[op_id], "table": table, "state": label}
        if key not in old_views or key not in new_views:
            only_new = key not in old_views
            n = comparer.count(comparer.load(new_sp if only_new else old_sp, op_id, table, state))
            row.update(added=n if only_new else 0, removed=0 if only_new else n, changed=0,
                       note="only in NEW" if only_new else "only in OLD", examples=[])
            results.append(row)
            continue
        a = comparer.load(old_sp, op_id, table, state)
        b = comparer.load(new_sp, op_id, table, state)
        a_columns, b_columns = comparer.columns(a), comparer.columns(b)
        ids = _identity_columns(table, a_columns, _keyed_state_names(old_sp, op_id))
        vals = [c for c in a_columns if c not in ids]
        if set(a_columns) != set(b_columns):
            row.update(added=None, removed=None, changed=None, note="columns differ: "
                       f"{', '.join(a_columns)} vs {', '.join(b_columns)}", examples=[])
            results.append(row)
            continue
        if table in ("list", "timers"):
            # list state and timers: compare multisets (which subtask holds an element does not matter)
            added, removed, ex = comparer.multisets(a, b, ["value"] if table == "list" else a_columns, examples)
            row.update(added=added, removed=removed, changed=0, note="", examples=ex)
            results.append(row)
            continue
        added, removed, changed, ex = comparer.by_identity(a, b, ids, vals, examples)
        row.update(added=added, removed=removed, changed=changed, note="", examples=ex)
        results.append(row)
    return results


class SparkComparer:
    """Tables as DataFrames; comparisons as Spark joins of the rows' ``to_json``."""

    def __init__(self, spark):
        self.spark = spark

    def load(self, sp: Savepoint, uid: str, table: str, state: str | None):
        return _load(self.spark, sp, uid, table, state)

    @staticmethod
    def count(frame) -> int:
        return frame.count()

    @staticmethod
    def columns(frame) -> list[str]:
        return frame.columns

    @staticmethod
    def multisets(a, b, cols: list[str], examples: int):
        from pyspark.sql import functions as spark_functions

        av = a.select(spark_functions.to_json(spark_functions.struct(*cols)).alias("v")).groupBy("v").count()
        bv = b.select(spark_functions.to_json(spark_functions.struct(*cols)).alias("v")).groupBy("v").count()
        j = av.join(bv, "v", "full_outer").select("v", spark_functions.coalesce(av["count"], spark_functions.lit(0)).alias("a"),
                                                   spark_functions.coalesce(bv["count"], spark_functions.lit(0)).alias("b"))
        added = j.where("b > a").select(spark_functions.sum(spark_functions.col("b") - spark_functions.col("a"))).first()[0] or 0
        removed = j.where("a > b").select(spark_functions.sum(spark_functions.col("a") - spark_functions.col("b"))).first()[0] or 0
        ex = [r["v"] for r in j.where("a != b").limit(examples).collect()]
        return added, removed, ex

    @staticmethod
    def by_identity(a, b, ids: list[str], vals: list[str], examples: int):
        from pyspark.sql import functions as spark_functions

        sa = a.select(*ids, spark_functions.to_json(spark_functions.struct(*_canonical(a, vals))).alias("__old"))
        sb = b.select(*ids, spark_functions.to_json(spark_functions.struct(*_canonical(b, vals))).alias("__new"))
        j = sa.join(sb, ids, "full_outer")
        added = j.where("__old IS NULL")
        removed = j.where("__new IS NULL")
        changed = j.where("__old IS NOT NULL AND __new IS NOT NULL AND __old != __new")
        ex = [{"key": _plain(r[ids[0]]), "old": r["__old"], "new": r["__new"]} for r in
              changed.limit(examples).collect()]
        ex += [{"key": _plain(r[ids[0]]), "new": r["__new"]} for r in added.limit(max(0, examples - len(ex))).collect()]
        return added.count(), removed.count(), changed.count(), ex


def _canonical(df, cols: list[str]):
    """Columns in a form whose JSON does not depend on map entry order."""
    from pyspark.sql import functions as spark_functions
    from pyspark.sql.types import MapType

    types = {f.name: f.dataType for f in df.schema.fields}
    return [spark_functions.array_sort(spark_functions.map_entries(spark_functions.col(c))).alias(c) if isinstance(types[c], MapType) else spark_functions.col(c)
            for c in cols]


def _has(sp: Savepoint, uid: str) -> bool:
    try:
        sp.operator(uid)
        return True
    except FStateError:
        return False


def _display(sp: Savepoint, uid_hash: str) -> str:
    return sp.operator(uid_hash).display_name


def _keyed_state_names(sp: Savepoint, uid_hash: str) -> set[str]:
    operator = sp.operator(uid_hash)
    km = operator.keyed_meta if operator.has_keyed_state else None
    return {s.name for _, s in km.value_states} if km is not None else set()


def _identity_columns(table: str, columns: list[str], state_names: set[str] = frozenset()) -> list[str]:
    """The columns that identify a row: a broadcast state's key; a keyed table's key and namespace
    columns (whatever they are named: ``key_k``, ``window_end``, ``slice_end``...), i.e. all but its
    state columns; the key and namespace of the other tables."""
    if table == "broadcast":
        return ["key"]
    if table == "keyed" and state_names:
        return [c for c in columns if c not in state_names]
    ids = [c for c in columns if c == "key" or c.startswith("key_") or c in ("window_start", "window_end", "namespace")]
    return ids


def _load(spark, sp: Savepoint, uid: str, table: str, state: str | None, plan: str | None = None):
    options = savepoint_source_options(sp, uid, table=table, state=state, plan=plan)
    with spark_errors():
        return spark.read.format(FORMAT).options(**options).load()


def _plain(v):
    return v.asDict(recursive=True) if hasattr(v, "asDict") else v
