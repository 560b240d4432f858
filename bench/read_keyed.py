"""Read benchmark: fstate against real Flink 2.3 restoring the same keyed savepoint.

    python bench/read_keyed.py [--records 10000000] [--work DIR] [--master local[*]]

Makes (or reuses) a savepoint of N keys with real Flink 2.3 (String key, ValueState<Long>, a
ListState<String> of 3 elements; hashmap backend, parallelism 2), then measures in one run:

* Flink restoring it: job submission until every subtask has loaded its state (BenchJob restore);
* a raw read of the state files (bytes from disk, the I/O floor);
* fstate decoding every entry in one process on one core (the format core alone): the row tuples
  (`read_partition`) and the Arrow batches of the columnar decoder (`decoders.new_decoder(...).batches`);
* `fstate read … --out parquet` with the embedded engine (pyarrow, a process pool over the
  partitions) and with Spark `local[*]` (one Spark task a partition, writing as the embedded engine
  does), the whole pipeline each; and the DataFrame API (the `flink-savepoint` data source, rows
  through Spark into Spark's own Parquet writer); `fstate verify` of the savepoint;
* the first-row latency of `fstate read` on a shipped sample (embedded engine);

and prints entries per second for each, the ratios fstate/Flink and fstate/raw, the peak memory
of each fstate process (with its children: pool workers, the JVM), and the load averages at the
start and the end. An entry is one (key, state) value: 2 per key here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.flink import harness  # noqa: E402



#: a process on one core that decodes every keyed state of the bench savepoint (argv[1]) into Arrow
#: batches and prints the rows and the seconds (bench/read_rocksdb.py runs it too)
COLUMNAR_DECODE = (
    "import sys, time, os; from fstate.savepoint.loader import Savepoint\n"
    "from fstate.savepoint.decoders import new_decoder\n"
    "os.sched_setaffinity(0, {0})\n"
    "op = Savepoint.open(sys.argv[1]).operator('bench-keyed'); t = time.perf_counter(); n = 0\n"
    "for source in op.keyed_states():\n"
    "    with source.open() as state:\n"
    "        ids = [i for i, _ in state.meta.value_states]\n"
    "        names = ['key'] + [state.meta.states[i].name for i in ids]\n"
    "        n += sum(b.num_rows for b in new_decoder(state, ids).batches(names, None))\n"
    "print(n, time.perf_counter() - t)")

def run_java(args: list[str], log_file: Path, timeout: int = 3600) -> dict:
    lib = harness.flink_lib_dir("2.3.0")
    classes = harness.compile_jobs("2.3.0", "BenchJob")
    cmd = ["java", "-Xmx8g", f"-Dlog4j.configurationFile={harness.log4j_config()}", f"-Dfstate.log.file={log_file}",
           "--add-opens", "java.base/java.util=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
           "-cp", f"{classes}{os.pathsep}{lib}/*", "BenchJob", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"BenchJob failed:\n{res.stderr[-4000:]}")
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


def peak_rss(pid: int, stop: threading.Event, out: list) -> None:
    """Peak RSS (bytes) of a process and its children, sampled from /proc."""
    peak = 0
    while not stop.is_set():
        total = 0
        for p in [pid] + _children(pid):
            try:
                with open(f"/proc/{p}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
            except OSError:
                pass
        peak = max(peak, total)
        time.sleep(0.05)
    out.append(peak)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return []
    return kids + [g for k in kids for g in _children(k)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--work", default=str(ROOT / ".cache" / "bench"))
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--generate-only", action="store_true", help="make the savepoint and stop")
    a = ap.parse_args()
    work = Path(a.work) / f"keyed-{a.records}"
    marker = work / "generated.json"
    if not marker.exists():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        print(f"generating {a.records:,} keys with Flink 2.3 …", flush=True)
        gen = run_java(["generate", "--records", str(a.records), "--out", str(work)], work / "generate.log")
        marker.write_text(json.dumps(gen))
    gen = json.loads(marker.read_text())
    if a.generate_only:
        return
    sp_dir = gen["savepoint"].replace("file:", "")
    entries = 2 * a.records
    files = [p for p in Path(sp_dir).iterdir()]
    size = sum(p.stat().st_size for p in files)
    print(f"savepoint {sp_dir}: {size / 1e6:.1f} MB, {entries:,} entries")

    load_start = os.getloadavg()
    restore = run_java(["restore", "--savepoint", gen["savepoint"], "--work", str(work)], work / "restore.log")
    flink_s = restore["restore_s"]

    t = time.perf_counter()
    n = 0
    for p in files:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 24):
                n += len(chunk)
    raw_s = time.perf_counter() - t

    core_cmd = [sys.executable, "-c", (
        "import sys,time,os; from fstate.savepoint.loader import Savepoint; from fstate.readers import tables as TB\n"
        "from fstate.savepoint import _fastpath\n"
        "os.sched_setaffinity(0, {0})\n"
        "op = Savepoint.open(sys.argv[1]).operator('bench-keyed'); t = time.perf_counter()\n"
        "n = sum(1 for p in TB.keyed_table(op).partitions for _ in TB.read_partition(p))\n"
        "print(n, time.perf_counter() - t, 'compiled' if _fastpath.available() else 'pure-Python')"), sp_dir]
    res = subprocess.run(core_cmd, capture_output=True, text=True, check=True)
    rows, core_s, core_path = res.stdout.split()
    core_s = float(core_s)
    columnar_cmd = [sys.executable, "-c", COLUMNAR_DECODE, sp_dir]
    res = subprocess.run(columnar_cmd, capture_output=True, text=True)
    columnar_s = float(res.stdout.split()[1]) if res.returncode == 0 else None

    def fstate_read(engine: str) -> tuple[float, int]:
        out = work / f"parquet-{engine}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = ["fstate", "read", sp_dir, "--uid", "bench-keyed", "--out", str(out), "--engine", engine]
        if engine == "spark":
            cmd += ["--master", a.master]
        return _timed(cmd)

    embedded_s, embedded_peak = fstate_read("embedded")
    spark_s, spark_peak = fstate_read("spark")
    # the DataFrame API: the flink-savepoint data source, rows through Spark, Spark's Parquet writer
    frame_out = work / "parquet-dataframe"
    shutil.rmtree(frame_out, ignore_errors=True)
    frame_s, frame_peak = _timed([sys.executable, "-c", (
        "import sys; from fstate.readers.session import get_spark; from fstate.cli.read import write_frame\n"
        "spark = get_spark(sys.argv[3])\n"
        "frame = spark.read.format('flink-savepoint').option('path', sys.argv[1]).option('uid', 'bench-keyed').load()\n"
        "write_frame(frame, sys.argv[2], 'parquet')"), sp_dir, str(frame_out), a.master])
    verify_s, verify_peak = _timed(["fstate", "verify", sp_dir])
    sample = ROOT / "samples" / "keyed-hashmap-savepoint"
    first_row_s = _first_line(["fstate", "read", str(sample), "--uid", "keyed", "--engine", "embedded"])
    load_end = os.getloadavg()

    def rate(s):
        return f"{entries / s:>14,.0f} entries/s  ({s:8.2f} s)"

    print(f"\nN = {a.records:,} keys, {entries:,} entries, {size / 1e6:.1f} MB, {os.cpu_count()} cores")
    print(f"  load averages at start {_load(load_start)}, at end {_load(load_end)}")
    print(f"  Flink 2.3 restore (submit → all state loaded)     {rate(flink_s)}")
    print(f"  raw read of the state files                       {rate(raw_s)}")
    print(f"  fstate decode to row tuples, one core             {rate(core_s)}   [{int(rows):,} rows, {core_path}]")
    if columnar_s:
        print(f"  fstate decode to Arrow batches, one core          {rate(columnar_s)}")
    print(f"  fstate read --out parquet (embedded engine)       {rate(embedded_s)}")
    print(f"  fstate read --out parquet (Spark {a.master})       {rate(spark_s)}")
    print(f"  DataFrame API (data source → Spark's writer)      {rate(frame_s)}")
    print(f"  fstate verify (every entry decoded and placed)    {rate(verify_s)}")
    print(f"  ratio fstate read embedded / Flink restore speed  {flink_s / embedded_s:.2f}")
    print(f"  ratio fstate read Spark / Flink restore speed     {flink_s / spark_s:.2f}")
    print(f"  ratio DataFrame API / Flink restore speed         {flink_s / frame_s:.2f}")
    print(f"  ratio fstate verify / Flink restore speed         {flink_s / verify_s:.2f}")
    if columnar_s:
        print(f"  ratio Arrow decode / raw read speed               {raw_s / columnar_s:.4f}")
    print(f"  first row of `fstate read` on a sample (embedded) {first_row_s:.2f} s")
    print(f"  peak memory, embedded (driver + pool)             {embedded_peak / 2**20:,.0f} MiB")
    print(f"  peak memory, Spark (driver + JVM)                 {spark_peak / 2**20:,.0f} MiB")
    print(f"  peak memory, DataFrame API (driver + JVM)         {frame_peak / 2**20:,.0f} MiB")
    print(f"  peak memory, verify (with its pool)               {verify_peak / 2**20:,.0f} MiB")


def _load(avg) -> str:
    return " / ".join(f"{x:.2f}" for x in avg)


def _timed(cmd: list[str]) -> tuple[float, int]:
    """Seconds and peak RSS (with children) of a command, which must succeed."""
    stop = threading.Event()
    peaks: list = []
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=peak_rss, args=(proc.pid, stop, peaks))
    watcher.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - t
    stop.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return seconds, peaks[0]


def _first_line(cmd: list[str]) -> float:
    """Seconds until a command prints its first line of output."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    proc.stdout.readline()
    seconds = time.perf_counter() - t
    proc.communicate()
    return seconds


if __name__ == "__main__":
    main()
