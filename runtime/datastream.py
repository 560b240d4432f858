"""The DataStream API: streams, keyed streams and the stream graph they build.

Every call adds a node (an operator) to the environment's graph; ``uid``, ``name``,
``set_parallelism`` and ``set_max_parallelism`` apply to the node the stream came from, as in Flink.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..savepoint.types import TypeInfo
from ..savepoint.types.hashing import key_group_range, operator_id_for_uid
from .functions import call_of

if TYPE_CHECKING:  # pragma: no cover
    from .environment import StreamExecutionEnvironment

FORWARD, REBALANCE, HASH, BROADCAST = "forward", "rebalance", "hash", "broadcast"


@dataclass(eq=False)
class Edge:
    source: "StreamNode"
    target: "StreamNode"
    partitioning: str  # forward | rebalance | hash | broadcast
    key_selector: Callable | None = None
    key_type: TypeInfo | None = None


@dataclass(eq=False)
class StreamNode:
    id: int
    kind: str
    name: str
    function: Any
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    key_selector: Callable | None = None
    key_type: TypeInfo | None = None
    output_type: TypeInfo | None = None
    chaining: bool = True
    inputs: list[Edge] = field(default_factory=list)
    outputs: list[Edge] = field(default_factory=list)
    # resolved when the job graph is built
    resolved_parallelism: int = 0
    resolved_max_parallelism: int = 0

    @property
    def effective_uid(self) -> str:
        """The user's uid, else a generated one (stable as long as the program's shape is)."""
        return self.uid if self.uid is not None else f"__fstate-auto-{self.id}-{self.kind}-{self.name}"

    @property
    def operator_id(self) -> bytes:
        return operator_id_for_uid(self.effective_uid)

    @property
    def display(self) -> str:
        return self.uid if self.uid is not None else f"{self.name} (no uid)"

    def key_group_range(self, subtask: int) -> tuple[int, int]:
        return key_group_range(subtask, self.resolved_parallelism, self.resolved_max_parallelism)


class DataStream:
    def __init__(self, env: "StreamExecutionEnvironment", node: StreamNode):
        self.env = env
        self.node = node
        self._partitioning: str | None = None  # rebalance/broadcast requested for the next edge

    # -- node settings ---------------------------------------------------------------------------
    def uid(self, uid: str) -> "DataStream":
        """The stable id of this operator: state is matched by it on restore."""
        self.env._claim_uid(uid, self.node)
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
        if not 1 <= max_parallelism <= 32768:
            raise ValueError("max parallelism must be within 1..32768")
        self.node.max_parallelism = max_parallelism
        return self

    def disable_chaining(self) -> "DataStream":
        self.node.chaining = False
        return self

    def get_parallelism(self) -> int | None:
        return self.node.parallelism

    # -- partitioning ----------------------------------------------------------------------------
    def rebalance(self) -> "DataStream":
        ds = DataStream(self.env, self.node)
        ds._partitioning = REBALANCE
        return ds

    def broadcast(self) -> "DataStream":
        ds = DataStream(self.env, self.node)
        ds._partitioning = BROADCAST
        return ds

    def key_by(self, key_selector: Callable, key_type: TypeInfo | None = None) -> "KeyedStream":
        """Partition by key. ``key_type`` fixes the key serializer (and with it the key groups);
        without it the type is inferred from the keys (str → String, int → Long, ...)."""
        sel = call_of(key_selector, "get_key")
        return KeyedStream(self.env, self.node, sel, key_type)

    # -- transformations ---------------------------------------------------------------------------
    def _edge_kind(self) -> str:
        return self._partitioning or FORWARD

    def _add(self, kind: str, name: str, function: Any, output_type=None) -> "DataStream":
        node = self.env._new_node(kind, name, function, output_type=output_type)
        self.env._connect(self.node, node, self._edge_kind())
        return DataStream(self.env, node)

    def map(self, func: Any, output_type: TypeInfo | None = None) -> "DataStream":
        return self._add("map", "Map", func, output_type)

    def flat_map(self, func: Any, output_type: TypeInfo | None = None) -> "DataStream":
        return self._add("flat_map", "Flat Map", func, output_type)

    def filter(self, func: Any) -> "DataStream":
        return self._add("filter", "Filter", func)

    def process(self, func: Any, output_type: TypeInfo | None = None) -> "DataStream":
        return self._add("process", "Process", func, output_type)

    def assign_timestamps_and_watermarks(self, strategy: "WatermarkStrategy") -> "DataStream":
        return self._add("timestamps", "Timestamps/Watermarks", strategy)

    def union(self, *others: "DataStream") -> "DataStream":
        """One stream of the elements of all: a pass-through node with several inputs."""
        node = self.env._new_node("map", "Union", lambda v: v)
        for ds in (self, *others):
            self.env._connect(ds.node, node, ds._edge_kind())
        return DataStream(self.env, node)

    def add_sink(self, sink: Any) -> "DataStream":
        """A sink: a SinkFunction (``invoke(value, context)``) or a plain callable."""
        return self._add("sink", "Sink", sink)

    sink_to = add_sink

    def print(self) -> "DataStream":
        return self.add_sink(lambda v, ctx: print(v)).name("Print")


class KeyedStream(DataStream):
    def __init__(self, env, node: StreamNode, key_selector: Callable, key_type: TypeInfo | None):
        super().__init__(env, node)
        self.key_selector = key_selector
        self.key_type = key_type

    def _add(self, kind: str, name: str, function: Any, output_type=None) -> DataStream:
        node = self.env._new_node(kind, name, function, output_type=output_type)
        node.key_selector = self.key_selector
        node.key_type = self.key_type
        self.env._connect(self.node, node, HASH, self.key_selector, self.key_type)
        return DataStream(self.env, node)

    def process(self, func: Any, output_type: TypeInfo | None = None) -> DataStream:
        return self._add("keyed_process", "KeyedProcess", func, output_type)

    def reduce(self, func: Any, value_type: TypeInfo | None = None) -> DataStream:
        """Running reduction per key (state ``_op_state`` of ``value_type``, pickled when None)."""
        return self._add("reduce", "Keyed Reduce", func, value_type)

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


__all__ = ["DataStream", "KeyedStream", "StreamNode", "Edge", "WatermarkStrategy"]
