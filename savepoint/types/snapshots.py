"""Serializer snapshots → TypeInfo trees (and back).

A snapshot is ``UTF class name, i32 version, payload`` with **no length prefix**: a reader must
understand every class it meets. Unknown classes raise :class:`UnsupportedSerializerError`, except
inside length-framed entries (POJO fields, Kryo registrations), where the bytes are kept opaque.
"""

from __future__ import annotations

import re

from typing import Callable

from ..binary import DataInput, DataOutput
from ..errors import CorruptStateError, UnsupportedSerializerError, UnsupportedVersionError
from .base import COMPOSITE_MAGIC, NESTED_MAGIC, RUNTIME, TypeInfo
from .cep import KINDS as CEP_KINDS, CepType
from .composites import (ArrayListType, EitherType, GenericArrayType, ListType, MapType, NullableType, RowType,
                         SetType, TimerType, TtlType, TupleType)
from .pickled import PICKLED, OpaqueType, PickledType
from .pojo import OPTIONAL_MAP_HEADER, EnumType, PojoType
from .scalars import SCALARS, TIME_WINDOW, TimeWindowType
from . import sorted_map, table
from .logical import LogicalType, data_type_logical, from_java, read_logical_type
from ..javaser import read_java_object

PROXY_VERSION = 2
_MAX_DEPTH = 48


def read_serializer_snapshot(inp: DataInput) -> TypeInfo:
    """Top-level form used in state meta info: ``i32 2`` then the versioned snapshot."""
    version = inp.read_i32()
    if version != PROXY_VERSION:
        if version == 1:
            raise UnsupportedVersionError(
                "serializer snapshot written in the pre-1.7 format (TypeSerializerConfigSnapshot), "
                "which Flink itself no longer reads", inp.source)
        raise inp.fail(f"unknown serializer snapshot format version {version}", UnsupportedVersionError)
    return read_versioned_snapshot(inp)


def write_serializer_snapshot(out: DataOutput, t: TypeInfo) -> None:
    out.write_i32(PROXY_VERSION)
    t.write_snapshot(out)


#: a Java binary class name: dot-separated identifiers (letters, digits, _ and $, not starting with a digit)
JAVA_CLASS_NAME = re.compile(r"^(?:[^\W\d][\w$]*|\$[\w$]*)(?:\.(?:[^\W\d][\w$]*|\$[\w$]*))*$")


def read_versioned_snapshot(inp: DataInput, depth: int = 0) -> TypeInfo:
    if depth > _MAX_DEPTH:
        raise inp.fail("serializer snapshots nested too deeply")
    start = inp.pos
    cls = inp.read_utf()
    version = inp.read_i32()
    scalar = SCALARS.get(cls)
    if scalar is not None:
        if version == 2:
            inp.read_utf()  # old simple snapshots stored the serializer class name
        elif version != 3:
            raise inp.fail(f"unknown version {version} of {cls}", UnsupportedVersionError)
        return scalar
    if cls == TimeWindowType.snapshot_class:
        if version == 2:
            inp.read_utf()
        return TIME_WINDOW
    parser = _PARSERS.get(cls)
    if parser is None and not JAVA_CLASS_NAME.match(cls):
        # damage, not a serializer fstate does not know: no Java class has such a name
        raise inp.fail(f"serializer snapshot class name {cls[:80]!r} is not a Java class name")
    if parser is None:
        inp.pos = start
        raise UnsupportedSerializerError(
            f"serializer snapshot class {cls} (version {version}) is not known to fstate", inp.source)
    return parser(inp, version, depth)


# ---------------------------------------------------------------------------------------------
# composite framing


def _read_composite(inp: DataInput, version: int, depth: int,
                    read_outer: Callable[[DataInput, int], object]) -> tuple[object, list[TypeInfo]]:
    if version >= 3:
        magic = inp.read_i32()
        if magic != COMPOSITE_MAGIC:
            raise inp.fail(f"bad composite serializer snapshot magic {magic}")
        outer_version = inp.read_i32()
    else:
        outer_version = version
    outer = read_outer(inp, outer_version)
    return outer, _read_nested(inp, depth)


def _read_nested(inp: DataInput, depth: int, limit: int = 4096) -> list[TypeInfo]:
    """``NestedSerializersSnapshotDelegate``: magic, version 1, the count, then the snapshots."""
    magic = inp.read_i32()
    if magic != NESTED_MAGIC:
        raise inp.fail(f"bad nested serializer snapshot magic {magic}")
    delegate_version = inp.read_i32()
    if delegate_version != 1:
        raise inp.fail(f"unknown nested serializer snapshot version {delegate_version}", UnsupportedVersionError)
    n = inp.read_count("nested serializer", limit=limit, unit_size=6)
    return [read_versioned_snapshot(inp, depth + 1) for _ in range(n)]


def _no_outer(inp: DataInput, v: int) -> None:
    return None


def _arity(inp: DataInput, cls: str, nested: list, n: int) -> None:
    if len(nested) != n:
        raise inp.fail(f"{cls} has {len(nested)} nested serializers, expected {n}")


def _tuple(inp, version, depth):
    tuple_class, nested = _read_composite(inp, version, depth, lambda i, v: i.read_utf())
    return TupleType(tuple(nested), tuple_class)


def _row(inp, version, depth):
    def outer(i, v):
        if v < 3:
            return False
        if v == 3:
            return True
        return i.read_bool()

    supports_kind, nested = _read_composite(inp, version, depth, outer)
    return RowType(tuple(nested), supports_row_kind=bool(supports_kind))


def _list_like(ctor):
    def parse(inp, version, depth):
        _, nested = _read_composite(inp, version, depth, _no_outer)
        _arity(inp, ctor.__name__, nested, 1)
        return ctor(nested[0])

    return parse


def _map(inp, version, depth):
    _, nested = _read_composite(inp, version, depth, _no_outer)
    _arity(inp, "MapSerializer", nested, 2)
    return MapType(nested[0], nested[1])


def _nullable(inp, version, depth):
    padding, nested = _read_composite(inp, version, depth, lambda i, v: i.read_i32())
    _arity(inp, "NullableSerializer", nested, 1)
    if padding < 0 or padding > 1 << 20:
        raise inp.fail(f"invalid null padding length {padding}")
    return NullableType(nested[0], padding)


def _either(inp, version, depth):
    _, nested = _read_composite(inp, version, depth, _no_outer)
    _arity(inp, "EitherSerializer", nested, 2)
    return EitherType(nested[0], nested[1])


def _generic_array(inp, version, depth):
    component, nested = _read_composite(inp, version, depth, lambda i, v: i.read_utf())
    _arity(inp, "GenericArraySerializer", nested, 1)
    return GenericArrayType(nested[0], component)


def _timer(inp, version, depth):
    _, nested = _read_composite(inp, version, depth, _no_outer)
    _arity(inp, "TimerSerializer", nested, 2)
    return TimerType(nested[0], nested[1])


def _ttl(cls):
    def parse(inp, version, depth):
        _, nested = _read_composite(inp, version, depth, _no_outer)
        _arity(inp, "TtlSerializer", nested, 2)
        return TtlType(nested[0], nested[1], cls)

    return parse


def _pickled(inp, version, depth):
    if version != 1:
        raise inp.fail(f"unknown fstate pickle serializer snapshot version {version}", UnsupportedVersionError)
    protocol = inp.read_i32()
    if not 0 <= protocol <= 5:
        raise inp.fail(f"unknown pickle protocol {protocol}")
    return PICKLED


def _enum(inp, version, depth):
    if version != 3:
        raise inp.fail(f"unknown EnumSerializer snapshot version {version}", UnsupportedVersionError)
    cls = inp.read_utf()
    n = inp.read_count("enum constant", limit=1 << 20, unit_size=2)
    return EnumType(cls, tuple(inp.read_utf() for _ in range(n)))


# ---------------------------------------------------------------------------------------------
# LinkedOptionalMap (POJO, Kryo)


def _read_optional_map(inp: DataInput) -> list[tuple[str, bytes | None, bytes | None]]:
    header = inp.read_i64()
    if header != OPTIONAL_MAP_HEADER:
        raise inp.fail(f"bad LinkedOptionalMap header 0x{header & 0xFFFFFFFFFFFFFFFF:016X}")
    n = inp.read_count("optional map entry", unit_size=4)
    entries = []
    for _ in range(n):
        name = inp.read_utf()
        frames = []
        for _ in range(2):
            if inp.read_bool():
                frames.append(inp.read_bytes(inp.read_count("frame byte")))
            else:
                frames.append(None)
        entries.append((name, frames[0], frames[1]))
    return entries


def _snapshot_in_frame(frame: bytes | None, source: str | None, depth: int) -> TypeInfo | None:
    """A snapshot stored in a length frame: unknown classes are tolerated (kept opaque)."""
    if frame is None:
        return None
    inp = DataInput(frame, source=source)
    try:
        t = read_versioned_snapshot(inp, depth + 1)
    except UnsupportedSerializerError:
        inp2 = DataInput(frame, source=source)
        cls = inp2.read_utf()
        version = inp2.read_i32()
        return OpaqueType(cls, version, inp2.read_bytes(inp2.remaining()), reason="unknown serializer")
    if inp.remaining():
        raise CorruptStateError(f"{inp.remaining()} unread bytes in a framed serializer snapshot", source)
    return t


def _pojo(inp, version, depth):
    if version != 2:
        raise inp.fail(f"unknown PojoSerializer snapshot version {version}", UnsupportedVersionError)
    cls = inp.read_utf()
    fields = []
    for name, key, value in _read_optional_map(inp):
        declaring = cls
        if key is not None:
            k = DataInput(key, source=inp.source)
            declaring = k.read_utf()
            name = k.read_utf()
        fields.append((name, declaring, _snapshot_in_frame(value, inp.source, depth)))
    registered = [(n, _snapshot_in_frame(v, inp.source, depth)) for n, _, v in _read_optional_map(inp)]
    nonregistered = [(n, _snapshot_in_frame(v, inp.source, depth)) for n, _, v in _read_optional_map(inp)]
    return PojoType(cls, fields, registered, nonregistered)


def _kryo(inp, version, depth):
    start = inp.pos
    type_class = inp.read_utf()
    if version == 2:
        for _ in range(3):
            _read_optional_map(inp)
    else:
        raise inp.fail(f"unknown KryoSerializer snapshot version {version}", UnsupportedVersionError)
    payload = bytes(inp.buf[start:inp.pos])
    return OpaqueType(KRYO_SNAPSHOT, version, payload, type_class, "Kryo-serialized values")


def _type_class_only(reason: str):
    def parse(inp, version, depth):
        start = inp.pos
        type_class = inp.read_utf()
        if version == 2 and parse.cls.endswith("AvroSerializerSnapshot"):
            inp.read_utf()  # schema
        payload = bytes(inp.buf[start:inp.pos])
        return OpaqueType(parse.cls, version, payload, type_class, reason)

    return parse


def _empty_opaque(reason: str):
    def parse(inp, version, depth):
        return OpaqueType(parse.cls, version, b"", None, reason)

    return parse


# ---------------------------------------------------------------------------------------------
# CEP (CepOperator's NFA state and shared buffer)


def _cep(kind: str):
    simple = CEP_KINDS[kind][1]

    def parse(inp, version, depth):
        if simple:
            if version == 2:
                inp.read_utf()  # old simple snapshots stored the serializer class name
            elif version != 3:
                raise inp.fail(f"unknown version {version} of the CEP {kind} serializer snapshot",
                               UnsupportedVersionError)
            return CepType(kind)

        def outer(i, v):
            # NFAState's outer version 2 added the flag for the previous timestamp of computation states
            return v, (i.read_bool() if kind == "NFAState" and v >= 2 else False)

        (outer_version, flag), nested = _read_composite(inp, version, depth, outer)
        expected = CEP_KINDS[kind][2]
        _arity(inp, f"CEP {kind} serializer", nested, len(expected))
        for want, got in zip(expected, nested):
            if want is not None and not (isinstance(got, CepType) and got.kind == want):
                raise inp.fail(f"the CEP {kind} serializer's nested serializer is {got.name}, expected {want}",
                               UnsupportedSerializerError)
        return CepType(kind, tuple(nested), outer_version, bool(flag))

    return parse

# table runtime (Flink SQL): see .table


def _java_object(inp: DataInput):
    start = inp.pos
    obj, inp.pos = read_java_object(inp.buf, start, inp.source)
    return obj, bytes(inp.buf[start:inp.pos])


def _row_data(inp, version, depth):
    if version != 3:
        raise inp.fail(f"unknown RowDataSerializer snapshot version {version}", UnsupportedVersionError)
    n = inp.read_count("row field type", limit=1 << 16, unit_size=4)
    types = []
    for _ in range(n):
        t, inp.pos = read_logical_type(inp.buf, inp.pos, inp.source)
        types.append(t)
    fields = _read_nested(inp, depth, limit=1 << 16)
    _arity(inp, "RowDataSerializer", fields, n)
    return table.RowDataType(tuple(types), tuple(fields))


def _binary_row_data(inp, version, depth):
    return table.RowDataType(None, arity=inp.read_i32())


def _simple_table(payload_size: int):
    def parse(inp, version, depth):
        payload = inp.read_bytes(payload_size)
        return table.TableDataType(parse.cls, version, payload, table.standalone_logical(parse.cls, payload))

    return parse


# ---------------------------------------------------------------------------------------------
def _table_collection(n_types: int, n_serializers: int, root: str):
    """ArrayData / MapData snapshots: Java-serialized LogicalTypes, then Java-serialized serializers."""

    def parse(inp, version, depth):
        start = inp.pos
        types = [from_java(_java_object(inp)[0], inp.source) for _ in range(n_types)]
        for _ in range(n_serializers):
            _java_object(inp)
        logical = LogicalType(root, True, children=tuple(types))
        return table.TableDataType(parse.cls, version, bytes(inp.buf[start:inp.pos]), logical)

    return parse


def _raw_value_data(inp, version, depth):
    _, nested = _read_composite(inp, version, depth, _no_outer)
    _arity(inp, "RawValueDataSerializer", nested, 1)
    return table.RawValueDataType(nested[0])


def _external(inp, version, depth):
    def outer(i, v):
        obj, raw = _java_object(i)
        return obj, raw, i.read_bool()

    (obj, raw, internal_input), nested = _read_composite(inp, version, depth, outer)
    _arity(inp, "ExternalSerializer", nested, 1)
    logical, conversion = data_type_logical(obj, inp.source)
    return table.ExternalType(nested[0], raw, internal_input, logical, conversion)


def _sorted_map(inp, version, depth):
    """The comparator (one Java serialization stream, kept as its bytes), then the key and value
    serializer snapshots after the nested magic."""
    if version != 3:
        raise inp.fail(f"unknown SortedMapSerializer snapshot version {version}", UnsupportedVersionError)
    comparator, raw = _java_object(inp)
    nested = _read_nested(inp, depth)
    _arity(inp, "SortedMapSerializer", nested, 2)
    return sorted_map.SortedMapType(nested[0], nested[1], raw, version, sorted_map.comparator_order(comparator))


KRYO_SNAPSHOT = RUNTIME + "kryo.KryoSerializerSnapshot"

_PARSERS: dict[str, Callable] = {
    TupleType.snapshot_class: _tuple,
    RowType.snapshot_class: _row,
    ListType.snapshot_class: _list_like(ListType),
    ArrayListType.snapshot_class: _list_like(ArrayListType),
    SetType.snapshot_class: _list_like(SetType),
    MapType.snapshot_class: _map,
    NullableType.snapshot_class: _nullable,
    EitherType.snapshot_class: _either,
    GenericArrayType.snapshot_class: _generic_array,
    TimerType.snapshot_class: _timer,
    TtlType.snapshot_class: _ttl(TtlType.snapshot_class),
    "org.apache.flink.runtime.state.v2.ttl.TtlStateFactory$TtlSerializerSnapshot":
        _ttl("org.apache.flink.runtime.state.v2.ttl.TtlStateFactory$TtlSerializerSnapshot"),
    PojoType.snapshot_class: _pojo,
    EnumType.snapshot_class: _enum,
    PickledType.snapshot_class: _pickled,
    KRYO_SNAPSHOT: _kryo,
    # CEP
    **{cls: _cep(kind) for kind, (cls, _, _) in CEP_KINDS.items()},
}

# table runtime
_PARSERS[table.ROW_DATA] = _row_data
_PARSERS[table.BINARY_ROW_DATA] = _binary_row_data
_PARSERS[table.RawValueDataType.snapshot_class] = _raw_value_data
_PARSERS[table.ExternalType.snapshot_class] = _external
_PARSERS[sorted_map.SORTED_MAP] = _sorted_map

for _cls, _parser in {
    table.STRING_DATA: _simple_table(0),
    table.NULL_DATA: _simple_table(0),
    table.DECIMAL_DATA: _simple_table(8),
    table.TIMESTAMP_DATA: _simple_table(4),
    table.ARRAY_DATA: _table_collection(1, 1, "ARRAY"),
    table.MAP_DATA: _table_collection(2, 2, "MAP"),
    "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot": _type_class_only("Avro values"),
    RUNTIME + "ValueSerializer$ValueSerializerSnapshot": _type_class_only("custom Value type"),
    RUNTIME + "CopyableValueSerializer$CopyableValueSerializerSnapshot": _type_class_only("custom Value type"),
    "org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot": _empty_opaque("Java-serialized values"),
}.items():
    _parser.cls = _cls  # type: ignore[attr-defined]
    _PARSERS[_cls] = _parser
