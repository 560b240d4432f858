"""Windows: tumbling, sliding and session windows with reduce / aggregate / process / apply,
triggers, allowed lateness, processing time; their state in Flink's layout read by fstate, and
restored (also rescaled) by the runtime."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from fstate.readers import tables
from fstate.runtime import (AggregateFunction, CollectSink, CountTrigger, EventTimeSessionWindows, FailAt, FailureInjector,
                            JobStatus, ManualClock, OutputTag, ProcessingTimeSessionWindows, RestartStrategies, TwoPhaseCommitFileSink, read_committed,
                            ProcessingTimeTrigger, ProcessWindowFunction, PurgingTrigger, SlidingEventTimeWindows, StreamExecutionEnvironment,
                            TumblingEventTimeWindows, TumblingProcessingTimeWindows, Types,
                            ValueStateDescriptor, WatermarkStrategy, WindowFunction)
from fstate.savepoint.loader import Savepoint
from tests.runtime.jobs import Progress, from_paused_sequence, make_env, wait_for

KEYS = 3
PAIR = Types.TUPLE(Types.STRING, Types.LONG)


def keyed_pairs(env, values):
    """(key, value) pairs of the numbers ``values`` (timestamp: 10 × the number), keyed by the key."""
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v * 10)
                .with_emit_every(1))
    return (env.from_collection(list(values)).assign_timestamps_and_watermarks(strategy)
            .map(lambda i: (f"k{i % KEYS}", i))
            .key_by(lambda v: v[0], key_type=Types.STRING))


def run(job, parallelism=2, clock=None) -> list:
    env = StreamExecutionEnvironment(clock=clock)
    env.set_parallelism(parallelism)
    CollectSink.clear("win")
    job(env).add_sink(CollectSink("win"))
    env.execute("windows")
    return sorted(CollectSink.results("win"))


def model(values, windows_of, combine):
    """key → window → combined values (a plain-Python window model)."""
    out = defaultdict(lambda: defaultdict(list))
    for i in values:
        for w in windows_of(i * 10):
            out[f"k{i % KEYS}"][w].append(i)
    return {k: {w: combine(vs) for w, vs in ws.items()} for k, ws in out.items()}


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class Describe(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield (key, w.start, w.end, sorted(v if isinstance(v, int) else v[1] for v in elements))


class Tag(WindowFunction):
    def apply(self, key, window, inputs):
        for avg in inputs:
            yield (key, window.start, avg)


def test_tumbling_reduce():
    values = range(300)
    got = run(lambda env: keyed_pairs(env, values).window(TumblingEventTimeWindows.of(250))
              .reduce(lambda a, b: (a[0], a[1] + b[1]), value_type=PAIR))
    exp = model(range(300), lambda t: [t // 250], sum)
    assert got == sorted((k, s) for k, ws in exp.items() for s in ws.values())


def test_sliding_aggregate_with_window_function():
    values = range(200)
    got = run(lambda env: keyed_pairs(env, values).window(SlidingEventTimeWindows.of(300, 100))
              .aggregate(Average(), Tag(), accumulator_type=Types.TUPLE(Types.LONG, Types.LONG)))
    exp = model(range(200), lambda t: [s for s in range(t - t % 100 - 200, t + 1, 100) if s > t - 300],
                lambda vs: sum(vs) / len(vs))
    assert got == sorted((k, s, a) for k, ws in exp.items() for s, a in ws.items())


def test_session_windows_process():
    # sessions of 10 numbers (timestamps 0..90, 200..290, ...) with a gap of 50 ms: numbers i with
    # i % 20 < 10, so every key has the numbers of a session that are its own
    numbers = [i for i in range(200) if i % 20 < 10]
    got = run(lambda env: keyed_pairs(env, numbers).window(EventTimeSessionWindows.with_gap(50))
              .process(Describe(), value_type=PAIR))
    exp = []
    for k in range(KEYS):
        mine = [i for i in numbers if i % KEYS == k]
        sessions, cur = [], [mine[0]]
        for i in mine[1:]:
            if i * 10 < cur[-1] * 10 + 50:
                cur.append(i)
            else:
                sessions.append(cur)
                cur = [i]
        sessions.append(cur)
        exp += [(f"k{k}", s[0] * 10, s[-1] * 10 + 50, s) for s in sessions]
    assert got == sorted(exp)


def test_count_trigger_purging_and_apply():
    values = range(90)
    got = run(lambda env: keyed_pairs(env, values).window(TumblingEventTimeWindows.of(300))
              .trigger(PurgingTrigger.of(CountTrigger.of(4)))
              .apply(lambda key, window, inputs: [(key, window.start, sorted(v for _, v in inputs))],
                     value_type=PAIR), parallelism=1)  # count windows depend on the order of arrival
    exp = []
    for k in range(KEYS):
        for start in range(0, 900, 300):
            mine = [i for i in range(90) if i % KEYS == k and start <= i * 10 < start + 300]
            exp += [(f"k{k}", start, mine[j:j + 4]) for j in range(0, len(mine) - 3, 4)]
    assert got == sorted(exp)


def test_count_trigger_on_merging_sessions():
    # [0, 25) and [40, 65) are two sessions of one element each until 20 bridges them: the merged
    # session holds the counts of all three (CountTrigger's state merges) and fires
    def job(env):
        strategy = (WatermarkStrategy.for_bounded_out_of_orderness(100).with_timestamp_assigner(lambda v, ts: v)
                    .with_emit_every(1))
        return (env.from_collection([0, 40, 20, 200]).assign_timestamps_and_watermarks(strategy)
                .key_by(lambda v: "k", key_type=Types.STRING)
                .window(EventTimeSessionWindows.with_gap(25)).trigger(CountTrigger.of(3))
                .process(Describe(), value_type=Types.LONG))

    assert run(job, parallelism=1) == [("k", 0, 65, [0, 20, 40])]


def test_allowed_lateness_fires_again_and_drops_later():
    # one key; watermark = max timestamp - 1 after every element
    stamps = [10, 20, 120, 30, 250, 40, 60]  # 30: late within 150 ms; 40, 60: beyond it (window [0,100) gone)

    def job(env):
        strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v)
                    .with_emit_every(1))
        return (env.from_collection(stamps).assign_timestamps_and_watermarks(strategy)
                .key_by(lambda v: "k", key_type=Types.STRING)
                .window(TumblingEventTimeWindows.of(100)).allowed_lateness(150)
                .process(Describe(), value_type=Types.LONG))

    class Describe(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield (context.window().start, sorted(elements))

    got = run(job, parallelism=1)
    assert got == sorted([(0, [10, 20]), (0, [10, 20, 30]), (100, [120]), (200, [250])])


def test_late_elements_go_to_the_side_output():
    stamps = [10, 20, 120, 30, 250, 40, 60]  # 40, 60: beyond the allowed lateness of window [0, 100)
    late = OutputTag("late", Types.LONG)

    class Describe(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield (context.window().start, sorted(elements))

    env = StreamExecutionEnvironment()
    env.set_parallelism(1)
    CollectSink.clear("win")
    CollectSink.clear("late")
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v)
                .with_emit_every(1))
    windows = (env.from_collection(stamps).assign_timestamps_and_watermarks(strategy)
               .key_by(lambda v: "k", key_type=Types.STRING)
               .window(TumblingEventTimeWindows.of(100)).allowed_lateness(150).side_output_late_data(late)
               .process(Describe(), value_type=Types.LONG))
    windows.add_sink(CollectSink("win"))
    windows.get_side_output(late).add_sink(CollectSink("late"))
    env.execute("late data")
    assert sorted(CollectSink.results("win")) == sorted([(0, [10, 20]), (0, [10, 20, 30]), (100, [120]),
                                                         (200, [250])])
    assert sorted(CollectSink.results("late")) == [40, 60]


def test_per_window_state_of_a_process_window_function():
    # the window [0, 100) fires twice (a late element within the allowed lateness): the firing
    # count is per-window state, the total of all firings global state; clear() drops the former
    stamps = [10, 20, 120, 30, 250, 40]
    cleared = Progress()

    class Firings(ProcessWindowFunction):
        def process(self, key, context, elements):
            fired = context.window_state().get_state(ValueStateDescriptor("fired", Types.LONG))
            fired.update((fired.value() or 0) + 1)
            total = context.global_state().get_state(ValueStateDescriptor("total", Types.LONG))
            total.update((total.value() or 0) + 1)
            yield (context.window().start, fired.value(), total.value())

        def clear(self, context):
            context.window_state().get_state(ValueStateDescriptor("fired", Types.LONG)).clear()
            cleared.add()

    def job(env):
        strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v)
                    .with_emit_every(1))
        return (env.from_collection(stamps).assign_timestamps_and_watermarks(strategy)
                .key_by(lambda v: "k", key_type=Types.STRING)
                .window(TumblingEventTimeWindows.of(100)).allowed_lateness(150)
                .process(Firings(), value_type=Types.LONG))

    assert run(job, parallelism=1) == [(0, 1, 1), (0, 2, 2), (100, 1, 3), (200, 1, 4)]
    assert cleared.count == 3


class CountingProcessingTimeTrigger(ProcessingTimeTrigger):
    def __init__(self, progress: Progress):
        self.progress = progress

    def on_element(self, element, timestamp, window, ctx):
        result = super().on_element(element, timestamp, window, ctx)
        self.progress.add()
        return result


@pytest.mark.parametrize("assigner", [TumblingProcessingTimeWindows.of(1_000), ProcessingTimeSessionWindows.with_gap(1_000)],
                         ids=["tumbling", "session"])
def test_processing_time_windows(tmp_path, assigner):
    clock = ManualClock(1_000)
    progress = Progress()
    CollectSink.clear("win")
    env = make_env(tmp_path, parallelism=2, clock=clock)
    (from_paused_sequence(env, 0, 9, 5).set_parallelism(1)
     .key_by(lambda v: "k", key_type=Types.STRING)
     .window(assigner).trigger(CountingProcessingTimeTrigger(progress))
     .process(Describe(), value_type=Types.LONG)
     .add_sink(CollectSink("win")))
    client = env.execute_async("processing time")
    progress.wait_for(5)  # five elements in the window [1000, 2000) (sessions: five times that window, merged)
    assert CollectSink.results("win") == []
    clock.advance(1_000)  # its timer (1999) is due
    wait_for(lambda: CollectSink.results("win"))
    client.cancel()
    assert CollectSink.results("win") == [("k", 1_000, 2_000, [0, 1, 2, 3, 4])]


# ---------------------------------------------------------------------------------------------
# snapshots: Flink's layout read by fstate, and restored by the runtime

N = 600
PAUSE = 250


def windowed_job(env, progress: Progress | None, session: bool, pause: int | None = None, restore=None):
    if restore:
        env.restore_from(restore)
    source = (from_paused_sequence(env, 0, N - 1, pause).set_parallelism(1) if pause
              else env.from_sequence(0, N - 1).set_parallelism(1))
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v * 10)
                .with_emit_every(1))

    def counted(i):
        if progress is not None:
            progress.add()
        return (f"k{i % KEYS}", i)

    # one subtask up to the windows: each window subtask gets the numbers in order
    keyed = (source.uid("src").assign_timestamps_and_watermarks(strategy).uid("wm").set_parallelism(1)
             .map(counted).uid("pairs").set_parallelism(1)
             .key_by(lambda v: v[0], key_type=Types.STRING))
    if session:  # per key, sessions of the numbers i % 20 < 10 (30 ms apart, gap 40 ms)
        keyed = keyed.filter(lambda v: v[1] % 20 < 10).uid("gaps").set_parallelism(1).key_by(lambda v: v[0], key_type=Types.STRING)
        windowed = keyed.window(EventTimeSessionWindows.with_gap(40)).aggregate(
            Average(), accumulator_type=Types.TUPLE(Types.LONG, Types.LONG))
    else:
        windowed = keyed.window(TumblingEventTimeWindows.of(1000)).reduce(
            lambda a, b: (a[0], a[1] + b[1]), value_type=PAIR)
    windowed.uid("win").add_sink(CollectSink("snap")).uid("sink")
    return env


@pytest.mark.parametrize("session", [False, True], ids=["tumbling-reduce", "session-aggregate"])
def test_checkpoint_and_savepoint_mid_window_read_by_fstate_and_restored(tmp_path, session):
    CollectSink.clear("snap")
    env = windowed_job(make_env(tmp_path, parallelism=2), None, session)
    env.execute("uninterrupted")
    reference = sorted(CollectSink.results("snap"))

    CollectSink.clear("snap")
    progress = Progress()
    client = windowed_job(make_env(tmp_path, parallelism=2), progress, session, pause=PAUSE).execute_async("first")
    progress.wait_for(PAUSE)
    checkpoint = client.trigger_checkpoint()
    savepoint = client.trigger_savepoint()
    client.cancel()
    first = list(CollectSink.results("snap"))
    for path in (checkpoint, savepoint):
        _check_window_state(path, session)

    # restored at parallelism 3: the output of both runs is the uninterrupted run's
    CollectSink.clear("snap")
    windowed_job(make_env(tmp_path, parallelism=3), None, session, restore=savepoint).execute("restored")
    assert sorted(first + CollectSink.results("snap")) == reference


def _check_window_state(path: str, session: bool) -> None:
    """The state fstate reads (the tables `fstate read` shows): the open windows of the records
    before the pause (watermark 2489)."""
    op = Savepoint.open(path).operator("win")
    contents = sorted(tables.keyed_table(op, ["window-contents"]).rows())
    timers = sorted(tables.timers_table(op).rows())
    if session:
        sessions = {}  # key → [first, last] number of its open session
        for i in range(PAUSE):
            if i % 20 < 10:
                k = f"k{i % KEYS}"
                w = sessions.get(k)
                sessions[k] = [w[0], i] if w and i * 10 <= w[1] * 10 + 40 else [i, i]
        windows = {k: (a * 10, b * 10 + 40) for k, (a, b) in sessions.items() if b * 10 + 39 > 2489}
        totals = {k: [i for i in range(sessions[k][0], sessions[k][1] + 1) if i % KEYS == int(k[1:])]
                  for k in windows}
        # window-contents is kept under the state window: the session's first window [first, first + gap)
        assert contents == sorted((k, s, s + 40, (sum(totals[k]), len(totals[k]))) for k, (s, e) in windows.items())
        window_sets = sorted(tables.keyed_table(op, ["merging-window-set"]).rows())
        assert window_sets == sorted((k, [((s, e), (s, s + 40))]) for k, (s, e) in windows.items())
    else:
        sums = defaultdict(int)
        for i in range(2000 // 10, PAUSE):
            sums[f"k{i % KEYS}"] += i
        windows = {k: (2000, 3000) for k in sums}
        assert contents == sorted((k, 2000, 3000, (k, total)) for k, total in sums.items())
    assert timers == sorted((k, e - 1, s, e, "event", "window-timers") for k, (s, e) in windows.items())


# ---------------------------------------------------------------------------------------------
# exactly-once under crashes

CRASH_N = 2400


class SumCount(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def session_job(tmp_path, name: str, injector=None) -> StreamExecutionEnvironment:
    """Sessions per key (i % 5) of the numbers i % 100 < 60 (timestamp i, gap 20): the same
    sessions however the two source subtasks interleave."""
    env = StreamExecutionEnvironment()
    env.set_parallelism(2)
    env.enable_checkpointing(15)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / f"{name}-chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(50, 0))
    env.set_failure_injector(injector)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v).with_emit_every(10)
    (env.from_sequence(0, CRASH_N - 1, splits=6, records_per_second=4000).uid("src")
     .assign_timestamps_and_watermarks(strategy).uid("wm")
     .filter(lambda i: i % 100 < 60).uid("gaps")
     .map(lambda i: (f"k{i % 5}", i)).uid("pairs")
     .key_by(lambda v: v[0], key_type=Types.STRING)
     .window(EventTimeSessionWindows.with_gap(20))
     .aggregate(SumCount(), lambda key, ctx, sums: [f"{key},{ctx.window().start},{ctx.window().end},{s},{n}"
                                                      for s, n in sums],
                accumulator_type=Types.TUPLE(Types.LONG, Types.LONG)).uid("sessions")
     .add_sink(TwoPhaseCommitFileSink(str(tmp_path / name))).uid("sink"))
    return env


def test_session_windows_exactly_once_under_crashes(tmp_path):
    res = session_job(tmp_path, "ref").execute("reference")
    assert res.status == JobStatus.FINISHED and res.restarts == 0
    reference = Counter(read_committed(str(tmp_path / "ref")))
    expected = Counter()
    for block in range(0, CRASH_N, 100):
        for k in range(5):
            mine = [i for i in range(block, block + 60) if i % 5 == k]
            expected[f"k{k},{mine[0]},{mine[-1] + 20},{sum(mine)},{len(mine)}"] += 1
    assert reference == expected
    crashes = Counter()
    schedules = [dict(fail_at=[FailAt("snapshot", "Window", nth=3, attempt=0),
                               FailAt("notify", "Window", nth=2, attempt=1),
                               FailAt("finalize", "coordinator", nth=2, attempt=2),
                               FailAt("record", "Window", nth=300, attempt=3)])]
    schedules += [dict(seed=seed, record=1 / 400, snapshot=0.08, notify=0.08, finalize=0.08) for seed in (1, 2)]
    for seed, schedule in enumerate(schedules):
        injector = FailureInjector(max_failures=5, **schedule)
        res = session_job(tmp_path, f"eo-{seed}", injector).execute(f"exactly-once {seed}")
        assert res.status == JobStatus.FINISHED and res.restarts >= 1
        assert Counter(read_committed(str(tmp_path / f"eo-{seed}"))) == reference, injector.injected
        crashes.update(injector.sites())
    assert set(crashes) == {"record", "snapshot", "notify", "finalize"}, crashes
