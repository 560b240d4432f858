"""``fstate sizes`` against real Flink: the state KeyedStateJob and TtlStateJob dumped (their cached
runs, no new JVM), measured independently of fstate's decoders, must equal what ``state_sizes``
finds, on hashmap and RocksDB, savepoints, checkpoints and incremental checkpoints.

From each dump: every entry's key group (the key's Java hash through murmur, as Flink's
``KeyGroupRangeAssignment``), its stored entries (a map entry each, a list once, timers), its bytes
(the dump's values encoded canonically by fstate's writer, whose savepoints real Flink restores:
tests/flink/test_writer_oracle.py) and each key's list / map elements. Independently of any
encoder, the bytes per key group of a canonical savepoint are Flink's own: each key group's region
(by Flink's key-group offsets) less its framing (2 bytes per state run and one state id, 8 bytes of
lengths per entry). The rescale preview at every parallelism up to 8 is checked against the
subtask each key group goes to (``operator_index_for_key_group``), and at the job's parallelism
against the key-group ranges Flink gave its subtasks; the whole job's preview (a slot: subtask i of
every operator) likewise. Growth by key: two runs' dumps (1000 and 10 000 keys), every key compared.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from fstate.readers.sizes import key_text, state_sizes
from fstate.savepoint import keyed, ttl_meta
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import TtlValue
from fstate.savepoint.types.hashing import hash_long, hash_string, key_group_for_hash, operator_index_for_key_group
from tests.flink import harness

pytestmark = pytest.mark.flink

VERSION = "2.3.0"
KEYED_OPERATORS = ("keyed", "window-agg", "window-reduce")
VARIANTS = {
    "hashmap savepoint": ("hashmap", "savepoint", ()),
    "rocksdb savepoint": ("rocksdb", "savepoint", ()),
    "hashmap checkpoint": ("hashmap", "checkpoint", ()),
    "rocksdb checkpoint": ("rocksdb", "checkpoint", ()),
    "rocksdb incremental checkpoint": ("rocksdb", "checkpoint", ("--incremental", "true")),
    "rocksdb incremental 10000 keys": ("rocksdb", "checkpoint", ("--incremental", "true", "--records", "20000",
                                                                 "--keys", "10000", "--pause-at", "10000")),
}
TOP = 5


def _key_group(key, max_parallelism: int) -> int:
    return key_group_for_hash(hash_string(key) if isinstance(key, str) else hash_long(key), max_parallelism)


def _typed(kind: str, value, ttl: bool):
    """A dump's value as fstate's encoders take it (TTL timestamps take 8 bytes whatever they are)."""
    wrap = (lambda v: TtlValue(v, 0)) if ttl else (lambda v: v)
    if kind == "LIST":
        return [wrap(v) for v in value]
    if kind == "MAP":
        return [(k, wrap(v)) for k, v in value]
    return wrap(tuple(value) if isinstance(value, list) else value)


class Expected:
    """What a dump says about one operator's keyed state."""

    def __init__(self, dump_op: dict, meta, max_parallelism: int):
        self.max_parallelism = max_parallelism
        self.states = defaultdict(lambda: {"entries": 0, "bytes": 0, "elements": 0, "keys": {}})
        self.kg_bytes = [0] * max_parallelism
        self.kg_entries = [0] * max_parallelism
        self.kg_runs = defaultdict(set)
        ids = {s.name: i for i, s in enumerate(meta.states)}
        for state in dump_op["keyed_state"]:
            sid = ids[state["state"]]
            ttl = ttl_meta.is_ttl_meta(meta.states[sid])
            encoder = keyed.PairEncoder(ttl_meta.with_timestamped_states(meta), sid, max_parallelism)
            for key_part, value in state["entries"]:
                key, namespace = (key_part[0], tuple(key_part[1:])) if isinstance(key_part, list) else (key_part, None)
                elements = len(value) if state["kind"] in ("LIST", "MAP") else 0
                self._add(state["state"], sid, key, encoder.pairs(_key_group(key, max_parallelism), key,
                                                                  _typed(state["kind"], value, ttl), namespace),
                          elements)
        for timer in dump_op["timers"]:
            name = next(s.name for s in meta.states if s.name.startswith(f"_timer_state/{timer['kind']}_"))
            namespace = tuple(timer["namespace"]) if timer["namespace"] is not None else None
            key = timer["key"]
            encoder = keyed.PairEncoder(meta, ids[name], max_parallelism)
            self._add(name, ids[name], key, encoder.pairs(_key_group(key, max_parallelism), key, timer["timestamp"],
                                                          namespace), 0)

    def _add(self, name: str, sid: int, key, pairs, elements: int) -> None:
        kg = _key_group(key, self.max_parallelism)
        size = sum(len(k) + len(v) for k, v in pairs)
        state = self.states[name]
        state["entries"] += len(pairs)
        state["bytes"] += size
        state["elements"] += elements
        per_key = state["keys"].setdefault(key, {"key": key_text(key), "key_group": kg, "bytes": 0, "entries": 0,
                                                 "elements": 0})
        per_key["bytes"] += size
        per_key["entries"] += len(pairs)
        per_key["elements"] += elements
        self.kg_bytes[kg] += size
        self.kg_entries[kg] += len(pairs)
        self.kg_runs[kg].add(sid)

    def top(self, name: str, measure: str) -> list[dict]:
        keys = [k for k in self.states[name]["keys"].values() if k[measure] > 0]
        return sorted(keys, key=lambda k: (-k[measure], k["key"]))[:TOP]


def _check(snapshot_dir, dump: dict, operators=KEYED_OPERATORS, **options) -> dict:
    """{uid: (expected, measured)}; ``options``: state_sizes's (the engine)."""
    savepoint = Savepoint.open(str(snapshot_dir))
    report = state_sizes(savepoint, top=TOP, parallelisms=range(1, 9), **options)
    found = {}
    for uid in operators:
        dump_op = next(o for o in dump["operators"] if o["uid"] == uid)
        view = savepoint.operator(uid)
        expected = Expected(dump_op, view.keyed_meta, view.max_parallelism)
        measured = report.operator(uid)
        states = {s.name: s for s in measured.states}
        for name, want in expected.states.items():
            got = states[name]
            assert (got.entries, got.bytes, got.elements, got.keys) == (
                want["entries"], want["bytes"], want["elements"], len(want["keys"])), (uid, name)
            assert [k.to_dict() for k in got.top_by_bytes] == expected.top(name, "bytes"), (uid, name)
            if got.kind in ("LIST", "MAP"):
                assert [k.to_dict() for k in got.top_by_elements] == expected.top(name, "elements"), (uid, name)
        assert sum(s.entries for s in measured.states) == sum(s["entries"] for s in expected.states.values())
        assert measured.key_group_bytes == expected.kg_bytes and measured.key_group_entries == expected.kg_entries
        for point in measured.rescale:
            parallelism = point["parallelism"]
            loads, counts = [0] * parallelism, [0] * parallelism
            for kg in range(view.max_parallelism):
                index = operator_index_for_key_group(kg, parallelism, view.max_parallelism)
                loads[index] += expected.kg_bytes[kg]
                counts[index] += expected.kg_entries[kg]
            assert (point["subtask_bytes"], point["subtask_entries"]) == (loads, counts), (uid, parallelism)
        # at the job's parallelism the preview is what each subtask holds now
        now = next(p for p in measured.rescale if p["parallelism"] == view.parallelism)
        assert now["subtask_bytes"] == measured.subtask_bytes
        found[uid] = (expected, measured)
    if {op.display_name for op in report.operators if op.keyed_bytes} == set(found):
        _check_job(report.job, found)
    json.dumps(report.to_dict())  # the report is plain data
    return found


def _check_job(job: dict, found: dict) -> None:
    """The whole job's preview: at each parallelism, slot i holds subtask i of every operator (all
    at the job's parallelism here), each subtask the key groups Flink assigns it, their bytes the dump's."""
    assert not job["fixed"] and set(job["following"]) == set(found)
    assert [p["parallelism"] for p in job["rescale"]] == list(range(1, 9))
    for point in job["rescale"]:
        parallelism, slots = point["parallelism"], [0] * point["parallelism"]
        for expected, measured in found.values():
            for kg, size in enumerate(expected.kg_bytes):
                slots[operator_index_for_key_group(kg, parallelism, measured.max_parallelism)] += size
        assert point["slot_bytes"] == slots, parallelism


@pytest.mark.parametrize("variant", VARIANTS)
def test_sizes_equal_the_dump(variant):
    harness.require_flink(VERSION)
    backend, snapshot, args = VARIANTS[variant]
    res = harness.generate("KeyedStateJob", VERSION, backend, snapshot, extra_args=args)
    found = _check(res.snapshot_dir, res.dump)
    keyed = {op.display_name for op in state_sizes(str(res.snapshot_dir), top=0).operators if op.keyed_bytes}
    assert keyed == set(found)  # so _check checked the whole job's preview too
    if snapshot == "savepoint":  # canonical key-group streams: Flink's bytes per key group, less the framing
        savepoint = Savepoint.open(str(res.snapshot_dir))
        for uid, (expected, _) in found.items():
            view = savepoint.operator(uid)
            for (subtask, handle), source in zip(view.keyed_handles(), view.keyed_states()):
                with source.open() as state:
                    assert state.layout == "canonical" and not state.meta.compressed
                    for kg, start, end in state.regions:
                        framing = 2 + 2 * len(expected.kg_runs[kg]) + 8 * expected.kg_entries[kg]
                        assert end - start - framing == expected.kg_bytes[kg], (uid, kg)
                    covered = {kg for kg, _, _ in state.regions}
                    assert all(expected.kg_bytes[kg] == 0 for kg in set(range(handle.start_key_group,
                                                                                handle.end_key_group + 1)) - covered)
                    # the subtask's key groups are the ones the preview gives it at the job's parallelism
                    lo, hi = handle.start_key_group, handle.end_key_group
                    assert all(operator_index_for_key_group(kg, view.parallelism, view.max_parallelism) == subtask
                               for kg in range(lo, hi + 1))


def test_ttl_state_sizes_and_expiry():
    harness.require_flink(VERSION)
    res = harness.generate("TtlStateJob", VERSION, "hashmap", "savepoint")
    found = _check(res.snapshot_dir, res.dump, operators=("ttl",))
    _, measured = found["ttl"]
    ttl_states = [s for s in measured.states if s.ttl is not None]
    assert {s.name for s in ttl_states} == {"last", "counts", "events"}
    day = 24 * 3600 * 1000
    newest = max(s.ttl.newest_access for s in ttl_states)
    oldest = min(s.ttl.oldest_access for s in ttl_states)
    path = str(res.snapshot_dir)
    everything = state_sizes(path, at=newest + day, ttl_ms=day, operators=["ttl"]).operator("ttl")
    nothing = state_sizes(path, at=oldest + day - 1, ttl_ms=day, operators=["ttl"]).operator("ttl")
    for state in everything.states:
        if state.ttl is not None:
            assert (state.ttl.expired_entries, state.ttl.expired_bytes) == (state.entries, state.bytes)
            assert state.ttl.expired_elements == (state.elements if state.kind == "LIST" else 0)
    for state in nothing.states:
        if state.ttl is not None:
            assert (state.ttl.expired_entries, state.ttl.expired_bytes, state.ttl.expired_elements) == (0, 0, 0)


@pytest.mark.spark
def test_spark_sizes_equal_the_dump(spark):
    """On Spark, a task a piece (every subtask's RocksDB snapshot of the 10 000 keys' incremental
    checkpoint), the partial results merged on the driver equal the dump, and each operator's report
    is the very JSON the embedded engine gives."""
    harness.require_flink(VERSION)
    backend, snapshot, args = VARIANTS["rocksdb incremental 10000 keys"]
    res = harness.generate("KeyedStateJob", VERSION, backend, snapshot, extra_args=args)
    at = 1_800_000_000_000
    found = _check(res.snapshot_dir, res.dump, at=at, engine="spark", spark=spark)
    embedded = state_sizes(str(res.snapshot_dir), top=TOP, parallelisms=range(1, 9), at=at, engine="embedded")
    assert [measured.to_dict() for _, measured in found.values()] == [embedded.operator(uid).to_dict() for uid in found]


OPERATOR_STATE_RUNS = {
    "OperatorStateJob rocksdb checkpoint": ("OperatorStateJob", "rocksdb", "checkpoint"),
    "OperatorStateJob hashmap savepoint": ("OperatorStateJob", "hashmap", "savepoint"),
    "BroadcastJob hashmap savepoint": ("BroadcastJob", "hashmap", "savepoint"),
}


@pytest.mark.parametrize("run", OPERATOR_STATE_RUNS)
def test_operator_state_sizes_equal_the_dump(run):
    """List, union and broadcast states per subtask: the dump's elements / entries and Flink's bytes
    (tests/sizes_compare.py; the samples' runs are checked by tests/cli/test_sizes.py)."""
    from tests.sizes_compare import check_operator_state_sizes

    harness.require_flink(VERSION)
    job, backend, snapshot = OPERATOR_STATE_RUNS[run]
    res = harness.generate(job, VERSION, backend, snapshot)
    assert check_operator_state_sizes(res.snapshot_dir, res.dump) >= (2 if job == "BroadcastJob" else 10)


def test_ttl_state_measured_by_the_compiled_scanner(monkeypatch):
    """TtlStateJob's value, list and map TTL states are measured by the compiled scanner, which records
    each TTL wrapper's last access as it decodes it: at a time some have expired and some not, the
    very report the entry-by-entry pass (TtlValue decoded in Python) gives."""
    from fstate.readers import sizes_measure
    from fstate.savepoint.keyed_state import KeyedState

    harness.require_flink(VERSION)
    res = harness.generate("TtlStateJob", VERSION, "hashmap", "savepoint")
    path, day = str(res.snapshot_dir), 24 * 3600 * 1000
    stamps = sorted(s for op in state_sizes(path, ttl_ms=day, operators=["ttl"]).operators for state in op.states
                    if state.ttl is not None for s in (state.ttl.oldest_access, state.ttl.newest_access))
    # the job's accesses carry its run's clock, so the times are taken from the snapshot: before the
    # first expiry, at the oldest access's (some expired, not all, when the accesses differ), after all
    times = [stamps[0] + day - 1, stamps[0] + day, stamps[-1] + day]
    used = []
    compiled = sizes_measure._measure_compiled
    monkeypatch.setattr(sizes_measure, "_measure_compiled", lambda *a: used.append(compiled(*a)) or used[-1])
    fast = [state_sizes(path, top=TOP, ttl_ms=day, at=at, operators=["ttl"]).to_dict() for at in times]
    assert used and all(result is not None for result in used)
    assert {s["name"] for s in fast[0]["operators"][0]["states"] if s["ttl"]} == {"last", "counts", "events"}

    def expired(report, field):
        return sum(s["ttl"][field] for s in report["operators"][0]["states"] if s["ttl"] is not None)

    entries = sum(s["entries"] for s in fast[0]["operators"][0]["states"] if s["ttl"] is not None)
    assert expired(fast[0], "expired_entries") == expired(fast[0], "expired_elements") == 0
    assert expired(fast[1], "expired_entries") + expired(fast[1], "expired_elements") > 0
    if stamps[0] < stamps[-1]:
        assert expired(fast[1], "expired_entries") < entries
    assert expired(fast[2], "expired_entries") == entries
    monkeypatch.setattr(KeyedState, "records_ttl", lambda self: False)
    used.clear()
    assert [state_sizes(path, top=TOP, ttl_ms=day, at=at, operators=["ttl"]).to_dict() for at in times] == fast
    assert not used


@pytest.mark.parametrize("version", ["1.15.4", "1.20.1", "2.3.0"])
def test_heap_checkpoints_measured_by_the_compiled_scanner(version, monkeypatch):
    """A hashmap checkpoint's heap-native key groups are measured by the compiled scanner (each entry
    as the canonical layout stores it): the report of the Python pass (FSTATE_PURE_PYTHON=1), on
    every layout Flink's releases write."""
    from fstate.readers import sizes_measure

    harness.require_flink(version)
    res = harness.generate("KeyedStateJob", version, "hashmap", "checkpoint")
    used = []
    compiled = sizes_measure._measure_compiled
    monkeypatch.setattr(sizes_measure, "_measure_compiled", lambda *a: used.append(compiled(*a)) or used[-1])
    fast = state_sizes(str(res.snapshot_dir), top=TOP, parallelisms=[3], at=0).to_dict()
    assert used and all(result is not None for result in used)
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert state_sizes(str(res.snapshot_dir), top=TOP, parallelisms=[3], at=0).to_dict() == fast


def _dump_keys(res, uid: str) -> dict[str, dict[str, dict]]:
    """Every key's sizes in one operator of a run, from its dump: {state: {key text: sizes}}."""
    view = Savepoint.open(str(res.snapshot_dir)).operator(uid)
    dump_op = next(o for o in res.dump["operators"] if o["uid"] == uid)
    expected = Expected(dump_op, view.keyed_meta, view.max_parallelism)
    return {name: {item["key"]: dict(item) for item in state["keys"].values()}
            for name, state in expected.states.items()}


def test_growth_by_key_equals_the_dumps():
    """Two runs of KeyedStateJob (1000 keys; 10 000 keys from twice the records) compared both ways: per
    operator and state, the keys that grew, grew in elements and shrank most, and the counts of new,
    gone, grown, shrunk and unchanged keys, are what the two dumps give."""
    from fstate.readers.sizes_growth import state_growth
    from tests.sizes_compare import expected_key_growth, reported_key_growth

    harness.require_flink(VERSION)
    small = harness.generate("KeyedStateJob", VERSION, "rocksdb", "savepoint")
    large = harness.generate("KeyedStateJob", VERSION, *VARIANTS["rocksdb incremental 10000 keys"][:2],
                             extra_args=VARIANTS["rocksdb incremental 10000 keys"][2])
    dumped = {(id(run), uid): _dump_keys(run, uid) for run in (small, large) for uid in KEYED_OPERATORS}  # once each
    for old, new in ((small, large), (large, small)):
        report = state_growth(str(old.snapshot_dir), str(new.snapshot_dir), top=TOP).to_dict()
        for uid in KEYED_OPERATORS:
            expected = expected_key_growth(dumped[id(old), uid], dumped[id(new), uid], TOP)
            assert reported_key_growth(report, uid) == expected, uid
        counts = expected_key_growth(dumped[id(old), "keyed"], dumped[id(new), "keyed"], TOP)["counts"]["counts"]
        assert counts["new_keys" if new is large else "gone_keys"] == 9000
        assert {j["join"] for j in report["key_joins"]} == {"key group"}


@pytest.mark.parametrize("run", [("KeyedStateJob", "hashmap", "savepoint"), ("KeyedStateJob", "rocksdb", "savepoint"),
                                 ("KeyedStateJob", "rocksdb", "checkpoint"), ("TtlStateJob", "hashmap", "savepoint")])
def test_measure_top_equals_the_pure_pass(run, monkeypatch):
    """The compiled pass keeping each key group's keys in C (Scanner.measure_top: only the keys that
    may rank reach Python) gives the very report of the pure-Python pass and of the pass handing
    Python every key (Scanner.measure), top lists of 1 and 5 keys (ties among them), TTL expiry
    counted at a time some values have expired."""
    from fstate.readers import sizes_measure
    from fstate.savepoint.keyed_state import KeyedState

    harness.require_flink(VERSION)
    job, backend, snapshot = run
    res = harness.generate(job, VERSION, backend, snapshot)
    path, day = str(res.snapshot_dir), 24 * 3600 * 1000
    stamps = sorted(s for op in state_sizes(path, ttl_ms=day).operators for state in op.states
                    if state.ttl is not None for s in (state.ttl.oldest_access, state.ttl.newest_access))
    at = stamps[0] + day if stamps else 0

    def reports():
        return [state_sizes(path, top=top, parallelisms=[3], at=at, ttl_ms=day).to_dict() for top in (1, TOP)]

    flushed, flush = [], sizes_measure._flush
    monkeypatch.setattr(sizes_measure, "_flush", lambda *a: flushed.append(a) or flush(*a))
    fast = reports()
    assert not flushed  # no key group's keys all handed to Python
    original = KeyedState.measured_key_groups
    with monkeypatch.context() as patched:
        patched.setattr(KeyedState, "measured_key_groups",
                        lambda self, keys, deadline=None, ranks=None: original(self, keys, deadline))
        assert reports() == fast
    assert flushed
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    assert reports() == fast
