"""One corpus of Spark SQL queries over the views of every shipped sample, made from each view's columns:
its rows, aggregates, grouping, ``explode`` of lists and maps, struct field access, ``key IN (…)`` and
``key = …`` (push-down), window functions over the window columns, joins between state tables, the
metadata view. ``tests/readers/test_sql_engines.py`` runs it on both engines."""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow

from fstate.readers.engine_sql import Catalog, Query
from tests.support import sample_dirs, sample_snapshot


@dataclass(frozen=True)
class Case:
    sample: str
    kind: str
    query: str
    path: str
    plan: str | None

    @property
    def label(self) -> str:
        return f"{self.sample}:{self.kind}:{self.query}"


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _numeric(arrow_type: pyarrow.DataType) -> bool:
    return (pyarrow.types.is_integer(arrow_type) or pyarrow.types.is_floating(arrow_type)
            or pyarrow.types.is_decimal(arrow_type))


def _literal(value) -> str:
    return "'" + value.replace("'", "\\'") + "'" if isinstance(value, str) else str(value)


@functools.lru_cache(maxsize=None)
def sample_cases(sample: Path) -> tuple[Case, ...]:
    """The corpus over one sample (its views with the sample's plan, when it ships one); made once a
    process (the tests of test_sql_engines.py share it)."""
    path = str(sample_snapshot(sample))
    plan = str(sample / "plan.json") if (sample / "plan.json").exists() else None
    catalog = Catalog()
    catalog.add(path, plan=plan)
    queries: list[tuple[str, str]] = []
    keyed: list[tuple[str, pyarrow.DataType]] = []
    for name, view in sorted(catalog.views.items()):
        view_name = view.name
        schema = view.schema()
        fields = {field.name: field.type for field in schema}
        has_key = "key" in fields
        ident = "key, " if has_key else ""
        queries.append(("rows", f"SELECT * FROM {view_name}"))
        queries.append(("count", f"SELECT count(*) AS n FROM {view_name}"))
        numbers = [field for field in fields if _numeric(fields[field]) and field != "key"]
        if numbers:
            column = quoted(numbers[0])
            queries.append(("aggregate", f"SELECT count({column}) AS n, min({column}) AS lo, max({column}) AS hi, "
                                         f"sum({column}) AS total, avg({column}) AS mean FROM {view_name}"))
            # unnamed: the columns Spark names itself (count(1), max(total), sum(total) of x.total)
            queries.append(("names", f"SELECT count(*), max({column}), sum(x.{column}) FROM {view_name} x"))
            if has_key:
                queries.append(("group", f"SELECT key, count(*) AS n, sum({column}) AS total FROM {view_name} "
                                         "GROUP BY key"))
        for field, arrow_type in fields.items():
            if pyarrow.types.is_list(arrow_type):
                queries.append(("explode-list", f"SELECT {ident}explode({quoted(field)}) AS item FROM {view_name}"))
                queries.append(("names", f"SELECT explode({quoted(field)}) FROM {view_name}"))
                break
        for field, arrow_type in fields.items():
            if pyarrow.types.is_map(arrow_type):
                queries.append(("explode-map", f"SELECT {ident}explode({quoted(field)}) AS (entry_key, entry_value) "
                                               f"FROM {view_name}"))
                queries.append(("names", f"SELECT explode({quoted(field)}) FROM {view_name}"))
                queries.append(("lateral-view", f"SELECT {ident}entry_key, entry_value FROM {view_name} LATERAL VIEW "
                                                f"explode({quoted(field)}) entries AS entry_key, entry_value"))
                break
        for field, arrow_type in fields.items():
            if pyarrow.types.is_struct(arrow_type) and arrow_type.num_fields:
                inner = [arrow_type.field(index).name for index in range(arrow_type.num_fields)]
                columns = [f"{quoted(field)}.{quoted(inner[0])}"] + [
                    f"{quoted(field)}.{quoted(name)} AS {quoted(f'{field}_{name}')}" for name in inner[1:]]
                queries.append(("struct", f"SELECT {ident}{', '.join(columns)} FROM {view_name}"))
                break
        collections = [field for field, arrow_type in fields.items()
                       if pyarrow.types.is_list(arrow_type) or pyarrow.types.is_map(arrow_type)]
        strings = [field for field, arrow_type in fields.items() if pyarrow.types.is_string(arrow_type)]
        if collections or strings:
            # a few of Spark's functions (size of a null collection, string functions)
            calls = [f"size({quoted(field)}) AS {quoted('size_' + field)}" for field in collections[:2]]
            calls += [f"upper({quoted(field)}) AS {quoted('upper_' + field)}, length({quoted(field)}) AS "
                      f"{quoted('length_' + field)}, concat({quoted(field)}, '!') AS {quoted('concat_' + field)}"
                      for field in strings[:1]]
            queries.append(("functions", f"SELECT {', '.join(calls)} FROM {view_name}"))
        if has_key and (pyarrow.types.is_string(fields["key"]) or pyarrow.types.is_integer(fields["key"])):
            keyed.append((view_name, fields["key"]))
            keys = sorted({row[0] for row in _embedded(path, plan, f"SELECT key FROM {view_name}")[1]
                           if row[0] is not None})[:2]
            if keys:
                queries.append(("key-in", f"SELECT * FROM {view_name} WHERE key IN "
                                          f"({', '.join(_literal(key) for key in keys)})"))
                queries.append(("key-equals", f"SELECT {ident}count(*) OVER () AS n FROM {view_name} "
                                              f"WHERE key = {_literal(keys[-1])} AND 1 = 1"))
        if "window_start" in fields and has_key:
            queries.append(("window", f"SELECT key, window_start, window_end, rank() OVER (PARTITION BY key ORDER BY "
                                      f"window_start, window_end) AS n FROM {view_name}"))
    for (left, left_type), (right, right_type) in zip(keyed, keyed[1:]):
        if left_type == right_type:
            queries.append(("join", f"SELECT a.key, count(*) AS n FROM {left} a JOIN {right} b ON a.key = b.key "
                                    "GROUP BY a.key"))
    queries.append(("metadata", "SELECT operator_uid, state_name, kind, parallelism FROM savepoint_metadata"))
    return tuple(Case(sample.name, kind, query, path, plan) for kind, query in queries)


#: every kind of query the corpus holds (each sample has those its views allow)
KINDS = ("rows", "count", "aggregate", "names", "functions", "group", "explode-list", "explode-map", "lateral-view", "struct", "key-in",
         "key-equals", "window", "join", "metadata")


@functools.lru_cache(maxsize=None)
def _catalog(path: str, plan: str | None) -> Catalog:
    """One catalog a sample, its views' tables read once for each set of keys: the corpus tests the SQL
    (sqlglot's translation, DuckDB over the views), not the decoding, which the readers' tests test."""
    catalog = Catalog()
    catalog.add(path, plan=plan)
    for view in catalog.views.values():
        view.arrow = functools.lru_cache(maxsize=None)(view.arrow)
    return catalog


def _embedded(path: str, plan: str | None, query: str) -> tuple[list[str], list[tuple]]:
    result = Query(_catalog(path, plan), query).run()
    return result.columns, result.first_rows(1 << 30)


@functools.lru_cache(maxsize=None)
def embedded_result(case: Case) -> tuple[list[str], list[str]]:
    """(columns, canonical rows) of the case on the embedded engine (once a process)."""
    columns, rows = _embedded(case.path, case.plan, case.query)
    return columns, sorted(canonical_row(row) for row in rows)


def spark_results(spark, cases: list[Case]) -> list[tuple[list[str], list[str]]]:
    """(columns, canonical rows) of each case on Spark; a sample's views registered once for the cases
    that follow each other on it (a registration plans every view of the sample on Spark)."""
    from fstate.readers.views import register_views

    results, registered = [], None
    for case in cases:
        if registered != (case.path, case.plan):
            register_views(spark, case.path, plan=case.plan)
            registered = (case.path, case.plan)
        frame = spark.sql(case.query)
        results.append((frame.columns, sorted(canonical_row(row) for row in frame.collect())))
    return results


def canonical_row(row) -> str:
    return json.dumps([canonical(value) for value in row], sort_keys=True)


def canonical(value):
    """A value in a form both engines' results agree on: maps as sorted entries (their order is each
    engine's own), doubles to 12 digits (a sum's last bits depend on the order it adds in)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isnan(value) or math.isinf(value) else float(f"{value:.12g}")
    if hasattr(value, "asDict"):
        return {name: canonical(item) for name, item in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return sorted(([canonical(key), canonical(item)] for key, item in value.items()),
                      key=lambda entry: json.dumps(entry, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return str(value.normalize())
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time, datetime.timedelta)):
        return str(value)
    return repr(value)
