"""Real-Flink oracle for the state of Flink SQL operators (issue 14): fstate reads every state of
``SqlJob``'s GroupAggregate, both Deduplicates, the Join, the GlobalWindowAggregate, the Top-N (Rank)
and the LISTAGG GroupAggregate (its ListView data views) exactly as the job's dump says (most
comparisons are in tests/sql_cep_compare.py), for uids on and for uids off with state TTL; and every
entry it decodes encodes back to Flink's bytes (keys placed in the key groups Flink chose).

Savepoints come from the same cached generations as tests/flink/test_sql_cep_oracle.py, on every
version the SQL job runs on (harness.INTERNAL_STATE_VERSIONS: 2.3, 2.0 and 1.20). Operators are
located by the operator id in the job's dump: 1.20 writes metadata V4, which has no names or uids.
"""

from __future__ import annotations

import struct

import pytest

from fstate.readers import tables
from fstate.savepoint import keyed
from fstate.savepoint.keyed_state import KeyedState
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import TtlType
from fstate.savepoint.types.hashing import key_group_for_hash
from tests.flink import harness
from tests.sql_cep_compare import (check_deduplicate_keep_first, check_deduplicate_keep_last, check_group_aggregate,
                                   check_join, check_window_aggregate)

pytestmark = pytest.mark.flink

VERSIONS = list(harness.INTERNAL_STATE_VERSIONS)
VARIANTS = {"sql-uids": ("--uids", "true"), "sql-no-uids-ttl": ("--uids", "false", "--ttl", "1h")}


def _generate(variant: str, version: str) -> harness.JobResult:
    harness.require_flink(version)
    return harness.generate("SqlJob", version, "hashmap", "savepoint", extra_args=VARIANTS[variant],
                            timeout=harness.DEFAULT_JOB_TIMEOUT)


def _operators(variant: str, version: str):
    res = _generate(variant, version)
    assert res.dump["flink_version"] == version
    sp = Savepoint.open(str(res.snapshot_dir))
    return sp, {op["kind"]: op for op in res.dump["operators"] if op["kind"] is not None}


def _operators_of_kind(variant: str, version: str, kind: str):
    """Every operator of one kind (the planner does not share the Top-N of the two statements using it)."""
    res = _generate(variant, version)
    return Savepoint.open(str(res.snapshot_dir)), [op for op in res.dump["operators"] if op["kind"] == kind]


def _rows(sp: Savepoint, op: dict, state: str) -> list[tuple]:
    return list(tables.keyed_table(sp.operator(op["operator_id"]), [state], flatten_key=True).rows())


def _key(row: tuple) -> str:
    k = row[0]  # an SQL operator's key (k) comes as columns (keyed_table flattens it by default)
    assert isinstance(k, str), row
    return k


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_group_aggregate(variant, version):
    sp, ops = _operators(variant, version)
    check_group_aggregate(sp, ops["group-aggregate"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_deduplicate(variant, version):
    sp, ops = _operators(variant, version)
    check_deduplicate_keep_first(sp, ops["deduplicate-keep-first"])
    check_deduplicate_keep_last(sp, ops["deduplicate-keep-last"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_join(variant, version):
    sp, ops = _operators(variant, version)
    check_join(sp, ops["join"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_window_aggregate(variant, version):
    sp, ops = _operators(variant, version)
    check_window_aggregate(sp, ops["window-aggregate"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rank(variant, version):
    sp, ops = _operators_of_kind(variant, version, "rank")
    assert len(ops) >= 1
    for op in ops:
        actual = {_key(r): r[-1] for r in _rows(sp, op, "data-state-with-append")}
        # sort key (v,) -> the rows with that v, each (id, k, v)
        expected = {k: {(row[2],): [tuple(row)] for row in rows} for k, rows in op["expected"]}
        assert {k: {s: [tuple(r) for r in rows] for s, rows in m.items()} for k, m in actual.items()} == expected


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_listagg_list_views(variant, version):
    sp, ops = _operators(variant, version)
    op = ops["group-aggregate-listagg"]
    expected = dict(op["expected"])
    # the accumulator's class: Flink 2.1+ stores its name, 1.x and 2.0 only the class itself
    (acc_state,) = [s for s in sp.operator(op["operator_id"]).keyed_meta.states if s.name == "accState"]
    assert ("STRUCTURED<org.apache.flink.table.runtime.functions.aggregate.ListAggWithRetractAggFunction"
            "$ListAggWithRetractAccumulator>") in acc_state.value_type.name
    acc = {_key(r): r[-1] for r in _rows(sp, op, "accState")}
    assert set(acc) == set(expected)
    for k, e in expected.items():
        (list_view, retract_view), count = acc[k]  # the accumulator class (two RAW view placeholders), count1
        assert (list_view, retract_view, count) == (b"\x00", b"\x00", e["count"])
    lists = {_key(r): list(r[-1]) for r in _rows(sp, op, "agg0$list")}
    assert lists == {k: e["list"] for k, e in expected.items()}
    assert {k: ",".join(v) for k, v in lists.items()} == {k: e["value"] for k, e in expected.items()}
    retracts = {_key(r): list(r[-1]) for r in _rows(sp, op, "agg0$retractList")}
    assert retracts == {k: e["retract_list"] for k, e in expected.items() if e["retract_list"]}


# -- byte-exact round trip -----------------------------------------------------------------------


def _raw_pairs(buf: bytes, handle) -> list[tuple[int, bytes, bytes]]:
    """(state id, key bytes, value bytes) of every entry of a canonical key-group stream."""
    pairs = []
    for _, pos, _ in keyed.key_group_regions(handle, len(buf)):
        state_id = struct.unpack_from(">H", buf, pos)[0]
        pos += 2
        while True:
            (key_length,) = struct.unpack_from(">i", buf, pos)
            key = buf[pos + 4:pos + 4 + key_length]
            pos += 4 + key_length
            (value_length,) = struct.unpack_from(">i", buf, pos)
            value = buf[pos + 4:pos + 4 + value_length]
            pos += 4 + value_length
            pairs.append((state_id, bytes((key[0] & 0x7F,)) + key[1:], bytes(value)))
            if key[0] & 0x80:
                state_id = struct.unpack_from(">H", buf, pos)[0]
                pos += 2
                if state_id == 0xFFFF:
                    break
    return pairs


def _without_ttl_timestamp(meta, state_id: int, value: bytes) -> bytes:
    """fstate reads a TTL value without its last-access timestamp (and writes the write time as the last access)."""
    info = meta.states[state_id]
    if info.kind == "LIST":  # every element has its own timestamp; elements are separated by ","
        return _list_without_ttl_timestamps(info.element_type, value)
    wrapped = info.value_type.value if info.kind == "MAP" else info.value_type
    if not isinstance(wrapped, TtlType):
        return value
    at = 1 if info.kind == "MAP" else 0  # a map entry's value starts with its null flag
    return value[:at] + value[at + 8:]


def _list_without_ttl_timestamps(element, value: bytes) -> bytes:
    if not isinstance(element, TtlType):
        return value
    decode, out, pos = element.decoder(), bytearray(), 0
    while pos < len(value):
        start = pos
        _, pos = decode(value, pos)
        out += value[start + 8:pos]
        if pos < len(value):
            assert value[pos:pos + 1] == b",", "list state elements are separated by ','"
            out += b","
            pos += 1
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_entry_encodes_back_to_flinks_bytes(variant, version):
    sp, ops = _operators(variant, version)
    assert_every_entry_encodes_back(sp, ops.values())


def assert_every_entry_encodes_back(sp: Savepoint, operators) -> None:
    """Every keyed entry of the dump's ``operators`` decodes and encodes back to Flink's bytes, in the
    key group Flink chose (TTL timestamps aside: fstate writes the write time)."""
    for op in operators:
        view = sp.operator(op["operator_id"])
        for _, handle in view.key_group_handles():
            buf = sp.read_stream(handle.delegate)
            meta = keyed.read_keyed_proxy(buf)
            encoders: dict[int, keyed.PairEncoder] = {}
            ours = []
            for state_id, kg, _, key, namespace, value in KeyedState.of_stream(buf, handle, meta,
                                                                               view.max_parallelism).entries():
                info = meta.states[state_id]
                if info.kind != "TIMERS":
                    assert key_group_for_hash(meta.key_type.java_hash(key), view.max_parallelism) == kg
                if info.kind == "MAP":
                    value = {value[0]: value[1]}
                encoder = encoders.setdefault(state_id, keyed.PairEncoder(meta, state_id, view.max_parallelism))
                ours += [(state_id, k, _without_ttl_timestamp(meta, state_id, v))
                         for k, v in encoder.pairs(kg, key, value, namespace)]
            flinks = [(s, k, _without_ttl_timestamp(meta, s, v)) for s, k, v in _raw_pairs(buf, handle)]
            assert flinks and sorted(ours) == sorted(flinks), op["name"]
