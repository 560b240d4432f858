"""The real-Flink oracle for RocksDB's own snapshot format: incremental checkpoints, NATIVE-format
savepoints and (in test_oracle.py) native checkpoints. Keyed state lives in SST files here; fstate
must read exactly the state the job dumped, on every supported Flink version.

The large variant (10 000 keys, parallelism 3) emits the first half of its records with no barrier
among them, waits for a checkpoint holding exactly that half, then emits the second half the same
way; RocksDB's memtables are unmanaged, so it flushes only at checkpoints. The kept ``chk-N`` of an
incremental run then reuses the SST files the checkpoint of the pause uploaded to
``<job dir>/shared/`` and adds one newer generation (cleared values and deleted timers of the second
half live in the newer files), on every machine and under any load.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile

import pytest

from fstate.readers import tables
from fstate.savepoint import handles
from fstate.savepoint.errors import MissingStateFileError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import write_metadata
from tests.flink import harness
from tests.oracle_compare import assert_matches_dump

pytestmark = pytest.mark.flink

pytest.importorskip("rocksdict")

INCREMENTAL = ("--incremental", "true")
NATIVE_SAVEPOINT = ("--savepoint-format", "native")
LARGE = ("--incremental", "true", "--records", "20000", "--keys", "10000", "--pause-at", "10000")

VARIANTS = (
    [(v, "checkpoint", INCREMENTAL) for v in harness.MATRIX_VERSIONS]
    + [(v, "savepoint", NATIVE_SAVEPOINT) for v in harness.MATRIX_VERSIONS]
    # Flink 1.15 takes a native RocksDB savepoint with the configured strategy: SST files only
    # with incremental checkpoints on (otherwise the canonical key-group layout)
    + [("1.15.4", "savepoint", NATIVE_SAVEPOINT + INCREMENTAL)]
    + [(v, "checkpoint", LARGE) for v in ("2.3.0", "1.20.1")]
)
#: the variants whose snapshot is RocksDB's own files (1.15.4's native savepoint without incremental
#: checkpoints is the canonical key-group layout)
SST_VARIANTS = [(v, s, a) for v, s, a in VARIANTS if not (v == "1.15.4" and a == NATIVE_SAVEPOINT)]


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _rocksdb_handles(sp: Savepoint) -> list[handles.IncrementalKeyedHandle]:
    return [h for op in sp.operators for _, h in op.keyed_handles() if isinstance(h, handles.IncrementalKeyedHandle)]


def _shared_paths(sp: Savepoint) -> set[str]:
    return {x.path for h in _rocksdb_handles(sp) for _, x in h.shared if isinstance(x, handles.FileHandle)}


@pytest.mark.parametrize("version,snapshot,args", VARIANTS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_fstate_reads_rocksdb_snapshots(version, snapshot, args, tmp_root):
    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", version, "rocksdb", snapshot, extra_args=args)
    sp = Savepoint.open(str(res.snapshot_dir))
    assert sp.metadata.checkpoint_id == res.dump["checkpoint_id"]
    found_handles = _rocksdb_handles(sp)
    if version == "1.15.4" and args == NATIVE_SAVEPOINT:
        assert not found_handles  # full (key-group) snapshot strategy
    else:
        assert len(found_handles) == 9  # keyed, window-reduce, window-agg × parallelism 3
        assert {h.tag for h in found_handles} == {handles.INCREMENTAL_V2}  # 1.15.4 included
    if snapshot == "savepoint":
        assert sp.metadata.format_type in ("NATIVE", None)  # V3 (Flink 1.15) does not record it
        # a native savepoint is self-contained: no absolute file anywhere
        assert not any(isinstance(x, handles.FileHandle) for h in found_handles for _, x in h.shared + h.private)
    assert assert_matches_dump(res.snapshot_dir, res.dump) == len(res.dump["operators"])
    assert list(tmp_root.iterdir()) == []  # every RocksDB temp dir is gone
    if args == LARGE:
        keyed = next(o for o in res.dump["operators"] if o["uid"] == "keyed")
        assert len({k for e in keyed["keyed_state"] for k, _ in e["entries"]}) == 10000
        # the kept chk-N reuses SST files uploaded by earlier checkpoints of the run ...
        shared = _shared_paths(sp)
        earlier = [c for c in res.snapshot_dir.parent.glob("chk-*")
                   if (c / "_metadata").exists() and int(c.name[4:]) < sp.metadata.checkpoint_id]
        assert earlier and shared
        # ... and the checkpoint of the pause (the job emits each half with no barrier inside it and
        # RocksDB flushes only at checkpoints) holds a proper subset of them: the first half's SSTs
        older = {c.name: _shared_paths(Savepoint.open(str(c))) for c in earlier}
        subsets = [name for name, paths in older.items() if paths and paths < shared]
        assert subsets, (
            f"expected an earlier checkpoint whose shared SST files are a proper, non-empty subset of "
            f"chk-{sp.metadata.checkpoint_id}'s {len(shared)}; earlier ones: "
            f"{ {name: (len(p), len(p & shared)) for name, p in older.items()} } (files, shared with chk-N)")


def test_moved_incremental_checkpoint(tmp_path, tmp_root):
    """A real incremental checkpoint whose job directory moved: the absolute shared paths in
    `_metadata` point nowhere; the files are found beside chk-N or under checkpoint_base_dir."""
    version = "2.3.0"
    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", version, "rocksdb", "checkpoint", extra_args=LARGE)
    old_job_dir = res.snapshot_dir.parent
    job = tmp_path / "moved" / old_job_dir.name
    chk = job / res.snapshot_dir.name
    shutil.copytree(res.snapshot_dir, chk)
    shutil.copytree(old_job_dir / "shared", job / "shared")
    # point every absolute path at a directory that does not exist (as after a move)
    sp = Savepoint.open(str(chk))
    gone = f"/gone-{tmp_path.name}/checkpoints/{old_job_dir.name}"

    def fix(x):
        # (the cached run itself may have moved since Flink wrote it: rewrite from "/shared/" on)
        if isinstance(x, handles.FileHandle):
            assert f"/{old_job_dir.name}/shared/" in x.path, x.path
            return dataclasses.replace(x, path="file:" + gone + x.path[x.path.rindex("/shared/"):])
        return x

    for op in sp.metadata.operators:
        for i, s in op.subtasks.items():
            h = s.managed_keyed
            if isinstance(h, handles.IncrementalKeyedHandle):
                op.subtasks[i] = dataclasses.replace(s, managed_keyed=dataclasses.replace(
                    h, metadata_state=fix(h.metadata_state), shared=tuple((n, fix(x)) for n, x in h.shared),
                    private=tuple((n, fix(x)) for n, x in h.private)))
    (chk / "_metadata").write_bytes(write_metadata(sp.metadata))
    assert _shared_paths(Savepoint.open(str(chk))) and all(
        p.startswith("file:" + gone) for p in _shared_paths(Savepoint.open(str(chk))))
    # moved as a whole: found beside chk-N
    assert assert_matches_dump(chk, res.dump)
    # chk-N alone, shared/ elsewhere: an error naming the file; then --checkpoint-base-dir
    elsewhere = tmp_path / "archive"
    shutil.move(str(job / "shared"), str(elsewhere / "shared"))
    with pytest.raises(MissingStateFileError, match=r"RocksDB file \d+\.sst .*--checkpoint-base-dir"):
        tables.keyed_table(Savepoint.open(str(chk)).operator("keyed"))
    sp = Savepoint.open(str(chk), checkpoint_base_dir=str(elsewhere))
    for uid in ("keyed", "window-agg"):
        assert list(tables.keyed_table(sp.operator(uid)).rows())
    assert list(tmp_root.iterdir()) == []


def test_native_savepoint_on_hashmap_is_heap_native():
    """--savepoint-format native on the hashmap backend: the heap's own layout (key-group handles)."""
    harness.require_flink("2.3.0")
    res = harness.generate("KeyedStateJob", "2.3.0", "hashmap", "savepoint", extra_args=NATIVE_SAVEPOINT)
    sp = Savepoint.open(str(res.snapshot_dir))
    assert sp.metadata.format_type == "NATIVE"
    kinds = {type(h).__name__ for op in sp.operators for _, h in op.keyed_handles()}
    assert kinds == {"KeyGroupsHandle"}
    assert assert_matches_dump(res.snapshot_dir, res.dump)
