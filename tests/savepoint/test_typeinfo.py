"""Value codecs and snapshot round trips, against byte examples taken from real Flink savepoints."""

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from fstate.savepoint.binary import DataInput, DataOutput
from fstate.savepoint.types import (BIG_DECIMAL, BIG_INTEGER, BOOLEAN, BYTE, BYTES, DOUBLE, FLOAT, INSTANT, INT,
                                    LOCAL_DATE, LOCAL_DATE_TIME, LONG, SHORT, SQL_TIMESTAMP, STRING, TIME_WINDOW,
                                    VOID_NAMESPACE, EitherType, EnumType, GenericArrayType, ListType, MapType,
                                    NullableType, PojoType, RowType, TimerType, TupleType, scalar)
from fstate.savepoint.types.snapshots import (read_serializer_snapshot, read_versioned_snapshot,
                                              write_serializer_snapshot)
from fstate.savepoint.errors import UnsupportedSerializerError
from tests.support import dec, enc




@pytest.mark.parametrize("t,value,hexbytes", [
    (BIG_DECIMAL, Decimal("-12345.6789"), "00000008f8a432eb00000004"),
    (BIG_INTEGER, -98765432109876543210, "0000000dfaa55ab2c71ad9811 6".replace(" ", "")),
    (LOCAL_DATE_TIME, dt.datetime(2024, 2, 29, 13, 45, 30, 123456), None),
    (BYTES, b"\x01\x02\x03", "00000003010203"),
    (scalar("Character"), "é", "00e9"),
    (DOUBLE, -0.0, "8000000000000000"),
    (MapType(STRING, ListType(LONG)), {"mv-a": [5, 6, 7], "mv-b": None},
     "00000002056d762d6100000000030000000000000005000000000000000600000000000000 07056d762d6201".replace(" ", "")),
    (GenericArrayType(LOCAL_DATE, "java.time.LocalDate"), [dt.date(2020, 1, 1), None], "0000000201000007e4010100"),
    (EitherType(STRING, LONG), ("left-k1", None), "01086c6566742d6b31"),
    (EitherType(STRING, LONG), (None, 4242), "000000000000001092"),
    (TupleType((NullableType(LONG, 8), NullableType(STRING, 0))), (None, None), "01000000000000000001"),
    (EnumType("Color", ("RED", "GREEN", "BLUE")), "GREEN", "00000001"),
    (TimerType(STRING, VOID_NAMESPACE), (1003, "k0", None), "80000000000003eb036b3000"),
    (TimerType(LONG, TIME_WINDOW), (1795391999999, 4, (1795305600000, 1795392000000)),
     "800001a205b3cfff0000000000000004000001a2008d7400000001a205b3d000"),
])
def test_examples_from_real_savepoints(t, value, hexbytes):
    b = enc(t, value)
    if hexbytes is not None:
        assert b.hex() == hexbytes
    assert dec(t, b) == value


def test_local_datetime_bytes_from_flink():
    b = bytes.fromhex("000007e8021d0d2d1e075bcd15")  # 2024-02-29T13:45:30.123456789
    assert dec(LOCAL_DATE_TIME, b) == dt.datetime(2024, 2, 29, 13, 45, 30, 123456)


def test_row_with_row_kind_and_null():
    row = RowType((STRING, INT, LOCAL_DATE_TIME))
    b = bytes.fromhex("50") + bytes.fromhex("0672762d6b30") + bytes.fromhex("000007e8021d0d2d1e075bcd15")
    # UPDATE_AFTER kind bits are ignored on read; the null field comes back as None
    assert dec(row, b) == ("rv-k0", None, dt.datetime(2024, 2, 29, 13, 45, 30, 123456))
    assert enc(row, ("rv-k0", None, None))[0] == 0x18  # INSERT, fields 1 and 2 null


def test_pojo_value_from_flink():
    color = EnumType("TypeGen$Color", ("RED", "GREEN", "BLUE"))
    tags = NullableType(ListType(NullableType(STRING, 0)), 0)
    pojo = PojoType("TypeGen$MyPojo", [("color", "TypeGen$MyPojo", color), ("count", "TypeGen$MyPojo", INT),
                                         ("name", "TypeGen$MyPojo", STRING), ("score", "TypeGen$MyPojo", DOUBLE),
                                         ("tags", "TypeGen$MyPojo", tags)])
    b = bytes.fromhex("02" "0000000002" "000000002c" "0006706e2d6b31" "004004000000000000"
                      "00" "00" "00000002" "00" "037431" "00" "037432")
    assert dec(pojo, b) == ("BLUE", 44, "pn-k1", 2.5, ["t1", "t2"])
    assert enc(pojo, ("BLUE", 44, "pn-k1", 2.5, ["t1", "t2"])) == b
    assert dec(pojo, b"\x01") is None


def test_sql_timestamp_is_an_instant():
    t = SQL_TIMESTAMP
    b = bytes.fromhex("0000018bcfe56800") + (123000000).to_bytes(4, "big")
    v = dec(t, b)
    assert v.tzinfo is not None and v.microsecond == 123000


SIMPLE = [STRING, LONG, INT, SHORT, BYTE, BOOLEAN, DOUBLE, FLOAT, BYTES]


@st.composite
def type_trees(draw, depth=0):
    if depth > 2:
        return draw(st.sampled_from(SIMPLE))
    kind = draw(st.sampled_from(["simple", "tuple", "row", "list", "map", "nullable", "either"]))
    sub = lambda: draw(type_trees(depth + 1))  # noqa: E731
    if kind == "tuple":
        return TupleType(tuple(sub() for _ in range(draw(st.integers(1, 4)))))
    if kind == "row":
        return RowType(tuple(sub() for _ in range(draw(st.integers(1, 4)))))
    if kind == "list":
        return ListType(sub())
    if kind == "map":
        return MapType(draw(st.sampled_from([STRING, LONG, INT])), sub())
    if kind == "nullable":
        inner = sub()
        return NullableType(inner, inner.length if inner.length > 0 else 0)
    if kind == "either":
        return EitherType(sub(), sub())
    return draw(st.sampled_from(SIMPLE))


def values_of(t):
    if t is STRING:
        return st.text(max_size=20)
    if t is LONG:
        return st.integers(-2**63, 2**63 - 1)
    if t is INT:
        return st.integers(-2**31, 2**31 - 1)
    if t is SHORT:
        return st.integers(-2**15, 2**15 - 1)
    if t is BYTE:
        return st.integers(-128, 127)
    if t is BOOLEAN:
        return st.booleans()
    if t is DOUBLE:
        return st.floats(allow_nan=False)
    if t is FLOAT:
        return st.floats(width=32, allow_nan=False)
    if t is BYTES:
        return st.binary(max_size=20)
    if isinstance(t, TupleType):
        return st.tuples(*(values_of(c) for c in t.children))
    if isinstance(t, RowType):
        return st.tuples(*(st.one_of(st.none(), values_of(c)) for c in t.children))
    if isinstance(t, ListType):
        return st.lists(values_of(t.element), max_size=4)
    if isinstance(t, MapType):
        return st.dictionaries(values_of(t.key), st.one_of(st.none(), values_of(t.value)), max_size=4)
    if isinstance(t, NullableType):
        return st.one_of(st.none(), values_of(t.inner))
    if isinstance(t, EitherType):
        return st.one_of(values_of(t.children[0]).filter(lambda v: v is not None).map(lambda v: (v, None)),
                         values_of(t.children[1]).map(lambda v: (None, v)))
    raise AssertionError(t)


@given(st.data())
def test_codec_and_snapshot_roundtrip(data):
    t = data.draw(type_trees())
    v = data.draw(values_of(t))
    assert dec(t, enc(t, v)) == v
    out = DataOutput()
    write_serializer_snapshot(out, t)
    inp = DataInput(out.getvalue())
    assert read_serializer_snapshot(inp) == t
    assert inp.remaining() == 0


def test_pojo_and_enum_snapshot_roundtrip():
    pojo = PojoType("com.acme.Order", [("amount", "com.acme.Order", BIG_DECIMAL),
                                         ("kind", "com.acme.Order", EnumType("com.acme.Kind", ("A", "B"))),
                                         ("when", "com.acme.Order", INSTANT)])
    out = DataOutput()
    pojo.write_snapshot(out)
    back = read_versioned_snapshot(DataInput(out.getvalue()))
    assert back == pojo and back.field_names == ("amount", "kind", "when")


def test_unknown_snapshot_class_is_a_clear_error():
    out = DataOutput()
    out.write_i32(2)
    out.write_utf("com.acme.MySerializerSnapshot")
    out.write_i32(1)
    with pytest.raises(UnsupportedSerializerError, match="com.acme.MySerializerSnapshot"):
        read_serializer_snapshot(DataInput(out.getvalue(), source="x"))


def test_ttl_values_written_by_fstate_are_not_expired_on_restore():
    """Flink expires a TTL value when last access + TTL <= now (TtlUtils.expired): fstate stamps the
    values it writes with the write time, so a value written now lives for its whole TTL."""
    import time

    from fstate.savepoint.types import TtlType

    t = TtlType(LONG, STRING)
    before = time.time_ns() // 1_000_000
    out = bytearray()
    t.encoder()(out, "kept")
    after = time.time_ns() // 1_000_000
    stamp = int.from_bytes(out[:8], "big", signed=True)
    assert before <= stamp <= after
    assert t.decoder()(bytes(out), 0) == ("kept", len(out))
    one_hour = 3_600_000
    assert stamp + one_hour > after  # not expired under Flink's rule for a 1 h TTL
