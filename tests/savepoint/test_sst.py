"""The C reader of RocksDB's table files (savepoint/_sst.c, rocksdb_native.py) against rocksdict, the
reference: databases generated with every compression, checksum and table format version RocksDB's
Flink releases write, and RocksDB 9's format 6 (puts, overwrites, deletions, several flushes and levels), every RocksDB sample
and every RocksDB snapshot of the Flink oracle (merge operands of list state, incremental
generations), and damaged table files (an error naming the file or the fallback, never other pairs)."""

from __future__ import annotations

import gc
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fstate.readers import engine, tables
from fstate.readers.planning import build_table
from fstate.savepoint import handles, rocksdb, rocksdb_native, streams
from fstate.savepoint.errors import CorruptStateError
from fstate.savepoint.loader import Savepoint
from tests.flink.test_rocksdb_oracle import SST_VARIANTS
from tests.support import sample_dirs, sample_snapshot

rocksdict = pytest.importorskip("rocksdict")
pytestmark = pytest.mark.skipif(not rocksdb_native.available(), reason="fstate.savepoint._sst is not built")

BIG = 1 << 30  # a key group past every prefix


def unpack(buf: bytes) -> list[tuple[bytes, bytes]]:
    """The pairs of a Merger.read buffer."""
    out, at = [], 0
    while at < len(buf):
        (klen,) = struct.unpack_from("=I", buf, at)
        key = buf[at + 4:at + 4 + klen]
        at += 4 + klen
        (vlen,) = struct.unpack_from("=I", buf, at)
        out.append((key, buf[at + 4:at + 4 + vlen]))
        at += 4 + vlen
    return out


def native_pairs(found: rocksdb_native.NativeTables, family: str, prefix: int, start: bytes = b"",
                 last: int = BIG) -> list[tuple[bytes, bytes]]:
    merger = found.merger(family, prefix)
    if merger is None:
        return []
    merger.seek(start)
    return unpack(merger.read(last))


def assert_same_as_rocksdict(db: rocksdb.RocksDBSnapshot, prefix: int = 1) -> int:
    """Every column family read both ways, whole and from a few key groups on; the pairs compared."""
    found = rocksdb_native.open_tables(db)
    assert found is not None, "the C reader refused the snapshot"
    compared = 0
    for family in db.column_families:
        want = list(db.items(family))
        assert native_pairs(found, family, prefix) == want, family
        compared += len(want)
        def key_group(key: bytes) -> int:
            return int.from_bytes(key[:prefix].ljust(prefix, b"\0"), "big")

        groups = sorted({key_group(key) for key, _ in want})
        for kg in groups[1::7]:
            start = rocksdb.key_group_prefix_bytes(kg, prefix)
            part = [pair for pair in want if start <= pair[0] and key_group(pair[0]) <= kg + 2]
            assert native_pairs(found, family, prefix, start, kg + 2) == part, (family, kg)
        assert_pieces(found.merger(family, prefix), want)
    return compared


def assert_pieces(merger, want: list[tuple[bytes, bytes]]) -> None:
    """A merger read in pieces (read_piece: each ends before the key the next starts at) and up to a
    stop key (read with stop, then on): the pairs of one whole read, in order."""
    if merger is None:
        return
    for budget in (1, 100, 5000):
        merger.seek(b"")
        got, cut = [], b""
        while cut is not None:
            data, cut = merger.read_piece(BIG, budget)
            pairs = unpack(data)
            assert pairs or cut is None  # a piece holds a pair, unless the read is at its end
            assert all(cut is None or key < cut for key, _ in pairs)
            assert all(key >= got[-1][0] for key, _ in pairs[:1] if got)
            got += pairs
        assert got == want, budget
    for stop in {want[len(want) // 3][0] if want else b"", want[-1][0] + b"\0" if want else b"\xff", b""}:
        merger.seek(b"")
        assert unpack(merger.read(BIG, stop)) == [pair for pair in want if pair[0] < stop]
        assert unpack(merger.read(BIG)) == [pair for pair in want if pair[0] >= stop]
    with pytest.raises(ValueError):
        merger.read_piece(BIG, 0)


# ---------------------------------------------------------------------------------------------
# generated databases


COMPRESSIONS = ["none", "snappy", "lz4", "lz4hc", "zstd"]


def _options(compression: str, checksum: str, format_version: int, index_interval: int = 1):
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_disable_auto_compactions(True)
    options.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(format_version)
    table.set_checksum_type(getattr(rocksdict.ChecksumType, checksum)())
    table.set_block_size(512)  # many data blocks
    table.set_block_restart_interval(4)
    table.set_index_block_restart_interval(index_interval)
    options.set_block_based_table_factory(table)
    return options


def _write(path: Path, options, seed: int, families: int, flushes: int, compact: bool, prefix: int) -> None:
    rng = random.Random(seed)
    db = rocksdict.Rdict(str(path), options)
    written = {f"state-{i}": set() for i in range(families)}
    for name in written:
        db.create_column_family(name, options)
    for generation in range(flushes):
        for name, keys in written.items():
            family = db.get_column_family(name)
            for _ in range(300):
                kg = rng.randrange(0, 128 if prefix == 1 else 600)
                key = rocksdb.key_group_prefix_bytes(kg, prefix) + rng.randbytes(rng.randrange(0, 12))
                if keys and rng.random() < 0.25:
                    victim = rng.choice(sorted(keys))
                    del family[victim]
                    keys.discard(victim)
                    continue
                family[key] = rng.randbytes(rng.choice((0, 1, 8, 40, 300)))
                keys.add(key)
            del family
        db.flush()
        if compact and generation == flushes // 2:
            db.compact_range(None, None)
    db.close()


def generate(path: Path, options, *, seed: int = 7, families: int = 2, flushes: int = 4,
             compact: bool = True, prefix: int = 1) -> rocksdb.RocksDBSource:
    """A database of ``families`` column families written in ``flushes`` generations (puts,
    overwrites, deletions of keys of earlier generations; empty values), the first generations
    compacted when ``compact``, closed; as the RocksDBSource of its files."""
    _write(path, options, seed, families, flushes, compact, prefix)
    gc.collect()  # rocksdict releases the database's files when its objects are gone
    files = tuple((name, streams.StreamSource(str(path / name), label=name))
                  for name in sorted(os.listdir(path))
                  if name.endswith(".sst") or name.startswith("MANIFEST-") or name == "CURRENT")
    return rocksdb.RocksDBSource(str(path), 0, 127 if prefix == 1 else 599, streams.StreamSource(None, data=b""),
                                 files)


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("checksum", ["crc32c", "xxh3"])
def test_generated_databases(tmp_path, compression, checksum):
    src = generate(tmp_path / "db", _options(compression, checksum, 5))
    with rocksdb.open_snapshot(src) as db:
        assert sum(1 for name, _ in src.files if name.endswith(".sst")) > 4  # several generations
        assert assert_same_as_rocksdict(db) > 500


@pytest.mark.parametrize("format_version", [2, 3, 4, 6])  # Flink 1.x's frocksdb: 4; 6: RocksDB 9's default
@pytest.mark.parametrize("index_interval", [1, 3])
def test_table_formats_and_index_restarts(tmp_path, format_version, index_interval):
    checksum = "xxh3" if format_version == 6 else "crc32c"
    src = generate(tmp_path / "db", _options("snappy", checksum, format_version, index_interval), seed=format_version)
    with rocksdb.open_snapshot(src) as db:
        assert assert_same_as_rocksdict(db) > 500


def test_two_byte_key_group_prefixes_and_no_compaction(tmp_path):
    src = generate(tmp_path / "db", _options("lz4", "xxh3", 5), prefix=2, compact=False, flushes=5)
    with rocksdb.open_snapshot(src) as db:
        assert assert_same_as_rocksdict(db, prefix=2) > 500


def test_only_the_tables_of_a_key_range_are_opened(tmp_path):
    path = tmp_path / "db"
    db = rocksdict.Rdict(str(path), _options("snappy", "xxh3", 5))
    for band in (0, 50, 100):  # a table each, of key groups band..band+9
        for i in range(200):
            db[bytes([band + i % 10]) + i.to_bytes(2, "big")] = bytes([i % 7]) * (i % 5)
        db.flush()
    db.close()
    del db
    gc.collect()
    files = tuple((n, streams.StreamSource(str(path / n), label=n)) for n in sorted(os.listdir(path))
                  if n.endswith(".sst") or n.startswith("MANIFEST-") or n == "CURRENT")
    src = rocksdb.RocksDBSource("bands", 0, 127, streams.StreamSource(None, data=b""), files)
    with rocksdb.open_snapshot(src) as snapshot:
        want = [pair for pair in snapshot.items("default") if 50 <= pair[0][0] < 60]
        found = rocksdb_native.open_tables(snapshot, (bytes([50]), bytes([60])))
        assert len(found.families["default"]) == 1
        assert native_pairs(found, "default", 1, bytes([50]), 59) == want and len(want) == 200
        assert len(rocksdb_native.open_tables(snapshot, (bytes([55]), None)).families["default"]) == 2
        assert len(rocksdb_native.open_tables(snapshot).families["default"]) == 3


@pytest.mark.parametrize("compression,checksum,format_version", [
    ("zlib", "crc32c", 5),   # a compression Flink does not use by default: RocksDB reads it
    ("bz2", "crc32c", 5),
    ("snappy", "xxhash", 5),  # a checksum the C reader does not compute
    ("snappy", "xxhash64", 6),
])
def test_what_the_c_reader_does_not_read_falls_back(tmp_path, compression, checksum, format_version):
    src = generate(tmp_path / "db", _options(compression, checksum, format_version), flushes=2)
    with rocksdb.open_snapshot(src) as db:
        assert rocksdb_native.open_tables(db) is None


def test_a_write_ahead_log_with_entries_falls_back(tmp_path):
    path = tmp_path / "db"
    # a process that ends without closing the database: its last write is only in the log
    script = ("import os, sys, rocksdict\n"
              "options = rocksdict.Options(raw_mode=True)\n"
              "options.create_if_missing(True)\n"
              "db = rocksdict.Rdict(sys.argv[1], options)\n"
              "db[b'\\x01a'] = b'flushed'\n"
              "db.flush()\n"
              "db[b'\\x01b'] = b'only in the log'\n"
              "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    files = tuple((n, streams.StreamSource(str(path / n), label=n)) for n in sorted(os.listdir(path))
                  if n.endswith((".sst", ".log")) or n.startswith("MANIFEST-") or n == "CURRENT")
    assert any(n.endswith(".log") and (path / n).stat().st_size for n, _ in files)
    with rocksdb.open_snapshot(rocksdb.RocksDBSource("wal", 0, 127, streams.StreamSource(None, data=b""),
                                                     files)) as snapshot:
        assert rocksdb_native.open_tables(snapshot) is None
        assert [k for k, _ in snapshot.items("default")] == [b"\x01a", b"\x01b"]


def test_forced_off(tmp_path, monkeypatch):
    src = generate(tmp_path / "db", _options("snappy", "xxh3", 5), flushes=1)
    monkeypatch.setenv(rocksdb_native.ENV, "0")
    with rocksdb.open_snapshot(src) as db:
        assert rocksdb_native.open_tables(db) is None


# ---------------------------------------------------------------------------------------------
# samples and the Flink oracle's snapshots


def _rocksdb_sources(snapshot_dir: str) -> list[tuple[rocksdb.RocksDBSource, int]]:
    sp = Savepoint.open(snapshot_dir)
    out = []
    for op in sp.operators:
        for subtask, h in op.keyed_handles():
            if isinstance(h, handles.IncrementalKeyedHandle):
                out.append((op.rocksdb_source(subtask, h), 1 if op.max_parallelism <= 128 else 2))
    return out


def _compare_snapshot(snapshot_dir: str) -> int:
    sources = _rocksdb_sources(snapshot_dir)
    assert sources
    compared = 0
    for src, prefix in sources:
        with rocksdb.open_snapshot(src) as db:
            compared += assert_same_as_rocksdict(db, prefix)
    return compared


def test_every_rocksdb_sample():
    samples = [s for s in sample_dirs() if "rocksdb" in s.name and _rocksdb_sources(str(sample_snapshot(s)))]
    assert samples
    for sample in samples:
        assert _compare_snapshot(str(sample_snapshot(sample))) > 0, sample.name


@pytest.mark.flink
@pytest.mark.parametrize("version,snapshot,args", SST_VARIANTS)
def test_every_oracle_snapshot(version, snapshot, args):
    from tests.flink import harness

    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", version, "rocksdb", snapshot, extra_args=args)
    assert _compare_snapshot(str(res.snapshot_dir)) > 0


# ---------------------------------------------------------------------------------------------
# the tables end to end, and damaged files


def test_tables_read_natively_equal_the_rows(tmp_path, monkeypatch):
    """The keyed tables of the RocksDB sample through the C reader equal rocksdict's (both engines'
    batches come from engine.partition_batches)."""
    sample = next(s for s in sample_dirs() if s.name == "keyed-rocksdb-checkpoint")
    for extra in ({}, {"state": "events"}, {"state": "counts"}):
        options = {"path": str(sample_snapshot(sample)), "uid": "keyed", **extra}
        native = engine.read_table(build_table(options))
        monkeypatch.setenv(rocksdb_native.ENV, "0")
        reference = engine.read_table(build_table(options))
        monkeypatch.delenv(rocksdb_native.ENV)
        assert native.num_rows > 0 and native.equals(reference), extra


@pytest.mark.flink
@pytest.mark.parametrize("version", ["2.3.0", "1.20.1"])
def test_oracle_tables_in_key_group_ranges(version, monkeypatch):
    """The oracle's incremental checkpoint of two generations read in small key-group ranges: the
    same tables through the C reader as through rocksdict, a subtask whole (one partition each, so no
    range logic on the reference's side); the keyed table also through rocksdict in the same ranges.
    (Each partition opens its database: rocksdict in ranges for every table doubled the test's time.)"""
    from tests.flink import harness
    from tests.flink.test_rocksdb_oracle import LARGE

    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", version, "rocksdb", "checkpoint", extra_args=LARGE)
    for extra in ({}, {"table": "timers"}, {"state": "events"}):
        options = {"path": str(res.snapshot_dir), "uid": "keyed", **extra}
        monkeypatch.setenv(rocksdb_native.ENV, "0")
        whole = build_table(options)
        assert len(whole.partitions) == 3  # a subtask each
        reference = engine.read_table(whole)
        monkeypatch.setattr(tables, "ROCKSDB_SPLIT_BYTES", 20_000)
        if not extra:
            assert engine.read_table(build_table(options)).equals(reference)  # rocksdict in ranges
        monkeypatch.delenv(rocksdb_native.ENV)
        table = build_table(options)
        assert len(table.partitions) > 6
        native = engine.read_table(table)
        monkeypatch.undo()
        assert native.num_rows > 1000 and native.equals(reference), extra


def _damaged_copy(src: rocksdb.RocksDBSource, target: Path, name: str, at: int, value: int) -> rocksdb.RocksDBSource:
    target.mkdir()
    files = []
    for file_name, file_src in src.files:
        shutil.copyfile(file_src.path, target / file_name)
        files.append((file_name, streams.StreamSource(str(target / file_name), label=file_name)))
    with open(target / name, "r+b") as f:
        f.seek(at)
        f.write(bytes([value]))
    return rocksdb.RocksDBSource(str(target), src.start_key_group, src.end_key_group, src.metadata, tuple(files))


@pytest.mark.parametrize("format_version", [5, 6])
def test_damaged_table_files_never_give_other_pairs(tmp_path, format_version):
    src = generate(tmp_path / "db", _options("snappy", "xxh3", format_version), flushes=2, families=1)
    with rocksdb.open_snapshot(src) as db:
        clean = {family: list(db.items(family)) for family in db.column_families}
    ssts = [(name, file_src) for name, file_src in src.files if name.endswith(".sst")]
    rng = random.Random(3)
    outcomes = {"error": 0, "fallback": 0, "same": 0}
    for trial in range(120):
        name, file_src = rng.choice(ssts)
        size = os.path.getsize(file_src.path)
        at = rng.randrange(size) if trial % 3 else rng.randrange(max(0, size - 60), size)  # the footer often
        original = Path(file_src.path).read_bytes()[at]
        damaged = _damaged_copy(src, tmp_path / f"trial-{trial}", name, at, original ^ (1 << rng.randrange(8)))
        try:
            with rocksdb.open_snapshot(damaged) as db:
                found = rocksdb_native.open_tables(db)
                if found is None:
                    outcomes["fallback"] += 1
                    continue
                try:
                    got = {family: native_pairs(found, family, 1) for family in db.column_families}
                except rocksdb_native.corrupt_types() as e:
                    raise found.error(e) from None
        except CorruptStateError as e:
            outcomes["error"] += 1
            assert "\n" not in str(e)
            assert e.path and (e.path.endswith(name) or "RocksDB" in str(e)), str(e)
            continue
        assert got == clean, (name, at)  # a byte no read depends on (padding, an unused property)
        outcomes["same"] += 1
        shutil.rmtree(tmp_path / f"trial-{trial}")
    assert outcomes["error"] > 60, outcomes


def test_a_damaged_table_is_one_line_naming_the_file(tmp_path):
    src = generate(tmp_path / "db", _options("snappy", "xxh3", 5), flushes=1, families=1)
    name, file_src = next((n, s) for n, s in src.files if n.endswith(".sst"))
    damaged = _damaged_copy(src, tmp_path / "damaged", name, 40, 0xFF ^ Path(file_src.path).read_bytes()[40])
    with rocksdb.open_snapshot(damaged) as db:
        found = rocksdb_native.open_tables(db)
        merger = found.merger("state-0", 1)
        with pytest.raises(rocksdb_native.corrupt_types()) as e:
            merger.seek(b"")  # reads the first data block
            merger.read(BIG)
        error = found.error(e.value)
        assert error.path == str(tmp_path / "damaged" / name)
        assert "does not match its checksum" in str(error) and "\n" not in str(error)


def test_fstate_read_of_a_damaged_table_file_is_exit_2_naming_it(tmp_path):
    from typer.testing import CliRunner

    from fstate.cli.app import app

    sample = next(s for s in sample_dirs() if s.name == "keyed-rocksdb-checkpoint")
    copy = tmp_path / "sample"
    shutil.copytree(sample, copy)
    snapshot = copy / sample_snapshot(sample).relative_to(sample)
    src, _ = _rocksdb_sources(str(snapshot))[0]
    name, table = next((name, file_src) for name, file_src in src.files if name.endswith(".sst"))
    metadata = snapshot / "_metadata"  # the sample's small files are inline in its _metadata
    data = bytearray(metadata.read_bytes())
    at = bytes(data).index(table.data) + 100  # inside the table's first data block
    data[at] ^= 0x10
    metadata.write_bytes(bytes(data))
    res = CliRunner().invoke(app, ["read", str(snapshot), "--uid", "keyed"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"RocksDB table file {name}: the data block at byte 0 does not match its checksum" \
        in lines[0] and str(metadata) in lines[0], res.stderr


@pytest.mark.parametrize("format_version,checksum", [(5, "xxh3"), (6, "xxh3"), (4, "crc32c")])
def test_the_c_reader_alone_on_damaged_files(tmp_path, format_version, checksum):
    """Each table file damaged in one bit and read by the C reader alone (no RocksDB opening it
    first): an error, or exactly the pairs of the undamaged file (a bit nothing reads: padding)."""
    from fstate.savepoint import _sst

    src = generate(tmp_path / "db", _options("snappy", checksum, format_version), flushes=2, families=1)
    rng = random.Random(format_version)
    outcomes = {"error": 0, "unsupported": 0, "same": 0}
    for name, file_src in src.files:
        if not name.endswith(".sst"):
            continue
        clean = Path(file_src.path).read_bytes()

        def pairs(path):
            merger = _sst.Merger((_sst.Table(str(path)),), 1)
            merger.seek(b"")
            return merger.read(BIG)

        want = pairs(file_src.path)
        damaged = tmp_path / f"damaged-{name}"
        for trial in range(150):
            at = rng.randrange(len(clean)) if trial % 3 else rng.randrange(len(clean) - 80, len(clean))
            data = bytearray(clean)
            data[at] ^= 1 << rng.randrange(8)
            damaged.write_bytes(bytes(data))
            try:
                got = pairs(damaged)
            except _sst.Corrupt as e:
                assert e.args[0] == str(damaged) and "\n" not in e.args[1]
                outcomes["error"] += 1
                continue
            except _sst.Unsupported:
                outcomes["unsupported"] += 1
                continue
            assert got == want, (name, at)
            outcomes["same"] += 1
    assert outcomes["error"] > 200, outcomes


def test_the_frame_of_a_short_key_names_the_state():
    from fstate.savepoint import _sst

    pairs = b"".join(len(k).to_bytes(4, "little") + k + len(v).to_bytes(4, "little") + v
                     for k, v in [(b"\x00\x01a", b"x"), (b"\x01", b"y")])
    with pytest.raises(ValueError) as e:
        _sst.frame(((3, pairs),), 2)
    assert e.value.args == (0, 256)
    with pytest.raises(ValueError):
        _sst.frame(((3, b""), (3, b"")), 1)  # state ids ascending
