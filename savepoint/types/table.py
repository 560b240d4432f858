"""TypeInfo nodes of the table runtime's serializers (Flink SQL / Table API state).

Four node classes (and :mod:`.sorted_map`'s ``SortedMapSerializer``):

* :class:`RowDataType`: ``RowDataSerializer`` (field LogicalTypes, Java-serialized in the snapshot,
  then one nested serializer snapshot per field) and ``BinaryRowDataSerializer`` (the arity only:
  its values are kept as raw bytes). Values: an ``int`` length, then a BinaryRowData.
* :class:`TableDataType`: one serializer of the table runtime's internal data structures,
  parameterised by its :class:`~.logical.LogicalType`: ``StringDataSerializer`` (VARCHAR),
  ``DecimalDataSerializer`` (DECIMAL(p, s)), ``TimestampDataSerializer`` (TIMESTAMP(p); the
  LogicalType of the enclosing row tells TIMESTAMP_LTZ), ``ArrayDataSerializer``,
  ``MapDataSerializer`` and the data views' ``NullSerializer``.
* :class:`RawValueDataType`: ``RawValueDataSerializer`` around a serializer (a RAW field:
  an ``int`` length and the bytes the inner serializer wrote; read as those bytes).
* :class:`ExternalType`: ``ExternalSerializer`` (a Java-serialized ``DataType`` and the internal
  serializer; values are the internal serializer's bytes).

Snapshots keep the exact bytes they were read from (the Java-serialized parts), so they write back
byte-identical. The binary formats are in :mod:`.table_binary`, the LogicalTypes in :mod:`.logical`.
"""

from __future__ import annotations

from typing import Any

from ..binary import DataOutput
from ..errors import UnsupportedSerializerError
from . import hashing
from .base import I32, NESTED_MAGIC, Decoder, Encoder, TypeInfo, read_count
from .composites import Composite
from .logical import TIMESTAMP_ROOTS, LogicalType
from .logical_java import java_logical_type
from .table_binary import row_decoder, row_encoder, standalone_codec

TABLE = "org.apache.flink.table.runtime.typeutils."
ROW_DATA = TABLE + "RowDataSerializer$RowDataSerializerSnapshot"
BINARY_ROW_DATA = TABLE + "BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot"
STRING_DATA = TABLE + "StringDataSerializer$StringDataSerializerSnapshot"
DECIMAL_DATA = TABLE + "DecimalDataSerializer$DecimalSerializerSnapshot"
TIMESTAMP_DATA = TABLE + "TimestampDataSerializer$TimestampDataSerializerSnapshot"
ARRAY_DATA = TABLE + "ArrayDataSerializer$ArrayDataSerializerSnapshot"
MAP_DATA = TABLE + "MapDataSerializer$MapDataSerializerSnapshot"
NULL_DATA = "org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot"

STRING_TYPE = LogicalType("VARCHAR", True, length=0x7FFFFFFF)


def hash_by_words(data: bytes) -> int:
    """``BinarySegmentUtils.hashByWords``: the ``hashCode`` of BinaryRowData / arrays / maps
    (Murmur3 32 over little-endian 4-byte words, seed 42)."""
    if len(data) % 4:
        raise ValueError("hashByWords needs a multiple of 4 bytes")
    h = 42
    mask = 0xFFFFFFFF
    for i in range(0, len(data), 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * 0xCC9E2D51) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * 0x1B873593) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return hashing.to_int32(h)


class RowDataType(TypeInfo):
    """A table row: ``types`` are the field LogicalTypes, ``children`` the nested field serializers."""

    snapshot_version = 3

    def __init__(self, types: tuple[LogicalType, ...] | None, fields: tuple[TypeInfo, ...] = (),
                 names: tuple[str, ...] | None = None, arity: int | None = None):
        self.types = tuple(types) if types is not None else None
        self.arity = len(self.types) if self.types is not None else int(arity or 0)
        self.snapshot_class = ROW_DATA if self.types is not None else BINARY_ROW_DATA
        if self.types is not None and fields and len(fields) != len(self.types):
            raise ValueError(f"a row of {len(self.types)} field types has {len(fields)} field serializers")
        self.children = tuple(_typed(f, t) for f, t in zip(fields, self.types or ()))
        self.field_names = tuple(names) if names else tuple(f"f{i}" for i in range(self.arity))
        self.decodable = self.types is not None and all(t.decodable for t in self.types)

    @property
    def name(self) -> str:
        if self.types is None:
            return f"BinaryRowData({self.arity})"
        return "RowData<" + ", ".join(f"{n} {t.name}" for n, t in zip(self.field_names, self.types)) + ">"

    def _key(self) -> tuple:
        return (self.snapshot_class, self.types, self.arity, self.children)

    def _write_payload(self, out: DataOutput) -> None:
        if self.types is None:
            out.write_i32(self.arity)
            return
        out.write_i32(len(self.types))
        for t in self.types:
            out.write_bytes(java_logical_type(t))  # as read, or written from scratch
        out.write_i32(NESTED_MAGIC)
        out.write_i32(1)
        out.write_i32(len(self.children))
        for c in self.children:
            c.write_snapshot(out)

    def decoder(self) -> Decoder:
        if not self.decodable:
            return super().decoder()
        decode = row_decoder(self.types)

        def dec(buf, pos):
            n, pos = read_count(buf, pos, "binary row length")
            return decode(buf, pos, n), pos + n

        return dec

    def encoder(self) -> Encoder:
        if not self.decodable:
            return super().encoder()
        encode = row_encoder(self.types, self.field_names)

        def enc(out, v):
            raw = encode(v)
            out += I32.pack(len(raw))
            out += raw

        return enc

    def binary(self, value: Any) -> bytes:
        """The BinaryRowData bytes of a row value (no length prefix)."""
        return row_encoder(self.types, self.field_names)(value)

    def java_hash(self, value: Any) -> int:
        if not self.decodable:
            return super().java_hash(value)
        return hash_by_words(self.binary(value))


class TableDataType(TypeInfo):
    """A serializer of one internal table data structure, parameterised by its LogicalType."""

    def __init__(self, snapshot_class: str, version: int, payload: bytes, logical: LogicalType):
        self.snapshot_class = snapshot_class
        self.snapshot_version = version
        self.payload = bytes(payload)
        self.logical = logical
        self.decodable = logical.decodable
        if logical.root == "DECIMAL" and logical.compact or logical.root in TIMESTAMP_ROOTS and logical.compact:
            self.length = 8
        elif logical.root in TIMESTAMP_ROOTS:
            self.length = 12
        elif logical.root == "NULL":
            self.length = 1

    @property
    def name(self) -> str:
        return self.logical.name

    def _key(self) -> tuple:
        return (self.snapshot_class, self.snapshot_version, self.payload, self.logical)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_bytes(self.payload)

    def with_logical(self, logical: LogicalType) -> "TableDataType":
        """The same serializer, typed by the LogicalType its enclosing row gives it."""
        if logical.root == self.logical.root or (logical.root in TIMESTAMP_ROOTS
                                                 and self.logical.root in TIMESTAMP_ROOTS):
            return TableDataType(self.snapshot_class, self.snapshot_version, self.payload, logical)
        return self

    def decoder(self) -> Decoder:
        if self.logical.root == "NULL":
            return _dec_null
        return standalone_codec(self.logical)[0]

    def encoder(self) -> Encoder:
        if self.logical.root == "NULL":
            return _enc_null
        return standalone_codec(self.logical)[1]


def _dec_null(buf, pos):
    return None, pos + 1


def _enc_null(out, v):
    out.append(0)


class RawValueDataType(Composite):
    """``RawValueDataSerializer``: the bytes the inner serializer wrote, with an ``int`` length."""

    snapshot_class = TABLE + "RawValueDataSerializer$RawValueDataSerializerSnapshot"
    outer_version = 0

    def __init__(self, inner: TypeInfo):
        self.children = (inner,)

    @property
    def inner(self) -> TypeInfo:
        return self.children[0]

    @property
    def name(self) -> str:
        return f"RawValue<{self.inner.name}>"

    def decoder(self) -> Decoder:
        def dec(buf, pos):
            n, pos = read_count(buf, pos, "raw value length")
            return bytes(buf[pos:pos + n]), pos + n

        return dec

    def encoder(self) -> Encoder:
        def enc(out, v):
            out += I32.pack(len(v))
            out += v

        return enc


class ExternalType(Composite):
    """``ExternalSerializer``: a DataType (Java-serialized, kept as read) over an internal serializer."""

    snapshot_class = TABLE + "ExternalSerializer$ExternalSerializerSnapshot"
    outer_version = 1

    def __init__(self, inner: TypeInfo, data_type: bytes, is_internal_input: bool, logical: LogicalType,
                 conversion_class: str | None):
        self.children = (inner,)
        self.data_type = bytes(data_type)
        self.is_internal_input = is_internal_input
        self.logical = logical
        self.conversion_class = conversion_class
        self.length = inner.length
        if isinstance(inner, TableDataType):
            self.children = (inner.with_logical(logical),)

    @property
    def inner(self) -> TypeInfo:
        return self.children[0]

    @property
    def name(self) -> str:
        return self.inner.name

    def _key(self) -> tuple:
        return (self.children, self.data_type, self.is_internal_input)

    def _write_outer(self, out: DataOutput) -> None:
        out.write_bytes(self.data_type)
        out.write_bool(self.is_internal_input)

    def decoder(self) -> Decoder:
        return self.inner.decoder()

    def encoder(self) -> Encoder:
        return self.inner.encoder()

    def java_hash(self, value: Any) -> int:
        return self.inner.java_hash(value)


def _typed(field: TypeInfo, logical: LogicalType) -> TypeInfo:
    return field.with_logical(logical) if isinstance(field, TableDataType) else field


def standalone_logical(snapshot_class: str, payload: bytes) -> LogicalType:
    """The LogicalType a simple table serializer snapshot implies (before a row types it)."""
    if snapshot_class == STRING_DATA:
        return STRING_TYPE
    if snapshot_class == DECIMAL_DATA:
        return LogicalType("DECIMAL", True, precision=I32.unpack_from(payload, 0)[0],
                           scale=I32.unpack_from(payload, 4)[0])
    if snapshot_class == TIMESTAMP_DATA:
        return LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", True, precision=I32.unpack_from(payload, 0)[0])
    if snapshot_class == NULL_DATA:
        return LogicalType("NULL", True)
    raise UnsupportedSerializerError(f"{snapshot_class} is not a simple table serializer")
