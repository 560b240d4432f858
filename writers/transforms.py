"""The kinds of transform ``SavepointModifier.transform_state`` takes, one class each, and the engines they run on.

A transform makes one keyed state's new rows (``key`` and the state's column) from its current ones; the
rows are written back by a left join on the key whichever kind made them (writers/rewrite.py on Spark,
writers/transform_embedded.py on the embedded engine), so a key the result lacks, or gives a null, loses
that state, and a key the state did not have is not added:

* :class:`SqlTransform` (``sql=``): Spark SQL over the view ``state``; Spark, or DuckDB in this process;
* :class:`DataFrameFunction` (``fn=``): a function of a Spark DataFrame; Spark only;
* :class:`ArrowFunction` (``arrow=``): a function of a ``pyarrow.RecordBatch`` of the rows (columns
  ``key`` and the state, typed as Spark hands them to ``mapInArrow``) returning a RecordBatch or Table
  of the new rows. The embedded engine streams the state through it a batch at a time into Arrow IPC
  files; Spark runs it with ``DataFrame.mapInArrow``. The result's columns are typed by its first
  result (each later one is cast to them); its key keeps the state's key type;
* :class:`PandasFunction` (``pandas=``): the same over a ``pandas.DataFrame`` per batch.

Each kind answers the engine it runs on (``embedded_result``, ``spark_result``); adding one is a class
here and its keyword in :data:`KINDS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Iterator

import pyarrow

from ..savepoint.errors import InvalidArgumentError, TransformError


class Transform(ABC):
    """How a transform makes its state's new rows (a kind lacking an engine's method cannot be made)."""

    #: the keyword of ``transform_state`` that gives it
    keyword = ""

    @abstractmethod
    def embedded_result(self, run, state: str, what: str) -> str:
        """The result's DuckDB view, made by ``run`` (a writers.transform_embedded.EmbeddedTransform)."""

    @abstractmethod
    def spark_result(self, spark, rows, state: str, what: str):
        """The result as a Spark DataFrame, from ``rows`` (the DataFrame of ``key`` and the state)."""


class SqlTransform(Transform):
    keyword = "sql"

    def __init__(self, sql: str):
        self.sql = sql

    def embedded_result(self, run, state: str, what: str) -> str:
        return run.sql_result(self.sql, state)

    def spark_result(self, spark, rows, state: str, what: str):
        from ..readers.views import spark_sql_errors

        rows.createOrReplaceTempView("state")
        with spark_sql_errors(["state"]):
            return spark.sql(self.sql)


class DataFrameFunction(Transform):
    keyword = "fn"

    def __init__(self, fn: Callable):
        self.fn = fn

    def embedded_result(self, run, state: str, what: str) -> str:
        raise InvalidArgumentError(f"the transform of '{state}' is a Python function of a Spark DataFrame: "
                                   "it runs on Spark (engine spark); SQL and functions of Arrow batches (arrow=) "
                                   "or pandas frames (pandas=) run on either engine")

    def spark_result(self, spark, rows, state: str, what: str):
        return self.fn(rows)


def spark_arrow_type(arrow_type: pyarrow.DataType) -> pyarrow.DataType:
    """``arrow_type`` as Spark's Arrow batches type it (a list's values named ``element``; DuckDB names
    them ``l``), so a function sees the same batches on both engines."""
    if pyarrow.types.is_list(arrow_type) or pyarrow.types.is_large_list(arrow_type):
        value = arrow_type.value_field
        return pyarrow.list_(pyarrow.field("element", spark_arrow_type(value.type), value.nullable))
    if pyarrow.types.is_struct(arrow_type):
        return pyarrow.struct([pyarrow.field(f.name, spark_arrow_type(f.type), f.nullable) for f in arrow_type])
    if pyarrow.types.is_map(arrow_type):
        return pyarrow.map_(pyarrow.field("key", spark_arrow_type(arrow_type.key_type), False),
                            pyarrow.field("value", spark_arrow_type(arrow_type.item_type),
                                          arrow_type.item_field.nullable))
    return arrow_type


def _type_name(arrow_type: pyarrow.DataType) -> str:
    from .column_types import column_type

    try:
        return column_type(arrow_type).simpleString()
    except InvalidArgumentError:
        return str(arrow_type)


class ArrowFunction(Transform):
    keyword = "arrow"

    def __init__(self, fn: Callable):
        self.fn = fn

    # -- the function's results, checked (both engines)

    def apply(self, batch: pyarrow.RecordBatch):
        """What the function returns for one batch."""
        return self.fn(batch)

    def _call(self, batch: pyarrow.RecordBatch, state: str, what: str) -> list[pyarrow.RecordBatch]:
        result = self.apply(batch)
        if isinstance(result, pyarrow.Table):
            batches = result.to_batches() or [pyarrow.RecordBatch.from_pylist([], schema=result.schema)]
            names = result.column_names
        elif isinstance(result, pyarrow.RecordBatch):
            batches, names = [result], result.schema.names
        else:
            raise TransformError(f"{what}: the {self.keyword}= function returned {type(result).__name__}, "
                                 f"not {self.returns}")
        if {"key", state} - set(names):
            raise TransformError(f"{what}: the {self.keyword}= function returned columns "
                                 f"{', '.join(names) or 'none'}; it must return key and {state}")
        return [b.select(["key", state]) for b in batches]

    @property
    def returns(self) -> str:
        return "a pyarrow RecordBatch or Table"

    def result_schema(self, first: pyarrow.Schema, key: pyarrow.Field, state: str, what: str) -> pyarrow.Schema:
        """The schema every result is cast to: the state's key type, the first result's state column."""
        from .column_types import column_type

        given = first.field("key").type
        if _type_name(given) != _type_name(key.type):
            raise TransformError(f"{what}: the {self.keyword}= function returned the key as {_type_name(given)}; "
                                 f"the state's key is {_type_name(key.type)}")
        column = first.field(state)
        try:
            column_type(column.type, f"{what}: the {self.keyword}= function's column '{state}'")
        except InvalidArgumentError as error:
            raise TransformError(str(error)) from None
        return pyarrow.schema([key, pyarrow.field(state, column.type, column.nullable)])

    def _cast(self, batch: pyarrow.RecordBatch, schema: pyarrow.Schema, state: str, what: str):
        if batch.schema.equals(schema):
            return batch
        try:
            return pyarrow.RecordBatch.from_arrays([batch.column(i).cast(schema.field(i).type) for i in range(2)],
                                                   schema=schema)
        except (pyarrow.ArrowInvalid, pyarrow.ArrowNotImplementedError, pyarrow.ArrowTypeError):
            got = ", ".join(f"{f.name} {_type_name(f.type)}" for f in batch.schema)
            want = ", ".join(f"{f.name} {_type_name(f.type)}" for f in schema)
            raise TransformError(f"{what}: the {self.keyword}= function returned ({got}) after ({want}) in its "
                                 "first result; every result must have the first one's types") from None

    def results(self, batches: Iterable[pyarrow.RecordBatch], input_schema: pyarrow.Schema, state: str, what: str,
                schema: pyarrow.Schema | None = None) -> Iterator[pyarrow.RecordBatch]:
        """The function's results over ``batches`` (of ``input_schema``), each cast to ``schema`` (by default
        :meth:`result_schema` of the first result, or of the result for no rows); the first batch yielded
        is there even without rows, so its schema is the result's."""
        yielded = False
        for batch in batches:
            for result in self._call(batch.cast(input_schema), state, what):
                if schema is None:
                    schema = self.result_schema(result.schema, input_schema.field("key"), state, what)
                yield self._cast(result, schema, state, what)
                yielded = True
        if not yielded:
            if schema is None:
                empty = self._call(pyarrow.RecordBatch.from_pylist([], schema=input_schema), state, what)
                schema = self.result_schema(empty[0].schema, input_schema.field("key"), state, what)
            yield pyarrow.RecordBatch.from_pylist([], schema=schema)

    # -- the engines

    def embedded_result(self, run, state: str, what: str) -> str:
        return run.function_result(self, state, what)

    def spark_result(self, spark, rows, state: str, what: str):
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        from ..readers import engine
        from ..savepoint.errors import carried_to_driver

        input_schema = pyarrow.schema([pyarrow.field(f.name, spark_arrow_type(f.type), f.nullable)
                                       for f in to_arrow_schema(rows.schema)])
        sample = rows.limit(engine.BATCH_ROWS).toArrow()
        first = next(self.results(sample.to_batches(), input_schema, state, what))
        schema = first.schema

        def run(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
            with carried_to_driver():
                for result in self.results(batches, input_schema, state, what, schema):
                    if result.num_rows:
                        yield result

        return rows.mapInArrow(run, from_arrow_schema(schema))


class PandasFunction(ArrowFunction):
    """A function of a pandas DataFrame per batch (converted with ``to_pandas`` and ``from_pandas``, as
    the batch's own types where the result's columns still fit them)."""

    keyword = "pandas"

    @property
    def returns(self) -> str:
        return "a pandas DataFrame"

    def apply(self, batch: pyarrow.RecordBatch):
        import pandas

        frame = self.fn(batch.to_pandas())
        if not isinstance(frame, pandas.DataFrame):
            return frame
        try:
            return pyarrow.RecordBatch.from_pandas(frame, schema=batch.schema, preserve_index=False)
        except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, pyarrow.ArrowNotImplementedError, KeyError, TypeError):
            return pyarrow.RecordBatch.from_pandas(frame, preserve_index=False)


#: ``transform_state``'s keywords → the kind each gives
KINDS: dict[str, type[Transform]] = {kind.keyword: kind for kind in (SqlTransform, DataFrameFunction, ArrowFunction,
                                                                       PandasFunction)}


def transform_of(**given: Any) -> Transform:
    """The transform of exactly one keyword of :data:`KINDS` (the others None)."""
    chosen = {keyword: value for keyword, value in given.items() if value is not None}
    if len(chosen) != 1:
        raise InvalidArgumentError("give exactly one of " + ", ".join(f"{k}=" for k in KINDS))
    ((keyword, value),) = chosen.items()
    return KINDS[keyword](value)
