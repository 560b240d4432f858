"""The same write gives the same savepoint, byte for byte: state files and inline handles are named by
what they hold (``builder.stream_name``), not at random. Users can diff two runs of a migration, and
the Flink oracle caches its restores of fstate's savepoints by their bytes (tests/flink/harness.py)."""

from __future__ import annotations

import filecmp
import os

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.savepoint.builder import stream_name, write_stream
from fstate.savepoint.loader import Savepoint
from fstate.writers.writer import SavepointWriter
from tests.support import SAMPLES


def _same_tree(a, b) -> None:
    cmp = filecmp.dircmp(a, b)
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    assert not cmp.diff_files and not cmp.left_only and not cmp.right_only
    _, mismatch, errors = filecmp.cmpfiles(a, b, os.listdir(a), shallow=False)
    assert not mismatch and not errors


def test_modify_twice_gives_the_same_bytes(tmp_path):
    runner = CliRunner()
    for i in (1, 2):
        for sample, extra in (("keyed-hashmap-savepoint", ["--rename", "keyed=counter", "--deep"]),
                              ("keyed-rocksdb-checkpoint", ["--max-parallelism", "256"])):
            out = tmp_path / f"{sample}-{i}"
            result = runner.invoke(app, ["modify", str(SAMPLES / sample), "--out", str(out), *extra])
            assert result.exit_code == 0, result.output
    for sample in ("keyed-hashmap-savepoint", "keyed-rocksdb-checkpoint"):
        _same_tree(tmp_path / f"{sample}-1", tmp_path / f"{sample}-2")
        assert len(os.listdir(tmp_path / f"{sample}-1")) > 1  # state files, not only _metadata


@pytest.mark.spark
def test_bootstrap_twice_gives_the_same_bytes(spark, tmp_path):
    rows = [(f"k-{i}", i, "x" * (i % 50)) for i in range(3000)]  # big enough for state files
    for i in (1, 2):
        df = spark.createDataFrame(rows, "key string, total long, note string")
        SavepointWriter(128, spark).with_keyed_state("keyed", df, parallelism=2).write(str(tmp_path / f"b{i}"))
    _same_tree(tmp_path / "b1", tmp_path / "b2")
    files = [f for f in os.listdir(tmp_path / "b1") if f != "_metadata"]
    assert files and not [f for f in files if f.endswith(".part")]
    assert Savepoint.open(str(tmp_path / "b1")).operator("keyed").parallelism == 2


def test_equal_streams_share_a_name_and_others_do_not(tmp_path):
    a = write_stream(str(tmp_path), b"a" * 100, inline_threshold=10)
    b = write_stream(str(tmp_path), b"a" * 100, inline_threshold=10)
    c = write_stream(str(tmp_path), b"b" * 100, inline_threshold=10)
    assert a.relative_path == b.relative_path != c.relative_path
    assert sorted(os.listdir(tmp_path)) == sorted([a.relative_path, c.relative_path])  # no .part left
    inline = write_stream(str(tmp_path), b"a" * 100, inline_threshold=1000)
    assert inline.name != a.relative_path  # an inline handle's name is not a file's
    assert len(stream_name(bytes(32))) == 36 and stream_name(bytes(32)) != stream_name(b"\x01" * 32)
