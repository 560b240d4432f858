"""Flink SQL type names ↔ :class:`~fstate.savepoint.types.logical.LogicalType`.

:func:`parse_sql_type` reads a type in Flink SQL syntax: ``BOOLEAN``, ``TINYINT``, ``SMALLINT``,
``INT``/``INTEGER``, ``BIGINT``, ``FLOAT``, ``DOUBLE``, ``DECIMAL(p, s)`` (also ``DEC``/``NUMERIC``;
default (10, 0)), ``CHAR(n)``, ``VARCHAR(n)``, ``STRING``, ``BINARY(n)``, ``VARBINARY(n)``, ``BYTES``,
``DATE``, ``TIME(p)``, ``TIMESTAMP(p)`` (``[WITHOUT TIME ZONE]``), ``TIMESTAMP_LTZ(p)`` (``TIMESTAMP(p)
WITH LOCAL TIME ZONE``), ``ARRAY<T>``, ``MAP<K, V>``, ``MULTISET<T>``, ``ROW<name T, ...>`` (also
``ROW(name T, ...)``, names may be back-quoted), ``RAW('org.apache.flink.table.api.dataview.MapView')``
(an aggregation's data view placeholder); each optionally followed by ``*ROWTIME*`` / ``*PROCTIME*``
(timestamps) and ``NOT NULL`` / ``NULL``. Defaults follow Flink's (CHAR/VARCHAR/BINARY/VARBINARY
length 1, TIME precision 0, TIMESTAMP / TIMESTAMP_LTZ precision 6).

:func:`sql_type_name` is the inverse: the canonical name, which :func:`parse_sql_type` reads back
as an equal type.

:func:`parse_external_type` reads the type of an ``ExternalSerializer`` (a Flink ``DataType``: a type with
its conversion classes), as the key / value serializers of an aggregation's data-view state have them:
``EXTERNAL<T>`` (Flink's default conversion classes, e.g. ``java.lang.Long`` for BIGINT),
``EXTERNAL<T, INTERNAL>`` (the internal data structures, e.g. ``StringData`` for STRING: the keys of a
COUNT(DISTINCT) view) or ``EXTERNAL<T, 'java.lang.Long'>`` (that conversion class for ``T`` itself).
"""

from __future__ import annotations

import re

from ..savepoint.errors import InvalidArgumentError, UnsupportedSerializerError
from ..savepoint.types.data_types import DataType, default_data_type, internal_data_type
from ..savepoint.types.logical import LogicalType

MAX_LENGTH = 0x7FFFFFFF

_TOKEN = re.compile(r"\s*(`(?:``|[^`])*`|'(?:''|[^'])*'|\*[A-Za-z]+\*|[A-Za-z_][A-Za-z0-9_]*|\d+|\S)")

_SIMPLE = {"BOOLEAN": "BOOLEAN", "TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INT": "INTEGER",
           "INTEGER": "INTEGER", "BIGINT": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "DATE": "DATE"}
_NAMES = {v: k for k, v in _SIMPLE.items() if k != "INTEGER"}
_LENGTHS = {"CHAR": "CHAR", "VARCHAR": "VARCHAR", "BINARY": "BINARY", "VARBINARY": "VARBINARY"}
_KINDS = {"*ROWTIME*": "ROWTIME", "*PROCTIME*": "PROCTIME"}
_TIMESTAMPS = ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text)]
        self.i = 0

    def fail(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"SQL type '{self.text}': {message}")

    def peek(self, ahead: int = 0) -> str | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def peek_word(self, ahead: int = 0) -> str:
        return (self.peek(ahead) or "").upper()

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise self.fail("unexpected end")
        if expected is not None and tok.upper() != expected:
            raise self.fail(f"expected '{expected}', found '{tok}'")
        self.i += 1
        return tok

    def number(self) -> int:
        tok = self.take()
        if not tok.isdigit():
            raise self.fail(f"expected a number, found '{tok}'")
        return int(tok)

    def parameters(self, *defaults: int) -> list[int]:
        """``(a[, b])`` if present, else the defaults."""
        if self.peek() != "(":
            return list(defaults)
        self.take("(")
        values = [self.number()]
        while self.peek() == "," and len(values) < len(defaults):
            self.take(",")
            values.append(self.number())
        self.take(")")
        return values + list(defaults[len(values):])

    def parse(self) -> LogicalType:
        t = self.type()
        if self.peek() is not None:
            raise self.fail(f"unexpected '{self.peek()}'")
        return t

    def external(self) -> DataType:
        """``EXTERNAL<T[, INTERNAL | 'conversion.Class']>``."""
        self.take("EXTERNAL")
        self.take("<")
        t = self.type()
        conversion = None
        if self.peek() == ",":
            self.take(",")
            conversion = self.take()
            if conversion.upper() != "INTERNAL" and not conversion.startswith("'"):
                raise self.fail(f"expected INTERNAL or a quoted conversion class, found '{conversion}'")
        self.take(">")
        if self.peek() is not None:
            raise self.fail(f"unexpected '{self.peek()}'")
        try:
            if conversion is None:
                return default_data_type(t)
            if conversion.upper() == "INTERNAL":
                return internal_data_type(t)
            return default_data_type(t).bridged_to(conversion[1:-1].replace("''", "'"))
        except UnsupportedSerializerError as e:
            raise self.fail(str(e)) from None

    def type(self) -> LogicalType:
        t = self.bare()
        if self.peek() in _KINDS:
            if t.root not in _TIMESTAMPS:
                raise self.fail(f"{self.peek()} applies to timestamps only")
            t = LogicalType(t.root, t.nullable, precision=t.precision, kind=_KINDS[self.take()])
        if self.peek_word() == "NOT" and self.peek_word(1) == "NULL":
            self.take()
            self.take()
            return LogicalType(**{**_fields(t), "nullable": False})
        if self.peek_word() == "NULL":
            self.take()
        return t

    def bare(self) -> LogicalType:
        word = self.take().upper()
        if word in _SIMPLE:
            if word == "DOUBLE" and self.peek_word() == "PRECISION":
                self.take()
            return LogicalType(_SIMPLE[word])
        if word in _LENGTHS:
            (length,) = self.parameters(1)
            return LogicalType(_LENGTHS[word], length=length)
        if word == "STRING":
            return LogicalType("VARCHAR", length=MAX_LENGTH)
        if word == "BYTES":
            return LogicalType("VARBINARY", length=MAX_LENGTH)
        if word in ("DECIMAL", "DEC", "NUMERIC"):
            precision, scale = self.parameters(10, 0)
            return LogicalType("DECIMAL", precision=precision, scale=scale)
        if word == "TIME":
            (precision,) = self.parameters(0)
            self.time_zone(False)
            return LogicalType("TIME_WITHOUT_TIME_ZONE", precision=precision)
        if word == "TIMESTAMP":
            (precision,) = self.parameters(6)
            local = self.time_zone(True)
            root = _TIMESTAMPS[1] if local else _TIMESTAMPS[0]
            return LogicalType(root, precision=precision, kind="REGULAR")
        if word == "TIMESTAMP_LTZ":
            (precision,) = self.parameters(6)
            return LogicalType(_TIMESTAMPS[1], precision=precision, kind="REGULAR")
        if word in ("ARRAY", "MULTISET"):
            self.take("<")
            element = self.type()
            self.take(">")
            return LogicalType(word, children=(element,))
        if word == "MAP":
            self.take("<")
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return LogicalType("MAP", children=(key, value))
        if word == "ROW":
            return self.row()
        if word == "RAW":
            self.take("(")
            cls = self.take()
            if not cls.startswith("'"):
                raise self.fail("RAW needs a quoted class name")
            self.take(")")
            return LogicalType("RAW", raw_class=cls[1:-1].replace("''", "'"))
        raise self.fail(f"unknown type '{word}'")

    def time_zone(self, local_allowed: bool) -> bool:
        """``WITHOUT TIME ZONE`` (False) or ``WITH LOCAL TIME ZONE`` (True) if present."""
        if self.peek_word() == "WITHOUT":
            for w in ("WITHOUT", "TIME", "ZONE"):
                self.take(w)
            return False
        if self.peek_word() == "WITH" and local_allowed:
            for w in ("WITH", "LOCAL", "TIME", "ZONE"):
                self.take(w)
            return True
        return False

    def row(self) -> LogicalType:
        close = {"<": ">", "(": ")"}.get(self.peek() or "")
        if close is None:
            raise self.fail("ROW needs '<' or '('")
        self.take()
        names, types = [], []
        while True:
            name = self.take()
            if name.startswith("`"):
                name = name[1:-1].replace("``", "`")
            elif not _IDENTIFIER.match(name):
                raise self.fail(f"bad field name '{name}'")
            names.append(name)
            types.append(self.type())
            if self.peek() != ",":
                break
            self.take(",")
        self.take(close)
        if len(set(names)) != len(names):
            raise self.fail("duplicate field names")
        return LogicalType("ROW", children=tuple(types), field_names=tuple(names))


def _fields(t: LogicalType) -> dict:
    return dict(root=t.root, nullable=t.nullable, length=t.length, precision=t.precision, scale=t.scale, kind=t.kind,
                children=t.children, field_names=t.field_names, raw_class=t.raw_class)


def parse_sql_type(text: str) -> LogicalType:
    """A LogicalType from a type in Flink SQL syntax (see the module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(f"not an SQL type: {text!r}")
    return _Parser(text).parse()


def is_external_type(text: str) -> bool:
    """Whether ``text`` names an ``ExternalSerializer``'s DataType (``EXTERNAL<...>``)."""
    return isinstance(text, str) and text.lstrip()[:8].upper() == "EXTERNAL" and text.lstrip()[8:].lstrip()[:1] == "<"


def parse_external_type(text: str) -> DataType:
    """A DataType from ``EXTERNAL<T>``, ``EXTERNAL<T, INTERNAL>`` or ``EXTERNAL<T, 'conversion.Class'>``."""
    if not is_external_type(text):
        raise InvalidArgumentError(f"not an EXTERNAL<...> type: {text!r}")
    return _Parser(text).external()


def _quote(name: str) -> str:
    return name if _IDENTIFIER.match(name) and name.upper() not in ("NOT", "NULL") else \
        "`" + name.replace("`", "``") + "`"


def sql_type_name(t: LogicalType) -> str:
    """The canonical Flink SQL name of ``t`` (what :func:`parse_sql_type` reads back)."""
    root = t.root
    if root in _NAMES:
        text = _NAMES[root]
    elif root == "VARCHAR" and t.length == MAX_LENGTH:
        text = "STRING"
    elif root == "VARBINARY" and t.length == MAX_LENGTH:
        text = "BYTES"
    elif root in _LENGTHS:
        text = f"{root}({t.length})"
    elif root == "DECIMAL":
        text = f"DECIMAL({t.precision}, {t.scale})"
    elif root == "TIME_WITHOUT_TIME_ZONE":
        text = f"TIME({t.precision})"
    elif root in _TIMESTAMPS:
        text = f"{'TIMESTAMP' if root == _TIMESTAMPS[0] else 'TIMESTAMP_LTZ'}({t.precision})"
        if t.kind and t.kind != "REGULAR":
            text += f" *{t.kind}*"
    elif root in ("ARRAY", "MULTISET"):
        text = f"{root}<{sql_type_name(t.children[0])}>"
    elif root == "MAP":
        text = f"MAP<{sql_type_name(t.children[0])}, {sql_type_name(t.children[1])}>"
    elif root == "ROW":
        text = "ROW<" + ", ".join(f"{_quote(n)} {sql_type_name(c)}" for n, c in zip(t.field_names, t.children)) + ">"
    elif root == "RAW" and t.raw_class:
        text = "RAW('" + t.raw_class.replace("'", "''") + "')"
    else:
        raise InvalidArgumentError(f"the table type {t.name} has no SQL type name fstate writes")
    return text if t.nullable else text + " NOT NULL"
