"""``--plan`` of info, views and read, and the SQL kind in ``fstate info`` (issue 14, point 3).

Savepoints here hold only `_metadata` (operators named and numbered as the table planner does, no
state), so they need neither Spark nor the table runtime's serializers; the ``flink`` tests copy the
operators of SqlJob's real savepoint and use its real plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers.options import parse_source_options, source_options
from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.types.hashing import operator_id_for_uid
from tests.savepoint.test_sql_plan import PLAN, sql_job

runner = CliRunner()


def _build(path, operators, metadata_version=6) -> str:
    """A state-less savepoint of ``operators``: (name, uid, uid hash, parallelism)."""
    builder = SavepointBuilder(str(path), metadata_version=metadata_version)
    for name, uid, uid_hash, parallelism in operators:
        builder.operator(uid, uid_hash=None if uid else uid_hash, parallelism=parallelism, max_parallelism=128,
                         name=name)
    return builder.commit()


def _hash(text: str) -> str:
    return operator_id_for_uid(text).hex()


@pytest.fixture
def sql_savepoint(tmp_path):
    """Operators of the small plan of test_sql_plan: a source with a uid, SQL operators without."""
    savepoint = _build(tmp_path / "sp", [("Source: src", "src", None, 1), ("GroupAggregate[2]", None, _hash("a"), 2),
                                         ("Sink: out[3]", None, _hash("b"), 2), ("Join[5]", None, _hash("c"), 2)])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    return savepoint, str(plan)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "fstate.cli.app", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


def _operators(output: str) -> dict:
    return {op["name"]: op for op in json.loads(output)["operators"]}


def test_info_shows_the_kind_of_sql_operators_without_a_plan(sql_savepoint):
    savepoint, _ = sql_savepoint
    result = runner.invoke(app, ["info", savepoint, "--json"])
    assert result.exit_code == 0, result.output
    operators = _operators(result.output)
    assert operators["GroupAggregate[2]"]["sql"] == {"kind": "group-aggregate", "node_id": 2}
    assert operators["Sink: out[3]"]["sql"] == {"kind": "sink", "node_id": 3}
    assert operators["Source: src"]["sql"] is None
    shown = _run("info", savepoint)
    assert shown.returncode == 0 and "sql kind" in shown.stdout and "group-aggregate" in shown.stdout


def test_info_with_a_plan_describes_the_sql_operators(sql_savepoint):
    savepoint, plan = sql_savepoint
    result = runner.invoke(app, ["info", savepoint, "--plan", plan, "--json"])
    assert result.exit_code == 0, result.output
    aggregate = _operators(result.output)["GroupAggregate[2]"]["sql"]
    assert (aggregate["kind"], aggregate["node_id"], aggregate["key"]) == ("group-aggregate", 2, ["k"])
    assert aggregate["rows"]["accumulators"][:3] == ["count", "total_sum", "total_count"]
    assert _operators(result.output)["Join[5]"]["sql"]["rows"]["right"] == ["k", "label"]
    shown = _run("info", savepoint, "--plan", plan)
    assert shown.returncode == 0, shown.stderr
    assert "SQL plan" in shown.stdout and "group-aggregate" in shown.stdout


def test_plan_matched_by_uid_hashes_in_metadata_v4(tmp_path):
    # Flink 1.x with table.exec.uid.generation ALWAYS: V4 stores no names nor uids, only their hashes
    savepoint = _build(tmp_path / "sp", [(None, None, _hash("2_group-aggregate"), 2), (None, None, _hash("x"), 1)],
                       metadata_version=4)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    result = runner.invoke(app, ["info", savepoint, "--plan", str(plan), "--json"])
    assert result.exit_code == 0, result.output
    described = [op["sql"] for op in json.loads(result.output)["operators"] if op["sql"]]
    assert [(entry["kind"], entry["node_id"]) for entry in described] == [("group-aggregate", 2)]


@pytest.mark.parametrize("command", [["info"], ["views"], ["read", "--uid", "src"]])
@pytest.mark.parametrize("content, message", [
    ("{oops", "not a JSON plan"),
    ('{"nodes": [{"id": 2, "type": "stream-exec-deduplicate_1"}]}', "node 2 of the plan is a deduplicate"),
    (None, "no such plan file"),
])
def test_a_bad_plan_is_a_one_line_error_naming_the_file(sql_savepoint, tmp_path, command, content, message):
    savepoint, _ = sql_savepoint
    plan = tmp_path / "bad.json"
    if content is not None:
        plan.write_text(content)
    result = _run(command[0], savepoint, *command[1:], "--plan", str(plan))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and str(plan) in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr and "starting Spark" not in result.stderr


def test_views_checks_the_plan(sql_savepoint):
    savepoint, plan = sql_savepoint
    result = runner.invoke(app, ["views", savepoint, "--plan", plan, "--json"])
    assert result.exit_code == 0, result.output
    assert [view["view"] for view in json.loads(result.output)["views"]] == ["savepoint_metadata"]


def test_the_data_source_option_plan():
    options = source_options("/sp", "op", plan="/plans/plan.json")
    assert options["plan"] == "/plans/plan.json"
    assert parse_source_options(options).plan == "/plans/plan.json"
    assert parse_source_options({"path": "/sp", "uid": "op"}).plan is None


@pytest.mark.flink
def test_info_with_the_real_plan_of_sqljob(tmp_path):
    from fstate.savepoint.loader import Savepoint

    job = sql_job("uids")
    real = Savepoint.open(str(job.snapshot_dir))
    # the job's operators without their state (whose serializers are the table runtime's)
    savepoint = _build(tmp_path / "sp", [(op.name, op.uid, op.uid_hash, op.parallelism) for op in real.operators])
    plan = str(job.out_dir / job.dump["plan"])
    result = runner.invoke(app, ["info", savepoint, "--plan", plan, "--json"])
    assert result.exit_code == 0, result.output
    operators = _operators(result.output)
    assert operators["GroupAggregate[4]"]["sql"]["description"].startswith("GroupAggregate(groupBy=[k]")
    assert operators["GlobalWindowAggregate[24]"]["sql"]["window"] == {"type": "tumble", "size_ms": 5000}
    assert operators["Deduplicate[11]"]["sql"]["rows"]["input"] == ["id", "k", "v", "proctime"]
    assert operators["Source: events-source"]["sql"] is None
    # the plan of the SQL job does not fit a DataStream savepoint
    other = _build(tmp_path / "other", [("Map", "mapper", None, 1)])
    refused = _run("info", other, "--plan", plan)
    assert refused.returncode == 2 and "no operator of" in refused.stderr and plan in refused.stderr


def test_plan_matched_by_state_shapes_without_names_or_uids(tmp_path):
    # Flink 1.x without uids: V4 has no names or uids and the ids are graph hashes; the shipped 2.3
    # sample written for Flink 1.20 (V4) is such a savepoint, and --plan still names its tables
    sample = Path(__file__).resolve().parents[2] / "samples" / "sql-no-uids-ttl-savepoint"
    v4 = tmp_path / "v4"
    written = runner.invoke(app, ["modify", str(sample), "--out", str(v4), "--flink-version", "1.20", "--deep"])
    assert written.exit_code == 0, written.output
    plan = str(sample / "plan.json")
    result = runner.invoke(app, ["info", str(v4), "--plan", plan, "--json"])
    assert result.exit_code == 0, result.output
    described = {op["uid_hash"]: op["sql"] for op in json.loads(result.output)["operators"] if op["sql"]}
    named = runner.invoke(app, ["info", str(sample), "--plan", plan, "--json"])
    expected = {op["uid_hash"]: op["sql"] for op in json.loads(named.output)["operators"]
                if op["sql"] and op["uid_hash"] in described}
    assert len(described) == 5 and described == expected  # the five stateful SQL operators of the sample
