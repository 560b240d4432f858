"""``fstate sizes OLD NEW``: which operators, states and keys grew, sorted by growth.

Keys: the largest keys of each state in NEW, with their exact sizes in OLD found by a second
pass over OLD that watches for exactly those keys (:func:`.sizes.state_sizes`'s ``watch``), so
memory stays bounded by the top lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..savepoint.decoders import hashable
from .sizes import DEFAULT_TOP, SizesReport, key_text, state_sizes


@dataclass
class Growth:
    """One operator, state or key in OLD and NEW (bytes and entries; absent: 0)."""

    operator: str
    state: str | None
    key: str | None
    old_bytes: int
    new_bytes: int
    old_entries: int
    new_entries: int

    @property
    def growth(self) -> int:
        return self.new_bytes - self.old_bytes

    def to_dict(self) -> dict:
        return {"operator": self.operator, "state": self.state, "key": self.key, "old_bytes": self.old_bytes,
                "new_bytes": self.new_bytes, "growth": self.growth, "old_entries": self.old_entries,
                "new_entries": self.new_entries}


@dataclass
class GrowthReport:
    old: SizesReport
    new: SizesReport
    operators: list[Growth]
    states: list[Growth]
    keys: list[Growth]

    def to_dict(self) -> dict:
        return {"old": self.old.path, "new": self.new.path,
                "operators": [g.to_dict() for g in self.operators], "states": [g.to_dict() for g in self.states],
                "keys": [g.to_dict() for g in self.keys]}

    def to_html(self) -> str:
        """The report as one self-contained HTML page (:mod:`.sizes_html`)."""
        from . import sizes_html

        return sizes_html.render_growth(self.to_dict())


def _ordered(rows: list[Growth]) -> list[Growth]:
    return sorted(rows, key=lambda g: (-g.growth, g.operator, g.state or "", g.key or ""))


def state_growth(old: str, new: str, *, top: int = DEFAULT_TOP, plan: str | None = None,
                 operators: Iterable[str] | None = None, workers: int | None = None, engine: str = "auto",
                 spark=None) -> GrowthReport:
    """What grew from the snapshot ``old`` to ``new`` (operators by uid hash, states by name, the
    ``top`` largest keys of each state of ``new``); each measured on the ``engine`` (see
    :func:`.sizes.state_sizes`)."""
    operators = None if operators is None else list(operators)
    on = {"workers": workers, "engine": engine, "spark": spark}
    after = state_sizes(new, top=top, plan=plan, operators=operators, **on)
    watch = {(op.uid_hash, state.name): {hashable(item.key) for item in state.top_by_bytes}
             for op in after.operators for state in op.states}
    before = state_sizes(old, top=top, plan=plan, operators=operators, watch=watch, **on)
    old_ops = {op.uid_hash: op for op in before.operators}
    new_ops = {op.uid_hash: op for op in after.operators}
    op_rows, state_rows, key_rows = [], [], []
    for uid_hash in sorted(old_ops.keys() | new_ops.keys()):
        a, b = old_ops.get(uid_hash), new_ops.get(uid_hash)
        name = (b or a).display_name
        op_rows.append(Growth(name, None, None, _op_bytes(a), _op_bytes(b), _op_entries(a), _op_entries(b)))
        old_listed = {s.name: s for s in a.operator_states} if a else {}
        new_listed = {s.name: s for s in b.operator_states} if b else {}
        for state in sorted(old_listed.keys() | new_listed.keys()):  # list, union and broadcast states
            sa, sb = old_listed.get(state), new_listed.get(state)
            state_rows.append(Growth(name, state, None, sa.bytes if sa else 0, sb.bytes if sb else 0,
                                     sa.entries if sa else 0, sb.entries if sb else 0))
        old_states = {s.name: s for s in a.states} if a else {}
        new_states = {s.name: s for s in b.states} if b else {}
        for state in sorted(old_states.keys() | new_states.keys()):
            sa, sb = old_states.get(state), new_states.get(state)
            state_rows.append(Growth(name, state, None, sa.bytes if sa else 0, sb.bytes if sb else 0,
                                     sa.entries if sa else 0, sb.entries if sb else 0))
            watched = a.watched.get(state, {}) if a else {}
            for item in sb.top_by_bytes if sb else ():
                was = watched.get(hashable(item.key))
                key_rows.append(Growth(name, state, key_text(item.key), was.bytes if was else 0, item.bytes,
                                       was.entries if was else 0, item.entries))
    return GrowthReport(before, after, _ordered(op_rows), _ordered(state_rows), _ordered(key_rows))


def _op_bytes(op) -> int:
    """An operator's state bytes: its keyed state's entries (canonical bytes, the same whatever the
    layout or backend) and its operator state's elements and entries (as serialized)."""
    return op.keyed_bytes + op.operator_state_bytes if op is not None else 0


def _op_entries(op) -> int:
    return sum(op.key_group_entries) + sum(s.entries for s in op.operator_states) if op is not None else 0
