"""Spark SQL column types without pyspark: what an Arrow column is to the writers.

The writers check a source's columns against the declared state types (writers/validation.py), infer a
state's type from its column (``spec.from_spark``) and compare a transform's result with the state
(``rewrite._same_shape``) by Spark SQL type, as a Spark DataFrame gives it. The embedded engine's
sources are Arrow (writers/arrow_frames.py): :func:`column_types` gives their columns' Spark SQL types
as these small classes, named and shaped as pyspark's (class name, ``simpleString()``, ``elementType``,
``keyType``, ``valueType``, ``fields``, ``scale``), the mapping pyspark's ``from_arrow_type`` makes, so a
write without Spark never imports pyspark.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow

from ..savepoint.errors import InvalidArgumentError


class AtomicType:
    """A Spark SQL type without parameters (its class name is pyspark's)."""

    simple = ""

    def simpleString(self) -> str:  # noqa: N802 (pyspark's name)
        return self.simple

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _atomic(name: str, simple: str) -> type:
    return type(name, (AtomicType,), {"simple": simple})


BooleanType = _atomic("BooleanType", "boolean")
ByteType = _atomic("ByteType", "tinyint")
ShortType = _atomic("ShortType", "smallint")
IntegerType = _atomic("IntegerType", "int")
LongType = _atomic("LongType", "bigint")
FloatType = _atomic("FloatType", "float")
DoubleType = _atomic("DoubleType", "double")
StringType = _atomic("StringType", "string")
BinaryType = _atomic("BinaryType", "binary")
DateType = _atomic("DateType", "date")
TimestampType = _atomic("TimestampType", "timestamp")
TimestampNTZType = _atomic("TimestampNTZType", "timestamp_ntz")
TimeType = _atomic("TimeType", "time(6)")
DayTimeIntervalType = _atomic("DayTimeIntervalType", "interval day to second")


@dataclass(frozen=True)
class DecimalType:
    precision: int
    scale: int

    def simpleString(self) -> str:  # noqa: N802
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True)
class ArrayType:
    elementType: object  # noqa: N815 (pyspark's names)
    containsNull: bool = True  # noqa: N815

    def simpleString(self) -> str:  # noqa: N802
        return f"array<{self.elementType.simpleString()}>"


@dataclass(frozen=True)
class MapType:
    keyType: object  # noqa: N815
    valueType: object  # noqa: N815
    valueContainsNull: bool = True  # noqa: N815

    def simpleString(self) -> str:  # noqa: N802
        return f"map<{self.keyType.simpleString()},{self.valueType.simpleString()}>"


@dataclass(frozen=True)
class StructField:
    name: str
    dataType: object  # noqa: N815
    nullable: bool = True


@dataclass(frozen=True)
class StructType:
    fields: tuple[StructField, ...]

    def simpleString(self) -> str:  # noqa: N802
        return "struct<" + ",".join(f"{f.name}:{f.dataType.simpleString()}" for f in self.fields) + ">"

    def __getitem__(self, name: str) -> StructField:
        return next(f for f in self.fields if f.name == name)


_ATOMIC = ((pyarrow.types.is_boolean, BooleanType), (pyarrow.types.is_int8, ByteType),
           (pyarrow.types.is_int16, ShortType), (pyarrow.types.is_int32, IntegerType),
           (pyarrow.types.is_int64, LongType), (pyarrow.types.is_float32, FloatType),
           (pyarrow.types.is_float64, DoubleType), (pyarrow.types.is_string, StringType),
           (pyarrow.types.is_large_string, StringType), (pyarrow.types.is_binary, BinaryType),
           (pyarrow.types.is_large_binary, BinaryType), (pyarrow.types.is_fixed_size_binary, BinaryType),
           (pyarrow.types.is_date32, DateType), (pyarrow.types.is_time64, TimeType),
           (pyarrow.types.is_duration, DayTimeIntervalType))


def column_type(arrow_type: pyarrow.DataType, what: str = "a column"):
    """The Spark SQL type of an Arrow column's values (as pyspark's ``from_arrow_type``: a timestamp
    without a time zone is ``timestamp_ntz``); :class:`InvalidArgumentError` for one Spark SQL has none."""
    for test, spark_type in _ATOMIC:
        if test(arrow_type):
            return spark_type()
    if pyarrow.types.is_decimal(arrow_type):
        return DecimalType(arrow_type.precision, arrow_type.scale)
    if pyarrow.types.is_timestamp(arrow_type):
        return TimestampType() if arrow_type.tz is not None else TimestampNTZType()
    if pyarrow.types.is_list(arrow_type) or pyarrow.types.is_large_list(arrow_type) \
            or pyarrow.types.is_fixed_size_list(arrow_type):
        return ArrayType(column_type(arrow_type.value_type, what), arrow_type.value_field.nullable)
    if pyarrow.types.is_map(arrow_type):
        return MapType(column_type(arrow_type.key_type, what), column_type(arrow_type.item_type, what),
                       arrow_type.item_field.nullable)
    if pyarrow.types.is_struct(arrow_type):
        return StructType(tuple(StructField(f.name, column_type(f.type, what), f.nullable) for f in arrow_type))
    raise InvalidArgumentError(f"{what} is of type {arrow_type}, which has no Spark SQL type to write state from "
                               "(cast it)")


def column_types(schema: pyarrow.Schema) -> StructType:
    """A schema's columns as a StructType (see :func:`column_type`)."""
    return StructType(tuple(StructField(f.name, column_type(f.type, f"column '{f.name}'"), f.nullable)
                            for f in schema))
