"""The state of a Flink CEP operator (``CEP.pattern(...)``) as rows people can read.

A CEP operator's keyed table (``fstate read --uid UID``, or the operator's view) already holds,
per key, the NFA state, the shared-buffer events and the shared-buffer entries (see
:mod:`fstate.savepoint.types.cep`). A pending partial match is not stored as a list of events:
its computation state points at the shared-buffer entry of the last event it took; each entry's
edges point back at the entry of the event before, labelled with the Dewey version of the run that
took them. :func:`resolve_partial_matches` follows them as Flink does when it extracts a match:
from the computation state's entry and version, along every edge whose version the current one is
compatible with, until an edge without a target.

:func:`partial_match_rows` reads an operator's partial matches as rows of
:data:`PARTIAL_MATCH_COLUMNS`, in this process (no Spark).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

from ..savepoint.errors import CorruptStateError, UnknownStateError
from ..savepoint.loader import OperatorView
from ..savepoint.types import BYTES, INT, LONG, STRING, ListType, RowType
from ..savepoint.types.roles import as_cep, as_map
from . import tables

NFA_STATE = "nfaStateName"
EVENTS = "sharedBuffer-events"
ENTRIES = "sharedBuffer-entries-with-lockable-edges"
#: The states a partial match is resolved from, in the order of the keyed table's columns.
CEP_STATES = (NFA_STATE, EVENTS, ENTRIES)

#: One row per pending partial match: the key, the NFA state it waits in, its Dewey version, the
#: timestamp of its first event, and its events in pattern order as (pattern state name, event).
PARTIAL_MATCH_COLUMNS = ("key", "state_name", "version", "start_timestamp", "events")


def is_cep_operator(op: OperatorView) -> bool:
    """Whether the operator's keyed state is a CEP operator's (it has the NFA and shared-buffer states)."""
    km = op.keyed_meta if op.has_keyed_state else None
    names = {s.name for _, s in km.value_states} if km is not None else set()
    return set(CEP_STATES) <= names


def dewey_compatible(version: Sequence[int], other: Sequence[int]) -> bool:
    """Whether Dewey number ``version`` is compatible with ``other``: ``other`` is a proper prefix of
    it, or both have the same length, the same digits but the last, and ``version``'s last digit is
    the greater or equal one."""
    if len(version) > len(other):
        return list(version[:len(other)]) == list(other)
    if len(version) == len(other) and version:
        return list(version[:-1]) == list(other[:-1]) and version[-1] >= other[-1]
    return False


def _field(value: Any, index: int, name: str) -> Any:
    """A struct field of a decoded value (tuple) or of a Spark Row / dict."""
    if isinstance(value, dict):
        return value[name]
    if hasattr(value, "asDict") and not isinstance(value, tuple):
        return value[name]
    return value[index]


def _node_key(node_id: Any) -> tuple:
    """A NodeId (decoded tuple, Row or dict) as a hashable ((id, timestamp), page name)."""
    event_id = _field(node_id, 0, "event_id")
    return ((_field(event_id, 0, "id"), _field(event_id, 1, "timestamp")), _field(node_id, 1, "page_name"))


def _event_key(event_id: Any) -> tuple:
    return (_field(event_id, 0, "id"), _field(event_id, 1, "timestamp"))


def resolve_partial_matches(nfa_state: Any, events: dict | None, entries: dict | None) -> list[dict[str, Any]]:
    """The pending partial matches of one key: for every computation state that has taken events,
    each path through the shared buffer (usually one) as a dict of ``state_name``, ``version``,
    ``start_timestamp`` and ``events`` [(pattern state name, event), ...] oldest first."""
    if nfa_state is None:
        return []
    events_by_id = {_event_key(k): v for k, v in (events or {}).items()}
    entries_by_id = {_node_key(k): v for k, v in (entries or {}).items()}
    out = []
    for state in _field(nfa_state, 0, "partial_matches") or ():
        entry = _field(state, 1, "previous_entry")
        if entry is None:
            continue  # a run waiting for its first event
        version = list(_field(state, 2, "version"))
        for path in _paths(_node_key(entry), version, entries_by_id):
            taken = []
            for event_id, page_name in path:
                lockable = events_by_id.get(event_id)
                if lockable is None:
                    raise CorruptStateError(f"shared buffer entry {page_name!r} refers to event {event_id}, "
                                            f"which is not in {EVENTS}")
                taken.append((page_name, _field(lockable, 1, "element")))
            out.append({"state_name": _field(state, 0, "state_name"), "version": version,
                        "start_timestamp": _field(state, 3, "start_timestamp"), "events": taken})
    return out


def _paths(start: tuple, version: list[int], entries: dict) -> list[list[tuple]]:
    """Every path from ``start`` back to an edge without a target (oldest node first)."""
    found = []
    stack = [(start, version, [])]
    while stack:
        node_id, current, path = stack.pop()
        lockable = entries.get(node_id)
        if lockable is None:
            raise CorruptStateError(f"shared buffer entry {node_id} is missing from {ENTRIES}")
        path = [node_id] + path
        node = _field(lockable, 1, "element")
        for item in _field(node, 0, "edges") or ():
            edge = _field(item, 1, "edge")
            edge_version = list(_field(edge, 1, "version"))
            if not dewey_compatible(current, edge_version):
                continue
            target = _field(edge, 0, "target")
            if target is None:
                found.append(path)
            else:
                stack.append((_node_key(target), edge_version, path))
    return found


def partial_matches_table(op: OperatorView, keys: list[Any] | None = None) -> tables.Table:
    """The ``matches`` table of a CEP operator: one row per pending partial match
    (:data:`PARTIAL_MATCH_COLUMNS`; ``events`` an array of (``pattern_state``, ``event``)), read from the
    keyed table of its NFA and shared-buffer states, key group by key group (partitioned like it)."""
    if not is_cep_operator(op):
        raise UnknownStateError(f"operator {op.display_name} is not a CEP operator (it has no keyed states "
                                f"{', '.join(CEP_STATES)})", op.savepoint.location.metadata_path)
    states = tables.keyed_table(op, list(CEP_STATES), flatten_key=False, keys=keys)
    key_column = states.columns[0]
    events = dict((name, t) for name, t, _ in states.columns)[EVENTS]
    events_map = as_map(events)
    lockable = as_cep(None if events_map is None else events_map.value)
    event_type = lockable.children[0] if lockable is not None and lockable.children else BYTES
    columns = [key_column, ("state_name", STRING, False), ("version", ListType(INT), False),
               ("start_timestamp", LONG, False),
               ("events", ListType(RowType((STRING, event_type), ("pattern_state", "event"),
                                           supports_row_kind=False)), False)]
    partitions = [dataclasses.replace(p, rows_of=match_rows) for p in states.partitions]
    return tables.Table("matches", f"{op.display_name}/matches", columns, partitions, states.key_filter)


def match_rows(rows: Iterator[tuple]) -> Iterator[tuple]:
    """(key, NFA state, events, entries) rows of the keyed table → rows of pending partial matches."""
    for key, nfa_state, events, entries in rows:
        for match in resolve_partial_matches(nfa_state, events, entries):
            yield (key, match["state_name"], match["version"], match["start_timestamp"], match["events"])


def partial_match_rows(op: OperatorView, keys: list[Any] | None = None) -> Iterator[tuple]:
    """Rows of :data:`PARTIAL_MATCH_COLUMNS`: every pending partial match of a CEP operator, read in
    this process (no Spark)."""
    return partial_matches_table(op, keys).rows()
