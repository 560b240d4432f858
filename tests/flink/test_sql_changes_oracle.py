"""The oracle of SQL query changes (``tests/flink/sql_changes.py``, ``jobs/v2/SqlChangeJob.java``) on
real Flink, without fstate: the identity case proves the harness, and restoring the OLD savepoint
into the NEW statement set shows the problem ``fstate upgrade`` solves.

* identity: the OLD set restored from its own savepoint over the second half, its output after
  the OLD run's changelog, equals the OLD set run from scratch over all input, on every sink. The
  same with a job that starts empty instead does not (the comparison sees the state).
* the problem: Flink refuses to restore the OLD savepoint into the NEW set (unclaimed state, with
  and without uids), and the node ids of the unchanged query moved.
* templates and plans of the NEW set and the refused variants exist, with other node ids.

Per version: one JVM for every cached phase with and without uids (:func:`sql_changes.prepare`) and
one for the four restores. The materialization rules are tested without Flink at the end.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from fstate.savepoint import sql_plan
from tests.flink import sql_changes as sc

CASES = [pytest.param(version, uids, id=f"{version}-{'uids' if uids else 'no-uids'}")
         for version in sc.VERSIONS for uids in (True, False)]
flink = pytest.mark.flink


@functools.lru_cache(maxsize=None)
def _prepared(version: str, uids: bool) -> dict[str, sc.PhaseRun]:
    return sc.prepare(version)[uids]


@pytest.fixture(scope="module")
def restores():
    """(version, uids) -> the OLD savepoint restored into the OLD set and into the NEW set. The four
    restores of a version (with and without uids) run in one JVM, cached by the savepoint's bytes."""
    done: dict[tuple[str, bool], tuple[sc.PhaseRun, sc.PhaseRun]] = {}

    def get(version: str, uids: bool) -> tuple[sc.PhaseRun, sc.PhaseRun]:
        if (version, uids) not in done:
            phases = [sc.Phase("restore", sc.statement_set(name), flag,
                               savepoint=_prepared(version, flag)["old"].savepoint)
                      for flag in (True, False) for name in (sc.OLD, sc.NEW)]
            runs = sc.run_phases(version, phases)
            done[version, True], done[version, False] = (runs[0], runs[1]), (runs[2], runs[3])
        return done[version, uids]

    return get


def _stateful(run: sc.PhaseRun) -> dict[str, dict]:
    """operator id -> operator, for the job's SQL operators that keep state."""
    out = {}
    for op in run.operators:
        kind = sql_plan.sql_operator(op["name"], op["uid"])
        if kind is not None and kind.stateful and kind.kind != "sink":
            out[op["operator_id"]] = op
    return out


def _window_ends(table: sc.Table) -> set[int]:
    """The window ends (ms) of a window sink's rows (TIMESTAMP(3) as printed, e.g. 1970-01-01T00:00:05)."""
    import datetime

    epoch = datetime.datetime(1970, 1, 1)
    return {(datetime.datetime.fromisoformat(row[table.columns.index("window_end")]) - epoch) // datetime.timedelta(
        milliseconds=1) for row in table.rows}


# --------------------------------------------------------------------------- the runs


@flink
@pytest.mark.parametrize("version, uids", CASES)
def test_old_run_stops_with_open_windows_and_matches_its_plan(version, uids):
    runs = _prepared(version, uids)
    old = runs["old"]
    assert old.dump["flink_version"] == version
    assert (old.savepoint / "_metadata").is_file()
    assert set(old.changelog) == set(sc.statement_set(sc.OLD).tables)
    # some 5 s windows fired before the savepoint, later ones (with rows of the first half) stay open
    fired = _window_ends(sc.materialize(old)["win_out"])
    everything = _window_ends(sc.materialize(runs["scratch-old"])["win_out"])
    assert max(fired) <= sc.old_watermark() + 1
    assert fired and fired < {end for end in everything if end - sc.WINDOW_MS < sc.N * sc.STEP_MS}
    # uids and operator names carry the node ids of plan.json
    plan = old.plan()
    stateful = _stateful(old)
    assert len(stateful) >= 7
    for op in stateful.values():
        operator = sql_plan.sql_operator(op["name"], op["uid"])
        assert plan.nodes[operator.node_id].kind == operator.kind, op
        assert (op["uid"] is not None) == uids
        if uids:
            assert op["uid"] == plan.nodes[operator.node_id].transformation_uid
        assert (op["parallelism"], op["max_parallelism"]) == (2, 128)


@flink
@pytest.mark.parametrize("version, uids", CASES)
def test_identity_restore_equals_the_set_run_from_scratch(version, uids, restores):
    runs = _prepared(version, uids)
    identity, _ = restores(version, uids)
    assert identity.failure is None
    assert identity.savepoint == runs["old"].savepoint.resolve()
    # the restored job continues the sinks' changelogs: it retracts rows printed before the savepoint
    with pytest.raises(sc.ChangelogError, match="retractions of rows the sinks do not hold"):
        sc.materialize(identity)
    expected = sc.materialize(runs["scratch-old"])
    assert all(table.rows for table in expected.values())
    assert sc.compare(sc.materialize(runs["old"], identity), expected) == []
    # a job that starts empty over the second half gives another output: the comparison sees state
    differences = sc.compare(sc.materialize(runs["old"], runs["scratch-second-old"]), expected)
    assert {line.split(":")[0] for line in differences} == set(sc.statement_set(sc.OLD).tables)


@flink
@pytest.mark.parametrize("version, uids", CASES)
def test_restoring_the_old_savepoint_into_the_new_set_is_refused(version, uids, restores):
    runs = _prepared(version, uids)
    old, new = runs["old"], runs["template-new"]
    _, into_new = restores(version, uids)
    assert into_new.failure is not None
    with pytest.raises(sc.RestoreFailed):
        sc.materialize(runs["old"], into_new)
    match = re.search(r"Cannot map checkpoint/savepoint state for operator ([0-9a-f]{32}) to the new program, "
                      r"because the operator is not available in the new program", into_new.failure)
    assert match, into_new.failure
    old_ids, new_ids = {op["operator_id"] for op in old.operators}, {op["operator_id"] for op in new.operators}
    assert match.group(1) in set(_stateful(old)) - new_ids
    shared = set(_stateful(old)) & set(_stateful(new))
    if uids:
        # uids are "<node id>_<kind>": the NEW set's first query took node id 4, so the aggregate of
        # bucket_out has the uid (and operator id) of OLD's aggregate of agg_out
        (collision,) = shared
        assert _stateful(old)[collision]["uid"] == _stateful(new)[collision]["uid"] == "4_group-aggregate"
        assert (_sink_of(old, collision), _sink_of(new, collision)) == ("agg_out", "bucket_out")
    else:
        assert shared == set()  # hashes of the job graph: every SQL operator moved
    assert old_ids & new_ids  # the DataStream sources keep their uids
    # the unchanged query a) sits at other node ids
    old_nodes = [(n.id, n.kind) for n in sc.stateful_nodes(runs["plan-old"].plan(), "agg_out")]
    new_nodes = [(n.id, n.kind) for n in sc.stateful_nodes(runs["plan-new"].plan(), "agg_out")]
    assert [kind for _, kind in old_nodes] == [kind for _, kind in new_nodes] == ["group-aggregate"]
    assert old_nodes != new_nodes


def _sink_of(run: sc.PhaseRun, operator_id: str) -> str:
    """The sink table the stateful operator ``operator_id`` feeds (by its plan's edges)."""
    op = next(o for o in run.operators if o["operator_id"] == operator_id)
    node_id = sql_plan.sql_operator(op["name"], op["uid"]).node_id
    plan = run.plan()
    (sink,) = [s for s in plan.nodes.values() if s.kind == "sink"
               and node_id in {n.id for n in sc.sink_nodes(plan, _table(s))}]
    return _table(sink)


def _table(sink_node: sql_plan.PlanNode) -> str:
    return sink_node.spec["dynamicTableSink"]["table"]["identifier"].rsplit(".", 1)[1].strip("`")


@flink
@pytest.mark.parametrize("version, uids", CASES)
def test_templates_and_plans_of_the_new_sets(version, uids):
    runs = _prepared(version, uids)
    template = runs["template-new"]
    assert (template.savepoint / "_metadata").is_file()
    assert all(lines == [] for lines in template.changelog.values())  # no input
    old_plan = runs["plan-old"].plan()
    old_ids = {n.id: n.kind for n in old_plan.nodes.values()}
    for name in ("plan-new", *(f"plan-{r}" for r in sc.REFUSED)):
        plan = runs[name].plan()
        assert {_table(n) for n in plan.nodes.values() if n.kind == "sink"} == set(sc.statement_set(sc.NEW).tables)
        assert {n.id: n.kind for n in plan.nodes.values()} != old_ids
        assert sc.stateful_nodes(plan, "agg_out")[0].id != sc.stateful_nodes(old_plan, "agg_out")[0].id
    # the template's operators are its plan's nodes
    plan = template.plan()
    for op in _stateful(template).values():
        operator = sql_plan.sql_operator(op["name"], op["uid"])
        assert plan.nodes[operator.node_id].kind == operator.kind
    # the refused changes are in their plans
    window = {n.kind: n for n in sc.stateful_nodes(runs["plan-window-size"].plan(), "win_out")}
    assert "size=[10 s]" in window["global-window-aggregate"].description
    aggregate = sc.stateful_nodes(runs["plan-key-added"].plan(), "agg_out")[0]
    assert "groupBy=[k, name]" in aggregate.description


# --------------------------------------------------------------------------- materialize, without Flink


def _run(set_: sc.StatementSet, changelog: dict, kind: str = "scratch") -> sc.PhaseRun:
    phase = sc.Phase(kind, set_, False, savepoint=Path("/sp") if kind == "restore" else None)
    return sc.PhaseRun(phase, Path("/nowhere"), {"changelog": changelog, "failure": None}, cached=False)


OLD_SET = sc.StatementSet("o", (sc.Sink("t", (sc.Column("k", "STRING"), sc.Column("n", "BIGINT")), "SELECT ..."),
                                sc.Sink("gone", (sc.Column("x", "BIGINT"),), "SELECT ...")))
NEW_SET = sc.StatementSet("n", (sc.Sink("fresh", (sc.Column("b", "BIGINT"),), "SELECT ..."),
                                sc.Sink("t", (sc.Column("n", "BIGINT"), sc.Column("k", "STRING"),
                                              sc.Column("m", "BIGINT")), "SELECT ...")))


def test_materialize_maps_rows_by_column_name_and_applies_retractions():
    old = _run(OLD_SET, {"t": ["+I[a, 1]", "+I[b, 5]", "-U[a, 1]", "+U[a, 2]"], "gone": ["+I[7]"]}, "old")
    restored = _run(NEW_SET, {"t": ["-U[2, a, null]", "+U[3, a, 9]"], "fresh": ["+I[0]", "+I[0]"]}, "restore")
    out = sc.materialize(old, restored)
    assert list(out) == ["fresh", "t"]  # the NEW set's sinks; "gone" is dropped
    assert out["t"] == sc.Table(("n", "k", "m"), ((3, "a", 9), (5, "b", None)))
    assert out["fresh"].rows == ((0,), (0,))
    assert sc.materialize(old)["t"].rows == (("a", 2), ("b", 5))


def test_a_retraction_of_a_row_the_sink_does_not_hold_fails():
    old = _run(OLD_SET, {"t": ["+I[a, 2]"]}, "old")
    restored = _run(NEW_SET, {"t": ["-U[2, a, 4]", "+U[3, a, 9]", "-D[8, z, 1]"]}, "restore")
    with pytest.raises(sc.ChangelogError) as error:
        sc.materialize(old, restored)
    assert "2 retractions" in str(error.value) and "-U[2, a, 4]" in str(error.value) and "-D[8, z, 1]" in str(error.value)
    # with the fresh column m ignored, the retraction matches the mapped old row
    out = sc.materialize(old, _run(NEW_SET, {"t": ["-U[2, a, 4]", "+U[3, a, 9]"]}, "restore"), ignore={"t": {"m"}})
    assert out["t"] == sc.Table(("n", "k"), ((3, "a"),))


def test_a_line_that_is_not_a_row_of_its_sink_fails():
    with pytest.raises(sc.ChangelogError, match="is not a row of"):
        sc.materialize(_run(OLD_SET, {"t": ["+I[a, 1, 2]"]}))
    with pytest.raises(sc.ChangelogError, match="is not a row of"):
        sc.materialize(_run(OLD_SET, {"t": ["*I[a, 1]"]}))


def test_compare_lists_differences_outside_the_ignored_columns():
    got = {"t": sc.Table(("k", "n", "m"), (("a", 1, 5), ("b", 2, 6)))}
    expected = {"t": sc.Table(("k", "n", "m"), (("a", 1, 7), ("c", 2, 6)))}
    assert sc.compare(got, expected) == ["t: unexpected ('a', 1, 5)", "t: unexpected ('b', 2, 6)",
                                         "t: missing ('a', 1, 7)", "t: missing ('c', 2, 6)"]
    assert sc.compare(got, expected, ignore={"t": {"m"}}) == ["t: unexpected ('b', 2)", "t: missing ('c', 2)"]
    assert sc.compare(got, {"t": expected["t"], "u": expected["t"]}, ignore={"t": {"k", "m"}}) == ["u: only in expected"]
    assert sc.compare(got, {"t": sc.Table(("k", "n"), (("a", 1), ("b", 2)))}, ignore={"t": {"m"}}) == []
