"""Structural checks of `fstate verify` beyond "it decodes": every region of a state stream must
decode to exactly the bytes its handle declares, and the operator's parallelism must fit its key
groups.

Flink stores no checksum of uncompressed state (compressed chunks carry a CRC32C, checked in
:mod:`.compression`), so what is checked is the framing: offsets, lengths, counts, key-group
boundaries. A changed byte inside a fixed-width value (one byte of a long, one character of a
string) keeps the framing intact and cannot be detected by any reader.
"""

from __future__ import annotations

import struct

from . import handles
from . import limits
from . import operator as operator_state
from .compression import STREAM_IDENTIFIER
from .errors import DECODE_ERRORS, CorruptStateError, FStateError, UnsupportedSerializerError
from .types.hashing import key_group_for_hash


_I32 = struct.Struct(">i")


# ---------------------------------------------------------------------------------------------
# parallelism and key-group ranges


def bounds_problems(parallelism: int, max_parallelism: int, subtasks: dict, finished: tuple[int, ...] = ()
                    ) -> list[str]:
    """What Flink would refuse: parallelism outside 1..max parallelism, a max parallelism outside
    1..32768, subtask indices beyond the parallelism, key-group ranges outside 0..max parallelism-1
    or overlapping, offsets that do not match the range."""
    out = limits.parallelism_problems(parallelism, max_parallelism)
    beyond = sorted(i for i in (*subtasks, *finished) if not 0 <= i < parallelism)
    if beyond:
        out.append(f"subtask index {beyond[0]} is not below the parallelism {parallelism}")
    ranges = []
    for i, s in sorted(subtasks.items()):
        for h in (s.managed_keyed, s.raw_keyed):
            if isinstance(h, handles.KeyGroupsHandle):
                n = h.end_key_group - h.start_key_group + 1
                if len(h.offsets) != max(n, 0):
                    out.append(f"subtask {i}: {len(h.offsets)} key-group offsets for key groups "
                               f"{h.start_key_group}-{h.end_key_group}")
            if isinstance(h, (handles.KeyGroupsHandle, handles.IncrementalKeyedHandle)):
                lo, hi = h.start_key_group, h.end_key_group
                if not 0 <= lo <= hi < max_parallelism:
                    out.append(f"subtask {i}: key groups {lo}-{hi} are outside 0-{max_parallelism - 1}")
                elif h is s.managed_keyed:
                    ranges.append((lo, hi, i))
    ranges.sort()
    for (_, hi, a), (lo, _, b) in zip(ranges, ranges[1:]):
        if lo <= hi:
            out.append(f"subtasks {a} and {b} both hold key group {lo}")
    return out


# ---------------------------------------------------------------------------------------------
# headers of one operator's subtasks


def _signature(info) -> tuple:
    types = []
    for attr in ("key_type", "namespace_type", "value_type"):
        try:
            t = getattr(info, attr)
        except Exception:  # a state kind without that serializer
            t = None
        types.append(None if t is None else t.name)
    return (info.kind, *types)


def header_signature(meta) -> tuple:
    """What every subtask's keyed-state header must agree on (picklable, for readers): the key
    serializer and each state's kind and types."""
    key_type = getattr(meta, "key_type", None)
    return (None if key_type is None else key_type.name, tuple((s.name, _signature(s)) for s in meta.states))


def signature_mismatch(reference: tuple, meta) -> str | None:
    """:func:`header_mismatch` against a :func:`header_signature` of another subtask's header."""
    key_name, states = header_signature(meta)
    if reference[0] is not None and key_name is not None and reference[0] != key_name:
        return f"the key serializer is {key_name}, another subtask's is {reference[0]}"
    known = dict(reference[1])
    for name, signature in states:
        if name in known and known[name] != signature:
            return f"state '{name}' is described as {signature}, another subtask's header says {known[name]}"
    return None


def header_mismatch(reference, states, key_types: tuple = ()) -> str | None:
    """Every subtask of an operator registers the same serializers: a state that one subtask's
    header describes with other types than the reference subtask's is damage in one of them
    (states a subtask never registered are no problem)."""
    if len(key_types) == 2 and key_types[0] is not None and key_types[1] is not None \
            and key_types[0].name != key_types[1].name:
        return f"the key serializer is {key_types[1].name}, another subtask's is {key_types[0].name}"
    known = {s.name: _signature(s) for s in reference}
    for s in states:
        if s.name in known and known[s.name] != _signature(s):
            return (f"state '{s.name}' is described as {_signature(s)}, another subtask's header says "
                    f"{known[s.name]}")
    return None


def opaque_states(states) -> list[str]:
    """States whose values fstate keeps as bytes: their values' framing is not checked."""
    out = []
    for s in states:
        for attr in ("key_type", "namespace_type", "value_type"):
            try:
                t = getattr(s, attr)
            except Exception:
                t = None
            if t is not None and not t.fully_decodable:
                out.append(s.name)
                break
    return out


# ---------------------------------------------------------------------------------------------
# keyed streams


def check_key_group_offsets(handle: handles.KeyGroupsHandle, header_size: int, length: int,
                            source: str | None) -> None:
    """Key groups are written in order right after the header: the non-zero offsets increase
    strictly, the first is the header's end, all lie inside the stream."""
    present = [(handle.start_key_group + i, off) for i, off in enumerate(handle.offsets) if off != 0]
    previous = None
    for kg, off in present:
        if not header_size <= off < length:
            raise CorruptStateError(f"key group {kg}: offset {off} is outside the data of the stream "
                                    f"(bytes {header_size}-{length - 1})", source)
        if previous is not None and off <= previous[1]:
            raise CorruptStateError(f"key group {kg}: offset {off} does not follow key group {previous[0]}'s "
                                    f"offset {previous[1]}", source)
        previous = (kg, off)
    if present and present[0][1] != header_size:
        raise CorruptStateError(f"the state header ends at byte {header_size}, but the first key group "
                                f"starts at byte {present[0][1]}", source)
    if not present and length != header_size:
        raise CorruptStateError(f"the stream has {length - header_size} bytes after its header but no key "
                                "group points at them", source)


def checking_key_groups(entries, key_type, max_parallelism: int, source: str | None):
    """``entries`` (keyed.Entry), raising when a key's hash puts it in another key group than the
    one it is stored in (a changed key byte). Keys of types without a value-based hashCode that
    fstate computes (opaque keys, POJOs) are not checked."""
    hashing = True
    # String and integer keys of the current key group already checked (each state holds them again);
    # others (floats: 0.0 == -0.0 with other hashCodes; rows) are checked every time
    placed: set = set()
    current = None
    for entry in entries:
        kg, key = entry[1], entry[3]
        if kg != current:
            placed.clear()
            current = kg
        if hashing and key is not None and not isinstance(key, (bytes, bytearray)):
            if type(key) in (str, int):
                if key in placed:
                    yield entry
                    continue
                placed.add(key)
            try:
                expected = key_group_for_hash(key_type.java_hash(key), max_parallelism)
            except UnsupportedSerializerError:
                hashing, expected = False, kg
            except (FStateError, *DECODE_ERRORS, OverflowError, AttributeError):
                expected = kg
            if expected != kg:
                raise CorruptStateError(f"key group {kg}: key {key!r} belongs to key group {expected} "
                                        "(a changed key byte)", source)
        yield entry


# ---------------------------------------------------------------------------------------------
# operator streams


def check_operator_stream(buf: bytes, handle: handles.OperatorStreamHandle,
                          meta: operator_state.OperatorBackendMeta, source: str | None) -> None:
    """Every element of every list/union state ends where the next element (or state) starts and
    every broadcast state's entries end where its region ends; undecodable types are skipped."""
    all_offsets = sorted({o for entry in handle.states.values() for o in entry.offsets})
    for name in handle.states:
        if meta.state(name) is None:
            raise CorruptStateError(f"the handle names operator state '{name}', the stream's header does not",
                                    source)
    # a compressed stream's first offset is its first data chunk, after the stream identifier
    lead = len(STREAM_IDENTIFIER) if meta.compressed else 0
    if meta.compressed and all_offsets and buf[meta.header_size:meta.header_size + lead] != STREAM_IDENTIFIER:
        raise CorruptStateError(f"no compressed stream starts at byte {meta.header_size}, after the operator "
                                "state header", source)
    if all_offsets and all_offsets[0] != meta.header_size + lead:
        raise CorruptStateError(f"the operator state header ends at byte {meta.header_size}, but the first "
                                f"state starts at byte {all_offsets[0]}", source)
    if not all_offsets and len(buf) != meta.header_size:
        raise CorruptStateError(f"the stream has {len(buf) - meta.header_size} bytes after its header but no "
                                "state points at them", source)
    if all_offsets and all_offsets[-1] >= len(buf):
        raise CorruptStateError(f"offset {all_offsets[-1]} is outside the stream of {len(buf)} bytes", source)
    for name, entry in handle.states.items():
        if not entry.offsets:
            continue
        info = meta.state(name)
        try:
            if info.kind == "BROADCAST":
                _check_broadcast(buf, entry.offsets, all_offsets, meta, info, name, source)
            else:
                _check_list(buf, entry.offsets, all_offsets, meta, info, name, source)
        except DECODE_ERRORS as e:
            raise CorruptStateError(f"operator state '{name}': cannot decode its bytes ({e})", source) from None


def _next(offsets: list[int], start: int, length: int) -> int:
    return next((o for o in offsets if o > start), length)


def _region(buf: bytes, offsets: tuple[int, ...], all_offsets: list[int], meta, name: str, source):
    """(bytes, element offsets in them, sorted boundaries, length) of one state's region."""
    if not meta.compressed:
        return buf, list(offsets), all_offsets, len(buf)
    # a compressed stream ends where the next stream's identifier starts
    data, mapped, bounds = operator_state.compressed_region(buf, offsets, all_offsets, name, source)
    return data, mapped, bounds, len(data)


def _check_list(buf, offsets, all_offsets, meta, info, name, source) -> None:
    elem = info.value_type
    if elem is None or not elem.fully_decodable:
        return
    data, mapped, bounds, length = _region(buf, offsets, all_offsets, meta, name, source)
    if meta.compressed:  # elements one after the other, each inside the chunk its offset names
        operator_state.decode_compressed_elements(data, mapped, bounds, elem.decoder(), name, source)
        return
    if mapped != sorted(mapped) or len(set(mapped)) != len(mapped):
        raise CorruptStateError(f"operator state '{name}': element offsets are not increasing", source)
    dec = elem.decoder()
    for o in mapped:
        _, end = dec(data, o)
        expected = _next(bounds, o, length)
        if end != expected:
            raise CorruptStateError(f"operator state '{name}': the element at byte {o} decodes to byte {end}, "
                                    f"the next region starts at byte {expected}", source)


def _check_broadcast(buf, offsets, all_offsets, meta, info, name, source) -> None:
    if len(offsets) != 1:
        raise CorruptStateError(f"broadcast state '{name}' has {len(offsets)} offsets, expected 1", source)
    key_t, val_t = info.key_type, info.value_type
    if key_t is None or val_t is None or not (key_t.fully_decodable and val_t.fully_decodable):
        return
    data, mapped, bounds, length = _region(buf, offsets, all_offsets, meta, name, source)
    pos = mapped[0]
    n = _I32.unpack_from(data, pos)[0]
    if n < 0:
        raise CorruptStateError(f"broadcast state '{name}': negative entry count {n}", source)
    dk, dv = key_t.decoder(), val_t.decoder()
    p = pos + 4
    for _ in range(n):
        _, p = dk(data, p)
        _, p = dv(data, p)
    expected = _next(bounds, pos, length)
    if p != expected:
        raise CorruptStateError(f"broadcast state '{name}': {n} entries end at byte {p}, its region at byte "
                                f"{expected}", source)


# ---------------------------------------------------------------------------------------------
# channel state (in-flight data of unaligned checkpoints)


def channel_handles(subtask_state) -> list[tuple[str, handles.ChannelStateHandle]]:
    out = []
    for what, group in (("input channel state", subtask_state.input_channels),
                        ("output channel state", subtask_state.result_subpartitions)):
        for h in group:
            out.append((what, h))
    return out


def check_channel_offsets(h: handles.ChannelStateHandle, size: int) -> str | None:
    bad = [o for o in h.offsets if not 0 <= o < size]
    if bad:
        return f"buffer offset {bad[0]} is outside the channel-state file of {size} bytes"
    return None
