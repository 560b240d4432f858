"""State TTL in the runtime: each of Flink's semantics on the keyed backend with a manual clock
(expiry, update types, visibility, per-element list and per-entry map TTL, reducing and
aggregating state, incremental and full-snapshot cleanup, TTL migration on restore), then jobs:
``fstate read`` of a TTL checkpoint equals the runtime's view, a restore keeps every value's last
access (and a later clock expires it), and exactly-once output under injected crashes."""

from __future__ import annotations

import datetime
import json
from collections import Counter

import pytest

from fstate.runtime import (AggregatingStateDescriptor, CollectSink, FailAt, FailureInjector, JobStatus,
                            KeyedProcessFunction, ListStateDescriptor, ManualClock, MapStateDescriptor,
                            ReducingStateDescriptor, RestartStrategies, StateTtlConfig, StreamExecutionEnvironment,
                            SystemClock, TwoPhaseCommitFileSink, Types, ValueStateDescriptor, read_committed)
from fstate.runtime.checkpointing.restore import KeyedRestore
from fstate.runtime.state.keyed_backend import KeyedStateBackend
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint import keyed
from fstate.readers.tables import keyed_table
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import TtlValue
from fstate.runtime.state.ttl import with_timestamped_states
from tests.runtime.jobs import Avg, wait_for

TTL = 100
Visibility = StateTtlConfig.StateVisibility
Update = StateTtlConfig.UpdateType


def backend(clock, restored=None):
    return KeyedStateBackend("test", Types.STRING, 128, (0, 127), restored, clock=clock)


def ttl(desc, builder=None):
    desc.enable_time_to_live((builder or StateTtlConfig.new_builder(TTL)).build())
    return desc


# ---------------------------------------------------------------------------------------------
# configuration


def test_builder_defaults_and_options():
    c = StateTtlConfig.new_builder(datetime.timedelta(seconds=3)).build()
    assert c.ttl_ms == 3000 and c.get_ttl() == datetime.timedelta(seconds=3)
    assert c.get_update_type() is Update.OnCreateAndWrite
    assert c.get_state_visibility() is Visibility.NeverReturnExpired
    assert c.is_enabled() and not c.get_cleanup_strategies().is_full_snapshot()
    inc = c.get_cleanup_strategies().get_incremental_cleanup_strategy()  # Flink's heap default: 5, not per record
    assert (inc.get_cleanup_size(), inc.run_cleanup_for_every_record()) == (5, False)
    c = (StateTtlConfig.new_builder(10).set_update_type(Update.OnReadAndWrite)
         .set_state_visibility(Visibility.ReturnExpiredIfNotCleanedUp).cleanup_full_snapshot()
         .disable_cleanup_in_background().build())
    assert c.get_cleanup_strategies().is_full_snapshot()
    assert c.get_cleanup_strategies().get_incremental_cleanup_strategy() is None
    assert not StateTtlConfig.DISABLED.is_enabled()
    with pytest.raises(ValueError, match="positive"):
        StateTtlConfig.new_builder(0).build()
    with pytest.raises(TypeError):
        ValueStateDescriptor("v", Types.LONG).enable_time_to_live("1 s")
    d = ValueStateDescriptor("v", Types.LONG)
    d.enable_time_to_live(StateTtlConfig.DISABLED)  # as Flink: a disabled config means no TTL
    assert not d.ttl_enabled and d.meta_value_type() == Types.LONG


# ---------------------------------------------------------------------------------------------
# semantics


def test_value_expires_after_ttl_and_is_invisible():
    clock = ManualClock(1000)
    b = backend(clock)
    v = b.get_state(ttl(ValueStateDescriptor("v", Types.LONG)))
    b.set_current_key("a")
    v.update(7)
    clock.advance(TTL - 1)
    assert v.value() == 7  # OnCreateAndWrite: the read does not renew
    clock.advance(1)  # last access + ttl <= now
    assert v.value() is None
    assert "a" not in b.tables["v"].data.get(b.current_kg, {})  # removed on read


def test_update_types():
    clock = ManualClock(1000)
    b = backend(clock)
    on_write = b.get_state(ttl(ValueStateDescriptor("w", Types.LONG)))
    on_read = b.get_state(ttl(ValueStateDescriptor("r", Types.LONG),
                              StateTtlConfig.new_builder(TTL).update_ttl_on_read_and_write()))
    b.set_current_key("a")
    on_write.update(1)
    on_read.update(1)
    for _ in range(3):  # reads every 60 ms keep the OnReadAndWrite value alive
        clock.advance(60)
        on_read.value()
    assert on_write.value() is None and on_read.value() == 1
    on_write.update(2)  # a write renews
    clock.advance(TTL - 1)
    assert on_write.value() == 2


def test_return_expired_if_not_cleaned_up():
    clock = ManualClock(1000)
    b = backend(clock)
    cfg = StateTtlConfig.new_builder(TTL).return_expired_if_not_cleaned_up().disable_cleanup_in_background()
    v = b.get_state(ttl(ValueStateDescriptor("v", Types.LONG), cfg))
    m = b.get_state(ttl(MapStateDescriptor("m", Types.STRING, Types.LONG), cfg))
    b.set_current_key("a")
    v.update(3)
    m.put("x", 1)
    clock.advance(TTL)
    assert v.value() == 3 and m.get("x") == 1  # expired, returned once: the read cleans it up
    assert v.value() is None and m.get("x") is None


def test_list_elements_and_map_entries_expire_one_by_one():
    clock = ManualClock(1000)
    b = backend(clock)
    lst = b.get_state(ttl(ListStateDescriptor("l", Types.STRING)))
    m = b.get_state(ttl(MapStateDescriptor("m", Types.STRING, Types.LONG)))
    b.set_current_key("a")
    lst.add("early")
    m.put_all({"x": 1, "y": 2})
    clock.advance(60)
    lst.add_all(["late1", "late2"])
    m.put("y", 20)  # renewed
    m.put("z", 3)
    clock.advance(40)
    assert lst.get() == ["late1", "late2"]
    assert m.items() == [("y", 20), ("z", 3)] and not m.contains("x") and m.keys() == ["y", "z"]
    clock.advance(60)
    assert lst.get() == [] and m.is_empty()
    assert "a" not in b.tables["l"].data[b.current_kg] and "a" not in b.tables["m"].data[b.current_kg]
    lst.update(["u"])
    assert lst.get() == ["u"]


def test_reducing_and_aggregating_restart_after_expiry():
    clock = ManualClock(1000)
    b = backend(clock)
    r = b.get_state(ttl(ReducingStateDescriptor("r", lambda x, y: x + y, Types.LONG)))
    a = b.get_state(ttl(AggregatingStateDescriptor("a", Avg(), Types.TUPLE(Types.LONG, Types.LONG))))
    b.set_current_key("a")
    r.add(1)
    r.add(2)
    a.add(4)
    a.add(6)
    assert r.get() == 3 and a.get() == (10, 2)
    clock.advance(TTL)
    assert r.get() is None and a.get() is None
    r.add(10)
    a.add(1)
    assert r.get() == 10 and a.get() == (1, 1)  # the expired value took no part


def _snapshot_values(b, tmp_path):
    """What a snapshot of the backend holds: state -> {key: decoded value (TtlValue kept)}."""
    handle = b.snapshot(str(tmp_path))
    buf = handle.delegate.data
    meta = with_timestamped_states(keyed.read_keyed_proxy(buf, "test"))
    ids = [sid for sid, _ in meta.value_states]
    out = {meta.states[sid].name: {} for sid in ids}
    for _kg, key, _ns, vals in KeyedState.of_stream(buf, handle, meta, 128).rows(ids):
        for sid, v in zip(ids, vals):
            if v is not None:
                out[meta.states[sid].name][key] = v
    return out


def test_full_snapshot_cleanup_leaves_expired_values_out(tmp_path):
    clock = ManualClock(1000)
    b = backend(clock)
    full = StateTtlConfig.new_builder(TTL).cleanup_full_snapshot().disable_cleanup_in_background()
    v = b.get_state(ttl(ValueStateDescriptor("v", Types.LONG), full))
    lst = b.get_state(ttl(ListStateDescriptor("l", Types.LONG), full))
    m = b.get_state(ttl(MapStateDescriptor("m", Types.STRING, Types.LONG), full))
    kept = b.get_state(ttl(ValueStateDescriptor("kept", Types.LONG),
                           StateTtlConfig.new_builder(TTL).disable_cleanup_in_background()))
    for k in ("old", "new"):
        b.set_current_key(k)
        v.update(1)
        kept.update(1)
        lst.add(1)
        m.put("a", 1)
        if k == "old":
            clock.advance(60)
    b.set_current_key("new")
    m.put("b", 2)
    lst.add(2)
    clock.advance(50)  # "old" (t=1000) expired, "new" (t=1060) not
    snap = _snapshot_values(b, tmp_path)
    assert snap["v"] == {"new": TtlValue(1, 1060)}
    assert snap["kept"] == {"old": TtlValue(1, 1000), "new": TtlValue(1, 1060)}  # no cleanup: written as is
    assert snap["l"] == {"new": [TtlValue(1, 1060), TtlValue(2, 1060)]}
    assert snap["m"] == {"new": {"a": TtlValue(1, 1060), "b": TtlValue(2, 1060)}}
    b.set_current_key("old")
    assert kept.value() is None  # the live state still expires them on read


def test_incremental_cleanup_on_access_and_per_record():
    clock = ManualClock(1000)
    b = backend(clock)
    v = b.get_state(ttl(ValueStateDescriptor("v", Types.LONG),
                        StateTtlConfig.new_builder(TTL).cleanup_incrementally(3, False)))
    w = b.get_state(ttl(ValueStateDescriptor("w", Types.LONG),
                        StateTtlConfig.new_builder(TTL).cleanup_incrementally(2, True)))
    keys = [f"k{i}" for i in range(6)]
    for k in keys:
        b.set_current_key(k)
        v.update(1)
        w.update(1)
    clock.advance(TTL)

    def stored(name):
        return sum(len(m) for m in b.tables[name].data.values())

    assert stored("v") == 6 and stored("w") == 6
    b.set_current_key("other")  # a record: w checks 2 entries
    assert stored("w") == 4 and stored("v") == 6
    v.value()  # an access of v checks 3 entries of v
    assert stored("v") == 3
    v.value()
    assert stored("v") == 0


def test_restore_keeps_timestamps_and_migrates_ttl_both_ways(tmp_path):
    clock = ManualClock(1000)
    b = backend(clock)
    with_ttl = b.get_state(ttl(ValueStateDescriptor("with", Types.LONG)))
    plain = b.get_state(ValueStateDescriptor("plain", Types.LONG))
    lst = b.get_state(ListStateDescriptor("lst", Types.STRING))
    b.set_current_key("a")
    with_ttl.update(1)
    plain.update(2)
    lst.add("x")
    snap = _snapshot_values(b, tmp_path)
    assert snap["with"] == {"a": TtlValue(1, 1000)} and snap["plain"] == {"a": 2}

    def restored():
        handle = b.snapshot(str(tmp_path))
        meta = with_timestamped_states(keyed.read_keyed_proxy(handle.delegate.data, "test"))
        r = KeyedRestore(meta.key_type)
        ids = [sid for sid, _ in meta.value_states]
        for sid in ids:
            r.states[meta.states[sid].name] = (meta.states[sid], {})
        for kg, key, _ns, vals in KeyedState.of_stream(handle.delegate.data, handle, meta, 128).rows(ids):
            for sid, val in zip(ids, vals):
                if val is not None:
                    r.states[meta.states[sid].name][1].setdefault(kg, {})[key] = val
        return r

    clock.set(1050)
    b2 = backend(clock, restored())
    same = b2.get_state(ttl(ValueStateDescriptor("with", Types.LONG)))
    gained = b2.get_state(ttl(ValueStateDescriptor("plain", Types.LONG)))  # no TTL before: accessed now
    gained_list = b2.get_state(ttl(ListStateDescriptor("lst", Types.STRING)))
    b2.set_current_key("a")
    assert b2.tables["with"].data[b2.current_kg]["a"] == TtlValue(1, 1000)  # the restored last access
    assert b2.tables["plain"].data[b2.current_kg]["a"] == TtlValue(2, 1050)
    clock.set(1100)
    assert same.value() is None and gained.value() == 2 and gained_list.get() == ["x"]
    # and back: TTL state restored into descriptors without TTL keeps the user values for good
    b3 = backend(clock, restored())
    lost = b3.get_state(ValueStateDescriptor("plain", Types.LONG))
    b3.set_current_key("a")
    clock.set(10_000)
    assert lost.value() == 2 and b3.get_state(ListStateDescriptor("lst", Types.STRING)).get() == ["x"]
    assert b3.tables["plain"].meta.value_type == Types.LONG


# ---------------------------------------------------------------------------------------------
# jobs


class OffsetClock(SystemClock):
    def __init__(self, offset_ms: int):
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return super().now_ms() + self.offset_ms


DAY = 24 * 3600 * 1000


def _ttl_counts(desc):
    desc.enable_time_to_live(StateTtlConfig.new_builder(DAY).cleanup_full_snapshot().build())
    return desc


class TtlView(KeyedProcessFunction):
    """TTL value, map and list state (one day); emits the key's view after each record (negative
    values only read)."""

    def open(self, ctx):
        self.last = ctx.get_state(ttl(ValueStateDescriptor("last", Types.LONG), StateTtlConfig.new_builder(DAY)))
        self.counts = ctx.get_map_state(_ttl_counts(MapStateDescriptor("counts", Types.STRING, Types.LONG)))
        self.events = ctx.get_list_state(ttl(ListStateDescriptor("events", Types.STRING),
                                             StateTtlConfig.new_builder(DAY)))

    def process_element(self, value, ctx):
        key = ctx.get_current_key()
        if value >= 0:
            self.last.update(value)
            bucket = f"b{value % 3}"
            self.counts.put(bucket, (self.counts.get(bucket) or 0) + 1)
            self.events.add(f"e{value}")
        yield (key, self.last.value(), dict(self.counts.items()), self.events.get())


def _ttl_job(tmp_path, name, values, clock=None, restore=None):
    env = StreamExecutionEnvironment(clock=clock)
    env.set_parallelism(2)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / f"{name}-chk"))
    env.set_default_savepoint_directory(str(tmp_path / f"{name}-sp"))
    if restore:  # probes (negative values) from a collection; the sequence source's state stays behind
        env.restore_from(restore, allow_non_restored_state=True)
        source = env.from_collection(values).uid("probe")
    else:
        source = env.from_sequence(0, values - 1, idle_at_end=True).uid("src")
    CollectSink.clear(name)
    (source
     .key_by(lambda i: f"k-{abs(i) % 5}", key_type=Types.STRING)
     .process(TtlView()).uid("ttl")
     .add_sink(CollectSink(name)).uid("sink"))
    return env


def test_fstate_reads_a_ttl_savepoint_as_the_runtime_sees_it(tmp_path):
    from typer.testing import CliRunner

    from fstate.cli.app import app

    env = _ttl_job(tmp_path, "ttl-view", 40)
    env.enable_checkpointing(10_000)
    client = env.execute_async("ttl")
    wait_for(lambda: len(CollectSink.results("ttl-view")) == 40)
    sp = client.stop_with_savepoint()
    view = {}
    for key, last, counts, events in CollectSink.results("ttl-view"):
        view[key] = (last, counts, events)  # the last output of each key is its final view
    op = Savepoint.open(sp).operator("ttl")
    table = keyed_table(op)
    rows = {r[0]: dict(zip(table.column_names[1:], r[1:])) for r in table.rows()}
    assert {k: (r["last"], r["counts"], r["events"]) for k, r in rows.items()} == view
    r = CliRunner().invoke(app, ["read", sp, "--uid", "ttl", "--json", "-n", "100"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert {x["key"]: (x["last"], x["counts"], x["events"]) for x in lines} == view
    # a restore continues with the same values; a clock two days later sees every one expired
    later = _ttl_job(tmp_path, "ttl-later", [-1, -2, -3, -4, -5], restore=sp)
    assert later.execute("ttl restored").status == JobStatus.FINISHED
    assert sorted(CollectSink.results("ttl-later")) == sorted((k, v[0], v[1], v[2]) for k, v in view.items())
    expired = _ttl_job(tmp_path, "ttl-expired", [-1, -2, -3, -4, -5], clock=OffsetClock(2 * DAY), restore=sp)
    assert expired.execute("ttl expired").status == JobStatus.FINISHED
    assert sorted(CollectSink.results("ttl-expired")) == [(f"k-{i}", None, {}, []) for i in range(5)]


class CountWithTtl(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ttl(ValueStateDescriptor("count", Types.LONG),
                                       StateTtlConfig.new_builder(DAY).cleanup_full_snapshot()))
        self.seen = ctx.get_map_state(_ttl_counts(MapStateDescriptor("seen", Types.LONG, Types.BOOLEAN)))

    def process_element(self, value, ctx):
        """One line per record, the key's count and distinct values when the input ends (output
        that does not depend on how the source subtasks interleave)."""
        self.count.update((self.count.value() or 0) + 1)
        self.seen.put(value, True)
        ctx.timer_service().register_event_time_timer(1 << 62)
        yield f"r,{ctx.get_current_key()},{value}"

    def on_timer(self, timestamp, ctx):
        yield f"c,{ctx.get_current_key()},{self.count.value()},{len(self.seen.keys())}"


def _crash_job(tmp_path, name, injector=None):
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.enable_checkpointing(15)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / f"{name}-chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(50, 0))
    env.set_failure_injector(injector)
    (env.from_sequence(0, 999, splits=4, records_per_second=4000).uid("src")
     .key_by(lambda i: f"k-{i % 7}", key_type=Types.STRING)
     .process(CountWithTtl()).uid("count")
     .add_sink(TwoPhaseCommitFileSink(str(tmp_path / name))).uid("sink"))
    return env


def test_ttl_job_keeps_exactly_once_under_crashes(tmp_path):
    res = _crash_job(tmp_path, "ref").execute("reference")
    assert res.status == JobStatus.FINISHED and res.restarts == 0
    reference = Counter(read_committed(str(tmp_path / "ref")))
    assert len(reference) == 1007
    injector = FailureInjector(max_failures=5, fail_at=[
        FailAt("snapshot", "KeyedProcess", nth=2, attempt=0), FailAt("record", "KeyedProcess", nth=200, attempt=1),
        FailAt("notify", "KeyedProcess", nth=2, attempt=2), FailAt("finalize", "coordinator", nth=2, attempt=3)])
    res = _crash_job(tmp_path, "eo", injector).execute("exactly-once")
    assert res.status == JobStatus.FINISHED and res.restarts >= 3, injector.injected
    assert Counter(read_committed(str(tmp_path / "eo"))) == reference
