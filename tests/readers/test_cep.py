"""Partial matches of a CEP operator resolved through its shared buffer (readers/cep.py)."""

from __future__ import annotations

import pytest

from fstate.readers.cep import dewey_compatible, resolve_partial_matches
from fstate.savepoint.errors import CorruptStateError


def test_dewey_compatibility():
    assert dewey_compatible([2, 0, 0], [2, 0])  # a prefix
    assert dewey_compatible([2, 0], [2])
    assert dewey_compatible([1, 3], [1, 2])  # same length, greater last digit
    assert dewey_compatible([1, 2], [1, 2])
    assert not dewey_compatible([1, 1], [1, 2])
    assert not dewey_compatible([2], [2, 0])
    assert not dewey_compatible([3, 0], [2])


def test_partial_matches_follow_edges_by_version():
    a1, a2, b = ((0, 1), "a"), ((1, 1), "a"), ((0, 2), "b")
    events = {(0, 1): (1, "first a"), (1, 1): (1, "second a"), (0, 2): (2, "b")}
    entries = {
        a1: (1, ([(1, (None, [1]))],)),
        a2: (1, ([(1, (None, [2]))],)),
        # b was taken by both runs: one edge per run, told apart by the Dewey version
        b: (2, ([(1, (a1, [1, 0])), (1, (a2, [2, 0]))],)),
    }
    nfa = ([("c", b, [2, 0, 0], 1, 2, (1, 1)), ("c", b, [1, 0, 0], 1, 2, (0, 1)), ("a", None, [3], -1, -1, None)],
           [])
    matches = resolve_partial_matches(nfa, events, entries)
    assert [m["events"] for m in matches] == [[("a", "second a"), ("b", "b")], [("a", "first a"), ("b", "b")]]
    assert [m["version"] for m in matches] == [[2, 0, 0], [1, 0, 0]]
    assert resolve_partial_matches(None, None, None) == []
    with pytest.raises(CorruptStateError, match="not in sharedBuffer-events"):
        resolve_partial_matches(nfa, {}, entries)


def test_matches_table_of_the_cep_sample_holds_the_jobs_pending_matches(spark):
    """`--table matches` (and the view `<uid>__matches`): one row per pending partial match, its events
    in pattern order, equal to what CepJob itself held; the same rows with and without Spark."""
    import json

    from fstate.readers.cep import PARTIAL_MATCH_COLUMNS, partial_matches_table
    from fstate.readers.views import register_views
    from fstate.savepoint.loader import Savepoint
    from tests.support import SAMPLES

    sample = SAMPLES / "cep-savepoint"
    (cep,) = [o for o in json.loads((sample / "dump.json").read_text())["operators"] if o["kind"] == "cep"]
    expected = {k["key"]: sorted([e[1] for e in m] for m in k["pending"]) for k in cep["expected"]}
    table = partial_matches_table(Savepoint.open(str(sample)).operator("cep"))
    assert tuple(table.column_names) == PARTIAL_MATCH_COLUMNS
    rows = list(table.rows())
    found = {key: [] for key in expected}
    for key, _, _, _, events in rows:
        assert [state for state, _ in events] == ["a", "b"][:len(events)]  # pattern order
        found[key].append([event[1] for _, event in events])
    assert {k: sorted(v) for k, v in found.items()} == expected
    views = register_views(spark, str(sample))
    assert "cep__matches" in views
    through_spark = spark.sql("SELECT key, events FROM cep__matches").collect()
    assert sorted((r["key"], [e["event"]["f1"] for e in r["events"]]) for r in through_spark) == sorted(
        (key, [event[1] for _, event in events]) for key, _, _, _, events in rows)
