"""The columnar decoder on the heap-native and RocksDB layouts, against the plain Python decoders:
generated heap-native streams (every covered type, timers, empty lists and maps, compressed or not)
give the reference rows, corrupted ones fail with CorruptStateError where the strict Python path
fails, and the heap-native and RocksDB samples give the rows of ``KeyedState.rows``."""

from __future__ import annotations

import re
import struct
import sys
from types import SimpleNamespace

import pytest
from hypothesis import assume, given, strategies as st

from fstate.savepoint import columnar, handles, keyed, keyed_state, rocksdb
from fstate.savepoint.compression import frame_chunks
from fstate.savepoint.errors import DECODE_ERRORS, CorruptStateError, FStateError
from fstate.savepoint.keyed_codecs import state_codecs
from fstate.savepoint.decoders import RowShape, new_decoder
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metainfo import PRIORITY_QUEUE
from fstate.savepoint.types import MapType
from tests.savepoint.state_streams import GEN, check_damaged_outcome, damage, same
from tests.savepoint.test_columnar import _choose, _names, batch_rows, keyed_streams, needs_c, reference_rows
from tests.support import ROOT, sample_snapshot


def encode_native(meta, data, lo, hi):
    """A heap-native stream (keyed.native_key_group's layout): every key group, every state (in
    reverse id order, as HashMap order differs from ids), entries as namespace, key, whole value."""
    out = bytearray(keyed.proxy_bytes(meta))
    offsets = []
    key_enc = meta.key_type.encoder()
    for kg in range(lo, hi + 1):
        offsets.append(len(out))
        out += struct.pack(">i", kg)
        for sid in reversed(range(len(meta.states))):
            info = meta.states[sid]
            items = data.get(kg, {}).get(sid, [])
            block = bytearray(struct.pack(">Hi", sid, len(items)))
            value_enc = info.value_type.encoder() if items else None
            for key, ns, v in items:
                if info.backend_type == PRIORITY_QUEUE:
                    value_enc(block, (v, key, ns))
                else:
                    info.namespace_type.encoder()(block, ns)
                    key_enc(block, key)
                    value_enc(block, v)
            out += frame_chunks(bytes(block)) if meta.compressed else block
    return bytes(out), handles.KeyGroupsHandle(handles.KEY_GROUPS_V2, lo, tuple(offsets), None)


def native_columnar(buf, handle, meta, mp, ids, flatten, ns_mode, max_rows=columnar.MAX_ROWS):
    regions = keyed.key_group_regions(handle, len(buf))
    return columnar.native_batches(buf, regions, meta, mp, state_codecs(meta, mp), ids, "the-source", flatten,
                                   ns_mode, _names(meta, ids, flatten, ns_mode), max_rows)


def native_entries(buf, handle, meta, mp, ids):
    """The Python decoder's entries (KeyedState._stream_entries for the heap-native layout; always
    strict)."""
    codecs = state_codecs(meta, mp)
    out = []
    for kg, start, end in keyed.key_group_regions(handle, len(buf)):
        try:
            out += keyed.native_key_group(buf, start, end, kg, meta, codecs, set(ids), "the-source")
        except DECODE_ERRORS as e:
            raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", "the-source") from None
    return codecs, out


def _with_empty_collections(meta, values, data):
    """Heap lists and maps may be stored empty (canonical streams never hold them)."""
    for kg, by_state in values.items():
        for sid, items in by_state.items():
            if meta.states[sid].kind in ("LIST", "MAP") and items and data.draw(st.booleans()):
                key, ns, v = items[0]
                items[0] = (key, ns, [] if meta.states[sid].kind == "LIST" else {})
    return values


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_generated_native_streams_same_as_the_reference(stream, data, monkeypatch):
    meta, mp, values, lo, hi = stream
    values = _with_empty_collections(meta, values, data)
    buf, handle = encode_native(meta, values, lo, hi)
    ids, ns_mode, flatten = _choose(data, meta)
    max_rows = data.draw(st.sampled_from([1, 3, columnar.MAX_ROWS]))
    batches = native_columnar(buf, handle, meta, mp, ids, flatten, ns_mode, max_rows)
    assert batches is not None  # every generated type is covered
    got = batch_rows(batches)
    codecs, entries = native_entries(buf, handle, meta, mp, ids)
    want = reference_rows(monkeypatch, lambda sids: keyed.rows_from_entries(entries, codecs, sids), meta, ids,
                          flatten, ns_mode)
    assert same(want, got)


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_corrupt_native_streams(stream, data, monkeypatch):
    meta, mp, values, lo, hi = stream
    buf, handle = encode_native(meta, values, lo, hi)
    ids, ns_mode, flatten = _choose(data, meta)
    damaged = damage(data, buf, meta.header_size, [0x00, 0x01, 0x7F, 0x80, 0xFF])
    try:
        codecs, entries = native_entries(damaged, handle, meta, mp, ids)
        want = reference_rows(monkeypatch, lambda sids: keyed.rows_from_entries(entries, codecs, sids), meta, ids,
                              flatten, ns_mode)
    except FStateError as e:
        want = type(e)
    try:
        got = batch_rows(native_columnar(damaged, handle, meta, mp, ids, flatten, ns_mode) or ())
    except CorruptStateError as e:
        assert e.path == "the-source"
        got = CorruptStateError
    check_damaged_outcome(want, got, meta, lambda: entries)


@needs_c
def test_a_state_that_cannot_be_skipped_leaves_the_rows_to_python():
    from fstate.savepoint.types import LONG, STRING, OpaqueType
    opaque = OpaqueType("com.example.KryoSerializerSnapshot", 1, b"")
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING,
                                  [keyed.value_state_meta("v", "VALUE", LONG),
                                   keyed.value_state_meta("o", "MAP", MapType(STRING, opaque))])
    meta.header_size = len(keyed.proxy_bytes(meta))
    buf, handle = encode_native(meta, {1: {0: [("a", None, 1)]}}, 1, 1)
    assert native_columnar(buf, handle, meta, 128, [0], False, "void") is None


# ---------------------------------------------------------------------------------------------
# the samples: heap-native (keyed-hashmap-checkpoint) and RocksDB (keyed-rocksdb-checkpoint)


@needs_c
@pytest.mark.parametrize("sample,layout", [("keyed-hashmap-checkpoint", keyed_state.HEAP_NATIVE),
                                           ("keyed-rocksdb-checkpoint", keyed_state.ROCKSDB)])
def test_samples_same_as_the_reference(sample, layout, monkeypatch):
    if layout == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    op = Savepoint.open(str(sample_snapshot(ROOT / "samples" / sample))).operator("keyed")
    for source in op.keyed_states():
        for key_groups in (None, range(0, 128, 3)):
            with source.open(key_groups=key_groups) as state:
                assert state.layout == layout
                meta = state.meta
                value_ids = [i for i, _ in meta.value_states]
                for ids in [value_ids, value_ids[::-1]] + [[i] for i in value_ids]:
                    for ns_mode in ("void", "namespace"):
                        names = _names(meta, ids, False, ns_mode)
                        for max_rows in (columnar.MAX_ROWS, 7):
                            decoder = new_decoder(state, ids, RowShape(ns_mode=ns_mode))
                            assert decoder.name == "columnar", (ids, ns_mode)
                            batches = (decoder.batches(names, from_rows=None) if max_rows == columnar.MAX_ROWS
                                       else _small_batches(state, ids, ns_mode, names))
                            got = batch_rows(batches)
                            want = reference_rows(monkeypatch, state.rows, meta, ids, False, ns_mode)
                            assert got and same(want, got), (ids, ns_mode, max_rows)


def _small_batches(state, ids, ns_mode, names):
    shape = (list(ids), state.source, False, ns_mode, names, 7)
    if state.layout == keyed_state.ROCKSDB:
        return columnar.rocksdb_batches(state.db, state.meta, state.max_parallelism, state.codecs,
                                        state.key_groups, *shape)
    return columnar.native_batches(state.buf, state.checked_regions(), state.meta, state.max_parallelism,
                                   state.codecs, *shape)


# ---------------------------------------------------------------------------------------------
# RocksDB: generated column families (canonical pairs, sorted as RocksDB keeps them)


class FakeCursor:
    """A rocksdict iterator (RocksDBSnapshot.cursor) over sorted pairs; ``fail``: status() raises
    it once the pairs are read (as RocksDB reports a corrupt block)."""

    def __init__(self, pairs, fail: str | None = None):
        self.pairs, self.at, self.fail = pairs, 0, fail

    def key(self):
        return self.pairs[self.at][0] if self.at < len(self.pairs) else None

    def value(self):
        return self.pairs[self.at][1] if self.at < len(self.pairs) else None

    def next(self):
        self.at += 1

    def valid(self):
        return self.at < len(self.pairs)

    def status(self):
        if self.fail:
            raise OSError(self.fail)


class FakeSnapshot:
    """What columnar.rocksdb_batches and rocksdb.iter_entries read of a RocksDBSnapshot."""

    def __init__(self, families: dict[str, list[tuple[bytes, bytes]]], lo: int, hi: int,
                 failing: dict[str, str] | None = None):
        self.families = {name: sorted(pairs) for name, pairs in families.items()}
        self.failing = failing or {}
        self.source = SimpleNamespace(start_key_group=lo, end_key_group=hi, label="the-source")
        self._db = self

    @property
    def column_families(self):
        return list(self.families)

    def cursor(self, name, start=b""):
        if name not in self.families:
            return None
        return FakeCursor([pair for pair in self.families[name] if pair[0] >= start], self.failing.get(name))

    read_error = rocksdb.RocksDBSnapshot.read_error
    items = rocksdb.RocksDBSnapshot.items

    def live_tables(self):
        return None  # no table files: the decoder reads the cursors (rocksdict's path)


def _families(meta, mp, values):
    encoders = [keyed.PairEncoder(meta, sid, mp) for sid in range(len(meta.states))]
    families: dict = {info.name: {} for info in meta.states}
    for kg, by_state in values.items():
        for sid, items in by_state.items():
            for key, ns, v in items:
                for k, b in encoders[sid].pairs(kg, key, v, ns):
                    families[meta.states[sid].name][bytes(k)] = bytes(b)
    return {name: list(pairs.items()) for name, pairs in families.items()}


def _rocksdb_outcomes(monkeypatch, db, meta, mp, ids, flatten, ns_mode, key_groups):
    codecs = state_codecs(meta, mp)
    try:
        entries = list(rocksdb.iter_entries(db, meta, mp, codecs=codecs, key_groups=key_groups, states=set(ids),
                                            source="the-source"))
        want = reference_rows(monkeypatch, lambda sids: keyed.rows_from_entries(entries, codecs, sids), meta, ids,
                              flatten, ns_mode)
    except FStateError as e:
        entries, want = None, type(e)
    try:
        batches = columnar.rocksdb_batches(db, meta, mp, state_codecs(meta, mp), key_groups, ids, "the-source",
                                           flatten, ns_mode, _names(meta, ids, flatten, ns_mode), 3)
        assert batches is not None
        got = batch_rows(batches)
    except CorruptStateError as e:
        assert e.path == "the-source"
        got = CorruptStateError
    return entries, want, got


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_generated_rocksdb_same_as_the_reference(stream, data, monkeypatch):
    meta, mp, values, lo, hi = stream
    ids, ns_mode, flatten = _choose(data, meta)
    families = _families(meta, mp, values)
    key_groups = data.draw(st.none() | st.none() | st.lists(st.integers(lo, hi), max_size=3))
    damaged = data.draw(st.booleans())
    if damaged:
        name = data.draw(st.sampled_from(sorted(families)))
        pairs = families[name]
        assume(pairs)
        i, which = data.draw(st.integers(0, len(pairs) - 1)), data.draw(st.integers(0, 1))
        raw = bytearray(pairs[i][which])
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        how = data.draw(st.sampled_from(["flip", "cut", "insert"] if raw else ["insert"]))
        if how == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del raw[at:at + data.draw(st.integers(1, 3))]
        else:
            raw[at:at] = bytes(data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=3)))
        pairs[i] = (bytes(raw), pairs[i][1]) if which == 0 else (pairs[i][0], bytes(raw))
    db = FakeSnapshot(families, lo, hi)
    entries, want, got = _rocksdb_outcomes(monkeypatch, db, meta, mp, ids, flatten, ns_mode, key_groups)
    check_damaged_outcome(want, got, meta, lambda: entries, damaged)


# ---------------------------------------------------------------------------------------------
# RocksDB: a real database (rocksdict), batch boundaries, cursor errors and reference counts


def _rocksdb_database(path, mp: int, lo: int, hi: int):
    """A RocksDB database written as Flink's backend writes it (the canonical pair encoder), with
    a VALUE, a LIST and a MAP state, a state whose column family is empty and one without a column
    family: (RocksDBSource, meta). String keys of key groups lo..hi (with mp > 256: 2-byte prefixes
    above 255)."""
    from fstate.savepoint.types import LONG, STRING
    from fstate.savepoint.types.hashing import key_group_for_hash
    from tests.savepoint.rocksdb_synthetic import write_database

    states = [keyed.value_state_meta("total", "VALUE", LONG), keyed.value_state_meta("tags", "LIST", STRING),
              keyed.value_state_meta("m", "MAP", MapType(STRING, LONG)), keyed.value_state_meta("empty", "VALUE", LONG),
              keyed.value_state_meta("absent", "VALUE", LONG)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    entries = []
    for i in range(600):
        key = f"key-{i}"
        kg = key_group_for_hash(STRING.java_hash(key), mp)
        if not lo <= kg <= hi:
            continue
        values = [i, [f"t{i}", ""] * (i % 3), {"a": i, "nul": None} if i % 2 else {}]
        # every state leaves some keys out: rows of one state only
        entries.append((key, kg, [(sid, v) for sid, v in enumerate(values) if i % 5 != sid]))
    src = write_database(path, meta, mp, lo, hi, entries, column_families=4)
    meta.header_size = len(keyed.proxy_bytes(meta))
    return src, meta


def _batch_sizes(kg_rows: list[int], max_rows: int) -> list[int]:
    """The rows of each batch: a batch ends after the key group that brings it to max_rows rows."""
    out, n = [], 0
    for rows in kg_rows:
        n += rows
        if n >= max_rows:
            out.append(n)
            n = 0
    return out + ([n] if n else [])


@needs_c
@pytest.mark.parametrize("mp,lo,hi", [(128, 0, 127), (1024, 200, 700)])
def test_rocksdb_database_batches(tmp_path, monkeypatch, mp, lo, hi):
    pytest.importorskip("rocksdict")
    src, meta = _rocksdb_database(tmp_path / "db", mp, lo, hi)
    with rocksdb.open_snapshot(src) as db:
        assert "empty" in db.column_families and "absent" not in db.column_families
        every = sorted({kg for kg, *_ in keyed_state.KeyedState.of_rocksdb(db, meta, mp).rows([0, 1, 2])})
        assert len(every) > 20 and (mp == 128 or every[-1] > 255)
        some = every[::3] + [every[1]]  # runs of one and of two key groups
        for key_groups in (None, some):
            for ids in ([0], [2, 0, 1], [1, 3], [3], [4, 0], [0, 1, 2, 3, 4]):
                state = keyed_state.KeyedState.of_rocksdb(db, meta, mp, key_groups=key_groups)
                ref = list(state.rows(ids))
                kg_rows = [sum(1 for row in ref if row[0] == kg) for kg in sorted({row[0] for row in ref})]
                want = reference_rows(monkeypatch, state.rows, meta, ids)
                for max_rows in (1, 2, 7, columnar.MAX_ROWS):
                    batches = list(columnar.rocksdb_batches(db, meta, mp, state.codecs, key_groups, ids,
                                                            "the-source", False, "void", _names(meta, ids, False,
                                                                                                "void"), max_rows))
                    assert [b.num_rows for b in batches] == _batch_sizes(kg_rows, max_rows), (ids, max_rows)
                    assert same(want, batch_rows(batches)), (ids, max_rows)
                    assert bool(want) == (ids not in ([3], [1, 3]) or 1 in ids)


@needs_c
@pytest.mark.parametrize("piece_bytes", [1, 40, 1000])
def test_rocksdb_key_groups_read_in_pieces(tmp_path, monkeypatch, piece_bytes):
    """Key groups read from the table files in pieces of a value or list state's pairs (a key group of
    100 M keys is tens of MB): every row whole (its pairs of every state in one piece, map entries too),
    the rows of the reference, in its order where no key group is cut (a piece ends at a key group
    then: 1000 bytes hold any key group's pairs here); in a key group cut in pieces, piece by piece. A
    map state alone (no state to cut at) is read a window at a time."""
    pytest.importorskip("rocksdict")
    from fstate.savepoint import rocksdb_native

    src, meta = _rocksdb_database(tmp_path / "db", 128, 0, 127)
    monkeypatch.setattr(columnar, "PIECE_BYTES", piece_bytes)
    pieces = []
    windows = rocksdb_native.windows

    def counted(*args):
        for window in windows(*args):
            pieces.append(window)
            yield window

    monkeypatch.setattr(rocksdb_native, "windows", counted)
    with rocksdb.open_snapshot(src) as db:
        for ids in ([0, 1, 2], [2, 0, 1], [1, 2], [2], [0]):
            state = keyed_state.KeyedState.of_rocksdb(db, meta, 128)
            want = reference_rows(monkeypatch, state.rows, meta, ids)
            pieces.clear()
            got = batch_rows(columnar.rocksdb_batches(db, meta, 128, state.codecs, None, ids, "the-source", False,
                                                      "void", _names(meta, ids, False, "void"), columnar.MAX_ROWS))
            assert len({row[0] for row in got}) == len(got)  # one row a key: no row cut in two
            assert sorted(map(repr, got)) == sorted(map(repr, want)), ids
            lead = min(ids) if min(ids) < 2 else None  # the first value or list state cuts
            if lead is None:  # a map state alone: whole windows
                assert len(pieces) == 1
            elif piece_bytes == 1:  # a piece a key of the cutting state
                assert len(pieces) == sum(1 for _ in state.rows([lead])), ids
            else:
                assert 1 < len(pieces) < sum(1 for _ in state.rows([lead])), ids
            if piece_bytes == 1000:
                assert same(want, got), ids


def _one_state_meta(mp):
    from fstate.savepoint.types import LONG, STRING
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING,
                                  [keyed.value_state_meta("a", "VALUE", LONG), keyed.value_state_meta("b", "VALUE",
                                                                                                      LONG)])
    meta.header_size = len(keyed.proxy_bytes(meta))
    return meta


def _fake_families(meta, mp, keys_by_kg):
    return _families(meta, mp, {kg: {0: [(k, None, 1) for k in keys], 1: [(k, None, 2) for k in keys]}
                                for kg, keys in keys_by_kg.items()})


@needs_c
def test_rocksdb_cursor_errors_name_the_column_family():
    mp = 128
    meta = _one_state_meta(mp)
    families = _fake_families(meta, mp, {3: ["x", "y"], 9: ["z"]})
    for failing in ("a", "b"):
        db = FakeSnapshot(families, 0, 127, failing={failing: "corrupt block"})
        want = f"RocksDB cannot read column family '{failing}' (corrupt block)"
        with pytest.raises(CorruptStateError, match=re.escape(want)):
            list(rocksdb.iter_entries(db, meta, mp, source="the-source"))
        with pytest.raises(CorruptStateError, match=re.escape(want)) as e:
            list(columnar.rocksdb_batches(db, meta, mp, state_codecs(meta, mp), None, [0, 1], "the-source", False,
                                          "void", ["key", "a", "b"], 2))
        assert e.value.path == "the-source"


@needs_c
@pytest.mark.parametrize("mp", [128, 4096])
def test_rocksdb_key_shorter_than_its_prefix(monkeypatch, mp):
    meta = _one_state_meta(mp)
    families = _fake_families(meta, mp, {1: ["x"], 2: ["y"]})
    short = b"\x01" if mp > 128 else b""
    families["a"].append((short, b"\x00" * 8))
    db = FakeSnapshot(families, 0, 300)
    codecs = state_codecs(meta, mp)
    if mp == 128:  # an empty key sorts before every key group's: never read
        want = reference_rows(monkeypatch, lambda sids: keyed.rows_from_entries(
            rocksdb.iter_entries(db, meta, mp, states={0}, source="the-source"), codecs, sids), meta, [0])
        got = batch_rows(columnar.rocksdb_batches(db, meta, mp, codecs, None, [0], "the-source", False, "void",
                                                  ["key", "a"]))
        assert want and same(want, got)
        return
    with pytest.raises(CorruptStateError, match="shorter than its key-group prefix"):
        list(rocksdb.iter_entries(db, meta, mp, source="the-source"))
    with pytest.raises(CorruptStateError, match="key group 256: .*shorter than its key-group prefix"):
        list(columnar.rocksdb_batches(db, meta, mp, codecs, None, [0], "the-source", False, "void", ["key", "a"]))
    # past the last key group read: not an error
    got = batch_rows(columnar.rocksdb_batches(db, meta, mp, codecs, range(0, 3), [0], "the-source", False, "void",
                                              ["key", "a"]))
    assert sorted(got) == [("x", 1), ("y", 1)]


@needs_c
def test_rocksdb_cursors_and_pairs_are_released():
    """The decoder holds no reference to a cursor or a pair after a read, also when it fails."""
    mp = 128
    meta = _one_state_meta(mp)
    families = _fake_families(meta, mp, {kg: [f"k{kg}-{i}" for i in range(3)] for kg in range(0, 40, 3)})
    db = FakeSnapshot(families, 0, 127)
    cursors = {}
    made = db.cursor
    db.cursor = lambda name, start=b"": cursors.setdefault((name, start), made(name, start))
    pairs = [x for name in ("a", "b") for pair in db.families[name] for x in pair]
    before = [sys.getrefcount(x) for x in pairs]
    for ids, max_rows in (([0, 1], 1), ([1], 4), ([0], columnar.MAX_ROWS)):
        cursors.clear()
        batches = columnar.rocksdb_batches(db, meta, mp, state_codecs(meta, mp), range(0, 40, 2), ids, None, False,
                                           "void", _names(meta, ids, False, "void"), max_rows)
        assert batch_rows(batches)
        del batches
        cursors[None] = FakeCursor([])  # never read: the count every cursor must have
        assert len(cursors) > 2 and len({sys.getrefcount(c) for c in cursors.values()}) == 1
        assert [sys.getrefcount(x) for x in pairs] == before
    db.families["b"][5] = (db.families["b"][5][0], b"\x00")  # a value too short: the decoder fails
    pairs = [x for name in ("a", "b") for pair in db.families[name] for x in pair]
    before = [sys.getrefcount(x) for x in pairs]
    with pytest.raises(CorruptStateError):
        list(columnar.rocksdb_batches(db, meta, mp, state_codecs(meta, mp), None, [0, 1], None, False, "void",
                                      ["key", "a", "b"], 2))
    cursors.clear()
    assert [sys.getrefcount(x) for x in pairs] == before
