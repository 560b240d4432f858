"""TypeInfo → Spark SQL types (a visitor); the per-value adjustments, shared with the embedded engine,
live in ``arrow_schema`` (re-exported here).

The TypeInfo tree is the source of truth; this module is the only place that knows Spark's types.
"""

from __future__ import annotations

from pyspark.sql import types as spark_types

from ..savepoint.types import (EitherType, EnumType, ListType, MapType, NullableType, OpaqueType, PickledType, PojoType,
                               RowType, SCALAR_KINDS, Scalar, TimeWindowType, TimerType, TTL_FIELDS, TtlType, TupleType,
                               TypeInfo, TypeVisitor, visit)
from ..savepoint.types.cep import CepType
from ..savepoint.types.logical import LogicalType
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import ExternalType, RawValueDataType, RowDataType, TableDataType
from ..savepoint.types.visitor import MissingVisitorBranchError

DECIMAL = spark_types.DecimalType(38, 18)
BIG_INTEGER = spark_types.DecimalType(38, 0)

#: The Spark type of each SQL type the scalar registry names (``SCALAR_KINDS``)
_SQL_TYPES: dict[str, spark_types.DataType] = {
    "string": spark_types.StringType(), "bigint": spark_types.LongType(), "int": spark_types.IntegerType(),
    "smallint": spark_types.ShortType(), "tinyint": spark_types.ByteType(), "boolean": spark_types.BooleanType(),
    "double": spark_types.DoubleType(), "float": spark_types.FloatType(), "decimal(38,18)": DECIMAL,
    "decimal(38,0)": BIG_INTEGER, "timestamp": spark_types.TimestampType(),
    "timestamp_ntz": spark_types.TimestampNTZType(), "date": spark_types.DateType(), "time": spark_types.TimeType(6),
    "binary": spark_types.BinaryType(),
}


def _sql_spark_type(sql: str) -> spark_types.DataType:
    """The Spark type of a registry SQL type (``array<T>``, ``array<T not null>``)."""
    if sql.startswith("array<"):
        inner = sql[len("array<"):-1]
        element = inner.removesuffix(" not null")
        return spark_types.ArrayType(_SQL_TYPES[element], element == inner)
    return _SQL_TYPES[sql]


#: The Spark type of each scalar kind (``Scalar.kind``).
SCALAR_TYPES: dict[str, spark_types.DataType] = {kind: _sql_spark_type(entry.sql)
                                                 for kind, entry in SCALAR_KINDS.items()}


def _struct(names, fields) -> spark_types.StructType:
    return spark_types.StructType([spark_types.StructField(n, t, True) for n, t in zip(names, fields)])


class SparkTypeVisitor(TypeVisitor[spark_types.DataType]):
    """The Spark SQL type of a TypeInfo's values (as decoded, after :class:`SparkConverterVisitor`)."""

    def visit_scalar(self, node: Scalar) -> spark_types.DataType:
        try:
            return SCALAR_TYPES[node.kind]
        except KeyError:
            raise MissingVisitorBranchError(f"SparkTypeVisitor has no Spark type for scalar kind {node.kind!r}: "
                                            "add it to savepoint.types.scalars.SCALAR_KINDS") from None

    def visit_time_window(self, node: TimeWindowType) -> spark_types.DataType:
        return spark_types.StructType([spark_types.StructField("start", spark_types.LongType(), False),
                                       spark_types.StructField("end", spark_types.LongType(), False)])

    def visit_tuple(self, node: TupleType, fields) -> spark_types.DataType:
        return _struct(node.field_names, fields)

    def visit_row(self, node: RowType, fields) -> spark_types.DataType:
        return _struct(node.field_names, fields)

    def visit_either(self, node: EitherType, fields) -> spark_types.DataType:
        return _struct(node.field_names, fields)

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> spark_types.DataType:
        if not node.decodable:
            return spark_types.BinaryType()
        return _struct(node.field_names, fields)

    def visit_list(self, node: ListType, element) -> spark_types.DataType:
        return spark_types.ArrayType(element, True)

    visit_array_list = visit_set = visit_generic_array = visit_list

    def visit_map(self, node: MapType, key, value) -> spark_types.DataType:
        return spark_types.MapType(key, value, True)

    def visit_nullable(self, node: NullableType, inner) -> spark_types.DataType:
        return inner

    def visit_ttl(self, node: TtlType, value, timestamp) -> spark_types.DataType:
        if node.timestamped:  # TtlValue: the value and its last access (read --ttl-timestamps)
            return _struct(TTL_FIELDS, (value, timestamp))
        return value

    def visit_enum(self, node: EnumType) -> spark_types.DataType:
        return spark_types.StringType()

    def visit_pickled(self, node: PickledType) -> spark_types.DataType:
        return spark_types.BinaryType()  # the pickle bytes (protocol 4) of fstate's runtime

    def visit_timer(self, node: TimerType, key, namespace) -> spark_types.DataType:
        return spark_types.StructType([spark_types.StructField("timestamp", spark_types.LongType()),
                                       spark_types.StructField("key", key),
                                       spark_types.StructField("namespace", namespace)])

    def visit_opaque(self, node: OpaqueType) -> spark_types.DataType:
        return spark_types.BinaryType()  # the raw value bytes

    # CEP
    def visit_cep(self, node: CepType, shape) -> spark_types.DataType:
        if not node.fully_decodable:  # e.g. Lockable<Kryo event>: the value is read as raw bytes
            return spark_types.BinaryType()
        return shape  # structs and arrays named after CEP's fields

    # table runtime: Spark types follow the LogicalTypes
    def visit_row_data(self, node: RowDataType, fields) -> spark_types.DataType:
        if not node.decodable:
            return spark_types.BinaryType()
        return spark_types.StructType([spark_types.StructField(n, logical_spark_type(t), _nullable(t))
                                       for n, t in zip(node.field_names, node.types)])

    def visit_table_data(self, node: TableDataType) -> spark_types.DataType:
        return logical_spark_type(node.logical)

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> spark_types.DataType:
        return spark_types.BinaryType()  # the bytes the inner serializer wrote

    def visit_external(self, node: ExternalType, inner) -> spark_types.DataType:
        return inner

    def visit_sorted_map(self, node: SortedMapType, key, value) -> spark_types.DataType:
        return spark_types.MapType(key, value, True)  # in the map's order


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


# value conversion is the same for Spark and the embedded engine: readers.arrow_schema (no pyspark)
from .arrow_schema import NANOS_DROPPED, Converter, ValueConverterVisitor, converter  # noqa: E402

SparkConverterVisitor = ValueConverterVisitor
