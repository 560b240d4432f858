"""Functions of two-input operators (``connect``), the broadcast state pattern, and side outputs.

As with the one-input functions, outputs are yielded; ``ctx.output(tag, value)`` emits to a side
output. Contexts:

* ``CoProcessFunction`` / ``KeyedCoProcessFunction``: ``ctx.timestamp()``, ``ctx.output``,
  ``ctx.timer_service()`` and ``ctx.get_current_key()`` (keyed), ``on_timer(ts, ctx)`` (keyed).
* ``BroadcastProcessFunction`` / ``KeyedBroadcastProcessFunction``: ``process_element(value, ctx)``
  reads the broadcast state (``ctx.get_broadcast_state(descriptor)`` is read-only there);
  ``process_broadcast_element(value, ctx)`` may change it, and (keyed) runs
  ``ctx.apply_to_keyed_state(descriptor, function)`` over every key of a keyed state.
"""

from __future__ import annotations

from typing import Any, Iterable

from ...savepoint import types as savepoint_types
from .functions import Function


class OutputTag:
    """Names a side output: ``OutputTag("late", Types.STRING)``. Tags are equal when their names are."""

    def __init__(self, tag_id: str, type_info: savepoint_types.TypeInfo | None = None):
        if not tag_id:
            raise ValueError("an OutputTag needs a non-empty id")
        self.tag_id = tag_id
        self.type_info = type_info

    def get_id(self) -> str:
        return self.tag_id

    def __eq__(self, other) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(self.tag_id)

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"


class CoMapFunction(Function):
    def map1(self, value: Any) -> Any:
        raise NotImplementedError

    def map2(self, value: Any) -> Any:
        raise NotImplementedError


class CoFlatMapFunction(Function):
    def flat_map1(self, value: Any) -> Iterable[Any] | None:
        raise NotImplementedError

    def flat_map2(self, value: Any) -> Iterable[Any] | None:
        raise NotImplementedError


class CoProcessFunction(Function):
    """Two inputs: ``process_element1`` for the first, ``process_element2`` for the second."""

    def process_element1(self, value: Any, ctx) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_element2(self, value: Any, ctx) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedCoProcessFunction(CoProcessFunction):
    """Two keyed inputs sharing keyed state and timers (``connect`` of two keyed streams, or
    ``connect(...).key_by(selector1, selector2)``)."""

    def on_timer(self, timestamp: int, ctx) -> Iterable[Any] | None:
        return None


class BroadcastProcessFunction(Function):
    """A non-keyed stream connected to a broadcast stream."""

    def process_element(self, value: Any, ctx) -> Iterable[Any] | None:
        raise NotImplementedError

    def process_broadcast_element(self, value: Any, ctx) -> Iterable[Any] | None:
        raise NotImplementedError


class KeyedBroadcastProcessFunction(BroadcastProcessFunction):
    """A keyed stream connected to a broadcast stream: keyed state and timers on the keyed side."""

    def on_timer(self, timestamp: int, ctx) -> Iterable[Any] | None:
        return None


__all__ = ["BroadcastProcessFunction", "CoFlatMapFunction", "CoMapFunction", "CoProcessFunction",
           "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction", "OutputTag"]
