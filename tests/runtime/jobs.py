"""Jobs, functions and helpers the runtime tests share."""

from __future__ import annotations

import threading
import time
from decimal import Decimal

from fstate.runtime import (IDLE, AggregateFunction, AggregatingStateDescriptor, CheckpointedFunction,
                            CheckpointListener, CollectSink, ExternalizedCheckpointRetention, JobStatus,
                            KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                            RestartStrategies, SourceFunction, StreamExecutionEnvironment, TwoPhaseCommitFileSink,
                            Types, ValueStateDescriptor)
from fstate.runtime.api.sources import SequenceSource


def make_env(tmp_path, parallelism=2, interval=None, clock=None, **retention) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment(clock=clock)
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


def expected_all_states(values, keys):
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


def all_states_job(env, n=200, keys=10):
    (env.from_collection(list(range(n)), idle_at_end=True).uid("src")
     .map(lambda i: (f"k-{i % keys}", i)).uid("to-keyed")
     .key_by(lambda t: t[0], key_type=Types.STRING)
     .process(AllStates()).uid("keyed")
     .add_sink(CollectSink("all-states")).uid("sink"))


def wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.01)


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"{ctx.get_current_key()},{value},{c}"


def counting_job(env, out_dir, n, p_src=None, p_keyed=None, rate=None, idle_at_end=False, pause_after=None):
    options = dict(records_per_second=rate, splits=12, idle_at_end=idle_at_end)
    if pause_after is None:
        src = env.from_sequence(0, n - 1, **options).uid("src")
    else:
        src = from_paused_sequence(env, 0, n - 1, pause_after, **options).uid("src")
    if p_src:
        src.set_parallelism(p_src)
    keyed = src.key_by(lambda i: f"k-{i % 13}", key_type=Types.STRING).process(CountPerKey()).uid("count")
    if p_keyed:
        keyed.set_parallelism(p_keyed)
    keyed.add_sink(TwoPhaseCommitFileSink(str(out_dir))).uid("sink")


class Idle(SourceFunction):
    def run(self, ctx):
        while True:
            yield IDLE


# ---------------------------------------------------------------------------------------------
# deterministic progress: tests wait for a condition, never for an amount of time


class SharedEvent(threading.Event):
    """An Event that every parallel copy of a function shares (the runtime deep-copies functions
    for each subtask)."""

    def __deepcopy__(self, memo):
        return self


class Progress:
    """A count that every parallel copy of a function shares, for a test to wait on."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0

    def __deepcopy__(self, memo):
        return self

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.count += n

    def wait_for(self, n: int, timeout: float = 60.0) -> None:
        """Until at least ``n`` were counted."""
        wait_for(lambda: self.count >= n, timeout)


class PausedSequenceSource(SequenceSource):
    """``from_sequence`` whose every subtask stops after emitting ``pause_after`` numbers (it
    yields IDLE, so checkpoints, savepoints and stop-with-savepoint go on) until ``resume`` is
    set. Its state is SequenceSource's: a plain ``from_sequence`` restores it. The next number is
    taken from the sequence only when it is emitted, so a checkpoint during the pause holds the
    exact position. The count is per subtask and per attempt."""

    def __init__(self, start: int, end: int, pause_after: int, resume: threading.Event | None = None,
                 **options):
        super().__init__(start, end, **options)
        self.pause_after = pause_after
        self.resume = resume if resume is not None else SharedEvent()

    def run(self, ctx):
        numbers = super().run(ctx)
        emitted = 0
        while True:
            while emitted >= self.pause_after and not self.resume.is_set():
                yield IDLE
            try:
                item = next(numbers)
            except StopIteration:
                return
            if item is not IDLE:
                emitted += 1
            yield item


def from_paused_sequence(env, start: int, end: int, pause_after: int, resume: threading.Event | None = None,
                         **options):
    """Like ``env.from_sequence`` (same operator name), with a PausedSequenceSource."""
    return env.add_source(PausedSequenceSource(start, end, pause_after, resume, **options), "Sequence Source")


def wait_until_running(client, timeout: float = 60.0) -> None:
    """Until the job is RUNNING (its client requests are handled once its tasks have started)."""
    wait_for(lambda: client.get_job_status() == JobStatus.RUNNING, timeout)
