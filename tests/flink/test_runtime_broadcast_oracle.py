"""The broadcast state pattern against real Apache Flink 2.3, both ways, with the shape of
``jobs/v2/BroadcastJob.java``: source ``src`` (list state ``offsets``) → keyed by ``k-<v % 20>``
(String) and connected to the same stream broadcast with ``rules`` (String → Long) → a keyed
broadcast process function ``rules-totals`` (ValueState ``total`` Long) → sink.

* the runtime's savepoint restores in Flink (``RestoreJob``: a KeyedBroadcastProcessFunction
  that lists every key with ``applyToKeyedState``), at another parallelism: Flink finds the
  keyed state, the event timers and the broadcast state (in every subtask) the runtime held, and
  fstate reads the same from the savepoint;
* the runtime restores Flink's savepoint at another parallelism: ``apply_to_keyed_state`` sees
  every key's total and every subtask the broadcast state Flink's dump lists.
"""

from __future__ import annotations

import pytest

from fstate.readers.tables import broadcast_state_table, keyed_table
from fstate.runtime import (CollectSink, DiscardingSink, KeyedBroadcastProcessFunction, StreamExecutionEnvironment,
                            Types)
from fstate.savepoint.loader import Savepoint
from tests.flink import harness
from tests.flink.test_runtime_oracle import OffsetSource, _wait_for
from tests.runtime.broadcast_jobs import RULES, TOTAL
from tests.runtime.jobs import Progress

pytestmark = pytest.mark.flink

VERSION = "2.3.0"
KEYS = 20


class Totals(KeyedBroadcastProcessFunction):
    """BroadcastJob.Totals, plus an event timer per key (1_000_000 + v % 3)."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def open(self, ctx):
        self.total = ctx.get_state(TOTAL)

    def process_element(self, v, ctx):
        self.total.update((self.total.value() or 0) + v)
        ctx.timer_service().register_event_time_timer(1_000_000 + v % 3)
        self.progress.add()
        return None

    def process_broadcast_element(self, v, ctx):
        ctx.get_broadcast_state(RULES).put(f"rule-{v % 7}", v)
        self.progress.add()
        return None


class Probe(KeyedBroadcastProcessFunction):
    """Changes nothing; at its first broadcast element each subtask lists its keys' totals
    (``apply_to_keyed_state``) and its broadcast state."""

    def open(self, ctx):
        self.done = False

    def process_element(self, v, ctx):
        return None

    def process_broadcast_element(self, v, ctx):
        if self.done:
            return
        self.done = True
        totals = {}
        ctx.apply_to_keyed_state(TOTAL, lambda key, state: totals.__setitem__(key, state.value()))
        yield (self.get_runtime_context().get_index_of_this_subtask(), totals,
               dict(ctx.get_broadcast_state(RULES).items()))


def broadcast_job(env, source, function, sink):
    src = env.add_source(source, "src", parallelism=1).uid("src")
    (src.key_by(lambda v: f"k-{v % KEYS}", key_type=Types.STRING)
     .connect(src.broadcast(RULES))
     .process(function).uid("rules-totals")
     .add_sink(sink).uid("sink"))


def test_flink_restores_a_runtime_broadcast_savepoint(tmp_path):
    harness.require_flink(VERSION)
    from tests.flink.restore import restore_and_dump

    n, parallelism = 240, 2
    progress = Progress()
    env = StreamExecutionEnvironment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(50)
    env.get_checkpoint_config().set_checkpoint_storage(str(tmp_path / "chk"))
    broadcast_job(env, OffsetSource(n), Totals(progress), DiscardingSink())
    client = env.execute_async("broadcast to flink")
    progress.wait_for(n + n * parallelism)  # every element, and every broadcast element on each subtask
    sp = client.stop_with_savepoint(str(tmp_path / "savepoints"))

    want_total = {f"k-{k}": sum(v for v in range(n) if v % KEYS == k) for k in range(KEYS)}
    want_rules = {f"rule-{r}": max(v for v in range(n) if v % 7 == r) for r in range(7)}
    want_timers = {(f"k-{v % KEYS}", 1_000_000 + v % 3) for v in range(n)}
    # the runtime's own view, through fstate
    operator = Savepoint.open(sp).operator("rules-totals")
    assert dict(keyed_table(operator, ["total"]).rows()) == want_total
    assert dict(broadcast_state_table(operator, "rules").rows()) == want_rules
    assert sorted(s for s, h in operator.operator_handles() if "rules" in h.states) == [0, 1]

    config = {"savepoint": sp, "max_parallelism": 128, "operators": [
        {"uid": "rules-totals", "kind": "keyed", "parallelism": 3, "key_type": "STRING", "timers": True,
         "states": [{"name": "total", "kind": "VALUE", "type": "LONG"},
                    {"name": "rules", "mode": "BROADCAST", "key_type": "STRING", "type": "LONG"}]},
        {"uid": "src", "kind": "operator", "parallelism": 1,
         "states": [{"name": "offsets", "mode": "SPLIT_DISTRIBUTE", "type": "LONG"}]}]}
    dump = restore_and_dump(config, VERSION, "hashmap")
    assert dump["restored"] is True and not dump.get("warnings"), dump.get("warnings")
    ops = {o["uid"]: o for o in dump["operators"]}
    keyed = {e["state"]: dict((k, v) for k, v in e["entries"]) for e in ops["rules-totals"]["keyed_state"]}
    assert keyed == {"total": want_total}
    assert [(b["state"], dict(b["entries"])) for b in ops["rules-totals"]["broadcast_state"]] == [("rules", want_rules)]
    assert {(t["key"], t["timestamp"]) for t in ops["rules-totals"]["timers"]} == want_timers
    assert [e["values"] for e in ops["src"]["list_state"]] == [[n]]


def test_runtime_restores_a_flink_broadcast_savepoint(tmp_path):
    harness.require_flink(VERSION)
    res = harness.generate("BroadcastJob", VERSION, "hashmap", "savepoint")
    flink = {o["uid"]: o for o in res.dump["operators"]}
    assert flink["rules-totals"]["parallelism"] == 2
    flink_total = {k: v for e in flink["rules-totals"]["keyed_state"] for k, v in e["entries"]}
    flink_rules = dict(flink["rules-totals"]["broadcast_state"][0]["entries"])
    assert len(flink_total) == 20 and len(flink_rules) == 7

    CollectSink.clear("flink-broadcast")
    env = StreamExecutionEnvironment()
    env.set_parallelism(3)
    env.restore_from(str(res.snapshot_dir))
    broadcast_job(env, OffsetSource(1, probe=True), Probe(), CollectSink("flink-broadcast"))
    client = env.execute_async("broadcast from flink")
    _wait_for(lambda: len(CollectSink.results("flink-broadcast")) == 3)
    client.cancel()
    seen = {}
    for subtask, totals, rules in sorted(CollectSink.results("flink-broadcast"), key=lambda r: r[0]):
        assert rules == flink_rules, f"subtask {subtask}"
        assert not set(totals) & set(seen)  # each key on one subtask
        seen.update(totals)
    assert seen == flink_total
