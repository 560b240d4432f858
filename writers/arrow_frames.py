"""Sources of the writers on the embedded engine: Arrow record batches in place of Spark DataFrames.

An :class:`ArrowFrame` is what a bootstrap source or a transform's result is without Spark: its columns
(an Arrow schema, and the Spark types it stands for, so the writers check and infer types exactly as
they do for a DataFrame: writers/validation.py, ``spec.from_spark``) and its record batches, streamed
anew each time they are asked for. :func:`frame_rows` turns batches into rows holding the Python values
Spark hands an executor (structs as rows, maps as dicts, UTC timestamps as local times), so one encoder
writes both engines' rows (writers/keyed_stream.py).

File sources read as Spark reads them (:func:`file_frame`): Parquet and ORC as they are; CSV with
Spark's header, inferSchema, sep and nullValue options (columns ``_c0, _c1, ...`` without a header,
every column a string unless inferSchema); JSON lines with Spark's inference (integers as bigint,
fields sorted by name). ``sql`` sources run on DuckDB (:class:`SqlSession`), written from Spark SQL
by readers/sql_dialect.py.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator

import pyarrow
import pyarrow.compute
import pyarrow.dataset

from ..readers import engine
from ..savepoint.errors import InvalidArgumentError

Opener = Callable[[list[str]], Iterator[pyarrow.RecordBatch]]


class ArrowFrame:
    """Columns and a way to stream their record batches (``open(columns)``, as often as needed)."""

    def __init__(self, arrow_schema: pyarrow.Schema, opener: Opener, keep: Any = None, size: int | None = None):
        self.arrow_schema = arrow_schema
        self._opener = opener
        self._keep = keep  # what the batches are read from (a DuckDB connection), kept alive with the frame
        self._spark_schema = None
        #: bytes of what the batches are made from (files, state), when known: how much work a write is
        self.size = size

    @property
    def columns(self) -> list[str]:
        return list(self.arrow_schema.names)

    @property
    def schema(self):
        """The Spark SQL types of these columns, as a Spark DataFrame's schema gives them (without
        pyspark: writers/column_types.py)."""
        if self._spark_schema is None:
            from .column_types import column_types

            self._spark_schema = column_types(self.arrow_schema)
        return self._spark_schema

    def open(self, columns: list[str] | None = None) -> Iterator[pyarrow.RecordBatch]:
        return self._opener(list(columns) if columns is not None else self.columns)


def _needs_conversion(arrow_type: pyarrow.DataType) -> bool:
    """Whether Arrow's Python values of this type differ from Spark's (structs, maps, UTC timestamps)."""
    if pyarrow.types.is_struct(arrow_type) or pyarrow.types.is_map(arrow_type):
        return True
    if pyarrow.types.is_timestamp(arrow_type):
        return arrow_type.tz is not None
    if pyarrow.types.is_list(arrow_type) or pyarrow.types.is_large_list(arrow_type):
        return _needs_conversion(arrow_type.value_type)
    return False


def batch_values(batch: pyarrow.RecordBatch) -> list[list]:
    """A batch's columns as lists of the values Spark gives for them."""
    out = []
    for column, field in zip(batch.columns, batch.schema):
        values = column.to_pylist()
        if _needs_conversion(field.type):
            values = [engine.python_value(value, field.type) for value in values]
        out.append(values)
    return out


def frame_rows(frame: ArrowFrame, columns: list[str]) -> Iterator[tuple]:
    """The rows of ``columns`` of ``frame``, as Spark's executors get them."""
    for batch in frame.open(columns):
        yield from zip(*batch_values(batch))


def frame_values(frame: ArrowFrame, column: str) -> list:
    """One column's values, in order."""
    return [value for batch in frame.open([column]) for value in batch_values(batch)[0]]


def table_frame(table: pyarrow.Table) -> ArrowFrame:
    return ArrowFrame(table.schema, lambda columns: iter(table.select(columns).to_batches(engine.BATCH_ROWS)))


def dataset_frame(dataset: pyarrow.dataset.Dataset, schema: pyarrow.Schema | None = None) -> ArrowFrame:
    """A frame over a pyarrow dataset (files streamed batch by batch), cast to ``schema`` if given."""
    schema = schema or dataset.schema

    def opener(columns: list[str]) -> Iterator[pyarrow.RecordBatch]:
        target = pyarrow.schema([schema.field(c) for c in columns])
        for batch in dataset.to_batches(columns=columns, batch_size=engine.BATCH_ROWS):
            yield batch if batch.schema.equals(target) else batch.cast(target)

    files = getattr(dataset, "files", None) or []
    return ArrowFrame(schema, opener, dataset, sum(os.path.getsize(f) for f in files if os.path.isfile(f)) or None)


def _parquet_frame(dataset: pyarrow.dataset.FileSystemDataset) -> ArrowFrame:
    """A frame over Parquet files read a row group at a time, each by a reader of its own: memory stays
    that of a row group whatever the file's size (one reader over a whole file, a dataset scan's too,
    holds on to buffers of every row group it has read until it is closed: pyarrow 26)."""
    import pyarrow.parquet

    schema = dataset.schema

    def opener(columns: list[str]) -> Iterator[pyarrow.RecordBatch]:
        target = pyarrow.schema([schema.field(c) for c in columns])
        for name in dataset.files:
            metadata = None
            group = 0
            while metadata is None or group < metadata.num_row_groups:
                with dataset.filesystem.open_input_file(name) as handle:
                    reader = pyarrow.parquet.ParquetFile(handle, metadata=metadata)
                    metadata = reader.metadata
                    if group < metadata.num_row_groups:
                        for batch in reader.iter_batches(engine.BATCH_ROWS, row_groups=[group], columns=columns):
                            yield batch if batch.schema.equals(target) else batch.cast(target)
                    reader.close()
                group += 1

    return ArrowFrame(schema, opener, dataset, dataset_frame(dataset).size)


# ---------------------------------------------------------------------------------------------
# files, read as Spark reads them

_CSV_OPTIONS = {"header", "inferschema", "sep", "delimiter", "nullvalue", "encoding", "quote", "escape"}
_JSON_OPTIONS = {"encoding"}


def file_frame(path: str, fmt: str, options: dict[str, str], what: str) -> ArrowFrame:
    """A Parquet, ORC, CSV or JSON source (a file or a directory of part files)."""
    given = {str(k).lower(): str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    known = {"csv": _CSV_OPTIONS, "json": _JSON_OPTIONS}.get(fmt, set())
    unknown = sorted(set(given) - known)
    if unknown:
        raise InvalidArgumentError(f"{what}: the {fmt} option {', '.join(unknown)} is not read by the embedded "
                                   "engine (--engine spark reads it)")
    try:
        if fmt == "parquet":
            return _parquet_frame(pyarrow.dataset.dataset(path, format=fmt))
        if fmt == "orc":
            return dataset_frame(pyarrow.dataset.dataset(path, format=fmt))
        if fmt == "csv":
            return _csv_frame(path, given)
        return _json_frame(path)
    except (pyarrow.ArrowInvalid, OSError, ValueError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"{what}: source {path}: {str(e).strip().splitlines()[0]}") from None


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(path, name) for name in os.listdir(path) if not name.startswith((".", "_")))
    return [path]


def _csv_frame(path: str, options: dict[str, str]) -> ArrowFrame:
    import pyarrow.csv

    header = options.get("header", "false") == "true"
    null_value = options.get("nullvalue", "")
    parse = pyarrow.csv.ParseOptions(delimiter=options.get("sep", options.get("delimiter", ",")),
                                     quote_char=options.get("quote", '"'), escape_char=options.get("escape", "\\"),
                                     double_quote=False)
    files = _files(path)
    with pyarrow.csv.open_csv(files[0], read_options=pyarrow.csv.ReadOptions(autogenerate_column_names=True,
                                                                             block_size=1 << 16),
                              parse_options=parse) as reader:
        first = pyarrow.Table.from_batches([reader.read_next_batch()]).slice(0, 1)
    count = first.num_columns
    names = ([str(v) for v in first.to_pylist()[0].values()] if header and first.num_rows
             else [f"_c{i}" for i in range(count)])

    def csv_dataset(types: dict[str, pyarrow.DataType]) -> pyarrow.dataset.Dataset:
        read = pyarrow.csv.ReadOptions(column_names=names, skip_rows=1 if header else 0,
                                       encoding=options.get("encoding", "utf8"))
        convert = pyarrow.csv.ConvertOptions(column_types=types, null_values=[null_value], strings_can_be_null=True,
                                             quoted_strings_can_be_null=False, true_values=["true", "True", "TRUE"],
                                             false_values=["false", "False", "FALSE"])
        return pyarrow.dataset.dataset(files, format=pyarrow.dataset.CsvFileFormat(parse, convert_options=convert,
                                                                                    read_options=read))

    strings = {name: pyarrow.string() for name in names}
    if options.get("inferschema", "false") != "true":
        return dataset_frame(csv_dataset(strings))
    inferred = {name: _infer_csv_column(csv_dataset(strings), name) for name in names}
    return dataset_frame(csv_dataset(inferred))


#: what Spark's CSV inference tries, narrowest first (numbers widen into each other, never into booleans)
_CSV_NUMBERS = (pyarrow.int32(), pyarrow.int64(), pyarrow.float64())


def _infer_csv_column(dataset: pyarrow.dataset.Dataset, name: str) -> pyarrow.DataType:
    """int, bigint, double (the widest any value needs) or boolean when every value parses as one, else
    string (nulls fit any): Spark's inferSchema for these kinds."""
    found: pyarrow.DataType | None = None
    for batch in dataset.to_batches(columns=[name]):
        column = batch.column(0).drop_null()
        if not len(column):
            continue
        kind = next((t for t in (*_CSV_NUMBERS, pyarrow.bool_()) if _parses(column, t)), pyarrow.string())
        if found is None or found == kind:
            found = kind
        elif found in _CSV_NUMBERS and kind in _CSV_NUMBERS:
            found = max(found, kind, key=_CSV_NUMBERS.index)
        else:
            found = pyarrow.string()
        if found == pyarrow.string():
            break
    return found or pyarrow.string()


def _parses(column: pyarrow.Array, arrow_type: pyarrow.DataType) -> bool:
    try:
        pyarrow.compute.cast(column, arrow_type, safe=True)
        return True
    except (pyarrow.ArrowInvalid, pyarrow.ArrowNotImplementedError):
        return False


def _json_frame(path: str) -> ArrowFrame:
    """JSON lines with Spark's schema inference: one pass to infer, one to read."""
    files = _files(path)
    inferred: Any = None
    for record in _json_records(files):
        inferred = _merge(inferred, _json_type(record))
    if not isinstance(inferred, dict):
        raise ValueError("no JSON object found")
    schema = pyarrow.schema([(name, _arrow(t)) for name, t in sorted(inferred.items())])

    def opener(columns: list[str]) -> Iterator[pyarrow.RecordBatch]:
        target = pyarrow.schema([schema.field(c) for c in columns])
        chunk: list[dict] = []
        for record in _json_records(files):
            chunk.append({c: _coerce(record.get(c), schema.field(c).type) for c in columns})
            if len(chunk) == engine.BATCH_ROWS:
                yield pyarrow.RecordBatch.from_pylist(chunk, schema=target)
                chunk = []
        if chunk:
            yield pyarrow.RecordBatch.from_pylist(chunk, schema=target)

    return ArrowFrame(schema, opener)


def _json_records(files: list[str]) -> Iterator[dict]:
    for name in files:
        with open(name, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"line {number}: not JSON ({e.msg})") from None
                    if isinstance(record, dict):
                        yield record


# inferred JSON types: "long", "double", "boolean", "string", None (only nulls), [element], {field: type}
def _json_type(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, list):
        element = None
        for item in value:
            element = _merge(element, _json_type(item))
        return [element]
    if isinstance(value, dict):
        return {k: _json_type(v) for k, v in value.items()}
    return "string"


def _merge(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None or a == b:
        return a
    if {a, b} == {"long", "double"} if isinstance(a, str) and isinstance(b, str) else False:
        return "double"
    if isinstance(a, list) and isinstance(b, list):
        return [_merge(a[0], b[0])]
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _merge(a.get(k), b.get(k)) for k in {**a, **b}}
    return "string"


def _arrow(t: Any) -> pyarrow.DataType:
    if t is None or t == "string":
        return pyarrow.string()
    if isinstance(t, list):
        return pyarrow.list_(_arrow(t[0]))
    if isinstance(t, dict):
        return pyarrow.struct([(k, _arrow(v)) for k, v in sorted(t.items())])
    return {"long": pyarrow.int64(), "double": pyarrow.float64(), "boolean": pyarrow.bool_()}[t]


def _coerce(value: Any, arrow_type: pyarrow.DataType) -> Any:
    """A JSON value as the inferred column holds it (a value of another kind in a string column as its
    JSON text, as Spark keeps it)."""
    if value is None:
        return None
    if pyarrow.types.is_string(arrow_type):
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if pyarrow.types.is_struct(arrow_type):
        return {f.name: _coerce(value.get(f.name), f.type) for f in arrow_type}
    if pyarrow.types.is_list(arrow_type):
        return [_coerce(item, arrow_type.value_type) for item in value]
    if pyarrow.types.is_floating(arrow_type):
        return float(value)
    return value


# ---------------------------------------------------------------------------------------------
# SQL on DuckDB


class SqlSession:
    """Spark SQL over named frames (a bootstrap spec's ``views``, a transform's ``state``), run by
    DuckDB in this process (readers/engine_sql.py, readers/sql_dialect.py)."""

    def __init__(self) -> None:
        from ..readers.engine_sql import connect

        self.connection = connect()
        self.frames: dict[str, ArrowFrame] = {}

    def register(self, name: str, frame: ArrowFrame) -> None:
        """``name`` reads ``frame`` (a dataset is scanned as often as queries read it; other frames are
        read once, into memory)."""
        source = frame._keep if isinstance(frame._keep, pyarrow.dataset.Dataset) else \
            pyarrow.Table.from_batches(list(frame.open()), schema=frame.arrow_schema)
        self.connection.register(name, source)
        self.frames[name.lower()] = frame

    @property
    def views(self) -> dict[str, str]:
        return {name: "" for name in self.frames}

    def duckdb_sql(self, text: str, rename: dict[str, str] | None = None) -> str:
        """``text`` (Spark SQL) in DuckDB's dialect; ``rename``: view name → the DuckDB table it reads
        (keeping the view's name as the alias its columns are qualified with)."""
        from sqlglot import exp

        from ..readers import sql_dialect

        parsed = sql_dialect.parse(text, self.views)
        schemas = {name: frame.arrow_schema for name, frame in self.frames.items()}
        for table in list(parsed.find_all(exp.Table)):
            target = (rename or {}).get(table.name.lower())
            if target is not None and not table.args.get("db"):
                alias = table.alias or table.name
                table.replace(exp.Table(this=exp.to_identifier(target, quoted=True),
                                        alias=exp.TableAlias(this=exp.to_identifier(alias))))
                schemas[target.lower()] = self.frames[table.name.lower()].arrow_schema
        return sql_dialect.to_duckdb(parsed, schemas, self.views)

    def relation(self, duck_sql: str):
        from ..readers.engine_sql import as_spark_types, duckdb_errors
        from ..savepoint.errors import SqlError

        with duckdb_errors(self.views):
            relation = self.connection.sql(duck_sql)
            if relation is None:
                raise SqlError("the statement gives no rows (give a query)", self.views)
            return as_spark_types(relation)

    def sql(self, text: str) -> ArrowFrame:
        return relation_frame(self.relation(self.duckdb_sql(text)), self.views, self.connection)


def relation_frame(relation, views: dict[str, str], connection, size: int | None = None) -> ArrowFrame:
    """A DuckDB relation as a frame (each ``open`` runs it anew, streaming its result)."""
    from ..readers.engine_sql import duckdb_errors

    with duckdb_errors(views):
        schema = _reader(relation.limit(0)).schema

    def opener(columns: list[str]) -> Iterator[pyarrow.RecordBatch]:
        projected = relation.project(", ".join('"' + c.replace('"', '""') + '"' for c in columns))
        with duckdb_errors(views):
            yield from _reader(projected)

    return ArrowFrame(schema, opener, connection, size)


def _reader(relation) -> pyarrow.RecordBatchReader:
    to_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
    return to_reader(engine.BATCH_ROWS)
