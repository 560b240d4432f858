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


@pytest.mark.parametrize("args,message", [
    (["info", "/no/such/savepoint"], "no such file or directory"),
    (["read", "SAMPLE", "--uid", "nope"], "no operator with uid or uid hash 'nope'"),
    (["read", "SAMPLE", "--uid", "lists", "--state", "nope"], "operator lists has no state 'nope' (states: "),
    (["read", "SAMPLE", "--uid", "lists", "--table", "list", "--state", "nope"], "no list/union state 'nope'"),
    (["read", "SAMPLE", "--uid", "lists"], "has no keyed state: name one of its operator states"),
    (["read", "SAMPLE", "--uid", "lists", "--format", "xml", "--state", "longs"], "--format must be"),
])
def test_errors_are_one_line_with_exit_2(args, message):
    args = [_sample("operator-state-hashmap-savepoint") if a == "SAMPLE" else a for a in args]
    res = _run(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_corrupt_metadata_exit_2(tmp_path):
    (tmp_path / "_metadata").write_bytes(b"\x49\x60\x67\x2d\x00\x00\x00\x06\x00")
    res = _run("info", str(tmp_path))
    assert res.returncode == 2 and "truncated" in res.stderr and "Traceback" not in res.stderr


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
def test_bootstrap_from_spec(tmp_path):
    (tmp_path / "counts.json").write_text("\n".join(
        json.dumps({"user": f"u{i}", "total": i, "wakeup": 5000 + i}) for i in range(20)))
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "sp"
    res = _run("bootstrap", "--spec", str(tmp_path / "spec.yaml"), "--out", str(out))
    assert res.returncode == 0, res.stderr
    info = json.loads(_run("info", str(out), "--json").stdout)
    states = {(o["uid"], s["name"]): s["type"] for o in info["operators"] for s in o["states"]}
    assert states[("counter", "total")] == "Long" and states[("source", "rules")] == "Map<String, String>"
    res = _run("bootstrap", "--spec", str(tmp_path / "spec.yaml"), "--out", str(out))
    assert res.returncode == 2 and "already exists" in res.stderr
    (tmp_path / "bad.yaml").write_text(SPEC.replace("type: LONG}", "type: LONGG}"))
    res = _run("bootstrap", "--spec", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "sp2"))
    assert res.returncode == 2 and "unknown type 'LONGG'" in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "counts.json", "sp", "spec.yaml"]
