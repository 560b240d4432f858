"""Keyed state: the heap keyed-state backend (partitioned by key group, as in Flink), its state
handles, and how it is snapshotted into Flink's canonical state streams with the format core. The
descriptors (:mod:`.descriptors`) and the operator-state backend (list, union and broadcast state,
:mod:`.operator_state`) are importable from here too.
"""

from __future__ import annotations

from typing import Any, Iterable

from ...savepoint import handles
from ...savepoint import keyed
from ...savepoint import metainfo
from ...savepoint.builder import write_stream
from ...savepoint import types as savepoint_types
from ...savepoint.types.hashing import key_group_for_hash
from ..clock import SystemClock
from . import ttl
from .keyed_base import KeyedStateBase
from .keyed_ttl import TTL_STATE_CLASSES
from ..api.typeinfo import check_encodable, infer_key_type
from ..exceptions import StateMigrationError
from ..api.descriptors import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
                               ReducingStateDescriptor, StateDescriptor, ValueStateDescriptor)
from .operator_backend import BroadcastState, OperatorListState, OperatorStateBackend, resolve_operator_meta


# =============================================================================================
# compatibility with restored state


def resolve_keyed_meta(desc: StateDescriptor, restored: metainfo.StateMetaInfo | None, where: str,
                       namespace_type: savepoint_types.TypeInfo = savepoint_types.VOID_NAMESPACE
                       ) -> metainfo.StateMetaInfo:
    """The meta info a registered keyed state is written with: the descriptor's, or the restored
    one when the descriptor leaves types open. Incompatible declarations raise. ``namespace_type``
    is VoidNamespace but for state scoped by window (``TimeWindow``)."""
    wanted = keyed.value_state_meta(desc.name, desc.kind, desc.meta_value_type(), namespace_type)
    if restored is None:
        check_encodable(wanted.value_type, f"{where}: state '{desc.name}'")
        return wanted
    if restored.kind != desc.kind:
        raise StateMigrationError(f"{where}: state '{desc.name}' was restored as {restored.kind} state but is "
                                  f"registered as {desc.kind} state")
    if restored.namespace_type != namespace_type:
        raise StateMigrationError(f"{where}: state '{desc.name}' is scoped by namespace "
                                  f"{restored.namespace_type.name}, but registered with namespace {namespace_type.name}")
    if desc.fully_typed and wanted.value_type != restored.value_type:
        raise StateMigrationError(
            f"{where}: the new serializer of state '{desc.name}' ({wanted.value_type.name}) is incompatible "
            f"with the restored one ({restored.value_type.name})")
    check_encodable(restored.value_type, f"{where}: state '{desc.name}'")
    return restored


# =============================================================================================
# keyed state


class StateTable:
    """One keyed state: ``data[key_group][key] = value`` (list for LIST, dict for MAP); for state
    scoped by a namespace (windows) ``data[key_group][(key, namespace)] = value``.
    ``snapshot_filter``: what a snapshot writes of a value (None: nothing), TTL full-snapshot cleanup."""

    __slots__ = ("meta", "data", "snapshot_filter")

    def __init__(self, meta: metainfo.StateMetaInfo, data: dict[int, dict] | None = None):
        self.meta = meta
        self.data: dict[int, dict] = data if data is not None else {}
        self.snapshot_filter = None

    @property
    def namespaced(self) -> bool:
        return self.meta.namespace_type != savepoint_types.VOID_NAMESPACE


class KeyedStateBackend:
    """Heap keyed state of one operator subtask, owning the key groups ``start..end``."""

    KEY_CACHE = 1 << 16

    def __init__(self, where: str, key_type: savepoint_types.TypeInfo | None, max_parallelism: int,
                 key_groups: tuple[int, int], restored=None, clock=None):
        self.where = where
        self.clock = clock or SystemClock()
        self._key_listeners: list = []
        self.explicit_key_type = key_type
        self.key_type = key_type
        self.max_parallelism = max_parallelism
        self.start, self.end = key_groups
        self.tables: dict[str, StateTable] = {}
        self.states: dict[str, Any] = {}
        #: timers: kind ('event'/'processing') -> key group -> {(timestamp, key)}
        self.timers: dict[str, dict[int, set]] = {"event": {}, "processing": {}}
        #: other timer services (windows: 'window-timers'): name -> (namespace type,
        #: kind -> key group -> {(timestamp, key, namespace)})
        self.timer_services: dict[str, tuple[savepoint_types.TypeInfo, dict[str, dict[int, set]]]] = {}
        self.uses_timers = False
        self.current_key: Any = None
        self.current_kg = -1
        self._kg_cache: dict[Any, int] = {}
        self._restored_key_type: savepoint_types.TypeInfo | None = None
        if restored is not None:
            self._restore(restored)

    # -- keys ----------------------------------------------------------------------------------
    def _restore(self, restored) -> None:
        rk = restored.key_type
        if self.explicit_key_type is not None and rk != self.explicit_key_type:
            raise StateMigrationError(f"{self.where}: keys were restored as {rk.name} but the job declares "
                                      f"{self.explicit_key_type.name} (key_by(..., key_type=...))")
        check_encodable(rk, f"{self.where}: the key")
        self.key_type = rk
        self._restored_key_type = rk
        for name, (meta, data) in restored.states.items():
            check_encodable(meta.namespace_type, f"{self.where}: the namespace of state '{name}'")
            self.tables[name] = StateTable(meta, data)
        for kind, by_kg in restored.timers.items():
            self.timers[kind] = by_kg
            if by_kg:
                self.uses_timers = True
        for service, (namespace_type, by_kind) in restored.timer_services.items():
            check_encodable(namespace_type, f"{self.where}: the namespace of timers '{service}'")
            self.timer_services[service] = (namespace_type, by_kind)

    def key_group_of(self, key: Any) -> int:
        kg = self._kg_cache.get(key)
        if kg is None:
            t = self.explicit_key_type
            if t is None:
                t = infer_key_type(key)
                if self.key_type is None:
                    self.key_type = t
                elif t != self.key_type:
                    hint = (" (restored state has keys of that type: pass key_by(..., key_type=...))"
                            if self._restored_key_type is not None else "")
                    raise StateMigrationError(f"{self.where}: key {key!r} is a {t.name}, but keys of this operator "
                                              f"are {self.key_type.name}{hint}")
            kg = key_group_for_hash(t.java_hash(key), self.max_parallelism)
            if not self.start <= kg <= self.end:
                raise RuntimeError(f"{self.where}: key {key!r} (key group {kg}) reached the subtask owning key "
                                   f"groups {self.start}..{self.end}: the stream was partitioned with a "
                                   "different key type or max parallelism")
            if len(self._kg_cache) >= self.KEY_CACHE:
                self._kg_cache.clear()
            self._kg_cache[key] = kg
        return kg

    def set_current_key(self, key: Any) -> None:
        self.current_kg = self.key_group_of(key)
        self.current_key = key
        if self._key_listeners:  # TTL cleanup for every record
            for listener in self._key_listeners:
                listener()

    def add_key_selection_listener(self, listener) -> None:
        self._key_listeners.append(listener)

    # -- registration ----------------------------------------------------------------------------
    def get_state(self, desc: StateDescriptor,
                  namespace_type: savepoint_types.TypeInfo = savepoint_types.VOID_NAMESPACE, state_class=None):
        """The state of ``desc``; with a ``namespace_type`` (windows) ``state_class`` is the class
        that scopes it by namespace."""
        existing = self.states.get(desc.name)
        if existing is not None:
            if existing.kind != desc.kind:
                raise StateMigrationError(f"{self.where}: state '{desc.name}' is already registered as "
                                          f"{existing.kind} state")
            return existing
        table = self.tables.get(desc.name)
        if table is not None and table.meta.kind == desc.kind and ttl.is_ttl_meta(table.meta) != desc.ttl_enabled:
            ttl.migrate_table(table, desc.ttl_enabled, self.clock.now_ms(), self.where)
        meta = resolve_keyed_meta(desc, table.meta if table else None, self.where, namespace_type)
        if table is None:
            table = self.tables[desc.name] = StateTable(meta)
        else:
            table.meta = meta
        cls = state_class or (TTL_STATE_CLASSES if desc.ttl_enabled else _STATE_CLASSES)[desc.kind]
        state = cls(self, table, desc)
        self.states[desc.name] = state
        return state

    # -- snapshot ------------------------------------------------------------------------------
    def snapshot(self, location: str) -> handles.KeyGroupsHandle | None:
        if self.key_type is None:
            return None  # no key seen and nothing restored: nothing to write
        tables = list(self.tables.values())
        metas = [t.meta for t in tables]
        timer_kinds = [k for k in ("event", "processing") if self.uses_timers]
        metas += [keyed.timer_state_meta(k, self.key_type) for k in timer_kinds]
        services = sorted(self.timer_services.items())
        metas += [keyed.timer_state_meta(k, self.key_type, namespace_type, service)
                  for service, (namespace_type, _) in services for k in ("event", "processing")]
        meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, self.key_type, metas)
        pairs_by_kg: dict[int, dict[int, list]] = {}
        for sid, table in enumerate(tables):
            enc = keyed.PairEncoder(meta, sid, self.max_parallelism)
            keep = table.snapshot_filter
            for kg, m in table.data.items():
                if not m:
                    continue
                out = None
                namespaced = table.namespaced
                for key, value in m.items():
                    if keep is not None:
                        value = keep(value)
                    p = enc.pairs(kg, key[0], value, key[1]) if namespaced else enc.pairs(kg, key, value)
                    if p:
                        if out is None:
                            out = pairs_by_kg.setdefault(kg, {}).setdefault(sid, [])
                        out.extend(p)
        for i, kind in enumerate(timer_kinds):
            sid = len(tables) + i
            enc = keyed.PairEncoder(meta, sid, self.max_parallelism)
            for kg, timers in self.timers[kind].items():
                if timers:
                    out = pairs_by_kg.setdefault(kg, {}).setdefault(sid, [])
                    for ts, key in timers:
                        out.extend(enc.pairs(kg, key, ts))
        sid = len(tables) + len(timer_kinds)
        for _, (_, by_kind) in services:
            for kind in ("event", "processing"):
                enc = keyed.PairEncoder(meta, sid, self.max_parallelism)
                for kg, timers in by_kind.get(kind, {}).items():
                    if timers:
                        out = pairs_by_kg.setdefault(kg, {}).setdefault(sid, [])
                        for ts, key, namespace in timers:
                            out.extend(enc.pairs(kg, key, ts, namespace))
                sid += 1
        data, offsets = keyed.encode_canonical_stream(meta, self.start, self.end, pairs_by_kg)
        return handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, self.start, offsets, write_stream(location, data))


class ValueState(KeyedStateBase):
    kind = "VALUE"

    def value(self) -> Any:
        b = self._b
        m = self._data.get(b.current_kg)
        return None if m is None else m.get(b.current_key)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        b = self._b
        m = self._data.get(b.current_kg)
        if m is None:
            m = self._map()
        m[b.current_key] = value


class ListState(KeyedStateBase):
    kind = "LIST"

    def get(self) -> list:
        v = self._map().get(self._b.current_key)
        return list(v) if v else []

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state '{self.name}' cannot hold None")
        m = self._map()
        lst = m.get(self._b.current_key)
        if lst is None:
            m[self._b.current_key] = [value]
        else:
            lst.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any] | None) -> None:
        vals = list(values or ())
        if any(v is None for v in vals):
            raise ValueError(f"list state '{self.name}' cannot hold None")
        if vals:
            self._map()[self._b.current_key] = vals
        else:
            self.clear()


class MapState(KeyedStateBase):
    kind = "MAP"

    def _entries(self, create: bool = False) -> dict | None:
        m = self._map()
        d = m.get(self._b.current_key)
        if d is None and create:
            d = m[self._b.current_key] = {}
        return d

    def get(self, key: Any) -> Any:
        d = self._entries()
        return None if d is None else d.get(key)

    def put(self, key: Any, value: Any) -> None:
        self._entries(True)[key] = value

    def put_all(self, entries: dict) -> None:
        self._entries(True).update(entries)

    def remove(self, key: Any) -> None:
        d = self._entries()
        if d is not None:
            d.pop(key, None)
            if not d:
                self.clear()

    def contains(self, key: Any) -> bool:
        d = self._entries()
        return d is not None and key in d

    def items(self) -> list:
        d = self._entries()
        return list(d.items()) if d else []

    def keys(self) -> list:
        d = self._entries()
        return list(d) if d else []

    def values(self) -> list:
        d = self._entries()
        return list(d.values()) if d else []

    def is_empty(self) -> bool:
        return not self._entries()


class ReducingState(KeyedStateBase):
    kind = "REDUCING"

    def get(self) -> Any:
        return self._map().get(self._b.current_key)

    def add(self, value: Any) -> None:
        m = self._map()
        k = self._b.current_key
        old = m.get(k)
        m[k] = value if old is None else self._desc.reduce(old, value)


class AggregatingState(KeyedStateBase):
    kind = "AGGREGATING"

    def get(self) -> Any:
        acc = self._map().get(self._b.current_key)
        return None if acc is None else self._desc.function.get_result(acc)

    def add(self, value: Any) -> None:
        m = self._map()
        k = self._b.current_key
        acc = m.get(k)
        f = self._desc.function
        if acc is None:
            acc = f.create_accumulator()
        m[k] = f.add(value, acc)


_STATE_CLASSES = {"VALUE": ValueState, "LIST": ListState, "MAP": MapState, "REDUCING": ReducingState,
                  "AGGREGATING": AggregatingState}


class KeyedStateStore:
    """What ``context.get_keyed_state_store()`` returns (keyed operators only)."""

    def __init__(self, backend: KeyedStateBackend):
        self._b = backend

    def get_state(self, desc: ValueStateDescriptor) -> ValueState:
        return self._b.get_state(desc)

    def get_list_state(self, desc: ListStateDescriptor) -> ListState:
        return self._b.get_state(desc)

    def get_map_state(self, desc: MapStateDescriptor) -> MapState:
        return self._b.get_state(desc)

    def get_reducing_state(self, desc: ReducingStateDescriptor) -> ReducingState:
        return self._b.get_state(desc)

    def get_aggregating_state(self, desc: AggregatingStateDescriptor) -> AggregatingState:
        return self._b.get_state(desc)
