"""``fstate sql`` on both engines: the engine rule of ``read`` (auto runs DuckDB in process, no JVM), the
same printed rows and --out files, and a mistake in the query as one line naming it and the views."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet
import pytest
from typer.testing import CliRunner

from fstate.cli import read as read_commands
from fstate.cli.app import app
from fstate.cli.output import to_jsonable

REPO = Path(__file__).resolve().parents[2]
KEYED = str(REPO / "samples" / "keyed-hashmap-savepoint")
SQL = REPO / "samples" / "sql-uids-savepoint"
QUERY = "SELECT key, total, events FROM keyed WHERE total > 2990"
runner = CliRunner()


def _no_spark(monkeypatch) -> None:
    def refuse(*_):
        raise AssertionError("Spark started")

    monkeypatch.setattr(read_commands, "start_spark", refuse)


def _invoke(*arguments, exit_code=0):
    result = runner.invoke(app, list(arguments))
    assert result.exit_code == exit_code, result.output
    return result


def _json_rows(text: str) -> list[str]:
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in text.splitlines())


def test_auto_and_embedded_run_without_spark(monkeypatch):
    _no_spark(monkeypatch)
    for engine in ("auto", "embedded"):
        rows = [json.loads(line) for line in _invoke("sql", KEYED, QUERY, "--json", "--engine", engine).stdout
                .splitlines()]
        assert rows and all(row["total"] > 2990 and isinstance(row["events"], list) for row in rows)
    # two savepoints under aliases, a join between them; a struct field of an SQL operator's state
    result = _invoke("sql", f"a={KEYED}", f"b={REPO / 'samples' / 'keyed-hashmap-checkpoint'}", "--json",
                     "SELECT count(*) AS n, count(t.key) AS timers FROM a_keyed x JOIN b_keyed y ON x.key = y.key "
                     "LEFT JOIN b_keyed__timers t ON t.key = y.key WHERE NOT (x.total <=> y.total)")
    assert json.loads(result.stdout) == {"n": 0, "timers": 0}
    result = _invoke("sql", f"a={KEYED}", f"b={REPO / 'samples' / 'keyed-hashmap-checkpoint'}", "--json",
                     "SELECT count(*) AS n FROM a_keyed x JOIN b_keyed__timers t ON x.key = t.key")
    assert json.loads(result.stdout)["n"] > 0
    result = _invoke("sql", str(SQL), "--plan", str(SQL / "plan.json"), "--json",
                     "SELECT key_k, accState.count FROM _4_group_aggregate")
    dump = json.loads((SQL / "dump.json").read_text())
    (aggregate,) = [op for op in dump["operators"] if op["kind"] == "group-aggregate"]
    assert {row["key_k"]: row["count"] for row in map(json.loads, result.stdout.splitlines())} == {
        key: expected["count"] for key, expected in aggregate["expected"]}


def test_spark_is_asked_for_by_master_conf_or_a_remote_out(monkeypatch):
    started = []

    class Stop(Exception):
        pass

    def start(master, conf):
        started.append((master, conf))
        raise Stop

    monkeypatch.setattr(read_commands, "start_spark", start)
    for extra in (["--master", "local[1]"], ["--conf", "spark.ui.enabled=false"], ["--engine", "spark"]):
        result = runner.invoke(app, ["sql", KEYED, QUERY, *extra])
        assert isinstance(result.exception, Stop), result.output
    assert len(started) == 3
    result = _invoke("sql", KEYED, QUERY, "--master", "local[1]", "--engine", "embedded")
    assert "k-" in result.stdout and len(started) == 3


def test_a_mistake_is_one_line_naming_it_and_the_views_on_the_embedded_engine(monkeypatch):
    _no_spark(monkeypatch)
    for query, named in (("SELECT nope FROM keyed", "nope"), ("SELECT * FROM nope", "nope"),
                         ("SELEC key FROM keyed", "line 1"), ("SELECT key FROM keyed; SELECT 1", "one statement")):
        result = _invoke("sql", KEYED, query, exit_code=2)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and named in lines[0] and "keyed__timers" in lines[0], result.stderr
        assert "Traceback" not in result.output


@pytest.mark.spark
def test_a_mistake_is_one_line_naming_it_and_the_views_on_spark(spark):
    for query, named in (("SELECT nope FROM keyed", "nope"), ("SELECT * FROM nope", "nope"),
                         ("SELEC key FROM keyed", "SELEC")):
        result = _invoke("sql", KEYED, query, "--engine", "spark", exit_code=2)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and named in lines[0] and "keyed__timers" in lines[0], result.stderr
        assert "Traceback" not in result.output


@pytest.mark.spark
def test_both_engines_print_and_write_the_same(spark, tmp_path):
    shown = {engine: _json_rows(_invoke("sql", KEYED, QUERY, "--json", "--engine", engine).stdout)
             for engine in ("embedded", "spark")}
    assert shown["embedded"] == shown["spark"] and shown["embedded"]
    tables = {engine: sorted(_invoke("sql", KEYED, "SELECT key, total FROM keyed WHERE total > 2990",
                                     "--engine", engine).stdout.splitlines()) for engine in ("embedded", "spark")}
    assert tables["embedded"] == tables["spark"]
    for file_format in ("parquet", "json", "csv"):
        written = {}
        for engine in ("embedded", "spark"):
            out = tmp_path / f"{engine}-{file_format}"
            _invoke("sql", KEYED, QUERY, "--out", str(out), "--format", file_format, "--engine", engine)
            assert (out / "_SUCCESS").exists()
            written[engine] = _read_back(out, file_format)
        assert written["embedded"] == written["spark"] and written["spark"][0], file_format


def _read_back(directory: Path, file_format: str) -> tuple[list[str], object]:
    """The rows (sorted) and the columns of the files written to ``directory`` (Spark writes a part
    file per task, each CSV part with its header; the embedded engine one)."""
    parts = sorted(directory.glob(f"part-*.{file_format}"))
    if file_format == "parquet":
        table = pyarrow.concat_tables([pyarrow.parquet.read_table(part) for part in parts])
        return (sorted(json.dumps(to_jsonable(row), sort_keys=True) for row in table.to_pylist()),
                [(field.name, str(field.type).replace("item", "element")) for field in table.schema])
    lines = [line for part in parts for line in part.read_text(encoding="utf-8").splitlines()]
    header = lines[0] if file_format == "csv" and lines else None
    return sorted(line for line in lines if line != header), header
