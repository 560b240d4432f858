"""Savepoints fstate writes, restored by real Flink: the state Flink finds is exactly what was written.

Each case writes a savepoint (bootstrap or modify), starts a real Flink job from it with
non-restored state not allowed (tests/flink/jobs/v2/RestoreJob.java) and compares Flink's dump of
what it restored with the data fstate was given.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from decimal import Decimal

import pytest

from fstate.readers import tables
from fstate.savepoint.loader import Savepoint
from fstate.writers.modify import SavepointModifier, relocate
from fstate.writers.writer import SavepointWriter
from tests.flink import harness
from tests.flink.restore import restore_and_dump
from tests.oracle_compare import norm, norm_dump_map

pytestmark = [pytest.mark.flink, pytest.mark.spark]


def _j(x):
    return json.dumps(x, sort_keys=True, ensure_ascii=False)


def keyed_of(dump: dict, uid: str) -> dict[str, dict[str, object]]:
    op = next(o for o in dump["operators"] if o["uid"] == uid)
    out = {}
    for e in op["keyed_state"]:
        out[e["state"]] = {_j(norm(k)): (norm_dump_map(v) if e["kind"] == "MAP" else norm(v)) for k, v in e["entries"]}
    return out


def timers_of(dump: dict, uid: str) -> list:
    op = next(o for o in dump["operators"] if o["uid"] == uid)
    return sorted(((t["kind"], _j(norm(t["key"])), t["timestamp"]) for t in op["timers"]))


def lists_of(dump: dict, uid: str) -> dict[str, list]:
    op = next(o for o in dump["operators"] if o["uid"] == uid)
    out: dict[str, list] = {}
    for e in op["list_state"]:
        if e["mode"] == "UNION":
            out[e["state"]] = sorted(map(_j, e["values"]))  # every subtask restores the whole union
        else:
            out.setdefault(e["state"], []).extend(map(_j, e["values"]))
    return {k: sorted(v) for k, v in out.items()}


def broadcast_of(dump: dict, uid: str) -> dict[str, list]:
    op = next(o for o in dump["operators"] if o["uid"] == uid)
    return {e["state"]: norm_dump_map(e["entries"]) for e in op["broadcast_state"]}


@pytest.fixture(scope="module", autouse=True)
def flink():
    harness.require_flink("2.3.0")


def _arrow_frames(rows: list[tuple]):
    """The two sources of the bootstrap case as the embedded engine's frames, of the Spark types the
    Spark variant declares (its output must be the same bytes)."""
    import pyarrow

    from fstate.writers.arrow_frames import table_frame

    keyed_schema = pyarrow.schema([
        ("key", pyarrow.string()), ("total", pyarrow.int64()), ("events", pyarrow.list_(pyarrow.string())),
        ("counts", pyarrow.map_(pyarrow.string(), pyarrow.int64())),
        ("pair", pyarrow.struct([("f0", pyarrow.string()), ("f1", pyarrow.int32())])),
        ("amount", pyarrow.decimal128(20, 2)), ("day", pyarrow.date32()), ("ts", pyarrow.int64())])
    keyed_rows = [dict(zip(keyed_schema.names, (r[0], r[1], r[2], list(r[3].items()) if r[3] else None,
                                                {"f0": r[4][0], "f1": r[4][1]} if r[4] else None,
                                                r[5].quantize(Decimal("0.01")), r[6], r[7]))) for r in rows]
    longs_schema = pyarrow.schema([("key", pyarrow.int64()), ("name", pyarrow.string()),
                                   ("xs", pyarrow.list_(pyarrow.int64()))])
    longs = [{"key": i, "name": f"v{i}", "xs": [i, -i]} for i in range(150)]
    return (table_frame(pyarrow.Table.from_pylist(keyed_rows, keyed_schema)),
            table_frame(pyarrow.Table.from_pylist(longs, longs_schema)))


@pytest.mark.parametrize("max_parallelism,written,restored,backend,engine", [
    (128, 2, 3, "hashmap", "spark"), (4096, 3, 2, "rocksdb", "spark"), (128, 2, 3, "hashmap", "embedded")])
def test_bootstrapped_keyed_and_operator_state_restore(spark, tmp_path, max_parallelism, written, restored, backend,
                                                       engine):
    n = 400
    rows = [(f"k-{i}", i * 7, [f"e{i}", "ü"] if i % 3 else None, {"a": i, "b": None} if i % 2 else None,
             (f"t{i}", i) if i % 5 else None, Decimal(i) / 4, dt.date(2024, 1, 1) + dt.timedelta(days=i), 10_000 + i)
            for i in range(n)]
    if engine == "spark":
        df = spark.createDataFrame(rows, "key string, total long, events array<string>, counts map<string,bigint>, "
                                         "pair struct<f0:string,f1:int>, amount decimal(20,2), day date, ts long")
        longs = spark.createDataFrame([(i, f"v{i}", [i, -i]) for i in range(150)],
                                      "key long, name string, xs array<bigint>")
    else:  # no Spark: the embedded engine writes the same savepoint from Arrow
        df, longs = _arrow_frames(rows)
    out = str(tmp_path / "sp")
    (SavepointWriter(max_parallelism, spark if engine == "spark" else None)
     .with_keyed_state("keyed", df, states={"total": None, "events": None, "counts": None, "pair": "TUPLE<STRING, INT>",
                                            "amount": "DECIMAL", "day": None}, event_timers="ts", parallelism=written)
     .with_keyed_state("by-long", longs, parallelism=written)
     .with_list_state("src", "offsets", [3, 1, 4, 1, 5], type="LONG", parallelism=written)
     .with_union_state("src", "marks", [10, 20], type="LONG")
     .with_broadcast_state("src", "rules", {"r1": "allow", "r2": "dény"}, key_type="STRING", value_type="STRING")
     .write(out))
    config = {"savepoint": out, "max_parallelism": max_parallelism, "operators": [
        {"uid": "keyed", "kind": "keyed", "parallelism": restored, "key_type": "STRING", "timers": True, "states": [
            {"name": "total", "kind": "VALUE", "type": "LONG"}, {"name": "events", "kind": "LIST", "type": "STRING"},
            {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>"},
            {"name": "pair", "kind": "VALUE", "type": "TUPLE<STRING, INT>"},
            {"name": "amount", "kind": "VALUE", "type": "DECIMAL"}, {"name": "day", "kind": "VALUE", "type": "DATE"}]},
        {"uid": "by-long", "kind": "keyed", "parallelism": restored, "key_type": "LONG", "states": [
            {"name": "name", "kind": "VALUE", "type": "STRING"}, {"name": "xs", "kind": "LIST", "type": "LONG"}]},
        {"uid": "src", "kind": "operator", "parallelism": restored, "states": [
            {"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"},
            {"name": "marks", "mode": "UNION", "type": "LONG"},
            {"name": "rules", "mode": "BROADCAST", "key_type": "STRING", "type": "STRING"}]}]}
    dump = restore_and_dump(config, backend=backend)
    assert not dump.get("warnings"), dump["warnings"]
    got = keyed_of(dump, "keyed")
    key = lambda k: _j(k)  # noqa: E731
    assert got["total"] == {key(k): t for k, t, *_ in rows}
    assert got["events"] == {key(k): e for k, _, e, *_ in rows if e}
    assert got["counts"] == {key(k): norm_dump_map(list(c.items())) for k, _, _, c, *_ in rows if c}
    assert got["pair"] == {key(k): list(p) for k, _, _, _, p, *_ in rows if p}
    assert got["amount"] == {key(r[0]): format(r[5].quantize(Decimal("0.01")), "f") for r in rows}  # decimal(20,2)
    assert got["day"] == {key(r[0]): (r[6] - dt.date(1970, 1, 1)).days for r in rows}
    assert timers_of(dump, "keyed") == sorted(("event", key(r[0]), r[7]) for r in rows)
    by_long = keyed_of(dump, "by-long")
    assert by_long["name"] == {key(i): f"v{i}" for i in range(150)}
    assert by_long["xs"] == {key(i): [i, -i] for i in range(150)}
    lists = lists_of(dump, "src")
    assert lists["offsets"] == sorted(map(_j, [3, 1, 4, 1, 5]))
    assert lists["marks"] == sorted(map(_j, [10, 20]))
    assert broadcast_of(dump, "src") == {"rules": [["r1", "allow"], ["r2", "dény"]]}


def _real(job: str):
    res = harness.generate(job, "2.3.0", "hashmap", "savepoint")
    return res.snapshot_dir, res.dump


def test_read_real_operator_state_write_restore_gives_the_original_dump(spark, tmp_path):
    snap, dump = _real("OperatorStateJob")
    sp = Savepoint.open(str(snap))
    w = SavepointWriter(128, spark)
    config_ops = []
    for op in dump["operators"]:
        view = sp.operator(op["uid"])
        states = []
        for s in (view.operator_meta.states if view.operator_meta else []):
            if s.kind == "BROADCAST":
                w.with_broadcast_state(op["uid"], s.name, dict(view.broadcast_state(s.name)), key_type=s.key_type,
                                       value_type=s.value_type, parallelism=view.parallelism)
                states.append({"name": s.name, "mode": "BROADCAST", "key_type": _type_string(s.key_type),
                               "type": _type_string(s.value_type)})
            else:
                rows = list(tables.list_state_table(view, s.name).rows())
                data = spark.createDataFrame([(v, sub) for sub, _, v in rows],
                                             _spark_schema(s.value_type)) if rows else []
                w.with_list_state(op["uid"], s.name, data, type=s.value_type, union=s.kind == "UNION",
                                  parallelism=view.parallelism)
                states.append({"name": s.name, "mode": s.kind, "type": _type_string(s.value_type)})
        if states:
            config_ops.append({"uid": op["uid"], "kind": "operator", "parallelism": view.parallelism, "states": states})
    out = str(tmp_path / "sp")
    w.write(out)
    restored = restore_and_dump({"savepoint": out, "operators": config_ops})
    for op in config_ops:
        assert lists_of(restored, op["uid"]) == lists_of(_as_restored(dump), op["uid"])
        assert broadcast_of(restored, op["uid"]) == broadcast_of(dump, op["uid"])


def _as_restored(dump):
    """What a restore sees of a job's dump: union state is the whole union on every subtask."""
    d = json.loads(json.dumps(dump))
    for op in d["operators"]:
        unions: dict[str, list] = {}
        for e in op["list_state"]:
            if e["mode"] == "UNION":
                unions.setdefault(e["state"], []).extend(e["values"])
        for e in op["list_state"]:
            if e["mode"] == "UNION":
                e["values"] = unions[e["state"]]
    return d


def _type_string(t) -> str:
    names = {"Long": "LONG", "Integer": "INT", "String": "STRING", "Double": "DOUBLE", "Boolean": "BOOLEAN",
             "byte[]": "BYTES"}
    if t.name in names:
        return names[t.name]
    if t.name.startswith("Tuple2<"):
        return f"TUPLE<{_type_string(t.children[0])}, {_type_string(t.children[1])}>"
    raise AssertionError(f"no restore type string for {t.name}")


def _spark_schema(t) -> str:
    from fstate.readers.schema import spark_type

    return f"value {spark_type(t).simpleString()}, subtask int"


def test_modified_savepoints_restore(spark, tmp_path):
    snap, dump = _real("KeyedStateJob")
    base = tmp_path / "base"
    shutil.copytree(snap, base)
    keyed_states = [{"name": "total", "kind": "VALUE", "type": "LONG"}, {"name": "events", "kind": "LIST", "type": "STRING"},
                    {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>"},
                    {"name": "sum", "kind": "REDUCING", "type": "LONG"},
                    {"name": "avg", "kind": "AGGREGATING", "type": "TUPLE<LONG, LONG>"}]
    src = {"uid": "src", "kind": "operator", "parallelism": 1,
           "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"}]}

    def keyed_op(uid, max_parallelism=128):
        return {"uid": uid, "kind": "keyed", "parallelism": 2, "key_type": "STRING", "timers": True,
                "states": keyed_states, "max_parallelism": max_parallelism}

    original = keyed_of(dump, "keyed")
    original_timers = [t for t in timers_of(dump, "keyed") if t[0] == "event"]

    # 1. remove the window operators, rename keyed -> keyed-v2, change its max parallelism 128 -> 256,
    #    transform one state, add a new operator: one NEW, restored with none of the removed operators
    new = tmp_path / "new"
    m = SavepointModifier(str(base), spark)
    m.remove_operator("window-reduce").remove_operator("window-agg")
    m.rename_uid("keyed", "keyed-v2")
    m.writer.with_list_state("added", "names", ["a", "b"], type="STRING")
    m.write(str(new))
    new2 = tmp_path / "new2"
    m2 = SavepointModifier(str(new), spark, allow_external_paths=True)  # NEW refers to BASE's files
    m2.set_max_parallelism("keyed-v2", 256)
    m2.transform_state("keyed-v2", "total", sql="SELECT key, total + 1 AS total FROM state")
    m2.write(str(new2))
    config = {"savepoint": str(new2), "operators": [
        src, keyed_op("keyed-v2", 256),
        {"uid": "added", "kind": "operator", "parallelism": 1,
         "states": [{"name": "names", "mode": "SPLIT_DISTRIBUTE", "type": "STRING"}]}]}
    restored = restore_and_dump(config, shared_root=tmp_path)  # shallow copies: cached by tmp_path's bytes
    got = keyed_of(restored, "keyed-v2")
    assert got["total"] == {k: v + 1 for k, v in original["total"].items()}
    for s in ("events", "counts", "sum", "avg"):
        assert got[s] == original[s], s
    assert [t for t in timers_of(restored, "keyed-v2") if t[0] == "event"] == original_timers
    assert lists_of(restored, "added") == {"names": sorted(map(_j, ["a", "b"]))}

    # 2. rename + max parallelism + transform in one modify, each naming the operator as the one
    #    before left it: Flink restores the renamed, re-keyed, transformed state
    combined = tmp_path / "combined"
    m3 = SavepointModifier(str(base), spark)
    m3.rename_uid("keyed", "keyed-v3").set_max_parallelism("keyed-v3", 256)
    m3.transform_state("keyed-v3", "total", sql="SELECT key, total * 2 AS total FROM state")
    m3.remove_operator("window-reduce").remove_operator("window-agg")
    m3.write(str(combined))
    restored = restore_and_dump({"savepoint": str(combined), "operators": [src, keyed_op("keyed-v3", 256)]},
                                shared_root=tmp_path)
    got = keyed_of(restored, "keyed-v3")
    assert got["total"] == {k: v * 2 for k, v in original["total"].items()}
    for s in ("events", "counts", "sum", "avg"):
        assert got[s] == original[s], s
    assert [t for t in timers_of(restored, "keyed-v3") if t[0] == "event"] == original_timers

    # 3. relocate: move NEW's base, fix the paths, restore again
    moved = tmp_path / "base-moved"
    shutil.move(str(base), str(moved))
    relocate(str(new), str(base), str(moved), allow_external_paths=True)  # a shallow copy points at BASE
    again = restore_and_dump({"savepoint": str(new), "ignore_unclaimed_state": False, "operators": [
        src, keyed_op("keyed-v2"), {"uid": "added", "kind": "operator", "parallelism": 1,
                                    "states": [{"name": "names", "mode": "SPLIT_DISTRIBUTE", "type": "STRING"}]}]},
        shared_root=tmp_path)
    assert keyed_of(again, "keyed-v2") == original


def test_embedded_modify_restores(tmp_path):
    """Rename, max parallelism and a transform on the embedded engine (no JVM writes it): Flink restores
    the renamed, re-keyed, transformed state (deep: self-contained, so its restore is cached by its bytes)."""
    snap, dump = _real("KeyedStateJob")
    original = keyed_of(dump, "keyed")
    combined = tmp_path / "combined"
    m = SavepointModifier(str(snap), engine="embedded")
    m.rename_uid("keyed", "keyed-v3").set_max_parallelism("keyed-v3", 256)
    m.transform_state("keyed-v3", "total", sql="SELECT key, total * 2 AS total FROM state")
    m.remove_operator("window-reduce").remove_operator("window-agg")
    m.write(str(combined), deep=True)
    states = [{"name": "total", "kind": "VALUE", "type": "LONG"}, {"name": "events", "kind": "LIST", "type": "STRING"},
              {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>"},
              {"name": "sum", "kind": "REDUCING", "type": "LONG"},
              {"name": "avg", "kind": "AGGREGATING", "type": "TUPLE<LONG, LONG>"}]
    restored = restore_and_dump({"savepoint": str(combined), "operators": [
        {"uid": "src", "kind": "operator", "parallelism": 1,
         "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"}]},
        {"uid": "keyed-v3", "kind": "keyed", "parallelism": 2, "key_type": "STRING", "timers": True,
         "states": states, "max_parallelism": 256}]})
    got = keyed_of(restored, "keyed-v3")
    assert got["total"] == {k: v * 2 for k, v in original["total"].items()}
    for s in ("events", "counts", "sum", "avg"):
        assert got[s] == original[s], s
    assert [t for t in timers_of(restored, "keyed-v3") if t[0] == "event"] == [
        t for t in timers_of(dump, "keyed") if t[0] == "event"]



def test_embedded_arrow_transform_restores(tmp_path):
    """Functions of Arrow batches (rows dropped, values changed, a list state grown) with a rename and a
    new max parallelism, on the embedded engine: Flink restores exactly the functions' rows."""
    import pyarrow
    import pyarrow.compute

    snap, dump = _real("KeyedStateJob")
    original = keyed_of(dump, "keyed")

    def tripled_above_1500(batch):
        kept = batch.filter(pyarrow.compute.greater(batch["total"], 1500))
        return pyarrow.record_batch([kept["key"], pyarrow.compute.multiply(kept["total"], 3)], names=["key", "total"])

    def one_more_event(batch):
        events = [None if v is None else v + ["arrow"] for v in batch["events"].to_pylist()]
        return pyarrow.record_batch([batch["key"], pyarrow.array(events, batch.schema.field("events").type)],
                                    names=["key", "events"])

    new = tmp_path / "arrow"
    m = SavepointModifier(str(snap), engine="embedded")
    m.rename_uid("keyed", "keyed-arrow").set_max_parallelism("keyed-arrow", 256)
    m.transform_state("keyed-arrow", "total", arrow=tripled_above_1500)
    m.transform_state("keyed-arrow", "events", arrow=one_more_event)
    m.remove_operator("window-reduce").remove_operator("window-agg")
    m.write(str(new), deep=True)  # self-contained: its restore is cached by its bytes
    restored = restore_and_dump({"savepoint": str(new), "operators": [
        SOURCE_OPERATOR, {"uid": "keyed-arrow", "kind": "keyed", "parallelism": 2, "key_type": "STRING",
                          "timers": True, "states": KEYED_STATES, "max_parallelism": 256}]})
    got = keyed_of(restored, "keyed-arrow")
    assert got["total"] == {k: v * 3 for k, v in original["total"].items() if v > 1500}
    assert 0 < len(got["total"]) < len(original["total"])
    assert got["events"] == {k: v + ["arrow"] for k, v in original["events"].items()}
    for s in ("counts", "sum", "avg"):
        assert got[s] == original[s], s

# ----------------------------------------------------------------------------- older releases as targets


def _minor(version: str) -> str:
    """``1.18.1`` -> ``1.18``: what a user passes as ``flink_version``."""
    return ".".join(version.split(".")[:2])


#: The releases other than 2.3 that fstate writes for and RestoreJob restores on: 2.0, 1.20 and the
#: sampled ones (1.18, 2.2); with FSTATE_FLINK_ALL=1 every release RestoreJob runs on.
TARGETS = [v for v in (*harness.MATRIX_VERSIONS, *harness.SAMPLE_VERSIONS)
           if v != harness.DEFAULT_VERSION and harness.release(v).restore_job]


@pytest.mark.parametrize("version,backend", [
    (v, backend) for v in TARGETS
    for backend in (("hashmap", "rocksdb") if v == "1.20.1" or harness.ALL_RELEASES else ("hashmap",))])
def test_release_restores_a_bootstrapped_savepoint(spark, tmp_path, version, backend):
    """A savepoint bootstrapped for an older release (``flink_version="1.18"``, ...) has that release's
    `_metadata` version and serializers: the release restores every state, timer and operator state."""
    harness.require_flink(version)
    rows = [(f"k-{i}", i * 3, [f"e{i}", "ü"] if i % 3 else None, {"a": i} if i % 2 else None, 5_000 + i)
            for i in range(120)]
    df = spark.createDataFrame(rows, "key string, total long, events array<string>, counts map<string,bigint>, "
                                     "ts long")
    out = str(tmp_path / "sp")
    (SavepointWriter(128, spark, flink_version=_minor(version))
     .with_keyed_state("keyed", df, event_timers="ts", parallelism=2)
     .with_list_state("src", "offsets", [3, 1, 4], type="LONG", parallelism=2)
     .with_union_state("src", "marks", [10, 20], type="LONG")
     .with_broadcast_state("src", "rules", {"r1": "allow"}, key_type="STRING", value_type="STRING")
     .write(out))
    assert Savepoint.open(out).metadata.version == harness.release(version).metadata_version
    dump = restore_and_dump({"savepoint": out, "operators": [
        {"uid": "keyed", "kind": "keyed", "parallelism": 3, "key_type": "STRING", "timers": True, "states": [
            {"name": "total", "kind": "VALUE", "type": "LONG"}, {"name": "events", "kind": "LIST", "type": "STRING"},
            {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>"}]},
        {"uid": "src", "kind": "operator", "parallelism": 1, "states": [
            {"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"},
            {"name": "marks", "mode": "UNION", "type": "LONG"},
            {"name": "rules", "mode": "BROADCAST", "key_type": "STRING", "type": "STRING"}]}]},
        version=version, backend=backend)
    assert dump["flink_version"] == version
    assert not dump.get("warnings"), dump["warnings"]
    got = keyed_of(dump, "keyed")
    assert got["total"] == {_j(k): t for k, t, *_ in rows}
    assert got["events"] == {_j(k): e for k, _, e, *_ in rows if e}
    assert got["counts"] == {_j(k): norm_dump_map(list(c.items())) for k, _, _, c, _ in rows if c}
    assert timers_of(dump, "keyed") == sorted(("event", _j(r[0]), r[4]) for r in rows)
    assert lists_of(dump, "src") == {"offsets": sorted(map(_j, [3, 1, 4])), "marks": sorted(map(_j, [10, 20]))}
    assert broadcast_of(dump, "src") == {"rules": [["r1", "allow"]]}


KEYED_STATES = [{"name": "total", "kind": "VALUE", "type": "LONG"}, {"name": "events", "kind": "LIST", "type": "STRING"},
                {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>"},
                {"name": "sum", "kind": "REDUCING", "type": "LONG"},
                {"name": "avg", "kind": "AGGREGATING", "type": "TUPLE<LONG, LONG>"}]
SOURCE_OPERATOR = {"uid": "src", "kind": "operator", "parallelism": 1,
                   "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"}]}


@pytest.mark.parametrize("written_by,flink_version,version,backend", [
    ("1.20.1", None, "1.20.1", "hashmap"),      # a 1.20 savepoint stays a 1.20 one (V4)
    ("1.20.1", None, "1.20.1", "rocksdb"),
    ("2.3.0", "1.20", "1.20.1", "hashmap"),     # a 2.3 savepoint written for 1.20
] + [case for v in TARGETS if harness.ALL_RELEASES and harness.release(v).suite is not harness.Suite.CORE
     for case in ((v, None, v, "hashmap"), ("2.3.0", _minor(v), v, "hashmap"))])
def test_release_restores_a_modified_savepoint(spark, tmp_path, written_by, flink_version, version, backend):
    """A savepoint of ``written_by`` modified (operators removed and renamed, max parallelism changed,
    a state transformed, an operator added) for ``flink_version`` (default: the release that wrote
    it) restores on ``version``."""
    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", written_by, "hashmap", "savepoint")
    original = keyed_of(res.dump, "keyed")
    original_timers = [t for t in timers_of(res.dump, "keyed") if t[0] == "event"]
    new = str(tmp_path / "new")
    m = SavepointModifier(str(res.snapshot_dir), spark, flink_version=flink_version)
    m.remove_operator("window-reduce").remove_operator("window-agg")
    m.rename_uid("keyed", "keyed-v2").set_max_parallelism("keyed-v2", 256)
    m.transform_state("keyed-v2", "total", sql="SELECT key, total + 1 AS total FROM state")
    m.writer.with_list_state("added", "names", ["a", "b"], type="STRING")
    m.write(new)
    assert Savepoint.open(new).metadata.version == harness.release(version).metadata_version
    restored = restore_and_dump({"savepoint": new, "operators": [
        SOURCE_OPERATOR,
        {"uid": "keyed-v2", "kind": "keyed", "parallelism": 2, "key_type": "STRING", "timers": True,
         "states": KEYED_STATES, "max_parallelism": 256},
        {"uid": "added", "kind": "operator", "parallelism": 1,
         "states": [{"name": "names", "mode": "SPLIT_DISTRIBUTE", "type": "STRING"}]}]},
        version=version, backend=backend)
    assert restored["flink_version"] == version
    got = keyed_of(restored, "keyed-v2")
    assert got["total"] == {k: v + 1 for k, v in original["total"].items()}
    for s in ("events", "counts", "sum", "avg"):
        assert got[s] == original[s], s
    assert [t for t in timers_of(restored, "keyed-v2") if t[0] == "event"] == original_timers
    assert lists_of(restored, "added") == {"names": sorted(map(_j, ["a", "b"]))}


def test_flink_restores_a_transformed_rocksdb_checkpoint(spark, tmp_path):
    """A RocksDB incremental checkpoint (SST files in the job's shared/ directory) modified: renamed
    and one state transformed (read through the keyed-state seam, written as key-group streams),
    window operators removed; Flink restores it on RocksDB with the changed values."""
    res = harness.generate("KeyedStateJob", "2.3.0", "rocksdb", "checkpoint", extra_args=("--incremental", "true"))
    base = Savepoint.open(str(res.snapshot_dir))
    assert base.operator("keyed").keyed_layout == "RocksDB incremental/native"
    original = keyed_of(res.dump, "keyed")
    original_timers = [t for t in timers_of(res.dump, "keyed") if t[0] == "event"]
    new = str(tmp_path / "new")
    m = SavepointModifier(str(res.snapshot_dir), spark)
    m.remove_operator("window-reduce").remove_operator("window-agg")
    m.rename_uid("keyed", "keyed-v2")
    m.transform_state("keyed-v2", "total", sql="SELECT key, total * 3 AS total FROM state")
    m.write(new)
    assert {r[0]: r[1] for r in tables.keyed_table(Savepoint.open(new).operator("keyed-v2"), ["total"]).rows()} \
        == {json.loads(k): v * 3 for k, v in original["total"].items()}
    restored = restore_and_dump({"savepoint": new, "operators": [
        SOURCE_OPERATOR, {"uid": "keyed-v2", "kind": "keyed", "parallelism": 2, "key_type": "STRING", "timers": True,
                          "states": KEYED_STATES}]}, backend="rocksdb")
    assert not restored.get("warnings"), restored["warnings"]
    got = keyed_of(restored, "keyed-v2")
    assert got["total"] == {k: v * 3 for k, v in original["total"].items()} and got["total"]
    for s in ("events", "counts", "sum", "avg"):
        assert got[s] == original[s], s
    assert [t for t in timers_of(restored, "keyed-v2") if t[0] == "event"] == original_timers
