"""``spark.read.format("flink-savepoint")``: a Spark Python data source over the state tables.

The driver plans (reads `_metadata` and the proxies, builds picklable partitions); executors open
their own state files and decode. The options (``path``, ``uid``, ``table``, ``state``, ``flat``,
``flatten``, ``allowExternalPaths``, ``checkpointBaseDir``, ``fsOptions``/``fs.<name>``, ``plan``, and Flink's
``savepoint`` connector names ``state.path``, ``operator.uid``, ``operator.uid.hash``,
``state.backend.type``) are described and checked in ``options.py``; an unknown one is an error.

Getting the data source on a SparkSession:

* ``fstate.readers.register(spark)`` - one line, any session; on a Spark whose push-down planning is
  kept to one scan (:func:`key_push_down_is_safe`: not Spark 4.0-4.3) it also switches on the session's
  Python data source filter push-down, so that ``key = …`` and ``key IN (…)`` on keyed tables read
  only the key groups holding those keys;
* fstate's own helpers (``get_spark``, ``SavepointReader``, ``register_views``, ``diff``, the CLI)
  call it on the sessions they create or are given;
* with fstate installed, Spark 4 finds the data source by itself (the top-level module
  ``pyspark_fstate``, Spark's convention for Python data source packages): on a session nobody
  registered it on, ``spark.read.format("flink-savepoint")`` works too, with Spark filtering the
  rows itself (no key push-down until ``register``).
"""

from __future__ import annotations

import dataclasses

from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, In, InputPartition
from pyspark.sql.types import StructField, StructType

from ..savepoint.errors import carried_to_driver
from . import schema as schema_types
from . import tables
from .options import FORMAT
from .planning import build_table

#: the runtime SQL option that lets Spark offer filters to a Python data source (off by default)
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def spark_schema(table: tables.Table) -> StructType:
    return StructType([StructField(n, schema_types.spark_type(t), nullable) for n, t, nullable in table.columns])


class _Part(InputPartition):
    def __init__(self, part: tables.Partition):
        super().__init__(part)
        self.part = part


class SavepointDataSource(DataSource):
    """The data source as Spark finds it by itself (``pyspark_fstate``): Spark filters the rows."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        with carried_to_driver():
            return spark_schema(build_table(dict(self.options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SavepointReaderSource(dict(self.options))


class KeyPushdownSavepointDataSource(SavepointDataSource):
    """The data source as :func:`register` installs it, with the session's filter push-down on: its
    reader takes ``key = …`` and ``key IN (…)`` (Spark refuses a reader taking filters while the
    push-down is off, hence two classes)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return KeyFilteringReaderSource(dict(self.options))


class SavepointReaderSource(DataSourceReader):
    def __init__(self, options: dict):
        self.options = options
        self.keys: list | None = None
        self._table: tables.Table | None = None

    @property
    def table(self) -> tables.Table:
        if self._table is None:
            self._table = build_table(self.options, self.keys)
        return self._table

    def partitions(self):
        with carried_to_driver():
            table = self.table
        parts = [_Part(p) for p in table.partitions]
        # The reader is shipped to every task: keep the partitions out of it (each task gets its own).
        self._table = dataclasses.replace(table, partitions=[])
        return parts

    def read(self, partition: _Part):
        """Decoded rows as Arrow record batches (the fast way into Spark), made by the embedded engine's
        ``partition_batches`` (the one place where rows become Arrow columns); plain tuples when a
        column type has no Arrow form in Spark. An fstate error reaches the driver noted
        (:func:`..savepoint.errors.carried_to_driver`)."""
        with carried_to_driver():
            table = self.table
            if _arrow_schema(table) is not None:
                from . import engine

                yield from engine.partition_batches(table, partition.part)
                return
            convs = [schema_types.converter(t) for _, t, _ in table.columns]
            rows = tables.read_partition(partition.part, table.key_filter)
            if any(convs):
                rows = (tuple(v if c is None or v is None else c(v) for c, v in zip(convs, row)) for row in rows)
            yield from rows


class KeyFilteringReaderSource(SavepointReaderSource):
    """Reads only the key groups holding the keys of ``key = …`` / ``key IN (…)`` filters."""

    def pushFilters(self, filters):
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("key",):
                self.keys = [f.value] if self.keys is None else [k for k in self.keys if k == f.value]
            elif isinstance(f, In) and f.attribute == ("key",):
                vals = list(f.value)
                self.keys = vals if self.keys is None else [k for k in self.keys if k in vals]
            # Spark re-checks every filter: pruning is an optimisation, never the only filter.
            yield f


def _arrow_schema(table: tables.Table):
    try:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(spark_schema(table), timezone="UTC")
    except Exception:  # a type without an Arrow mapping: Spark converts the tuples itself
        return None


#: the Spark class that, up to Spark 4.3 at least, keeps a Python data source's planned read (the reader
#: after ``pushFilters``, its partitions) for every scan of the relation, not for the one scan it was
#: planned for (``setReadInfo``)
_SHARED_READ_INFO = ("org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2", "setReadInfo")


def key_push_down_is_safe(spark) -> bool:
    """Whether this Spark keeps what a data source's filter push-down planned to the one scan the filters
    came from. Spark 4.0-4.3 keep it on the DataFrame's relation, which every scan of that DataFrame
    shares: with ``df.where("key = 'k-7'")`` and ``df`` in one query (a union, a self-join), both sides
    would read k-7's key groups only, a silent wrong result. On such a Spark (or when it cannot be told,
    as on Spark Connect) fstate offers Spark no filters to push, and Spark filters every row itself."""
    try:
        class_name, method = _SHARED_READ_INFO
        methods = spark._jvm.java.lang.Class.forName(class_name).getDeclaredMethods()
        return all(m.getName() != method for m in methods)
    except Exception:  # no JVM in this process (Spark Connect) or another layout: the safe side
        return False


def register(spark) -> None:
    """Make ``spark.read.format("flink-savepoint")`` available on ``spark`` (any SparkSession; calling
    it again is harmless). Where it is safe (:func:`key_push_down_is_safe`), with key push-down: this
    switches on the session's Python data source filter push-down
    (``spark.sql.python.filterPushdown.enabled``), which that reader needs."""
    if key_push_down_is_safe(spark):
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
        spark.dataSource.register(KeyPushdownSavepointDataSource)
    else:
        spark.dataSource.register(SavepointDataSource)
