"""Real Flink restores SQL and CEP savepoints (issue 14, point 5): the same SQL job (``jobs/v2/SqlJob.java``)
starts from a savepoint, reads a second batch of the same keys and its output shows the state it
restored.

In restore mode SqlJob's sources emit rows ``i = n..2n-1`` and the dims again, then finish; the job
runs to its end (no timing involved) and dumps what its print sinks show after the restore
(``output``, materialised) and which rows printed before the savepoint the restored job retracted
(``retracted``: the group aggregate's restored accumulators, the keep-last rows), next to what both
must be when the savepoint holds the first batch's state unchanged (``expected_output``,
``expected_retracted``). E.g. after restoring SqlJob's own savepoint ``COUNT(*)`` of k0 goes from
20 to 40, keep-first deduplication prints nothing (every key was seen), the windows still open at
the savepoint fire with their restored accumulators.

Variants: uids on (operators matched by uid) and off (operator ids are hashes of the job graph,
which the restored job must reproduce), the latter with state TTL. The TTL runs on the wall clock
from the moment state was written, so it is long (3650 days) for a cached savepoint to restore
with its state unexpired at any later time.

``CepJob`` in restore mode sends "c a b c" to every key: the partial matches [a, b] of c0 and c6
restored from the savepoint complete with the first "c".
"""

from __future__ import annotations

import pytest

from tests.flink import harness
from tests.flink.restore import verify_restore

pytestmark = pytest.mark.flink

VERSION = "2.3.0"
#: SQL jobs start slowly (planner) and the machine may be shared: a generous watchdog.
TIMEOUT = harness.DEFAULT_JOB_TIMEOUT

VARIANTS = {
    "sql-uids": ("--uids", "true"),
    "sql-no-uids-ttl": ("--uids", "false", "--ttl", "3650d"),
}
#: (variant, version) of the transform test: every variant on 2.3, the uids variant on 1.20 too.
TRANSFORM_CASES = [(variant, VERSION) for variant in sorted(VARIANTS)] + [("sql-uids", "1.20.1")]

#: added to the group aggregate's accumulators of key k0 by the transform
COUNT_DELTA, SUM_DELTA = 100, 1000


def _savepoint(variant: str, version: str = VERSION) -> harness.JobResult:
    harness.require_flink(version)
    res = harness.generate("SqlJob", version, "hashmap", "savepoint", extra_args=VARIANTS[variant], timeout=TIMEOUT)
    assert res.dump["flink_version"] == version
    return res


def _restore(variant: str, snapshot_dir, version: str = VERSION) -> dict:
    res = verify_restore("SqlJob", version, snapshot_dir, extra_args=VARIANTS[variant], timeout=TIMEOUT)
    assert res.dump["kind"] == "restored"
    return res.dump


def _assert_same_job_graph(restored: dict, original: dict) -> None:
    """The restored job is the job that took the savepoint: same operators, names and ids."""
    def graph(dump):
        return [(op["name"], op["uid"], op["operator_id"], op["parallelism"]) for op in dump["operators"]]

    assert graph(restored) == graph(original)


def _operator(dump: dict, kind: str | None = None, name: str | None = None) -> dict:
    (op,) = [o for o in dump["operators"]
             if (kind is None or o["kind"] == kind) and (name is None or o["name"] == name)]
    return op


def _fstate(*args: str) -> None:
    """``fstate ARGS`` in this process (on the test session's Spark when one runs)."""
    from typer.testing import CliRunner

    from fstate.cli.app import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_restore_own_savepoint_continues_from_the_stored_state(variant):
    original = _savepoint(variant)
    restored = _restore(variant, original.snapshot_dir)
    _assert_same_job_graph(restored, original.dump)
    assert restored["output"] == restored["expected_output"]
    assert restored["retracted"] == restored["expected_retracted"]
    # the accumulators and kept rows retracted are exactly what the job printed before the savepoint
    assert restored["retracted"]["agg"] == original.dump["output"]["agg"]
    assert restored["retracted"]["last"] == original.dump["output"]["last"]
    agg = {row.strip("[]").split(", ")[0]: row for row in restored["output"]["agg"]}
    assert agg["k0"].startswith("[k0, 40, ")  # 20 restored + 20 new rows
    assert "[k0, 20, 673, 80, 4]" in restored["retracted"]["agg"]
    assert restored["output"]["first"] == []  # every key was already seen before the savepoint
    # the windows open at the savepoint fire with the accumulators the savepoint holds for them
    open_windows = _operator(original.dump, kind="window-aggregate")["expected"]
    assert len(open_windows) == 3 * 6
    for (k, start, end), (count, total, maximum) in open_windows:
        row = f"[{k}, {_timestamp(start)}, {_timestamp(end)}, {count}, {total}, {maximum}]"
        assert row in restored["output"]["window"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_restore_fstate_copy_that_leaves_sql_state_alone(variant, tmp_path):
    original = _savepoint(variant)
    # drop the (stateless) events source: the copy's SQL operators are BASE's state, untouched
    source = _operator(original.dump, name="Source: events-source")
    copy = tmp_path / "copy"
    _fstate("modify", str(original.snapshot_dir), "--out", str(copy), "--remove", source["operator_id"])
    restored = _restore(variant, copy)
    _assert_same_job_graph(restored, original.dump)
    assert restored["output"] == restored["expected_output"]
    assert restored["retracted"] == restored["expected_retracted"]


@pytest.mark.spark
@pytest.mark.parametrize("variant, version", TRANSFORM_CASES)
def test_restore_transformed_group_aggregate_continues_from_the_changed_values(variant, version, spark, tmp_path):
    from fstate.readers.reader import SavepointReader

    original = _savepoint(variant, version)
    aggregate = _operator(original.dump, kind="group-aggregate")
    target = aggregate["uid"] or aggregate["operator_id"]  # without uids: the operator id (hash)
    # the transform's view ``state`` has the key as one column (a row of the grouping key)
    schema = SavepointReader(str(original.snapshot_dir), spark).keyed(target, "accState", flatten=False).schema
    changed = tmp_path / "changed"
    _fstate("modify", str(original.snapshot_dir), "--out", str(changed),
            "--transform", f"{target}:accState={_bump_k0_sql(schema)}")
    restored = _restore(variant, changed, version)
    assert restored["flink_version"] == version
    _assert_same_job_graph(restored, original.dump)
    expected_output = dict(restored["expected_output"], agg=_bumped(restored["expected_output"]["agg"]))
    expected_retracted = dict(restored["expected_retracted"], agg=_bumped(restored["expected_retracted"]["agg"]))
    assert restored["output"] == expected_output
    assert restored["retracted"] == expected_retracted
    agg = {row.strip("[]").split(", ")[0]: row for row in restored["output"]["agg"]}
    assert agg["k0"].startswith(f"[k0, {40 + COUNT_DELTA}, ")
    assert f"[k0, {20 + COUNT_DELTA}, {673 + SUM_DELTA}, 80, 4]" in restored["retracted"]["agg"]


def _timestamp(ms: int) -> str:
    """A TIMESTAMP(3) as the print sink shows it (java.time.LocalDateTime.toString)."""
    import datetime

    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)
    text = t.strftime("%Y-%m-%dT%H:%M")
    if t.second or t.microsecond:
        text += t.strftime(":%S") + (f".{t.microsecond // 1000:03d}" if t.microsecond else "")
    return text


def _bump_k0_sql(schema) -> str:
    """SQL over the view ``state`` (key, accState) adding COUNT_DELTA to COUNT(*) and SUM_DELTA to
    SUM(v) of key k0. The accumulator row holds COUNT(*), SUM, MAX, COUNT(DISTINCT) in the order of
    the SELECT list, then the distinct view (docs/flink-sql-state.md); its field names are whatever
    fstate calls them (f0... without a plan), so they are taken from the table's schema. The key is
    the one-field grouping key row (or its value)."""
    from pyspark.sql.types import StructType

    key_type = schema["key"].dataType
    key = f"key.`{key_type.fields[0].name}`" if isinstance(key_type, StructType) else "key"
    accumulator = schema["accState"].dataType
    assert isinstance(accumulator, StructType), accumulator
    deltas = {0: COUNT_DELTA, 1: SUM_DELTA}
    fields = ", ".join(
        f"'{f.name}', accState.`{f.name}`" + (f" + {deltas[i]}" if i in deltas else "")
        for i, f in enumerate(accumulator.fields))
    return (f"SELECT key, CASE WHEN {key} = 'k0' THEN named_struct({fields}) ELSE accState END AS accState "
            "FROM state")


def _bumped(rows: list[str]) -> list[str]:
    """Group aggregate rows "[k, count, sum, max, distinct]" with k0's count and sum changed."""
    out = []
    for row in rows:
        k, count, total, *rest = row.strip("[]").split(", ")
        if k == "k0":
            count, total = str(int(count) + COUNT_DELTA), str(int(total) + SUM_DELTA)
        out.append("[" + ", ".join([k, count, total, *rest]) + "]")
    return sorted(out)


# --------------------------------------------------------------------------- CEP


def _cep_restored(snapshot_dir) -> dict:
    res = verify_restore("CepJob", VERSION, snapshot_dir, timeout=TIMEOUT)
    assert res.dump["kind"] == "restored"
    return res.dump


def _sorted_matches(matches: list) -> list:
    import json

    return sorted(matches, key=lambda m: json.dumps(m))


def _assert_cep_continues(restored: dict, original: harness.JobResult) -> None:
    _assert_same_job_graph(restored, original.dump)
    assert _sorted_matches(restored["matches"]) == _sorted_matches(restored["expected_matches"])
    # the pending [a, b] of c0 and c6, as the savepoint holds them, complete with the first new "c"
    cep = _operator(original.dump, kind="cep")
    first_new_seq = len(original.dump["input"])
    for key in ("c0", "c6"):
        (pending,) = next(k["pending"] for k in cep["expected"] if k["key"] == key)
        completed = [m for m in restored["matches"] if m[0][0] == key and m[0][2] < first_new_seq]
        assert completed == [pending + [[key, "c", first_new_seq + int(key[1:])]]], key


def test_cep_restore_own_savepoint_completes_pending_matches():
    harness.require_flink(VERSION)
    original = harness.generate("CepJob", VERSION, "hashmap", "savepoint", timeout=TIMEOUT)
    _assert_cep_continues(_cep_restored(original.snapshot_dir), original)


def test_cep_restore_fstate_copy_that_leaves_cep_state_alone(tmp_path):
    harness.require_flink(VERSION)
    original = harness.generate("CepJob", VERSION, "hashmap", "savepoint", timeout=TIMEOUT)
    copy = tmp_path / "copy"
    _fstate("modify", str(original.snapshot_dir), "--out", str(copy), "--remove", "cep-source")  # stateless
    _assert_cep_continues(_cep_restored(copy), original)
