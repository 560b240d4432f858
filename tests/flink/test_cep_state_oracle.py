"""Real-Flink oracle for the state of a CEP operator (issue 14): fstate reads what ``CepJob`` (``a next b
next c``, partial matches pending) holds in its savepoint, and writes every value and serializer
snapshot back byte for byte, on every version the job runs on (harness.INTERNAL_STATE_VERSIONS: 2.3,
2.0 and 1.20; the RocksDB savepoint on 2.3 only). The CEP operator is located by the operator id in
the job's dump (metadata V4 of 1.20 has no uids).

The job's dump lists per key the pending partial matches (each as its buffered events in pattern
order), derived from the job's known input. fstate resolves each one from the NFA state's
computation state through the shared buffer (entries, edges, Dewey versions) to the events in
``sharedBuffer-events``, which must hold exactly those events.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import cep, tables
from fstate.savepoint import keyed, streams
from fstate.savepoint.keyed_codecs import key_group_prefix_size, state_codecs
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import CepType, MapType
from tests.flink import harness
from tests.sql_cep_compare import cep_expected_pending, cep_pending_partial_matches

pytestmark = pytest.mark.flink

VERSIONS = list(harness.INTERNAL_STATE_VERSIONS)


def _generate(backend: str, version: str) -> harness.JobResult:
    harness.require_flink(version)
    res = harness.generate("CepJob", version, backend, "savepoint", timeout=harness.DEFAULT_JOB_TIMEOUT)
    assert res.dump["flink_version"] == version
    return res


def _cep_operator_id(job: harness.JobResult) -> str:
    (described,) = [op for op in job.dump["operators"] if op["kind"] == "cep"]
    return described["operator_id"]


def _operator(job: harness.JobResult):
    return Savepoint.open(str(job.snapshot_dir)).operator(_cep_operator_id(job))


@pytest.fixture(scope="module", params=VERSIONS)
def job(request) -> harness.JobResult:
    return _generate("hashmap", request.param)


@pytest.fixture(scope="module")
def operator(job):
    return _operator(job)


def _expected(job) -> dict[str, list]:
    return cep_expected_pending(job.dump)


def test_state_types(operator):
    km = operator.keyed_meta
    types = {s.name: s.value_type for _, s in km.value_states}
    assert types[cep.NFA_STATE] == CepType("NFAState")  # outer version 2: previous timestamps
    assert types[cep.EVENTS].name == "Map<EventId, Lockable<Tuple3<String, String, Long>>>"
    assert types[cep.ENTRIES].name == "Map<NodeId, Lockable<SharedBufferNode>>"
    assert cep.is_cep_operator(operator)


@pytest.mark.parametrize("backend, version", [("hashmap", v) for v in VERSIONS] + [("rocksdb", "2.3.0")])
def test_pending_partial_matches_are_the_jobs(backend, version):
    job = _generate(backend, version)
    operator = _operator(job)
    expected = _expected(job)
    # each event was taken by the pattern state of its type ("a", "b"), see cep_pending_partial_matches
    got = cep_pending_partial_matches(operator, expected)
    assert got == expected
    assert any(len(m) == 2 for ms in got.values() for m in ms) and any(len(m) == 1 for ms in got.values() for m in ms)


def test_shared_buffer_holds_exactly_the_pending_events(job, operator):
    pending = {(key, tuple(event)) for key, matches in _expected(job).items() for m in matches for event in m}
    rows = list(tables.keyed_table(operator, [cep.EVENTS], flat=True).rows())
    assert {(key, lockable[1]) for key, _, lockable in rows} == pending
    assert len(rows) == len(pending)
    assert all(lockable[0] >= 1 for _, _, lockable in rows)  # each locked by the match that holds it
    # one shared-buffer entry per buffered event, named after the pattern state that took it
    entries = list(tables.keyed_table(operator, [cep.ENTRIES], flat=True).rows())
    events_by_id = {(key, event_id): lockable[1] for key, event_id, lockable in rows}
    assert sorted((key, node_id[1]) for key, node_id, _ in entries) == sorted(
        (key, event[1]) for key, event in pending)
    for key, (event_id, page_name), _ in entries:
        assert events_by_id[(key, event_id)][1] == page_name
    # nothing completed waits in the NFA state: every completed match was emitted
    for _, nfa_state in tables.keyed_table(operator, [cep.NFA_STATE]).rows():
        assert nfa_state[1] == []


def test_every_value_and_snapshot_writes_back_byte_for_byte(operator, monkeypatch):
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")  # the Python codecs see every entry's bytes
    checked = {name: 0 for name in (cep.NFA_STATE, cep.EVENTS, cep.ENTRIES)}
    for _, handle in operator.readable_keyed_handles():
        source = operator.savepoint.stream_source(handle.delegate)
        buf = streams.read_source(source)
        meta = keyed.read_keyed_proxy(buf, source.label)
        assert keyed.proxy_bytes(meta) == bytes(buf[:meta.header_size])  # every serializer snapshot
        raw = []

        def capture(codec):
            def canonical(kb, vb, inner=codec.canonical, info=codec.info):
                raw.append((info, bytes(kb), bytes(vb)))
                return inner(kb, vb)

            return dataclasses.replace(codec, canonical=canonical)

        codecs = [capture(c) for c in state_codecs(meta, operator.max_parallelism, source.label)]
        list(KeyedState.of_stream(buf, handle, meta, operator.max_parallelism, codecs=codecs,
                                  source=source.label).entries())
        for info, kb, vb in raw:
            if info.name not in checked:
                continue
            vt = info.value_type
            if isinstance(vt, MapType):
                # key bytes: key-group prefix, key, namespace (fixed length: no framing), the map key
                assert info.namespace_type.length >= 0
                _, pos = meta.key_type.decoder()(kb, key_group_prefix_size(operator.max_parallelism))
                _, pos = info.namespace_type.decoder()(kb, pos)
                _round_trip(vt.key, kb[pos:])
                # value bytes: a null flag, the map value
                assert vb[0] == 0
                _round_trip(vt.value, vb[1:])
            else:
                _round_trip(vt, vb)
            checked[info.name] += 1
    assert checked[cep.NFA_STATE] == 7 and checked[cep.EVENTS] == 6 and checked[cep.ENTRIES] == 6, checked


def _round_trip(t, raw: bytes) -> None:
    value, end = t.decoder()(raw, 0)
    assert end == len(raw), f"{t.name}: decoded {end} of {len(raw)} bytes"
    out = bytearray()
    t.encoder()(out, value)
    assert bytes(out) == raw, t.name


def test_read_through_the_cli(job, operator):
    res = CliRunner().invoke(app, ["read", str(job.snapshot_dir), "--uid", _cep_operator_id(job), "--state", cep.EVENTS, "--flat",
                                   "--json"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines() if line.startswith("{")]
    got = {(r["key"], (r["map_value"]["element"]["f0"], r["map_value"]["element"]["f1"],
                       r["map_value"]["element"]["f2"])) for r in rows}
    assert got == {(key, tuple(event)) for key, matches in _expected(job).items() for m in matches for event in m}
    assert all(set(r["map_key"]) == {"id", "timestamp"} and r["map_value"]["lock_count"] >= 1 for r in rows)
