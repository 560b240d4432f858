"""Operator state of one subtask: list state (SPLIT_DISTRIBUTE), union list state and broadcast
state, their compatibility with restored state, and how they are snapshotted into Flink's operator
state stream with the format core.
"""

from __future__ import annotations

from typing import Any, Iterable

from ...savepoint import handles
from ...savepoint import metainfo
from ...savepoint import operator
from ...savepoint.builder import write_stream
from ...savepoint import types as savepoint_types
from ..api.descriptors import ListStateDescriptor, MapStateDescriptor
from ..exceptions import StateMigrationError
from ..api.typeinfo import check_encodable, or_pickled


def resolve_operator_meta(name: str, mode: str, element: savepoint_types.TypeInfo | None, key: savepoint_types.TypeInfo | None,
                          restored: metainfo.StateMetaInfo | None, where: str) -> metainfo.StateMetaInfo:
    """The meta info a registered operator state is written with: the declared one, or the restored
    one when the declaration leaves types open. A different distribution mode or serializer raises."""
    if mode == "BROADCAST":
        wanted = operator.broadcast_state_meta(name, or_pickled(key), or_pickled(element))
        typed = key is not None and element is not None
    else:
        wanted = operator.list_state_meta(name, or_pickled(element), mode)
        typed = element is not None
    if restored is None:
        for t in wanted.serializers.values():
            check_encodable(t, f"{where}: operator state '{name}'")
        return wanted
    if restored.kind != mode:
        raise StateMigrationError(f"{where}: operator state '{name}' was restored with distribution mode "
                                  f"{restored.kind} but is registered as {mode}")
    if typed and (wanted.value_type != restored.value_type or wanted.key_type != restored.key_type):
        raise StateMigrationError(
            f"{where}: the new serializer of operator state '{name}' ({wanted.type_name()}) is incompatible "
            f"with the restored one ({restored.type_name()})")
    for t in restored.serializers.values():
        check_encodable(t, f"{where}: operator state '{name}'")
    return restored


class OperatorListState:
    """Operator list state (SPLIT_DISTRIBUTE or UNION) of one subtask."""

    def __init__(self, name: str, values: list):
        self.name = name
        self._values = values

    def get(self) -> list:
        return list(self._values)

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"operator list state '{self.name}' cannot hold None")
        self._values.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any] | None) -> None:
        vals = list(values or ())
        if any(v is None for v in vals):
            raise ValueError(f"operator list state '{self.name}' cannot hold None")
        self._values[:] = vals

    def clear(self) -> None:
        self._values.clear()


class BroadcastState:
    """Broadcast state of one subtask: a map every subtask holds a copy of."""

    def __init__(self, name: str, entries: dict):
        self.name = name
        self._d = entries

    def get(self, key: Any) -> Any:
        return self._d.get(key)

    def put(self, key: Any, value: Any) -> None:
        self._d[key] = value

    def put_all(self, entries: dict) -> None:
        self._d.update(entries)

    def remove(self, key: Any) -> None:
        self._d.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._d

    def items(self) -> list:
        return list(self._d.items())

    def keys(self) -> list:
        return list(self._d)

    def values(self) -> list:
        return list(self._d.values())

    def clear(self) -> None:
        self._d.clear()

    def is_empty(self) -> bool:
        return not self._d


class OperatorStateBackend:
    """List, union and broadcast state of one operator subtask. Restored states a function does
    not register again are kept and written to the next snapshots unchanged."""

    def __init__(self, where: str, restored: dict[str, tuple[metainfo.StateMetaInfo, Any]] | None = None):
        self.where = where
        #: name -> (meta, list or dict)
        self.states: dict[str, tuple[metainfo.StateMetaInfo, Any]] = dict(restored or {})
        self._handles: dict[str, Any] = {}

    def _register(self, name: str, mode: str, element: savepoint_types.TypeInfo | None, key: savepoint_types.TypeInfo | None):
        h = self._handles.get(name)
        if h is not None:
            meta = self.states[name][0]
            if meta.kind != mode:
                raise StateMigrationError(f"{self.where}: operator state '{name}' is already registered as {meta.kind}")
            return h
        restored = self.states.get(name)
        meta = resolve_operator_meta(name, mode, element, key, restored[0] if restored else None, self.where)
        container = restored[1] if restored else ({} if mode == "BROADCAST" else [])
        self.states[name] = (meta, container)
        h = BroadcastState(name, container) if mode == "BROADCAST" else OperatorListState(name, container)
        self._handles[name] = h
        return h

    def get_list_state(self, desc: ListStateDescriptor) -> OperatorListState:
        return self._register(desc.name, "SPLIT_DISTRIBUTE", desc.type_info, None)

    def get_union_list_state(self, desc: ListStateDescriptor) -> OperatorListState:
        return self._register(desc.name, "UNION", desc.type_info, None)

    def get_broadcast_state(self, desc: MapStateDescriptor) -> BroadcastState:
        return self._register(desc.name, "BROADCAST", desc.value_type, desc.key_type)

    def get_registered_state_names(self) -> set[str]:
        return {n for n, (m, _) in self.states.items() if m.kind != "BROADCAST"}

    def get_registered_broadcast_state_names(self) -> set[str]:
        return {n for n, (m, _) in self.states.items() if m.kind == "BROADCAST"}

    def snapshot(self, location: str) -> handles.OperatorStreamHandle | None:
        if not self.states:
            return None
        data, offsets = operator.encode_operator_stream(list(self.states.values()))
        return handles.OperatorStreamHandle(offsets, write_stream(location, data))
