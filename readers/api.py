"""``fstate.open(path)``: a savepoint's state tables in Python, without Spark unless asked for.

    state = fstate.open("samples/keyed-hashmap-savepoint")
    state.views()                                  # {view name: what it holds}, as `fstate views`
    state.table("keyed").to_arrow()                # a view by name: pyarrow.Table
    state.keyed("keyed", keys=["k-1"]).to_pandas()  # as `fstate read --uid keyed`; only k-1's key group is read
    state.table("keyed").to_batches()              # pyarrow.RecordBatchReader, decoded as it is consumed
    state.table("keyed").to_polars(lazy=True)      # polars LazyFrame (polars installed)
    state.table("keyed").to_spark()                # Spark DataFrame (the flink-savepoint data source)
    state.sql("SELECT key, total FROM keyed WHERE total > 2990").to_pandas()   # Spark SQL, run by DuckDB

Tables have the names (the views of ``fstate sql``) and columns of ``fstate read``; every form is
made from the same Arrow batches (``forms``). Each conversion reads on the engine
:func:`.engine.choose_engine` picks, as the commands do: the embedded engine (this process and its
process pool, no JVM), or Spark for a Spark DataFrame, for ``engine="spark"``, or (``auto``) for
state above the size threshold. fstate's errors are raised as themselves on both engines.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from typing import Any, Iterable

import pyarrow

from ..savepoint.errors import InvalidArgumentError, spark_errors
from ..savepoint.summary import summarize
from . import forms
from . import tables
from .engine import choose_engine, table_bytes, table_schema
from .options import FORMAT, SourceOptions, savepoint_source
from .planning import build_table
from .views import (METADATA_ARROW_SCHEMA, METADATA_SCHEMA, describe_view, metadata_rows, metadata_table,
                    open_views)

#: table kinds whose rows have keys (``keys=`` reads only those keys' key groups)
KEYED_KINDS = ("keyed", "matches")


def open(path: str, *, engine: str = "auto", spark=None, allow_external_paths: bool = False,  # noqa: A001
         checkpoint_base_dir: str | None = None, fs_options=None, plan: str | None = None) -> "SavepointState":
    """The state tables of the savepoint or checkpoint at ``path`` (a directory, its ``_metadata``, a
    URI). ``engine``: ``auto`` (the default: embedded, Spark above the size threshold or for a Spark
    DataFrame), ``embedded`` or ``spark``; ``spark``: the session to use (else the active or a local
    one, started only when Spark is chosen); ``plan``: the SQL job's compiled plan (names SQL
    operators' fields)."""
    choose_engine(engine, False, 0)  # a bad engine name fails here
    return SavepointState(path, engine=engine, spark=spark, allow_external_paths=allow_external_paths,
                          checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options, plan=plan)


class SavepointState:
    """A savepoint opened for reading its state tables (see :func:`open`); ``_metadata`` is read here,
    state only when a table is converted."""

    def __init__(self, path: str, *, engine: str = "auto", spark=None, allow_external_paths: bool = False,
                 checkpoint_base_dir: str | None = None, fs_options=None, plan: str | None = None):
        self.engine = engine
        self.plan = plan
        self._spark = spark
        self.savepoint, views = open_views(path, allow_external_paths=allow_external_paths,
                                           checkpoint_base_dir=checkpoint_base_dir, fs_options=fs_options, plan=plan)
        self.path = self.savepoint.path
        self._views = {view["view"].lower(): view for view in views}

    # -- metadata ------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """What ``fstate info --json`` prints."""
        return summarize(self.savepoint)

    def views(self) -> dict[str, str]:
        """{view name: what it holds}: the tables :meth:`table` and :meth:`sql` know, as ``fstate views``."""
        return {view["view"]: describe_view(view) for view in self._views.values()}

    @property
    def spark(self):
        """The Spark session (the one given, else the active or a local one); started on first use."""
        if self._spark is None:
            from .session import get_spark

            self._spark = get_spark()
        else:
            from .datasource import register

            register(self._spark)
        return self._spark

    # -- tables --------------------------------------------------------------------------------
    def table(self, view: str, *, keys: Iterable | None = None) -> "StateTable":
        """A view by name (case-insensitive; see :meth:`views`); ``keys``: read only these keys (keyed
        tables; their key groups only, as ``key IN (...)`` does)."""
        found = self._views.get(view.lower())
        if found is None:
            raise InvalidArgumentError(f"no view '{view}' in {self.path} (views: {', '.join(sorted(self.views()))})")
        if found["table"] == "metadata":
            if keys is not None:
                raise InvalidArgumentError(f"keys= filters keyed tables, not {found['view']}")
            return MetadataTable(self, found["view"])
        return self._state_table(found["view"], savepoint_source(self.savepoint, found["uid"], table=found["table"],
                                                                 state=found["state"], plan=self.plan), keys)

    __getitem__ = table

    def read(self, uid: str, *, table: str | None = None, state: str | list[str] | None = None, flat: bool = False,
             flatten: bool | None = None, ttl_timestamps: bool = False, keys: Iterable | None = None) -> "StateTable":
        """The table ``fstate read PATH --uid UID`` reads, with the same options (``table``: list,
        broadcast, keyed, timers or matches; default as ``read`` picks it)."""
        if isinstance(state, (list, tuple)):
            state = ",".join(state)
        source = savepoint_source(self.savepoint, uid, table=table, state=state or None, flat=flat, flatten=flatten,
                                  ttl_timestamps=ttl_timestamps, plan=self.plan)
        return self._state_table(None, source, keys)

    def keyed(self, uid: str, states: str | list[str] | None = None, *, flat: bool = False,
              flatten: bool | None = None, ttl_timestamps: bool = False, keys: Iterable | None = None) -> "StateTable":
        """An operator's keyed table: key + one column per keyed state (``states`` narrows them)."""
        return self.read(uid, table="keyed", state=states, flat=flat, flatten=flatten, ttl_timestamps=ttl_timestamps,
                         keys=keys)

    def list_state(self, uid: str, state: str) -> "StateTable":
        """Operator list (or union) state: subtask, index, value."""
        return self.read(uid, table="list", state=state)

    def broadcast_state(self, uid: str, state: str) -> "StateTable":
        """Broadcast state: key, value."""
        return self.read(uid, table="broadcast", state=state)

    def timers(self, uid: str, *, flatten: bool | None = None) -> "StateTable":
        return self.read(uid, table="timers", flatten=flatten)

    def _state_table(self, name: str | None, source: SourceOptions, keys: Iterable | None) -> "StateTable":
        table = StateTable(self, name, source, tuple(keys) if keys is not None else None)
        table.planned  # plans now: a bad uid, state or option fails here
        return table

    # -- SQL -------------------------------------------------------------------------------------
    def sql(self, query: str) -> "QueryTable":
        """A Spark SQL query over the views (as ``fstate sql``), run when its result is converted: by
        DuckDB in this process, or by Spark as the engine choice says."""
        return QueryTable(self, query)


class Convertible(ABC):
    """Rows that can be had in every form of :data:`.forms.FORMS`, read on the engine chosen for it."""

    state: SavepointState

    def to(self, form: str | forms.Form) -> Any:
        """The rows in ``form`` (a name of :data:`.forms.FORMS` or a :class:`.forms.Form`)."""
        chosen = forms.form(form)
        engine_name = choose_engine(self.state.engine, chosen.needs_spark, self.state_bytes)
        if chosen.needs_spark and engine_name != "spark":
            raise InvalidArgumentError(f"a {chosen.name} form needs Spark, and this savepoint was opened with "
                                       f"engine='{self.state.engine}' (never Spark)")
        return chosen.make(self.spark_rows() if engine_name == "spark" else self.embedded_rows())

    def to_arrow(self) -> pyarrow.Table:
        return self.to("arrow")

    def to_batches(self) -> pyarrow.RecordBatchReader:
        """The rows as a stream of record batches, decoded as they are read (embedded engine)."""
        return self.to("batches")

    def to_pandas(self):
        return self.to("pandas")

    def to_polars(self, *, lazy: bool = False):
        """A polars DataFrame, or (``lazy``) a LazyFrame reading the batches when it is collected."""
        return self.to("polars-lazy" if lazy else "polars")

    def to_spark(self):
        """A Spark DataFrame (Spark's engine, whatever the size)."""
        return self.to("spark")

    @property
    def engine(self) -> str:
        """The engine ``to_arrow`` and the other non-Spark forms read on: ``embedded`` or ``spark``."""
        return choose_engine(self.state.engine, False, self.state_bytes)

    @abstractmethod
    def state_bytes(self) -> int:
        """Bytes of state the rows are read from (for the engine choice)."""

    @abstractmethod
    def embedded_rows(self) -> forms.Rows:
        """The rows on the embedded engine."""

    @abstractmethod
    def spark_rows(self) -> forms.SparkRows:
        """The rows as a Spark DataFrame."""


@dataclasses.dataclass(eq=False)
class StateTable(Convertible):
    """One state table, read when it is converted (:meth:`to_arrow`, :meth:`to_pandas`, ...)."""

    state: SavepointState
    view: str | None
    source: SourceOptions
    keys: tuple | None = None

    @functools.cached_property
    def planned(self) -> tables.Table:
        """The table planned on this machine (columns, partitions; nothing decoded)."""
        planned = build_table(self.source, list(self.keys) if self.keys is not None else None)
        if self.keys is not None and planned.kind not in KEYED_KINDS:
            raise InvalidArgumentError(f"keys= filters keyed tables, not the {planned.kind} table {planned.name}")
        return planned

    @property
    def name(self) -> str:
        return self.view or self.planned.name

    @property
    def schema(self) -> pyarrow.Schema:
        return table_schema(self.planned)

    @property
    def columns(self) -> list[str]:
        return self.planned.column_names

    def state_bytes(self) -> int:
        return table_bytes(self.planned)

    def embedded_rows(self) -> forms.Rows:
        return forms.EmbeddedRows(self.planned)

    def spark_rows(self) -> forms.SparkRows:
        options = dataclasses.replace(self.source, table=self.planned.kind).spark_options()
        with spark_errors():
            frame = self.state.spark.read.format(FORMAT).options(**options).load()
        if self.keys is not None:
            # Spark keeps these keys' rows (the data source reads only their key groups where Spark's
            # push-down is safe: datasource.key_push_down_is_safe)
            if not self._scalar_key():
                raise InvalidArgumentError(f"keys= on Spark needs a scalar 'key' column; {self.name} has "
                                           f"{', '.join(self.columns)} (the embedded engine takes them)")
            frame = frame.where(frame["key"].isin(list(self.keys)))
        return forms.SparkRows(frame, self.schema)

    def _scalar_key(self) -> bool:
        schema = self.schema
        return "key" in schema.names and not pyarrow.types.is_nested(schema.field("key").type)


@dataclasses.dataclass(eq=False)
class MetadataTable(Convertible):
    """The ``savepoint_metadata`` view: one row per operator state."""

    state: SavepointState
    name: str

    @property
    def schema(self) -> pyarrow.Schema:
        return METADATA_ARROW_SCHEMA

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    def state_bytes(self) -> int:
        return 0

    def embedded_rows(self) -> forms.Rows:
        return forms.ArrowRows(metadata_table(self.state.savepoint))

    def spark_rows(self) -> forms.SparkRows:
        frame = self.state.spark.createDataFrame(metadata_rows(self.state.savepoint), METADATA_SCHEMA)
        return forms.SparkRows(frame, self.schema)


@dataclasses.dataclass(eq=False)
class QueryTable(Convertible):
    """A Spark SQL query's result over one savepoint's views (:meth:`SavepointState.sql`)."""

    state: SavepointState
    text: str

    @functools.cached_property
    def query(self):
        """The query parsed for the embedded engine (``engine_sql.Query``): a mistake fails here."""
        from .engine_sql import Catalog, Query

        catalog = Catalog()
        savepoint = self.state.savepoint
        catalog.add(savepoint.path, allow_external_paths=savepoint.allow_external_paths,
                    checkpoint_base_dir=savepoint.checkpoint_base_dir, fs_options=savepoint.fs_options,
                    plan=self.state.plan)
        return Query(catalog, self.text)

    def state_bytes(self) -> int:
        return self.query.state_bytes()

    def embedded_rows(self) -> forms.Rows:
        result = self.query.run()

        def open_reader() -> pyarrow.RecordBatchReader:
            reader = result.reader()
            return pyarrow.RecordBatchReader.from_batches(reader.schema, result.batches(reader))

        return forms.StreamRows(open_reader)

    def spark_rows(self) -> forms.SparkRows:
        from .views import register_views, spark_sql_errors

        savepoint = self.state.savepoint
        spark = self.state.spark
        registered = register_views(spark, savepoint.path, allow_external_paths=savepoint.allow_external_paths,
                                    checkpoint_base_dir=savepoint.checkpoint_base_dir,
                                    fs_options=savepoint.fs_options, plan=self.state.plan)
        with spark_sql_errors(registered), spark_errors():
            return forms.SparkRows(spark.sql(self.text))
