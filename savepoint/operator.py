"""Operator state (list, union and broadcast) of one subtask: the operator-backend proxy and values."""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Any, Iterator

from .binary import DataInput, DataOutput
from .compression import decompress_framed
from . import header_search
from .errors import (DECODE_ERRORS, CorruptStateError, FStateError, UnknownStateError, UnsupportedSerializerError,
                     UnsupportedVersionError)
from .handles import OperatorStreamHandle
from .metainfo import StateMetaInfo, read_state_meta_info, write_state_meta_info

CURRENT_VERSION = 6


@dataclass
class OperatorBackendMeta:
    version: int
    compressed: bool
    states: list[StateMetaInfo]  # list/union states, then broadcast states
    header_size: int = 0

    def state(self, name: str) -> StateMetaInfo | None:
        return next((s for s in self.states if s.name == name), None)


def read_operator_proxy(buf: bytes, source: str | None = None, end: int | None = None) -> OperatorBackendMeta:
    """The header at the start of ``buf``; with ``end`` (:func:`header_end`) known, a serializer
    fstate cannot parse makes only its own state opaque (see keyed_proxy.read_keyed_proxy)."""
    inp = DataInput(buf, source=source)
    version = inp.read_i32()
    if version not in (5, 6):
        raise UnsupportedVersionError(
            f"unsupported operator state backend version {version} (fstate reads 5 and 6)", source)
    compressed = inp.read_bool() if version >= 6 else False
    counts_start = inp.pos
    states = []
    try:
        for _ in range(2):  # list/union states, then broadcast states
            n = inp.read_i16()
            if n < 0:
                raise inp.fail(f"negative operator state count {n}")
            states.extend(read_state_meta_info(inp) for _ in range(n))
    except (FStateError, *DECODE_ERRORS) as first:
        if end is None:
            raise
        states = header_search.resolve(buf, end, source, first, lambda finder: finder.operator(counts_start))
        return OperatorBackendMeta(version, compressed, states, end)
    return OperatorBackendMeta(version, compressed, states, inp.pos)


def header_end(handle: OperatorStreamHandle, stream_length: int | None) -> int | None:
    """Where an operator state stream's header ends: the first state's first offset (the states'
    data follows the header); a stream with no state data is the header alone."""
    return min((o for entry in handle.states.values() for o in entry.offsets), default=stream_length)


def write_operator_proxy(out: DataOutput, meta: OperatorBackendMeta) -> None:
    """Version 6 (Flink 1.16+) has the compression flag; version 5 (Flink 1.11–1.15) does not."""
    if meta.version not in (5, 6):
        raise ValueError(f"cannot write operator backend version {meta.version}")
    out.write_i32(meta.version)
    if meta.version >= 6:
        out.write_bool(meta.compressed)
    regular = [s for s in meta.states if s.kind != "BROADCAST"]
    broadcast = [s for s in meta.states if s.kind == "BROADCAST"]
    for group in (regular, broadcast):
        out.write_i16(len(group))
        for s in group:
            write_state_meta_info(out, s)


def _region_end(all_offsets: list[int], start: int, stream_len: int) -> int:
    """The first of the sorted ``all_offsets`` after ``start``, else the stream's end."""
    i = bisect.bisect_right(all_offsets, start)
    return all_offsets[i] if i < len(all_offsets) else stream_len


def check_handle_names(handle: OperatorStreamHandle, meta: OperatorBackendMeta, source: str | None) -> None:
    """Every state the handle has offsets for is described by the stream's header (a changed name
    in ``_metadata`` would hide that state's elements)."""
    for name in handle.states:
        if meta.state(name) is None:
            raise CorruptStateError(f"the handle names operator state '{name}', the stream's header does not",
                                    source)


def compressed_region(buf: bytes, offsets, all_offsets, name: str,
                      source: str | None = None) -> tuple[bytes, list[int], list[int]]:
    """A state of a compressed operator-state stream: the decompressed bytes from its first offset on,
    the position in them each of ``offsets`` names, and the sorted positions ``all_offsets`` (every
    state's) name there. Offsets name data chunks: Flink 1.19+ writes every state into one framed
    stream and flushes a chunk per element; 1.18 a framed stream per state without flushing."""
    data, chunk_pos = decompress_framed(buf, min(offsets), source=source)
    try:
        starts = [chunk_pos[o] for o in offsets]
    except KeyError:
        raise CorruptStateError(f"operator state '{name}': an element offset is not a chunk boundary",
                                source) from None
    # other states' elements may follow in the same compressed stream: they bound this one's too
    bounds = sorted({chunk_pos[o] for o in all_offsets if o in chunk_pos} | set(starts))
    return data, starts, bounds


def decode_compressed_elements(data: bytes, starts: list[int], bounds: list[int], decode, name: str,
                               source: str | None = None) -> list[Any]:
    """The elements (see :func:`sized_compressed_elements`)."""
    return [value for value, _ in sized_compressed_elements(data, starts, bounds, decode, name, source)]


def sized_compressed_elements(data: bytes, starts: list[int], bounds: list[int], decode, name: str,
                              source: str | None = None) -> list[tuple[Any, int]]:
    """The elements of a list state of a compressed stream (see :func:`compressed_region`), decoded one
    after the other. Each starts where the one before ended, inside the chunk its offset names (1.19+:
    at that chunk's start; 1.18, whose offsets are where the stream stood when the element was
    written: anywhere in it, up to its end when the element before filled it); the last ends exactly
    where the state's region does. Each with its bytes (decompressed)."""
    chunk_ends = dict(zip(bounds, bounds[1:] + [len(data)]))
    out = []
    pos = starts[0]
    for i, start in enumerate(starts):
        end = chunk_ends[start]
        if not start <= pos <= end:
            raise CorruptStateError(f"operator state '{name}': element {i} starts at byte {pos} of the decompressed "
                                    f"stream, outside the chunk its offset names (bytes {start}-{end})", source)
        value, end = decode(data, pos)
        out.append((value, end - pos))
        pos = end
    region_end = _region_end(bounds, starts[-1], len(data))
    if pos != region_end:
        raise CorruptStateError(f"operator state '{name}': its {len(starts)} elements end at byte {pos} of the "
                                f"decompressed stream, its region at byte {region_end}", source)
    return out


def read_list_state(buf: bytes, handle: OperatorStreamHandle, meta: OperatorBackendMeta, name: str,
                    source: str | None = None) -> list[Any]:
    """The elements of list/union state ``name`` held by this subtask, in list order. Strict: each
    element decodes to exactly the bytes up to the next element's (or state's) offset; in a
    compressed stream, see :func:`decode_compressed_elements`."""
    return [value for value, _ in sized_list_state(buf, handle, meta, name, source)]


def sized_list_state(buf: bytes, handle: OperatorStreamHandle, meta: OperatorBackendMeta, name: str,
                     source: str | None = None) -> list[tuple[Any, int]]:
    """:func:`read_list_state`'s elements, each with its serialized bytes (decompressed; an element
    fstate cannot decode: its region's bytes)."""
    info = meta.state(name)
    offsets_entry = handle.states.get(name)
    if info is None:
        raise UnknownStateError(f"no operator state named '{name}' in this stream", source)
    check_handle_names(handle, meta, source)
    if offsets_entry is None or not offsets_entry.offsets:
        return []
    offsets = list(offsets_entry.offsets)
    elem = info.value_type
    all_offsets = sorted({o for so in handle.states.values() for o in so.offsets} | {meta.header_size})
    if meta.compressed:
        base_buf, offsets, all_offsets = compressed_region(buf, offsets, all_offsets, name, source)
        stream_len = len(base_buf)
        if elem.fully_decodable:
            try:
                return sized_compressed_elements(base_buf, offsets, all_offsets, elem.decoder(), name, source)
            except DECODE_ERRORS as e:
                raise CorruptStateError(f"operator state '{name}' ({elem.name}): cannot decode an element: {e}",
                                        source) from None
        if len(set(offsets)) != len(offsets):
            raise UnsupportedSerializerError(
                f"operator state '{name}' ({elem.name}): its elements share compressed chunks (Flink 1.18) and "
                "have no length framing fstate can decode, so they cannot be told apart", source)
    else:
        base_buf, stream_len = buf, len(buf)
    lowest = 0 if meta.compressed else meta.header_size
    for o in offsets:
        if not lowest <= o < stream_len:
            raise CorruptStateError(f"operator state '{name}': element offset {o} outside the stream "
                                    f"of {stream_len} bytes", source)
    if not elem.fully_decodable:
        regions = [bytes(base_buf[o:_region_end(all_offsets, o, stream_len)]) for o in offsets]
        return [(region, len(region)) for region in regions]
    dec = elem.decoder()
    out = []
    try:
        for o in offsets:
            v, end = dec(base_buf, o)
            expected = _region_end(all_offsets, o, stream_len)
            if end != expected:
                raise CorruptStateError(f"operator state '{name}': the element at byte {o} decodes to byte {end}, "
                                        f"the next region starts at byte {expected}", source)
            out.append((v, end - o))
    except DECODE_ERRORS as e:
        raise CorruptStateError(f"operator state '{name}' ({elem.name}): cannot decode an element: {e}",
                                source) from None
    return out


def read_broadcast_state(buf: bytes, handle: OperatorStreamHandle, meta: OperatorBackendMeta, name: str,
                         source: str | None = None) -> Iterator[tuple[Any, Any]]:
    """The (key, value) entries of broadcast state ``name``. Strict: the entries end exactly where
    the state's region ends."""
    entries = sized_broadcast_state(buf, handle, meta, name, source)
    return ((key, value) for key, value, _ in entries)


def sized_broadcast_state(buf: bytes, handle: OperatorStreamHandle, meta: OperatorBackendMeta, name: str,
                          source: str | None = None) -> Iterator[tuple[Any, Any, int]]:
    """:func:`read_broadcast_state`'s entries, each with its key's and value's serialized bytes
    (decompressed)."""
    info = meta.state(name)
    if info is None:
        raise UnknownStateError(f"no broadcast state named '{name}' in this stream", source)
    entry = handle.states.get(name)
    if entry is None or not entry.offsets:
        return iter(())
    if len(entry.offsets) != 1:
        raise CorruptStateError(f"broadcast state '{name}' has {len(entry.offsets)} offsets, expected 1", source)
    pos = entry.offsets[0]
    data = buf
    bounds = sorted({o for so in handle.states.values() for o in so.offsets})
    if meta.compressed:
        data, chunk_pos = decompress_framed(buf, pos, source=source)
        bounds = sorted(chunk_pos[o] for o in bounds if o in chunk_pos)
        pos = 0
    if not 0 <= pos < len(data):
        raise CorruptStateError(f"broadcast state '{name}': offset {pos} outside the stream", source)
    key_t, val_t = info.key_type, info.value_type
    if key_t is None:
        raise CorruptStateError(f"broadcast state '{name}' has no key serializer", source)
    if not (key_t.fully_decodable and val_t.fully_decodable):
        raise CorruptStateError(
            f"broadcast state '{name}' has types fstate cannot decode ({key_t.name}, {val_t.name}); "
            "its entries have no length framing", source)
    dk, dv = key_t.decoder(), val_t.decoder()

    def gen():
        try:
            n = struct.unpack_from(">i", data, pos)[0]
            if n < 0 or n > len(data):
                raise ValueError(f"invalid entry count {n}")
            p = pos + 4
            region_end = _region_end(bounds, pos, len(data))
            for _ in range(n):
                start = p
                k, p = dk(data, p)
                v, p = dv(data, p)
                if p > region_end:
                    break
                yield k, v, p - start
            if p != region_end:
                raise CorruptStateError(f"broadcast state '{name}': {n} entries end at byte {p}, its region at "
                                        f"byte {region_end}", source)
        except DECODE_ERRORS as e:
            raise CorruptStateError(f"broadcast state '{name}': cannot decode an entry: {e}", source) from None

    return gen()


# ---------------------------------------------------------------------------------------------
# writing


def list_state_meta(name: str, element_type, mode: str = "SPLIT_DISTRIBUTE") -> StateMetaInfo:
    from . import metainfo

    if mode not in ("SPLIT_DISTRIBUTE", "UNION"):
        raise ValueError(f"operator list state mode must be SPLIT_DISTRIBUTE or UNION, not {mode}")
    return StateMetaInfo(name, metainfo.OPERATOR, {metainfo.DISTRIBUTION_MODE: mode}, {metainfo.VALUE_SERIALIZER: element_type})


def broadcast_state_meta(name: str, key_type, value_type) -> StateMetaInfo:
    from . import metainfo

    return StateMetaInfo(name, metainfo.BROADCAST, {metainfo.DISTRIBUTION_MODE: "BROADCAST"},
                         {metainfo.KEY_SERIALIZER: key_type, metainfo.VALUE_SERIALIZER: value_type})


def encode_operator_stream(states: list[tuple[StateMetaInfo, Any]], version: int = CURRENT_VERSION):
    """One subtask's operator state stream and the per-state offsets for its handle.

    ``states``: (meta, values) with values a list for list/union state and a dict (or (key,
    value) pairs) for broadcast state. Returns (bytes, {name: StateOffsets}).
    """
    from .handles import StateOffsets

    regular = [(m, v) for m, v in states if m.kind != "BROADCAST"]
    broadcast = [(m, v) for m, v in states if m.kind == "BROADCAST"]
    header = DataOutput()
    write_operator_proxy(header, OperatorBackendMeta(version, False, [m for m, _ in regular + broadcast]))
    out = bytearray(header.buf)
    offsets: dict[str, StateOffsets] = {}
    for m, values in regular:
        enc = m.value_type.encoder()
        pos = []
        for v in values or ():
            if v is None:
                raise ValueError(f"operator list state '{m.name}' cannot hold null elements")
            pos.append(len(out))
            enc(out, v)
        offsets[m.name] = StateOffsets(0 if m.kind == "SPLIT_DISTRIBUTE" else 1, tuple(pos))
    for m, entries in broadcast:
        ek, ev = m.key_type.encoder(), m.value_type.encoder()
        items = list(entries.items() if isinstance(entries, dict) else entries or ())
        offsets[m.name] = StateOffsets(2, (len(out),))
        out += struct.pack(">i", len(items))
        for k, v in items:
            ek(out, k)
            ev(out, v)
    return bytes(out), offsets


# ---------------------------------------------------------------------------------------------
# redistributing list state over a new parallelism (as Flink's round-robin repartitioner does)


def split_list_state(elements: list, parallelism: int, start: int = 0) -> list[list]:
    """One SPLIT_DISTRIBUTE list state's elements (all subtasks' lists concatenated in subtask
    order) cut into ``parallelism`` contiguous runs, as Flink assigns them on restore: every subtask
    gets ``len // parallelism`` elements and the ``len % parallelism`` subtasks from ``start`` on
    (wrapping around) one more; the runs are handed out in order from subtask ``start``. For 5
    elements over 3 subtasks: [2, 2, 1]."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1, not {parallelism}")
    base, rest = divmod(len(elements), parallelism)
    parts: list[list] = [[] for _ in range(parallelism)]
    pos = 0
    for i in range(parallelism):
        n = base + (1 if i < rest else 0)
        parts[(start + i) % parallelism] = list(elements[pos:pos + n])
        pos += n
    return parts


def split_list_states(states: dict[str, list], parallelism: int) -> dict[str, list[list]]:
    """Several SPLIT_DISTRIBUTE states of one operator split as Flink does: the states are taken in
    the iteration order of Java's HashMap of their names, and each state's first run goes to the
    subtask after the last one that got an extra element of the state before (so the remainders
    spread over the subtasks). ``states`` in the order the snapshot lists them (that order breaks
    ties between names in the same hash bucket)."""
    out: dict[str, list[list]] = {}
    start = 0
    for name in java_hash_map_order(list(states)):
        elements = states[name]
        out[name] = split_list_state(elements, parallelism, start)
        start = (start + len(elements) % parallelism) % parallelism
    return {name: out[name] for name in states}


def java_hash_map_order(names: list[str]) -> list[str]:
    """``names`` in the order a ``java.util.HashMap`` (default capacity 16, load factor 0.75) that
    they were put into in this order iterates its keys: by bucket of the spread String hash code."""
    from .types.hashing import hash_string

    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = hash_string(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=lambda name: (bucket(name), names.index(name)))
