"""The runtime restores keyed state and timers from RocksDB's own snapshot format (a native
checkpoint) exactly as from the canonical savepoint the same job took of the same state."""

from __future__ import annotations

import pytest

from fstate.runtime.checkpointing.restore import OperatorTarget, plan_restore
from fstate.savepoint.loader import Savepoint
from tests.support import ROOT, sample_snapshot

pytest.importorskip("rocksdict")

ROCKS = sample_snapshot(ROOT / "samples" / "keyed-rocksdb-checkpoint")
CANONICAL = sample_snapshot(ROOT / "samples" / "keyed-rocksdb-savepoint")


def _keyed_plan(path, parallelism: int):
    op = Savepoint.open(str(path)).operator("keyed")
    target = OperatorTarget(op.state.operator_id, "keyed", parallelism, op.max_parallelism, False)
    plan = plan_restore(str(path), [target], allow_non_restored_state=True)
    out = []
    for i in range(parallelism):
        keyed = plan.for_subtask(op.state.operator_id, i).keyed
        out.append((keyed.key_type, {name: values for name, (_, values) in keyed.states.items()}, keyed.timers))
    return op.keyed_layout, out


@pytest.mark.parametrize("parallelism", [2, 3])
def test_restore_plan_from_rocksdb_files_equals_the_canonical_one(parallelism):
    layout, restored = _keyed_plan(ROCKS, parallelism)
    assert layout == "RocksDB incremental/native"
    canonical_layout, expected = _keyed_plan(CANONICAL, parallelism)
    assert canonical_layout == "canonical"
    assert restored == expected
    assert sum(len(keys) for _, states, _ in restored for by_kg in states.values() for keys in by_kg.values()) > 100
    assert any(timers for _, _, timers in restored)
