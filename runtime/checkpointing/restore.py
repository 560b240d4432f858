"""Restoring a job from a checkpoint or savepoint (its own, or one real Flink wrote), at any
parallelism: the snapshot is read with the format core and its state re-assigned the way Flink
does it.

* keyed state and timers go to the subtask that owns their key group
  (``operator_index_for_key_group`` over the new parallelism; the max parallelism must not change);
* list state (SPLIT_DISTRIBUTE) is kept per subtask when the parallelism is unchanged, otherwise
  all elements are concatenated in subtask order and split into even contiguous parts;
* union state: every subtask gets all elements; broadcast state: every subtask gets a copy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

from ...savepoint.keyed_state import KeyedState, KeyedStateSource
from ...savepoint import metainfo
from ...savepoint import operator
from ...savepoint.loader import OperatorView, Savepoint
from ...savepoint import types as savepoint_types
from ...savepoint.types.hashing import operator_index_for_key_group
from ..state import ttl
from ..exceptions import RestoreError

log = logging.getLogger("fstate.runtime.restore")


@dataclass
class KeyedRestore:
    key_type: savepoint_types.TypeInfo
    #: name -> (meta, key group -> key -> value)
    states: dict[str, tuple[metainfo.StateMetaInfo, dict[int, dict]]] = field(default_factory=dict)
    #: 'event' / 'processing' -> key group -> {(timestamp, key)}
    timers: dict[str, dict[int, set]] = field(default_factory=dict)
    #: other timer services (windows): name -> (namespace type, kind -> key group -> {(timestamp, key, namespace)})
    timer_services: dict[str, tuple[savepoint_types.TypeInfo, dict[str, dict[int, set]]]] = field(default_factory=dict)


@dataclass
class SubtaskRestore:
    operator_state: dict[str, tuple[metainfo.StateMetaInfo, Any]] = field(default_factory=dict)
    keyed: KeyedRestore | None = None


@dataclass
class OperatorTarget:
    """One operator of the new job, as the restore needs to know it."""

    operator_id: bytes
    display: str
    parallelism: int
    max_parallelism: int
    max_parallelism_explicit: bool


@dataclass
class RestorePlan:
    path: str
    checkpoint_id: int
    kind: str
    subtasks: dict[tuple[bytes, int], SubtaskRestore]

    def for_subtask(self, operator_id: bytes, index: int) -> SubtaskRestore | None:
        return self.subtasks.get((operator_id, index))


def read_max_parallelism(path: str, targets: list[OperatorTarget]) -> dict[bytes, int]:
    """The max parallelism each matched operator must use: the snapshot's (Flink adapts an operator
    whose max parallelism was not set explicitly; an explicit different one is an error)."""
    sp = Savepoint.open(path)
    out = {}
    for t in targets:
        st = sp.metadata.operator_by_id(t.operator_id)
        if st is None:
            continue
        if st.max_parallelism != t.max_parallelism:
            has_keyed = any(s.managed_keyed is not None for s in st.subtasks.values())
            if t.max_parallelism_explicit and has_keyed:
                raise RestoreError(
                    f"the maximum parallelism ({st.max_parallelism}) with which the snapshot of operator "
                    f"{t.display} was taken differs from the operator's maximum parallelism ({t.max_parallelism}); "
                    "this is not supported", path)
            if not t.max_parallelism_explicit:
                out[t.operator_id] = st.max_parallelism
    return out


def plan_restore(path: str, targets: list[OperatorTarget], allow_non_restored_state: bool = False) -> RestorePlan:
    sp = Savepoint.open(path)
    by_id = {t.operator_id: t for t in targets}
    subtasks: dict[tuple[bytes, int], SubtaskRestore] = {}
    for st in sp.metadata.operators:
        target = by_id.get(st.operator_id)
        has_state = any(not s.is_empty for s in st.subtasks.values()) or st.coordinator_state is not None
        if target is None:
            name = st.uid or st.name or st.operator_id.hex()
            if not has_state:
                log.info("Skipping empty savepoint state for operator %s.", name)
                continue
            if allow_non_restored_state:
                log.info("Skipping savepoint state for operator %s (allow non-restored state).", name)
                continue
            raise RestoreError(
                f"Failed to rollback to checkpoint/savepoint {sp.path}. Cannot map checkpoint/savepoint state for "
                f"operator {st.operator_id.hex()} ({name}) to the new program, because the operator is not "
                "available in the new program. If you want to allow to skip this, set allow_non_restored_state "
                "(Flink: --allowNonRestoredState).", sp.path)
        if not has_state:
            continue
        op = OperatorView(sp, st)
        with savepoint_types.trusted_pickles():
            _plan_operator_state(op, target, subtasks)
            _plan_keyed_state(op, target, subtasks)
    kind = sp.metadata.snapshot_kind
    return RestorePlan(sp.path, sp.metadata.checkpoint_id, kind, subtasks)


def _sub(subtasks, target: OperatorTarget, i: int) -> SubtaskRestore:
    key = (target.operator_id, i)
    s = subtasks.get(key)
    if s is None:
        s = subtasks[key] = SubtaskRestore()
    return s


def _plan_operator_state(op: OperatorView, target: OperatorTarget, subtasks) -> None:
    metas: dict[str, metainfo.StateMetaInfo] = {}
    values: dict[str, dict[int, Any]] = {}
    for old, h in op.operator_handles():
        if h.delegate is None:
            continue
        buf = op.savepoint.read_stream(h.delegate)
        src = op.savepoint.stream_source(h.delegate).label
        meta = operator.read_operator_proxy(buf, src)
        for s in meta.states:
            metas.setdefault(s.name, s)
            if s.kind == "BROADCAST":
                v: Any = (dict(operator.read_broadcast_state(buf, h, meta, s.name, src)) if s.name in h.states
                          else {})
            else:
                v = operator.read_list_state(buf, h, meta, s.name, src) if s.name in h.states else []
            values.setdefault(s.name, {})[old] = v
    new_p = target.parallelism
    old_p = op.parallelism
    splits = operator.split_list_states({name: [x for i in sorted(values.get(name, {})) for x in values[name][i]]
                                  for name, meta in metas.items() if meta.kind not in ("UNION", "BROADCAST")}, new_p)
    for name, meta in metas.items():
        per_old = values.get(name, {})
        mode = meta.kind
        if mode == "BROADCAST":
            copies = [per_old[i] for i in sorted(per_old)]
            for i in range(new_p):
                src_i = i % old_p
                d = per_old.get(src_i, copies[0] if copies else {})
                _sub(subtasks, target, i).operator_state[name] = (meta, dict(d))
            continue
        everything = [x for i in sorted(per_old) for x in per_old[i]]
        for i in range(new_p):
            if mode == "UNION":
                part = list(everything)
            elif new_p == old_p:
                part = list(per_old.get(i, []))
            else:
                part = splits[name][i]
            _sub(subtasks, target, i).operator_state[name] = (meta, part)


def _plan_keyed_state(op: OperatorView, target: OperatorTarget, subtasks) -> None:
    sources = op.keyed_states()  # raises a clear error for layouts fstate cannot read
    if not sources:
        return
    maxp = op.max_parallelism
    new_p = target.parallelism
    restores: list[KeyedRestore] = []
    for src, state in _opened(sources, op.savepoint.io):
        meta = state.meta
        if not restores:  # every new subtask gets the key type and all state metas, even without entries
            restores = [KeyedRestore(meta.key_type) for _ in range(new_p)]
            for i, r in enumerate(restores):
                _sub(subtasks, target, i).keyed = r
        for r in restores:
            if r.key_type != meta.key_type:
                raise RestoreError(f"operator {target.display}: subtasks disagree on the key type "
                                   f"({r.key_type.name} vs {meta.key_type.name})", src)
            for _, s in meta.value_states:
                r.states.setdefault(s.name, (s, {}))
        value_ids = [sid for sid, _ in meta.value_states]
        names = [meta.states[sid].name for sid in value_ids]
        # state scoped by a namespace (windows) is held under (key, namespace)
        namespaced = [meta.states[sid].namespace_type != savepoint_types.VOID_NAMESPACE for sid in value_ids]
        if value_ids:
            for kg, key, ns, vals in state.rows(value_ids):
                r = restores[operator_index_for_key_group(kg, new_p, maxp)]
                for name, scoped, v in zip(names, namespaced, vals):
                    if v is not None:
                        r.states[name][1].setdefault(kg, {})[(key, ns) if scoped else key] = v
        services = {s.name: s.value_type.namespace for s in meta.states
                    if s.backend_type == metainfo.PRIORITY_QUEUE}
        for name, namespace_type in services.items():
            service = name[len(metainfo.TIMER_PREFIX):].partition("_")[2]
            if service != "user-timers":
                for r in restores:
                    r.timer_services.setdefault(service, (namespace_type, {}))
        for service, kind, ts, key, ns, kg in state.timer_rows():
            r = restores[operator_index_for_key_group(kg, new_p, maxp)]
            if service == "user-timers":
                r.timers.setdefault(kind, {}).setdefault(kg, set()).add((ts, key))
                continue
            namespace_type = services[f"{metainfo.TIMER_PREFIX}{kind}_{service}"]
            by_kind = r.timer_services.setdefault(service, (namespace_type, {}))[1]
            by_kind.setdefault(kind, {}).setdefault(kg, set()).add((ts, key, ns))


def _opened(sources: list[KeyedStateSource], io) -> Iterator[tuple[str | None, KeyedState]]:
    """Each subtask's keyed state, open while the caller handles it (a RocksDB snapshot's temporary
    directory goes away as the next one opens, or when the loop ends or fails)."""
    for source in sources:
        # the runtime cannot run state whose serializers fstate cannot parse: no opaque fallback
        # TTL values keep their timestamps
        with source.open(io=io, header_search=False, meta_of=ttl.with_timestamped_states) as state:
            yield source.label, state
