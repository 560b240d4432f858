"""Modify on RocksDB's own snapshot format (a native checkpoint: SST files, MANIFEST, CURRENT):
transform, rename and re-keying read the state through the keyed-state seam and write canonical
key-group streams that fstate reads back with the intended values; untouched operators stay
RocksDB snapshots; BASE is byte-identical afterwards."""

import hashlib
import os
import shutil

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import tables
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types.hashing import key_group_for_hash
from fstate.savepoint.verify import verify
from fstate.writers.modify import SavepointModifier
from tests.support import ROOT, sample_snapshot

pytest.importorskip("rocksdict")

pytestmark = pytest.mark.spark

ROCKS = sample_snapshot(ROOT / "samples" / "keyed-rocksdb-checkpoint")
ROCKSDB_LAYOUT = "RocksDB incremental/native"
KEYED_OPERATORS = ("keyed", "window-agg", "window-reduce")


def _digest(d):
    return {os.path.relpath(os.path.join(r, f), d): hashlib.sha256(open(os.path.join(r, f), "rb").read()).hexdigest()
            for r, _, files in os.walk(d) for f in files}


@pytest.fixture
def base(tmp_path):
    """A private copy of the checkpoint, hashed before and checked after every test."""
    b = tmp_path / "chk-2"
    shutil.copytree(ROCKS, b)
    before = _digest(b)
    yield b
    assert _digest(b) == before, "BASE was modified"


def _open(path):
    return Savepoint.open(str(path), allow_external_paths=True)  # shallow copies point into BASE


def _keyed(path, uid):
    return sorted(tables.keyed_table(_open(path).operator(uid)).rows(), key=repr)


def _timers(path, uid):
    return sorted(tables.timers_table(_open(path).operator(uid)).rows(), key=repr)


def test_cli_rename_and_transform(base, tmp_path, spark):
    assert _open(base).operator("keyed").keyed_layout == ROCKSDB_LAYOUT
    out = tmp_path / "new"
    res = CliRunner().invoke(app, ["modify", str(base), "--out", str(out), "--rename", "keyed=keyed-v2",
                                   "--transform", "keyed-v2:total=SELECT key, total * 10 AS total FROM state",
                                   "--master", "local[2]"])
    assert res.exit_code == 0, res.output
    sp = _open(out)
    assert "keyed" not in {o.uid for o in sp.operators}
    assert sp.operator("keyed-v2").keyed_layout == "canonical"
    old = {r[0]: r[1:] for r in _keyed(base, "keyed")}
    new = {r[0]: r[1:] for r in _keyed(out, "keyed-v2")}
    assert new == {k: ((None if row[0] is None else row[0] * 10),) + row[1:] for k, row in old.items()}
    assert any(row[0] is not None for row in old.values())
    assert _timers(out, "keyed-v2") == _timers(base, "keyed")
    for uid in ("window-agg", "window-reduce"):  # untouched: still the RocksDB files of BASE
        assert sp.operator(uid).keyed_layout == ROCKSDB_LAYOUT
        assert _keyed(out, uid) == _keyed(base, uid)
    assert verify(str(out), allow_external_paths=True).ok


def test_max_parallelism_rekeys_every_rocksdb_operator(base, tmp_path, spark):
    """Re-keying reads each subtask's RocksDB database through the seam (on the Spark executors)."""
    out = tmp_path / "new"
    SavepointModifier(str(base), spark).set_max_parallelism_of_all(256).rename_uid("keyed", "keyed-v2") \
        .write(str(out))
    report = verify(str(out), allow_external_paths=True)
    assert report.ok, report.to_dict()
    for uid in KEYED_OPERATORS:
        new_uid = "keyed-v2" if uid == "keyed" else uid
        op = _open(out).operator(new_uid)
        assert (op.max_parallelism, op.keyed_layout) == (256, "canonical")
        assert _keyed(out, new_uid) == _keyed(base, uid)
        assert _timers(out, new_uid) == _timers(base, uid)
        for part in tables.keyed_table(op).partitions:
            for row in tables.read_partition(part):
                kg = key_group_for_hash(op.keyed_meta.key_type.java_hash(row[0]), 256)
                assert part.key_groups[0] <= kg <= part.key_groups[1]
