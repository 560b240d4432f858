"""RocksDB incremental/native keyed state without a JVM: the shipped RocksDB native checkpoint,
entries equal to the canonical layout's, temp-dir cleanup, missing and moved shared files."""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from fstate.readers import tables
from fstate.savepoint import handles
from fstate.savepoint import streams
from fstate.savepoint import keyed
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint import rocksdb
from fstate.savepoint.errors import CorruptStateError, FStateError, MissingStateFileError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import write_metadata
from tests.oracle_compare import assert_matches_dump, load_dump
from tests.support import sample_dirs, sample_snapshot

pytest.importorskip("rocksdict")


def _sample(name):
    return next(s for s in sample_dirs() if s.name == name)


ROCKS = _sample("keyed-rocksdb-checkpoint")
CANONICAL = _sample("keyed-rocksdb-savepoint")


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    """Every temporary directory of the test goes to a directory of its own (to watch cleanup)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.name.startswith(rocksdb.TEMP_PREFIX)]


def test_sample_is_a_native_rocksdb_checkpoint():
    sp = Savepoint.open(str(sample_snapshot(ROCKS)))
    op = sp.operator("keyed")
    found_handles = op.keyed_handles()
    assert len(found_handles) == 3 and all(isinstance(h, handles.IncrementalKeyedHandle) for _, h in found_handles)
    for _, h in found_handles:
        assert not h.shared  # native (non-incremental) checkpoint: private files only
        names = {n for n, _ in h.private}
        assert "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)
        assert any(n.endswith(".sst") for n in names)
        # nothing absolute: the chk-N directory is self-contained
        assert all(isinstance(x, (handles.ByteStreamHandle, handles.RelativeFileHandle)) for _, x in h.private)
    assert [s.name for s in op.keyed_meta.states][:5] == ["total", "events", "counts", "sum", "avg"]
    descr = {d.name: d.kind for d in op.describe_states()}
    assert descr["counts"] == "MAP" and descr["_timer_state/event_user-timers"] == "TIMERS"


def test_column_families_and_cleanup(tmp_root):
    sp = Savepoint.open(str(sample_snapshot(ROCKS)))
    op = sp.operator("keyed")
    subtask, h = op.keyed_handles()[0]
    src = op.rocksdb_source(subtask, h)
    meta = rocksdb.read_meta(src)
    assert meta.header_size == len(sp.read_stream(h.metadata_state))  # the proxy and nothing else
    with rocksdb.open_snapshot(src) as db:
        assert os.path.isdir(db.path) and _leftovers(tmp_root) == [os.path.basename(db.path)]
        assert set(db.column_families) == {"default"} | {s.name for s in meta.states}
        keys = [k for k, _ in db.items("total")]
        assert keys == sorted(keys) and keys
        assert all(k[0] in range(h.start_key_group, h.end_key_group + 1) for k in keys)
        assert list(db.items("no-such-state")) == []
    assert _leftovers(tmp_root) == []
    with pytest.raises(RuntimeError, match="not open"):
        list(db.items("total"))


def _entries_by_state(meta, entries):
    out = set()
    for sid, kg, ident, key, ns, value in entries:
        out.add((meta.states[sid].name, kg, bytes(ident), repr(key), repr(ns), repr(value)))
    return out


def test_entries_equal_the_canonical_savepoint_of_the_same_state(tmp_root):
    """The RocksDB native checkpoint and the canonical RocksDB savepoint of the same job hold the
    same state: their entries decode to the same tuples (state, key group, identity, key, ns, value)."""
    for uid in ("keyed", "window-agg", "window-reduce"):
        canon = Savepoint.open(str(sample_snapshot(CANONICAL))).operator(uid)
        expected = set()
        for _, h in canon.key_group_handles():
            buf = canon.savepoint.read_stream(h.delegate)
            m = keyed.read_keyed_proxy(buf)
            expected |= _entries_by_state(m, KeyedState.of_stream(buf, h, m, canon.max_parallelism).entries())
        rocks = Savepoint.open(str(sample_snapshot(ROCKS))).operator(uid)
        actual = set()
        for subtask, h in rocks.keyed_handles():
            src = rocks.rocksdb_source(subtask, h)
            m = rocksdb.read_meta(src)
            with rocksdb.open_snapshot(src) as db:
                actual |= _entries_by_state(m, rocksdb.iter_entries(db, m, rocks.max_parallelism))
        assert actual == expected, uid
        assert len(actual) > 100
    assert _leftovers(tmp_root) == []


def test_key_group_selection_and_key_push_down(tmp_root):
    op = Savepoint.open(str(sample_snapshot(ROCKS))).operator("keyed")
    subtask, h = op.keyed_handles()[1]
    src = op.rocksdb_source(subtask, h)
    meta = rocksdb.read_meta(src)
    wanted = {h.start_key_group + 1, h.start_key_group + 5, h.start_key_group + 6, 0 if h.start_key_group else 127}
    with rocksdb.open_snapshot(src) as db:
        every = list(rocksdb.iter_entries(db, meta, op.max_parallelism))
        some = list(rocksdb.iter_entries(db, meta, op.max_parallelism, key_groups=wanted))
        total = meta.state_id("total")
        only_total = list(rocksdb.iter_entries(db, meta, op.max_parallelism, states={total}))
    assert [e[1] for e in every] == sorted(e[1] for e in every)  # ordered by key group
    assert some == [e for e in every if e[1] in wanted] and some
    assert only_total == [e for e in every if e[0] == total]
    table = tables.keyed_table(op, keys=["k-7", "k-8"])
    assert len(table.partitions) <= 2
    assert sorted(r[0] for r in table.rows()) == ["k-7", "k-8"]
    assert _leftovers(tmp_root) == []


def test_temp_dir_removed_after_failures_and_early_stops(tmp_root):
    op = Savepoint.open(str(sample_snapshot(ROCKS))).operator("keyed")
    # stopping early: the generator is closed, the database and its directory go away
    rows = tables.keyed_table(op).rows()
    next(rows)
    assert len(_leftovers(tmp_root)) == 1
    rows.close()
    assert _leftovers(tmp_root) == []
    rows = tables.timers_table(op).rows()
    next(rows)
    del rows
    gc.collect()
    assert _leftovers(tmp_root) == []
    # a decoding failure while reading
    subtask, h = op.keyed_handles()[0]
    src = op.rocksdb_source(subtask, h)
    meta = rocksdb.read_meta(src)
    codecs = keyed.state_codecs(meta, op.max_parallelism)

    def broken(kb, vb):
        raise ValueError("boom")

    codecs[0] = dataclasses.replace(codecs[0], canonical=broken)
    with pytest.raises(CorruptStateError, match="state 'total', key group .*boom"):
        with rocksdb.open_snapshot(src) as db:
            list(rocksdb.iter_entries(db, meta, op.max_parallelism, codecs=codecs))
    assert _leftovers(tmp_root) == []
    # a failure while opening: a corrupt SST
    files = tuple((n, dataclasses.replace(s, data=b"\0" * 64) if n.endswith(".sst") else s)
                  for n, s in src.files)
    with pytest.raises(CorruptStateError, match="RocksDB"):
        with rocksdb.open_snapshot(dataclasses.replace(src, files=files)) as db:
            for cf in db.column_families:
                list(db.items(cf))
    assert _leftovers(tmp_root) == []
    # no MANIFEST
    files = tuple((n, s) for n, s in src.files if not n.startswith("MANIFEST"))
    with pytest.raises(CorruptStateError, match="no MANIFEST"):
        rocksdb.open_snapshot(dataclasses.replace(src, files=files)).open()
    assert _leftovers(tmp_root) == []


def test_missing_private_file_is_named(tmp_path):
    snap = tmp_path / "chk"
    shutil.copytree(sample_snapshot(ROCKS), snap)
    sp = Savepoint.open(str(snap))
    op = sp.operator("keyed")
    _, h = op.keyed_handles()[0]
    # make one SST a relative file, then lose it
    meta = sp.metadata
    _replace_sst(meta, op.state.operator_id, lambda name, data: handles.RelativeFileHandle("gone-" + name, len(data)))
    (snap / "_metadata").write_bytes(write_metadata(meta))
    op = Savepoint.open(str(snap)).operator("keyed")
    with pytest.raises(MissingStateFileError, match=r"RocksDB file 0\d+\.sst .*does not exist") as e:
        tables.keyed_table(op)
    assert "gone-" in str(e.value)


def _replace_sst(meta, operator_id, make):
    """Replace the first SST of subtask 0 of an operator; returns (name, bytes) of that SST."""
    op = next(o for o in meta.operators if o.operator_id == operator_id)
    s = op.subtasks[0]
    h = s.managed_keyed
    i, (name, old) = next((i, f) for i, f in enumerate(h.private) if f[0].endswith(".sst"))
    private = list(h.private)
    private[i] = (name, make(name, old.data))
    op.subtasks[0] = dataclasses.replace(s, managed_keyed=dataclasses.replace(h, private=tuple(private)))
    return name, old.data


def _with_shared_file(tmp_path):
    """The sample as an incremental checkpoint would have it: one SST in <job dir>/shared/, referred
    to by an absolute path into a job directory that is gone (moved to ``tmp_path/ckpts``)."""
    snapshot, dump = load_dump(ROCKS)
    job = tmp_path / "ckpts" / "0123456789abcdef0123456789abcdef"
    chk = job / snapshot.name
    shutil.copytree(snapshot, chk)
    sp = Savepoint.open(str(chk))
    op = sp.operator("keyed")
    old_job_dir = "/gone/flink/checkpoints/0123456789abcdef0123456789abcdef"
    name, data = _replace_sst(sp.metadata, op.state.operator_id,
                              lambda n, d: handles.FileHandle(f"file:{old_job_dir}/shared/4f1c-{n}", len(d)))
    (chk / "_metadata").write_bytes(write_metadata(sp.metadata))
    (job / "shared").mkdir()
    (job / "shared" / f"4f1c-{name}").write_bytes(data)
    return job, chk, name, dump


def test_shared_file_of_a_moved_checkpoint_directory(tmp_path, tmp_root):
    """An incremental checkpoint refers to <dir>/<job>/shared/<uuid> by absolute path: when the job's
    checkpoint directory moved, the file is found beside chk-N, or under --checkpoint-base-dir."""
    job, chk, name, dump = _with_shared_file(tmp_path)

    # moved as a whole: the shared file is found beside chk-N
    assert assert_matches_dump(chk, dump) == len(dump["operators"])

    # chk-N and shared/ apart: a clear error naming the file, then the override
    elsewhere = tmp_path / "archive" / "job-copy"
    elsewhere.mkdir(parents=True)
    shutil.move(str(job / "shared"), str(elsewhere / "shared"))
    with pytest.raises(MissingStateFileError) as e:
        tables.keyed_table(Savepoint.open(str(chk)).operator("keyed"))
    msg = str(e.value)
    assert name in msg and "shared/4f1c-" in msg and "--checkpoint-base-dir" in msg
    for base in (elsewhere, str(elsewhere) + "/", f"file:{elsewhere}"):
        sp = Savepoint.open(str(chk), checkpoint_base_dir=str(base))
        rows = list(tables.keyed_table(sp.operator("keyed"), ["total"]).rows())
        assert len(rows) == len(next(e for o in dump["operators"] if o["uid"] == "keyed"
                                     for e in o["keyed_state"] if e["state"] == "total")["entries"])
    # the parent of the job directory works too (<base>/<job id>/shared/...)
    parent = tmp_path / "parent"
    shutil.move(str(elsewhere), str(parent / "0123456789abcdef0123456789abcdef"))
    sp = Savepoint.open(str(chk), checkpoint_base_dir=str(parent))
    assert list(tables.keyed_table(sp.operator("keyed"), ["total"]).rows())
    assert _leftovers(tmp_root) == []


def test_external_path_policy_for_checkpoints(tmp_path, tmp_root):
    """Files of the checkpoint's own job directory (shared/, taskowned/ beside chk-N) and under an
    explicit checkpoint_base_dir are the checkpoint's; any other absolute path is external."""
    job, chk, name, dump = _with_shared_file(tmp_path)
    assert Savepoint.open(str(chk)).allow_external_paths is False  # the default
    assert list(tables.keyed_table(Savepoint.open(str(chk)).operator("keyed"), ["total"]).rows())
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(job / "shared" / f"4f1c-{name}", outside / name)
    sp = Savepoint.open(str(chk))
    op_id = sp.operator("keyed").state.operator_id
    _replace_sst_handle(sp.metadata, op_id, name, handles.FileHandle(f"file:{outside / name}", (outside / name).stat().st_size))
    (chk / "_metadata").write_bytes(write_metadata(sp.metadata))
    with pytest.raises(FStateError, match="outside the savepoint directory"):
        tables.keyed_table(Savepoint.open(str(chk)).operator("keyed"))
    assert list(tables.keyed_table(Savepoint.open(str(chk), allow_external_paths=True).operator("keyed"), ["total"]).rows())
    assert list(tables.keyed_table(Savepoint.open(str(chk), checkpoint_base_dir=str(outside)).operator("keyed"),
                               ["total"]).rows())
    assert _leftovers(tmp_root) == []


def _replace_sst_handle(meta, operator_id, name, new):
    op = next(o for o in meta.operators if o.operator_id == operator_id)
    s = op.subtasks[0]
    h = s.managed_keyed
    private = tuple((n, new if n == name else x) for n, x in h.private)
    op.subtasks[0] = dataclasses.replace(s, managed_keyed=dataclasses.replace(h, private=private))


def test_relocation_candidates():
    p = "file:/old/ck/abc123/shared/1234-uuid"
    assert streams.relocation_candidates(p, "/new/ck/abc123/chk-7", "/base") == [
        "/base/shared/1234-uuid", "/base/abc123/shared/1234-uuid", "/new/ck/abc123/shared/1234-uuid"]
    assert streams.relocation_candidates("file:/old/ck/abc123/chk-3/file", "/new/x/chk-4") == ["/new/x/chk-3/file"]
    assert streams.relocation_candidates("file:/data/somewhere/file", "/new/x/chk-4", "/base") == []
    assert streams.relocation_candidates("s3://bucket/ck/abc/shared/x", "/new/x/chk-4", "/base") == []


def test_options_escaping_and_runs():
    assert rocksdb._escape_option("_timer_state/event_user-timers") == "_timer_state/event_user-timers"
    assert rocksdb._escape_option("a:b#c\\d\ne") == "a\\:b\\#c\\\\d\\ne"
    assert rocksdb.key_group_runs(None, 3, 9) == [(3, 9)]
    assert rocksdb.key_group_runs([1, 4, 5, 6, 9, 12], 3, 9) == [(4, 6), (9, 9)]
    assert rocksdb.key_group_runs([], 0, 5) == []


@pytest.mark.spark
def test_spark_reads_rocksdb_keyed_state(spark):
    from fstate.readers.reader import SavepointReader
    from tests.oracle_compare import norm

    r = SavepointReader(str(sample_snapshot(ROCKS)), spark)
    df = r.keyed("keyed")
    assert df.rdd.getNumPartitions() == 3  # one per subtask's RocksDB snapshot
    got = sorted((norm(list(row)) for row in df.collect()), key=repr)
    assert got == sorted((norm(list(row)) for row in tables.keyed_table(r.operator("keyed")).rows()), key=repr)
    one = r.keyed("keyed").where("key = 'k-7'")
    from fstate.readers.datasource import key_push_down_is_safe

    assert [row["key"] for row in one.collect()] == ["k-7"]
    assert (one.rdd.getNumPartitions() == 1) == key_push_down_is_safe(spark)
    assert r.timers("window-agg").count() == len(list(tables.timers_table(r.operator("window-agg")).rows()))


@pytest.mark.spark
def test_cli_checkpoint_base_dir(tmp_path, spark):
    import json

    from typer.testing import CliRunner

    from fstate.cli.app import app

    job, chk, name, _ = _with_shared_file(tmp_path)
    elsewhere = tmp_path / "moved"
    elsewhere.mkdir()
    shutil.move(str(job / "shared"), str(elsewhere / "shared"))
    runner = CliRunner()
    res = runner.invoke(app, ["read", str(chk), "--uid", "keyed", "--state", "total", "--json", "-n", "3"])
    assert res.exit_code == 2 and name in res.output and "--checkpoint-base-dir" in res.output
    res = runner.invoke(app, ["read", str(chk), "--uid", "keyed", "--state", "total", "--json", "-n", "3",
                              "--checkpoint-base-dir", str(elsewhere)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 and all(set(r) == {"key", "total"} for r in rows)
    res = runner.invoke(app, ["info", str(chk), "--json", "--checkpoint-base-dir", str(elsewhere)])
    assert res.exit_code == 0 and json.loads(res.stdout)["kind"] == "checkpoint"


def _synthetic_db(path: Path, max_parallelism: int, start: int, end: int):
    """A RocksDB database written like Flink's RocksDB backend (via the canonical pair encoder),
    with its files as a RocksDBSource: key groups [start, end] of ``max_parallelism``."""
    from fstate.savepoint.types import LONG, STRING, MapType
    from fstate.savepoint.types.hashing import key_group_for_hash
    from tests.savepoint.rocksdb_synthetic import write_database

    states = [keyed.value_state_meta("total", "VALUE", LONG),
              keyed.value_state_meta("tags", "LIST", STRING),
              keyed.value_state_meta("m", "MAP", MapType(STRING, LONG)),
              keyed.timer_state_meta("event", STRING)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    expected = {}
    for i in range(400):
        key = f"key-{i}"
        kg = key_group_for_hash(STRING.java_hash(key), max_parallelism)
        if start <= kg <= end:
            expected[key] = (kg, [i, [f"t{i}", "", "é中"], {"a": i, "nul": None}, 1000 + i])
    entries = [(key, kg, list(enumerate(values))) for key, (kg, values) in expected.items()]
    return write_database(path, meta, max_parallelism, start, end, entries), expected


def _no_rocksdict_reads(monkeypatch, db):
    """Any read of the database's pairs through rocksdict fails the test (the C table reader's path)."""
    def fail(*args, **kwargs):
        raise AssertionError("rocksdict read a RocksDB pair although the C table reader reads this snapshot")
    monkeypatch.setattr(db, "cursor", fail)
    monkeypatch.setattr(db, "items", fail)


@pytest.mark.parametrize("native", [True, False], ids=["sst-reader", "rocksdict"])
@pytest.mark.parametrize("max_parallelism,start,end", [(1024, 200, 700), (128, 0, 127)])
def test_synthetic_database_prefix_sizes(tmp_path, tmp_root, monkeypatch, max_parallelism, start, end, native):
    """Rows and timers of every key-group prefix size, on both table readers: the native one (the C table
    reader framing the pairs for the compiled scanner, never rocksdict's iterators) and rocksdict."""
    from fstate.savepoint import rocksdb_native

    if native and not rocksdb_native.available():
        pytest.skip("the C table reader is not built")
    monkeypatch.setenv(rocksdb_native.ENV, "1" if native else "0")
    src, expected = _synthetic_db(tmp_path / "db", max_parallelism, start, end)
    assert expected and (max_parallelism == 128 or max(kg for kg, _ in expected.values()) > 255)
    meta = rocksdb.read_meta(src)
    with rocksdb.open_snapshot(src) as db:
        reference = KeyedState.of_rocksdb(db, meta, max_parallelism, strict=True)  # rocksdict, Python decoders
        assert reference.native_tables is None
        want_entries, want_sized = list(reference.entries()), list(reference.sized_entries({0, 2}))
        if native:
            _no_rocksdict_reads(monkeypatch, db)
        state = KeyedState.of_rocksdb(db, meta, max_parallelism)
        assert list(state.entries()) == want_entries
        # sized entries: ordered by key group within each state (rocksdict's path: state by state)
        assert sorted(state.sized_entries({0, 2}), key=repr) == sorted(want_sized, key=repr) and want_sized
        assert state.layout == "rocksdb"
        assert (state.native_tables is not None) == native
        assert state.decoder == ("compiled" if native and state.compiled else "python")
        rows = {key: (kg, vals) for kg, key, _, vals in state.rows([0, 1, 2])}
        timers = {key: (kg, ts) for _, kind, ts, key, _, kg in state.timer_rows()}
        some = {kg for kg, _ in list(expected.values())[:3]}
        picked = {key for _, key, _, _ in KeyedState.of_rocksdb(db, meta, max_parallelism, key_groups=some).rows([0])}
    assert rows == {k: (kg, [v[0], v[1], v[2]]) for k, (kg, v) in expected.items()}
    assert timers == {k: (kg, v[3]) for k, (kg, v) in expected.items()}
    assert picked == {k for k, (kg, _) in expected.items() if kg in some}
    assert _leftovers(tmp_root) == []


def test_verify_decodes_rocksdb_snapshots():
    from fstate.savepoint.verify import verify
    from tests.support import sample_dirs, sample_snapshot

    sample = next(sample_snapshot(s) for s in sample_dirs() if s.name == "keyed-rocksdb-checkpoint")
    report = verify(str(sample))
    assert report.ok, report.to_dict()
    keyed = next(o for o in report.operators if o.operator == "keyed")
    assert any(c.startswith("RocksDB state of subtask") for c in keyed.checked)
