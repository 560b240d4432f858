"""Modify: derived savepoints read back as intended; BASE is byte-identical afterwards; failures leave nothing."""

import hashlib
import os
import shutil

import pytest

from fstate.readers import tables as TB
from fstate.savepoint import errors as E
from fstate.savepoint import handles as H
from fstate.savepoint.loader import Savepoint
from fstate.writers.modify import SavepointModifier, dependencies, relocate
from tests.support import sample_dirs, sample_snapshot

BASE = next(sample_snapshot(s) for s in sample_dirs() if s.name == "keyed-hashmap-savepoint")
OPS = next(sample_snapshot(s) for s in sample_dirs() if s.name == "operator-state-hashmap-savepoint")


def _digest(d):
    return {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in sorted(os.listdir(d))}


@pytest.fixture
def base(tmp_path):
    """A private copy of the sample, hashed before and checked after every test."""
    b = tmp_path / "base"
    shutil.copytree(BASE, b)
    before = _digest(b)
    yield b
    assert _digest(b) == before, "BASE was modified"


def _open(path):
    # shallow copies point into BASE: reading them needs external paths allowed
    return Savepoint.open(str(path), allow_external_paths=True)


def _keyed(path, uid, states=None):
    return {r[0]: tuple(r[1:]) for r in TB.keyed_table(_open(path).operator(uid), states).rows()}


def test_shallow_copy_remove_rename(base, tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(base)).remove_operator("window-agg").rename_uid("keyed", "keyed-v2").write(str(out))
    sp = _open(out)
    uids = {o.uid for o in sp.operators}
    assert "window-agg" not in uids and "keyed-v2" in uids and "keyed" not in uids
    assert _keyed(out, "keyed-v2") == _keyed(base, "keyed")
    # the keyed files stay in BASE: absolute handles into it
    handles = [h for _, h in sp.operator("keyed-v2").keyed_handles()]
    assert handles and all(isinstance(h.delegate, (H.FileHandle, H.ByteStreamHandle)) for h in handles)
    assert os.listdir(out) == ["_metadata"]
    assert list(dependencies(str(out))) == [os.path.realpath(base)]


def test_deep_copy_is_self_contained(base, tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(base)).write(str(out), deep=True)
    assert dependencies(str(out)) == {}
    expected = _keyed(base, "keyed")
    moved = tmp_path / "moved"
    shutil.move(str(out), str(moved))
    assert _keyed(moved, "keyed") == expected


@pytest.mark.spark
def test_max_parallelism_rekeys_every_key(base, tmp_path, spark):
    out = tmp_path / "new"
    m = SavepointModifier(str(base), spark)
    m.set_max_parallelism("keyed", 256)
    m.write(str(out))
    op = _open(out).operator("keyed")
    assert op.max_parallelism == 256
    assert _keyed(out, "keyed") == _keyed(base, "keyed")
    timers = lambda p: sorted(TB.timers_table(_open(p).operator("keyed")).rows())  # noqa: E731
    assert timers(out) == timers(base)
    # 2-byte key-group prefixes now: every key sits in its new key group
    from fstate.savepoint.types.hashing import key_group_for_hash
    for part in TB.keyed_table(op).partitions:
        for row in TB.read_partition(part):
            kg = key_group_for_hash(op.keyed_meta.key_type.java_hash(row[0]), 256)
            assert part.key_groups[0] <= kg <= part.key_groups[1]


@pytest.mark.spark
def test_transform_state_with_sql(base, tmp_path, spark):
    out = tmp_path / "new"
    m = SavepointModifier(str(base), spark)
    m.transform_state("keyed", "total", sql="SELECT key, CASE WHEN total > 1500 THEN NULL ELSE total * 10 END AS total FROM state")
    m.write(str(out))
    old, new = _keyed(base, "keyed"), _keyed(out, "keyed")
    for k, row in old.items():
        t = row[0]
        assert new[k][0] == (None if t is None or t > 1500 else t * 10)
        assert new[k][1:] == row[1:]
    timers = lambda p: sorted(TB.timers_table(_open(p).operator("keyed")).rows())  # noqa: E731
    assert timers(out) == timers(base)


def test_split_and_merge_list_state(tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(OPS)).set_parallelism("lists", 5).write(str(out))
    old = Savepoint.open(str(OPS)).operator("lists")
    new = _open(out).operator("lists")
    assert new.parallelism == 5
    for state in ("longs", "tuples", "union-marks"):
        a = [v for _, _, v in sorted(old.list_state(state))]
        b = [v for _, _, v in sorted(new.list_state(state))]
        assert a == b
    assert {s for s, _, _ in new.list_state("longs")} == set(range(5))


def test_failure_leaves_nothing(base, tmp_path):
    out = tmp_path / "new"
    m = SavepointModifier(str(base)).rename_uid("keyed", "src")  # collides with the existing uid 'src'
    with pytest.raises(E.InvalidArgumentError, match="would appear twice"):
        m.write(str(out))
    assert sorted(os.listdir(tmp_path)) == ["base"]
    with pytest.raises(E.UnknownOperatorError):
        SavepointModifier(str(base)).remove_operator("nope")


def test_external_paths_need_permission(base, tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(base)).write(str(out))
    with pytest.raises(E.ExternalPathError, match="outside the savepoint directory"):
        list(TB.keyed_table(Savepoint.open(str(out)).operator("keyed")).rows())
    from fstate.savepoint.verify import verify
    report = verify(str(out))
    assert not report.ok and report.external
    assert verify(str(out), allow_external_paths=True).ok


def test_relocate_after_moving_the_base(base, tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(base)).write(str(out))
    expected = _keyed(out, "keyed")
    moved = tmp_path / "base-moved"
    shutil.copytree(base, moved)
    shutil.rmtree(base)
    with pytest.raises(E.MissingStateFileError):
        _keyed(out, "keyed")
    n = relocate(str(out), str(base), str(moved))
    assert n >= 1
    assert _keyed(out, "keyed") == expected
    assert (out / "_metadata.before-relocate").exists()
    shutil.copytree(moved, base)  # let the fixture check BASE's bytes
