"""The writers on damaged input: copies of the samples with random damage (bit flips, bytes set, cut
files, lost blocks, values set to extremes) in `_metadata` or a state file go through `modify` (renames,
removals, shallow and deep copies, list state split over a new parallelism, another Flink release), and
damaged data files through `bootstrap`. Every case ends in one of two ways: an fstate error of one line
with nothing written, or a savepoint that passes `fstate verify`. A write that succeeds with a
savepoint verify rejects (what Flink could not restore) fails the test, as does any other exception or
debris left behind. Hundreds of modify cases by default, thousands with ``--fuzz-long``."""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

import pytest

from fstate.savepoint.errors import FStateError
from fstate.savepoint.verify import verify
from fstate.writers.modify import SavepointModifier
from tests.savepoint.test_fuzz import SAMPLES, mutate

#: the samples damaged (canonical and heap-native keyed state, operator state, a RocksDB checkpoint)
BASES = ["keyed-hashmap-savepoint", "operator-state-hashmap-savepoint", "keyed-hashmap-checkpoint",
         "keyed-rocksdb-checkpoint", "cep-savepoint"]
MODIFY_CASES = 150
MODIFY_CASES_LONG = 5000
BOOTSTRAP_CASES = 3
BOOTSTRAP_CASES_LONG = 300


def _damage(rng: random.Random) -> tuple:
    kind = rng.choice(["flip", "flip", "truncate", "int32", "int64", "byte", "splice", "zero4k"])
    arg = {"flip": lambda: rng.randrange(8), "int32": lambda: rng.choice([-1, -(2 ** 31), 2 ** 31 - 1, 2 ** 20, 0]),
           "int64": lambda: rng.choice([-1, 2 ** 62, -(2 ** 63), 2 ** 40]), "byte": lambda: rng.randrange(256),
           "splice": lambda: rng.randint(1, 64)}.get(kind, lambda: 0)()
    return kind, rng.randrange(1 << 30), arg


def _damaged_copy(case: Path, sample: str, rng: random.Random) -> str:
    """A copy of ``sample`` at ``case`` with 1-3 pieces of damage in `_metadata` (a third of the cases) or
    in one state file; what was damaged, for the failure message."""
    shutil.copytree(SAMPLES[sample], case)
    files = sorted(p for p in case.rglob("*") if p.is_file())
    state_files = [p for p in files if p.name != "_metadata"]
    target = case / "_metadata" if not state_files or rng.random() < 0.33 else rng.choice(state_files)
    data = target.read_bytes()
    done = []
    for _ in range(rng.randint(1, 3)):
        kind, pos, arg = _damage(rng)
        pos %= max(len(data), 1)
        data = mutate(data, (kind, pos, arg))
        done.append(f"{kind}@{pos}({arg})")
    target.write_bytes(data)
    return f"{target.relative_to(case)}: {' '.join(done)}"


def _modify(base: str, rng: random.Random) -> tuple[SavepointModifier, bool, str]:
    """A modify of ``base`` that needs no Spark: (the modifier, deep, what it does)."""
    modifier = SavepointModifier(base, flink_version=rng.choice([None, None, None, "1.20", "2.0"]))
    stateful = [o for o in modifier.base.operators if o.uid and not all(s.is_empty for s in o.state.subtasks.values())]
    op = rng.choice(stateful or modifier.base.operators)
    uid = op.uid or op.uid_hash
    what = rng.choice(["rename", "remove", "copy", "split"])
    if what == "rename":
        modifier.rename_uid(uid, f"{uid}-renamed")
    elif what == "remove":
        modifier.remove_operator(uid)
    elif what == "split" and not op.has_keyed_state and op.state.subtasks:
        modifier.set_parallelism(uid, rng.randint(1, 4))
    deep = rng.random() < 0.5
    return modifier, deep, f"{what} {uid}{' deep' if deep else ''} for {modifier.metadata_version}"


def _run_modify(tmp_path: Path, seed: int) -> str:
    rng = random.Random(seed)
    sample = BASES[seed % len(BASES)]
    case = tmp_path / str(seed)
    damage = _damaged_copy(case / "base", sample, rng)
    out = case / "new"
    label = f"seed {seed}, {sample}, {damage}"
    try:
        modifier, deep, what = _modify(str(case / "base"), rng)
        label += f", {what}"
        modifier.write(str(out), deep=deep)
    except FStateError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), (label, str(e))
        assert not out.exists(), label
        outcome = "refused"
    else:
        report = verify(str(out), allow_external_paths=True)
        assert report.ok, (label, report.problems + [p for o in report.operators for p in o.problems])
        outcome = "written"
    assert sorted(p.name for p in case.iterdir()) == (["base", "new"] if outcome == "written" else ["base"]), label
    shutil.rmtree(case)
    return outcome


def test_modify_of_damaged_savepoints_refuses_or_writes_what_verifies(tmp_path, request):
    cases = MODIFY_CASES_LONG if request.config.getoption("--fuzz-long") else MODIFY_CASES
    outcomes = [_run_modify(tmp_path, seed) for seed in range(cases)]
    assert outcomes.count("refused") and outcomes.count("written"), outcomes
    print(f"modify: {outcomes.count('refused')} refused, {outcomes.count('written')} written")


# ---------------------------------------------------------------------------------------------
# bootstrap: damaged data files


SPEC = """\
operators:
  - uid: counter
    parallelism: 2
    keyed:
      source: {path: data.json}
      key: user
      key_type: STRING
      states:
        total: {type: LONG}
        names: {type: LIST<STRING>}
      event_timers: wakeup
  - uid: source
    list_state:
      - {name: offsets, type: LONG, source: {path: offsets.csv, format: csv, options: {header: true, inferSchema: true}}}
"""


def _bootstrap_inputs(directory: Path, rng: random.Random) -> str:
    """The spec and its data files in ``directory``, one data file damaged; what was damaged."""
    directory.mkdir(parents=True)
    (directory / "spec.yaml").write_text(SPEC)
    rows = [{"user": f"u{i}", "total": i * 7, "names": [f"n{i}", "x"], "wakeup": 1_700_000_000_000 + i}
            for i in range(rng.randint(1, 30))]
    (directory / "data.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (directory / "offsets.csv").write_text("value\n" + "\n".join(str(rng.randrange(1 << 40)) for _ in range(5)) + "\n")
    target = directory / rng.choice(["data.json", "offsets.csv"])
    data = target.read_bytes()
    kind, pos, arg = _damage(rng)
    if kind in ("int32", "int64"):  # text: a number's digits or a sign instead of binary values
        data = data[:pos % len(data)] + str(struct.unpack(">q", struct.pack(">q", arg))[0]).encode() + data[pos % len(data):]
    else:
        data = mutate(data, (kind, pos % len(data), arg))
    target.write_bytes(data)
    return f"{target.name}: {kind}@{pos % len(data)}({arg})"


@pytest.mark.spark
def test_bootstrap_of_damaged_data_refuses_or_writes_what_verifies(spark, tmp_path, request):
    from fstate.cli.console import error_from_spark
    from fstate.writers.bootstrap import load_spec, writer_from_spec

    cases = BOOTSTRAP_CASES_LONG if request.config.getoption("--fuzz-long") else BOOTSTRAP_CASES
    outcomes = []
    for seed in range(cases):
        rng = random.Random(seed)
        case = tmp_path / str(seed)
        damage = _bootstrap_inputs(case / "in", rng)
        out = case / "out"
        try:
            spec = str(case / "in" / "spec.yaml")
            writer_from_spec(load_spec(spec), spec, spark).write(str(out))
        except Exception as e:  # an fstate error, raised here or inside a Spark worker (as the CLI shows it)
            message = str(e) if isinstance(e, FStateError) else error_from_spark(e)
            if message is None:
                raise
            assert message.strip() and "\n" not in message.strip(), (seed, damage, message)
            assert not out.exists(), (seed, damage)
            outcomes.append("refused")
        else:
            report = verify(str(out))
            assert report.ok, (seed, damage, [p for o in report.operators for p in o.problems])
            outcomes.append("written")
        assert sorted(p.name for p in case.iterdir()) == (["in", "out"] if outcomes[-1] == "written" else ["in"])
    print(f"bootstrap: {outcomes.count('refused')} refused, {outcomes.count('written')} written")
