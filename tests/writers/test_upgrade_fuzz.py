"""fstate upgrade on damaged input: random bytes of the old savepoint (its state lives inline in
``_metadata``) changed. Every case ends in one of two ways: an fstate error naming the problem in one
line and nothing written, or a savepoint that verifies and whose carried operators hold exactly the
entries of the damaged input under their new ids (its bytes, where a header names a serializer fstate
does not know: a damaged class name that is still a Java name reads as an unknown serializer), and whose migrated operators hold the same keys per
state: the upgrade is faithful to what it read (damage no check can see, such as a changed count, is
carried as any reader would see it). Anything else (another exception, a partial output) fails.
``--fuzz-long`` runs thousands of cases."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from fstate.savepoint.errors import FStateError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.sql_upgrade import Decision
from fstate.writers.upgrade import SavepointUpgrader

CHANGE = Path(__file__).resolve().parents[2] / "samples" / "sql-change"
CASES = 120


def _entries(view) -> dict[str, list]:
    out: dict[str, list] = {}
    meta = view.keyed_meta
    for source in view.keyed_states():
        with source.open() as state:
            for sid, _, _, key, ns, value in state.entries():
                out.setdefault(meta.states[sid].name, []).append((key, ns, repr(value)))
    return {name: sorted(rows, key=repr) for name, rows in out.items()}


def _streams(view) -> list[bytes]:
    return [view.savepoint.read_stream(h.delegate) for _, h in view.keyed_handles()]


def _keys(view) -> dict[str, set]:
    return {name: {(k, ns) for k, ns, _ in rows} for name, rows in _entries(view).items()}


def _damaged(tmp_path: Path, rng: random.Random) -> Path:
    copy = tmp_path / "old"
    shutil.copytree(CHANGE / "old", copy)
    (metadata,) = copy.rglob("_metadata")
    data = bytearray(metadata.read_bytes())
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    metadata.write_bytes(bytes(data))
    return copy


def _run_case(tmp_path: Path, seed: int) -> str:
    rng = random.Random(seed)
    case = tmp_path / str(seed)
    case.mkdir()
    old = _damaged(case, rng)
    out = case / "new"
    try:
        upgrader = SavepointUpgrader(str(old), old_plan=str(CHANGE / "old" / "plan.json"),
                                     new_plan=str(CHANGE / "new" / "plan.json"), template=str(CHANGE / "new"))
        upgrader.write(str(out), allow_empty=True, allow_drop=True)
    except FStateError as e:
        assert str(e) and "\n" not in str(e).strip(), (seed, str(e))
        assert not out.exists(), seed
        return "refused"
    written = Savepoint.open(str(out))
    for step in upgrader.report().steps:
        if step.decision not in (Decision.CARRIED, Decision.MIGRATED) or step.target is None:
            continue
        if not step.old.has_keyed_state:
            continue
        new = written.operator(step.target.operator_id.hex())
        if step.decision is Decision.CARRIED:
            try:
                before = _entries(step.old)
            except FStateError:  # a header fstate cannot read (as an unknown serializer): carried byte for byte
                assert _streams(new) == _streams(step.old), (seed, step.old_name)
                continue
            assert _entries(new) == before, (seed, step.old_name)
        else:
            before, after = _keys(step.old), _keys(new)  # the corpus reorders no key: the same keys
            assert {n: k for n, k in after.items() if n in before} == {n: before[n] for n in after if n in before}, (
                seed, step.old_name)
    return "written"


def test_damaged_old_savepoints_are_refused_or_carried_faithfully(tmp_path, request):
    cases = 3000 if request.config.getoption("--fuzz-long") else CASES
    outcomes = [_run_case(tmp_path, seed) for seed in range(cases)]
    assert outcomes.count("refused") and outcomes.count("written"), outcomes
    print(f"{outcomes.count('refused')} refused, {outcomes.count('written')} written")
    for leftover in tmp_path.glob("*/.new*"):
        pytest.fail(f"a staging directory was left behind: {leftover}")
