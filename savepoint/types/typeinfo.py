"""The TypeInfo tree: one node per Flink serializer, the single source of truth for a state's type.

Each node knows:

* its Flink serializer-snapshot class (``snapshot_class``) and how to write that snapshot back;
* a **decoder** ``dec(buf, pos) -> (value, pos)`` and an **encoder** ``enc(out: bytearray, value)``,
  built once per tree (closures over the children's codecs: the plain Python fast path);
* the serializer's fixed length (``length``, -1 when variable), which decides key framing;
* the Java ``hashCode`` of a value where Flink defines one from the value (key groups).

Python value conventions: Tuple/Row/POJO/Either/TimeWindow values are tuples in field order (the
same order as the Spark struct fields); Map → dict; List/arrays → list; byte[] → bytes; Enum → its
constant name; BigDecimal → Decimal; dates and times → ``datetime`` objects; opaque (Kryo, Avro,
unknown) → the raw bytes.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import io
import pickle
import struct
import zlib
from decimal import Decimal
from typing import Any, Callable

from ..binary import DataOutput, read_flink_string, write_flink_string
from ..errors import UnsupportedSerializerError
from . import hashing

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[bytearray, Any], None]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_I64I32 = struct.Struct(">qi")
_I32BB = struct.Struct(">ibb")
_BBBI = struct.Struct(">bbbi")

BASE = "org.apache.flink.api.common.typeutils.base."
ARRAYS = BASE + "array."
RUNTIME = "org.apache.flink.api.java.typeutils.runtime."

COMPOSITE_MAGIC = 911108
NESTED_MAGIC = 1333245

LONG_MIN = -(1 << 63)
INT_MIN = -(1 << 31)
SHORT_MIN = -(1 << 15)
_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class TypeInfo:
    """Base of all nodes."""

    snapshot_class: str = ""
    snapshot_version: int = 3
    length: int = -1
    children: tuple["TypeInfo", ...] = ()
    #: False when values cannot be decoded (Kryo, Avro, unknown classes): read as raw bytes.
    decodable: bool = True

    # -- identity ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _key(self) -> tuple:
        return (self.snapshot_class, self.children)

    # -- codecs ------------------------------------------------------------------------------
    def decoder(self) -> Decoder:
        raise UnsupportedSerializerError(f"values of {self.name} cannot be decoded")

    def encoder(self) -> Encoder:
        raise UnsupportedSerializerError(f"values of {self.name} cannot be encoded")

    def java_hash(self, value: Any) -> int:
        raise UnsupportedSerializerError(
            f"Flink does not define a value-based hashCode for keys of type {self.name}")

    # -- snapshot ----------------------------------------------------------------------------
    def write_snapshot(self, out: DataOutput) -> None:
        """Write the versioned snapshot (class name, version, payload) Flink 2.3 would write."""
        out.write_utf(self.snapshot_class)
        out.write_i32(self.snapshot_version)
        self._write_payload(out)

    def _write_payload(self, out: DataOutput) -> None:
        pass

    # -- tree helpers ------------------------------------------------------------------------
    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    @property
    def fully_decodable(self) -> bool:
        return all(n.decodable for n in self.walk())


# =============================================================================================
# Scalars (SimpleTypeSerializerSnapshot: empty payload at version 3)


class Scalar(TypeInfo):
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


_dec_long, _enc_long = _fixed(_I64)
_dec_int, _enc_int = _fixed(_I32)
_dec_short, _enc_short = _fixed(_I16)
_dec_byte, _enc_byte = _fixed(_I8)
_dec_float, _enc_float = _fixed(_F32)
_dec_double, _enc_double = _fixed(_F64)


def _dec_bool(buf, pos):
    return buf[pos] != 0, pos + 1


def _enc_bool(out, v):
    out.append(1 if v else 0)


def _dec_char(buf, pos):
    return chr(_U16.unpack_from(buf, pos)[0]), pos + 2


def _enc_char(out, v):
    out += _U16.pack(ord(v))


def _enc_string(out, v):
    write_flink_string(out, v)


def _dec_zero_byte(buf, pos):
    return None, pos + 1


def _enc_zero_byte(out, v):
    out.append(0)


# BigInteger / BigDecimal --------------------------------------------------------------------


def _dec_bigint_raw(buf, pos):
    n = _I32.unpack_from(buf, pos)[0]
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
        out += _I32.pack(0)
        return
    v = int(v)
    raw = v.to_bytes(max(1, (v + (v < 0)).bit_length() // 8 + 1), "big", signed=True)
    out += _I32.pack(len(raw) + 4)
    out += raw


def _dec_bigdec(buf, pos):
    unscaled, pos = _dec_bigint_raw(buf, pos)
    if unscaled is None:
        return None, pos
    scale = _I32.unpack_from(buf, pos)[0]
    # exact: no context precision applies to a Decimal built from its string form
    return Decimal(f"{unscaled}E{-scale}"), pos + 4


def _enc_bigdec(out, v):
    if v is None:
        out += _I32.pack(0)
        return
    d = Decimal(v)
    sign, digits, exp = d.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    _enc_bigint(out, unscaled)
    out += _I32.pack(-exp)


# Dates and times ----------------------------------------------------------------------------


def _millis_to_dt(ms: int) -> _dt.datetime:
    """Epoch millis → timezone-aware UTC datetime (java.util.Date / java.sql.Timestamp are instants)."""
    return _EPOCH_UTC + _dt.timedelta(milliseconds=ms)


def _dt_to_millis(v) -> int:
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        delta = v - _EPOCH
    elif isinstance(v, _dt.date):
        delta = _dt.datetime(v.year, v.month, v.day) - _EPOCH
    else:
        return int(v)
    return delta.days * 86400000 + delta.seconds * 1000 + delta.microseconds // 1000


def _dec_millis_datetime(buf, pos):
    ms = _I64.unpack_from(buf, pos)[0]
    return (None if ms == LONG_MIN else _millis_to_dt(ms)), pos + 8


def _enc_millis(out, v):
    out += _I64.pack(LONG_MIN if v is None else _dt_to_millis(v))


def _dec_sql_date(buf, pos):
    ms = _I64.unpack_from(buf, pos)[0]
    return (None if ms == LONG_MIN else _millis_to_dt(ms).date()), pos + 8


def _dec_sql_time(buf, pos):
    ms = _I64.unpack_from(buf, pos)[0]
    return (None if ms == LONG_MIN else _millis_to_dt(ms).time().replace(tzinfo=None)), pos + 8


def _enc_sql_time(out, v):
    if v is None:
        out += _I64.pack(LONG_MIN)
    elif isinstance(v, _dt.time):
        out += _I64.pack(((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000)
    else:
        out += _I64.pack(int(v))


def _dec_sql_timestamp(buf, pos):
    ms, nanos = _I64I32.unpack_from(buf, pos)
    if ms == LONG_MIN:
        return None, pos + 12
    secs = ms // 1000
    return _EPOCH_UTC + _dt.timedelta(seconds=secs, microseconds=nanos // 1000), pos + 12


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
        out += _I32.pack(INT_MIN) + _I16.pack(SHORT_MIN)
    else:
        out += _I32BB.pack(v.year, v.month, v.day)


def _dec_local_time(buf, pos):
    h, m, s, nanos = _BBBI.unpack_from(buf, pos)
    if h == -128:
        return None, pos + 7
    return _dt.time(h, m, s, nanos // 1000), pos + 7


def _enc_local_time(out, v):
    if v is None:
        out += _I8.pack(-128) + _I16.pack(SHORT_MIN) + _I32.pack(INT_MIN)
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
    return _EPOCH_UTC + _dt.timedelta(seconds=secs, microseconds=nanos // 1000), pos + 12


def _enc_instant(out, v):
    if v is None:
        out += _I64I32.pack(LONG_MIN, INT_MIN)
        return
    if v.tzinfo is None:
        v = v.replace(tzinfo=_dt.timezone.utc)
    delta = v - _EPOCH_UTC
    out += _I64I32.pack(delta.days * 86400 + delta.seconds, delta.microseconds * 1000)


# Arrays -------------------------------------------------------------------------------------


def _dec_bytes(buf, pos):
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    end = pos + n
    if n < 0 or end > len(buf):
        raise ValueError(f"invalid byte array length {n}")
    return bytes(buf[pos:end]), end


def _enc_bytes(out, v):
    out += _I32.pack(len(v))
    out += v


def _prim_array(code: str, size: int) -> tuple[Decoder, Encoder]:
    def dec(buf, pos):
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
        if n < 0 or pos + n * size > len(buf):
            raise ValueError(f"invalid array length {n}")
        vals = list(struct.unpack_from(f">{n}{code}", buf, pos))
        return vals, pos + n * size

    def enc(out, v):
        out += _I32.pack(len(v))
        out += struct.pack(f">{len(v)}{code}", *v)

    return dec, enc


def _dec_char_array(buf, pos):
    vals, pos = _CHAR_ARR[0](buf, pos)
    return [chr(c) for c in vals], pos


def _enc_char_array(out, v):
    _CHAR_ARR[1](out, [ord(c) for c in v])


_CHAR_ARR = _prim_array("H", 2)


def _dec_bool_array(buf, pos):
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0 or pos + n > len(buf):
        raise ValueError(f"invalid array length {n}")
    return [b != 0 for b in buf[pos:pos + n]], pos + n


def _enc_bool_array(out, v):
    out += _I32.pack(len(v))
    out += bytes(1 if x else 0 for x in v)


def _dec_string_array(buf, pos):
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0 or n > len(buf) - pos:
        raise ValueError(f"invalid array length {n}")
    out = []
    for _ in range(n):
        s, pos = read_flink_string(buf, pos)
        out.append(s)
    return out, pos


def _enc_string_array(out, v):
    out += _I32.pack(len(v))
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


SCALARS: dict[str, Scalar] = _build_scalars()
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


# =============================================================================================
# Composite types (CompositeTypeSerializerSnapshot framing)


class Composite(TypeInfo):
    outer_version: int = 1

    def _write_payload(self, out: DataOutput) -> None:
        out.write_i32(COMPOSITE_MAGIC)
        out.write_i32(self.outer_version)
        self._write_outer(out)
        out.write_i32(NESTED_MAGIC)
        out.write_i32(1)
        out.write_i32(len(self.children))
        for c in self.children:
            c.write_snapshot(out)

    def _write_outer(self, out: DataOutput) -> None:
        pass


class TupleType(Composite):
    snapshot_class = RUNTIME + "TupleSerializerSnapshot"
    outer_version = 2

    def __init__(self, fields: tuple[TypeInfo, ...], tuple_class: str | None = None):
        self.children = tuple(fields)
        self.tuple_class = tuple_class or f"org.apache.flink.api.java.tuple.Tuple{len(fields)}"
        self.length = sum(f.length for f in fields) if all(f.length >= 0 for f in fields) else -1

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f"f{i}" for i in range(len(self.children)))

    @property
    def name(self) -> str:
        short = self.tuple_class.rsplit(".", 1)[-1]
        return f"{short}<{', '.join(c.name for c in self.children)}>"

    def _key(self) -> tuple:
        return (self.tuple_class, self.children)

    def _write_outer(self, out: DataOutput) -> None:
        out.write_utf(self.tuple_class)

    def decoder(self) -> Decoder:
        decs = [c.decoder() for c in self.children]
        if len(decs) == 2:
            d0, d1 = decs

            def dec2(buf, pos):
                a, pos = d0(buf, pos)
                b, pos = d1(buf, pos)
                return (a, b), pos

            return dec2

        def dec(buf, pos):
            vals = []
            for d in decs:
                v, pos = d(buf, pos)
                vals.append(v)
            return tuple(vals), pos

        return dec

    def encoder(self) -> Encoder:
        encs = [c.encoder() for c in self.children]

        def enc(out, v):
            for e, x in zip(encs, _as_fields(v, self.field_names), strict=True):
                e(out, x)

        return enc

    def java_hash(self, value: Any) -> int:
        h = 0
        for c, x in zip(self.children, _as_fields(value, self.field_names), strict=True):
            h = (31 * h + (0 if x is None else c.java_hash(x))) & 0xFFFFFFFF
        return hashing.to_int32(h)


def _as_fields(v: Any, names: tuple[str, ...]) -> tuple:
    if isinstance(v, dict):
        return tuple(v.get(n) for n in names)
    if hasattr(v, "asDict") and not isinstance(v, tuple):
        d = v.asDict()
        return tuple(d.get(n) for n in names)
    return tuple(v)


ROW_KINDS = ("INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE")


class RowType(Composite):
    """Flink Row (RowSerializer): a null mask, optionally with two RowKind bits in front."""

    snapshot_class = RUNTIME + "RowSerializer$RowSerializerSnapshot"
    outer_version = 4

    def __init__(self, fields: tuple[TypeInfo, ...], names: tuple[str, ...] | None = None,
                 supports_row_kind: bool = True):
        self.children = tuple(fields)
        # Field names are not part of the snapshot; they default to f0..fn.
        self.field_names = tuple(names) if names else tuple(f"f{i}" for i in range(len(fields)))
        self.supports_row_kind = supports_row_kind

    @property
    def name(self) -> str:
        return "Row<" + ", ".join(f"{n} {c.name}" for n, c in zip(self.field_names, self.children)) + ">"

    def _key(self) -> tuple:
        return (self.children, self.supports_row_kind)

    def _write_outer(self, out: DataOutput) -> None:
        out.write_bool(self.supports_row_kind)

    def decoder(self) -> Decoder:
        decs = [c.decoder() for c in self.children]
        extra = 2 if self.supports_row_kind else 0
        n = len(decs)
        mask_len = (n + extra + 7) // 8
        bits = [(extra + i) for i in range(n)]
        masks = [(b // 8, 0x80 >> (b % 8)) for b in bits]

        def dec(buf, pos):
            mask = buf[pos:pos + mask_len]
            if len(mask) != mask_len:
                raise ValueError("truncated Row null mask")
            pos += mask_len
            vals = []
            for d, (byte_i, bit) in zip(decs, masks):
                if mask[byte_i] & bit:
                    vals.append(None)
                else:
                    v, pos = d(buf, pos)
                    vals.append(v)
            return tuple(vals), pos

        return dec

    def encoder(self) -> Encoder:
        encs = [c.encoder() for c in self.children]
        extra = 2 if self.supports_row_kind else 0
        mask_len = (len(encs) + extra + 7) // 8
        names = self.field_names

        def enc(out, v):
            vals = _as_fields(v, names)
            if len(vals) != len(encs):
                raise ValueError(f"Row of arity {len(encs)} got {len(vals)} fields")
            mask = bytearray(mask_len)
            for i, x in enumerate(vals):
                if x is None:
                    b = extra + i
                    mask[b // 8] |= 0x80 >> (b % 8)
            out += mask
            for e, x in zip(encs, vals):
                if x is not None:
                    e(out, x)

        return enc

    def java_hash(self, value: Any) -> int:
        # Row.hashCode: 31 * kind.toByteValue() + deepHashCode(fields); INSERT has byte value 0.
        a = 1
        for c, x in zip(self.children, _as_fields(value, self.field_names), strict=True):
            e = 0 if x is None else (31 + c.java_hash(x)) & 0xFFFFFFFF
            a = (31 * a + e) & 0xFFFFFFFF
        return hashing.to_int32(a)


class ListType(Composite):
    snapshot_class = BASE + "ListSerializerSnapshot"

    def __init__(self, element: TypeInfo, snapshot_class: str | None = None):
        self.children = (element,)
        if snapshot_class:
            self.snapshot_class = snapshot_class

    @property
    def element(self) -> TypeInfo:
        return self.children[0]

    @property
    def name(self) -> str:
        return f"List<{self.element.name}>"

    def decoder(self) -> Decoder:
        d = self.element.decoder()

        def dec(buf, pos):
            n = _I32.unpack_from(buf, pos)[0]
            pos += 4
            if n < 0 or n > len(buf) - pos + 1:
                raise ValueError(f"invalid list size {n}")
            out = []
            for _ in range(n):
                v, pos = d(buf, pos)
                out.append(v)
            return out, pos

        return dec

    def encoder(self) -> Encoder:
        e = self.element.encoder()

        def enc(out, v):
            out += _I32.pack(len(v))
            for x in v:
                e(out, x)

        return enc


class ArrayListType(ListType):
    """Heap list state's internal ArrayList serializer: same bytes as List."""

    snapshot_class = "org.apache.flink.runtime.state.ArrayListSerializerSnapshot"


class SetType(ListType):
    snapshot_class = BASE + "SetSerializerSnapshot"

    @property
    def name(self) -> str:
        return f"Set<{self.element.name}>"


class MapType(Composite):
    snapshot_class = BASE + "MapSerializerSnapshot"

    def __init__(self, key: TypeInfo, value: TypeInfo):
        self.children = (key, value)

    @property
    def key(self) -> TypeInfo:
        return self.children[0]

    @property
    def value(self) -> TypeInfo:
        return self.children[1]

    @property
    def name(self) -> str:
        return f"Map<{self.key.name}, {self.value.name}>"

    def decoder(self) -> Decoder:
        dk = self.key.decoder()
        dv = self.value.decoder()

        def dec(buf, pos):
            n = _I32.unpack_from(buf, pos)[0]
            pos += 4
            if n < 0 or n > len(buf) - pos:
                raise ValueError(f"invalid map size {n}")
            out = {}
            for _ in range(n):
                k, pos = dk(buf, pos)
                if buf[pos]:
                    v = None
                    pos += 1
                else:
                    v, pos = dv(buf, pos + 1)
                out[k] = v
            return out, pos

        return dec

    def encoder(self) -> Encoder:
        ek = self.key.encoder()
        ev = self.value.encoder()

        def enc(out, v):
            items = v.items() if isinstance(v, dict) else v
            items = list(items)
            out += _I32.pack(len(items))
            for k, x in items:
                ek(out, k)
                if x is None:
                    out.append(1)
                else:
                    out.append(0)
                    ev(out, x)

        return enc


class NullableType(Composite):
    snapshot_class = RUNTIME + "NullableSerializer$NullableSerializerSnapshot"
    outer_version = 2

    def __init__(self, inner: TypeInfo, padding: int = 0):
        self.children = (inner,)
        self.padding = padding
        self.length = 1 + padding if padding > 0 else -1

    @property
    def inner(self) -> TypeInfo:
        return self.children[0]

    @property
    def name(self) -> str:
        return self.inner.name  # nullability is not worth shouting about

    def _key(self) -> tuple:
        return (self.children, self.padding)

    def _write_outer(self, out: DataOutput) -> None:
        out.write_i32(self.padding)

    def decoder(self) -> Decoder:
        d = self.inner.decoder()
        skip = 1 + self.padding

        def dec(buf, pos):
            if buf[pos]:
                return None, pos + skip
            return d(buf, pos + 1)

        return dec

    def encoder(self) -> Encoder:
        e = self.inner.encoder()
        pad = b"\x01" + bytes(self.padding)

        def enc(out, v):
            if v is None:
                out += pad
            else:
                out.append(0)
                e(out, v)

        return enc

    def java_hash(self, value: Any) -> int:
        return self.inner.java_hash(value)


class EitherType(Composite):
    snapshot_class = RUNTIME + "JavaEitherSerializerSnapshot"
    field_names = ("left", "right")

    def __init__(self, left: TypeInfo, right: TypeInfo):
        self.children = (left, right)

    @property
    def name(self) -> str:
        return f"Either<{self.children[0].name}, {self.children[1].name}>"

    def decoder(self) -> Decoder:
        dl = self.children[0].decoder()
        dr = self.children[1].decoder()

        def dec(buf, pos):
            if buf[pos]:
                v, pos = dl(buf, pos + 1)
                return (v, None), pos
            v, pos = dr(buf, pos + 1)
            return (None, v), pos

        return dec

    def encoder(self) -> Encoder:
        el = self.children[0].encoder()
        er = self.children[1].encoder()

        def enc(out, v):
            left, right = _as_fields(v, self.field_names)
            if left is not None:
                out.append(1)
                el(out, left)
            else:
                out.append(0)
                er(out, right)

        return enc


class GenericArrayType(Composite):
    snapshot_class = BASE + "GenericArraySerializerSnapshot"

    def __init__(self, element: TypeInfo, component_class: str):
        self.children = (element,)
        self.component_class = component_class

    @property
    def name(self) -> str:
        return f"{self.children[0].name}[]"

    def _key(self) -> tuple:
        return (self.children, self.component_class)

    def _write_outer(self, out: DataOutput) -> None:
        out.write_utf(self.component_class)

    def decoder(self) -> Decoder:
        d = self.children[0].decoder()

        def dec(buf, pos):
            n = _I32.unpack_from(buf, pos)[0]
            pos += 4
            if n < 0 or n > len(buf) - pos:
                raise ValueError(f"invalid array length {n}")
            out = []
            for _ in range(n):
                if buf[pos]:
                    v, pos = d(buf, pos + 1)
                else:
                    v = None
                    pos += 1
                out.append(v)
            return out, pos

        return dec

    def encoder(self) -> Encoder:
        e = self.children[0].encoder()

        def enc(out, v):
            out += _I32.pack(len(v))
            for x in v:
                if x is None:
                    out.append(0)
                else:
                    out.append(1)
                    e(out, x)

        return enc


class TimerType(Composite):
    """Timers of the internal timer service: (timestamp, key, namespace)."""

    snapshot_class = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"
    outer_version = 2

    def __init__(self, key: TypeInfo, namespace: TypeInfo):
        self.children = (key, namespace)

    @property
    def key(self) -> TypeInfo:
        return self.children[0]

    @property
    def namespace(self) -> TypeInfo:
        return self.children[1]

    @property
    def name(self) -> str:
        return f"Timer<{self.key.name}, {self.namespace.name}>"

    def decoder(self) -> Decoder:
        dk = self.key.decoder()
        dn = self.namespace.decoder()

        def dec(buf, pos):
            ts = _I64.unpack_from(buf, pos)[0] ^ LONG_MIN
            k, pos = dk(buf, pos + 8)
            ns, pos = dn(buf, pos)
            return (ts, k, ns), pos

        return dec

    def encoder(self) -> Encoder:
        ek = self.key.encoder()
        en = self.namespace.encoder()

        def enc(out, v):
            ts, k, ns = v
            out += _I64.pack(ts ^ LONG_MIN)
            ek(out, k)
            en(out, ns)

        return enc


class TtlType(Composite):
    """A TTL-wrapped state value: (last access timestamp, user value); decodes to the user value."""

    snapshot_class = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
    outer_version = 2

    def __init__(self, timestamp: TypeInfo, value: TypeInfo, snapshot_class: str | None = None):
        self.children = (timestamp, value)
        if snapshot_class:
            self.snapshot_class = snapshot_class
        self.length = (8 + value.length) if value.length >= 0 else -1

    @property
    def value(self) -> TypeInfo:
        return self.children[1]

    @property
    def name(self) -> str:
        return f"{self.value.name} (TTL)"

    def decoder(self) -> Decoder:
        dv = self.value.decoder()

        def dec(buf, pos):
            return dv(buf, pos + 8)

        return dec

    def encoder(self) -> Encoder:
        ev = self.value.encoder()

        def enc(out, v):
            out += _I64.pack(LONG_MIN)  # never expired: Flink refreshes on access anyway
            ev(out, v)

        return enc


# =============================================================================================
# POJO, Enum and opaque types


class PojoType(TypeInfo):
    snapshot_class = RUNTIME + "PojoSerializerSnapshot"
    snapshot_version = 2

    def __init__(self, class_name: str, fields: list[tuple[str, str, TypeInfo | None]],
                 registered: list[tuple[str, TypeInfo | None]] | None = None,
                 nonregistered: list[tuple[str, TypeInfo | None]] | None = None):
        #: (field name, declaring class, type or None when the field's class is gone)
        self.class_name = class_name
        self.fields = list(fields)
        self.registered = list(registered or [])
        self.nonregistered = list(nonregistered or [])
        self.children = tuple(t for _, _, t in self.fields if t is not None)
        self.decodable = all(t is not None for _, _, t in self.fields)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(n for n, _, _ in self.fields)

    @property
    def name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]

    def _key(self) -> tuple:
        return (self.class_name, tuple((n, d, t) for n, d, t in self.fields))

    def _write_payload(self, out: DataOutput) -> None:
        out.write_utf(self.class_name)
        _write_optional_map(out, [
            (n, _frame(lambda o, d=d, n=n: (o.write_utf(d), o.write_utf(n))),
             _frame(lambda o, t=t: t.write_snapshot(o))) for n, d, t in self.fields])
        for group in (self.registered, self.nonregistered):
            _write_optional_map(out, [(n, b"", _frame(lambda o, t=t: t.write_snapshot(o))) for n, t in group])

    def decoder(self) -> Decoder:
        if not self.decodable:
            return super().decoder()
        decs = [t.decoder() for _, _, t in self.fields]
        registered = self.registered
        nonregistered = {n: t for n, t in self.nonregistered}
        cls = self.class_name

        def dec(buf, pos):
            flags = buf[pos]
            pos += 1
            if flags & 1:
                return None, pos
            if flags & 2:
                vals = []
                for d in decs:
                    if buf[pos]:
                        vals.append(None)
                        pos += 1
                    else:
                        v, pos = d(buf, pos + 1)
                        vals.append(v)
                return tuple(vals), pos
            if flags & 4:
                n = _U16.unpack_from(buf, pos)[0]
                sub = bytes(buf[pos + 2:pos + 2 + n]).decode("utf-8", "replace")
                t = nonregistered.get(sub)
                if t is None:
                    raise UnsupportedSerializerError(
                        f"a {cls} value is an instance of subclass {sub}, whose serializer is not in the snapshot")
                return t.decoder()(buf, pos + 2 + n)
            if flags & 8:
                tag = buf[pos]
                if tag >= len(registered) or registered[tag][1] is None:
                    raise UnsupportedSerializerError(f"a {cls} value has unknown registered-subclass tag {tag}")
                return registered[tag][1].decoder()(buf, pos + 1)
            raise ValueError(f"invalid POJO flags {flags}")

        return dec

    def encoder(self) -> Encoder:
        if not self.decodable:
            return super().encoder()
        encs = [t.encoder() for _, _, t in self.fields]
        names = self.field_names

        def enc(out, v):
            if v is None:
                out.append(1)
                return
            out.append(2)
            for e, x in zip(encs, _as_fields(v, names), strict=True):
                if x is None:
                    out.append(1)
                else:
                    out.append(0)
                    e(out, x)

        return enc


class EnumType(TypeInfo):
    snapshot_class = BASE + "EnumSerializer$EnumSerializerSnapshot"
    length = 4

    def __init__(self, class_name: str, constants: tuple[str, ...]):
        self.class_name = class_name
        self.constants = tuple(constants)

    @property
    def name(self) -> str:
        return f"Enum<{self.class_name.rsplit('.', 1)[-1]}>"

    def _key(self) -> tuple:
        return (self.class_name, self.constants)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_utf(self.class_name)
        out.write_i32(len(self.constants))
        for c in self.constants:
            out.write_utf(c)

    def decoder(self) -> Decoder:
        consts = self.constants

        def dec(buf, pos):
            i = _I32.unpack_from(buf, pos)[0]
            if not 0 <= i < len(consts):
                raise ValueError(f"enum ordinal {i} out of range")
            return consts[i], pos + 4

        return dec

    def encoder(self) -> Encoder:
        index = {c: i for i, c in enumerate(self.constants)}

        def enc(out, v):
            out += _I32.pack(index[v])

        return enc


class OpaquePickle(bytes):
    """The raw pickle bytes of a :class:`PickledType` value fstate would not unpickle (see there)."""

    def __repr__(self) -> str:
        return f"OpaquePickle({len(self)} bytes)"


#: Classes a pickled value may reference and still be decoded outside the runtime: plain data only.
_SAFE_PICKLE_GLOBALS = {
    ("builtins", n) for n in ("set", "frozenset", "complex", "bytearray", "range", "slice")
} | {("datetime", n) for n in ("datetime", "date", "time", "timedelta", "timezone")} | {
    ("decimal", "Decimal"), ("collections", "OrderedDict"), ("collections", "deque"), ("uuid", "UUID"),
    ("fractions", "Fraction"),
}
_PICKLE_TRUST: contextvars.ContextVar[bool] = contextvars.ContextVar("fstate_pickle_trust", default=False)


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _SAFE_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _loads_data_only(raw: bytes):
    try:
        return _DataOnlyUnpickler(io.BytesIO(raw)).load()
    except Exception:
        return OpaquePickle(raw)


@contextlib.contextmanager
def trusted_pickles():
    """Decoders built inside this block unpickle any class (the runtime reading its own state)."""
    token = _PICKLE_TRUST.set(True)
    try:
        yield
    finally:
        _PICKLE_TRUST.reset(token)


class PickledType(TypeInfo):
    """fstate's own serializer for Python values Flink has no serializer for: each value is an
    i32 length and the pickle bytes (protocol 4). Written by fstate's runtime; the snapshot class
    ``fstate.runtime.PickleSerializerSnapshot`` is not a Flink class, so Flink refuses such state.

    fstate never runs code from a file it reads: outside :func:`trusted_pickles` only plain data
    (builtins, datetime, Decimal, ...) is unpickled, anything else comes back as an OpaquePickle.
    Keys of this type are placed in key groups by a CRC-32 of their pickle bytes (not Java's
    hashCode: Flink never sees these keys).
    """

    snapshot_class = "fstate.runtime.PickleSerializerSnapshot"
    snapshot_version = 1
    PROTOCOL = 4

    @property
    def name(self) -> str:
        return "Pickled"

    def _key(self) -> tuple:
        return (self.snapshot_class,)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_i32(self.PROTOCOL)

    def decoder(self) -> Decoder:
        loads = pickle.loads if _PICKLE_TRUST.get() else _loads_data_only

        def dec(buf, pos):
            n = _I32.unpack_from(buf, pos)[0]
            pos += 4
            end = pos + n
            if n < 0 or end > len(buf):
                raise ValueError(f"invalid pickled value length {n}")
            return loads(bytes(buf[pos:end])), end

        return dec

    def encoder(self) -> Encoder:
        dumps = pickle.dumps
        proto = self.PROTOCOL

        def enc(out, v):
            raw = bytes(v) if isinstance(v, OpaquePickle) else dumps(v, protocol=proto)
            out += _I32.pack(len(raw))
            out += raw

        return enc

    def java_hash(self, value: Any) -> int:
        raw = bytes(value) if isinstance(value, OpaquePickle) else pickle.dumps(value, protocol=self.PROTOCOL)
        return hashing.to_int32(zlib.crc32(raw))


PICKLED = PickledType()


class OpaqueType(TypeInfo):
    """A serializer whose value bytes fstate cannot interpret (Kryo, Avro, custom): raw bytes."""

    decodable = False

    def __init__(self, snapshot_class: str, version: int, payload: bytes, type_class: str | None = None,
                 reason: str = ""):
        self.snapshot_class = snapshot_class
        self.snapshot_version = version
        self.payload = payload
        self.type_class = type_class
        self.reason = reason

    @property
    def name(self) -> str:
        kind = self.snapshot_class.rsplit(".", 1)[-1].split("$")[0].replace("SerializerSnapshot", "")
        return f"{kind}<{self.type_class}>" if self.type_class else kind

    def _key(self) -> tuple:
        return (self.snapshot_class, self.snapshot_version, self.payload)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_bytes(self.payload)


# ---------------------------------------------------------------------------------------------
# LinkedOptionalMap framing (POJO / Kryo snapshots)

OPTIONAL_MAP_HEADER = 0x000004F2C69A3D70


def _frame(write: Callable[[DataOutput], Any]) -> bytes:
    o = DataOutput()
    write(o)
    return o.getvalue()


def _write_optional_map(out: DataOutput, entries: list[tuple[str, bytes | None, bytes | None]]) -> None:
    out.write_i64(OPTIONAL_MAP_HEADER)
    out.write_i32(len(entries))
    for name, key_frame, value_frame in entries:
        out.write_utf(name)
        for frame in (key_frame, value_frame):
            if frame is None:
                out.write_bool(False)
            else:
                out.write_bool(True)
                out.write_i32(len(frame))
                out.write_bytes(frame)
