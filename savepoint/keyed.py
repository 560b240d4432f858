"""The key-group stream format of keyed state: the keyed-backend proxy, both data layouts
(canonical savepoints; heap-native checkpoints and native savepoints), their plain Python
decoders (the reference), grouping entries into rows, timers, and writing the canonical layout.

Which layout a stream has and which decoder reads it (this module's, or the compiled scanner in
:mod:`._fastpath`) is decided in one place, :mod:`.keyed_state`; read keyed state through it.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Iterator

from . import metainfo
from .binary import DataOutput
from .compression import decompress_framed
from .errors import DECODE_ERRORS, CorruptStateError, UnsupportedSerializerError
from .handles import KeyGroupsHandle
from .keyed_codecs import LIST_DELIMITER, StateCodec, key_group_prefix_size, state_codecs  # noqa: F401
# the proxy's names are part of this module's API (keyed.read_keyed_proxy, keyed.KeyedBackendMeta, ...)
from .keyed_proxy import CURRENT_VERSION, KeyedBackendMeta, header_end, read_keyed_proxy, write_keyed_proxy  # noqa: F401
from .metainfo import StateMetaInfo
from . import types as savepoint_types
from .types.roles import as_map

END_OF_KEY_GROUP = 0xFFFF
META_FOLLOWS = 0x80

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")


# ---------------------------------------------------------------------------------------------
# iterating entries


Entry = tuple[int, int, bytes, Any, Any, Any]  # state id, key group, identity, key, namespace, value


def key_group_regions(handle: KeyGroupsHandle, length: int) -> list[tuple[int, int, int]]:
    """(key group, start, end) of every key group with data, by the handle's offsets."""
    # Offset 0 is the proxy header, never key-group data: it marks an empty key group.
    present = [(handle.start_key_group + i, off) for i, off in enumerate(handle.offsets) if off != 0]
    starts = sorted({off for _, off in present} | {length})
    out = []
    for kg, off in present:
        nxt = starts[starts.index(off) + 1] if off < length else length
        out.append((kg, off, nxt))
    return out


def key_group_data(buf: bytes, start: int, end: int, kg: int, compressed: bool, source: str | None
                   ) -> tuple[bytes, int, int]:
    """(bytes, start, end) of one key group's canonical entries: its region of the stream, or the
    decompressed stream of a compressed one, which must end exactly where the region ends."""
    if not compressed:
        return buf, start, end
    data, _ = decompress_framed(buf, start, end, source=source)
    if framed_length(buf, start, end) != end - start:
        raise CorruptStateError(f"key group {kg}: its compressed stream does not end where the next key "
                                f"group starts (byte {end})", source)
    return data, 0, len(data)


def checked_regions(regions: Iterable[tuple[int, int, int]], key_groups: Iterable[int] | None,
                    meta: KeyedBackendMeta, length: int, source: str | None) -> Iterator[tuple[int, int, int]]:
    """The regions of the wanted key groups (all when ``key_groups`` is None), each checked to start
    inside the stream's data (after the proxy header, within its ``length`` bytes)."""
    wanted = None if key_groups is None else set(key_groups)
    for kg, start, end in regions:
        if wanted is not None and kg not in wanted:
            continue
        if not meta.header_size <= start <= length:
            raise CorruptStateError(f"key group {kg}: offset {start} is outside the state stream of "
                                    f"{length} bytes", source)
        yield kg, start, end


def is_canonical_layout(buf: bytes, handle: KeyGroupsHandle, meta: KeyedBackendMeta,
                        regions: list[tuple[int, int, int]], codecs: list[StateCodec], source: str | None,
                        max_parallelism: int = 128) -> bool:
    """Which data layout a key-group stream has.

    Savepoint handles (tag 7) are canonical. Plain key-group handles (tags 3/12) hold either the
    heap backend's native layout or, for RocksDB full checkpoints, the canonical full-snapshot
    layout; the handle does not say which. Canonical streams leave empty key groups at offset 0;
    otherwise the first key group is parsed as heap-native and must end exactly where the next
    key group starts.
    """
    if handle.canonical or any(o == 0 for o in handle.offsets):
        return True
    if not regions:
        return False
    kg, start, end = min(regions, key=lambda r: r[1])
    try:
        consumed = _native_block_end(buf, start, end, kg, meta, codecs, source)
    except UnsupportedSerializerError:
        # a state fstate cannot decode stops the trial parse: decide by the framing alone
        return _looks_canonical(buf, start, end, kg, len(codecs), max_parallelism)
    except (CorruptStateError, *DECODE_ERRORS):
        return True
    return consumed != end


def _looks_canonical(buf: bytes, start: int, end: int, kg: int, n_states: int, max_parallelism: int) -> bool:
    """Canonical blocks start with u16 state id, i32 key length, key bytes whose first byte is the
    key-group prefix; heap-native blocks start with the i32 key group."""
    try:
        sid = _U16.unpack_from(buf, start)[0]
        klen = _I32.unpack_from(buf, start + 2)[0]
        if sid >= n_states or klen <= 0 or start + 6 + klen > end:
            return False
        first = buf[start + 6] & 0x7F
        stored = ((first << 8) | buf[start + 7]) if key_group_prefix_size(max_parallelism) == 2 else first
        return stored == kg and _I32.unpack_from(buf, start)[0] != kg
    except (struct.error, IndexError):
        return False


def _native_block_end(buf, start, end, kg, meta, codecs, source) -> int:
    if _I32.unpack_from(buf, start)[0] != kg:
        return -1
    pos = start + 4
    seen = set()
    for _ in range(len(codecs)):
        if meta.compressed:
            pos += framed_length(buf, pos, end)
            continue
        sid = _U16.unpack_from(buf, pos)[0]
        if sid in seen or sid >= len(codecs):
            return -1
        seen.add(sid)
        gen = _native_state_block(buf, pos, kg, codecs, None, source)
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                pos = stop.value
                break
    return pos


def _truncated(kg: int, limit: int, source: str | None) -> CorruptStateError:
    return CorruptStateError(f"key group {kg}: its data ends at byte {limit}, inside an entry", source)


def canonical_pairs(data: bytes, pos: int, limit: int, kg: int, n_states: int, prefix: int,
                    source: str | None) -> Iterator[tuple[int, int, int, int]]:
    """The stored (key bytes, value bytes) pairs of one key group's canonical entries in
    ``data[pos:limit]``, checked as they are framed: (state id, key start, key end, value end), the
    value starting 4 bytes after the key's end. The key's first byte may carry the meta-follows flag
    (:data:`META_FOLLOWS`); the end-of-key-group mark must be the last two bytes."""
    unpack_i32 = _I32.unpack_from
    if pos + 2 > limit:
        raise _truncated(kg, limit, source)
    state_id = _U16.unpack_from(data, pos)[0]
    pos += 2
    while True:
        if state_id >= n_states:
            raise CorruptStateError(f"key group {kg}: state id {state_id} but the backend has {n_states} states",
                                    source)
        if pos + 4 > limit:
            raise _truncated(kg, limit, source)
        klen = unpack_i32(data, pos)[0]
        pos += 4
        kstart, kend = pos, pos + klen
        if klen <= 0 or kend > limit:
            raise CorruptStateError(f"key group {kg}: invalid key length {klen} at byte {pos - 4}", source)
        if kend + 4 > limit:
            raise _truncated(kg, limit, source)
        vlen = unpack_i32(data, kend)[0]
        pos = kend + 4 + vlen
        if vlen < 0 or pos > limit:
            raise CorruptStateError(f"key group {kg}: invalid value length {vlen} at byte {kend}", source)
        first = data[kstart]
        stored_kg = (first & 0x7F) if prefix == 1 else (((first & 0x7F) << 8) | data[kstart + 1])
        if stored_kg != kg:
            raise CorruptStateError(f"key group {kg}: an entry is prefixed with key group {stored_kg}", source)
        yield state_id, kstart, kend, pos
        if first & META_FOLLOWS:
            if pos + 2 > limit:
                raise _truncated(kg, limit, source)
            nxt = _U16.unpack_from(data, pos)[0]
            pos += 2
            if nxt == END_OF_KEY_GROUP:
                if pos != limit:
                    raise CorruptStateError(f"key group {kg}: the end-of-key-group mark is at byte {pos - 2}, "
                                            f"but the key group's data ends at byte {limit}", source)
                return
            state_id = nxt


def canonical_key_group(buf: bytes, start: int, end: int, kg: int, meta: KeyedBackendMeta, codecs: list[StateCodec],
                        states: set[int] | None, max_parallelism: int, source: str | None) -> Iterator[Entry]:
    """The entries of one key group of the canonical layout (the plain Python decoder); they lie
    inside [start, end) and the end-of-key-group mark is its last two bytes (the C scanner checks
    the same way)."""
    data, pos, limit = key_group_data(buf, start, end, kg, meta.compressed, source)
    return canonical_entries(data, pos, limit, kg, codecs, states, max_parallelism, source)


def canonical_entries(data: bytes, pos: int, limit: int, kg: int, codecs: list[StateCodec], states: set[int] | None,
                      max_parallelism: int, source: str | None) -> Iterator[Entry]:
    """The entries of one key group's uncompressed canonical entries in ``data[pos:limit]`` (the plain
    Python decoder)."""
    for state_id, kstart, kend, vend in canonical_pairs(data, pos, limit, kg, len(codecs),
                                                        key_group_prefix_size(max_parallelism), source):
        if states is None or state_id in states:
            codec = codecs[state_id]
            if codec.canonical is None:
                raise UnsupportedSerializerError(
                    f"state '{codec.info.name}' has types fstate cannot decode", source)
            ident, key, ns, value = codec.canonical(unflagged_key(data, kstart, kend), data[kend + 4:vend])
            yield state_id, kg, ident, key, ns, value


def unflagged_key(data: bytes, start: int, end: int) -> bytes:
    """A canonical entry's key bytes without the meta-follows flag on its first byte."""
    first = data[start]
    if first & META_FOLLOWS:
        return bytes((first & 0x7F,)) + data[start + 1:end]
    return data[start:end]


def native_key_group(buf: bytes, start: int, end: int, kg: int, meta: KeyedBackendMeta, codecs: list[StateCodec],
                     states: set[int] | None, source: str | None) -> Iterator[Entry]:
    """The entries of one key group of the heap-native layout (the plain Python decoder); its state
    blocks (and their compressed streams) end exactly where the key group's region ends."""
    stored = _I32.unpack_from(buf, start)[0]
    if stored != kg:
        raise CorruptStateError(f"key group {kg}: the block starts with key group {stored}", source)
    pos = start + 4
    seen: set[int] = set()  # every state's block once
    if meta.compressed:
        for _ in range(len(codecs)):
            data, _ = decompress_framed(buf, pos, end, source=source)
            # the stream ends where the next identifier chunk begins
            consumed = framed_length(buf, pos, end)
            used = yield from _native_state_block(data, 0, kg, codecs, states, source, seen)
            if used != len(data):
                raise CorruptStateError(f"key group {kg}: a compressed state block holds {len(data)} bytes, "
                                        f"its entries {used}", source)
            pos += consumed
    else:
        for _ in range(len(codecs)):
            pos = yield from _native_state_block(buf, pos, kg, codecs, states, source, seen)
    if pos != end:
        raise CorruptStateError(f"key group {kg}: its data ends at byte {pos}, the next key group starts at "
                                f"byte {end}", source)


def framed_length(buf: bytes, start: int, end: int) -> int:
    """The bytes a compressed key group (framed chunks) takes from ``start``, up to ``end``."""
    pos = start
    seen = False
    while pos + 4 <= end:
        ctype = buf[pos]
        if ctype == 0xFF and seen:
            break
        seen = True
        pos += 4 + (buf[pos + 1] | (buf[pos + 2] << 8) | (buf[pos + 3] << 16))
    return pos - start


def _native_state_block(data, pos, kg, codecs, states, source, seen: set[int] | None = None):
    state_id = _U16.unpack_from(data, pos)[0]
    count = _I32.unpack_from(data, pos + 2)[0]
    pos += 6
    if state_id >= len(codecs):
        raise CorruptStateError(f"key group {kg}: state id {state_id} but the backend has {len(codecs)} states",
                                source)
    if seen is not None:
        if state_id in seen:
            raise CorruptStateError(f"key group {kg}: a second block of state id {state_id}", source)
        seen.add(state_id)
    if count < 0 or count > len(data) - pos:
        raise CorruptStateError(f"key group {kg}: invalid entry count {count}", source)
    codec = codecs[state_id]
    if count and codec.native is None:
        raise UnsupportedSerializerError(
            f"state '{codec.info.name}' has types fstate cannot decode in a checkpoint's heap layout", source)
    want = states is None or state_id in states
    for _ in range(count):
        ident, key, ns, value, pos = codec.native(data, pos)
        if want:
            yield state_id, kg, ident, key, ns, value
    return pos


# ---------------------------------------------------------------------------------------------
# rows: one per (key, namespace) with a value per selected state


def rows_from_entries(entries: Iterable[Entry], codecs: list[StateCodec], state_ids: list[int]
                      ) -> Iterator[tuple[int, Any, Any, list]]:
    """Groups entries (ordered by key group; any order within one) into one row per (key,
    namespace): (key group, key, namespace, [value of each state in ``state_ids`` or None]).
    Shared by every storage layout (key-group streams, RocksDB)."""
    column = {sid: i for i, sid in enumerate(state_ids)}
    is_map = [codecs[sid].kind == "MAP" for sid in state_ids]
    is_list = [codecs[sid].kind == "LIST" for sid in state_ids]
    width = len(state_ids)
    current_kg = None
    rows: dict[bytes, list] = {}
    for sid, kg, ident, key, ns, value in entries:
        if kg != current_kg:
            if rows:
                yield from _flush(current_kg, rows)
            rows = {}
            current_kg = kg
        row = rows.get(ident)
        if row is None:
            row = rows[ident] = [key, ns, [None] * width]
        c = column[sid]
        vals = row[2]
        if is_map[c]:
            m = vals[c]
            if m is None:
                m = vals[c] = {}
            if isinstance(value, tuple):
                m[value[0]] = value[1]
            else:
                m.update(value)
        elif is_list[c] and vals[c] is not None:
            vals[c].extend(value)
        else:
            vals[c] = value
    if rows:
        yield from _flush(current_kg, rows)


def _flush(kg, rows):
    for key, ns, vals in rows.values():
        yield kg, key, ns, vals


def timers_from_entries(entries: Iterable[Entry], meta: KeyedBackendMeta
                        ) -> Iterator[tuple[str, str, int, Any, Any, int]]:
    """Timer entries → (timer service, kind 'event'/'processing', timestamp, key, namespace, key group)."""
    timer_ids = {i: s for i, s in meta.timer_states}
    for sid, kg, _, key, ns, ts in entries:
        name = timer_ids[sid].name[len(metainfo.TIMER_PREFIX):]
        kind, _, service = name.partition("_")
        yield service, kind, ts, key, ns, kg


# ---------------------------------------------------------------------------------------------
# writing the canonical layout (what Flink's savepoints use, readable by every backend)


def value_state_meta(name: str, kind: str, value_type: savepoint_types.TypeInfo,
                     namespace_type: savepoint_types.TypeInfo = savepoint_types.VOID_NAMESPACE) -> StateMetaInfo:
    """Meta info of a keyed state as Flink registers it. ``value_type`` is the user-visible type:
    the element type for LIST, a MapType for MAP, the value/accumulator type otherwise."""
    kind = kind.upper()
    if kind not in ("VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING"):
        raise ValueError(f"unknown keyed state kind {kind}")
    if kind == "MAP" and as_map(value_type) is None:
        raise ValueError(f"map state '{name}' needs a MapType, got {value_type.name}")
    stored = savepoint_types.ListType(value_type) if kind == "LIST" else value_type
    return StateMetaInfo(name, metainfo.KEY_VALUE, {metainfo.KEYED_STATE_TYPE: kind},
                         {metainfo.VALUE_SERIALIZER: stored, metainfo.NAMESPACE_SERIALIZER: namespace_type})


def timer_state_meta(kind: str, key_type: savepoint_types.TypeInfo, namespace_type: savepoint_types.TypeInfo = savepoint_types.VOID_NAMESPACE,
                     service: str = "user-timers") -> StateMetaInfo:
    if kind not in ("event", "processing"):
        raise ValueError(f"timer kind must be 'event' or 'processing', not {kind!r}")
    return StateMetaInfo(f"{metainfo.TIMER_PREFIX}{kind}_{service}", metainfo.PRIORITY_QUEUE, {},
                         {metainfo.VALUE_SERIALIZER: savepoint_types.TimerType(key_type, namespace_type)})


def _var_len(out: bytearray, n: int) -> None:
    while True:
        out.append(n & 0xFF)
        n >>= 8
        if not n:
            return


class PairEncoder:
    """Encodes one state's logical values into the canonical (key bytes, value bytes) pairs."""

    def __init__(self, meta: KeyedBackendMeta, state_id: int, max_parallelism: int):
        self.info = info = meta.states[state_id]
        self.kind = info.kind
        self.prefix = key_group_prefix_size(max_parallelism)
        if info.backend_type == metainfo.PRIORITY_QUEUE:
            self._timer = info.value_type.encoder()
            return
        key_t, ns_t = meta.key_type, info.namespace_type
        self._ambiguous = key_t.length < 0 and ns_t.length < 0
        self._key = key_t.encoder()
        self._ns = ns_t.encoder()
        vt = info.value_type
        if self.kind == "LIST":
            self._elem = vt.element.encoder()
        elif self.kind == "MAP":
            self._uk = vt.key.encoder()
            self._uv = vt.value.encoder()
        else:
            self._val = vt.encoder()

    def _prefix(self, kg: int) -> bytearray:
        return bytearray((kg,)) if self.prefix == 1 else bytearray(((kg >> 8) & 0xFF, kg & 0xFF))

    def _composite(self, kg: int, key, ns) -> bytearray:
        out = self._prefix(kg)
        start = len(out)
        self._key(out, key)
        if self._ambiguous:
            _var_len(out, len(out) - start)
        ns_start = len(out)
        self._ns(out, ns)
        if self._ambiguous:
            _var_len(out, len(out) - ns_start)
        return out

    def composite(self, kg: int, key, namespace=None) -> bytes:
        """The key-group prefix, key and namespace bytes every pair of ``key`` starts with (the same
        for the states of one backend whose namespace serializers are equal)."""
        return bytes(self._composite(kg, key, namespace))

    def pairs(self, kg: int, key, value, namespace=None, composite: bytes | None = None) -> list[tuple[bytes, bytes]]:
        """No pairs for an absent value (None, empty list or empty map), as Flink writes nothing.
        ``composite``: :meth:`composite` of ``kg``, ``key``, ``namespace`` when already made."""
        if self.info.backend_type == metainfo.PRIORITY_QUEUE:
            out = self._prefix(kg)
            self._timer(out, (value, key, namespace))
            return [(bytes(out), b"")]
        if value is None:
            return []
        if self.kind == "LIST":
            if not value:
                return []
            v = bytearray()
            for i, x in enumerate(value):
                if x is None:
                    raise ValueError(f"list state '{self.info.name}' cannot hold null elements")
                if i:
                    v.append(LIST_DELIMITER)
                self._elem(v, x)
            return [(composite or bytes(self._composite(kg, key, namespace)), bytes(v))]
        if self.kind == "MAP":
            items = value.items() if isinstance(value, dict) else value
            base = self._composite(kg, key, namespace)
            out = []
            for uk, uv in items:
                k = bytearray(base)
                self._uk(k, uk)
                v = bytearray(b"\x01") if uv is None else bytearray(b"\x00")
                if uv is not None:
                    self._uv(v, uv)
                out.append((bytes(k), bytes(v)))
            return out
        v = bytearray()
        self._val(v, value)
        return [(composite or bytes(self._composite(kg, key, namespace)), bytes(v))]


def encode_key_group(kg: int, pairs_by_state: dict[int, list[tuple[bytes, bytes]]]) -> bytes:
    """One key group's block of the canonical layout; pairs sorted by key bytes (as RocksDB writes
    them). Raises ValueError for a key that appears twice in one state."""
    out = bytearray()
    sids = sorted(sid for sid, p in pairs_by_state.items() if p)
    if not sids:
        return b""
    out += _U16.pack(sids[0])
    for n, sid in enumerate(sids):
        pairs = sorted(pairs_by_state[sid])
        for i, (k, v) in enumerate(pairs):
            if i and pairs[i - 1][0] == k:
                raise ValueError(f"state id {sid}: the same key (and namespace / map key) appears twice "
                                 f"in key group {kg}")
            if i == len(pairs) - 1:
                k = bytes((k[0] | META_FOLLOWS,)) + k[1:]
            out += _I32.pack(len(k))
            out += k
            out += _I32.pack(len(v))
            out += v
        out += _U16.pack(sids[n + 1] if n + 1 < len(sids) else END_OF_KEY_GROUP)
    return bytes(out)


def proxy_bytes(meta: KeyedBackendMeta) -> bytes:
    header = DataOutput()
    write_keyed_proxy(header, meta)
    return header.getvalue()


def encode_canonical_stream(meta: KeyedBackendMeta, start_key_group: int, end_key_group: int,
                            pairs_by_key_group: dict[int, dict[int, list[tuple[bytes, bytes]]]]
                            ) -> tuple[bytes, tuple[int, ...]]:
    """The keyed state stream of one subtask in the canonical layout, and its key-group offsets
    (empty key groups get offset 0)."""
    out = bytearray(proxy_bytes(meta))
    offsets = []
    for kg in range(start_key_group, end_key_group + 1):
        block = encode_key_group(kg, pairs_by_key_group.get(kg) or {})
        offsets.append(len(out) if block else 0)
        out += block
    return bytes(out), tuple(offsets)
