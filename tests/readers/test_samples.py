"""The shipped samples (real Flink savepoints + the job's own dump) read back exactly, without a JVM.

Every sample is compared with its dump's list/broadcast/keyed state and timers; the SQL and CEP
samples' stateful operators also with the ``expected`` their jobs derive from the input
(tests/sql_cep_compare.py)."""

import json

import pytest

from tests.support import sample_dirs
from tests.oracle_compare import assert_matches_dump, load_dump
from tests.sql_cep_compare import SQL_CHECKS, check_sql_and_cep_operators

SAMPLES = sample_dirs()


def _described_kinds(sample) -> list[str]:
    """The kinds of the operators whose expected state the sample's job describes (SQL, CEP)."""
    return [o["kind"] for o in json.loads((sample / "dump.json").read_text())["operators"] if o.get("kind")]


SQL_AND_CEP_SAMPLES = [s for s in SAMPLES if _described_kinds(s)]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_sample_matches_flink_dump(sample):
    snapshot, dump = load_dump(sample)
    assert assert_matches_dump(snapshot, dump) == len(dump["operators"])


@pytest.mark.parametrize("sample", SQL_AND_CEP_SAMPLES, ids=lambda p: p.name)
def test_sql_and_cep_sample_matches_the_jobs_expected_state(sample):
    snapshot, dump = load_dump(sample)
    assert check_sql_and_cep_operators(snapshot, dump) == len(_described_kinds(sample))


def test_samples_cover_the_shapes():
    dumps = [json.loads((s / "dump.json").read_text()) for s in SAMPLES]
    kinds = {(d["backend"], d["kind"]) for d in dumps}
    assert {("hashmap", "savepoint"), ("rocksdb", "savepoint"), ("hashmap", "checkpoint")} <= kinds
    versions = {d["flink_version"] for d in dumps}
    assert "2.3.0" in versions and any(v.startswith("1.") for v in versions)
    states = {(k["kind"]) for d in dumps for o in d["operators"] for k in o.get("keyed_state", [])}
    assert {"VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING"} <= states
    # Flink SQL with uids and without (operators by uid hash) and with TTL, each with its plan; CEP
    sql = {s: load_dump(s)[1] for s in SQL_AND_CEP_SAMPLES}
    sql_args = [d["args"] for d in sql.values() if d["job"] == "SqlJob"]
    assert {a["uids"] for a in sql_args} == {"true", "false"} and any("ttl" in a for a in sql_args)
    assert all((s / d["plan"]).is_file() for s, d in sql.items() if d["job"] == "SqlJob")
    assert {k for s in SQL_AND_CEP_SAMPLES for k in _described_kinds(s)} == set(SQL_CHECKS) | {"cep"}
