"""The runtime against real Apache Flink 2.3, both ways:

* a savepoint the runtime took (String key, Long and String value state, event timers, operator
  list state, uids) restores in a real Flink job (``restore.restore_and_dump``, at another
  parallelism), which dumps exactly the state the runtime held;
* the runtime restores a real Flink savepoint (``KeyedStateJob``: value, list, map, reducing and
  aggregating state, event and processing timers, list state ``offsets``) at another parallelism,
  its functions read exactly what Flink's dump lists, and the savepoint it then takes holds it all.
"""

from __future__ import annotations

import time

import pytest

from fstate.runtime import (IDLE, AggregateFunction, AggregatingStateDescriptor, CheckpointedFunction, CollectSink,
                            DiscardingSink, KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor,
                            ReducingStateDescriptor, SourceFunction, StreamExecutionEnvironment, Types,
                            ValueStateDescriptor)
from fstate.savepoint.loader import Savepoint
from tests.flink import harness
from tests.oracle_compare import _sort_key, assert_matches_dump, expected_state, norm, norm_dump_map
from tests.runtime.jobs import Progress

pytestmark = pytest.mark.flink

VERSION = "2.3.0"


def _wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


class OffsetSource(SourceFunction, CheckpointedFunction):
    """Emits 0..n-1 (or, when ``probe``, the restored offsets are kept and probe values are
    emitted); its position is list state ``offsets`` (Long), like KeyedStateJob's source."""

    def __init__(self, n: int, probe: bool = False):
        self.n = n
        self.probe = probe
        self.pos = 0

    def initialize_state(self, context):
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("offsets", Types.LONG))
        self.restored = self.state.get()
        if self.restored and not self.probe:
            self.pos = self.restored[0]

    def snapshot_state(self, context):
        self.state.update(self.restored if self.probe else [self.pos])

    def run(self, ctx):
        while self.pos < self.n:
            v = self.pos
            self.pos += 1
            yield -1 - v if self.probe else v
        while True:
            yield IDLE


# ---------------------------------------------------------------------------------------------
# runtime savepoint -> real Flink


class Totals(KeyedProcessFunction):
    def __init__(self, processed: Progress):
        self.processed = processed  # shared by the parallel copies

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG))
        self.name = ctx.get_state(ValueStateDescriptor("name", Types.STRING))

    def process_element(self, value, ctx):
        _, v = value
        self.total.update((self.total.value() or 0) + v)
        self.name.update(f"n-{v}-é中")
        ctx.timer_service().register_event_time_timer(1_000_000 + v % 7)
        self.processed.add()
        return None


def test_flink_restores_a_runtime_savepoint(tmp_path):
    harness.require_flink(VERSION)
    from tests.flink.restore import restore_and_dump

    n, keys = 600, 40
    processed = Progress()
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    (env.add_source(OffsetSource(n), "src", parallelism=1).uid("src")
     .map(lambda i: (f"k-{i % keys}", i)).uid("to-keyed")
     .key_by(lambda t: t[0], key_type=Types.STRING)
     .process(Totals(processed)).uid("keyed")
     .add_sink(DiscardingSink()).uid("sink"))
    client = env.execute_async("to flink")
    _wait_for(lambda: len(client.completed_checkpoints()) >= 2 and processed.count >= 1)  # the source moved
    sp = client.stop_with_savepoint(str(tmp_path / "savepoints"))
    # the runtime's own view of what it held (the source is stopped where it was)
    offsets = [v for _, _, v in Savepoint.open(sp).operator("src").list_state("offsets")]
    assert len(offsets) == 1 and 0 < offsets[0] <= n
    seen = range(offsets[0])
    expected_total = {}
    expected_name = {}
    expected_timers = set()
    for v in seen:
        k = f"k-{v % keys}"
        expected_total[k] = expected_total.get(k, 0) + v
        expected_name[k] = f"n-{v}-é中"
        expected_timers.add((k, 1_000_000 + v % 7))

    config = {"savepoint": sp, "max_parallelism": 128, "operators": [
        {"uid": "keyed", "kind": "keyed", "parallelism": 3, "key_type": "STRING", "timers": True,
         "states": [{"name": "total", "kind": "VALUE", "type": "LONG"},
                    {"name": "name", "kind": "VALUE", "type": "STRING"}]},
        {"uid": "src", "kind": "operator", "parallelism": 1,
         "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"}]}]}
    dump = restore_and_dump(config, VERSION, "hashmap")
    assert dump["restored"] is True and not dump.get("warnings"), dump.get("warnings")
    ops = {o["uid"]: o for o in dump["operators"]}
    keyed = {e["state"]: dict((k, v) for k, v in e["entries"]) for e in ops["keyed"]["keyed_state"]}
    assert keyed["total"] == expected_total
    assert keyed["name"] == expected_name
    assert {(t["key"], t["timestamp"]) for t in ops["keyed"]["timers"]} == expected_timers
    assert all(t["kind"] == "event" for t in ops["keyed"]["timers"])
    assert [e["values"] for e in ops["src"]["list_state"]] == [offsets]
    # and fstate reads the runtime's savepoint exactly as Flink restored it (parallelism aside)
    for o in dump["operators"]:
        o["parallelism"] = Savepoint.open(sp).operator(o["uid"]).parallelism
    assert assert_matches_dump(sp, dump) == 2


# ---------------------------------------------------------------------------------------------
# real Flink savepoint -> runtime


class AvgAgg(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class Probe(KeyedProcessFunction):
    """KeyedStateJob's states, declared with the types Flink wrote; a probe reads them all."""

    def open(self, ctx):
        self.total = ctx.get_state(ValueStateDescriptor("total", Types.LONG))
        self.events = ctx.get_list_state(ListStateDescriptor("events", Types.STRING))
        self.counts = ctx.get_map_state(MapStateDescriptor("counts", Types.STRING, Types.LONG))
        self.sum = ctx.get_reducing_state(ReducingStateDescriptor("sum", lambda a, b: a + b, Types.LONG))
        self.avg = ctx.get_aggregating_state(
            AggregatingStateDescriptor("avg", AvgAgg(), Types.TUPLE(Types.LONG, Types.LONG)))

    def process_element(self, value, ctx):
        yield (ctx.get_current_key(), self.total.value(), self.events.get(), dict(self.counts.items()),
               self.sum.get(), self.avg.get())


def test_runtime_restores_a_flink_savepoint(tmp_path):
    harness.require_flink(VERSION)
    res = harness.generate("KeyedStateJob", VERSION, "hashmap", "savepoint")
    flink_ops = {o["uid"]: o for o in res.dump["operators"]}
    assert flink_ops["keyed"]["parallelism"] == 3

    CollectSink.clear("flink-probe")
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)  # Flink ran the keyed operator with 3
    env.restore_from(str(res.snapshot_dir), allow_non_restored_state=True)  # the window operators stay behind
    (env.add_source(OffsetSource(1000, probe=True), "src", parallelism=1).uid("src")
     .map(lambda i: (f"k-{-1 - i}", i)).uid("to-keyed")
     .key_by(lambda t: t[0], key_type=Types.STRING)
     .process(Probe()).uid("keyed")
     .add_sink(CollectSink("flink-probe")).uid("sink-keyed"))
    client = env.execute_async("from flink")
    _wait_for(lambda: len(CollectSink.results("flink-probe")) == 1000)
    sp = client.stop_with_savepoint(str(tmp_path / "savepoints"))

    # what the functions read through the state API is what Flink's dump lists
    got: dict[str, list] = {s: [] for s in ("total", "events", "counts", "sum", "avg")}
    for key, total, events, counts, sm, avg in CollectSink.results("flink-probe"):
        for name, v in (("total", total), ("events", events or None), ("counts", counts or None), ("sum", sm),
                        ("avg", avg)):
            if v is not None:
                got[name].append([key, norm_dump_map(v.items()) if isinstance(v, dict) else norm(v)])
    want = expected_state(flink_ops["keyed"])["keyed_state"]
    for name in got:
        assert sorted(got[name], key=_sort_key) == want[name], name

    # the runtime's savepoint holds Flink's state (timers of both kinds included) and the offsets
    dump = dict(res.dump)
    dump["operators"] = [dict(flink_ops["src"]), dict(flink_ops["keyed"], parallelism=2)]
    assert assert_matches_dump(sp, dump) == 2
