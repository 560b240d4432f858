"""Two-input operators: connected streams (co-map, co-flat-map, co-process, keyed co-process) and
the broadcast state pattern (broadcast process, keyed broadcast process).

A two-input operator is always the head of its chain: the task hands records of the channels of
its first input to ``process_record`` and of its second to ``process_record2``. Barriers are
aligned over the channels of both inputs (one input gate), and the watermark is the minimum of
both. Keyed variants hold keyed state and timers (``_timer_state/*_user-timers``) like Flink's
``KeyedCoProcessOperator`` and ``CoBroadcastWithKeyedOperator``; broadcast state is operator state
in BROADCAST mode (a map), registered for every descriptor given to ``broadcast(...)`` and written
by every subtask, as Flink does.
"""

from __future__ import annotations

from typing import Any, Callable

from ..api.callables import call_of
from ..graph import StreamNode
from .datastream import (KeyedProcessOperator, StreamOperator, ProcessContext,
                         create_operator as create_one_input_operator)
from ..state.keyed_backend import MapStateDescriptor


class ReadOnlyBroadcastState:
    """The broadcast state as the element side sees it (Flink's ReadOnlyBroadcastState)."""

    __slots__ = ("_state",)

    def __init__(self, state):
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def items(self) -> list:
        return self._state.items()

    def keys(self) -> list:
        return self._state.keys()

    def values(self) -> list:
        return self._state.values()

    def is_empty(self) -> bool:
        return self._state.is_empty()


class BroadcastProcessContext(ProcessContext):
    """Context of the broadcast pattern's functions: the broadcast state, writable on the
    broadcast side only; ``apply_to_keyed_state`` on the broadcast side of a keyed operator."""

    __slots__ = ("_writable",)

    def __init__(self, op, writable: bool):
        super().__init__(op)
        self._writable = writable

    def get_broadcast_state(self, descriptor: MapStateDescriptor):
        state = self._op.broadcast_states.get(descriptor.name)
        if state is None:
            raise ValueError(f"The requested broadcast state '{descriptor.name}' does not exist: declare its "
                             "descriptor in the stream's broadcast(...) call")
        return state if self._writable else ReadOnlyBroadcastState(state)

    def get_current_key(self):
        if self._writable:
            raise RuntimeError("there is no current key on the broadcast side; use apply_to_keyed_state()")
        return super().get_current_key()

    current_key = property(get_current_key)

    def timer_service(self):
        if self._writable:
            raise RuntimeError("timers can only be registered on the keyed side (process_element, on_timer)")
        return super().timer_service()

    def apply_to_keyed_state(self, descriptor, function: Any) -> None:
        """Call ``function(key, state)`` (or ``function.process(key, state)``) for every key that
        has the keyed state ``descriptor`` in this subtask, with that key current."""
        backend = self._op.keyed_backend
        if backend is None or not self._writable:
            raise RuntimeError("apply_to_keyed_state() is only available in process_broadcast_element of a "
                               "KeyedBroadcastProcessFunction")
        fn = call_of(function, "process")
        state = backend.get_state(descriptor)
        table = backend.tables[descriptor.name]
        saved = backend.current_key, backend.current_kg
        try:
            for kg, entries in list(table.data.items()):
                for key in list(entries):
                    backend.current_key, backend.current_kg = key, kg
                    fn(key, state)
        finally:
            backend.current_key, backend.current_kg = saved


def _emitting(fn: Callable, ctx, emit) -> Callable[[Any, Any], None]:
    """``core(ts, v)`` calling ``fn(v, ctx)`` and emitting what it yields."""

    def core(ts, v):
        ctx.element_timestamp = ts
        out = fn(v, ctx)
        if out is not None:
            for x in out:
                emit(ts, x)

    return core


class TwoInputMixin:
    """Keying per input: records of a keyed input set the current key with that input's selector."""

    def _input_wrap(self, number: int, core: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        select = next((e.key_selector for e in self.node.inputs if e.type_number == number), None)
        if not self.keyed or select is None:
            return core
        set_key = self.keyed_backend.set_current_key

        def keyed_record(ts, v):
            set_key(select(v))
            core(ts, v)

        return keyed_record

    def process_record2(self, ts, value) -> None:  # replaced by bind()
        raise NotImplementedError


class CoMapOperator(TwoInputMixin, StreamOperator):
    def bind(self) -> None:
        emit = self.emit
        for number, method in ((0, "map1"), (1, "map2")):
            fn = getattr(self.function, method)

            def core(ts, v, fn=fn):
                emit(ts, fn(v))

            self._install(number, self._input_wrap(number, core))

    def _install(self, number: int, process) -> None:
        if number == 0:
            self.process_record = process
        else:
            self.process_record2 = process


class CoFlatMapOperator(CoMapOperator):
    def bind(self) -> None:
        emit = self.emit
        for number, method in ((0, "flat_map1"), (1, "flat_map2")):
            fn = getattr(self.function, method)

            def core(ts, v, fn=fn):
                out = fn(v)
                if out is not None:
                    for x in out:
                        emit(ts, x)

            self._install(number, self._input_wrap(number, core))


class CoProcessOperator(TwoInputMixin, StreamOperator):
    timer_service = None

    def bind(self) -> None:
        ctx = self.ctx = ProcessContext(self)
        self.process_record = self._input_wrap(0, _emitting(self.function.process_element1, ctx, self.emit))
        self.process_record2 = self._input_wrap(1, _emitting(self.function.process_element2, ctx, self.emit))


class KeyedCoProcessOperator(TwoInputMixin, KeyedProcessOperator):
    """Keyed state and timers shared by both inputs; ``on_timer`` as in a KeyedProcessFunction."""

    def bind(self) -> None:
        ctx = self.ctx = ProcessContext(self)
        self.process_record = self._input_wrap(0, _emitting(self.function.process_element1, ctx, self.emit))
        self.process_record2 = self._input_wrap(1, _emitting(self.function.process_element2, ctx, self.emit))
        self._on_timer = getattr(self.function, "on_timer", None)


class _BroadcastStates:
    """Registers the broadcast state of every descriptor the broadcast stream declared."""

    broadcast_states: dict

    def _register_broadcast_states(self) -> None:
        self.broadcast_states = {d.name: self.operator_backend.get_broadcast_state(d)
                                 for d in self.node.broadcast_descriptors}

    def _bind_broadcast(self) -> None:
        ctx = self.ctx = BroadcastProcessContext(self, writable=False)
        broadcast_ctx = self.broadcast_ctx = BroadcastProcessContext(self, writable=True)
        self.process_record = self._input_wrap(0, _emitting(self.function.process_element, ctx, self.emit))
        self.process_record2 = _emitting(self.function.process_broadcast_element, broadcast_ctx, self.emit)


class BroadcastProcessOperator(_BroadcastStates, TwoInputMixin, StreamOperator):
    timer_service = None

    def initialize_state(self, restore, restored_checkpoint_id) -> None:
        super().initialize_state(restore, restored_checkpoint_id)
        self._register_broadcast_states()

    def bind(self) -> None:
        self._bind_broadcast()


class KeyedBroadcastProcessOperator(_BroadcastStates, TwoInputMixin, KeyedProcessOperator):
    """Keyed side: keyed state, timers, read-only broadcast state; broadcast side: writable
    broadcast state and ``apply_to_keyed_state``."""

    def initialize_state(self, restore, restored_checkpoint_id) -> None:
        super().initialize_state(restore, restored_checkpoint_id)
        self._register_broadcast_states()

    def bind(self) -> None:
        self._bind_broadcast()
        self._on_timer = getattr(self.function, "on_timer", None)


TWO_INPUT_OPERATORS = {
    "co_map": CoMapOperator, "co_flat_map": CoFlatMapOperator, "co_process": CoProcessOperator,
    "keyed_co_process": KeyedCoProcessOperator, "broadcast_process": BroadcastProcessOperator,
    "keyed_broadcast_process": KeyedBroadcastProcessOperator,
}


def create_operator(node: StreamNode) -> StreamOperator:
    """The operator of ``node``: a two-input operator, else a one-input one."""
    cls = TWO_INPUT_OPERATORS.get(node.kind)
    if cls is None:
        return create_one_input_operator(node)
    op = cls(node)
    if node.key_selector is not None:
        op.keyed = True
    return op


__all__ = ["BroadcastProcessOperator", "CoFlatMapOperator", "CoMapOperator", "CoProcessOperator",
           "KeyedBroadcastProcessOperator", "KeyedCoProcessOperator", "ReadOnlyBroadcastState",
           "TWO_INPUT_OPERATORS", "create_operator"]
