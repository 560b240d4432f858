"""The embedded engine: state tables as Arrow record batches on this machine, no JVM.

Every consumer (the CLI's ``read``, ``diff``, the writers in ``engine_files``) gets a partition's data
through :func:`partition_batches`, the one place where decoded state becomes Arrow columns. Several
partitions are read on a process pool (``spawn``, so it works the same on every platform); one
partition, or a small table, is read in this process.

The batches have the schema and the values the Spark data source hands Spark for the same table
(``arrow_schema``), so both engines give the same tables and files.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import itertools
import threading
from typing import Callable, Iterator

import pyarrow

from ..savepoint import handles
from ..savepoint import pool
from ..savepoint import rocksdb
from . import arrow_schema
from . import tables

#: rows per record batch
BATCH_ROWS = 8192

#: called after each partition: (rows, bytes of state) read
Progress = Callable[[int, int], None]


def table_schema(table: tables.Table) -> pyarrow.Schema:
    """The Arrow schema of a table (the one Spark's data source gives its batches)."""
    return arrow_schema.arrow_schema(table.columns)


def partition_batches(table: tables.Table, partition: tables.Partition,
                      batch_rows: int = BATCH_ROWS) -> Iterator[pyarrow.RecordBatch]:
    """One partition of ``table`` as Arrow record batches of at most ``batch_rows`` rows: straight
    from the compiled columnar decoder when it takes the partition (no Python object per value),
    else built from the decoded rows. The partition is opened once either way."""
    pool.return_large_blocks()
    schema = table_schema(table)
    converters = [arrow_schema.converter(t) for _, t, _ in table.columns]

    def from_rows(rows: Iterator[tuple]) -> Iterator[pyarrow.RecordBatch]:
        return _row_batches(rows, schema, converters, batch_rows)

    with tables.open_partition(partition, table.key_filter) as decoder:
        yield from _as_schema(decoder.batches(schema.names, from_rows), schema, batch_rows)


def _row_batches(rows: Iterator[tuple], schema: pyarrow.Schema, converters: list,
                 batch_rows: int) -> Iterator[pyarrow.RecordBatch]:
    """Record batches of the schema built from row tuples (each value converted for Arrow)."""
    if any(converters):
        rows = (tuple(value if convert is None or value is None else convert(value)
                      for convert, value in zip(converters, row)) for row in rows)
    while True:
        # Decoding makes no reference cycles, but a batch holds ~10^4 fresh container objects the
        # cyclic collector would walk again and again: pause it while a batch is built (never across
        # the yield).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            batch = list(itertools.islice(rows, batch_rows))
            if not batch:
                return
            columns = list(zip(*batch))
            del batch
            record_batch = pyarrow.RecordBatch.from_arrays(
                [pyarrow.array(column, type=field.type) for column, field in zip(columns, schema)], schema=schema)
            del columns
        finally:
            if gc_was_enabled:
                gc.enable()
        yield record_batch


def _as_schema(batches: Iterator[pyarrow.RecordBatch], schema: pyarrow.Schema,
               batch_rows: int) -> Iterator[pyarrow.RecordBatch]:
    """A decoder's batches with the table's schema (the same types; the schema's field
    nullability), at most ``batch_rows`` rows each."""
    for batch in batches:
        if not batch.schema.equals(schema):
            if batch.schema.types != schema.types:
                raise RuntimeError(f"the decoder gave {batch.schema} for the table {schema}")
            batch = pyarrow.RecordBatch.from_arrays(batch.columns, schema=schema)
        if batch.num_rows <= batch_rows:
            yield batch
            continue
        for start in range(0, batch.num_rows, batch_rows):
            yield batch.slice(start, batch_rows)


def partition_bytes(partition: tables.Partition) -> int:
    """Bytes of state the partition reads (for progress and the engine choice): a RocksDB partition's
    share of its database's table files."""
    if isinstance(partition.handle, rocksdb.RocksDBSource):
        lo, hi = partition.key_groups or (partition.handle.start_key_group, partition.handle.end_key_group)
        return partition.handle.key_group_bytes(lo, hi)
    if partition.span is not None:
        return max(0, partition.span[1] - partition.span[0])
    if partition.source is not None and partition.source.length is not None:
        return partition.source.length
    if partition.source is not None and partition.source.data is not None:
        return len(partition.source.data)
    try:
        return int(handles.stream_size(partition.handle))
    except Exception:  # a handle without a recorded size: it counts for nothing
        return 0


def table_bytes(table: tables.Table) -> int:
    return sum(partition_bytes(partition) for partition in table.partitions)


def shippable(table: tables.Table) -> tables.Table:
    """The table without its partitions (each task gets its own)."""
    return dataclasses.replace(table, partitions=[])


def iter_batches(table: tables.Table, progress: Progress | None = None) -> Iterator[pyarrow.RecordBatch]:
    """All batches of a table, partition after partition, in this process (lazy: reading stops when
    the caller stops, e.g. after the first rows)."""
    for partition in table.partitions:
        rows = 0
        for batch in partition_batches(table, partition):
            rows += batch.num_rows
            yield batch
        if progress is not None:
            progress(rows, partition_bytes(partition))


def _partition_table(table: tables.Table, partition: tables.Partition) -> pyarrow.Table:
    return pyarrow.Table.from_batches(list(partition_batches(table, partition)), schema=table_schema(table))


def workers_for(table: tables.Table, workers: int | None = None) -> int:
    """How many processes read ``table`` (:func:`..savepoint.pool.pool_size` over its partitions)."""
    return pool.pool_size(len(table.partitions), table_bytes(table), workers)


def map_partitions(table: tables.Table, task: Callable, progress: Progress | None = None,
                   workers: int | None = None, arguments: list[tuple] | None = None) -> Iterator:
    """``task(shippable table, partition, *arguments[i])`` for every partition, in partition order; on
    :func:`workers_for` processes when it says more than one (``task`` a module-level function): this
    process and a pool of the others (it has already imported what the task needs; a spawned
    interpreter more would import it again). The pool takes partitions from the first, this process
    from the last, until they meet. ``task`` returns ``(result, rows)``; ``progress`` gets the rows and
    bytes of each partition done, in partition order."""
    count = workers_for(table, workers)
    light = shippable(table)
    arguments = arguments or [()] * len(table.partitions)
    if count == 1:
        for partition, extra in zip(table.partitions, arguments):
            result, rows = task(light, partition, *extra)
            if progress is not None:
                progress(rows, partition_bytes(partition))
            yield result
        return
    for partition, (value, rows) in zip(table.partitions, _shared_work(light, table.partitions, task, arguments,
                                                                       count - 1)):
        if progress is not None:
            progress(rows, partition_bytes(partition))
        yield value


def _shared_work(light: tables.Table, partitions: list[tables.Partition], task: Callable, arguments: list[tuple],
                 pooled: int) -> Iterator[tuple]:
    """Each partition's ``(result, rows)``, in partition order: ``pooled`` spawned workers take
    partitions from the front (one at a time each), this process from the back, until they meet; the
    pool's results are passed on as they come, between this process's partitions."""
    results: list = [None] * len(partitions)
    lock = threading.Lock()
    bounds = [0, len(partitions)]  # the pool's next partition; one past this process's next
    done = 0  # results passed on

    def submit_next(executor) -> None:
        with lock:  # claimed and its future in place at once (the callback runs outside: it may run at once)
            index = bounds[0]
            if index >= bounds[1]:
                return
            try:
                future = executor.submit(task, light, partitions[index], *arguments[index])
            except RuntimeError:  # the executor is shutting down after a failure here
                return
            results[index] = future
            bounds[0] += 1
        future.add_done_callback(lambda _: submit_next(executor))

    def ready(index: int) -> bool:
        result = results[index]
        return result is not None and (not isinstance(result, concurrent.futures.Future) or result.done())

    with pool.spawn_pool(pooled) as executor:
        try:
            for _ in range(pooled):
                submit_next(executor)
            while True:
                with lock:
                    if bounds[0] >= bounds[1]:
                        break
                    bounds[1] -= 1
                    index = bounds[1]
                results[index] = task(light, partitions[index], *arguments[index])
                while done < len(partitions) and ready(done):
                    yield _outcome(results[done])
                    results[done] = None
                    done += 1
            for index in range(done, len(partitions)):
                yield _outcome(results[index])
                results[index] = None
        except BaseException:
            with lock:
                bounds[0] = bounds[1]
            for result in results:
                if isinstance(result, concurrent.futures.Future):
                    result.cancel()
            raise


def _outcome(result) -> tuple:
    return result.result() if isinstance(result, concurrent.futures.Future) else result


def _read_task(table: tables.Table, partition: tables.Partition) -> tuple[pyarrow.Table, int]:
    result = _partition_table(table, partition)
    return result, result.num_rows


def read_table(table: tables.Table, progress: Progress | None = None, workers: int | None = None) -> pyarrow.Table:
    """The whole table as one Arrow table (partitions read in parallel when it is large)."""
    parts = list(map_partitions(table, _read_task, progress, workers))
    if not parts:
        return table_schema(table).empty_table()
    return pyarrow.concat_tables(parts)


# ---------------------------------------------------------------------------------------------
# choosing the engine, and rows as Spark's collect() gives them

ENGINES = ("auto", "embedded", "spark")
#: ``auto`` reads tables holding more state than this with Spark
SPARK_ABOVE_BYTES = 1 << 30


def choose_engine(engine_name: str, spark_asked: bool, state_bytes: int | Callable[[], int],
                  by_size: bool = True) -> str:
    """``embedded`` or ``spark``, for every command and the Python API: Spark when ``--engine spark``
    (``engine="spark"``), or (``auto``) when Spark was asked for (``--master``, ``--conf``, a remote
    ``--out``, a Spark DataFrame) or the state to read is above :data:`SPARK_ABOVE_BYTES` (``by_size``
    False: never for its size, for work whose memory does not grow with the state).
    ``state_bytes``: the bytes, or a function giving them, called only when the choice depends on it."""
    from ..savepoint.errors import InvalidArgumentError

    if engine_name not in ENGINES:
        raise InvalidArgumentError(f"--engine must be auto, embedded or spark, not '{engine_name}'")
    if engine_name != "auto":
        return engine_name
    if spark_asked:
        return "spark"
    if not by_size:
        return "embedded"
    size = state_bytes() if callable(state_bytes) else state_bytes
    return "spark" if size > SPARK_ABOVE_BYTES else "embedded"


class Row(tuple):
    """A struct value as Spark's ``collect()`` gives it (a tuple with field names and ``asDict``)."""

    __fields__: tuple = ()

    def __new__(cls, names, values):
        row = super().__new__(cls, values)
        row.__fields__ = tuple(names)
        return row

    def asDict(self, recursive: bool = False) -> dict:
        return {name: value for name, value in zip(self.__fields__, self)}


def python_value(value, arrow_type: pyarrow.DataType):
    """An Arrow value (``to_pylist``) as Spark's ``collect()`` gives it: structs as :class:`Row`, maps as
    dicts, UTC timestamps as naive datetimes in this machine's time zone."""
    if value is None:
        return None
    if pyarrow.types.is_struct(arrow_type):
        fields = [arrow_type.field(index) for index in range(arrow_type.num_fields)]
        return Row([field.name for field in fields], [python_value(value.get(field.name), field.type)
                                                       for field in fields])
    if pyarrow.types.is_map(arrow_type):
        return {python_value(key, arrow_type.key_type): python_value(item, arrow_type.item_type)
                for key, item in value}
    if pyarrow.types.is_list(arrow_type):
        return [python_value(item, arrow_type.value_type) for item in value]
    if pyarrow.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return value.astimezone().replace(tzinfo=None)
    return value


def batch_rows(batch: pyarrow.RecordBatch) -> list[tuple]:
    """A batch's rows as Spark's ``collect()`` gives them."""
    columns = [[python_value(value, field.type) for value in batch.column(index).to_pylist()]
               for index, field in enumerate(batch.schema)]
    return list(zip(*columns))


def first_rows(table: tables.Table, limit: int) -> list[tuple]:
    """The first ``limit`` rows (reading stops there)."""
    rows: list[tuple] = []
    for batch in iter_batches(table):
        rows.extend(batch_rows(batch.slice(0, limit - len(rows))))
        if len(rows) >= limit:
            break
    return rows
