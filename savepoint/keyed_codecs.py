"""Per-state decoders of keyed state entries: how one stored entry of a state (canonical
key/value bytes, or a heap-native record) becomes (identity, key, namespace, value)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from . import metainfo
from .errors import CorruptStateError, UnsupportedSerializerError
from .metainfo import StateMetaInfo
from .types import ListType, MapType

if TYPE_CHECKING:
    from .keyed_proxy import KeyedBackendMeta

#: the byte between the elements of a list state's value
LIST_DELIMITER = 0x2C


def key_group_prefix_size(max_parallelism: int) -> int:
    return 1 if max_parallelism <= 128 else 2


def var_len_size(n: int) -> int:
    size = 1
    n >>= 8
    while n:
        size += 1
        n >>= 8
    return size


@dataclass
class StateCodec:
    """How to turn one stored entry of a state into (identity, key, namespace, value)."""

    state_id: int
    info: StateMetaInfo
    kind: str
    canonical: Callable[[bytes, bytes], tuple[bytes, Any, Any, Any]] | None
    native: Callable[[bytes, int], tuple[bytes, Any, Any, Any, int]] | None


def canonical_decoder(meta: KeyedBackendMeta, info: StateMetaInfo, prefix: int, source: str | None):
    """Strict: every key and value must decode to exactly its stored bytes (the compiled scanner
    checks the same)."""
    kind = info.kind
    _exact = _exact_length
    if info.backend_type == metainfo.PRIORITY_QUEUE:
        if not info.value_type.fully_decodable:
            def opaque_timer(kb, vb):  # the raw timer element (timestamp, key, namespace) as the key
                raw = bytes(kb[prefix:])
                return raw, raw, None, None

            return opaque_timer
        dec_elem = info.value_type.decoder()

        def timer(kb, vb):
            (ts, key, ns), end = dec_elem(kb, prefix)
            _exact(end, len(kb), "timer")
            if len(vb):
                raise ValueError(f"a timer entry has a {len(vb)}-byte value (timers store none)")
            return kb[prefix:end], key, ns, ts

        return timer

    key_t, ns_t = meta.key_type, info.namespace_type
    ambiguous = key_t.length < 0 and ns_t.length < 0
    dec_ns = ns_t.decoder()
    if key_t.fully_decodable:
        dec_key = key_t.decoder()
    elif ns_t.length >= 0 and kind != "MAP" and not ambiguous:
        # the bytes a fixed-length namespace takes (VoidNamespace declares length 0 but writes a byte)
        _, ns_len = dec_ns(bytes(ns_t.length + 16), 0)

        def dec_key(kb, p):  # opaque key: everything up to the fixed-size namespace
            end = len(kb) - ns_len
            return bytes(kb[p:end]), end
    else:
        raise UnsupportedSerializerError(f"keys of type {key_t.name} cannot be decoded", source)

    def split(kb):
        key, p = dec_key(kb, prefix)
        key_end = p
        if ambiguous:
            p += var_len_size(p - prefix)
        ns_start = p
        ns, p = dec_ns(kb, p)
        ident = kb[prefix:key_end] + kb[ns_start:p] if ambiguous else kb[prefix:p]
        if ambiguous:
            p += var_len_size(p - ns_start)
        return ident, key, ns, p

    def whole_key(kb):  # the key bytes of a non-map state end with the namespace
        ident, key, ns, p = split(kb)
        _exact(p, len(kb), "key")
        return ident, key, ns

    vt = info.value_type
    if kind == "LIST":
        elem = vt.element if isinstance(vt, ListType) else vt
        if not elem.fully_decodable:
            def opaque_list(kb, vb):
                ident, key, ns = whole_key(kb)
                return ident, key, ns, [bytes(vb)]

            return opaque_list
        dec_elem = elem.decoder()

        def list_entry(kb, vb):
            ident, key, ns = whole_key(kb)
            out = []
            p, n = 0, len(vb)
            while p < n:
                v, p = dec_elem(vb, p)
                out.append(v)
                if p < n:
                    if vb[p] != LIST_DELIMITER:
                        raise ValueError(f"list state element not followed by the ',' delimiter at byte {p}")
                    p += 1
                    if p == n:
                        raise ValueError("the list ends with the ',' delimiter")
            _exact(p, n, "list")
            return ident, key, ns, out

        return list_entry
    if kind == "MAP" and not vt.fully_decodable and not isinstance(vt, MapType):
        def opaque_map_entry(kb, vb):  # a map serializer fstate cannot read: raw user key and value
            ident, key, ns, p = split(kb)
            return ident, key, ns, (bytes(kb[p:]), None if vb[0] else bytes(vb[1:]))

        return opaque_map_entry
    if kind == "MAP":
        if not isinstance(vt, MapType):
            raise CorruptStateError(f"map state '{info.name}' has value serializer {vt.name}", source)
        dec_uk = vt.key.decoder() if vt.key.fully_decodable else (lambda b, p: (bytes(b[p:]), len(b)))
        dec_uv = vt.value.decoder() if vt.value.fully_decodable else (lambda b, p: (bytes(b[p:]), len(b)))

        def map_entry(kb, vb):
            ident, key, ns, p = split(kb)
            uk, p = dec_uk(kb, p)
            _exact(p, len(kb), "map key")
            null = vb[0]
            if null:
                if null != 1:
                    raise ValueError(f"map value null flag {null}")
                if len(vb) > 2:
                    raise ValueError(f"a null map value has {len(vb) - 1} bytes after its null flag")
                uv = None  # (heap savepoints write a byte after the null flag: its value is not checked)
            else:
                uv, p = dec_uv(vb, 1)
                _exact(p, len(vb), "map value")
            return ident, key, ns, (uk, uv)

        return map_entry
    dec_val = vt.decoder() if vt.fully_decodable else (lambda b, p: (bytes(b), len(b)))

    def value_entry(kb, vb):
        ident, key, ns = whole_key(kb)
        v, p = dec_val(vb, 0)
        _exact(p, len(vb), "value")
        return ident, key, ns, v

    return value_entry


def _exact_length(end: int, length: int, what: str) -> None:
    """A stored key or value is exactly its serializer's bytes: a decode that stops short (or runs
    past) means the bytes are damaged."""
    if end != length:
        raise ValueError(f"the {what} decodes to {end} of its {length} bytes")


def native_decoder(meta: KeyedBackendMeta, info: StateMetaInfo, source: str | None):
    """Heap-native entries: namespace, key, whole value (no framing: every type must decode)."""
    if info.backend_type == metainfo.PRIORITY_QUEUE:
        if not info.value_type.fully_decodable:
            return None
        dec_elem = info.value_type.decoder()

        def timer(buf, p):
            start = p
            (ts, key, ns), p = dec_elem(buf, p)
            return buf[start + 8:p], key, ns, ts, p

        return timer
    for t in (meta.key_type, info.namespace_type, info.value_type):
        if not t.fully_decodable:
            return None
    dec_ns = info.namespace_type.decoder()
    dec_key = meta.key_type.decoder()
    dec_val = info.value_type.decoder()
    is_map = info.kind == "MAP"

    def entry(buf, p):
        ns_start = p
        ns, p = dec_ns(buf, p)
        ns_end = p
        key, p = dec_key(buf, p)
        ident = buf[ns_end:p] + buf[ns_start:ns_end]
        v, p = dec_val(buf, p)
        if is_map:
            v = list(v.items())
        return ident, key, ns, v, p

    return entry


def state_codecs(meta: KeyedBackendMeta, max_parallelism: int, source: str | None = None) -> list[StateCodec]:
    """The decoders of every state; strict: a key or value that decodes to fewer or more bytes than
    stored is an error."""
    prefix = key_group_prefix_size(max_parallelism)
    out = []
    for i, info in enumerate(meta.states):
        try:
            canonical = canonical_decoder(meta, info, prefix, source)
        except UnsupportedSerializerError:
            canonical = None
        out.append(StateCodec(i, info, info.kind, canonical, native_decoder(meta, info, source)))
    return out
