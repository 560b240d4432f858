"""Pairing the stateful operators of two compiled SQL plans (an old query and a changed one).

:func:`match_plans` decides, per stateful node, what happens to its state when the old job's
savepoint is carried to the new job (:class:`Decision`):

* **carried**: the same state under another node id, uid and operator id;
* **migrated**: the same key and window, but the stored rows or accumulators changed (fields
  reordered, a field or an aggregate added or removed): re-encoded, with the new parts starting at
  their initial value (named in :attr:`Pairing.fresh`) and the removed ones dropped (:attr:`Pairing.lost`);
* **new**: a node without a counterpart: starts empty;
* **dropped**: an old node without a counterpart: its state is left behind;
* **incompatible**: the counterpart (same kind, feeding the same sink) has another key, window or
  variant: its state cannot hold for the new query; refused, with the reason.

Nodes are paired by what determines their state (``sql_lineage.StateShape``: kind, variant, the
lineage of the key fields, the window), never by node id; among several candidates the one feeding
the same sink tables and sharing most accumulators and stored fields wins. The result is pure
data; ``writers/upgrade.py`` binds it to savepoint operators and writes it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .sql_lineage import AccumulatorSlot, StateShape, state_shapes
from .sql_plan import Plan

#: aggregate functions whose accumulator fields can start afresh, and how (per buffer part):
#: "zero" = 0 of the field's type, None = null
_INITIAL = {("count", ""): "zero", ("count", "rows"): "zero", ("sum", ""): None, ("sum0", ""): "zero",
            ("max", ""): None, ("min", ""): None, ("avg", "sum"): "zero", ("avg", "count"): "zero",
            ("sum_retract", "sum"): None, ("sum_retract", "count"): "zero", ("distinct", "view"): "view",
            ("first_value", ""): None, ("last_value", ""): None}


class Decision(enum.Enum):
    CARRIED = "carried"
    MIGRATED = "migrated"
    NEW = "new"
    DROPPED = "dropped"
    INCOMPATIBLE = "incompatible"


def initial_value_rule(slot: AccumulatorSlot):
    """How a fresh accumulator slot starts ("zero", None for null, "view" for an empty distinct
    view), or the string "unknown" when fstate does not know the function's initial value."""
    return _INITIAL.get((slot.function, slot.part), "unknown")


@dataclass
class Pairing:
    """The decision for one stateful node of either plan, and how its state maps when migrated."""

    decision: Decision
    old: StateShape | None
    new: StateShape | None
    reason: str
    #: new key field i is old key field key_order[i]
    key_order: tuple[int, ...] = ()
    #: new accumulator slot i takes old slot accumulators[i] (None: starts fresh)
    accumulators: tuple[int | None, ...] = ()
    #: distinct view j takes old view views[j] (None: starts empty)
    views: tuple[int | None, ...] = ()
    #: per stored row role: new field i takes old field rows[role][i] (None: starts null)
    rows: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    fresh: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()

    @property
    def changes_layout(self) -> bool:
        """Whether the state must be re-encoded (anything but the identity mapping)."""
        if self.old is None or self.new is None:
            return False
        identity = lambda m, n: m == tuple(range(n))  # noqa: E731
        return not (identity(self.key_order, len(self.old.key)) and len(self.new.key) == len(self.old.key)
                    and identity(self.accumulators, len(self.old.accumulators))
                    and identity(self.views, len(self.old.views))
                    and set(self.rows) == set(self.old.rows)
                    and all(identity(m, len(self.old.rows[r])) for r, m in self.rows.items()))


def _index_map(new: tuple, old: tuple, used_ok: bool = False) -> tuple[int | None, ...]:
    """For each new item, the index of an equal old item (each old item used once)."""
    taken: set[int] = set()
    out: list[int | None] = []
    for item in new:
        index = next((i for i, o in enumerate(old) if o == item and (used_ok or i not in taken)), None)
        if index is not None:
            taken.add(index)
        out.append(index)
    return tuple(out)


def _score(old: StateShape, new: StateShape) -> tuple:
    common_slots = len(set(s.identity for s in old.accumulators) & set(s.identity for s in new.accumulators))
    common_fields = sum(len(set(old.rows.get(r, ())) & set(fields)) for r, fields in new.rows.items())
    return (bool(old.sinks & new.sinks), common_slots + common_fields, old.conditions == new.conditions,
            old.key == new.key)


def _differences(old: StateShape, new: StateShape) -> str:
    reasons = []
    if old.kind != new.kind:
        reasons.append(f"the operator changed from {old.kind} to {new.kind}")
    if set(old.key) != set(new.key):
        reasons.append(f"the key changed from ({', '.join(old.key_names)}) to ({', '.join(new.key_names)})")
    if old.window != new.window:
        reasons.append(f"the window changed from {old.window} to {new.window}")
    for (name, before), (_, after) in zip(old.variant, new.variant):
        if before != after:
            reasons.append(f"{name} changed from {before} to {after}")
    return "; ".join(reasons) or "its state layout changed"


def _pair(old: StateShape, new: StateShape) -> Pairing:
    key_order = tuple(old.key.index(k) for k in new.key)
    accumulators = _index_map(tuple(s.identity for s in new.accumulators), tuple(s.identity for s in old.accumulators))
    views = _index_map(new.views, old.views)
    rows = {role: _index_map(fields, old.rows.get(role, ())) for role, fields in new.rows.items()}
    fresh, unknown = [], []
    for slot, source in zip(new.accumulators, accumulators):
        if source is None:
            (unknown if initial_value_rule(slot) == "unknown" else fresh).append(slot.describe())
    for role, mapping in rows.items():
        names = new.row_names.get(role, ())
        fresh.extend(f"{role}.{names[i] if i < len(names) else i} (null)" for i, s in enumerate(mapping) if s is None)
    used = {i for i in accumulators if i is not None}
    lost = [s.describe() for i, s in enumerate(old.accumulators) if i not in used]
    for role, fields in old.rows.items():
        kept = {i for i in rows.get(role, ()) if i is not None}
        names = old.row_names.get(role, ())
        lost.extend(f"{role}.{names[i] if i < len(names) else i}" for i in range(len(fields)) if i not in kept)
    pairing = Pairing(Decision.CARRIED, old, new, "", key_order, accumulators, views, rows, tuple(fresh), tuple(lost))
    if unknown:
        pairing.decision = Decision.INCOMPATIBLE
        pairing.reason = "fstate does not know how these accumulators start: " + ", ".join(unknown)
    elif pairing.changes_layout:
        pairing.decision = Decision.MIGRATED
        parts = []
        if key_order != tuple(range(len(old.key))):
            parts.append("key fields reordered")
        if fresh:
            parts.append("starting fresh: " + ", ".join(fresh))
        if lost:
            parts.append("dropped: " + ", ".join(lost))
        if not fresh and not lost and not parts:
            parts.append("fields reordered")
        pairing.reason = "; ".join(parts)
    else:
        pairing.reason = "same state" + ("" if old.node.id == new.node.id else f" (node {old.node.id} → {new.node.id})")
    if pairing.decision is not Decision.INCOMPATIBLE and old.conditions != new.conditions:
        pairing.reason += "; the filters upstream changed: the carried state holds the rows the old filters let through"
    return pairing


def match_plans(old: Plan, new: Plan) -> list[Pairing]:
    """One :class:`Pairing` per stateful node of either plan: pairs first (in the new plan's node
    order), then the old nodes left (dropped, or the other side of an incompatible pair)."""
    return match_shapes(state_shapes(old), state_shapes(new))


def match_shapes(old_shapes: dict[int, StateShape], new_shapes: dict[int, StateShape]) -> list[Pairing]:
    candidates = sorted(((_score(o, n), -abs(i - j), -n.node.id, -o.node.id, o.node.id, n.node.id)
                         for i, o in enumerate(old_shapes.values()) for j, n in enumerate(new_shapes.values())
                         if o.identity == n.identity), reverse=True)
    old_of: dict[int, int] = {}
    taken: set[int] = set()
    for *_, old_id, new_id in candidates:
        if new_id not in old_of and old_id not in taken:
            old_of[new_id] = old_id
            taken.add(old_id)
    result: list[Pairing] = []
    for new_id, new_shape in new_shapes.items():
        if new_id in old_of:
            result.append(_pair(old_shapes[old_of[new_id]], new_shape))
            continue
        rival = next((o for o in old_shapes.values() if o.node.id not in taken and o.kind == new_shape.kind
                      and o.sinks & new_shape.sinks), None)
        if rival is not None:
            taken.add(rival.node.id)
            result.append(Pairing(Decision.INCOMPATIBLE, rival, new_shape, _differences(rival, new_shape)))
        else:
            result.append(Pairing(Decision.NEW, None, new_shape, "no operator of the old query holds this state: "
                                  "it starts empty"))
    for old_id, old_shape in old_shapes.items():
        if old_id not in taken:
            result.append(Pairing(Decision.DROPPED, old_shape, None, "no operator of the new query holds this "
                                  "state: it is left behind"))
    return result


__all__ = ["Decision", "Pairing", "match_plans", "match_shapes", "initial_value_rule"]
