"""The window operator: runs a :class:`windowing.WindowSpec` the way Flink's ``WindowOperator``
does, with its state in Flink's layout, so that fstate and Flink read it and either side
restores the other's snapshots:

* keyed state ``window-contents`` with namespace ``TimeWindow``: ReducingState of the value type
  (``reduce``), AggregatingState of the accumulator type (``aggregate``), ListState of the
  elements (``process`` / ``apply``);
* trigger state in the namespace of the window (``CountTrigger``: ReducingState ``count``, Long);
* merging assigners (sessions): keyed ListState ``merging-window-set`` of
  ``Tuple2<TimeWindow, TimeWindow>`` (window → the window its state is kept under), VoidNamespace;
* timers of the timer service ``window-timers`` (``_timer_state/event_window-timers``,
  ``_timer_state/processing_window-timers``): timestamp, key, window.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from ...savepoint import types as savepoint_types
from ..api.functions import Function
from ..graph import StreamNode
from .connected import create_operator as create_stream_operator
from .datastream import StreamOperator
from ..state.keyed_backend import KeyedStateBackend, KeyedStateStore, ListStateDescriptor, StateMigrationError
from ..api.windowing import LONG_MAX, TimeWindow, WindowSpec

MERGING_WINDOW_SET = "merging-window-set"
TIMER_SERVICE = "window-timers"
WINDOW_SET_TYPE = savepoint_types.TupleType((savepoint_types.TIME_WINDOW, savepoint_types.TIME_WINDOW))


# =============================================================================================
# keyed state scoped by window: data[key group][(key, window)]


class WindowScopedState:
    """Keyed state in the namespace ``self.namespace`` (a TimeWindow) of the current key."""

    __slots__ = ("_b", "_data", "_desc", "name", "namespace")
    kind = "VALUE"

    def __init__(self, backend: KeyedStateBackend, table, desc):
        self._b = backend
        self._data = table.data
        self._desc = desc
        self.name = desc.name
        self.namespace: TimeWindow | None = None

    def _map(self) -> dict:
        kg = self._b.current_kg
        m = self._data.get(kg)
        if m is None:
            m = self._data[kg] = {}
        return m

    def _raw(self) -> Any:
        m = self._data.get(self._b.current_kg)
        return None if m is None else m.get((self._b.current_key, self.namespace))

    def clear(self) -> None:
        m = self._data.get(self._b.current_kg)
        if m is not None:
            m.pop((self._b.current_key, self.namespace), None)

    def _merge(self, a: Any, b: Any) -> Any:
        raise TypeError(f"state '{self.name}' ({self.kind}) cannot be merged")

    def merge_namespaces(self, target: TimeWindow, sources) -> None:
        """The values of ``sources`` merged into ``target`` (target first), sources removed."""
        m = self._map()
        key = self._b.current_key
        merged = None
        for source in sources:
            v = m.pop((key, source), None)
            if v is not None:
                merged = v if merged is None else self._merge(merged, v)
        if merged is not None:
            old = m.get((key, target))
            m[(key, target)] = merged if old is None else self._merge(old, merged)


class WindowValueState(WindowScopedState):
    kind = "VALUE"

    def value(self) -> Any:
        return self._raw()

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._map()[(self._b.current_key, self.namespace)] = value


class WindowReducingState(WindowScopedState):
    kind = "REDUCING"

    def get(self) -> Any:
        return self._raw()

    def add(self, value: Any) -> None:
        m = self._map()
        slot = (self._b.current_key, self.namespace)
        old = m.get(slot)
        m[slot] = value if old is None else self._desc.reduce(old, value)

    def _merge(self, a, b):
        return self._desc.reduce(a, b)


class WindowAggregatingState(WindowScopedState):
    kind = "AGGREGATING"

    def get(self) -> Any:
        acc = self._raw()
        return None if acc is None else self._desc.function.get_result(acc)

    def add(self, value: Any) -> None:
        m = self._map()
        slot = (self._b.current_key, self.namespace)
        acc = m.get(slot)
        function = self._desc.function
        m[slot] = function.add(value, function.create_accumulator() if acc is None else acc)

    def _merge(self, a, b):
        return self._desc.function.merge(a, b)


class WindowListState(WindowScopedState):
    kind = "LIST"

    def get(self) -> list | None:
        v = self._raw()
        return list(v) if v else None

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state '{self.name}' cannot hold None")
        m = self._map()
        slot = (self._b.current_key, self.namespace)
        lst = m.get(slot)
        if lst is None:
            m[slot] = [value]
        else:
            lst.append(value)

    def update(self, values) -> None:
        values = list(values or ())
        if any(v is None for v in values):
            raise ValueError(f"list state '{self.name}' cannot hold None")
        if values:
            self._map()[(self._b.current_key, self.namespace)] = values
        else:
            self.clear()

    def _merge(self, a, b):
        return list(a) + list(b)


SCOPED_STATES = {"VALUE": WindowValueState, "REDUCING": WindowReducingState,
                 "AGGREGATING": WindowAggregatingState, "LIST": WindowListState}


def scoped_state(backend: KeyedStateBackend, desc) -> WindowScopedState:
    cls = SCOPED_STATES.get(desc.kind)
    if cls is None:
        raise TypeError(f"state '{desc.name}': {desc.kind} state cannot be scoped by window")
    return backend.get_state(desc, savepoint_types.TIME_WINDOW, cls)


# =============================================================================================
# the 'window-timers' timer service


class WindowTimers:
    """Event- and processing-time timers (timestamp, key, window) per key group, in the backend's
    ``timer_services['window-timers']`` (so they are snapshotted and rescaled with it)."""

    def __init__(self, backend: KeyedStateBackend, where: str):
        self._b = backend
        entry = backend.timer_services.get(TIMER_SERVICE)
        if entry is None:
            entry = backend.timer_services[TIMER_SERVICE] = (savepoint_types.TIME_WINDOW, {})
        elif entry[0] != savepoint_types.TIME_WINDOW:
            raise StateMigrationError(f"{where}: timers '{TIMER_SERVICE}' were restored with namespace "
                                      f"{entry[0].name}, the window operator uses TimeWindow")
        self._sets = entry[1]
        self._seq = itertools.count()
        self._heaps: dict[str, list] = {}
        for kind in ("event", "processing"):
            heap = self._heaps[kind] = []
            for kg, timers in self._sets.setdefault(kind, {}).items():
                for ts, key, window in timers:
                    heap.append((ts, next(self._seq), kg, key, TimeWindow(*window)))
            heapq.heapify(heap)

    def register(self, kind: str, ts: int, window: TimeWindow) -> None:
        b = self._b
        s = self._sets[kind].setdefault(b.current_kg, set())
        entry = (int(ts), b.current_key, window)
        if entry not in s:
            s.add(entry)
            heapq.heappush(self._heaps[kind], (entry[0], next(self._seq), b.current_kg, b.current_key, window))

    def delete(self, kind: str, ts: int, window: TimeWindow) -> None:
        s = self._sets[kind].get(self._b.current_kg)
        if s:
            s.discard((int(ts), self._b.current_key, window))

    def next(self, kind: str) -> int | None:
        heap = self._heaps[kind]
        sets = self._sets[kind]
        while heap:
            ts, _, kg, key, window = heap[0]
            if (ts, key, window) in sets.get(kg, ()):
                return ts
            heapq.heappop(heap)
        return None

    def pop_due(self, kind: str, until: int):
        """(timestamp, key group, key, window) of the timers due at ``until``, removed; timers
        registered meanwhile that are due come too."""
        heap = self._heaps[kind]
        sets = self._sets[kind]
        while heap and heap[0][0] <= until:
            ts, _, kg, key, window = heapq.heappop(heap)
            s = sets.get(kg)
            if s is not None and (ts, key, window) in s:
                s.discard((ts, key, window))
                yield ts, kg, key, window


# =============================================================================================
# contexts


class TriggerContext:
    """What a trigger gets: timers and per-window state of the current key and window."""

    def __init__(self, op: "WindowOperator"):
        self._op = op
        self.window: TimeWindow | None = None
        self.merged_windows: list[TimeWindow] = []

    def get_current_watermark(self) -> int:
        return self._op.current_watermark

    def get_current_processing_time(self) -> int:
        return self._op.info.clock.now_ms()

    def register_event_time_timer(self, time: int) -> None:
        self._op.timers.register("event", time, self.window)

    def register_processing_time_timer(self, time: int) -> None:
        self._op.timers.register("processing", time, self.window)

    def delete_event_time_timer(self, time: int) -> None:
        self._op.timers.delete("event", time, self.window)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.timers.delete("processing", time, self.window)

    def get_partitioned_state(self, descriptor):
        state = scoped_state(self._op.keyed_backend, descriptor)
        state.namespace = self.window
        return state

    def merge_partitioned_state(self, descriptor) -> None:
        if self.merged_windows:
            scoped_state(self._op.keyed_backend, descriptor).merge_namespaces(self.window, self.merged_windows)


class WindowContext:
    """What a ProcessWindowFunction gets."""

    def __init__(self, op: "WindowOperator"):
        self._op = op
        self._window: TimeWindow | None = None

    def window(self) -> TimeWindow:
        return self._window

    def current_processing_time(self) -> int:
        return self._op.info.clock.now_ms()

    def current_watermark(self) -> int:
        return self._op.current_watermark

    def global_state(self) -> KeyedStateStore:
        """Keyed state of the current key, shared by all its windows."""
        return KeyedStateStore(self._op.keyed_backend)

    def window_state(self) -> "PerWindowStateStore":
        """Keyed state of the current key in this window (clear it in ``clear(context)``)."""
        return PerWindowStateStore(self._op.keyed_backend, self._window)


class PerWindowStateStore:
    """State in the namespace of one window: value, list, reducing and aggregating state."""

    def __init__(self, backend: KeyedStateBackend, window: TimeWindow):
        self._b = backend
        self._window = window

    def _scoped(self, descriptor):
        state = scoped_state(self._b, descriptor)
        state.namespace = self._window
        return state

    get_state = get_list_state = get_reducing_state = get_aggregating_state = _scoped

    def get_current_key(self) -> Any:
        return self._op.keyed_backend.current_key


# =============================================================================================
# the operator


class WindowOperator(StreamOperator):
    keyed = True

    def initialize_state(self, restore, restored_checkpoint_id) -> None:
        super().initialize_state(restore, restored_checkpoint_id)
        spec: WindowSpec = self.function
        self.spec = spec
        b = self.keyed_backend
        where = f"operator {self.node.display} ({self.info.subtask + 1}/{self.info.parallelism})"
        self.timers = self.timer_service = WindowTimers(b, where)
        self.contents = scoped_state(b, spec.contents)
        self.window_sets = (b.get_state(ListStateDescriptor(MERGING_WINDOW_SET, WINDOW_SET_TYPE))
                            if spec.assigner.is_merging else None)
        self.trigger_ctx = TriggerContext(self)
        self.window_ctx = WindowContext(self)
        self.late_records_dropped = 0
        event_time = spec.assigner.is_event_time
        self._kind = "event" if event_time else "processing"  # of the cleanup timers
        self._lateness = spec.allowed_lateness if event_time else None

    def open(self) -> None:
        for function in self.spec.functions:
            if isinstance(function, Function):
                function.set_runtime_context(self.runtime_context)
                function.open(self.runtime_context)
        self.bind()

    def close(self) -> None:
        for function in self.spec.functions:
            if isinstance(function, Function):
                function.close()

    # -- times -----------------------------------------------------------------------------
    def _cleanup_time(self, window: TimeWindow) -> int:
        """When the state of ``window`` goes: its end (- 1) plus the allowed lateness (event time)."""
        if self._lateness is not None:
            return min(window[1] - 1 + self._lateness, LONG_MAX)
        return window[1] - 1

    def _is_window_late(self, window: TimeWindow) -> bool:
        return self.spec.assigner.is_event_time and self._cleanup_time(window) <= self.current_watermark

    def _register_cleanup_timer(self, window: TimeWindow) -> None:
        t = self._cleanup_time(window)
        if t != LONG_MAX:
            self.timers.register(self._kind, t, window)

    def _delete_cleanup_timer(self, window: TimeWindow) -> None:
        t = self._cleanup_time(window)
        if t != LONG_MAX:
            self.timers.delete(self._kind, t, window)

    # -- elements ----------------------------------------------------------------------------
    def bind(self) -> None:
        select = self.node.key_selector
        set_key = self.keyed_backend.set_current_key
        assign = self.spec.assigner.assign_windows
        ctx = self.window_ctx
        on_element = self._merging_element if self.spec.assigner.is_merging else self._element

        def record(ts, value):
            set_key(select(value))
            on_element(ts, value, assign(value, ts, ctx))

        self.process_record = record

    def _on_trigger_element(self, value, ts, window: TimeWindow):
        self.trigger_ctx.window = window
        return self.spec.trigger.on_element(value, ts, window, self.trigger_ctx)

    def _element(self, ts, value, windows) -> None:
        contents = self.contents
        cleanup_time = self._cleanup_time
        watermark = self.current_watermark
        event_time = self.spec.assigner.is_event_time
        skipped = True
        for window in windows:
            cleanup = cleanup_time(window)
            if event_time and cleanup <= watermark:  # a late window
                continue
            skipped = False
            contents.namespace = window
            contents.add(value)
            result = self._on_trigger_element(value, ts, window)
            if result.is_fire or result.is_purge:
                self._after_trigger(result, window, window)
            if cleanup != LONG_MAX:
                self.timers.register(self._kind, cleanup, window)
        if skipped and self._is_element_late(ts):
            self._late(ts, value)

    def _late(self, ts, value) -> None:
        if self.spec.late_tag is not None:
            self.emit_side(self.spec.late_tag, ts, value)
        else:
            self.late_records_dropped += 1

    def _is_element_late(self, ts) -> bool:
        return (self.spec.assigner.is_event_time and ts is not None
                and ts + self.spec.allowed_lateness <= self.current_watermark)

    def _after_trigger(self, result, window: TimeWindow, state_window: TimeWindow) -> None:
        contents = self.contents
        if result.is_fire:
            contents.namespace = state_window
            acc = contents.get()
            if acc is not None:
                self._emit_window(window, acc)
        if result.is_purge:
            contents.namespace = state_window
            contents.clear()

    def _emit_window(self, window: TimeWindow, acc) -> None:
        elements = acc if self.spec.contents.kind == "LIST" else [acc]
        ctx = self.window_ctx
        ctx._window = window
        out = self.spec.process(self.keyed_backend.current_key, ctx, elements)
        if out is not None:
            emit = self.emit
            ts = window.max_timestamp()
            for x in out:
                emit(ts, x)

    # -- merging windows (sessions) ----------------------------------------------------------
    def _load_window_set(self) -> dict:
        return {TimeWindow(*w): TimeWindow(*s) for w, s in self.window_sets.get()}

    def _persist_window_set(self, mapping: dict, initial: dict) -> None:
        if mapping != initial:
            self.window_sets.update(list(mapping.items()))

    def _merging_element(self, ts, value, windows) -> None:
        mapping = self._load_window_set()
        initial = dict(mapping)
        contents = self.contents
        skipped = True
        for window in windows:
            actual = self._add_window(mapping, window)
            if self._is_window_late(actual):
                mapping.pop(actual, None)
                continue
            skipped = False
            state_window = mapping.get(actual)
            if state_window is None:
                raise RuntimeError(f"window {actual} is not in the merging window set")
            contents.namespace = state_window
            contents.add(value)
            result = self._on_trigger_element(value, ts, actual)
            self._after_trigger(result, actual, state_window)
            self._register_cleanup_timer(actual)
        if skipped and self._is_element_late(ts):
            self._late(ts, value)
        self._persist_window_set(mapping, initial)

    def _add_window(self, mapping: dict, new: TimeWindow) -> TimeWindow:
        """Adds ``new`` to the window set, merging (Flink's ``MergingWindowSet.addWindow``);
        returns the window ``new`` ended up in."""
        merges = self.spec.assigner.merge_windows(list(mapping) + [new])
        result_window = new
        merged_new = False
        for merge_result, merged in merges:
            merged = list(merged)
            if new in merged:
                merged.remove(new)
                merged_new = True
                result_window = merge_result
            state_window = mapping[merged[0]]
            merged_state_windows = [s for s in (mapping.pop(m, None) for m in merged) if s is not None]
            mapping[merge_result] = state_window
            if state_window in merged_state_windows:
                merged_state_windows.remove(state_window)
            if not (merge_result in merged and len(merged) == 1):
                self._merge(merge_result, merged, state_window, merged_state_windows)
        if not merges or (result_window == new and not merged_new):
            mapping[result_window] = result_window
        return result_window

    def _merge(self, result: TimeWindow, merged: list, state_window: TimeWindow, merged_state_windows: list) -> None:
        if self.spec.assigner.is_event_time and self._cleanup_time(result) <= self.current_watermark:
            raise RuntimeError(f"The end timestamp of an event-time window cannot become earlier than the current "
                               f"watermark by merging. Current watermark: {self.current_watermark} window: {result}")
        if not self.spec.assigner.is_event_time and result.max_timestamp() <= self.info.clock.now_ms():
            raise RuntimeError(f"The end timestamp of a processing-time window cannot become earlier than the "
                               f"current processing time by merging. Window: {result}")
        ctx = self.trigger_ctx
        ctx.window = result
        ctx.merged_windows = merged
        self.spec.trigger.on_merge(result, ctx)
        ctx.merged_windows = []
        for window in merged:
            ctx.window = window
            self.spec.trigger.clear(window, ctx)
            self._delete_cleanup_timer(window)
        self.contents.merge_namespaces(state_window, merged_state_windows)

    # -- timers ------------------------------------------------------------------------------
    def process_watermark(self, wm: int) -> None:
        self.current_watermark = wm
        self._fire("event", wm)
        self.emit_watermark(wm)

    def next_processing_timer(self) -> int | None:
        return self.timers.next("processing")

    def on_processing_time(self, now: int) -> None:
        self._fire("processing", now)

    def _fire(self, kind: str, until: int) -> None:
        b = self.keyed_backend
        trigger = self.spec.trigger
        ctx = self.trigger_ctx
        cleans = (kind == "event") == self.spec.assigner.is_event_time
        for ts, kg, key, window in self.timers.pop_due(kind, until):
            b.current_key, b.current_kg = key, kg
            mapping = initial = None
            if self.window_sets is not None:
                mapping = self._load_window_set()
                initial = dict(mapping)
                state_window = mapping.get(window)
                if state_window is None:
                    continue  # a timer of a window merged away
            else:
                state_window = window
            ctx.window = window
            if kind == "event":
                result = trigger.on_event_time(ts, window, ctx)
            else:
                result = trigger.on_processing_time(ts, window, ctx)
            self._after_trigger(result, window, state_window)
            if cleans and ts == self._cleanup_time(window):
                self._clear_all_state(window, state_window, mapping)
            if mapping is not None:
                self._persist_window_set(mapping, initial)

    def _clear_all_state(self, window: TimeWindow, state_window: TimeWindow, mapping: dict | None) -> None:
        self.contents.namespace = state_window
        self.contents.clear()
        self.trigger_ctx.window = window
        self.spec.trigger.clear(window, self.trigger_ctx)
        clear = getattr(self.spec.window_function, "clear", None)
        if callable(clear):
            self.window_ctx._window = window
            clear(self.window_ctx)
        if mapping is not None:
            mapping.pop(window, None)


def create_operator(node: StreamNode) -> StreamOperator:
    """The operator of a stream node: the window operator, else a two-input or a one-input operator."""
    if node.kind == "window":
        return WindowOperator(node)
    return create_stream_operator(node)


__all__ = ["WindowOperator", "WindowTimers", "create_operator", "scoped_state"]
