"""Bootstrap: savepoints written from DataFrames read back exactly; bad specs fail cleanly."""

import datetime as dt
import os
from decimal import Decimal

import pytest

from fstate.readers import tables
from fstate.savepoint import errors
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import read_metadata
from fstate.savepoint.types.hashing import operator_id_for_uid
from fstate.writers.spec import parse_type
from fstate.writers.writer import SavepointWriter

pytestmark = pytest.mark.spark


def _rows(op, states=None):
    return {r[0]: tuple(r[1:]) for r in tables.keyed_table(op, states).rows()}


@pytest.mark.parametrize("max_parallelism,parallelism", [(128, 3), (4096, 2), (10, 1)])
def test_keyed_roundtrip(spark, tmp_path, max_parallelism, parallelism):
    rows = [(f"k-{i}", i, [f"e{i}", "é"] if i % 3 else None, {"a": i, "b": None} if i % 2 else None, 1000 + i)
            for i in range(2000)]
    df = spark.createDataFrame(rows, "key string, total long, events array<string>, counts map<string,bigint>, ts long")
    out = str(tmp_path / "sp")
    SavepointWriter(max_parallelism, spark).with_keyed_state(
        "keyed", df, states={"total": None, "events": None, "counts": None}, event_timers="ts",
        parallelism=parallelism).write(out)
    sp = Savepoint.open(out)
    op = sp.operator("keyed")
    assert (op.parallelism, op.max_parallelism, op.uid, op.name) == (parallelism, max_parallelism, "keyed", "keyed")
    assert op.state.operator_id == operator_id_for_uid("keyed")
    assert _rows(op) == {k: (t, e, c) for k, t, e, c, _ in rows}
    timers = sorted(tables.timers_table(op).rows())
    assert timers == sorted((k, ts, "event", "user-timers") for k, _, _, _, ts in rows)
    assert sp.metadata.snapshot_kind == "savepoint" and sp.metadata.format_type == "CANONICAL"
    assert not [p for p in os.listdir(tmp_path) if "fstate-tmp" in p]


def test_large_state_goes_to_files_small_inline(spark, tmp_path):
    big = spark.createDataFrame([(i, "x" * 100) for i in range(2000)], "key long, v string")
    small = spark.createDataFrame([(1, "a")], "key long, v string")
    out = str(tmp_path / "sp")
    (SavepointWriter(128, spark).with_keyed_state("big", big, parallelism=2)
     .with_keyed_state("small", small, parallelism=2).write(out))
    sp = Savepoint.open(out)
    kinds = {op.uid: {type(h.delegate).__name__ for _, h in op.keyed_handles()} for op in sp.operators}
    assert kinds == {"big": {"RelativeFileHandle"}, "small": {"ByteStreamHandle"}}
    files = [f for f in os.listdir(out) if f != "_metadata"]
    assert len(files) == 2 and all(os.path.getsize(os.path.join(out, f)) > 20 * 1024 for f in files)
    assert _rows(sp.operator("big")) == {i: ("x" * 100,) for i in range(2000)}


def test_composite_and_typed_values(spark, tmp_path):
    rows = [(("a", i), (f"n{i}", i * 1.5, [i, i + 1]), Decimal("1.25") * i, dt.date(2024, 1, 1 + i % 28))
            for i in range(50)]
    df = spark.createDataFrame(rows, "key struct<f0:string,f1:int>, info struct<name:string,score:double,xs:array<bigint>>,"
                                     " amount decimal(20,2), day date")
    out = str(tmp_path / "sp")
    (SavepointWriter(128, spark).with_keyed_state("ops", df, key_type="TUPLE<STRING, INT>",
                                                   states={"info": None, "amount": "DECIMAL", "day": None},
                                                   parallelism=2).write(out))
    op = Savepoint.open(out).operator("ops")
    km = op.keyed_meta
    assert km.key_type.name == "Tuple2<String, Integer>"
    got = _rows(op)
    assert got == {(k[0], k[1]): ((info[0], info[1], info[2]), amount, day) for k, info, amount, day in rows}
    flat = tables.keyed_table(op, ["amount"], flatten_key=True)
    assert flat.column_names == ["key_f0", "key_f1", "amount"]
    assert sorted(flat.rows()) == sorted((k[0], k[1], a) for k, _, a, _ in rows)


def test_operator_and_broadcast_state(spark, tmp_path):
    out = str(tmp_path / "sp")
    marks = spark.createDataFrame([(i,) for i in range(10)], "value long")
    placed = spark.createDataFrame([("a", 0), ("b", 1), ("c", 1)], "value string, subtask int")
    (SavepointWriter(128, spark)
     .with_list_state("src", "offsets", [5, 6, 7], type="LONG", parallelism=2)
     .with_union_state("src", "marks", marks)
     .with_list_state("src", "placed", placed)
     .with_broadcast_state("bc", "rules", {"r1": "x", "r2": "é"}, key_type="STRING", value_type="STRING",
                           parallelism=3)
     .write(out))
    sp = Savepoint.open(out)
    src = sp.operator("src")
    assert sorted(v for _, _, v in tables.list_state_table(src, "offsets").rows()) == [5, 6, 7]
    assert sorted(v for _, _, v in tables.list_state_table(src, "marks").rows()) == list(range(10))
    assert sorted((s, v) for s, _, v in tables.list_state_table(src, "placed").rows()) == [(0, "a"), (1, "b"), (1, "c")]
    assert {d.name: d.kind for d in src.describe_states()} == {"offsets": "SPLIT_DISTRIBUTE", "marks": "UNION",
                                                              "placed": "SPLIT_DISTRIBUTE"}
    bc = sp.operator("bc")
    assert bc.parallelism == 3
    assert dict(tables.broadcast_state_table(bc, "rules").rows()) == {"r1": "x", "r2": "é"}
    # every subtask holds a full copy
    assert all(len(h.states["rules"].offsets) == 1 for _, h in bc.operator_handles())
    assert len(bc.operator_handles()) == 3


def test_uid_hash_and_name(spark, tmp_path):
    out = str(tmp_path / "sp")
    SavepointWriter(128, spark).with_list_state(None, "s", [1], type="LONG", uid_hash="00112233445566778899aabbccddeeff",
                                                 name="My Op").write(out)
    meta = read_metadata(open(os.path.join(out, "_metadata"), "rb").read())
    (op,) = meta.operators
    assert op.operator_id.hex() == "00112233445566778899aabbccddeeff" and op.name == "My Op" and op.uid is None


@pytest.mark.parametrize("kwargs,message", [
    (dict(key="nope"), "key column 'nope' is not in the DataFrame"),
    (dict(states={"total": "WIBBLE"}), "unknown type 'WIBBLE'"),
    (dict(key_type="DATE", key="day"), "no value-based hashCode"),
    (dict(states={"total": {"kind": "LIST", "type": "LONG"}}), "a LIST state needs a LIST<...> type"),
])
def test_bad_specs(spark, tmp_path, kwargs, message):
    df = spark.createDataFrame([("a", 1, dt.date(2024, 1, 1))], "key string, total long, day date")
    with pytest.raises(errors.FStateError, match=message):
        SavepointWriter(128, spark).with_keyed_state("op", df, **kwargs)


def test_existing_target_refused_and_nothing_left_behind(spark, tmp_path):
    out = tmp_path / "sp"
    out.mkdir()
    (out / "keep").write_text("x")
    w = SavepointWriter(128, spark).with_list_state("src", "s", [1], type="LONG")
    with pytest.raises(errors.FStateError, match="already exists"):
        w.write(str(out))
    assert os.listdir(out) == ["keep"]
    w.write(str(out), overwrite=True)
    assert sorted(os.listdir(out)) == ["_metadata"]
    assert sorted(os.listdir(tmp_path)) == ["sp"]


def test_duplicate_keys_are_refused(spark, tmp_path):
    df = spark.createDataFrame([("a", 1), ("a", 2)], "key string, v long")
    with pytest.raises(Exception, match="appears twice"):
        SavepointWriter(128, spark).with_keyed_state("op", df, parallelism=1).write(str(tmp_path / "sp"))
    assert os.listdir(tmp_path) == []


def test_type_strings():
    assert parse_type("MAP<STRING, LIST<LONG>>").name == "Map<String, List<Long>>"
    assert parse_type("ROW<a INT, b STRING>").name == "Row<a Integer, b String>"
    assert parse_type("TUPLE<STRING, LONG>").name == "Tuple2<String, Long>"
    pojo = parse_type("POJO<com.acme.Order: qty INT, amount DECIMAL>")
    assert pojo.field_names == ("amount", "qty")
    assert parse_type({"pojo": "com.acme.X", "fields": {"b": "LONG", "a": "STRING"}}).field_names == ("a", "b")
    with pytest.raises(errors.InvalidArgumentError, match="unexpected end"):
        parse_type("LIST<LONG")
