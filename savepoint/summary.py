"""A plain-data description of a savepoint (what `fstate info` prints, also as JSON)."""

from __future__ import annotations

from typing import Any

from . import handles
from .errors import ExternalPathError
from .io.policy import external_files
from .loader import Savepoint
from .metadata import FLINK_VERSIONS
from .sql_plan import PlanBinding, sql_operator


def _storage(op) -> dict[str, int]:
    counts = {"inline": 0, "files": 0}
    for s in op.state.subtasks.values():
        for h in (s.managed_operator, s.raw_operator, s.managed_keyed, s.raw_keyed):
            d = getattr(h, "delegate", None)
            if isinstance(d, handles.ByteStreamHandle):
                counts["inline"] += 1
            elif d is not None:
                counts["files"] += 1
            elif isinstance(h, handles.IncrementalKeyedHandle):
                counts["files"] += len(h.shared) + len(h.private)
    return counts


def external_dependencies(sp: Savepoint) -> dict[str, int]:
    """Directories outside the savepoint that its file handles point into (e.g. a modify's BASE, a
    checkpoint's shared/), real paths: see :func:`.io.policy.external_files`."""
    return external_files(sp.metadata, sp.path)


def sql_entry(op, plan: PlanBinding | None) -> dict[str, Any] | None:
    """An SQL operator's kind and node id (from its name or uid), with the plan's description of it."""
    described = plan.operator(op) if plan is not None else None
    if described is not None:
        return described.to_dict()
    known = sql_operator(op.name, op.uid)
    return {"kind": known.kind, "node_id": known.node_id} if known is not None else None


def subtask_handle_bytes(op) -> dict[int, tuple[int, int]]:
    """Each subtask's (keyed, operator) state bytes as its handles record them."""
    sizes = {subtask: [0, 0] for subtask in op.state.subtasks}
    for subtask, h in op.keyed_handles():
        sizes[subtask][0] += h.size
    for subtask, h in op.operator_handles():
        sizes[subtask][1] += h.size
    return {subtask: (keyed, operator) for subtask, (keyed, operator) in sorted(sizes.items())}


def summarize(sp: Savepoint, plan: PlanBinding | None = None) -> dict[str, Any]:
    """``plan``: a compiled plan bound to ``sp`` (``sql_binding.load_binding``), whose descriptions of the
    SQL operators go into their ``sql`` entry."""
    m = sp.metadata
    ops = []
    warnings = []
    for op in sp.operators:
        states = []
        try:
            described = op.describe_states()
        except ExternalPathError as e:
            described = []
            warnings.append(f"{op.display_name}: {e.detail}")
        for d in described:
            states.append({"name": d.name, "backend": d.backend, "kind": d.kind, "type": d.type_name,
                           "key_type": d.key_type, "namespace": d.namespace, "warnings": list(d.warnings)})
            warnings.extend(f"{op.display_name}/{d.name}: {w}" for w in d.warnings)
        by_subtask = subtask_handle_bytes(op)
        keyed_size = sum(keyed for keyed, _ in by_subtask.values())
        operator_size = sum(operator for _, operator in by_subtask.values())
        # in-flight data of unaligned checkpoints (input channels and result subpartitions)
        channel_size = sum(ch.size for s in op.state.subtasks.values()
                           for ch in (*s.input_channels, *s.result_subpartitions))
        ops.append({
            "uid": op.uid, "name": op.name, "uid_hash": op.uid_hash, "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism, "subtasks_with_state": len(op.state.subtasks),
            "finished_subtasks": list(op.state.finished_subtasks), "fully_finished": op.state.fully_finished,
            "keyed_layout": op.keyed_layout, "keyed_state_bytes": keyed_size, "operator_state_bytes": operator_size,
            "channel_state_bytes": channel_size,
            "coordinator_state_bytes": op.state.coordinator_state.size if op.state.coordinator_state else 0,
            "storage": _storage(op), "states": states, "sql": sql_entry(op, plan),
        })
    return {
        "path": sp.path,
        "dependencies": external_dependencies(sp),
        "kind": m.snapshot_kind,
        "format": m.format_type,
        "metadata_version": m.version,
        "flink_versions": FLINK_VERSIONS.get(m.version),
        "checkpoint_id": m.checkpoint_id,
        "master_states": [ms.name for ms in m.master_states],
        "total_state_bytes": sum(o["keyed_state_bytes"] + o["operator_state_bytes"] + o["channel_state_bytes"]
                                 for o in ops),
        "operators": ops,
        "warnings": warnings,
    }
