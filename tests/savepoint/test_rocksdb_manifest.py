"""The MANIFEST's replay (savepoint/rocksdb_manifest.py) against RocksDB's own listing (rocksdict's
``list_cf`` and ``live_files``, the reference): the column families and every live table file's name,
level, user-key range (in RocksDB's order) and column family, on generated databases (flushes,
compactions, a dropped and re-added column family, MANIFEST roll-overs, no CURRENT), every RocksDB
sample and every RocksDB snapshot of the Flink oracle; damaged MANIFESTs (left to RocksDB: the same
outcome as the reference, never other files); and the fast path opening no RocksDB database."""

from __future__ import annotations

import gc
import os
import re
import sys
from pathlib import Path

import pytest

from fstate.savepoint import handles, keyed_state, rocksdb, rocksdb_manifest, rocksdb_native, streams
from fstate.savepoint.errors import CorruptStateError, FStateError
from fstate.savepoint.loader import Savepoint
from tests.flink.test_rocksdb_oracle import SST_VARIANTS
from tests.savepoint.test_sst import _options, generate
from tests.support import sample_dirs, sample_snapshot

rocksdict = pytest.importorskip("rocksdict")
pytestmark = pytest.mark.skipif(not rocksdb_native.available(), reason="fstate.savepoint._sst is not built")


# ---------------------------------------------------------------------------------------------
# the comparison


def listing(src: rocksdb.RocksDBSource, reference: bool):
    """(column families, [(name, level, smallest, largest), ...]) as the replay or RocksDB lists them."""
    with rocksdb.open_snapshot(src, reference=reference) as db:
        if not reference:
            assert db.manifest() is not None, "the replay left the MANIFEST to RocksDB"
        tables = db.live_tables()
        assert tables is not None
        found = [(t.name, t.level, t.smallest, t.largest) for t in tables]
        if not reference:  # the replay's column family of a table is the one its properties name
            for t in tables:
                try:
                    table = rocksdb_manifest.sst.Table(t.path)
                except rocksdb_manifest.sst.Unsupported:  # e.g. range deletions: its listing is still compared
                    continue
                assert table.column_family.decode() == t.column_family, t.name
        return db.column_families, found


def assert_replay_is_rocksdb(src: rocksdb.RocksDBSource) -> int:
    """The replay lists what RocksDB lists; the number of tables."""
    replayed = listing(src, reference=False)
    assert replayed == listing(src, reference=True)
    return len(replayed[1])


def outcome(src: rocksdb.RocksDBSource, reference: bool):
    """What reading a snapshot gives: its column families, tables and pairs, or its error."""
    try:
        with rocksdb.open_snapshot(src, reference=reference) as db:
            tables = db.live_tables()
            found = rocksdb_native.open_tables(db)
            pairs = {family: list(db.items(family)) for family in db.column_families}
            return db.column_families, [(t.name, t.level) for t in tables], found is not None, pairs
    except CorruptStateError as e:  # RocksDB's message names the temporary directory
        return type(e), re.sub(rocksdb.TEMP_PREFIX + r"\w+", "TMP", str(e))


def _files(path: Path) -> tuple[tuple[str, streams.StreamSource], ...]:
    return tuple((name, streams.StreamSource(str(path / name), label=name)) for name in sorted(os.listdir(path))
                 if name.endswith(".sst") or name.startswith("MANIFEST-") or name == "CURRENT")


def _source(path: Path, files=None) -> rocksdb.RocksDBSource:
    return rocksdb.RocksDBSource(str(path), 0, 127, streams.StreamSource(None, data=b""),
                                 _files(path) if files is None else files)


# ---------------------------------------------------------------------------------------------
# generated databases


@pytest.mark.parametrize("compression,checksum,version", [("snappy", "crc32c", 5), ("lz4", "xxh3", 4),
                                                          ("none", "crc32c", 6)])
def test_generated_databases(tmp_path, compression, checksum, version):
    src = generate(tmp_path / "db", _options(compression, checksum, version), families=3, flushes=6)
    assert assert_replay_is_rocksdb(src) > 6


def test_dropped_and_re_added_families_and_manifest_roll_overs(tmp_path):
    """A column family dropped (its files no longer live), one added again under a dropped name, many
    MANIFEST files (a small maximum rolls it over): CURRENT names the last."""
    path = tmp_path / "db"
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_max_manifest_file_size(600)
    db = rocksdict.Rdict(str(path), options)
    for round_ in range(4):
        for name in ("a", "b", "c"):
            family = db.create_column_family(name, options) if round_ == 0 or name == "b" else \
                db.get_column_family(name)
            for i in range(20):
                family[bytes([i, round_])] = bytes([round_]) * i
            family.flush()
            if round_ == 1:
                family.compact_range(None, None)
            del family
        db.drop_column_family("b")
    db.close()
    del db
    gc.collect()
    manifests = [n for n in os.listdir(path) if n.startswith("MANIFEST-")]
    src = _source(path)
    assert assert_replay_is_rocksdb(src) > 4
    names, _ = listing(src, reference=False)
    assert "b" not in names and {"a", "c", "default"} <= set(names)
    if len(manifests) == 1:  # RocksDB deletes the obsolete ones: roll-overs show as a larger number
        assert int(manifests[0].split("-")[1]) > 5


def test_without_current_the_newest_manifest(tmp_path):
    """Flink's snapshots may lack CURRENT: it names the newest MANIFEST (by its number)."""
    src = generate(tmp_path / "db", _options("snappy", "crc32c", 5))
    files = tuple((name, s) for name, s in src.files if name != "CURRENT")
    (newest,) = [name for name, _ in files if name.startswith("MANIFEST-")]
    number = int(newest.split("-")[1])
    assert number > 1
    # an older MANIFEST (a lower number, a name that sorts after the newest's) that must not be read
    stale = tmp_path / f"MANIFEST-{number - 1}"
    stale.write_bytes(b"\0" * 10)
    assert assert_replay_is_rocksdb(_source(tmp_path / "db", files + ((stale.name, streams.StreamSource(str(stale))),)))


# ---------------------------------------------------------------------------------------------
# damaged and unusual MANIFESTs


def _crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) masked as RocksDB stores it, in Python (independent of _sst.c)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _append_record(log: bytes, payload: bytes) -> bytes:
    """``log`` with one more logical record (fragmented across blocks as RocksDB's writer does)."""
    out = bytearray(log)
    first = True
    while True:
        left = rocksdb_manifest.BLOCK - len(out) % rocksdb_manifest.BLOCK
        if left < 7:
            out += b"\0" * left
            continue
        piece, payload = payload[:left - 7], payload[left - 7:]
        kind = (rocksdb_manifest.FULL if not payload else rocksdb_manifest.FIRST) if first else \
            (rocksdb_manifest.LAST if not payload else rocksdb_manifest.MIDDLE)
        body = bytes([kind]) + piece
        out += _crc32c(body).to_bytes(4, "little") + len(piece).to_bytes(2, "little") + body
        first = False
        if not payload:
            return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _with_manifest(tmp_path: Path, change) -> rocksdb.RocksDBSource:
    """A generated database whose MANIFEST is ``change(bytes)``."""
    path = tmp_path / "db"
    generate(path, _options("snappy", "crc32c", 5), flushes=2, compact=False)
    name = (path / "CURRENT").read_text().strip()
    (path / name).write_bytes(change((path / name).read_bytes()))
    return _source(path)


def test_the_checksum_matches_independent_code():
    for data in (b"", b"a", bytes(range(256)) * 40):
        assert rocksdb_manifest.sst.masked_crc32c(data) == _crc32c(data)


def test_an_ignorable_tag_in_a_record_across_blocks_is_skipped(tmp_path):
    """A tag with the safe-to-ignore bit (length-prefixed), in a record fragmented over three blocks."""
    field = os.urandom(70000)
    tag = _varint(rocksdb_manifest.SAFE_IGNORE + 60) + _varint(len(field)) + field
    src = _with_manifest(tmp_path, lambda data: _append_record(data, tag))
    assert assert_replay_is_rocksdb(src) > 0


@pytest.mark.parametrize("damage", ["checksum", "truncated", "unknown tag", "empty file"])
def test_a_damaged_manifest_is_left_to_rocksdb(tmp_path, damage):
    """Damage is left to RocksDB (how it reads a damaged MANIFEST depends on its version and recovery
    mode): the fast path gives exactly the reference's outcome, here RocksDB's one-line
    CorruptStateError naming the snapshot, never other files."""
    change = {
        "checksum": lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],
        "truncated": lambda data: data[:len(data) - 5],
        "unknown tag": lambda data: _append_record(data, _varint(99) + _varint(1)),
        "empty file": lambda data: b"",
    }[damage]
    src = _with_manifest(tmp_path, change)
    with rocksdb.open_snapshot(src) as db:
        assert db.manifest() is None
    found = outcome(src, reference=False)
    assert found == outcome(src, reference=True)
    if damage != "truncated":  # RocksDB may read a MANIFEST torn in its last record as it was before it
        assert found[0] is CorruptStateError and "\n" not in found[1] and str(tmp_path / "db") in found[1], found


def _new_file4(custom: bytes, level: int = 1, number: int = 77) -> bytes:
    key = lambda user: _varint(len(user) + 8) + user + (5 << 8 | 1).to_bytes(8, "little")
    return (_varint(rocksdb_manifest.NEW_FILE4) + _varint(level) + _varint(number) + _varint(1000)
            + key(b"\x01a") + key(b"\x02z") + _varint(3) + _varint(5) + custom + _varint(rocksdb_manifest.TERMINATE))


def _field(tag: int, value: bytes) -> bytes:
    return _varint(tag) + _varint(len(value)) + value


def test_new_file4_custom_fields():
    """Ignorable fields are skipped; a field RocksDB must know, another path, blob references, keys
    without their timestamps: left to RocksDB."""
    edit = rocksdb_manifest.decode_edit(_new_file4(_field(60, b"xyz") + _field(rocksdb_manifest.EPOCH_NUMBER,
                                                                                    _varint(9))))
    (table,) = edit.added
    assert (table.name, table.level, table.smallest, table.largest, table.epoch) == ("000077.sst", 1, b"\x01a",
                                                                                      b"\x02z", 9)
    assert rocksdb_manifest.decode_edit(_new_file4(_field(rocksdb_manifest.PATH_ID, b"\0"))).added
    for custom in (_field(rocksdb_manifest.NON_SAFE_IGNORE + 9, b""), _field(rocksdb_manifest.PATH_ID, b"\1"),
                   _field(rocksdb_manifest.OLDEST_BLOB_FILE_NUMBER, _varint(4)),
                   _field(rocksdb_manifest.USER_TIMESTAMPS_PERSISTED, b"\0")):
        with pytest.raises(rocksdb_manifest.Unsupported):
            rocksdb_manifest.decode_edit(_new_file4(custom))
    with pytest.raises(rocksdb_manifest.Unsupported):  # a level RocksDB's default options do not have
        rocksdb_manifest.decode_edit(_new_file4(b"", level=rocksdb_manifest.LEVELS))
    with pytest.raises(rocksdb_manifest.Unsupported):  # blob files
        rocksdb_manifest.decode_edit(_varint(400) + _varint(1))


def test_atomic_groups_apply_when_complete():
    file = rocksdb_manifest.decode_edit(_new_file4(b"")).added[0]
    group = [rocksdb_manifest.Edit(added=[file], atomic_remaining=1),
             rocksdb_manifest.Edit(atomic_remaining=0, numbers=set(rocksdb_manifest.REQUIRED))]
    assert [t.name for t in rocksdb_manifest.replay(group).families[0].live()] == ["000077.sst"]
    with pytest.raises(rocksdb_manifest.Unsupported):
        rocksdb_manifest.replay(group[:1])


# ---------------------------------------------------------------------------------------------
# samples and the Flink oracle's snapshots


def _rocksdb_sources(snapshot_dir: Path) -> list[tuple[rocksdb.RocksDBSource, int]]:
    sp = Savepoint.open(str(snapshot_dir))
    return [(op.rocksdb_source(subtask, h), op.max_parallelism) for op in sp.operators
            for subtask, h in op.keyed_handles() if isinstance(h, handles.IncrementalKeyedHandle)]


def _compare_snapshot(snapshot_dir: Path) -> int:
    return sum(assert_replay_is_rocksdb(src) for src, _ in _rocksdb_sources(snapshot_dir))


def test_every_rocksdb_sample():
    samples = [s for s in sample_dirs() if "rocksdb" in s.name and _rocksdb_sources(sample_snapshot(s))]
    assert samples
    for sample in samples:
        assert _compare_snapshot(sample_snapshot(sample)) > 0, sample.name


@pytest.mark.flink
@pytest.mark.parametrize("version,snapshot,args", SST_VARIANTS)
def test_every_oracle_snapshot(version, snapshot, args):
    from tests.flink import harness

    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", version, "rocksdb", snapshot, extra_args=args)
    assert _compare_snapshot(res.snapshot_dir) > 0


@pytest.mark.flink
def test_every_cached_oracle_snapshot():
    """Every RocksDB snapshot of the oracle's cache (TypesJob's every type, SQL jobs, ... as far as
    this machine ran them; Flink's own files, not written by fstate)."""
    from tests.flink import harness

    entries = sorted(p for p in (harness.CACHE / "oracle").glob("*-rocksdb-*")
                     if p.is_dir() and (p / "dump.json").exists() and not p.name.startswith(("verify-", "restore-")))
    compared = 0
    for entry in entries:
        for metadata in sorted(entry.rglob("_metadata")):
            for src, _ in _rocksdb_sources(metadata.parent):
                compared += assert_replay_is_rocksdb(src)
    if not compared:
        pytest.skip("no RocksDB snapshot of the oracle is cached")


# ---------------------------------------------------------------------------------------------
# the fast path opens no database


def test_the_fast_path_opens_no_rocksdb_database(monkeypatch):
    """Every reader of the sample's RocksDB checkpoint reads its tables in C from the MANIFEST's listing:
    with rocksdict's database failing to open, the entries, rows and sizes equal the reference's."""
    sample = next(s for s in sample_dirs() if s.name == "keyed-rocksdb-checkpoint")
    sources = _rocksdb_sources(sample_snapshot(sample))
    assert sources

    def read(strict: bool):
        out = []
        for src, max_parallelism in sources:
            with keyed_state.open_rocksdb(src, max_parallelism, strict=strict) as state:
                out.append((sorted(state.entries(), key=repr), sorted(map(repr, state.sized_entries())),
                            sorted(map(repr, state.rows(list(range(len(state.codecs))))))))
        return out

    reference = read(strict=True)

    class Refused:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a RocksDB database was opened")

        @staticmethod
        def list_cf(*args, **kwargs):
            raise AssertionError("RocksDB listed the column families")

    monkeypatch.setattr(rocksdict, "Rdict", Refused)
    assert read(strict=False) == reference
    assert any(entries for entries, _, _ in reference)
    with pytest.raises(CorruptStateError, match="RocksDB listed the column families"):  # the patch holds
        read(strict=True)
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # not even installed
    assert read(strict=False) == reference
    with pytest.raises(FStateError, match="needs the rocksdict package"):
        read(strict=True)
