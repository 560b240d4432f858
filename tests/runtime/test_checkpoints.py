"""Checkpoints and savepoints of the runtime, read by fstate (tables, CLI, Spark), and pickled
state round-tripping through the runtime."""

from __future__ import annotations

import os

import pytest

from fstate.readers import tables
from fstate.runtime import CollectSink, JobStatus, KeyedProcessFunction, ManualClock, Types, ValueStateDescriptor
from fstate.savepoint.loader import Savepoint
from fstate.savepoint import types as savepoint_types
from tests.runtime.jobs import Point, all_states_job, expected_all_states, make_env, wait_for


def test_checkpoint_and_savepoint_read_by_fstate(tmp_path):
    CollectSink.clear("all-states")
    # a manual clock: the periodic checkpoint never comes first, however slowly the job runs
    env = make_env(tmp_path, parallelism=2, interval=10_000, clock=ManualClock(0))
    all_states_job(env)
    client = env.execute_async("all states")
    wait_for(lambda: len(CollectSink.results("all-states")) == 200)
    chk = client.trigger_checkpoint()
    sp = client.trigger_savepoint()
    client.cancel()
    assert client.get_job_status() == JobStatus.CANCELED
    assert os.path.basename(chk) == "chk-1" and os.path.basename(os.path.dirname(chk)) == client.job_id
    assert os.path.basename(sp).startswith(f"savepoint-{client.job_id[:6]}-")
    exp = expected_all_states(range(200), 10)
    for path, kind in ((chk, "checkpoint"), (sp, "savepoint")):
        s = Savepoint.open(path)
        assert s.metadata.snapshot_kind == kind
        assert [o.uid for o in s.operators] == ["src", "to-keyed", "keyed", "sink"]
        op = s.operator("keyed")
        assert (op.parallelism, op.max_parallelism) == (2, 128)
        rows = {r[0]: r[1:] for r in tables.keyed_table(op).rows()}
        assert tables.keyed_table(op).column_names == ["key", "total", "extra", "events", "hist", "sum", "avg"]
        assert set(rows) == set(exp)
        for k, e in exp.items():
            total, extra, events, hist, sm, avg = rows[k]
            assert (total, events, hist, sm, avg) == (e["total"], e["events"] or None, e["hist"], e["sum"], e["avg"])
            # fstate decodes plain data from the pickle, and never instantiates a class from a file
            assert isinstance(extra, savepoint_types.OpaquePickle)
        timers = sorted(tables.timers_table(op).rows())
        assert timers == sorted((k, t, "event", "user-timers") for k, e in exp.items() for t in e["timers"])
        seen = list(tables.list_state_table(op, "seen").rows())  # union state: what each subtask processed
        assert sorted(x[2] for x in seen) == sorted(
            sum(1 for v in range(200) if _subtask_of(f"k-{v % 10}") == i) for i in range(2))
        assert [x[2] for x in tables.list_state_table(s.operator("src"), "offset").rows()] == [200]


def _subtask_of(key):
    from fstate.savepoint.types.hashing import key_group_for_hash, operator_index_for_key_group
    return operator_index_for_key_group(key_group_for_hash(savepoint_types.STRING.java_hash(key), 128), 2, 128)


def _retained_checkpoint(tmp_path, n=30, keys=3) -> str:
    CollectSink.clear("all-states")
    env = make_env(tmp_path, parallelism=1, interval=10_000)
    all_states_job(env, n=n, keys=keys)
    client = env.execute_async()
    wait_for(lambda: len(CollectSink.results("all-states")) == n)
    chk = client.trigger_checkpoint()
    client.cancel()
    return chk


def test_fstate_info_shows_a_runtime_checkpoint(tmp_path):
    from typer.testing import CliRunner

    from fstate.cli.app import app

    chk = _retained_checkpoint(tmp_path)
    r = CliRunner().invoke(app, ["info", chk])
    assert r.exit_code == 0, r.output
    for word in ("keyed", "total", "extra", "Pickled", "Map<Long, Long>", "BigDecimal", "seen", "UNION"):
        assert word in r.output, word


def test_pickled_values_are_binary_for_spark():
    import pickle

    from pyspark.sql import types as st

    from fstate.readers.schema import converter, spark_type

    assert spark_type(savepoint_types.PICKLED) == st.BinaryType()
    assert spark_type(savepoint_types.MapType(savepoint_types.STRING, savepoint_types.PICKLED)) == st.MapType(st.StringType(),
                                                                                         st.BinaryType(), True)
    conv = converter(savepoint_types.PICKLED)
    assert pickle.loads(conv({"a": [1, 2]})) == {"a": [1, 2]}
    raw = pickle.dumps(Point(1), protocol=4)
    assert conv(savepoint_types.OpaquePickle(raw)) == raw


@pytest.mark.spark
def test_spark_reads_a_runtime_checkpoint(tmp_path, spark):
    import pickle

    chk = _retained_checkpoint(tmp_path)
    rows = (spark.read.format("flink-savepoint").option("path", chk).option("uid", "keyed")
            .option("state", "total,extra").load().collect())
    got = {r["key"]: (r["total"], pickle.loads(bytes(r["extra"]))) for r in rows}
    assert set(got) == {"k-0", "k-1", "k-2"}
    for k in range(3):
        last = max(v for v in range(30) if v % 3 == k)
        assert got[f"k-{k}"] == (sum(v for v in range(30) if v % 3 == k), {"last": last, "point": Point(last % 3)})


def test_pickled_state_round_trips_through_the_runtime(tmp_path):
    """The runtime itself restores pickled values (classes included) from its own savepoint."""
    CollectSink.clear("all-states")
    env = make_env(tmp_path, parallelism=2, interval=10_000)
    all_states_job(env, n=40, keys=4)
    client = env.execute_async()
    wait_for(lambda: len(CollectSink.results("all-states")) == 40)
    sp = client.stop_with_savepoint()

    class Peek(KeyedProcessFunction):
        def open(self, ctx):
            self.extra = ctx.get_state(ValueStateDescriptor("extra"))

        def process_element(self, value, ctx):
            yield (ctx.get_current_key(), self.extra.value())

    CollectSink.clear("peek")
    env2 = make_env(tmp_path, parallelism=3)
    env2.restore_from(sp, allow_non_restored_state=True)  # the old source's offset is not wanted
    (env2.from_collection([f"k-{i}" for i in range(4)]).uid("probe")
     .map(lambda k: (k, 0)).uid("to-keyed")
     .key_by(lambda t: t[0], key_type=Types.STRING).process(Peek()).uid("keyed")
     .add_sink(CollectSink("peek")).uid("sink"))
    env2.execute()
    got = dict(CollectSink.results("peek"))
    last = {f"k-{k}": max(v for v in range(40) if v % 4 == k) for k in range(4)}
    assert got == {k: {"last": v, "point": Point(v % 3)} for k, v in last.items()}
