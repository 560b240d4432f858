"""CLI on savepoints with serializers fstate does not know (issue 14, point 1): info, info --json,
views and verify list every operator and state and exit 0; the unknown state names its class in a
one-line warning (no traceback)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from tests.savepoint.test_unknown_serializers import LONG, copy_replacing, unknown_name

runner = CliRunner()


def _check_all_listed(path: str, unknown: str, expected_states: set[str]) -> None:
    res = runner.invoke(app, ["info", path])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    res = runner.invoke(app, ["info", path, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    states = {(op["uid"] or op["uid_hash"], s["name"]): s for op in data["operators"] for s in op["states"]}
    assert expected_states <= {name for _, name in states}
    warned = [s for s in states.values() if any(unknown in w for w in s["warnings"])]
    assert warned and all(len(w.splitlines()) == 1 for s in warned for w in s["warnings"])
    for command in ("views", "verify"):
        res = runner.invoke(app, [command, path])
        assert res.exit_code == 0, res.output
        assert "Traceback" not in res.output


@pytest.mark.parametrize("sample", ["keyed-hashmap-savepoint", "keyed-rocksdb-savepoint", "keyed-rocksdb-checkpoint"])
def test_unknown_value_serializer(sample, tmp_path):
    from fstate.savepoint.loader import Savepoint
    from tests.savepoint.test_unknown_serializers import SAMPLES
    expected = {d.name for op in Savepoint.open(str(SAMPLES / sample)).operators for d in op.describe_states()}
    path = copy_replacing(sample, tmp_path, LONG, unknown_name(LONG))
    _check_all_listed(str(path), unknown_name(LONG), expected)


@pytest.mark.flink
@pytest.mark.parametrize("job,args,unknown", [
    ("SqlJob", ("--uids", "true"), "RowDataSerializer"),
    ("SqlJob", ("--uids", "false", "--ttl", "1h"), "RowDataSerializer"),
    ("CepJob", (), "cep"),
])
def test_real_sql_and_cep_savepoints(job, args, unknown):
    """Real Flink 2.3 savepoints of SQL and CEP jobs: every stateful operator's states are listed
    (whether or not fstate decodes the table runtime's and CEP's serializers by now)."""
    from tests.flink import harness
    harness.require_flink("2.3.0")
    res = harness.generate(job, "2.3.0", "hashmap", "savepoint", extra_args=args, timeout=harness.DEFAULT_JOB_TIMEOUT)
    out = runner.invoke(app, ["info", str(res.snapshot_dir), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    names = {s["name"] for op in data["operators"] for s in op["states"]}
    assert "(keyed state)" not in names and "(operator state)" not in names
    expected = {"accState", "deduplicate-state", "left-records", "window-aggs"} if job == "SqlJob" else \
        {"nfaStateName", "sharedBuffer-events", "sharedBuffer-entries-with-lockable-edges"}
    assert expected <= names
    for command in ("views", "verify"):
        result = runner.invoke(app, [command, str(res.snapshot_dir)])
        assert result.exit_code == 0, result.output
