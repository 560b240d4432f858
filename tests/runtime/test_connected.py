"""Connected streams (co-map, co-process, keyed co-process with shared state and timers), the
broadcast state pattern (keyed and non-keyed, apply_to_keyed_state), side outputs,
start_new_chain, the refusal of unaligned checkpoints, and fstate reading the state of a
two-input operator (keyed table and broadcast table) as the runtime held it."""

from __future__ import annotations

from collections import Counter

import pytest

from fstate.readers.tables import broadcast_state_table, keyed_table
from fstate.runtime import (IDLE, BroadcastProcessFunction, CoMapFunction, CoProcessFunction, CollectSink,
                            Configuration, KeyedBroadcastProcessFunction, KeyedCoProcessFunction, SourceFunction,
                            StreamExecutionEnvironment, Types, ValueStateDescriptor)
from fstate.runtime.graph import build_chains
from fstate.savepoint import operator as operator_state
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from tests.runtime.broadcast_jobs import BIG, RULES, TOTAL
from tests.runtime.jobs import Progress, make_env, wait_for


class Tag(CoMapFunction):
    def map1(self, value):
        return ("a", value)

    def map2(self, value):
        return ("b", value)


def test_co_map_and_co_process_see_both_inputs(tmp_path):
    CollectSink.clear("comap")
    env = make_env(tmp_path, parallelism=2, interval=20)
    numbers = env.from_collection(list(range(50))).uid("n")
    words = env.from_collection([f"w{i}" for i in range(30)]).uid("w")
    numbers.connect(words).map(Tag()).uid("tag").add_sink(CollectSink("comap")).uid("sink")
    env.execute()
    out = CollectSink.results("comap")
    assert sorted(v for k, v in out if k == "a") == list(range(50))
    assert sorted(v for k, v in out if k == "b") == sorted(f"w{i}" for i in range(30))

    class Both(CoProcessFunction):
        def process_element1(self, value, ctx):
            yield value * 2

        def process_element2(self, value, ctx):
            yield -value

    CollectSink.clear("coproc")
    env = make_env(tmp_path, parallelism=2)
    (env.from_collection([1, 2, 3]).connect(env.from_collection([10, 20]).rebalance())
     .process(Both()).add_sink(CollectSink("coproc")))
    env.execute()
    assert sorted(CollectSink.results("coproc")) == [-20, -10, 2, 4, 6]


class Join(KeyedCoProcessFunction):
    """Orders (key, amount) and payments (key, amount) share the keyed state ``due``; a timer
    reports what is still due at the end of input."""

    def open(self, ctx):
        self.due = ctx.get_state(ValueStateDescriptor("due", Types.LONG))

    def process_element1(self, order, ctx):
        self.due.update((self.due.value() or 0) + order[1])
        ctx.timer_service().register_event_time_timer(1 << 62)
        return None

    def process_element2(self, payment, ctx):
        self.due.update((self.due.value() or 0) - payment[1])
        ctx.timer_service().register_event_time_timer(1 << 62)
        return None

    def on_timer(self, timestamp, ctx):
        yield (ctx.get_current_key(), self.due.value())


def test_keyed_co_process_shares_state_and_timers_and_fstate_reads_it(tmp_path):
    orders = [(f"c{i % 7}", 10 + i) for i in range(140)]
    payments = [(f"c{i % 7}", 3) for i in range(70)]
    want = Counter()
    for k, v in orders:
        want[k] += v
    for k, v in payments:
        want[k] -= v

    CollectSink.clear("join")
    env = make_env(tmp_path, parallelism=2, interval=20)
    (env.from_collection(orders).uid("orders")
     .connect(env.from_collection(payments).uid("payments"))
     .key_by(lambda o: o[0], lambda p: p[0], key_type=Types.STRING)
     .process(Join()).uid("join")
     .add_sink(CollectSink("join")).uid("sink"))
    env.execute()
    assert dict(CollectSink.results("join")) == dict(want)

    # the same job stopped with a savepoint before the end: fstate reads the co-operator's keyed state
    progress = Progress()

    class Counted(Join):
        def process_element1(self, order, ctx):
            progress.add()
            return super().process_element1(order, ctx)

    env = make_env(tmp_path, parallelism=2, interval=20)
    (env.add_source(Paused(orders), "orders").uid("orders")
     .key_by(lambda o: o[0], key_type=Types.STRING)
     .connect(env.from_collection(payments).uid("payments").key_by(lambda p: p[0], key_type=Types.STRING))
     .process(Counted()).uid("join")
     .add_sink(CollectSink("join2")).uid("sink"))
    client = env.execute_async()
    progress.wait_for(len(orders))
    wait_for(lambda: len(client.completed_checkpoints()) >= 2)
    sp = client.stop_with_savepoint()
    operator = Savepoint.open(sp).operator("join")
    rows = dict(keyed_table(operator, ["due"]).rows())
    assert rows == dict(want)


class Paused(SourceFunction):
    """Emits ``values`` (subtask 0 only), then idles."""

    def __init__(self, values):
        self.values = values

    def run(self, ctx):
        if ctx.index_of_this_subtask == 0:
            yield from self.values
        while True:
            yield IDLE


class RulesAfter(SourceFunction):
    """Idles until ``progress`` counted ``n`` elements, then emits ``rules`` and idles."""

    def __init__(self, rules, progress: Progress, n: int, then_stop: bool = True):
        self.rules = rules
        self.progress = progress
        self.n = n
        self.then_stop = then_stop

    def run(self, ctx):
        while self.progress.count < self.n:
            yield IDLE
        yield from self.rules
        while not self.then_stop:
            yield IDLE


class Relabel(KeyedBroadcastProcessFunction):
    """After every key was seen, a rule rewrites every key's total with apply_to_keyed_state."""

    def __init__(self, progress):
        self.progress = progress

    def open(self, ctx):
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value, ctx):
        assert ctx.get_broadcast_state(RULES).get("scale") is None  # read-only view, rules come later
        self.total.update((self.total.value() or 0) + value)
        self.progress.add()
        return None

    def process_broadcast_element(self, rule, ctx):
        name, factor = rule
        ctx.get_broadcast_state(RULES).put(name, factor)
        seen = []

        def scale(key, state):
            seen.append(key)
            state.update(state.value() * factor)

        ctx.apply_to_keyed_state(TOTAL, scale)
        yield ("applied", len(seen))


def test_keyed_broadcast_apply_to_keyed_state_and_the_state_fstate_reads(tmp_path):
    keys, n = 9, 90
    progress = Progress()
    CollectSink.clear("bc")
    env = make_env(tmp_path, parallelism=3, interval=20)
    events = env.from_collection(list(range(n))).uid("events").key_by(lambda i: f"k{i % keys}", key_type=Types.STRING)
    rules = env.add_source(RulesAfter([("scale", 10)], progress, n, then_stop=False), "rules",
                           parallelism=1).uid("rules")
    (events.connect(rules.broadcast(RULES)).process(Relabel(progress)).uid("relabel")
     .add_sink(CollectSink("bc")).uid("sink"))
    client = env.execute_async()
    wait_for(lambda: len(CollectSink.results("bc")) == 3)  # every subtask applied the rule
    wait_for(lambda: len(client.completed_checkpoints()) >= 2)
    sp = client.stop_with_savepoint()
    assert sum(c for _, c in CollectSink.results("bc")) == keys  # each key once, on its subtask
    operator = Savepoint.open(sp).operator("relabel")
    want = {f"k{k}": 10 * sum(i for i in range(n) if i % keys == k) for k in range(keys)}
    assert dict(keyed_table(operator, ["total"]).rows()) == want
    # the broadcast state: operator state in BROADCAST mode, written by every subtask
    assert operator.parallelism == 3
    assert sorted(broadcast_state_table(operator, "rules").rows()) == [("scale", 10)]
    assert sorted(s for s, h in operator.operator_handles() if "rules" in h.states) == [0, 1, 2]
    info = operator.operator_state_info("rules", broadcast=True)
    assert (info.kind, info.key_type, info.value_type) == ("BROADCAST", Types.STRING, Types.LONG)


def test_non_keyed_broadcast_and_side_outputs(tmp_path):
    rules_done = Progress()

    class Filter(BroadcastProcessFunction):
        def process_element(self, value, ctx):
            with pytest.raises(AttributeError):  # read-only on the element side
                ctx.get_broadcast_state(RULES).put("x", 1)
            if value > ctx.get_broadcast_state(RULES).get("limit"):
                ctx.output(BIG, value)
            else:
                yield value

        def process_broadcast_element(self, rule, ctx):
            ctx.get_broadcast_state(RULES).put(*rule)
            rules_done.add()
            return None

    CollectSink.clear("main")
    CollectSink.clear("big")
    env = make_env(tmp_path, parallelism=2, interval=20)
    rules = env.from_collection([("limit", 50)]).uid("limits")
    # the values start once both subtasks hold the rule
    values = env.add_source(RulesAfter(list(range(100)), rules_done, 2), "values", parallelism=1).uid("values")
    out = values.connect(rules.broadcast(RULES)).process(Filter()).uid("filter")
    out.map(lambda v: v).uid("after").add_sink(CollectSink("main")).uid("sink")
    out.get_side_output(BIG).add_sink(CollectSink("big")).uid("big-sink")
    env.execute()
    assert sorted(CollectSink.results("main")) == list(range(51))
    assert sorted(CollectSink.results("big")) == list(range(51, 100))


def test_start_new_chain_and_disable_chaining():
    env = StreamExecutionEnvironment()
    env.set_parallelism(1)
    a = env.from_collection([1]).map(lambda v: v)
    b = a.map(lambda v: v).start_new_chain()
    c = b.map(lambda v: v)
    c.add_sink(lambda v, ctx: None)
    chains = build_chains(env.graph.nodes, 1, None)
    assert [len(chain.nodes) for chain in chains] == [2, 3]  # source+map | map(new chain)+map+sink
    env = StreamExecutionEnvironment()
    env.set_parallelism(1)
    env.from_collection([1]).map(lambda v: v).map(lambda v: v).disable_chaining().map(lambda v: v)
    assert [len(chain.nodes) for chain in build_chains(env.graph.nodes, 1, None)] == [2, 1, 1]


def test_unaligned_checkpoints_are_refused():
    for key in ("execution.checkpointing.unaligned.enabled", "execution.checkpointing.unaligned"):
        with pytest.raises(InvalidArgumentError, match="unaligned checkpoints are not supported"):
            StreamExecutionEnvironment(Configuration({key: True}))
    StreamExecutionEnvironment(Configuration({"execution.checkpointing.unaligned.enabled": "false"}))
    env = StreamExecutionEnvironment()
    with pytest.raises(InvalidArgumentError, match="unaligned"):
        env.get_checkpoint_config().enable_unaligned_checkpoints()
    assert env.get_checkpoint_config().is_unaligned_checkpoints_enabled() is False


def test_connect_refuses_one_keyed_input():
    env = StreamExecutionEnvironment()
    a = env.from_collection([1]).key_by(lambda v: v)
    with pytest.raises(InvalidArgumentError, match="both streams are keyed"):
        a.connect(env.from_collection([2]))
    with pytest.raises(InvalidArgumentError, match="MapStateDescriptors"):
        env.from_collection([1]).broadcast(TOTAL)


class Collect(KeyedBroadcastProcessFunction):
    """Sums events per key; every rule ``v`` becomes broadcast entry ``r<v>``."""

    def open(self, ctx):
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value)
        return None

    def process_broadcast_element(self, rule, ctx):
        ctx.get_broadcast_state(RULES).put(f"r{rule}", rule)
        return None


def test_checkpoints_of_two_inputs_are_aligned(tmp_path):
    """Every retained checkpoint of a running job holds exactly the effect of what its two
    sources had emitted at that checkpoint: the keyed totals sum the events before the events
    source's position, and every subtask's broadcast state holds the rules before the rules
    source's position (barriers aligned over both inputs)."""
    env = make_env(tmp_path, parallelism=2, interval=30)
    env.get_checkpoint_config().set_num_retained_checkpoints(6)
    events = env.from_sequence(0, 10**6, splits=1, records_per_second=3000).uid("events").set_parallelism(1)
    rules = env.from_sequence(0, 10**6, splits=1, records_per_second=1000).uid("rules").set_parallelism(1)
    (events.key_by(lambda v: f"k{v % 5}", key_type=Types.STRING)
     .connect(rules.broadcast(RULES)).process(Collect()).uid("collect")
     .add_sink(CollectSink("aligned")).uid("sink"))
    client = env.execute_async()
    wait_for(lambda: len(client.completed_checkpoints()) >= 8)
    client.cancel()
    checked = 0
    for completed in client.completed_checkpoints()[-6:]:
        savepoint = Savepoint.open(completed.path)

        def position(uid):
            (_, _, (next_value, _)), = savepoint.operator(uid).list_state("splits")
            return next_value

        operator = savepoint.operator("collect")
        totals = dict(keyed_table(operator, ["total"]).rows()) if operator.has_keyed_state else {}
        assert sum(totals.values()) == sum(range(position("events")))
        want = {f"r{v}": v for v in range(position("rules"))}
        assert dict(broadcast_state_table(operator, "rules").rows()) == want
        for subtask, h in operator.operator_handles():
            if want:
                buf = savepoint.read_stream(h.delegate)
                meta = operator_state.read_operator_proxy(buf, "", operator_state.header_end(h, len(buf)))
                assert dict(operator_state.read_broadcast_state(buf, h, meta, "rules", "")) == want, subtask
        checked += 1
        rules_seen = len(want)
    assert checked == 6 and rules_seen > 0


def test_co_flat_map_and_side_outputs_of_one_input_functions(tmp_path):
    from fstate.runtime import CoFlatMapFunction, KeyedProcessFunction, OutputTag, ProcessFunction

    odd, fired = OutputTag("odd", Types.LONG), OutputTag("fired")

    class Split(ProcessFunction):
        def process_element(self, value, ctx):
            if value % 2:
                ctx.output(odd, value)
            else:
                yield value

    class Timed(KeyedProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_event_time_timer(10)
            yield value

        def on_timer(self, timestamp, ctx):
            ctx.output(fired, (ctx.get_current_key(), timestamp))
            return None

    class Words(CoFlatMapFunction):
        def flat_map1(self, value):
            yield from [value, value]

        def flat_map2(self, value):
            yield from value.split()

    for name in ("even", "odd", "fired", "words"):
        CollectSink.clear(name)
    env = make_env(tmp_path, parallelism=2)
    split = env.from_collection(list(range(10))).process(Split())
    split.add_sink(CollectSink("even"))
    timed = split.get_side_output(odd).key_by(lambda v: v % 3).process(Timed())
    timed.get_side_output(fired).add_sink(CollectSink("fired"))
    timed.connect(env.from_collection(["a b", "c"])).flat_map(Words()).add_sink(CollectSink("words"))
    env.execute()
    assert sorted(CollectSink.results("even")) == [0, 2, 4, 6, 8]
    assert sorted(CollectSink.results("fired")) == [(0, 10), (1, 10), (2, 10)]
    assert sorted(CollectSink.results("words"), key=str) == sorted([1, 1, 3, 3, 5, 5, 7, 7, 9, 9, "a", "b", "c"],
                                                                    key=str)
