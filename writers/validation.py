"""Checks of a bootstrap's sources against the declared types, on the driver, before a Spark job runs.

:class:`SourceTypeVisitor` walks the declared TypeInfo tree together with the Spark type of the column
that will fill it and refuses a column whose values the type's encoder cannot take as they are (a string
for a ``LONG``, a string for a ``LIST<STRING>``: Python would iterate its characters, a struct whose
fields are the declared fields in another order). Spark types are not coerced: cast in a ``sql`` source.

Row-level problems that no schema shows (a number out of an INT's range, a character column holding
"ab") surface from the executors as one :class:`~fstate.savepoint.errors.InvalidArgumentError` line
made by :func:`row_error`, naming the state, the column, the source and a sample value.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from ..savepoint.errors import InvalidArgumentError
from ..savepoint.types import (LONG, EitherType, EnumType, ListType, MapType, NullableType, OpaqueType, PickledType,
                               PojoType, RowType, Scalar, TimeWindowType, TimerType, TtlType, TupleType, TypeInfo,
                               PreOrderTypeVisitor, visit)
from ..savepoint.types.cep import CepType
from ..savepoint.types.logical import LogicalType
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import ExternalType, RawValueDataType, RowDataType, TableDataType

_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_FRACTIONAL = ("FloatType", "DoubleType", "DecimalType")
_STRING = ("StringType", "CharType", "VarcharType")
_TIMESTAMP = ("TimestampType", "TimestampNTZType")
#: what a string column that should hold numbers or times needs; a source whose format is known names
#: its own way instead (bootstrap.source_hint)
CSV_HINT = "CSV: the option inferSchema"
_HINT = f"cast it in a `sql` source ({CSV_HINT})"

#: The Spark type classes whose values each scalar kind's encoder takes, and how to say so.
_SCALAR_COLUMNS: dict[str, tuple[tuple[str, ...], str]] = {
    "Long": (_INTEGRAL, "an integer column (tinyint, smallint, int, bigint)"),
    "Integer": (_INTEGRAL, "an integer column (tinyint, smallint, int, bigint)"),
    "Short": (_INTEGRAL, "an integer column (tinyint, smallint, int, bigint)"),
    "Byte": (_INTEGRAL, "an integer column (tinyint, smallint, int, bigint)"),
    "Double": (_INTEGRAL + _FRACTIONAL, "a numeric column"),
    "Float": (_INTEGRAL + _FRACTIONAL, "a numeric column"),
    "Boolean": (("BooleanType",), "a boolean column"),
    "String": (_STRING, "a string column"),
    "Character": (_STRING, "a string column (one character per value)"),
    "BigDecimal": (_INTEGRAL + ("DecimalType",), "a decimal or integer column"),
    "BigInteger": (_INTEGRAL + ("DecimalType",), "an integer column or a decimal(p, 0)"),
    "byte[]": (("BinaryType",), "a binary column"),
    "LocalDate": (("DateType",), "a date column"),
    "SqlDate": (("DateType",), "a date column"),
    "LocalTime": (("TimeType",), "a time column"),
    "SqlTime": (("TimeType",), "a time column"),
    "LocalDateTime": (_TIMESTAMP, "a timestamp column"),
    "Instant": (_TIMESTAMP, "a timestamp column"),
    "SqlTimestamp": (_TIMESTAMP, "a timestamp column"),
    "Date": (_TIMESTAMP, "a timestamp column"),
}

#: Primitive and String arrays: the kind of their elements.
_ARRAY_ELEMENTS = {"int[]": "Integer", "long[]": "Long", "short[]": "Short", "float[]": "Float",
                   "double[]": "Double", "char[]": "Character", "boolean[]": "Boolean", "String[]": "String"}

#: Table (SQL) LogicalType roots: the scalar kind whose Spark columns they take.
_LOGICAL_KINDS = {
    "CHAR": "String", "VARCHAR": "String", "BINARY": "byte[]", "VARBINARY": "byte[]", "RAW": "byte[]",
    "BOOLEAN": "Boolean", "TINYINT": "Byte", "SMALLINT": "Short", "INTEGER": "Integer", "BIGINT": "Long",
    "INTERVAL_YEAR_MONTH": "Integer", "INTERVAL_DAY_TIME": "Long", "FLOAT": "Float", "DOUBLE": "Double",
    "DECIMAL": "BigDecimal", "DATE": "LocalDate", "TIME_WITHOUT_TIME_ZONE": "LocalTime",
    "TIMESTAMP_WITHOUT_TIME_ZONE": "LocalDateTime", "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "Instant",
}


def _class_name(spark_type) -> str:
    return type(spark_type).__name__


def _spark_name(spark_type) -> str:
    return spark_type.simpleString()


def type_label(t: TypeInfo) -> str:
    """The type string of ``t`` where it has one (what a spec names), else its Flink name."""
    from .spec import TypeNameVisitor

    try:
        return visit(t, TypeNameVisitor())
    except InvalidArgumentError:
        return t.name


class SourceTypeVisitor(PreOrderTypeVisitor[None]):
    """Whether a Spark column of type ``spark_type`` can fill values of the visited TypeInfo; raises
    InvalidArgumentError naming ``where`` (the column, and the field or element inside it) otherwise.
    Types fstate only carries through (pickled, opaque, timers, CEP) take any column. A child (a
    field, element, key or value) is checked against its part of the column: its thunk runs while
    ``spark_type`` and ``where`` are that part's."""

    def __init__(self, spark_type, where: str):
        self.spark_type = spark_type
        self.where = where

    def _fail(self, node: TypeInfo, needs: str) -> None:
        raise InvalidArgumentError(f"{self.where} is {_spark_name(self.spark_type)}, but {type_label(node)} needs "
                                   f"{needs}")

    def _child(self, check: Callable[[], None], spark_type, where: str) -> None:
        """Run ``check`` (a child's thunk) against ``spark_type``, the part of this column at ``where``."""
        outer = self.spark_type, self.where
        self.spark_type, self.where = spark_type, where
        try:
            check()
        finally:
            self.spark_type, self.where = outer

    def _long(self) -> None:
        self._kind(LONG, LONG.kind)

    def _table_data(self, logical: LogicalType) -> None:
        self._logical(_logical_node(logical), logical)

    def _is(self, *class_names: str) -> bool:
        return _class_name(self.spark_type) in class_names

    def _kind(self, node: TypeInfo, kind: str) -> None:
        if kind in _ARRAY_ELEMENTS:
            if not self._is("ArrayType"):
                self._fail(node, "an array column")
            self._kind_of(self.spark_type.elementType, _ARRAY_ELEMENTS[kind], node, f"{self.where}[element]")
            return
        accepted = _SCALAR_COLUMNS.get(kind)
        if accepted is None:  # namespaces, Void, Tuple0: nothing a source fills
            return
        classes, needs = accepted
        if not self._is(*classes):
            self._fail(node, needs + ("" if not self._is(*_STRING) else f": {_HINT}"))
        if kind == "BigInteger" and self._is("DecimalType") and self.spark_type.scale != 0:
            self._fail(node, "a decimal(p, 0) (BigInteger holds no fraction)")

    def _kind_of(self, spark_type, kind: str, node: TypeInfo, where: str) -> None:
        SourceTypeVisitor(spark_type, where)._kind(node, kind)

    def _struct(self, node: TypeInfo, names: tuple[str, ...], children: tuple[Callable[[], None], ...],
                by_name_matters: bool = True) -> None:
        if not self._is("StructType"):
            self._fail(node, f"a struct column of {len(children)} fields")
        fields = self.spark_type.fields
        if len(fields) != len(children):
            self._fail(node, f"a struct of {len(children)} fields")
        given = [f.name for f in fields]
        if by_name_matters and given != list(names) and sorted(given) == sorted(names):
            raise InvalidArgumentError(
                f"{self.where} has the fields {', '.join(given)}, but {type_label(node)} takes them in the order "
                f"{', '.join(names)} (fields are matched by position): reorder them in a `sql` source")
        for name, child, spark_field in zip(names, children, fields):
            self._child(child, spark_field.dataType, f"{self.where}.{spark_field.name}")

    def _array(self, node: TypeInfo, element: Callable[[], None]) -> None:
        if not self._is("ArrayType"):
            self._fail(node, "an array column" + (" (a string is not a list of its characters)"
                                                  if self._is(*_STRING) else ""))
        self._child(element, self.spark_type.elementType, f"{self.where}[element]")

    def _map(self, node: TypeInfo, key: Callable[[], None], value: Callable[[], None]) -> None:
        if self._is("MapType"):
            self._child(key, self.spark_type.keyType, f"{self.where}[key]")
            self._child(value, self.spark_type.valueType, f"{self.where}[value]")
            return
        # an array of (key, value) structs holds the entries too
        element = self.spark_type.elementType if self._is("ArrayType") else None
        if _class_name(element) != "StructType" or len(element.fields) != 2:
            self._fail(node, "a map column (or an array of key/value structs)")
        self._child(key, element.fields[0].dataType, f"{self.where}[key]")
        self._child(value, element.fields[1].dataType, f"{self.where}[value]")

    # -- branches ---------------------------------------------------------------------------------
    def visit_scalar(self, node: Scalar) -> None:
        self._kind(node, node.kind)

    def visit_time_window(self, node: TimeWindowType) -> None:
        self._struct(node, node.field_names, (self._long, self._long))

    def visit_tuple(self, node: TupleType, fields) -> None:
        self._struct(node, node.field_names, fields, by_name_matters=False)

    def visit_row(self, node: RowType, fields) -> None:
        self._struct(node, node.field_names, fields)

    def visit_list(self, node: ListType, element) -> None:
        self._array(node, element)

    visit_array_list = visit_set = visit_generic_array = visit_list

    def visit_map(self, node: MapType, key, value) -> None:
        self._map(node, key, value)

    def visit_nullable(self, node: NullableType, inner) -> None:
        inner()

    def visit_either(self, node: EitherType, fields) -> None:
        self._struct(node, node.field_names, fields)

    def visit_timer(self, node: TimerType, key, namespace) -> None:
        return None  # written from timer columns, checked by check_timer_column

    def visit_ttl(self, node: TtlType, value, timestamp) -> None:
        value()

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> None:
        if node.decodable:
            self._struct(node, node.field_names, fields)

    def visit_enum(self, node: EnumType) -> None:
        if not self._is(*_STRING):
            self._fail(node, f"a string column (one of {', '.join(node.constants)})")

    def visit_pickled(self, node: PickledType) -> None:
        return None  # any Python value pickles

    def visit_opaque(self, node: OpaqueType) -> None:
        return None

    def visit_cep(self, node: CepType, shape) -> None:
        return None

    # table runtime: by the LogicalTypes
    def _logical(self, node: TypeInfo, logical: LogicalType) -> None:
        if not logical.decodable or logical.root == "NULL":
            return
        root = logical.root
        children = [partial(self._table_data, c) for c in logical.children]
        if root == "ROW":
            self._struct(node, logical.field_names, children)
        elif root == "ARRAY":
            self._array(node, children[0])
        elif root == "MAP":
            self._map(node, children[0], children[1])
        elif root == "MULTISET":
            self._map(node, children[0], partial(self._table_data, LogicalType("INTEGER")))
        elif root in _LOGICAL_KINDS:
            self._kind(node, _LOGICAL_KINDS[root])

    def visit_row_data(self, node: RowDataType, fields) -> None:
        if node.decodable:
            self._struct(node, node.field_names, [partial(self._table_data, t) for t in node.types])

    def visit_table_data(self, node: TableDataType) -> None:
        self._logical(node, node.logical)

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> None:
        self._kind(node, "byte[]")

    def visit_external(self, node: ExternalType, inner) -> None:
        inner()

    def visit_sorted_map(self, node: SortedMapType, key, value) -> None:
        self._map(node, key, value)


def _logical_node(logical: LogicalType) -> TableDataType:
    """A LogicalType inside a table type, as a node of its own (for the checks only, never written)."""
    return TableDataType("", 0, b"", logical)


def check_column(t: TypeInfo, fields: dict[str, Any], column: str, what: str) -> None:
    """``column`` of a source with ``fields`` (name → Spark type) can fill values of ``t``."""
    require_column(fields, column, what)
    visit(t, SourceTypeVisitor(fields[column], f"{what}: column '{column}'"))


def require_column(fields: dict[str, Any], column: str, what: str) -> None:
    if column not in fields:
        raise InvalidArgumentError(f"{what}: column '{column}' is not in the source "
                                   f"(columns: {', '.join(fields) or 'none'})")


def check_timer_column(fields: dict[str, Any], column: str, what: str) -> None:
    """A timer column holds epoch milliseconds: an integer or an array of integers."""
    require_column(fields, column, what)
    spark_type = fields[column]
    element = spark_type.elementType if _class_name(spark_type) == "ArrayType" else spark_type
    if _class_name(element) not in _INTEGRAL:
        raise InvalidArgumentError(f"{what}: column '{column}' is {_spark_name(spark_type)}, but timers need "
                                   f"epoch milliseconds: a bigint column or an array<bigint>")


def _sample(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def row_error(what: str, value: Any, cause: BaseException) -> InvalidArgumentError:
    """The one-line error of a value (of a row an executor encodes) that its type cannot hold."""
    detail = str(cause) or type(cause).__name__
    return InvalidArgumentError(f"{what}: cannot write the value {_sample(value)} ({type(value).__name__}): {detail}")
