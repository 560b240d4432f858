"""Seconds each README snippet that does not start Spark takes, as a new user runs it (issue 25: < 5 s each).

    python bench/readme_snippets.py [--runs 1]

Python snippets that do not say Spark run as a script of their own (interpreter start and imports
included), as tests/cli/test_readme.py runs them, which also says whether pyspark was imported. Bash
snippets run command by command, each a new `fstate` process; the commands the README's *Engines*
table says start Spark are left out (with the commands reading what they wrote), and so are those the
test does not run (an S3 endpoint, pip, pytest) and `--install-completion` (it edits the shell's
start-up file). Prints each snippet's seconds (best of the runs; a bash snippet: the sum of its
commands, then each command's) and the load averages at the start and the end (the machine is
shared). Times are printed, never checked.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cli.test_readme import (NO_SPARK_RUNNER, SPARK_WITHOUT_SAYING, commands_with_exits, not_run,  # noqa: E402
                                   says_spark, snippets, spark_expected, with_placeholders, write_yaml_files)

TARGET_S = 5.0


def timed(cmd: list[str], stdin: str | None = None, expected_exit: int = 0) -> tuple[float, str]:
    """Seconds a process takes (it must end with ``expected_exit``), and its stderr."""
    start = time.perf_counter()
    result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if result.returncode != expected_exit:
        raise SystemExit(f"{shlex.join(cmd)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return seconds, result.stderr


def python_snippet(code: str, key: str) -> tuple[float, str]:
    seconds, err = timed([sys.executable, "-c", NO_SPARK_RUNNER, key], stdin=code)
    return seconds, "no pyspark" if err.rstrip().endswith("pyspark imported: False") else "pyspark imported"


def bash_commands(code: str) -> tuple[list[tuple[str, int]], list[str]]:
    """The commands of a bash snippet to time (with their exit codes), and those left out, with why."""
    kept, left_out, spark_outputs = [], [], []
    for command, expected_exit in commands_with_exits(code):
        words = shlex.split(command)
        why = not_run(command)
        if why is None and words[1:] == ["--install-completion"]:
            why = "edits the shell's start-up file"
        if why is None and spark_expected(command):
            why = "starts Spark (README, Engines)"
            spark_outputs += [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--out"]
        if why is None and any(output in command for output in spark_outputs):
            why = "reads what a Spark command wrote"
        if why is None:
            kept.append((command, expected_exit))
        else:
            left_out.append(f"{command[:60]}…: {why}")
    return kept, left_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    a = parser.parse_args()
    fstate = [sys.executable, "-m", "fstate.cli.app"]
    load_start = os.getloadavg()
    results = []
    for run in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="fstate-readme-bench-") as tmp:
            write_yaml_files(Path(tmp))
            for s in snippets():
                code = with_placeholders(s.code, Path(tmp))
                if s.language == "python" and not says_spark(s) and s.key not in SPARK_WITHOUT_SAYING:
                    seconds, note = python_snippet(code, s.key)
                    results.append((run, s.key, seconds, note, []))
                elif s.language == "bash":
                    kept, left_out = bash_commands(code)
                    if not kept:
                        continue
                    times = [(timed(fstate + shlex.split(command)[1:], expected_exit=code_)[0], command)
                             for command, code_ in kept]
                    lines = [f"{seconds:6.2f} s  {command[:90]}" for seconds, command in times]
                    lines += [f"left out: {line}" for line in left_out]
                    results.append((run, s.key, sum(t for t, _ in times), f"{len(times)} commands", lines))
    load_end = os.getloadavg()
    print(f"README snippets without Spark, best of {a.runs} run(s), {os.cpu_count()} cores "
          f"(target < {TARGET_S:.0f} s each)")
    print(f"  load averages at start {' / '.join(f'{x:.2f}' for x in load_start)}, "
          f"at end {' / '.join(f'{x:.2f}' for x in load_end)}")
    for key in dict.fromkeys(key for _, key, *_ in results):
        rows = [row for row in results if row[1] == key]
        best = min(rows, key=lambda row: row[2])
        print(f"  {best[2]:6.2f} s  {key}  ({best[3]})")
        for line in best[4]:
            print(f"             {line}")


if __name__ == "__main__":
    main()
