"""fstate's stream runtime: configuration, state, checkpoints fstate reads, savepoints, rescaling,
event time, the coordinator's declines and expiries, and restore errors."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from decimal import Decimal

import pytest

from fstate.readers import tables as TB
from fstate.runtime import (IDLE, AggregateFunction, AggregatingStateDescriptor, CheckpointedFunction,
                            CheckpointFailureReason, CheckpointingMode, CheckpointListener, CollectSink,
                            Configuration, ExternalizedCheckpointRetention, FailAt, FailureInjector,
                            JobExecutionException, JobStatus, KeyedProcessFunction, ListStateDescriptor,
                            ManualClock, MapFunction, MapStateDescriptor, ReducingStateDescriptor, RestartStrategies,
                            RestoreError, SourceFunction, StateMigrationError, StreamExecutionEnvironment,
                            TwoPhaseCommitFileSink, Types, ValueStateDescriptor, WatermarkStrategy, read_committed)
from fstate.runtime.config import (ExponentialDelayRestartBackoffTimeStrategy, FailureRateRestartBackoffTimeStrategy,
                                   FixedDelayRestartBackoffTimeStrategy, NoRestartBackoffTimeStrategy,
                                   parse_duration_ms)
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import PICKLED, STRING, MapType, OpaquePickle


# ---------------------------------------------------------------------------------------------
# configuration


def test_flink_style_yaml_configuration(tmp_path):
    cfg = Configuration.from_yaml(f"""
parallelism.default: 3
state.backend.type: hashmap
state.checkpoints.dir: file://{tmp_path}/chk
state.savepoints.dir: {tmp_path}/sp
execution:
  checkpointing:
    interval: 2 s
    mode: AT_LEAST_ONCE
    timeout: 1 min
    min-pause: 500 ms
    max-concurrent-checkpoints: 2
    tolerable-failed-checkpoints: 4
    externalized-checkpoint-retention: RETAIN_ON_CANCELLATION
restart-strategy:
  type: exponential-delay
  exponential-delay:
    initial-backoff: 10 ms
    max-backoff: 2 s
    backoff-multiplier: 2.0
    reset-backoff-threshold: 1 min
    jitter-factor: 0.25
""")
    env = StreamExecutionEnvironment(cfg)
    cc = env.get_checkpoint_config()
    assert env.get_parallelism() == 3
    assert (cc.interval_ms, cc.mode, cc.timeout_ms, cc.min_pause_ms, cc.max_concurrent, cc.tolerable_failures) == \
        (2000, CheckpointingMode.AT_LEAST_ONCE, 60_000, 500, 2, 4)
    assert cc.retention == ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION
    assert cc.checkpoint_dir == f"{tmp_path}/chk" and env.savepoint_dir == f"{tmp_path}/sp"
    rs = env.restart_strategy.create(seed=1)
    assert isinstance(rs, ExponentialDelayRestartBackoffTimeStrategy)
    assert (rs.initial_ms, rs.max_ms, rs.multiplier, rs.reset_threshold_ms, rs.jitter) == (10, 2000, 2.0, 60_000, 0.25)

    flat = Configuration({"restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 7,
                          "restart-strategy.fixed-delay.delay": "3 s"})
    fd = flat.restart_strategy().create()
    assert isinstance(fd, FixedDelayRestartBackoffTimeStrategy) and (fd.attempts, fd.delay_ms) == (7, 3000)
    fr = Configuration({"restart-strategy.type": "failure-rate",
                        "restart-strategy.failure-rate.max-failures-per-interval": 2,
                        "restart-strategy.failure-rate.failure-rate-interval": "10 s",
                        "restart-strategy.failure-rate.delay": "0 ms"}).restart_strategy().create()
    assert isinstance(fr, FailureRateRestartBackoffTimeStrategy) and (fr.max_failures, fr.interval_ms) == (2, 10_000)
    assert isinstance(Configuration({"restart-strategy.type": "none"}).restart_strategy().create(),
                      NoRestartBackoffTimeStrategy)
    with pytest.raises(Exception, match="rocksdb"):
        StreamExecutionEnvironment({"state.backend.type": "rocksdb"})
    with pytest.raises(Exception, match="duration"):
        parse_duration_ms("soon", "x")
    assert parse_duration_ms("1.5 min") == 90_000 and parse_duration_ms(250) == 250


def test_restart_strategies():
    fd = RestartStrategies.fixed_delay_restart(2, 50).create()
    decisions = []
    for t in range(3):
        fd.notify_failure(t)
        decisions.append((fd.can_restart(), fd.backoff_ms()))
    assert decisions == [(True, 50), (True, 50), (False, 50)]

    ex = RestartStrategies.exponential_delay_restart(100, 1000, 2.0, 10_000, 0.0).create()
    backoffs = []
    for t in (0, 1, 2, 3, 4, 5):
        ex.notify_failure(t)
        backoffs.append(ex.backoff_ms())
    assert backoffs == [100, 200, 400, 800, 1000, 1000]
    ex.notify_failure(20_000)  # quiet for longer than the reset threshold
    assert ex.backoff_ms() == 100 and ex.can_restart()
    jit = RestartStrategies.exponential_delay_restart(1000, 60_000, 1.5, 3_600_000, 0.1).create(seed=3)
    for t in range(5):
        jit.notify_failure(t)
        base = min(1000 * 1.5 ** t, 60_000)
        assert base * 0.9 - 1 <= jit.backoff_ms() <= base * 1.1 + 1

    fr = RestartStrategies.failure_rate_restart(2, 1000, 0).create()
    fr.notify_failure(0)
    fr.notify_failure(100)
    assert fr.can_restart() is False or fr.failures  # 2 failures within the interval: the limit
    fr2 = RestartStrategies.failure_rate_restart(2, 1000, 0).create()
    for t in (0, 100, 200):
        fr2.notify_failure(t)
    assert not fr2.can_restart()
    fr3 = RestartStrategies.failure_rate_restart(2, 1000, 0).create()
    for t in (0, 2000, 4000):
        fr3.notify_failure(t)
    assert fr3.can_restart()


# ---------------------------------------------------------------------------------------------
# helpers


def _env(tmp_path, parallelism=2, interval=None, **retention) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism)
    if interval:
        env.enable_checkpointing(interval)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_externalized_checkpoint_retention(retention.get("retention",
                                                           ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION))
    env.set_default_savepoint_directory(str(tmp_path / "sp"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 0))
    return env


class Avg(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class Point:  # a class fstate's reader must not instantiate
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x


class AllStates(KeyedProcessFunction, CheckpointedFunction, CheckpointListener):
    """Every kind of keyed state, union and list operator state, and event timers."""

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        self.seen = store.get_union_list_state(ListStateDescriptor("seen", Types.LONG))
        self.mine = store.get_list_state(ListStateDescriptor("mine", Types.STRING))
        self.n = 0
        self.completed = []

    def snapshot_state(self, context):
        self.seen.update([self.n])
        self.mine.update([f"cp-{context.get_checkpoint_id()}"])

    def notify_checkpoint_complete(self, checkpoint_id):
        self.completed.append(checkpoint_id)

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG))
        self.extra = ctx.get_state(ValueStateDescriptor("extra"))  # any Python value: pickled
        self.events = ctx.get_list_state(ListStateDescriptor("events", Types.STRING))
        self.hist = ctx.get_map_state(MapStateDescriptor("hist", Types.LONG, Types.LONG))
        self.sum = ctx.get_reducing_state(ReducingStateDescriptor("sum", lambda a, b: a + b, Types.BIG_DEC))
        self.avg = ctx.get_aggregating_state(
            AggregatingStateDescriptor("avg", Avg(), Types.TUPLE(Types.LONG, Types.LONG)))

    def process_element(self, value, ctx):
        key, v = value
        self.n += 1
        self.total.update((self.total.value() or 0) + v)
        self.extra.update({"last": v, "point": Point(v % 3)})
        if v % 2 == 0:
            self.events.add(f"e{v}")
        self.hist.put(v % 3, (self.hist.get(v % 3) or 0) + 1)
        self.sum.add(Decimal(v) / 4)
        self.avg.add(v)
        ctx.timer_service().register_event_time_timer(1_000_000 + v % 4)
        yield key


def _expected_all_states(values, keys):
    exp = {}
    for v in values:
        k = f"k-{v % keys}"
        e = exp.setdefault(k, {"total": 0, "events": [], "hist": {}, "sum": Decimal(0), "avg": (0, 0), "last": None,
                               "timers": set()})
        e["total"] += v
        if v % 2 == 0:
            e["events"].append(f"e{v}")
        e["hist"][v % 3] = e["hist"].get(v % 3, 0) + 1
        e["sum"] += Decimal(v) / 4
        e["avg"] = (e["avg"][0] + v, e["avg"][1] + 1)
        e["last"] = v
        e["timers"].add(1_000_000 + v % 4)
    return exp


def _all_states_job(env, n=200, keys=10):
    (env.from_collection(list(range(n)), idle_at_end=True).uid("src")
     .map(lambda i: (f"k-{i % keys}", i)).uid("to-keyed")
     .key_by(lambda t: t[0], key_type=Types.STRING)
     .process(AllStates()).uid("keyed")
     .add_sink(CollectSink("all-states")).uid("sink"))


def _wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# checkpoints fstate reads


def test_checkpoint_and_savepoint_read_by_fstate(tmp_path):
    CollectSink.clear("all-states")
    env = _env(tmp_path, parallelism=2, interval=10_000)
    _all_states_job(env)
    client = env.execute_async("all states")
    _wait_for(lambda: len(CollectSink.results("all-states")) == 200)
    chk = client.trigger_checkpoint()
    sp = client.trigger_savepoint()
    client.cancel()
    assert client.get_job_status() == JobStatus.CANCELED
    assert os.path.basename(chk) == "chk-1" and os.path.basename(os.path.dirname(chk)) == client.job_id
    assert os.path.basename(sp).startswith(f"savepoint-{client.job_id[:6]}-")
    exp = _expected_all_states(range(200), 10)
    for path, kind in ((chk, "checkpoint"), (sp, "savepoint")):
        s = Savepoint.open(path)
        assert s.metadata.snapshot_kind == kind
        assert [o.uid for o in s.operators] == ["src", "to-keyed", "keyed", "sink"]
        op = s.operator("keyed")
        assert (op.parallelism, op.max_parallelism) == (2, 128)
        rows = {r[0]: r[1:] for r in TB.keyed_table(op).rows()}
        assert TB.keyed_table(op).column_names == ["key", "total", "extra", "events", "hist", "sum", "avg"]
        assert set(rows) == set(exp)
        for k, e in exp.items():
            total, extra, events, hist, sm, avg = rows[k]
            assert (total, events, hist, sm, avg) == (e["total"], e["events"] or None, e["hist"], e["sum"], e["avg"])
            # fstate decodes plain data from the pickle, and never instantiates a class from a file
            assert isinstance(extra, OpaquePickle)
        timers = sorted(TB.timers_table(op).rows())
        assert timers == sorted((k, t, "event", "user-timers") for k, e in exp.items() for t in e["timers"])
        seen = list(TB.list_state_table(op, "seen").rows())  # union state: what each subtask processed
        assert sorted(x[2] for x in seen) == sorted(
            sum(1 for v in range(200) if _subtask_of(f"k-{v % 10}") == i) for i in range(2))
        assert [x[2] for x in TB.list_state_table(s.operator("src"), "offset").rows()] == [200]


def _subtask_of(key):
    from fstate.savepoint.types.hashing import key_group_for_hash, operator_index_for_key_group
    return operator_index_for_key_group(key_group_for_hash(STRING.java_hash(key), 128), 2, 128)


def _retained_checkpoint(tmp_path, n=30, keys=3) -> str:
    CollectSink.clear("all-states")
    env = _env(tmp_path, parallelism=1, interval=10_000)
    _all_states_job(env, n=n, keys=keys)
    client = env.execute_async()
    _wait_for(lambda: len(CollectSink.results("all-states")) == n)
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

    assert spark_type(PICKLED) == st.BinaryType()
    assert spark_type(MapType(STRING, PICKLED)) == st.MapType(st.StringType(), st.BinaryType(), True)
    conv = converter(PICKLED)
    assert pickle.loads(conv({"a": [1, 2]})) == {"a": [1, 2]}
    raw = pickle.dumps(Point(1), protocol=4)
    assert conv(OpaquePickle(raw)) == raw


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
    env = _env(tmp_path, parallelism=2, interval=10_000)
    _all_states_job(env, n=40, keys=4)
    client = env.execute_async()
    _wait_for(lambda: len(CollectSink.results("all-states")) == 40)
    sp = client.stop_with_savepoint()

    class Peek(KeyedProcessFunction):
        def open(self, ctx):
            self.extra = ctx.get_state(ValueStateDescriptor("extra"))

        def process_element(self, value, ctx):
            yield (ctx.get_current_key(), self.extra.value())

    CollectSink.clear("peek")
    env2 = _env(tmp_path, parallelism=3)
    env2.restore_from(sp, allow_non_restored_state=True)  # the old source's offset is not wanted
    (env2.from_collection([f"k-{i}" for i in range(4)]).uid("probe")
     .map(lambda k: (k, 0)).uid("to-keyed")
     .key_by(lambda t: t[0], key_type=Types.STRING).process(Peek()).uid("keyed")
     .add_sink(CollectSink("peek")).uid("sink"))
    env2.execute()
    got = dict(CollectSink.results("peek"))
    last = {f"k-{k}": max(v for v in range(40) if v % 4 == k) for k in range(4)}
    assert got == {k: {"last": v, "point": Point(v % 3)} for k, v in last.items()}


# ---------------------------------------------------------------------------------------------
# savepoints, rescaling


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"{ctx.get_current_key()},{value},{c}"


def _counting_job(env, out_dir, n, p_src=None, p_keyed=None, rate=None, idle_at_end=False):
    src = env.from_sequence(0, n - 1, records_per_second=rate, splits=12, idle_at_end=idle_at_end).uid("src")
    if p_src:
        src.set_parallelism(p_src)
    keyed = src.key_by(lambda i: f"k-{i % 13}", key_type=Types.STRING).process(CountPerKey()).uid("count")
    if p_keyed:
        keyed.set_parallelism(p_keyed)
    keyed.add_sink(TwoPhaseCommitFileSink(str(out_dir))).uid("sink")


@pytest.mark.parametrize("before,after", [(2, 3), (3, 1)])
def test_stop_with_savepoint_and_rescale(tmp_path, before, after):
    n = 3000
    out = tmp_path / "out"
    env = _env(tmp_path, parallelism=before, interval=30)
    _counting_job(env, out, n, rate=1000, idle_at_end=True)
    client = env.execute_async("phase 1")
    _wait_for(lambda: len(read_committed(str(out))) > 0)  # a checkpoint committed some output
    sp = client.stop_with_savepoint(str(tmp_path / "sp"))
    res1 = client.get_job_execution_result()
    assert res1.status == JobStatus.FINISHED and res1.savepoint_path == sp
    first = read_committed(str(out))
    assert 0 < len(first) < n, "stop the job mid-way"
    op = Savepoint.open(sp).operator("count")
    assert op.parallelism == before

    env2 = _env(tmp_path, parallelism=after, interval=30)
    env2.restore_from(sp)
    _counting_job(env2, out, n)
    res2 = env2.execute("phase 2")
    assert res2.status == JobStatus.FINISHED and res2.restored_from == sp
    lines = read_committed(str(out))
    values = Counter(int(line.split(",")[1]) for line in lines)
    assert values == Counter(range(n)), "every number exactly once"
    final = {}
    for line in lines:
        k, _, c = line.split(",")
        final[k] = max(final.get(k, 0), int(c))
    assert final == Counter(f"k-{i % 13}" for i in range(n)), "counts continued across the rescale"


def test_restore_errors(tmp_path):
    CollectSink.clear("all-states")
    env = _env(tmp_path, parallelism=1, interval=10_000)
    _all_states_job(env, n=10, keys=2)
    client = env.execute_async()
    _wait_for(lambda: len(CollectSink.results("all-states")) == 10)
    sp = client.stop_with_savepoint()

    # an operator with state the new job does not have
    env2 = _env(tmp_path)
    env2.restore_from(sp)
    env2.from_collection([1]).uid("src").add_sink(CollectSink("x")).uid("sink")
    with pytest.raises(JobExecutionException, match="Cannot map checkpoint/savepoint state for operator") as e:
        env2.execute()
    assert isinstance(e.value.__cause__, RestoreError)

    # allowed explicitly: runs
    env3 = _env(tmp_path)
    env3.restore_from(sp, allow_non_restored_state=True)
    env3.from_collection([1]).uid("src").add_sink(CollectSink("x")).uid("sink")
    assert env3.execute().status == JobStatus.FINISHED

    # a state declared with an incompatible type: no restart loop, a clear error
    class Wrong(KeyedProcessFunction):
        def open(self, ctx):
            ctx.get_state(ValueStateDescriptor("total", Types.STRING))

        def process_element(self, value, ctx):
            return None

    env4 = _env(tmp_path)
    env4.restore_from(sp, allow_non_restored_state=True)
    (env4.from_collection(["k-0"]).uid("src").map(lambda k: (k, 0)).uid("to-keyed")
     .key_by(lambda t: t[0]).process(Wrong()).uid("keyed"))
    with pytest.raises(JobExecutionException, match="incompatible") as e:
        env4.execute()
    assert isinstance(e.value.__cause__, StateMigrationError)


# ---------------------------------------------------------------------------------------------
# event time


class Sessionize(KeyedProcessFunction):
    """Sums values per key and emits the sum when the event-time timer (ts + 100) fires."""

    def open(self, ctx):
        self.sum = ctx.get_state(ValueStateDescriptor("sum", Types.LONG))

    def process_element(self, value, ctx):
        self.sum.update((self.sum.value() or 0) + value[1])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
        return None

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == "event"
        s = self.sum.value()
        if s is not None:
            self.sum.clear()
            yield (ctx.get_current_key(), timestamp, s)


def test_event_time_timers(tmp_path):
    CollectSink.clear("timers")
    env = _env(tmp_path, parallelism=2, interval=50)
    data = [(f"k-{i % 3}", i, i * 10) for i in range(60)]  # (key, value, event time)
    (env.from_collection(data).uid("src")
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(0)
                                       .with_timestamp_assigner(lambda e, ts: e[2]).with_emit_every(5)).uid("wm")
     .key_by(lambda e: e[0], key_type=Types.STRING)
     .process(Sessionize()).uid("session")
     .add_sink(CollectSink("timers")).uid("sink"))
    env.execute()
    out = CollectSink.results("timers")
    # every timer fired (the end of input is the final watermark), and each value is summed once
    assert sum(s for _, _, s in out) == sum(range(60))
    assert all(ts >= 100 for _, ts, _ in out)
    per_key = Counter()
    for k, _, s in out:
        per_key[k] += s
    assert per_key == Counter({f"k-{k}": sum(i for i in range(60) if i % 3 == k) for k in range(3)})


def test_timers_survive_a_savepoint(tmp_path):
    """Timers registered before a savepoint fire after the restore (rescaled 2 -> 1)."""
    env = _env(tmp_path, parallelism=2, interval=10_000)
    data = [(f"k-{i % 4}", 1, 1000 + i) for i in range(20)]
    CollectSink.clear("t1")
    (env.from_collection(data, idle_at_end=True).uid("src")
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps()
                                       .with_timestamp_assigner(lambda e, ts: e[2])).uid("wm")
     .key_by(lambda e: e[0], key_type=Types.STRING).process(Sessionize()).uid("session")
     .add_sink(CollectSink("t1")).uid("sink"))
    client = env.execute_async()
    time.sleep(0.3)
    sp = client.stop_with_savepoint()  # no drain: the timers stay registered
    before = CollectSink.results("t1")
    timers = list(TB.timers_table(Savepoint.open(sp).operator("session")).rows())
    assert timers, "timers pending in the savepoint"

    CollectSink.clear("t2")
    env2 = _env(tmp_path, parallelism=1)
    env2.restore_from(sp)
    (env2.from_collection([], ).uid("src")
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps()).uid("wm")
     .key_by(lambda e: e[0], key_type=Types.STRING).process(Sessionize()).uid("session")
     .add_sink(CollectSink("t2")).uid("sink"))
    env2.execute()
    after = CollectSink.results("t2")
    assert sum(s for *_, s in before) + sum(s for *_, s in after) == 20
    first_timer = {}
    for k, ts, *_ in timers:
        first_timer[k] = min(ts, first_timer.get(k, ts))
    assert {k: ts for k, ts, _ in after} == first_timer


# ---------------------------------------------------------------------------------------------
# the coordinator: declines, expiry, tolerable failures, pauses


class Idle(SourceFunction):
    def run(self, ctx):
        while True:
            yield IDLE


class FlakySnapshot(MapFunction, CheckpointedFunction, CheckpointListener):
    """Declines checkpoint 1 (snapshot_state raises); blocks in checkpoint 2 until released."""

    release = threading.Event()
    log: list = []

    def initialize_state(self, context):
        pass

    def snapshot_state(self, context):
        FlakySnapshot.log.append(("snapshot", context.get_checkpoint_id(), context.get_checkpoint_timestamp()))
        if context.get_checkpoint_id() == 1:
            raise ValueError("cannot snapshot now")
        if context.get_checkpoint_id() == 2:
            FlakySnapshot.release.wait(10)

    def notify_checkpoint_complete(self, checkpoint_id):
        FlakySnapshot.log.append(("complete", checkpoint_id))

    def notify_checkpoint_aborted(self, checkpoint_id):
        FlakySnapshot.log.append(("aborted", checkpoint_id))

    def map(self, value):
        return value


def test_decline_expire_and_complete_with_a_manual_clock(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fstate.runtime")
    FlakySnapshot.release.clear()
    FlakySnapshot.log = []
    clock = ManualClock(1_000_000)
    env = StreamExecutionEnvironment(clock=clock)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_checkpoint_timeout(1000)
    cc.set_tolerable_checkpoint_failure_number(5)
    env.add_source(Idle()).uid("src").map(FlakySnapshot()).uid("flaky").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    stats = client.get_checkpoint_stats()
    time.sleep(0.1)
    assert stats.triggered == 0  # time does not move by itself
    clock.advance(100)
    _wait_for(lambda: stats.failed)
    assert stats.failed == [(1, "CHECKPOINT_DECLINED")]
    _wait_for(lambda: ("aborted", 1) in FlakySnapshot.log)

    clock.advance(100)  # checkpoint 2 hangs in the snapshot
    _wait_for(lambda: stats.triggered == 2)
    time.sleep(0.05)
    clock.advance(999)
    time.sleep(0.05)
    assert stats.failed == [(1, "CHECKPOINT_DECLINED")]
    assert stats.triggered == 2  # checkpoint 3 is due, but one may be in flight at a time
    clock.advance(1)
    _wait_for(lambda: len(stats.failed) == 2)
    assert stats.failed[1] == (2, "CHECKPOINT_EXPIRED")
    FlakySnapshot.release.set()

    clock.advance(100)
    _wait_for(lambda: stats.completed)
    assert stats.completed[0] == 3
    _wait_for(lambda: ("complete", 3) in FlakySnapshot.log)
    client.cancel()
    # snapshots carry the checkpoint's id and its trigger time (the manual clock's)
    assert [e for e in FlakySnapshot.log if e[0] == "snapshot"][:3] == [
        ("snapshot", 1, 1_000_100), ("snapshot", 2, 1_000_200), ("snapshot", 3, 1_001_200)]
    text = caplog.text
    assert "Decline checkpoint 1 by task" in text and CheckpointFailureReason.CHECKPOINT_DECLINED.message in text
    assert "Checkpoint 2 of job" in text and "expired before completing" in text
    assert "Completed checkpoint 3" in text


def test_min_pause_and_max_concurrent(tmp_path):
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(clock=clock)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_min_pause_between_checkpoints(500)
    env.add_source(Idle()).uid("src").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    stats = client.get_checkpoint_stats()
    clock.advance(100)
    _wait_for(lambda: stats.completed == [1])
    for _ in range(4):  # 400 ms after the completion: the min pause holds the next one back
        clock.advance(100)
        time.sleep(0.03)
    assert stats.triggered == 1
    clock.advance(100)
    _wait_for(lambda: stats.completed == [1, 2])
    client.cancel()


def test_tolerable_failures_exceeded_fails_over(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fstate.runtime")

    class AlwaysDecline(MapFunction, CheckpointedFunction):
        def initialize_state(self, context):
            pass

        def snapshot_state(self, context):
            raise RuntimeError("no")

        def map(self, value):
            return value

    env = StreamExecutionEnvironment()
    env.enable_checkpointing(20)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    env.add_source(Idle()).uid("src").map(AlwaysDecline()).uid("m").add_sink(CollectSink("x")).uid("sink")
    with pytest.raises(JobExecutionException, match="Exceeded checkpoint tolerable failure threshold") as e:
        env.execute(timeout=30)
    assert e.value.result.restarts == 1 and e.value.result.status == JobStatus.FAILED
    assert "Recovery is suppressed by FixedDelayRestartBackoffTimeStrategy" in caplog.text


def test_failure_and_recovery_are_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="fstate.runtime")
    out = tmp_path / "out"
    env = _env(tmp_path, parallelism=2, interval=20)
    env.set_failure_injector(FailureInjector(fail_at=[FailAt("record", "KeyedProcess", nth=700)]))
    _counting_job(env, out, 2000, p_src=1, rate=6000)
    res = env.execute("logged")
    assert res.restarts == 1 and res.status == JobStatus.FINISHED
    assert Counter(int(x.split(",")[1]) for x in read_committed(str(out))) == Counter(range(2000))
    text = caplog.text
    assert "switched from RUNNING to FAILED" in text and "injected failure #1" in text
    assert "switched from state RUNNING to RESTARTING" in text
    assert "Restarting job" in text and "Restoring job" in text


def test_two_phase_commit_without_checkpointing_commits_at_the_end(tmp_path):
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.from_sequence(1, 500).map(lambda x: x * 2).add_sink(TwoPhaseCommitFileSink(str(tmp_path / "o")))
    res = env.execute()
    assert res.status == JobStatus.FINISHED and res.completed_checkpoint_ids == []
    assert sorted(int(x) for x in read_committed(str(tmp_path / "o"))) == [x * 2 for x in range(1, 501)]
    assert not os.listdir(tmp_path / "o" / ".inprogress")


def test_file_source_resumes_from_its_offsets(tmp_path):
    files = []
    for f in range(3):
        p = tmp_path / f"in-{f}.txt"
        p.write_text("".join(f"{f}-{i}\n" for i in range(400)))
        files.append(str(p))
    out = tmp_path / "out"
    env = _env(tmp_path, parallelism=2, interval=20)
    env.set_failure_injector(FailureInjector(fail_at=[FailAt("record", "File Source", nth=150)]))
    env.read_text_file(files).uid("files").add_sink(TwoPhaseCommitFileSink(str(out))).uid("sink")
    res = env.execute()
    assert res.restarts == 1
    assert Counter(read_committed(str(out))) == Counter(f"{f}-{i}" for f in range(3) for i in range(400))


# ---------------------------------------------------------------------------------------------
# operator state redistribution, other stream shapes, processing time

RESTORED: dict = {}
_RESTORED_LOCK = threading.Lock()


class Parts(MapFunction, CheckpointedFunction):
    """List state (split on rescale), union state (to all) and broadcast state (copied)."""

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        self.parts = store.get_list_state(ListStateDescriptor("parts", Types.STRING))
        self.marks = store.get_union_list_state(ListStateDescriptor("marks", Types.LONG))
        self.rules = store.get_broadcast_state(MapStateDescriptor("rules", Types.STRING, Types.LONG))
        rc = self.get_runtime_context()
        i = rc.get_index_of_this_subtask()
        if context.is_restored():
            with _RESTORED_LOCK:
                RESTORED[i] = (self.parts.get(), sorted(self.marks.get()), dict(self.rules.items()))
        else:
            self.parts.update([f"p{i}-{j}" for j in range(i + 2)])
            self.marks.update([100 + i])
            self.rules.put_all({"a": 1, "b": 2})

    def snapshot_state(self, context):
        pass

    def map(self, value):
        return value


@pytest.mark.parametrize("before,after", [(3, 2), (2, 5)])
def test_operator_state_redistribution(tmp_path, before, after):
    env = _env(tmp_path, parallelism=before)
    env.from_collection([], idle_at_end=True).uid("src").map(Parts()).uid("parts").add_sink(
        CollectSink("x")).uid("sink")
    client = env.execute_async()
    time.sleep(0.1)
    sp = client.stop_with_savepoint()
    all_parts = [f"p{i}-{j}" for i in range(before) for j in range(i + 2)]
    assert sorted(v for _, _, v in TB.list_state_table(Savepoint.open(sp).operator("parts"), "parts").rows()) == \
        sorted(all_parts)

    RESTORED.clear()
    env2 = _env(tmp_path, parallelism=after)
    env2.restore_from(sp)
    env2.from_collection([]).uid("src").map(Parts()).uid("parts").add_sink(CollectSink("x")).uid("sink")
    env2.execute()
    assert sorted(RESTORED) == list(range(after))
    got = [RESTORED[i][0] for i in range(after)]
    assert sorted(x for g in got for x in g) == sorted(all_parts), "each element exactly once"
    assert max(map(len, got)) - min(map(len, got)) <= 1, "evenly split"
    assert [x for g in got for x in g] == all_parts, "contiguous, in subtask order"
    for i in range(after):
        assert RESTORED[i][1] == [100 + j for j in range(before)], "union: everything everywhere"
        assert RESTORED[i][2] == {"a": 1, "b": 2}, "broadcast: a copy everywhere"


def test_keyed_map_reduce_union_and_broadcast(tmp_path):
    class Dedup(MapFunction):
        def open(self, ctx):
            self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.BOOLEAN))

        def map(self, value):
            first = self.seen.value() is None
            self.seen.update(True)
            return (value, first)

    CollectSink.clear("dedup")
    CollectSink.clear("sums")
    CollectSink.clear("bcast")
    env = _env(tmp_path, parallelism=2, interval=20)
    a = env.from_collection([1, 2, 3, 1]).uid("a")
    b = env.from_collection([3, 4, 4]).uid("b")
    both = a.union(b).uid("both")
    both.key_by(lambda x: x).map(Dedup()).uid("dedup").add_sink(CollectSink("dedup")).uid("s1")
    both.map(lambda x: (x % 2, x)).uid("pairs").key_by(lambda t: t[0]).reduce(
        lambda s, t: (s[0], s[1] + t[1]), Types.TUPLE(Types.LONG, Types.LONG)).uid("sum").add_sink(
        CollectSink("sums")).uid("s2")
    a.broadcast().map(lambda x: x * 10).uid("times-ten").set_parallelism(3).add_sink(
        CollectSink("bcast")).uid("s3")
    env.execute()
    dedup = CollectSink.results("dedup")
    assert Counter(v for v, first in dedup if first) == Counter({1: 1, 2: 1, 3: 1, 4: 1})
    assert len(dedup) == 7
    finals = {}
    for parity, total in CollectSink.results("sums"):
        finals[parity] = max(finals.get(parity, 0), total)
    assert finals == {0: 2 + 4 + 4, 1: 1 + 3 + 1 + 3}
    assert Counter(CollectSink.results("bcast")) == Counter({10: 6, 20: 3, 30: 3})


def test_processing_time_timers_with_a_manual_clock(tmp_path):
    class Remind(KeyedProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_processing_time_timer(ctx.current_processing_time() + 1000)
            return None

        def on_timer(self, timestamp, ctx):
            yield (ctx.get_current_key(), timestamp, ctx.time_domain())

    CollectSink.clear("remind")
    clock = ManualClock(5000)
    env = StreamExecutionEnvironment(clock=clock)
    env.from_collection(["a", "b"], idle_at_end=True).uid("src").key_by(lambda x: x).process(Remind()).uid(
        "remind").add_sink(CollectSink("remind")).uid("sink")
    client = env.execute_async()
    time.sleep(0.2)
    assert CollectSink.results("remind") == []
    clock.advance(1000)
    _wait_for(lambda: len(CollectSink.results("remind")) == 2)
    assert sorted(CollectSink.results("remind")) == [("a", 6000, "processing"), ("b", 6000, "processing")]
    client.cancel()


def test_requests_to_a_finished_job_fail_fast(tmp_path):
    env = _env(tmp_path, parallelism=1)
    env.from_collection([1, 2]).uid("src").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    client.get_job_execution_result(timeout=30)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="not running"):
        client.trigger_savepoint(timeout=30)
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------------------------------------
# barrier alignment, driven item by item


class _RecordingOp:
    def __init__(self):
        from types import SimpleNamespace

        self.node = SimpleNamespace(id=0, operator_id=b"\x01" * 16)
        self.seen: list = []
        self.snapshots: list = []

    def initialize_state(self, restore, restored_checkpoint_id):
        pass

    def open(self):
        pass

    def process_record(self, ts, value):
        self.seen.append(value)

    def process_watermark(self, wm):
        pass

    def on_idle(self):
        pass

    def snapshot(self, checkpoint_id, timestamp, location):
        from fstate.savepoint.metadata import SubtaskState

        self.snapshots.append((checkpoint_id, list(self.seen)))
        return SubtaskState()

    def notify_checkpoint_complete(self, checkpoint_id):
        pass

    def notify_checkpoint_aborted(self, checkpoint_id):
        pass

    def finish(self):
        pass

    def close(self):
        pass


def _drive(aligned: bool, items: list) -> tuple[_RecordingOp, list]:
    from types import SimpleNamespace

    from fstate.runtime.task import InputGate, Task

    acks = []
    coordinator = SimpleNamespace(acknowledge=lambda cid, att, key, states: acks.append(cid),
                                  decline=lambda cid, att, key, reason, cause, name: acks.append((cid, reason)))
    master = SimpleNamespace(aligned=aligned, injector=None, coordinator=coordinator, clock=ManualClock(0),
                             post=lambda ev: None, source_batch=64)
    attempt = SimpleNamespace(number=0, cancelled=threading.Event())
    chain = SimpleNamespace(id=0, name="op", parallelism=1, is_source=False)
    gate = InputGate(2, 64)
    for item in items:
        gate.q.put(item)
    op = _RecordingOp()
    Task(master, attempt, chain, 0, [op], gate, [], {}, None)._run()
    return op, acks


def test_exactly_once_aligns_barriers_at_least_once_does_not():
    from fstate.runtime.task import BARRIER, DATA, EOS, CheckpointBarrier

    b1 = CheckpointBarrier(1, 0, "/nowhere")
    b2 = CheckpointBarrier(2, 0, "/nowhere")
    items = [(0, BARRIER, b1), (0, DATA, [(None, "x1")]), (1, DATA, [(None, "y1")]), (1, BARRIER, b1),
             (0, DATA, [(None, "x2")]), (0, BARRIER, b2), (1, BARRIER, b2), (0, EOS, None), (1, EOS, None)]
    op, acks = _drive(True, items)
    # x1 came after the barrier on channel 0: held back until the barrier came on channel 1 too
    assert op.snapshots == [(1, ["y1"]), (2, ["y1", "x1", "x2"])]
    assert op.seen == ["y1", "x1", "x2"] and acks == [1, 2]

    op, acks = _drive(False, items)
    # at-least-once: nothing waits; the snapshot includes x1, which a restore replays again
    assert op.snapshots == [(1, ["x1", "y1"]), (2, ["x1", "y1", "x2"])]
    assert acks == [1, 2]


def test_a_finished_channel_does_not_block_alignment():
    from fstate.runtime.task import BARRIER, DATA, EOS, CheckpointBarrier

    b1 = CheckpointBarrier(1, 0, "/nowhere")
    op, acks = _drive(True, [(1, EOS, None), (0, DATA, [(None, "a")]), (0, BARRIER, b1), (0, DATA, [(None, "b")]),
                             (0, EOS, None)])
    assert op.snapshots == [(1, ["a"])] and op.seen == ["a", "b"] and acks == [1]


class BlockFirst(MapFunction, CheckpointedFunction):
    release = threading.Event()

    def initialize_state(self, context):
        pass

    def snapshot_state(self, context):
        if context.get_checkpoint_id() == 1:
            BlockFirst.release.wait(10)

    def map(self, value):
        return value


@pytest.mark.parametrize("max_concurrent", [1, 2])
def test_max_concurrent_checkpoints(tmp_path, max_concurrent):
    BlockFirst.release.clear()
    clock = ManualClock(0)
    env = StreamExecutionEnvironment(clock=clock)
    env.enable_checkpointing(100)
    cc = env.get_checkpoint_config()
    cc.set_checkpoint_storage(str(tmp_path / "chk"))
    cc.set_max_concurrent_checkpoints(max_concurrent)
    env.add_source(Idle()).uid("src").map(BlockFirst()).uid("block").add_sink(CollectSink("x")).uid("sink")
    client = env.execute_async()
    stats = client.get_checkpoint_stats()
    for _ in range(4):  # checkpoint 1 hangs in its snapshot meanwhile
        clock.advance(100)
        time.sleep(0.03)
    assert stats.triggered == max_concurrent and stats.completed == []
    BlockFirst.release.set()
    _wait_for(lambda: len(stats.completed) >= max_concurrent)  # (the next may follow at once: it is due)
    assert stats.completed[:max_concurrent] == list(range(1, max_concurrent + 1)) and stats.failed == []
    client.cancel()
