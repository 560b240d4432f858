"""SQL on the embedded engine: the views ``fstate sql`` registers (``views.plan_views``), queried in
Spark SQL and run by DuckDB in this process over the embedded engine's Arrow tables; no JVM.

A query is parsed as Spark SQL and written in DuckDB's dialect by sqlglot, with the few rewrites
Spark's meaning needs (:mod:`.sql_dialect`). Only the views the query names are read; a view named
once with ``key = …`` / ``key IN (…)`` among the conditions of its ``WHERE`` reads only the key groups
of those keys, as the Spark data source's push-down does (the condition is still applied).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any, Iterator

import duckdb
import pyarrow

from ..savepoint.errors import SqlError
from ..savepoint.loader import Savepoint
from . import engine
from . import sql_dialect
from . import tables
from .options import savepoint_source
from .planning import build_table
from .views import METADATA_ARROW_SCHEMA, describe_view, metadata_table, open_views

#: DuckDB errors that are the query's own mistake (the rest are bugs, or fstate's errors passed on)
_QUERY_MISTAKES = (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException,
                   duckdb.ConversionException, duckdb.InvalidInputException, duckdb.OutOfRangeException,
                   duckdb.NotImplementedException, duckdb.TypeMismatchException, duckdb.DataError)


@dataclasses.dataclass
class View:
    """One view: a state table of an open savepoint, planned when a query first names it."""

    name: str
    holds: str
    savepoint: Savepoint
    uid: str | None
    table: str
    state: str | None
    plan: str | None
    _planned: dict = dataclasses.field(default_factory=dict, repr=False)

    def planned(self, keys: tuple | None = None) -> tables.Table | None:
        """The view's table (None for ``savepoint_metadata``), reading only ``keys`` when given."""
        if self.table == "metadata":
            return None
        if keys not in self._planned:
            source = savepoint_source(self.savepoint, self.uid, table=self.table, state=self.state, plan=self.plan)
            self._planned[keys] = build_table(source, list(keys) if keys is not None else None)
        return self._planned[keys]

    def schema(self) -> pyarrow.Schema:
        if self.table == "metadata":
            return METADATA_ARROW_SCHEMA
        return engine.table_schema(next(iter(self._planned.values())) if self._planned else self.planned())

    def arrow(self, keys: tuple | None = None) -> pyarrow.Table:
        table = self.planned(keys)
        if table is None:
            return metadata_table(self.savepoint)
        return engine.read_table(table)


class Catalog:
    """The views of one or more savepoints, by name (case-insensitive, as Spark's temp views)."""

    def __init__(self) -> None:
        self.views: dict[str, View] = {}

    def add(self, path: str, prefix: str | None = None, *, allow_external_paths: bool = False,
            checkpoint_base_dir: str | None = None, fs_options=None, plan: str | None = None) -> dict[str, str]:
        """The views of the savepoint at ``path`` (named as ``register_views`` names them); returns
        {view name: what it holds}."""
        sp, views = open_views(path, prefix, allow_external_paths=allow_external_paths,
                               checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options, plan=plan)
        added = {}
        for v in views:
            view = View(v["view"], describe_view(v), sp, v["uid"], v["table"], v["state"], plan)
            self.views[view.name.lower()] = view
            added[view.name] = view.holds
        return added

    @property
    def registered(self) -> dict[str, str]:
        return {view.name: view.holds for view in self.views.values()}


@dataclasses.dataclass
class Result:
    """A query's result: its columns, and its rows as Arrow record batches (computed as they are read)."""

    relation: Any
    views: dict[str, str]
    connection: Any = None

    @property
    def columns(self) -> list[str]:
        return list(self.relation.columns)

    def reader(self, limit: int | None = None) -> pyarrow.RecordBatchReader:
        """The rows (the first ``limit``) as a stream of record batches."""
        relation = self.relation.limit(limit) if limit is not None else self.relation
        # newer DuckDB releases call it to_arrow_reader (fetch_arrow_reader is deprecated there)
        to_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
        with duckdb_errors(self.views):
            return to_reader(engine.BATCH_ROWS)

    def batches(self, reader: pyarrow.RecordBatchReader) -> Iterator[pyarrow.RecordBatch]:
        with duckdb_errors(self.views):
            yield from reader

    def first_rows(self, limit: int) -> list[tuple]:
        """The first ``limit`` rows as Spark's ``collect()`` gives them."""
        return [row for batch in self.batches(self.reader(limit)) for row in engine.batch_rows(batch)]


class Query:
    """A Spark SQL query over a :class:`Catalog`, run by DuckDB in this process."""

    def __init__(self, catalog: Catalog, text: str):
        self.catalog = catalog
        self.parsed = sql_dialect.parse(text, catalog.registered)
        named = sql_dialect.table_names(self.parsed)
        self.views = [catalog.views[name] for name in sorted(set(named)) if name in catalog.views]
        pushed = sql_dialect.pushed_keys(self.parsed, {view.name.lower() for view in self.views})
        self.keys = {view.name: self._keys(view, pushed.get(view.name.lower())) for view in self.views}

    @staticmethod
    def _keys(view: View, values: list | None) -> tuple | None:
        """The keys to read of ``view``: ``values`` when its ``key`` column is of their kind (else all)."""
        if values is None or view.table not in ("keyed", "matches"):
            return None
        schema = view.schema()
        if "key" not in schema.names:
            return None
        key_type = schema.field("key").type
        if pyarrow.types.is_string(key_type) and all(isinstance(value, str) for value in values):
            return tuple(values)
        if pyarrow.types.is_integer(key_type) and all(type(value) is int for value in values):
            # a value the key type cannot hold is no key of the table: no key group holds it
            bound = 1 << (key_type.bit_width - 1)
            return tuple(value for value in values if -bound <= value < bound)
        return None

    def state_bytes(self) -> int:
        """Bytes of state the query reads (for the engine choice)."""
        planned = (view.planned(self.keys[view.name]) for view in self.views)
        return sum(engine.table_bytes(table) for table in planned if table is not None)

    def run(self) -> Result:
        connection = _query_connection()
        schemas = {view.name.lower(): view.schema() for view in self.views}
        duck_sql = sql_dialect.to_duckdb(self.parsed, schemas, self.catalog.registered)
        for view in self.views:
            connection.register(view.name, view.arrow(self.keys[view.name]))
        with duckdb_errors(self.catalog.registered):
            relation = connection.sql(duck_sql)
            if relation is None:
                raise SqlError("the statement gives no rows (give a query)", self.catalog.registered)
            relation = as_spark_types(relation)
        return Result(relation, self.catalog.registered, connection)


def connect():
    """A DuckDB connection in this process that runs Spark SQL written by :mod:`.sql_dialect` as Spark
    would: times in UTC, Spark's case mappings."""
    connection = duckdb.connect(":memory:")
    connection.execute("SET TimeZone = 'UTC'")
    for name, function in sql_dialect.CASE_MAPPINGS.values():
        connection.create_function(name, function, ["VARCHAR"], "VARCHAR")
    return connection


_SHARED: list = []  # the process's database of the queries (made by the first, under the lock)
_SHARED_LOCK = threading.Lock()


def _query_connection():
    """A connection of its own for one query (its views are its own: ``register`` makes temporary
    views), to one in-memory database of the process made by :func:`connect` (starting a database takes
    milliseconds and threads; a cursor, nothing). Queries change nothing in it; a session that sets
    options or creates views (writers' SqlSession) calls :func:`connect`."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(connect())
        return _SHARED[0].cursor()


def as_spark_types(relation):
    """Columns of a type Spark does not give for the same query as the type it gives: DuckDB's 128-bit
    integers (``sum`` of integers) as 64-bit, Spark's ``long``."""
    types = [str(column_type) for column_type in relation.types]
    if "HUGEINT" not in types and "UHUGEINT" not in types:
        return relation
    columns = []
    for name, column_type in zip(relation.columns, types):
        quoted = '"' + name.replace('"', '""') + '"'
        columns.append(f"CAST({quoted} AS BIGINT) AS {quoted}" if column_type in ("HUGEINT", "UHUGEINT") else quoted)
    return relation.project(", ".join(columns))


@contextlib.contextmanager
def duckdb_errors(views) -> Iterator[None]:
    """DuckDB's errors about a query as :class:`SqlError`: their first line and the views."""
    try:
        yield
    except _QUERY_MISTAKES as error:
        problem = _first_line(str(error))
        if isinstance(error, duckdb.CatalogException) and "Function with name" in problem:
            problem += " on the embedded engine (--engine spark has every Spark SQL function)"
        raise SqlError(problem, views) from None


def _first_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else "the query failed"
