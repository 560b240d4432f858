"""Connected and broadcast streams: two inputs into one operator.

* ``a.connect(b)`` → ``ConnectedStreams``: ``process(CoProcessFunction)``, ``map(CoMapFunction)``,
  ``flat_map(CoFlatMapFunction)``; ``key_by(selector1, selector2)`` (or connecting two keyed
  streams) makes them keyed: ``process(KeyedCoProcessFunction)`` with keyed state and timers that
  both inputs share.
* ``stream.broadcast(*map_state_descriptors)`` → ``BroadcastStream``; ``keyed.connect(broadcast)``
  or ``stream.connect(broadcast)`` → ``BroadcastConnectedStream`` with
  ``process(KeyedBroadcastProcessFunction | BroadcastProcessFunction)``.

The streams here are ``DataStream``s (or ``KeyedStream``s); the result of ``process``/``map`` is
the DataStream of the new operator (made by the first input's ``stream_of``, so that this module
does not import ``datastream``).
"""

from __future__ import annotations

from typing import Any, Callable

from ...savepoint import types as savepoint_types
from ...savepoint.errors import InvalidArgumentError
from .callables import call_of
from ..graph import Partitioning
from ..state.keyed_backend import MapStateDescriptor


def _is_keyed(stream) -> bool:
    return getattr(stream, "key_selector", None) is not None


def _add_two_input(first, second, kind: str, name: str, function: Any, output_type, key_selectors=None,
                   key_type=None, broadcast_descriptors: tuple = ()):
    """A two-input node fed by ``first`` (input 0) and ``second`` (input 1); keyed inputs are
    hash-partitioned by their selectors with the operator's key type."""
    graph = first.env.graph
    if second.env is not first.env:
        raise InvalidArgumentError("connect(): both streams must belong to the same environment")
    node = graph.add_node(kind, name, function, output_type=output_type)
    node.broadcast_descriptors = tuple(broadcast_descriptors)
    selectors = key_selectors or (None, None)
    if selectors[0] is not None:
        node.key_selector = selectors[0]
        node.key_type = key_type
    for number, (stream, selector) in enumerate(zip((first, second), selectors)):
        if selector is not None:
            graph.connect(stream.node, node, Partitioning.HASH, selector, key_type, type_number=number,
                          side_tag=stream._side_tag)
        else:
            graph.connect(stream.node, node, stream._edge_kind(), type_number=number, side_tag=stream._side_tag)
    return first.stream_of(node)


class ConnectedStreams:
    """Two streams into one operator; keyed when both inputs are keyed."""

    def __init__(self, first, second, key_selectors: tuple[Callable, Callable] | None = None,
                 key_type: savepoint_types.TypeInfo | None = None):
        self.first = first
        self.second = second
        if key_selectors is None and _is_keyed(first) and _is_keyed(second):
            key_selectors = (first.key_selector, second.key_selector)
            key_type = first.key_type or second.key_type
        elif key_selectors is None and (_is_keyed(first) or _is_keyed(second)):
            raise InvalidArgumentError("connect(): either both streams are keyed or neither is "
                                       "(key both, or use ConnectedStreams.key_by(selector1, selector2))")
        self.key_selectors = key_selectors
        self.key_type = key_type

    @property
    def is_keyed(self) -> bool:
        return self.key_selectors is not None

    def get_first_input(self):
        return self.first

    def get_second_input(self):
        return self.second

    def key_by(self, key_selector1: Any, key_selector2: Any,
               key_type: savepoint_types.TypeInfo | None = None) -> "ConnectedStreams":
        """Key both inputs (the keys of both must be of one type: ``key_type`` or inferred)."""
        return ConnectedStreams(self.first, self.second,
                                (call_of(key_selector1, "get_key"), call_of(key_selector2, "get_key")), key_type)

    def _add(self, kind: str, name: str, function: Any, output_type):
        return _add_two_input(self.first, self.second, kind, name, function, output_type, self.key_selectors,
                              self.key_type)

    def process(self, function: Any, output_type: savepoint_types.TypeInfo | None = None):
        """``CoProcessFunction``; on keyed inputs ``KeyedCoProcessFunction`` (keyed state, timers)."""
        if self.is_keyed:
            return self._add("keyed_co_process", "KeyedCoProcess", function, output_type)
        return self._add("co_process", "CoProcess", function, output_type)

    def map(self, function: Any, output_type: savepoint_types.TypeInfo | None = None):
        """``CoMapFunction`` (``map1``/``map2``); keyed state when the inputs are keyed."""
        return self._add("co_map", "CoMap", function, output_type)

    def flat_map(self, function: Any, output_type: savepoint_types.TypeInfo | None = None):
        """``CoFlatMapFunction`` (``flat_map1``/``flat_map2`` yield)."""
        return self._add("co_flat_map", "CoFlatMap", function, output_type)


class BroadcastStream:
    """A stream every subtask of the operator it is connected to receives in full, with the
    broadcast state descriptors that operator holds."""

    def __init__(self, stream, descriptors: tuple[MapStateDescriptor, ...]):
        for d in descriptors:
            if not isinstance(d, MapStateDescriptor):
                raise InvalidArgumentError(f"broadcast(): broadcast state is declared with MapStateDescriptors, "
                                           f"not {d!r}")
        self.stream = stream
        self.env = stream.env
        self.node = stream.node
        self.descriptors = tuple(descriptors)
        self._side_tag = stream._side_tag

    def _edge_kind(self) -> Partitioning:
        return Partitioning.BROADCAST

    def get_broadcast_state_descriptors(self) -> tuple[MapStateDescriptor, ...]:
        return self.descriptors


class BroadcastConnectedStream:
    """A (keyed or non-keyed) stream connected to a ``BroadcastStream``."""

    def __init__(self, first, broadcast: BroadcastStream):
        self.first = first
        self.broadcast = broadcast

    def process(self, function: Any, output_type: savepoint_types.TypeInfo | None = None):
        """``KeyedBroadcastProcessFunction`` after a keyed stream, else ``BroadcastProcessFunction``."""
        if _is_keyed(self.first):
            return _add_two_input(self.first, self.broadcast, "keyed_broadcast_process", "KeyedBroadcastProcess",
                                  function, output_type, (self.first.key_selector, None), self.first.key_type,
                                  self.broadcast.descriptors)
        return _add_two_input(self.first, self.broadcast, "broadcast_process", "BroadcastProcess", function,
                              output_type, None, None, self.broadcast.descriptors)


__all__ = ["BroadcastConnectedStream", "BroadcastStream", "ConnectedStreams"]
