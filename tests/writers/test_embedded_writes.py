"""modify --transform, re-keying and bootstrap on the embedded engine (no JVM): the same savepoint, byte for
byte, as Spark writes from the same input (writes are reproducible: builder.stream_name), and the same
one-line errors. Flink restoring the embedded engine's output: tests/flink/test_writer_oracle.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import engine as engine_module
from fstate.readers import tables
from fstate.savepoint.loader import Savepoint
from fstate.writers import keyed_stream
from fstate.writers.modify import SavepointModifier
from tests.flink.restore import tree_hash
from tests.support import ROOT, sample_snapshot

KEYED = sample_snapshot(ROOT / "samples" / "keyed-hashmap-savepoint")
ROCKS = sample_snapshot(ROOT / "samples" / "keyed-rocksdb-checkpoint")
README_TRANSFORM = "SELECT key, total * 10 AS total FROM state"


def _modify(base: Path, out: Path, spark, steps) -> None:
    m = SavepointModifier(str(base), spark, engine=None if spark is not None else "embedded")
    steps(m)
    m.write(str(out))


#: modify cases (those of test_modify.py and test_modify_rocksdb.py): (base, the operations)
MODIFY_CASES = {
    "readme": (KEYED, lambda m: m.rename_uid("keyed", "counter").set_max_parallelism_of_all(256)
               .transform_state("counter", "total", sql=README_TRANSFORM)),
    "case-when-null": (KEYED, lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, CASE WHEN total > 1500 THEN NULL ELSE total * 10 END AS total FROM state")),
    "rename-then-transform": (KEYED, lambda m: m.rename_uid("keyed", "keyed-v2").transform_state(
        "keyed-v2", "total", sql="SELECT key, total + 1 AS total FROM state")),
    "transform-rename-rescale": (KEYED, lambda m: m.transform_state(
        "keyed", "total", sql="SELECT s.key, s.total * 2 AS total FROM state s").rename_uid("keyed", "keyed-v2")
        .set_max_parallelism("keyed-v2", 256, 2)),
    "two-states": (KEYED, lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, total - 1 AS total FROM state").transform_state(
        "keyed", "events", sql="SELECT key, filter(events, e -> e != 'e152') AS events FROM state")),
    # (Spark pushed the key filter into the scan the table shares, and lost the other keys' other states)
    "filter-keys": (KEYED, lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, total FROM state WHERE key IN ('k-1', 'k-2', 'k-3')")),
    "rocksdb-rename-transform": (ROCKS, lambda m: m.rename_uid("keyed", "keyed-v2").transform_state(
        "keyed-v2", "total", sql=README_TRANSFORM)),
    "rocksdb-rekey-all": (ROCKS, lambda m: m.set_max_parallelism_of_all(256)),
}


#: run by default (every case with --exhaustive): the README's, a filter of the keys, RocksDB re-keyed
REPRESENTATIVE = {"readme", "filter-keys", "rocksdb-rekey-all"}


@pytest.mark.spark
@pytest.mark.parametrize("case", sorted(MODIFY_CASES))
def test_modify_gives_the_same_bytes_on_both_engines(case, spark, tmp_path, exhaustive):
    if case not in REPRESENTATIVE and not exhaustive:
        pytest.skip("a Spark comparison of the exhaustive run (pytest --exhaustive)")
    base, steps = MODIFY_CASES[case]
    _modify(base, tmp_path / "embedded", None, steps)
    _modify(base, tmp_path / "spark", spark, steps)
    assert tree_hash(tmp_path / "embedded") == tree_hash(tmp_path / "spark")
    assert len(list((tmp_path / "embedded").iterdir())) >= 1


def test_readme_modify_on_the_embedded_engine_transforms_every_key(tmp_path):
    out = tmp_path / "new"
    res = CliRunner().invoke(app, ["modify", str(KEYED), "--out", str(out), "--rename", "keyed=counter",
                                   "--max-parallelism", "256", "--transform", f"counter:total={README_TRANSFORM}",
                                   "--engine", "embedded"])
    assert res.exit_code == 0, res.output

    def rows(path, uid):
        return {r[0]: r[1:] for r in tables.keyed_table(Savepoint.open(str(path)).operator(uid)).rows()}

    old = rows(KEYED, "keyed")
    assert rows(out, "counter") == {k: ((None if r[0] is None else r[0] * 10),) + r[1:] for k, r in old.items()}
    assert Savepoint.open(str(out)).operator("counter").max_parallelism == 256


def test_a_transform_returning_some_keys_drops_only_that_state_of_the_others(tmp_path):
    out = tmp_path / "new"
    _modify(KEYED, out, None, lambda m: m.transform_state(
        "keyed", "total", sql="SELECT key, total FROM state WHERE key IN ('k-1', 'k-2', 'k-3')"))

    def rows(path):
        opened = Savepoint.open(str(path), allow_external_paths=True)
        return {r[0]: r[1:] for r in tables.keyed_table(opened.operator("keyed")).rows()}

    old, new = rows(KEYED), rows(out)
    assert new == {k: ((r[0] if k in ("k-1", "k-2", "k-3") else None),) + r[1:] for k, r in old.items()}


def _sources(tmp_path: Path) -> Path:
    """A spec reading Parquet, CSV (header, inferSchema), JSON lines and SQL over a view."""
    keys = [f"user-{i}" for i in range(3000)]
    pyarrow.parquet.write_table(pyarrow.table({
        "user": keys, "total": pyarrow.array(range(3000), pyarrow.int64()),
        "events": [[f"e{i}", "ü"] if i % 3 else None for i in range(3000)],
        "wakeup": [1_700_000_000_000 + i if i % 4 == 0 else None for i in range(3000)]}), tmp_path / "counts.parquet")
    (tmp_path / "scores.csv").write_text("name,score,ratio\n" + "".join(f"n{i},{i * 3},{i / 4}\n" for i in range(500)))
    (tmp_path / "tags.json").write_text("".join(json.dumps({"tag": f"t{i}", "n": i, "meta": {"z": i, "a": "x"}}) + "\n"
                                                for i in range(200)))
    (tmp_path / "offsets.csv").write_text("".join(f"{i}\n" for i in range(10)))
    spec = {
        "max_parallelism": 128,
        "views": {"scores": {"path": "scores.csv", "options": {"header": True, "inferSchema": True}}},
        "operators": [
            {"uid": "counter", "parallelism": 2, "keyed": {
                "source": {"path": "counts.parquet"}, "key": "user",
                "states": {"total": "LONG", "events": "LIST<STRING>"}, "event_timers": "wakeup"}},
            {"uid": "scores", "parallelism": 3, "keyed": {
                "source": {"sql": "SELECT name, CAST(score AS BIGINT) AS score, ratio FROM scores WHERE score % 2 = 0"},
                "key": "name"}},
            {"uid": "tags", "parallelism": 1, "keyed": {"source": {"path": "tags.json"}, "key": "tag"}},
            {"uid": "src", "list_state": [{"name": "offsets", "type": "INT", "column": "_c0",
                                           "source": {"path": "offsets.csv", "options": {"inferSchema": "true"}}}],
             "broadcast_state": [{"name": "rules", "key_type": "STRING", "value_type": "STRING",
                                  "entries": {"r1": "allow", "r2": "deny"}}]},
        ]}
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.spark
def test_bootstrap_gives_the_same_bytes_on_both_engines(spark, tmp_path, monkeypatch):
    spec = _sources(tmp_path)
    for engine in ("embedded", "spark"):
        res = _cli("bootstrap", "--spec", str(spec), "--out", str(tmp_path / engine), "--engine", engine)
        assert res.exit_code == 0, res.output
    assert tree_hash(tmp_path / "embedded") == tree_hash(tmp_path / "spark")
    # small batches: most of them encoded on the process pool
    monkeypatch.setattr(engine_module, "BATCH_ROWS", 100)
    monkeypatch.setattr(keyed_stream, "_BATCHES_HERE", 2)
    res = _cli("bootstrap", "--spec", str(spec), "--out", str(tmp_path / "pool"), "--engine", "embedded")
    assert res.exit_code == 0, res.output
    assert tree_hash(tmp_path / "pool") == tree_hash(tmp_path / "spark")
    written = Savepoint.open(str(tmp_path / "embedded"))
    counter = {r[0]: r[1:] for r in tables.keyed_table(written.operator("counter")).rows()}
    assert len(counter) == 3000 and counter["user-3"] == (3, None) and counter["user-1"] == (1, ["e1", "ü"])
    assert len(list(tables.keyed_table(written.operator("scores")).rows())) == 250


@pytest.mark.spark
def test_readme_bootstrap_gives_the_same_bytes_on_both_engines(spark, tmp_path):
    from tests.cli.test_readme import write_yaml_files

    write_yaml_files(tmp_path)
    spec = tmp_path / "fstate-readme" / "bootstrap.yaml"
    for engine in ("embedded", "spark"):
        res = _cli("bootstrap", "--spec", str(spec), "--out", str(tmp_path / engine), "--engine", engine)
        assert res.exit_code == 0, res.output
    assert tree_hash(tmp_path / "embedded") == tree_hash(tmp_path / "spark")


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["embedded", "spark"])
@pytest.mark.parametrize("transform,message", [
    ("keyed:total=SELECT nope FROM state", "SQL: "),
    ("keyed:total=SELEC key FROM state", "SQL: "),
    ("keyed:total=SELECT key, total AS t FROM state", "must return columns key and total"),
    ("keyed:total=SELECT key, total + 'x' AS total FROM state", "SQL: "),
])
def test_transform_mistakes_are_one_line_on_both_engines(engine, transform, message, spark, tmp_path):
    res = _cli("modify", str(KEYED), "--out", str(tmp_path / "new"), "--transform", transform, "--engine", engine)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["embedded", "spark"])
def test_bootstrap_mistakes_are_one_line_on_both_engines(engine, spark, tmp_path):
    (tmp_path / "c.csv").write_text("user,total\na,x\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({"operators": [{"uid": "op", "keyed": {
        "source": {"path": "c.csv", "options": {"header": "true"}}, "key": "user", "states": {"total": "LONG"}}}]}))
    res = _cli("bootstrap", "--spec", str(spec), "--out", str(tmp_path / "out"), "--engine", engine)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "column 'total' is string, but LONG needs an integer column" in lines[0], res.stderr
    spec.write_text(json.dumps({"operators": [{"uid": "op", "keyed": {
        "source": {"sql": "SELECT nope FROM VALUES (1) AS t(a)"}, "key": "a"}}]}))
    res = _cli("bootstrap", "--spec", str(spec), "--out", str(tmp_path / "out"), "--engine", engine)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "source sql:" in lines[0], res.stderr
