"""A plan's SQL operators found by the shape of their state when the savepoint names none of them
(Flink 1.x without uids): the same pairing as by the names a 2.3 savepoint has, on the shipped sample
with its names hidden; refusals name the operators."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.sql_plan import bind, load_plan, parse_plan
from fstate.savepoint.sql_shape_binding import bind_by_state, type_root
from tests.support import sample_snapshot

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "sql-no-uids-ttl-savepoint"


class _Nameless:
    """An operator as a Flink 1.x savepoint without uids shows it: no name, no uid."""

    def __init__(self, view):
        self.view = view
        self.name = self.uid = None

    def __getattr__(self, attr):
        return getattr(self.view, attr)


def _operators():
    return [_Nameless(o) for o in Savepoint.open(str(sample_snapshot(SAMPLE))).operators]


def test_bound_by_state_as_by_name():
    sp = Savepoint.open(str(sample_snapshot(SAMPLE)))
    plan = load_plan(str(SAMPLE / "plan.json"))
    by_name = {d.node_id: h for h, d in bind(plan, sp.operators).operators.items()}
    by_state = {node: view.uid_hash for node, view in bind_by_state(plan, _operators()).items()}
    assert by_state
    assert by_state == {node: by_name[node] for node in by_state}
    stateful = {o.uid_hash for o in sp.operators if o.has_keyed_state}
    assert set(by_state.values()) == stateful


def test_a_plan_of_another_job_or_an_ambiguous_one_is_refused():
    doc = json.loads((SAMPLE / "plan.json").read_text())
    other = copy.deepcopy(doc)
    for node in other["nodes"]:  # the group aggregate now has one accumulator fewer than the state's row
        if node["type"].startswith("stream-exec-group-aggregate") and len(node.get("aggCalls", [])) == 4:
            node["aggCalls"] = node["aggCalls"][:3] + node["aggCalls"][4:]
    with pytest.raises(InvalidArgumentError, match="holds the state of a SQL group that no node of this plan has"):
        bind_by_state(parse_plan(json.dumps(other)), _operators())
    twin = copy.deepcopy(doc)  # a second keep-last deduplication of the same rows, without state in the savepoint
    last = next(n for n in twin["nodes"] if n["type"].startswith("stream-exec-deduplicate") and n["keepLastRow"])
    copy_of = dict(copy.deepcopy(last), id=999)
    twin["nodes"].append(copy_of)
    source = next(e["source"] for e in twin["edges"] if e["target"] == last["id"])
    twin["edges"].append({"source": source, "target": 999})
    with pytest.raises(InvalidArgumentError, match=r"could hold the state of node\(s\) deduplicate\[11\], "
                                                   r"deduplicate\[999\]: run the job with table.exec.uid.generation"):
        bind_by_state(parse_plan(json.dumps(twin)), _operators())


@pytest.mark.parametrize("text, root", [("VARCHAR(2147483647)", "VARCHAR"), ("STRING NOT NULL", "VARCHAR"),
                                        ("INT", "INTEGER"), ("TIMESTAMP(3) WITH LOCAL TIME ZONE NOT NULL",
                                                             "TIMESTAMP_WITH_LOCAL_TIME_ZONE"),
                                        ("TIMESTAMP_LTZ(3)", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"),
                                        ("TIMESTAMP(6)", "TIMESTAMP_WITHOUT_TIME_ZONE"), ("DECIMAL(10, 2)", "DECIMAL"),
                                        ({"type": "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "precision": 3},
                                         "TIMESTAMP_WITH_LOCAL_TIME_ZONE")])
def test_type_roots(text, root):
    assert type_root(text) == root
