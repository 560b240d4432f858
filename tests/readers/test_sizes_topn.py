"""The compiled sizes pass that keeps each key group's keys in C (``Scanner.measure_top``: keys known
by their bytes, only those that may rank handed to Python) against the pure-Python pass (the
reference, FSTATE_PURE_PYTHON=1) and the compiled pass that hands Python every key
(``Scanner.measure``): the same totals, key counts, per-key-group bytes, TTL expiry and top keys in
the same order, on generated key-group streams with many ties (keys of equal bytes or elements),
lists, maps, namespaces, timers and TTL state, and on the shipped samples."""

from __future__ import annotations

import dataclasses
import random
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from fstate.readers import sizes_measure
from fstate.readers.sizes import state_sizes
from fstate.readers.sizes_measure import KeyedTask, measure_subtask
from fstate.savepoint import _fastpath, handles, keyed, ttl_meta
from fstate.savepoint.errors import FStateError
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.types import DOUBLE, INT, LONG, STRING, TIME_WINDOW, MapType, TtlValue, TupleType
from tests.support import SAMPLES, sample_dirs, sample_snapshot

MAX_PARALLELISM = 128
KEY_GROUPS = (3, 7, 8, 40)
#: last accesses (epoch ms) drawn for TTL values, and the deadline that expires some of them
STAMPS, DEADLINE = (1_000, 2_000, 3_000), 2_000


@pytest.fixture(autouse=True)
def _compiled():
    if not _fastpath.available():
        pytest.skip("the compiled scanner is not built")


def _text(rng: random.Random) -> str:
    """Short strings over few letters (many of equal length: ties), some beyond ASCII and the BMP."""
    return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600") if rng.random() < 0.1 else rng.choice("abc")
                   for _ in range(rng.randint(1, 3)))


KEYS = {
    "String": (STRING, _text),
    "Long": (LONG, lambda rng: rng.choice([-1, 0, 7, 2 ** 40, -(2 ** 63)]) + rng.randint(0, 3)),
    "Tuple": (TupleType((STRING, INT)), lambda rng: (_text(rng), rng.randint(-2, 2))),
    # 0.0 and -0.0 are one key in Python but two byte strings: measure_top hands such key groups back
    "Double": (DOUBLE, lambda rng: rng.choice([0.0, -0.0, 1.5, -2.25, 1e300]) if rng.random() < 0.3
               else rng.randint(-400, 400) / 4),
}


def _states(ttl: bool) -> list:
    plain = [keyed.value_state_meta("value", "VALUE", LONG),
             keyed.value_state_meta("windowed", "VALUE", LONG, TIME_WINDOW),
             keyed.value_state_meta("list", "LIST", STRING),
             keyed.value_state_meta("map", "MAP", MapType(STRING, LONG))]
    return [ttl_meta.ttl_meta(s) for s in plain] if ttl else plain


def _value(kind: str, rng: random.Random, ttl: bool):
    wrap = (lambda v: TtlValue(v, rng.choice(STAMPS))) if ttl else (lambda v: v)
    if kind == "LIST":
        return [wrap(_text(rng)) for _ in range(rng.randint(0, 3))]
    if kind == "MAP":
        return [(u, wrap(rng.randint(0, 9))) for u in sorted({_text(rng) for _ in range(rng.randint(0, 3))})]
    return wrap(rng.randint(0, 9))


@dataclass
class _Source:
    """A subtask's keyed state from a stream in memory (what KeyedStateSource opens, for measure_subtask)."""

    buf: bytes
    handle: object
    meta: keyed.KeyedBackendMeta
    subtask: int = 0

    @contextmanager
    def open(self, *, key_groups=None, meta_of=None):
        yield KeyedState.of_stream(self.buf, self.handle, meta_of(self.meta) if meta_of else self.meta,
                                   MAX_PARALLELISM, key_groups=key_groups, source="generated")


def _generated(key_name: str, ttl: bool, seed: int) -> _Source:
    key_type, draw = KEYS[key_name]
    states = _states(ttl) + [keyed.timer_state_meta("event", key_type)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, key_type, states)
    rng = random.Random(seed)
    encoders = [keyed.PairEncoder(meta, sid, MAX_PARALLELISM) for sid in range(len(states))]
    pairs: dict = {}
    used: set = set()  # a key lives in one key group (two with the same text would tie on everything)
    for kg in KEY_GROUPS:
        drawn = [draw(rng) for _ in range(rng.randint(5, 40))]
        for key in dict.fromkeys(k for k in drawn if k not in used):  # in the order drawn: no hash order
            used.add(key)
            for sid, info in enumerate(states[:-1]):
                windows = [(0, 10), (10, 20), (20, 30)][:rng.randint(1, 3)] if info.name == "windowed" else [None]
                for window in windows:
                    found = encoders[sid].pairs(kg, key, _value(info.kind, rng, ttl), window)
                    pairs.setdefault(kg, {}).setdefault(sid, []).extend(found)
            if rng.random() < 0.5:
                pairs[kg].setdefault(len(states) - 1, []).extend(encoders[-1].pairs(kg, key, rng.choice(STAMPS)))
    for by_state in pairs.values():  # one pair per key bytes (0.0 and -0.0 are two)
        for sid, found in by_state.items():
            by_state[sid] = list(dict(found).items())
    buf, offsets = keyed.encode_canonical_stream(meta, min(KEY_GROUPS), max(KEY_GROUPS), pairs)
    # read as a snapshot's header says: TTL values decode to the bare value (written with their stamps)
    stored = [ttl_meta.rebuild(s, ttl_meta.stored_ttl(s).with_timestamps(False)) if ttl_meta.is_ttl_meta(s) else s
              for s in states]
    read = dataclasses.replace(meta, states=stored, header_size=len(keyed.proxy_bytes(meta)))
    return _Source(buf, handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, min(KEY_GROUPS), tuple(offsets), None),
                   read)


def _report(measured) -> dict:
    """A subtask's measure as plain data: every state's sizes and its top keys in order, the key groups."""
    states = {}
    for name, m in measured.states.items():
        m.sizes.top_by_bytes, m.sizes.top_by_elements = m.by_bytes.items(), m.by_elements.items()
        states[name] = m.sizes.to_dict()
    return {"states": states, "key_groups": measured.key_groups}


def _without_measure_top(monkeypatch):
    """The compiled pass handing Python every key (Scanner.measure), as before measure_top."""
    original = KeyedState.measured_key_groups
    monkeypatch.setattr(KeyedState, "measured_key_groups",
                        lambda self, keys, deadline=None, ranks=None: original(self, keys, deadline))


def _flush_counter(monkeypatch) -> list:
    """Key groups whose every key went to Python (sizes_measure._flush), counted."""
    flushed, flush = [], sizes_measure._flush
    monkeypatch.setattr(sizes_measure, "_flush", lambda *a: flushed.append(a[1]) or flush(*a))
    return flushed


@pytest.mark.parametrize("top", [1, 3])
@pytest.mark.parametrize("ttl", [False, True])
@pytest.mark.parametrize("key_name", list(KEYS))
@pytest.mark.parametrize("seed", range(4))
def test_measure_top_equals_the_pure_and_the_per_key_passes(seed, key_name, ttl, top, monkeypatch):
    source = _generated(key_name, ttl, seed)
    task = KeyedTask(source, top, DEADLINE + 86_400_000, 86_400_000)
    flushed = _flush_counter(monkeypatch)
    fast = _report(measure_subtask(task))
    if key_name == "Double":  # a key group holding 0.0 or -0.0 is handed back to Scanner.measure
        assert flushed
    else:
        assert not flushed  # every key group measured by measure_top
    with monkeypatch.context() as patched:
        _without_measure_top(patched)
        assert _report(measure_subtask(task)) == fast
    assert flushed  # that pass went through _flush
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert _report(measure_subtask(task)) == fast
    states = fast["states"]
    assert states["list"]["elements"] > 0 and states["map"]["elements"] == states["map"]["entries"] > 0
    assert states["windowed"]["entries"] > states["windowed"]["keys"]  # several windows per key
    if ttl:
        assert 0 < states["list"]["ttl"]["expired_elements"] < states["list"]["elements"]
        assert 0 < states["value"]["ttl"]["expired_entries"] < states["value"]["entries"]
    ties = [k["bytes"] for k in states["value"]["top_by_bytes"]]
    assert len(ties) == top


def test_ties_rank_by_key_text_whatever_order_keys_come_in(monkeypatch):
    """Keys of equal bytes ordered by their text (a string before any it is a prefix of, code points
    compared beyond ASCII), over key groups whose keys come in another order: the top lists are the
    sorted (-bytes, text) of every key."""
    source = _generated("String", False, 11)
    expected = {}
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    everything = _report(measure_subtask(KeyedTask(source, 10 ** 6, 0, None)))
    for name, state in everything["states"].items():
        expected[name] = sorted(state["top_by_bytes"], key=lambda k: (-k["bytes"], k["key"]))[:3]
    monkeypatch.delenv("FSTATE_PURE_PYTHON")
    found = _report(measure_subtask(KeyedTask(source, 3, 0, None)))
    assert {name: state["top_by_bytes"] for name, state in found["states"].items()} == expected
    assert len({k["bytes"] for k in expected["value"]}) < 3  # ties among them


@pytest.mark.parametrize("sample", [s.name for s in sample_dirs() if not s.name.startswith("operator-state")])
def test_samples_measure_the_same(sample, monkeypatch):
    """The shipped samples (hashmap and RocksDB, savepoints and checkpoints, SQL and CEP state): the
    same report from measure_top, Scanner.measure and the pure-Python pass."""
    sample = str(sample_snapshot(SAMPLES / sample))
    report = [state_sizes(sample, top=top, parallelisms=[3], at=0).to_dict() for top in (1, 4)]
    with monkeypatch.context() as patched:
        _without_measure_top(patched)
        assert [state_sizes(sample, top=top, parallelisms=[3], at=0).to_dict() for top in (1, 4)] == report
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert [state_sizes(sample, top=top, parallelisms=[3], at=0).to_dict() for top in (1, 4)] == report


def _outcome(task):
    try:
        return _report(measure_subtask(task))
    except FStateError as e:
        return type(e), str(e)


@pytest.mark.parametrize("ttl", [False, True])
def test_damaged_streams_fail_as_the_per_key_pass_does(ttl, monkeypatch):
    """A byte of the key groups changed (flipped, set to a length's or a delimiter's value): measure_top
    gives what Scanner.measure gives, the same report or the same error."""
    source = _generated("String", ttl, 5)
    rng, start = random.Random(7), source.meta.header_size
    failed = 0
    for _ in range(150):
        damaged = bytearray(source.buf)
        at = rng.randrange(start, len(damaged))
        damaged[at] = rng.choice([damaged[at] ^ rng.randint(1, 255), 0x00, 0x01, 0x2C, 0x80, 0xFF])
        task = KeyedTask(dataclasses.replace(source, buf=bytes(damaged)), 2, DEADLINE + 86_400_000, 86_400_000)
        fast = _outcome(task)
        with monkeypatch.context() as patched:
            _without_measure_top(patched)
            assert _outcome(task) == fast, at
        failed += isinstance(fast, tuple)
    assert failed > 10  # most damage is found


@pytest.mark.parametrize("key_name", ["String", "Long"])
def test_a_key_group_of_ties_hands_python_its_top_only(key_name, monkeypatch):
    """Thousands of keys of equal bytes and elements in one key group, measured first (the heaps empty,
    as every pass over one key group starts): only the key group's own top keys by each measure reach
    Python when the keys are strings (their ties cut by key text in C, beyond ASCII too), and the report
    equals the pure-Python pass's either way."""
    key_type = STRING if key_name == "String" else LONG
    states = [keyed.value_state_meta("value", "VALUE", LONG), keyed.value_state_meta("list", "LIST", STRING)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, key_type, states)
    encoders = [keyed.PairEncoder(meta, sid, MAX_PARALLELISM) for sid in range(len(states))]
    letters = "ab\u00e9\u4e2d\U0001f600"
    keys = ([a + b + c for a in letters for b in letters for c in letters] if key_name == "String"
            else list(range(1000, 1125)))
    random.Random(3).shuffle(keys)
    pairs = {kg: {0: [], 1: []} for kg in (5, 6)}
    for i, key in enumerate(keys):
        kg = 5 + i % 2
        pairs[kg][0] += encoders[0].pairs(kg, key, 7)
        pairs[kg][1] += encoders[1].pairs(kg, key, ["xy", "z"])
    buf, offsets = keyed.encode_canonical_stream(meta, 5, 6, pairs)
    read = dataclasses.replace(meta, header_size=len(keyed.proxy_bytes(meta)))
    source = _Source(buf, handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 5, tuple(offsets), None), read)
    handed = []
    rank = sizes_measure._rank
    monkeypatch.setattr(sizes_measure, "_rank", lambda m, kg, found: handed.append(len(list(found) or ())) or
                        rank(m, kg, found))
    fast = _report(measure_subtask(KeyedTask(source, 3, 0, None)))
    if key_name == "String":
        assert handed and max(handed) <= 2 * 3  # bytes and elements: the key group's top 3 each
        assert len(fast["states"]["value"]["top_by_bytes"]) == 3
    else:
        assert sum(handed) > 0
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert _report(measure_subtask(KeyedTask(source, 3, 0, None))) == fast


def test_a_mapped_key_group_measures_the_same_with_its_pages_dropped(tmp_path, monkeypatch):
    """A key group of over 8 MB in a mapped file: measure_top drops the pages it has passed (every
    4 MB) and reads them again where it needs (ties, the keys it hands over); the report equals the
    same bytes measured in memory, and the pure-Python pass's."""
    import mmap

    states = [keyed.value_state_meta("value", "VALUE", LONG), keyed.value_state_meta("list", "LIST", STRING),
              keyed.value_state_meta("windowed", "VALUE", LONG, TIME_WINDOW)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    encoders = [keyed.PairEncoder(meta, sid, MAX_PARALLELISM) for sid in range(len(states))]
    rng = random.Random(5)
    pairs = {9: {0: [], 1: [], 2: []}}
    for i in range(30_000):
        key = f"k{rng.randrange(10 ** 6):06d}-{i}"
        pairs[9][0] += encoders[0].pairs(9, key, i)
        pairs[9][1] += encoders[1].pairs(9, key, ["x" * rng.choice((90, 100, 100)) for _ in range(3)])
        if i % 7 == 0:
            pairs[9][2] += encoders[2].pairs(9, key, 1, (0, 10)) + encoders[2].pairs(9, key, 2, (10, 20))
    buf, offsets = keyed.encode_canonical_stream(meta, 9, 9, pairs)
    assert len(buf) > 8 << 20
    path = tmp_path / "stream"
    path.write_bytes(buf)
    read = dataclasses.replace(meta, header_size=len(keyed.proxy_bytes(meta)))
    handle = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 9, tuple(offsets), None)
    in_memory = _report(measure_subtask(KeyedTask(_Source(buf, handle, read), 5, 0, None)))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert _report(measure_subtask(KeyedTask(_Source(mapped, handle, read), 5, 0, None))) == in_memory
    assert in_memory["states"]["list"]["keys"] == 30_000
    assert in_memory["states"]["windowed"]["entries"] == 2 * in_memory["states"]["windowed"]["keys"]
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert _report(measure_subtask(KeyedTask(_Source(buf, handle, read), 5, 0, None))) == in_memory
