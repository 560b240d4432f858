"""The keyed-state seam: each subtask's layout and decoder are chosen once, by what is stored and by
the compiled path's switch, and batches come only from the columnar decoder."""

from __future__ import annotations

import pytest

from fstate.savepoint import _fastpath, columnar, keyed_state
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
            compiled = _fastpath.available() and state.layout == keyed_state.CANONICAL
            assert state.decoder == (keyed_state.COMPILED if compiled else keyed_state.PYTHON)
            assert (state.table_rows(list(range(2)), flatten=False, ns_mode="void") is None) != compiled
            assert all(source.start_key_group <= entry[1] <= source.end_key_group for entry in state.entries())
        if state.layout != keyed_state.ROCKSDB:
            with source.open(strict=True) as strict:  # verify decodes in Python
                assert strict.decoder == keyed_state.PYTHON
                assert list(strict.entries()) == list(state.entries())
        with source.open() as state:
            ids = [i for i, _ in state.meta.value_states]
            monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")  # switched after the choice: not read again
            rows = list(state.rows(ids))
            with source.open() as pure:
                assert pure.decoder == keyed_state.PYTHON
                assert list(pure.rows(ids)) == rows and rows
        monkeypatch.delenv("FSTATE_PURE_PYTHON")


@pytest.mark.parametrize("sample", sorted(LAYOUTS))
def test_batches_only_from_the_columnar_decoder(sample, monkeypatch):
    """Batches come from every layout on the compiled path (not strict), and hold the rows
    table_rows / rows give for the same key groups; every other choice answers None (the caller
    reads rows)."""
    if LAYOUTS[sample] == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    source = _op(sample).keyed_states()[0]
    with source.open(key_groups=range(0, 128, 2)) as state:
        ids = [i for i, _ in state.meta.value_states]
        names = ["key"] + [state.meta.states[i].name for i in ids]
        batches = state.batches(ids, flatten=False, ns_mode="void", names=names)
        if not (_fastpath.available() and columnar.available()):
            assert batches is None
        else:
            assert batches is not None
            got = batch_rows(batches)
            if state.decoder == keyed_state.COMPILED:
                want = list(state.table_rows(ids, flatten=False, ns_mode="void"))
            else:
                want = [(key, *values) for _, key, _, values in state.rows(ids)]
            assert got and repr(got) == repr(want)
    if LAYOUTS[sample] != keyed_state.ROCKSDB:
        with source.open(strict=True) as strict:
            assert strict.batches(ids, flatten=False, ns_mode="void", names=names) is None
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    with source.open() as pure:
        assert pure.batches(ids, flatten=False, ns_mode="void", names=names) is None


@pytest.mark.parametrize("sample", sorted(LAYOUTS))
def test_every_layout_is_read_in_batches(sample):
    if not (_fastpath.available() and columnar.available()):
        pytest.skip("the compiled extensions are not built")
    if LAYOUTS[sample] == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    with _op(sample).keyed_states()[0].open() as state:
        ids = [i for i, _ in state.meta.value_states]
        names = ["key"] + [state.meta.states[i].name for i in ids]
        assert state.batches(ids, flatten=False, ns_mode="void", names=names) is not None
