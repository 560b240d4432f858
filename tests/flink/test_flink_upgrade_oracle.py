"""Savepoints moved between Flink 1.20 (metadata V4) and Flink 2.3 (V6) by ``fstate modify
--flink-version``, restored by the other release's own jobs (``verify_restore``: the same
job graph and uids, unclaimed state not allowed) with exactly the state the first release dumped.

Flink 2.3.0 refuses a 1.20.1 TypesJob savepoint as it is (its POJO fields of type List and Map have
2.x's nullable serializers: writers/flink_target.py); written for 2.3 by fstate (that state
re-encoded, the rest carried) it restores. RocksDB savepoints, native and incremental checkpoints of
1.20.1 restore in 2.3.0 carried as they are, or re-encoded into key-group streams where their
serializers differ. Kryo state is carried (2.3 reads 1.20's Kryo bytes of a plain class), but an
operator that must be re-encoded cannot hold any: refused, naming the state.

The default suite runs TypesJob (every type fstate reads) in each direction; FSTATE_FLINK_ALL=1
runs every backend and snapshot kind of TypesJob, KeyedStateJob and OperatorStateJob too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from fstate.savepoint.errors import FStateWarning, InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import STRING, ListType, NullableType, PojoType
from fstate.savepoint.types.hashing import operator_id_for_uid
from fstate.writers.modify import SavepointModifier
from tests.flink import harness
from tests.flink.restore import restore_comparable, verify_refused, verify_restore

pytestmark = pytest.mark.flink

_ALL = os.environ.get("FSTATE_FLINK_ALL") == "1"
_ALL_ONLY = pytest.mark.skipif(not _ALL, reason="set FSTATE_FLINK_ALL=1 to run every variant")
NO_KRYO = ("--no-kryo",)  # heap streams cannot be parsed past Kryo bytes: fstate re-encodes no Kryo state

#: (job, backend, snapshot, extra args) of 1.20.1 that 2.3.0 restores once fstate wrote them for 2.3
UPGRADES = [
    pytest.param("TypesJob", "hashmap", "savepoint", NO_KRYO, id="TypesJob-hashmap-savepoint"),
    *(pytest.param(*v, id="-".join([v[0], v[1], v[2], *(a.lstrip("-") for a in v[3])]), marks=_ALL_ONLY) for v in [
        ("TypesJob", "rocksdb", "savepoint", NO_KRYO),
        ("TypesJob", "rocksdb", "checkpoint", NO_KRYO),  # RocksDB's native files, re-encoded
        ("KeyedStateJob", "hashmap", "savepoint", ()),
        ("KeyedStateJob", "hashmap", "checkpoint", ()),
        ("KeyedStateJob", "rocksdb", "savepoint", ()),
        ("KeyedStateJob", "rocksdb", "checkpoint", ()),  # native SST files, carried as they are
        ("KeyedStateJob", "rocksdb", "checkpoint", ("--incremental", "true")),
        ("KeyedStateJob", "rocksdb", "savepoint", ("--savepoint-format", "native")),
        ("OperatorStateJob", "hashmap", "savepoint", ()),
        ("OperatorStateJob", "rocksdb", "checkpoint", ()),
    ]),
]

#: the same the other way: 2.3.0 snapshots written for 1.20 by fstate, restored by 1.20.1
DOWNGRADES = [
    pytest.param("TypesJob", "hashmap", "savepoint", NO_KRYO, id="TypesJob-hashmap-savepoint"),
    *(pytest.param(*v, id="-".join([v[0], v[1], v[2], *(a.lstrip("-") for a in v[3])]), marks=_ALL_ONLY) for v in [
        ("TypesJob", "rocksdb", "savepoint", NO_KRYO),
        ("KeyedStateJob", "hashmap", "savepoint", ()),
        ("KeyedStateJob", "rocksdb", "savepoint", ()),
        ("OperatorStateJob", "hashmap", "savepoint", ()),
    ]),
]


def _fstate(*args: str) -> subprocess.CompletedProcess:
    """The ``fstate`` command as a user runs it (exit code, one-line errors on stderr)."""
    return subprocess.run([sys.executable, "-m", "fstate.cli.app", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


def _restored_as_dumped(job: str, res: harness.JobResult, version: str, snapshot_dir, backend: str,
                        extra: tuple[str, ...]) -> None:
    """Flink ``version`` restores ``snapshot_dir`` (fstate's: cached by its bytes) with what ``res`` held."""
    restored = verify_restore(job, version, snapshot_dir, backend=backend, extra_args=extra)
    assert restored.dump["flink_version"] == version
    assert restore_comparable(restored.dump) == restore_comparable(res.dump)


def _tags_field(sp: Savepoint) -> object:
    """The serializer of MyPojo.tags in TypesJob's keyed state v_pojo."""
    meta = sp.operator("types-string-key").keyed_meta
    pojo = meta.states[meta.state_id("v_pojo")].value_type
    assert isinstance(pojo, PojoType)
    return {name: t for name, _, t in pojo.fields}["tags"]


def test_flink_2_3_refuses_a_1_20_savepoint_as_it_is_and_restores_it_written_for_2_3(tmp_path):
    """The conversion is needed: 2.3.0 finds TypesJob's 1.20.1 POJO serializers incompatible."""
    for version in ("1.20.1", "2.3.0"):
        harness.require_flink(version)
    res = harness.generate("TypesJob", "1.20.1", "hashmap", "savepoint", extra_args=NO_KRYO)
    # (cached by the snapshot's bytes: a warm run starts no JVM for it)
    refused = verify_refused("TypesJob", "2.3.0", res.snapshot_dir, "must not be incompatible",
                                     extra_args=NO_KRYO)
    assert "StateMigrationException" in refused

    new = tmp_path / "for-2.3"
    done = _fstate("modify", str(res.snapshot_dir), "--out", str(new), "--flink-version", "2.3")
    assert done.returncode == 0, done.stderr
    sp = Savepoint.open(str(new))
    assert sp.metadata.version == 6
    assert _tags_field(Savepoint.open(str(res.snapshot_dir))) == ListType(STRING)
    assert _tags_field(sp) == NullableType(ListType(NullableType(STRING)))
    _restored_as_dumped("TypesJob", res, "2.3.0", new, "hashmap", NO_KRYO)

    # the same with fstate upgrade, which says first what happens to each operator's state
    checked = _fstate("--json", "upgrade", str(res.snapshot_dir), "--flink-version", "2.3", "--check")
    assert checked.returncode == 0, checked.stderr
    decisions = {o["old_operator_id"]: o["decision"] for o in json.loads(checked.stdout)["operators"]}
    assert decisions[operator_id_for_uid("types-string-key").hex()] == "migrated"  # 1.20 names no uid (V4)
    assert "carried" in decisions.values()
    upgraded = tmp_path / "upgraded"
    done = _fstate("upgrade", str(res.snapshot_dir), "--flink-version", "2.3", "--out", str(upgraded))
    assert done.returncode == 0, done.stderr
    assert _tags_field(Savepoint.open(str(upgraded))) == NullableType(ListType(NullableType(STRING)))
    _restored_as_dumped("TypesJob", res, "2.3.0", upgraded, "hashmap", NO_KRYO)


@pytest.mark.parametrize("job,backend,snapshot,extra", UPGRADES)
def test_flink_2_3_restores_a_1_20_snapshot_written_for_it(tmp_path, job, backend, snapshot, extra):
    for version in ("1.20.1", "2.3.0"):
        harness.require_flink(version)
    res = harness.generate(job, "1.20.1", backend, snapshot, extra_args=extra)
    new = str(tmp_path / "new")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FStateWarning)  # no Kryo state here: nothing to warn about
        SavepointModifier(str(res.snapshot_dir), flink_version="2.3").write(new)
    assert Savepoint.open(new).metadata.version == 6
    _restored_as_dumped(job, res, "2.3.0", new, backend, extra)


@pytest.mark.parametrize("job,backend,snapshot,extra", DOWNGRADES)
def test_flink_1_20_restores_a_2_3_snapshot_written_for_it(tmp_path, job, backend, snapshot, extra):
    for version in ("1.20.1", "2.3.0"):
        harness.require_flink(version)
    res = harness.generate(job, "2.3.0", backend, snapshot, extra_args=extra)
    new = str(tmp_path / "new")
    SavepointModifier(str(res.snapshot_dir), flink_version="1.20").write(new)
    assert Savepoint.open(new).metadata.version == 4
    _restored_as_dumped(job, res, "1.20.1", new, backend, extra)


def test_kryo_state_is_refused_where_its_operator_must_be_re_encoded(tmp_path):
    """TypesJob keeps a Kryo-serialized value (v_kryo) beside the POJO states that 2.3 serializes
    differently: fstate cannot decode Kryo, so it cannot write that operator's keyed state anew."""
    harness.require_flink("1.20.1")
    res = harness.generate("TypesJob", "1.20.1", "hashmap", "savepoint")
    with pytest.raises(InvalidArgumentError, match=r"its keyed state must be re-encoded for Flink 2\.x .*"
                                                   r"state 'v_kryo' holds values of Kryo<TypesJob\$Opaque>"):
        SavepointModifier(str(res.snapshot_dir), flink_version="2.3").write(str(tmp_path / "new"))
    done = _fstate("modify", str(res.snapshot_dir), "--out", str(tmp_path / "cli"), "--flink-version", "2.3")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "v_kryo" in done.stderr
    assert not (tmp_path / "new").exists() and not (tmp_path / "cli").exists()
