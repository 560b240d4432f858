"""Composite types: CompositeTypeSerializerSnapshot framing (an outer snapshot, then the nested ones).

Tuple, Row, List (ArrayList, Set), Map, Nullable, Either, GenericArray, Timer and TTL.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from ..binary import DataOutput
from . import hashing
from .base import (BASE, COMPOSITE_MAGIC, I32, I64, LONG_MIN, NESTED_MAGIC, RUNTIME, Decoder, Encoder, TypeInfo,
                   as_fields, read_count)


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
            for e, x in zip(encs, as_fields(v, self.field_names), strict=True):
                e(out, x)

        return enc

    def java_hash(self, value: Any) -> int:
        h = 0
        for c, x in zip(self.children, as_fields(value, self.field_names), strict=True):
            h = (31 * h + (0 if x is None else c.java_hash(x))) & 0xFFFFFFFF
        return hashing.to_int32(h)


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
            vals = as_fields(v, names)
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
        for c, x in zip(self.children, as_fields(value, self.field_names), strict=True):
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
            n, pos = read_count(buf, pos, "list size", slack=1)
            out = []
            for _ in range(n):
                v, pos = d(buf, pos)
                out.append(v)
            return out, pos

        return dec

    def encoder(self) -> Encoder:
        e = self.element.encoder()

        def enc(out, v):
            out += I32.pack(len(v))
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
        return map_decoder(self.key, self.value, "map size")

    def encoder(self) -> Encoder:
        return map_encoder(self.key, self.value)


def map_decoder(key: TypeInfo, value: TypeInfo, what: str, unique: bool = False) -> Decoder:
    """Flink's map layout (MapSerializer, and the table runtime's SortedMapSerializer): an i32 size,
    then per entry the key, a null flag and the value unless null. ``unique``: a key twice is an error."""
    dk = key.decoder()
    dv = value.decoder()

    def dec(buf, pos):
        n, pos = read_count(buf, pos, what)
        out = {}
        for _ in range(n):
            k, pos = dk(buf, pos)
            if buf[pos]:
                v, pos = None, pos + 1
            else:
                v, pos = dv(buf, pos + 1)
            if unique and k in out:
                raise ValueError(f"{what.split()[0]} map holds a key twice")
            out[k] = v
        return out, pos

    return dec


def map_encoder(key: TypeInfo, value: TypeInfo, order=None) -> Encoder:
    """The encoder of :func:`map_decoder`'s layout; ``order`` (item key -> sort key) sorts the entries."""
    ek = key.encoder()
    ev = value.encoder()

    def enc(out, v):
        items = list(v.items() if isinstance(v, dict) else v)
        if order is not None:
            items.sort(key=lambda item: order(item[0]))
        out += I32.pack(len(items))
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
            left, right = as_fields(v, self.field_names)
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
            n, pos = read_count(buf, pos, "array length")
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
            out += I32.pack(len(v))
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
            ts = I64.unpack_from(buf, pos)[0] ^ LONG_MIN
            k, pos = dk(buf, pos + 8)
            ns, pos = dn(buf, pos)
            return (ts, k, ns), pos

        return dec

    def encoder(self) -> Encoder:
        ek = self.key.encoder()
        en = self.namespace.encoder()

        def enc(out, v):
            ts, k, ns = v
            out += I64.pack(ts ^ LONG_MIN)
            ek(out, k)
            en(out, ns)

        return enc


def ttl_write_timestamp() -> int:
    """The last-access timestamp (epoch ms, Flink's default TTL time provider) of TTL values fstate writes."""
    return time.time_ns() // 1_000_000


#: the fields a timestamped TTL value is shown with (readers: a struct of the value and its last access)
TTL_FIELDS = ("value", "ttl_timestamp")


class TtlValue(NamedTuple):
    """A TTL-wrapped value with its last access (epoch ms): Flink's ``TtlValue``. What a
    timestamped :class:`TtlType` decodes to and encodes from."""

    user_value: Any
    last_access_timestamp: int


class TtlType(Composite):
    """A TTL-wrapped state value: (last access timestamp, user value); decodes to the user value and
    encodes with the write time as its last access (:func:`ttl_write_timestamp`).

    ``timestamped=True`` (see :meth:`with_timestamps`) keeps the timestamp: values decode to and
    encode from :class:`TtlValue` (the stream runtime's TTL state). Same layout, same serializer
    snapshot; only the Python value differs."""

    snapshot_class = "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot"
    outer_version = 2

    def __init__(self, timestamp: TypeInfo, value: TypeInfo, snapshot_class: str | None = None,
                 timestamped: bool = False):
        self.children = (timestamp, value)
        if snapshot_class:
            self.snapshot_class = snapshot_class
        self.timestamped = timestamped
        self.length = (8 + value.length) if value.length >= 0 else -1

    def with_timestamps(self, timestamped: bool = True) -> "TtlType":
        """This type, decoding to / encoding from :class:`TtlValue` (or not)."""
        if timestamped == self.timestamped:
            return self
        return TtlType(self.children[0], self.value, self.snapshot_class, timestamped)

    def _key(self) -> tuple:
        return (self.snapshot_class, self.children, self.timestamped)

    @property
    def value(self) -> TypeInfo:
        return self.children[1]

    @property
    def name(self) -> str:
        return f"{self.value.name} (TTL)"

    def decoder(self) -> Decoder:
        dv = self.value.decoder()
        if self.timestamped:
            def dec_timestamped(buf, pos):
                v, end = dv(buf, pos + 8)
                return TtlValue(v, I64.unpack_from(buf, pos)[0]), end

            return dec_timestamped

        def dec(buf, pos):
            return dv(buf, pos + 8)

        return dec

    def encoder(self) -> Encoder:
        ev = self.value.encoder()
        if self.timestamped:
            def enc_timestamped(out, v):
                out += I64.pack(v.last_access_timestamp)
                ev(out, v.user_value)

            return enc_timestamped

        def enc(out, v):
            # A value fstate writes counts as written now, as Flink stamps a write. (Flink expires a
            # value when last access + TTL <= now, so a minimal timestamp would be expired at once.)
            out += I64.pack(ttl_write_timestamp())
            ev(out, v)

        return enc
