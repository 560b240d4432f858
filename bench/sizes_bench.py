"""`fstate sizes` against `fstate read` on the same keyed savepoint (real Flink 2.3, BenchJob).

    python bench/sizes_bench.py [--records 10000000] [--work DIR] [--savepoint PATH]

Makes (or reuses: the same directory as bench/read_keyed.py) a savepoint of N keys (String key, a
ValueState<Long> and a ListState<String> of 3 elements; hashmap backend, parallelism 2), then times,
each in its own process with its peak memory and CPU seconds (pool workers included):

* `fstate read … --out parquet --engine embedded`: every row decoded into Arrow and written;
* `fstate sizes … --json`: one pass over every entry (its bytes, its key group, the top keys);
* both again on one core in one process (no pool): the Arrow batches of the columnar decoder and
  `readers.sizes.measure_subtask` over each subtask;

and prints entries per second, the ratios sizes / read, and the load averages at the start and the end
(the machine may be shared: the ratio is what to compare). ``--savepoint``: an existing savepoint of
the same job and N keys instead (bench/read_100m.py's bootstrapped one at 100 M keys, which real
Flink would take about an hour to make).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import read_keyed  # noqa: E402  (the savepoint BenchJob makes, timing with peak memory)

ROOT = read_keyed.ROOT


def savepoint(records: int, work_root: Path) -> str:
    work = work_root / f"keyed-{records}"
    marker = work / "generated.json"
    if not marker.exists():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        print(f"generating {records:,} keys with Flink 2.3 …", flush=True)
        generated = read_keyed.run_java(["generate", "--records", str(records), "--out", str(work)],
                                        work / "generate.log")
        marker.write_text(json.dumps(generated))
    return json.loads(marker.read_text())["savepoint"].replace("file:", "")


ONE_CORE_READ = """
import sys, time, os
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.decoders import new_decoder
os.sched_setaffinity(0, {0})
op = Savepoint.open(sys.argv[1]).operator('bench-keyed'); t = time.perf_counter(); c = time.process_time(); n = 0
for source in op.keyed_states():
    with source.open() as state:
        ids = [i for i, _ in state.meta.value_states]
        names = ['key'] + [state.meta.states[i].name for i in ids]
        n += sum(b.num_rows for b in new_decoder(state, ids).batches(names, None))
print(n, time.perf_counter() - t, time.process_time() - c)
"""

ONE_CORE_SIZES = """
import sys, time, os
from fstate.savepoint.loader import Savepoint
from fstate.readers.sizes_measure import KeyedTask, measure_subtask
os.sched_setaffinity(0, {0})
op = Savepoint.open(sys.argv[1]).operator('bench-keyed'); t = time.perf_counter(); c = time.process_time(); n = 0
for source in op.keyed_states():
    n += sum(m.sizes.entries for m in measure_subtask(KeyedTask(source, 10, 0, None)).states.values())
print(n, time.perf_counter() - t, time.process_time() - c)
"""


def _one_core(code: str, path: str) -> tuple[int, float, float]:
    """Items, wall and CPU seconds of a timed snippet run in its own process on one core."""
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    count, seconds, cpu = result.stdout.split()
    return int(count), float(seconds), float(cpu)


def _cli(cmd: list[str]) -> tuple[float, int, float]:
    """Wall seconds, peak memory and CPU seconds (user + system, pool workers included) of a command."""
    before = os.times()
    seconds, peak = read_keyed._timed(cmd)
    return seconds, peak, read_keyed._children_cpu(before)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--work", default=str(ROOT / ".cache" / "bench"))
    parser.add_argument("--savepoint", help="an existing savepoint of BenchJob's state with --records keys")
    args = parser.parse_args()
    path = args.savepoint or savepoint(args.records, Path(args.work))
    size = sum(p.stat().st_size for p in Path(path).iterdir())
    entries = 2 * args.records
    read_keyed.warm_up(Path(args.work))
    load_start = os.getloadavg()
    out = Path(args.work) / f"keyed-{args.records}" / "parquet-sizes-bench"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    read_s, read_peak, read_cpu = _cli([read_keyed.FSTATE, "read", path, "--uid", "bench-keyed", "--out", str(out),
                                        "--engine", "embedded"])
    sizes_s, sizes_peak, sizes_cpu = _cli([read_keyed.FSTATE, "sizes", path, "--operator", "bench-keyed", "--json"])
    rows, read_core_s, read_core_cpu = _one_core(ONE_CORE_READ, path)
    measured, sizes_core_s, sizes_core_cpu = _one_core(ONE_CORE_SIZES, path)
    load_end = os.getloadavg()

    def rate(seconds: float, cpu: float) -> str:
        return f"{entries / seconds:>14,.0f} entries/s  ({seconds:8.2f} s, {cpu:8.2f} CPU s)"

    print(f"\nN = {args.records:,} keys, {entries:,} entries, {size / 1e6:.1f} MB, {os.cpu_count()} cores, "
          f"load averages at start {read_keyed._load(load_start)}, at end {read_keyed._load(load_end)}")
    print(f"  fstate read --out parquet (embedded engine)   {rate(read_s, read_cpu)}   "
          f"peak {read_peak / 2**20:,.0f} MiB")
    print(f"  fstate sizes --json                           {rate(sizes_s, sizes_cpu)}   "
          f"peak {sizes_peak / 2**20:,.0f} MiB")
    print(f"  Arrow batches, one core                       {rate(read_core_s, read_core_cpu)}   [{rows:,} rows]")
    print(f"  sizes pass, one core                          {rate(sizes_core_s, sizes_core_cpu)}   "
          f"[{measured:,} entries]")
    print(f"  ratio sizes / read time (CLI, whole pipeline) {sizes_s / read_s:.2f}")
    print(f"  ratio sizes / read time (one core, decoding)  {sizes_core_s / read_core_s:.2f}")
    print(f"  ratio sizes / read CPU (CLI, whole pipeline)  {sizes_cpu / read_cpu:.2f}")
    print(f"  ratio sizes / read CPU (one core, decoding)   {sizes_core_cpu / read_core_cpu:.2f}")


if __name__ == "__main__":
    main()
