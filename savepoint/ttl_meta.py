"""The TTL wrapping of keyed state meta infos (Flink's ``TtlStateFactory$TtlSerializerSnapshot`` around a
state's stored value: the value, each list element, each map value).

Format facts shared by every room that re-encodes TTL state with its timestamps kept: the stream
runtime (its TTL states and restore) and the writers that carry state into another savepoint
(``writers/reencode.py``). :func:`with_timestamped_states` makes a keyed backend's TTL states decode
to :class:`~fstate.savepoint.types.TtlValue` (value and last access) instead of the bare value.
"""

from __future__ import annotations

import dataclasses

from . import metainfo
from . import types as savepoint_types
from .types.roles import as_list, as_map, as_ttl

# =============================================================================================
# the TTL layout of keyed state meta infos


def ttl_type(value_type: savepoint_types.TypeInfo) -> savepoint_types.TtlType:
    """Flink's ``TtlSerializer(LongSerializer, value serializer)``, decoding to :class:`TtlValue`."""
    return savepoint_types.TtlType(savepoint_types.LONG, value_type, timestamped=True)


def wrap_meta_value_type(kind: str, value_type: savepoint_types.TypeInfo) -> savepoint_types.TypeInfo:
    """The type ``keyed.value_state_meta`` wants for a TTL state of ``kind`` whose plain type is
    ``value_type`` (element for LIST, MapType for MAP): TTL per element and per map value."""
    if kind == "MAP":
        return savepoint_types.MapType(value_type.key, ttl_type(value_type.value))
    return ttl_type(value_type)


def stored_ttl(meta: metainfo.StateMetaInfo) -> savepoint_types.TtlType | None:
    """The TTL node of a keyed state's stored value type (the value, list element or map value)."""
    map_type = as_map(meta.value_type) if meta.kind == "MAP" else None
    return as_ttl(meta.element_type if map_type is None else map_type.value)


def is_ttl_meta(meta: metainfo.StateMetaInfo) -> bool:
    return stored_ttl(meta) is not None


def rebuild(meta: metainfo.StateMetaInfo, stored: savepoint_types.TypeInfo) -> metainfo.StateMetaInfo:
    vt = meta.value_type
    if meta.kind == "LIST":
        stored = stored if as_list(vt) is None else savepoint_types.ListType(stored, vt.snapshot_class)
    elif meta.kind == "MAP":
        stored = savepoint_types.MapType(vt.key, stored)
    serializers = dict(meta.serializers)
    serializers[metainfo.VALUE_SERIALIZER] = stored
    return metainfo.StateMetaInfo(meta.name, meta.backend_type, dict(meta.options), serializers)


def timestamped_meta(meta: metainfo.StateMetaInfo) -> metainfo.StateMetaInfo:
    """``meta`` with its TTL node decoding to :class:`TtlValue` (unchanged without TTL)."""
    node = stored_ttl(meta)
    if node is None or node.timestamped:
        return meta
    return rebuild(meta, node.with_timestamps())


def plain_meta(meta: metainfo.StateMetaInfo) -> metainfo.StateMetaInfo:
    """``meta`` without TTL: the user value (element, map value) type."""
    node = stored_ttl(meta)
    return meta if node is None else rebuild(meta, node.value)


def ttl_meta(meta: metainfo.StateMetaInfo) -> metainfo.StateMetaInfo:
    """``meta`` with TTL (timestamped), from one without."""
    if is_ttl_meta(meta):
        return timestamped_meta(meta)
    inner = meta.value_type.value if meta.kind == "MAP" else meta.element_type
    return rebuild(meta, ttl_type(inner))


def with_timestamped_states(meta):
    """A keyed backend's meta (``KeyedBackendMeta``) whose TTL states decode to :class:`TtlValue`
    (for restoring: the runtime keeps every value's last access)."""
    states = [timestamped_meta(s) if s.backend_type == metainfo.KEY_VALUE else s for s in meta.states]
    if all(a is b for a, b in zip(states, meta.states)):
        return meta
    return dataclasses.replace(meta, states=states)


__all__ = ["ttl_type", "wrap_meta_value_type", "stored_ttl", "is_ttl_meta", "timestamped_meta", "plain_meta",
           "ttl_meta", "with_timestamped_states"]
