"""Flink types for writing: parsed from type strings / YAML, or inferred from Spark schemas.

Type strings: ``LONG``, ``INT``, ``SHORT``, ``BYTE``, ``BOOLEAN``, ``DOUBLE``, ``FLOAT``, ``CHAR``,
``STRING``, ``BYTES``, ``DECIMAL`` (BigDecimal), ``BIGINT`` (BigInteger), ``DATE`` (LocalDate),
``TIME`` (LocalTime), ``TIMESTAMP_NTZ`` (LocalDateTime), ``INSTANT``, ``SQL_DATE``, ``SQL_TIME``,
``SQL_TIMESTAMP``, ``INT[]``/``LONG[]``/… primitive arrays, ``STRING[]``, and composites
``LIST<T>``, ``MAP<K, V>``, ``TUPLE<T1, …>``, ``ROW<name T, …>``, ``NULLABLE<T>``,
``EITHER<L, R>``, ``ENUM<com.acme.Color: RED, GREEN>``, ``POJO<com.acme.Order: amount DECIMAL, …>``
(POJO fields are sorted by name, as Flink sorts them).
"""

from __future__ import annotations

import re
from typing import Any

from ..savepoint.errors import InvalidArgumentError
from ..savepoint.types import typeinfo as T

_NAMES: dict[str, T.TypeInfo] = {
    "LONG": T.LONG, "BIGINT_JAVA_LONG": T.LONG, "INT": T.INT, "INTEGER": T.INT, "SHORT": T.SHORT,
    "SMALLINT": T.SHORT, "BYTE": T.BYTE, "TINYINT": T.BYTE, "BOOLEAN": T.BOOLEAN, "BOOL": T.BOOLEAN,
    "DOUBLE": T.DOUBLE, "FLOAT": T.FLOAT, "CHAR": T.CHAR, "STRING": T.STRING, "BYTES": T.BYTES,
    "BYTE[]": T.BYTES, "BINARY": T.BYTES, "DECIMAL": T.BIG_DECIMAL, "BIG_DEC": T.BIG_DECIMAL,
    "BIGINT": T.BIG_INTEGER, "BIG_INT": T.BIG_INTEGER, "DATE": T.LOCAL_DATE, "LOCAL_DATE": T.LOCAL_DATE,
    "TIME": T.LOCAL_TIME, "LOCAL_TIME": T.LOCAL_TIME, "TIMESTAMP_NTZ": T.LOCAL_DATE_TIME,
    "LOCAL_DATE_TIME": T.LOCAL_DATE_TIME, "INSTANT": T.INSTANT, "TIMESTAMP": T.INSTANT,
    "SQL_DATE": T.SQL_DATE, "SQL_TIME": T.SQL_TIME, "SQL_TIMESTAMP": T.SQL_TIMESTAMP,
    "INT[]": T.scalar("int[]"), "LONG[]": T.scalar("long[]"), "SHORT[]": T.scalar("short[]"),
    "FLOAT[]": T.scalar("float[]"), "DOUBLE[]": T.scalar("double[]"), "CHAR[]": T.scalar("char[]"),
    "BOOLEAN[]": T.scalar("boolean[]"), "STRING[]": T.scalar("String[]"),
}

_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.$]*(?:\[\])?|<|>|,|:|\S)")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text)]
        self.i = 0

    def fail(self, msg: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"type '{self.text}': {msg}")

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

    def parse(self) -> T.TypeInfo:
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

    def type(self) -> T.TypeInfo:
        name = self.take()
        upper = name.upper()
        if self.peek() != "<":
            if upper in _NAMES:
                return _NAMES[upper]
            raise self.fail(f"unknown type '{name}'")
        self.take("<")
        if upper == "LIST" or upper == "ARRAY":
            t = T.ListType(self.type())
        elif upper == "MAP":
            k = self.type()
            self.take(",")
            t = T.MapType(k, self.type())
        elif upper == "TUPLE":
            t = T.TupleType(tuple(self._list(self.type)))
        elif upper == "ROW":
            fields = self._list(self._field)
            t = T.RowType(tuple(f[1] for f in fields), tuple(f[0] for f in fields))
        elif upper == "NULLABLE":
            inner = self.type()
            t = T.NullableType(inner, inner.length if inner.length > 0 else 0)
        elif upper == "EITHER":
            left = self.type()
            self.take(",")
            t = T.EitherType(left, self.type())
        elif upper == "ENUM":
            cls = self.take()
            self.take(":")
            t = T.EnumType(cls, tuple(self._list(self.take)))
        elif upper == "POJO":
            cls = self.take()
            self.take(":")
            fields = sorted(self._list(self._field))
            t = T.PojoType(cls, [(n, cls, ft) for n, ft in fields])
        else:
            raise self.fail(f"unknown composite type '{name}'")
        self.take(">")
        return t


def parse_type(spec: Any) -> T.TypeInfo:
    """A type string (or YAML mapping for POJOs) → TypeInfo."""
    if isinstance(spec, T.TypeInfo):
        return spec
    if isinstance(spec, dict):
        if "pojo" in spec or "class" in spec:
            cls = spec.get("pojo") or spec.get("class")
            fields = spec.get("fields") or {}
            if not isinstance(fields, dict) or not fields:
                raise InvalidArgumentError(f"POJO {cls}: 'fields' must map field names to types")
            return T.PojoType(cls, [(n, cls, parse_type(fields[n])) for n in sorted(fields)])
        raise InvalidArgumentError(f"cannot read a type from {spec!r}")
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError(f"not a type: {spec!r}")
    return _Parser(spec).parse()


# ---------------------------------------------------------------------------------------------
# from Spark types


def from_spark(dt) -> T.TypeInfo:
    """The natural Flink type of a Spark column type."""
    from pyspark.sql import types as st

    if isinstance(dt, st.StringType):
        return T.STRING
    if isinstance(dt, st.LongType):
        return T.LONG
    if isinstance(dt, st.IntegerType):
        return T.INT
    if isinstance(dt, st.ShortType):
        return T.SHORT
    if isinstance(dt, st.ByteType):
        return T.BYTE
    if isinstance(dt, st.BooleanType):
        return T.BOOLEAN
    if isinstance(dt, st.DoubleType):
        return T.DOUBLE
    if isinstance(dt, st.FloatType):
        return T.FLOAT
    if isinstance(dt, st.BinaryType):
        return T.BYTES
    if isinstance(dt, st.DecimalType):
        return T.BIG_DECIMAL if dt.scale > 0 else T.BIG_INTEGER
    if isinstance(dt, st.DateType):
        return T.LOCAL_DATE
    if isinstance(dt, st.TimestampNTZType):
        return T.LOCAL_DATE_TIME
    if isinstance(dt, st.TimestampType):
        return T.INSTANT
    if isinstance(dt, st.ArrayType):
        return T.ListType(from_spark(dt.elementType))
    if isinstance(dt, st.MapType):
        return T.MapType(from_spark(dt.keyType), from_spark(dt.valueType))
    if isinstance(dt, st.StructType):
        return T.RowType(tuple(from_spark(f.dataType) for f in dt.fields), tuple(f.name for f in dt.fields))
    raise InvalidArgumentError(f"no Flink type for Spark type {dt.simpleString()}; give the type explicitly")
