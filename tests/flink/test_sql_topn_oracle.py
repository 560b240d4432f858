"""Real-Flink oracle of a Top-N over an updating input, which Flink runs as RetractableTopNFunction
(issue 24): fstate reads both of its states, ``sorted-map`` (a SortedMapSerializer: sort key -> how many
input rows have it, in the comparator's order) and ``data-state`` (sort key -> the input rows with it, in
arrival order), exactly as ``jobs/v2/RetractableTopNJob.java`` derives them from its input, on Flink 2.3.0
and 1.20.1 (metadata V4: operators found by the dump's operator ids), with uids and without uids but with
state TTL. Every entry encodes back to Flink's bytes, the headers write back byte for byte, a state
rewritten through Spark (``modify`` transforming ``sorted-map``, with the snapshot it was read with) is
Flink's bytes again (Spark keeps no map order: fstate writes the comparator's), and a compiled plan names
the sorted map's key by the Top-N's sort key.

The job has two Top-Ns over one GROUP BY k, name: ``ORDER BY cnt ASC`` (names share counts, so a sort key
counts 2 rows) and ``ORDER BY total DESC, cnt ASC`` (two fields in mixed directions: the map is in Flink's
order, not Python's).
"""

from __future__ import annotations

import pytest

from fstate.readers import engine, tables
from fstate.savepoint import keyed, sql_binding
from fstate.savepoint.binary import DataOutput
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import SortedMapType, TtlType
from tests.flink import harness
from tests.flink.test_sql_state_oracle import _raw_pairs, assert_every_entry_encodes_back

pytestmark = pytest.mark.flink

JOB = "RetractableTopNJob"
VERSIONS = ["2.3.0", "1.20.1"]
VARIANTS = {"uids": ("--uids", "true"), "no-uids-ttl": ("--uids", "false", "--ttl", "1h")}
#: what the sorted map's key (the sort key) is named by each Top-N's compiled plan
SORT_KEYS = {"rare": ("cnt",), "top": ("total", "cnt")}
#: the order of each Top-N's sorted map (its ORDER BY), as fstate reads it off the comparator
ORDER = {"rare": "cnt ASC", "top": "total DESC, cnt ASC"}


def _generate(variant: str, version: str) -> harness.JobResult:
    harness.require_flink(version)
    res = harness.generate(JOB, version, "hashmap", "savepoint", extra_args=VARIANTS[variant],
                           timeout=harness.DEFAULT_JOB_TIMEOUT)
    assert res.dump["flink_version"] == version
    return res


def _ranks(variant: str, version: str) -> tuple[Savepoint, list[dict]]:
    res = _generate(variant, version)
    ops = [op for op in res.dump["operators"] if op["kind"] == "retractable-rank"]
    assert sorted(op["top_n"] for op in ops) == sorted(SORT_KEYS)
    return Savepoint.open(str(res.snapshot_dir)), ops


def _by_key(sp: Savepoint, op: dict, state: str) -> dict:
    rows = tables.keyed_table(sp.operator(op["operator_id"]), [state]).rows()
    return {key: value for key, value in rows}  # the partition key k as a column, then the state


def _expected(op: dict) -> tuple[dict, dict]:
    """(k -> [(sort key, count)] in order, k -> {sort key: [row (k, name, cnt, total)]}) of the dump."""
    sorted_maps = {k: [(tuple(s), n) for s, n in e["sorted_map"]] for k, e in op["expected"]}
    data = {k: {tuple(s): [tuple(r) for r in rows] for s, rows in e["data_state"]} for k, e in op["expected"]}
    return sorted_maps, data


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_both_states_equal_the_jobs_dump(variant, version, monkeypatch):
    sp, ops = _ranks(variant, version)
    for op in ops:
        sorted_maps, data = _expected(op)
        for pure in ("1", "0"):  # the plain Python decoders, and the C scanner calling the Python decoder
            monkeypatch.setenv("FSTATE_PURE_PYTHON", pure)
            got = _by_key(sp, op, "sorted-map")
            assert {k: list(m.items()) for k, m in got.items()} == sorted_maps, (op["name"], pure)
            rows = _by_key(sp, op, "data-state")
            assert {k: {s: [tuple(r) for r in v] for s, v in m.items()} for k, m in rows.items()} == data
        assert any(n > 1 for m in sorted_maps.values() for _, n in m)  # sort keys two rows share


@pytest.mark.parametrize("version", VERSIONS)
def test_the_embedded_engine_keeps_flinks_order(version):
    sp, ops = _ranks("uids", version)
    for op in ops:
        table = tables.keyed_table(sp.operator(op["operator_id"]), ["sorted-map"])
        got = {}
        for batch in engine.iter_batches(table):
            for k, entries in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                got[k] = [(tuple(key.values()), n) for key, n in entries]  # an Arrow map: its entries in order
        assert got == _expected(op)[0]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_entry_and_header_writes_back_to_flinks_bytes(variant, version):
    sp, ops = _ranks(variant, version)
    assert_every_entry_encodes_back(sp, ops)
    for op in ops:
        for _, handle in sp.operator(op["operator_id"]).key_group_handles():
            buf = sp.read_stream(handle.delegate)
            meta = keyed.read_keyed_proxy(buf)
            sorted_map = {s.name: s.value_type for s in meta.states}["sorted-map"]
            if variant == "no-uids-ttl":
                assert isinstance(sorted_map, TtlType)
                sorted_map = sorted_map.value
            assert isinstance(sorted_map, SortedMapType)
            out = DataOutput()
            keyed.write_keyed_proxy(out, meta)
            assert out.getvalue() == bytes(buf[:meta.header_size])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_plan_names_the_sort_key(variant, version):
    """Bound by node ids in names or uids; without uids on 1.20 (metadata V4: no names either) by the
    shape of each operator's state, which tells the two Top-Ns apart by their sort keys."""
    res = _generate(variant, version)
    sp = Savepoint.open(str(res.snapshot_dir))
    binding = sql_binding.load_binding(str(res.out_dir / res.dump["plan"]), sp)
    for op in (o for o in res.dump["operators"] if o["kind"] == "retractable-rank"):
        view = sp.operator(op["operator_id"])
        described = binding.operator(view)
        assert described is not None and f"orderBy=[{ORDER[op['top_n']]}]" in described.description
        table = tables.keyed_table(view, ["sorted-map", "data-state"], sql=described)
        types = {name: t for name, t, _ in table.columns}
        sorted_map = types["sorted-map"].value if isinstance(types["sorted-map"], TtlType) else types["sorted-map"]
        assert sorted_map.key.field_names == types["data-state"].key.field_names == SORT_KEYS[op["top_n"]]
        assert sorted_map.order_text == ORDER[op["top_n"]]
        assert [name for name, _, _ in table.columns] == ["key_k", "sorted-map", "data-state"]


def _states_bytes(sp: Savepoint, uid_hash: str) -> tuple[dict, list[tuple[str, bytes, bytes]]]:
    """The states (name -> kind and serializers) and the (state name, key bytes, value bytes) of every
    keyed entry of an operator."""
    states, entries = {}, []
    for _, handle in sp.operator(uid_hash).key_group_handles():
        buf = sp.read_stream(handle.delegate)
        meta = keyed.read_keyed_proxy(buf)
        states.update({s.name: (s.kind, s.value_type, s.namespace_type) for s in meta.states})
        entries += [(meta.states[s].name, k, v) for s, k, v in _raw_pairs(buf, handle)]
    return states, sorted(entries)


@pytest.mark.spark
def test_a_sorted_map_rewritten_through_spark_is_flinks_bytes(spark, tmp_path):
    from fstate.writers.modify import SavepointModifier

    res = _generate("uids", "2.3.0")
    (op,) = [o for o in res.dump["operators"] if o.get("top_n") == "top"]  # total DESC, cnt ASC
    out = tmp_path / "rewritten"
    SavepointModifier(str(res.snapshot_dir), spark).transform_state(
        op["uid"], "sorted-map", sql="SELECT * FROM state").write(str(out))
    original = _states_bytes(Savepoint.open(str(res.snapshot_dir)), op["operator_id"])
    rewritten = _states_bytes(Savepoint.open(str(out)), op["operator_id"])
    assert rewritten == original and any(name == "sorted-map" for name, _, _ in rewritten[1])
    assert isinstance(rewritten[0]["sorted-map"][1], SortedMapType)  # its snapshot as read, comparator and all
