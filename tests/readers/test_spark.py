"""The Spark layer: DataFrames equal the pure-Python tables; push-down prunes key groups."""

import pytest

from tests.support import sample_dirs, sample_snapshot
from fstate.readers import tables
from fstate.readers.reader import SavepointReader
from tests.oracle_compare import norm

pytestmark = pytest.mark.spark


def _sample(name):
    return sample_snapshot(next(s for s in sample_dirs() if s.name == name))


def _keyed_sample():
    return _sample("keyed-hashmap-savepoint")


def _operator_sample():
    return _sample("operator-state-hashmap-savepoint")


def _rows(df):
    return sorted((norm(list(r)) for r in df.collect()), key=repr)


def _py_rows(table):
    return sorted((norm(list(r)) for r in table.rows()), key=repr)


def test_list_and_broadcast_state_dataframes(spark):
    r = SavepointReader(str(_operator_sample()), spark)
    df = r.list_state("lists", "tuples")
    assert df.columns == ["subtask", "index", "value"]
    assert [f.name for f in df.schema["value"].dataType.fields] == ["f0", "f1"]
    assert _rows(df) == _py_rows(tables.list_state_table(r.operator("lists"), "tuples"))
    b = r.broadcast_state("bcast", "rules")
    assert b.columns == ["key", "value"]
    assert _rows(b) == _py_rows(tables.broadcast_state_table(r.operator("bcast"), "rules"))


def test_keyed_table_dataframe(spark):
    r = SavepointReader(str(_keyed_sample()), spark)
    df = r.keyed("keyed")
    assert df.columns[0] == "key"
    assert {"total", "events", "counts", "sum", "avg"} <= set(df.columns)
    assert _rows(df) == _py_rows(tables.keyed_table(r.operator("keyed")))
    assert df.rdd.getNumPartitions() == r.operator("keyed").parallelism


def test_key_push_down(spark):
    r = SavepointReader(str(_keyed_sample()), spark)
    df = r.keyed("keyed").where("key = 'k-7'")
    rows = df.collect()
    assert [row["key"] for row in rows] == ["k-7"]
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "k-7" in plan
    # pruning where Spark keeps push-down to its scan: one partition (the handle holding k-7's key group)
    from fstate.readers.datasource import key_push_down_is_safe

    assert (df.rdd.getNumPartitions() == 1) == key_push_down_is_safe(spark)
    many = r.keyed("keyed").where("key in ('k-1', 'k-2', 'k-999', 'nope')").collect()
    assert sorted(row["key"] for row in many) == ["k-1", "k-2", "k-999"]


def test_timers_and_windows(spark):
    r = SavepointReader(str(_keyed_sample()), spark)
    t = r.timers("keyed")
    assert t.columns == ["key", "timestamp", "kind", "service"]
    assert _rows(t) == _py_rows(tables.timers_table(r.operator("keyed")))
    w = r.keyed("window-agg")
    assert w.columns[:3] == ["key", "window_start", "window_end"]
    assert w.count() > 0


def test_flat_mode(spark):
    r = SavepointReader(str(_keyed_sample()), spark)
    flat = r.keyed("keyed", "counts", flat=True)
    assert flat.columns == ["key", "map_key", "map_value"]
    nested = r.keyed("keyed", "counts").collect()
    assert flat.count() == sum(len(row["counts"]) for row in nested if row["counts"])
