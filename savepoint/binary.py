"""Big-endian primitives as Java's DataInput/DataOutput write them, plus Flink's string encodings.

Two string encodings matter:

* ``writeUTF`` (modified UTF-8 with a u16 byte count) for names in metadata and serializer snapshots;
* Flink's ``StringValue`` encoding (7-bit varints of UTF-16 code units) for String *values*.

:class:`DataInput` is the structured reader used for metadata, handles and snapshots. Hot value loops
use the ``read_*(buf, pos) -> (value, pos)`` functions directly over ``bytes``.
"""

from __future__ import annotations

import struct

from ._compiled import pure_python_forced, speedups
from .errors import CorruptStateError

_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")

# ---------------------------------------------------------------------------------------------
# Modified UTF-8 (Java writeUTF / readUTF)


def decode_mutf8(raw: bytes) -> str:
    """Decode Java's modified UTF-8 (NUL as C0 80, supplementary characters as two surrogates)."""
    if raw.isascii():
        return raw.decode("ascii")
    text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    # Re-join surrogate pairs that were written as two 3-byte sequences.
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


def encode_mutf8(text: str) -> bytes:
    if text.isascii() and "\x00" not in text:
        return text.encode("ascii")
    units = text.encode("utf-16-be", "surrogatepass")
    # Decoding UTF-16 code units one by one keeps surrogates as lone code points.
    split = "".join(chr(int.from_bytes(units[i:i + 2], "big")) for i in range(0, len(units), 2))
    return split.encode("utf-8", "surrogatepass").replace(b"\x00", b"\xc0\x80")


# ---------------------------------------------------------------------------------------------
# Flink StringValue encoding (StringSerializer)


def read_flink_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    """Read a Flink ``StringValue`` string at ``pos``; returns (value or None, new position)."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        length = b
    else:
        length = b & 0x7F
        shift = 7
        while True:
            b = buf[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
    if length == 0:
        return None, pos
    n = length - 1
    end = pos + n
    chunk = buf[pos:end]
    if len(chunk) == n and chunk.isascii():
        return chunk.decode("ascii"), end
    return _read_flink_string_slow(buf, pos, n)


def _read_flink_string_slow(buf: bytes, pos: int, n: int) -> tuple[str, int]:
    units = []
    append = units.append
    for _ in range(n):
        b = buf[pos]
        pos += 1
        if b >= 0x80:
            c = b & 0x7F
            shift = 7
            while True:
                b = buf[pos]
                pos += 1
                c |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            b = c
        append(b)
    raw = struct.pack(f">{n}H", *units) if n else b""
    return raw.decode("utf-16-be", "surrogatepass"), pos


read_flink_string_py = read_flink_string
if speedups is not None and not pure_python_forced():
    # the compiled twin (savepoint/_speedups.c): the same strings, positions and exceptions
    read_flink_string = speedups.read_flink_string


def _varint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_flink_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    if value.isascii():
        _varint(out, len(value) + 1)
        out += value.encode("ascii")
        return
    raw = value.encode("utf-16-be", "surrogatepass")
    n = len(raw) // 2
    _varint(out, n + 1)
    for (u,) in struct.iter_unpack(">H", raw):
        _varint(out, u)


# ---------------------------------------------------------------------------------------------


class DataInput:
    """A cursor over a byte buffer with Java DataInput semantics; errors name the source."""

    __slots__ = ("buf", "pos", "end", "source")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None, source: str | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end
        self.source = source

    # -- errors --------------------------------------------------------------------------
    def fail(self, message: str, cls: type[CorruptStateError] = CorruptStateError) -> CorruptStateError:
        return cls(f"{message} (at byte {self.pos})", self.source)

    def _need(self, n: int) -> int:
        p = self.pos
        if n < 0 or p + n > self.end:
            raise self.fail(f"truncated: needed {n} more bytes, {self.end - p} left")
        self.pos = p + n
        return p

    # -- primitives -----------------------------------------------------------------------
    def remaining(self) -> int:
        return self.end - self.pos

    def read_bytes(self, n: int) -> bytes:
        p = self._need(n)
        return bytes(self.buf[p:p + n])

    def read_u8(self) -> int:
        return self.buf[self._need(1)]

    def read_i8(self) -> int:
        v = self.buf[self._need(1)]
        return v - 256 if v > 127 else v

    def read_bool(self) -> bool:
        return self.buf[self._need(1)] != 0

    def read_i16(self) -> int:
        return _I16.unpack_from(self.buf, self._need(2))[0]

    def read_u16(self) -> int:
        return _U16.unpack_from(self.buf, self._need(2))[0]

    def read_i32(self) -> int:
        return _I32.unpack_from(self.buf, self._need(4))[0]

    def read_i64(self) -> int:
        return _I64.unpack_from(self.buf, self._need(8))[0]

    def read_f32(self) -> float:
        return _F32.unpack_from(self.buf, self._need(4))[0]

    def read_f64(self) -> float:
        return _F64.unpack_from(self.buf, self._need(8))[0]

    def read_utf(self) -> str:
        n = self.read_u16()
        raw = self.read_bytes(n)
        try:
            return decode_mutf8(raw)
        except UnicodeDecodeError as e:
            raise self.fail(f"invalid modified UTF-8 string: {e.reason}") from None

    def read_count(self, what: str, limit: int | None = None, unit_size: int = 1) -> int:
        """An i32 count that must be >= 0 and (times unit_size) fit into the remaining bytes."""
        n = self.read_i32()
        if n < 0:
            raise self.fail(f"negative {what} count {n}")
        if limit is not None and n > limit:
            raise self.fail(f"{what} count {n} exceeds the limit {limit}")
        if n * unit_size > self.end - self.pos:
            raise self.fail(f"{what} count {n} does not fit into the {self.end - self.pos} remaining bytes")
        return n


class DataOutput:
    """Append-only big-endian writer (Java DataOutputStream)."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def __len__(self) -> int:
        return len(self.buf)

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def write_bytes(self, b: bytes) -> None:
        self.buf += b

    def write_u8(self, v: int) -> None:
        self.buf.append(v & 0xFF)

    def write_bool(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def write_i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def write_u16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def write_i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def write_i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def write_utf(self, text: str) -> None:
        raw = encode_mutf8(text)
        if len(raw) > 0xFFFF:
            raise ValueError(f"string of {len(raw)} encoded bytes is too long for writeUTF (max 65535)")
        self.write_u16(len(raw))
        self.buf += raw
