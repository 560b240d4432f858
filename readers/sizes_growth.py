"""``fstate sizes OLD NEW``: which operators, states and keys grew, sorted by growth.

Operators and states: each snapshot's :class:`.sizes.SizesReport`. Keys: every key of OLD joined
with the same key of NEW (:mod:`.sizes_join`, bounded memory), per state the ``top`` keys that grew
most in bytes and in list / map elements, and that shrank most (gone keys too), with the counts of
new, gone, grown and shrunk keys. One pass over each snapshot: the join's tasks measure the keyed
state of both reports as they spill the keys, each snapshot's operator state is measured beside."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from ..savepoint.errors import UnknownOperatorError
from ..savepoint.loader import Savepoint
from .sizes import DEFAULT_TOP, SizesReport, plan_sizes, run_tasks, state_bytes
from .sizes_join import BY_HASH, KeyChanges, join_tasks


@dataclass
class Growth:
    """One operator or state in OLD and NEW (bytes and entries; absent: 0)."""

    operator: str
    state: str | None
    old_bytes: int
    new_bytes: int
    old_entries: int
    new_entries: int

    @property
    def growth(self) -> int:
        return self.new_bytes - self.old_bytes

    def to_dict(self) -> dict:
        return {"operator": self.operator, "state": self.state, "old_bytes": self.old_bytes,
                "new_bytes": self.new_bytes, "growth": self.growth, "old_entries": self.old_entries,
                "new_entries": self.new_entries}


@dataclass
class KeyJoin:
    """How one operator's keys were matched between OLD and NEW, and each state's key changes."""

    operator: str
    #: :data:`.sizes_join.BY_KEY_GROUP` or :data:`.sizes_join.BY_HASH`
    join: str
    old_max_parallelism: int | None
    new_max_parallelism: int | None
    old_parallelism: int | None
    new_parallelism: int | None
    states: list[KeyChanges]

    @property
    def note(self) -> str | None:
        if self.join == BY_HASH:
            return (f"max parallelism {self.old_max_parallelism} -> {self.new_max_parallelism}: a key's key group "
                    "differs between the snapshots, so keys were joined by a hash-partitioned spill, not by key group")
        if None not in (self.old_parallelism, self.new_parallelism) and self.old_parallelism != self.new_parallelism:
            return (f"rescaled {self.old_parallelism} -> {self.new_parallelism}: keys joined by key group "
                    f"(max parallelism {self.new_max_parallelism} in both)")
        if self.old_parallelism is None:
            return "not in OLD (a new or renamed operator): all its keys are new"
        if self.new_parallelism is None:
            return "not in NEW (removed or renamed): all its keys are gone"
        return None

    def to_dict(self) -> dict:
        return {"operator": self.operator, "join": self.join, "note": self.note,
                "old_max_parallelism": self.old_max_parallelism, "new_max_parallelism": self.new_max_parallelism,
                "old_parallelism": self.old_parallelism, "new_parallelism": self.new_parallelism,
                "states": [s.to_dict() for s in self.states]}


@dataclass
class GrowthReport:
    old: SizesReport
    new: SizesReport
    operators: list[Growth]
    states: list[Growth]
    joins: list[KeyJoin]

    def _keys(self, heap: str, measure: str) -> list[dict]:
        rows = [dict(item.to_dict(), operator=join.operator, state=changes.name)
                for join in self.joins for changes in join.states for item in getattr(changes, heap).items()]
        return sorted(rows, key=lambda row: (-row[measure] if measure != "shrink" else row["growth"],
                                             row["operator"], row["state"], row["key"]))

    @property
    def keys(self) -> list[dict]:
        """Per state the keys that grew most in bytes, all states' sorted by growth."""
        return self._keys("grown", "growth")

    def to_dict(self) -> dict:
        return {"old": self.old.path, "new": self.new.path,
                "operators": [g.to_dict() for g in self.operators], "states": [g.to_dict() for g in self.states],
                "keys": self.keys, "keys_by_elements": self._keys("by_elements", "element_growth"),
                "shrunk_keys": self._keys("shrunk", "shrink"), "key_joins": [j.to_dict() for j in self.joins]}

    def to_html(self) -> str:
        """The report as one self-contained HTML page (:mod:`.sizes_html`)."""
        from . import sizes_html

        return sizes_html.render_growth(self.to_dict())


def _ordered(rows: list[Growth]) -> list[Growth]:
    return sorted(rows, key=lambda g: (-g.growth, g.operator, g.state or ""))


def state_growth(old: str | Savepoint, new: str | Savepoint, *, top: int = DEFAULT_TOP, plan: str | None = None,
                 operators: Iterable[str] | None = None, workers: int | None = None, engine: str = "auto",
                 spark=None) -> GrowthReport:
    """What grew from the snapshot ``old`` to ``new`` (operators by uid hash, states by name, per
    state the ``top`` keys that grew and shrank most); one pass over each, measured on the ``engine``
    (see :func:`.sizes.state_sizes`): the join's tasks measure the keyed state for both reports."""
    operators = None if operators is None else list(operators)
    at = int(time.time() * 1000)
    plans = [plan_sizes(snapshot, top=top, plan=plan, operators=operators, at=at, required=False)
             for snapshot in (old, new)]
    if operators is not None:  # an operator may be in one snapshot only (new, removed, renamed)
        missing = set(operators) - {name for p in plans for op in p.operators for name in (op.uid, op.uid_hash)}
        if missing:
            paths = ", ".join(p.savepoint.path for p in plans)
            raise UnknownOperatorError(f"{paths}: no operator {sorted(missing)[0]} in either")
    tasks, owners = [], []
    for side, planned in enumerate(plans):  # operator state
        made, whose = planned.tasks(keyed=False)
        tasks += made
        owners += [(side, uid_hash) for uid_hash, _ in whose]
    olds = {op.uid_hash: op for op in plans[0].operators}
    news = {op.uid_hash: op for op in plans[1].operators}
    joins = {}
    for uid_hash in sorted(olds.keys() | news.keys()):  # keyed state, both snapshots' together
        a, b = olds.get(uid_hash), news.get(uid_hash)
        made, how = join_tasks(a, b, top, state_bytes([op for op in (a, b) if op is not None]), at,
                               (plans[0].ttls.get(uid_hash), plans[1].ttls.get(uid_hash)))
        if made:
            joins[uid_hash] = KeyJoin((b or a).uid or uid_hash, how, a.max_parallelism if a else None,
                                      b.max_parallelism if b else None, a.parallelism if a else None,
                                      b.parallelism if b else None, [])
        tasks += made
        owners += [(None, uid_hash)] * len(made)
    state = sum(state_bytes(p.operators) for p in plans)
    parts: list[dict[tuple[str, str], list]] = [{}, {}]
    changes: dict[str, dict[str, KeyChanges]] = {}
    for (side, uid_hash), result in zip(owners, run_tasks(tasks, workers, state, engine, spark)):
        if side is not None:
            parts[side].setdefault((uid_hash, "operator"), []).append(result)
            continue
        for into, measured in zip(parts, (result.old, result.new)):
            into.setdefault((uid_hash, "keyed"), []).extend(measured)
        merged = changes.setdefault(uid_hash, {})
        for name, found in result.changes.items():
            if name in merged:
                merged[name].merge(found)
            else:
                merged[name] = found
    for uid_hash, join in joins.items():
        join.states = sorted(changes.get(uid_hash, {}).values(), key=lambda c: c.name)
    before, after = (planned.report(found) for planned, found in zip(plans, parts))
    old_ops = {op.uid_hash: op for op in before.operators}
    new_ops = {op.uid_hash: op for op in after.operators}
    op_rows, state_rows = [], []
    for uid_hash in sorted(old_ops.keys() | new_ops.keys()):
        a, b = old_ops.get(uid_hash), new_ops.get(uid_hash)
        name = (b or a).display_name
        op_rows.append(Growth(name, None, _op_bytes(a), _op_bytes(b), _op_entries(a), _op_entries(b)))
        for states in (lambda op: op.operator_states, lambda op: op.states):  # operator state, keyed state
            old_states = {s.name: s for s in states(a)} if a else {}
            new_states = {s.name: s for s in states(b)} if b else {}
            for state in sorted(old_states.keys() | new_states.keys()):
                sa, sb = old_states.get(state), new_states.get(state)
                state_rows.append(Growth(name, state, sa.bytes if sa else 0, sb.bytes if sb else 0,
                                         sa.entries if sa else 0, sb.entries if sb else 0))
    return GrowthReport(before, after, _ordered(op_rows), _ordered(state_rows), list(joins.values()))


def _op_bytes(op) -> int:
    """An operator's state bytes: its keyed state's entries (canonical bytes, the same whatever the
    layout or backend) and its operator state's elements and entries (as serialized)."""
    return op.keyed_bytes + op.operator_state_bytes if op is not None else 0


def _op_entries(op) -> int:
    return sum(op.key_group_entries) + sum(s.entries for s in op.operator_states) if op is not None else 0
