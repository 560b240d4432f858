"""``spark.read.format("flink-savepoint")``: a Spark Python data source over the state tables.

The driver plans (reads `_metadata` and the proxies, builds picklable partitions); executors open
their own state files and decode. Options: ``path``, ``uid`` (uid or uid hash), ``table``
(``list``/``broadcast``/``keyed``/``timers``; default keyed when the operator has keyed state),
``state`` (comma-separated for keyed), ``flat``, ``flatten``, ``allowExternalPaths``,
``checkpointBaseDir`` (new location of a moved job checkpoint directory: RocksDB incremental
checkpoints refer to ``<dir>/<job id>/shared/`` by absolute paths), and file-system options for
remote paths: ``fs.<option>`` (``fs.endpoint``, ``fs.region``, ``fs.path_style``, ``fs.s3a.endpoint``,
...) or ``fsOptions`` (a JSON object); see savepoint/io.py.
Filters ``key = …`` and ``key IN (…)`` on keyed tables are pushed down to key groups.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools

from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, In, InputPartition
from pyspark.sql.types import StructField, StructType

from ..savepoint.errors import InvalidArgumentError, UnknownStateError
from ..savepoint.loader import Savepoint
from . import schema as S
from . import tables as TB

FORMAT = "flink-savepoint"


def _bool(v: str | None) -> bool:
    return str(v).lower() in ("1", "true", "yes") if v is not None else False


def build_table(options: dict, keys: list | None = None) -> TB.Table:
    # Spark hands options over case-insensitively (lower-cased keys): look them up that way
    options = {str(k).lower(): v for k, v in options.items()}
    path = options.get("path")
    uid = options.get("uid")
    if not path or not uid:
        raise InvalidArgumentError("options 'path' and 'uid' are required")
    sp = Savepoint.open(path, allow_external_paths=_bool(options.get("allowexternalpaths", "true")),
                        checkpoint_base_dir=options.get("checkpointbasedir") or None,
                        fs_options=fs_options_from(options))
    op = sp.operator(uid)
    table = options.get("table")
    state = options.get("state")
    if table is None:
        om = op.operator_meta
        info = om.state(state) if (om and state and "," not in state) else None
        if info is not None:
            table = "broadcast" if info.kind == "BROADCAST" else "list"
        elif op.has_keyed_state:
            table = "keyed"
        else:
            names = ", ".join(s.name for s in (om.states if om else [])) or "none"
            if state:
                raise UnknownStateError(f"operator {op.display_name} has no state '{state}' (states: {names})",
                                        sp.location.metadata_path)
            raise InvalidArgumentError(f"operator {op.display_name} has no keyed state: name one of its "
                                       f"operator states with --state ({names})")
    if table == "list":
        return TB.list_state_table(op, _required(state))
    if table == "broadcast":
        return TB.broadcast_state_table(op, _required(state))
    if table == "keyed":
        states = [s.strip() for s in state.split(",")] if state else None
        return TB.keyed_table(op, states, flat=_bool(options.get("flat")), flatten_key=_bool(options.get("flatten")),
                              keys=keys)
    if table == "timers":
        return TB.timers_table(op, flatten_key=_bool(options.get("flatten")))
    raise InvalidArgumentError(f"unknown table kind '{table}' (list, broadcast, keyed, timers)")


def fs_options_from(options: dict) -> dict:
    """File-system options among data source options: ``fsOptions`` (JSON) and ``fs.<name>``."""
    import json

    out = {}
    raw = options.get("fsoptions")
    if raw:
        try:
            data = json.loads(raw)
        except ValueError:
            raise InvalidArgumentError("option fsOptions must be a JSON object") from None
        if not isinstance(data, dict):
            raise InvalidArgumentError("option fsOptions must be a JSON object")
        out.update(data)
    out.update({k[3:]: v for k, v in options.items() if k.startswith("fs.")})
    return out


def _required(state: str | None) -> str:
    if not state:
        raise InvalidArgumentError("option 'state' is required for operator state")
    return state


def spark_schema(table: TB.Table) -> StructType:
    return StructType([StructField(n, S.spark_type(t), nullable) for n, t, nullable in table.columns])


class _Part(InputPartition):
    def __init__(self, part: TB.Partition):
        super().__init__(part)
        self.part = part


class SavepointDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return spark_schema(build_table(dict(self.options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SavepointReaderSource(dict(self.options))


class SavepointReaderSource(DataSourceReader):
    def __init__(self, options: dict):
        self.options = options
        self.keys: list | None = None
        self._table: TB.Table | None = None

    @property
    def table(self) -> TB.Table:
        if self._table is None:
            self._table = build_table(self.options, self.keys)
        return self._table

    def pushFilters(self, filters):
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("key",):
                self.keys = [f.value] if self.keys is None else [k for k in self.keys if k == f.value]
            elif isinstance(f, In) and f.attribute == ("key",):
                vals = list(f.value)
                self.keys = vals if self.keys is None else [k for k in self.keys if k in vals]
            # Spark re-checks every filter: pruning is an optimisation, never the only filter.
            yield f

    def partitions(self):
        table = self.table
        parts = [_Part(p) for p in table.partitions]
        # The reader is shipped to every task: keep the partitions out of it (each task gets its own).
        self._table = dataclasses.replace(table, partitions=[])
        return parts

    def read(self, partition: _Part):
        """Decoded rows as Arrow record batches (the fast way into Spark); plain tuples when a column
        type has no Arrow form."""
        table = self.table
        convs = [S.converter(t) for _, t, _ in table.columns]
        rows = TB.read_partition(partition.part, table.key_filter)
        if any(convs):
            rows = (tuple(v if c is None or v is None else c(v) for c, v in zip(convs, row)) for row in rows)
        arrow_schema = _arrow_schema(table)
        if arrow_schema is None:
            yield from rows
            return
        import pyarrow as pa

        while True:
            # Decoding makes no reference cycles, but a batch holds ~10^4 fresh container objects the
            # cyclic collector would walk again and again (half the time of a batch): pause it while
            # a batch is built (never across the yield).
            gc_was_enabled = gc.isenabled()
            gc.disable()
            try:
                batch = list(itertools.islice(rows, BATCH_ROWS))
                if not batch:
                    return
                columns = list(zip(*batch))
                del batch
                record_batch = pa.RecordBatch.from_arrays(
                    [pa.array(col, type=field.type) for col, field in zip(columns, arrow_schema)],
                    schema=arrow_schema)
                del columns
            finally:
                if gc_was_enabled:
                    gc.enable()
            yield record_batch


BATCH_ROWS = 8192


def _arrow_schema(table: TB.Table):
    try:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(spark_schema(table), timezone="UTC")
    except Exception:  # a type without an Arrow mapping: Spark converts the tuples itself
        return None


def register(spark) -> None:
    # Key push-down needs Python data source filter push-down (a runtime SQL option, off by default).
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SavepointDataSource)
