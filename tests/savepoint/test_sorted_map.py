"""The table runtime's SortedMapSerializer (SortedMapType): the ``sorted-map`` state of a Top-N over an
updating input (RetractableTopNFunction), sort key -> how many input rows have it.

tests/savepoint/data/sql-retractable-rank-header.bin is the keyed-backend header of a real Flink 2.3
savepoint of tests/flink/jobs/v2/RetractableTopNJob.java (its Top-N ``ORDER BY total DESC, cnt ASC``);
VALUE_K2 is key k2's ``sorted-map`` value in the same savepoint.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from fstate.savepoint import _fastpath, columnar, handles, keyed
from fstate.savepoint.binary import DataInput, DataOutput
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.types import LONG, RowDataType, SortedMapType, TtlType
from fstate.savepoint.types.sorted_map import RECORD_COMPARATOR, SORTED_MAP, SortKeyOrder, comparator_sort_key
from fstate.savepoint.types.logical import LogicalType
from fstate.savepoint.types.snapshots import read_versioned_snapshot
from tests.savepoint.test_strict_read import assert_corrupt_on_both, both_paths
from tests.support import dec, enc

HEADER = Path(__file__).parent / "data" / "sql-retractable-rank-header.bin"

#: k2: {(192, 6): 2, (158, 5): 1, (96, 3): 1} in the comparator's order (total DESC, cnt ASC); each sort
#: key a BinaryRowData (8-byte header, two little-endian BIGINT slots), each count a null flag and a long
VALUE_K2 = bytes.fromhex(
    "00000003"
    "00000018" "0000000000000000" "c000000000000000" "0600000000000000" "00" "0000000000000002"
    "00000018" "0000000000000000" "9e00000000000000" "0500000000000000" "00" "0000000000000001"
    "00000018" "0000000000000000" "6000000000000000" "0300000000000000" "00" "0000000000000001")
K2 = {(192, 6): 2, (158, 5): 1, (96, 3): 1}


def _states():
    meta = keyed.read_keyed_proxy(HEADER.read_bytes())
    return meta, {s.name: s for s in meta.states}


def _sorted_map() -> SortedMapType:
    return _states()[1]["sorted-map"].value_type


def test_the_snapshot_of_a_real_savepoint():
    meta, states = _states()
    assert [(s.name, s.kind) for s in meta.states[:2]] == [("data-state", "MAP"), ("sorted-map", "VALUE")]
    sorted_map = states["sorted-map"].value_type
    assert isinstance(sorted_map, SortedMapType) and sorted_map.snapshot_version == 3
    assert sorted_map.key.types == (LogicalType("BIGINT"), LogicalType("BIGINT", False))
    assert sorted_map.value is LONG
    # the comparator: a ComparableRecordComparator (generated code) over both sort key fields
    assert sorted_map.comparator.startswith(b"\xac\xed\x00\x05") and RECORD_COMPARATOR.encode() in sorted_map.comparator
    assert sorted_map.order == (SortKeyOrder(0, False, True), SortKeyOrder(1, True, False))
    assert sorted_map.name == "SortedMap<RowData<f0 BIGINT, f1 BIGINT NOT NULL>, Long> (f0 DESC, f1 ASC)"
    # the data-state's map key is the same sort key row
    assert states["data-state"].value_type.key == sorted_map.key


def test_the_snapshot_writes_back_byte_for_byte():
    raw = HEADER.read_bytes()
    sorted_map = _sorted_map()
    out = DataOutput()
    sorted_map.write_snapshot(out)
    written = out.getvalue()
    assert raw.count(written) == 1  # the header holds exactly these bytes
    inp = DataInput(written)
    back = read_versioned_snapshot(inp)
    assert inp.remaining() == 0 and back == sorted_map and back.order == sorted_map.order
    head = 2 + len(SORTED_MAP) + 4  # class name, version: then the comparator as it was read
    assert written[head:head + len(sorted_map.comparator)] == sorted_map.comparator


def test_a_real_value_decodes_in_order_and_encodes_back():
    sorted_map = _sorted_map()
    value = dec(sorted_map, VALUE_K2)
    assert list(value.items()) == list(K2.items())  # Flink's order (total DESC), not Python's
    assert enc(sorted_map, value) == VALUE_K2
    assert enc(sorted_map, list(K2.items())) == VALUE_K2  # (key, count) pairs, as a modified value may come


def test_entries_are_written_in_the_comparators_order():
    """A map whose order was lost (Spark's maps keep none) is written as Flink writes it."""
    sorted_map = _sorted_map()
    assert enc(sorted_map, dict(reversed(K2.items()))) == VALUE_K2
    assert enc(sorted_map, {(96, 3): 1, (192, 6): 2, (158, 5): 1}) == VALUE_K2
    assert enc(sorted_map, [({"f1": 5, "f0": 158}, 1), ((192, 6), 2), ({"f0": 96, "f1": 3}, 1)]) == VALUE_K2
    # total DESC NULLS LAST, then cnt ASC NULLS FIRST: a null total is last, a null cnt first among equal totals
    value = {(None, 1): 1, (5, 2): 1, (5, None): 1, (7, 1): 1, (None, None): 1}
    assert list(dec(sorted_map, enc(sorted_map, value))) == [(7, 1), (5, None), (5, 2), (None, None), (None, 1)]


def test_how_fields_compare():
    def key(types, order):
        return comparator_sort_key(order, RowDataType(tuple(types), tuple(LONG for _ in types)))

    string = LogicalType("VARCHAR", length=10)
    by_string = key([string], (SortKeyOrder(0, True, False),))
    # strings byte by byte (UTF-8, unsigned): a prefix first, 'Z' < 'a' < 'é' < '\uffff' < an emoji
    words = ["a", "", "ab", "Z", "é", "\U0001f600", "\uffff"]
    assert sorted(words, key=lambda w: by_string((w,))) == ["", "Z", "a", "ab", "é", "\uffff", "\U0001f600"]
    by_flag = key([LogicalType("BOOLEAN")], (SortKeyOrder(0, False, True),))
    assert sorted([True, None, False], key=lambda b: by_flag((b,))) == [True, False, None]
    # fields fstate does not know how Flink compares, an unknown comparator: the order given is kept
    assert key([LogicalType("ROW")], (SortKeyOrder(0, True, False),)) is None
    assert key([string], None) is None
    assert key([string], (SortKeyOrder(3, True, False),)) is None


def test_null_counts_and_the_empty_map():
    sorted_map = _sorted_map()
    for value in ({}, {(1, 1): None, (None, 2): 3}):  # in the comparator's order (total DESC NULLS LAST)
        raw = enc(sorted_map, value)
        assert dec(sorted_map, raw) == value and list(dec(sorted_map, raw)) == list(value)
    assert enc(sorted_map, {(1, 1): None})[-1:] == b"\x01"  # a null count is its flag alone


def test_a_key_twice_is_refused():
    sorted_map = _sorted_map()
    entry = VALUE_K2[4:4 + 28 + 9]
    with pytest.raises(ValueError, match="key twice"):
        sorted_map.decoder()(struct.pack(">i", 2) + entry + entry, 0)


def test_the_fast_paths_leave_it_to_the_python_decoder():
    sorted_map = _sorted_map()
    assert _fastpath.type_spec(sorted_map) is None  # the C scanner calls the Python decoder
    assert columnar.arrow_type(sorted_map) is None  # the columnar decoder declines: rows are read
    assert columnar.arrow_type(TtlType(LONG, sorted_map)) is None


def _stream(value: bytes):
    """A canonical key-group stream of one ``sorted-map`` entry (key k2) under the real header's types."""
    meta_real, states = _states()
    state = keyed.value_state_meta("sorted-map", "VALUE", states["sorted-map"].value_type)
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, meta_real.key_type, [state])
    meta.header_size = len(keyed.proxy_bytes(meta))
    key = enc(meta.key_type, ("k2",)) + b"\x00"  # the RowData key and the VoidNamespace byte
    buf, offsets = keyed.encode_canonical_stream(meta, 3, 3, {3: {0: [(bytes((3,)) + key, value)]}})
    return buf, handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 3, offsets, None), meta


def test_the_keyed_state_reads_on_both_decoders(monkeypatch):
    buf, handle, meta = _stream(VALUE_K2)
    outcomes = both_paths(monkeypatch, lambda: [tuple(e) for e in KeyedState.of_stream(buf, handle, meta, 128).entries()])
    assert outcomes and all(o == outcomes[0] for o in outcomes)
    kind, entries = outcomes[0]
    assert kind == "ok" and [(e[3], e[5]) for e in entries] == [(("k2",), K2)]


@pytest.mark.parametrize("cut", [1, 4, 9, 36, 37, len(VALUE_K2) - 1])
def test_truncated_values_are_corrupt_on_both_decoders(monkeypatch, cut):
    buf, handle, meta = _stream(VALUE_K2[:-cut])
    assert_corrupt_on_both(monkeypatch, lambda: list(KeyedState.of_stream(buf, handle, meta, 128).entries()))


def test_a_count_larger_than_the_bytes_is_corrupt(monkeypatch):
    buf, handle, meta = _stream(struct.pack(">i", 1 << 20) + VALUE_K2[4:])
    assert_corrupt_on_both(monkeypatch, lambda: list(KeyedState.of_stream(buf, handle, meta, 128).entries()),
                           "sorted map size")
