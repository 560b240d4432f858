"""The columnar decoder (fstate.savepoint._columnar via savepoint/columnar.py) against the plain
Python decoders: the record batches, turned back into rows, equal the reference rows of the keyed
table (KeyedState.rows shaped by decoders.PythonRows, FSTATE_PURE_PYTHON=1) on every
keyed sample, on generated canonical streams over the covered TypeInfo tree, and on corrupted
streams (where the strict Python path fails, the columnar decoder fails with CorruptStateError).

Strings: Flink writes UTF-16 units; Arrow holds UTF-8, so a lone surrogate becomes U+FFFD (the
reference rows are compared after the same replacement).
"""

from __future__ import annotations

import re
import struct
from types import SimpleNamespace

import pyarrow
import pytest
from hypothesis import assume, given, strategies as st

from fstate.savepoint import columnar, decoders, handles, keyed
from fstate.savepoint.errors import CorruptStateError, FStateError
from fstate.savepoint.keyed_codecs import state_codecs
from fstate.savepoint.keyed_state import CANONICAL, KeyedState
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import (BOOLEAN, BYTE, CHAR, DOUBLE, FLOAT, INT, LONG, SHORT, STRING, TIME_WINDOW,
                                    VOID_NAMESPACE, MapType, NullableType, OpaqueType, TtlType, TupleType)
from tests.savepoint import state_streams
from tests.savepoint.state_streams import (GEN, canonical_pairs, check_damaged_outcome, damage, key_group_stream,
                                           keyed_samples, same, scalars, texts)
from tests.support import sample_dirs, sample_snapshot

needs_c = pytest.mark.skipif(columnar._columnar is None, reason="fstate.savepoint._columnar is not built")

_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(x):
    """A reference value as Arrow can hold it: lone surrogates replaced by U+FFFD."""
    if isinstance(x, str):
        return _SURROGATE.sub("\ufffd", x)
    if isinstance(x, tuple):
        return tuple(_utf8(v) for v in x)
    if isinstance(x, list):
        return [_utf8(v) for v in x]
    if isinstance(x, dict):
        return {_utf8(k): _utf8(v) for k, v in x.items()}
    return x


def _python(arrow_type, v):
    """An Arrow value as the reference decoders give it: structs are tuples, maps dicts."""
    if v is None:
        return None
    if pyarrow.types.is_struct(arrow_type):
        return tuple(_python(arrow_type.field(i).type, v[arrow_type.field(i).name])
                     for i in range(arrow_type.num_fields))
    if pyarrow.types.is_map(arrow_type):
        return {_python(arrow_type.key_type, k): _python(arrow_type.item_type, x) for k, x in v}
    if pyarrow.types.is_list(arrow_type):
        return [_python(arrow_type.value_type, x) for x in v]
    return v


def batch_rows(batches) -> list[tuple]:
    out = []
    for batch in batches:
        batch.validate(full=True)
        columns = [[_python(c.type, v) for v in c.to_pylist()] for c in batch.columns]
        out.extend(zip(*columns))
    return out


def _regions(buf, handle, meta, mp):
    codecs = state_codecs(meta, mp)
    state = KeyedState.of_stream(buf, handle, meta, mp, codecs=codecs)
    return codecs, (list(state.checked_regions()) if state.layout == CANONICAL else None)


def _names(meta, ids, flatten, ns_mode):
    key = [f"key_{i}" for i in range(len(meta.key_type.children))] if flatten else ["key"]
    ns = {"void": [], "window": ["window_start", "window_end"]}.get(ns_mode, ["namespace"])
    return key + ns + [meta.states[i].name for i in ids]


def columnar_batches(buf, handle, meta, mp, ids, flatten=False, ns_mode="void", max_rows=columnar.MAX_ROWS):
    codecs, regions = _regions(buf, handle, meta, mp)
    if regions is None:
        return None
    return columnar.keyed_batches(buf, regions, meta, mp, codecs, ids, "the-source", flatten, ns_mode,
                                  _names(meta, ids, flatten, ns_mode), max_rows)


def reference_rows(monkeypatch, rows, meta, ids, flatten=False, ns_mode="void"):
    """The keyed table's rows of the Python path (decoders.PythonRows over KeyedState.rows)."""
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    try:
        state = SimpleNamespace(meta=meta, rows=rows)
        return _utf8(list(decoders.PythonRows(state, decoders.RowShape(flatten, ns_mode), ids).rows()))
    finally:
        monkeypatch.setenv("FSTATE_PURE_PYTHON", "0")


# ---------------------------------------------------------------------------------------------
# the switch


def test_off_without_the_extension_or_with_pure_python(monkeypatch):
    meta, mp, buf, handle = _small_stream()
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert not columnar.available()
    assert columnar_batches(buf, handle, meta, mp, [0]) is None
    monkeypatch.setattr(columnar, "_columnar", None)
    monkeypatch.delenv("FSTATE_PURE_PYTHON")
    assert columnar_batches(buf, handle, meta, mp, [0]) is None


def _small_stream():
    states = [keyed.value_state_meta("v", "VALUE", LONG), keyed.value_state_meta("l", "LIST", STRING)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    meta.header_size = len(keyed.proxy_bytes(meta))
    return (meta, 128) + encode(meta, 128, {3: {0: [("a", None, 1)], 1: [("a", None, ["x", "y"])]}}, 3, 3)


# ---------------------------------------------------------------------------------------------
# Arrow types: what Spark writes


@pytest.mark.parametrize("t", [
    STRING, LONG, INT, SHORT, BYTE, BOOLEAN, DOUBLE, FLOAT, CHAR, VOID_NAMESPACE, TIME_WINDOW,
    TupleType((STRING, TupleType((LONG, TIME_WINDOW)))), NullableType(INT, 0), TtlType(LONG, TupleType((FLOAT, CHAR))),
])
def test_arrow_types_are_sparks(t):
    from pyspark.sql.pandas.types import to_arrow_type

    from fstate.readers.schema import SparkTypeVisitor
    from fstate.savepoint.types import visit
    assert columnar.arrow_type(t) == to_arrow_type(visit(t, SparkTypeVisitor()))


def test_state_column_types_are_sparks():
    from pyspark.sql import types as spark_types
    from pyspark.sql.pandas.types import to_arrow_type
    spark_list = to_arrow_type(spark_types.ArrayType(spark_types.StringType(), True))
    spark_map = to_arrow_type(spark_types.MapType(spark_types.StringType(), spark_types.LongType(), True))
    assert columnar.list_type(pyarrow.string()) == spark_list
    assert pyarrow.map_(pyarrow.string(), pyarrow.int64()) == spark_map


# ---------------------------------------------------------------------------------------------
# every keyed sample


@needs_c
@pytest.mark.parametrize("sample,uid_hash", keyed_samples(skip_layout="RocksDB incremental/native"))
def test_samples_same_as_the_reference(sample, uid_hash, monkeypatch):
    sp = Savepoint.open(str(sample_snapshot(sample)))
    op = sp.operator(uid_hash)
    meta, mp = op.keyed_meta, op.max_parallelism
    value_ids = [i for i, _ in meta.value_states]
    choices = [value_ids] + [[i] for i in value_ids] + [value_ids[::-1]]
    for _, h in op.key_group_handles():
        buf = sp.read_stream(h.delegate)
        for ids in choices:
            ns_types = {meta.states[i].namespace_type for i in ids}
            modes = ["void", "namespace"] + (["window"] if ns_types == {TIME_WINDOW} else [])
            for ns_mode in modes:
                for max_rows in (columnar.MAX_ROWS, 7):
                    batches = columnar_batches(buf, h, meta, mp, ids, False, ns_mode, max_rows)
                    if batches is None:
                        continue
                    got = batch_rows(batches)
                    want = reference_rows(monkeypatch, lambda sids: KeyedState.of_stream(buf, h, meta, mp).rows(sids), meta,
                                          ids, False, ns_mode)
                    assert same(want, got), (ids, ns_mode)


def test_some_samples_are_covered():
    if columnar._columnar is None:
        pytest.skip("fstate.savepoint._columnar is not built")
    for s in sample_dirs():
        if s.name == "keyed-hashmap-savepoint":
            sp = Savepoint.open(str(sample_snapshot(s)))
            op = sp.operator("keyed")
            meta = op.keyed_meta
            ids = [i for i, _ in meta.value_states]
            _, h = next(iter(op.key_group_handles()))
            buf = sp.read_stream(h.delegate)
            assert columnar_batches(buf, h, meta, op.max_parallelism, ids) is not None
            return
    pytest.fail("samples/keyed-hashmap-savepoint is missing")


# ---------------------------------------------------------------------------------------------
# generated canonical streams over the covered TypeInfo tree

_TEXT = texts("", "a", "\x00", "a\x00b", "\ud800", "\udc00x", "a\ud800\ud800b", "\U0001f600", "ÿ€\x00", "k" * 200,
              "abcdefghij\u00e9klmnop", "\udbff\udfff")
SCALARS = scalars(_TEXT, windows=True)


@st.composite
def value_types(draw, depth=0):
    """A covered value type and a strategy for its values."""
    kind = draw(st.sampled_from(["scalar"] * 5 + ["tuple", "nullable", "ttl"] if depth < 2 else ["scalar"]))
    if kind == "scalar":
        return SCALARS[draw(st.sampled_from(sorted(SCALARS)))]
    if kind == "tuple":
        kids = [draw(value_types(depth + 1)) for _ in range(draw(st.integers(1, 3)))]
        return TupleType(tuple(t for t, _ in kids)), st.tuples(*(s for _, s in kids))
    if kind == "nullable":
        t, s = draw(value_types(depth + 1))
        pad = t.length if t.length > 0 and draw(st.booleans()) else 0
        return NullableType(t, pad), st.none() | s
    t, s = draw(value_types(depth + 1))
    return TtlType(LONG, t), s


def keyed_streams():
    """Generated contents over the covered types (timer states are not a column: the framing skips
    them; list elements are never null)."""
    kinds = ["VALUE", "LIST", "MAP", "REDUCING", "TIMER"]
    return state_streams.keyed_streams(SCALARS, value_types, _list_element, kinds, max_states=4, max_keys=5,
                                       text=_TEXT)


def _list_element(draw):
    t, s = draw(value_types(1))
    return t, s.filter(lambda v: v is not None)


def encode(meta, mp, data, lo, hi):
    return key_group_stream(meta, canonical_pairs(meta, mp, data), lo, hi)


def _choose(data, meta):
    value_ids = [i for i, _ in meta.value_states]
    assume(value_ids)
    ids = data.draw(st.lists(st.sampled_from(value_ids), min_size=1, unique=True))
    windows = meta.states[ids[0]].namespace_type == TIME_WINDOW
    ns_mode = data.draw(st.sampled_from(["window", "namespace"] if windows else ["void", "namespace"]))
    flatten = isinstance(meta.key_type, TupleType) and data.draw(st.booleans())
    return ids, ns_mode, flatten


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_generated_streams_same_as_the_reference(stream, data, monkeypatch):
    meta, mp, values, lo, hi = stream
    buf, handle = encode(meta, mp, values, lo, hi)
    ids, ns_mode, flatten = _choose(data, meta)
    max_rows = data.draw(st.sampled_from([1, 3, columnar.MAX_ROWS]))
    batches = columnar_batches(buf, handle, meta, mp, ids, flatten, ns_mode, max_rows)
    assert batches is not None  # every generated type is covered
    got = batch_rows(batches)
    want = reference_rows(monkeypatch, lambda sids: KeyedState.of_stream(buf, handle, meta, mp).rows(sids), meta, ids,
                          flatten, ns_mode)
    assert same(want, got)


# ---------------------------------------------------------------------------------------------
# corrupt streams: where the strict Python path fails, CorruptStateError; else the same rows


def _strict_entries(monkeypatch, buf, handle, meta, mp, ids):
    codecs = state_codecs(meta, mp)
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    try:
        return list(KeyedState.of_stream(buf, handle, meta, mp, codecs=codecs, strict=True).entries(set(ids)))
    finally:
        monkeypatch.setenv("FSTATE_PURE_PYTHON", "0")


def _strict_reference(monkeypatch, buf, handle, meta, mp, ids, flatten, ns_mode):
    codecs = state_codecs(meta, mp)
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    try:
        entries = list(KeyedState.of_stream(buf, handle, meta, mp, codecs=codecs, strict=True).entries(set(ids)))
    except FStateError as e:
        return type(e)
    finally:
        monkeypatch.setenv("FSTATE_PURE_PYTHON", "0")
    return reference_rows(monkeypatch, lambda sids: keyed.rows_from_entries(entries, codecs, sids), meta, ids,
                          flatten, ns_mode)


def _columnar_outcome(buf, handle, meta, mp, ids, flatten, ns_mode):
    try:
        batches = columnar_batches(buf, handle, meta, mp, ids, flatten, ns_mode)
        return batch_rows(batches or ())
    except CorruptStateError as e:
        assert e.path == "the-source"
        return CorruptStateError


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_corrupt_streams(stream, data, monkeypatch):
    meta, mp, values, lo, hi = stream
    buf, handle = encode(meta, mp, values, lo, hi)
    assume(len(buf) > meta.header_size)
    ids, ns_mode, flatten = _choose(data, meta)
    damaged = damage(data, buf, meta.header_size, [0x00, 0x2C, 0x7F, 0x80, 0xFF])
    want = _strict_reference(monkeypatch, damaged, handle, meta, mp, ids, flatten, ns_mode)
    got = _columnar_outcome(damaged, handle, meta, mp, ids, flatten, ns_mode)
    check_damaged_outcome(want, got, meta, lambda: _strict_entries(monkeypatch, damaged, handle, meta, mp, ids))


# ---------------------------------------------------------------------------------------------
# hand-made entries: strings, opaque values, repeated keys


def _block(kg: int, by_state: list[tuple[int, list[tuple[bytes, bytes]]]]) -> bytes:
    """A canonical key group with the entries in the given order (encode_key_group sorts them)."""
    out = bytearray(struct.pack(">H", by_state[0][0]))
    for n, (sid, pairs) in enumerate(by_state):
        for i, (k, v) in enumerate(pairs):
            if i == len(pairs) - 1:
                k = bytes((k[0] | keyed.META_FOLLOWS,)) + k[1:]
            out += struct.pack(">i", len(k)) + k + struct.pack(">i", len(v)) + v
        out += struct.pack(">H", by_state[n + 1][0] if n + 1 < len(by_state) else keyed.END_OF_KEY_GROUP)
    return bytes(out)


def _hand_stream(meta, kg, by_state):
    out = bytearray(keyed.proxy_bytes(meta))
    offsets = (len(out),)
    out += _block(kg, by_state)
    return bytes(out), handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, kg, offsets, None)


def _meta(key_t, *states):
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, key_t, list(states))
    meta.header_size = len(keyed.proxy_bytes(meta))
    return meta


def _compare(monkeypatch, buf, handle, meta, ids, mp=128):
    want = _strict_reference(monkeypatch, buf, handle, meta, mp, ids, False, "void")
    got = _columnar_outcome(buf, handle, meta, mp, ids, False, "void")
    return want, got


def _flink_units(units) -> bytes:
    """A StringValue from raw UTF-16 units (7-bit varints), as binary.write_flink_string writes them."""
    out = bytearray()
    for n in [len(units) + 1] + list(units):
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


@needs_c
@pytest.mark.parametrize("value,expected", [
    (_flink_units([]), ""),
    (b"\x00", None),
    (_flink_units([0]), "\x00"),
    (_flink_units([0x61, 0, 0x62]), "a\x00b"),
    (_flink_units([0xFF, 0x20AC]), "ÿ€"),
    (_flink_units([0xD83D, 0xDE00]), "\U0001f600"),                 # a surrogate pair: one code point
    (_flink_units([0xD800]), "\ufffd"),                             # lone surrogates: U+FFFD
    (_flink_units([0xDC00, 0x78]), "\ufffdx"),
    (_flink_units([0x61, 0xD800, 0xD800, 0x62]), "a\ufffd\ufffdb"),
    (_flink_units([0xDBFF, 0xDFFF]), "\U0010ffff"),
    (_flink_units([0x6B] * 9 + [0xE9] + [0x6B] * 9), "k" * 9 + "é" + "k" * 9),   # ASCII run, then not
    (b"\x85\x80\x80\x80\x80\x80\x80\x80\x80\x00abcd", "abcd"),     # a padded length varint
    (_flink_units([0x7FF, 0x800, 0xFFFF]), "\u07ff\u0800\uffff"),
])
def test_strings(value, expected, monkeypatch):
    meta = _meta(STRING, keyed.value_state_meta("v", "VALUE", STRING))
    enc = keyed.PairEncoder(meta, 0, 128)
    buf, handle = _hand_stream(meta, 5, [(0, [(bytes(enc._composite(5, "k", None)), value)])])
    want, got = _compare(monkeypatch, buf, handle, meta, [0])
    assert want == got == [("k", expected)]


@needs_c
@pytest.mark.parametrize("value", [
    b"\x02\x80\x80\x04",          # a unit of 0x10000: too big for UTF-16
    b"\x04ab\x80",                # a truncated unit
    b"\x05abc",                   # fewer units than the length says
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",   # a length beyond 2**64
    _flink_units([0x61]) + b"x",  # a byte after the value
    b"",
])
def test_bad_strings(value, monkeypatch):
    meta = _meta(STRING, keyed.value_state_meta("v", "VALUE", STRING))
    enc = keyed.PairEncoder(meta, 0, 128)
    buf, handle = _hand_stream(meta, 5, [(0, [(bytes(enc._composite(5, "k", None)), value)])])
    assert _compare(monkeypatch, buf, handle, meta, [0]) == (CorruptStateError, CorruptStateError)


@needs_c
def test_character_surrogate_key(monkeypatch):
    meta = _meta(CHAR, keyed.value_state_meta("v", "VALUE", LONG))
    enc = keyed.PairEncoder(meta, 0, 128)
    pairs = sorted(p for c in ("a", "\ud800", "\u20ac") for p in enc.pairs(1, c, 7))
    buf, handle = _hand_stream(meta, 1, [(0, pairs)])
    want, got = _compare(monkeypatch, buf, handle, meta, [0])
    assert want == got and {k for k, _ in got} == {"a", "\ufffd", "\u20ac"}


@needs_c
def test_opaque_values_are_bytes(monkeypatch):
    opaque = OpaqueType("com.example.KryoSerializerSnapshot", 1, b"")
    meta = _meta(STRING, keyed.value_state_meta("v", "VALUE", opaque), keyed.value_state_meta("l", "LIST", opaque),
                 keyed.value_state_meta("m", "MAP", MapType(STRING, opaque)))
    twin = _meta(STRING, *(keyed.value_state_meta(n, k, STRING) for n, k in (("v", "VALUE"), ("l", "LIST"))),
                 keyed.value_state_meta("m", "MAP", MapType(STRING, STRING)))
    comp = keyed.PairEncoder(twin, 0, 128)._composite
    ukey = STRING.encoder()

    def user_key(k, uk):
        out = comp(3, k, None)
        ukey(out, uk)
        return bytes(out)

    by_state = [(0, [(bytes(comp(3, "a", None)), b"\x01\x02,\x03"), (bytes(comp(3, "b", None)), b"")]),
                (1, [(bytes(comp(3, "a", None)), b"raw,list")]),
                (2, [(user_key("a", "x"), b"\x00\xff\xfe"), (user_key("a", "y"), b"\x01"),
                     (user_key("c", "z"), b"\x00")])]
    buf, handle = _hand_stream(meta, 3, by_state)
    want, got = _compare(monkeypatch, buf, handle, meta, [0, 1, 2])
    assert want == got == [("a", b"\x01\x02,\x03", [b"raw,list"], {"x": b"\xff\xfe", "y": None}),
                           ("b", b"", None, None), ("c", None, None, {"z": b""})]
    assert columnar.arrow_type(opaque) == pyarrow.binary()
    assert columnar.arrow_type(TupleType((STRING, opaque))) is None  # the raw bytes of a tuple: not covered


@needs_c
def test_repeated_keys(monkeypatch):
    """A value repeated later: the last wins (as in the reference); a list or map key that comes
    back after another key (no writer does that) is corrupt."""
    meta = _meta(STRING, keyed.value_state_meta("v", "VALUE", LONG), keyed.value_state_meta("l", "LIST", STRING))
    value, events = keyed.PairEncoder(meta, 0, 128), keyed.PairEncoder(meta, 1, 128)
    a, b = value.pairs(2, "a", 1)[0][0], value.pairs(2, "b", 2)[0][0]
    eight = struct.pack(">q", 8)
    by_state = [(0, [(a, struct.pack(">q", 1)), (b, struct.pack(">q", 2)), (a, eight)])]
    buf, handle = _hand_stream(meta, 2, by_state)
    want, got = _compare(monkeypatch, buf, handle, meta, [0])
    assert want == got == [("a", 8), ("b", 2)]
    la, lb = events.pairs(2, "a", ["x"])[0], events.pairs(2, "b", ["y"])[0]
    buf, handle = _hand_stream(meta, 2, [(1, [la, (la[0], b"\x02z"), lb])])   # next to each other: one list
    want, got = _compare(monkeypatch, buf, handle, meta, [0, 1])
    assert want == got == [("a", None, ["x", "z"]), ("b", None, ["y"])]
    buf, handle = _hand_stream(meta, 2, [(1, [la, lb, la])])
    assert _compare(monkeypatch, buf, handle, meta, [1])[1] is CorruptStateError


@needs_c
def test_rows_join_across_states_in_any_order(monkeypatch):
    """States whose keys come in other orders (a heap savepoint) still join into one row per key."""
    meta = _meta(STRING, keyed.value_state_meta("v", "VALUE", LONG), keyed.value_state_meta("l", "LIST", STRING),
                 keyed.value_state_meta("m", "MAP", MapType(INT, STRING)))
    encs = [keyed.PairEncoder(meta, i, 128) for i in range(3)]
    keys = [f"k{i}" for i in range(40)]
    shuffled = list(dict.fromkeys(keys[::7] + keys[1::3] + keys[2::5]))
    by_state = [(0, [p for k in keys[::-1] for p in encs[0].pairs(9, k, len(k))]),
                (1, [p for k in shuffled for p in encs[1].pairs(9, k, [k])]),
                (2, [p for k in keys[5:] + keys[:5] for p in encs[2].pairs(9, k, {1: k, 2: None})])]
    buf, handle = _hand_stream(meta, 9, by_state)
    for ids in ([0, 1, 2], [2, 1], [1]):
        want, got = _compare(monkeypatch, buf, handle, meta, ids)
        assert want == got and len(got) == (len(shuffled) if ids == [1] else 40)


@needs_c
def test_many_rows_joined_by_hash(monkeypatch):
    """A key group of thousands of keys in other orders per state (the hash table grows while the
    decoder looks rows up ahead of the entries), a value key repeated far from its first entry (the
    last wins) and a list key that comes back (corrupt): as the reference."""
    meta = _meta(STRING, keyed.value_state_meta("v", "VALUE", LONG), keyed.value_state_meta("l", "LIST", STRING))
    encs = [keyed.PairEncoder(meta, i, 128) for i in range(2)]
    keys = [f"key-{(i * 7919) % 5003}" for i in range(5003)]
    others = keys[1::2] + keys[::2]
    values = [p for k in keys for p in encs[0].pairs(3, k, len(k))] + encs[0].pairs(3, keys[17], -1)
    lists = [p for k in others for p in encs[1].pairs(3, k, [k, k[::-1], ""])]
    buf, handle = _hand_stream(meta, 3, [(0, values), (1, lists)])
    for ids in ([0, 1], [1, 0], [1]):
        want, got = _compare(monkeypatch, buf, handle, meta, ids)
        assert want == got and len(got) == 5003
    assert dict((row[0], row[1]) for row in _compare(monkeypatch, buf, handle, meta, [0, 1])[1])[keys[17]] == -1
    buf, handle = _hand_stream(meta, 3, [(1, lists + encs[1].pairs(3, others[5], ["x"]))])
    assert _compare(monkeypatch, buf, handle, meta, [1])[1] is CorruptStateError
