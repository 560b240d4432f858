"""The table runtime's binary formats: BinaryRowData, BinaryArrayData, BinaryMapData, driven by
:class:`~.logical.LogicalType`s, and the stand-alone (DataOutputView) forms of the table data types.

Facts (learned from Flink's sources, checked on real savepoints):

* **BinaryRowData**: a header of ``((arity + 63 + 8) // 64) * 8`` bytes whose first byte is the
  row kind and whose bits ``8 + i`` (least significant bit first within a byte) mark null fields;
  then one 8-byte slot per field; then the variable part. Memory segments are little-endian, so
  fixed values (BOOLEAN 1 byte, TINYINT 1, SMALLINT 2, INT/DATE/TIME 4, FLOAT 4, BIGINT/DOUBLE 8,
  compact DECIMAL = unscaled long, compact TIMESTAMP = epoch millis) are little-endian at the slot
  start. A variable-length value's slot holds ``offset << 32 | size`` (offset from the row start);
  strings and binaries of at most 7 bytes are inline instead: the bytes at the slot start and
  ``0x80 | length`` in the slot's last byte. Each variable part is padded with zeros to 8 bytes.
  DECIMAL(p > 18) reserves 16 bytes and stores ``BigInteger.toByteArray()`` there; TIMESTAMP(p > 3)
  stores the millis (8 bytes) there and the nano-of-millisecond in the slot's size half. A null
  field of those two types still reserves its variable part (as Flink's null setter does).
* **BinaryArrayData**: ``int`` element count, null bits (4-byte words, ``4 * ceil(n / 32)``),
  element slots of the element's size (1, 2, 4 or 8), the fixed part rounded up to 8 bytes, then
  the variable part (offsets from the array start).
* **BinaryMapData**: ``int`` size in bytes of the key array, the key array, the value array.

Python values: ROW → tuple (a :class:`RowValue` when its row kind is not INSERT), VARCHAR/CHAR → str,
BINARY → bytes, DECIMAL → Decimal, TIMESTAMP → naive datetime, TIMESTAMP_LTZ → UTC datetime,
DATE → date, TIME → time, ARRAY → list, MAP → dict, MULTISET → dict (element → count), RAW → the
raw value's bytes. A TIMESTAMP(7..9) value with nanoseconds below its microsecond is a
:class:`NanoDatetime` (a datetime carrying them in ``nanosecond``), which encodes back exactly.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
from decimal import Decimal
from typing import Any, Callable

from .base import EPOCH, EPOCH_DATE, EPOCH_UTC, I32, I64, read_count
from .logical import BINARY_ROOTS, ROW_ROOTS, STRING_ROOTS, TIMESTAMP_ROOTS, LogicalType

ROW_KINDS = ("INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "DELETE")

_LE = {"BOOLEAN": struct.Struct("<?"), "TINYINT": struct.Struct("<b"), "SMALLINT": struct.Struct("<h"),
       "INTEGER": struct.Struct("<i"), "DATE": struct.Struct("<i"), "TIME_WITHOUT_TIME_ZONE": struct.Struct("<i"),
       "INTERVAL_YEAR_MONTH": struct.Struct("<i"), "FLOAT": struct.Struct("<f"), "BIGINT": struct.Struct("<q"),
       "INTERVAL_DAY_TIME": struct.Struct("<q"), "DOUBLE": struct.Struct("<d")}
_LE_I32 = struct.Struct("<i")
_LE_I64 = struct.Struct("<q")
_LE_U64 = struct.Struct("<Q")
_BE_I64_I32 = struct.Struct(">qi")

_EXACT = decimal.Context(prec=1000)

Reader = Callable[[bytes, int, int], Any]  # (buf, base of the structure, slot position) -> value
Writer = Callable[[bytearray, int, Any], None]  # (structure bytes, slot position, value)


class RowValue(tuple):
    """A row whose row kind is not INSERT: a tuple that remembers its ``row_kind``."""

    row_kind: str = "INSERT"

    def __new__(cls, values, row_kind: str = "INSERT"):
        row = super().__new__(cls, values)
        row.row_kind = row_kind
        return row

    def __reduce__(self):
        return RowValue, (tuple(self), self.row_kind)


def row_kind_of(value: Any) -> str:
    return getattr(value, "row_kind", "INSERT")


# ---------------------------------------------------------------------------------------------
# scalar conversions shared by the binary and the stand-alone forms


def decimal_from_unscaled(unscaled: int, scale: int) -> Decimal:
    return Decimal(f"{unscaled}E{-scale}")


def decimal_to_unscaled(value: Any, precision: int, scale: int) -> int:
    d = Decimal(value)
    q = d.quantize(Decimal(1).scaleb(-scale), context=_EXACT)
    if q != d:
        raise ValueError(f"{value} has more than {scale} decimal places (DECIMAL({precision}, {scale}))")
    sign, digits, exponent = q.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exponent + scale)
    if len(str(abs(unscaled))) > precision:
        raise ValueError(f"{value} does not fit DECIMAL({precision}, {scale})")
    return -unscaled if sign else unscaled


def unscaled_bytes(unscaled: int) -> bytes:
    """``BigInteger.toByteArray()``: minimal big-endian two's complement."""
    return unscaled.to_bytes((unscaled + (unscaled < 0)).bit_length() // 8 + 1, "big", signed=True)


class NanoDatetime(_dt.datetime):
    """A datetime that also keeps the nanoseconds below its microsecond (``nanosecond``, 0..999), as
    TIMESTAMP(7..9) / TIMESTAMP_LTZ(7..9) values hold them. It compares, prints (``isoformat``: nine
    fraction digits) and pickles with them; arithmetic drops them."""

    nanosecond: int = 0

    def __new__(cls, *args, nanosecond: int = 0, **kwargs):
        value = super().__new__(cls, *args, **kwargs)
        if not 0 <= nanosecond < 1000:
            raise ValueError(f"nanosecond must be in 0..999, not {nanosecond}")
        value.nanosecond = nanosecond
        return value

    @classmethod
    def of(cls, value: _dt.datetime, nanosecond: int) -> "NanoDatetime":
        return cls(value.year, value.month, value.day, value.hour, value.minute, value.second, value.microsecond,
                   value.tzinfo, fold=value.fold, nanosecond=nanosecond)

    def _plain(self) -> _dt.datetime:
        return _dt.datetime(self.year, self.month, self.day, self.hour, self.minute, self.second, self.microsecond,
                            self.tzinfo, fold=self.fold)

    def __reduce__(self):
        return NanoDatetime.of, (self._plain(), self.nanosecond)

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __eq__(self, other):
        if isinstance(other, _dt.datetime) and getattr(other, "nanosecond", 0) != self.nanosecond:
            return False
        return super().__eq__(other)

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = _dt.datetime.__hash__

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        if not self.nanosecond or timespec not in ("auto", "nanoseconds"):
            return super().isoformat(sep, timespec)
        text = super().isoformat(sep, "microseconds")
        fraction_end = text.index(".") + 7
        return text[:fraction_end] + f"{self.nanosecond:03d}" + text[fraction_end:]

    def __repr__(self) -> str:
        return f"{type(self).__name__}.of({self._plain()!r}, nanosecond={self.nanosecond})"


def sub_microsecond_nanos(value: Any) -> int:
    """The nanoseconds below the microsecond a timestamp value holds (0 for plain datetimes)."""
    return getattr(value, "nanosecond", 0)


def timestamp_from(millis: int, nanos: int, local_zoned: bool) -> _dt.datetime:
    delta = _dt.timedelta(milliseconds=millis, microseconds=nanos // 1000)
    value = (EPOCH_UTC if local_zoned else EPOCH) + delta
    return NanoDatetime.of(value, nanos % 1000) if nanos % 1000 else value


def timestamp_parts(value: _dt.datetime) -> tuple[int, int]:
    """(epoch millis, nano of millisecond) of a datetime (aware: its instant; naive: as is), with the
    nanoseconds of a :class:`NanoDatetime`."""
    if value.tzinfo is not None:
        delta = value - EPOCH_UTC
    else:
        delta = value - EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    millis, micro_of_milli = divmod(micros, 1000)
    return millis, micro_of_milli * 1000 + sub_microsecond_nanos(value)


def _date_from(days: int) -> _dt.date:
    return EPOCH_DATE + _dt.timedelta(days=days)


def _date_to(value: _dt.date) -> int:
    return (value - EPOCH_DATE).days


def _time_from(millis: int) -> _dt.time:
    return (EPOCH + _dt.timedelta(milliseconds=millis)).time()


def _time_to(value: _dt.time) -> int:
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000


# ---------------------------------------------------------------------------------------------
# reading


def _var_bytes(buf: bytes, base: int, slot: int) -> bytes:
    mark = _LE_U64.unpack_from(buf, slot)[0]
    if mark >> 63:
        return bytes(buf[slot:slot + ((mark >> 56) & 0x7F)])
    offset, size = mark >> 32, mark & 0xFFFFFFFF
    start = base + offset
    if start + size > len(buf):
        raise ValueError("a binary row field points outside the row")
    return bytes(buf[start:start + size])


def _offset_and_size(buf: bytes, base: int, slot: int) -> tuple[int, int]:
    mark = _LE_U64.unpack_from(buf, slot)[0]
    return base + (mark >> 32), mark & 0xFFFFFFFF


def field_reader(t: LogicalType) -> Reader:
    """How to read a value of type ``t`` from its slot in a binary row or array."""
    root = t.root
    fixed = _LE.get(root)
    if fixed is not None:
        unpack = fixed.unpack_from
        if root == "DATE":
            return lambda buf, base, slot: _date_from(unpack(buf, slot)[0])
        if root == "TIME_WITHOUT_TIME_ZONE":
            return lambda buf, base, slot: _time_from(unpack(buf, slot)[0])
        return lambda buf, base, slot: unpack(buf, slot)[0]
    if root in STRING_ROOTS:
        return lambda buf, base, slot: _var_bytes(buf, base, slot).decode("utf-8", "surrogateescape")
    if root in BINARY_ROOTS or root == "RAW":
        return _var_bytes
    if root == "DECIMAL":
        scale = t.scale or 0
        if t.compact:
            return lambda buf, base, slot: decimal_from_unscaled(_LE_I64.unpack_from(buf, slot)[0], scale)
        return lambda buf, base, slot: decimal_from_unscaled(
            int.from_bytes(_var_bytes(buf, base, slot), "big", signed=True), scale)
    if root in TIMESTAMP_ROOTS:
        local_zoned = root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
        if t.compact:
            return lambda buf, base, slot: timestamp_from(_LE_I64.unpack_from(buf, slot)[0], 0, local_zoned)

        def read_timestamp(buf, base, slot):
            start, nanos = _offset_and_size(buf, base, slot)
            return timestamp_from(_LE_I64.unpack_from(buf, start)[0], nanos, local_zoned)

        return read_timestamp
    if root == "NULL":
        return lambda buf, base, slot: None
    nested = binary_decoder(t)

    def read_nested(buf, base, slot):
        start, size = _offset_and_size(buf, base, slot)
        return nested(buf, start, size)

    return read_nested


def binary_decoder(t: LogicalType) -> Callable[[bytes, int, int], Any]:
    """``(buf, start, size) -> value`` for a ROW (BinaryRowData, also a STRUCTURED_TYPE), ARRAY, MAP or MULTISET."""
    if t.root in ROW_ROOTS:
        return row_decoder(t.children)
    if t.root == "ARRAY":
        return _array_decoder(t.children[0])
    if t.root in ("MAP", "MULTISET"):
        key_type = t.children[0]
        value_type = t.children[1] if t.root == "MAP" else LogicalType("INTEGER", False)
        keys, values = _array_decoder(key_type), _array_decoder(value_type)

        def decode_map(buf, start, size):
            key_size = _LE_I32.unpack_from(buf, start)[0]
            k = keys(buf, start + 4, key_size)
            v = values(buf, start + 4 + key_size, size - 4 - key_size)
            if len(k) != len(v):
                raise ValueError("a binary map has key and value arrays of different lengths")
            return dict(zip(k, v))

        return decode_map
    raise ValueError(f"{t.name} is not stored as a binary structure")


def row_header_size(arity: int) -> int:
    return ((arity + 63 + 8) // 64) * 8


def row_decoder(types: tuple[LogicalType, ...]) -> Callable[[bytes, int, int], tuple]:
    readers = [field_reader(t) for t in types]
    header = row_header_size(len(types))
    layout = [(header + 8 * i, (8 + i) >> 3, 1 << ((8 + i) & 7), r) for i, r in enumerate(readers)]
    fixed_size = header + 8 * len(types)

    def decode_row(buf, start, size):
        if size < fixed_size or start + size > len(buf):
            raise ValueError(f"binary row of {size} bytes is shorter than its fixed part ({fixed_size})")
        values = tuple(None if buf[start + byte] & bit else read(buf, start, start + slot)
                       for slot, byte, bit, read in layout)
        kind = buf[start]
        if kind:
            if kind >= len(ROW_KINDS):
                raise ValueError(f"invalid row kind {kind}")
            return RowValue(values, ROW_KINDS[kind])
        return values

    return decode_row


def array_header_size(n: int) -> int:
    return 4 + ((n + 31) // 32) * 4


def _array_decoder(element: LogicalType) -> Callable[[bytes, int, int], list]:
    read = field_reader(element)
    element_size = element.array_slot_size

    def decode_array(buf, start, size):
        n = _LE_I32.unpack_from(buf, start)[0]
        header = array_header_size(n)
        if n < 0 or header + n * element_size > size:
            raise ValueError(f"invalid binary array length {n}")
        out = []
        for i in range(n):
            if buf[start + 4 + (i >> 3)] & (1 << (i & 7)):
                out.append(None)
            else:
                out.append(read(buf, start, start + header + i * element_size))
        return out

    return decode_array


# ---------------------------------------------------------------------------------------------
# writing


def _round8(n: int) -> int:
    return (n + 7) & ~7


def _put_var(buf: bytearray, slot: int, data: bytes, may_inline: bool = False) -> None:
    n = len(data)
    if may_inline and n <= 7:
        buf[slot:slot + 8] = data + bytes(7 - n) + bytes((0x80 | n,))
        return
    offset = len(buf)
    buf += data
    buf += bytes(_round8(n) - n)
    _LE_U64.pack_into(buf, slot, (offset << 32) | n)


def field_writer(t: LogicalType) -> Writer:
    """How to write a (non-null) value of type ``t`` into its slot of a binary row or array."""
    root = t.root
    fixed = _LE.get(root)
    if fixed is not None:
        pack = fixed.pack_into
        if root == "DATE":
            return lambda buf, slot, v: pack(buf, slot, _date_to(v) if isinstance(v, _dt.date) else int(v))
        if root == "TIME_WITHOUT_TIME_ZONE":
            return lambda buf, slot, v: pack(buf, slot, _time_to(v) if isinstance(v, _dt.time) else int(v))
        return lambda buf, slot, v: pack(buf, slot, v)
    if root in STRING_ROOTS:
        return lambda buf, slot, v: _put_var(buf, slot, v.encode("utf-8", "surrogateescape"), True)
    if root in BINARY_ROOTS:
        return lambda buf, slot, v: _put_var(buf, slot, bytes(v), True)
    if root == "RAW":
        return lambda buf, slot, v: _put_var(buf, slot, bytes(v))
    if root == "DECIMAL":
        precision, scale = t.precision or 0, t.scale or 0
        if t.compact:
            return lambda buf, slot, v: _LE_I64.pack_into(buf, slot, decimal_to_unscaled(v, precision, scale))

        def write_decimal(buf, slot, v):
            data = unscaled_bytes(decimal_to_unscaled(v, precision, scale))
            if len(data) > 16:
                raise ValueError(f"{v} does not fit DECIMAL({precision}, {scale})")
            offset = len(buf)
            buf += data + bytes(16 - len(data))
            _LE_U64.pack_into(buf, slot, (offset << 32) | len(data))

        return write_decimal
    if root in TIMESTAMP_ROOTS:
        if t.compact:
            return lambda buf, slot, v: _LE_I64.pack_into(buf, slot, timestamp_parts(v)[0])

        def write_timestamp(buf, slot, v):
            millis, nanos = timestamp_parts(v)
            offset = len(buf)
            buf += _LE_I64.pack(millis)
            _LE_U64.pack_into(buf, slot, (offset << 32) | nanos)

        return write_timestamp
    if root == "NULL":
        return lambda buf, slot, v: None
    nested = binary_encoder(t)
    return lambda buf, slot, v: _put_var(buf, slot, nested(v))


def _row_null_writer(t: LogicalType) -> Writer | None:
    """A null DECIMAL(p > 18) / TIMESTAMP(p > 3) row field still reserves its variable part."""
    if t.root == "DECIMAL" and not t.compact:
        def reserve_decimal(buf, slot, v):
            offset = len(buf)
            buf += bytes(16)
            _LE_U64.pack_into(buf, slot, offset << 32)

        return reserve_decimal
    if t.root in TIMESTAMP_ROOTS and not t.compact:
        def reserve_timestamp(buf, slot, v):
            offset = len(buf)
            buf += bytes(8)
            _LE_U64.pack_into(buf, slot, offset << 32)

        return reserve_timestamp
    return None


def binary_encoder(t: LogicalType) -> Callable[[Any], bytes]:
    """``value -> bytes`` of a ROW (BinaryRowData, also a STRUCTURED_TYPE), ARRAY, MAP or MULTISET."""
    if t.root in ROW_ROOTS:
        return row_encoder(t.children, t.field_names)
    if t.root == "ARRAY":
        return _array_encoder(t.children[0])
    if t.root in ("MAP", "MULTISET"):
        keys = _array_encoder(t.children[0])
        values = _array_encoder(t.children[1] if t.root == "MAP" else LogicalType("INTEGER", False))

        def encode_map(v):
            items = list(v.items() if isinstance(v, dict) else v)
            key_bytes = keys([k for k, _ in items])
            return _LE_I32.pack(len(key_bytes)) + key_bytes + values([x for _, x in items])

        return encode_map
    raise ValueError(f"{t.name} is not stored as a binary structure")


def row_encoder(types: tuple[LogicalType, ...], names: tuple[str, ...] = ()) -> Callable[[Any], bytes]:
    from .base import as_fields

    names = tuple(names) or tuple(f"f{i}" for i in range(len(types)))
    writers = [field_writer(t) for t in types]
    null_writers = [_row_null_writer(t) for t in types]
    header = row_header_size(len(types))
    fixed_size = header + 8 * len(types)
    kinds = {k: i for i, k in enumerate(ROW_KINDS)}

    def encode_row(value):
        values = as_fields(value, names)
        if len(values) != len(writers):
            raise ValueError(f"a row of {len(writers)} fields got {len(values)} values")
        buf = bytearray(fixed_size)
        buf[0] = kinds[row_kind_of(value)]
        for i, (v, write, null_write) in enumerate(zip(values, writers, null_writers)):
            slot = header + 8 * i
            if v is None:
                buf[(8 + i) >> 3] |= 1 << ((8 + i) & 7)
                if null_write is not None:
                    null_write(buf, slot, None)
            else:
                write(buf, slot, v)
        return bytes(buf)

    return encode_row


def _array_encoder(element: LogicalType) -> Callable[[list], bytes]:
    write = field_writer(element)
    element_size = element.array_slot_size

    def encode_array(values):
        values = list(values)
        n = len(values)
        header = array_header_size(n)
        buf = bytearray(_round8(header + n * element_size))
        _LE_I32.pack_into(buf, 0, n)
        for i, v in enumerate(values):
            if v is None:
                buf[4 + (i >> 3)] |= 1 << (i & 7)
            else:
                write(buf, header + i * element_size, v)
        return bytes(buf)

    return encode_array


# ---------------------------------------------------------------------------------------------
# stand-alone forms (what StringDataSerializer, DecimalDataSerializer, ... write: big-endian)


def _framed(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = read_count(buf, pos, "length")
    return pos, pos + n


def standalone_codec(t: LogicalType) -> tuple[Callable, Callable]:
    """``(decoder, encoder)`` of the table runtime's own serializer for ``t`` (the internal data
    structure serializers: StringData, DecimalData, TimestampData, ArrayData, MapData, RowData, RAW)."""
    root = t.root
    if root in STRING_ROOTS or root in BINARY_ROOTS or root == "RAW":
        text = root in STRING_ROOTS

        def dec_bytes(buf, pos):
            start, end = _framed(buf, pos)
            raw = bytes(buf[start:end])
            return (raw.decode("utf-8", "surrogateescape") if text else raw), end

        def enc_bytes(out, v):
            raw = v.encode("utf-8", "surrogateescape") if text else bytes(v)
            out += I32.pack(len(raw))
            out += raw

        return dec_bytes, enc_bytes
    if root == "DECIMAL":
        precision, scale = t.precision or 0, t.scale or 0
        if t.compact:
            def dec_compact(buf, pos):
                return decimal_from_unscaled(I64.unpack_from(buf, pos)[0], scale), pos + 8

            def enc_compact(out, v):
                out += I64.pack(decimal_to_unscaled(v, precision, scale))

            return dec_compact, enc_compact

        def dec_decimal(buf, pos):
            start, end = _framed(buf, pos)
            return decimal_from_unscaled(int.from_bytes(buf[start:end], "big", signed=True), scale), end

        def enc_decimal(out, v):
            raw = unscaled_bytes(decimal_to_unscaled(v, precision, scale))
            out += I32.pack(len(raw))
            out += raw

        return dec_decimal, enc_decimal
    if root in TIMESTAMP_ROOTS:
        local_zoned = root == "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
        if t.compact:
            def dec_millis(buf, pos):
                return timestamp_from(I64.unpack_from(buf, pos)[0], 0, local_zoned), pos + 8

            def enc_millis(out, v):
                out += I64.pack(timestamp_parts(v)[0])

            return dec_millis, enc_millis

        def dec_timestamp(buf, pos):
            millis, nanos = _BE_I64_I32.unpack_from(buf, pos)
            return timestamp_from(millis, nanos, local_zoned), pos + 12

        def enc_timestamp(out, v):
            out += _BE_I64_I32.pack(*timestamp_parts(v))

        return dec_timestamp, enc_timestamp
    if root in (*ROW_ROOTS, "ARRAY", "MAP", "MULTISET"):
        decode, encode = binary_decoder(t), binary_encoder(t)

        def dec_binary(buf, pos):
            start, end = _framed(buf, pos)
            return decode(buf, start, end - start), end

        def enc_binary(out, v):
            raw = encode(v)
            out += I32.pack(len(raw))
            out += raw

        return dec_binary, enc_binary
    raise ValueError(f"the table runtime has no serializer of its own for {t.name}")
