"""The re-encoding of one SQL operator's keyed state for a changed query (a migrated
``savepoint.sql_upgrade.Pairing``): which state of the old operator feeds each state of the new one,
and how keys, accumulator rows and stored rows change.

Per runtime state (names as Flink's table runtime registers them, docs/flink-sql-state.md):

* ``accState`` (group aggregates), ``window-aggs`` (window aggregates): the accumulator row, slot
  by slot; a fresh slot starts at its function's initial value (0 of the field's type for COUNT,
  SUM0 and AVG's parts, null for SUM, MIN, MAX, an empty placeholder for a distinct view);
* ``distinctAcc_<n>`` and ``distinctAcc_<n>_null_state``: the distinct view of the same arguments;
* ``deduplicate-state`` (keep-last, rowtime), ``left-records`` / ``right-records`` (joins),
  ``data-state-with-append`` (append-only Top-N), ``data-state`` and ``sorted-map`` (retractable
  Top-N; the map written in the new comparator's order): the stored rows, field by field (a new
  field is null), the row kind kept;
* timers: the same timer state, its keys mapped like every key.

Every row is checked against the arity the plan gives it: a state whose rows have another shape
than the plan says is an error, never a silent re-encoding.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Callable

from ..savepoint import keyed, metainfo
from ..savepoint.errors import InvalidArgumentError
from ..savepoint.sql_upgrade import Pairing, initial_value_rule
from ..savepoint.types.roles import as_map, as_row_data, without_ttl
from ..savepoint.types.table_binary import RowValue, row_kind_of
from .reencode import KeyedReencode, StateSource

#: the placeholder a distinct view leaves in the accumulator row (a RAW value of NullSerializer)
VIEW_PLACEHOLDER = b"\x00"
_DISTINCT = re.compile(r"^distinctAcc_(\d+)(_null_state)?$")
ACCUMULATOR_STATES = ("accState", "window-aggs")
#: runtime states holding stored rows: state name -> (row role of the map key or value, of the map value)
ROW_STATES = {"deduplicate-state": ("input", None), "left-records": ("left", None), "right-records": ("right", None),
              "data-state-with-append": ("sort_key", "input"), "data-state": ("sort_key", "input")}
#: a retractable Top-N's sort key -> count map (a VALUE state holding a sorted map)
SORTED_MAP_STATE = "sorted-map"
#: kinds whose state fstate can re-encode for a changed query
MIGRATABLE_KINDS = frozenset({"group-aggregate", "global-group-aggregate", "window-aggregate",
                              "global-window-aggregate", "deduplicate", "join", "rank"})


def _zero(logical) -> Any:
    root = getattr(logical, "root", "BIGINT")
    if root == "DECIMAL":
        return Decimal(0)
    if root in ("DOUBLE", "FLOAT"):
        return 0.0
    return 0


def _stored_type(info: metainfo.StateMetaInfo):
    """The stored value type of a state without TTL wrapping (the value, list element or map value)."""
    return without_ttl(info.value_type)


def _row_types(t) -> tuple | None:
    row = as_row_data(t)
    return None if row is None else row.types


def _remap(mapping: tuple[int | None, ...], what: str, fill: Callable[[int], Any] = lambda i: None,
           arity: int | None = None) -> Callable[[Any], Any]:
    """A row's fields rearranged: new field i = old field mapping[i], or fill(i) when None."""
    def apply(row):
        if row is None:
            return None
        if arity is not None and len(row) != arity:
            raise InvalidArgumentError(f"{what} holds rows of {len(row)} fields, the old plan says {arity}")
        values = tuple(row[s] if s is not None else fill(i) for i, s in enumerate(mapping))
        kind = row_kind_of(row)
        return RowValue(values, kind) if kind != "INSERT" else values
    return apply


def sql_reencode(pairing: Pairing, old_meta: keyed.KeyedBackendMeta, new_meta: keyed.KeyedBackendMeta,
                 what: str) -> KeyedReencode:
    """The :class:`KeyedReencode` of a migrated pairing from the old operator's header to the new
    job's (``new_meta``, e.g. from a template savepoint). ``what`` names the operator in errors."""
    old, new = pairing.old, pairing.new
    if new.kind not in MIGRATABLE_KINDS:
        raise InvalidArgumentError(f"{what}: fstate cannot re-encode the state of a {new.kind} for a changed query")
    old_states = {s.name: s for s in old_meta.states}
    key = None
    if pairing.key_order != tuple(range(len(old.key))) or len(new.key) != len(old.key):
        key = _remap(pairing.key_order, f"{what}: the key", arity=len(old.key))
    states: dict[str, StateSource] = {}
    for info in new_meta.states:
        name = info.name
        label = f"{what}, state '{name}'"
        distinct = _DISTINCT.match(name)
        if info.backend_type == metainfo.PRIORITY_QUEUE:
            if name in old_states:
                states[name] = StateSource(name)
        elif name in ACCUMULATOR_STATES:
            states[name] = StateSource(name, _accumulators(pairing, _row_types(_stored_type(info)), label))
        elif distinct:
            view = int(distinct.group(1))
            source = pairing.views[view] if view < len(pairing.views) else None
            if source is not None:
                states[name] = StateSource(f"distinctAcc_{source}{distinct.group(2) or ''}")
        elif name in ROW_STATES:
            states[name] = _row_state(pairing, info, name, label)
        elif name == SORTED_MAP_STATE and "sort_key" in pairing.rows:
            sort_key = _remap(pairing.rows["sort_key"], label, arity=len(old.rows["sort_key"]))
            states[name] = StateSource(name, lambda counts: {sort_key(k): v for k, v in counts.items()})
        elif name in old_states and old_states[name] == info:
            states[name] = StateSource(name)
        else:
            raise InvalidArgumentError(f"{label}: fstate does not know how this state changes with the query")
    return KeyedReencode(new_meta, states, key)


def _accumulators(pairing: Pairing, types: tuple | None, label: str) -> Callable[[Any], Any]:
    new_slots = pairing.new.accumulators
    if types is not None and len(types) != len(new_slots):
        raise InvalidArgumentError(f"{label}: the new job's accumulator row has {len(types)} fields, the new plan "
                                   f"{len(new_slots)}")

    def fresh(i: int) -> Any:
        rule = initial_value_rule(new_slots[i])
        if rule == "zero":
            return _zero(types[i] if types is not None else None)
        return VIEW_PLACEHOLDER if rule == "view" else None

    return _remap(pairing.accumulators, label, fresh, arity=len(pairing.old.accumulators))


def _row_state(pairing: Pairing, info: metainfo.StateMetaInfo, name: str, label: str) -> StateSource:
    first_role, second_role = ROW_STATES[name]
    if first_role not in pairing.rows:
        raise InvalidArgumentError(f"{label}: the plan does not say what rows it holds")
    first = _remap(pairing.rows[first_role], label, arity=len(pairing.old.rows[first_role]))
    if info.kind != "MAP":
        return StateSource(name, first)
    map_type = as_map(info.value_type)
    value_type = None if map_type is None else map_type.value
    if second_role is None:  # map key = the row, value = its count (or the row again for unique keys)
        rows_as_values = as_row_data(value_type) is not None
        return StateSource(name, lambda pair: (first(pair[0]), first(pair[1]) if rows_as_values else pair[1]))
    second = _remap(pairing.rows[second_role], label, arity=len(pairing.old.rows[second_role]))
    return StateSource(name, lambda pair: (first(pair[0]), [second(r) for r in pair[1]]))


__all__ = ["sql_reencode", "MIGRATABLE_KINDS", "VIEW_PLACEHOLDER"]
