"""Big state on one machine (issue 26): a savepoint of N keys (100 M by default) read by both engines.

    python bench/read_100m.py [--records 100000000] [--small 1000000] [--work DIR] [--no-cluster]
                              [--rocksdb [--max-parallelism M]]

The savepoint holds the state of the read benchmark's job (bench/read_keyed.py's BenchJob: a String key,
a ValueState<Long> `count` and a ListState<String> `recent` of 3 elements; parallelism 2, max
parallelism 128). At 100 M keys real Flink takes about an hour on this machine to build it, so it is
written by `fstate bootstrap` from a Parquet file of N rows of the same shape: Flink's canonical format,
which real Flink restores (tests/flink/test_writer_oracle.py; bench/write_embedded.py checks that the
embedded and Spark writers give the same bytes). Then, each as a new `fstate` process:

* `fstate read SP --out parquet --engine embedded` (a process pool on this machine's cores);
* `fstate read SP --out parquet --engine spark --master spark://…` on a Spark standalone cluster
  started here from pyspark's own scripts (a master and one worker with every core), the cluster's
  processes (worker, executor JVM, Python workers) sampled for their memory beside the driver's.

With ``--rocksdb`` the snapshots are RocksDB incremental checkpoints of the same job made by real Flink 2.3
(bench/read_rocksdb.py's, under ``.cache/bench/rocksdb-N``), their size the bytes of the table files their
``_metadata`` names. Flink builds 10 M keys in about a minute here, but 100 M keys not in an hour (its
compactions slow it down as the state grows; run_java's limit stopped it at 65 %): ``--max-parallelism
16`` makes the --records checkpoint's key groups as large as 100 M keys' at 128 (625 k keys each), which
is what a reader's memory follows.

The same runs first at a small N (``--small``), so each peak memory is printed with its ratio to the
small N's (1.00: flat in the keys). Every read's Parquet output is counted: it must hold N rows.
Seconds, entries/s (2 a key), peak memory and load averages are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from read_keyed import FSTATE, ROOT, _load, _timed, warm_up  # noqa: E402

ENTRIES_PER_KEY = 2  # count and recent
MAX_PARALLELISM = 128  # BenchJob's, and the bootstrapped savepoints'
SCHEMA_SPEC = "      states: {count: LONG, recent: LIST<STRING>}\n"
MASTER_PORT, MASTER_UI, WORKER_UI = 7177, 18180, 18181


def parquet_source(records: int, work: Path) -> Path:
    """N rows (key, count, recent) as BenchJob's state holds them, written a million rows at a time."""
    import numpy
    import pyarrow
    import pyarrow.compute as pc
    import pyarrow.parquet

    path = work / f"source-{records}.parquet"
    if path.exists():
        return path
    part = path.with_suffix(".part")
    schema = pyarrow.schema([("key", pyarrow.string()), ("count", pyarrow.int64()),
                             ("recent", pyarrow.list_(pyarrow.string()))])
    with pyarrow.parquet.ParquetWriter(part, schema) as out:
        for start in range(0, records, 1_000_000):
            ids = pyarrow.array(numpy.arange(start, min(records, start + 1_000_000), dtype=numpy.int64))
            text = pc.cast(ids, pyarrow.string())
            n = len(ids)
            letters = pyarrow.concat_arrays([pc.binary_join_element_wise(p, text, "") for p in ("e", "f", "g")])
            order = numpy.arange(3 * n).reshape(3, n).T.ravel()  # e_i, f_i, g_i of each row in turn
            recent = pyarrow.ListArray.from_arrays(pyarrow.array(numpy.arange(0, 3 * n + 1, 3, dtype=numpy.int32)),
                                                   letters.take(pyarrow.array(order)))
            out.write_table(pyarrow.table([pc.binary_join_element_wise("key-", text, ""), ids, recent],
                                          schema=schema))
    part.rename(path)  # complete or absent
    return path


def savepoint(records: int, work: Path) -> tuple[Path, float, int]:
    """The bootstrapped savepoint of N keys (made once), with the bootstrap's seconds and peak memory
    (0, 0 when it was there already)."""
    out = work / f"savepoint-{records}"
    if (out / "_metadata").exists():
        return out, 0.0, 0
    source = parquet_source(records, work)
    spec = work / f"bootstrap-{records}.yaml"
    spec.write_text(f"max_parallelism: {MAX_PARALLELISM}\noperators:\n  - uid: bench-keyed\n    parallelism: 2\n    keyed:\n"
                    f"      source: {{path: {source}}}\n      key: key\n{SCHEMA_SPEC}")
    shutil.rmtree(out, ignore_errors=True)
    seconds, peak = _timed([FSTATE, "bootstrap", "--spec", str(spec), "--out", str(out), "--engine", "embedded"])
    return out, seconds, peak


def parquet_rows(directory: Path) -> int:
    import pyarrow.parquet

    return sum(pyarrow.parquet.ParquetFile(p).metadata.num_rows for p in directory.rglob("*.parquet"))


class Cluster:
    """A Spark standalone master and one worker (every core) on this machine, started with pyspark's
    ``bin/spark-class`` (pip's pyspark has no ``start-master.sh``), stopped at the end."""

    def __init__(self, work: Path):
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.work = work
        self.url = f"spark://127.0.0.1:{MASTER_PORT}"
        self.env = {**os.environ, "SPARK_HOME": str(self.home), "PYSPARK_PYTHON": sys.executable}
        self.processes: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        self.work.mkdir(parents=True, exist_ok=True)
        log = open(self.work / f"{name}.log", "wb")
        proc = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env, stdout=log,
                                stderr=subprocess.STDOUT)
        self.processes.append(proc)
        return proc

    def __enter__(self) -> "Cluster":
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI))
        self.worker = self._start("worker", "org.apache.spark.deploy.worker.Worker", self.url,
                                  "--cores", str(os.cpu_count()), "--memory", "8g", "--webui-port", str(WORKER_UI),
                                  "--work-dir", str(self.work / "worker"))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the worker registered with the master
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=2) as r:
                    if json.load(r).get("aliveworkers", 0) >= 1:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise SystemExit(f"the standalone worker did not register; logs in {self.work}")

    def worker_pid(self) -> int:
        return self.worker.pid

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def rocksdb_checkpoint(records: int, max_parallelism: int = MAX_PARALLELISM) -> Path:
    """Real Flink's RocksDB incremental checkpoint of N keys of BenchJob's state (made once)."""
    import read_rocksdb

    name = "rocksdb incremental checkpoint"
    args = read_rocksdb.SNAPSHOTS[name]
    work = ROOT / ".cache" / "bench" / f"rocksdb-{records}"
    if max_parallelism != MAX_PARALLELISM:
        args = [*args, "--max-parallelism", str(max_parallelism)]
        work = work.with_name(f"{work.name}-mp{max_parallelism}")
    return Path(read_rocksdb.generate(work, records, name, args))


def measure(records: int, work: Path, cluster: Cluster | None, rocksdb: bool = False,
            max_parallelism: int = MAX_PARALLELISM) -> dict:
    if rocksdb:
        import read_rocksdb

        sp, boot_seconds, boot_peak = rocksdb_checkpoint(records, max_parallelism), 0.0, 0
        size = read_rocksdb.state_bytes(str(sp))
    else:
        sp, boot_seconds, boot_peak = savepoint(records, work)
        size = sum(p.stat().st_size for p in sp.rglob("*") if p.is_file())
    result = {"bytes": size, "bootstrap": (boot_seconds, boot_peak)}
    out = work / "out"
    runs = [("embedded", [])] + ([("spark", ["--master", cluster.url])] if cluster else [])
    for engine, extra in runs:
        shutil.rmtree(out, ignore_errors=True)
        cmd = [FSTATE, "read", str(sp), "--uid", "bench-keyed", "--out", str(out), "--format", "parquet",
               "--engine", engine, *extra]
        measured = _timed(cmd, cluster.worker_pid() if engine == "spark" else None)
        rows = parquet_rows(out)
        if rows != records:
            raise SystemExit(f"{engine} read {rows:,} rows of {records:,}")
        result[engine] = measured
    shutil.rmtree(out, ignore_errors=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000_000)
    ap.add_argument("--small", type=int, default=1_000_000, help="the N the peak memory is compared with")
    ap.add_argument("--work", default=str(ROOT / ".cache" / "bench" / "big"))
    ap.add_argument("--no-cluster", action="store_true", help="the embedded engine alone")
    ap.add_argument("--rocksdb", action="store_true", help="real Flink's RocksDB incremental checkpoints instead")
    ap.add_argument("--max-parallelism", type=int, default=MAX_PARALLELISM,
                    help="with --rocksdb, the max parallelism of the --records checkpoint (the --small one: 128); "
                         "fewer key groups hold more keys each (16 at 10 M keys: key groups the size of 100 M "
                         "keys' at 128)")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    warm_up(work)
    runs = [(a.small, MAX_PARALLELISM), (a.records, a.max_parallelism if a.rocksdb else MAX_PARALLELISM)]
    results = {}
    cluster = None if a.no_cluster else Cluster(work / "cluster")
    with cluster if cluster else contextlib.nullcontext():
        for records, mp in runs:
            load = os.getloadavg()
            result = results[records, mp] = measure(records, work, cluster, a.rocksdb, mp)
            kind = "RocksDB checkpoint" if a.rocksdb else "savepoint"
            print(f"N = {records:,} keys ({records * ENTRIES_PER_KEY:,} entries, {result['bytes'] / 1e9:.2f} GB "
                  f"{kind}, max parallelism {mp}: {records // mp:,} keys a key group), {os.cpu_count()} cores; "
                  f"load averages at start {_load(load)}, at end {_load(os.getloadavg())}", flush=True)
            boot_seconds, boot_peak = result["bootstrap"]
            if boot_seconds:
                print(f"  fstate bootstrap (embedded, made the savepoint) {boot_seconds:8.1f} s   "
                      f"peak {boot_peak / 2**20:6,.0f} MiB")
            for engine in ("embedded", "spark"):
                if engine not in result:
                    continue
                seconds, peak, *cluster_peak = result[engine]
                line = (f"  read --out parquet, {engine:<8} {seconds:8.1f} s  "
                        f"{records * ENTRIES_PER_KEY / seconds:12,.0f} entries/s   peak {peak / 2**20:6,.0f} MiB")
                if cluster_peak:
                    line += f" (driver), {cluster_peak[0] / 2**20:6,.0f} MiB (worker, executor, Python workers)"
                print(line, flush=True)
    (small_n, small_mp), (big_n, big_mp) = runs
    small, big = results[runs[0]], results[runs[1]]
    print(f"peak memory at {big_n:,} keys ({big_n // big_mp:,} a key group) / at {small_n:,} "
          f"({small_n // small_mp:,} a key group):")
    for engine in ("embedded", "spark"):
        if engine in big:
            ratios = [b / s for b, s in zip(big[engine][1:], small[engine][1:])]
            print(f"  {engine:<8} " + "   ".join(f"{r:4.2f}" for r in ratios))


if __name__ == "__main__":
    main()
