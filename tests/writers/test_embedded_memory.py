"""The embedded engine's writes hold configured buffers, not rows: a small spill buffer spills many
times and writes the bytes of the in-memory path (bootstrap, compiled and Python encoders; re-keying);
Parquet sources are read a row group at a time, every row in order; the transform's decoded tables
are scanned a batch at a time, as often as DuckDB asks. Memory itself is measured by
bench/write_embedded.py (bench/RESULTS.md), never asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow
import pyarrow.dataset
import pyarrow.parquet
import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.writers import arrow_frames, keyed_stream
from fstate.writers.transform_embedded import IpcFiles
from tests.flink.restore import tree_hash
from tests.support import ROOT, sample_snapshot

KEYED = sample_snapshot(ROOT / "samples" / "keyed-hashmap-savepoint")


def _source(tmp_path: Path, rows: int = 4000) -> Path:
    """A Parquet file of several row groups and its bootstrap spec (a value and a list state, timers)."""
    data = tmp_path / "rows.parquet"
    table = pyarrow.table({"key": [f"user-{i}" for i in range(rows)], "count": list(range(rows)),
                           "recent": [[f"e{i}", "ü" * (i % 4)] if i % 7 else None for i in range(rows)],
                           "timers": [[1000 + i] if i % 5 == 0 else None for i in range(rows)]})
    pyarrow.parquet.write_table(table, data, row_group_size=700)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"max_parallelism": 128, "operators": [{
        "uid": "counter", "parallelism": 2, "keyed": {
            "source": {"path": str(data)}, "key": "key", "event_timers": "timers",
            "states": {"count": "LONG", "recent": "LIST<STRING>"}}}]}))
    return spec


class _CountingSpill(keyed_stream.KeyGroupSpill):
    made: list[keyed_stream.KeyGroupSpill] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _CountingSpill.made.append(self)


def _spilled(monkeypatch, flush_bytes: int, write) -> int:
    """Flushes of the spills made while ``write()`` runs with ``flush_bytes`` buffers."""
    monkeypatch.setattr(keyed_stream, "FLUSH_BYTES", flush_bytes)
    monkeypatch.setattr(keyed_stream, "KeyGroupSpill", _CountingSpill)
    _CountingSpill.made = []
    write()
    return sum(spill.flushes for spill in _CountingSpill.made)


@pytest.mark.parametrize("pure_python", [False, True])
def test_a_small_spill_buffer_spills_often_and_writes_the_bytes_of_the_in_memory_path(
        pure_python, monkeypatch, tmp_path):
    if pure_python:
        monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    spec = _source(tmp_path)

    def bootstrap(out: str):
        res = CliRunner().invoke(app, ["bootstrap", "--spec", str(spec), "--out", str(tmp_path / out),
                                       "--engine", "embedded"])
        assert res.exit_code == 0, res.output

    held = _spilled(monkeypatch, 1 << 62, lambda: bootstrap("held"))
    spilled = _spilled(monkeypatch, 256, lambda: bootstrap("spilled"))
    # held: each range's records appended once, when the streams are written; spilled: many times a range
    assert held <= 128 and spilled > 4 * held
    assert tree_hash(tmp_path / "spilled") == tree_hash(tmp_path / "held")


def test_re_keying_spills_and_writes_the_bytes_of_the_in_memory_path(monkeypatch, tmp_path):
    def rekey(out: str):
        res = CliRunner().invoke(app, ["modify", str(KEYED), "--out", str(tmp_path / out), "--max-parallelism", "256",
                                       "--engine", "embedded"])
        assert res.exit_code == 0, res.output

    held = _spilled(monkeypatch, 1 << 62, lambda: rekey("held"))
    spilled = _spilled(monkeypatch, 64, lambda: rekey("spilled"))
    assert spilled > 4 * held > 0
    assert tree_hash(tmp_path / "spilled") == tree_hash(tmp_path / "held")


def test_parquet_sources_are_read_a_row_group_at_a_time_every_row_in_order(tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    for n in range(2):
        pyarrow.parquet.write_table(pyarrow.table({"k": [f"{n}-{i}" for i in range(1000)], "v": list(range(1000)),
                                                   "s": [{"a": i} for i in range(1000)]}),
                                    parts / f"part-{n}.parquet", row_group_size=300)
    pyarrow.parquet.write_table(pyarrow.table({"k": pyarrow.array([], pyarrow.string()),
                                               "v": pyarrow.array([], pyarrow.int64()),
                                               "s": pyarrow.array([], pyarrow.struct([("a", pyarrow.int64())]))}),
                                parts / "part-2.parquet")
    frame = arrow_frames.file_frame(str(parts), "parquet", {}, "source")
    expected = pyarrow.dataset.dataset(parts, format="parquet").to_table()
    assert frame.arrow_schema == expected.schema
    batches = list(frame.open(["v", "k"]))
    assert max(batch.num_rows for batch in batches) <= 300 and len(batches) == 8
    assert pyarrow.Table.from_batches(batches) == expected.select(["v", "k"])
    assert frame.size == sum(p.stat().st_size for p in parts.iterdir())


def test_the_decoded_tables_are_scanned_anew_each_time_duckdb_reads_them(tmp_path):
    import duckdb

    schema = pyarrow.schema([("key", pyarrow.string()), ("total", pyarrow.int64())])
    paths = []
    for n in range(3):
        paths.append(str(tmp_path / f"t-{n}.arrow"))
        with pyarrow.ipc.new_file(paths[-1], schema) as out:
            for start in range(0, 100, 30):
                out.write_batch(pyarrow.record_batch({"key": [f"{n}-{i}" for i in range(start, min(100, start + 30))],
                                                      "total": list(range(start, min(100, start + 30)))},
                                                     schema=schema))
    connection = duckdb.connect()
    connection.register("t", IpcFiles(schema, paths))
    joined = connection.sql("SELECT count(*), sum(a.total + b.total) FROM t a JOIN t b ON a.key = b.key").fetchall()
    assert joined == [(300, 2 * 3 * sum(range(100)))]
    connection.register("empty", IpcFiles(schema, []))
    assert connection.sql("SELECT count(*) FROM empty").fetchall() == [(0,)]
