"""Hypothesis strategies and builders shared by the tests of the compiled decoders
(test_speedups.py: rows, test_columnar.py and test_columnar_layouts.py: Arrow batches).

* ``keyed_streams``: generated keyed-state contents (a backend's meta, max parallelism, the values
  per key group and state, the key-group range), configured by each test module with its scalars,
  value types, state kinds and sizes;
* ``canonical_pairs`` and ``key_group_stream``: those contents as Flink's canonical stream;
* ``damage``: one drawn change to a stream's bytes;
* ``same``, ``key_comes_back`` and ``check_damaged_outcome``: comparing decoded results;
* ``keyed_samples``: the shipped samples' operators with keyed state, as test parameters.
"""

from __future__ import annotations

from typing import Callable

import pytest
from hypothesis import HealthCheck, settings, strategies as st

from fstate.savepoint import handles, keyed
from fstate.savepoint.compression import frame_chunks
from fstate.savepoint.errors import CorruptStateError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import (BOOLEAN, BYTE, CHAR, DOUBLE, FLOAT, INT, LONG, SHORT, STRING, TIME_WINDOW,
                                    VOID_NAMESPACE, MapType, TupleType)
from tests.support import sample_dirs, sample_snapshot

GEN = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])

I64 = st.integers(-(2 ** 63), 2 ** 63 - 1)

KEY_TYPES = ["String", "Long", "Integer", "Short", "Byte", "Boolean", "Double", "Float", "Character"]


def texts(*edges: str):
    """Strings of any code points (lone surrogates too), or one of the edge cases."""
    any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)
    return any_text | st.sampled_from(list(edges))


def scalars(text, windows: bool = False) -> dict:
    """Scalar type name -> (TypeInfo, strategy for its values); with ``windows`` also TimeWindow."""
    out = {
        "String": (STRING, text),
        "Long": (LONG, I64 | st.sampled_from([-(2 ** 63), 2 ** 63 - 1, 0, -1])),
        "Integer": (INT, st.integers(-(2 ** 31), 2 ** 31 - 1)),
        "Short": (SHORT, st.integers(-(2 ** 15), 2 ** 15 - 1)),
        "Byte": (BYTE, st.integers(-128, 127)),
        "Boolean": (BOOLEAN, st.booleans()),
        "Double": (DOUBLE, st.floats(allow_nan=False)),
        "Float": (FLOAT, st.floats(allow_nan=False, width=32)),
        "Character": (CHAR, st.characters(max_codepoint=0xFFFF, codec=None, exclude_categories=())),
    }
    if windows:
        out["TimeWindow"] = (TIME_WINDOW, st.tuples(I64, I64))
    return out


@st.composite
def keyed_streams(draw, scalar_types: dict, value_types, list_element, kinds: list[str], max_states: int,
                  max_keys: int, text):
    """(meta, max parallelism, {key group: {state id: [(key, namespace, value)]}}, first and last key
    group). value_types(): (TypeInfo, values) of VALUE, REDUCING, AGGREGATING states and map values;
    list_element(draw): (TypeInfo, values) of a list's elements; kinds: the state kinds drawn from (TIMER:
    a timer state, not a column); up to max_states states and max_keys keys per key group; text:
    the values of a string namespace."""
    key_name = draw(st.sampled_from(KEY_TYPES + ["Tuple"]))
    if key_name == "Tuple":
        (a, sa), (b, sb) = (scalar_types[draw(st.sampled_from(KEY_TYPES))],
                            scalar_types[draw(st.sampled_from(KEY_TYPES))])
        key_t, key_s = TupleType((a, b)), st.tuples(sa, sb)
    else:
        key_t, key_s = scalar_types[key_name]
    mp = draw(st.sampled_from([128, 4096]))
    compressed = draw(st.booleans())
    ns_choice = draw(st.sampled_from(["void", "void", "window", "string"]))
    ns_t = {"void": VOID_NAMESPACE, "window": TIME_WINDOW, "string": STRING}[ns_choice]
    ns_s = {"void": st.none(), "window": st.tuples(I64, I64), "string": text}[ns_choice]
    states, strategies = [], []
    for i in range(draw(st.integers(1, max_states))):
        kind = draw(st.sampled_from(kinds))
        if kind == "TIMER":
            states.append(keyed.timer_state_meta(draw(st.sampled_from(["event", "processing"])), key_t, ns_t,
                                                 service=f"s{i}"))
            strategies.append(I64)
        elif kind == "LIST":
            t, s = list_element(draw)
            states.append(keyed.value_state_meta(f"s{i}", kind, t, ns_t))
            strategies.append(st.lists(s, max_size=4))
        elif kind == "MAP":
            (kt, ks), (vt, vs) = scalar_types[draw(st.sampled_from(KEY_TYPES))], draw(value_types())
            states.append(keyed.value_state_meta(f"s{i}", kind, MapType(kt, vt), ns_t))
            strategies.append(st.dictionaries(ks, st.none() | vs, max_size=3))
        else:
            t, s = draw(value_types())
            states.append(keyed.value_state_meta(f"s{i}", kind, t, ns_t))
            strategies.append(st.none() | s)
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, compressed, key_t, states)
    meta.header_size = len(keyed.proxy_bytes(meta))
    kgs = draw(st.lists(st.integers(0, min(mp, 300) - 1), min_size=1, max_size=4, unique=True))
    data: dict = {}
    for kg in kgs:
        keys = draw(st.lists(key_s, max_size=max_keys, unique_by=lambda k: repr(k)))
        for key in keys:
            ns = draw(ns_s)
            for sid, s in enumerate(strategies):
                v = draw(s)
                if v is not None:
                    data.setdefault(kg, {}).setdefault(sid, []).append((key, ns, v))
    return meta, mp, data, min(kgs), max(kgs)


def canonical_pairs(meta, mp, data) -> dict:
    """{key group: {state id: sorted (key bytes, value bytes)}} of generated contents."""
    encoders = [keyed.PairEncoder(meta, sid, mp) for sid in range(len(meta.states))]
    pairs: dict = {}
    for kg, by_state in data.items():
        for sid, items in by_state.items():
            seen = {}
            for key, ns, v in items:
                for k, b in encoders[sid].pairs(kg, key, v, ns):
                    seen[k] = b  # a float key of -0.0 and 0.0 are different bytes; same bytes: last wins
            pairs.setdefault(kg, {})[sid] = sorted(seen.items())
    return pairs


def key_group_stream(meta, pairs, lo, hi):
    """(stream bytes, handle): the canonical stream of key groups lo..hi, each block framed in
    chunks when the meta says compressed."""
    out = bytearray(keyed.proxy_bytes(meta))
    offsets = []
    for kg in range(lo, hi + 1):
        block = keyed.encode_key_group(kg, pairs.get(kg) or {})
        offsets.append(len(out) if block else 0)
        out += (frame_chunks(block) if meta.compressed else block) if block else b""
    return bytes(out), handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, lo, tuple(offsets), None)


def damage(data, buf: bytes, start: int, set_values: list[int]) -> bytes:
    """buf with one drawn change at or after start: a flipped byte, a byte set to one of
    set_values, 1-4 bytes cut or 1-3 bytes inserted."""
    damaged = bytearray(buf)
    at = data.draw(st.integers(start, len(buf) - 1))
    how = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
    if how == "flip":
        damaged[at] ^= data.draw(st.integers(1, 255))
    elif how == "set":
        damaged[at] = data.draw(st.sampled_from(set_values))
    elif how == "cut":
        del damaged[at:at + data.draw(st.integers(1, 4))]
    else:
        damaged[at:at] = bytes(data.draw(st.lists(st.integers(0, 255), min_size=1, max_size=3)))
    return bytes(damaged)


def same(a, b) -> bool:
    """Equality where -0.0 != 0.0 (the bytes differ) and NaN never appears."""
    return repr(a) == repr(b)


def key_comes_back(entries, meta) -> bool:
    """A list or map state whose entries of one key are not next to each other in a key group."""
    seen, previous = set(), {}
    for sid, kg, ident, *_ in entries:
        if meta.states[sid].kind in ("LIST", "MAP") and previous.get(sid) != (kg, ident):
            if (sid, kg, ident) in seen:
                return True
            seen.add((sid, kg, ident))
            previous[sid] = (kg, ident)
    return False


def check_damaged_outcome(want, got, meta, entries: Callable[[], list], damaged: bool = True) -> None:
    """The columnar decoder's outcome (rows or CorruptStateError) against the strict reference's
    (rows or an error class) on possibly damaged input: the same rows, or CorruptStateError from
    both; the one documented difference is a list or map key that comes back after another key
    (the reference merges its entries, the columnar decoder rejects them). entries(): the
    reference's entries; damaged: whether the input was changed at all."""
    if got is CorruptStateError and want is not CorruptStateError:
        assert damaged and key_comes_back(entries(), meta), want
    elif want is CorruptStateError or got is CorruptStateError:
        assert damaged and got is CorruptStateError and want is CorruptStateError, (want, got)
    else:
        assert same(want, got)


def keyed_samples(skip_layout: str | None = None) -> list:
    """pytest parameters (sample folder, operator uid hash) of every operator with keyed state in the
    shipped samples, but those whose keyed layout is skip_layout."""
    out = []
    for s in sample_dirs():
        sp = Savepoint.open(str(sample_snapshot(s)))
        for op in sp.operators:
            if op.has_keyed_state and op.keyed_layout != skip_layout:
                out.append(pytest.param(s, op.uid_hash, id=f"{s.name}-{op.uid or op.uid_hash[:8]}"))
    return out
