"""Planning a state table on this machine from data source options (``options.py``): which operator,
which kind of table, its columns and partitions. Shared by the Spark data source and the embedded
engine; no pyspark here."""

from __future__ import annotations

from typing import Any, Mapping

from ..savepoint import sql_binding
from ..savepoint.errors import InvalidArgumentError, UnknownStateError
from ..savepoint.loader import Savepoint
from . import tables
from .options import SourceOptions, parse_source_options


def build_table(options: SourceOptions | Mapping[str, Any], keys: list | None = None) -> tables.Table:
    """The table the options name (see options.py: typed, or the data source's dict of strings),
    planned on this machine."""
    source = options if isinstance(options, SourceOptions) else parse_source_options(options)
    sp = Savepoint.open(source.path, allow_external_paths=source.allow_external_paths,
                        checkpoint_base_dir=source.checkpoint_base_dir, fs_options=source.fs_options)
    op = sp.operator(source.uid)
    # the plan is checked against the whole savepoint, also when this operator is not in it
    sql = sql_binding.load_binding(source.plan, sp).operator(op) if source.plan else None
    table = source.table
    state = source.state
    if table is None:
        om = op.operator_meta
        info = om.state(state) if (om and state and "," not in state) else None
        if info is not None:
            table = "broadcast" if info.kind == "BROADCAST" else "list"
        elif op.has_keyed_state:
            table = "keyed"
        else:
            names = ", ".join(s.name for s in (om.states if om else [])) or "none"
            if state:
                raise UnknownStateError(f"operator {op.display_name} has no state '{state}' (states: {names})",
                                        sp.location.metadata_path)
            raise InvalidArgumentError(f"operator {op.display_name} has no keyed state: name one of its "
                                       f"operator states with --state ({names})")
    if table == "list":
        return tables.list_state_table(op, _required(state))
    if table == "broadcast":
        return tables.broadcast_state_table(op, _required(state))
    if table == "keyed":
        return tables.keyed_table(op, source.states, flat=source.flat, flatten_key=source.flatten, keys=keys,
                                  sql=sql, ttl_timestamps=source.ttl_timestamps)
    if table == "matches":
        from . import cep

        return cep.partial_matches_table(op, keys)
    return tables.timers_table(op, flatten_key=source.flatten, sql=sql)


def _required(state: str | None) -> str:
    if not state:
        raise InvalidArgumentError("option 'state' is required for operator state")
    return state
