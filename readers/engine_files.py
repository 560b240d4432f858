"""The embedded engine's output: a table as Parquet, CSV or JSON files in a directory, with the content
Spark's writers give for the same table (``cli.read.write_frame``): the same columns, types and rows;
CSV and JSON text in Spark's spellings (timestamps ``2024-01-01T10:00:00.000Z``, Java's doubles
``1.0E10``, base64 binaries, nested CSV values as Spark's ``to_json``, null JSON fields left out).

One file per partition (``part-NNNNN.<format>``), written by the process that decodes it; the files
go to a hidden sibling that becomes the directory only when complete (``savepoint.atomic``).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import itertools
import json
import math
import os
import socket
from typing import Any, Iterable

import pyarrow

from ..savepoint.errors import InvalidArgumentError
from . import engine
from . import tables

EXTENSIONS = {"parquet": "parquet", "csv": "csv", "json": "json"}

#: a Parquet row group ends at this many rows or bytes of Arrow data, whichever comes first (pyarrow's
#: ``write_batch`` makes a row group of every batch: 8192-row groups cost twice the CPU of 64 Ki-row
#: ones, mostly in a dictionary tried anew on every column chunk; larger groups gain little more and
#: hold more memory). The columnar decoder's batches (a key group at least) are often one group each.
ROW_GROUP_ROWS = 1 << 17
ROW_GROUP_BYTES = 32 << 20
#: rows of the first row group whose values decide which columns get a dictionary
DICTIONARY_SAMPLE_ROWS = 8192


# ---------------------------------------------------------------------------------------------
# Spark's text spellings of values


def java_double(value: float, single: bool = False) -> str:
    """``Double.toString`` (``Float.toString`` with ``single``): shortest digits, plain from 10^-3 up
    to 10^7, else ``d.dddE±n``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    if single:
        import numpy

        shortest = str(numpy.float32(value))
    else:
        shortest = repr(value)
    sign, digits, exponent = decimal.Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    magnitude = exponent + len(text) - 1  # the power of ten of the first digit
    prefix = "-" if sign else ""
    if -3 <= magnitude < 7:
        if magnitude >= 0:
            whole, fraction = text[:magnitude + 1].ljust(magnitude + 1, "0"), text[magnitude + 1:]
        else:
            whole, fraction = "0", "0" * (-magnitude - 1) + text
        return f"{prefix}{whole}.{fraction or '0'}"
    return f"{prefix}{text[0]}.{text[1:] or '0'}E{magnitude}"


def _timestamp(value: datetime.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(datetime.timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"


def _scalar_text(value: Any, arrow_type: pyarrow.DataType) -> Any:
    """A scalar as Spark's JSON holds it: a number, bool or string."""
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return _RawNumber(java_double(value, pyarrow.types.is_float32(arrow_type)))
    if isinstance(value, decimal.Decimal):
        return _RawNumber(str(value))
    if isinstance(value, datetime.datetime):
        return _timestamp(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


class _RawNumber(str):
    """A number in Spark's spelling, written without quotes."""


def _json_value(value: Any, arrow_type: pyarrow.DataType, top: bool = False) -> str:
    if value is None:
        return "null"
    if pyarrow.types.is_struct(arrow_type):
        parts = []
        for index in range(arrow_type.num_fields):
            field = arrow_type.field(index)
            item = value.get(field.name)
            if item is None:  # Spark leaves null fields out
                continue
            parts.append(f"{json.dumps(field.name, ensure_ascii=False)}:{_json_value(item, field.type)}")
        return "{" + ",".join(parts) + "}"
    if pyarrow.types.is_map(arrow_type):
        parts = []
        for key, item in value:
            key_text = _scalar_text(key, arrow_type.key_type)
            key_text = key_text if isinstance(key_text, str) else _json_value(key, arrow_type.key_type)
            parts.append(f"{json.dumps(str(key_text), ensure_ascii=False)}:{_json_value(item, arrow_type.item_type)}")
        return "{" + ",".join(parts) + "}"
    if pyarrow.types.is_list(arrow_type) or pyarrow.types.is_large_list(arrow_type):
        return "[" + ",".join(_json_value(item, arrow_type.value_type) for item in value) + "]"
    text = _scalar_text(value, arrow_type)
    if isinstance(text, _RawNumber):
        return str(text)
    if isinstance(text, bool):
        return "true" if text else "false"
    if isinstance(text, int):
        return str(text)
    return json.dumps(text, ensure_ascii=False)


def spark_json_row(row: dict, schema: pyarrow.Schema) -> str:
    """One row as Spark's JSON writer (and ``to_json(struct(...))``) spells it."""
    return _json_value(row, pyarrow.struct(list(schema)))


def _csv_field(value: Any, arrow_type: pyarrow.DataType) -> str:
    if value is None:
        return ""
    if pyarrow.types.is_nested(arrow_type):
        text = _json_value(value, arrow_type)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(_scalar_text(value, arrow_type))
    if text == "":
        return '""'
    if any(character in text for character in ',"\n\r') or text != text.strip():
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def spark_csv_line(row: dict, schema: pyarrow.Schema) -> str:
    return ",".join(_csv_field(row[field.name], field.type) for field in schema)


# ---------------------------------------------------------------------------------------------
# writing


def _write_part(table: tables.Table, partition: tables.Partition, path: str, file_format: str) -> int:
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):  # a Spark executor on another machine than the driver
        raise InvalidArgumentError(f"the output directory {directory} does not exist on {socket.gethostname()}, "
                                   "where this part is written: with Spark on a cluster, --out must be on a "
                                   "file system the driver and every executor share")
    batch_rows = ROW_GROUP_ROWS if file_format == "parquet" else engine.BATCH_ROWS
    return write_batches(engine.partition_batches(table, partition, batch_rows), engine.table_schema(table), path,
                         file_format)


def write_batches(batches: Iterable[pyarrow.RecordBatch], schema: pyarrow.Schema, path: str,
                  file_format: str) -> int:
    """Record batches of ``schema`` as one ``file_format`` file at ``path``; returns the rows written."""
    rows = 0
    if file_format == "parquet":
        import pyarrow.parquet

        groups = iter(_row_groups(batches))
        first = next(groups, None)
        dictionary, statistics = _column_encodings(schema, first[0]) if first else (True, True)
        with pyarrow.parquet.ParquetWriter(path, schema, use_dictionary=dictionary,
                                           write_statistics=statistics) as writer:
            for group in itertools.chain([first] if first else [], groups):
                writer.write_table(pyarrow.Table.from_batches(group, schema), row_group_size=ROW_GROUP_ROWS)
                rows += sum(batch.num_rows for batch in group)
        return rows
    with open(path, "w", encoding="utf-8", newline="") as handle:
        if file_format == "csv":
            handle.write(",".join(_csv_header(field.name) for field in schema) + "\n")
        for batch in batches:
            for row in batch.to_pylist():
                handle.write((spark_csv_line(row, schema) if file_format == "csv" else spark_json_row(row, schema))
                             + "\n")
            rows += batch.num_rows
    return rows


def _row_groups(batches: Iterable[pyarrow.RecordBatch]) -> Iterable[list[pyarrow.RecordBatch]]:
    """Consecutive batches gathered into row groups of up to :data:`ROW_GROUP_ROWS` rows or
    :data:`ROW_GROUP_BYTES` bytes (one batch larger than that is a row group of its own)."""
    group: list[pyarrow.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if group and (rows + batch.num_rows > ROW_GROUP_ROWS or size + batch.nbytes > ROW_GROUP_BYTES):
            yield group
            group, rows, size = [], 0, 0
        group.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
    if group:
        yield group


def _column_encodings(schema: pyarrow.Schema, batch: pyarrow.RecordBatch) -> tuple[list[str], list[str]]:
    """The Parquet column paths worth a dictionary, and those worth statistics. A dictionary: the
    columns whose values repeat (at most half of them distinct) in the first
    :data:`DICTIONARY_SAMPLE_ROWS` rows; a key column, or any column of unique values, would have the
    writer build a dictionary for every column chunk only to give it up after its first megabyte.
    Statistics: every column but the strings and bytes of unique values (the keys of a state, or
    values made from them): their minimum and maximum cost ~0.03 CPU-s per million rows to compute and
    prune nothing, as the rows of a row group come in key-group (hash) order."""
    import io

    import pyarrow.compute
    import pyarrow.parquet

    empty = io.BytesIO()
    # not schema.empty_table(): it builds its columns with pyarrow.array, which imports pandas (~0.3 CPU-s
    # a process) to ask whether they are pandas objects
    pyarrow.parquet.write_table(pyarrow.Table.from_batches([], schema), empty)
    empty.seek(0)
    parquet_schema = pyarrow.parquet.ParquetFile(empty).schema
    paths = [parquet_schema.column(index).path for index in range(len(parquet_schema))]
    sample = batch.slice(0, DICTIONARY_SAMPLE_ROWS)
    values = [leaf for column in sample.columns for leaf in _leaves(column)]
    if len(values) != len(paths):  # a type whose leaves are not laid out as assumed: the writer's default
        return paths, paths
    repeats = [_repeats(leaf) for leaf in values]
    return ([path for path, repeat in zip(paths, repeats) if repeat],
            [path for path, repeat, leaf in zip(paths, repeats, values) if repeat or not _variable_width(leaf.type)])


def _variable_width(kind: pyarrow.DataType) -> bool:
    return (pyarrow.types.is_string(kind) or pyarrow.types.is_large_string(kind) or pyarrow.types.is_binary(kind)
            or pyarrow.types.is_large_binary(kind))


def _leaves(array: pyarrow.Array) -> list[pyarrow.Array]:
    """An array's leaf values in the order of its Parquet columns."""
    kind = array.type
    if pyarrow.types.is_struct(kind):
        return [leaf for child in array.flatten() for leaf in _leaves(child)]
    if pyarrow.types.is_map(kind):
        return _leaves(array.keys) + _leaves(array.items)
    if pyarrow.types.is_list(kind) or pyarrow.types.is_large_list(kind) or pyarrow.types.is_fixed_size_list(kind):
        return _leaves(array.flatten())
    return [array]


def _repeats(values: pyarrow.Array) -> bool:
    import pyarrow.compute

    present = len(values) - values.null_count
    if present == 0:
        return True
    try:
        distinct = pyarrow.compute.count_distinct(values, mode="only_valid").as_py()
    except (pyarrow.ArrowNotImplementedError, pyarrow.ArrowTypeError):
        return True
    return 2 * distinct <= present


def _csv_header(name: str) -> str:
    return _csv_field(name, pyarrow.string())


def write_table(table: tables.Table, out_dir: str, file_format: str, overwrite: bool = False,
                progress: engine.Progress | None = None, workers: int | None = None, spark=None) -> int:
    """Write ``table`` as ``file_format`` files in the local directory ``out_dir`` (staged: nothing is
    left behind on failure; an overwritten directory stays until the new one is complete). Returns rows.
    The part files are written on a process pool here, or, given a SparkSession, one Spark task each
    (``spark_tasks``): the same files either way."""
    from ..savepoint.atomic import StagedDirectory

    with StagedDirectory(out_dir, overwrite, create=False, exists_hint="--mode overwrite replaces it") as staged:
        os.makedirs(staged.temp_dir, exist_ok=True)
        paths = [os.path.join(staged.temp_dir, f"part-{index:05d}.{EXTENSIONS[file_format]}")
                 for index in range(len(table.partitions))]
        arguments = [(path, file_format) for path in paths]
        if spark is not None:
            from . import spark_tasks

            rows = sum(spark_tasks.map_partitions(spark, table, _write_task, progress, arguments))
        else:
            rows = sum(engine.map_partitions(table, _write_task, progress, workers, arguments=arguments))
        if not table.partitions:  # an empty table still gets its columns
            _write_empty(engine.table_schema(table), os.path.join(staged.temp_dir, f"part-00000.{file_format}"),
                         file_format)
        open(os.path.join(staged.temp_dir, "_SUCCESS"), "w").close()
    return rows


def write_result(batches: Iterable[pyarrow.RecordBatch], schema: pyarrow.Schema, out_dir: str, file_format: str,
                 overwrite: bool = False) -> int:
    """A query's result (record batches of ``schema``) as one ``file_format`` part file in the local
    directory ``out_dir``, staged as :func:`write_table` stages a table. Returns rows."""
    from ..savepoint.atomic import StagedDirectory

    with StagedDirectory(out_dir, overwrite, create=False, exists_hint="--mode overwrite replaces it") as staged:
        os.makedirs(staged.temp_dir, exist_ok=True)
        rows = write_batches(batches, schema, os.path.join(staged.temp_dir, f"part-00000.{EXTENSIONS[file_format]}"),
                             file_format)
        open(os.path.join(staged.temp_dir, "_SUCCESS"), "w").close()
    return rows


def _write_task(table: tables.Table, partition: tables.Partition, path: str, file_format: str) -> tuple[int, int]:
    rows = _write_part(table, partition, path, file_format)
    return rows, rows


def _write_empty(schema: pyarrow.Schema, path: str, file_format: str) -> None:
    if file_format == "parquet":
        import pyarrow.parquet

        pyarrow.parquet.write_table(schema.empty_table(), path)
    elif file_format == "csv":
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(",".join(_csv_header(field.name) for field in schema) + "\n")
    else:
        open(path, "w").close()
