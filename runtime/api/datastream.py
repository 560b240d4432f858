"""The DataStream API: streams, keyed streams and the stream graph they build.

Every call adds a node (an operator) to the environment's graph; ``uid``, ``name``,
``set_parallelism`` and ``set_max_parallelism`` apply to the node the stream came from, as in Flink.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ...savepoint import types as savepoint_types
from ...savepoint.limits import UPPER_MAX_PARALLELISM
from .callables import call_of
from .connected import BroadcastConnectedStream, BroadcastStream, ConnectedStreams
from ..graph import Partitioning, StreamGraph, StreamNode
from .windowing import WindowAssigner, WindowedStream

class GraphOwner(Protocol):
    """What a stream needs of its environment: the graph it adds operators to."""

    graph: StreamGraph


class DataStream:
    def __init__(self, env: GraphOwner, node: StreamNode):
        self.env = env  # the StreamExecutionEnvironment
        self.node = node
        self._partitioning: Partitioning | None = None  # rebalance/broadcast requested for the next edge
        self._side_tag = None  # get_side_output(tag): the next edges carry that side output

    # -- node settings ---------------------------------------------------------------------------
    def uid(self, uid: str) -> "DataStream":
        """The stable id of this operator: state is matched by it on restore."""
        self.env.graph.claim_uid(uid, self.node)
        self.node.uid = uid
        return self

    def name(self, name: str) -> "DataStream":
        self.node.name = name
        return self

    def set_parallelism(self, parallelism: int) -> "DataStream":
        if parallelism < 1:
            raise ValueError("parallelism must be >= 1")
        self.node.parallelism = parallelism
        return self

    def set_max_parallelism(self, max_parallelism: int) -> "DataStream":
        if not 1 <= max_parallelism <= UPPER_MAX_PARALLELISM:
            raise ValueError(f"max parallelism must be within 1..{UPPER_MAX_PARALLELISM}")
        self.node.max_parallelism = max_parallelism
        return self

    def disable_chaining(self) -> "DataStream":
        """Run this operator in a task of its own: chained neither to its input nor to what follows."""
        self.node.chaining = False
        return self

    def start_new_chain(self) -> "DataStream":
        """Begin a new chain here: not chained to its input; operators after it may chain to it."""
        self.node.chain_head = True
        return self

    def get_parallelism(self) -> int | None:
        return self.node.parallelism

    # -- partitioning ----------------------------------------------------------------------------
    def stream_of(self, node: StreamNode) -> "DataStream":
        return DataStream(self.env, node)

    def _repartitioned(self, partitioning: Partitioning) -> "DataStream":
        ds = DataStream(self.env, self.node)
        ds._partitioning = partitioning
        ds._side_tag = self._side_tag
        return ds

    def rebalance(self) -> "DataStream":
        return self._repartitioned(Partitioning.REBALANCE)

    def broadcast(self, *descriptors) -> "DataStream | BroadcastStream":
        """Every element to every subtask of the next operator. With MapStateDescriptors, a
        ``BroadcastStream`` for the broadcast state pattern (``keyed.connect(broadcast_stream)``)."""
        if descriptors:
            return BroadcastStream(self, descriptors)
        return self._repartitioned(Partitioning.BROADCAST)

    def key_by(self, key_selector: Callable, key_type: savepoint_types.TypeInfo | None = None) -> "KeyedStream":
        """Partition by key. ``key_type`` fixes the key serializer (and with it the key groups);
        without it the type is inferred from the keys (str → String, int → Long, ...)."""
        sel = call_of(key_selector, "get_key")
        ks = KeyedStream(self.env, self.node, sel, key_type)
        ks._side_tag = self._side_tag
        return ks

    def connect(self, other: "DataStream | BroadcastStream") -> "ConnectedStreams | BroadcastConnectedStream":
        """Two streams into one operator (``ConnectedStreams``), or this stream with a
        ``BroadcastStream`` (the broadcast state pattern)."""
        if isinstance(other, BroadcastStream):
            return BroadcastConnectedStream(self, other)
        return ConnectedStreams(self, other)

    def get_side_output(self, tag) -> "DataStream":
        """The side output ``tag`` (an ``OutputTag``) of this operator: what its functions emit
        with ``ctx.output(tag, value)``."""
        ds = DataStream(self.env, self.node)
        ds._side_tag = tag
        return ds

    # -- transformations ---------------------------------------------------------------------------
    def _edge_kind(self) -> Partitioning:
        return self._partitioning or Partitioning.FORWARD

    def add_operator(self, kind: str, name: str, function: Any, output_type=None) -> "DataStream":
        node = self.env.graph.add_node(kind, name, function, output_type=output_type)
        self.env.graph.connect(self.node, node, self._edge_kind(), side_tag=self._side_tag)
        return DataStream(self.env, node)

    def map(self, func: Any, output_type: savepoint_types.TypeInfo | None = None) -> "DataStream":
        return self.add_operator("map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: savepoint_types.TypeInfo | None = None) -> "DataStream":
        return self.add_operator("flat_map", "Flat Map", func, output_type)

    def filter(self, func: Any) -> "DataStream":
        return self.add_operator("filter", "Filter", func)

    def process(self, func: Any, output_type: savepoint_types.TypeInfo | None = None) -> "DataStream":
        return self.add_operator("process", "Process", func, output_type)

    def assign_timestamps_and_watermarks(self, strategy: "WatermarkStrategy") -> "DataStream":
        return self.add_operator("timestamps", "Timestamps/Watermarks", strategy)

    def union(self, *others: "DataStream") -> "DataStream":
        """One stream of the elements of all: a pass-through node with several inputs."""
        node = self.env.graph.add_node("map", "Union", lambda v: v)
        for ds in (self, *others):
            self.env.graph.connect(ds.node, node, ds._edge_kind(), side_tag=ds._side_tag)
        return DataStream(self.env, node)

    def add_sink(self, sink: Any) -> "DataStream":
        """A sink: a SinkFunction (``invoke(value, context)``) or a plain callable."""
        return self.add_operator("sink", "Sink", sink)

    sink_to = add_sink

    def print(self) -> "DataStream":
        return self.add_sink(lambda v, ctx: print(v)).name("Print")


class KeyedStream(DataStream):
    def __init__(self, env: GraphOwner, node: StreamNode, key_selector: Callable,
                 key_type: savepoint_types.TypeInfo | None):
        super().__init__(env, node)
        self.key_selector = key_selector
        self.key_type = key_type

    def add_operator(self, kind: str, name: str, function: Any, output_type=None) -> DataStream:
        node = self.env.graph.add_node(kind, name, function, output_type=output_type)
        node.key_selector = self.key_selector
        node.key_type = self.key_type
        self.env.graph.connect(self.node, node, Partitioning.HASH, self.key_selector, self.key_type,
                               side_tag=self._side_tag)
        return DataStream(self.env, node)

    def process(self, func: Any, output_type: savepoint_types.TypeInfo | None = None) -> DataStream:
        return self.add_operator("keyed_process", "KeyedProcess", func, output_type)

    def reduce(self, func: Any, value_type: savepoint_types.TypeInfo | None = None) -> DataStream:
        """Running reduction per key (state ``_op_state`` of ``value_type``, pickled when None)."""
        return self.add_operator("reduce", "Keyed Reduce", func, value_type)

    def window(self, assigner: WindowAssigner) -> WindowedStream:
        """Windows of each key (``TumblingEventTimeWindows.of(1000)``, ...): a WindowedStream."""
        return WindowedStream(self, assigner)

    def uid(self, uid: str):  # pragma: no cover - a KeyedStream is not an operator
        raise TypeError("key_by() does not create an operator; set the uid on the operator after it")


# ---------------------------------------------------------------------------------------------
# event time


class WatermarkStrategy:
    """How event timestamps are assigned and watermarks generated.

    ``WatermarkStrategy.for_bounded_out_of_orderness(500).with_timestamp_assigner(lambda v, ts: v.t)``
    Watermarks (max timestamp - out-of-orderness - 1) are emitted every ``emit_every`` records
    and whenever the task runs out of input.
    """

    def __init__(self, out_of_orderness_ms: int = 0, generates: bool = True, assigner=None, emit_every: int = 100):
        self.out_of_orderness_ms = out_of_orderness_ms
        self.generates = generates
        self.assigner = assigner
        self.emit_every = emit_every

    @staticmethod
    def for_monotonous_timestamps() -> "WatermarkStrategy":
        return WatermarkStrategy(0)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness_ms: int) -> "WatermarkStrategy":
        return WatermarkStrategy(int(max_out_of_orderness_ms))

    @staticmethod
    def no_watermarks() -> "WatermarkStrategy":
        return WatermarkStrategy(0, generates=False)

    def with_timestamp_assigner(self, assigner: Any) -> "WatermarkStrategy":
        fn = call_of(assigner, "extract_timestamp")
        return WatermarkStrategy(self.out_of_orderness_ms, self.generates, fn, self.emit_every)

    def with_emit_every(self, records: int) -> "WatermarkStrategy":
        return WatermarkStrategy(self.out_of_orderness_ms, self.generates, self.assigner, int(records))


__all__ = ["DataStream", "GraphOwner", "KeyedStream", "WatermarkStrategy"]
