"""Every ```python and ```bash snippet of README.md runs, from the repository root, as written.

The snippets read the shipped samples (samples/) by relative paths. Paths that snippets write to are
the one substitution (:data:`PLACEHOLDERS`): ``/tmp/fstate-readme`` and the runtime example's
``/tmp/wc`` become directories under the test's ``tmp_path``. Bash commands run in-process through
typer's CliRunner (on the test session's Spark); the commands that cannot run here are in
:data:`NOT_RUN`, each with the reason. A new snippet fails :func:`test_every_snippet_is_tested` until
a test runs it.

Each snippet runs on the engine it names. A Python snippet that does not say Spark runs in a process of
its own, which must end without having imported pyspark (:func:`run_python_without_spark`); a bash
command starts Spark exactly when the README's *Engines* table says it does (:func:`spark_expected`).
"""

from __future__ import annotations

import json
import re
import shlex
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import tables
from fstate.readers.views import plan_views
from fstate.savepoint.errors import FStateWarning
from fstate.savepoint.loader import Savepoint
from fstate.writers.modify import dependencies
from tests.sql_cep_compare import cep_expected_pending

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
KEYED_SAMPLE = REPO / "samples" / "keyed-hashmap-savepoint"
OPERATOR_SAMPLE = REPO / "samples" / "operator-state-hashmap-savepoint"
SQL_SAMPLE = REPO / "samples" / "sql-uids-savepoint"
CEP_SAMPLE = REPO / "samples" / "cep-savepoint"

#: What snippets write to → where the tests let them write (under tmp_path).
PLACEHOLDERS = {"/tmp/fstate-readme": "fstate-readme", "/tmp/wc": "wc"}

S3 = ("needs an S3 endpoint; tests/savepoint/test_remote.py runs info, read, bootstrap and verify with "
      "--fs-option, --fs-config and FSTATE_FS_OPTIONS against a local S3 server")

#: Commands of bash snippets that are not run here, by how they start, and why.
NOT_RUN = {
    "pip install": "installing is what this test session already stands on",
    "apt-get install": "installing is what this test session already stands on (.ci/run installs chromium)",
    "pytest": "the test suite itself (this file is part of it)",
    "fstate info s3://": S3,
    "fstate read s3a://": S3,
    "fstate bootstrap --spec spec.yaml --out s3://": S3,
    "FSTATE_FS_OPTIONS=": S3,
}

runner = CliRunner()
#: the fstate commands, as the app defines them
COMMAND_NAMES = set(typer.main.get_command(app).commands)


@dataclass(frozen=True)
class Snippet:
    language: str
    heading: str
    number: int  # 1, 2, ... among the snippets of its language under its heading
    code: str

    @property
    def key(self) -> str:
        return f"{self.language}: {self.heading} #{self.number}"


def snippets() -> list[Snippet]:
    text = README.read_text(encoding="utf-8")
    found: list[Snippet] = []
    heading = "(top)"
    counts: dict[tuple[str, str], int] = {}
    for match in re.finditer(r"^(#{1,4}) ([^\n]+)$|^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        if match.group(1):
            heading = match.group(2).strip()
            continue
        language = match.group(3)
        if language not in ("python", "bash", "yaml"):
            continue
        number = counts[(language, heading)] = counts.get((language, heading), 0) + 1
        found.append(Snippet(language, heading, number, match.group(4)))
    return found


def snippet(key: str) -> Snippet:
    return next(s for s in snippets() if s.key == key)


def write_yaml_files(tmp_path: Path) -> None:
    """YAML snippets (bootstrap specs) name, on their first line, the file the bash snippets read them
    from: written there (under tmp_path) before a bash snippet runs."""
    for s in snippets():
        if s.language == "yaml":
            target = Path(with_placeholders(s.code.splitlines()[0].lstrip("# ").strip(), tmp_path))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(with_placeholders(s.code, tmp_path), encoding="utf-8")


def with_placeholders(code: str, tmp_path: Path) -> str:
    for placeholder, directory in PLACEHOLDERS.items():
        code = code.replace(placeholder, str(tmp_path / directory))
    return code


def run_python(key: str, tmp_path: Path, monkeypatch) -> dict:
    monkeypatch.chdir(REPO)
    namespace = {"__name__": "readme_snippet"}
    code = with_placeholders(snippet(key).code, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FStateWarning)  # every example runs clean
        exec(compile(code, f"README.md ({key})", "exec"), namespace)
    return namespace


def keyed_rows(path, uid: str) -> dict:
    operator = Savepoint.open(str(path), allow_external_paths=True).operator(uid)
    return {row[0]: row[1:] for row in tables.keyed_table(operator).rows()}


ARROW_API = "python: Arrow, pandas and polars #1"
API_ERRORS = "python: Arrow, pandas and polars #2"
PYTHON_API = "python: Spark DataFrames #1"
DATA_SOURCE = "python: Spark DataFrames #2"
WRITER = "python: Writing #1"
SQL_WRITER = "python: Writing #2"
MODIFIER = "python: Writing #3"
ARROW_MODIFIER = "python: Writing #4"
RUNTIME = "python: The runtime #1"
CEP_MATCHES = "python: Flink SQL and CEP state #1"
UPGRADER = "python: Change a SQL query and keep its state #1"
SIZES = "python: Where is my state #1"
#: the Python snippets that do not say Spark, each run by a test through run_python_without_spark
NO_SPARK_TESTS = {ARROW_API, API_ERRORS, RUNTIME, CEP_MATCHES, UPGRADER, SIZES, MODIFIER, ARROW_MODIFIER}
#: Python snippets that start Spark without saying so, and why
SPARK_WITHOUT_SAYING: dict[str, str] = {}
PYTHON_TESTS = {PYTHON_API, DATA_SOURCE, WRITER, SQL_WRITER, *SPARK_WITHOUT_SAYING, *NO_SPARK_TESTS}
CHANGE_SAMPLES = REPO / "samples" / "sql-change"


def says_spark(s: Snippet) -> bool:
    """Whether a snippet names Spark (a Spark snippet may start it; any other must not)."""
    return "spark" in s.code.lower()


#: run by run_python_without_spark: the snippet (stdin) as a script, then whether pyspark was imported
NO_SPARK_RUNNER = """
import sys, warnings
from fstate.savepoint.errors import FStateWarning
warnings.simplefilter("error", FStateWarning)
exec(compile(sys.stdin.read(), sys.argv[1], "exec"), {"__name__": "readme_snippet"})
sys.stdout.flush()
sys.stderr.write("\\npyspark imported: %s\\n" % ("pyspark" in sys.modules))
"""


def run_python_without_spark(key: str, tmp_path: Path) -> str:
    """A snippet that does not say Spark, run as a script of its own from the repository root: it must
    succeed without importing pyspark (so no Spark session, no JVM). Returns what it printed."""
    s = snippet(key)
    assert not says_spark(s) and key not in SPARK_WITHOUT_SAYING, key
    result = subprocess.run([sys.executable, "-c", NO_SPARK_RUNNER, f"README.md ({key})"], cwd=REPO, text=True,
                            input=with_placeholders(s.code, tmp_path), capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stderr.rstrip().endswith("pyspark imported: False"), result.stderr
    return result.stdout


def test_every_snippet_is_tested():
    found = snippets()
    assert {s.key for s in found if s.language == "python"} == PYTHON_TESTS
    # each runs on the engine it names: without Spark unless it says Spark (or is known to start it)
    assert {s.key for s in found if s.language == "python" and not says_spark(s)} - set(SPARK_WITHOUT_SAYING) \
        == NO_SPARK_TESTS
    # bash snippets are all run by test_bash_snippet; there must be some, and the set-up one first
    # YAML snippets are files the bash snippets read: each names its file (under /tmp/fstate-readme)
    for s in found:
        if s.language == "yaml":
            assert s.code.startswith("# /tmp/fstate-readme/"), f"{s.key} does not name its file"
    assert [s for s in found if s.language == "bash"][0].key == "bash: Set up #1"


@pytest.mark.spark
def test_python_api(spark, tmp_path, monkeypatch, capsys):
    namespace = run_python(PYTHON_API, tmp_path, monkeypatch)
    shown = capsys.readouterr().out
    expected = keyed_rows(KEYED_SAMPLE, "keyed")
    assert {o["uid"] for o in namespace["reader"].operators()} >= {"keyed", "window-agg", "src"}
    picked = namespace["reader"].keyed("keyed").where("key = 'k-7'").collect()
    assert [(r["key"], r["total"]) for r in picked] == [("k-7", expected["k-7"][0])]
    assert "|k-7|" in shown and "subtask" in shown  # the show() calls printed their tables
    big = sorted(key for key, row in expected.items() if row[0] is not None and row[0] > 2990)
    result = namespace["spark"].sql("SELECT key, total FROM keyed WHERE total > 2990").collect()
    assert sorted(r["key"] for r in result) == big and big
    operator = Savepoint.open(str(OPERATOR_SAMPLE)).operator("bcast")
    rules = dict(tables.broadcast_state_table(operator, "rules").rows())
    assert dict(namespace["operator_state"].broadcast_state("bcast", "rules").collect()) == rules


@pytest.mark.spark
def test_data_source_on_any_session(spark, tmp_path, monkeypatch):
    namespace = run_python(DATA_SOURCE, tmp_path, monkeypatch)
    expected = keyed_rows(KEYED_SAMPLE, "keyed")
    picked = {r["key"]: r["total"] for r in namespace["keyed"].where("key IN ('k-1', 'k-2')").collect()}
    assert picked == {key: expected[key][0] for key in ("k-1", "k-2")}
    operator = Savepoint.open(str(OPERATOR_SAMPLE)).operator("bcast")
    assert dict(namespace["rules"].collect()) == dict(tables.broadcast_state_table(operator, "rules").rows())


@pytest.mark.spark
def test_writer(spark, tmp_path, monkeypatch):
    run_python(WRITER, tmp_path, monkeypatch)
    written = Savepoint.open(str(tmp_path / "fstate-readme" / "bootstrapped"))
    counter = written.operator("counter")
    assert (counter.parallelism, counter.max_parallelism) == (4, 128)
    rows = {row[0]: row[1:] for row in tables.keyed_table(counter).rows()}
    assert rows["alice"][:2] == (3, ["login", "buy"]) and dict(rows["alice"][2]) == {"shoes": 1}
    assert rows["bob"][:2] == (1, ["login"])
    timers = list(tables.timers_table(counter).rows())
    assert [(t[0], t[1]) for t in timers] == [("alice", 1_700_000_000_000)]
    assert sorted(v for *_, v in tables.list_state_table(written.operator("source"), "offsets").rows()) == [17, 42]
    assert dict(tables.broadcast_state_table(written.operator("rules"), "rules").rows()) == {"r1": "allow"}


@pytest.mark.spark
def test_sql_writer(spark, tmp_path, monkeypatch):
    run_python(SQL_WRITER, tmp_path, monkeypatch)
    written = tmp_path / "fstate-readme" / "sql-bootstrapped"
    aggregate = Savepoint.open(str(written)).operator("4_group-aggregate")
    assert (aggregate.parallelism, aggregate.max_parallelism) == (2, 128)
    table = tables.keyed_table(aggregate)  # an SQL operator: the key's fields are columns (key_k)
    rows = {row[0]: dict(zip(table.column_names[1:], row[1:])) for row in table.rows()}
    assert table.column_names[0] == "key_f0"  # the serializer keeps field types, not names: f0 without a plan
    assert rows == {"k0": {"accState": (20, 673, 80, 2, b"\x00"), "distinctAcc_0": {"n0": 1, "n3": 1}},
                    "k1": {"accState": (5, 120, 61, 1, b"\x00"), "distinctAcc_0": {"n1": 1}}}


def test_modifier_renames_rescales_and_transforms(tmp_path):
    run_python_without_spark(MODIFIER, tmp_path)  # the transform's SQL on DuckDB
    new = Savepoint.open(str(tmp_path / "fstate-readme" / "modified"), allow_external_paths=True)
    base = Savepoint.open(str(KEYED_SAMPLE))
    uids = {o.uid for o in new.operators}
    assert "counter" in uids and "keyed" not in uids and "window-reduce" not in uids
    assert uids == {o.uid for o in base.operators} - {"keyed", "window-reduce"} | {"counter"}
    counter = new.operator("counter")
    assert counter.max_parallelism == 256
    old_rows = keyed_rows(KEYED_SAMPLE, "keyed")
    assert keyed_rows(new.location.directory, "counter") == {
        key: ((None if row[0] is None else row[0] * 10),) + row[1:] for key, row in old_rows.items()}
    assert {o.max_parallelism for o in new.operators} == {256}  # every operator's: Flink checks them per task


def test_arrow_transform_without_spark(tmp_path):
    run_python_without_spark(ARROW_MODIFIER, tmp_path)  # functions of Arrow batches and pandas frames, no JVM
    old_rows = keyed_rows(KEYED_SAMPLE, "keyed")
    new_rows = keyed_rows(tmp_path / "fstate-readme" / "arrow-modified", "keyed")
    assert new_rows == {key: ((row[0] * 10 if row[0] is not None and row[0] > 1500 else None),) + row[1:-1]
                        + ((None if key == "k-1" else row[-1]),) for key, row in old_rows.items()}
    assert old_rows["k-1"][-1] is not None and any(row[0] is not None and row[0] <= 1500 for row in old_rows.values())


def test_arrow_api_without_spark(tmp_path):
    shown = run_python_without_spark(ARROW_API, tmp_path).splitlines()
    expected = keyed_rows(KEYED_SAMPLE, "keyed")
    views = sorted(v["view"] for v in plan_views(Savepoint.open(str(KEYED_SAMPLE))))
    assert shown[0] == repr(views)
    assert shown[1] == f"{['key', 'total', 'avg', 'counts', 'sum', 'events']!r} {len(expected)}"
    batches = [int(line.split()[2]) for line in shown if line.startswith("batch of ")]
    assert sum(batches) == len(expected) and len(batches) > 1
    rows = [line.split() for line in shown if line.startswith("k-")]
    big = sorted(key for key, row in expected.items() if row[0] is not None and row[0] > 2990)
    assert rows == [[key, str(expected[key][0])] for key in ["k-1", "k-2", *big]] and big
    operator = Savepoint.open(str(OPERATOR_SAMPLE)).operator("bcast")
    for key, value in tables.broadcast_state_table(operator, "rules").rows():
        assert any(line.split() == [key, *value.split()] for line in shown), key


def test_api_errors_without_spark(tmp_path):
    shown = run_python_without_spark(API_ERRORS, tmp_path).strip()
    assert shown.startswith("UnknownOperatorError ") and "no-such-operator" in shown and len(shown.splitlines()) == 1


def test_upgrader_without_spark(tmp_path):
    run_python_without_spark(UPGRADER, tmp_path)
    check_upgraded(tmp_path / "fstate-readme" / "upgraded-api")


def test_runtime_example(tmp_path):
    run_python_without_spark(RUNTIME, tmp_path)
    counts = Savepoint.open(str(tmp_path / "wc" / "savepoints")).operator("counts")
    assert dict(tables.keyed_table(counts).rows()) == {"to": 200, "be": 200, "or": 100, "not": 100}


def test_cep_partial_matches(tmp_path):
    shown = sorted(run_python_without_spark(CEP_MATCHES, tmp_path).splitlines())
    pending = cep_expected_pending(json.loads((CEP_SAMPLE / "dump.json").read_text()))
    assert shown == sorted(f"{key} waits in {'abc'[len(match)]} after {[tuple(event) for event in match]}"
                           for key, matches in pending.items() for match in matches)


def test_sizes_from_python(tmp_path):
    from fstate.readers.sizes import state_sizes

    printed = run_python_without_spark(SIZES, tmp_path).splitlines()
    keyed = state_sizes(str(KEYED_SAMPLE), top=3, parallelisms=range(1, 9)).operator("keyed")
    assert printed[0] == str(keyed.best_parallelism) + " " + str([(s.name, s.bytes, s.entries) for s in keyed.states])
    assert printed[1] == str(keyed.states[0].top_by_bytes[0])
    assert printed[2] == str(keyed.rescale[3]["subtask_bytes"]) and keyed.rescale[3]["parallelism"] == 4
    job = state_sizes(str(KEYED_SAMPLE), top=3, parallelisms=range(1, 9)).job
    assert job["rescale"][1]["parallelism"] == 2 and sum(job["rescale"][1]["slot_bytes"]) > 0
    assert printed[3] == f"{job['best_parallelism']} {job['rescale'][1]['slot_bytes']}"


def test_setup_command_names_a_shipped_sample():
    line = next(ln for ln in snippet("bash: Set up #1").code.splitlines() if ln.startswith("pip install -e . &&"))
    sample = line.split("fstate info ")[1].split(" ")[0]
    assert (REPO / sample).is_dir()
    Savepoint.open(str(REPO / sample)).operator("keyed")


# ---------------------------------------------------------------------------------------------
# bash


#: A comment ``# exit N`` after a command says the exit code it must end with (0 otherwise).
EXIT_COMMENT = re.compile(r"#\s*exit\s+(\d+)\b")


def commands(code: str) -> list[str]:
    """The commands of a bash snippet: continuation lines joined, ``&&`` chains split, comments off."""
    return [command for command, _ in commands_with_exits(code)]


def commands_with_exits(code: str) -> list[tuple[str, int]]:
    """Each command of a bash snippet with the exit code its line's ``# exit N`` comment names (0)."""
    joined = code.replace("\\\n", " ")
    found = []
    for line in joined.splitlines():
        expected = EXIT_COMMENT.search(line)
        for command in line.split("&&"):
            words = shlex.split(command, comments=True)
            if words:
                found.append((shlex.join(words), int(expected.group(1)) if expected else 0))
    return found


def not_run(command: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


def check_cli_modified(tmp_path: Path) -> None:
    out = tmp_path / "fstate-readme" / "cli-modified"
    new = Savepoint.open(str(out), allow_external_paths=True)
    assert "keyed" not in {o.uid for o in new.operators}
    assert new.operator("counter").max_parallelism == 256
    old_rows = keyed_rows(KEYED_SAMPLE, "keyed")
    assert keyed_rows(out, "counter") == {
        key: ((None if row[0] is None else row[0] * 10),) + row[1:] for key, row in old_rows.items()}
    assert {o.max_parallelism for o in new.operators} == {256} and not dependencies(str(out))
    renamed = tmp_path / "fstate-readme" / "cli-renamed"
    assert [Path(d).parent for d in dependencies(str(renamed))] == [KEYED_SAMPLE]  # as the comments say
    assert keyed_rows(renamed, "counter") == old_rows


def check_spec_bootstrap(tmp_path: Path) -> None:
    written = Savepoint.open(str(tmp_path / "fstate-readme" / "from-spec"))
    counter = written.operator("counter")
    assert (counter.parallelism, counter.max_parallelism) == (2, 128)
    rows = {row[0]: row[1:] for row in tables.keyed_table(counter).rows()}
    assert rows == {"alice": (3, ["login", "buy"]), "bob": (1, ["login"])}
    assert [(t[0], t[1]) for t in tables.timers_table(counter).rows()] == [("alice", 1_700_000_000_000)]
    assert sorted(v for *_, v in tables.list_state_table(written.operator("source"), "offsets").rows()) == [17, 42]
    assert dict(tables.broadcast_state_table(written.operator("source"), "rules").rows()) == {"r1": "allow"}



def check_sql_and_cep_output(outputs: dict[str, str]) -> None:
    """What the SQL and CEP snippet printed is the samples' state as their jobs' dumps describe it."""
    dump = json.loads((SQL_SAMPLE / "dump.json").read_text())
    (aggregate,) = [op for op in dump["operators"] if op["kind"] == "group-aggregate"]
    info, named, unnamed = (outputs[c] for c in outputs if "sql-uids-savepoint" in c)
    assert "4_group-aggregate" in info and "SQL plan" in info and "GroupAggregate(groupBy=[k]" in info
    for key, e in aggregate["expected"]:
        (row,) = [line for line in named.splitlines() if line.startswith(f"│ {key} ")]
        assert (f'"count": {e["count"]}, "sum_v": {e["sum"]}, "max_v": {e["max"]}, '
                f'"count_distinct_name": {e["count_distinct"]}') in row, row
        (row,) = [line for line in unnamed.splitlines() if f'"{key}"' in line]
        assert f'"f0": {e["count"]}, "f1": {e["sum"]}, "f2": {e["max"]}, "f3": {e["count_distinct"]}' in row, row
    windows = next(outputs[c] for c in outputs if "sql-no-uids-ttl-savepoint" in c)
    assert "window_start" in windows and "window_end" in windows and '"count"' in windows
    cep_output = next(outputs[c] for c in outputs if "cep-savepoint" in c)
    cep_rows = [json.loads(line) for line in cep_output.splitlines() if line.startswith("{")]
    pending = cep_expected_pending(json.loads((CEP_SAMPLE / "dump.json").read_text()))
    assert sorted((r["key"], [r["map_value"]["element"][f] for f in ("f0", "f1", "f2")]) for r in cep_rows) == sorted(
        (key, event) for key, matches in pending.items() for match in matches for event in match)


def check_sizes_output(outputs: dict[str, str]) -> None:
    """The sizes snippet: the keyed operator's states, its rescale preview and the job's, and the page
    it wrote; the growth the modify made: k-1's events grew (small to medium), k-2's went."""
    sizes_command, _, growth_command = outputs
    shown = outputs[sizes_command]
    assert "keyed/counts: largest keys by bytes" in shown and "rescale preview" in shown
    assert "job: keyed state per slot" in shown
    page = Path(shlex.split(sizes_command)[-1])
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    growth = json.loads(outputs[growth_command])
    assert [(row["operator"], row["state"], row["key"]) for row in growth["keys"]] == [("keyed", "events", "k-1")]
    assert [row["key"] for row in growth["shrunk_keys"]] == ["k-2"] and growth["shrunk_keys"][0]["new_bytes"] == 0
    (events,) = [s for j in growth["key_joins"] for s in j["states"]
                 if j["operator"] == "keyed" and s["name"] == "events"]
    assert (events["grown_keys"], events["gone_keys"], events["new_keys"]) == (1, 1, 0)


def check_upgraded(path: Path) -> None:
    """The upgraded sample: agg2_out's aggregate (node 30 → 35) holds MAX, COUNT and a fresh MIN of the
    old (COUNT, SUM, MAX) per (k, name); the unchanged agg_out's state is carried under node 9's uid."""
    old = Savepoint.open(str(CHANGE_SAMPLES / "old"))
    new = Savepoint.open(str(path))

    def accumulators(savepoint, uid: str) -> dict:
        view = savepoint.operator(uid)
        state = view.keyed_meta.state_id("accState")
        out = {}
        for source in view.keyed_states():
            with source.open() as opened:
                out.update((key, value) for _, _, _, key, _, value in opened.entries({state}))
        return out

    before, after = accumulators(old, "30_group-aggregate"), accumulators(new, "35_group-aggregate")
    assert before and after == {key: (acc[2], acc[0], None) for key, acc in before.items()}
    assert accumulators(new, "9_group-aggregate") == accumulators(old, "4_group-aggregate")
    assert "32_deduplicate" not in {o.uid for o in new.operators} and old.operator("32_deduplicate")


def check_cli_upgraded(tmp_path: Path) -> None:
    check_upgraded(tmp_path / "fstate-readme" / "upgraded")


#: Further checks of what a bash snippet made, by snippet.
BASH_CHECKS = {"bash: Writing #1": check_cli_modified, "bash: Writing #2": check_spec_bootstrap,
               "bash: Change a SQL query and keep its state #1": check_cli_upgraded}
#: Checks of what a bash snippet's commands printed (command → output), by snippet.
OUTPUT_CHECKS = {"bash: Flink SQL and CEP state #1": check_sql_and_cep_output,
                 "bash: Where is my state #1": check_sizes_output}


def run_command(command: str, expected_exit: int = 0) -> str:
    words = shlex.split(command)
    assert words[0] == "fstate", f"{command}: only fstate commands run here; add others to NOT_RUN with a reason"
    if words[1:] == ["--install-completion"]:
        # installing edits the user's shell start-up file: print the same script instead, in a real process
        # (asked for by name: `--show-completion` finds the shell from the parent processes, which a
        # detached run such as CI's does not have)
        result = subprocess.run([sys.executable, "-m", "fstate.cli.app"], capture_output=True, text=True, cwd=REPO,
                                env={**os.environ, "_FSTATE_COMPLETE": "source_bash"})
        assert result.returncode == 0, result.stderr
        assert "_fstate_completion" in result.stdout
        return result.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error", FStateWarning)  # every example runs clean
        result = runner.invoke(app, words[1:], env={"COLUMNS": "200"})
    assert result.exit_code == expected_exit, f"{command}\n{result.output}"
    assert "warning:" not in result.stderr, f"{command}: every example runs clean\n{result.stderr}"
    assert result.output.strip(), f"{command}: no output"
    if "--json" in words or "--output" in words and words[words.index("--output") + 1] == "json":
        command_name = next(w for w in words[1:] if w in COMMAND_NAMES)
        if command_name in ("read", "sql"):  # one JSON object per row
            assert [json.loads(line) for line in result.stdout.splitlines()]
        else:
            json.loads(result.stdout)
    return result.output


def engine_table() -> dict[str, str]:
    """The README's *Engines* table: {command: when it starts Spark} ("never", "always", or the options
    that make it, in backquotes)."""
    text = README.read_text(encoding="utf-8").split("\n## Engines\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| `")]
    return {name: when.strip() for cells in rows for name in re.findall(r"`(\w+)`", cells[0]) for when in [cells[2]]}


def spark_expected(command: str) -> bool:
    """Whether ``command`` starts Spark, as the README's *Engines* table says: never, always, or when
    one of the options its row names in backquotes (``--engine spark``, ``--master``, ...) is given."""
    words = shlex.split(command)
    name = next((word for word in words[1:] if word in COMMAND_NAMES), None)
    if name is None:  # fstate --version, --install-completion
        return False
    when = engine_table()[name]
    if when in ("never", "always"):
        return when == "always"
    options = [option.split() for option in re.findall(r"`(--[^`]+)`", when)]
    return any(words[start:start + len(option)] == option for option in options for start in range(len(words)))


def test_the_engine_table_names_every_command():
    table = engine_table()
    assert set(table) == COMMAND_NAMES
    for name, when in table.items():
        assert when in ("never", "always") or re.findall(r"`(--[^`]+)`", when), (name, when)
    assert spark_expected("fstate read x --uid u --engine spark") and not spark_expected("fstate read x --uid u")
    assert spark_expected("fstate bootstrap --spec s --out o --engine spark") and not spark_expected("fstate --json info x")
    assert not spark_expected("fstate bootstrap --spec s --out o")


@pytest.mark.spark
@pytest.mark.parametrize("key", [s.key for s in snippets() if s.language == "bash"])
def test_bash_snippet(key, spark, tmp_path, monkeypatch):
    """Each command runs, and starts Spark exactly when the README's Engines table says it does."""
    from fstate.readers import session

    monkeypatch.chdir(REPO)
    write_yaml_files(tmp_path)
    started: list = []
    get_spark = session.get_spark
    monkeypatch.setattr(session, "get_spark", lambda *a, **k: started.append(a) or get_spark(*a, **k))
    ran = skipped = 0
    outputs: dict[str, str] = {}
    for command, expected_exit in commands_with_exits(with_placeholders(snippet(key).code, tmp_path)):
        if not_run(command):
            skipped += 1
            continue
        started.clear()
        outputs[command] = run_command(command, expected_exit)
        assert bool(started) == spark_expected(command), f"{command}: started Spark: {bool(started)}"
        ran += 1
    if not ran:
        pytest.skip("; ".join(sorted({not_run(c) for c in commands(snippet(key).code)})))
    if key in BASH_CHECKS:
        BASH_CHECKS[key](tmp_path)
    if key in OUTPUT_CHECKS:
        OUTPUT_CHECKS[key](outputs)


def test_version_is_the_installed_one():
    from importlib.metadata import version

    assert run_command("fstate --version").strip() == f"fstate {version('fstate')}"


def test_snippets_read_shipped_samples():
    for s in snippets():
        assert "/savepoints/" not in s.code or "s3://" in s.code, f"{s.key} names a savepoint that is not shipped"
    named = set(re.findall(r"samples/[\w.-]+(?:/[\w.-]+)*", README.read_text(encoding="utf-8")))
    assert named >= {"samples/keyed-hashmap-savepoint", "samples/operator-state-hashmap-savepoint"}
    for sample in named - {"samples/README.md"}:
        if sample.endswith(".json"):
            assert (REPO / sample).is_file(), sample
        else:
            assert Savepoint.open(str(REPO / sample)).operators, sample  # the directory holding one savepoint
