"""First-row latency of `fstate sql` on a shipped sample, on each engine, in one run.

    python bench/sql_first_rows.py [--runs 3] [--sample samples/keyed-hashmap-savepoint] [--query "SELECT …"]

Each run is a new `fstate` process (interpreter start, imports, the savepoint opened, the query run):
the seconds until it prints its first line, on the embedded engine (DuckDB in process, no JVM) and on
Spark (`--engine spark`: a local session started by the command). Prints the best and the median of
each, their ratio, and the load averages at the start and the end (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = "SELECT key, total, size(events) AS events FROM keyed WHERE total > 2990"


def first_line_seconds(cmd: list[str]) -> float:
    """Seconds until a command prints its first line on stdout (it must succeed)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    first = proc.stdout.readline()
    seconds = time.perf_counter() - start
    _, err = proc.communicate()
    if proc.returncode != 0 or not first:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", default=str(ROOT / "samples" / "keyed-hashmap-savepoint"))
    parser.add_argument("--query", default=QUERY)
    a = parser.parse_args()
    load_start = os.getloadavg()
    times = {engine: [first_line_seconds(["fstate", "sql", a.sample, a.query, "--json", "--engine", engine])
                      for _ in range(a.runs)] for engine in ("embedded", "spark")}
    load_end = os.getloadavg()
    print(f"fstate sql on {a.sample}, {a.runs} runs each, {os.cpu_count()} cores")
    print(f"  load averages at start {' / '.join(f'{x:.2f}' for x in load_start)}, "
          f"at end {' / '.join(f'{x:.2f}' for x in load_end)}")
    for engine, seconds in times.items():
        print(f"  first row, {engine:<8}  best {min(seconds):6.2f} s   median {statistics.median(seconds):6.2f} s")
    print(f"  ratio Spark / embedded (medians)  {statistics.median(times['spark']) / statistics.median(times['embedded']):.1f}×")


if __name__ == "__main__":
    main()
