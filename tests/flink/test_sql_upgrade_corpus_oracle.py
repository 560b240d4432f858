"""fstate upgrade on the corpus of SQL query changes (``tests/flink/sql_changes.py``), proven by real
Flink 2.3.0 and 1.20.1, with and without uids, and across the upgrade 1.20.1 -> 2.3.0.

The OLD statement set ran over the first half of the input and stopped with a savepoint; fstate
pairs its operators with the NEW set's (an INSERT added first, so every node id moves; a filter
changed upstream of an aggregate; a column added to a deduplication and to a join's projection;
aggregates reordered, one added and one removed; an INSERT removed) and writes the savepoint the NEW
set's template describes. The NEW set restores it (unclaimed state refused) and runs over the second
half. Its final output (the OLD run's changelog, then the restore's) equals the NEW set run from
scratch over all input, except exactly the columns the report says start fresh, and the new
operator's output is what it computes from the second half alone. The refused variants (a window
size, a GROUP BY key changed) are refused by ``--check`` with the reason.
"""

from __future__ import annotations

import functools
import json

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.sql_upgrade import Decision
from fstate.writers.upgrade import SavepointUpgrader
from tests.flink import sql_changes as sc

pytestmark = pytest.mark.flink

#: (version of the OLD run, version of the NEW job)
UPGRADES = [("2.3.0", "2.3.0"), ("1.20.1", "1.20.1"), ("1.20.1", "2.3.0")]
CASES = [pytest.param(old, new, uids, id=f"{old}-{new}-{'uids' if uids else 'no-uids'}")
         for old, new in UPGRADES for uids in (True, False)]

#: per NEW sink: the decision for its stateful operator and what the report says starts fresh
EXPECTED = {
    "bucket_out": (Decision.NEW, ()),
    "agg_out": (Decision.CARRIED, ()),
    "fagg_out": (Decision.CARRIED, ()),
    "last_out": (Decision.MIGRATED, ("input.name (null)",)),
    "join_out": (Decision.MIGRATED, ("left.v (null)",)),
    "win_out": (Decision.MIGRATED, ()),
    "agg2_out": (Decision.MIGRATED, ("MIN(ev.v) AS mn",)),
}
#: the sink columns of those fresh parts: the only ones that may differ from the run from scratch
FRESH_COLUMNS = {"join_out": {"v"}, "agg2_out": {"mn"}}


@functools.lru_cache(maxsize=None)
def _prepared(version: str) -> dict[bool, dict[str, sc.PhaseRun]]:
    return sc.prepare(version)


def _upgrader(old_version: str, new_version: str, uids: bool, new_plan: str = "template-new") -> SavepointUpgrader:
    old = _prepared(old_version)[uids]["old"]
    new = _prepared(new_version)[uids]
    template = new[new_plan].savepoint if new_plan.startswith("template") else None
    return SavepointUpgrader(str(old.savepoint), old_plan=str(old.plan_path), new_plan=str(new[new_plan].plan_path),
                             template=str(template) if template else None)


def _sink_of(step) -> str:
    shape = step.pairing.new or step.pairing.old
    (sink,) = shape.sinks
    return sink


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    """(old version, new version, uids) -> (report, the NEW set restored from fstate's savepoint).
    The restores of one NEW version run in one JVM."""
    done: dict[tuple, tuple] = {}

    def get(old_version: str, new_version: str, uids: bool):
        if (old_version, new_version, uids) not in done:
            cases = [(o, n, u) for o, n in UPGRADES if n == new_version for u in (True, False)]
            written = {}
            for case in cases:
                upgrader = _upgrader(*case)
                out = tmp_path_factory.mktemp("upgraded") / "sp"
                upgrader.write(str(out), allow_empty=True, allow_drop=True)
                written[case] = (upgrader.report(), out)
            phases = [sc.Phase("restore", sc.statement_set(sc.NEW), u, savepoint=written[(o, n, u)][1])
                      for o, n, u in cases]
            runs = sc.run_phases(new_version, phases)
            for case, run in zip(cases, runs):
                done[case] = (written[case][0], run)
        return done[old_version, new_version, uids]

    return get


@pytest.mark.parametrize("old_version, new_version, uids", CASES)
def test_report_pairs_every_query_by_its_state(old_version, new_version, uids):
    report = _upgrader(old_version, new_version, uids).report()
    sql = {}
    for step in report.steps:
        if step.sql:
            sql.setdefault(_sink_of(step), []).append(step)
    dropped = sql.pop("first_out")
    assert [s.decision for s in dropped] == [Decision.DROPPED]
    assert {sink: [(s.decision, s.fresh) for s in steps] for sink, steps in sql.items()} == {
        sink: [expected] for sink, expected in EXPECTED.items()}
    (agg2,) = sql["agg2_out"]
    assert agg2.lost == ("SUM(ev.v) AS total",)
    (fagg,) = sql["fagg_out"]
    assert "the filters upstream changed" in fagg.reason
    assert report.exit_code == 1
    # the new operator ids are the NEW job's (its template's)
    template = Savepoint.open(str(_prepared(new_version)[uids]["template-new"].savepoint))
    assert {s.target.operator_id.hex() for s in report.steps if s.target is not None} <= {
        o.uid_hash for o in template.operators}


@pytest.mark.parametrize("old_version, new_version, uids", CASES)
def test_new_query_continues_from_the_old_state(restored, old_version, new_version, uids):
    report, run = restored(old_version, new_version, uids)
    assert run.failure is None, run.failure
    old = _prepared(old_version)[uids]["old"]
    new = _prepared(new_version)[uids]
    got = sc.materialize(old, run)
    expected = sc.materialize(new["scratch-new"])
    fresh_new = {"bucket_out"}  # starts empty: what the second half alone gives
    assert sc.compare({t: v for t, v in got.items() if t not in fresh_new},
                      {t: v for t, v in expected.items() if t not in fresh_new}, ignore=FRESH_COLUMNS) == []
    second = sc.materialize(new["scratch-second-new"])
    assert sc.compare({"bucket_out": got["bucket_out"]}, {"bucket_out": second["bucket_out"]}) == []
    # the fresh columns really differ somewhere (the comparison above leaves out no more than it must)
    differing = sc.compare(got, expected)
    assert {line.split(":")[0] for line in differing} == {"bucket_out", *FRESH_COLUMNS}


@pytest.mark.parametrize("variant, reason", [("window-size", "the window changed from TUMBLE size_ms=5000 to "
                                                              "TUMBLE size_ms=10000"),
                                             ("key-added", "the key changed from (k) to (k, name)")])
@pytest.mark.parametrize("version", sc.VERSIONS)
def test_refused_changes(version, variant, reason):
    old = _prepared(version)[True]["old"]
    result = CliRunner().invoke(app, ["--json", "upgrade", str(old.savepoint), "--old-plan", str(old.plan_path),
                                      "--new-plan", str(_prepared(version)[True][f"plan-{variant}"].plan_path),
                                      "--check"])
    assert result.exit_code == 2, result.output
    refused = [o for o in json.loads(result.stdout)["operators"] if o["decision"] == "incompatible"]
    assert [o["reason"] for o in refused] == [reason]
