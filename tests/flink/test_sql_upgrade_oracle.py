"""fstate upgrade, proven by real Flink: a Flink 1.20.1 SQL savepoint carried to Flink 2.3.0.

SqlJob (group aggregate with COUNT DISTINCT, both deduplications, a join, a TUMBLE window, Top-N and a
LISTAGG over it) takes a savepoint on 1.20.1 (metadata V4: no operator names, the SQL operators found
by the uid hashes of their plan's nodes); the same job's plan compiled by 2.3.0 numbers and
describes its nodes its own way. fstate pairs the two plans' operators, writes a V6 savepoint with
2.3's operators (the 2.3 job's savepoint is the template: its operator ids, parallelism and
serializers), and the 2.3 job restored from it (non-restored state not allowed) continues from the
1.20 state exactly as the 1.20 job would have: its output after a second batch of rows equals what
the job derives from the input. (Flink 2.3 also restores this job's 1.20 savepoint unconverted: the
table runtime's serializers read their 1.20 snapshots; what fstate adds is the pairing of operators
whose plans moved, and the report.)
"""

from __future__ import annotations

import pytest

from fstate.savepoint.loader import Savepoint
from fstate.writers.upgrade import Decision, SavepointUpgrader
from tests.flink import harness
from tests.flink.restore import verify_restore

pytestmark = pytest.mark.flink

VARIANTS = {"uids": ("--uids", "true"), "no-uids-ttl": ("--uids", "false", "--ttl", "3650d")}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_sql_job_from_flink_1_20_continues_on_2_3(tmp_path, variant):
    """Without uids the 1.20 savepoint names no operator: fstate finds each SQL operator by the shape
    of its state (savepoint/sql_shape_binding.py)."""
    harness.require_flink("1.20.1")
    harness.require_flink("2.3.0")
    args = VARIANTS[variant]
    old = harness.generate("SqlJob", "1.20.1", "hashmap", "savepoint", extra_args=args)
    template = harness.generate("SqlJob", "2.3.0", "hashmap", "savepoint", extra_args=args)
    upgrader = SavepointUpgrader(str(old.snapshot_dir), old_plan=str(old.out_dir / "plan.json"),
                                 new_plan=str(template.out_dir / "plan.json"), template=str(template.snapshot_dir))
    report = upgrader.report()
    assert report.exit_code == 0, [(s.decision, s.old_name, s.reason) for s in report.steps]
    decisions = {s.new_name: (s.decision, s.reason) for s in report.steps if s.sql}
    assert len(decisions) == 8
    # every SQL operator's state is carried byte for byte, or re-encoded where the 2.3 job's serializer
    # snapshots differ from 1.20's (LISTAGG's STRUCTURED accumulator is written differently in 2.x)
    assert {d for d, _ in decisions.values()} <= {Decision.CARRIED, Decision.MIGRATED}
    assert all(reason == "the new job's serializers differ: re-encoded"
               for d, reason in decisions.values() if d is Decision.MIGRATED)
    assert (report.source_version, report.target_version) == (4, 6)
    out = upgrader.write(str(tmp_path / "upgraded"))
    assert Savepoint.open(out).metadata.version == 6
    restored = verify_restore("SqlJob", "2.3.0", tmp_path / "upgraded", extra_args=args).dump
    assert restored["flink_version"] == "2.3.0"
    assert restored["output"] == restored["expected_output"]
    assert restored["retracted"] == restored["expected_retracted"]



def test_sql_job_from_flink_2_3_back_to_1_20(tmp_path):
    """The way back: a 2.3.0 SqlJob savepoint (V6) written for 1.20 with the 1.20 job's savepoint as the
    template (V4; every SQL header reads alike on both releases, so the state is carried) continues on 1.20.1."""
    harness.require_flink("1.20.1")
    harness.require_flink("2.3.0")
    args = VARIANTS["uids"]
    old = harness.generate("SqlJob", "2.3.0", "hashmap", "savepoint", extra_args=args)
    template = harness.generate("SqlJob", "1.20.1", "hashmap", "savepoint", extra_args=args)
    upgrader = SavepointUpgrader(str(old.snapshot_dir), old_plan=str(old.out_dir / "plan.json"),
                                 new_plan=str(template.out_dir / "plan.json"), template=str(template.snapshot_dir))
    report = upgrader.report()
    assert report.exit_code == 0 and (report.source_version, report.target_version) == (6, 4)
    assert {s.decision for s in report.steps if s.sql} <= {Decision.CARRIED, Decision.MIGRATED}
    out = upgrader.write(str(tmp_path / "downgraded"))
    assert Savepoint.open(out).metadata.version == 4
    restored = verify_restore("SqlJob", "1.20.1", tmp_path / "downgraded", extra_args=args).dump
    assert restored["flink_version"] == "1.20.1"
    assert restored["output"] == restored["expected_output"]
    assert restored["retracted"] == restored["expected_retracted"]
