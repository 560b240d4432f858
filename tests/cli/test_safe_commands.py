"""Commands check what needs no Spark before Spark starts, leave nothing behind when they fail,
refuse an --out that overlaps their input, and say with their exit code whether `diff` found
differences."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.savepoint.loader import Savepoint
from tests.support import sample_dirs, sample_snapshot

runner = CliRunner()
#: a Spark master that cannot start: a check that fails with this one happened before Spark
NO_SPARK = ["--master", "no-such-master://x"]


def _sample(name):
    return str(sample_snapshot(next(s for s in sample_dirs() if s.name == name)))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "fstate.cli.app", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})


def _one_line_error(res, message):
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "base"
    shutil.copytree(_sample("operator-state-hashmap-savepoint"), path)
    return str(path)


@pytest.mark.parametrize("out", ["BASE", "BASE/new"])
def test_modify_out_in_base_is_refused(base, out):
    before = sorted(os.listdir(base))
    res = _run("modify", base, "--out", out.replace("BASE", base), "--overwrite", "--remove", "src")
    _one_line_error(res, "choose another --out")
    assert sorted(os.listdir(base)) == before


def test_bootstrap_out_inside_its_sources_is_refused_before_spark(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "counts.csv").write_text("key,total\na,1\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("operators:\n  - uid: counter\n    parallelism: 1\n    keyed:\n"
                    "      source: {path: data, format: csv, options: {header: true}}\n"
                    "      states: {total: LONG}\n")
    res = _run("bootstrap", "--spec", str(spec), "--out", str(data / "sp"), *NO_SPARK)
    _one_line_error(res, "which the spec reads")
    res = _run("bootstrap", "--spec", str(spec), "--out", str(tmp_path), "--overwrite", *NO_SPARK)
    _one_line_error(res, "which the spec reads")
    assert (data / "counts.csv").exists() and not (data / "sp").exists()


def test_max_parallelism_for_all_operators_or_one_with_a_warning(base, tmp_path):
    res = _run("modify", base, "--out", str(tmp_path / "all"), "--max-parallelism", "256", *NO_SPARK)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr
    new = Savepoint.open(str(tmp_path / "all"), allow_external_paths=True)
    assert {o.max_parallelism for o in new.operators} == {256}
    res = _run("modify", base, "--out", str(tmp_path / "one"), "--max-parallelism", "lists=256", *NO_SPARK)
    assert res.returncode == 0, res.stderr
    assert "warning: operator lists now has max parallelism 256 but 8 other operator(s)" in res.stderr
    assert "--max-parallelism 256" in res.stderr and "UserWarning" not in res.stderr


def test_modify_conflicts_are_reported_before_spark(tmp_path):
    res = _run("modify", _sample("keyed-hashmap-savepoint"), "--out", str(tmp_path / "new"),
               "--rename", "src=keyed", "--max-parallelism", "window-agg=256", *NO_SPARK)
    _one_line_error(res, "would appear twice")
    assert not (tmp_path / "new").exists()


def test_read_out_is_checked_before_spark(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    res = _run("read", _sample("operator-state-hashmap-savepoint"), "--uid", "lists", "--state", "tuples",
               "--out", str(out), *NO_SPARK)
    _one_line_error(res, "already exists (--mode overwrite replaces it)")
    res = _run("read", _sample("operator-state-hashmap-savepoint"), "--uid", "lists", "--state", "tuples",
               "--out", str(out), "--mode", "append", *NO_SPARK)
    _one_line_error(res, "--mode must be error or overwrite")


@pytest.mark.spark
def test_read_out_mode_overwrite_and_a_failed_write_leaves_nothing(spark, tmp_path):
    from fstate.cli.read import write_frame

    sample = _sample("operator-state-hashmap-savepoint")
    out = tmp_path / "out"
    res = runner.invoke(app, ["read", sample, "--uid", "lists", "--state", "tuples", "--out", str(out)])
    assert res.exit_code == 0, res.output
    first = sorted(os.listdir(out))
    res = runner.invoke(app, ["read", sample, "--uid", "single", "--state", "names", "--out", str(out), "--mode", "overwrite",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    assert any(name.endswith(".json") for name in os.listdir(out)) and sorted(os.listdir(out)) != first
    failing = spark.range(5).selectExpr("raise_error('boom') AS x")
    with pytest.raises(Exception, match="boom"):
        write_frame(failing, str(tmp_path / "failed"), "parquet")
    with pytest.raises(Exception, match="boom"):
        write_frame(failing, str(out), "parquet", overwrite=True)
    assert not (tmp_path / "failed").exists() and any(name.endswith(".json") for name in os.listdir(out))
    assert sorted(name for name in os.listdir(tmp_path) if name.startswith(".")) == []


@pytest.mark.spark
def test_diff_exit_code_says_whether_savepoints_differ(spark, base, tmp_path):
    changed = str(tmp_path / "changed")
    res = runner.invoke(app, ["modify", base, "--out", changed, "--remove", "single"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["diff", base, base])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["diff", base, changed, "--allow-external-paths"])
    assert res.exit_code == 1, res.output
    res = _run("diff", base, str(tmp_path / "missing"), *NO_SPARK)
    _one_line_error(res, "no such file or directory")
