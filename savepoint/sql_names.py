"""Names for the positional fields of SQL operator state, from a compiled plan's node (see
``sql_plan.py`` for the plan itself and how its nodes are matched to a savepoint's operators).

:func:`describe_node` turns one plan node into a :class:`SqlOperatorPlan`: the key's field names
(grouping / partition / join keys picked from the input row type), named rows (``input``, ``left``,
``right``, ``accumulators``, ``sort_key``, ``distinct_<n>``) and, per runtime state name, which of
its parts holds which row. :func:`field_names` is the seam the table layer calls with a decoded
state's shape (:class:`StateSchema`); every part whose arity the plan does not confirm is named
``f0, f1, ...``.

What the runtime keeps, by kind (Flink 1.15-2.3; ``docs/flink-sql-state.md``):

* group aggregates: ``accState`` (VALUE) = one row of the accumulators in aggCall order, then one
  field per distinct view; ``distinctAcc_<n>`` (MAP) keyed by the distinct argument(s);
* deduplicate: ``deduplicate-state`` = the input row (keep-last, or rowtime) or a Boolean flag;
* joins: ``left-records`` / ``right-records`` = input rows (map key without a unique key, map value or
  value with one);
* window aggregates: ``window-aggs`` = the accumulators, namespace = the slice end (the window end
  of a tumbling window);
* rank: input rows by sort key (``data-state-with-append``, ``data-state``); a Top-N over an updating
  input (RetractableTopN) also keeps ``sorted-map`` (VALUE), a sorted map sort key -> count;
* over aggregates, changelog normalize, interval / window joins: input rows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

#: accumulator layouts of built-in aggregate functions with more than one buffer field
_MULTI_FIELD = {"avg": ("sum", "count"), "sum_retract": ("sum", "count")}
_GENERATED_NAME = re.compile(r"^EXPR\$\d+$|\$")
_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]+")
_DURATION = re.compile(r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")
_WINDOW_TYPES = {"TumblingWindow": "tumble", "HoppingWindow": "hop", "CumulativeWindow": "cumulate",
                 "SessionWindow": "session"}
GROUP_AGGREGATES = frozenset({"group-aggregate", "global-group-aggregate", "incremental-group-aggregate",
                              "group-table-aggregate", "group-window-aggregate", "python-group-aggregate"})
WINDOW_AGGREGATES = frozenset({"window-aggregate", "global-window-aggregate"})
_JOINS = frozenset({"join", "interval-join", "window-join", "temporal-join"})


@dataclass(frozen=True)
class StateRoles:
    """Which named row of the operator each part of one state holds (None: not a row / unknown)."""

    value: str | None = None  # the value, or a LIST state's element
    map_key: str | None = None
    map_value: str | None = None


@dataclass(frozen=True)
class SqlOperatorPlan:
    """One stateful (or stateless) SQL operator as its plan node describes it."""

    node_id: int
    kind: str
    description: str
    key_fields: tuple[str, ...]
    rows: dict[str, tuple[str, ...]] = field(default_factory=dict)
    states: dict[str, StateRoles] = field(default_factory=dict)
    #: roles of a state the table above does not name (e.g. a newer runtime's state)
    default_roles: StateRoles = StateRoles()
    #: {"type": tumble|hop|cumulate|session, "size_ms", "slide_ms"|"step_ms"|"gap_ms"} for window operators
    window: dict[str, Any] | None = None

    @property
    def namespace_fields(self) -> tuple[str, ...] | None:
        """The name of a window aggregate's namespace (a Long slice end): ``window_end`` for a
        tumbling window (its slices are its windows), ``slice_end`` otherwise; None for the rest."""
        if self.kind not in WINDOW_AGGREGATES:
            return None
        return ("window_end",) if self.window and self.window.get("type") == "tumble" else ("slice_end",)

    def window_bounds(self, slice_end: int) -> tuple[int, int] | None:
        """(window_start, window_end) in ms of a tumbling window aggregate's namespace, else None."""
        if self.kind in WINDOW_AGGREGATES and self.window and self.window.get("type") == "tumble":
            return slice_end - self.window["size_ms"], slice_end
        return None

    def roles(self, state: str) -> StateRoles:
        return self.states.get(state, self.default_roles)

    def to_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "kind": self.kind, "description": self.description,
                "key": list(self.key_fields), "rows": {k: list(v) for k, v in self.rows.items()},
                "states": {name: {part: role for part, role in vars(roles).items() if role}
                           for name, roles in self.states.items()},
                "window": self.window}


@dataclass(frozen=True)
class StateSchema:
    """The shape of one decoded keyed state, as :func:`field_names` needs it: the number of fields
    of each RowData part (None where that part is no row). LIST states give their element as
    ``value``; a VALUE state holding a map (a sorted map) gives its key and value as ``map_key`` and
    ``map_value``."""

    name: str
    kind: str = "VALUE"
    key: int | None = None
    value: int | None = None
    map_key: int | None = None
    map_value: int | None = None


@dataclass(frozen=True)
class FieldNames:
    """Field names for the rows of one state table; None where the part is no row. ``namespace``
    None means: the table layer's own namespace columns."""

    key: tuple[str, ...] | None
    namespace: tuple[str, ...] | None
    value: tuple[str, ...] | None = None
    map_key: tuple[str, ...] | None = None
    map_value: tuple[str, ...] | None = None


def positional(arity: int | None) -> tuple[str, ...] | None:
    return None if arity is None else tuple(f"f{i}" for i in range(arity))


def field_names(operator: Any, schema: StateSchema) -> FieldNames:
    """The seam for the table layer: names of the key, namespace and row fields of a state of
    ``operator`` (a :class:`SqlOperatorPlan`, a bare ``sql_plan.SqlOperator`` or None). Names come
    from the plan where it has a row of exactly that arity for that part, else ``f0, f1, ...``."""
    if not isinstance(operator, SqlOperatorPlan):
        namespace = ("slice_end",) if getattr(operator, "kind", None) in WINDOW_AGGREGATES else None
        return FieldNames(positional(schema.key), namespace, positional(schema.value),
                          positional(schema.map_key), positional(schema.map_value))
    roles = operator.roles(schema.name)

    def named(role: str | None, arity: int | None) -> tuple[str, ...] | None:
        names = operator.rows.get(role) if role else None
        return names if names is not None and arity is not None and len(names) == arity else positional(arity)

    key = operator.key_fields if schema.key is not None and len(operator.key_fields) == schema.key else None
    return FieldNames(key or positional(schema.key), operator.namespace_fields, named(roles.value, schema.value),
                      named(roles.map_key, schema.map_key), named(roles.map_value, schema.map_value))


# ---------------------------------------------------------------------------------------------
# row types of the plan


def _row_type_string_fields(text: str) -> list[tuple[str, str]]:
    """(name, type text) of each field of ``ROW<`a` T, `b` T NOT NULL 'description'> [NOT NULL]``."""
    start = text.find("<")
    if not text.upper().startswith("ROW") or start < 0:
        raise ValueError(f"not a ROW type: {text[:80]}")
    fields: list[tuple[str, list[str]]] = []
    i, depth, n = start + 1, 0, len(text)
    expect_name = True
    while i < n:
        char = text[i]
        if expect_name:
            if char.isspace():
                i += 1
                continue
            if char == ">" and not fields:  # ROW<>
                return []
            if char != "`":
                raise ValueError(f"expected a quoted field name at {i} in {text[:80]}")
            name, i = [], i + 1
            while i < n:
                if text[i] == "`":
                    if text[i + 1:i + 2] == "`":  # `` is a backtick inside a name
                        name.append("`")
                        i += 2
                        continue
                    break
                name.append(text[i])
                i += 1
            fields.append(("".join(name), []))
            expect_name = False
            i += 1
            continue
        if char == "'":  # a field description: '...' with '' for a quote
            i += 1
            while i < n and not (text[i] == "'" and text[i + 1:i + 2] != "'"):
                i += 2 if text[i] == "'" else 1
            i += 1
            continue
        if char in "<(":
            depth += 1
        elif char in ">)":
            if depth == 0:
                return [(name, "".join(t).strip()) for name, t in fields]
            depth -= 1
        elif char == "," and depth == 0:
            expect_name = True
            i += 1
            continue
        fields[-1][1].append(char)
        i += 1
    raise ValueError(f"unterminated ROW type: {text[:80]}")


def row_fields(row_type: Any) -> list[tuple[str, Any]]:
    """(name, type) of each field of a plan's row type: the type as its text, or its JSON object."""
    if isinstance(row_type, str):
        return _row_type_string_fields(row_type)
    if isinstance(row_type, dict) and isinstance(row_type.get("fields"), list):
        return [(str(f["name"]), f.get("fieldType")) for f in row_type["fields"]]
    raise ValueError(f"not a row type: {json.dumps(row_type)[:80]}")


def row_field_names(row_type: Any) -> list[str]:
    """The field names of a plan's row type (its string or its object form)."""
    return [name for name, _ in row_fields(row_type)]


# ---------------------------------------------------------------------------------------------
# from a plan node


def _pick(fields: tuple[str, ...], indices: Any) -> tuple[str, ...]:
    if not isinstance(indices, list):
        return ()
    return tuple(fields[i] if isinstance(i, int) and 0 <= i < len(fields) else f"f{i}" for i in indices)


def fields_of(spec: Any) -> Any:
    """``{"fields": [...]}`` (PartitionSpec) → the list; a list stays a list."""
    return spec.get("fields") if isinstance(spec, dict) else spec


def _unique(names: list[str]) -> tuple[str, ...]:
    seen: dict[str, int] = {}
    result = []
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        result.append(name if not count else f"{name}_{count + 1}")
    return tuple(result)


def function_name(call: dict) -> str:
    for key in ("internalName", "systemName", "catalogName", "class"):
        text = call.get(key)
        if isinstance(text, str) and text:
            text = text.split(".")[-1].strip("`$")
            return _IDENTIFIER.sub("_", re.sub(r"\$\d+$", "", text)).strip("_").lower() or "agg"
    return "agg"


def _accumulators(calls: list, argument_fields: tuple[str, ...], retractions: list | None,
                  need_retraction: bool) -> tuple[tuple[str, ...], dict[tuple, int]]:
    """Names of the accumulator row's fields, and the distinct views (argument indices → index)."""
    names: list[str] = []
    distinct_views: dict[tuple, int] = {}
    has_count_star = False
    for index, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        function = function_name(call)
        arguments = _pick(argument_fields, call.get("argList") or [])
        if function == "count" and not arguments:
            has_count_star = True
        alias = call.get("name")
        if isinstance(alias, str) and alias and not _GENERATED_NAME.search(alias):
            base = alias
        else:
            base = "_".join([function] + (["distinct"] if call.get("distinct") else []) + list(arguments))
        retract = bool(retractions[index]) if retractions and index < len(retractions) else False
        layout = _MULTI_FIELD.get(function) or (_MULTI_FIELD["sum_retract"] if function == "sum" and retract
                                                else None)
        names.extend(f"{base}_{part}" for part in layout) if layout else names.append(base)
        if call.get("distinct"):
            distinct_views.setdefault(tuple(call.get("argList") or []), len(distinct_views))
    if need_retraction and not has_count_star:
        names.append("count_rows")  # the row counter a retracting aggregation adds
    for arguments in distinct_views:
        names.append("_".join(["distinct"] + list(_pick(argument_fields, list(arguments)))))
    return _unique(names), distinct_views


def _duration_ms(text: Any) -> int | None:
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    days, hours, minutes, seconds = (match.group(g) for g in "dhms")
    total = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1000
    return total + round(float(seconds or 0) * 1000)


def plan_window(windowing: Any) -> dict[str, Any] | None:
    window = windowing.get("window") if isinstance(windowing, dict) else None
    if not isinstance(window, dict):
        return None
    result: dict[str, Any] = {"type": _WINDOW_TYPES.get(window.get("type"), window.get("type"))}
    for key, name in (("size", "size_ms"), ("slide", "slide_ms"), ("maxSize", "size_ms"), ("step", "step_ms"),
                      ("gap", "gap_ms")):
        if key in window:
            result[name] = _duration_ms(window[key])
    return result


def describe_node(plan: Any, node: Any) -> SqlOperatorPlan:
    """What a plan node (``sql_plan.PlanNode`` of ``plan``) says about its operator's state."""
    spec = node.spec
    kind = node.kind
    first = plan.input_fields(node.id, 0)
    rows: dict[str, tuple[str, ...]] = {}
    states: dict[str, StateRoles] = {}
    default = StateRoles()
    key: tuple[str, ...] = ()
    window = None
    if kind in GROUP_AGGREGATES or kind in WINDOW_AGGREGATES:
        key = _pick(first, spec.get("grouping"))
        local_input = spec.get("localAggInputRowType")
        arguments = first
        if local_input is not None:  # a global aggregate's calls refer to the local aggregate's input
            arguments = tuple(row_field_names(local_input))
        accumulators, distinct_views = _accumulators(spec.get("aggCalls") or [], arguments,
                                                     spec.get("aggCallNeedRetractions"),
                                                     bool(spec.get("needRetraction")))
        rows["accumulators"] = accumulators
        states["window-aggs" if kind in WINDOW_AGGREGATES else "accState"] = StateRoles(value="accumulators")
        for arguments_index, view in distinct_views.items():
            rows[f"distinct_{view}"] = _pick(arguments, list(arguments_index))
            states[f"distinctAcc_{view}"] = StateRoles(map_key=f"distinct_{view}")
        window = plan_window(spec.get("windowing"))
    elif kind in _JOINS:
        join = spec.get("joinSpec") or (spec.get("intervalJoinSpec") or {}).get("joinSpec") or {}
        rows["left"], rows["right"] = first, plan.input_fields(node.id, 1)
        key = _pick(first, join.get("leftKeys"))
        for side in ("left", "right"):
            states[f"{side}-records"] = StateRoles(value=side, map_key=side, map_value=side)
        if kind == "window-join":
            window = plan_window(spec.get("leftWindowing"))
    else:
        rows["input"] = first
        default = StateRoles(value="input", map_value="input")
        if kind in ("deduplicate", "changelog-normalize"):
            key = _pick(first, spec.get("uniqueKeys"))
        elif kind == "window-deduplicate":
            key = _pick(first, spec.get("partitionKeys"))
            window = plan_window(spec.get("windowing"))
        elif kind in ("rank", "window-rank"):
            key = _pick(first, fields_of(spec.get("partition") or spec.get("partitionSpec")))
            order = fields_of(spec.get("orderBy") or spec.get("sortSpec")) or []
            rows["sort_key"] = _pick(first, [f.get("index") for f in order if isinstance(f, dict)])
            default = StateRoles(value="input", map_key="sort_key", map_value="input")
            if kind == "rank":  # RetractableTopN: sort key -> count, and sort key -> its input rows
                states["sorted-map"] = StateRoles(map_key="sort_key")
                states["data-state"] = default
            window = plan_window(spec.get("windowing"))
        elif kind == "over-aggregate":
            key = _pick(first, fields_of((spec.get("overSpec") or {}).get("partition")))
    return SqlOperatorPlan(node.id, kind, node.description, key, rows, states, default, window)
