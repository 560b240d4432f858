"""Spark-free tables: partition planning, key-group splitting, push-down, flat mode, bad input."""

import shutil

import pytest

from tests.support import sample_dirs, sample_snapshot
from fstate.readers import tables
from fstate.savepoint import errors
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types.hashing import key_group_for_hash, key_group_range

KEYED = [s for s in sample_dirs() if s.name.startswith("keyed")]


def _keyed(sample):
    return Savepoint.open(str(sample_snapshot(sample))).operator("keyed")


@pytest.mark.parametrize("sample", KEYED, ids=lambda p: p.name)
def test_splitting_by_key_group_ranges_reads_the_same_rows(sample, monkeypatch):
    op = _keyed(sample)
    full = sorted(map(repr, tables.keyed_table(op).rows()))
    monkeypatch.setattr(tables, "SPLIT_BYTES", 1500)
    table = tables.keyed_table(op)
    from fstate.savepoint import handles
    files = [h for _, h in op.keyed_handles()
             if isinstance(h, handles.KeyGroupsHandle) and not isinstance(h.delegate, handles.ByteStreamHandle)]
    if files:
        assert len(table.partitions) > op.parallelism
    assert sorted(map(repr, table.rows())) == full
    # pieces tile each handle's key groups without overlap
    seen = []
    for p in table.partitions:
        seen.extend(range(p.key_groups[0], p.key_groups[1] + 1))
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("sample", KEYED, ids=lambda p: p.name)
def test_every_key_sits_in_its_key_group_and_subtask(sample):
    op = _keyed(sample)
    km = op.keyed_meta
    for part in tables.keyed_table(op).partitions:
        lo, hi = key_group_range(part.subtask, op.parallelism, op.max_parallelism)
        for row in tables.read_partition(part):
            kg = key_group_for_hash(km.key_type.java_hash(row[0]), op.max_parallelism)
            assert lo <= kg <= hi


def test_push_down_reads_only_the_key_group():
    op = _keyed(KEYED[0])
    table = tables.keyed_table(op, keys=["k-7", "k-8"])
    assert sorted(r[0] for r in table.rows()) == ["k-7", "k-8"]
    assert len(table.partitions) <= 2


def test_flat_list_and_map():
    op = _keyed(KEYED[0])
    nested = {r[0]: r[1] for r in tables.keyed_table(op, ["events"]).rows()}
    flat = list(tables.keyed_table(op, ["events"], flat=True).rows())
    assert len(flat) == sum(len(v) for v in nested.values() if v)
    for key, i, v in flat:
        assert nested[key][i] == v
    mflat = list(tables.keyed_table(op, ["counts"], flat=True).rows())
    mnested = {r[0]: r[1] for r in tables.keyed_table(op, ["counts"]).rows()}
    assert {(k, mk): mv for k, mk, mv in mflat} == {(k, mk): mv for k, m in mnested.items() if m for mk, mv in m.items()}


def test_unknown_keyed_state_and_operator_without_keyed_state():
    op = _keyed(KEYED[0])
    with pytest.raises(errors.UnknownStateError, match="no keyed state 'nope'.*keyed states: "):
        tables.keyed_table(op, ["nope"])
    src = op.savepoint.operator("src")
    with pytest.raises(errors.UnknownStateError, match="has no keyed state"):
        tables.keyed_table(src)


def test_corrupted_key_group_file_is_a_clear_error(tmp_path):
    sample = next(s for s in KEYED if "savepoint" in s.name)
    dst = tmp_path / "sp"
    shutil.copytree(sample_snapshot(sample), dst)
    op = Savepoint.open(str(dst)).operator("keyed")
    _, h = next((i, h) for i, h in op.key_group_handles() if h.delegate.__class__.__name__ == "RelativeFileHandle")
    f = dst / h.delegate.relative_path
    data = bytearray(f.read_bytes())
    first = min(o for o in h.offsets if o)
    for i in range(first + 2, min(len(data), first + 400)):
        data[i] ^= 0x5A  # scramble the first key group's entries
    f.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptStateError):
        list(tables.keyed_table(Savepoint.open(str(dst)).operator("keyed")).rows())
