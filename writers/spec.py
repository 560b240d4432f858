"""Flink types for writing: parsed from type strings / YAML, or inferred from Spark schemas.

Type strings: ``LONG``, ``INT``, ``SHORT``, ``BYTE``, ``BOOLEAN``, ``DOUBLE``, ``FLOAT``, ``CHAR``,
``STRING``, ``BYTES``, ``DECIMAL`` (BigDecimal), ``BIGINT`` (BigInteger), ``DATE`` (LocalDate),
``TIME`` (LocalTime), ``TIMESTAMP_NTZ`` (LocalDateTime), ``INSTANT``, ``SQL_DATE``, ``SQL_TIME``,
``SQL_TIMESTAMP``, ``INT[]``/``LONG[]``/… primitive arrays, ``STRING[]``, and composites
``LIST<T>``, ``MAP<K, V>``, ``TUPLE<T1, …>``, ``ROW<name T, …>``, ``NULLABLE<T>``,
``EITHER<L, R>``, ``ENUM<com.acme.Color: RED, GREEN>``, ``POJO<com.acme.Order: amount DECIMAL, …>``
(POJO fields are sorted by name, as Flink sorts them).

Flink SQL / Table API state (the table runtime's serializers) is named by ``SQL`` and a type in Flink
SQL syntax (:mod:`.sql_types`): ``SQL ROW<k STRING NOT NULL>`` (a ``RowData`` key or value, e.g. the
grouping key or the accumulators of a GROUP BY), ``SQL DECIMAL(10, 2)``, ``SQL TIMESTAMP_LTZ(3)``,
``SQL ARRAY<INT>``, ``SQL MAP<STRING, BIGINT>``; ``SQL EXTERNAL<T[, INTERNAL | 'conversion.Class']>`` is an
``ExternalSerializer`` (the key / value serializers of an aggregation's data-view state, e.g. the map state
``MAP<SQL EXTERNAL<STRING, INTERNAL>, SQL EXTERNAL<BIGINT NOT NULL>>`` of a COUNT(DISTINCT)). Outside ``SQL`` the names keep their DataStream
meaning (``BIGINT`` there is a ``java.math.BigInteger``, ``ROW<...>`` a ``Row`` of ``RowTypeInfo``).

:func:`type_name` is the inverse (a :class:`TypeNameVisitor`); both use one name table,
:data:`SCALAR_NAMES`, which :func:`from_spark` uses too.
"""

from __future__ import annotations

import re
from typing import Any

from ..savepoint.errors import InvalidArgumentError, UnsupportedSerializerError
from ..savepoint.types import (SCALAR_KINDS, ArrayListType, EitherType, EnumType, GenericArrayType,
                               ListType, MapType, NullableType, OpaqueType, PickledType, PojoType, RowType, Scalar,
                               SetType, TimeWindowType, TimerType, TtlType, TupleType, TypeInfo, PreOrderTypeVisitor,
                               scalar, visit)
from ..savepoint.types.cep import CepType
from ..savepoint.types.logical import LogicalType
from ..savepoint.types.table_serializers import table_serializer
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import ExternalType, RawValueDataType, RowDataType, TableDataType
from ..savepoint.types.data_types import external_serializer
from .sql_types import is_external_type, parse_external_type, parse_sql_type, sql_type_name

#: the prefix of a type string in Flink SQL syntax (a table runtime serializer)
SQL_PREFIX = "SQL "

#: why no type string names a SortedMapSerializer (the sorted-map state of a retractable Top-N)
SORTED_MAP_REFUSED = (
    "a sorted map (SortedMapSerializer, the 'sorted-map' state of a Top-N over an updating input) has no type "
    "string: its serializer snapshot holds the comparator Flink generated for the query (Java-serialized code), "
    "which fstate cannot build. Such a state can be carried over or rewritten with the snapshot it was read with, "
    "not created from a type")

#: The scalar type names (the scalar registry's ``spec`` names): the canonical name (what
#: :func:`type_name` writes) first, then aliases.
SCALAR_NAMES: tuple[tuple[Scalar, tuple[str, ...]], ...] = tuple(
    (scalar(kind), entry.spec) for kind, entry in SCALAR_KINDS.items() if entry.spec)

_NAMES: dict[str, Scalar] = {name: t for t, names in SCALAR_NAMES for name in names}
_CANONICAL: dict[Scalar, str] = {t: names[0] for t, names in SCALAR_NAMES}

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.$]*(?:\[\])?|<|>|,|:|\S)")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        matches = list(_TOKEN.finditer(text))
        self.tokens = [m.group(1) for m in matches]
        self.starts = [m.start(1) for m in matches]
        self.i = 0

    def fail(self, msg: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"type '{self.text}': {msg}")

    def sql(self) -> TypeInfo:
        """``SQL <type>`` nested in a composite (e.g. ``MAP<SQL STRING, SQL BIGINT>``): up to the next
        ``,`` or ``>`` outside brackets and quotes."""
        start = self.starts[self.i]
        depth, quote, end = 0, None, start
        while end < len(self.text):
            ch = self.text[end]
            if quote:
                quote = None if ch == quote else quote
            elif ch in "'`":
                quote = ch
            elif ch in "<(":
                depth += 1
            elif ch in ")>" and depth:
                depth -= 1
            elif ch in ",>" and not depth:
                break
            end += 1
        while self.i < len(self.tokens) and self.starts[self.i] < end:
            self.i += 1
        return sql_type(self.text[start + len(SQL_PREFIX.strip()):end])

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise self.fail("unexpected end")
        if expected is not None and tok != expected:
            raise self.fail(f"expected '{expected}', found '{tok}'")
        self.i += 1
        return tok

    def parse(self) -> TypeInfo:
        t = self.type()
        if self.peek() is not None:
            raise self.fail(f"unexpected '{self.peek()}'")
        return t

    def _list(self, item) -> list:
        items = [item()]
        while self.peek() == ",":
            self.take(",")
            items.append(item())
        return items

    def _field(self):
        name = self.take()
        return name, self.type()

    def type(self) -> TypeInfo:
        if (self.peek() or "").upper() == SQL_PREFIX.strip() and self.i + 1 < len(self.tokens):
            return self.sql()
        name = self.take()
        upper = name.upper()
        if upper == "SORTED_MAP":
            raise self.fail(SORTED_MAP_REFUSED)
        if self.peek() != "<":
            if upper in _NAMES:
                return _NAMES[upper]
            raise self.fail(f"unknown type '{name}'")
        self.take("<")
        if upper == "LIST" or upper == "ARRAY":
            t = ListType(self.type())
        elif upper == "MAP":
            k = self.type()
            self.take(",")
            t = MapType(k, self.type())
        elif upper == "TUPLE":
            t = TupleType(tuple(self._list(self.type)))
        elif upper == "ROW":
            fields = self._list(self._field)
            t = RowType(tuple(f[1] for f in fields), tuple(f[0] for f in fields))
        elif upper == "NULLABLE":
            inner = self.type()
            t = NullableType(inner, inner.length if inner.length > 0 else 0)
        elif upper == "EITHER":
            left = self.type()
            self.take(",")
            t = EitherType(left, self.type())
        elif upper == "ENUM":
            cls = self.take()
            self.take(":")
            t = EnumType(cls, tuple(self._list(self.take)))
        elif upper == "POJO":
            cls = self.take()
            self.take(":")
            fields = sorted(self._list(self._field))
            t = PojoType(cls, [(n, cls, ft) for n, ft in fields])
        else:
            raise self.fail(f"unknown composite type '{name}'")
        self.take(">")
        return t


def parse_type(spec: Any) -> TypeInfo:
    """A type string (or YAML mapping for POJOs) → TypeInfo."""
    if isinstance(spec, TypeInfo):
        return spec
    if isinstance(spec, dict):
        if "pojo" in spec or "class" in spec:
            cls = spec.get("pojo") or spec.get("class")
            fields = spec.get("fields") or {}
            if not isinstance(fields, dict) or not fields:
                raise InvalidArgumentError(f"POJO {cls}: 'fields' must map field names to types")
            return PojoType(cls, [(n, cls, parse_type(fields[n])) for n in sorted(fields)])
        raise InvalidArgumentError(f"cannot read a type from {spec!r}")
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError(f"not a type: {spec!r}")
    text = spec.strip()
    if text[:len(SQL_PREFIX)].upper() == SQL_PREFIX:
        return sql_type(text[len(SQL_PREFIX):])
    return _Parser(spec).parse()


def sql_type(text: str) -> TypeInfo:
    """The table runtime's serializer of a type in Flink SQL syntax (``ROW<k STRING>`` → RowData;
    ``EXTERNAL<...>`` → an ExternalSerializer)."""
    if text.split("<", 1)[0].strip().upper() == "SORTED_MAP":
        raise InvalidArgumentError(f"SQL type '{text}': {SORTED_MAP_REFUSED}")
    try:
        if is_external_type(text):
            return external_serializer(parse_external_type(text))
        return table_serializer(parse_sql_type(text))
    except UnsupportedSerializerError as e:
        raise InvalidArgumentError(f"SQL type '{text}': {e}") from None


# ---------------------------------------------------------------------------------------------
# to type strings


class TypeNameVisitor(PreOrderTypeVisitor[str]):
    """The type string of a TypeInfo (what :func:`parse_type` reads); InvalidArgumentError for types
    that have none (fstate reads them, but a write spec cannot name them)."""

    @staticmethod
    def _none(node: TypeInfo) -> str:
        raise InvalidArgumentError(f"type {node.name} has no type string (write specs cannot name it)")

    def visit_scalar(self, node: Scalar) -> str:
        name = _CANONICAL.get(node)
        return self._none(node) if name is None else name

    def visit_tuple(self, node: TupleType, fields) -> str:
        return "TUPLE<" + ", ".join(field() for field in fields) + ">"

    def visit_row(self, node: RowType, fields) -> str:
        return "ROW<" + ", ".join(f"{n} {field()}" for n, field in zip(node.field_names, fields)) + ">"

    def visit_list(self, node: ListType, element) -> str:
        return f"LIST<{element()}>"

    def visit_map(self, node: MapType, key, value) -> str:
        return f"MAP<{key()}, {value()}>"

    def visit_nullable(self, node: NullableType, inner) -> str:
        return f"NULLABLE<{inner()}>"

    def visit_either(self, node: EitherType, fields) -> str:
        left, right = fields
        return f"EITHER<{left()}, {right()}>"

    def visit_enum(self, node: EnumType) -> str:
        return f"ENUM<{node.class_name}: {', '.join(node.constants)}>"

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> str:
        if not node.decodable:
            return self._none(node)
        names = ", ".join(f"{n} {field()}" for n, field in zip(node.field_names, fields))
        return f"POJO<{node.class_name}: {names}>"

    def visit_time_window(self, node: TimeWindowType) -> str:
        return self._none(node)

    def visit_array_list(self, node: ArrayListType, element) -> str:
        return self._none(node)

    def visit_set(self, node: SetType, element) -> str:
        return self._none(node)

    def visit_generic_array(self, node: GenericArrayType, element) -> str:
        return self._none(node)

    def visit_timer(self, node: TimerType, key, namespace) -> str:
        return self._none(node)

    def visit_ttl(self, node: TtlType, value, timestamp) -> str:
        return self._none(node)

    def visit_pickled(self, node: PickledType) -> str:
        return self._none(node)

    def visit_opaque(self, node: OpaqueType) -> str:
        return self._none(node)

    # CEP
    def visit_cep(self, node: CepType, shape) -> str:
        return self._none(node)

    # table runtime: named by their LogicalTypes in Flink SQL syntax ("SQL ROW<f0 STRING, f1 BIGINT>")
    def _sql(self, node: TypeInfo, logical: LogicalType) -> str:
        try:
            return SQL_PREFIX + sql_type_name(logical)
        except InvalidArgumentError:
            return self._none(node)

    def visit_row_data(self, node: RowDataType, fields) -> str:
        if node.types is None:  # BinaryRowDataSerializer: no field types
            return self._none(node)
        return self._sql(node, LogicalType("ROW", children=node.types, field_names=node.field_names))

    def visit_table_data(self, node: TableDataType) -> str:
        return self._sql(node, node.logical)

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> str:  # its class is in the enclosing row's type
        return self._none(node)

    def visit_external(self, node: ExternalType, inner) -> str:
        return self._none(node)

    def visit_sorted_map(self, node: SortedMapType, key, value) -> str:
        raise InvalidArgumentError(f"type {node.name}: {SORTED_MAP_REFUSED}")


def type_name(t: TypeInfo) -> str:
    """The type string :func:`parse_type` reads back as exactly ``t``."""
    text = visit(t, TypeNameVisitor())
    if parse_type(text) != t:  # e.g. a custom tuple class, a Row without row kinds, unsorted POJO fields
        raise InvalidArgumentError(f"type {t.name} has no exact type string (the nearest is {text})")
    return text


# ---------------------------------------------------------------------------------------------
# from Spark types

#: Spark atomic types → type names (checked in this order).
_SPARK_NAMES = (
    ("StringType", "STRING"), ("LongType", "LONG"), ("IntegerType", "INT"), ("ShortType", "SHORT"),
    ("ByteType", "BYTE"), ("BooleanType", "BOOLEAN"), ("DoubleType", "DOUBLE"), ("FloatType", "FLOAT"),
    ("BinaryType", "BYTES"), ("DateType", "DATE"), ("TimestampNTZType", "TIMESTAMP_NTZ"), ("TimestampType", "INSTANT"),
)


def from_spark(dt) -> TypeInfo:
    """The natural Flink type of a Spark column type (pyspark's, or the embedded engine's of the same
    class names: writers/column_types.py)."""
    kind = type(dt).__name__
    for class_name, type_string in _SPARK_NAMES:
        if kind == class_name:
            return _NAMES[type_string]
    if kind == "DecimalType":
        return _NAMES["DECIMAL" if dt.scale > 0 else "BIGINT"]
    if kind == "ArrayType":
        return ListType(from_spark(dt.elementType))
    if kind == "MapType":
        return MapType(from_spark(dt.keyType), from_spark(dt.valueType))
    if kind == "StructType":
        return RowType(tuple(from_spark(f.dataType) for f in dt.fields), tuple(f.name for f in dt.fields))
    raise InvalidArgumentError(f"no Flink type for Spark type {dt.simpleString()}; give the type explicitly")
