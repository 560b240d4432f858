"""fstate's reading of Flink SQL and CEP operators against the ``expected`` of the jobs' own dumps.

``SqlJob`` and ``CepJob`` (tests/flink/jobs) describe each stateful operator in ``dump.json`` with a
``kind`` and the state they expect from their known input (counts, sums, maxima, distinct sets, kept
rows, join records, window accumulators; CEP: the pending partial matches per key). The real-Flink
oracle (tests/flink/test_sql_state_oracle.py, test_cep_state_oracle.py) and the shipped samples'
test (tests/readers/test_samples.py) compare with these helpers.
"""

from __future__ import annotations

from typing import Callable

from fstate.readers import cep, tables
from fstate.savepoint.loader import OperatorView, Savepoint


def sql_rows(sp: Savepoint, op: dict, state: str) -> list[tuple]:
    """The keyed table rows of one state of the dump's operator ``op`` (found by its operator id), the
    key as one row column (an SQL operator's table has the key's fields as columns by default)."""
    return list(tables.keyed_table(sp.operator(op["operator_id"]), [state], flatten_key=False).rows())


def sql_key(row: tuple) -> str:
    (k,) = row[0]  # the key is a row of the grouping key (k)
    return k


def check_group_aggregate(sp: Savepoint, op: dict) -> None:
    expected = dict(op["expected"])
    acc = {sql_key(r): r[-1] for r in sql_rows(sp, op, "accState")}
    assert set(acc) == set(expected)
    for k, e in expected.items():
        count, total, maximum, count_distinct, distinct_view = acc[k]
        assert (count, total, maximum, count_distinct) == (e["count"], e["sum"], e["max"], e["count_distinct"])
        assert distinct_view == b"\x00"  # the MapView lives in its own state: a RAW placeholder
    distinct = {sql_key(r): r[-1] for r in sql_rows(sp, op, "distinctAcc_0")}
    assert {k: sorted(v) for k, v in distinct.items()} == {k: sorted(n for n, _ in e["distinct"])
                                                           for k, e in expected.items()}
    # one COUNT(DISTINCT) without FILTER on append-only input: the map value is the bit set of the
    # distinct aggregates that saw the value (bit 0), not the number of occurrences
    assert {v for d in distinct.values() for v in d.values()} == {1}
    assert sql_rows(sp, op, "distinctAcc_0_null_state") == []


def check_deduplicate_keep_first(sp: Savepoint, op: dict) -> None:
    seen = {sql_key(r): r[-1] for r in sql_rows(sp, op, "deduplicate-state")}
    assert seen == {k: True for k, _ in op["expected"]}  # keep-first stores only "seen"


def check_deduplicate_keep_last(sp: Savepoint, op: dict) -> None:
    kept = {sql_key(r): r[-1] for r in sql_rows(sp, op, "deduplicate-state")}
    assert set(kept) == {k for k, _ in op["expected"]}
    for k, row in op["expected"]:
        assert list(kept[k][:3]) == row  # id, k, v; the 4th field is the (wall-clock) proctime
        assert len(kept[k]) == 4


def check_join(sp: Savepoint, op: dict) -> None:
    for side in ("left", "right"):
        actual = {sql_key(r): sorted([list(row), n] for row, n in r[-1].items())
                  for r in sql_rows(sp, op, f"{side}-records")}
        expected = {k: sorted(records) for k, records in op["expected"][side]}
        assert actual == expected, side


def check_window_aggregate(sp: Savepoint, op: dict) -> None:
    rows = sql_rows(sp, op, "window-aggs")
    actual = {(sql_key(r), r[1]): list(r[-1]) for r in rows}  # namespace: the window (slice) end
    expected = {(k, end): acc for (k, _, end), acc in op["expected"]}
    assert actual == expected


#: The check of each stateful SQL operator, by the ``kind`` SqlJob's dump gives it.
SQL_CHECKS: dict[str, Callable[[Savepoint, dict], None]] = {
    "group-aggregate": check_group_aggregate,
    "deduplicate-keep-first": check_deduplicate_keep_first,
    "deduplicate-keep-last": check_deduplicate_keep_last,
    "join": check_join,
    "window-aggregate": check_window_aggregate,
}


def cep_expected_pending(dump: dict) -> dict[str, list]:
    """CepJob's pending partial matches per key, each as its events in pattern order."""
    (described,) = [op for op in dump["operators"] if op["kind"] == "cep"]
    return {k["key"]: k["pending"] for k in described["expected"]}


def cep_pending_partial_matches(operator: OperatorView, keys) -> dict[str, list]:
    """fstate's pending partial matches of CepJob's ``a next b next c`` operator per key (every key of
    ``keys`` present), each as its events in pattern order, checking that each event was taken by the
    pattern state of its type and that each match waits in the state after its last event."""
    got: dict[str, list] = {k: [] for k in keys}
    for key, state_name, version, _, events in cep.partial_match_rows(operator):
        assert [page for page, _ in events] == [event[1] for _, event in events]
        assert state_name == "abc"[len(events)] and len(version) == len(events) + 1
        got[key].append([list(event) for _, event in events])
    return got


def check_cep_operator(sp: Savepoint, op: dict, dump: dict) -> None:
    expected = cep_expected_pending(dump)
    assert cep_pending_partial_matches(sp.operator(op["operator_id"]), expected) == expected


def check_sql_and_cep_operators(snapshot_dir, dump: dict) -> int:
    """Check every operator of the dump that has a ``kind`` (SQL and CEP); returns how many."""
    sp = Savepoint.open(str(snapshot_dir))
    checked = 0
    for op in dump["operators"]:
        if op.get("kind") is None:
            continue
        if op["kind"] == "cep":
            check_cep_operator(sp, op, dump)
        else:
            SQL_CHECKS[op["kind"]](sp, op)
        checked += 1
    return checked
