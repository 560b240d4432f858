"""The TypeInfo tree's base: one node per Flink serializer, the single source of truth for a state's type.

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

The nodes live in :mod:`.scalars` (scalar codecs and the scalar table, TimeWindow),
:mod:`.composites` (Tuple, Row, List, Set, Map, Nullable, Either, GenericArray, Timer, TTL),
:mod:`.pojo` (POJO and Enum) and :mod:`.pickled` (fstate's pickle serializer, opaque types);
:mod:`.visitor` walks the tree. This module holds what they share: the base class, the big-endian
struct formats and Flink's class-name prefixes and magic numbers.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any, Callable

from ..binary import DataOutput
from ..errors import UnsupportedSerializerError

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[bytearray, Any], None]

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
U16 = struct.Struct(">H")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")

#: The epoch of Flink's time values (java.time / java.sql / table-runtime), naive UTC, aware UTC, date.
EPOCH = datetime.datetime(1970, 1, 1)
EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
EPOCH_DATE = datetime.date(1970, 1, 1)

BASE = "org.apache.flink.api.common.typeutils.base."
ARRAYS = BASE + "array."
RUNTIME = "org.apache.flink.api.java.typeutils.runtime."

COMPOSITE_MAGIC = 911108
NESTED_MAGIC = 1333245

LONG_MIN = -(1 << 63)
INT_MIN = -(1 << 31)
SHORT_MIN = -(1 << 15)


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


def read_count(buf, pos: int, what: str, slack: int = 0, width: int = 1) -> tuple[int, int]:
    """The i32 count (or byte length) at pos and the position after it. It must not be negative,
    and its items (at least width bytes each; slack of them may take none, as the null at the end
    of a list) must fit the bytes left; else ValueError("invalid <what> <n>")."""
    n = I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0 or width * n > len(buf) - pos + slack:
        raise ValueError(f"invalid {what} {n}")
    return n, pos


def as_fields(v: Any, names: tuple[str, ...]) -> tuple:
    """A struct-like value (tuple, dict by field name, or a Spark Row) as a tuple in field order."""
    if isinstance(v, dict):
        return tuple(v.get(n) for n in names)
    if hasattr(v, "asDict") and not isinstance(v, tuple):
        d = v.asDict()
        return tuple(d.get(n) for n in names)
    return tuple(v)

