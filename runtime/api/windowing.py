"""Windows (the user API): ``key_by(...).window(assigner)`` → :class:`WindowedStream` with
``reduce`` / ``aggregate`` / ``process`` / ``apply``, window assigners, triggers and window
functions, shaped as Flink's (and PyFlink's) DataStream window API.

Windows are :class:`TimeWindow` (start inclusive, end exclusive; results carry the timestamp
``end - 1``). Assigners: :class:`TumblingEventTimeWindows`, :class:`SlidingEventTimeWindows`,
:class:`EventTimeSessionWindows` (merging) and their processing-time twins. Triggers:
:class:`EventTimeTrigger`, :class:`ProcessingTimeTrigger`, :class:`CountTrigger`,
:class:`PurgingTrigger`, or a :class:`Trigger` of your own. The operator running them is
``window_operator.WindowOperator``; its state has the layout of Flink's ``WindowOperator``.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple

from ...savepoint import types as savepoint_types
from .callables import call_of
from .functions import Function
from ..state.keyed_backend import AggregatingStateDescriptor, ListStateDescriptor, ReducingStateDescriptor, StateDescriptor

LONG_MAX = (1 << 63) - 1


def to_millis(duration: int | datetime.timedelta) -> int:
    """Milliseconds of an int (ms) or a ``datetime.timedelta`` (Flink takes ``Duration``)."""
    if isinstance(duration, datetime.timedelta):
        return duration // datetime.timedelta(milliseconds=1)
    if isinstance(duration, bool) or not isinstance(duration, int):
        raise TypeError(f"a duration is milliseconds (int) or a datetime.timedelta, not {duration!r}")
    return duration


class TimeWindow(NamedTuple):
    """A window of time ``[start, end)``; a tuple, as the format core reads Flink's TimeWindow."""

    start: int
    end: int

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))


def window_start(timestamp: int, offset: int, size: int) -> int:
    """The start of the window of ``size`` (aligned to ``offset``) holding ``timestamp``."""
    return timestamp - (timestamp - offset) % size


def merge_time_windows(windows: Iterable[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
    """Overlapping windows merged (Flink's ``TimeWindow.mergeWindows``): (result, merged windows)
    for every group of two or more."""
    groups: list[tuple[TimeWindow, dict[TimeWindow, None]]] = []
    for w in sorted(windows):
        if groups and groups[-1][0].intersects(w):
            cover, members = groups[-1]
            members[w] = None  # a set, as Flink's: a window twice is one window
            groups[-1] = (cover.cover(w), members)
        else:
            groups.append((w, {w: None}))
    return [(cover, list(members)) for cover, members in groups if len(members) > 1]


# =============================================================================================
# triggers


class TriggerResult(enum.Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    def __init__(self, fire: bool, purge: bool):
        self.is_fire = fire
        self.is_purge = purge


class Trigger:
    """When a window's result is emitted. ``ctx`` registers timers (``register_event_time_timer``,
    ``register_processing_time_timer``, ``delete_*``), gives ``get_current_watermark()``,
    ``get_current_processing_time()`` and per-window state (``get_partitioned_state(descriptor)``;
    in ``on_merge`` also ``merge_partitioned_state(descriptor)``)."""

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow, ctx) -> TriggerResult:
        raise NotImplementedError

    def on_processing_time(self, time: int, window: TimeWindow, ctx) -> TriggerResult:
        raise NotImplementedError

    def on_event_time(self, time: int, window: TimeWindow, ctx) -> TriggerResult:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: TimeWindow, ctx) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    def clear(self, window: TimeWindow, ctx) -> None:
        pass


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (at once for a window already past it)."""

    def on_element(self, element, timestamp, window, ctx):
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window, ctx) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> "EventTimeTrigger":
        return EventTimeTrigger()


class ProcessingTimeTrigger(Trigger):
    """Fires when the processing time reaches the window's end."""

    def on_element(self, element, timestamp, window, ctx):
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window, ctx) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())

    @staticmethod
    def create() -> "ProcessingTimeTrigger":
        return ProcessingTimeTrigger()


def _sum(a: int, b: int) -> int:
    return a + b


class CountTrigger(Trigger):
    """Fires every ``max_count`` elements of a window (Flink's state: ReducingState ``count``, Long)."""

    def __init__(self, max_count: int):
        self.max_count = int(max_count)
        self.descriptor = ReducingStateDescriptor("count", _sum, savepoint_types.LONG)

    @staticmethod
    def of(max_count: int) -> "CountTrigger":
        return CountTrigger(max_count)

    def on_element(self, element, timestamp, window, ctx):
        count = ctx.get_partitioned_state(self.descriptor)
        count.add(1)
        if count.get() >= self.max_count:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window, ctx) -> None:
        ctx.merge_partitioned_state(self.descriptor)

    def clear(self, window, ctx) -> None:
        ctx.get_partitioned_state(self.descriptor).clear()


class PurgingTrigger(Trigger):
    """Another trigger whose every FIRE becomes FIRE_AND_PURGE."""

    def __init__(self, nested: Trigger):
        self.nested = nested

    @staticmethod
    def of(nested: Trigger) -> "PurgingTrigger":
        return PurgingTrigger(nested)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire else result

    def on_element(self, element, timestamp, window, ctx):
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time, window, ctx):
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time, window, ctx):
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window, ctx) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window, ctx) -> None:
        self.nested.clear(window, ctx)


# =============================================================================================
# assigners


class WindowAssigner:
    """Assigns an element the windows it belongs to; ``ctx.current_processing_time()``."""

    is_event_time = True
    is_merging = False

    def assign_windows(self, element: Any, timestamp: int | None, ctx) -> list[TimeWindow]:
        raise NotImplementedError

    def get_default_trigger(self) -> Trigger:
        return EventTimeTrigger() if self.is_event_time else ProcessingTimeTrigger()

    def _event_timestamp(self, timestamp: int | None) -> int:
        if timestamp is None:
            raise RuntimeError("Record has no timestamp (= no timestamp marker). Is the time characteristic set to "
                               "'ProcessingTime', or did you forget to call "
                               "'DataStream.assign_timestamps_and_watermarks(...)'?")
        return timestamp


class _Tumbling(WindowAssigner):
    def __init__(self, size: int | datetime.timedelta, offset: int | datetime.timedelta = 0):
        self.size = to_millis(size)
        self.offset = to_millis(offset)
        if self.size <= 0 or abs(self.offset) >= self.size:
            raise ValueError("tumbling windows need 0 < size and |offset| < size")

    @classmethod
    def of(cls, size, offset=0):
        return cls(size, offset)

    def _windows(self, timestamp: int) -> list[TimeWindow]:
        start = window_start(timestamp, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size})"


class TumblingEventTimeWindows(_Tumbling):
    def assign_windows(self, element, timestamp, ctx):
        return self._windows(self._event_timestamp(timestamp))


class TumblingProcessingTimeWindows(_Tumbling):
    is_event_time = False

    def assign_windows(self, element, timestamp, ctx):
        return self._windows(ctx.current_processing_time())


class _Sliding(WindowAssigner):
    def __init__(self, size, slide, offset=0):
        self.size = to_millis(size)
        self.slide = to_millis(slide)
        self.offset = to_millis(offset)
        if self.size <= 0 or self.slide <= 0 or abs(self.offset) >= self.slide:
            raise ValueError("sliding windows need 0 < size, 0 < slide and |offset| < slide")

    @classmethod
    def of(cls, size, slide, offset=0):
        return cls(size, slide, offset)

    def _windows(self, timestamp: int) -> list[TimeWindow]:
        out = []
        start = window_start(timestamp, self.offset, self.slide)
        while start > timestamp - self.size:
            out.append(TimeWindow(start, start + self.size))
            start -= self.slide
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide})"


class SlidingEventTimeWindows(_Sliding):
    def assign_windows(self, element, timestamp, ctx):
        return self._windows(self._event_timestamp(timestamp))


class SlidingProcessingTimeWindows(_Sliding):
    is_event_time = False

    def assign_windows(self, element, timestamp, ctx):
        return self._windows(ctx.current_processing_time())


class _Session(WindowAssigner):
    """Session windows: each element opens ``[t, t + gap)``; overlapping windows merge."""

    is_merging = True

    def __init__(self, gap):
        self.gap = to_millis(gap)
        if self.gap <= 0:
            raise ValueError("the session gap must be positive")

    @classmethod
    def with_gap(cls, gap):
        return cls(gap)

    def merge_windows(self, windows: Iterable[TimeWindow]) -> list[tuple[TimeWindow, list[TimeWindow]]]:
        return merge_time_windows(windows)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gap})"


class EventTimeSessionWindows(_Session):
    def assign_windows(self, element, timestamp, ctx):
        t = self._event_timestamp(timestamp)
        return [TimeWindow(t, t + self.gap)]


class ProcessingTimeSessionWindows(_Session):
    is_event_time = False

    def assign_windows(self, element, timestamp, ctx):
        t = ctx.current_processing_time()
        return [TimeWindow(t, t + self.gap)]


# =============================================================================================
# window functions


class ProcessWindowFunction(Function):
    """``process(key, context, elements)`` yields the results of a window; ``context.window()``,
    ``current_watermark()``, ``current_processing_time()``, ``global_state()`` (keyed state),
    ``window_state()`` (keyed state of this window; ``clear(context)`` runs when the window goes)."""

    def process(self, key: Any, context, elements: Iterable[Any]) -> Iterable[Any] | None:
        raise NotImplementedError

    def clear(self, context) -> None:
        pass


class WindowFunction(Function):
    """``apply(key, window, inputs)`` yields the results of a window."""

    def apply(self, key: Any, window: TimeWindow, inputs: Iterable[Any]) -> Iterable[Any] | None:
        raise NotImplementedError


def _pass_through(key, context, elements):
    yield from elements


def _as_process(function: Any, window_function: bool = False) -> Callable:
    """A ProcessWindowFunction's ``process``, or a WindowFunction's ``apply`` (a plain callable
    given to ``apply()``: ``f(key, window, inputs)``) adapted to it."""
    if function is None:
        return _pass_through
    if isinstance(function, WindowFunction) or window_function or (
            not hasattr(function, "process") and hasattr(function, "apply")):
        apply = call_of(function, "apply")
        return lambda key, context, elements: apply(key, context.window(), elements)
    return call_of(function, "process")


@dataclass
class WindowSpec:
    """What the window operator runs: Flink's WindowOperator parameters."""

    assigner: WindowAssigner
    trigger: Trigger
    allowed_lateness: int
    contents: StateDescriptor          # 'window-contents': REDUCING, AGGREGATING or LIST
    window_function: Any               # the user's ProcessWindowFunction / WindowFunction (or None)
    process: Callable                  # (key, context, elements) -> iterable
    functions: tuple                   # user functions to open / close
    late_tag: Any = None               # side_output_late_data(tag): late elements go there


    CONTENTS = "window-contents"


class WindowedStream:
    """``keyed_stream.window(assigner)``: set ``trigger`` / ``allowed_lateness``, then ``reduce``,
    ``aggregate``, ``process`` or ``apply`` makes the window operator."""

    def __init__(self, keyed_stream, assigner: WindowAssigner):
        if not isinstance(assigner, WindowAssigner):
            raise TypeError(f"window() takes a WindowAssigner, not {assigner!r}")
        self._keyed = keyed_stream
        self._assigner = assigner
        self._trigger: Trigger | None = None
        self._lateness = 0
        self._late_tag = None

    def side_output_late_data(self, tag) -> "WindowedStream":
        """Late elements (behind the watermark by more than the allowed lateness) go to the side
        output ``tag`` (an ``OutputTag``; ``result.get_side_output(tag)``) instead of being dropped."""
        self._late_tag = tag
        return self

    def trigger(self, trigger: Trigger) -> "WindowedStream":
        if self._assigner.is_merging and not trigger.can_merge():
            raise TypeError(f"a merging window assigner cannot be used with {type(trigger).__name__}, "
                            "which does not support merging")
        self._trigger = trigger
        return self

    def allowed_lateness(self, lateness: int | datetime.timedelta) -> "WindowedStream":
        ms = to_millis(lateness)
        if ms < 0:
            raise ValueError("the allowed lateness cannot be negative")
        self._lateness = ms
        return self

    def _build(self, name: str, contents: StateDescriptor, window_function, functions, output_type):
        spec = WindowSpec(self._assigner, self._trigger or self._assigner.get_default_trigger(), self._lateness,
                          contents, window_function, _as_process(window_function, name == "apply"),
                          tuple(f for f in functions if f is not None), self._late_tag)
        label = f"Window({self._assigner!r}, {type(spec.trigger).__name__}, {name})"
        return self._keyed.add_operator("window", label, spec, output_type)

    def reduce(self, reduce_function: Any, window_function: Any = None,
               value_type: savepoint_types.TypeInfo | None = None,
               output_type: savepoint_types.TypeInfo | None = None):
        """Incremental reduction (ReducingState ``window-contents`` of ``value_type``); the window
        function, when given, gets the one reduced value."""
        contents = ReducingStateDescriptor(WindowSpec.CONTENTS, reduce_function, value_type)
        return self._build("reduce", contents, window_function, (reduce_function, window_function), output_type)

    def aggregate(self, aggregate_function: Any, window_function: Any = None,
                  accumulator_type: savepoint_types.TypeInfo | None = None,
                  output_type: savepoint_types.TypeInfo | None = None):
        """Incremental aggregation (AggregatingState ``window-contents`` holding the accumulator of
        ``accumulator_type``); emits ``get_result``, or passes it to the window function."""
        contents = AggregatingStateDescriptor(WindowSpec.CONTENTS, aggregate_function, accumulator_type)
        return self._build("aggregate", contents, window_function, (aggregate_function, window_function),
                           output_type)

    def process(self, function: Any, value_type: savepoint_types.TypeInfo | None = None,
                output_type: savepoint_types.TypeInfo | None = None):
        """A ProcessWindowFunction over all elements (ListState ``window-contents`` of ``value_type``)."""
        contents = ListStateDescriptor(WindowSpec.CONTENTS, value_type)
        return self._build("process", contents, function, (function,), output_type)

    def apply(self, function: Any, value_type: savepoint_types.TypeInfo | None = None,
              output_type: savepoint_types.TypeInfo | None = None):
        """A WindowFunction (``apply(key, window, inputs)``) over all elements."""
        contents = ListStateDescriptor(WindowSpec.CONTENTS, value_type)
        return self._build("apply", contents, function, (function,), output_type)


__all__ = [
    "CountTrigger", "EventTimeSessionWindows", "EventTimeTrigger", "ProcessWindowFunction",
    "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger", "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows", "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "WindowAssigner", "WindowFunction", "WindowedStream",
]
