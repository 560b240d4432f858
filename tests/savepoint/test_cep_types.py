"""Flink CEP's serializers (CepType): snapshots and values, against bytes of a real Flink 2.3 savepoint
(tests/flink/jobs/v2/CepJob.java)."""

from __future__ import annotations

import pytest

from fstate.savepoint.binary import DataInput, DataOutput
from fstate.savepoint.errors import UnsupportedSerializerError, UnsupportedVersionError
from fstate.savepoint.types import LONG, STRING, CepType, MapType, OpaqueType, TupleType
from fstate.savepoint.types.cep import KINDS
from fstate.savepoint.types.snapshots import read_versioned_snapshot
from tests.support import dec, enc

EVENT = TupleType((STRING, STRING, LONG), "org.apache.flink.api.java.tuple.Tuple3")
T_A = 1795454015454  # the processing time of key c1's event "a"

#: CepJob key c1 (pending [a]): its NFA state as Flink 2.3 wrote it, a computation state in "b"
#: after taking event (0, T_A) and the start state "a" waiting for a new run.
NFA_C1 = bytes.fromhex(
    "00000002"  # 2 partial matches
    "0262" "01" "00000000" "000001a2096617de" "0261"  # "b", previous entry NodeId((0, T_A), "a")
    "00000002" "00000001" "00000000"  # version 1.0
    "000001a2096617de" "000001a2096617de"  # start timestamp, previous timestamp
    "01" "00000000" "000001a2096617de"  # start event (0, T_A)
    "0261" "00" "00000001" "00000002" "ffffffffffffffff" "ffffffffffffffff" "00"  # "a", no entry, version 2
    "00000000")  # no completed matches

#: The NFA state snapshot of the same savepoint (outer version 2, previous timestamps on).
NFA_SNAPSHOT_HEAD = bytes.fromhex("000de70400000002" "01" "0014 57fd 00000001 00000003".replace(" ", ""))




def snapshot_bytes(t) -> bytes:
    out = DataOutput()
    t.write_snapshot(out)
    return out.getvalue()


def all_kinds() -> list[CepType]:
    kinds = [CepType(k) for k in KINDS if k != "Lockable"]
    kinds += [CepType("Lockable", (EVENT,)), CepType("Lockable", (CepType("SharedBufferNode"),)),
              CepType("NFAState", outer_version=1, supports_previous_timestamp=False)]
    return kinds


@pytest.mark.parametrize("node", all_kinds(), ids=lambda n: f"{n.name}-v{n.outer_version}")
def test_snapshot_round_trip(node):
    raw = snapshot_bytes(node)
    inp = DataInput(raw)
    back = read_versioned_snapshot(inp)
    assert inp.remaining() == 0
    assert back == node and back.kind == node.kind
    assert snapshot_bytes(back) == raw


def test_nfa_snapshot_bytes_are_flinks():
    raw = snapshot_bytes(CepType("NFAState"))
    head = DataInput(raw)
    assert head.read_utf() == "org.apache.flink.cep.nfa.NFAStateSerializerSnapshot"
    assert head.read_i32() == 3
    assert raw[head.pos:head.pos + len(NFA_SNAPSHOT_HEAD)] == NFA_SNAPSHOT_HEAD
    # then the DeweyNumber, NodeId (over EventId) and EventId snapshots
    nested = DataInput(raw, head.pos + len(NFA_SNAPSHOT_HEAD))
    assert read_versioned_snapshot(nested).kind == "DeweyNumber"
    node_id = read_versioned_snapshot(nested)
    assert node_id.kind == "NodeId" and node_id.children == (CepType("EventId"),)
    assert read_versioned_snapshot(nested).kind == "EventId"
    assert nested.remaining() == 0


def test_simple_snapshot_of_the_old_form_and_unknown_versions():
    out = DataOutput()
    out.write_utf(KINDS["EventId"][0])
    out.write_i32(2)
    out.write_utf("org.apache.flink.cep.nfa.sharedbuffer.EventId$EventIdSerializer")
    assert read_versioned_snapshot(DataInput(out.getvalue())) == CepType("EventId")
    out = DataOutput()
    out.write_utf(KINDS["DeweyNumber"][0])
    out.write_i32(7)
    with pytest.raises(UnsupportedVersionError, match="DeweyNumber"):
        read_versioned_snapshot(DataInput(out.getvalue()))


def test_nfa_state_value_of_a_real_savepoint():
    nfa = CepType("NFAState")
    value = dec(nfa, NFA_C1)
    assert value == ([("b", ((0, T_A), "a"), [1, 0], T_A, T_A, (0, T_A)),
                      ("a", None, [2], -1, -1, None)], [])
    assert enc(nfa, value) == NFA_C1
    # the same by field names (dicts), as a modified value would come back
    named = {"partial_matches": [dict(zip(nfa.computation_state_fields, s)) for s in value[0]],
             "completed_matches": []}
    named["partial_matches"][0]["previous_entry"] = {"event_id": {"id": 0, "timestamp": T_A}, "page_name": "a"}
    assert enc(nfa, named) == NFA_C1


def test_nfa_state_without_previous_timestamps():
    nfa = CepType("NFAState", outer_version=1, supports_previous_timestamp=False)
    assert nfa.computation_state_fields == ("state_name", "previous_entry", "version", "start_timestamp",
                                            "start_event")
    value = ([("b", ((3, 10), "a"), [1, 0], 10, (3, 10))], [("c", None, [4], 7, None)])
    raw = enc(nfa, value)
    assert dec(nfa, raw) == value
    assert len(raw) == 4 + (2 + 1 + 12 + 2 + 12 + 8 + 13) + 4 + (2 + 1 + 8 + 8 + 1)


def test_shared_buffer_values():
    entry = CepType("Lockable", (CepType("SharedBufferNode"),))
    value = (1, ([(1, (((0, T_A), "a"), [2, 0])), (2, (None, [3]))],))
    raw = enc(entry, value)
    assert raw[:8] == bytes.fromhex("00000001 00000002".replace(" ", ""))  # lock count, 2 edges
    assert dec(entry, raw) == value
    events = MapType(CepType("EventId"), CepType("Lockable", (EVENT,)))
    value = {(0, T_A): (1, ("c1", "a", 1)), (1, T_A): (2, ("c1", "b", 2))}
    assert dec(events, enc(events, value)) == value
    assert CepType("EventId").length == 12 and enc(CepType("EventId"), (1, 2)) == bytes.fromhex(
        "00000001" "0000000000000002")
    node_id = CepType("NodeId")
    assert enc(node_id, None) == b"\x00" and dec(node_id, b"\x00") is None


def test_nested_serializers_of_another_kind_are_refused():
    out = DataOutput()
    out.write_utf(KINDS["NodeId"][0])
    out.write_i32(3)
    out.write_i32(911108)  # composite magic, outer version 1
    out.write_i32(1)
    out.write_i32(1333245)  # nested magic, version 1, one nested snapshot: a Long, not an EventId
    out.write_i32(1)
    out.write_i32(1)
    LONG.write_snapshot(out)
    with pytest.raises(UnsupportedSerializerError, match="NodeId serializer's nested serializer is Long"):
        read_versioned_snapshot(DataInput(out.getvalue()))


def test_lockable_of_an_undecodable_event_reads_as_bytes():
    from fstate.readers.schema import spark_type
    from pyspark.sql import types as spark_types

    kryo = OpaqueType("org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot", 2, b"", "com.acme.E")
    lockable = CepType("Lockable", (kryo,))
    assert not lockable.fully_decodable
    assert spark_type(lockable) == spark_types.BinaryType()
