"""TypeInfo → Spark SQL types, and the per-value adjustments Spark needs: two visitors.

The TypeInfo tree is the source of truth; this module is the only place that knows Spark's types.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import warnings
from decimal import Decimal
from typing import Any, Callable

from pyspark.sql import types as spark_types

from ..savepoint.errors import FStateError
from ..savepoint.types import (ArrayListType, EitherType, EnumType, GenericArrayType, ListType, MapType,
                               NullableType, OpaquePickle, OpaqueType, PickledType, PojoType, RowType, Scalar,
                               SetType, TimeWindowType, TimerType, TtlType, TupleType, TypeInfo, TypeInfoVisitor,
                               visit)
from ..savepoint.types.cep import CepType
from ..savepoint.types.logical import LogicalType
from ..savepoint.types.table import ExternalType, RawValueDataType, RowDataType, TableDataType
from ..savepoint.types.visitor import MissingVisitorBranchError

DECIMAL = spark_types.DecimalType(38, 18)
BIG_INTEGER = spark_types.DecimalType(38, 0)

#: The Spark type of each scalar kind (``Scalar.kind``).
SCALAR_TYPES: dict[str, spark_types.DataType] = {
    "String": spark_types.StringType(), "Long": spark_types.LongType(), "Integer": spark_types.IntegerType(),
    "Short": spark_types.ShortType(), "Byte": spark_types.ByteType(), "Boolean": spark_types.BooleanType(),
    "Double": spark_types.DoubleType(), "Float": spark_types.FloatType(), "Character": spark_types.StringType(),
    "BigDecimal": DECIMAL, "BigInteger": BIG_INTEGER, "Void": spark_types.StringType(),
    "Date": spark_types.TimestampType(), "SqlDate": spark_types.DateType(), "SqlTime": spark_types.TimeType(6),
    "SqlTimestamp": spark_types.TimestampType(), "LocalDate": spark_types.DateType(),
    "LocalTime": spark_types.TimeType(6), "LocalDateTime": spark_types.TimestampNTZType(),
    "Instant": spark_types.TimestampType(), "byte[]": spark_types.BinaryType(),
    "int[]": spark_types.ArrayType(spark_types.IntegerType(), False),
    "long[]": spark_types.ArrayType(spark_types.LongType(), False),
    "short[]": spark_types.ArrayType(spark_types.ShortType(), False),
    "float[]": spark_types.ArrayType(spark_types.FloatType(), False),
    "double[]": spark_types.ArrayType(spark_types.DoubleType(), False),
    "char[]": spark_types.ArrayType(spark_types.StringType(), False),
    "boolean[]": spark_types.ArrayType(spark_types.BooleanType(), False),
    "String[]": spark_types.ArrayType(spark_types.StringType(), True),
    "VoidNamespace": spark_types.StringType(), "GlobalWindow": spark_types.StringType(),
    "Tuple0": spark_types.StringType(),
}


def _struct(names, children, visitor) -> spark_types.StructType:
    return spark_types.StructType([spark_types.StructField(n, visit(c, visitor), True)
                                   for n, c in zip(names, children)])


class SparkTypeVisitor(TypeInfoVisitor[spark_types.DataType]):
    """The Spark SQL type of a TypeInfo's values (as decoded, after :class:`SparkConverterVisitor`)."""

    def visit_scalar(self, node: Scalar) -> spark_types.DataType:
        try:
            return SCALAR_TYPES[node.kind]
        except KeyError:
            raise MissingVisitorBranchError(f"SparkTypeVisitor has no Spark type for scalar kind {node.kind!r}: "
                                            "add it to readers.schema.SCALAR_TYPES") from None

    def visit_time_window(self, node: TimeWindowType) -> spark_types.DataType:
        return spark_types.StructType([spark_types.StructField("start", spark_types.LongType(), False),
                                       spark_types.StructField("end", spark_types.LongType(), False)])

    def visit_tuple(self, node: TupleType) -> spark_types.DataType:
        return _struct(node.field_names, node.children, self)

    def visit_row(self, node: RowType) -> spark_types.DataType:
        return _struct(node.field_names, node.children, self)

    def visit_either(self, node: EitherType) -> spark_types.DataType:
        return _struct(node.field_names, node.children, self)

    def visit_pojo(self, node: PojoType) -> spark_types.DataType:
        if not node.decodable:
            return spark_types.BinaryType()
        return _struct([n for n, _, _ in node.fields], [t for _, _, t in node.fields], self)

    def visit_list(self, node: ListType) -> spark_types.DataType:
        return spark_types.ArrayType(visit(node.element, self), True)

    def visit_array_list(self, node: ArrayListType) -> spark_types.DataType:
        return self.visit_list(node)

    def visit_set(self, node: SetType) -> spark_types.DataType:
        return self.visit_list(node)

    def visit_generic_array(self, node: GenericArrayType) -> spark_types.DataType:
        return spark_types.ArrayType(visit(node.children[0], self), True)

    def visit_map(self, node: MapType) -> spark_types.DataType:
        return spark_types.MapType(visit(node.key, self), visit(node.value, self), True)

    def visit_nullable(self, node: NullableType) -> spark_types.DataType:
        return visit(node.inner, self)

    def visit_ttl(self, node: TtlType) -> spark_types.DataType:
        return visit(node.value, self)

    def visit_enum(self, node: EnumType) -> spark_types.DataType:
        return spark_types.StringType()

    def visit_pickled(self, node: PickledType) -> spark_types.DataType:
        return spark_types.BinaryType()  # the pickle bytes (protocol 4) of fstate's runtime

    def visit_timer(self, node: TimerType) -> spark_types.DataType:
        return spark_types.StructType([spark_types.StructField("timestamp", spark_types.LongType()),
                                       spark_types.StructField("key", visit(node.key, self)),
                                       spark_types.StructField("namespace", visit(node.namespace, self))])

    def visit_opaque(self, node: OpaqueType) -> spark_types.DataType:
        return spark_types.BinaryType()  # the raw value bytes

    # CEP
    def visit_cep(self, node: CepType) -> spark_types.DataType:
        if not node.fully_decodable:  # e.g. Lockable<Kryo event>: the value is read as raw bytes
            return spark_types.BinaryType()
        return visit(node.shape, self)  # structs and arrays named after CEP's fields
    # table runtime: Spark types follow the LogicalTypes
    def visit_row_data(self, node: RowDataType) -> spark_types.DataType:
        if not node.decodable:
            return spark_types.BinaryType()
        return spark_types.StructType([spark_types.StructField(n, logical_spark_type(t), _nullable(t))
                                       for n, t in zip(node.field_names, node.types)])

    def visit_table_data(self, node: TableDataType) -> spark_types.DataType:
        return logical_spark_type(node.logical)

    def visit_raw_value_data(self, node: RawValueDataType) -> spark_types.DataType:
        return spark_types.BinaryType()  # the bytes the inner serializer wrote

    def visit_external(self, node: ExternalType) -> spark_types.DataType:
        return visit(node.inner, self)


#: The Spark type of each LogicalType root without parameters or children.
LOGICAL_TYPES: dict[str, spark_types.DataType] = {
    "CHAR": spark_types.StringType(), "VARCHAR": spark_types.StringType(), "BOOLEAN": spark_types.BooleanType(),
    "BINARY": spark_types.BinaryType(), "VARBINARY": spark_types.BinaryType(), "TINYINT": spark_types.ByteType(),
    "SMALLINT": spark_types.ShortType(), "INTEGER": spark_types.IntegerType(), "BIGINT": spark_types.LongType(),
    "FLOAT": spark_types.FloatType(), "DOUBLE": spark_types.DoubleType(), "DATE": spark_types.DateType(),
    "TIME_WITHOUT_TIME_ZONE": spark_types.TimeType(6), "TIMESTAMP_WITHOUT_TIME_ZONE": spark_types.TimestampNTZType(),
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE": spark_types.TimestampType(), "INTERVAL_YEAR_MONTH": spark_types.IntegerType(),
    "INTERVAL_DAY_TIME": spark_types.LongType(), "RAW": spark_types.BinaryType(), "NULL": spark_types.NullType(),
}


def _nullable(t: LogicalType) -> bool:
    # a processing-time attribute is declared NOT NULL but stored rows hold it unmaterialised (null)
    return t.nullable or t.kind == "PROCTIME"


def logical_spark_type(t: LogicalType) -> spark_types.DataType:
    """The Spark type of a table LogicalType's values (DECIMAL(p, s) → DecimalType(p, s), TIMESTAMP →
    timestamp_ntz, TIMESTAMP_LTZ → timestamp, ROW → struct with the fields' nullability)."""
    if t.root == "DECIMAL":
        return spark_types.DecimalType(t.precision, t.scale)
    if t.root == "ARRAY":
        return spark_types.ArrayType(logical_spark_type(t.children[0]), t.children[0].nullable)
    if t.root == "MAP":
        return spark_types.MapType(logical_spark_type(t.children[0]), logical_spark_type(t.children[1]),
                                   t.children[1].nullable)
    if t.root == "MULTISET":
        return spark_types.MapType(logical_spark_type(t.children[0]), spark_types.IntegerType(), False)
    if t.root in ("ROW", "STRUCTURED_TYPE"):
        return spark_types.StructType([spark_types.StructField(n, logical_spark_type(c), _nullable(c))
                                       for n, c in zip(t.field_names, t.children)])
    try:
        return LOGICAL_TYPES[t.root]
    except KeyError:
        return spark_types.BinaryType()  # types fstate does not decode (structured, distinct, ...)


def spark_type(t: TypeInfo) -> spark_types.DataType:
    return visit(t, SparkTypeVisitor())


# ---------------------------------------------------------------------------------------------
# value conversion: only where Python values differ from what Spark accepts

Converter = Callable[[Any], Any]


def _struct_converter(children, visitor) -> Converter | None:
    convs = [visit(c, visitor) for c in children]
    if not any(convs):
        return None

    def conv_struct(v):
        if v is None:
            return None
        return tuple(v if c is None or x is None else c(x) for c, x in zip(convs, v))

    return conv_struct


class SparkConverterVisitor(TypeInfoVisitor["Converter | None"]):
    """A function fixing up a decoded value for Spark, or None when the value is already fine."""

    def visit_scalar(self, node: Scalar) -> Converter | None:
        if node.kind == "BigDecimal":
            return _check_decimal(18, "BigDecimal")
        if node.kind == "BigInteger":
            return _bigint_to_decimal
        return None

    def visit_time_window(self, node: TimeWindowType) -> Converter | None:
        return None

    def visit_tuple(self, node: TupleType) -> Converter | None:
        return _struct_converter(node.children, self)

    def visit_row(self, node: RowType) -> Converter | None:
        return _struct_converter(node.children, self)

    def visit_either(self, node: EitherType) -> Converter | None:
        return _struct_converter(node.children, self)

    def visit_pojo(self, node: PojoType) -> Converter | None:
        if not node.decodable:
            return None
        return _struct_converter([t for _, _, t in node.fields], self)

    def visit_list(self, node: ListType) -> Converter | None:
        c = visit(node.children[0], self)
        if c is None:
            return None
        return lambda v: None if v is None else [None if x is None else c(x) for x in v]

    def visit_array_list(self, node: ArrayListType) -> Converter | None:
        return self.visit_list(node)

    def visit_set(self, node: SetType) -> Converter | None:
        return self.visit_list(node)

    def visit_generic_array(self, node: GenericArrayType) -> Converter | None:
        return self.visit_list(node)

    def visit_map(self, node: MapType) -> Converter | None:
        ck, cv = visit(node.key, self), visit(node.value, self)
        if ck is None and cv is None:
            return None
        ck = ck or (lambda x: x)
        cv = cv or (lambda x: x)
        return lambda v: None if v is None else {ck(k): (None if x is None else cv(x)) for k, x in v.items()}

    def visit_nullable(self, node: NullableType) -> Converter | None:
        return visit(node.inner, self)

    def visit_ttl(self, node: TtlType) -> Converter | None:
        return visit(node.value, self)

    def visit_pickled(self, node: PickledType) -> Converter | None:
        return _repickle

    def visit_enum(self, node: EnumType) -> Converter | None:
        return None

    def visit_timer(self, node: TimerType) -> Converter | None:
        return None

    def visit_opaque(self, node: OpaqueType) -> Converter | None:
        return None

    # CEP
    def visit_cep(self, node: CepType) -> Converter | None:
        return visit(node.shape, self) if node.fully_decodable else None
    # table runtime: decoded values are what Spark takes (tuples, str, Decimal of the type's scale, ...)
    def visit_row_data(self, node: RowDataType) -> Converter | None:
        return _nano_timestamp_converter(node.types or ())

    def visit_table_data(self, node: TableDataType) -> Converter | None:
        return _nano_timestamp_converter((node.logical,))

    def visit_raw_value_data(self, node: RawValueDataType) -> Converter | None:
        return None

    def visit_external(self, node: ExternalType) -> Converter | None:
        return visit(node.inner, self)


def converter(t: TypeInfo) -> Converter | None:
    """A function fixing up a decoded value for Spark, or None when the value is already fine."""
    return visit(t, SparkConverterVisitor())


def _has_nano_timestamps(t: LogicalType) -> bool:
    return (t.root in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE") and (t.precision or 0) > 6
            or any(_has_nano_timestamps(c) for c in t.children))


#: said when a Spark column drops the nanoseconds of a TIMESTAMP(7..9) value
NANOS_DROPPED = ("TIMESTAMP(7..9) values with nanoseconds below the microsecond read as Spark timestamps, which "
                 "keep microseconds: the nanoseconds are dropped in Spark (the JSON output and the Python values, "
                 "NanoDatetime, keep them)")


def _nano_timestamp_converter(types) -> Converter | None:
    """Spark keeps microseconds: a value of TIMESTAMP(p > 6) with a sub-microsecond part becomes a plain
    datetime, with a warning (only when such a part is present)."""
    if not any(_has_nano_timestamps(t) for t in types):
        return None

    def strip(v):
        if isinstance(v, datetime.datetime) and getattr(v, "nanosecond", 0):
            warnings.warn(NANOS_DROPPED, stacklevel=2)
            return datetime.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.tzinfo)
        if isinstance(v, (tuple, list)):
            items = [strip(x) for x in v]
            return v if all(a is b for a, b in zip(items, v)) else type(v)(items) if isinstance(v, list) else tuple(items)
        if isinstance(v, dict):
            pairs = [(strip(k), strip(x)) for k, x in v.items()]
            return v if all(a is k and b is x for (a, b), (k, x) in zip(pairs, v.items())) else dict(pairs)
        return v

    return strip


def _repickle(v):
    return bytes(v) if isinstance(v, OpaquePickle) else pickle.dumps(v, protocol=PickledType.PROTOCOL)


def _check_decimal(scale: int, what: str):
    quantum = Decimal(1).scaleb(-scale)
    limit = Decimal(10) ** (38 - scale)
    ctx = decimal.Context(prec=1000)

    def conv(v: Decimal):
        try:
            q = v.quantize(quantum, context=ctx)
        except decimal.InvalidOperation:
            q = None
        if q is None or q != v or abs(q) >= limit:
            raise FStateError(f"{what} value {v} does not fit Spark's DecimalType(38, {scale}) exactly")
        return q

    return conv


def _bigint_to_decimal(v: int):
    if abs(v) >= 10 ** 38:
        raise FStateError(f"BigInteger value {v} does not fit Spark's DecimalType(38, 0)")
    return Decimal(v)
