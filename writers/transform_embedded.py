"""``modify --transform`` on the embedded engine: DuckDB runs the transforms over the operator's keyed table.

The keyed table (one ``key`` column, one column per state: ``flatten=False``, as on Spark) and the
timers table are decoded by the embedded engine (a process pool over the partitions) into local Arrow
IPC files, which DuckDB scans as often as the query plan needs (a transform and the join that puts its
result back read the table twice), a batch at a time (:class:`IpcFiles`); its joins spill past
:data:`MEMORY_LIMIT`, so memory does not grow with the state's keys. Each transform is the query
the Spark path runs (rewrite.py ``PlanWriter.transformed``), step for step:

* the view ``state`` is ``SELECT key, STATE FROM`` the table as the transforms before left it;
  a function of Arrow batches (writers/transforms.py ``ArrowFunction``) gets those rows a batch at a
  time, its results written to an Arrow IPC file in the scratch directory that stands for its result;
* the transform's result (``key`` and ``STATE`` columns) replaces the state's column by a left join on
  the key (a key the result lacks, or gives a null, drops that state for the key);
* timers are gathered into one list per key and kind and joined on the key (full outer join).

The result streams (DuckDB's record batch reader) into the keyed writer (writers/keyed_stream.py).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pyarrow
import pyarrow.dataset
import pyarrow.ipc

from ..readers import engine, tables
from ..readers.options import savepoint_source
from ..readers.planning import build_table
from ..savepoint.errors import InvalidArgumentError
from .arrow_frames import ArrowFrame, SqlSession, relation_frame
from .keyed_stream import scratch_parent

#: what DuckDB may hold in memory while it runs the transforms (beyond it, its joins and aggregates spill
#: to its temporary directory): with the decoded tables streamed a batch at a time (:class:`IpcFiles`),
#: this bounds the memory of a transform however many keys the state has
MEMORY_LIMIT = "128MB"

#: the views a transform's query can read
VIEWS = {"state": "the state's key and value"}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _ipc_task(table: tables.Table, partition: tables.Partition, path: str) -> tuple[int, int]:
    rows = 0
    with pyarrow.ipc.new_file(path, engine.table_schema(table)) as out:
        for batch in engine.partition_batches(table, partition):
            out.write_batch(batch)
            rows += batch.num_rows
    return rows, rows


class IpcFiles:
    """Arrow IPC files DuckDB scans as one table, as often as a query reads it: each scan streams the
    files one batch at a time (the Arrow PyCapsule stream interface), so it holds one batch, however
    many rows the files have (a pyarrow dataset reads several files and batches ahead)."""

    def __init__(self, schema: pyarrow.Schema, paths: list[str]):
        self.schema, self.paths = schema, paths

    def _batches(self):
        for path in self.paths:
            with pyarrow.ipc.open_file(path) as reader:
                for index in range(reader.num_record_batches):
                    yield reader.get_batch(index)

    def __arrow_c_stream__(self, requested_schema=None):
        reader = pyarrow.RecordBatchReader.from_batches(self.schema, self._batches())
        return reader.__arrow_c_stream__(requested_schema)


class EmbeddedTransform:
    """The transforms of one operator, as a frame of its new keyed table (see the module doc)."""

    def __init__(self, base, uid_hash: str, scratch: str | None = None, operator: str | None = None):
        """``scratch``: where the decoded tables, a function's results and DuckDB's spill files go (a new
        savepoint's staging directory, :func:`.keyed_stream.scratch_parent`), else the system's temporary
        directory; ``operator``: its name in messages (by default the uid hash)."""
        self.base = base
        self.uid_hash = uid_hash
        self.operator = operator or uid_hash
        #: the view of the keyed table as the transforms so far left it, and how many results were made
        self._current = ""
        self._index = 0
        self.session = SqlSession()
        self.connection = self.session.connection
        self._dir = tempfile.TemporaryDirectory(prefix=".fstate-transform-", dir=scratch_parent(scratch))
        #: bytes of state the transforms read
        self.state_bytes = 0
        # the joins may spill to disk rather than grow past a bound; rows in any order (the writer sorts)
        escaped = os.path.join(self._dir.name, "duckdb").replace("'", "''")
        self.connection.execute(f"SET temp_directory = '{escaped}'")
        self.connection.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
        self.connection.execute("SET preserve_insertion_order = false")

    def close(self) -> None:
        self.connection.close()  # its buffers go back before the new savepoint is verified
        self._dir.cleanup()

    def _table(self, kind: str) -> str:
        """The operator's ``kind`` table (keyed, timers) as a DuckDB view of that name."""
        table = build_table(savepoint_source(self.base, self.uid_hash, table=kind, flatten=False))
        schema = engine.table_schema(table)
        paths = [os.path.join(self._dir.name, f"{kind}-{index:05d}.arrow") for index in range(len(table.partitions))]
        for _ in engine.map_partitions(table, _ipc_task, arguments=[(path,) for path in paths]):
            pass
        source = IpcFiles(schema, paths)
        self.state_bytes += engine.table_bytes(table)
        name = f"__fstate_{kind}"
        self.connection.register(name, source)
        return name

    def _schema(self, view: str) -> pyarrow.Schema:
        return relation_frame(self.connection.sql(f"SELECT * FROM {_quoted(view)}"), VIEWS, self.connection) \
            .arrow_schema

    def sql_result(self, sql: str, state: str) -> str:
        """The view of a SQL transform's result: ``sql`` over the view ``state`` (the current table's key and
        ``state`` columns)."""
        schema = self._schema(self._current)
        self._index += 1
        state_view = f"__fstate_state_{self._index}"
        self.connection.execute(f"CREATE VIEW {_quoted(state_view)} AS SELECT key, {_quoted(state)} "
                                f"FROM {_quoted(self._current)}")
        self.session.frames = {"state": ArrowFrame(pyarrow.schema([schema.field("key"), schema.field(state)]),
                                                   lambda columns: iter(()))}
        relation = self.session.relation(self.session.duckdb_sql(sql, rename={"state": state_view}))
        result = f"__fstate_result_{self._index}"
        relation.create_view(result)
        return result

    def function_result(self, function, state: str, what: str) -> str:
        """The view of a function's result (a writers.transforms.ArrowFunction): the current table's key and
        ``state`` streamed through it a batch at a time into an Arrow IPC file in the scratch directory,
        which the view scans."""
        from .transforms import spark_arrow_type

        self._index += 1
        rows = relation_frame(self.connection.sql(f"SELECT key, {_quoted(state)} FROM {_quoted(self._current)}"),
                              VIEWS, self.connection)
        key, column = rows.arrow_schema.field("key"), rows.arrow_schema.field(state)
        # typed as Spark hands the batches to mapInArrow: the same function sees the same batches on both engines
        input_schema = pyarrow.schema([pyarrow.field("key", spark_arrow_type(key.type), False),
                                       pyarrow.field(state, spark_arrow_type(column.type), column.nullable)])
        path = os.path.join(self._dir.name, f"result-{self._index:05d}.arrow")
        results = function.results(rows.open(), input_schema, state, what)
        first = next(results)
        with pyarrow.ipc.new_file(path, first.schema) as out:
            out.write_batch(first)
            for batch in results:
                out.write_batch(batch)
        result = f"__fstate_result_{self._index}"
        self.connection.register(result, IpcFiles(first.schema, [path]))
        return result

    def run(self, transforms: list, timer_kinds: list[str]) -> tuple[ArrowFrame, list[tuple[Any, Any]], dict[str, str]]:
        """The new keyed table after ``transforms`` (each with ``state`` and ``how``, a writers.transforms
        kind), with a timers column per kind of ``timer_kinds`` (event, processing); also each transformed
        state's old and new Spark types (for the type the state is written with) and the timers columns by
        kind."""
        from .column_types import column_type

        self._current = self._table("keyed")
        types: list[tuple[Any, Any]] = []
        for index, t in enumerate(transforms):
            state = t.state
            schema = self._schema(self._current)
            result = t.how.embedded_result(self, state, f"operator {self.operator}, state '{state}'")
            result_schema = self._schema(result)
            if {"key", state} - set(result_schema.names):
                raise InvalidArgumentError(f"transform of '{state}' must return columns key and {state}")
            types.append((column_type(schema.field(state).type),
                          column_type(result_schema.field(state).type, f"the transform's column '{state}'")))
            following = f"__fstate_table_{index}"
            self.connection.execute(
                f"CREATE VIEW {_quoted(following)} AS SELECT d.* EXCLUDE ({_quoted(state)}), r.{_quoted(state)} "
                f"FROM {_quoted(self._current)} d LEFT JOIN (SELECT key, {_quoted(state)} FROM {_quoted(result)}) r "
                "ON d.key = r.key")
            self._current = following
        current = self._current
        timer_columns = {kind: f"__fstate_{kind}_timers" for kind in timer_kinds}
        if timer_columns:
            timers = self._table("timers")
            lists = ", ".join(f"list(timestamp) FILTER (WHERE kind = '{kind}') AS {_quoted(column)}"
                              for kind, column in timer_columns.items())
            self.connection.execute(f"CREATE VIEW __fstate_timer_lists AS SELECT key, {lists} FROM {_quoted(timers)} "
                                    "GROUP BY key")
            columns = ", ".join(f"m.{_quoted(column)}" for column in timer_columns.values())
            self.connection.execute(
                f"CREATE VIEW __fstate_with_timers AS SELECT COALESCE(d.key, m.key) AS key, d.* EXCLUDE (key), "
                f"{columns} FROM {_quoted(current)} d FULL OUTER JOIN __fstate_timer_lists m ON d.key = m.key")
            current = "__fstate_with_timers"
        frame = relation_frame(self.connection.sql(f"SELECT * FROM {_quoted(current)}"), VIEWS, self.connection,
                               self.state_bytes)
        return frame, types, timer_columns
