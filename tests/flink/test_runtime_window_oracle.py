"""Window operators between the runtime and real Apache Flink 2.3, both ways, with the window
operators of ``KeyedStateJob`` (uids ``window-reduce`` and ``window-agg``: Long keys, elements
``Tuple2<Long, Long>``, tumbling event-time windows of 1000 ms, reduce and aggregate):

* a savepoint the runtime takes mid-window is restored by KeyedStateJob (verify mode: no more
  input, its final watermark fires every restored window); the windows the runtime fired before
  the savepoint plus those Flink fires after it are the windows of an uninterrupted runtime run
  over the same input;
* the runtime restores KeyedStateJob's own savepoint (open windows, rescaled 3 → 2) and fires
  exactly the windows Flink fires when it restores that savepoint.
"""

from __future__ import annotations

import pytest

from fstate.runtime import (AggregateFunction, CollectSink, ProcessWindowFunction, StreamExecutionEnvironment,
                            TumblingEventTimeWindows, Types, WatermarkStrategy)
from tests.flink import harness
from tests.flink.restore import verify_restore
from tests.runtime.jobs import Progress, from_paused_sequence

pytestmark = pytest.mark.flink

VERSION = "2.3.0"
PAIR = Types.TUPLE(Types.LONG, Types.LONG)
KEYS = 50  # KeyedStateJob.WINDOW_KEYS
N = 3000
PAUSE = 1700


class SumReduce:
    def reduce(self, a, b):
        return (a[0], a[1] + b[1])


class WindowAvg(AggregateFunction):  # KeyedStateJob.WindowAvg: (sum, count)
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class Fired(ProcessWindowFunction):
    """(uid, key, window start, window end, the window's value)."""

    def __init__(self, uid: str):
        self.uid = uid

    def process(self, key, context, elements):
        for value in elements:
            yield (self.uid, key, context.window().start, context.window().end, tuple(value))


def window_operators(keyed):
    windows = keyed.window(TumblingEventTimeWindows.of(1000))
    windows.reduce(SumReduce(), Fired("window-reduce"), value_type=PAIR).uid("window-reduce") \
        .add_sink(CollectSink("flink-windows")).uid("sink-window-reduce")
    keyed.window(TumblingEventTimeWindows.of(1000)).aggregate(WindowAvg(), Fired("window-agg"), accumulator_type=PAIR) \
        .uid("window-agg").add_sink(CollectSink("flink-windows")).uid("sink-window-agg")


def runtime_job(pause: int | None, progress: Progress | None) -> StreamExecutionEnvironment:
    """Numbers i → (i % 50, i) at timestamp 3 i, in order (one subtask up to the windows): the
    first PAUSE of 0..N-1 then a pause, or (uninterrupted) 0..PAUSE-1 and the end of input."""
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.set_max_parallelism(128)
    source = from_paused_sequence(env, 0, N - 1, pause) if pause else env.from_sequence(0, PAUSE - 1)
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v * 3)
                .with_emit_every(1))

    def pair(i):
        if progress is not None:
            progress.add()
        return (i % KEYS, i)

    keyed = (source.set_parallelism(1).uid("src").assign_timestamps_and_watermarks(strategy).set_parallelism(1)
             .map(pair, PAIR).set_parallelism(1).uid("to-window")
             .key_by(lambda t: t[0], key_type=Types.LONG))
    window_operators(keyed)
    return env


def flink_fired(dump: dict) -> list:
    """The windows KeyedStateJob fired after its restore, as the runtime's Fired emits them."""
    out = []
    for op in dump["operators"]:
        if op["uid"] in ("window-reduce", "window-agg"):
            for entry in op["keyed_state"]:
                assert entry["state"] == "window-contents"
                for (key, start, end), value in entry["entries"]:
                    out.append((op["uid"], key, start, end, tuple(value)))
    return sorted(out)


def test_flink_restores_runtime_windows_mid_window(tmp_path):
    harness.require_flink(VERSION)
    CollectSink.clear("flink-windows")
    runtime_job(None, None).execute("uninterrupted")
    reference = sorted(CollectSink.results("flink-windows"))

    CollectSink.clear("flink-windows")
    progress = Progress()
    env = runtime_job(PAUSE, progress)
    env.set_default_savepoint_directory(str(tmp_path / "sp"))
    client = env.execute_async("to flink")
    progress.wait_for(PAUSE)
    savepoint = client.trigger_savepoint()
    client.cancel()
    before = sorted(CollectSink.results("flink-windows"))
    # windows up to [4000, 5000) fired (watermark 3 × 1699 - 1), [5000, 6000) is open
    assert {w[2] for w in before} == {0, 1000, 2000, 3000, 4000}

    # cached by the savepoint's bytes: the runtime's savepoint of the pause is the same every run
    res = verify_restore("KeyedStateJob", VERSION, savepoint)
    assert res.dump["kind"] == "restored"
    after = flink_fired(res.dump)
    assert {w[2] for w in after} == {5000}
    assert sorted(before + after) == reference


def test_runtime_restores_flink_windows(tmp_path):
    harness.require_flink(VERSION)
    snapshot = harness.generate("KeyedStateJob", VERSION, "hashmap", "savepoint")
    flink = verify_restore("KeyedStateJob", VERSION, snapshot.snapshot_dir)  # cached per savepoint
    expected = flink_fired(flink.dump)
    assert expected

    CollectSink.clear("flink-windows")
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)  # Flink ran the windows with 3
    env.restore_from(str(snapshot.snapshot_dir), allow_non_restored_state=True)  # the other operators stay behind
    keyed = (env.from_collection([]).uid("no-input").map(lambda i: (i % KEYS, i), PAIR).uid("to-window")
             .key_by(lambda t: t[0], key_type=Types.LONG))
    window_operators(keyed)
    env.execute("from flink")  # the end of input fires every restored window
    assert sorted(CollectSink.results("flink-windows")) == expected
