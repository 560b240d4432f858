"""Growth by key (``fstate sizes OLD NEW``, readers/sizes_join.py): every key of OLD joined with the
same key of NEW, in bounded memory, checked against every key's sizes measured in each snapshot
(tests/sizes_compare.py): a key grown from small to medium, keys gone, a rescaled job, another max
parallelism (a hash-partitioned join, said so), a renamed operator, on the embedded engine and on
Spark. The proof against Flink's own jobs: tests/flink/test_sizes_oracle.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fstate.readers import sizes_join, sizes_measure
from fstate.readers.sizes import state_sizes
from fstate.readers.sizes_growth import state_growth
from fstate.writers.modify import SavepointModifier
from tests.sizes_compare import GROW, expected_key_growth, measured_keys, reported_key_growth

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
BASE = SAMPLES / "keyed-hashmap-savepoint"
TOP = 3


def _modified(tmp_path, name: str, steps, base: Path = BASE) -> Path:
    modifier = SavepointModifier(str(base), None, engine="embedded")
    steps(modifier)
    out = tmp_path / name
    modifier.write(str(out), deep=True)
    return out


def _check(old: Path, new: Path, report: dict, operator: str, new_operator: str | None = None) -> dict:
    expected = expected_key_growth(measured_keys(old, operator), measured_keys(new, new_operator or operator), TOP)
    assert reported_key_growth(report, new_operator or operator) == expected
    return expected


def _growth(old: Path, new: Path, **options) -> dict:
    """The growth report, whose two snapshots' reports (made by the join's pass) must be what
    ``fstate sizes`` gives each."""
    growth = state_growth(str(old), str(new), top=TOP, **options)
    for path, report in ((old, growth.old), (new, growth.new)):
        assert report.to_dict() == state_sizes(str(path), top=TOP, at=report.at).to_dict(), path
    return growth.to_dict()


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> Path:
    return _modified(tmp_path_factory.mktemp("grown"), "grown",
                     lambda m: m.transform_state("keyed", "events", sql=GROW))


def test_a_key_grown_from_small_to_medium_is_listed(grown):
    report = _growth(BASE, grown)
    expected = _check(BASE, grown, report, "keyed")
    events = expected["events"]
    assert [row["key"] for row in events["grown"]] == ["k-1"] == [row["key"] for row in events["by_elements"]]
    assert events["counts"]["grown_keys"] == 1 and events["counts"]["gone_keys"] == 1
    assert [row["key"] for row in events["shrunk"]] == ["k-2"] and events["shrunk"][0]["new_bytes"] == 0
    # medium: k-1 is not among NEW's largest keys, so only the join finds it
    (after,) = [s for s in state_sizes(str(grown), top=TOP).operator("keyed").states if s.name == "events"]
    assert "k-1" not in [item.key for item in after.top_by_bytes]
    assert events["grown"][0]["old_bytes"] < events["grown"][0]["new_bytes"] < after.top_by_bytes[-1].bytes
    for name, state in expected.items():  # every other state: the same keys, the same sizes
        if name != "events":
            assert state["counts"]["same_keys"] > 0 and not (state["grown"] or state["shrunk"]), name
    (join,) = [j for j in report["key_joins"] if j["operator"] == "keyed"]
    assert (join["join"], join["note"]) == ("key group", None)


@pytest.mark.parametrize("base", ["keyed-hashmap-savepoint", "keyed-rocksdb-checkpoint"])
def test_a_rescaled_job_is_joined_by_key_group(base, tmp_path):
    """3 subtasks to 2, both ways: a task per key-group range, each reading only its key groups of the
    pieces it overlaps (a RocksDB snapshot's too)."""
    base = SAMPLES / base
    rescaled = _modified(tmp_path, "rescaled", lambda m: m.transform_state("keyed", "events", sql=GROW)
                         .set_max_parallelism("keyed", 128, 2), base)
    report = _growth(base, rescaled)
    _check(base, rescaled, report, "keyed")
    (join,) = [j for j in report["key_joins"] if j["operator"] == "keyed"]
    assert join["join"] == "key group" and (join["old_parallelism"], join["new_parallelism"]) == (3, 2)
    assert "rescaled 3 -> 2" in join["note"]
    _check(rescaled, base, _growth(rescaled, base), "keyed")
    # the tasks are the key-group ranges cut at both snapshots' subtask boundaries
    from fstate.savepoint.loader import Savepoint

    tasks, how = sizes_join.join_tasks(Savepoint.open(str(base)).operator("keyed"),
                                       Savepoint.open(str(rescaled)).operator("keyed"), TOP, 0)
    ranges = [task.key_groups for task in tasks]
    assert how == "key group" and ranges[0][0] == 0 and ranges[-1][1] == 127 and len(ranges) == 4
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))


def test_another_max_parallelism_is_joined_by_hash_and_said_so(tmp_path):
    rekeyed = _modified(tmp_path, "rekeyed", lambda m: m.transform_state("keyed", "events", sql=GROW)
                        .set_max_parallelism_of_all(256))
    report = _growth(BASE, rekeyed)
    expected = _check(BASE, rekeyed, report, "keyed")
    (join,) = [j for j in report["key_joins"] if j["operator"] == "keyed"]
    assert join["join"] == "hash" and "max parallelism 128 -> 256" in join["note"]
    # a 2-byte key-group prefix: every entry one byte larger, every key grown by its entries
    counts = expected["counts"]["counts"]
    assert counts["grown_keys"] == len(measured_keys(BASE, "keyed")["counts"]) and counts["new_keys"] == 0


def test_a_renamed_operator_is_gone_and_new(tmp_path):
    renamed = _modified(tmp_path, "renamed", lambda m: m.rename_uid("keyed", "keyed-v2"))
    report = _growth(BASE, renamed)
    old_keys = measured_keys(BASE, "keyed")
    gone, new = (reported_key_growth(report, name) for name in ("keyed", "keyed-v2"))
    assert gone == expected_key_growth(old_keys, {}, TOP) and new == expected_key_growth({}, old_keys, TOP)
    assert all(s["counts"]["gone_keys"] == len(old_keys[name]) for name, s in gone.items())
    assert all(s["counts"]["new_keys"] == len(old_keys[name]) for name, s in new.items())
    notes = {j["operator"]: j["note"] for j in report["key_joins"]}
    assert "not in NEW" in notes["keyed"] and "not in OLD" in notes["keyed-v2"]
    # --operator may name an operator one snapshot lacks; one neither has is an error
    only = state_growth(str(BASE), str(renamed), top=TOP, operators=["keyed-v2"]).to_dict()
    assert reported_key_growth(only, "keyed-v2") == new
    from fstate.savepoint.errors import UnknownOperatorError

    with pytest.raises(UnknownOperatorError):
        state_growth(str(BASE), str(renamed), operators=["nope"])


def _count_held(monkeypatch) -> tuple[list[int], object]:
    """Counts, per joined bucket, the values of OLD's keys the join holds; gives the list and the real join."""
    held: list[int] = []
    join = sizes_join._join_bucket

    def counted(old, new, changes, top):
        records = list(old)
        held.append(sum(len(values) for _, _, values in records))
        return join(iter(records), new, changes, top)

    monkeypatch.setattr(sizes_join, "_join_bucket", counted)
    return held, join


def test_the_join_holds_one_bucket_of_keys_at_a_time(grown, monkeypatch):
    """Memory: OLD's keys of one bucket (a few key groups) are held, never the whole table."""
    held, join = _count_held(monkeypatch)
    report = state_growth(str(BASE), str(grown), top=TOP, workers=1).to_dict()
    keys = sum(len(state) for state in measured_keys(BASE, "keyed").values())
    assert sum(held) >= keys and max(held) * 20 < keys
    monkeypatch.setattr(sizes_join, "_join_bucket", join)
    assert state_growth(str(BASE), str(grown), top=TOP, workers=2).to_dict() == report


def test_more_state_is_spilled_into_more_buckets(tmp_path, monkeypatch):
    """A hash-partitioned join (one task for the operator) spreads its keys over more buckets as there is
    more state (here the most, MAX_BUCKETS): each holds fewer keys, the report is the same."""
    rekeyed = _modified(tmp_path, "rekeyed", lambda m: m.set_max_parallelism_of_all(256))
    held, join = _count_held(monkeypatch)
    report = state_growth(str(BASE), str(rekeyed), top=TOP, operators=["keyed"], workers=1).to_dict()
    assert len(held) == sizes_join.BUCKETS
    few, total, held[:] = max(held), sum(held), []
    monkeypatch.setattr(sizes_join, "BUCKET_BYTES", 1)
    assert state_growth(str(BASE), str(rekeyed), top=TOP, operators=["keyed"], workers=1).to_dict() == report
    # the same keys, four times the buckets: the fullest holds fewer (by how much depends on str hashes,
    # which PYTHONHASHSEED randomises per process)
    assert len(held) == sizes_join.MAX_BUCKETS and sum(held) == total and max(held) < few


@pytest.mark.spark
def test_spark_joins_a_range_a_task_with_the_same_report(spark, monkeypatch, tmp_path):
    from fstate.readers import spark_tasks

    rescaled = _modified(tmp_path, "rescaled", lambda m: m.transform_state("keyed", "events", sql=GROW)
                         .set_max_parallelism("keyed", 128, 2))
    rekeyed = _modified(tmp_path, "rekeyed", lambda m: m.set_max_parallelism_of_all(256))
    tasks = []
    map_tasks = spark_tasks.map_tasks
    monkeypatch.setattr(spark_tasks, "map_tasks", lambda *a, **k: tasks.append(a[3]) or map_tasks(*a, **k))
    for new, join in ((rescaled, "key group"), (rekeyed, "hash")):
        embedded = state_growth(str(BASE), str(new), top=TOP, engine="embedded").to_dict()
        assert not tasks
        on_spark = state_growth(str(BASE), str(new), top=TOP, engine="spark", spark=spark).to_dict()
        assert json.dumps(on_spark, sort_keys=True) == json.dumps(embedded, sort_keys=True)
        assert any(isinstance(args[0], sizes_join.JoinTask) for batch in tasks for args in batch)
        assert {j["operator"]: j["join"] for j in embedded["key_joins"]}["keyed"] == join
        _check(BASE, new, on_spark, "keyed")
        tasks.clear()


def test_the_entry_by_entry_pass_joins_the_same(grown, monkeypatch):
    """Without the compiled scanner (FSTATE_PURE_PYTHON=1) every key is spilled by the entry-by-entry
    pass: the same report."""
    fast = state_growth(str(BASE), str(grown), top=TOP).to_dict()
    monkeypatch.setenv("FSTATE_PURE_PYTHON", "1")
    used = []
    entries = sizes_measure._measure_entries
    monkeypatch.setattr(sizes_measure, "_measure_entries", lambda *a: used.append(1) or entries(*a))
    assert state_growth(str(BASE), str(grown), top=TOP).to_dict() == fast and used


def test_ttl_state_is_measured_for_both_reports_by_the_join():
    """The join's pass counts TTL state as ``fstate sizes`` does (the plan's TTL, expired at the same
    time): each snapshot's report in the growth is its own."""
    ttl = SAMPLES / "sql-no-uids-ttl-savepoint"
    plan = str(ttl / "plan.json")
    growth = state_growth(str(ttl), str(ttl), top=TOP, plan=plan)
    for report in (growth.old, growth.new):
        assert report.to_dict() == state_sizes(str(ttl), top=TOP, plan=plan, at=report.at).to_dict()
    assert any(state.ttl is not None and op.ttl_ms for op in growth.new.operators for state in op.states)
    assert all(s["same_keys"] and not s["grown_keys"] for j in growth.to_dict()["key_joins"] for s in j["states"])
