"""Modify: derived savepoints read back as intended; BASE is byte-identical afterwards; failures leave nothing."""

import hashlib
import os
import shutil

import pytest

from fstate.readers import tables
from fstate.savepoint import errors
from fstate.savepoint import handles
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
    return {r[0]: tuple(r[1:]) for r in tables.keyed_table(_open(path).operator(uid), states).rows()}


def test_shallow_copy_remove_rename(base, tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(base)).remove_operator("window-agg").rename_uid("keyed", "keyed-v2").write(str(out))
    sp = _open(out)
    uids = {o.uid for o in sp.operators}
    assert "window-agg" not in uids and "keyed-v2" in uids and "keyed" not in uids
    assert _keyed(out, "keyed-v2") == _keyed(base, "keyed")
    # the keyed files stay in BASE: absolute handles into it
    found_handles = [h for _, h in sp.operator("keyed-v2").keyed_handles()]
    assert found_handles and all(isinstance(h.delegate, (handles.FileHandle, handles.ByteStreamHandle)) for h in found_handles)
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
    timers = lambda p: sorted(tables.timers_table(_open(p).operator("keyed")).rows())  # noqa: E731
    assert timers(out) == timers(base)
    # 2-byte key-group prefixes now: every key sits in its new key group
    from fstate.savepoint.types.hashing import key_group_for_hash
    for part in tables.keyed_table(op).partitions:
        for row in tables.read_partition(part):
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
    timers = lambda p: sorted(tables.timers_table(_open(p).operator("keyed")).rows())  # noqa: E731
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
    with pytest.raises(errors.InvalidArgumentError, match="would appear twice"):
        m.write(str(out))
    assert sorted(os.listdir(tmp_path)) == ["base"]
    with pytest.raises(errors.UnknownOperatorError):
        SavepointModifier(str(base)).remove_operator("nope")


def test_external_paths_need_permission(base, tmp_path):
    out = tmp_path / "new"
    SavepointModifier(str(base)).write(str(out))
    with pytest.raises(errors.ExternalPathError, match="outside the savepoint directory"):
        list(tables.keyed_table(Savepoint.open(str(out)).operator("keyed")).rows())
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
    with pytest.raises(errors.MissingStateFileError):
        _keyed(out, "keyed")
    # NEW refers to BASE's files, outside NEW: relocating them there needs the permission
    with pytest.raises(errors.ExternalPathError, match="--allow-external-paths"):
        relocate(str(out), str(base), str(moved))
    assert not (out / "_metadata.before-relocate").exists()
    n = relocate(str(out), str(base), str(moved), allow_external_paths=True)
    assert n >= 1
    assert _keyed(out, "keyed") == expected
    assert (out / "_metadata.before-relocate").exists()
    shutil.copytree(moved, base)  # let the fixture check BASE's bytes


# ---------------------------------------------------------------------------------------------
# operations in combination: each one names the operator as the ones before it left it


def _timers(path, uid):
    return sorted(tables.timers_table(_open(path).operator(uid)).rows())


@pytest.mark.spark
def test_rename_then_max_parallelism(base, tmp_path, spark):
    out = tmp_path / "new"
    SavepointModifier(str(base), spark).rename_uid("keyed", "keyed-v2").set_max_parallelism("keyed-v2", 256) \
        .write(str(out))
    sp = _open(out)
    assert "keyed" not in {o.uid for o in sp.operators}
    assert sp.operator("keyed-v2").max_parallelism == 256
    assert _keyed(out, "keyed-v2") == _keyed(base, "keyed")
    assert _timers(out, "keyed-v2") == _timers(base, "keyed")


@pytest.mark.spark
def test_rename_then_transform(base, tmp_path, spark):
    out = tmp_path / "new"
    m = SavepointModifier(str(base), spark).rename_uid("keyed", "keyed-v2")
    m.transform_state("keyed-v2", "total", sql="SELECT key, total + 1 AS total FROM state")
    m.write(str(out))
    sp = _open(out)
    assert "keyed" not in {o.uid for o in sp.operators}
    assert sp.operator("keyed-v2").max_parallelism == _open(base).operator("keyed").max_parallelism
    old, new = _keyed(base, "keyed"), _keyed(out, "keyed-v2")
    assert new == {k: ((None if row[0] is None else row[0] + 1),) + row[1:] for k, row in old.items()}
    assert _timers(out, "keyed-v2") == _timers(base, "keyed")


@pytest.mark.spark
def test_rename_rescale_transform_in_any_order(base, tmp_path, spark):
    old = _keyed(base, "keyed")
    expected = {k: ((None if row[0] is None else row[0] * 2),) + row[1:] for k, row in old.items()}
    sql = "SELECT key, total * 2 AS total FROM state"
    # transform before the rename, max parallelism after it: one operator, all three applied
    out = tmp_path / "new"
    m = SavepointModifier(str(base), spark)
    m.transform_state("keyed", "total", sql=sql).rename_uid("keyed", "keyed-v2").set_max_parallelism("keyed-v2", 256, 2)
    m.write(str(out))
    op = _open(out).operator("keyed-v2")
    assert (op.max_parallelism, op.parallelism) == (256, 2)
    assert "keyed" not in {o.uid for o in _open(out).operators}
    assert _keyed(out, "keyed-v2") == expected
    assert _timers(out, "keyed-v2") == _timers(base, "keyed")
    from fstate.savepoint.types.hashing import key_group_for_hash
    for part in tables.keyed_table(op).partitions:
        for row in tables.read_partition(part):
            kg = key_group_for_hash(op.keyed_meta.key_type.java_hash(row[0]), 256)
            assert part.key_groups[0] <= kg <= part.key_groups[1]


def test_conflicts_are_reported_before_anything_is_written(base, tmp_path):
    out = tmp_path / "new"
    # two renames to one uid: both origins named, one error, nothing written
    m = SavepointModifier(str(base)).rename_uid("keyed", "merged").rename_uid("window-agg", "merged")
    with pytest.raises(errors.ModifyConflictError, match="would appear twice") as info:
        m.write(str(out))
    assert "rename keyed → merged" in str(info.value) and "rename window-agg → merged" in str(info.value)
    # ... and every conflict in that one error
    m.rename_uid("src", "other").rename_uid("window-reduce", "other")
    with pytest.raises(errors.ModifyConflictError, match="conflicting operations") as info:
        m.plan()
    assert "merged" in str(info.value) and "other" in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["base"]
    # an operation on an operator an earlier one removed or renamed away fails at once
    m = SavepointModifier(str(base)).remove_operator("window-agg")
    with pytest.raises(errors.ModifyConflictError, match="window-agg.*was removed by remove window-agg"):
        m.rename_uid("window-agg", "x")
    m = SavepointModifier(str(base)).rename_uid("keyed", "keyed-v2")
    with pytest.raises(errors.ModifyConflictError, match="renamed by rename keyed → keyed-v2"):
        m.set_max_parallelism("keyed", 256)
    # a uid that is two operators after a colliding rename is ambiguous
    m = SavepointModifier(str(base)).rename_uid("keyed", "src")
    with pytest.raises(errors.ModifyConflictError, match="ambiguous"):
        m.remove_operator("src")
    with pytest.raises(errors.UnknownOperatorError):
        SavepointModifier(str(base)).rename_uid("nope", "x")
    # a rename back to a name that was renamed away is fine, and so is a chain of renames
    m = SavepointModifier(str(base)).rename_uid("keyed", "a").rename_uid("a", "b").rename_uid("window-agg", "keyed")
    assert {"b", "keyed"} <= {o.uid for o in m.plan().operators}


def test_list_state_is_split_as_flink_splits_it():
    from fstate.savepoint.operator import java_hash_map_order, split_list_state, split_list_states

    # the remainder goes to the first subtasks: 5 over 3 is [2, 2, 1]
    assert split_list_state([1, 2, 3, 4, 5], 3) == [[1, 2], [3, 4], [5]]
    assert split_list_state([1, 2, 3, 4, 5], 3, start=1) == [[5], [1, 2], [3, 4]]
    assert split_list_state([], 2) == [[], []]
    # the next state starts where the last extra element went
    names = java_hash_map_order(["b", "a"])
    assert names == ["a", "b"]  # "a" and "b" hash to buckets 1 and 2
    parts = split_list_states({"b": [10, 11, 12], "a": [1, 2, 3, 4, 5]}, 3)
    assert parts["a"] == [[1, 2], [3, 4], [5]]
    assert parts["b"] == [[11], [12], [10]]
