"""Reading is strict: damaged framing in a state file is an error on both decoders (the compiled
scanner and the plain Python path), never rows read leniently past the damage.

Each case damages one state file of a real sample where a lenient reader still returned rows (a
shortened key, ignored bytes after a key group, a state block with one entry fewer, a list element
or a broadcast map ending early, a subtask header naming another serializer) and reads it with
``FSTATE_PURE_PYTHON`` off and on: both must fail with the same kind of error. The command line
shows it as one line naming the file, exit 2.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import tables
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.decoders import new_decoder
from fstate.savepoint import _fastpath, handles, keyed
from fstate.savepoint import operator as operator_state
from fstate.savepoint.errors import CorruptStateError, FStateError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import LONG, STRING, MapType
from tests.support import SAMPLES, sample_snapshot

_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")


def _copy(tmp_path, sample: str):
    src = sample_snapshot(SAMPLES / sample)
    dst = tmp_path / sample / src.name
    shutil.copytree(src, dst)
    return dst


def _first_stream(snapshot, uid: str = "keyed"):
    """(state file path, handle, keyed meta) of the operator's first keyed subtask."""
    sp = Savepoint.open(str(snapshot))
    op = sp.operator(uid)
    _, h = next(iter(op.key_group_handles()))
    src = sp.stream_source(h.delegate)
    assert src.start == 0
    return Path(src.path), h, op.keyed_meta


def canonical_entries(buf: bytes, start: int) -> list[tuple[int, int, int, int, int, int]]:
    """(state id, entry start, key start, key length, value start, value length) of the entries of
    one canonical key group starting at ``start``."""
    out = []
    pos = start + 2
    sid = _U16.unpack_from(buf, start)[0]
    while True:
        entry = pos
        klen = _I32.unpack_from(buf, pos)[0]
        kstart = pos + 4
        vlen = _I32.unpack_from(buf, kstart + klen)[0]
        vstart = kstart + klen + 4
        pos = vstart + vlen
        out.append((sid, entry, kstart, klen, vstart, vlen))
        if buf[kstart] & 0x80:
            nxt = _U16.unpack_from(buf, pos)[0]
            pos += 2
            if nxt == 0xFFFF:
                return out
            sid = nxt


def both_paths(monkeypatch, f):
    """f() with the Python path, then with the compiled path (when built): the outcomes."""
    outcomes = []
    for pure in ("1", "0"):
        monkeypatch.setenv("FSTATE_PURE_PYTHON", pure)
        if pure == "0" and not _fastpath.available():
            continue
        try:
            outcomes.append(("ok", f()))
        except FStateError as e:
            outcomes.append((type(e), str(e)))
    return outcomes


def read_all(path, handle, meta, mp: int = 128):
    buf = path.read_bytes()
    ids = [i for i, _ in meta.value_states]
    return (list(KeyedState.of_stream(buf, handle, meta, mp).entries()),
            list(KeyedState.of_stream(buf, handle, meta, mp).rows(ids)),
            list(new_decoder(KeyedState.of_stream(buf, handle, meta, mp), ids).rows()))


def assert_corrupt_on_both(monkeypatch, f, *words):
    outcomes = both_paths(monkeypatch, f)
    for kind, message in outcomes:
        assert kind is CorruptStateError, (kind, message)
        for word in words:
            assert word in message, message


# ---------------------------------------------------------------------------------------------
# canonical layout (a savepoint), both decoders


def _damage_canonical(path, handle, how: str) -> None:
    buf = bytearray(path.read_bytes())
    first = handle.offsets[0]
    entries = canonical_entries(bytes(buf), first)
    sid, entry, kstart, klen, vstart, vlen = entries[0]
    if how == "key length":  # the key's string length one shorter: "k-997" read as "k-99"
        assert buf[kstart + 1] > 1
        buf[kstart + 1] -= 1
    elif how == "trailing bytes":  # bytes after the last key group's end-of-key-group mark
        buf += b"\x00\x00\x00"
    elif how == "truncated region":
        del buf[len(buf) - 3:]
    elif how == "key-group prefix":
        buf[kstart] ^= 0x01
    elif how == "value length":  # a value one byte longer swallows the next entry's first byte
        _I32.pack_into(buf, vstart - 4, vlen + 1)
    path.write_bytes(bytes(buf))


@pytest.mark.parametrize("how,words", [
    ("key length", ("the key decodes to",)),
    ("trailing bytes", ("end-of-key-group mark",)),
    ("truncated region", ("key group",)),
    ("key-group prefix", ("prefixed with key group",)),
    ("value length", ("key group",)),
])
def test_canonical_framing_damage_fails_on_both_decoders(tmp_path, monkeypatch, how, words):
    path, handle, meta = _first_stream(_copy(tmp_path, "keyed-hashmap-savepoint"))
    before = both_paths(monkeypatch, lambda: read_all(path, handle, meta)[:2])
    assert before[0][0] == "ok" and all(o == before[0] for o in before)
    _damage_canonical(path, handle, how)
    assert_corrupt_on_both(monkeypatch, lambda: read_all(path, handle, meta), *words)


def test_keyed_table_of_a_damaged_sample_fails(tmp_path, monkeypatch):
    snapshot = _copy(tmp_path, "keyed-hashmap-savepoint")
    path, handle, _ = _first_stream(snapshot)
    _damage_canonical(path, handle, "key length")
    op = Savepoint.open(str(snapshot)).operator("keyed")
    assert_corrupt_on_both(monkeypatch, lambda: list(tables.keyed_table(op).rows()), path.name)
    assert_corrupt_on_both(monkeypatch, lambda: list(tables.keyed_table(op, ["total"], flat=True).rows()),
                           path.name)


# ---------------------------------------------------------------------------------------------
# heap-native layout (a checkpoint): element counts


def test_native_block_with_a_changed_count_fails(tmp_path, monkeypatch):
    """The last state block of a key group claims one entry fewer: its last entry would be left
    unread (and the key group read as complete)."""
    path, handle, meta = _first_stream(_copy(tmp_path, "keyed-hashmap-checkpoint"))
    buf = bytearray(path.read_bytes())
    codecs = keyed.state_codecs(meta, 128)
    for kg, start, end in keyed.key_group_regions(handle, len(buf))[1:]:  # (the first decides the layout)
        pos, last = start + 4, None
        for _ in codecs:
            last = pos
            block = keyed._native_state_block(bytes(buf), pos, kg, codecs, None, None)
            while True:
                try:
                    next(block)
                except StopIteration as stop:
                    pos = stop.value
                    break
        assert pos == end
        if _I32.unpack_from(buf, last + 2)[0] > 0:
            break
    count_at = last + 2
    _I32.pack_into(buf, count_at, _I32.unpack_from(buf, count_at)[0] - 1)
    path.write_bytes(bytes(buf))
    assert_corrupt_on_both(monkeypatch, lambda: read_all(path, handle, meta), f"key group {kg}")


# ---------------------------------------------------------------------------------------------
# generated canonical entries: exact keys and values on both decoders


def _one_entry_stream(kind, key: bytes, value: bytes):
    if kind == "TIMER":
        states = [keyed.timer_state_meta("event", STRING)]
    elif kind == "MAP":
        states = [keyed.value_state_meta("m", "MAP", MapType(STRING, LONG))]
    else:
        states = [keyed.value_state_meta("s", kind, LONG if kind == "VALUE" else STRING)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    meta.header_size = len(keyed.proxy_bytes(meta))
    buf, offsets = keyed.encode_canonical_stream(meta, 3, 3, {3: {0: [(bytes((3,)) + key, value)]}})
    return buf, handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 3, offsets, None), meta


K = b"\x02k\x00"  # the String key "k" and a VoidNamespace byte
TS = struct.pack(">q", 5 ^ -(2 ** 63))


@pytest.mark.parametrize("kind,key,value,words", [
    ("VALUE", K + b"\x00", struct.pack(">q", 7), "the key decodes to 4 of its 5 bytes"),
    ("VALUE", K, struct.pack(">q", 7) + b"\x01", "the value decodes to 8 of its 9 bytes"),
    ("LIST", K, b"\x02a,\x02b,", "the list ends with the ',' delimiter"),
    ("LIST", K, b"\x02a\x02b", "not followed by the ',' delimiter"),
    ("MAP", K + b"\x02u\x01", b"\x00" + struct.pack(">q", 1), "the map key decodes to"),
    ("MAP", K + b"\x02u", b"\x00" + struct.pack(">q", 1) + b"\x00", "the map value decodes to"),
    ("MAP", K + b"\x02u", b"\x02" + struct.pack(">q", 1), "map value null flag 2"),
    ("MAP", K + b"\x02u", b"\x01" + struct.pack(">q", 1), "a null map value has 8 bytes after its null flag"),
    ("TIMER", TS + b"\x02k\x00\x00", b"", "the timer decodes to"),
    ("TIMER", TS + b"\x02k\x00", b"\x00", "a timer entry has a 1-byte value"),
])
def test_inexact_entries_fail_on_both_decoders(monkeypatch, kind, key, value, words):
    buf, handle, meta = _one_entry_stream(kind, key, value)
    assert_corrupt_on_both(monkeypatch, lambda: list(KeyedState.of_stream(buf, handle, meta, 128).entries()), words)


@pytest.mark.parametrize("kind,key,value", [
    ("VALUE", K, struct.pack(">q", 7)), ("LIST", K, b"\x02a,\x02b"), ("MAP", K + b"\x02u", b"\x01"),
    ("MAP", K + b"\x02u", b"\x00" + struct.pack(">q", 1)), ("MAP", K + b"\x02u", b"\x01\x00"),
    ("TIMER", TS + b"\x02k\x00", b""),
])
def test_exact_entries_read_on_both_decoders(monkeypatch, kind, key, value):
    buf, handle, meta = _one_entry_stream(kind, key, value)
    outcomes = both_paths(monkeypatch, lambda: list(KeyedState.of_stream(buf, handle, meta, 128).entries()))
    assert outcomes[0][0] == "ok" and len(outcomes[0][1]) == 1 and all(o == outcomes[0] for o in outcomes)


def test_key_group_offsets_checked_on_read(monkeypatch):
    """An offset of 0 hides a key group's bytes (an empty key group); the first key group must start
    at the header's end."""
    buf, handle, meta = _one_entry_stream("VALUE", K, struct.pack(">q", 7))
    hidden = handles.KeyGroupsHandle(handle.tag, 3, (0,), None)
    assert_corrupt_on_both(monkeypatch, lambda: list(KeyedState.of_stream(buf, hidden, meta, 128).entries()), "after its header")


# ---------------------------------------------------------------------------------------------
# operator state


def _operator_stream(snapshot, uid: str):
    sp = Savepoint.open(str(snapshot))
    op = sp.operator(uid)
    subtask, h = next((s, h) for s, h in op.operator_handles() if h.delegate is not None)
    return sp, op, h


def test_list_element_must_end_at_the_next_offset(tmp_path):
    snapshot = _copy(tmp_path, "operator-state-hashmap-savepoint")
    sp, op, h = _operator_stream(snapshot, "lists")
    buf = bytearray(sp.read_stream(h.delegate))
    meta = operator_state.read_operator_proxy(bytes(buf), None, operator_state.header_end(h, len(buf)))
    name = next(n for n, e in h.states.items() if e.offsets and meta.state(n).value_type.name == "String")
    at = h.states[name].offsets[0]
    assert buf[at] > 1
    buf[at] -= 1  # the first element's string one character shorter
    with pytest.raises(CorruptStateError, match="decodes to byte"):
        operator_state.read_list_state(bytes(buf), h, meta, name)


def test_operator_header_other_than_the_tables_fails(tmp_path):
    """A flipped byte in one subtask's header names another serializer: its elements would be read
    as raw bytes."""
    snapshot = _copy(tmp_path, "operator-state-1.15-savepoint")
    files = sorted(p for p in snapshot.iterdir() if p.name != "_metadata")
    target = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[107] ^= 1
    target.write_bytes(bytes(data))
    sp = Savepoint.open(str(snapshot))
    with pytest.raises(CorruptStateError, match="another subtask's header says"):
        for op in sp.operators:
            for s in (op.operator_meta.states if op.operator_meta else []):
                if s.kind != "BROADCAST":
                    list(tables.list_state_table(op, s.name).rows())


# ---------------------------------------------------------------------------------------------
# the command line


@pytest.mark.spark
def test_cli_read_of_a_damaged_state_file_is_one_line_exit_2(tmp_path, spark):
    snapshot = _copy(tmp_path, "keyed-hashmap-savepoint")
    path, handle, _ = _first_stream(snapshot)
    _damage_canonical(path, handle, "key length")
    res = CliRunner().invoke(app, ["read", str(snapshot), "--uid", "keyed", "--json"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and path.name in lines[0] and "the key decodes to" in lines[0], res.output
    assert "Traceback" not in res.output
