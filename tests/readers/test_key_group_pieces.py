"""A key group larger than the piece size is decoded in pieces (``columnar.PIECE_BYTES``,
``_speedups.key_group_pieces``): the same rows in the same order as the whole key group, and the
whole key group when the states are not aligned. The piece size is lowered here instead of making
big state."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow
import pyarrow.parquet
import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import engine_files
from fstate.readers.planning import build_table
from fstate.readers.options import savepoint_source_options
from fstate.savepoint import _compiled, columnar, keyed
from fstate.savepoint.loader import Savepoint
from tests.support import ROOT, sample_snapshot

speedups = _compiled.speedups
pytestmark = pytest.mark.skipif(speedups is None or not columnar.available(), reason="the C extensions are not built")


def _bootstrapped(tmp_path: Path, rows: int = 6000) -> Path:
    """A savepoint of a value and a list state (some keys without a list) and event timers (a state
    the keyed table skips), max parallelism 128: key groups of about 2 KB."""
    data = tmp_path / "rows.parquet"
    pyarrow.parquet.write_table(pyarrow.table({
        "key": [f"user-{i}" for i in range(rows)], "count": list(range(rows)),
        "recent": [[f"e{i}", "ü" * (i % 4)] if i % 7 else None for i in range(rows)],
        "timers": [[1000 + i] if i % 5 == 0 else None for i in range(rows)]}), data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({"max_parallelism": 128, "operators": [{
        "uid": "counter", "parallelism": 2, "keyed": {
            "source": {"path": str(data)}, "key": "key", "event_timers": "timers",
            "states": {"count": "LONG", "recent": "LIST<STRING>"}}}]}))
    out = tmp_path / "savepoint"
    result = CliRunner().invoke(app, ["bootstrap", "--spec", str(spec), "--out", str(out), "--engine", "embedded"])
    assert result.exit_code == 0, result.output
    return out


class _Counted:
    """``_speedups`` with its key_group_pieces counted: key groups cut, and left whole."""

    def __init__(self):
        self.cut = self.whole = 0

    def __getattr__(self, name):
        return getattr(speedups, name)

    def key_group_pieces(self, *args):
        pieces = speedups.key_group_pieces(*args)
        if pieces is None:
            self.whole += 1
        else:
            self.cut += 1
        return pieces


def _parquet(table, out: Path) -> pyarrow.Table:
    engine_files.write_table(table, str(out), "parquet", workers=1)
    return pyarrow.parquet.read_table(sorted(out.glob("part-*.parquet")))


def _pieces_and_whole(monkeypatch, tmp_path: Path, options: dict, piece_bytes: int) -> tuple:
    """The table's Parquet output read whole and in pieces of ``piece_bytes``, and the counts."""
    table = build_table(options)
    counted = _Counted()
    monkeypatch.setattr(columnar, "_speedups", counted)
    whole = _parquet(table, tmp_path / "whole")
    assert counted.cut == 0 and counted.whole == 0  # every key group is smaller than the default
    monkeypatch.setattr(columnar, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(columnar, "SPLIT_ABOVE", piece_bytes)
    pieces = _parquet(table, tmp_path / "pieces")
    return whole, pieces, counted


def test_large_key_groups_read_in_pieces_give_the_same_parquet_row_for_row(monkeypatch, tmp_path):
    savepoint = _bootstrapped(tmp_path)
    options = savepoint_source_options(Savepoint.open(str(savepoint)), "counter")
    whole, pieces, counted = _pieces_and_whole(monkeypatch, tmp_path, options, 300)
    assert counted.cut == 128 and counted.whole == 0
    assert whole.num_rows == 6000
    assert pieces.equals(whole)


def test_flinks_heap_savepoint_in_pieces_gives_the_same_rows(monkeypatch, tmp_path):
    """Flink's heap backend writes the states of a key group in nearly the same key order: cut where
    that holds, whole where not; the same rows either way."""
    sample = Savepoint.open(str(sample_snapshot(ROOT / "samples" / "keyed-hashmap-savepoint")))
    # its states but the map state (a map state's key groups are read whole)
    options = savepoint_source_options(sample, "keyed", state="total,avg,sum,events")
    whole, pieces, counted = _pieces_and_whole(monkeypatch, tmp_path, options, 40)
    assert counted.cut > 0
    assert whole.num_rows > 0 and pieces.equals(whole)


def _entry(kg: int, key: bytes, value: bytes) -> tuple[bytes, bytes]:
    return bytes((kg,)) + key, value


def _key_group(kg: int, first: list[bytes], second: list[bytes]) -> bytes:
    return keyed.encode_key_group(kg, {0: [_entry(kg, k, b"v" * 8) for k in first],
                                       1: [_entry(kg, k, b"w" * 3) for k in second]})


def _runs_by_state(data: bytes, pieces) -> dict[int, list[list[bytes]]]:
    """Per state, the keys of each piece's run (key group prefix left out)."""
    out: dict[int, list[list[bytes]]] = {}
    for runs in pieces:
        for sid, start, stop, last in runs:
            pos, found = start, []
            while pos < stop:
                klen = int.from_bytes(data[pos:pos + 4], "big")
                found.append(data[pos + 5:pos + 4 + klen])
                last_key = pos + 4
                pos += 4 + klen
                pos += 4 + int.from_bytes(data[pos:pos + 4], "big")
            assert pos == stop and last_key == last
            out.setdefault(sid, []).append(found)
    return out


def test_key_group_pieces_give_each_entry_to_its_rows_piece():
    keys = [f"k{i:03d}".encode() for i in range(60)]
    data = _key_group(5, keys, keys[::3])
    pieces = speedups.key_group_pieces(data, 0, len(data), 1, (0, 1), 256)
    assert pieces is not None and len(pieces) == -(-len(data) // 256)
    runs = _runs_by_state(data, pieces)
    assert [k for run in runs[0] for k in run] == keys  # the first state cut in order, every entry once
    assert [k for run in runs[1] for k in run] == keys[::3]
    piece_of = {k: i for i, run in enumerate(runs[0]) for k in run}
    for i, run in enumerate(runs[1]):
        assert all(piece_of[k] == i for k in run)
    # the first state alone selected: the second is cut by bytes, every entry once
    alone = _runs_by_state(data, speedups.key_group_pieces(data, 0, len(data), 1, (0,), 256))
    assert [k for run in alone[1] for k in run] == keys[::3]


def _unsorted_key_group(kg: int, sections: list[list[bytes]]) -> bytes:
    """A canonical key group whose states' entries are in the given order (state i: sections[i])."""
    out = bytearray()
    for sid, keys in enumerate(sections):
        out += sid.to_bytes(2, "big")
        for i, key in enumerate(keys):
            first = kg | (keyed.META_FOLLOWS if i == len(keys) - 1 else 0)
            out += (len(key) + 1).to_bytes(4, "big") + bytes((first,)) + key + (3).to_bytes(4, "big") + b"val"
    return bytes(out + keyed.END_OF_KEY_GROUP.to_bytes(2, "big"))


def _check_pieces(data: bytes, pieces, first: list[bytes], second: list[bytes]) -> None:
    runs = _runs_by_state(data, pieces)
    assert [k for run in runs[0] for k in run] == first
    assert [k for run in runs[1] for k in run] == second
    piece_of = {k: i for i, run in enumerate(runs[0]) for k in run}
    for i, run in enumerate(runs[1]):
        assert all(piece_of[k] == i for k in run)


def test_keys_swapped_across_a_cut_move_the_cut():
    """Flink's heap backend: the second state's keys in the first's order but for neighbours swapped;
    wherever the swap is, the pieces keep each key's entries in one piece (a cut moves past it)."""
    keys = [f"k{i:03d}".encode() for i in range(60)]
    for at in range(len(keys) - 1):
        second = list(keys)
        second[at], second[at + 1] = second[at + 1], second[at]
        data = _unsorted_key_group(5, [keys, second])
        pieces = speedups.key_group_pieces(data, 0, len(data), 1, (0, 1), 200)
        assert pieces is not None and len(pieces) > 1
        _check_pieces(data, pieces, keys, second)


@pytest.mark.parametrize("case", ["small", "not in the first state", "no state selected", "bad framing",
                                  "far out of order"])
def test_key_groups_that_are_not_cut(case):
    keys = [f"k{i:03d}".encode() for i in range(60)]
    data = _key_group(5, keys, keys[1:] + [b"zzz"] if case == "not in the first state" else keys)
    piece_bytes, selected = 256, (0, 1)
    if case == "small":
        piece_bytes = len(data)
    elif case == "no state selected":
        selected = (7,)
    elif case == "bad framing":
        data = data[:-1]
    elif case == "far out of order":  # the second state's keys reversed: the window cannot hold them
        many = [f"k{i:04d}".encode() for i in range(1000)]
        data = _unsorted_key_group(5, [many, many[::-1]])
    assert speedups.key_group_pieces(data, 0, len(data), 1, selected, piece_bytes) is None
