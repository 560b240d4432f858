"""``--engine`` on read and diff: the same terminal output and diffs on both engines, progress only on a
terminal without --quiet, and a Spark run without the JVM's start-up lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fstate.cli import console
from fstate.cli.app import app

REPO = Path(__file__).resolve().parents[2]
KEYED = str(REPO / "samples" / "keyed-hashmap-savepoint")
KEYED_CHECKPOINT = str(REPO / "samples" / "keyed-hashmap-checkpoint")
OPERATORS = str(REPO / "samples" / "operator-state-hashmap-savepoint")
SQL = REPO / "samples" / "sql-uids-savepoint"
runner = CliRunner()

READS = [
    [KEYED, "--uid", "keyed"],
    [KEYED, "--uid", "window-agg", "--table", "timers"],
    [OPERATORS, "--uid", "lists", "--state", "tuples"],
    [OPERATORS, "--uid", "bcast", "--state", "rules"],
    [str(SQL), "--uid", "4_group-aggregate", "--plan", str(SQL / "plan.json")],
    [str(SQL), "--uid", "4_group-aggregate", "--no-flatten"],
    [str(REPO / "samples" / "cep-savepoint"), "--uid", "cep", "--table", "matches"],
]


def _invoke(*arguments, exit_code=0) -> str:
    result = runner.invoke(app, list(arguments))
    assert result.exit_code == exit_code, result.output
    return result.stdout


def _shown(output: str, arguments: list[str], engine: str) -> list[str]:
    """What `read` prints, in a row order of its own (Spark's is its partitions'); JSON objects with sorted
    keys: map entries come in the savepoint's order from the embedded engine, in the order of a Java
    HashMap from Spark's collect()."""
    lines = _invoke("--output", output, "read", *arguments, "--limit", "100000", "--engine", engine).splitlines()
    if output == "json":
        lines = [json.dumps(json.loads(line), sort_keys=True) for line in lines]
    return sorted(lines)


@pytest.mark.spark
def test_read_prints_the_same_on_both_engines(spark):
    for arguments in READS:
        assert _shown("json", arguments, "embedded") == _shown("json", arguments, "spark"), arguments
    for arguments in READS[1:4]:  # tables without maps of several entries: the same rich table
        assert _shown("table", arguments, "embedded") == _shown("table", arguments, "spark"), arguments


def _examples_in_one_order(result: list[dict]) -> list[dict]:
    """A diff's rows with their examples sorted: each engine lists them in its own order (Spark's is its
    partitions')."""
    return [{**row, "examples": sorted(row["examples"], key=lambda example: json.dumps(example, sort_keys=True))}
            for row in result]


@pytest.mark.spark
def test_diff_gives_the_same_result_and_exit_code_on_both_engines(spark, tmp_path, exhaustive):
    from fstate.readers.engine_diff import diff
    from fstate.writers.modify import SavepointModifier

    changed = str(tmp_path / "changed")
    _invoke("modify", KEYED, "--out", changed, "--transform",
            "keyed:total=SELECT key, CASE WHEN key = 'k-1' THEN NULL WHEN key = 'k-2' THEN total + 1 "
            "ELSE total END AS total FROM state")
    removed = str(tmp_path / "removed")
    _invoke("modify", OPERATORS, "--out", removed, "--remove", "single")
    rescaled = str(tmp_path / "rescaled")
    SavepointModifier(OPERATORS).set_parallelism("lists", 2).set_parallelism("single", 2).write(rescaled, deep=True)
    # redistributing list and union state over other subtasks changes no element (every state kind: lists'
    # nine states, on the embedded engine here; on Spark too with --exhaustive)
    redistributed = diff(OPERATORS, rescaled)
    assert redistributed and all(row["added"] == row["removed"] == 0 for row in redistributed), redistributed
    found = {}
    # one operator each (Spark runs several jobs per table, each reading both tables): a keyed table with
    # changed keys, compared by key, and its timers, compared as multisets; an operator only in OLD; list
    # state on other subtasks. With --exhaustive also a window operator (keys and windows identify a row)
    # and list state of every type.
    cases = [(KEYED, changed, ["--uid", "keyed", "--allow-external-paths"], 1),
             (OPERATORS, removed, ["--uid", "single", "--allow-external-paths"], 1),
             (OPERATORS, rescaled, ["--uid", "single"], 0)]
    if exhaustive:
        cases += [(KEYED, KEYED_CHECKPOINT, ["--uid", "window-agg"], 0), (OPERATORS, rescaled, ["--uid", "lists"], 0)]
    for old, new, extra, exit_code in cases:
        results = [_examples_in_one_order(json.loads(_invoke("diff", old, new, *extra, "--json", "--engine", engine,
                                                             exit_code=exit_code)))
                   for engine in ("embedded", "spark")]
        assert results[0] == results[1], (old, new, extra)
        found[new, extra[1]] = results[0]
    (keyed,) = [row for row in found[changed, "keyed"] if row["table"] == "keyed"]
    assert (keyed["operator"], keyed["changed"], keyed["added"], keyed["removed"]) == ("keyed", 2, 0, 0)
    assert {example["key"] for example in keyed["examples"]} == {"k-1", "k-2"}
    (timers,) = [row for row in found[changed, "keyed"] if row["table"] == "timers"]
    assert (timers["added"], timers["removed"]) == (0, 0)
    assert any(row["note"] == "only in OLD" for row in found[removed, "single"])


def test_diff_without_spark_of_the_same_state():
    from fstate.readers.engine_diff import diff

    result = diff(KEYED, KEYED_CHECKPOINT)
    assert result and all((row["added"], row["removed"], row["changed"]) == (0, 0, 0) for row in result)


def test_progress_bar_only_on_a_terminal_without_quiet(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    console.set_quiet(True)
    try:
        with console.progress_bar("reading", 100) as advance:
            assert advance.__name__ == "<lambda>"
    finally:
        console.set_quiet(False)
    with console.progress_bar("reading", 100) as advance:
        assert advance.__name__ == "advance"
        advance(10, 50)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    with console.progress_bar("reading", 100) as advance:
        assert advance.__name__ == "<lambda>"


def test_embedded_read_out_and_bad_engine(tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["read", KEYED, "--uid", "keyed", "--out", str(out), "--engine", "embedded",
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.iterdir()) == ["_SUCCESS", "part-00000.parquet", "part-00001.parquet",
                                                            "part-00002.parquet"]
    result = runner.invoke(app, ["read", KEYED, "--uid", "keyed", "--out", str(out), "--engine", "embedded"])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(app, ["read", KEYED, "--uid", "keyed", "--engine", "flink"])
    assert result.exit_code == 2 and "--engine must be auto, embedded or spark" in result.output


# A Spark CLI run in a process of its own prints no JVM start-up line: tests/writers/test_bootstrap_validation.py
# (test_cli_row_errors_from_workers_...), whose whole stderr is one line.


@pytest.mark.spark
def test_spark_tasks_write_with_progress_and_fail_in_one_line(spark, tmp_path):
    """``read --out`` on Spark: one task a partition reporting every byte and row to the progress bar; a
    corrupt state file read inside a Spark task is one line naming it, exit 2, and no output directory."""
    import shutil

    from fstate.readers import engine, planning, spark_tasks
    from fstate.readers.engine_files import _write_task
    from fstate.readers.options import source_options

    table = planning.build_table(source_options(KEYED, "keyed"))
    seen = []
    paths = [(str(tmp_path / f"part-{index}.json"), "json") for index in range(len(table.partitions))]
    counts = spark_tasks.map_partitions(spark, table, _write_task, lambda rows, size: seen.append((rows, size)),
                                        paths)
    assert len(counts) == len(table.partitions) >= 2
    assert sum(rows for rows, _ in seen) == sum(counts) > 0
    assert round(sum(size for _, size in seen)) == engine.table_bytes(table)
    for (path, _), count in zip(paths, counts):  # results in partition order
        assert len(Path(path).read_text().splitlines()) == count

    copy = tmp_path / "damaged"
    shutil.copytree(KEYED, copy)
    state_file = max((path for path in copy.rglob("*") if path.is_file() and path.name != "_metadata"
                      and path.suffix != ".json"), key=lambda path: path.stat().st_size)
    data = bytearray(state_file.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    state_file.write_bytes(bytes(data))
    out = tmp_path / "out"
    result = runner.invoke(app, ["read", str(copy), "--uid", "keyed", "--out", str(out), "--engine", "spark",
                                 "--quiet"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and state_file.name in result.output, result.output
    assert not out.exists() and not [path for path in tmp_path.iterdir() if path.name.startswith(".out")]


@pytest.mark.spark
def test_spark_tasks_name_an_output_directory_their_machine_does_not_see(spark, tmp_path):
    """On a cluster an executor may not see the driver's --out directory: one line saying so, exit 2."""
    from fstate.cli.console import error_from_spark
    from fstate.readers import planning, spark_tasks
    from fstate.readers.engine_files import _write_task
    from fstate.readers.options import source_options

    table = planning.build_table(source_options(KEYED, "keyed"))
    missing = tmp_path / "not-on-this-executor"
    with pytest.raises(Exception) as raised:
        spark_tasks.map_partitions(spark, table, _write_task, None,
                                   [(str(missing / f"part-{index}.parquet"), "parquet")
                                    for index in range(len(table.partitions))])
    message = error_from_spark(raised.value)
    assert message is not None and str(missing) in message and "file system the driver and every executor share" \
        in message, message


_LAUNCHER = """
import json, sys
from fstate.cli.app import main
if __name__ == "__main__":
    from fstate.cli import app
    from fstate.savepoint import pool
    app._spawn_without_the_launcher()
    with pool.spawn_pool(1) as workers:
        found = workers.submit(eval, "sorted(m for m in __import__('sys').modules "
                                     "if m.startswith(('fstate', 'typer', 'rich')))").result()
    print(json.dumps(found))
"""


def test_pool_workers_of_the_command_do_not_import_the_command(tmp_path):
    """A spawned worker runs its parent's main script first: the console script (as generated by pip,
    ``from fstate.cli.app import main``) would import the whole CLI, typer and rich into every worker;
    marked as ``fstate.__main__`` it is left alone. ``python -m fstate`` runs the command."""
    import subprocess

    launcher = tmp_path / "fstate"
    launcher.write_text(_LAUNCHER)
    found = json.loads(subprocess.run([sys.executable, str(launcher)], capture_output=True, text=True,
                                      check=True).stdout)
    assert found == []
    unmarked = _LAUNCHER.replace("app._spawn_without_the_launcher()", "")
    launcher.write_text(unmarked)
    found = json.loads(subprocess.run([sys.executable, str(launcher)], capture_output=True, text=True,
                                      check=True).stdout)
    assert "fstate.cli.app" in found and "typer" in found  # what the mark saves
    version = subprocess.run([sys.executable, "-m", "fstate", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("fstate ")
