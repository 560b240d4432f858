"""Write benchmark: `fstate modify --transform` and `fstate bootstrap` on the embedded engine and on Spark.

    python bench/write_embedded.py [--records 1000000[,3000000,...]] [--work DIR] [--master local[*]] [--no-spark]

Uses (or makes, with real Flink 2.3: bench/read_keyed.py --generate-only) the bench savepoint of N keys
(String key, ValueState<Long> `count`, ListState<String> `recent` of 3; hashmap, parallelism 2, max
parallelism 128) and a Parquet file of N rows of the same shape, then runs, each as a new `fstate`
process (interpreter start, imports, the engine's start included):

* `fstate modify SP --transform "bench-keyed:count=SELECT key, count * 2 AS count FROM state"`;
* `fstate bootstrap` of a spec whose keyed source is that Parquet file (parallelism 2);

with `--engine embedded` (pyarrow + DuckDB in process) and `--engine spark` (`--master`), and prints the
seconds of each, the ratio Spark / embedded, the peak memory of each process with its children (pool
workers, the JVM), whether both engines wrote the same bytes, and the load averages at the start and
the end (the machine is shared). With several N (``--records 1000000,3000000``), the embedded engine's
peak memory of each command at each N and its ratio to the smallest N's (1.00: flat in the rows);
``--no-spark`` runs the embedded engine alone (a large N). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from read_keyed import FSTATE, ROOT, _load, _timed  # noqa: E402

TRANSFORM = "bench-keyed:count=SELECT key, count * 2 AS count FROM state"


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def bench_savepoint(records: int, work: Path) -> Path:
    marker = work / f"keyed-{records}" / "generated.json"
    if not marker.exists():
        subprocess.run([sys.executable, str(HERE / "read_keyed.py"), "--records", str(records), "--work", str(work),
                        "--generate-only"], check=True)
    import json

    return Path(json.loads(marker.read_text())["savepoint"].replace("file:", ""))


def parquet_source(records: int, work: Path) -> Path:
    """N rows (key, count, recent) as the bench job's state holds them, in one Parquet file."""
    import pyarrow
    import pyarrow.parquet

    path = work / f"bootstrap-{records}.parquet"
    if not path.exists():
        part = path.with_suffix(".part")
        with pyarrow.parquet.ParquetWriter(part, pyarrow.schema([("key", pyarrow.string()), ("count", pyarrow.int64()),
                                                                 ("recent", pyarrow.list_(pyarrow.string()))])) as out:
            for start in range(0, records, 100_000):
                ids = range(start, min(records, start + 100_000))
                out.write_table(pyarrow.table({"key": [f"key-{i}" for i in ids], "count": list(ids),
                                               "recent": [[f"e{i}", f"f{i}", f"g{i}"] for i in ids]}))
        part.rename(path)  # complete or absent
    return path


def run(records: int, work: Path, master: str, engines: tuple[str, ...]) -> dict:
    """(command, engine) → (seconds, peak RSS, digest of the written savepoint) at N = ``records``."""
    savepoint = bench_savepoint(records, work)
    parquet = parquet_source(records, work)
    spec = work / f"bootstrap-{records}.yaml"
    spec.write_text(f"max_parallelism: 128\noperators:\n  - uid: bench-keyed\n    parallelism: 2\n    keyed:\n"
                    f"      source: {{path: {parquet}}}\n      key: key\n"
                    "      states: {count: LONG, recent: LIST<STRING>}\n")
    results = {}
    for command in ("modify", "bootstrap"):
        for engine in engines:
            out = work / f"{command}-{engine}-{records}"
            shutil.rmtree(out, ignore_errors=True)
            if command == "modify":
                cmd = [FSTATE, "modify", str(savepoint), "--out", str(out), "--transform", TRANSFORM]
            else:
                cmd = [FSTATE, "bootstrap", "--spec", str(spec), "--out", str(out)]
            cmd += ["--engine", engine] + (["--master", master] if engine == "spark" else [])
            seconds, peak = _timed(cmd)
            results[command, engine] = (seconds, peak, tree_digest(out))
            shutil.rmtree(out, ignore_errors=True)
    return results


WHAT = {"modify": "modify --transform", "bootstrap": "bootstrap from Parquet"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="1000000", help="N, or several: 1000000,3000000")
    ap.add_argument("--work", default=str(ROOT / ".cache" / "bench"))
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--no-spark", action="store_true", help="the embedded engine alone")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    engines = ("embedded",) if a.no_spark else ("embedded", "spark")
    sizes = [int(n) for n in a.records.split(",")]
    by_size = {}
    for records in sizes:
        load_start = os.getloadavg()
        results = by_size[records] = run(records, work, a.master, engines)
        load_end = os.getloadavg()
        print(f"N = {records:,} keys/rows, {os.cpu_count()} cores; load averages at start {_load(load_start)}, "
              f"at end {_load(load_end)}")
        for command in ("modify", "bootstrap"):
            emb_s, emb_peak, emb_hash = results[command, "embedded"]
            line = f"  {WHAT[command]:<24} embedded {emb_s:7.2f} s  peak {emb_peak / 2**20:6,.0f} MiB"
            if not a.no_spark:
                spark_s, spark_peak, spark_hash = results[command, "spark"]
                line += (f"   Spark {a.master} {spark_s:7.2f} s  peak {spark_peak / 2**20:6,.0f} MiB   "
                         f"ratio Spark / embedded {spark_s / emb_s:5.1f}×   same bytes: {emb_hash == spark_hash}")
            print(line, flush=True)
    if len(sizes) > 1:
        first = sizes[0]
        print(f"embedded peak memory by N (ratio to N = {first:,})")
        for command in ("modify", "bootstrap"):
            base = by_size[first][command, "embedded"][1]
            cells = "   ".join(f"{n:>12,}: {by_size[n][command, 'embedded'][1] / 2**20:6,.0f} MiB "
                               f"({by_size[n][command, 'embedded'][1] / base:4.2f})" for n in sizes)
            print(f"  {WHAT[command]:<24} {cells}")


if __name__ == "__main__":
    main()
