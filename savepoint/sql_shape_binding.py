"""Finding a plan's SQL operators in a savepoint that names none of them: by the shape of their state.

A Flink 1.x savepoint (metadata V4) of a SQL job run without ``table.exec.uid.generation: ALWAYS``
has neither operator names nor uids, and its operator ids are hashes of the job graph, which fstate
does not recompute. What each stateful operator's keyed state declares still tells which plan node
it belongs to: the runtime state names give the operator family (``accState``: a group aggregate,
``window-aggs``: a window aggregate, ``deduplicate-state``, ``left-records``/``right-records``,
``data-state-with-append``, ``sorted-map``: a Top-N), the key serializer gives the key fields' types, and
the stored rows their arity (an accumulator row has one field per accumulator slot of the plan's aggregate
calls, a Top-N's map key is its sort key).

:func:`bind_by_state` pairs operators and nodes when that makes them unique. Operators whose
candidate nodes have identical state shapes (same kind, key, window, accumulators, stored rows
and upstream filters: e.g. one subquery planned twice) hold identical state and are paired in
order; any other ambiguity is refused, naming the operators and nodes.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from .errors import InvalidArgumentError
from .sql_lineage import StateShape, state_shapes
from .sql_names import GROUP_AGGREGATES, WINDOW_AGGREGATES, row_fields
from .sql_plan import Plan
from .types.roles import as_list, as_row_data, without_ttl

_ALIASES = {"STRING": "VARCHAR", "INT": "INTEGER", "BYTES": "VARBINARY", "DEC": "DECIMAL", "NUMERIC": "DECIMAL"}
_FAMILIES = {"accState": "group", "window-aggs": "window", "deduplicate-state": "deduplicate",
             "left-records": "join", "data-state-with-append": "rank", "sorted-map": "rank"}
#: a Top-N's state of the rows by sort key: append-only (AppendOnlyTopN), over an updating input (RetractableTopN)
_RANK_ROWS = ("data-state-with-append", "data-state")


def type_root(t: Any) -> str:
    """The LogicalType root of a plan's field type (its text, or its JSON object)."""
    if isinstance(t, dict):
        return str(t.get("type", "")).upper()
    text = str(t).upper().strip()
    if text.startswith("TIMESTAMP_LTZ") or "WITH LOCAL TIME ZONE" in text:
        return "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
    if "WITH TIME ZONE" in text:
        return "TIMESTAMP_WITH_TIME_ZONE"
    if text.startswith("TIMESTAMP"):
        return "TIMESTAMP_WITHOUT_TIME_ZONE"
    if text.startswith("TIME"):
        return "TIME_WITHOUT_TIME_ZONE"
    word = re.match(r"[A-Z_]+", text)
    root = word.group(0) if word else text
    return _ALIASES.get(root, root)


def _family(kind: str) -> str | None:
    if kind in GROUP_AGGREGATES:
        return "group"
    if kind in WINDOW_AGGREGATES:
        return "window"
    if kind in ("deduplicate", "join", "rank"):
        return kind
    return None


def _row_arity(t) -> int | None:
    row = as_row_data(without_ttl(t))
    return None if row is None else row.arity


def _operator_signature(view) -> tuple[str, tuple[str, ...], dict[str, int | None]] | None:
    """(family, key field roots, arities of the stored rows) of an operator's keyed state."""
    meta = view.keyed_meta if view.has_keyed_state else None
    key = None if meta is None else as_row_data(meta.key_type)
    if key is None or key.types is None:
        return None
    states = {s.name: s for _, s in meta.value_states}
    family = next((f for name, f in _FAMILIES.items() if name in states), None)
    if family is None:
        return None
    arities: dict[str, int | None] = {}
    for name, info in states.items():
        value = info.value_type
        if info.kind == "MAP":
            arities[name] = _row_arity(value.key)
            values = as_list(value.value)  # a multi-row map's value: a list of rows
            arities[name + "#value"] = _row_arity(value.value if values is None else values.element)
        else:
            arities[name] = _row_arity(value)
    return family, tuple(t.root for t in key.types), arities


def _node_fits(shape: StateShape, plan: Plan, signature) -> bool:
    family, key_roots, arities = signature
    if _family(shape.kind) != family:
        return False
    node = shape.node
    inputs = plan.inputs.get(node.id, ())
    first = row_fields(plan.nodes[inputs[0]].spec["outputType"]) if inputs else []
    key_fields = shape.key_names
    by_name = dict(first)
    if tuple(type_root(by_name.get(n, "")) for n in key_fields) != key_roots:
        return False
    if family in ("group", "window"):
        return arities.get("accState" if family == "group" else "window-aggs") == len(shape.accumulators)
    if family == "deduplicate":
        stored = arities.get("deduplicate-state")
        return stored == (len(shape.rows["input"]) if "input" in shape.rows else None)
    if family == "join":
        return (arities.get("left-records") in (None, len(shape.rows["left"]))
                and arities.get("right-records") in (None, len(shape.rows["right"])))
    if family == "rank":
        rows = next(name for name in _RANK_ROWS if name in arities)
        return (arities[rows] in (None, len(shape.rows.get("sort_key", ())))
                and arities.get(rows + "#value") in (None, len(shape.rows.get("input", ()))))
    return False


def _content(shape: StateShape) -> tuple:
    """What makes two nodes' state equal when they see the same input."""
    return (shape.identity, tuple(a.identity for a in shape.accumulators), tuple(sorted(shape.rows.items())),
            shape.views, shape.conditions)


def bind_by_state(plan: Plan, operators: Iterable[Any], source: str | None = None) -> dict[int, Any]:
    """Plan node id → the operator (a loader.OperatorView) holding its state, for the operators with
    keyed state of a SQL operator family. Ambiguity that could pair a node with the wrong state is
    an InvalidArgumentError naming the plan."""
    shapes = state_shapes(plan)
    candidates: dict[str, tuple[Any, list[StateShape]]] = {}
    for view in operators:
        signature = _operator_signature(view)
        if signature is None:
            continue
        fits = [s for s in shapes.values() if _node_fits(s, plan, signature)]
        if not fits:
            raise InvalidArgumentError(f"operator {view.display_name} of {source or 'the savepoint'} holds the state "
                                       f"of a SQL {signature[0]} that no node of this plan has: it is not the plan "
                                       "of this job", plan.path)
        candidates[view.uid_hash] = (view, fits)
    bound: dict[int, Any] = {}
    progress = True
    while progress:  # pairs that are unique once the pairs found so far are taken out
        progress = False
        for uid_hash, (view, fits) in list(candidates.items()):
            fits = [f for f in fits if f.node.id not in bound]
            candidates[uid_hash] = (view, fits)
            if len(fits) == 1:
                bound[fits[0].node.id] = view
                del candidates[uid_hash]
                progress = True
            elif not fits:
                raise InvalidArgumentError(f"operator {view.display_name} of {source or 'the savepoint'} holds the "
                                           "state of a SQL node that other operators' state already matches: it "
                                           "is not the plan of this job", plan.path)
    groups: dict[tuple, list[tuple[Any, list[StateShape]]]] = {}
    for view, fits in candidates.values():
        groups.setdefault(tuple(sorted(f.node.id for f in fits)), []).append((view, fits))
    for node_ids, members in sorted(groups.items()):
        fits = sorted(members[0][1], key=lambda f: f.node.id)
        if len(members) == len(node_ids) and len({_content(f) for f in fits}) == 1:
            # identical state shapes over the same input hold identical state: any pairing is right
            for (view, _), shape in zip(sorted(members, key=lambda m: m[0].uid_hash), fits):
                bound[shape.node.id] = view
            continue
        names = ", ".join(v.display_name for v, _ in members)
        nodes = ", ".join(f"{f.node.kind}[{f.node.id}]" for f in fits)
        raise InvalidArgumentError(f"the savepoint names no SQL operator and operator(s) {names} could hold the "
                                   f"state of node(s) {nodes}: run the job with table.exec.uid.generation: ALWAYS "
                                   "(or on Flink 2.x, whose savepoints name their operators)", plan.path)
    return bound


__all__ = ["bind_by_state", "type_root"]
