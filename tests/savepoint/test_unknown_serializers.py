"""Serializer snapshots fstate cannot parse affect only their own state (issue 14, point 1).

Synthetic cases built from shipped samples: a snapshot class name replaced byte-wise by an unknown
name of the same length (values, keys, operator state), on the heap-canonical, RocksDB native
savepoint and RocksDB incremental checkpoint paths; a fuzz check that no reading is ever silently
wrong; and the real Flink 2.3 SQL/CEP savepoints (skipped when Flink is not available).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from fstate.savepoint import header_search, keyed, streams
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.errors import FStateError, UnresolvedSnapshotError
from fstate.savepoint.binary import DataInput
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types.snapshots import read_versioned_snapshot

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
LONG = "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot"
STRING = "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot"
KEYED_SAMPLES = ["keyed-hashmap-savepoint", "keyed-rocksdb-savepoint", "keyed-rocksdb-checkpoint"]


def unknown_name(cls: str) -> str:
    """A class name fstate does not know, as long as ``cls`` (so every length field stays right)."""
    prefix = "com.example.unknown."
    return prefix + "Q" * (len(cls) - len(prefix))


def copy_replacing(sample: str, tmp_path: Path, old: str, new: str) -> Path:
    """A copy of a sample with every occurrence of ``old`` replaced by ``new`` in every file
    (inline state lives in ``_metadata``, RocksDB meta data in its own files)."""
    assert len(old) == len(new)
    target = tmp_path / sample
    shutil.copytree(SAMPLES / sample, target)
    replaced = 0
    for f in target.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            if old.encode() in data:
                replaced += data.count(old.encode())
                f.write_bytes(data.replace(old.encode(), new.encode()))
    assert replaced, f"{old} not found in {sample}"
    return target


def readable(meta, op) -> set[int]:
    """States fstate can decode (a MAP state whose key is unknown cannot be split: key | map key)."""
    return {c.state_id for c in keyed.state_codecs(meta, op.max_parallelism) if c.canonical is not None}


def keyed_rows(sp: Savepoint, uid: str) -> dict:
    """{state name: sorted (key, namespace, value) of every readable entry} of one operator."""
    op = sp.operator(uid)
    out: dict = {}
    for subtask, h in op.readable_keyed_handles():
        if hasattr(h, "metadata_state"):
            from fstate.savepoint import rocksdb
            src = op.rocksdb_source(subtask, h)
            meta = rocksdb.read_meta(src, sp.io)
            with rocksdb.open_snapshot(src, io=sp.io) as db:
                entries = list(rocksdb.iter_entries(db, meta, op.max_parallelism, states=readable(meta, op)))
        else:
            src = sp.stream_source(h.delegate)
            buf = streams.read_source(src, sp.io)
            meta = keyed.read_keyed_proxy(buf, src.label, keyed.header_end(h.offsets, len(buf)))
            entries = list(KeyedState.of_stream(buf, h, meta, op.max_parallelism, source=src.label)
                           .entries(states=readable(meta, op)))
        for sid, _, _, key, ns, value in entries:
            out.setdefault(meta.states[sid].name, []).append((key, ns, value))
    return {name: sorted(rows, key=repr) for name, rows in out.items()}


@pytest.mark.parametrize("sample", KEYED_SAMPLES)
def test_unknown_value_serializer_is_raw_bytes_for_its_states_only(sample, tmp_path):
    original = Savepoint.open(str(SAMPLES / sample))
    changed = Savepoint.open(str(copy_replacing(sample, tmp_path, LONG, unknown_name(LONG))))
    before = {s.name: s for s in original.operator("keyed").keyed_meta.states}
    after = changed.operator("keyed").keyed_meta.states
    assert [s.name for s in after] == list(before)
    described = {d.name: d for d in changed.operator("keyed").describe_states()}
    for state in after:
        touched = LONG in repr([t.snapshot_class for t in before[state.name].value_type.walk()
                                if hasattr(t, "snapshot_class")])
        if touched:  # the whole slot holding the unknown class is opaque
            assert header_search.is_unresolved(state.value_type)
            assert any(unknown_name(LONG) in w for w in described[state.name].warnings)
        else:
            assert state.serializers == before[state.name].serializers
    # rows: untouched states identical, VALUE states of the unknown type are the raw value bytes
    old_rows, new_rows = keyed_rows(original, "keyed"), keyed_rows(changed, "keyed")
    long_decoder = before["total"].value_type.decoder()
    raw_total = new_rows["total"]
    assert [(k, ns, long_decoder(v, 0)[0]) for k, ns, v in raw_total] == old_rows["total"]
    for name, rows in old_rows.items():
        if not any(LONG in repr(getattr(t, "snapshot_class", "")) for t in before[name].value_type.walk()):
            assert new_rows[name] == rows


@pytest.mark.parametrize("sample", KEYED_SAMPLES)
def test_unknown_key_serializer_gives_raw_keys(sample, tmp_path):
    original = Savepoint.open(str(SAMPLES / sample))
    changed = Savepoint.open(str(copy_replacing(sample, tmp_path, STRING, unknown_name(STRING))))
    km = changed.operator("keyed").keyed_meta
    assert header_search.is_unresolved(km.key_type)
    assert [s.name for s in km.states] == [s.name for s in original.operator("keyed").keyed_meta.states]
    assert all(any("key serializer" in w for w in d.warnings) for d in changed.operator("keyed").describe_states())
    key_decoder = original.operator("keyed").keyed_meta.key_type.decoder()
    old_rows, new_rows = keyed_rows(original, "keyed"), keyed_rows(changed, "keyed")
    assert "total" in new_rows
    decoded = sorted(((key_decoder(k, 0)[0], ns, v) for k, ns, v in new_rows["total"]), key=repr)
    assert decoded == old_rows["total"]


def test_unknown_operator_state_serializer(tmp_path):
    sample = "operator-state-hashmap-savepoint"
    original = Savepoint.open(str(SAMPLES / sample))
    changed = Savepoint.open(str(copy_replacing(sample, tmp_path, STRING, unknown_name(STRING))))
    for op in original.operators:
        if op.operator_meta is None:
            continue
        new = changed.operator(op.uid).operator_meta
        assert [s.name for s in new.states] == [s.name for s in op.operator_meta.states]
        for before, after in zip(op.operator_meta.states, new.states):
            if any(getattr(n, "snapshot_class", None) == STRING for n in before.value_type.walk()):
                assert header_search.is_unresolved(after.value_type)
                if before.kind != "BROADCAST":
                    decoder = before.value_type.decoder()
                    raw = [v for _, _, v in changed.operator(op.uid).list_state(after.name)]
                    assert [decoder(v, 0)[0] for v in raw] == [v for _, _, v in op.list_state(before.name)]
            for slot, t in before.serializers.items():
                if any(getattr(n, "snapshot_class", None) == STRING for n in t.walk()):
                    assert header_search.is_unresolved(after.serializers[slot])
                else:
                    assert after.serializers[slot] == t


def test_fuzz_no_silent_wrong_reading():
    """Every snapshot class name in a header replaced, one at a time, by an unknown one of the same
    length, and random bytes inside that unknown snapshot's own payload changed too: the reading is either
    refused for this header (UnresolvedSnapshotError) or has the original states, with every
    serializer either the original one or opaque, and writes back to the same bytes."""
    rng = random.Random(14)
    checked = refused = 0
    for sample in ("keyed-hashmap-savepoint", "keyed-rocksdb-savepoint"):
        sp = Savepoint.open(str(SAMPLES / sample))
        for op in sp.operators:
            if not op.has_keyed_state:
                continue
            for _, h in op.keyed_handles():
                if hasattr(h, "metadata_state"):
                    header = streams.read_source(sp.stream_source(h.metadata_state), sp.io)
                else:
                    header = streams.read_source(sp.stream_source(h.delegate), sp.io)
                end = len(header) if hasattr(h, "metadata_state") else keyed.header_end(h.offsets, len(header))
                meta = keyed.read_keyed_proxy(header, None, end)
                names = sorted({t.snapshot_class for s in meta.states for t in s.serializers.values()
                                if hasattr(t, "snapshot_class")} | {meta.key_type.snapshot_class})
                for cls in names:
                    raw = cls.encode()
                    at = header.find(raw, 0, end)
                    while at >= 0:
                        data = bytearray(header)
                        data[at:at + len(raw)] = unknown_name(cls).encode()
                        snapshot = DataInput(header, at - 2, end)
                        read_versioned_snapshot(snapshot)
                        payload = range(at + len(raw) + 4, snapshot.pos)
                        for _ in range(rng.randrange(3) if payload else 0):
                            data[rng.choice(payload)] = rng.randrange(256)
                        try:
                            got = keyed.read_keyed_proxy(bytes(data), None, end)
                        except UnresolvedSnapshotError:
                            refused += 1
                        else:
                            checked += 1
                            assert got.header_size == end
                            assert [s.name for s in got.states] == [s.name for s in meta.states]
                            assert [s.kind for s in got.states] == [s.kind for s in meta.states]
                            for a, b in zip(got.states, meta.states):
                                for k, t in a.serializers.items():
                                    assert t == b.serializers[k] or header_search.is_unresolved(t)
                            assert keyed.proxy_bytes(got) == bytes(data[:end])
                        at = header.find(raw, at + 1, end)
                break
    assert checked > 10 and refused < checked, (checked, refused)


def test_header_end_unknown_is_refused_not_guessed():
    sp = Savepoint.open(str(SAMPLES / "keyed-hashmap-savepoint"))
    op = sp.operator("keyed")
    _, h = op.keyed_handles()[0]
    buf = streams.read_source(sp.stream_source(h.delegate), sp.io)
    end = keyed.header_end(h.offsets, len(buf))
    data = buf.replace(STRING.encode(), unknown_name(STRING).encode())
    with pytest.raises(FStateError):
        keyed.read_keyed_proxy(data, None, None)
    with pytest.raises(UnresolvedSnapshotError):  # a wrong end: no reading ends there
        keyed.read_keyed_proxy(data, None, end - 1)
    assert keyed.read_keyed_proxy(data, None, end).header_size == end
