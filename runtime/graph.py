"""The stream graph and the job graph: operator nodes, the edges between them and how an edge
partitions records, and the operator chains a job runs as tasks.

Below both the DataStream API (which adds nodes and edges) and execution (which deploys chains
and partitions records along edges); it imports neither.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from ..savepoint.errors import FStateError, InvalidArgumentError
from ..savepoint import types as savepoint_types
from ..savepoint.types.hashing import default_max_parallelism, key_group_range, operator_id_for_uid


class Partitioning(enum.Enum):
    """How an edge distributes the records of an upstream subtask over the downstream subtasks."""

    FORWARD = "forward"      # subtask i to subtask i (equal parallelism)
    REBALANCE = "rebalance"  # round robin
    HASH = "hash"            # by key group of the record's key (key_by)
    BROADCAST = "broadcast"  # every record to every subtask


@dataclass(eq=False)
class Edge:
    source: "StreamNode"
    target: "StreamNode"
    partitioning: Partitioning
    key_selector: Callable | None = None
    key_type: savepoint_types.TypeInfo | None = None
    #: which input of a two-input operator the edge feeds (0: first, 1: second), as Flink's typeNumber
    type_number: int = 0
    #: the OutputTag of a side output this edge carries (None: the main output)
    side_tag: Any = None


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
    key_type: savepoint_types.TypeInfo | None = None
    output_type: savepoint_types.TypeInfo | None = None
    chaining: bool = True
    #: start_new_chain(): never chained to its input (what follows may chain to it)
    chain_head: bool = False
    #: the MapStateDescriptors of a broadcast-pattern operator's broadcast state
    broadcast_descriptors: tuple = ()
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

    @property
    def is_source(self) -> bool:
        return self.kind == "source"

    def key_group_range(self, subtask: int) -> tuple[int, int]:
        return key_group_range(subtask, self.resolved_parallelism, self.resolved_max_parallelism)


class StreamGraph:
    """The operators of a job in creation order (inputs come first) and their uids."""

    def __init__(self) -> None:
        self.nodes: list[StreamNode] = []
        self._uids: dict[str, StreamNode] = {}

    def add_node(self, kind: str, name: str, function: Any,
                 output_type: savepoint_types.TypeInfo | None = None) -> StreamNode:
        node = StreamNode(len(self.nodes), kind, name, function, output_type=output_type)
        self.nodes.append(node)
        return node

    def connect(self, source: StreamNode, target: StreamNode, partitioning: Partitioning, key_selector=None,
                key_type=None, type_number: int = 0, side_tag: Any = None) -> Edge:
        edge = Edge(source, target, partitioning, key_selector, key_type, type_number, side_tag)
        source.outputs.append(edge)
        target.inputs.append(edge)
        return edge

    def claim_uid(self, uid: str, node: StreamNode) -> None:
        """Reserve ``uid`` for ``node``; a uid names one operator only."""
        if not uid:
            raise InvalidArgumentError("a uid must not be empty")
        other = self._uids.get(uid)
        if other is not None and other is not node:
            raise InvalidArgumentError(f"uid '{uid}' is used by two operators")
        if node.uid is not None and node.uid != uid:
            self._uids.pop(node.uid, None)
        self._uids[uid] = node


# ---------------------------------------------------------------------------------------------
# the job graph: operator chains


@dataclass(eq=False)
class Chain:
    """Operators connected forward with equal parallelism, run by one task per subtask."""

    id: int
    nodes: list[StreamNode]

    @property
    def head(self) -> StreamNode:
        return self.nodes[0]

    @property
    def tail(self) -> StreamNode:
        return self.nodes[-1]

    @property
    def parallelism(self) -> int:
        return self.head.resolved_parallelism

    @property
    def is_source(self) -> bool:
        return self.head.is_source

    @property
    def name(self) -> str:
        return " -> ".join(n.name for n in self.nodes)


def build_chains(nodes: list[StreamNode], default_parallelism: int, env_max_parallelism: int | None) -> list[Chain]:
    """Resolve every node's parallelism and max parallelism, turn forward edges between unequal
    parallelisms into rebalance edges, and chain what can be chained."""
    for n in nodes:
        n.resolved_parallelism = n.parallelism or default_parallelism
        maxp = n.max_parallelism or env_max_parallelism or default_max_parallelism(n.resolved_parallelism)
        if n.resolved_parallelism > maxp:
            raise FStateError(f"operator {n.display}: parallelism {n.resolved_parallelism} exceeds its max "
                              f"parallelism {maxp}")
        n.resolved_max_parallelism = maxp
    for n in nodes:
        for e in n.outputs:
            if (e.partitioning == Partitioning.FORWARD
                    and e.source.resolved_parallelism != e.target.resolved_parallelism):
                e.partitioning = Partitioning.REBALANCE
    chains: list[Chain] = []
    chain_of: dict[int, Chain] = {}
    for n in nodes:  # nodes are in creation order: inputs come first
        prev = None
        if len(n.inputs) == 1 and not n.is_source:
            e = n.inputs[0]
            up = e.source
            if (e.partitioning == Partitioning.FORWARD and e.side_tag is None and len(up.outputs) == 1
                    and up.chaining and n.chaining and not n.chain_head
                    and up.resolved_parallelism == n.resolved_parallelism):
                prev = chain_of[up.id]
        if prev is not None and prev.tail is n.inputs[0].source:
            prev.nodes.append(n)
            chain_of[n.id] = prev
        else:
            c = Chain(len(chains), [n])
            chains.append(c)
            chain_of[n.id] = c
    return chains


__all__ = ["Chain", "Edge", "Partitioning", "StreamGraph", "StreamNode", "build_chains"]
