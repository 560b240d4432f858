"""Spark SQL on both engines: one corpus of queries (tests/sql_corpus.py) over every shipped sample runs
on the embedded engine (DuckDB over Arrow) and gives Spark's columns and rows: each kind of query by
default, every query of every sample with --exhaustive."""

from __future__ import annotations

import pytest

from tests.sql_corpus import KINDS, embedded_result, sample_cases, spark_results
from tests.support import sample_dirs

SAMPLES = sample_dirs()


@pytest.mark.parametrize("sample", SAMPLES, ids=[sample.name for sample in SAMPLES])
def test_corpus_runs_on_the_embedded_engine(sample):
    for case in sample_cases(sample):
        columns, rows = embedded_result(case)
        assert columns, case.label
        if case.kind in ("count", "metadata"):
            assert rows, case.label


def test_corpus_holds_every_kind_of_query():
    kinds = {case.kind for sample in SAMPLES for case in sample_cases(sample)}
    assert kinds == set(KINDS)


@pytest.mark.spark
def test_corpus_gives_the_same_results_on_both_engines(spark, exhaustive):
    cases, seen = [], set()
    for sample in SAMPLES:
        for case in sample_cases(sample):
            if exhaustive or case.kind not in seen:
                seen.add(case.kind)
                cases.append(case)
    differ = [f"{case.label}\n  embedded: {embedded}\n  spark:    {on_spark}"
              for case, on_spark in zip(cases, spark_results(spark, cases))
              if (embedded := embedded_result(case)) != on_spark]
    assert len(cases) >= len(KINDS)
    assert not differ, "\n".join(differ)


def test_key_conditions_read_only_their_key_groups():
    from fstate.readers.engine_sql import Catalog, Query

    keyed = next(sample for sample in SAMPLES if sample.name == "keyed-hashmap-savepoint")
    catalog = Catalog()
    catalog.add(str(keyed))

    def keys(query: str):
        return Query(catalog, query).keys

    assert keys("SELECT * FROM keyed WHERE key IN ('k-1', 'k-2') AND total > 0") == {"keyed": ("k-1", "k-2")}
    assert keys("SELECT k.key FROM keyed k JOIN keyed__timers t ON k.key = t.key WHERE (k.key = 'k-3')") == {
        "keyed": ("k-3",), "keyed__timers": None}  # timers are not read by key
    assert keys("SELECT * FROM keyed WHERE key IN ('k-1', 'k-2') AND key = 'k-2'") == {"keyed": ("k-2",)}
    for query in ("SELECT * FROM keyed WHERE key = 'k-1' OR total > 2990",       # not every row needs k-1
                  "SELECT * FROM keyed WHERE NOT key IN ('k-1')",
                  "SELECT * FROM keyed WHERE key = 7",                            # not a key of this type
                  "SELECT a.key FROM keyed a JOIN keyed b ON a.key = b.key WHERE a.key = 'k-1'",  # named twice
                  "SELECT * FROM keyed WHERE key IN (SELECT key FROM keyed__timers)"):
        assert keys(query)["keyed"] is None, query
    pushed = Query(catalog, "SELECT key, total FROM keyed WHERE key IN ('k-1', 'k-2')")
    everything = Query(catalog, "SELECT key, total FROM keyed")
    assert 0 < pushed.state_bytes() < everything.state_bytes()
    assert sorted(pushed.run().first_rows(10)) == sorted(
        row for row in everything.run().first_rows(10_000) if row[0] in ("k-1", "k-2"))



def test_queries_alive_at_once_read_their_own_views():
    """Queries share one DuckDB database of the process (a cursor each): the view a query registers is
    its own, though another query registers the same name over other rows before the first is read."""
    from fstate.readers.engine_sql import Catalog, Query

    keyed = next(sample for sample in SAMPLES if sample.name == "keyed-hashmap-savepoint")

    def catalog():
        made = Catalog()
        made.add(str(keyed))
        return made

    every = len(Query(catalog(), "SELECT key FROM keyed").run().first_rows(10_000))
    counted = Query(catalog(), "SELECT count(*) AS n FROM keyed").run()  # its view: every key group
    one = Query(catalog(), "SELECT key FROM keyed WHERE key IN ('k-1')")  # its view: k-1's key group
    assert 0 < one.state_bytes() < Query(catalog(), "SELECT key FROM keyed").state_bytes()
    assert one.run().first_rows(10) == [("k-1",)]
    assert every > 2 and counted.first_rows(1) == [(every,)]
