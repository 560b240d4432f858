"""Real-Flink oracle for the state of Flink SQL operators (issue 14): fstate reads every state of
``SqlJob``'s GroupAggregate, both Deduplicates, the Join and the GlobalWindowAggregate exactly as the
job's dump says (the comparisons are in tests/sql_cep_compare.py), for uids on and for uids off with
state TTL; and every entry it decodes encodes back to Flink's bytes (keys placed in the key groups
Flink chose).

Savepoints come from the same cached generations as tests/flink/test_sql_cep_oracle.py, on every
version the SQL job runs on (harness.INTERNAL_STATE_VERSIONS: 2.3, 2.0 and 1.20). Operators are
located by the operator id in the job's dump: 1.20 writes metadata V4, which has no names or uids.
"""

from __future__ import annotations

import struct

import pytest

from fstate.savepoint import keyed
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
    wrapped = info.value_type.value if info.kind == "MAP" else info.value_type
    if not isinstance(wrapped, TtlType):
        return value
    at = 1 if info.kind == "MAP" else 0  # a map entry's value starts with its null flag
    return value[:at] + value[at + 8:]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_entry_encodes_back_to_flinks_bytes(variant, version):
    sp, ops = _operators(variant, version)
    for op in ops.values():
        view = sp.operator(op["operator_id"])
        for _, handle in view.key_group_handles():
            buf = sp.read_stream(handle.delegate)
            meta = keyed.read_keyed_proxy(buf)
            encoders: dict[int, keyed.PairEncoder] = {}
            ours = []
            for state_id, kg, _, key, namespace, value in keyed.iter_entries(buf, handle, meta,
                                                                             view.max_parallelism):
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
