"""Real-Flink oracle for Flink SQL and CEP jobs (issue 14): savepoints of ``SqlJob`` (uids on; uids
off with state TTL) and ``CepJob`` on Flink 2.3, 2.0 and 1.20 (for 1.20 ported at compile time by jobs_v1.py),
whose dumps hold the state derived from the jobs' known input and every operator of the job graph.

fstate cannot decode the table runtime's or CEP's serializers yet, so these tests only check what
its existing API reads: the ``_metadata`` parses, and its operators (ids, uids, names,
parallelism, max parallelism) are exactly the job graph's; the stateful SQL and CEP operators
hold keyed state. The expected state in the dumps is for the decoders to come.
"""

from __future__ import annotations

import json
import re

import pytest

from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types.hashing import operator_id_for_uid
from tests.flink import harness

pytestmark = pytest.mark.flink

VERSIONS = list(harness.INTERNAL_STATE_VERSIONS)
#: SQL jobs start slowly (planner) and the machine may be shared: a generous watchdog.
TIMEOUT = harness.DEFAULT_JOB_TIMEOUT

VARIANTS = {
    "sql-uids": ("SqlJob", ("--uids", "true")),
    "sql-no-uids-ttl": ("SqlJob", ("--uids", "false", "--ttl", "1h")),
    "cep": ("CepJob", ()),
}

SQL_KINDS = ["deduplicate-keep-first", "deduplicate-keep-last", "group-aggregate", "group-aggregate-listagg", "join",
             "rank", "rank", "window-aggregate"]  # the planner does not share the Top-N of two statements


def _generate(variant: str, version: str) -> harness.JobResult:
    harness.require_flink(version)
    job, args = VARIANTS[variant]
    res = harness.generate(job, version, "hashmap", "savepoint", extra_args=args, timeout=TIMEOUT)
    assert res.dump["flink_version"] == version
    return res


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_metadata_operators_are_the_job_graph(variant, version):
    res = _generate(variant, version)
    sp = Savepoint.open(str(res.snapshot_dir))
    assert sp.metadata.version == harness.release(version).metadata_version
    names_in_metadata = sp.metadata.version >= 5  # metadata V4 (Flink 1.x) has no operator names or uids
    in_metadata = {op.state.operator_id.hex(): op for op in sp.operators}
    in_dump = {op["operator_id"]: op for op in res.dump["operators"]}
    assert set(in_metadata) == set(in_dump)
    for op_id, expected in in_dump.items():
        op = in_metadata[op_id].state
        assert (op.parallelism, op.max_parallelism) == (expected["parallelism"], expected["max_parallelism"]), op_id
        if names_in_metadata:
            assert op.uid == expected["uid"]
            assert op.name == expected["name"]
        else:
            assert (op.uid, op.name) == (None, None)
        if expected["uid"] is not None:
            assert operator_id_for_uid(expected["uid"]).hex() == op_id


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", ["sql-uids", "sql-no-uids-ttl"])
def test_sql_operators_and_plan(variant, version):
    res = _generate(variant, version)
    uids = dict(VARIANTS[variant][1][i:i + 2] for i in range(0, len(VARIANTS[variant][1]), 2))["--uids"] == "true"
    stateful = [op for op in res.dump["operators"] if op["kind"] is not None]
    assert sorted(op["kind"] for op in stateful) == SQL_KINDS
    plan = json.loads((res.out_dir / res.dump["plan"]).read_text())
    plan_nodes = {node["id"]: node for node in plan["nodes"]}
    sp = Savepoint.open(str(res.snapshot_dir))
    for op in stateful:
        # the "[id]" in an SQL operator's name is its node id in plan.json
        node_id = int(re.search(r"\[(\d+)\]$", op["name"]).group(1))
        assert plan_nodes[node_id]["description"].startswith(op["name"].split("[")[0] + "(")
        assert op["parallelism"] == 2 and op["max_parallelism"] == 128
        if uids:
            assert re.fullmatch(rf"{node_id}_[a-z-]+", op["uid"]), op["uid"]
        else:
            assert op["uid"] is None
        assert sp.operator(op["operator_id"]).has_keyed_state
        assert op["expected"]
    by_kind = {op["kind"]: op for op in stateful}
    groups = dict((k, v) for k, v in by_kind["group-aggregate"]["expected"])
    assert groups["k0"]["count"] == 20 and groups["k0"]["count_distinct"] == len(groups["k0"]["distinct"])
    # windows ending after the watermark 17999 are still open; the fired ones are in the output
    assert {tuple(w[0][1:]) for w in by_kind["window-aggregate"]["expected"]} == {
        (15000, 20000), (20000, 25000), (25000, 30000)}
    assert len(res.dump["output"]["window"]) == 3 * 6
    join = by_kind["join"]["expected"]
    assert [k for k, _ in join["left"]] == ["k0", "k2", "k4"]
    assert ["k2", [[["k2", "L2"], 2]]] in join["right"]
    assert res.dump["args"].get("ttl") == (None if uids else "1h")


@pytest.mark.parametrize("version", VERSIONS)
def test_cep_pending_partial_matches(version):
    res = _generate("cep", version)
    (cep,) = [op for op in res.dump["operators"] if op["kind"] == "cep"]
    assert cep["uid"] == "cep" and cep["parallelism"] == 2
    sp = Savepoint.open(str(res.snapshot_dir))
    assert sp.operator("cep").has_keyed_state
    pending = {k["key"]: [[e[1] for e in m] for m in k["pending"]] for k in cep["expected"]}
    assert pending == {"c0": [["a", "b"]], "c1": [["a"]], "c2": [], "c3": [], "c4": [], "c5": [["a"]],
                       "c6": [["a", "b"]], "c7": []}
    completed = sum(len(k["completed"]) for k in cep["expected"])
    assert completed == len(res.dump["matches"]) == 4
