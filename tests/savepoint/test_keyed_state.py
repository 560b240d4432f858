"""The keyed-state seam: each subtask's layout and decoder are chosen once, by what is stored and by
the compiled path's switch, and the columnar hook is called with what its documentation promises."""

from __future__ import annotations

import pytest

from fstate.savepoint import _fastpath, keyed_state
from fstate.savepoint.loader import Savepoint
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
def test_the_columnar_hook(sample, monkeypatch):
    if LAYOUTS[sample] == keyed_state.ROCKSDB:
        pytest.importorskip("rocksdict")
    calls = []

    def decoder(**kwargs):
        calls.append(kwargs)
        return iter(["batch"])

    source = _op(sample).keyed_states()[0]
    compiled = _fastpath.available()
    with source.open(key_groups=range(0, 128, 2)) as state:
        ids = [i for i, _ in state.meta.value_states]
        assert state.batches(ids, flatten=False, ns_mode="void") is None  # nothing installed
        previous = keyed_state.set_columnar_decoder(decoder)
        try:
            batches = state.batches(ids, flatten=True, ns_mode="window")
            monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
            with source.open() as pure:
                assert pure.batches(ids, flatten=False, ns_mode="void") is None  # compiled path off
        finally:
            assert keyed_state.set_columnar_decoder(previous) is decoder
    if state.layout == keyed_state.ROCKSDB or not compiled:
        assert batches is None and not calls
        return
    assert list(batches) == ["batch"]
    (call,) = calls
    assert set(call) == {"buf", "regions", "layout", "meta", "max_parallelism", "codecs", "state_ids", "source",
                         "flatten", "ns_mode"}
    assert (call["layout"], call["flatten"], call["ns_mode"], call["state_ids"]) == (state.layout, True, "window", ids)
    assert call["buf"] is state.buf and call["meta"] is state.meta and call["codecs"] is state.codecs
    regions = list(call["regions"])
    assert regions and all(kg % 2 == 0 for kg, _, _ in regions)
    assert regions == [r for r in state.regions if r[0] % 2 == 0]
