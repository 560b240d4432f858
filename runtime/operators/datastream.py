"""Stream operators: one instance per parallel subtask, holding the user function, its state
backends and (for keyed process functions) the timer service.

An operator receives ``process_record(timestamp, value)`` and ``process_watermark(wm)`` and sends
its results through ``self.emit(timestamp, value)`` / ``self.emit_watermark(wm)``, which the task
wires to the next operator of the chain or to the network.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable

from ...savepoint.metadata import SubtaskState
from ..api.callables import call_of
from ..api.context import FunctionInitializationContext, FunctionSnapshotContext, OperatorInfo, RuntimeContext
from ..events import MAX_WATERMARK, MIN_WATERMARK
from ..api.functions import CheckpointedFunction, CheckpointListener, Function
from ..graph import StreamNode
from ..state.operator_backend import OperatorStateBackend
from ..state.keyed_backend import KeyedStateBackend, StateMigrationError, ValueStateDescriptor


# =============================================================================================
# operators


class StreamOperator:
    keyed = False
    chainable_head = True

    def __init__(self, node: StreamNode):
        self.node = node
        self.function = node.function
        self.emit: Callable[[Any, Any], None] = _no_output
        self.emit_watermark: Callable[[int], None] = _no_watermark
        #: ``emit_side(tag, timestamp, value)``: a side output (wired by the task to its consumers)
        self.emit_side: Callable[[Any, Any, Any], None] = _no_side_output
        self.info: OperatorInfo | None = None
        self.operator_backend: OperatorStateBackend | None = None
        self.keyed_backend: KeyedStateBackend | None = None
        self.runtime_context: RuntimeContext | None = None
        self.current_watermark = MIN_WATERMARK

    # lifecycle ------------------------------------------------------------------------------
    def setup(self, info: OperatorInfo) -> None:
        self.info = info

    def initialize_state(self, restore, restored_checkpoint_id: int | None) -> None:
        where = f"operator {self.node.display} ({self.info.subtask + 1}/{self.info.parallelism})"
        if restore is not None and restore.keyed is not None and not self.keyed:
            raise StateMigrationError(f"{where}: the snapshot holds keyed state for this operator, but it is "
                                      "not keyed (no key_by before it)")
        self.operator_backend = OperatorStateBackend(where, restore.operator_state if restore else None)
        if self.keyed:
            kg_range = self.node.key_group_range(self.info.subtask)
            self.keyed_backend = KeyedStateBackend(where, self.node.key_type, self.info.max_parallelism, kg_range,
                                                   restore.keyed if restore else None, clock=self.info.clock)
        self.runtime_context = RuntimeContext(self.info, self.keyed_backend)
        if isinstance(self.function, Function):
            self.function.set_runtime_context(self.runtime_context)
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(FunctionInitializationContext(
                restored_checkpoint_id, self.operator_backend, self.keyed_backend, where))

    def open(self) -> None:
        if isinstance(self.function, Function):
            self.function.open(self.runtime_context)
        self.bind()

    def bind(self) -> None:
        """Install ``process_record`` (a closure: the per-record fast path)."""

    def process_record(self, ts, value) -> None:  # replaced by bind()
        raise NotImplementedError

    def process_watermark(self, wm: int) -> None:
        self.current_watermark = wm
        self.emit_watermark(wm)

    def on_idle(self) -> None:
        """Called when the task has no input right now (and at end of source batches)."""

    def next_processing_timer(self) -> int | None:
        return None

    def on_processing_time(self, now: int) -> None:
        pass

    def finish(self) -> None:
        """End of input."""
        fin = getattr(self.function, "finish", None)
        if callable(fin):
            fin()

    def close(self) -> None:
        if isinstance(self.function, Function):
            self.function.close()

    # checkpoints ----------------------------------------------------------------------------
    def snapshot(self, checkpoint_id: int, timestamp: int, location: str) -> SubtaskState:
        if isinstance(self.function, CheckpointedFunction):
            self.function.snapshot_state(FunctionSnapshotContext(checkpoint_id, timestamp))
        st = SubtaskState()
        st.managed_operator = self.operator_backend.snapshot(location)
        if self.keyed_backend is not None:
            st.managed_keyed = self.keyed_backend.snapshot(location)
        return st

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_aborted(checkpoint_id)

    # helpers --------------------------------------------------------------------------------
    def _keyed_wrap(self, core: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        if not self.keyed:
            return core
        select = self.node.key_selector
        set_key = self.keyed_backend.set_current_key

        def keyed_record(ts, v):
            set_key(select(v))
            core(ts, v)

        return keyed_record


def _no_output(ts, v) -> None:
    pass


def _no_watermark(wm) -> None:
    pass


def _no_side_output(tag, ts, v) -> None:
    pass


class SourceOperator(StreamOperator):
    """Holds the source function; the source task pulls from ``run()``."""

    def start(self, ctx):
        return iter(self.function.run(ctx))

    def cancel(self) -> None:
        c = getattr(self.function, "cancel", None)
        if callable(c):
            c()


class MapOperator(StreamOperator):
    def bind(self) -> None:
        fn = call_of(self.function, "map")
        emit = self.emit

        def core(ts, v):
            emit(ts, fn(v))

        self.process_record = self._keyed_wrap(core)


class FlatMapOperator(StreamOperator):
    def bind(self) -> None:
        fn = call_of(self.function, "flat_map")
        emit = self.emit

        def core(ts, v):
            out = fn(v)
            if out is not None:
                for x in out:
                    emit(ts, x)

        self.process_record = self._keyed_wrap(core)


class FilterOperator(StreamOperator):
    def bind(self) -> None:
        fn = call_of(self.function, "filter")
        emit = self.emit

        def core(ts, v):
            if fn(v):
                emit(ts, v)

        self.process_record = self._keyed_wrap(core)


class ReduceOperator(StreamOperator):
    """``key_by(...).reduce(f)``: the running reduction per key, emitted after every record."""

    keyed = True
    STATE = "_op_state"

    def bind(self) -> None:
        fn = call_of(self.function, "reduce")
        state = self.keyed_backend.get_state(ValueStateDescriptor(self.STATE, self.node.output_type))
        emit = self.emit

        def core(ts, v):
            old = state.value()
            new = v if old is None else fn(old, v)
            state.update(new)
            emit(ts, new)

        self.process_record = self._keyed_wrap(core)


class ProcessContext:
    """Context of ProcessFunction / KeyedProcessFunction calls."""

    __slots__ = ("_op", "element_timestamp", "_domain")

    def __init__(self, op):
        self._op = op
        self.element_timestamp = None
        self._domain = None

    def timestamp(self):
        return self.element_timestamp

    def get_current_key(self):
        b = self._op.keyed_backend
        return None if b is None else b.current_key

    @property
    def current_key(self):
        return self.get_current_key()

    def timer_service(self) -> "TimerService":
        ts = self._op.timer_service
        if ts is None:
            raise RuntimeError("timers are only available in a keyed process function")
        return ts

    def time_domain(self) -> str | None:
        """'event' or 'processing' inside on_timer."""
        return self._domain

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def current_processing_time(self) -> int:
        return self._op.info.clock.now_ms()

    def output(self, tag, value) -> None:
        """Emit ``value`` to the side output ``tag`` (an ``OutputTag``), with this element's timestamp."""
        self._op.emit_side(tag, self.element_timestamp, value)


class ProcessOperator(StreamOperator):
    timer_service = None

    def bind(self) -> None:
        fn = call_of(self.function, "process_element")
        emit = self.emit
        ctx = self.ctx = ProcessContext(self)

        def core(ts, v):
            ctx.element_timestamp = ts
            out = fn(v, ctx)
            if out is not None:
                for x in out:
                    emit(ts, x)

        self.process_record = self._keyed_wrap(core)


class TimerService:
    """Event- and processing-time timers of one keyed operator subtask, per key group (so they
    are snapshotted with the key group and move with it on rescale)."""

    def __init__(self, op: "KeyedProcessOperator"):
        self._op = op
        self._b = op.keyed_backend
        self._b.uses_timers = True
        self._seq = itertools.count()
        self._heaps: dict[str, list] = {"event": [], "processing": []}
        for kind in ("event", "processing"):
            heap = self._heaps[kind]
            for kg, timers in self._b.timers[kind].items():
                for ts, key in timers:
                    heap.append((ts, next(self._seq), kg, key))
            heapq.heapify(heap)

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def current_processing_time(self) -> int:
        return self._op.info.clock.now_ms()

    def _register(self, kind: str, ts: int) -> None:
        b = self._b
        if b.current_kg < 0:
            raise RuntimeError("timers can only be registered with a current key")
        s = b.timers[kind].setdefault(b.current_kg, set())
        entry = (int(ts), b.current_key)
        if entry not in s:
            s.add(entry)
            heapq.heappush(self._heaps[kind], (entry[0], next(self._seq), b.current_kg, b.current_key))

    def _delete(self, kind: str, ts: int) -> None:
        b = self._b
        s = b.timers[kind].get(b.current_kg)
        if s:
            s.discard((int(ts), b.current_key))

    def register_event_time_timer(self, ts: int) -> None:
        self._register("event", ts)

    def delete_event_time_timer(self, ts: int) -> None:
        self._delete("event", ts)

    def register_processing_time_timer(self, ts: int) -> None:
        self._register("processing", ts)

    def delete_processing_time_timer(self, ts: int) -> None:
        self._delete("processing", ts)

    def next(self, kind: str) -> int | None:
        heap = self._heaps[kind]
        sets = self._b.timers[kind]
        while heap:
            ts, _, kg, key = heap[0]
            if (ts, key) in sets.get(kg, ()):
                return ts
            heapq.heappop(heap)
        return None

    def pop_due(self, kind: str, until: int):
        """Yields (timestamp, key group, key) of timers due at ``until``, removing them."""
        heap = self._heaps[kind]
        sets = self._b.timers[kind]
        while heap and heap[0][0] <= until:
            ts, _, kg, key = heapq.heappop(heap)
            s = sets.get(kg)
            if s is not None and (ts, key) in s:
                s.discard((ts, key))
                yield ts, kg, key


class KeyedProcessOperator(ProcessOperator):
    keyed = True

    def initialize_state(self, restore, restored_checkpoint_id) -> None:
        super().initialize_state(restore, restored_checkpoint_id)
        self.timer_service = TimerService(self)

    def bind(self) -> None:
        super().bind()
        self._on_timer = getattr(self.function, "on_timer", None)

    def _fire(self, kind: str, until: int) -> None:
        b = self.keyed_backend
        ctx = self.ctx
        emit = self.emit
        on_timer = self._on_timer
        for ts, kg, key in self.timer_service.pop_due(kind, until):
            b.current_key, b.current_kg = key, kg
            ctx.element_timestamp = ts if kind == "event" else None
            ctx._domain = kind
            out = on_timer(ts, ctx) if on_timer else None
            if out is not None:
                for x in out:  # a generator runs here: keep key, timestamp and domain until it is done
                    emit(ts if kind == "event" else None, x)
            ctx._domain = None

    def process_watermark(self, wm: int) -> None:
        self.current_watermark = wm
        self._fire("event", wm)
        self.emit_watermark(wm)

    def next_processing_timer(self) -> int | None:
        return self.timer_service.next("processing")

    def on_processing_time(self, now: int) -> None:
        self._fire("processing", now)


class SinkOperator(StreamOperator):
    def bind(self) -> None:
        fn = call_of(self.function, "invoke")
        ctx = self.ctx = ProcessContext(self)

        def core(ts, v):
            ctx.element_timestamp = ts
            fn(v, ctx)

        self.process_record = self._keyed_wrap(core)


class TimestampsAndWatermarksOperator(StreamOperator):
    """Assigns event timestamps and generates watermarks (``assign_timestamps_and_watermarks``)."""

    def bind(self) -> None:
        strategy = self.function
        assign = strategy.assigner
        emit = self.emit
        self._max_ts = MIN_WATERMARK
        self._emitted = MIN_WATERMARK
        self._count = 0
        every = max(1, strategy.emit_every)
        delay = strategy.out_of_orderness_ms
        generates = strategy.generates

        def core(ts, v):
            if assign is not None:
                ts = assign(v, ts)
            if ts is not None and ts > self._max_ts:
                self._max_ts = ts
            emit(ts, v)
            if generates:
                self._count += 1
                if self._count >= every:
                    self._count = 0
                    self._advance()

        self._delay = delay
        self._generates = generates
        self.process_record = core

    def _advance(self) -> None:
        if self._max_ts == MIN_WATERMARK:
            return
        wm = self._max_ts - self._delay - 1
        if wm > self._emitted:
            self._emitted = wm
            self.current_watermark = wm
            self.emit_watermark(wm)

    def on_idle(self) -> None:
        if self._generates:
            self._advance()

    def process_watermark(self, wm: int) -> None:
        # watermarks from upstream are replaced by this operator's, except the end of input
        if wm == MAX_WATERMARK:
            self._emitted = wm
            self.current_watermark = wm
            self.emit_watermark(wm)


OPERATORS = {
    "source": SourceOperator, "map": MapOperator, "flat_map": FlatMapOperator, "filter": FilterOperator,
    "process": ProcessOperator, "keyed_process": KeyedProcessOperator, "sink": SinkOperator,
    "timestamps": TimestampsAndWatermarksOperator, "reduce": ReduceOperator,
}


def create_operator(node: StreamNode) -> StreamOperator:
    cls = OPERATORS[node.kind]
    op = cls(node)
    if node.key_selector is not None and not op.keyed:
        op.keyed = True
    return op
