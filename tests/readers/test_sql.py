"""Spark SQL over state tables and joins of two savepoints, on real-Flink samples. (Diffs on Spark:
tests/cli/test_engine_cli.py, the same changed keys and redistributed list state on both engines.)"""

import pytest

from fstate.readers import tables
from fstate.readers.views import plan_views, register_views
from fstate.savepoint.loader import Savepoint
from fstate.writers.modify import SavepointModifier
from tests.support import sample_dirs, sample_snapshot

pytestmark = pytest.mark.spark

KEYED = next(sample_snapshot(s) for s in sample_dirs() if s.name == "keyed-hashmap-savepoint")
OPS = next(sample_snapshot(s) for s in sample_dirs() if s.name == "operator-state-hashmap-savepoint")


def test_view_names():
    names = {v["view"] for v in plan_views(Savepoint.open(str(KEYED)))}
    assert {"keyed", "keyed__timers", "window_agg", "window_reduce", "src__offsets", "savepoint_metadata"} <= names
    names = {v["view"] for v in plan_views(Savepoint.open(str(OPS)), prefix="old")}
    assert {"old_lists__union_marks", "old_bcast__rules", "old_big__blob", "old_savepoint_metadata"} <= names


def test_sql_over_every_table(spark):
    views = register_views(spark, str(KEYED))
    assert "keyed" in views
    op = Savepoint.open(str(KEYED)).operator("keyed")
    expected = {r[0]: r[1] for r in tables.keyed_table(op, ["total"]).rows() if r[1] is not None and r[1] > 1500}
    got = {r["key"]: r["total"] for r in spark.sql("SELECT key, total FROM keyed WHERE total > 1500").collect()}
    assert got == expected
    n_timers = spark.sql("SELECT count(*) FROM keyed__timers WHERE kind = 'event'").first()[0]
    assert n_timers == sum(1 for t in tables.timers_table(op).rows() if t[2] == "event")
    meta = spark.sql("SELECT operator_uid, state_name, kind FROM savepoint_metadata WHERE operator_uid = 'keyed'")
    assert {(r.state_name, r.kind) for r in meta.collect()} >= {("total", "VALUE"), ("counts", "MAP")}
    w = spark.sql("SELECT key, window_start, window_end FROM window_reduce ORDER BY window_start LIMIT 1").first()
    assert w.window_end - w.window_start == 1000


def test_join_two_savepoints(spark, tmp_path):
    new = tmp_path / "new"
    # written on the embedded engine (the Spark write has tests of its own); the join is Spark's
    m = SavepointModifier(str(KEYED))
    m.transform_state("keyed", "total", sql="SELECT key, CASE WHEN key = 'k-1' THEN NULL "
                                              "WHEN key = 'k-2' THEN total + 1 ELSE total END AS total FROM state")
    m.write(str(new), deep=True)
    register_views(spark, str(KEYED), "a")
    register_views(spark, str(new), "b")
    changed = spark.sql("SELECT a.key FROM a_keyed a JOIN b_keyed b ON a.key = b.key "
                        "WHERE NOT (a.total <=> b.total)").collect()
    assert sorted(r.key for r in changed) == ["k-1", "k-2"]
