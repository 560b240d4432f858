"""Spark SQL on both engines: one corpus of queries (tests/sql_corpus.py) over every shipped sample runs
on the embedded engine (DuckDB over Arrow) and gives Spark's columns and rows: each kind of query by
default, every query of every sample with --exhaustive."""

from __future__ import annotations

import pytest

from tests.sql_corpus import KINDS, embedded_result, sample_cases, spark_result
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
    compared, differ, seen = 0, [], set()
    for sample in SAMPLES:
        for case in sample_cases(sample):
            if not exhaustive and case.kind in seen:
                continue
            seen.add(case.kind)
            compared += 1
            embedded, on_spark = embedded_result(case), spark_result(spark, case)
            if embedded != on_spark:
                differ.append(f"{case.label}\n  embedded: {embedded}\n  spark:    {on_spark}")
    assert compared >= len(KINDS)
    assert not differ, "\n".join(differ)
