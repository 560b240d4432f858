"""The CLI end to end on real savepoints of Flink SQL and CEP jobs (issue 14): ``info`` (with and without
``--plan``), ``views``, ``verify``, ``read`` with plan names, ``sql`` over the views and ``diff`` against a
``modify --transform``ed copy, on SqlJob (uids on; uids off with state TTL) and CepJob savepoints of
Flink 2.3, 2.0 and 1.20.

The savepoints are the cached generations of tests/flink (harness.generate); the values are checked
against the jobs' own dumps. The commands that start Spark run on 2.3 (and ``read`` on 1.20, whose
metadata V4 names nothing: the plan names its operators by the uid hashes of their generated uids).
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers.views import view_name
from tests.flink import harness

pytestmark = pytest.mark.flink

VERSIONS = list(harness.INTERNAL_STATE_VERSIONS)
SQL_VARIANTS = {"sql-uids": ("--uids", "true"), "sql-no-uids-ttl": ("--uids", "false", "--ttl", "1h")}
#: the kind of each stateful operator in SqlJob's dump -> the SQL kind fstate shows
SQL_KINDS = {"group-aggregate": "group-aggregate", "deduplicate-keep-first": "deduplicate",
             "deduplicate-keep-last": "deduplicate", "join": "join", "window-aggregate": "global-window-aggregate",
             "rank": "rank", "group-aggregate-listagg": "group-aggregate"}

runner = CliRunner()


def _sql_job(variant: str, version: str) -> harness.JobResult:
    harness.require_flink(version)
    return harness.generate("SqlJob", version, "hashmap", "savepoint", extra_args=SQL_VARIANTS[variant],
                            timeout=harness.DEFAULT_JOB_TIMEOUT)


def _cep_job(version: str) -> harness.JobResult:
    harness.require_flink(version)
    return harness.generate("CepJob", version, "hashmap", "savepoint", timeout=harness.DEFAULT_JOB_TIMEOUT)


def _plan(job: harness.JobResult) -> str:
    return str(job.out_dir / job.dump["plan"])


def _names_in_metadata(version: str) -> bool:
    return harness.release(version).metadata_version >= 5  # metadata V4 has neither operator names nor uids


def _stateful(job: harness.JobResult) -> list[dict]:
    return [op for op in job.dump["operators"] if op["kind"] is not None]


def _node_id(op: dict) -> int:
    return int(re.search(r"\[(\d+)\]$", op["name"]).group(1))


def _invoke(*args: str, exit_code: int = 0):
    result = runner.invoke(app, list(args))
    assert result.exit_code == exit_code, result.output
    return result


def _json(*args: str, exit_code: int = 0):
    return json.loads(_invoke(*args, "--json", exit_code=exit_code).output)


def _json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


# ------------------------------------------------------------------ info, views, verify (no Spark)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(SQL_VARIANTS))
def test_info_shows_the_sql_kinds(variant, version):
    job = _sql_job(variant, version)
    plan = _plan(job)
    shown = {op["uid_hash"]: op for op in _json("info", str(job.snapshot_dir))["operators"]}
    # the plan binds by node ids in names (V5+), by generated uids' hashes, or (a 1.20 savepoint without
    # uids: only graph hashes) by the shape of each operator's state (savepoint/sql_shape_binding.py)
    planned = {op["uid_hash"]: op for op in _json("info", str(job.snapshot_dir), "--plan", plan)["operators"]}
    assert set(shown) == set(planned) == {op["operator_id"] for op in job.dump["operators"]}
    for op in _stateful(job):
        expected = {"kind": SQL_KINDS[op["kind"]], "node_id": _node_id(op)}
        if _names_in_metadata(version):
            assert shown[op["operator_id"]]["sql"] == expected, op["name"]
            assert shown[op["operator_id"]]["states"], op["name"]
        described = planned[op["operator_id"]]["sql"]
        assert {"kind": described["kind"], "node_id": described["node_id"]} == expected, op["name"]
        assert described["key"] == ["k"], op["name"]
    accumulators = planned[_operator(job, "group-aggregate")["operator_id"]]["sql"]["rows"]["accumulators"]
    assert accumulators[:4] == ["count", "sum_v", "max_v", "count_distinct_name"]
    table = _invoke("info", str(job.snapshot_dir), "--plan", plan).output
    assert "group-aggregate" in table and "global-window-aggregate" in table


def _operator(job: harness.JobResult, kind: str) -> dict:
    (op,) = [op for op in job.dump["operators"] if op["kind"] == kind]
    return op


def _expected_view(op: dict, version: str, plan: bool) -> str:
    """The keyed view of a stateful SQL operator: its uid; else ``<kind>_<node id>`` from the plan or
    from its name in the metadata; else ``op_<uid hash>``."""
    if op["uid"] and _names_in_metadata(version):
        return view_name(op["uid"])
    if plan or _names_in_metadata(version):
        return view_name(f"{SQL_KINDS[op['kind']]}_{_node_id(op)}")
    return f"op_{op['operator_id']}"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(SQL_VARIANTS))
def test_every_stateful_sql_operator_gets_a_view(variant, version):
    job = _sql_job(variant, version)
    for plan in (False, True):
        args = ("views", str(job.snapshot_dir)) + (("--plan", _plan(job)) if plan else ())
        keyed = {v["uid_hash"]: v["view"] for v in _json(*args)["views"] if v["table"] == "keyed"}
        assert keyed == {op["operator_id"]: _expected_view(op, version, plan) for op in _stateful(job)}, plan


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(SQL_VARIANTS) + ["cep"])
def test_verify_decodes_every_state(variant, version):
    job = _cep_job(version) if variant == "cep" else _sql_job(variant, version)
    _invoke("verify", str(job.snapshot_dir))


@pytest.mark.parametrize("version", VERSIONS)
def test_info_and_views_of_a_cep_savepoint(version):
    job = _cep_job(version)
    cep = _operator(job, "cep")
    shown = {op["uid_hash"]: op for op in _json("info", str(job.snapshot_dir))["operators"]}
    assert {s["name"] for s in shown[cep["operator_id"]]["states"]} >= {
        "nfaStateName", "sharedBuffer-events", "sharedBuffer-entries-with-lockable-edges"}
    keyed = [v["view"] for v in _json("views", str(job.snapshot_dir))["views"]
             if v["table"] == "keyed" and v["uid_hash"] == cep["operator_id"]]
    assert keyed == (["cep"] if _names_in_metadata(version) else [f"op_{cep['operator_id']}"])


# ------------------------------------------------------------------ read, sql, diff (Spark)


def _read(job: harness.JobResult, kind: str, *args: str) -> list[dict]:
    op = _operator(job, kind)
    return _json_lines(_invoke("read", str(job.snapshot_dir), "--uid", op["uid"] or op["operator_id"],
                               "--plan", _plan(job), "--limit", "1000", "--json", *args).output)


@pytest.mark.spark
@pytest.mark.parametrize("version", ["2.3.0", "1.20.1"])
def test_read_with_a_plan_names_the_columns(version, spark):
    job = _sql_job("sql-uids", version)
    groups = _read(job, "group-aggregate")
    expected = dict(_operator(job, "group-aggregate")["expected"])
    assert {row["key_k"]: (row["accState"]["count"], row["accState"]["sum_v"], row["accState"]["max_v"],
                           row["accState"]["count_distinct_name"]) for row in groups} == {
        k: (e["count"], e["sum"], e["max"], e["count_distinct"]) for k, e in expected.items()}
    assert {row["key_k"]: sorted(row["distinctAcc_0"]) for row in groups} == {
        k: sorted(name for name, _ in e["distinct"]) for k, e in expected.items()}
    windows = _read(job, "window-aggregate")
    assert {(row["key_k"], row["window_start"], row["window_end"]): [row["window-aggs"][f] for f in
                                                                      ("count", "sum_v", "max_v")]
            for row in windows} == {tuple(w): acc for w, acc in _operator(job, "window-aggregate")["expected"]}
    join = _read(job, "join")
    left = {row["key_k"]: sorted([[r["key"]["id"], r["key"]["k"], r["key"]["v"]], r["value"]]
                                 for r in row["left-records"]) for row in join if row["left-records"]}
    assert left == {k: sorted(records) for k, records in _operator(job, "join")["expected"]["left"]}
    last = _read(job, "deduplicate-keep-last")
    assert {row["key_k"]: [row["deduplicate-state"][f] for f in ("id", "k", "v")] for row in last} == dict(
        (k, row) for k, row in _operator(job, "deduplicate-keep-last")["expected"])


@pytest.mark.spark
def test_sql_over_the_views(spark):
    job = _sql_job("sql-uids", "2.3.0")
    expected = {k: e["count"] for k, e in _operator(job, "group-aggregate")["expected"]}
    rows = _json_lines(_invoke("sql", str(job.snapshot_dir), "--plan", _plan(job), "--json",
                               "SELECT key_k, accState.count FROM _4_group_aggregate").output)
    assert {row["key_k"]: row["count"] for row in rows} == expected
    # no uids, no plan: the view is named from the operator's name, its fields are f0...
    job = _sql_job("sql-no-uids-ttl", "2.3.0")
    rows = _json_lines(_invoke("sql", str(job.snapshot_dir), "--json",
                               "SELECT key_f0, accState.f0 AS count FROM group_aggregate_4").output)
    assert {row["key_f0"]: row["count"] for row in rows} == expected


@pytest.mark.spark
def test_diff_against_a_transformed_copy_reports_the_changed_key(spark, tmp_path):
    job = _sql_job("sql-uids", "2.3.0")
    original = str(job.snapshot_dir)
    changed = str(tmp_path / "changed")
    # a transform's view ``state`` has the key as one column, a row of the grouping key
    transform = ("SELECT key, CASE WHEN key.f0 = 'k3' THEN named_struct('f0', accState.f0 + 1, 'f1', accState.f1, "
                 "'f2', accState.f2, 'f3', accState.f3, 'f4', accState.f4) ELSE accState END AS accState FROM state")
    _invoke("modify", original, "--out", changed, "--transform", f"4_group-aggregate:accState={transform}")
    _invoke("verify", changed, "--allow-external-paths")
    same = _json("diff", original, original, "--uid", "4_group-aggregate")
    assert same and all((row["added"], row["removed"], row["changed"]) == (0, 0, 0) for row in same)
    result = _json("diff", original, changed, "--allow-external-paths", exit_code=1)
    differing = [row for row in result if row["added"] or row["removed"] or row["changed"]]
    (row,) = differing
    assert (row["operator"], row["table"], row["added"], row["removed"], row["changed"]) == (
        "4_group-aggregate", "keyed", 0, 0, 1)
    (example,) = row["examples"]
    assert example["key"] == "k3"
    old, new = json.loads(example["old"]), json.loads(example["new"])
    assert new["accState"]["f0"] == old["accState"]["f0"] + 1
    assert dict(new["accState"], f0=None) == dict(old["accState"], f0=None)
