"""Scalar types (SimpleTypeSerializerSnapshot: empty payload at version 3) and TimeWindow.

Every scalar is one :class:`Scalar` instance in :data:`SCALARS` (by snapshot class); its ``kind``
names the value type it holds (a Flink ``*Value`` twin has the kind of its primitive, e.g.
``LongValue`` is of kind ``Long``), and :data:`SCALAR_KINDS` what every consumer calls each kind (its
SQL type for Spark and Arrow, its compiled decoders' code, its type-string names): visitors over the
tree read the kind's entry, never a table of their own.
"""

from __future__ import annotations

import datetime as _dt
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable

from ..binary import read_flink_string, write_flink_string
from . import hashing
from .base import (ARRAYS, BASE, EPOCH, EPOCH_UTC, I8, I16, I32, I64, INT_MIN, LONG_MIN, RUNTIME, SHORT_MIN, U16,
                   Decoder, Encoder, TypeInfo, read_count)

_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_I64I32 = struct.Struct(">qi")
_I32BB = struct.Struct(">ibb")
_BBBI = struct.Struct(">bbbi")



class Scalar(TypeInfo):
    """One scalar serializer. ``kind`` is the value type (``String``, ``Long``, ``Integer``, ...; the
    Flink ``*Value`` twins share their primitive's kind): visitors switch on it, never on the codecs."""

    def __init__(self, name: str, snapshot_class: str, length: int, dec: Decoder, enc: Encoder,
                 hash_fn: Callable[[Any], int] | None = None, kind: str | None = None):
        self._name = name
        self.snapshot_class = snapshot_class
        self.length = length
        self._dec = dec
        self._enc = enc
        self._hash = hash_fn
        self.kind = kind or name

    @property
    def name(self) -> str:
        return self._name

    def _key(self) -> tuple:
        return (self.snapshot_class,)

    def __reduce__(self):
        # Scalars are singletons holding codec closures: pickle (for Spark) by snapshot class name.
        return _scalar_by_class, (self.snapshot_class,)

    def decoder(self) -> Decoder:
        return self._dec

    def encoder(self) -> Encoder:
        return self._enc

    @property
    def has_value_hash(self) -> bool:
        """Whether Flink defines a value-based hashCode for this scalar (so keys can be placed)."""
        return self._hash is not None

    def java_hash(self, value: Any) -> int:
        if self._hash is None:
            return super().java_hash(value)
        return self._hash(value)


def _fixed(st: struct.Struct) -> tuple[Decoder, Encoder]:
    size = st.size
    unpack = st.unpack_from
    pack = st.pack

    def dec(buf, pos):
        return unpack(buf, pos)[0], pos + size

    def enc(out, v):
        out += pack(v)

    return dec, enc


_dec_long, _enc_long = _fixed(I64)
_dec_int, _enc_int = _fixed(I32)
_dec_short, _enc_short = _fixed(I16)
_dec_byte, _enc_byte = _fixed(I8)
_dec_float, _enc_float = _fixed(_F32)
_dec_double, _enc_double = _fixed(_F64)


def _dec_bool(buf, pos):
    return buf[pos] != 0, pos + 1


def _enc_bool(out, v):
    out.append(1 if v else 0)


def _dec_char(buf, pos):
    return chr(U16.unpack_from(buf, pos)[0]), pos + 2


def _enc_char(out, v):
    out += U16.pack(ord(v))


def _enc_string(out, v):
    write_flink_string(out, v)


def _dec_zero_byte(buf, pos):
    return None, pos + 1


def _enc_zero_byte(out, v):
    out.append(0)


# BigInteger / BigDecimal --------------------------------------------------------------------


def _dec_bigint_raw(buf, pos):
    n = I32.unpack_from(buf, pos)[0]
    pos += 4
    if n == 0:
        return None, pos
    if n <= 3:
        return (0, 1, 10)[n - 1], pos
    if n < 4:
        raise ValueError(f"invalid BigInteger length {n}")
    end = pos + n - 4
    if end > len(buf):
        raise ValueError("truncated BigInteger")
    return int.from_bytes(buf[pos:end], "big", signed=True), end


def _enc_bigint(out, v):
    if v is None:
        out += I32.pack(0)
        return
    v = int(v)
    raw = v.to_bytes(max(1, (v + (v < 0)).bit_length() // 8 + 1), "big", signed=True)
    out += I32.pack(len(raw) + 4)
    out += raw


def _dec_bigdec(buf, pos):
    unscaled, pos = _dec_bigint_raw(buf, pos)
    if unscaled is None:
        return None, pos
    scale = I32.unpack_from(buf, pos)[0]
    # exact: no context precision applies to a Decimal built from its string form
    return Decimal(f"{unscaled}E{-scale}"), pos + 4


def _enc_bigdec(out, v):
    if v is None:
        out += I32.pack(0)
        return
    d = Decimal(v)
    sign, digits, exp = d.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    _enc_bigint(out, unscaled)
    out += I32.pack(-exp)


# Dates and times ----------------------------------------------------------------------------


def _millis_to_dt(ms: int) -> _dt.datetime:
    """Epoch millis → timezone-aware UTC datetime (java.util.Date / java.sql.Timestamp are instants)."""
    return EPOCH_UTC + _dt.timedelta(milliseconds=ms)


def _dt_to_millis(v) -> int:
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        delta = v - EPOCH
    elif isinstance(v, _dt.date):
        delta = _dt.datetime(v.year, v.month, v.day) - EPOCH
    else:
        return int(v)
    return delta.days * 86400000 + delta.seconds * 1000 + delta.microseconds // 1000


def _dec_millis_datetime(buf, pos):
    ms = I64.unpack_from(buf, pos)[0]
    return (None if ms == LONG_MIN else _millis_to_dt(ms)), pos + 8


def _enc_millis(out, v):
    out += I64.pack(LONG_MIN if v is None else _dt_to_millis(v))


def _dec_sql_date(buf, pos):
    ms = I64.unpack_from(buf, pos)[0]
    return (None if ms == LONG_MIN else _millis_to_dt(ms).date()), pos + 8


def _dec_sql_time(buf, pos):
    ms = I64.unpack_from(buf, pos)[0]
    return (None if ms == LONG_MIN else _millis_to_dt(ms).time().replace(tzinfo=None)), pos + 8


def _enc_sql_time(out, v):
    if v is None:
        out += I64.pack(LONG_MIN)
    elif isinstance(v, _dt.time):
        out += I64.pack(((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000)
    else:
        out += I64.pack(int(v))


def _dec_sql_timestamp(buf, pos):
    ms, nanos = _I64I32.unpack_from(buf, pos)
    if ms == LONG_MIN:
        return None, pos + 12
    secs = ms // 1000
    return EPOCH_UTC + _dt.timedelta(seconds=secs, microseconds=nanos // 1000), pos + 12


def _enc_sql_timestamp(out, v):
    if v is None:
        out += _I64I32.pack(LONG_MIN, 0)
        return
    ms = _dt_to_millis(v)
    micros = v.microsecond if isinstance(v, _dt.datetime) else (ms % 1000) * 1000
    out += _I64I32.pack(ms, micros * 1000)


def _dec_local_date(buf, pos):
    year, month, day = _I32BB.unpack_from(buf, pos)
    if year == INT_MIN:
        return None, pos + 6
    return _dt.date(year, month, day), pos + 6


def _enc_local_date(out, v):
    if v is None:
        out += I32.pack(INT_MIN) + I16.pack(SHORT_MIN)
    else:
        out += _I32BB.pack(v.year, v.month, v.day)


def _dec_local_time(buf, pos):
    h, m, s, nanos = _BBBI.unpack_from(buf, pos)
    if h == -128:
        return None, pos + 7
    return _dt.time(h, m, s, nanos // 1000), pos + 7


def _enc_local_time(out, v):
    if v is None:
        out += I8.pack(-128) + I16.pack(SHORT_MIN) + I32.pack(INT_MIN)
    else:
        out += _BBBI.pack(v.hour, v.minute, v.second, v.microsecond * 1000)


def _dec_local_datetime(buf, pos):
    d, pos = _dec_local_date(buf, pos)
    t, pos = _dec_local_time(buf, pos)
    if d is None or t is None:
        return None, pos
    return _dt.datetime.combine(d, t), pos


def _enc_local_datetime(out, v):
    _enc_local_date(out, None if v is None else v.date())
    _enc_local_time(out, None if v is None else v.time())


def _dec_instant(buf, pos):
    secs, nanos = _I64I32.unpack_from(buf, pos)
    if secs == LONG_MIN and nanos == INT_MIN:
        return None, pos + 12
    return EPOCH_UTC + _dt.timedelta(seconds=secs, microseconds=nanos // 1000), pos + 12


def _enc_instant(out, v):
    if v is None:
        out += _I64I32.pack(LONG_MIN, INT_MIN)
        return
    if v.tzinfo is None:
        v = v.replace(tzinfo=_dt.timezone.utc)
    delta = v - EPOCH_UTC
    out += _I64I32.pack(delta.days * 86400 + delta.seconds, delta.microseconds * 1000)


# Arrays -------------------------------------------------------------------------------------


def _dec_bytes(buf, pos):
    n, pos = read_count(buf, pos, "byte array length")
    end = pos + n
    return bytes(buf[pos:end]), end


def _enc_bytes(out, v):
    out += I32.pack(len(v))
    out += v


def _prim_array(code: str, size: int) -> tuple[Decoder, Encoder]:
    def dec(buf, pos):
        n, pos = read_count(buf, pos, "array length", width=size)
        vals = list(struct.unpack_from(f">{n}{code}", buf, pos))
        return vals, pos + n * size

    def enc(out, v):
        out += I32.pack(len(v))
        out += struct.pack(f">{len(v)}{code}", *v)

    return dec, enc


def _dec_char_array(buf, pos):
    vals, pos = _CHAR_ARR[0](buf, pos)
    return [chr(c) for c in vals], pos


def _enc_char_array(out, v):
    _CHAR_ARR[1](out, [ord(c) for c in v])


_CHAR_ARR = _prim_array("H", 2)


def _dec_bool_array(buf, pos):
    n, pos = read_count(buf, pos, "array length")
    return [b != 0 for b in buf[pos:pos + n]], pos + n


def _enc_bool_array(out, v):
    out += I32.pack(len(v))
    out += bytes(1 if x else 0 for x in v)


def _dec_string_array(buf, pos):
    n, pos = read_count(buf, pos, "array length")
    out = []
    for _ in range(n):
        s, pos = read_flink_string(buf, pos)
        out.append(s)
    return out, pos


def _enc_string_array(out, v):
    out += I32.pack(len(v))
    for s in v:
        write_flink_string(out, s)


def _build_scalars() -> dict[str, Scalar]:
    s: dict[str, Scalar] = {}

    def add(name, cls, length, dec, enc, h=None, kind=None):
        s[cls] = Scalar(name, cls, length, dec, enc, h, kind)

    def simple(n):
        return f"{BASE}{n}Serializer${n}SerializerSnapshot"

    add("String", simple("String"), -1, read_flink_string, _enc_string, hashing.hash_string)
    add("Long", simple("Long"), 8, _dec_long, _enc_long, hashing.hash_long)
    add("Integer", simple("Int"), 4, _dec_int, _enc_int, hashing.hash_int)
    add("Short", simple("Short"), 2, _dec_short, _enc_short, hashing.hash_int)
    add("Byte", simple("Byte"), 1, _dec_byte, _enc_byte, hashing.hash_int)
    add("Boolean", simple("Boolean"), 1, _dec_bool, _enc_bool, hashing.hash_bool)
    add("Double", simple("Double"), 8, _dec_double, _enc_double, hashing.hash_double)
    add("Float", simple("Float"), 4, _dec_float, _enc_float, hashing.hash_float)
    add("Character", simple("Char"), 2, _dec_char, _enc_char, hashing.hash_char)
    add("BigDecimal", f"{BASE}BigDecSerializer$BigDecSerializerSnapshot", -1, _dec_bigdec, _enc_bigdec)
    add("BigInteger", f"{BASE}BigIntSerializer$BigIntSerializerSnapshot", -1, _dec_bigint_raw, _enc_bigint)
    add("Void", simple("Void"), 1, _dec_zero_byte, _enc_zero_byte)
    add("Date", simple("Date"), 8, _dec_millis_datetime, _enc_millis)
    add("SqlDate", simple("SqlDate"), 8, _dec_sql_date, _enc_millis)
    add("SqlTime", simple("SqlTime"), 8, _dec_sql_time, _enc_sql_time)
    add("SqlTimestamp", simple("SqlTimestamp"), 12, _dec_sql_timestamp, _enc_sql_timestamp)
    add("LocalDate", simple("LocalDate"), 6, _dec_local_date, _enc_local_date)
    add("LocalTime", simple("LocalTime"), 7, _dec_local_time, _enc_local_time)
    add("LocalDateTime", simple("LocalDateTime"), 13, _dec_local_datetime, _enc_local_datetime)
    add("Instant", simple("Instant"), 12, _dec_instant, _enc_instant)

    def arr(n):
        return f"{ARRAYS}{n}PrimitiveArraySerializer${n}PrimitiveArraySerializerSnapshot"

    add("byte[]", arr("Byte"), -1, _dec_bytes, _enc_bytes)
    for jname, code, size in (("Int", "i", 4), ("Long", "q", 8), ("Short", "h", 2), ("Float", "f", 4),
                              ("Double", "d", 8)):
        d, e = _prim_array(code, size)
        add(f"{jname.lower() if jname != 'Int' else 'int'}[]", arr(jname), -1, d, e)
    add("char[]", arr("Char"), -1, _dec_char_array, _enc_char_array)
    add("boolean[]", arr("Boolean"), -1, _dec_bool_array, _enc_bool_array)
    add("String[]", f"{ARRAYS}StringArraySerializer$StringArraySerializerSnapshot", -1, _dec_string_array,
        _enc_string_array)

    # Flink Value types: the same bytes as their primitive counterparts.
    def value(n):
        return f"{BASE}{n}ValueSerializer${n}ValueSerializerSnapshot"

    add("StringValue", value("String"), -1, read_flink_string, _enc_string, hashing.hash_string, "String")
    add("LongValue", value("Long"), 8, _dec_long, _enc_long, hashing.hash_long, "Long")
    add("IntValue", value("Int"), 4, _dec_int, _enc_int, hashing.hash_int, "Integer")
    add("ShortValue", value("Short"), 2, _dec_short, _enc_short, hashing.hash_int, "Short")
    add("ByteValue", value("Byte"), 1, _dec_byte, _enc_byte, hashing.hash_int, "Byte")
    add("BooleanValue", value("Boolean"), 1, _dec_bool, _enc_bool, hashing.hash_bool, "Boolean")
    add("DoubleValue", value("Double"), 8, _dec_double, _enc_double, None, "Double")
    add("FloatValue", value("Float"), 4, _dec_float, _enc_float, None, "Float")
    add("CharValue", value("Char"), 2, _dec_char, _enc_char, hashing.hash_char, "Character")

    # Namespaces and windows.
    add("VoidNamespace", "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot",
        0, _dec_zero_byte, _enc_zero_byte)
    add("GlobalWindow", "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer"
        "$GlobalWindowSerializerSnapshot", 0, _dec_zero_byte, _enc_zero_byte)
    add("Tuple0", RUNTIME + "Tuple0SerializerSnapshot", 1, _dec_zero_byte, _enc_zero_byte)
    return s


@dataclass(frozen=True)
class ScalarKind:
    """What the rest of fstate calls one scalar kind (:attr:`Scalar.kind`), in one place: a new kind is
    one entry of :data:`SCALAR_KINDS` (and its serializers' ``add`` in :func:`_build_scalars`)."""

    kind: str
    #: the values' SQL type, in Spark's DDL spelling (``array<T>`` / ``array<T not null>``): the Spark
    #: type (readers.schema) and the Arrow type (:mod:`.arrow_types`, as Spark's converts to Arrow)
    sql: str
    #: the compiled decoders' type code (``_wire.h``), only where they decode it exactly as the Python
    #: decoder does; None: decoded in Python
    fast_path: str | None = None
    #: its names in type strings (writers.spec), the canonical one (what fstate writes) first
    spec: tuple[str, ...] = ()


#: every scalar kind: (kind, SQL type, fast-path code, type-string names)
SCALAR_KINDS: dict[str, ScalarKind] = {entry.kind: entry for entry in (
    ScalarKind("Long", "bigint", "LONG", ("LONG", "BIGINT_JAVA_LONG")),
    ScalarKind("Integer", "int", "INT", ("INT", "INTEGER")),
    ScalarKind("Short", "smallint", "SHORT", ("SHORT", "SMALLINT")),
    ScalarKind("Byte", "tinyint", "BYTE", ("BYTE", "TINYINT")),
    ScalarKind("Boolean", "boolean", "BOOL", ("BOOLEAN", "BOOL")),
    ScalarKind("Double", "double", "DOUBLE", ("DOUBLE",)),
    ScalarKind("Float", "float", "FLOAT", ("FLOAT",)),
    ScalarKind("Character", "string", "CHAR", ("CHAR",)),
    ScalarKind("String", "string", "STRING", ("STRING",)),
    ScalarKind("byte[]", "binary", None, ("BYTES", "BYTE[]", "BINARY")),
    ScalarKind("BigDecimal", "decimal(38,18)", None, ("DECIMAL", "BIG_DEC")),
    ScalarKind("BigInteger", "decimal(38,0)", None, ("BIGINT", "BIG_INT")),
    ScalarKind("LocalDate", "date", None, ("DATE", "LOCAL_DATE")),
    ScalarKind("LocalTime", "time", None, ("TIME", "LOCAL_TIME")),
    ScalarKind("LocalDateTime", "timestamp_ntz", None, ("TIMESTAMP_NTZ", "LOCAL_DATE_TIME")),
    ScalarKind("Instant", "timestamp", None, ("INSTANT", "TIMESTAMP")),
    ScalarKind("SqlDate", "date", None, ("SQL_DATE",)),
    ScalarKind("SqlTime", "time", None, ("SQL_TIME",)),
    ScalarKind("SqlTimestamp", "timestamp", None, ("SQL_TIMESTAMP",)),
    ScalarKind("int[]", "array<int not null>", None, ("INT[]",)),
    ScalarKind("long[]", "array<bigint not null>", None, ("LONG[]",)),
    ScalarKind("short[]", "array<smallint not null>", None, ("SHORT[]",)),
    ScalarKind("float[]", "array<float not null>", None, ("FLOAT[]",)),
    ScalarKind("double[]", "array<double not null>", None, ("DOUBLE[]",)),
    ScalarKind("char[]", "array<string not null>", None, ("CHAR[]",)),
    ScalarKind("boolean[]", "array<boolean not null>", None, ("BOOLEAN[]",)),
    ScalarKind("String[]", "array<string>", None, ("STRING[]",)),
    ScalarKind("Date", "timestamp"),
    ScalarKind("Void", "string", "ZERO"),
    ScalarKind("VoidNamespace", "string", "ZERO"),
    ScalarKind("GlobalWindow", "string", "ZERO"),
    ScalarKind("Tuple0", "string", "ZERO"),
)}


SCALARS: dict[str, Scalar] = _build_scalars()


def check_registered(scalars: dict[str, Scalar]) -> None:
    """Every scalar's kind has its entry in :data:`SCALAR_KINDS` (checked when fstate is imported)."""
    unregistered = sorted({t.kind for t in scalars.values()} - set(SCALAR_KINDS))
    if unregistered:
        raise TypeError(f"scalar kinds {unregistered} have no entry in SCALAR_KINDS")


check_registered(SCALARS)
_BY_NAME = {t.name: t for t in SCALARS.values()}

STRING = _BY_NAME["String"]
LONG = _BY_NAME["Long"]
INT = _BY_NAME["Integer"]
SHORT = _BY_NAME["Short"]
BYTE = _BY_NAME["Byte"]
BOOLEAN = _BY_NAME["Boolean"]
DOUBLE = _BY_NAME["Double"]
FLOAT = _BY_NAME["Float"]
CHAR = _BY_NAME["Character"]
BIG_DECIMAL = _BY_NAME["BigDecimal"]
BIG_INTEGER = _BY_NAME["BigInteger"]
BYTES = _BY_NAME["byte[]"]
VOID_NAMESPACE = _BY_NAME["VoidNamespace"]
LOCAL_DATE = _BY_NAME["LocalDate"]
LOCAL_TIME = _BY_NAME["LocalTime"]
LOCAL_DATE_TIME = _BY_NAME["LocalDateTime"]
INSTANT = _BY_NAME["Instant"]
SQL_TIMESTAMP = _BY_NAME["SqlTimestamp"]
SQL_DATE = _BY_NAME["SqlDate"]
SQL_TIME = _BY_NAME["SqlTime"]


def _scalar_by_class(snapshot_class: str) -> Scalar:
    return SCALARS[snapshot_class]


def scalar(name: str) -> Scalar:
    return _BY_NAME[name]


class TimeWindowType(TypeInfo):
    snapshot_class = ("org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer"
                      "$TimeWindowSerializerSnapshot")
    length = 16
    field_names = ("start", "end")

    @property
    def name(self) -> str:
        return "TimeWindow"

    def decoder(self) -> Decoder:
        unpack = struct.Struct(">qq").unpack_from

        def dec(buf, pos):
            return unpack(buf, pos), pos + 16

        return dec

    def encoder(self) -> Encoder:
        pack = struct.Struct(">qq").pack

        def enc(out, v):
            out += pack(v[0], v[1])

        return enc


TIME_WINDOW = TimeWindowType()
