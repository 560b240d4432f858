"""The shipped samples (real Flink savepoints + the job's own dump) read back exactly, without a JVM."""

import json

import pytest

from tests.support import sample_dirs
from tests.oracle_compare import assert_matches_dump, load_dump

SAMPLES = sample_dirs()


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_sample_matches_flink_dump(sample):
    snapshot, dump = load_dump(sample)
    assert assert_matches_dump(snapshot, dump) == len(dump["operators"])


def test_samples_cover_the_shapes():
    dumps = [json.loads((s / "dump.json").read_text()) for s in SAMPLES]
    kinds = {(d["backend"], d["kind"]) for d in dumps}
    assert {("hashmap", "savepoint"), ("rocksdb", "savepoint"), ("hashmap", "checkpoint")} <= kinds
    versions = {d["flink_version"] for d in dumps}
    assert "2.3.0" in versions and any(v.startswith("1.") for v in versions)
    states = {(k["kind"]) for d in dumps for o in d["operators"] for k in o.get("keyed_state", [])}
    assert {"VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING"} <= states
