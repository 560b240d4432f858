"""What a state table (or a query's result) can be had as: each form an object in :data:`FORMS`, made
from the table's rows on the engine :func:`.engine.choose_engine` picked (:class:`Rows`).

Every form but the Spark DataFrame is made from Arrow, whichever engine read the rows, so both engines
give the same tables and frames. pandas and polars are imported when their form is asked for (polars is
optional: a clear error when it is not installed).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Iterator

import pyarrow

from ..savepoint.errors import InvalidArgumentError, spark_errors
from . import engine
from . import tables


class Rows(ABC):
    """A table's rows on one engine, as Arrow: all at once or as a stream of record batches."""

    schema: pyarrow.Schema | None

    @abstractmethod
    def table(self) -> pyarrow.Table:
        """Every row, read now."""

    @abstractmethod
    def reader(self) -> pyarrow.RecordBatchReader:
        """The rows as record batches, read as they are consumed where the engine can stream."""


class EmbeddedRows(Rows):
    """A planned state table read by the embedded engine: the whole table on its process pool, or
    partition after partition in this process as batches are consumed."""

    def __init__(self, planned: tables.Table):
        self.planned = planned
        self.schema = engine.table_schema(planned)

    def table(self) -> pyarrow.Table:
        return engine.read_table(self.planned)

    def reader(self) -> pyarrow.RecordBatchReader:
        return pyarrow.RecordBatchReader.from_batches(self.schema, engine.iter_batches(self.planned))


class ArrowRows(Rows):
    """Rows already in memory (the ``savepoint_metadata`` view)."""

    def __init__(self, arrow_table: pyarrow.Table):
        self.arrow_table = arrow_table
        self.schema = arrow_table.schema

    def table(self) -> pyarrow.Table:
        return self.arrow_table

    def reader(self) -> pyarrow.RecordBatchReader:
        return self.arrow_table.to_reader(engine.BATCH_ROWS)


class StreamRows(Rows):
    """Rows a function streams as a record batch reader (a DuckDB query's result)."""

    def __init__(self, open_reader, schema: pyarrow.Schema | None = None):
        self.open_reader = open_reader
        self.schema = schema

    def table(self) -> pyarrow.Table:
        return self.reader().read_all()

    def reader(self) -> pyarrow.RecordBatchReader:
        return self.open_reader()


class SparkRows(Rows):
    """A Spark DataFrame's rows, collected to the driver as Arrow (``DataFrame.toArrow``) and given the
    embedded engine's schema when there is one (the same types, whichever engine read them). An fstate
    error inside Spark is raised as itself."""

    def __init__(self, frame, schema: pyarrow.Schema | None = None):
        self.frame = frame
        self.schema = schema

    def table(self) -> pyarrow.Table:
        with spark_errors():
            result = self.frame.toArrow()
        return result.cast(self.schema) if self.schema is not None else result

    def reader(self) -> pyarrow.RecordBatchReader:
        return self.table().to_reader(engine.BATCH_ROWS)


class Form(ABC):
    """One form a table can be had in."""

    name: str = ""
    #: only Spark makes it (the engine choice is Spark whatever the size)
    needs_spark: bool = False

    @abstractmethod
    def make(self, rows: Rows) -> Any:
        """The form of ``rows``."""


class ArrowForm(Form):
    name = "arrow"

    def make(self, rows: Rows) -> pyarrow.Table:
        return rows.table()


class BatchesForm(Form):
    name = "batches"

    def make(self, rows: Rows) -> pyarrow.RecordBatchReader:
        return rows.reader()


class PandasForm(Form):
    """pandas, as ``pyarrow.Table.to_pandas`` converts (maps as lists of (key, value) pairs, structs
    as dicts)."""

    name = "pandas"

    def make(self, rows: Rows):
        return rows.table().to_pandas()


def _polars():
    try:
        return importlib.import_module("polars")
    except ImportError:
        raise InvalidArgumentError("polars is not installed (pip install polars); to_arrow() and "
                                   "to_pandas() need nothing more") from None


class PolarsForm(Form):
    name = "polars"

    def make(self, rows: Rows):
        return _polars().from_arrow(rows.table())


class PolarsLazyForm(Form):
    """A polars LazyFrame over the record batch stream: nothing is read before it is collected, and
    then batch after batch (projection, filter and ``head`` applied to each batch as it comes)."""

    name = "polars-lazy"

    def make(self, rows: Rows):
        polars = _polars()
        plugins = importlib.import_module("polars.io.plugins")
        schema = rows.schema if rows.schema is not None else rows.reader().schema
        polars_schema = polars.from_arrow(schema.empty_table()).schema

        def source(with_columns, predicate, n_rows, batch_size) -> Iterator:
            left = n_rows
            for batch in rows.reader():
                frame = polars.from_arrow(pyarrow.Table.from_batches([batch], schema=schema))
                if predicate is not None:
                    frame = frame.filter(predicate)
                if with_columns is not None:
                    frame = frame.select(with_columns)
                if left is not None:
                    frame = frame.head(left)
                    left -= frame.height
                yield frame
                if left is not None and left <= 0:
                    return

        return plugins.register_io_source(source, schema=polars_schema)


class SparkForm(Form):
    name = "spark"
    needs_spark = True

    def make(self, rows: Rows):
        return rows.frame


#: every form, by name
FORMS: dict[str, Form] = {form.name: form for form in (ArrowForm(), BatchesForm(), PandasForm(), PolarsForm(),
                                                        PolarsLazyForm(), SparkForm())}


def form(name: str | Form) -> Form:
    if isinstance(name, Form):
        return name
    found = FORMS.get(name)
    if found is None:
        raise InvalidArgumentError(f"unknown form '{name}' ({', '.join(FORMS)})")
    return found
