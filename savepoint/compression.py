"""Snapshot compression: Snappy in the xerial framing format (Flink's only snapshot codec).

Chunks: ``u8 type, u24 little-endian length, body``. Type 0xFF = stream identifier ``sNaPpY``,
0x00 = masked CRC32C (LE) + raw snappy block, 0x01 = masked CRC32C + uncompressed bytes,
0x80–0xFE skippable. A Flink stream has no end marker; a new stream starts with a new identifier.

Flink writes the masked CRC32C of every chunk's uncompressed bytes but reads with checksum
verification turned off (its decorator opens the framed input stream with ``verifyChecksums =
false``). fstate does the same when reading (the pure Python CRC costs time), and checks every
checksum inside :func:`checking_checksums`, which ``fstate verify`` uses.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys

from .errors import CorruptStateError

try:  # pyarrow ships a fast snappy; the pure Python decoder below is the fallback (and is tested)
    import pyarrow as _pa

    _pa.Codec("snappy")
    _HAVE_ARROW_SNAPPY = True
except Exception:  # pragma: no cover - depends on the environment
    _HAVE_ARROW_SNAPPY = False

STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
CHUNK_COMPRESSED = 0x00
CHUNK_UNCOMPRESSED = 0x01
CHUNK_IDENTIFIER = 0xFF
MAX_BLOCK = 65536


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 35:
            raise ValueError("bad snappy length varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def snappy_decompress_py(block: bytes) -> bytes:
    """Decompress one raw snappy block (pure Python)."""
    n, pos = _uvarint(block, 0)
    if n > MAX_BLOCK * 4:
        raise ValueError(f"snappy block claims {n} bytes")
    out = bytearray()
    end = len(block)
    while pos < end:
        tag = block[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal
            ln = tag >> 2
            if ln >= 60:
                extra = ln - 59
                ln = int.from_bytes(block[pos:pos + extra], "little")
                pos += extra
            ln += 1
            if pos + ln > end:
                raise ValueError("snappy literal runs past the block")
            out += block[pos:pos + ln]
            pos += ln
            continue
        if kind == 1:
            ln = ((tag >> 2) & 7) + 4
            off = ((tag >> 5) << 8) | block[pos]
            pos += 1
        elif kind == 2:
            ln = (tag >> 2) + 1
            off = int.from_bytes(block[pos:pos + 2], "little")
            pos += 2
        else:
            ln = (tag >> 2) + 1
            off = int.from_bytes(block[pos:pos + 4], "little")
            pos += 4
        if off == 0 or off > len(out):
            raise ValueError("snappy copy offset out of range")
        start = len(out) - off
        if off >= ln:
            out += out[start:start + ln]
        else:
            for i in range(ln):
                out.append(out[start + i])
    if len(out) != n:
        raise ValueError(f"snappy block decompressed to {len(out)} bytes, expected {n}")
    return bytes(out)


def snappy_decompress(block: bytes) -> bytes:
    if _HAVE_ARROW_SNAPPY:
        n, _ = _uvarint(block, 0)
        if n > MAX_BLOCK * 4:
            raise ValueError(f"snappy block claims {n} bytes")
        try:
            return _pa.decompress(block, decompressed_size=n, codec="snappy", asbytes=True)
        except OSError as e:  # pyarrow reports corrupt snappy data as an OSError
            raise ValueError(f"corrupt snappy block ({e})") from None
    return snappy_decompress_py(block)


_CHECK_CHECKSUMS = contextvars.ContextVar("fstate_check_snappy_checksums", default=False)


@contextlib.contextmanager
def checking_checksums():
    """Within this block every decompressed chunk's CRC32C is compared with the one it carries."""
    token = _CHECK_CHECKSUMS.set(True)
    try:
        yield
    finally:
        _CHECK_CHECKSUMS.reset(token)


def decompress_framed(buf: bytes, start: int, end: int | None = None, *, source: str | None = None
                      ) -> tuple[bytes, dict[int, int]]:
    """Decompress one framed stream starting at ``start``.

    Stops at ``end``, at the end of ``buf``, or at the identifier chunk of the *next* stream.
    Returns the bytes and a map from each data chunk's position in ``buf`` to its position in
    the output (operator-state offsets point at chunk boundaries). Within
    :func:`checking_checksums` a chunk whose bytes do not match its CRC32C is an error.
    """
    check = _CHECK_CHECKSUMS.get()
    end = len(buf) if end is None else min(end, len(buf))
    out = bytearray()
    positions: dict[int, int] = {}
    pos = start
    seen_data = False
    try:
        while pos + 4 <= end:
            ctype = buf[pos]
            length = buf[pos + 1] | (buf[pos + 2] << 8) | (buf[pos + 3] << 16)
            body = pos + 4
            if body + length > end:
                raise ValueError(f"snappy chunk of {length} bytes runs past the end of the stream")
            if ctype == CHUNK_IDENTIFIER:
                if seen_data:
                    break
                if buf[body:body + length] != b"sNaPpY":
                    raise ValueError("bad snappy stream identifier")
            elif ctype in (CHUNK_COMPRESSED, CHUNK_UNCOMPRESSED):
                if length < 4:
                    raise ValueError("snappy data chunk shorter than its checksum")
                positions[pos] = len(out)
                payload = bytes(buf[body + 4:body + length])
                chunk = snappy_decompress(payload) if ctype == CHUNK_COMPRESSED else payload
                if check:
                    stored = int.from_bytes(buf[body:body + 4], "little")
                    if masked_crc32c(chunk) != stored:
                        raise ValueError(f"snappy chunk checksum mismatch (stored 0x{stored:08x}, "
                                         f"computed 0x{masked_crc32c(chunk):08x})")
                out += chunk
                seen_data = True
            elif ctype < 0x80:
                raise ValueError(f"reserved snappy chunk type 0x{ctype:02x}")
            pos = body + length
    except ValueError as e:
        raise CorruptStateError(f"compressed state at byte {pos}: {e}", source) from None
    return bytes(out), positions


# ---------------------------------------------------------------------------------------------
# writing (used by writers and the runtime when compression is on)

_CRC_TABLE: list[int] = []


def _crc32c_table() -> list[int]:
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    return _CRC_TABLE


_SLICE_TABLES: list[list[int]] = []


def _slice_tables() -> list[list[int]]:
    """Four tables for the slicing-by-4 CRC (four bytes per step)."""
    if not _SLICE_TABLES:
        t0 = _crc32c_table()
        tables = [t0]
        for _ in range(3):
            prev = tables[-1]
            tables.append([(prev[i] >> 8) ^ t0[prev[i] & 0xFF] for i in range(256)])
        _SLICE_TABLES.extend(tables)
    return _SLICE_TABLES


def crc32c(data: bytes) -> int:
    t0, t1, t2, t3 = _slice_tables()
    c = 0xFFFFFFFF
    n = len(data) & ~3
    words = memoryview(bytes(data[:n])).cast("I") if n else ()
    if words and sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        words = [int.from_bytes(bytes(data[i:i + 4]), "little") for i in range(0, n, 4)]
    for w in words:
        c ^= w
        c = t3[c & 0xFF] ^ t2[(c >> 8) & 0xFF] ^ t1[(c >> 16) & 0xFF] ^ t0[c >> 24]
    for b in data[n:]:
        c = t0[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame_chunks(data: bytes, with_identifier: bool = True) -> bytes:
    """Frame ``data`` as uncompressed snappy chunks (valid for every Flink reader)."""
    out = bytearray(STREAM_IDENTIFIER if with_identifier else b"")
    for i in range(0, len(data), MAX_BLOCK):
        part = data[i:i + MAX_BLOCK]
        length = len(part) + 4
        out += bytes((CHUNK_UNCOMPRESSED, length & 0xFF, (length >> 8) & 0xFF, length >> 16))
        out += masked_crc32c(part).to_bytes(4, "little")
        out += part
    return bytes(out)
