"""Per-state decoders of keyed state entries: how one stored entry of a state (canonical
key/value bytes, or a heap-native record) becomes (identity, key, namespace, value)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from . import metainfo
from .errors import CorruptStateError, UnsupportedSerializerError
from .metainfo import StateMetaInfo
from .types import TypeInfo
from .types.roles import as_list, as_map

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


#: what one stored entry of a keyed state holds (:class:`StateShape`.form)
VALUE, LIST, RAW_LIST, MAP, RAW_MAP, TIMER = "VALUE", "LIST", "RAW_LIST", "MAP", "RAW_MAP", "TIMER"


@dataclass(frozen=True)
class StateShape:
    """A keyed state's kind and types as its stored entries hold them, computed once per state
    (:func:`state_shape`): the one place where the state kind and the value serializer's type are
    matched, which every decoder (Python, compiled rows, columnar) reads."""

    #: VALUE (also reducing / aggregating), LIST (a list serializer), RAW_LIST (a list state whose
    #: serializer is no list fstate knows: its value is the element), MAP (a map serializer),
    #: RAW_MAP (a map state whose serializer fstate cannot read as a map), TIMER (a priority queue)
    form: str
    key: TypeInfo
    namespace: TypeInfo
    #: VALUE: the value; LIST / RAW_LIST: an element; MAP: a user value; RAW_MAP: the map
    #: serializer's type; TIMER: the queue's element (a TimerType when fstate reads it)
    value: TypeInfo
    #: the whole value serializer's type (the heap-native layout stores whole values)
    serializer: TypeInfo
    #: MAP: the user key
    user_key: TypeInfo | None = None

    @property
    def ambiguous(self) -> bool:
        """Key and namespace both of variable length: the canonical layout writes their lengths."""
        return self.key.length < 0 and self.namespace.length < 0

    @property
    def is_map(self) -> bool:
        return self.form in (MAP, RAW_MAP)


def state_shape(key_type: TypeInfo, info: StateMetaInfo) -> StateShape:
    """The :class:`StateShape` of a keyed state (``key_type``: the backend's key serializer)."""
    vt, ns = info.value_type, info.namespace_type
    if info.backend_type == metainfo.PRIORITY_QUEUE:
        return StateShape(TIMER, key_type, ns, vt, vt)
    if info.kind == "LIST":
        list_type = as_list(vt)
        return (StateShape(LIST, key_type, ns, list_type.element, vt) if list_type is not None
                else StateShape(RAW_LIST, key_type, ns, vt, vt))
    if info.kind == "MAP":
        map_type = as_map(vt)
        return (StateShape(MAP, key_type, ns, map_type.value, vt, map_type.key) if map_type is not None
                else StateShape(RAW_MAP, key_type, ns, vt, vt))
    return StateShape(VALUE, key_type, ns, vt, vt)


@dataclass
class StateCodec:
    """How to turn one stored entry of a state into (identity, key, namespace, value)."""

    state_id: int
    info: StateMetaInfo
    kind: str
    canonical: Callable[[bytes, bytes], tuple[bytes, Any, Any, Any]] | None
    native: Callable[[bytes, int], tuple[bytes, Any, Any, Any, int]] | None
    shape: StateShape


def _raw_rest(b, p):
    """An undecodable part stored last: the rest of the bytes."""
    return bytes(b[p:]), len(b)


def canonical_decoder(shape: StateShape, info: StateMetaInfo, prefix: int, source: str | None):
    """Strict: every key and value must decode to exactly its stored bytes (the compiled scanner
    checks the same)."""
    if shape.form == TIMER:
        return _timer_decoder(shape, prefix)
    split = _key_splitter(shape, prefix, source)

    def whole_key(kb):  # the key bytes of a non-map state end with the namespace
        ident, key, ns, p = split(kb)
        _exact_length(p, len(kb), "key")
        return ident, key, ns

    if shape.form in (LIST, RAW_LIST):
        return _list_decoder(shape.value, whole_key)
    if shape.form == RAW_MAP:
        if shape.value.fully_decodable:
            raise CorruptStateError(f"map state '{info.name}' has value serializer {shape.value.name}", source)

        def opaque_map_entry(kb, vb):  # a map serializer fstate cannot read: raw user key and value
            ident, key, ns, p = split(kb)
            return ident, key, ns, (bytes(kb[p:]), None if vb[0] else bytes(vb[1:]))

        return opaque_map_entry
    if shape.form == MAP:
        return _map_decoder(shape, split)
    dec_val = shape.value.decoder() if shape.value.fully_decodable else (lambda b, p: (bytes(b), len(b)))

    def value_entry(kb, vb):
        ident, key, ns = whole_key(kb)
        v, p = dec_val(vb, 0)
        _exact_length(p, len(vb), "value")
        return ident, key, ns, v

    return value_entry


def _timer_decoder(shape: StateShape, prefix: int):
    if not shape.value.fully_decodable:
        def opaque_timer(kb, vb):  # the raw timer element (timestamp, key, namespace) as the key
            raw = bytes(kb[prefix:])
            return raw, raw, None, None

        return opaque_timer
    dec_elem = shape.value.decoder()

    def timer(kb, vb):
        (ts, key, ns), end = dec_elem(kb, prefix)
        _exact_length(end, len(kb), "timer")
        if len(vb):
            raise ValueError(f"a timer entry has a {len(vb)}-byte value (timers store none)")
        return kb[prefix:end], key, ns, ts

    return timer


def _key_splitter(shape: StateShape, prefix: int, source: str | None):
    """``split(key bytes)`` → (identity, key, namespace, end): the key and namespace of a canonical
    entry's key bytes (and where they end: a map state's user key follows)."""
    key_t, ns_t = shape.key, shape.namespace
    ambiguous = shape.ambiguous
    dec_ns = ns_t.decoder()
    if key_t.fully_decodable:
        dec_key = key_t.decoder()
    elif ns_t.length >= 0 and not shape.is_map and not ambiguous:
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

    return split


def _list_decoder(elem: TypeInfo, whole_key):
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
        _exact_length(p, n, "list")
        return ident, key, ns, out

    return list_entry


def _map_decoder(shape: StateShape, split):
    dec_uk = shape.user_key.decoder() if shape.user_key.fully_decodable else _raw_rest
    dec_uv = shape.value.decoder() if shape.value.fully_decodable else _raw_rest

    def map_entry(kb, vb):
        ident, key, ns, p = split(kb)
        uk, p = dec_uk(kb, p)
        _exact_length(p, len(kb), "map key")
        null = vb[0]
        if null:
            if null != 1:
                raise ValueError(f"map value null flag {null}")
            if len(vb) > 2:
                raise ValueError(f"a null map value has {len(vb) - 1} bytes after its null flag")
            uv = None  # (heap savepoints write a byte after the null flag: its value is not checked)
        else:
            uv, p = dec_uv(vb, 1)
            _exact_length(p, len(vb), "map value")
        return ident, key, ns, (uk, uv)

    return map_entry


def _exact_length(end: int, length: int, what: str) -> None:
    """A stored key or value is exactly its serializer's bytes: a decode that stops short (or runs
    past) means the bytes are damaged."""
    if end != length:
        raise ValueError(f"the {what} decodes to {end} of its {length} bytes")


def native_decoder(shape: StateShape):
    """Heap-native entries: namespace, key, whole value (no framing: every type must decode)."""
    if shape.form == TIMER:
        if not shape.value.fully_decodable:
            return None
        dec_elem = shape.value.decoder()

        def timer(buf, p):
            start = p
            (ts, key, ns), p = dec_elem(buf, p)
            return buf[start + 8:p], key, ns, ts, p

        return timer
    for t in (shape.key, shape.namespace, shape.serializer):
        if not t.fully_decodable:
            return None
    dec_ns = shape.namespace.decoder()
    dec_key = shape.key.decoder()
    dec_val = shape.serializer.decoder()
    is_map = shape.is_map

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
        shape = state_shape(meta.key_type, info)
        try:
            canonical = canonical_decoder(shape, info, prefix, source)
        except UnsupportedSerializerError:
            canonical = None
        out.append(StateCodec(i, info, info.kind, canonical, native_decoder(shape), shape))
    return out


def frozen(value: Any) -> Any:
    """A decoded key as a dict key, the same for the same key however it was decoded: lists and
    tuples (also inside rows) as tuples, maps as frozen sets of their entries (whatever their order),
    bytearrays as bytes (``fstate sizes`` counts keys by it)."""
    if isinstance(value, (list, tuple)):
        return tuple(frozen(x) for x in value)
    if isinstance(value, dict):
        return frozenset((frozen(k), frozen(x)) for k, x in value.items())
    if isinstance(value, bytearray):
        return bytes(value)
    return value
