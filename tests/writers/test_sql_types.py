"""Flink SQL types for writing: SQL type names ↔ LogicalTypes, the Java serialization of LogicalTypes
and the table runtime's serializer snapshots written from scratch, byte for byte as Flink writes them.

``data/sql_type_snapshots.tsv`` is the output of ``tests/flink/jobs/v2/SqlTypeSnapshots.java`` on Flink
2.3.0 (type, Java serialization of its LogicalType, versioned snapshot of ``InternalTypeInfo.of(type)``'s
serializer); tests/flink/test_sql_bootstrap_oracle.py regenerates it with real Flink and compares again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fstate.savepoint.binary import DataInput, DataOutput
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.types import LONG, RowDataType, TableDataType
from fstate.savepoint.types.logical import LogicalType, read_logical_type
from fstate.savepoint.types.logical_java import java_logical_type
from fstate.savepoint.types.table_serializers import table_serializer
from fstate.savepoint.types.snapshots import read_versioned_snapshot
from fstate.writers.spec import parse_type, type_name
from fstate.writers.sql_types import parse_sql_type, sql_type_name

SNAPSHOTS = Path(__file__).parent / "data" / "sql_type_snapshots.tsv"


def flink_snapshots(path: Path = SNAPSHOTS) -> list[tuple[str, bytes, bytes]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        text, java, snapshot = line.split("\t")
        rows.append((text, bytes.fromhex(java), bytes.fromhex(snapshot)))
    return rows


def snapshot_bytes(t) -> bytes:
    out = DataOutput()
    t.write_snapshot(out)
    return bytes(out.getvalue())


#: element types whose ArrayData / MapData serializer Flink Java-serializes with lambdas
UNWRITABLE = ("ARRAY<ROW<a INT>>", "ARRAY<ARRAY<INT>>")


@pytest.mark.parametrize("text,java,snapshot", flink_snapshots(), ids=lambda v: v if isinstance(v, str) else "")
def test_written_like_flink(text, java, snapshot):
    t = parse_sql_type(text)
    assert java_logical_type(t) == java
    assert read_logical_type(java, 0)[0] == t  # the reader sees what Flink wrote
    if text in UNWRITABLE:
        with pytest.raises(InvalidArgumentError, match="lambdas"):
            parse_type("SQL " + text)
        return
    node = table_serializer(t)
    assert snapshot_bytes(node) == snapshot
    if isinstance(node, RowDataType):  # a row's snapshot carries its field types: reads back equal
        assert read_versioned_snapshot(DataInput(snapshot)) == node


def test_flink_defaults_and_spellings():
    assert parse_sql_type("VARCHAR") == LogicalType("VARCHAR", length=1)
    assert parse_sql_type("STRING NOT NULL") == LogicalType("VARCHAR", False, length=0x7FFFFFFF)
    assert parse_sql_type("DECIMAL") == parse_sql_type("NUMERIC(10, 0)") == parse_sql_type("DEC(10)")
    assert parse_sql_type("TIMESTAMP") == parse_sql_type("TIMESTAMP(6) WITHOUT TIME ZONE")
    assert parse_sql_type("TIMESTAMP(3) WITH LOCAL TIME ZONE") == parse_sql_type("timestamp_ltz(3)")
    assert parse_sql_type("TIME").precision == 0
    assert parse_sql_type("ROW(`a b` INT, c DOUBLE PRECISION NULL)") == parse_sql_type("ROW<`a b` INT, c DOUBLE>")
    proctime = parse_sql_type("TIMESTAMP_LTZ(3) *PROCTIME* NOT NULL")
    assert (proctime.kind, proctime.nullable) == ("PROCTIME", False)
    assert parse_sql_type(sql_type_name(proctime)) == proctime


@pytest.mark.parametrize("text", [
    "ROW<k STRING NOT NULL>", "ROW<cnt BIGINT, s BIGINT, mx BIGINT>", "DECIMAL(10, 2)", "TIMESTAMP(3)",
    "TIMESTAMP_LTZ(3)", "ARRAY<INT>", "MAP<STRING, BIGINT>", "MULTISET<STRING> NOT NULL", "BYTES", "CHAR(2)",
    "ROW<`select` INT, `a``b` ROW<x TIME(0), y BINARY(3)>>",
    "ROW<c BIGINT, v RAW('org.apache.flink.table.api.dataview.MapView')>"])
def test_names_round_trip(text):
    t = parse_sql_type(text)
    assert sql_type_name(t) == text.replace("`select`", "select")
    assert parse_type(type_name(parse_type("SQL " + text))) == parse_type("SQL " + text)


@pytest.mark.parametrize("text,message", [
    ("ROW<a INT", "unexpected end"), ("ROW<a INT, a BIGINT>", "duplicate"), ("VARCHAR(x)", "number"),
    ("FOO", "unknown type"), ("INT *ROWTIME*", "timestamps only"), ("RAW(x)", "quoted"),
    ("INT INT", "unexpected"),
])
def test_bad_names(text, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_sql_type(text)


def test_raw_types_only_for_data_views():
    with pytest.raises(InvalidArgumentError, match="data views"):
        parse_type("SQL ROW<a RAW('com.acme.Thing')>")


def test_sql_prefix_keeps_datastream_names_apart():
    assert parse_type("SQL BIGINT") == LONG  # BIGINT in SQL is a long
    assert parse_type("BIGINT").name == "BigInteger"  # outside SQL, java.math.BigInteger
    assert isinstance(parse_type("SQL STRING"), TableDataType)
    key = parse_type("SQL ROW<k STRING>")
    assert isinstance(key, RowDataType) and key.field_names == ("k",)
    assert type_name(key) == "SQL ROW<k STRING>"


def test_type_names_of_read_snapshots():
    """A RowData snapshot read from a savepoint has the names f0...; its SQL name reads back equal."""
    for text, _, snapshot in flink_snapshots():
        node = read_versioned_snapshot(DataInput(snapshot))
        if isinstance(node, RowDataType):
            assert parse_type(type_name(node)) == node


EXTERNAL_SNAPSHOTS = Path(__file__).parent / "data" / "sql_external_snapshots.tsv"


@pytest.mark.parametrize("text,java,snapshot", flink_snapshots(EXTERNAL_SNAPSHOTS),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_external_serializers_written_like_flink(text, java, snapshot):
    """``EXTERNAL<...>`` DataTypes (default, internal or chosen conversion classes) and the snapshot of
    ``ExternalSerializer.of(dataType)``, byte for byte as Flink 2.3 writes them; they read back equal."""
    from fstate.savepoint.types.data_types import java_data_type
    from fstate.writers.sql_types import parse_external_type

    assert java_data_type(parse_external_type(text)) == java
    node = parse_type("SQL " + text)
    assert snapshot_bytes(node) == snapshot
    assert read_versioned_snapshot(DataInput(snapshot)) == node


def test_distinct_view_map_state_type():
    """The COUNT(DISTINCT) view state of a group aggregate: a map of ExternalSerializers."""
    from fstate.savepoint.types import ExternalType, MapType

    t = parse_type("MAP<SQL EXTERNAL<STRING, INTERNAL>, SQL EXTERNAL<BIGINT NOT NULL>>")
    assert isinstance(t, MapType) and isinstance(t.key, ExternalType) and isinstance(t.value, ExternalType)
    assert t.key.conversion_class == "org.apache.flink.table.data.StringData"
    assert t.value.conversion_class == "java.lang.Long" and not t.value.logical.nullable
    assert parse_type("MAP< SQL ROW<`a,>` INT> , LONG>").key.field_names == ("a,>",)


@pytest.mark.parametrize("text,message", [
    ("EXTERNAL<RAW('org.apache.flink.table.api.dataview.MapView')>", "DataType"),
    ("EXTERNAL<BIGINT, 'com.acme.Thing'>", "conversion class"), ("EXTERNAL<BIGINT, FOO>", "INTERNAL"),
    ("EXTERNAL<BIGINT", "unexpected end"), ("EXTERNAL<ARRAY<STRING>>", "conversion class"),
])
def test_bad_external_types(text, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_type("SQL " + text)


def test_a_sorted_map_has_no_type_string():
    """A retractable Top-N's sorted map (SortedMapSerializer) is read with its snapshot, whose comparator is
    code Flink generated: no type string names it, nor is one written for it."""
    from fstate.savepoint import keyed

    header = Path(__file__).parents[1] / "savepoint" / "data" / "sql-retractable-rank-header.bin"
    sorted_map = {s.name: s for s in keyed.read_keyed_proxy(header.read_bytes()).states}["sorted-map"].value_type
    with pytest.raises(InvalidArgumentError, match="SortedMap<RowData<f0 BIGINT, f1 BIGINT NOT NULL>, Long>.*"
                                                   "comparator Flink generated.*cannot build"):
        type_name(sorted_map)
    for text in ("SORTED_MAP<SQL ROW<cnt BIGINT>, LONG>", "SQL SORTED_MAP<ROW<cnt BIGINT>, BIGINT>",
                 "MAP<STRING, sorted_map<LONG, LONG>>"):
        with pytest.raises(InvalidArgumentError, match="has no type string.*carried over or rewritten"):
            parse_type(text)
