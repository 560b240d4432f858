"""Regenerate /work/main/samples/ from the Flink oracle jobs.

    python -m tests.flink.generate_samples            # reuse .cache/oracle outputs when current
    python -m tests.flink.generate_samples --fresh    # re-run Flink for every sample
    python -m tests.flink.generate_samples --only keyed-hashmap-savepoint

Each sample directory holds the snapshot directory exactly as Flink wrote it (a savepoint
directory ``savepoint-<job>-<random>``, or a checkpoint's ``chk-<N>`` directory alone),
``dump.json``, whose ``snapshot_path`` is rewritten relative to the sample directory, and the
sample's ``extra_files`` from the job's output directory (e.g. the SQL job's ``plan.json``, its
``COMPILE PLAN`` output, for ``--plan``).
Flink's own names (job ids, random savepoint suffixes, state file UUIDs) differ on every run;
the state content does not.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.flink import harness

SAMPLES_DIR = harness.REPO / "samples"


@dataclass(frozen=True)
class Sample:
    name: str
    job: str
    version: str
    backend: str
    snapshot: str
    note: str
    #: Job arguments beyond --backend/--snapshot (as harness.generate takes them).
    extra_args: tuple[str, ...] = ()
    #: Files of the job's output directory copied beside dump.json.
    extra_files: tuple[str, ...] = ()


SAMPLES = [
    Sample("operator-state-hashmap-savepoint", "OperatorStateJob", "2.3.0", "hashmap", "savepoint",
           "operator list/union/broadcast state; `big` in two files beside _metadata"),
    Sample("operator-state-rocksdb-savepoint", "OperatorStateJob", "2.3.0", "rocksdb", "savepoint",
           "same job on RocksDB (operator state is backend-independent)"),
    Sample("operator-state-hashmap-checkpoint", "OperatorStateJob", "2.3.0", "hashmap", "checkpoint",
           "retained checkpoint: the chk-N directory only"),
    Sample("operator-state-1.20-savepoint", "OperatorStateJob", "1.20.1", "hashmap", "savepoint",
           "Flink 1.20.1: metadata V4"),
    Sample("operator-state-1.15-savepoint", "OperatorStateJob", "1.15.4", "hashmap", "savepoint",
           "Flink 1.15.4: metadata V3"),
    Sample("operator-state-2.0-savepoint", "OperatorStateJob", "2.0.0", "hashmap", "savepoint",
           "Flink 2.0.0: metadata V5"),
    Sample("keyed-hashmap-savepoint", "KeyedStateJob", "2.3.0", "hashmap", "savepoint",
           "value/list/map/reducing/aggregating state, timers, open windows"),
    Sample("keyed-rocksdb-savepoint", "KeyedStateJob", "2.3.0", "rocksdb", "savepoint",
           "same on RocksDB: canonical savepoint format"),
    Sample("keyed-hashmap-checkpoint", "KeyedStateJob", "2.3.0", "hashmap", "checkpoint",
           "retained heap checkpoint: the chk-N directory only"),
    Sample("keyed-rocksdb-checkpoint", "KeyedStateJob", "2.3.0", "rocksdb", "checkpoint",
           "retained RocksDB native checkpoint: SST/MANIFEST/CURRENT inline, OPTIONS beside _metadata"),
    Sample("keyed-1.20-savepoint", "KeyedStateJob", "1.20.1", "hashmap", "savepoint",
           "Flink 1.20.1 keyed heap savepoint (metadata V4)"),
    Sample("sql-uids-savepoint", "SqlJob", "2.3.0", "hashmap", "savepoint",
           "Flink SQL: GROUP BY (COUNT, SUM, MAX, COUNT DISTINCT), dedup keep-first/keep-last, join, TUMBLE "
           "window; `table.exec.uid.generation: ALWAYS` (uids like `4_group-aggregate`); `plan.json` is "
           "its `COMPILE PLAN` (`--plan`)",
           extra_args=("--uids", "true"), extra_files=("plan.json",)),
    Sample("sql-no-uids-ttl-savepoint", "SqlJob", "2.3.0", "hashmap", "savepoint",
           "the same SQL job without uids (operators by uid hash) and `table.exec.state.ttl: 1h` "
           "(TTL-wrapped state); `plan.json` names them",
           extra_args=("--uids", "false", "--ttl", "1h"), extra_files=("plan.json",)),
    Sample("cep-savepoint", "CepJob", "2.3.0", "hashmap", "savepoint",
           "CEP `a next b next c` with partial matches pending: NFA state, shared buffer"),
]


def write_sample(sample: Sample, fresh: bool = False) -> Path:
    res = harness.generate(sample.job, sample.version, sample.backend, sample.snapshot,
                           extra_args=sample.extra_args, force=fresh)
    dest = SAMPLES_DIR / sample.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    snap = res.snapshot_dir
    shutil.copytree(snap, dest / snap.name)
    # Edit the job's own (readably formatted, pure ASCII) text rather than re-serializing it.
    text = res.dump_path.read_text(encoding="ascii")
    old = f'"snapshot_path": {json.dumps(res.dump["snapshot_path"])}'
    if text.count(old) != 1:
        raise RuntimeError(f"cannot find {old} in {res.dump_path}")
    text = text.replace(old, f'"snapshot_path": {json.dumps(snap.name)}')
    expected = dict(res.dump, snapshot_path=snap.name)
    if json.loads(text) != expected:
        raise RuntimeError("rewriting snapshot_path changed more than snapshot_path")
    (dest / "dump.json").write_text(text, encoding="ascii")
    for name in sample.extra_files:
        shutil.copyfile(res.out_dir / name, dest / name)
    return dest


@dataclass(frozen=True)
class ChangeSample:
    """A phase of the SQL query-change corpus (``tests/flink/sql_changes.py``) as a sample: its
    savepoint, ``plan.json`` and ``dump.json`` (the job's operators and printed changelog, not its
    state: these samples live one level down, under ``samples/sql-change/``, apart from the samples
    whose dumps describe their state)."""

    name: str
    phase: str  # a name of sql_changes.corpus_phases
    version: str
    uids: bool
    note: str
    job: str = "SqlChangeJob"
    backend: str = "hashmap"
    snapshot: str = "savepoint"


CHANGE_SAMPLES = [
    ChangeSample("sql-change/old", "old", "2.3.0", True,
                 "the query-change corpus's OLD statement set (7 INSERTs) over rows 0..119, uids on; `plan.json` "
                 "is its plan (`fstate upgrade --old-plan`)"),
    ChangeSample("sql-change/new", "template-new", "2.3.0", True,
                 "the NEW statement set (an INSERT added first, columns and aggregates changed, one INSERT "
                 "removed), started without state: the template of `fstate upgrade`; `plan.json` is its plan"),
]


def write_change_sample(sample: ChangeSample) -> Path:
    from tests.flink import sql_changes

    run = sql_changes.prepare(sample.version)[sample.uids][sample.phase]
    dest = SAMPLES_DIR / sample.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copytree(run.savepoint, dest / run.savepoint.name)
    shutil.copyfile(run.plan_path, dest / "plan.json")
    dump = dict(run.dump, snapshot_path=run.savepoint.name, plan="plan.json")
    (dest / "dump.json").write_text(json.dumps(dump, indent=1, ensure_ascii=True) + "\n", encoding="ascii")
    return dest


def write_readme(samples: list[Sample | ChangeSample]) -> None:
    lines = [
        "# Flink oracle samples",
        "",
        "Generated by `python -m tests.flink.generate_samples` (see `tests/flink/harness.py`):",
        "real Apache Flink jobs (`tests/flink/jobs`) took these snapshots, and `dump.json` in each",
        "directory is the job's own record of exactly the state the snapshot holds.",
        "Schema: `tests/flink/VERSIONS.md` (section *dump.json*).",
        "",
        "| sample | job | Flink | backend | kind | notes |",
        "|---|---|---|---|---|---|",
    ]
    for s in samples:
        lines.append(f"| `{s.name}` | {s.job} | {s.version} | {s.backend} | {s.snapshot} | {s.note} |")
    lines.append("")
    (SAMPLES_DIR / "README.md").write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fresh", action="store_true", help="re-run Flink even when a cached output exists")
    ap.add_argument("--only", action="append", default=[], help="sample name (repeatable)")
    args = ap.parse_args(argv)
    chosen = [s for s in SAMPLES if not args.only or s.name in args.only]
    unknown = set(args.only) - {s.name for s in [*SAMPLES, *CHANGE_SAMPLES]}
    if unknown:
        ap.error(f"unknown sample(s): {', '.join(sorted(unknown))}")
    for s in chosen:
        reason = harness.flink_unavailable_reason(s.version)
        if reason:
            print(f"cannot generate {s.name}: {reason}", file=sys.stderr)
            return 2
    SAMPLES_DIR.mkdir(exist_ok=True)
    changes = [s for s in CHANGE_SAMPLES if not args.only or s.name in args.only]
    for s in [*chosen, *changes]:
        dest = write_change_sample(s) if isinstance(s, ChangeSample) else write_sample(s, fresh=args.fresh)
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        print(f"{dest.relative_to(harness.REPO)}  ({size / 1024:.0f} KiB)")
    write_readme([*SAMPLES, *CHANGE_SAMPLES])
    return 0


if __name__ == "__main__":
    sys.exit(main())
