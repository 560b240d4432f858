"""RocksDB tables are sized by their table files (SSTs) and read in key-group ranges: the same rows
in the same order as one partition a subtask, on the embedded engine's pool too."""

from __future__ import annotations

import os

import pytest

from fstate.readers import engine, tables
from fstate.readers.planning import build_table
from fstate.savepoint import pool, streams
from tests.support import sample_dirs, sample_snapshot

pytest.importorskip("rocksdict")

ROCKS = next(s for s in sample_dirs() if s.name == "keyed-rocksdb-checkpoint")
OPTIONS = {"path": str(sample_snapshot(ROCKS)), "uid": "keyed"}


def _table(monkeypatch, split_bytes: int, **extra):
    monkeypatch.setattr(tables, "ROCKSDB_SPLIT_BYTES", split_bytes)
    return build_table({**OPTIONS, **extra})


def test_partition_bytes_count_the_sst_files(monkeypatch):
    table = _table(monkeypatch, 1 << 40)
    assert len(table.partitions) == 3  # one a subtask
    for partition in table.partitions:
        ssts = [len(src.data) if src.data is not None else os.path.getsize(src.path)
                for name, src in partition.handle.files if name.endswith(".sst")]
        assert ssts and all(ssts)
        metadata = len(streams.read_source(partition.handle.metadata))
        assert engine.partition_bytes(partition) == sum(ssts) > metadata  # not the meta-data stream


@pytest.mark.parametrize("extra", [{}, {"table": "timers"}, {"state": "counts"}])
def test_key_group_ranges_give_the_same_rows(monkeypatch, extra):
    whole = _table(monkeypatch, 1 << 40, **extra)
    split = _table(monkeypatch, 4096, **extra)
    assert len(split.partitions) > 2 * len(whole.partitions)
    for subtask in {p.subtask for p in whole.partitions}:
        pieces = [p.key_groups for p in split.partitions if p.subtask == subtask]
        handle = next(p.handle for p in whole.partitions if p.subtask == subtask)
        assert pieces[0][0] == handle.start_key_group and pieces[-1][1] == handle.end_key_group
        assert all(a[1] + 1 == b[0] for a, b in zip(pieces, pieces[1:]))  # contiguous, in order
    assert sum(engine.partition_bytes(p) for p in split.partitions) <= engine.table_bytes(whole)
    assert engine.table_bytes(whole) - engine.table_bytes(split) < len(split.partitions)  # rounding only
    rows = list(whole.rows())
    assert rows and list(split.rows()) == rows
    assert engine.read_table(split).equals(engine.read_table(whole))


def test_key_filter_is_kept_within_each_range(monkeypatch):
    whole = _table(monkeypatch, 1 << 40)
    keys = sorted({row[0] for row in whole.rows()})[:3]
    split = build_table({**OPTIONS}, keys=keys)
    assert sorted(split.rows()) == sorted(build_table({**OPTIONS}, keys=keys).rows())
    monkeypatch.setattr(tables, "ROCKSDB_SPLIT_BYTES", 4096)
    narrow = build_table({**OPTIONS}, keys=keys)
    assert len(narrow.partitions) <= len(keys)  # only the ranges holding a wanted key group
    assert list(narrow.rows()) == list(split.rows()) and len(list(narrow.rows())) >= len(keys)


def test_the_pool_reads_key_group_ranges(monkeypatch):
    whole = _table(monkeypatch, 1 << 40)
    split = _table(monkeypatch, 8192)
    monkeypatch.setattr(pool, "SMALL_BYTES", 0)
    assert engine.workers_for(split, 2) == 2
    assert engine.read_table(split, workers=2).equals(engine.read_table(whole, workers=1))


def test_remote_files_are_not_split():
    """Each piece opens the whole database: remote files would be downloaded once a piece."""
    from fstate.savepoint import rocksdb

    def source(path):
        files = (("000010.sst", streams.StreamSource(path, label="sst")),)
        return rocksdb.RocksDBSource("s", 0, 127, streams.StreamSource(None, data=b""), files, table_bytes=100 << 20)

    assert len(source("/local/000010.sst").split(1 << 20)) == 100
    assert source("s3://bucket/shared/000010.sst").split(1 << 20) == [(0, 127)]
