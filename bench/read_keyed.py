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

#: fstate as an installation runs it: the console script of this interpreter's environment (not a version
#: manager's shim found on PATH first: pyenv's costs ~0.13 s of bash a start), else the one on PATH
FSTATE = str(Path(sys.executable).parent / "fstate") if (Path(sys.executable).parent / "fstate").exists() else "fstate"


def as_installed() -> dict:
    """The environment for a timed command: this one without PYTHONDONTWRITEBYTECODE. Installed
    packages have their bytecode (pip compiles it); with that variable set, every process compiles the
    modules of an editable install anew (~0.15 CPU-s a process, the pool's workers too), a cost no
    installation has. The first command run so writes it (``__pycache__``, ignored by git)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


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

#: a process on one core that reads every partition of the keyed table of the bench savepoint
#: (argv[1]) as ``fstate read --out parquet`` does, timing each phase apart (CPU seconds of this
#: process): the partition's bytes from the files, decoding them into Arrow batches, writing the
#: Parquet part file (to argv[2])
READ_PHASES = (
    "import sys, os, time, resource, json\n"
    "from fstate.savepoint.loader import Savepoint\n"
    "from fstate.readers import tables as TB, engine, engine_files\n"
    "os.sched_setaffinity(0, {0})\n"
    "def cpu():\n"
    "    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime\n"
    "table = TB.keyed_table(Savepoint.open(sys.argv[1]).operator('bench-keyed')); light = engine.shippable(table)\n"
    "io = decode = write = 0.0; rows = 0\n"
    "for p in table.partitions:\n"
    "    c = cpu(); src = p.handle if p.source is None else p.source\n"
    "    if p.span is not None and p.source is not None and p.source.path is not None:\n"
    "        with open(p.source.path.replace('file:', ''), 'rb') as f: f.seek(p.source.start + p.span[0]); f.read(p.span[1] - p.span[0])\n"
    "    io += cpu() - c; c = cpu()\n"
    "    batches = list(engine.partition_batches(light, p, engine_files.ROW_GROUP_ROWS))\n"
    "    decode += cpu() - c; c = cpu()\n"
    "    rows += engine_files.write_batches(batches, engine.table_schema(table), sys.argv[2], 'parquet')\n"
    "    write += cpu() - c\n"
    "print(json.dumps({'rows': rows, 'partitions': len(table.partitions), 'read': io, 'decode': decode - io,\n"
    "                  'write': write, 'workers': engine.workers_for(table)}))")

#: the embedded engine's process pool starting: seconds until every worker has imported what a read
#: task imports (argv[1] workers: the read's processes but its own, which reads partitions too)
POOL_START = (
    "import sys, time\n"
    "from fstate.savepoint import pool\n"
    "from fstate.readers import engine_files\n"
    "if __name__ == '__main__':\n"
    "    n = int(sys.argv[1]); t = time.perf_counter()\n"
    "    with pool.spawn_pool(n) as ex:\n"
    "        list(ex.map(engine_files._csv_header, ['x'] * 8 * n))\n"
    "    print(time.perf_counter() - t)")


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
    """Every descendant: the children of each of the process's threads (a JVM starts its children, Spark's
    executors and Python workers, from threads other than its main one)."""
    kids = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids + [g for k in kids for g in _children(k)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--work", default=str(ROOT / ".cache" / "bench"))
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--generate-only", action="store_true", help="make the savepoint and stop")
    ap.add_argument("--phases-only", action="store_true",
                    help="only the embedded read's phases (cold and warm page cache), no Flink, no Spark")
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

    warm_up(work)
    if a.phases_only:
        load_start = os.getloadavg()
        phases = embedded_phases(sp_dir, files, work)
        print(f"\nN = {a.records:,} keys, {entries:,} entries, {size / 1e6:.1f} MB, {os.cpu_count()} cores")
        print(f"  load averages at start {_load(load_start)}, at end {_load(os.getloadavg())}")
        print_phases(phases, entries)
        return

    load_start = os.getloadavg()
    before = os.times()
    restore = run_java(["restore", "--savepoint", gen["savepoint"], "--work", str(work)], work / "restore.log")
    flink_cpu = _children_cpu(before)
    flink_s = restore["restore_s"]

    t = time.perf_counter()
    _read_files(files)
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
        cmd = [FSTATE, "read", sp_dir, "--uid", "bench-keyed", "--out", str(out), "--engine", engine]
        if engine == "spark":
            cmd += ["--master", a.master]
        return _timed(cmd)

    before = os.times()
    embedded_s, embedded_peak = fstate_read("embedded")
    embedded_cpu = _children_cpu(before)
    spark_s, spark_peak = fstate_read("spark")
    # the DataFrame API: the flink-savepoint data source, rows through Spark, Spark's Parquet writer
    frame_out = work / "parquet-dataframe"
    shutil.rmtree(frame_out, ignore_errors=True)
    frame_s, frame_peak = _timed([sys.executable, "-c", (
        "import sys; from fstate.readers.session import get_spark; from fstate.cli.read import write_frame\n"
        "spark = get_spark(sys.argv[3])\n"
        "frame = spark.read.format('flink-savepoint').option('path', sys.argv[1]).option('uid', 'bench-keyed').load()\n"
        "write_frame(frame, sys.argv[2], 'parquet')"), sp_dir, str(frame_out), a.master])
    verify_s, verify_peak = _timed([FSTATE, "verify", sp_dir])
    phases = embedded_phases(sp_dir, files, work)
    sample = ROOT / "samples" / "keyed-hashmap-savepoint"
    first_row_s = _first_line([FSTATE, "read", str(sample), "--uid", "keyed", "--engine", "embedded"])
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
    print(f"  CPU seconds (user + system, every thread and process): Flink's restore JVM {flink_cpu:.1f} "
          f"(its whole run), fstate read embedded {embedded_cpu:.1f}; ratio {flink_cpu / embedded_cpu:.2f}")
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
    print_phases(phases, entries)


def embedded_phases(sp_dir: str, files: list[Path], work: Path) -> dict:
    """``fstate read --out parquet --engine embedded`` with the savepoint's files dropped from the page
    cache and then with them cached (wall and CPU seconds, the pool's workers included), the pool's
    start-up alone, and each phase of the read on one core (CPU seconds)."""
    out = work / "parquet-phases"
    cmd = [FSTATE, "read", sp_dir, "--uid", "bench-keyed", "--out", str(out), "--engine", "embedded"]
    runs = {}
    for cache in ("cold", "warm"):
        if cache == "cold":
            _drop_from_page_cache(files)
        else:
            _read_files(files)
        shutil.rmtree(out, ignore_errors=True)
        runs[cache] = _timed_cpu(cmd)
    core = subprocess.run([sys.executable, "-c", READ_PHASES, sp_dir, str(work / "phases.parquet")],
                          capture_output=True, text=True, check=True)
    phases = json.loads(core.stdout)
    start = subprocess.run([sys.executable, "-c", POOL_START, str(max(1, phases["workers"] - 1))],
                           capture_output=True, text=True, check=True)
    phases["pool_start"] = float(start.stdout)
    phases["runs"] = runs
    return phases


def print_phases(phases: dict, entries: int) -> None:
    rows = phases["rows"]
    print(f"  embedded `read --out parquet`, its phases ({phases['partitions']} partitions, {phases['workers']} processes):")
    for cache, (wall, cpu) in phases["runs"].items():
        print(f"    page cache {cache}: {wall:6.2f} s wall, {cpu:6.2f} CPU-s (pool included), "
              f"{entries / wall:,.0f} entries/s")
    print(f"    pool start-up ({max(1, phases['workers'] - 1)} spawned interpreter(s) importing the reader) "
          f"{phases['pool_start']:.2f} s wall")
    one = phases["read"] + phases["decode"] + phases["write"]
    for name in ("read", "decode", "write"):
        label = {"read": "read the partitions' bytes (page cache)", "decode": "decode into Arrow batches",
                 "write": "write the Parquet part files"}[name]
        print(f"    one core: {label:42s} {phases[name]:6.2f} CPU-s  ({phases[name] / rows * 1e6:.3f} per M rows)")
    warm_cpu = phases["runs"]["warm"][1]
    print(f"    one core, the three together {one:.2f} CPU-s; the CLI's other {warm_cpu - one:.2f} CPU-s (warm) are "
          "process start-up, imports, planning and the pool")


def warm_up(work: Path) -> None:
    """One untimed read of a shipped sample on each engine first: the bytecode of fstate's modules is
    written (:func:`as_installed`) and Spark's driver writes its class-data archive, as any earlier
    use on the machine would have."""
    sample = ROOT / "samples" / "keyed-hashmap-savepoint"
    for engine in ("embedded", "spark"):
        out = work / f"warm-up-{engine}"
        shutil.rmtree(out, ignore_errors=True)
        _timed([FSTATE, "read", str(sample), "--uid", "keyed", "--out", str(out), "--engine", engine])
        shutil.rmtree(out, ignore_errors=True)


def _load(avg) -> str:
    return " / ".join(f"{x:.2f}" for x in avg)


def _timed(cmd: list[str], watch: int | None = None) -> tuple:
    """Seconds and peak RSS (with every descendant) of a command, which must succeed; with ``watch`` (a
    pid, e.g. a Spark standalone worker), also that process tree's peak RSS over the same time."""
    stop = threading.Event()
    peaks: list = []
    watched: list = []
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=as_installed())
    watchers = [threading.Thread(target=peak_rss, args=(proc.pid, stop, peaks))]
    if watch is not None:
        watchers.append(threading.Thread(target=peak_rss, args=(watch, stop, watched)))
    for w in watchers:
        w.start()
    _, err = proc.communicate()
    seconds = time.perf_counter() - t
    stop.set()
    for w in watchers:
        w.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return (seconds, peaks[0], watched[0]) if watch is not None else (seconds, peaks[0])


def _children_cpu(before) -> float:
    """CPU seconds (user + system) of the processes waited for since ``before`` (``os.times()``)."""
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _timed_cpu(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, with every process it waited for) of a command."""
    before = os.times()
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, check=True, env=as_installed())
    seconds = time.perf_counter() - t
    return seconds, _children_cpu(before)


def _read_files(files: list[Path]) -> None:
    for p in files:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def _drop_from_page_cache(files: list[Path]) -> None:
    """The files' pages out of the page cache (POSIX_FADV_DONTNEED: written pages must be on disk)."""
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _first_line(cmd: list[str]) -> float:
    """Seconds until a command prints its first line of output."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=as_installed())
    proc.stdout.readline()
    seconds = time.perf_counter() - t
    proc.communicate()
    return seconds


if __name__ == "__main__":
    main()
