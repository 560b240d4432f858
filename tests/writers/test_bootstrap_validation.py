"""Bootstrap checks every source column against its declared type on the driver, before a Spark job
runs; data errors found by the executors are one line naming the state, column, source and a value."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pyarrow.parquet
import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from tests.support import SAMPLES, sample_dirs, sample_snapshot
from fstate.readers.schema import spark_type
from fstate.savepoint import errors
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import visit
from fstate.savepoint.errors import InvalidArgumentError
from fstate.writers.bootstrap import writer_from_spec
from fstate.writers.spec import parse_type
from fstate.writers.validation import SourceTypeVisitor
from fstate.writers.writer import SavepointWriter


def _state_types():
    """Every state type of the shipped samples (keys, keyed values, operator and broadcast state)."""
    found = {}
    for sample in sample_dirs():
        try:
            savepoint = Savepoint.open(str(sample_snapshot(sample)), allow_external_paths=True)
        except errors.FStateError:
            continue
        for operator in savepoint.operators:
            try:
                keyed_meta, operator_meta = operator.keyed_meta, operator.operator_meta
            except errors.FStateError:
                continue
            metas = []
            if keyed_meta is not None:
                found[keyed_meta.key_type.name] = keyed_meta.key_type
                metas += [s for _, s in keyed_meta.value_states]
            if operator_meta is not None:
                metas += list(operator_meta.states)
            for meta in metas:
                for t in (meta.value_type, getattr(meta, "key_type", None)):
                    if t is not None:
                        found[t.name] = t
    return sorted(found.items())


@pytest.mark.parametrize("name,type_info", _state_types())
def test_what_fstate_reads_passes_the_check(name, type_info):
    # a transform writes back the DataFrame fstate read: its columns must pass as they are
    visit(type_info, SourceTypeVisitor(spark_type(type_info), "column 'x'"))


@pytest.mark.parametrize("declared,ddl,message", [
    ("LIST<STRING>", "v string", "is string, but LIST<STRING> needs an array column (a string is not a list"),
    ("LONG", "v string", "is string, but LONG needs an integer column"),
    ("INT", "v double", "is double, but INT needs an integer column"),
    ("STRING", "v bigint", "is bigint, but STRING needs a string column"),
    ("BOOLEAN", "v string", "needs a boolean column"),
    ("MAP<STRING, LONG>", "v map<string,string>", "column 'v'[value] is string, but LONG needs"),
    ("ROW<a INT, b STRING>", "v struct<b:string,a:int>", "takes them in the order a, b"),
    ("TUPLE<STRING, LONG>", "v struct<x:string>", "needs a struct of 2 fields"),
    ("LIST<LONG>", "v array<string>", "column 'v'[element] is string, but LONG needs"),
    ("BIGINT", "v decimal(10,2)", "decimal(p, 0)"),
    ("SQL ROW<k STRING, n BIGINT>", "v struct<k:string,n:string>", "column 'v'.n is string, but SQL BIGINT needs"),
])
@pytest.mark.spark
def test_column_type_mismatches(spark, declared, ddl, message):
    from pyspark.sql.types import _parse_datatype_string

    column_type = _parse_datatype_string(ddl)[0].dataType
    with pytest.raises(errors.InvalidArgumentError, match=re.escape(message)):
        visit(parse_type(declared), SourceTypeVisitor(column_type, "column 'v'"))


@pytest.mark.parametrize("declared,ddl", [
    ("INT", "v bigint"), ("DOUBLE", "v int"), ("DECIMAL", "v decimal(10,2)"), ("BIGINT", "v decimal(20,0)"),
    ("LIST<STRING>", "v array<string>"), ("MAP<STRING, LONG>", "v array<struct<k:string,v:bigint>>"),
    ("TUPLE<STRING, LONG>", "v struct<x:string,y:bigint>"), ("ROW<a INT, b STRING>", "v struct<a:int,b:string>"),
    ("INSTANT", "v timestamp"), ("DATE", "v date"), ("NULLABLE<LONG>", "v bigint"),
    ("SQL ROW<k STRING, n BIGINT>", "v struct<k:string,n:bigint>"),
])
@pytest.mark.spark
def test_column_types_that_fit(spark, declared, ddl):
    from pyspark.sql.types import _parse_datatype_string

    visit(parse_type(declared), SourceTypeVisitor(_parse_datatype_string(ddl)[0].dataType, "column 'v'"))


@pytest.mark.spark
def test_writer_checks_before_any_job(spark):
    df = spark.createDataFrame([("a", "e38", "7")], "user string, events string, total string")
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"operator op \(from here\), state 'events': column 'events' is string, but LIST"):
        SavepointWriter(128, spark).with_keyed_state("op", df, key="user", states={"events": "LIST<STRING>"},
                                                     origin="from here")
    with pytest.raises(errors.InvalidArgumentError, match=r"list state 's': column 'value' is not in the source "
                                                          r"\(columns: user, events, total\)"):
        SavepointWriter(128, spark).with_list_state("op", "s", df, type="LONG")
    with pytest.raises(errors.InvalidArgumentError, match=r"operator op, timers: column 'total' is string"):
        SavepointWriter(128, spark).with_keyed_state("op", df, key="user", states={"events": "STRING"},
                                                     event_timers="total")
    with pytest.raises(errors.InvalidArgumentError, match=r"broadcast state 'b', value: column 'total' is string"):
        SavepointWriter(128, spark).with_broadcast_state("op", "b", df, key="user", value="total",
                                                         key_type="STRING", value_type="LONG")


def _run(*args, env=None):
    """A real process: its stderr whole, the JVM's and Spark's own lines included. Its Spark driver JVM
    on the C1 compiler (``SPARK_SUBMIT_OPTS``, which Spark's launcher puts on the driver's command line
    and the JVM does not announce), as the suite's ``spark`` fixture: a third less of its run."""
    return subprocess.run([sys.executable, "-m", "fstate.cli.app", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1",
                               **(env or {})})


def _invoke(*args):
    """The command in this process, on the test session's Spark (no JVM start-up of its own); its
    stderr is what fstate prints (a real process's is test_cli_row_errors_from_workers_...'s)."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def _error_lines(stderr: str) -> list[str]:
    # the JVM's own start-up notices (before fstate configures Spark's logging) are not fstate's
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith(("WARNING: Using incubator", "Setting default log level",
                                                     "To adjust logging level"))]


def _spec(tmp_path, states: str, source: str = "data.json") -> str:
    (tmp_path / "spec.yaml").write_text(
        f"operators:\n  - uid: counter\n    keyed:\n      source: {{path: {source}}}\n      key: user\n"
        f"      states:\n{states}")
    return str(tmp_path / "spec.yaml")


@pytest.mark.spark
def test_cli_schema_errors_are_one_line_naming_spec_source_and_column(spark, tmp_path):
    (tmp_path / "data.json").write_text(json.dumps({"user": "u1", "events": "e38", "total": "abc"}) + "\n")
    (tmp_path / "data.csv").write_text("user,val\nu1,3\n")
    cases = [
        ("        events: LIST<STRING>\n", "state 'events': column 'events' is string, but LIST"),
        ("        total: LONG\n", "state 'total': column 'total' is string, but LONG"),
        ("        total: LOONG\n", "state 'total': type 'LOONG': unknown type 'LOONG'"),
    ]
    for states, message in cases:
        spec = _spec(tmp_path, states)
        res = _invoke("bootstrap", "--spec", spec, "--out", str(tmp_path / "out"))
        lines = _error_lines(res.stderr)
        assert res.exit_code == 2 and len(lines) == 1, res.stderr
        assert "operator counter" in lines[0] and f"spec {spec}" in lines[0] and "data.json" in lines[0]
        assert message in lines[0]
    (tmp_path / "list.yaml").write_text(
        "operators:\n  - uid: src\n    list_state:\n      - {name: offsets, type: LONG, source: "
        "{path: data.csv, format: csv, options: {header: true}}}\n")
    res = _invoke("bootstrap", "--spec", str(tmp_path / "list.yaml"), "--out", str(tmp_path / "out"))
    lines = _error_lines(res.stderr)
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert "list state 'offsets'" in lines[0] and "column 'value' is not in the source (columns: user, val)" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_cli_row_errors_from_workers_are_one_line_and_debug_shows_the_trace(spark, tmp_path):
    """A real process on a Spark it starts (``--master``): its whole stderr is the one line, so neither
    the JVM's start-up notices (session.py filters them) nor Spark's logs of the failed tasks reach
    the user. The suite's one Spark CLI run in a process of its own, with a new directory for the
    driver's class-data archive (readers/spark_cds.py): the JVM writes it as the process exits (its
    warnings about classes it cannot archive printed nowhere, stdout included), whole under its name.
    Then a second real process maps that archive for a ``read --out`` on Spark (Python tasks alone: a
    SparkContext without a SparkSession, session.TasksSession): the same rows as the embedded engine's,
    nothing of the JVM's printed."""
    from fstate.readers import spark_cds

    (tmp_path / "data.json").write_text('{"user": "u1", "n": 5}\n{"user": "u2", "n": 99999999999}\n')
    spec = _spec(tmp_path, "        n: INT\n")
    archives = tmp_path / "cds"
    res = _run("bootstrap", "--spec", spec, "--out", str(tmp_path / "out"), "--master", "local[1]",
               env={spark_cds.ENV: str(archives)})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and res.stdout == "", res.stderr
    assert lines[0].startswith("error: operator counter (spec ") and "data.json" in lines[0]
    assert "state 'n', column 'n': cannot write the value 99999999999 (int)" in lines[0]
    assert not (tmp_path / "out").exists()
    assert [p.name for p in archives.iterdir()] == [spark_cds.archive_name()]  # nothing half written left
    sample = str(SAMPLES / "keyed-hashmap-savepoint")
    read = _run("read", sample, "--uid", "keyed", "--out", str(tmp_path / "spark"), "--master", "local[1]",
                env={spark_cds.ENV: str(archives)})
    said = read.stderr.splitlines()  # fstate's own message, and nothing else
    assert read.returncode == 0 and read.stdout == "" and len(said) == 1 and said[0].startswith("wrote keyed ("), \
        read.stderr
    assert _invoke("read", sample, "--uid", "keyed", "--out", str(tmp_path / "embedded"),
                   "--engine", "embedded").exit_code == 0
    rows = [pyarrow.parquet.read_table(sorted((tmp_path / side).glob("part-*.parquet"))).sort_by("key")
            for side in ("spark", "embedded")]
    assert rows[0].num_rows > 0 and rows[0].equals(rows[1])
    res = _invoke("--debug", "bootstrap", "--spec", spec, "--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "Traceback" in res.stderr
    assert res.stderr.strip().splitlines()[-1] == lines[0]


@pytest.mark.spark
@pytest.mark.parametrize("source,advice", [
    ({"path": "counts.csv", "options": {"header": "true"}}, "(CSV: the option inferSchema)"),
    ({"path": "counts.csv", "options": {"header": "true", "inferSchema": "true"}}, "(inferSchema is set, so some value"),
    ({"path": "counts.csv", "format": "csv", "options": {"header": True, "inferSchema": True}}, "(inferSchema is set"),
    ({"path": "counts.json"}, "cast it in a `sql` source"),
])
def test_the_string_column_hint_fits_the_source(spark, tmp_path, source, advice):
    """A string column for a LONG state: the CSV option inferSchema is advised only to a CSV source
    that does not set it already (with it set, the column holds something that is not a number)."""
    (tmp_path / "counts.csv").write_text("user,total\nalice,3\nbob,n/a\n")
    (tmp_path / "counts.json").write_text('{"user": "alice", "total": "3"}\n')
    spec = {"operators": [{"uid": "counter", "keyed": {"source": source, "key": "user",
                                                        "states": {"total": {"type": "LONG"}}}}]}
    with pytest.raises(InvalidArgumentError) as caught:
        writer_from_spec(spec, str(tmp_path / "spec.yaml"), spark)
    message = str(caught.value)
    assert advice in message and "column 'total' is string" in message, message
    assert message.count("inferSchema") == (0 if "json" in source["path"] else 1), message
