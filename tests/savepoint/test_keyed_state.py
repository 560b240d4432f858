"""The keyed-state seam: each subtask's layout and decoder are chosen once, by what is stored and by
the compiled path's switch; the keyed table comes through one interface (decoders.new_decoder),
never None, and its batches come from the columnar decoder where it covers the states."""

from __future__ import annotations

import pytest

from fstate.savepoint import _fastpath, columnar, keyed_state, rocksdb_native
from fstate.savepoint.decoders import RowShape, TableDecoder, new_decoder
from fstate.savepoint.loader import Savepoint
from tests.savepoint.test_columnar import batch_rows
from tests.support import ROOT, sample_snapshot

LAYOUTS = {"keyed-hashmap-savepoint": keyed_state.CANONICAL, "keyed-rocksdb-savepoint": keyed_state.CANONICAL,
           "keyed-hashmap-checkpoint": keyed_state.HEAP_NATIVE, "keyed-rocksdb-checkpoint": keyed_state.ROCKSDB}


def _op(sample):
    return Savepoint.open(str(sample_snapshot(ROOT / "samples" / sample))).operator("keyed")


@pytest.mark.parametrize("sample", sorted(LAYOUTS))
def test_layout_and_decoder(sample, monkeypatch):
    if LAYOUTS[sample] == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    op = _op(sample)
    sources = op.keyed_states()
    assert [s.subtask for s in sources] == list(range(op.parallelism))
    for source in sources:
        with source.open() as state:
            assert state.layout == LAYOUTS[sample]
            compiled = _fastpath.available() and (state.layout == keyed_state.CANONICAL or (
                state.layout == keyed_state.ROCKSDB and rocksdb_native.available()))  # the C table reader's pairs
            assert state.decoder == (keyed_state.COMPILED if compiled else keyed_state.PYTHON)
            with monkeypatch.context() as without_columnar:
                without_columnar.setattr(columnar, "_columnar", None)
                assert new_decoder(state, [0, 1]).name == ("compiled" if compiled else "python")
            assert all(source.start_key_group <= entry[1] <= source.end_key_group for entry in state.entries())
        with source.open(strict=True) as strict:  # verify decodes in Python
            assert strict.decoder == keyed_state.PYTHON
            with source.open() as state:
                assert list(strict.entries()) == list(state.entries())
        with source.open() as state:
            ids = [i for i, _ in state.meta.value_states]
            monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")  # switched after the choice: not read again
            rows = list(state.rows(ids))
            with source.open() as pure:
                assert pure.decoder == keyed_state.PYTHON
                assert list(pure.rows(ids)) == rows and rows
        monkeypatch.delenv("FSTATE_PURE_PYTHON")


def _no_rows(rows):
    raise AssertionError("the columnar decoder was expected to make the batches")


@pytest.mark.parametrize("sample", sorted(LAYOUTS))
def test_one_decoder_interface(sample, monkeypatch):
    """new_decoder answers with a TableDecoder for every choice (compiled or not, strict, flat, a
    key filter); its batches are the columnar decoder's on the compiled path (every layout) and hold
    the rows its rows() give; elsewhere they are built from those rows by the caller's rule."""
    if LAYOUTS[sample] == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    source = _op(sample).keyed_states()[0]
    compiled = _fastpath.available() and columnar.available()
    with source.open(key_groups=range(0, 128, 2)) as state:
        ids = [i for i, _ in state.meta.value_states]
        names = ["key"] + [state.meta.states[i].name for i in ids]
        decoder = new_decoder(state, ids)
        assert isinstance(decoder, TableDecoder)
        assert decoder.name == ("columnar" if compiled else "python")
        want = list(decoder.rows())
        if compiled:
            got = batch_rows(decoder.batches(names, _no_rows))
            assert got and repr(got) == repr(want)
        assert want == [(key, *values) for _, key, _, values in state.rows(ids)]
        for shape, key_filter in ((RowShape(flat=True), None), (RowShape(), frozenset())):
            other = new_decoder(state, ids[:1], shape, key_filter=key_filter)
            assert isinstance(other, TableDecoder) and other.name == "python"
            assert list(other.batches(names, lambda rows: [list(rows)])) == [list(other.rows())]
        assert isinstance(new_decoder(state, (), timers=True), TableDecoder)
    if LAYOUTS[sample] != keyed_state.ROCKSDB:
        with source.open(strict=True) as strict:
            assert new_decoder(strict, ids).name == "python"
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    with source.open() as pure:
        assert new_decoder(pure, ids).name == "python"


@pytest.mark.parametrize("sample", sorted(LAYOUTS))
def test_every_layout_is_read_in_batches(sample):
    if not (_fastpath.available() and columnar.available()):
        pytest.skip("the compiled extensions are not built")
    if LAYOUTS[sample] == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    with _op(sample).keyed_states()[0].open() as state:
        ids = [i for i, _ in state.meta.value_states]
        names = ["key"] + [state.meta.states[i].name for i in ids]
        assert new_decoder(state, ids).name == "columnar"
        assert sum(batch.num_rows for batch in new_decoder(state, ids).batches(names, _no_rows)) > 0
