"""A compiled plan matched to an open savepoint (``--plan``): the one binding rule of readers and
``fstate upgrade``. By node ids in operator names and uids, or by the hashes of generated uids
(:func:`.sql_plan.bind`); a savepoint that names no operator (Flink 1.x without uids) by the shape of
each operator's state (:func:`.sql_shape_binding.bind_by_state`)."""

from __future__ import annotations

from .errors import InvalidArgumentError
from .sql_names import describe_node
from .sql_plan import Plan, PlanBinding, bind, load_plan
from .sql_shape_binding import bind_by_state
from .types.hashing import operator_id_for_uid


def bind_savepoint(plan: Plan, savepoint) -> PlanBinding:
    """A plan matched to an open Savepoint: by node ids in names and uids, by the hashes of generated
    uids, or, when no operator has a name, a uid or a generated uid's hash (a Flink 1.x savepoint of a
    job without uids), by the shape of each operator's state (``sql_shape_binding``)."""
    operators = list(savepoint.operators)
    generated = {operator_id_for_uid(node.transformation_uid).hex() for node in plan.nodes.values()}
    if operators and not any(o.name or o.uid or o.uid_hash in generated for o in operators):
        bound = bind_by_state(plan, operators, savepoint.path)
        if not bound:
            raise InvalidArgumentError(f"no operator of {savepoint.path} holds the state of a node of this plan",
                                       plan.path)
        return PlanBinding(plan, {view.uid_hash: describe_node(plan, plan.nodes[node_id])
                                  for node_id, view in bound.items()})
    return bind(plan, operators, savepoint.path)


def load_binding(path: str, savepoint) -> PlanBinding:
    """``--plan PATH`` for an open Savepoint: the plan read, parsed and matched to it."""
    return bind_savepoint(load_plan(path), savepoint)


__all__ = ["bind_savepoint", "load_binding"]
