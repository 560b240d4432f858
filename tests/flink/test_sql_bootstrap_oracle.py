"""Real-Flink oracle for SQL state fstate writes from scratch (issue 14, point 5: bootstrap).

1. Byte identity of the table types: ``jobs/v2/SqlTypeSnapshots.java`` writes, on real Flink, the Java
   serialization of the LogicalType and the versioned serializer snapshot of ``InternalTypeInfo.of(type)``
   for every type of ``tests/writers/data/sql_type_snapshots.tsv``; fstate writes the same bytes.
   ``EXTERNAL<...>`` lines do the same for DataTypes and ``ExternalSerializer.of(dataType)``.
2. Bootstrap: the GroupAggregate state of ``SqlJob`` (uid ``4_group-aggregate`` with ``--uids true``)
   written from a DataFrame of chosen counts, sums, maxima, distinct counts and the COUNT(DISTINCT)
   sets themselves (the map state ``distinctAcc_0`` of ExternalSerializers, and ``distinctAcc_0_null_state``)
   has exactly the key serializer and the states' meta info of SqlJob's own savepoint; SqlJob restored
   from it continues from the bootstrapped values (the second batch adds its rows to them, and its
   names count as new only when they are not in the bootstrapped set).
"""

from __future__ import annotations

import subprocess

import pytest

from fstate.savepoint.binary import DataOutput
from fstate.savepoint.metainfo import write_state_meta_info
from fstate.savepoint.types.snapshots import write_serializer_snapshot
from tests.flink import harness
from tests.flink.restore import verify_restore
from tests.writers.test_sql_types import (EXTERNAL_SNAPSHOTS, SNAPSHOTS, UNWRITABLE, flink_snapshots,
                                         snapshot_bytes)

pytestmark = pytest.mark.flink

UIDS = ("--uids", "true")
RECORDS = 120  # SqlJob's default --records
KEY_TYPE = "SQL ROW<k STRING>"
ACC_TYPE = ("SQL ROW<cnt BIGINT, s BIGINT, mx BIGINT, cd BIGINT, "
            "distinct_view RAW('org.apache.flink.table.api.dataview.MapView')>")
DISTINCT_TYPE = "MAP<SQL EXTERNAL<STRING, INTERNAL>, SQL EXTERNAL<BIGINT NOT NULL>>"
NULL_DISTINCT_TYPE = "SQL EXTERNAL<BIGINT NOT NULL>"
#: bootstrapped distinct sets per key: some of SqlJob's names n0..n6, and others. A map value is not a
#: count: it is a bit set of the distinct aggregates (filters) of the group that have seen the value,
#: so with one COUNT(DISTINCT) every present value maps to 1 (bit 0), as in Flink's own savepoints
DISTINCT = {f"k{i}": {**{f"n{j}": 1 for j in range(0, 7, i + 1)}, **{f"old{j}": 1 for j in range(i)}}
            for i in range(6)}
#: bootstrapped accumulators per key: (COUNT(*), SUM(v), MAX(v), COUNT(DISTINCT name))
BOOTSTRAP = {k: (1000 + i, 50000 + 7 * i, 500 + i, len(DISTINCT[k])) for i, k in enumerate(sorted(DISTINCT))}


def _flink_type_snapshots(version: str, tmp_path, expected=SNAPSHOTS) -> list[tuple[str, bytes, bytes]]:
    harness.require_flink(version)
    classes = harness.job_classes(version, "SqlTypeSnapshots")
    java, _ = harness._java_tools()
    types = tmp_path / "types.txt"
    types.write_text("\n".join(text for text, _, _ in flink_snapshots(expected)) + "\n", encoding="utf-8")
    out = tmp_path / f"snapshots-{version}.tsv"
    subprocess.run([java, f"-Djava.io.tmpdir={tmp_path}", "-cp", harness._classpath(harness.flink_lib_dir(version), classes), "SqlTypeSnapshots",
                    str(types), str(out)], check=True, capture_output=True, timeout=300)
    return flink_snapshots(out)


@pytest.mark.parametrize("version", ["2.3.0", "1.20.1"])
def test_table_types_written_byte_for_byte(version, tmp_path):
    from fstate.savepoint.types.logical_java import java_logical_type
    from fstate.savepoint.types.table_serializers import table_serializer
    from fstate.writers.sql_types import parse_sql_type

    flink = _flink_type_snapshots(version, tmp_path)
    assert [t for t, _, _ in flink] == [t for t, _, _ in flink_snapshots(SNAPSHOTS)]
    for text, java, snapshot in flink:
        t = parse_sql_type(text)
        assert java_logical_type(t) == java, text
        if text not in UNWRITABLE:
            assert snapshot_bytes(table_serializer(t)) == snapshot, text


@pytest.mark.parametrize("version", ["2.3.0", "1.20.1"])
def test_external_serializers_written_byte_for_byte(version, tmp_path):
    from fstate.savepoint.types.data_types import java_data_type
    from fstate.writers.spec import parse_type
    from fstate.writers.sql_types import parse_external_type

    flink = _flink_type_snapshots(version, tmp_path, EXTERNAL_SNAPSHOTS)
    assert [t for t, _, _ in flink] == [t for t, _, _ in flink_snapshots(EXTERNAL_SNAPSHOTS)]
    for text, java, snapshot in flink:
        assert java_data_type(parse_external_type(text)) == java, text
        assert snapshot_bytes(parse_type("SQL " + text)) == snapshot, text


def _second_batch(n: int) -> dict[str, list[tuple[int, str]]]:
    """SqlJob's rows i = n..2n-1 by key: (v, name)."""
    rows: dict[str, list[tuple[int, str]]] = {}
    for i in range(n, 2 * n):
        rows.setdefault(f"k{i % 6}", []).append(((i * 37) % 101 - 20, f"n{(i * i) % 7}"))
    return rows


def _agg_row(k: str, acc: tuple) -> str:
    return "[" + ", ".join([k, *map(str, acc)]) + "]"


@pytest.mark.spark
@pytest.mark.parametrize("version,flink_version", [("2.3.0", None), ("1.20.1", "1.20")])
def test_bootstrapped_group_aggregate_restores_in_flink(version, flink_version, spark, tmp_path):
    from fstate.savepoint.loader import Savepoint
    from fstate.writers.writer import SavepointWriter

    harness.require_flink(version)
    original = harness.generate("SqlJob", version, "hashmap", "savepoint", extra_args=UIDS,
                                timeout=harness.DEFAULT_JOB_TIMEOUT)
    (aggregate,) = [o for o in original.dump["operators"] if o["kind"] == "group-aggregate"]
    assert aggregate["uid"] == "4_group-aggregate"  # the job's own dump (1.20's metadata V4 has no uids)
    real = Savepoint.open(str(original.snapshot_dir)).operator(aggregate["operator_id"])

    rows = [((k,), (*acc, b"\x00"), DISTINCT[k], None) for k, acc in sorted(BOOTSTRAP.items())]
    df = spark.createDataFrame(rows, "key struct<k: string>, accState struct<cnt: bigint, s: bigint, mx: bigint, "
                                     "cd: bigint, distinct_view: binary>, distinctAcc_0 map<string, bigint>, "
                                     "distinctAcc_0_null_state bigint")
    out = tmp_path / "bootstrapped"
    SavepointWriter(real.max_parallelism, spark, flink_version=flink_version).with_keyed_state(
        aggregate["uid"], df, key_type=KEY_TYPE,
        states={"accState": ACC_TYPE, "distinctAcc_0": DISTINCT_TYPE, "distinctAcc_0_null_state": NULL_DISTINCT_TYPE},
        parallelism=aggregate["parallelism"]).write(str(out))

    # the written header is SqlJob's own, byte for byte (key serializer and accState's meta info)
    written = Savepoint.open(str(out)).operator(aggregate["operator_id"])  # the uid's hash is the job's id
    assert written.max_parallelism == real.max_parallelism
    assert _key_bytes(written) == _key_bytes(real)
    for state in ("accState", "distinctAcc_0", "distinctAcc_0_null_state"):
        assert _state_bytes(written, state) == _state_bytes(real, state), state

    restored = verify_restore("SqlJob", version, out, extra_args=UIDS,
                                      timeout=harness.DEFAULT_JOB_TIMEOUT).dump
    assert restored["kind"] == "restored"
    # the restored job retracts the bootstrapped accumulators and adds the second batch to them; a name
    # of the batch adds to COUNT(DISTINCT) only when the bootstrapped distinct set lacks it
    expected, retracted = [], []
    for k, batch in sorted(_second_batch(RECORDS).items()):
        count, total, maximum, distinct = BOOTSTRAP[k]
        retracted.append(_agg_row(k, BOOTSTRAP[k]))
        expected.append(_agg_row(k, (count + len(batch), total + sum(v for v, _ in batch),
                                     max(maximum, *(v for v, _ in batch)),
                                     distinct + len({n for _, n in batch} - set(DISTINCT[k])))))
    assert restored["retracted"]["agg"] == sorted(retracted)
    assert restored["output"]["agg"] == sorted(expected)


def _key_bytes(op) -> bytes:
    out = DataOutput()
    write_serializer_snapshot(out, op.keyed_meta.key_type)
    return bytes(out.getvalue())


def _state_bytes(op, name: str) -> bytes:
    meta = op.keyed_meta
    out = DataOutput()
    write_state_meta_info(out, meta.states[meta.state_id(name)])
    return bytes(out.getvalue())
