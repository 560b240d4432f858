"""The Arrow type of each scalar kind's values, from its SQL type in the scalar registry
(:data:`.scalars.SCALAR_KINDS`): the type Spark's type of it converts to (timestamps in µs, UTC for
instants; times in ns). Shared by the columnar decoder (``savepoint/columnar.py``) and the embedded
engine's schemas (``readers/arrow_schema.py``); imports pyarrow, so nothing imports it at start-up."""

from __future__ import annotations

import re

import pyarrow

from .scalars import SCALAR_KINDS

UTC_TIMESTAMP = pyarrow.timestamp("us", tz="UTC")
LOCAL_TIMESTAMP = pyarrow.timestamp("us")
TIME = pyarrow.time64("ns")
DECIMAL = pyarrow.decimal128(38, 18)
BIG_INTEGER = pyarrow.decimal128(38, 0)

#: the Arrow type of each SQL type the registry names
SQL_TYPES: dict[str, pyarrow.DataType] = {
    "string": pyarrow.string(), "bigint": pyarrow.int64(), "int": pyarrow.int32(), "smallint": pyarrow.int16(),
    "tinyint": pyarrow.int8(), "boolean": pyarrow.bool_(), "double": pyarrow.float64(), "float": pyarrow.float32(),
    "decimal(38,18)": DECIMAL, "decimal(38,0)": BIG_INTEGER, "timestamp": UTC_TIMESTAMP,
    "timestamp_ntz": LOCAL_TIMESTAMP, "date": pyarrow.date32(), "time": TIME, "binary": pyarrow.binary(),
}

_ARRAY = re.compile(r"array<(\w+)( not null)?>")


def array_type(element: pyarrow.DataType, contains_null: bool = True) -> pyarrow.DataType:
    """A list column as Spark writes it (its element field is named "element")."""
    return pyarrow.list_(pyarrow.field("element", element, contains_null))


def sql_arrow_type(sql: str) -> pyarrow.DataType:
    """The Arrow type of a registry SQL type (``array<T>``: a list; ``not null``: of non-null elements)."""
    array = _ARRAY.fullmatch(sql)
    if array:
        return array_type(SQL_TYPES[array.group(1)], array.group(2) is None)
    return SQL_TYPES[sql]


#: The Arrow type of each scalar kind (``Scalar.kind``).
SCALAR_TYPES: dict[str, pyarrow.DataType] = {kind: sql_arrow_type(entry.sql) for kind, entry in SCALAR_KINDS.items()}
