"""fstate upgrade without Flink: the shipped SQL sample carried to plans derived from its own (node ids
shifted as when an INSERT is added before the others, aggregates reordered, added and removed, a
window or key changed) and to hand-made templates; the Flink oracle (tests/flink/test_sql_upgrade_oracle.py)
proves the same with real query changes."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.savepoint.builder import SavepointBuilder
from fstate.savepoint.errors import InvalidArgumentError
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.metadata import OperatorState, SubtaskState
from fstate.savepoint.sql_plan import parse_plan
from fstate.savepoint.sql_upgrade import Decision
from fstate.savepoint.types.logical import logical_type
from fstate.savepoint.types.table import RowDataType
from fstate.savepoint.types.hashing import operator_id_for_uid
from fstate.writers.reencode import write_key_group_streams
from fstate.writers.upgrade import SavepointUpgrader
from tests.support import sample_snapshot

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "sql-uids-savepoint"
PLAN = json.loads((SAMPLE / "plan.json").read_text())


def _shifted(doc: dict, by: int = 100) -> dict:
    new = copy.deepcopy(doc)
    for node in new["nodes"]:
        node["id"] += by
    for edge in new["edges"]:
        edge["source"] += by
        edge["target"] += by
    return new


def _node(doc: dict, node_id: int) -> dict:
    return next(n for n in doc["nodes"] if n["id"] == node_id)


def _write_plan(tmp_path, name: str, doc: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def _entries(view) -> dict[str, list]:
    out: dict[str, list] = {}
    meta = view.keyed_meta
    for source in view.keyed_states():
        with source.open() as state:
            for sid, _, _, key, ns, value in state.entries():
                out.setdefault(meta.states[sid].name, []).append((key, ns, value))
    return {k: sorted(v, key=repr) for k, v in out.items()}


def _upgrader(doc_new: dict, **kw) -> SavepointUpgrader:
    return SavepointUpgrader(str(sample_snapshot(SAMPLE)), old_plan=parse_plan(json.dumps(PLAN)),
                             new_plan=parse_plan(json.dumps(doc_new)), **kw)


def test_shifted_node_ids_carry_every_state_under_the_new_uids(tmp_path):
    upgrader = _upgrader(_shifted(PLAN))
    report = upgrader.report()
    assert report.exit_code == 0
    sql = [s for s in report.steps if s.sql]
    assert [s.decision for s in sql] == [Decision.CARRIED] * 5
    assert {s.target.uid for s in sql} == {"104_group-aggregate", "108_deduplicate", "111_deduplicate", "118_join",
                                          "124_global-window-aggregate"}
    out = upgrader.write(str(tmp_path / "new"))
    old, new = Savepoint.open(str(sample_snapshot(SAMPLE))), Savepoint.open(out)
    for step in sql:
        assert _entries(new.operator(step.target.uid)) == _entries(old.operator(step.old.uid))
        assert new.operator(step.target.uid).state.operator_id == operator_id_for_uid(step.target.uid)
    # the DataStream sources are carried by operator id when they have state (here they have none)
    stateful = {o.uid_hash for o in old.operators if any(not s.is_empty for s in o.state.subtasks.values())}
    assert {o.uid_hash for o in new.operators} == {operator_id_for_uid(s.target.uid).hex() for s in sql} | (
        stateful - {s.old.uid_hash for s in sql})


def _template(tmp_path, new_doc: dict, accumulator_types) -> str:
    """A savepoint as the new job would take it right after starting: the sample's operators under
    the new uids, every header as the old one except the group aggregate's accumulator row."""
    old = Savepoint.open(str(sample_snapshot(SAMPLE)))
    builder = SavepointBuilder(str(tmp_path / "template"))
    for view in old.operators:
        uid = view.uid
        if uid and uid[0].isdigit():
            node, _, kind = uid.partition("_")
            uid = f"{int(node) + 100}_{kind}"
        meta = view.keyed_meta if view.has_keyed_state else None
        subtasks = {}
        if meta is not None:
            if uid == "104_group-aggregate":
                acc = next(s for s in meta.states if s.name == "accState")
                row = RowDataType(tuple(accumulator_types), tuple(_serializer(t) for t in accumulator_types))
                states = [dataclasses.replace(acc, serializers={**acc.serializers, "VALUE_SERIALIZER": row})]
                meta = dataclasses.replace(meta, states=states + [s for s in meta.states if s.backend_type != 1
                                                                  and not s.name.startswith("distinct")
                                                                  and s.name != "accState"])
            handles = write_key_group_streams(meta, {}, view.parallelism, view.max_parallelism, builder.temp_dir,
                                              builder.inline_threshold)
            subtasks = {i: SubtaskState(managed_keyed=h) for i, h in handles.items()}
        op_id = operator_id_for_uid(uid) if uid else view.state.operator_id
        name = re.sub(r"\[(\d+)\]", lambda m: f"[{int(m.group(1)) + 100}]", view.name or "") or None
        builder.add_operator_state(OperatorState(op_id, view.parallelism, view.max_parallelism, subtasks,
                                                 name=name, uid=uid))
    return builder.commit()


def _serializer(logical):
    from fstate.savepoint.types.table_serializers import table_serializer

    return table_serializer(logical)


def _migrated_plan() -> dict:
    """GROUP BY k: MAX(v), COUNT(*), MIN(v) instead of COUNT(*), SUM(v), MAX(v), COUNT(DISTINCT name)."""
    new = _shifted(PLAN)
    agg = _node(new, 104)
    count, total, maximum, _ = agg["aggCalls"]
    agg["aggCalls"] = [maximum, count, dict(total, internalName="$MIN$1", name="mn")]
    agg["aggCallNeedRetractions"] = [False] * 3
    return new


def test_aggregates_reordered_added_and_removed_are_migrated(tmp_path):
    new_doc = _migrated_plan()
    bigint = logical_type("BIGINT")
    template = _template(tmp_path, new_doc, [bigint, logical_type("BIGINT", nullable=False), bigint])
    upgrader = _upgrader(new_doc, template=template)
    report = upgrader.report()
    (agg,) = [s for s in report.steps if s.sql and s.pairing.new.node.id == 104]
    assert agg.decision is Decision.MIGRATED, agg.reason
    assert agg.fresh == ("MIN(ev.v) AS mn",)
    assert set(agg.lost) == {"SUM(ev.v) AS EXPR$2", "COUNT(DISTINCT ev.name) AS EXPR$4",
                             "DISTINCT(DISTINCT ev.name) [view]"}
    assert report.exit_code == 1
    with pytest.raises(InvalidArgumentError, match="state would start empty for 104_group-aggregate: pass "
                                                   "--allow-empty"):
        upgrader.write(str(tmp_path / "refused"))
    with pytest.raises(InvalidArgumentError, match="state would be dropped for 4_group-aggregate"):
        upgrader.write(str(tmp_path / "refused"), allow_empty=True)
    assert not (tmp_path / "refused").exists()
    out = upgrader.write(str(tmp_path / "new"), allow_empty=True, allow_drop=True)
    old_rows = _entries(Savepoint.open(str(sample_snapshot(SAMPLE))).operator("4_group-aggregate"))["accState"]
    new_rows = _entries(Savepoint.open(out).operator("104_group-aggregate"))
    assert new_rows["accState"] == [(k, ns, (acc[2], acc[0], None)) for k, ns, acc in old_rows]
    assert not any(name.startswith("distinctAcc") for name in new_rows)


def test_window_or_key_changed_is_refused_with_the_reason(tmp_path):
    new_doc = _shifted(PLAN)
    _node(new_doc, 124)["windowing"]["window"]["size"] = "PT10S"
    _node(new_doc, 104)["grouping"] = [0, 2]
    report = _upgrader(new_doc).report()
    refused = {s.pairing.new.node.id: s.reason for s in report.refused}
    assert refused == {124: "the window changed from TUMBLE size_ms=5000 to TUMBLE size_ms=10000",
                       104: "the key changed from (k) to (k, name)"}
    assert report.exit_code == 2
    runner = CliRunner()
    old_plan, new_plan = _write_plan(tmp_path, "old.json", PLAN), _write_plan(tmp_path, "new.json", new_doc)
    args = ["upgrade", str(SAMPLE), "--old-plan", old_plan, "--new-plan", new_plan]
    checked = runner.invoke(app, ["--json", *args, "--check"])
    assert checked.exit_code == 2
    decisions = {o["new"]: o["decision"] for o in json.loads(checked.stdout)["operators"] if o["new_node"]}
    assert decisions["124_global-window-aggregate"] == "incompatible"
    written = runner.invoke(app, [*args, "--out", str(tmp_path / "new"), "--allow-empty", "--allow-drop"])
    assert written.exit_code == 2
    assert "cannot carry the state of 4_group-aggregate: the key changed from (k) to (k, name)" in written.stderr
    assert len(written.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists()


def test_an_added_insert_starts_empty_and_a_removed_one_is_dropped(tmp_path):
    new_doc = _shifted(PLAN)
    # the keep-first deduplication of first_out is gone; a copy of the group aggregate keyed by name is new
    new_doc["nodes"] = [n for n in new_doc["nodes"] if n["id"] not in (108, 109, 110)]
    new_doc["edges"] = [e for e in new_doc["edges"] if e["source"] not in (108, 109, 110)
                        and e["target"] not in (108, 109, 110)]
    extra = copy.deepcopy(_node(new_doc, 104))
    extra.update(id=200, grouping=[2])
    new_doc["nodes"].append(extra)
    new_doc["edges"].append({"source": 103, "target": 200})
    report = _upgrader(new_doc).report()
    decisions = {(s.old_name, s.new_name): s.decision for s in report.steps if s.sql}
    assert decisions[("8_deduplicate", None)] is Decision.DROPPED
    assert [s.decision for s in report.steps if s.sql and s.pairing.new and s.pairing.new.node.id == 200] == [
        Decision.NEW]
    assert report.exit_code == 1
    runner = CliRunner()
    args = ["upgrade", str(SAMPLE), "--old-plan", _write_plan(tmp_path, "old.json", PLAN),
            "--new-plan", _write_plan(tmp_path, "new.json", new_doc), "--out", str(tmp_path / "new")]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--allow-empty" in refused.stderr
    done = runner.invoke(app, [*args, "--allow-empty", "--allow-drop"])
    assert done.exit_code == 0, done.output
    assert "8_deduplicate" not in {o.uid for o in Savepoint.open(str(tmp_path / "new")).operators}


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    other = copy.deepcopy(PLAN)
    _node(other, 4)["type"] = "stream-exec-deduplicate_1"  # a plan of another job: node 4 is no aggregate
    cases = {
        "another job's plan": ["--old-plan", _write_plan(tmp_path, "other.json", other),
                               "--new-plan", _write_plan(tmp_path, "new.json", PLAN), "--check"],
        "one plan only": ["--old-plan", _write_plan(tmp_path, "old.json", PLAN), "--check"],
        "not a plan": ["--old-plan", str(SAMPLE / "dump.json"), "--new-plan", str(SAMPLE / "dump.json"), "--check"],
        "check and out": ["--check", "--out", str(tmp_path / "x")],
        "template of another job": ["--old-plan", _write_plan(tmp_path, "old.json", PLAN), "--new-plan",
                                    _write_plan(tmp_path, "new.json", _shifted(PLAN)), "--template",
                                    str(Path(SAMPLE).parent / "keyed-hashmap-savepoint"), "--check"],
    }
    for name, extra in cases.items():
        result = runner.invoke(app, ["upgrade", str(SAMPLE), *extra])
        assert result.exit_code == 2, (name, result.output)
        assert len(result.stderr.strip().splitlines()) == 1, (name, result.stderr)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "_metadata").write_bytes(b"\x00\x01garbage")
    result = runner.invoke(app, ["upgrade", str(corrupt), "--flink-version", "2.3", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "_metadata" in result.stderr
    assert not (tmp_path / "o").exists()


def test_unknown_serializers_are_carried_byte_for_byte(tmp_path):
    from tests.savepoint.test_unknown_serializers import LONG, copy_replacing, unknown_name

    sample = copy_replacing("sql-uids-savepoint", tmp_path, LONG, unknown_name(LONG))
    old = Savepoint.open(str(sample_snapshot(sample)))
    assert any(s.undecodable for o in old.operators if o.has_keyed_state for s in o.keyed_meta.states)
    upgrader = SavepointUpgrader(str(sample_snapshot(sample)), old_plan=parse_plan(json.dumps(PLAN)),
                                 new_plan=parse_plan(json.dumps(_shifted(PLAN))))
    assert upgrader.report().exit_code == 0
    new = Savepoint.open(upgrader.write(str(tmp_path / "new")))
    for step in (s for s in upgrader.report().steps if s.sql):
        before = [old.read_stream(h.delegate) for _, h in old.operator(step.old.uid).keyed_handles()]
        after = [new.read_stream(h.delegate) for _, h in new.operator(step.target.uid).keyed_handles()]
        assert before == after, step.old.uid
    # re-encoding such state is refused, naming it
    bigint = logical_type("BIGINT")
    template = _template(tmp_path, _migrated_plan(), [bigint, logical_type("BIGINT", nullable=False), bigint])
    migrated = SavepointUpgrader(str(sample_snapshot(sample)), old_plan=parse_plan(json.dumps(PLAN)),
                                 new_plan=parse_plan(json.dumps(_migrated_plan())), template=template)
    refused = migrated.report().refused
    assert "104_group-aggregate" in {s.new_name for s in refused}
    assert all("has serializers fstate cannot decode: such state is carried only unchanged" in s.reason
               for s in refused)
