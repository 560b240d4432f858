"""TypeInfo → Arrow types (a visitor), and the per-value adjustments decoded values need before they
become Spark or Arrow columns (a second visitor). No pyspark here: the embedded engine runs without a JVM.

The Arrow type of a column is the one Spark's own Arrow conversion gives for ``readers.schema``'s Spark
type of the same TypeInfo (``to_arrow_schema(spark_schema, timezone="UTC")``): timestamps are
microseconds (``TIMESTAMP_LTZ``/``Instant``/``Date`` in UTC, ``TIMESTAMP``/``LocalDateTime`` without a
zone), times nanoseconds, decimals 128-bit, maps and structs with Spark's field names and nullability.
So the embedded engine's tables hold exactly the schema and values the Spark path hands Spark.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import warnings
from decimal import Decimal
from typing import Any, Callable

import pyarrow

from ..savepoint.errors import FStateError
from ..savepoint.types import (EitherType, EnumType, ListType, MapType, NullableType, OpaquePickle, OpaqueType,
                               PickledType, PojoType, RowType, Scalar, TimeWindowType, TimerType, TTL_FIELDS, TtlType,
                               TupleType, TypeInfo, TypeVisitor, visit)
from ..savepoint.types.cep import CepType
from ..savepoint.types.logical import LogicalType
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import ExternalType, RawValueDataType, RowDataType, TableDataType
from ..savepoint.types.visitor import MissingVisitorBranchError

from ..savepoint.types.arrow_types import (LOCAL_TIMESTAMP, SCALAR_TYPES, TIME, UTC_TIMESTAMP,
                                           array_type as _array)


def _struct(names, fields) -> pyarrow.DataType:
    return pyarrow.struct([pyarrow.field(name, t, True) for name, t in zip(names, fields)])


class ArrowTypeVisitor(TypeVisitor[pyarrow.DataType]):
    """The Arrow type of a TypeInfo's values (as decoded, after :class:`ValueConverterVisitor`)."""

    def visit_scalar(self, node: Scalar) -> pyarrow.DataType:
        try:
            return SCALAR_TYPES[node.kind]
        except KeyError:
            raise MissingVisitorBranchError(f"ArrowTypeVisitor has no Arrow type for scalar kind {node.kind!r}: "
                                            "add it to savepoint.types.scalars.SCALAR_KINDS") from None

    def visit_time_window(self, node: TimeWindowType) -> pyarrow.DataType:
        return pyarrow.struct([pyarrow.field("start", pyarrow.int64(), False),
                               pyarrow.field("end", pyarrow.int64(), False)])

    def visit_tuple(self, node: TupleType, fields) -> pyarrow.DataType:
        return _struct(node.field_names, fields)

    def visit_row(self, node: RowType, fields) -> pyarrow.DataType:
        return _struct(node.field_names, fields)

    def visit_either(self, node: EitherType, fields) -> pyarrow.DataType:
        return _struct(node.field_names, fields)

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> pyarrow.DataType:
        if not node.decodable:
            return pyarrow.binary()
        return _struct(node.field_names, fields)

    def visit_list(self, node: ListType, element) -> pyarrow.DataType:
        return _array(element, True)

    visit_array_list = visit_set = visit_generic_array = visit_list

    def visit_map(self, node: MapType, key, value) -> pyarrow.DataType:
        return pyarrow.map_(key, pyarrow.field("value", value, True))

    def visit_nullable(self, node: NullableType, inner) -> pyarrow.DataType:
        return inner

    def visit_ttl(self, node: TtlType, value, timestamp) -> pyarrow.DataType:
        if node.timestamped:  # TtlValue: the value and its last access (read --ttl-timestamps)
            return _struct(TTL_FIELDS, (value, timestamp))
        return value

    def visit_enum(self, node: EnumType) -> pyarrow.DataType:
        return pyarrow.string()

    def visit_pickled(self, node: PickledType) -> pyarrow.DataType:
        return pyarrow.binary()  # the pickle bytes (protocol 4) of fstate's runtime

    def visit_timer(self, node: TimerType, key, namespace) -> pyarrow.DataType:
        return pyarrow.struct([pyarrow.field("timestamp", pyarrow.int64(), True),
                               pyarrow.field("key", key, True),
                               pyarrow.field("namespace", namespace, True)])

    def visit_opaque(self, node: OpaqueType) -> pyarrow.DataType:
        return pyarrow.binary()  # the raw value bytes

    # CEP
    def visit_cep(self, node: CepType, shape) -> pyarrow.DataType:
        if not node.fully_decodable:  # e.g. Lockable<Kryo event>: the value is read as raw bytes
            return pyarrow.binary()
        return shape  # structs and lists named after CEP's fields

    # table runtime: Arrow types follow the LogicalTypes
    def visit_row_data(self, node: RowDataType, fields) -> pyarrow.DataType:
        if not node.decodable:
            return pyarrow.binary()
        return pyarrow.struct([pyarrow.field(name, logical_arrow_type(t), _nullable(t))
                               for name, t in zip(node.field_names, node.types)])

    def visit_table_data(self, node: TableDataType) -> pyarrow.DataType:
        return logical_arrow_type(node.logical)

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> pyarrow.DataType:
        return pyarrow.binary()  # the bytes the inner serializer wrote

    def visit_external(self, node: ExternalType, inner) -> pyarrow.DataType:
        return inner

    def visit_sorted_map(self, node: SortedMapType, key, value) -> pyarrow.DataType:
        return pyarrow.map_(key, pyarrow.field("value", value, True))


#: The Arrow type of each LogicalType root without parameters or children.
LOGICAL_TYPES: dict[str, pyarrow.DataType] = {
    "CHAR": pyarrow.string(), "VARCHAR": pyarrow.string(), "BOOLEAN": pyarrow.bool_(), "BINARY": pyarrow.binary(),
    "VARBINARY": pyarrow.binary(), "TINYINT": pyarrow.int8(), "SMALLINT": pyarrow.int16(),
    "INTEGER": pyarrow.int32(), "BIGINT": pyarrow.int64(), "FLOAT": pyarrow.float32(), "DOUBLE": pyarrow.float64(),
    "DATE": pyarrow.date32(), "TIME_WITHOUT_TIME_ZONE": TIME, "TIMESTAMP_WITHOUT_TIME_ZONE": LOCAL_TIMESTAMP,
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE": UTC_TIMESTAMP, "INTERVAL_YEAR_MONTH": pyarrow.int32(),
    "INTERVAL_DAY_TIME": pyarrow.int64(), "RAW": pyarrow.binary(), "NULL": pyarrow.null(),
}


def _nullable(t: LogicalType) -> bool:
    # a processing-time attribute is declared NOT NULL but stored rows hold it unmaterialised (null)
    return t.nullable or t.kind == "PROCTIME"


def logical_arrow_type(t: LogicalType) -> pyarrow.DataType:
    """The Arrow type of a table LogicalType's values (as ``readers.schema.logical_spark_type`` in Arrow)."""
    if t.root == "DECIMAL":
        return pyarrow.decimal128(t.precision, t.scale)
    if t.root == "ARRAY":
        return _array(logical_arrow_type(t.children[0]), t.children[0].nullable)
    if t.root == "MAP":
        return pyarrow.map_(logical_arrow_type(t.children[0]),
                            pyarrow.field("value", logical_arrow_type(t.children[1]), t.children[1].nullable))
    if t.root == "MULTISET":
        return pyarrow.map_(logical_arrow_type(t.children[0]), pyarrow.field("value", pyarrow.int32(), False))
    if t.root in ("ROW", "STRUCTURED_TYPE"):
        return pyarrow.struct([pyarrow.field(name, logical_arrow_type(child), _nullable(child))
                               for name, child in zip(t.field_names, t.children)])
    return LOGICAL_TYPES.get(t.root, pyarrow.binary())  # types fstate does not decode: their bytes


def arrow_type(t: TypeInfo) -> pyarrow.DataType:
    return visit(t, ArrowTypeVisitor())


def arrow_schema(columns) -> pyarrow.Schema:
    """The Arrow schema of a table's columns (name, TypeInfo, nullable)."""
    return pyarrow.schema([pyarrow.field(name, arrow_type(t), nullable) for name, t, nullable in columns])


# ---------------------------------------------------------------------------------------------
# value conversion: only where Python values differ from what Spark and Arrow accept

Converter = Callable[[Any], Any]


def _struct_converter(convs) -> Converter | None:
    if not any(convs):
        return None

    def conv_struct(v):
        if v is None:
            return None
        return tuple(v if c is None or x is None else c(x) for c, x in zip(convs, v))

    return conv_struct


def _list_converter(c: Converter | None) -> Converter | None:
    if c is None:
        return None
    return lambda v: None if v is None else [None if x is None else c(x) for x in v]


def _map_converter(ck: Converter | None, cv: Converter | None) -> Converter | None:
    if ck is None and cv is None:
        return None
    ck = ck or (lambda x: x)
    cv = cv or (lambda x: x)
    # entries keep their order (a sorted map's is its comparator's)
    return lambda v: None if v is None else {ck(k): (None if x is None else cv(x)) for k, x in v.items()}


class ValueConverterVisitor(TypeVisitor["Converter | None"]):
    """A function fixing up a decoded value for Spark and Arrow, or None when the value is already fine."""

    def visit_scalar(self, node: Scalar) -> Converter | None:
        if node.kind == "BigDecimal":
            return _check_decimal(18, "BigDecimal")
        if node.kind == "BigInteger":
            return _bigint_to_decimal
        return None

    def visit_time_window(self, node: TimeWindowType) -> Converter | None:
        return None

    def visit_tuple(self, node: TupleType, fields) -> Converter | None:
        return _struct_converter(fields)

    def visit_row(self, node: RowType, fields) -> Converter | None:
        return _struct_converter(fields)

    def visit_either(self, node: EitherType, fields) -> Converter | None:
        return _struct_converter(fields)

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> Converter | None:
        if not node.decodable:
            return None
        return _struct_converter(fields)

    def visit_list(self, node: ListType, element) -> Converter | None:
        return _list_converter(element)

    visit_array_list = visit_set = visit_generic_array = visit_list

    def visit_map(self, node: MapType, key, value) -> Converter | None:
        return _map_converter(key, value)

    def visit_nullable(self, node: NullableType, inner) -> Converter | None:
        return inner

    def visit_ttl(self, node: TtlType, value, timestamp) -> Converter | None:
        if node.timestamped:
            return _struct_converter((value, timestamp))
        return value

    def visit_pickled(self, node: PickledType) -> Converter | None:
        return _repickle

    def visit_enum(self, node: EnumType) -> Converter | None:
        return None

    def visit_timer(self, node: TimerType, key, namespace) -> Converter | None:
        return None

    def visit_opaque(self, node: OpaqueType) -> Converter | None:
        return None

    # CEP
    def visit_cep(self, node: CepType, shape) -> Converter | None:
        return shape if node.fully_decodable else None

    # table runtime: decoded values are what Spark takes (tuples, str, Decimal of the type's scale, ...)
    def visit_row_data(self, node: RowDataType, fields) -> Converter | None:
        return _nano_timestamp_converter(node.types or ())

    def visit_table_data(self, node: TableDataType) -> Converter | None:
        return _nano_timestamp_converter((node.logical,))

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> Converter | None:
        return None

    def visit_external(self, node: ExternalType, inner) -> Converter | None:
        return inner

    def visit_sorted_map(self, node: SortedMapType, key, value) -> Converter | None:
        return _map_converter(key, value)


def converter(t: TypeInfo) -> Converter | None:
    """A function fixing up a decoded value for Spark, or None when the value is already fine."""
    return visit(t, ValueConverterVisitor())


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
