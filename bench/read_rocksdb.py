"""RocksDB read benchmark: the same job's state as a hashmap savepoint, a RocksDB NATIVE savepoint and
a RocksDB incremental checkpoint, read by fstate in one run (issue 26).

    PATH=.venv/bin:$PATH python bench/read_rocksdb.py [--records 1000000] [--work DIR] [--repeat 3] [--spark]

Makes (or reuses) the three snapshots of BenchJob with real Flink 2.3 (N keys: String key,
ValueState<Long>, ListState<String> of 3 elements; parallelism 2), then measures for each:

* the decoder on one core: every entry into Arrow batches (`decoders.new_decoder(...).batches`), the
  process pinned to core 0: for RocksDB, the C table reader (savepoint/_sst.c) and, for comparison,
  rocksdict's iterators (``FSTATE_ROCKSDB_NATIVE=0``);
* the row path on one core: every row as Python values (`new_decoder(...).rows()`: what the API's rows,
  `verify`, `sizes` and the writers read), pinned the same way;
* `fstate read … --out parquet` with the embedded engine (the whole pipeline; RocksDB partitions sized
  by their SST files and split in key-group ranges), with its peak memory;
* with ``--spark``, once per snapshot (after the others): `fstate read … --out parquet --engine spark`
  (local Spark on the machine's cores);

each the best of ``--repeat`` runs, the snapshots taking turns (a shared machine's load comes and goes),
and prints entries per second, the ratios RocksDB / hashmap of the same job by wall time and by CPU time
(the process and its pool workers: what a busy machine disturbs least), and the load averages at the
start and the end (compare ratios from one run). An entry is one (key, state) value: 2 per key.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from read_keyed import COLUMNAR_DECODE, FSTATE, _load, _timed, run_java, warm_up  # noqa: E402

SNAPSHOTS = {  # name → BenchJob generate arguments
    "hashmap savepoint": [],
    "rocksdb native savepoint": ["--backend", "rocksdb", "--snapshot", "native"],
    "rocksdb incremental checkpoint": ["--backend", "rocksdb", "--snapshot", "checkpoint"],
}

DECODE = COLUMNAR_DECODE
#: the snippets print rows, wall seconds and the process's CPU seconds
DECODE = DECODE.replace("print(n, time.perf_counter() - t)", "print(n, time.perf_counter() - t, time.process_time())")
ROWS = DECODE.replace("sum(b.num_rows for b in new_decoder(state, ids).batches(names, None))",
                               "sum(1 for _ in new_decoder(state, ids).rows())")
assert ROWS != DECODE


def generate(work: Path, records: int, name: str, args: list[str]) -> str:
    """The snapshot's directory (made once, then reused)."""
    out = work / name.replace(" ", "-")
    marker = out / "generated.json"
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        print(f"generating {name} of {records:,} keys with Flink 2.3 …", flush=True)
        marker.write_text(json.dumps(run_java(["generate", "--records", str(records), "--out", str(out), *args],
                                              out / "generate.log")))
    return json.loads(marker.read_text())["savepoint"].replace("file:", "")


def state_bytes(snapshot: str) -> int:
    """Bytes of the files the snapshot's _metadata names (a checkpoint's shared files too)."""
    from fstate.savepoint.loader import Savepoint

    op = Savepoint.open(snapshot).operator("bench-keyed")
    total = 0
    for source in op.keyed_states():
        if source.rocksdb is not None:
            total += source.rocksdb.table_bytes
        else:
            total += source.stream.length or os.path.getsize(source.stream.path)
    return total


def decode(snapshot: str, env: dict, script: str = DECODE) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the whole process: opening included) and rows."""
    res = subprocess.run([sys.executable, "-c", script, snapshot], capture_output=True, text=True, env=env,
                         check=True)
    rows, seconds, cpu = res.stdout.split()
    return float(seconds), float(cpu), int(rows)


def read(snapshot: str, out: Path, env: dict, engine: str = "embedded") -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the command and its pool workers) and peak memory of a read."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds, peak = _read(snapshot, out, env, engine)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, peak


def _read(snapshot: str, out: Path, env: dict, engine: str) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [FSTATE, "read", snapshot, "--uid", "bench-keyed", "--out", str(out), "--engine", engine]
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return _timed(cmd)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--work", default=str(Path(__file__).resolve().parent.parent / ".cache" / "bench"))
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the best counts")
    ap.add_argument("--spark", action="store_true", help="also read each snapshot once with the Spark engine")
    ap.add_argument("--no-reference", dest="reference", action="store_false",
                    help="skip the rocksdict reads (FSTATE_ROCKSDB_NATIVE=0)")
    a = ap.parse_args()
    work = Path(a.work) / f"rocksdb-{a.records}"
    entries = 2 * a.records
    snapshots = {name: generate(work, a.records, name, args) for name, args in SNAPSHOTS.items()}
    native = dict(os.environ, FSTATE_ROCKSDB_NATIVE="1")
    reference = dict(os.environ, FSTATE_ROCKSDB_NATIVE="0")
    warm_up(work)

    load_start = os.getloadavg()
    results: dict[str, tuple] = {}
    for _ in range(a.repeat):
        for name, snapshot in snapshots.items():
            ways = ([("", native)] if name.startswith("hashmap") or not a.reference
                    else [(" (C reader)", native), (" (rocksdict)", reference)])
            for how, env in ways:
                *decoded, rows = decode(snapshot, env)
                measured = [decoded, decode(snapshot, env, ROWS)[:2], read(snapshot, work / "parquet", env)]
                peak = measured[2][2]
                best = results.get(name + how)
                # per measurement the best wall time and the least CPU time of the runs
                runs = [m[:2] for m in measured]
                if best is not None:
                    runs = [(min(w, bw), min(c, bc)) for (w, c), (bw, bc) in zip(runs, best[:3])]
                    peak = max(peak, best[3])
                results[name + how] = (*runs, peak, rows)
    spark: dict[str, tuple[float, float]] = {}
    if a.spark:
        for name, snapshot in snapshots.items():
            spark[name] = read(snapshot, work / "parquet", native, "spark")[:2]
    load_end = os.getloadavg()

    print(f"\nN = {a.records:,} keys, {entries:,} entries, {os.cpu_count()} cores, best of {a.repeat} runs")
    print(f"  load averages at start {_load(load_start)}, at end {_load(load_end)}")
    for name, snapshot in snapshots.items():
        print(f"  {name}: {state_bytes(snapshot) / 1e6:.1f} MB of state files")
    print("  (wall: best of the runs; cpu: least CPU seconds of the runs, the process and its workers; ×: hashmap's "
          "seconds / these, wall and cpu)")
    base = results["hashmap savepoint"]
    labels = ("decoder, one core ", "rows, one core    ", "read --out parquet")
    for name, (*runs, peak, rows) in results.items():
        for i, (label, (wall, cpu)) in enumerate(zip(labels, runs)):
            extra = f", {rows:,} rows" if i == 0 else f", peak {peak / 2**20:,.0f} MiB" if i == 2 else ""
            print(f"  {name if i == 0 else '':<45} {label} {entries / wall:>12,.0f} entries/s (wall {wall:6.2f} s "
                  f"×{base[i][0] / wall:.2f}, cpu {cpu:6.2f} s ×{base[i][1] / cpu:.2f}{extra})")
    for name, (wall, cpu) in spark.items():
        print(f"  {name:<45} read, Spark engine {entries / wall:>12,.0f} entries/s (wall {wall:6.2f} s "
              f"×{spark['hashmap savepoint'][0] / wall:.2f}, cpu {cpu:6.2f} s ×{spark['hashmap savepoint'][1] / cpu:.2f})")


if __name__ == "__main__":
    main()
