"""The rescale preview of the whole job (``SizesReport.job``): under slot sharing slot i holds
subtask i of every operator, so at each parallelism P a slot's keyed state is the sum over the
operators following P of what Flink's KeyGroupRangeAssignment gives their subtask i (computed here
from its formula, independently of fstate), plus the subtask i of operators keeping their own
parallelism; a P above a following operator's max parallelism is skipped, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from fstate.readers.sizes import state_sizes
from fstate.writers.modify import SavepointModifier

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _flink_range(index: int, parallelism: int, max_parallelism: int) -> range:
    """KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex, as Flink writes it."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def _expected(report: dict, parallelisms) -> tuple[dict, list, list]:
    """{P: slot bytes} from each operator's bytes per key group, the operators keeping their own
    parallelism, and the parallelisms not possible."""
    job = max(op["parallelism"] for op in report["operators"])
    keyed = [op for op in report["operators"] if op["keyed_bytes"]]
    fixed = [op for op in keyed if op["parallelism"] != job]
    slots, skipped = {}, []
    for p in sorted({job, *parallelisms}):
        if any(p > op["max_parallelism"] for op in keyed if op not in fixed):
            skipped.append(p)
            continue
        loads = [0] * max([p] + [op["parallelism"] for op in fixed])
        for op in keyed:
            at = op["parallelism"] if op in fixed else p
            for index in range(at):
                loads[index] += sum(op["key_group_bytes"][kg]
                                    for kg in _flink_range(index, at, op["max_parallelism"]))
        slots[p] = loads
    return slots, [(op["uid"] or op["uid_hash"], op["parallelism"]) for op in fixed], skipped


def _check(path, parallelisms) -> dict:
    report = state_sizes(str(path), parallelisms=parallelisms, top=1).to_dict()
    job = report["job"]
    slots, fixed, skipped = _expected(report, parallelisms)
    assert {p["parallelism"]: p["slot_bytes"] for p in job["rescale"]} == slots
    assert [(f["operator"], f["parallelism"]) for f in job["fixed"]] == fixed
    assert [s["parallelism"] for s in job["skipped"]] == skipped
    for point in job["rescale"]:
        assert point["max"] == max(point["slot_bytes"])
        assert point["mean"] == pytest.approx(sum(point["slot_bytes"]) / len(point["slot_bytes"]))
    asked = [p for p in job["rescale"] if p["parallelism"] in set(parallelisms)]
    least = min(p["max"] for p in asked)
    assert job["best_parallelism"] == min(p["parallelism"] for p in asked if p["max"] == least)
    # the whole job's state is in the slots at every parallelism
    assert all(sum(p["slot_bytes"]) == report["keyed_bytes"] for p in job["rescale"])
    return report


@pytest.mark.parametrize("sample", ["keyed-hashmap-savepoint", "sql-uids-savepoint", "keyed-rocksdb-checkpoint"])
def test_the_job_preview_is_flinks_assignment_summed_by_slot(sample):
    report = _check(SAMPLES / sample, range(1, 9))
    job = report["job"]
    assert len(job["following"]) >= 3 and not job["fixed"]
    now = next(p for p in job["rescale"] if p["parallelism"] == job["parallelism"])
    # at the job's parallelism, a slot holds what each operator's subtask holds now
    assert now["slot_bytes"] == [sum(op["subtask_bytes"][i] for op in report["operators"] if op["keyed_bytes"])
                                 for i in range(job["parallelism"])]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_own_parallelisms_and_max_parallelisms(tmp_path):
    """window-agg set to parallelism 1 (and max parallelism 256) keeps it in slot 0; window-reduce's max
    parallelism 4 makes parallelisms above 4 impossible."""
    out = tmp_path / "mixed"
    modifier = SavepointModifier(str(SAMPLES / "keyed-hashmap-savepoint"), None, engine="embedded")
    modifier.set_max_parallelism("window-agg", 256, 1).set_max_parallelism("window-reduce", 4)
    modifier.write(str(out), deep=True)
    report = _check(out, range(1, 9))
    job = report["job"]
    assert [f["operator"] for f in job["fixed"]] == ["window-agg"]
    assert [s["parallelism"] for s in job["skipped"]] == [5, 6, 7, 8]
    assert "max parallelism 4 of operator window-reduce" in job["skipped"][0]["reason"]
    (agg,) = [op for op in report["operators"] if op["uid"] == "window-agg"]
    one = next(p for p in job["rescale"] if p["parallelism"] == 1)["slot_bytes"]
    two = next(p for p in job["rescale"] if p["parallelism"] == 2)["slot_bytes"]
    assert len(one) == 1 and one[0] == report["keyed_bytes"] and agg["keyed_bytes"] > 0
    assert len(two) == 2 and agg["parallelism"] == 1 and agg["max_parallelism"] == 256
