"""The Flink 1.x port of the oracle jobs (tests/flink/jobs_v1.py), without Java: every ported v2
source ports, a v2 text that lost what a substitution replaces fails with one message naming the
file, and the harness regenerates the port when a v2 source changes. Edits go to copies of jobs/v2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.flink import harness, jobs_v1

#: Flink 2.x APIs (and 1.17+ or 1.19+ ones) that must not survive the port.
V2_ONLY = ("getTaskInfo", "OpenContext", "sinkTo(", ".legacy.", "Windows.of(Duration",
           "generateUserSpecifiedHash", "execution.state-recovery", "Types.SET(", "SimpleCondition.of(",
           ".within(Duration", "StateTtlConfig.newBuilder(java.time.Duration", ".guava31.")


@pytest.fixture
def v2_copy(tmp_path: Path) -> Path:
    d = tmp_path / "v2"
    shutil.copytree(jobs_v1.V2, d)
    return d


def test_every_ported_v2_source_ports(tmp_path: Path) -> None:
    written = jobs_v1.write_sources(tmp_path / "v1")
    assert [p.name for p in written] == list(jobs_v1.FILES)
    for p in written:
        text = p.read_text(encoding="utf-8")
        assert text.startswith(jobs_v1.HEADER.format(name=p.name))
        assert not [api for api in V2_ONLY if api in text], p.name
    assert 'getDeclaredMethod("getMaxParallelism")' in (tmp_path / "v1" / "SqlChangeJob.java").read_text(encoding="utf-8")
    driver = (tmp_path / "v1" / "Driver.java").read_text(encoding="utf-8")
    assert 'm.put("state.savepoints.dir"' in driver
    assert "traverseStreamGraphAndGenerateHashes" in (tmp_path / "v1" / "Oracle.java").read_text(encoding="utf-8")


def test_the_v2_only_jobs_are_not_ported() -> None:
    v2 = {p.name for p in jobs_v1.V2.glob("*.java")}
    assert set(jobs_v1.FILES) < v2
    assert {"BenchJob.java", "BroadcastJob.java", "TtlStateJob.java"} == v2 - set(jobs_v1.FILES)


@pytest.mark.parametrize("name, old, new, expected", [
    # a file-specific substitution that no longer applies
    ("Driver.java", 'm.put("execution.checkpointing.num-retained", "1000");', "",
     "expected 'm.put(\"execution.checkpointing.num-retained\""),
    ("Oracle.java", 'o.put("operator_id", Driver.hex(StreamGraphHasherV2.generateUserSpecifiedHash(uid)));',
     'o.put("operator_id", null);', "expected 'o.put(\"operator_id\""),
    ("RestoreTypes.java", 'case "SET": return Types.SET(', 'case "SET": return SET(', "expected 'case \"SET\""),
    ("SqlChangeJob.java", "        return node.getMaxParallelism();\n", "        return -1;\n",
     "expected 'return node.getMaxParallelism();'"),
    ("CepJob.java", '.next("c").where(SimpleCondition.of(e -> e.f1.equals("c")))', '.next("c")',
     "expected 3 'SimpleCondition.of(e -> e.f1.equals(...))', found 2"),
    # a 2.x API that no substitution handles
    ("KeyedStateJob.java", "open(OpenContext openContext)", "open(OpenContext context)",
     "'OpenContext' is left in the 1.x port"),
])
def test_a_v2_text_the_port_does_not_expect_fails_naming_the_file(
        v2_copy: Path, tmp_path: Path, name: str, old: str, new: str, expected: str) -> None:
    src = v2_copy / name
    text = src.read_text(encoding="utf-8")
    assert old in text
    src.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(jobs_v1.PortError) as e:
        jobs_v1.write_sources(tmp_path / "v1", v2_copy)
    message = str(e.value)
    assert message.startswith(f"{src}: cannot port to the Flink 1.x API")
    assert expected in message
    assert "\n" not in message


def test_a_missing_v2_source_fails_naming_it(v2_copy: Path) -> None:
    (v2_copy / "CepJob.java").unlink()
    with pytest.raises(jobs_v1.PortError, match=r"v2/CepJob\.java: missing"):
        jobs_v1.fingerprint(v2_copy)


def test_the_harness_ports_into_its_cache_once_per_v2_content(
        v2_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(jobs_v1, "V2", v2_copy)
    first = harness.job_sources("1.20.1")
    assert first[0] == harness.JOBS / "common" / "Json.java"
    v1 = first[1].parent
    assert v1.name == "v1" and v1.parent.parent == tmp_path / "cache" / "flink-jobs-v1"
    assert sorted(p.name for p in first[1:]) == sorted(jobs_v1.FILES)
    assert harness.job_sources("1.15.4") == first
    assert harness.job_sources("2.3.0")[1].parent == harness.JOBS / "v2"

    # an edit of a v2 source gives new 1.x sources in a new directory; the old ones stay as they were
    sql = v2_copy / "SqlJob.java"
    sql.write_text(sql.read_text(encoding="utf-8") + "// edited\n", encoding="utf-8")
    second = harness.job_sources("1.20.1")
    assert second[1].parent != v1
    assert (second[1].parent / "SqlJob.java").read_text(encoding="utf-8").endswith("// edited\n")
    assert not (v1 / "SqlJob.java").read_text(encoding="utf-8").endswith("// edited\n")


def test_the_harness_reports_a_port_that_no_longer_applies_as_a_job_error(
        v2_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(jobs_v1, "V2", v2_copy)
    job = v2_copy / "RestoreJob.java"
    job.write_text(job.read_text(encoding="utf-8").replace("generateUserSpecifiedHash(op.uid)", "hash(op.uid)"),
                   encoding="utf-8")
    with pytest.raises(harness.FlinkJobError, match=r"v2/RestoreJob\.java: cannot port .*generateUserSpecifiedHash"):
        harness.job_sources("1.20.1")
    assert not list((tmp_path / "cache" / "flink-jobs-v1").glob("*/v1*"))  # nothing half-written
