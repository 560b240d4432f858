"""The broadcast-pattern job the connected-stream tests share (runtime, crash and Flink oracle):
keyed events (``k-<i % keys>``, value i) connected to a broadcast stream of rules ``(name, limit)``;
keyed ValueState ``total`` (Long) and broadcast state ``rules`` (String → Long)."""

from __future__ import annotations

from fstate.runtime import (KeyedBroadcastProcessFunction, MapStateDescriptor, OutputTag, Types,
                            ValueStateDescriptor)

RULES = MapStateDescriptor("rules", Types.STRING, Types.LONG)
TOTAL = ValueStateDescriptor("total", Types.LONG)
BIG = OutputTag("big", Types.STRING)
END_OF_INPUT = 1 << 62


class RuleTotals(KeyedBroadcastProcessFunction):
    """Sums values per key; a rule element ``(name, limit)`` is stored in the broadcast state by
    every subtask. Output does not depend on how the inputs interleave: one line per event and
    per (subtask, rule), and per key its total with the rules it sees when the input ends (the
    final watermark fires the timer). Values >= 1000 also go to the side output ``big``."""

    def open(self, ctx):
        self.total = ctx.get_state(TOTAL)

    def process_element(self, value, ctx):
        self.total.update((self.total.value() or 0) + value)
        ctx.timer_service().register_event_time_timer(END_OF_INPUT)
        if value >= 1000:
            ctx.output(BIG, f"big,{ctx.get_current_key()},{value}")
        yield f"r,{ctx.get_current_key()},{value}"

    def process_broadcast_element(self, rule, ctx):
        name, limit = rule
        ctx.get_broadcast_state(RULES).put(name, limit)
        yield f"b,{self.get_runtime_context().get_index_of_this_subtask()},{name}"

    def on_timer(self, timestamp, ctx):
        rules = sorted(ctx.get_broadcast_state(RULES).items())
        yield f"c,{ctx.get_current_key()},{self.total.value()},{rules}"
