"""Where the fields of a compiled SQL plan come from, and what determines a stateful operator's state.

Node ids, uids and operator ids move whenever the planner sees another query; what a field *is*
does not. :func:`lineage` gives every output field of every node of a :class:`~.sql_plan.Plan` a
canonical text built from the source tables' columns upwards: ``ev.k`` for a column, ``$MOD$1(ev.id,
3)`` for an expression, ``COUNT()``/``SUM(ev.v)`` for an aggregate's result, ``window_end(TUMBLE
5000)`` for a window property. Two plans of different queries give the same text to the same
column, whatever projections, reorderings or filters lie between.

:func:`state_shapes` describes each stateful node by what its state depends on (:class:`StateShape`):
its kind and variant (keep-first or keep-last, join type, rank range), the lineage of its key
fields, its window, the identity of each accumulator slot (:class:`AccumulatorSlot`) and of each
field of the rows it stores. ``savepoint/sql_upgrade.py`` pairs the shapes of two plans.

Filters are deliberately not part of a field's lineage: a filter changed upstream of an aggregate
does not change what its accumulators are, only which rows reach them (the shape records the
upstream conditions separately, so a report can say so).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .sql_names import GROUP_AGGREGATES, WINDOW_AGGREGATES, fields_of, function_name, plan_window
from .sql_plan import STATEFUL_KINDS, Plan, PlanNode

#: node kinds whose output rows are their (first) input's rows, unchanged
_PASS_THROUGH = frozenset({"exchange", "watermark-assigner", "mini-batch-assigner", "drop-update-before",
                           "changelog-normalize", "sink", "legacy-sink", "deduplicate", "sort", "sort-limit",
                           "limit", "temporal-sort", "window-deduplicate"})
_JOIN_KINDS = frozenset({"join", "interval-join", "window-join", "temporal-join"})
_SOURCES = frozenset({"table-source-scan", "legacy-table-source-scan", "data-stream-scan", "values"})
#: multi-field accumulator buffers of built-in aggregate functions (see sql_names._MULTI_FIELD)
_BUFFERS = {"avg": ("sum", "count")}


@dataclass(frozen=True)
class AccumulatorSlot:
    """One field of an accumulator row: the aggregate call it belongs to (function, distinct, its
    arguments' and filter's lineage) and which part of that call's buffer it is (``""``: the only
    one; ``"sum"``/``"count"`` of AVG; ``"view"`` of a distinct view; ``"rows"`` of the row counter
    a retracting aggregation keeps)."""

    function: str
    arguments: tuple[str, ...] = ()
    distinct: bool = False
    filter: str | None = None
    part: str = ""
    name: str = ""  # the SQL alias or generated name, for reports
    result_type: str = ""

    @property
    def identity(self) -> tuple:
        return (self.function, self.arguments, self.distinct, self.filter, self.part)

    def describe(self) -> str:
        text = f"{self.function.upper()}({'DISTINCT ' if self.distinct else ''}{', '.join(self.arguments) or '*'})"
        if self.filter:
            text += f" FILTER ({self.filter})"
        return text + (f" [{self.part}]" if self.part else "") + (f" AS {self.name}" if self.name else "")


@dataclass(frozen=True)
class StateShape:
    """What the state of one stateful plan node depends on."""

    node: PlanNode
    kind: str
    variant: tuple[tuple[str, Any], ...]
    key: tuple[str, ...]
    key_names: tuple[str, ...]
    window: str | None = None
    accumulators: tuple[AccumulatorSlot, ...] = ()
    #: the stored rows by role ("input", "left", "right", "sort_key"): lineage of each field
    rows: dict[str, tuple[str, ...]] = field(default_factory=dict)
    row_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: distinct views: the lineage of each view's arguments, in view order
    views: tuple[tuple[str, ...], ...] = ()
    #: the sink tables this node's rows reach
    sinks: frozenset[str] = frozenset()
    #: conditions (lineage) applied to the rows upstream of this node
    conditions: frozenset[str] = frozenset()
    #: per-state TTL of the plan (compiled plans may set it per node), ms
    ttl: tuple[int, ...] = ()

    @property
    def identity(self) -> tuple:
        """What must be equal for two nodes to hold the same state (up to re-encoding)."""
        return (self.kind, self.variant, frozenset(self.key), self.window)

    def describe(self) -> str:
        return f"{self.node.kind}[{self.node.id}] key ({', '.join(self.key_names) or '-'})"


# ---------------------------------------------------------------------------------------------
# lineage


def _table_name(identifier: Any) -> str:
    text = str(identifier or "")
    return text.split(".")[-1].strip("`") if text else ""


def _type_text(t: Any) -> str:
    return t if isinstance(t, str) else json.dumps(t, sort_keys=True)


def rex(node: Any, inputs: tuple[str, ...]) -> str:
    """The canonical text of a plan's RexNode JSON over input fields of lineage ``inputs``."""
    if not isinstance(node, dict):
        return json.dumps(node, sort_keys=True)
    kind = node.get("kind")
    if kind == "INPUT_REF":
        index = node.get("inputIndex")
        return inputs[index] if isinstance(index, int) and 0 <= index < len(inputs) else f"?{index}"
    if kind == "LITERAL":
        return json.dumps(node.get("value"), sort_keys=True)
    if kind == "CALL":
        name = node.get("internalName") or node.get("systemName") or node.get("catalogName") or "call"
        arguments = ", ".join(rex(o, inputs) for o in node.get("operands") or [])
        if name in ("$CAST$1", "$REINTERPRET$1", "$TRY_CAST$1"):  # a cast keeps what the value is
            return arguments if name == "$REINTERPRET$1" else f"CAST({arguments} AS {_type_text(node.get('type'))})"
        return f"{name}({arguments})"
    if kind == "FIELD_ACCESS":
        return f"{rex(node.get('expr'), inputs)}.{node.get('name')}"
    rest = {k: v for k, v in node.items() if k not in ("type",)}
    return json.dumps(rest, sort_keys=True)


class Lineage:
    """Lineage of every node's output fields (and the conditions above each node) of one plan."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._fields: dict[int, tuple[str, ...]] = {}
        self._conditions: dict[int, frozenset[str]] = {}
        self._consumers: dict[int, list[int]] = {}
        for target, sources in plan.inputs.items():
            for source in sources:
                self._consumers.setdefault(source, []).append(target)

    def inputs(self, node_id: int, index: int = 0) -> tuple[str, ...]:
        sources = self.plan.inputs.get(node_id, ())
        return self.fields(sources[index]) if index < len(sources) else ()

    def conditions(self, node_id: int) -> frozenset[str]:
        if node_id not in self._conditions:
            below = frozenset().union(*(self.conditions(s) for s in self.plan.inputs.get(node_id, ())))
            node = self.plan.nodes[node_id]
            condition = node.spec.get("condition") if node.kind == "calc" else None
            if condition:
                below = below | {rex(condition, self.inputs(node_id))}
            self._conditions[node_id] = below
        return self._conditions[node_id]

    def fields(self, node_id: int) -> tuple[str, ...]:
        if node_id not in self._fields:
            self._fields[node_id] = self._compute(self.plan.nodes[node_id])
        return self._fields[node_id]

    def sinks(self, node_id: int) -> frozenset[str]:
        """The sink tables downstream of a node."""
        seen, todo, out = set(), [node_id], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            node = self.plan.nodes[current]
            if node.kind in ("sink", "legacy-sink"):
                table = (node.spec.get("dynamicTableSink") or {}).get("table") or {}
                out.add(_table_name(table.get("identifier")) or f"sink[{current}]")
            todo.extend(self._consumers.get(current, ()))
        return frozenset(out)

    def _compute(self, node: PlanNode) -> tuple[str, ...]:
        spec, kind = node.spec, node.kind
        first = self.inputs(node.id)
        if kind in _SOURCES:
            table = _table_name(((spec.get("scanTableSource") or {}).get("table") or {}).get("identifier")
                                or spec.get("identifier")) or f"{kind}[{node.id}]"
            return tuple(f"{table}.{name}" for name in node.output_fields)
        if kind == "calc":
            return tuple(rex(p, first) for p in spec.get("projection") or [])
        if kind in _PASS_THROUGH:
            return first
        if kind == "union":
            sources = self.plan.inputs.get(node.id, ())
            columns = zip(*(self.fields(s) for s in sources)) if sources else ()
            return tuple("UNION(" + ", ".join(c) + ")" for c in columns)
        if kind in ("rank", "window-rank"):
            extra = ("ROW_NUMBER(" + self._rank_text(node) + ")",) if spec.get("outputRankNumber") else ()
            return first + extra
        if kind in _JOIN_KINDS:
            join = spec.get("joinSpec") or (spec.get("intervalJoinSpec") or {}).get("joinSpec") or {}
            second = self.inputs(node.id, 1)
            return first if join.get("joinType") in ("SEMI", "ANTI") else first + second
        if kind in GROUP_AGGREGATES or kind in WINDOW_AGGREGATES or kind in ("local-group-aggregate",
                                                                             "local-window-aggregate"):
            return self._aggregate_output(node)
        if kind == "window-table-function":
            window = _window_text(spec.get("windowing"))
            return first + tuple(f"{p}({window})" for p in ("window_start", "window_end", "window_time"))
        if kind == "over-aggregate":
            return first + tuple(f"OVER#{i}[{node.id}]" for i in range(len(node.output_fields) - len(first)))
        return tuple(f"{kind}[{node.id}].{name}" for name in node.output_fields)

    def _rank_text(self, node: PlanNode) -> str:
        spec = node.spec
        first = self.inputs(node.id)
        partition = [first[i] for i in fields_of(spec.get("partition") or spec.get("partitionSpec")) or []
                     if isinstance(i, int) and i < len(first)]
        return json.dumps({"partition": partition, "order": self._order(node),
                           "range": spec.get("rankRange"), "type": spec.get("rankType")}, sort_keys=True)

    def _order(self, node: PlanNode) -> list:
        first = self.inputs(node.id)
        order = fields_of(node.spec.get("orderBy") or node.spec.get("sortSpec")) or []
        return [[first[f["index"]] if isinstance(f.get("index"), int) and f["index"] < len(first) else "?",
                 f.get("isAscending", True)] for f in order if isinstance(f, dict)]

    def argument_fields(self, node: PlanNode) -> tuple[str, ...]:
        """The lineage of the fields an aggregate's calls refer to: its input's, or for a global
        aggregate of a two-phase aggregation the local aggregate's input."""
        if node.spec.get("localAggInputRowType") is None:
            return self.inputs(node.id)
        current = node.id
        while True:
            sources = self.plan.inputs.get(current, ())
            if not sources:
                return ()
            current = sources[0]
            if self.plan.nodes[current].kind.startswith("local-"):
                return self.inputs(current)

    def accumulators(self, node: PlanNode) -> tuple[tuple[AccumulatorSlot, ...], tuple[tuple[str, ...], ...]]:
        """The accumulator row's slots and the distinct views' arguments (see sql_names._accumulators
        for the same layout as field names)."""
        spec = node.spec
        arguments = self.argument_fields(node)
        calls = spec.get("aggCalls") or []
        retractions = spec.get("aggCallNeedRetractions") or []
        slots: list[AccumulatorSlot] = []
        views: list[tuple[str, ...]] = []
        has_count_star = False
        for index, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            function = function_name(call)
            args = tuple(arguments[i] if isinstance(i, int) and i < len(arguments) else f"?{i}"
                         for i in call.get("argList") or [])
            if function == "count" and not args:
                has_count_star = True
            filter_arg = call.get("filterArg")
            condition = arguments[filter_arg] if isinstance(filter_arg, int) and 0 <= filter_arg < len(arguments) \
                else None
            retract = bool(retractions[index]) if index < len(retractions) else False
            parts = _BUFFERS.get(function) or (("sum", "count") if function == "sum" and retract else ("",))
            if function == "sum" and retract:
                function = "sum_retract"
            alias = call.get("name") if isinstance(call.get("name"), str) else ""
            for part in parts:
                slots.append(AccumulatorSlot(function, args, bool(call.get("distinct")), condition, part, alias,
                                             _type_text(call.get("type"))))
            if call.get("distinct") and args not in views:
                views.append(args)
        if spec.get("needRetraction") and not has_count_star:
            slots.append(AccumulatorSlot("count", (), part="rows", name="count_rows"))
        slots.extend(AccumulatorSlot("distinct", v, True, part="view") for v in views)
        return tuple(slots), tuple(views)

    def _aggregate_output(self, node: PlanNode) -> tuple[str, ...]:
        spec = node.spec
        grouping = [i for i in spec.get("grouping") or [] if isinstance(i, int)]
        first = self.inputs(node.id)
        keys = tuple(first[i] if i < len(first) else f"?{i}" for i in grouping)
        slots, _ = self.accumulators(node)
        results = tuple(s.describe().split(" AS ")[0] for s in slots if s.part in ("", "sum"))
        window = _window_text(spec.get("windowing"))
        properties = tuple(f"{p.get('name')}({window})" for p in spec.get("namedWindowProperties") or []
                           if isinstance(p, dict))
        output = keys + results + properties
        if len(output) < len(node.output_fields):  # e.g. a local aggregate's slice end
            output += tuple(f"{node.kind}[{node.id}].{n}" for n in node.output_fields[len(output):])
        return output[:len(node.output_fields)] if node.output_fields else output


def _window_text(windowing: Any) -> str | None:
    window = plan_window(windowing)
    if window is None:
        return None
    return " ".join([str(window.get("type")).upper()] + [f"{k}={window[k]}" for k in sorted(window) if k != "type"])


# ---------------------------------------------------------------------------------------------
# state shapes


def _ttls(spec: dict) -> tuple[int, ...]:
    out = []
    for state in spec.get("state") or []:
        text = str(state.get("ttl", "0 ms")) if isinstance(state, dict) else "0 ms"
        number, _, unit = text.partition(" ")
        try:
            out.append(int(number) * {"ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000}.get(unit, 1))
        except ValueError:
            out.append(0)
    return tuple(out)


def _variant(node: PlanNode) -> tuple[tuple[str, Any], ...]:
    spec, kind = node.spec, node.kind
    if kind in ("deduplicate", "window-deduplicate"):
        keys = ("keepLastRow", "isRowtime")
    elif kind in ("rank", "window-rank"):
        keys = ("rankType", "rankRange", "rankStrategy", "outputRankNumber")
    elif kind in _JOIN_KINDS:
        join = spec.get("joinSpec") or (spec.get("intervalJoinSpec") or {}).get("joinSpec") or {}
        # the state layout of each side (NoUniqueKey, JoinKeyContainsUniqueKey, HasUniqueKey) is only in
        # the description
        sides = tuple((side, match.group(1)) for side in ("leftInputSpec", "rightInputSpec")
                      for match in [re.search(side + r"=\[([^\]]*)\]", node.description)] if match)
        return (("joinType", join.get("joinType")),
                ("nonEquiCondition", json.dumps(join.get("nonEquiCondition"), sort_keys=True))) + sides
    elif kind in GROUP_AGGREGATES:
        keys = ("needRetraction",)
    else:
        keys = ()
    return tuple((k, json.dumps(spec.get(k), sort_keys=True)) for k in keys)


def state_shapes(plan: Plan) -> dict[int, StateShape]:
    """The :class:`StateShape` of every stateful node of ``plan``, by node id."""
    lineage = Lineage(plan)
    out: dict[int, StateShape] = {}
    for node in plan.nodes.values():
        if node.kind not in STATEFUL_KINDS or node.kind in ("sink", "legacy-sink"):
            continue
        spec, kind = node.spec, node.kind
        first = lineage.inputs(node.id)
        first_names = plan.input_fields(node.id, 0)
        key_indices: list = []
        rows: dict[str, tuple[str, ...]] = {}
        names: dict[str, tuple[str, ...]] = {}
        accumulators: tuple[AccumulatorSlot, ...] = ()
        views: tuple[tuple[str, ...], ...] = ()
        window = None
        variant = _variant(node)
        if kind in GROUP_AGGREGATES or kind in WINDOW_AGGREGATES:
            key_indices = spec.get("grouping") or []
            accumulators, views = lineage.accumulators(node)
            window = _window_text(spec.get("windowing"))
        elif kind in _JOIN_KINDS:
            join = spec.get("joinSpec") or (spec.get("intervalJoinSpec") or {}).get("joinSpec") or {}
            key_indices = join.get("leftKeys") or []
            second = lineage.inputs(node.id, 1)
            rows = {"left": first, "right": second}
            names = {"left": first_names, "right": plan.input_fields(node.id, 1)}
            right_keys = tuple(second[i] for i in join.get("rightKeys") or [] if isinstance(i, int) and i < len(second))
            variant += (("rightKeys", right_keys),)
            if kind == "window-join":
                window = _window_text(spec.get("leftWindowing"))
        else:
            rows, names = {"input": first}, {"input": first_names}
            if kind in ("deduplicate", "changelog-normalize"):
                key_indices = spec.get("uniqueKeys") or []
                if kind == "deduplicate" and not spec.get("keepLastRow") and not spec.get("isRowtime"):
                    rows, names = {}, {}  # keep-first on processing time keeps a flag, not the row
            elif kind == "window-deduplicate":
                key_indices = spec.get("partitionKeys") or []
                window = _window_text(spec.get("windowing"))
            elif kind in ("rank", "window-rank"):
                key_indices = fields_of(spec.get("partition") or spec.get("partitionSpec")) or []
                order = fields_of(spec.get("orderBy") or spec.get("sortSpec")) or []
                sort = [f.get("index") for f in order if isinstance(f, dict)]
                rows["sort_key"] = tuple(first[i] for i in sort if isinstance(i, int) and i < len(first))
                names["sort_key"] = tuple(first_names[i] for i in sort if isinstance(i, int) and i < len(first_names))
                window = _window_text(spec.get("windowing"))
            elif kind == "over-aggregate":
                key_indices = fields_of((spec.get("overSpec") or {}).get("partition")) or []
        key = tuple(first[i] for i in key_indices if isinstance(i, int) and i < len(first))
        key_names = tuple(first_names[i] for i in key_indices if isinstance(i, int) and i < len(first_names))
        out[node.id] = StateShape(node, kind, variant, key, key_names, window, accumulators, rows, names, views,
                                  lineage.sinks(node.id), lineage.conditions(node.id), _ttls(spec))
    return out


__all__ = ["AccumulatorSlot", "StateShape", "Lineage", "state_shapes", "rex"]
