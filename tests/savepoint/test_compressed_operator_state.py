"""Compressed operator state in both layouts Flink writes (found in TypesJob's --compression
savepoints; tests/flink/VERSIONS.md): Flink 1.19+ writes every list state into one framed snappy
stream and flushes a chunk per element, so each element's offset is its chunk; Flink 1.18 writes a
framed stream per state without flushing, so every offset of a small state names the same (first)
chunk and the elements follow each other in it. Flink 1.16 and 1.17 do not compress operator state.
Reading and ``verify`` take both, and find an element that does not end where the next begins."""

from __future__ import annotations

import pytest

from fstate.savepoint import handles, verify_structure
from fstate.savepoint import operator as operator_state
from fstate.savepoint.binary import DataOutput
from fstate.savepoint.compression import frame_chunks
from fstate.savepoint.errors import CorruptStateError, UnsupportedSerializerError
from fstate.savepoint.types import LONG, STRING
from fstate.savepoint.types import OpaqueType

NAMES = ["a", "", "p7-\u00e9\u00df\u4e2d", "x" * 300]
LONGS = [0, -1, 1 << 40]


def _header(states) -> bytes:
    out = DataOutput()
    operator_state.write_operator_proxy(out, operator_state.OperatorBackendMeta(6, True, states))
    return bytes(out.getvalue())


def _encoded(element_type, values) -> list[bytes]:
    enc = element_type.encoder()
    out = []
    for v in values:
        buf = bytearray()
        enc(buf, v)
        out.append(bytes(buf))
    return out


def _stream(layout: str, element_type=STRING, names=NAMES, longs=LONGS, damage=None):
    """(bytes, handle, meta) of one subtask holding list states ``names`` and ``longs``."""
    metas = [operator_state.list_state_meta("names", element_type), operator_state.list_state_meta("longs", LONG)]
    out = bytearray(_header(metas))
    meta = operator_state.read_operator_proxy(bytes(out))
    states = {}
    elements = {"names": _encoded(element_type, names), "longs": _encoded(LONG, longs)}
    if damage is not None:
        elements["names"][1] += damage
    if layout == "1.19":  # one stream, a chunk per element
        out += frame_chunks(b"", with_identifier=True)
        for name, encoded in elements.items():
            offsets = []
            for e in encoded:
                offsets.append(len(out))
                out += frame_chunks(e, with_identifier=False)
            states[name] = handles.StateOffsets(0, tuple(offsets))
    else:  # 1.18: a stream per state, every offset the state's first chunk
        for name, encoded in elements.items():
            out += frame_chunks(b"", with_identifier=True)
            states[name] = handles.StateOffsets(0, (len(out),) * len(encoded))
            out += frame_chunks(b"".join(encoded), with_identifier=False)
    handle = handles.OperatorStreamHandle(states, None)
    return bytes(out), handle, meta


@pytest.mark.parametrize("layout", ["1.19", "1.18"])
def test_both_layouts_read_and_verify(layout):
    buf, handle, meta = _stream(layout)
    assert operator_state.read_list_state(buf, handle, meta, "names") == NAMES
    assert operator_state.read_list_state(buf, handle, meta, "longs") == LONGS
    verify_structure.check_operator_stream(buf, handle, meta, "s")


@pytest.mark.parametrize("layout", ["1.19", "1.18"])
def test_an_element_longer_than_its_bytes_is_found(layout):
    buf, handle, meta = _stream(layout, damage=b"\x00\x01")  # two stray bytes after the second name
    with pytest.raises(CorruptStateError, match="operator state 'names'"):
        operator_state.read_list_state(buf, handle, meta, "names")
    with pytest.raises(CorruptStateError, match="operator state 'names'"):
        verify_structure.check_operator_stream(buf, handle, meta, "s")


def test_an_element_outside_the_chunk_its_offset_names_is_found():
    buf, handle, meta = _stream("1.19")
    offsets = handle.states["names"].offsets
    # the second element's offset names the third element's chunk
    moved = handles.OperatorStreamHandle(
        dict(handle.states, names=handles.StateOffsets(0, (offsets[0], offsets[2], offsets[2], offsets[3]))), None)
    with pytest.raises(CorruptStateError, match="element 1 starts at byte .* outside the chunk its offset names"):
        operator_state.read_list_state(buf, moved, meta, "names")


def test_undecodable_elements_sharing_a_chunk_are_a_clear_error():
    opaque = OpaqueType("com.acme.Serializer$Snapshot", 1, b"")
    assert not opaque.fully_decodable
    buf, handle, meta = _stream("1.19", element_type=STRING)
    # one chunk per element: each element's raw bytes
    meta_opaque = operator_state.OperatorBackendMeta(meta.version, True, [
        operator_state.list_state_meta("names", opaque), meta.states[1]], meta.header_size)
    assert operator_state.read_list_state(buf, handle, meta_opaque, "names") == _encoded(STRING, NAMES)
    buf, handle, meta = _stream("1.18", element_type=STRING)
    meta_opaque = operator_state.OperatorBackendMeta(meta.version, True, [
        operator_state.list_state_meta("names", opaque), meta.states[1]], meta.header_size)
    with pytest.raises(UnsupportedSerializerError, match="share compressed chunks"):
        operator_state.read_list_state(buf, handle, meta_opaque, "names")
