"""State TTL between the runtime and real Apache Flink 2.3, one Java run each way:

* a runtime savepoint with a TTL ValueState and a TTL MapState (one day) restores in Flink
  (``RestoreJob`` with the same TTL config): Flink reads every value the runtime wrote, and the one
  key the runtime wrote two days earlier (a manual clock) is expired for Flink too; a third TTL
  state restored into a descriptor without TTL shows every value (Flink 2.2+ migrates TTL state);
* the runtime restores a Flink savepoint (``TtlStateJob``: TTL value, map and list state) and its
  functions read exactly what Flink wrote.
"""

from __future__ import annotations

import time

import pytest

from fstate.runtime import (IDLE, CollectSink, KeyedProcessFunction, ListStateDescriptor, ManualClock,
                            MapStateDescriptor, SourceFunction, StateTtlConfig, StreamExecutionEnvironment, Types,
                            ValueStateDescriptor)
from tests.flink import harness
from tests.runtime.jobs import SharedEvent, wait_for

pytestmark = pytest.mark.flink

VERSION = "2.3.0"
DAY = 24 * 3600 * 1000
N, KEYS = 60, 7


def _ttl(desc, background_cleanup=True):
    builder = StateTtlConfig.new_builder(DAY)
    desc.enable_time_to_live((builder if background_cleanup else builder.disable_cleanup_in_background()).build())
    return desc


class OldThenNew(SourceFunction):
    """Emits -1 (key "old"), waits for ``go``, then emits 0..n-1."""

    def __init__(self, n: int, go: SharedEvent):
        self.n = n
        self.go = go

    def run(self, ctx):
        yield -1
        while not self.go.is_set():
            yield IDLE
        yield from range(self.n)
        while True:
            yield IDLE


class Writer(KeyedProcessFunction):
    """TTL value and map state; no background cleanup, so the expired "old" reaches the savepoint
    (the cleanup strategies are not part of the serializers: Flink restores with its defaults)."""

    def open(self, ctx):
        self.last = ctx.get_state(_ttl(ValueStateDescriptor("last", Types.LONG), background_cleanup=False))
        self.counts = ctx.get_map_state(_ttl(MapStateDescriptor("counts", Types.STRING, Types.LONG),
                                             background_cleanup=False))
        self.first = ctx.get_state(_ttl(ValueStateDescriptor("first", Types.LONG), background_cleanup=False))

    def process_element(self, value, ctx):
        if self.first.value() is None:
            self.first.update(value)
        self.last.update(value)
        bucket = f"b-{value % 3}"
        self.counts.put(bucket, (self.counts.get(bucket) or 0) + 1)
        yield value


def _key(v: int) -> str:
    return "old" if v < 0 else f"k-{v % KEYS}"


def test_flink_restores_runtime_ttl_state(tmp_path):
    harness.require_flink(VERSION)
    from tests.flink.restore import restore_and_dump

    clock = ManualClock(int(time.time() * 1000) - 2 * DAY)  # the first write is two days old
    go = SharedEvent()
    CollectSink.clear("ttl-writer")
    env = StreamExecutionEnvironment(clock=clock)
    env.set_parallelism(2)
    env.enable_checkpointing(3_600_000)  # a manual clock: only the savepoint below
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    (env.add_source(OldThenNew(N, go), "src", parallelism=1).uid("src")
     .key_by(_key, key_type=Types.STRING)
     .process(Writer()).uid("ttl")
     .add_sink(CollectSink("ttl-writer")).uid("sink"))
    client = env.execute_async("ttl to flink")
    wait_for(lambda: len(CollectSink.results("ttl-writer")) == 1)
    clock.set(int(time.time() * 1000))  # then real time: Flink's clock
    go.set()
    wait_for(lambda: len(CollectSink.results("ttl-writer")) == N + 1)
    sp = client.stop_with_savepoint(str(tmp_path / "savepoints"))

    last, counts, first = {}, {}, {"old": -1}
    for v in range(N):
        last[_key(v)] = v
        first.setdefault(_key(v), v)
        bucket = counts.setdefault(_key(v), {})
        bucket[f"b-{v % 3}"] = bucket.get(f"b-{v % 3}", 0) + 1
    config = {"savepoint": sp, "max_parallelism": 128, "ignore_unclaimed_state": True, "operators": [
        {"uid": "ttl", "kind": "keyed", "parallelism": 3, "key_type": "STRING",
         "states": [{"name": "last", "kind": "VALUE", "type": "LONG", "ttl_ms": DAY},
                    {"name": "counts", "kind": "MAP", "type": "MAP<STRING, LONG>", "ttl_ms": DAY},
                    {"name": "first", "kind": "VALUE", "type": "LONG"}]}]}  # TTL dropped: Flink 2.2+ migrates
    dump = restore_and_dump(config, VERSION, "hashmap")
    assert dump["restored"] is True and not dump.get("warnings"), dump.get("warnings")
    keyed = {e["state"]: dict((k, v) for k, v in e["entries"]) for e in dump["operators"][0]["keyed_state"]}
    # "old" is in the savepoint with its two-day-old last access, and expired for Flink (read as
    # null, or already cleaned up before the dump reached it)
    assert keyed["last"].pop("old", None) is None and keyed["counts"].pop("old", []) == []
    assert keyed["last"] == last
    assert keyed["counts"] == {k: sorted([b, c] for b, c in m.items()) for k, m in counts.items()}
    assert keyed["first"] == first  # without TTL nothing expires, "old" included
    stamps = _last_access(sp)
    assert set(stamps) == set(last) | {"old"}
    assert all(stamps["old"] + DAY < t for k, t in stamps.items() if k != "old")


def _last_access(sp: str) -> dict:
    """key -> last access of state "last" in the savepoint, read with the format core."""
    from fstate.runtime.state.ttl import with_timestamped_states
    from fstate.savepoint import keyed
    from fstate.savepoint.keyed_state import KeyedState
    from fstate.savepoint.loader import Savepoint

    op = Savepoint.open(sp).operator("ttl")
    out = {}
    for _, h in op.key_group_handles():
        buf = op.savepoint.read_stream(h.delegate)
        meta = with_timestamped_states(keyed.read_keyed_proxy(buf, "test"))
        sid = meta.state_id("last")
        for _kg, key, _ns, (value,) in KeyedState.of_stream(buf, h, meta, op.max_parallelism).rows([sid]):
            if value is not None:
                out[key] = value.last_access_timestamp
    return out


class Probe(KeyedProcessFunction):
    def open(self, ctx):
        self.last = ctx.get_state(_ttl(ValueStateDescriptor("last", Types.LONG)))
        self.counts = ctx.get_map_state(_ttl(MapStateDescriptor("counts", Types.STRING, Types.LONG)))
        self.events = ctx.get_list_state(_ttl(ListStateDescriptor("events", Types.STRING)))

    def process_element(self, value, ctx):
        yield (ctx.get_current_key(), self.last.value(), sorted([k, v] for k, v in self.counts.items()),
               self.events.get())


def test_runtime_restores_flink_ttl_state(tmp_path):
    harness.require_flink(VERSION)
    res = harness.generate("TtlStateJob", VERSION, "hashmap", "savepoint")
    flink = {e["state"]: dict((k, v) for k, v in e["entries"]) for e in res.operator("ttl")["keyed_state"]}
    assert len(flink["last"]) == 10

    CollectSink.clear("ttl-probe")
    env = StreamExecutionEnvironment()
    env.set_parallelism(3)  # Flink ran it with 2
    env.restore_from(str(res.snapshot_dir), allow_non_restored_state=True)  # Flink's source offsets stay behind
    (env.from_collection([f"k-{i}" for i in range(10)]).uid("probe")
     .key_by(lambda k: k, key_type=Types.STRING)
     .process(Probe()).uid("ttl")
     .add_sink(CollectSink("ttl-probe")).uid("probe-sink"))
    assert env.execute("from flink").status.name == "FINISHED"
    got = {key: (last, counts, events) for key, last, counts, events in CollectSink.results("ttl-probe")}
    assert got == {k: (flink["last"][k], flink["counts"][k], flink["events"][k]) for k in flink["last"]}
