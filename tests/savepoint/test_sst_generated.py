"""The C reader of RocksDB's table files (savepoint/_sst.c), and the MANIFEST's replay, against rocksdict on
databases written by the RocksDB Flink bundles (frocksdb, from flink-dist, by
tests/savepoint/rocksdb_writer/WriteDatabases.java):
puts, merges with Flink's string-append operator, deletions, single deletions, range deletions (Flink's
restore clips a rescaled database with them), overlapping L0 files over a compacted last level, every
compression Flink's RocksDB writes, table formats 4 (Flink 1.x) and 5; the pairs framed as canonical key
groups (``_sst.frame``) against the Python reference encoder; and truncated table files (an error naming
the file, never other pairs)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from fstate.savepoint import keyed, rocksdb, rocksdb_native, streams
from fstate.savepoint.errors import CorruptStateError
from tests.savepoint.test_rocksdb_manifest import assert_replay_is_rocksdb
from tests.savepoint.test_sst import BIG, assert_same_as_rocksdict, native_pairs

pytest.importorskip("rocksdict")
pytestmark = [pytest.mark.flink,
              pytest.mark.skipif(not rocksdb_native.available(), reason="fstate.savepoint._sst is not built")]

WRITER = Path(__file__).parent / "rocksdb_writer" / "WriteDatabases.java"
FLINK = "2.3.0"

#: name → (CompressionType, key-group prefix bytes, seed, range deletions, table format version)
DATABASES = {
    "none": ("NO_COMPRESSION", 1, 1, False, 5),
    "snappy": ("SNAPPY_COMPRESSION", 1, 2, False, 5),
    "lz4": ("LZ4_COMPRESSION", 1, 3, False, 5),
    "lz4hc": ("LZ4HC_COMPRESSION", 1, 4, False, 5),
    "zstd": ("ZSTD_COMPRESSION", 1, 5, False, 5),
    "snappy-format-4": ("SNAPPY_COMPRESSION", 1, 6, False, 4),
    "lz4-two-byte-prefix": ("LZ4_COMPRESSION", 2, 7, False, 5),
    "range-deletions": ("SNAPPY_COMPRESSION", 1, 8, True, 5),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """Every database of :data:`DATABASES`, written by one JVM."""
    from tests.flink import harness

    harness.require_flink(FLINK)
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        pytest.skip("java/javac not found")
    dist = next(harness.flink_lib_dir(FLINK).glob("flink-dist*.jar"))
    root = tmp_path_factory.mktemp("frocksdb")
    classes = root / "classes"
    subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", str(dist), str(WRITER)], check=True,
                   capture_output=True)
    args = [str(root)]
    for name, (compression, prefix, seed, ranges, version) in DATABASES.items():
        args += [name, compression, str(prefix), str(seed), str(ranges).lower(), str(version)]
    subprocess.run([java, "-cp", f"{classes}{os.pathsep}{dist}", "WriteDatabases", *args], check=True,
                   capture_output=True)
    return root


def source(path: Path, prefix: int) -> rocksdb.RocksDBSource:
    files = tuple((name, streams.StreamSource(str(path / name), label=name)) for name in sorted(os.listdir(path))
                  if name.endswith(".sst") or name.startswith("MANIFEST-") or name == "CURRENT")
    return rocksdb.RocksDBSource(str(path), 0, 127 if prefix == 1 else 599, streams.StreamSource(None, data=b""),
                                 files)


def _levels(src: rocksdb.RocksDBSource) -> list[int]:
    """The live tables' levels, as RocksDB lists them."""
    with rocksdb.open_snapshot(src, reference=True) as db:
        return [table.level for table in db.live_tables()]


@pytest.mark.parametrize("name", list(DATABASES))
def test_the_manifest_replay_lists_what_rocksdb_lists(written, name):
    """The MANIFEST's replay (rocksdb_manifest.py) on frocksdb's MANIFESTs: what RocksDB lists."""
    assert assert_replay_is_rocksdb(source(written / name, DATABASES[name][1])) > 4


@pytest.mark.parametrize("name", [n for n, spec in DATABASES.items() if not spec[3]])
def test_frocksdb_databases(written, name):
    compression, prefix, *_ = DATABASES[name]
    path = written / name
    marker = {"NO_COMPRESSION": b"NoCompression", "SNAPPY_COMPRESSION": b"Snappy", "LZ4_COMPRESSION": b"LZ4",
              "LZ4HC_COMPRESSION": b"LZ4HC", "ZSTD_COMPRESSION": b"ZSTD"}[compression]
    assert all(marker in (path / n).read_bytes() for n in os.listdir(path) if n.endswith(".sst"))
    with rocksdb.open_snapshot(source(path, prefix)) as db:
        levels = _levels(db.source)
        assert levels.count(0) > 4 and max(levels) > 0, levels  # overlapping L0 files over a compacted level
        merged = [v for family in db.column_families for _, v in db.items(family) if b"," in v]
        assert merged  # merge operands joined (a value holding ',' by chance is rare at these sizes)
        assert assert_same_as_rocksdict(db, prefix) > 1000
        assert_framed_as_the_reference(db, prefix)


def assert_framed_as_the_reference(db: rocksdb.RocksDBSnapshot, prefix: int) -> None:
    """The C reader's pairs framed as canonical key groups (rocksdb_native.key_group_blocks) are
    exactly what the Python encoder of the canonical layout makes of rocksdict's pairs."""
    families = [(0, "state-0"), (1, "state-1")]
    want: dict[int, dict[int, list]] = {}
    for sid, family in families:
        for key, value in db.items(family):
            want.setdefault(int.from_bytes(key[:prefix], "big"), {}).setdefault(sid, []).append((key, value))
    tables = rocksdb_native.open_tables(db)
    src = db.source
    runs = [(src.start_key_group, src.end_key_group)]
    got = {kg: bytes(data[start:end])
           for kg, data, start, end in rocksdb_native.key_group_blocks(db, tables, families, runs, prefix, "t")}
    assert got == {kg: keyed.encode_key_group(kg, pairs) for kg, pairs in want.items()}
    # in small windows and from a run's middle too
    lo, hi = src.start_key_group + 5, src.start_key_group + 40
    small = {kg: bytes(data[start:end]) for kg, data, start, end in rocksdb_native.key_group_blocks(
        db, tables, families, [(lo, hi)], prefix, "t")}
    assert small == {kg: block for kg, block in got.items() if lo <= kg <= hi}


def test_range_deletions_fall_back_to_rocksdb(written):
    with rocksdb.open_snapshot(source(written / "range-deletions", 1)) as db:
        assert rocksdb_native.open_tables(db) is None  # the C reader does not apply range tombstones
        assert sum(1 for family in db.column_families for _ in db.items(family)) > 100


def test_truncated_table_files(written, tmp_path):
    """Every table file of a database cut at random lengths and read by the C reader alone: an error
    naming the file (or a table it does not read), never other pairs."""
    from fstate.savepoint import _sst

    path = written / "zstd"
    rng = random.Random(11)
    outcomes = {"error": 0, "unsupported": 0}
    for name in sorted(n for n in os.listdir(path) if n.endswith(".sst")):
        clean = (path / name).read_bytes()
        cut = tmp_path / f"cut-{name}"
        for length in sorted({0, 1, 52, 53, len(clean) - 1} | {rng.randrange(len(clean)) for _ in range(25)}):
            cut.write_bytes(clean[:length])
            try:
                merger = _sst.Merger((_sst.Table(str(cut)),), 1)
                merger.seek(b"")
                merger.read(BIG)
            except _sst.Corrupt as e:
                assert e.args[0] == str(cut) and "\n" not in e.args[1]
                outcomes["error"] += 1
                continue
            except _sst.Unsupported:
                outcomes["unsupported"] += 1
                continue
            raise AssertionError(f"{name} cut at {length} of {len(clean)} bytes read without an error")
    assert outcomes["error"] > 100, outcomes


def test_a_truncated_table_through_the_rows_is_one_line_naming_it(written, tmp_path):
    """A table file cut after RocksDB opened the snapshot (the C reader opens it on the first read):
    the row path's entries raise a CorruptStateError naming the file."""
    from fstate.savepoint import keyed_state

    src = source(written / "snappy", 1)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, file_src in src.files:
        shutil.copyfile(file_src.path, copy / name)
    src = source(copy, 1)
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, None, [])
    with rocksdb.open_snapshot(src) as db:
        name = max((n for n, _ in src.files if n.endswith(".sst")), key=lambda n: (copy / n).stat().st_size)
        target = os.path.realpath(os.path.join(db.path, name))
        data = Path(target).read_bytes()
        Path(target).write_bytes(data[:len(data) // 2])
        state = keyed_state.KeyedState.of_rocksdb(db, meta, 128)
        with pytest.raises(CorruptStateError) as e:
            state.native_tables
        assert name in str(e.value) and "\n" not in str(e.value) and e.value.path == str(copy / name)
