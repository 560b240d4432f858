"""Keys Python cannot hash (an SQL key with an ARRAY field decodes to a tuple holding a list; list and
map keys) in ``fstate sizes``: the compiled pass counts them under a frozen copy
(savepoint/keyed_codecs.frozen, handed to Scanner.measure), never falling back to the entry-by-entry
pass; the same report as that pass, the numbers the data gives, and growth joins them."""

from __future__ import annotations

import pyarrow
import pytest

from fstate.readers import sizes_measure
from fstate.readers.sizes import state_sizes
from fstate.readers.sizes_growth import state_growth
from fstate.savepoint import _fastpath, keyed, keyed_codecs
from fstate.writers.arrow_frames import table_frame
from fstate.writers.spec import parse_type
from fstate.writers.writer import SavepointWriter
from tests.sizes_compare import expected_key_growth, measured_keys, reported_key_growth

KEY_TYPE = "SQL ROW<a STRING, b ARRAY<INT>>"
KEYS = [{"a": f"u{i % 7}", "b": list(range(i % 5))} for i in range(35)]  # 35 distinct keys


def _events(i: int, more: int = 0) -> list[str]:
    return [f"e{j}" for j in range(i % 9 + more)]


def _write(path, more: dict[int, int] | None = None) -> str:
    more = more or {}
    table = pyarrow.table({"key": KEYS, "total": list(range(len(KEYS))),
                           "events": [_events(i, more.get(i, 0)) for i in range(len(KEYS))]})
    SavepointWriter(max_parallelism=128).with_keyed_state(
        "op", table_frame(table), key="key", key_type=KEY_TYPE, states={"total": "LONG", "events": "LIST<STRING>"},
        parallelism=2).write(str(path))
    return str(path)


def _no_slow_path(*args):
    raise AssertionError("measured entry by entry")


@pytest.fixture(autouse=True)
def _compiled():
    if not _fastpath.available():
        pytest.skip("the compiled scanner is not built")


def test_unhashable_keys_take_the_compiled_pass(tmp_path, monkeypatch):
    path = _write(tmp_path / "sp")
    monkeypatch.setattr(sizes_measure, "_measure_entries", _no_slow_path)
    report = state_sizes(path, top=4, parallelisms=[3], at=0)
    states = {s.name: s for s in report.operator("op").states}
    assert states["total"].keys == states["total"].entries == len(KEYS)
    lengths = {(key["a"], tuple(key["b"])): len(_events(i)) for i, key in enumerate(KEYS)}
    assert states["events"].keys == sum(1 for n in lengths.values() if n)
    assert states["events"].elements == sum(lengths.values())
    want = sorted(((n, sizes_measure.key_text((a, list(b)))) for (a, b), n in lengths.items() if n),
                  key=lambda pair: (-pair[0], pair[1]))[:4]
    assert [(k.elements, sizes_measure.key_text(k.key)) for k in states["events"].top_by_elements] == want
    monkeypatch.undo()
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")  # entry by entry, keys frozen in Python
    assert state_sizes(path, top=4, parallelisms=[3], at=0).to_dict() == report.to_dict()


def test_the_scanner_counts_list_and_map_keys_under_their_frozen_copy():
    for key_type, keys in (("LIST<INT>", [[1, 2], [3], [], [1, 2, 3]]),
                           ("MAP<STRING, INT>", [{"a": 1}, {"b": 2, "c": 3}])):
        meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, parse_type(key_type),
                                      [keyed.value_state_meta("m", "MAP", parse_type("MAP<STRING, LONG>"))])
        encoder, pairs = keyed.PairEncoder(meta, 0, 128), []
        for i, key in enumerate(keys):  # key i: i + 1 map entries
            pairs += encoder.pairs(5, key, [(f"u{j}", j) for j in range(i + 1)])
        block = keyed.encode_key_group(5, {0: pairs})
        scan = _fastpath.compiled_scanner(meta, keyed_codecs.state_codecs(meta, 128), 128, None, "test")
        found = [{}]
        (totals,) = scan.measure(block, 0, len(block), 5, found, None, False, keyed_codecs.frozen)
        assert totals[0] == len(pairs) and totals[1] == sum(len(k) + len(v) for k, v in pairs)
        assert {identity: (value[1], value[3]) for identity, value in found[0].items()} == {
            keyed_codecs.frozen(key): (i + 1, key) for i, key in enumerate(keys)}, key_type
        with pytest.raises(TypeError):  # without a freeze, such a key is no dict key
            scan.measure(block, 0, len(block), 5, [{}], None, False)


def test_growth_joins_unhashable_keys(tmp_path, monkeypatch):
    old, new = _write(tmp_path / "old"), _write(tmp_path / "new", {3: 5, 11: 1, 20: 30})
    monkeypatch.setattr(sizes_measure, "_measure_entries", _no_slow_path)
    report = state_growth(old, new, top=2).to_dict()
    expected = expected_key_growth(measured_keys(old, "op"), measured_keys(new, "op"), 2)
    assert reported_key_growth(report, "op") == expected
    assert expected["events"]["counts"]["grown_keys"] == 3
    assert [row["key"] for row in expected["events"]["grown"]] == [
        sizes_measure.key_text((KEYS[i]["a"], KEYS[i]["b"])) for i in (20, 3)]
