"""Keyed state re-encoded without Spark (writers/reencode.py): the same rows come back under another
layout (max parallelism, parallelism), with mapped values, renamed and dropped states, TTL kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import OperatorState, SubtaskState
from fstate.savepoint.types import TtlValue
from fstate.savepoint.types.hashing import key_group_for_hash, key_group_range
from fstate.savepoint.ttl_meta import with_timestamped_states
from fstate.writers.reencode import DROP, KeyedReencode, StateSource, reencode_keyed
from tests.support import sample_snapshot

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _entries(view, timestamped: bool = False) -> dict[str, list]:
    """Every entry of every keyed state: state name -> sorted (key group, key, namespace, value)."""
    out: dict[str, list] = {}
    meta = view.keyed_meta
    for source in view.keyed_states():
        with source.open(meta_of=with_timestamped_states if timestamped else None) as state:
            for sid, kg, _, key, ns, value in state.entries():
                if isinstance(value, list) and meta.states[sid].kind == "MAP":  # heap layout: all pairs at once
                    out.setdefault(meta.states[sid].name, []).extend((kg, key, ns, pair) for pair in value)
                else:
                    out.setdefault(meta.states[sid].name, []).append((kg, key, ns, value))
    return {name: sorted(rows, key=repr) for name, rows in out.items()}


def _write(tmp_path, view, plan: KeyedReencode, parallelism: int, max_parallelism: int):
    target = str(tmp_path / "out")
    builder = SavepointBuilder(target)
    try:
        keyed_handles = reencode_keyed(view, plan, parallelism=parallelism, max_parallelism=max_parallelism,
                                       directory=builder.temp_dir, inline_threshold=64)
    except BaseException:
        builder.abort()
        raise
    builder.add_operator_state(OperatorState(view.state.operator_id, parallelism, max_parallelism,
                                             {i: SubtaskState(managed_keyed=h) for i, h in keyed_handles.items()},
                                             name=view.name, uid=view.uid))
    builder.commit()
    return Savepoint.open(target).operator(view.uid_hash)


def _identity(view) -> KeyedReencode:
    return KeyedReencode(view.keyed_meta, {s.name: StateSource(s.name) for s in view.keyed_meta.states})


@pytest.mark.parametrize("sample, uid", [("sql-uids-savepoint", "4_group-aggregate"),
                                         ("sql-uids-savepoint", "24_global-window-aggregate"),
                                         ("sql-no-uids-ttl-savepoint", None),
                                         ("keyed-hashmap-savepoint", "keyed"),
                                         ("keyed-hashmap-checkpoint", "keyed"),
                                         ("keyed-rocksdb-checkpoint", "keyed")])
@pytest.mark.parametrize("parallelism, max_parallelism", [(2, 128), (3, 256)])
def test_identity_keeps_every_entry_under_any_layout(tmp_path, sample, uid, parallelism, max_parallelism):
    sp = Savepoint.open(str(sample_snapshot(SAMPLES / sample)))
    view = sp.operator(uid) if uid else next(o for o in sp.operators if o.has_keyed_state
                                             and o.keyed_meta.state_id("accState") is not None)
    new = _write(tmp_path, view, _identity(view), parallelism, max_parallelism)
    before, after = _entries(view, timestamped=True), _entries(new, timestamped=True)
    assert set(before) == set(after)
    key_type = view.keyed_meta.key_type
    for name, rows in before.items():
        regrouped = sorted(((key_group_for_hash(key_type.java_hash(k), max_parallelism), k, ns, v)
                            for _, k, ns, v in rows), key=repr)
        assert after[name] == regrouped, name
    # every key lies in the key-group range of the subtask holding it
    for index, handle in new.keyed_handles():
        assert (handle.start_key_group, handle.end_key_group) == key_group_range(index, parallelism, max_parallelism)
    assert new.parallelism == parallelism and new.max_parallelism == max_parallelism


def test_values_mapped_states_renamed_and_dropped(tmp_path):
    sp = Savepoint.open(str(sample_snapshot(SAMPLES / "sql-uids-savepoint")))
    view = sp.operator("4_group-aggregate")
    meta = view.keyed_meta
    acc = meta.states[meta.state_id("accState")]
    # a new header: accState with its first two fields swapped, the distinct map renamed, the null-state dropped
    row = acc.value_type
    swapped = type(row)((row.types[1], row.types[0], *row.types[2:]), (row.children[1], row.children[0], *row.children[2:]))
    states = [dataclasses.replace(acc, serializers={**acc.serializers, "VALUE_SERIALIZER": swapped})
              if s.name == "accState" else dataclasses.replace(s, name="distinct_names") if s.name == "distinctAcc_0"
              else s for s in meta.states if s.name != "distinctAcc_0_null_state"]
    new_meta = dataclasses.replace(meta, states=states)
    plan = KeyedReencode(new_meta, {
        "accState": StateSource("accState", lambda v: (v[1], v[0], *v[2:])),
        "distinct_names": StateSource("distinctAcc_0", lambda pair: DROP if pair[0] == "n0" else pair)})
    new = _write(tmp_path, view, plan, 2, 128)
    before, after = _entries(view), _entries(new)
    assert after["accState"] == sorted(((kg, k, ns, (v[1], v[0], *v[2:])) for kg, k, ns, v in before["accState"]),
                                       key=repr)
    assert after["distinct_names"] == [r for r in before["distinctAcc_0"] if r[3][0] != "n0"]
    assert "distinctAcc_0_null_state" not in after and after["distinct_names"]
    assert [s.name for s in new.keyed_meta.states] == [s.name for s in states]


def test_ttl_timestamps_kept(tmp_path):
    sp = Savepoint.open(str(sample_snapshot(SAMPLES / "sql-no-uids-ttl-savepoint")))
    view = next(o for o in sp.operators if o.has_keyed_state and o.keyed_meta.state_id("accState") is not None)
    new = _write(tmp_path, view, _identity(view), 2, 128)
    before = _entries(view, timestamped=True)["accState"]
    assert before and all(isinstance(v, TtlValue) for *_, v in before)
    assert _entries(new, timestamped=True)["accState"] == before


def test_a_state_of_another_kind_is_refused(tmp_path):
    sp = Savepoint.open(str(sample_snapshot(SAMPLES / "sql-uids-savepoint")))
    view = sp.operator("4_group-aggregate")
    plan = KeyedReencode(view.keyed_meta, {"accState": StateSource("distinctAcc_0")})
    with pytest.raises(InvalidArgumentError, match="state 'accState' \\(VALUE\\) cannot take the entries of state "
                                                   "'distinctAcc_0' \\(MAP\\)"):
        _write(tmp_path, view, plan, 2, 128)
    with pytest.raises(InvalidArgumentError, match="has no keyed state 'nope'"):
        _write(tmp_path, view, KeyedReencode(view.keyed_meta, {"accState": StateSource("nope")}), 2, 128)
