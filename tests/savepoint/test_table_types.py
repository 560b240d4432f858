"""The table runtime's types (Flink SQL state): snapshots and the BinaryRowData codecs.

tests/savepoint/data/sql-*-header.bin are keyed-backend headers of a real Flink 2.3 savepoint of
tests/flink/jobs SqlJob (subtask 0 of each stateful SQL operator); the value bytes below are taken
from the same savepoint.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from fstate.savepoint import keyed
from fstate.savepoint.binary import DataInput, DataOutput
from fstate.savepoint.types import LONG, ExternalType, MapType, RawValueDataType, RowDataType, TableDataType
from fstate.savepoint.types import table
from fstate.savepoint.types.hashing import key_group_for_hash
from fstate.savepoint.types.logical import LogicalType
from fstate.savepoint.types.snapshots import read_versioned_snapshot
from fstate.savepoint.types.table_binary import (NanoDatetime, RowValue, binary_decoder, binary_encoder,
                                                 row_decoder, row_encoder, standalone_codec)

DATA = Path(__file__).parent / "data"
HEADERS = sorted(DATA.glob("sql-*-header.bin"))

BIGINT = LogicalType("BIGINT")
INT = LogicalType("INTEGER")
STRING = LogicalType("VARCHAR", length=0x7FFFFFFF)


def _round_trip(types, value) -> tuple:
    raw = row_encoder(types)(value)
    assert len(raw) % 8 == 0
    return row_decoder(types)(raw, 0, len(raw)), raw


# -- snapshots ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", HEADERS, ids=lambda p: p.name)
def test_sql_headers_write_back_byte_identical(path):
    raw = path.read_bytes()
    meta = keyed.read_keyed_proxy(raw)
    assert meta.header_size == len(raw)
    out = DataOutput()
    keyed.write_keyed_proxy(out, meta)
    assert out.getvalue() == raw
    assert isinstance(meta.key_type, RowDataType)
    assert meta.key_type.types == (STRING,)
    assert meta.key_type.types[0].serialized.startswith(b"\xac\xed\x00\x05")


def test_group_aggregate_types():
    meta = keyed.read_keyed_proxy((DATA / "sql-group-aggregate-header.bin").read_bytes())
    states = {s.name: s for s in meta.states}
    acc = states["accState"].value_type
    assert [t.root for t in acc.types] == ["BIGINT"] * 4 + ["RAW"]
    assert acc.types[4].raw_class == "org.apache.flink.table.api.dataview.MapView"
    assert isinstance(acc.children[4], RawValueDataType)
    assert acc.children[0] is LONG
    distinct = states["distinctAcc_0"].value_type
    assert isinstance(distinct, MapType)
    assert isinstance(distinct.key, ExternalType) and distinct.key.conversion_class == "org.apache.flink.table.data.StringData"
    assert isinstance(distinct.key.inner, TableDataType) and distinct.key.inner.logical == STRING
    assert distinct.value.logical == LogicalType("BIGINT", False) and distinct.value.inner is LONG
    assert distinct.key.name == "STRING"


def test_timestamp_ltz_types_the_nested_timestamp_serializer():
    meta = keyed.read_keyed_proxy((DATA / "sql-deduplicate-keep-last-header.bin").read_bytes())
    row = meta.states[0].value_type
    proctime = row.types[3]
    assert (proctime.root, proctime.precision, proctime.kind, proctime.nullable) == (
        "TIMESTAMP_WITH_LOCAL_TIME_ZONE", 3, "PROCTIME", False)
    assert row.children[3].logical == proctime  # typed by the row: decodes to UTC datetimes
    assert row.children[3].snapshot_class == table.TIMESTAMP_DATA


def test_simple_table_snapshots_round_trip():
    for snapshot_class, payload, name in ((table.STRING_DATA, b"", "STRING"),
                                          (table.DECIMAL_DATA, bytes.fromhex("000000260000000a"), "DECIMAL(38, 10)"),
                                          (table.TIMESTAMP_DATA, bytes.fromhex("00000009"), "TIMESTAMP(9)")):
        out = DataOutput()
        out.write_utf(snapshot_class)
        out.write_i32(3 if snapshot_class != table.TIMESTAMP_DATA else 1)
        out.write_bytes(payload)
        t = read_versioned_snapshot(DataInput(out.getvalue()))
        assert isinstance(t, TableDataType) and t.name == name
        again = DataOutput()
        t.write_snapshot(again)
        assert again.getvalue() == out.getvalue()


# -- values from the savepoint ------------------------------------------------------------------


def test_real_values_decode_and_encode_byte_exact():
    meta = keyed.read_keyed_proxy((DATA / "sql-deduplicate-keep-last-header.bin").read_bytes())
    key_type, row_type = meta.key_type, meta.states[0].value_type
    key_bytes = bytes.fromhex("00000010" "0000000000000000" "6b31000000000082")
    value_bytes = bytes.fromhex("00000028" "0208000000000000" "7300000000000000" "6b31000000000082"
                                "f9ffffffffffffff" "0000000000000000")
    key, end = key_type.decoder()(key_bytes, 0)
    assert key == ("k1",) and end == len(key_bytes)
    value, end = row_type.decoder()(value_bytes, 0)
    assert value == (115, "k1", -7, None) and end == len(value_bytes)
    assert isinstance(value, RowValue) and value.row_kind == "UPDATE_AFTER"  # the proctime is not materialised
    for t, v, raw in ((key_type, key, key_bytes), (row_type, value, value_bytes)):
        out = bytearray()
        t.encoder()(out, v)
        assert bytes(out) == raw
    # Flink placed key k1 in key group 17 of 128 (BinaryRowData.hashCode = a Murmur hash of its words)
    assert key_group_for_hash(key_type.java_hash(("k1",)), 128) == 17


def test_accumulator_row_with_a_raw_field():
    meta = keyed.read_keyed_proxy((DATA / "sql-group-aggregate-header.bin").read_bytes())
    acc = meta.states[0].value_type
    raw = bytes.fromhex("00000038" "0000000000000000" "1400000000000000" "c202000000000000" "4d00000000000000"
                        "0400000000000000" "0100000030000000" "0000000000000000")
    value, _ = acc.decoder()(raw, 0)
    assert value == (20, 706, 77, 4, b"\x00")
    out = bytearray()
    acc.encoder()(out, value)
    assert bytes(out) == raw


# -- the BinaryRowData codec --------------------------------------------------------------------


def test_nulls_and_the_header():
    types = (BIGINT, STRING, INT)
    value, raw = _round_trip(types, (None, None, 7))
    assert value == (None, None, 7)
    assert raw[:8] == bytes([0, 0b0000_0011, 0, 0, 0, 0, 0, 0])
    assert raw[8:24] == bytes(16) and raw[24:28] == (7).to_bytes(4, "little")
    wide = tuple(BIGINT for _ in range(57))  # 57 fields + 8 header bits need a second header word
    value, raw = _round_trip(wide, (None,) * 56 + (1,))
    assert len(raw) == 16 + 57 * 8 and value[-1] == 1 and value[55] is None


def test_strings_inline_up_to_seven_bytes():
    _, raw = _round_trip((STRING,), ("seven77",))
    assert len(raw) == 16 and raw[8:16] == b"seven77" + bytes([0x87])
    value, raw = _round_trip((STRING,), ("eight888",))
    assert value == ("eight888",) and len(raw) == 24
    assert int.from_bytes(raw[8:16], "little") == (16 << 32) | 8 and raw[16:24] == b"eight888"
    value, raw = _round_trip((STRING, STRING), ("ünïcödé text", ""))
    assert value == ("ünïcödé text", "") and raw[16:24] == bytes([0] * 7 + [0x80])
    assert len(raw) == 24 + 16  # 14 UTF-8 bytes padded to 16


def test_decimals_compact_and_not():
    compact = LogicalType("DECIMAL", precision=10, scale=2)
    wide = LogicalType("DECIMAL", precision=30, scale=5)
    value, raw = _round_trip((compact, wide), (Decimal("-12.34"), Decimal("123456789012345678901.5")))
    assert value == (Decimal("-12.34"), Decimal("123456789012345678901.50000"))
    assert int.from_bytes(raw[8:16], "little", signed=True) == -1234
    offset_and_size = int.from_bytes(raw[16:24], "little")
    assert offset_and_size >> 32 == 24 and len(raw) == 24 + 16
    unscaled = int.from_bytes(raw[24:24 + (offset_and_size & 0xFFFFFFFF)], "big", signed=True)
    assert unscaled == 12345678901234567890150000
    value, raw = _round_trip((wide,), (None,))  # a null wide decimal still reserves its 16 bytes
    assert value == (None,) and len(raw) == 16 + 16 and int.from_bytes(raw[8:16], "little") == 16 << 32
    with pytest.raises(ValueError):
        row_encoder((compact,))((Decimal("1.234"),))


def test_timestamps_compact_and_not():
    millis = LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=3)
    micros = LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6)
    ltz = LogicalType("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3)
    naive = dt.datetime(2024, 2, 29, 12, 30, 15, 123456)
    aware = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    value, raw = _round_trip((millis, micros, ltz), (naive.replace(microsecond=123000), naive, aware))
    assert value == (naive.replace(microsecond=123000), naive, aware)
    assert value[2].tzinfo is not None and value[1].tzinfo is None
    epoch_millis = int((naive - dt.datetime(1970, 1, 1)).total_seconds() * 1000)
    assert int.from_bytes(raw[8:16], "little") == epoch_millis
    offset_and_size = int.from_bytes(raw[16:24], "little")
    assert offset_and_size == (32 << 32) | 456000  # nano of millisecond in the size half
    assert int.from_bytes(raw[32:40], "little") == epoch_millis


def test_nanosecond_timestamps_keep_their_nanos():
    """TIMESTAMP(9) / TIMESTAMP_LTZ(9): nanoseconds below the microsecond survive decode and encode."""
    import pickle

    nanos9 = LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9)
    ltz9 = LogicalType("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=9)
    raw = row_encoder((nanos9, ltz9))((dt.datetime(2024, 2, 29, 12, 30, 15, 123456), None))
    slot = bytearray(raw)
    slot[8:12] = (456789).to_bytes(4, "little")  # nano of millisecond 456789: 789 below the microsecond
    value, again = _round_trip((nanos9, ltz9), (row_decoder((nanos9, ltz9))(bytes(slot), 0, len(slot))[0],
                                                NanoDatetime(2024, 1, 1, 0, 0, 0, 1, dt.timezone.utc, nanosecond=5)))
    naive, aware = value
    assert isinstance(naive, NanoDatetime) and naive.nanosecond == 789 and naive.microsecond == 123456
    assert naive.isoformat() == "2024-02-29T12:30:15.123456789" and str(aware) == "2024-01-01 00:00:00.000001005+00:00"
    assert again[8:16] == bytes(slot)[8:16] and again[24:32] == bytes(slot)[24:32]  # the same nanos again
    assert naive != naive.replace(microsecond=123456) and naive != dt.datetime(2024, 2, 29, 12, 30, 15, 123456)
    assert pickle.loads(pickle.dumps(naive)) == naive and pickle.loads(pickle.dumps(naive)).nanosecond == 789
    decode, encode = standalone_codec(nanos9)
    out = bytearray()
    encode(out, naive)
    assert decode(bytes(out), 0) == (naive, 12) and decode(bytes(out), 0)[0].nanosecond == 789
    # whole microseconds stay plain datetimes
    assert type(_round_trip((nanos9,), (dt.datetime(2020, 1, 1, 0, 0, 0, 7),))[0][0]) is dt.datetime


def test_spark_drops_nanos_only_with_a_warning():
    import warnings

    import fstate.readers.schema as spark_schema

    nanos9 = LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9)
    convert = spark_schema.converter(RowDataType((nanos9, STRING)))
    plain = (dt.datetime(2020, 1, 1, 0, 0, 0, 7), "a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert convert(plain) is plain  # nothing below the microsecond: no warning
    with pytest.warns(UserWarning, match="nanoseconds are dropped"):
        converted = convert((NanoDatetime(2020, 1, 1, 0, 0, 0, 7, nanosecond=9), "a"))
    assert converted == plain and type(converted[0]) is dt.datetime
    assert spark_schema.converter(RowDataType((LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6),))) is None


def test_nested_rows_arrays_and_maps():
    inner = LogicalType("ROW", children=(INT, STRING), field_names=("a", "b"))
    array = LogicalType("ARRAY", children=(STRING,))
    int_array = LogicalType("ARRAY", children=(INT,))
    mapping = LogicalType("MAP", children=(STRING, BIGINT))
    multiset = LogicalType("MULTISET", children=(STRING,))
    types = (inner, array, int_array, mapping, multiset, LogicalType("BOOLEAN"), LogicalType("DATE"))
    value = ((1, "a long string value"), ["x", None, "a longer string"], [1, None, 3],
             {"k": 1, "a much longer key": None}, {"m": 2}, True, dt.date(2020, 5, 17))
    decoded, raw = _round_trip(types, value)
    assert decoded == value
    assert row_encoder(types)(decoded) == raw
    array_bytes = binary_encoder(int_array)([1, None, 3])
    assert array_bytes[:4] == (3).to_bytes(4, "little") and array_bytes[4] == 0b010
    assert len(array_bytes) == 8 + 16  # header 8, three 4-byte slots rounded up to 16
    assert binary_decoder(int_array)(array_bytes, 0, len(array_bytes)) == [1, None, 3]


def test_row_kinds_round_trip():
    kinds = [RowValue((1,), kind) for kind in ("UPDATE_BEFORE", "UPDATE_AFTER", "DELETE")]
    for row in kinds:
        decoded, raw = _round_trip((BIGINT,), row)
        assert decoded.row_kind == row.row_kind and raw[0] == ("INSERT", "UPDATE_BEFORE", "UPDATE_AFTER",
                                                               "DELETE").index(row.row_kind)
    assert type(_round_trip((BIGINT,), (1,))[0]) is tuple


def test_standalone_forms():
    for logical, value, size in ((STRING, "abc", 7), (LogicalType("DECIMAL", precision=5, scale=1), Decimal("12.5"), 8),
                                 (LogicalType("DECIMAL", precision=20, scale=0), Decimal(-1), 5),
                                 (LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9),
                                  dt.datetime(1969, 12, 31, 23, 59, 59, 999999), 12)):
        decode, encode = standalone_codec(logical)
        out = bytearray()
        encode(out, value)
        assert len(out) == size
        assert decode(bytes(out), 0) == (value, size)


# -- visitors ---------------------------------------------------------------------------------


def test_spark_types_follow_the_logical_types():
    from pyspark.sql import types as spark_types

    import fstate.readers.schema as spark_schema
    import fstate.savepoint.types.key_hash as key_hash

    meta = keyed.read_keyed_proxy((DATA / "sql-deduplicate-keep-last-header.bin").read_bytes())
    row = spark_schema.spark_type(meta.states[0].value_type)
    assert [(f.name, f.dataType, f.nullable) for f in row.fields] == [
        ("f0", spark_types.LongType(), True), ("f1", spark_types.StringType(), True),
        ("f2", spark_types.LongType(), True),
        ("f3", spark_types.TimestampType(), True)]  # NOT NULL, but a proctime is stored unmaterialised
    types = (LogicalType("DECIMAL", False, precision=30, scale=5), LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6),
             LogicalType("ARRAY", children=(LogicalType("INTEGER", False),)))
    fields = spark_schema.spark_type(RowDataType(types)).fields
    assert [(f.dataType, f.nullable) for f in fields] == [
        (spark_types.DecimalType(30, 5), False), (spark_types.TimestampNTZType(), True),
        (spark_types.ArrayType(spark_types.IntegerType(), False), True)]
    assert key_hash.has_value_hash(meta.key_type)
    assert not key_hash.has_value_hash(RowDataType(None, arity=1))
