"""Read benchmark: fstate against real Flink 2.3 restoring the same keyed savepoint.

    python bench/read_keyed.py [--records 10000000] [--work DIR] [--master local[*]]

Makes (or reuses) a savepoint of N keys with real Flink 2.3 (String key, ValueState<Long>, a
ListState<String> of 3 elements; hashmap backend, parallelism 2), then measures in one run:

* Flink restoring it: job submission until every subtask has loaded its state (BenchJob restore);
* a raw read of the state files (bytes from disk, the I/O floor);
* fstate decoding every entry in one process (the format core alone, no Spark);
* `fstate read … --out parquet` (Spark, all cores, the whole pipeline);

and prints entries per second for each, the ratios fstate/Flink and fstate/raw, and the peak
memory of the fstate driver process. An entry is one (key, state) value: 2 per key here.
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
    sp_dir = gen["savepoint"].replace("file:", "")
    entries = 2 * a.records
    files = [p for p in Path(sp_dir).iterdir()]
    size = sum(p.stat().st_size for p in files)
    print(f"savepoint {sp_dir}: {size / 1e6:.1f} MB, {entries:,} entries")

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
        "import sys,time; from fstate.savepoint.loader import Savepoint; from fstate.readers import tables as TB\n"
        "from fstate.savepoint import _fastpath\n"
        "op = Savepoint.open(sys.argv[1]).operator('bench-keyed'); t = time.perf_counter()\n"
        "n = sum(1 for p in TB.keyed_table(op).partitions for _ in TB.read_partition(p))\n"
        "print(n, time.perf_counter() - t, 'compiled' if _fastpath.available() else 'pure-Python')"), sp_dir]
    res = subprocess.run(core_cmd, capture_output=True, text=True, check=True)
    rows, core_s, core_path = res.stdout.split()
    core_s = float(core_s)

    out = work / "parquet"
    shutil.rmtree(out, ignore_errors=True)
    stop = threading.Event()
    peaks: list = []
    t = time.perf_counter()
    proc = subprocess.Popen(["fstate", "read", sp_dir, "--uid", "bench-keyed", "--out", str(out),
                             "--master", a.master], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=peak_rss, args=(proc.pid, stop, peaks))
    watcher.start()
    _, err = proc.communicate()
    fstate_s = time.perf_counter() - t
    stop.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"fstate read failed:\n{err[-3000:]}")

    def rate(s):
        return f"{entries / s:>14,.0f} entries/s  ({s:8.2f} s)"

    print(f"\nN = {a.records:,} keys, {entries:,} entries, {size / 1e6:.1f} MB, {os.cpu_count()} cores")
    print(f"  Flink 2.3 restore (submit → all state loaded) {rate(flink_s)}")
    print(f"  raw read of the state files                   {rate(raw_s)}")
    print(f"  fstate decode, one process, no Spark          {rate(core_s)}   [{int(rows):,} rows, {core_path}]")
    print(f"  fstate read --out parquet (Spark {a.master})  {rate(fstate_s)}")
    print(f"  ratio fstate read / Flink restore speed       {flink_s / fstate_s:.2f}")
    print(f"  ratio fstate decode / Flink restore speed     {flink_s / core_s:.2f}")
    print(f"  ratio fstate read / raw read speed            {raw_s / fstate_s:.4f}")
    print(f"  peak memory of the fstate driver (python + JVM) {peaks[0] / 2**20:,.0f} MiB")


if __name__ == "__main__":
    main()
