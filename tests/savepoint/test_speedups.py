"""The compiled fast path (fstate.savepoint._speedups) against the plain Python decoders.

Both paths must give exactly the same entries, rows and table rows on every keyed sample and on
generated canonical streams (every supported type, non-ASCII and surrogate strings, empty strings
and values, extreme numbers, ambiguous keys, 1- and 2-byte key-group prefixes, compression,
states the C scanner hands back to their Python decoders), and fail on the same corrupt inputs
with the same kinds of errors, never crashing.

``FSTATE_PURE_PYTHON=1`` switches the compiled path off (read at every call); the tests flip it
with monkeypatch. Without a compiler the extension is missing and only the Python path runs: the
C-side tests are skipped then (and ``test_extension_is_built`` says so when a compiler exists).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from fstate.readers import tables
from fstate.savepoint import _fastpath
from fstate.savepoint import binary
from fstate.savepoint import handles
from fstate.savepoint import keyed
from fstate.savepoint import decoders
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.errors import CorruptStateError, FStateError, UnsupportedSerializerError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import (BIG_DECIMAL, LONG, STRING, TIME_WINDOW, MapType, NullableType, OpaqueType,
                                    RowType, TtlType, TupleType)
from tests.savepoint import state_streams
from tests.savepoint.state_streams import (GEN, I64, canonical_pairs, key_group_stream, keyed_samples, same, scalars,
                                           texts)
from tests.support import ROOT, sample_snapshot

speedups = _fastpath._speedups
needs_c = pytest.mark.skipif(speedups is None, reason="fstate.savepoint._speedups is not built")


@pytest.fixture
def both(monkeypatch):
    """run(f) -> (result with the Python path, result with the C path)."""

    def run(f):
        monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
        assert not _fastpath.available()
        py = f()
        monkeypatch.setenv("FSTATE_PURE_PYTHON", "0")
        assert _fastpath.available()
        c = f()
        return py, c

    return run


def outcome(f):
    """(items produced, exception class or None): a generator's output up to its error."""
    out = []
    try:
        for x in f():
            out.append(x)
    except FStateError as e:
        return out, type(e)
    return out, None


# ---------------------------------------------------------------------------------------------
# the extension itself


def test_extension_is_built():
    if speedups is None:
        cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
        if shutil.which(cc) and os.environ.get("FSTATE_ALLOW_NO_SPEEDUPS") != "1":
            pytest.fail(f"a C compiler ({cc}) is here but fstate.savepoint._speedups was not built (or is "
                        "stale): pip install -e . builds it (FSTATE_ALLOW_NO_SPEEDUPS=1 accepts a pure-Python "
                        "install)")
        pytest.skip("no C compiler: the pure-Python path is the whole story")
    assert speedups.__name__ == "fstate.savepoint._speedups"


def test_pure_python_switch(monkeypatch):
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert not _fastpath.available()
    assert _fastpath.scanner(None, [], 128, None, None) is None
    monkeypatch.setattr(_fastpath, "_speedups", None)
    monkeypatch.delenv("FSTATE_PURE_PYTHON")
    assert not _fastpath.available()


def test_missing_extension_falls_back(monkeypatch):
    """An install without a compiler: the same rows through the Python path."""
    sp = Savepoint.open(str(sample_snapshot(ROOT / "samples" / "keyed-hashmap-savepoint")))
    op = sp.operator("keyed")
    want = [r for p in tables.keyed_table(op).partitions for r in tables.read_partition(p)]
    monkeypatch.setattr(_fastpath, "_speedups", None)
    assert [r for p in tables.keyed_table(op).partitions for r in tables.read_partition(p)] == want


@needs_c
def test_pure_python_env_in_a_fresh_process():
    code = ("from fstate.savepoint import binary, _fastpath; "
            "print(binary.read_flink_string is binary.read_flink_string_py, _fastpath.available())")
    for env, want in (("1", "True False"), ("0", "False True")):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "FSTATE_PURE_PYTHON": env})
        assert res.stdout.split() == want.split()


# ---------------------------------------------------------------------------------------------
# read_flink_string


def _string_outcome(f, buf, pos):
    try:
        return f(buf, pos)
    except (IndexError, struct.error, ValueError) as e:
        return type(e)


@needs_c
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40) | st.none())
def test_read_flink_string_round_trip(s):
    out = bytearray(b"\x07")
    binary.write_flink_string(out, s)
    out += b"tail"
    assert speedups.read_flink_string(bytes(out), 1) == binary.read_flink_string_py(bytes(out), 1)
    assert speedups.read_flink_string(bytearray(out), 1) == binary.read_flink_string_py(bytearray(out), 1)


@needs_c
@given(st.binary(max_size=40), st.integers(0, 45))
def test_read_flink_string_any_bytes(buf, pos):
    assert _string_outcome(speedups.read_flink_string, buf, pos) == _string_outcome(binary.read_flink_string_py, buf, pos)


@needs_c
def test_read_flink_string_edges():
    py, c = binary.read_flink_string_py, speedups.read_flink_string
    cases = [
        b"", b"\x00", b"\x01", b"\x02", b"\x02a", b"\x03a",
        b"\x03\xff\xff\x03\x41",          # a unit of 0xFFFF, then 'A'
        b"\x02\x80\x80\x04",              # unit 0x10000: too big for UTF-16
        b"\x03\xb4\xb0\x03\x9e\xba\x03",  # U+1D11E as a surrogate pair -> one code point
        b"\x02\x80\xb0\x03",              # a lone high surrogate
        b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00",  # a long varint of zero: null
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",      # a length beyond 2**64
        b"\x85\x80\x80\x80\x80\x80\x80\x80\x80\x00abcd",      # padded varint of 5
        b"\x04ab\x80",                     # truncated unit varint
    ]
    for buf in cases:
        for pos in range(len(buf) + 1):
            assert _string_outcome(c, buf, pos) == _string_outcome(py, buf, pos), (buf, pos)
    assert c(b"\x03\xb4\xb0\x03\x9e\xba\x03", 0) == ("\U0001d11e", 7) == py(_fstring("\U0001d11e"), 0)


# ---------------------------------------------------------------------------------------------
# every keyed sample


@needs_c
@pytest.mark.parametrize("sample,uid_hash", keyed_samples())
def test_samples_same_with_both_paths(sample, uid_hash, both):
    sp = Savepoint.open(str(sample_snapshot(sample)))
    op = sp.operator(uid_hash)
    meta = op.keyed_meta
    value_ids = [i for i, _ in meta.value_states]

    def table_rows():
        rows = [sorted(map(repr, tables.keyed_table(op).rows()))]
        for _, s in meta.value_states:
            rows.append(sorted(map(repr, tables.keyed_table(op, [s.name], flat=True).rows())))
            rows.append(sorted(map(repr, tables.keyed_table(op, [s.name]).rows())))
        rows.append(sorted(map(repr, tables.timers_table(op).rows())))
        return rows

    py, c = both(table_rows)
    assert py == c
    assert len(py[0]) > 0
    if op.keyed_layout == "RocksDB incremental/native":
        return

    def streams():
        out = []
        for _, h in op.key_group_handles():
            buf = sp.read_stream(h.delegate)
            mp = op.max_parallelism
            out.append(list(KeyedState.of_stream(buf, h, meta, mp).entries()))
            out.append(list(KeyedState.of_stream(buf, h, meta, mp, key_groups=range(0, 200, 3))
                            .entries({value_ids[0]})))
            out.append(list(KeyedState.of_stream(buf, h, meta, mp).rows(value_ids)))
            out.append(list(KeyedState.of_stream(buf, h, meta, mp, key_groups=range(5, 90)).rows(value_ids[::-1])))
            out.append(list(KeyedState.of_stream(buf, h, meta, mp).timer_rows()))
        return out

    py, c = both(streams)
    assert py == c
    assert sum(map(len, py)) > 0


# ---------------------------------------------------------------------------------------------
# generated canonical streams

_TEXT = texts("", "a", "\ud800", "\udc00x", "\U0001f600", "ÿ€\x00", "k" * 200)
SCALARS = scalars(_TEXT)


@st.composite
def value_types(draw, depth=0):
    """A state value type and a strategy for its values (C-decoded ones and a few that are not)."""
    kind = draw(st.sampled_from(["scalar"] * 6 + ["tuple", "nullable", "ttl", "decimal", "row"]
                                if depth == 0 else ["scalar"]))
    if kind == "scalar":
        t, s = SCALARS[draw(st.sampled_from(sorted(SCALARS)))]
        return t, s
    if kind == "tuple":
        (a, sa), (b, sb) = draw(value_types(depth + 1)), draw(value_types(depth + 1))
        return TupleType((a, b)), st.tuples(sa, sb)
    if kind == "nullable":
        t, s = draw(value_types(depth + 1))
        pad = t.length if t.length > 0 and draw(st.booleans()) else 0
        return NullableType(t, pad), st.none() | s
    if kind == "ttl":
        t, s = draw(value_types(depth + 1))
        return TtlType(LONG, t), s
    if kind == "decimal":  # decoded by the Python decoder, called from C
        return BIG_DECIMAL, st.decimals(allow_nan=False, allow_infinity=False, places=3,
                                          min_value=Decimal("-1e9"), max_value=Decimal("1e9"))
    row = RowType((LONG, STRING))  # Python decoder as well
    return row, st.tuples(st.none() | I64, st.none() | _TEXT)


def keyed_streams():
    """Generated contents over every supported type, some decoded by their Python decoders."""
    kinds = ["VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING", "TIMER"]
    return state_streams.keyed_streams(SCALARS, value_types, _list_element, kinds, max_states=5, max_keys=4,
                                       text=_TEXT)


def _list_element(draw):
    return SCALARS[draw(st.sampled_from(sorted(SCALARS)))]


def encode(meta, mp, data, lo, hi):
    """The canonical stream (keyed.encode_canonical_stream when not compressed)."""
    pairs = canonical_pairs(meta, mp, data)
    if meta.compressed:
        return key_group_stream(meta, pairs, lo, hi)
    buf, offsets = keyed.encode_canonical_stream(meta, lo, hi, pairs)
    return buf, handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, lo, tuple(offsets), None)


def _reads(buf, handle, meta, mp, states=None, key_groups=None):
    value_ids = [i for i, _ in meta.value_states]
    return [
        outcome(lambda: KeyedState.of_stream(buf, handle, meta, mp, key_groups=key_groups).entries(states)),
        outcome(lambda: KeyedState.of_stream(buf, handle, meta, mp, key_groups=key_groups).rows(value_ids)),
        outcome(lambda: KeyedState.of_stream(buf, handle, meta, mp, key_groups=key_groups).rows(value_ids[::-1])),
        outcome(lambda: KeyedState.of_stream(buf, handle, meta, mp, key_groups=key_groups).timer_rows()),
    ]


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_generated_streams_same_with_both_paths(stream, data, both):
    meta, mp, values, lo, hi = stream
    buf, handle = encode(meta, mp, values, lo, hi)
    states = data.draw(st.none() | st.sets(st.integers(0, len(meta.states) - 1)))
    kgs = data.draw(st.none() | st.lists(st.integers(lo, hi)))
    py, c = both(lambda: _reads(buf, handle, meta, mp, states, kgs))
    assert same(py, c)
    assert all(err is None for _, err in py), py


@needs_c
@GEN
@given(stream=keyed_streams())
def test_generated_rows_hold_the_values(stream, both):
    """A row per (key, namespace) with the written values (the Python path is checked elsewhere)."""
    meta, mp, values, lo, hi = stream
    buf, handle = encode(meta, mp, values, lo, hi)
    value_ids = [i for i, _ in meta.value_states]
    py, c = both(lambda: list(KeyedState.of_stream(buf, handle, meta, mp).rows(value_ids)))
    assert same(py, c)
    expected = 0
    for kg, by_state in values.items():
        idents = set()
        for sid, items in by_state.items():
            if sid in value_ids:
                enc = keyed.PairEncoder(meta, sid, mp)
                for key, ns, v in items:
                    if enc.pairs(kg, key, v, ns):
                        idents.add(bytes(enc._composite(kg, key, ns)))
        expected += len(idents)
    assert len(c) == expected


@needs_c
@GEN
@given(stream=keyed_streams(), data=st.data())
def test_generated_table_rows(stream, data, monkeypatch):
    """The keyed table's tuples built in C (decoders.CompiledRows) against decoders.PythonRows' rule
    (key fields with flatten, namespace columns per mode)."""
    meta, mp, values, lo, hi = stream
    buf, handle = encode(meta, mp, values, lo, hi)
    value_ids = [i for i, _ in meta.value_states]
    assume(value_ids)
    ids = data.draw(st.lists(st.sampled_from(value_ids), min_size=1, unique=True))
    windows = any(s.namespace_type == TIME_WINDOW for s in meta.states)
    ns_mode = data.draw(st.sampled_from(["window", "namespace"] if windows else ["void", "namespace"]))
    flatten = isinstance(meta.key_type, TupleType) and data.draw(st.booleans())
    kgs = data.draw(st.none() | st.lists(st.integers(lo, hi)))
    shape = decoders.RowShape(flatten, ns_mode)

    def table():
        state = KeyedState.of_stream(buf, handle, meta, mp, key_groups=kgs)
        return state.decoder, list(decoders.CompiledRows(state, shape, ids).rows()
                                   if state.decoder == "compiled" else decoders.PythonRows(state, shape, ids).rows())

    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    decoder, want = table()
    assert decoder == "python"
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "0")
    decoder, got = table()
    assert decoder == "compiled"
    assert same(want, got)


# ---------------------------------------------------------------------------------------------
# corrupt streams: same kind of error (or the same result) on both paths, never a crash


def _same_reads(py, c):
    """The _reads of both paths on damaged input: the same entries up to the same kind of error;
    the same rows when both succeed, the same kind of error otherwise (a failing key group may hold
    back rows of the key group before it on the Python path)."""
    assert same(py[0], c[0])
    for (prows, perr), (crows, cerr) in zip(py[1:], c[1:]):
        assert perr == cerr
        if perr is None:
            assert same(prows, crows)


def corrupt_stream(buf: bytes, header: int, kind: str, pos: int, arg: int) -> bytes:
    b = bytearray(buf)
    if len(b) <= header:
        return bytes(b)
    pos = header + pos % (len(b) - header)
    if kind == "flip":
        b[pos] ^= 1 << (arg % 8)
    elif kind == "truncate":
        del b[pos:]
    elif kind == "byte":
        b[pos] = arg % 256
    elif kind == "int32":
        b[pos:pos + 4] = struct.pack(">i", [-1, -(2 ** 31), 2 ** 31 - 1, 2 ** 20, 0, 1, 0x7FFF][arg % 7])
    elif kind == "delete":
        del b[pos:pos + 1 + arg % 8]
    else:  # duplicate a run
        b[pos:pos] = b[pos:pos + 1 + arg % 16]
    return bytes(b)


CORRUPT = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
CORRUPTIONS = st.lists(st.tuples(st.sampled_from(["flip", "truncate", "byte", "int32", "delete", "dup"]),
                                 st.integers(0, 2 ** 20), st.integers(0, 255)), min_size=1, max_size=3)


@needs_c
@CORRUPT
@given(stream=keyed_streams(), corruptions=CORRUPTIONS)
def test_corrupt_streams_same_errors(stream, corruptions, both):
    meta, mp, values, lo, hi = stream
    buf, handle = encode(meta, mp, values, lo, hi)
    assume(len(buf) > meta.header_size)
    for kind, pos, arg in corruptions:
        buf = corrupt_stream(buf, meta.header_size, kind, pos, arg)
    _same_reads(*both(lambda: _reads(buf, handle, meta, mp)))


SAMPLE_STREAMS = []


def _sample_streams():
    if not SAMPLE_STREAMS:
        for name in ("keyed-hashmap-savepoint", "keyed-rocksdb-savepoint"):
            sp = Savepoint.open(str(sample_snapshot(ROOT / "samples" / name)))
            for op in sp.operators:
                for _, h in op.key_group_handles():
                    SAMPLE_STREAMS.append((sp.read_stream(h.delegate), h, op.keyed_meta, op.max_parallelism))
    return SAMPLE_STREAMS


@needs_c
@CORRUPT
@given(data=st.data(), corruptions=CORRUPTIONS)
def test_corrupt_samples_same_errors(data, corruptions, both):
    streams = _sample_streams()
    buf, handle, meta, mp = streams[data.draw(st.integers(0, len(streams) - 1))]
    for kind, pos, arg in corruptions:
        buf = corrupt_stream(buf, meta.header_size, kind, pos, arg)
    _same_reads(*both(lambda: _reads(buf, handle, meta, mp)))


@needs_c
@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 5), st.sampled_from([1, 2]), st.integers(0, 300))
def test_scanner_on_random_bytes(raw, n_states, prefix, kg):
    """Arbitrary bytes straight into the scanner with every plan mode: an exception, never a crash."""
    S = _fastpath
    plans = [
        (S.VALUE, S.STRING, S.ZERO, (S.TUPLE, (S.LONG, S.STRING)), None, False, None, 0, S.C_PLAIN),
        (S.LIST, S.LONG, S.WINDOW, S.STRING, None, False, None, 1, S.C_LIST),
        (S.MAP, S.STRING, S.STRING, (S.NULLABLE, 0, S.DOUBLE), S.CHAR, True, None, 2, S.C_MAP),
        (S.TIMER, S.INT, S.ZERO, None, None, False, None, 3, S.C_PLAIN),
        (S.VALUE, S.SHORT, S.ZERO, (S.TTL, S.FLOAT), None, False, None, 4, S.C_PLAIN),
        (S.PY, None, None, None, None, False, lambda kb, vb: (kb, 1, 2, vb), 5, S.C_PLAIN),
        (S.LIST_RAW, S.BYTE, S.ZERO, None, None, False, None, 6, S.C_LIST),
        (S.VALUE, S.BOOL, S.ZERO, S.RAW, None, False, None, 7, S.C_PLAIN),
    ][:n_states + 3]
    scan = speedups.Scanner(tuple(plans), prefix, CorruptStateError, "src")
    for pos in (0, 1, len(raw) // 2):
        for end in (len(raw), pos + (len(raw) - pos) // 2, len(raw) + 1):
            try:
                scan.entries(raw, pos, end, kg, [])
            except (CorruptStateError, IndexError, ValueError, struct.error):
                pass
            try:
                scan.rows(raw, pos, end, kg, 8, {})
            except (CorruptStateError, IndexError, ValueError, struct.error):
                pass


@needs_c
def test_scanner_rejects_bad_plans():
    with pytest.raises(ValueError):
        speedups.Scanner(((_fastpath.VALUE, 99, _fastpath.ZERO, _fastpath.LONG, None, False, None, 0, 0),), 1, CorruptStateError, None)
    with pytest.raises(ValueError):
        speedups.Scanner(((_fastpath.VALUE, _fastpath.STRING, _fastpath.ZERO, None, None, False, None, 0, 0),), 1,
                         CorruptStateError, None)
    with pytest.raises(ValueError):
        speedups.Scanner((), 3, CorruptStateError, None)
    with pytest.raises(TypeError):
        speedups.Scanner(((_fastpath.PY, None, None, None, None, False, None, 0, 0),), 1, CorruptStateError, None)
    scan = speedups.Scanner(((_fastpath.VALUE, _fastpath.STRING, _fastpath.ZERO, _fastpath.LONG, None, False, None, 3, 0),), 1,
                            CorruptStateError, None)
    with pytest.raises(ValueError, match="no column"):
        scan.rows(b"", 0, 0, 0, 2, {})
    with pytest.raises(ValueError, match="outside the buffer"):
        scan.entries(b"abc", 0, 4, 0, [])


def _fstring(text: str) -> bytes:
    out = bytearray()
    binary.write_flink_string(out, text)
    return bytes(out)


@needs_c
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=12), st.binary(max_size=6),
                                st.booleans()), max_size=6, unique_by=lambda x: x[0]))
def test_opaque_values_same_with_both_paths(items, both):
    """Kryo/Avro/unknown values are raw bytes: VALUE, LIST and MAP (key and value) of them."""
    opaque = OpaqueType("com.acme.KryoSerializerSnapshot", 1, b"", "com.acme.Thing")
    states = [keyed.value_state_meta("v", "VALUE", opaque), keyed.value_state_meta("l", "LIST", opaque),
              keyed.value_state_meta("m", "MAP", MapType(opaque, opaque)),
              keyed.value_state_meta("n", "MAP", MapType(STRING, opaque))]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    meta.header_size = len(keyed.proxy_bytes(meta))
    pairs: dict = {0: [], 1: [], 2: [], 3: []}
    for key, a, b, null in items:
        ck = bytes((3,)) + _fstring(key) + b"\x00"
        pairs[0].append((ck, a))
        pairs[1].append((ck, a + b))
        pairs[2].append((ck + b, b"\x01" if null else b"\x00" + a))
        pairs[3].append((ck + _fstring(key), b"\x01" if null else b"\x00" + a))
    buf, offsets = keyed.encode_canonical_stream(meta, 3, 3, {3: pairs})
    handle = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 3, offsets, None)
    py, c = both(lambda: _reads(buf, handle, meta, 128))
    assert same(py, c)
    assert all(err is None for _, err in py)


@needs_c
def test_opaque_key_and_unsupported_state(both):
    """An opaque key (Python decoder called from C), and a state fstate cannot decode at all
    (UnsupportedSerializerError from both paths when it is read, nothing when it is not)."""
    opaque = OpaqueType("com.acme.KryoSerializerSnapshot", 1, b"", "com.acme.Key")
    states = [keyed.value_state_meta("v", "VALUE", LONG), keyed.value_state_meta("m", "MAP", MapType(STRING, LONG))]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, opaque, states)
    meta.header_size = len(keyed.proxy_bytes(meta))
    pairs = {0: [(bytes((5,)) + b"raw-key\x00", struct.pack(">q", 42))],
             1: [(bytes((5,)) + b"raw-key\x00" + _fstring("u"), b"\x00" + struct.pack(">q", 1))]}
    buf, offsets = keyed.encode_canonical_stream(meta, 5, 5, {5: pairs})
    handle = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 5, offsets, None)
    py, c = both(lambda: [outcome(lambda: KeyedState.of_stream(buf, handle, meta, 128).entries({0})),
                          outcome(lambda: KeyedState.of_stream(buf, handle, meta, 128).entries()),
                          outcome(lambda: KeyedState.of_stream(buf, handle, meta, 128).rows([0, 1]))])
    assert py == c
    assert py[0][1] is None and len(py[0][0]) == 1
    assert py[1][1] is UnsupportedSerializerError and py[2][1] is UnsupportedSerializerError
