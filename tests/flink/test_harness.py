"""Proves the Flink oracle harness works (the reader comparisons live elsewhere).

Runs real Flink (Java) through tests.flink.harness; outputs are cached under .cache/oracle, so
only the first run pays for the JVM. Skips only when javac or the Flink jars are unavailable.

Set FSTATE_FLINK_ALL=1 to also run every job variant on every release of ``harness.RELEASES``
(downloads each release's jars once, ~250 MB each).
"""

from __future__ import annotations

import base64
import json
import struct

import pytest

from tests.flink import harness
from tests.flink.restore import restore_comparable, verify_restore

pytestmark = pytest.mark.flink

MAGIC = 0x4960672D


@pytest.fixture(scope="module")
def op_savepoint() -> harness.JobResult:
    harness.require_flink("2.3.0")
    return harness.generate("OperatorStateJob", "2.3.0", "hashmap", "savepoint")


def test_savepoint_metadata_magic(op_savepoint: harness.JobResult) -> None:
    meta = op_savepoint.metadata_path
    assert meta.is_file()
    assert meta.parent.parent.name == "savepoint"
    head = meta.read_bytes()[:8]
    magic, version = struct.unpack(">ii", head)
    assert magic == MAGIC
    assert version == 6  # Flink 2.1+ writes metadata V6


def test_dump_header(op_savepoint: harness.JobResult) -> None:
    d = op_savepoint.dump
    assert d["flink_version"] == "2.3.0"
    assert d["kind"] == "savepoint"
    assert d["backend"] == "hashmap"
    assert isinstance(d["checkpoint_id"], int) and d["checkpoint_id"] >= 1
    assert (op_savepoint.out_dir / d["snapshot_path"] / "_metadata").is_file()


def test_dump_operators(op_savepoint: harness.JobResult) -> None:
    d = op_savepoint.dump
    ops = {o["uid"]: o for o in d["operators"]}
    assert list(ops) == ["src", "lists", "single", "bcast", "big"]
    expected_p = {"src": 1, "lists": 3, "single": 1, "bcast": 2, "big": 2}
    for uid, op in ops.items():
        assert op["parallelism"] == expected_p[uid]
        assert op["max_parallelism"] == 128
        assert len(op["operator_id"]) == 32
        assert set(op) >= {"list_state", "broadcast_state", "keyed_state", "timers"}

    assert ops["src"]["list_state"] == [
        {"state": "offsets", "mode": "SPLIT_DISTRIBUTE", "subtask": 0, "values": [60]}
    ]

    lists = ops["lists"]["list_state"]
    names = {(e["state"], e["mode"]) for e in lists}
    assert names == {
        ("longs", "SPLIT_DISTRIBUTE"), ("ints", "SPLIT_DISTRIBUTE"), ("strings", "SPLIT_DISTRIBUTE"),
        ("doubles", "SPLIT_DISTRIBUTE"), ("bools", "SPLIT_DISTRIBUTE"), ("bytes", "SPLIT_DISTRIBUTE"),
        ("tuples", "SPLIT_DISTRIBUTE"), ("empty", "SPLIT_DISTRIBUTE"), ("union-marks", "UNION"),
    }
    assert len(lists) == 9 * 3  # one entry per (state, subtask)
    by = {(e["state"], e["subtask"]): e["values"] for e in lists}
    all_strings = [s for t in range(3) for s in by[("strings", t)]]
    assert "p7-\u00e9\u00df\u4e2d" in all_strings
    assert "" in all_strings
    assert any("\U0001F600" in s for s in all_strings)
    assert -9223372036854775808 in by[("longs", 0)]
    assert all(isinstance(b, bool) for t in range(3) for b in by[("bools", t)])
    for t in range(3):
        for b in by[("bytes", t)]:
            base64.b64decode(b, validate=True)
        for tup in by[("tuples", t)]:
            assert isinstance(tup, list) and len(tup) == 2
        assert by[("empty", t)] == []
    assert sorted(v for t in range(3) for v in by[("longs", t)] if 0 <= v < 10**9) == sorted(
        i * 1_000_003 - 5 for i in range(60) if i * 1_000_003 - 5 >= 0
    )

    assert [e["values"] for e in ops["single"]["list_state"]] == [[f"name-{i}" for i in range(0, 60, 10)]]

    bcast = {b["state"]: dict(map(tuple, b["entries"])) for b in ops["bcast"]["broadcast_state"]}
    assert set(bcast) == {"rules", "limits"}
    assert "" in bcast["rules"].values()
    assert any(any(ord(c) > 127 for c in v) for v in bcast["rules"].values())
    assert all(isinstance(v, int) for v in bcast["limits"].values())

    big = ops["big"]["list_state"]
    assert [(e["state"], e["subtask"], len(e["values"])) for e in big] == [("blob", 0, 2400), ("blob", 1, 2400)]
    assert all(len(s) == 20 for e in big for s in e["values"])


def test_big_state_lives_in_its_own_files(op_savepoint: harness.JobResult) -> None:
    files = [p for p in op_savepoint.snapshot_dir.iterdir() if p.name != "_metadata"]
    # one file per subtask of `big` (each > 20 KB); everything else is inlined in _metadata
    assert len(files) == 2
    assert all(p.stat().st_size > 20 * 1024 for p in files)


def test_dump_is_pure_ascii_json(op_savepoint: harness.JobResult) -> None:
    raw = op_savepoint.dump_path.read_bytes()
    raw.decode("ascii")
    assert json.loads(raw) == op_savepoint.dump


def test_second_generate_is_cached(op_savepoint: harness.JobResult) -> None:
    again = harness.generate("OperatorStateJob", "2.3.0", "hashmap", "savepoint")
    assert again.cached
    assert again.out_dir == op_savepoint.out_dir
    assert again.dump == op_savepoint.dump


def _all_variants():
    if not harness.ALL_RELEASES:
        return [pytest.param("*", "*", "*", "*", id="all-variants",
                             marks=pytest.mark.skip(reason="set FSTATE_FLINK_ALL=1 to run every job variant"))]
    return [
        (job, version, backend, snapshot)
        for version in harness.MATRIX_VERSIONS
        for job in harness.JOBS_NAMES
        for backend in ("hashmap", "rocksdb")
        for snapshot in ("savepoint", "checkpoint")
    ]


@pytest.mark.parametrize("job,version,backend,snapshot", _all_variants())
def test_every_variant_runs(job: str, version: str, backend: str, snapshot: str) -> None:
    harness.require_flink(version)
    r = harness.generate(job, version, backend, snapshot)
    magic, meta_version = struct.unpack(">ii", r.metadata_path.read_bytes()[:8])
    assert magic == MAGIC
    assert meta_version == harness.release(version).metadata_version
    assert r.dump["flink_version"] == version
    assert r.dump["kind"] == snapshot


# the jobs with a verify (--restore) mode
@pytest.mark.parametrize("job", ["OperatorStateJob", "KeyedStateJob", "TypesJob"])
def test_flink_restores_exactly_the_dump(job: str, tmp_path) -> None:
    """The mirrors are right: Flink restoring a copy of the snapshot reports the same state the
    dump describes. (Cached by snapshot content, so later runs do not start a JVM.)"""
    import shutil

    harness.require_flink("2.3.0")
    orig = harness.generate(job, "2.3.0", "hashmap", "savepoint")
    moved = tmp_path / orig.snapshot_dir.name
    shutil.copytree(orig.snapshot_dir, moved)
    restored = verify_restore(job, "2.3.0", moved, "hashmap")
    assert restored.dump["kind"] == "restored"
    assert restore_comparable(restored.dump) == restore_comparable(orig.dump)


def test_log4j_lookups_have_defaults() -> None:
    """A ``${sys:x}`` lookup without a default makes log4j create a file literally named so in the
    JVM's working directory whenever a JVM is started without ``-Dx`` (one was committed once)."""
    import re

    lookups = re.findall(r"\$\{(?:sys|env):[^}]*\}", harness.LOG4J_PROPERTIES)
    assert lookups
    assert all(":-" in lookup for lookup in lookups), lookups
