"""The command line: tables, JSON, and one-line errors with exit code 2."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.support import sample_dirs, sample_snapshot
from fstate.cli.app import app

runner = CliRunner()


def _sample(name):
    return str(sample_snapshot(next(s for s in sample_dirs() if s.name == name)))


def test_info_table_and_json():
    path = _sample("operator-state-hashmap-savepoint")
    res = runner.invoke(app, ["info", path])
    assert res.exit_code == 0, res.output
    assert "lists" in res.output and "Tuple2<String, Long>" in res.output and "UNION" in res.output
    res = runner.invoke(app, ["info", path, "--json"])
    data = json.loads(res.output)
    ops = {o["uid"]: o for o in data["operators"]}
    assert ops["lists"]["parallelism"] == 3
    assert {s["name"]: s["kind"] for s in ops["lists"]["states"]}["union-marks"] == "UNION"
    assert data["kind"] == "savepoint" and data["format"] == "CANONICAL"


def _run(*args):
    # a real process: exit codes and stderr exactly as a user sees them
    return subprocess.run([sys.executable, "-m", "fstate.cli.app", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


def _invoke(*args):
    """A command that runs Spark, in this process on the test session's Spark (a JVM start-up each in
    real processes; tests/cli/test_engine_cli.py and tests/writers/test_bootstrap_validation.py run
    Spark commands in real processes for what only their stderr shows)."""
    res = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


@pytest.mark.parametrize("args,message,real", [
    (["info", "/no/such/savepoint"], "no such file or directory", True),
    (["read", "SAMPLE", "--uid", "nope"], "no operator with uid or uid hash 'nope'", True),
    (["read", "SAMPLE", "--uid", "lists", "--state", "nope"], "operator lists has no state 'nope' (states: ", False),
    (["read", "SAMPLE", "--uid", "lists", "--table", "list", "--state", "nope"], "no list/union state 'nope'", False),
    (["read", "SAMPLE", "--uid", "lists"], "has no keyed state: name one of its operator states", False),
    (["read", "SAMPLE", "--uid", "lists", "--format", "xml", "--state", "longs"], "--format must be", False),
])
def test_errors_are_one_line_with_exit_2(args, message, real):
    """A real process for one error of each command (the exit code and stderr as a user sees them); the
    other messages in this process (the same command object prints them)."""
    args = [_sample("operator-state-hashmap-savepoint") if a == "SAMPLE" else a for a in args]
    if real:
        res = _run(*args)
        code = res.returncode
    else:
        res = _invoke(*args)
        code = res.exit_code
    assert code == 2, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_corrupt_metadata_exit_2(tmp_path):
    (tmp_path / "_metadata").write_bytes(b"\x49\x60\x67\x2d\x00\x00\x00\x06\x00")
    res = _run("info", str(tmp_path))
    assert res.returncode == 2 and "truncated" in res.stderr and "Traceback" not in res.stderr


def test_verify_of_what_is_not_a_savepoint_exits_2(tmp_path):
    """Not a savepoint at all (no such path, a directory without _metadata, a file that is no _metadata)
    is bad input, one line and exit 2, as for every command; a damaged savepoint is a problem verify
    reports (exit 1)."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "text").write_text("hello, world\n")
    for path, message in ((tmp_path / "missing", "no such file or directory"),
                          (tmp_path / "empty", "no _metadata file"), (tmp_path / "text", "not a Flink _metadata file")):
        res = runner.invoke(app, ["verify", str(path)])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}") and message in lines[0], res.output
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "_metadata").write_bytes(b"\x49\x60\x67\x2d\x00\x00\x00\x06\x00")
    res = runner.invoke(app, ["verify", str(tmp_path / "damaged")])
    assert res.exit_code == 1 and "truncated" in res.output


@pytest.mark.spark
def test_read_shows_rows_and_writes_parquet(tmp_path):
    path = _sample("operator-state-hashmap-savepoint")
    res = _run("read", path, "--uid", "lists", "--state", "tuples", "--json", "-n", "3")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == 3 and set(rows[0]) == {"subtask", "index", "value"}
    out = tmp_path / "out"
    res = _run("read", path, "--uid", "lists", "--state", "tuples", "--out", str(out), "--format", "csv")
    assert res.returncode == 0, res.stderr
    assert any(p.suffix == ".csv" for p in out.iterdir())
    res = _run("read", path, "--uid", "lists", "--state", "tuples", "--out", str(out))
    assert res.returncode == 2 and "already exists" in res.stderr


SPEC = """
max_parallelism: 128
operators:
  - uid: counter
    parallelism: 2
    keyed:
      source: {path: counts.json, format: json}
      key: user
      states:
        total: {type: LONG}
      event_timers: wakeup
  - uid: source
    list_state:
      - {name: offsets, type: LONG, values: [17, 42]}
    broadcast_state:
      - {name: rules, key_type: STRING, value_type: STRING, entries: {r1: allow}}
"""


@pytest.mark.spark
def test_bootstrap_from_spec(spark, tmp_path):
    (tmp_path / "counts.json").write_text("\n".join(
        json.dumps({"user": f"u{i}", "total": i, "wakeup": 5000 + i}) for i in range(20)))
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "sp"
    res = _invoke("bootstrap", "--spec", str(tmp_path / "spec.yaml"), "--out", str(out))
    assert res.exit_code == 0, res.stderr
    info = json.loads(_run("info", str(out), "--json").stdout)
    states = {(o["uid"], s["name"]): s["type"] for o in info["operators"] for s in o["states"]}
    assert states[("counter", "total")] == "Long" and states[("source", "rules")] == "Map<String, String>"
    res = _invoke("bootstrap", "--spec", str(tmp_path / "spec.yaml"), "--out", str(out))
    assert res.exit_code == 2 and "already exists" in res.stderr
    (tmp_path / "bad.yaml").write_text(SPEC.replace("type: LONG}", "type: LONGG}"))
    res = _invoke("bootstrap", "--spec", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "sp2"))
    assert res.exit_code == 2 and "unknown type 'LONGG'" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "counts.json", "sp", "spec.yaml"]


def test_version():
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == f"fstate {version('fstate')}"


def _json(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("command", ["info", "views", "deps", "verify"])
def test_output_json_and_json_alias(command):
    path = _sample("operator-state-hashmap-savepoint")
    data = _json(["--output", "json", command, path])
    # --json is the same, before the command (global) and after it (as the commands had it)
    assert _json(["--json", command, path]) == data == _json([command, path, "--json"])
    table = runner.invoke(app, [command, path])
    assert table.exit_code == 0 and not table.stdout.lstrip().startswith("{")
    if command == "info":
        assert {o["uid"] for o in data["operators"]} >= {"lists", "bcast"}
    elif command == "views":
        views = {v["view"]: v for v in data["views"]}
        assert views["lists__union_marks"]["table"] == "list" and views["lists__union_marks"]["operator"] == "lists"
        assert views["bcast__rules"]["state"] == "rules" and len(views["bcast__rules"]["uid_hash"]) == 32
    elif command == "deps":
        assert data == {"path": path, "dependencies": {}}
    else:
        assert data["ok"] is True and data["operators"]


def test_unknown_output_format_is_a_usage_error():
    res = runner.invoke(app, ["--output", "yaml", "info", _sample("operator-state-hashmap-savepoint")])
    assert res.exit_code == 2 and "yaml" in res.output


def test_every_output_format_shows_every_result():
    from fstate.cli.output import OUTPUTS, Output

    assert list(OUTPUTS) == ["table", "json"]
    for output_class in OUTPUTS.values():
        assert issubclass(output_class, Output)
        output_class()  # abstract methods left out would fail here


def _commands():
    import typer.main

    return list(typer.main.get_command(app).commands)


@pytest.mark.parametrize("command", [None, *_commands()])
def test_help_reads_conventionally(command):
    res = runner.invoke(app, ([command] if command else []) + ["--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    text = res.output
    assert "<bool>" not in text and "<str>" not in text and "<int>" not in text
    assert "{" not in text.split("Usage:")[1].splitlines()[0]
    if command in ("info", "read", "views", "deps", "verify", "relocate"):
        assert f"Usage: fstate {command} [OPTIONS] PATH" in text
    if command is None:
        assert "--output" in text and "--version" in text and "--install-completion" in text


@pytest.mark.spark
def test_read_and_sql_output_json(spark, tmp_path):
    path = _sample("operator-state-hashmap-savepoint")
    res = _run("--output", "json", "read", path, "--uid", "lists", "--state", "tuples", "-n", "3")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == 3 and set(rows[0]) == {"subtask", "index", "value"}
    assert _run("--json", "read", path, "--uid", "lists", "--state", "tuples", "-n", "3").stdout == res.stdout
    res = _invoke("--output", "json", "sql", "--views", path, "SELECT view, holds FROM (SELECT 1 AS view, 2 AS holds)")
    assert res.exit_code == 0, res.stderr
    assert [json.loads(line) for line in res.stdout.splitlines()] == [{"view": 1, "holds": 2}]
    assert "lists__union_marks" in json.loads(res.stderr.strip().splitlines()[-1])["views"]
    res = _invoke("sql", path, "SELECT count(*) AS n FROM lists__tuples", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["n"] > 3, res.stderr
    res = _run("--output", "json", "diff", path, path, "--uid", "lists")
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    assert result and all(r["added"] == r["removed"] == r["changed"] == 0 for r in result)


@pytest.mark.spark
def test_modify_with_spark_then_deps(tmp_path):
    base = _sample("keyed-hashmap-savepoint")
    out = tmp_path / "rescaled"
    res = runner.invoke(app, ["modify", base, "--out", str(out), "--max-parallelism", "keyed=256",
                              "--master", "local[2]"])
    assert res.exit_code == 0, res.output
    assert "wrote savepoint" in res.stderr
    info = _json(["info", str(out), "--allow-external-paths", "--json"])
    assert {o["uid"]: o["max_parallelism"] for o in info["operators"]}["keyed"] == 256
    deps = _json(["--output", "json", "deps", str(out)])
    assert deps["path"] == str(out) and isinstance(deps["dependencies"], dict)
