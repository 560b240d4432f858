"""Event time (watermarks, event-time timers, timers in a savepoint) and processing-time timers."""

from __future__ import annotations

from collections import Counter

from fstate.readers import tables
from fstate.runtime import (CollectSink, KeyedProcessFunction, ManualClock, StreamExecutionEnvironment, Types,
                            ValueStateDescriptor, WatermarkStrategy)
from fstate.savepoint.loader import Savepoint
from tests.runtime.jobs import Progress, make_env, wait_for


class Sessionize(KeyedProcessFunction):
    """Sums values per key and emits the sum when the event-time timer (ts + 100) fires; counts
    the elements it processed in ``processed`` when given one."""

    def __init__(self, processed: Progress | None = None):
        self.processed = processed

    def open(self, ctx):
        self.sum = ctx.get_state(ValueStateDescriptor("sum", Types.LONG))

    def process_element(self, value, ctx):
        self.sum.update((self.sum.value() or 0) + value[1])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
        if self.processed is not None:
            self.processed.add()
        return None

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == "event"
        s = self.sum.value()
        if s is not None:
            self.sum.clear()
            yield (ctx.get_current_key(), timestamp, s)


def test_event_time_timers(tmp_path):
    CollectSink.clear("timers")
    env = make_env(tmp_path, parallelism=2, interval=50)
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
    env = make_env(tmp_path, parallelism=2, interval=10_000)
    data = [(f"k-{i % 4}", 1, 1000 + i) for i in range(20)]
    processed = Progress()
    CollectSink.clear("t1")
    (env.from_collection(data, idle_at_end=True).uid("src")
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps()
                                       .with_timestamp_assigner(lambda e, ts: e[2])).uid("wm")
     .key_by(lambda e: e[0], key_type=Types.STRING).process(Sessionize(processed)).uid("session")
     .add_sink(CollectSink("t1")).uid("sink"))
    client = env.execute_async()
    processed.wait_for(20)  # every element registered its timer (so the job is running, too)
    sp = client.stop_with_savepoint()  # no drain: the timers stay registered
    before = CollectSink.results("t1")
    timers = list(tables.timers_table(Savepoint.open(sp).operator("session")).rows())
    assert timers, "timers pending in the savepoint"

    CollectSink.clear("t2")
    env2 = make_env(tmp_path, parallelism=1)
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


def test_processing_time_timers_with_a_manual_clock(tmp_path):
    processed = Progress()

    class Remind(KeyedProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_processing_time_timer(ctx.current_processing_time() + 1000)
            processed.add()
            return None

        def on_timer(self, timestamp, ctx):
            yield (ctx.get_current_key(), timestamp, ctx.time_domain())

    CollectSink.clear("remind")
    clock = ManualClock(5000)
    env = StreamExecutionEnvironment(clock=clock)
    env.from_collection(["a", "b"], idle_at_end=True).uid("src").key_by(lambda x: x).process(Remind()).uid(
        "remind").add_sink(CollectSink("remind")).uid("sink")
    client = env.execute_async()
    processed.wait_for(2)  # both timers registered at 5000 + 1000, before the clock moves
    assert CollectSink.results("remind") == []
    clock.advance(1000)
    wait_for(lambda: len(CollectSink.results("remind")) == 2)
    assert sorted(CollectSink.results("remind")) == [("a", 6000, "processing"), ("b", 6000, "processing")]
    client.cancel()
