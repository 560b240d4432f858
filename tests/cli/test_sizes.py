"""``fstate sizes`` on the shipped samples: the same sizes whatever the layout and backend, numbers
that add up, Flink's own bytes in a canonical savepoint, TTL expiry, growth, bad input, and the
HTML page in a real headless Chromium (renders, no console errors, its numbers are the JSON's).
The proof against the Flink jobs' dumps is tests/flink/test_sizes_oracle.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fstate.cli.app import app
from fstate.readers import engine, tables
from fstate.readers.sizes import state_sizes
from fstate.readers.sizes_growth import state_growth
from fstate.savepoint.loader import Savepoint
from tests import browser

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
KEYED = [SAMPLES / name for name in ("keyed-hashmap-savepoint", "keyed-rocksdb-savepoint",
                                     "keyed-hashmap-checkpoint", "keyed-rocksdb-checkpoint")]
TTL_SAMPLE = SAMPLES / "sql-no-uids-ttl-savepoint"
runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def _json(*args: str) -> dict:
    result = _invoke("sizes", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _decoded(operator: dict) -> dict:
    """An operator's report without what the handles say (which depends on the layout)."""
    return {k: v for k, v in operator.items() if not k.startswith("handle_")}


def test_every_layout_and_backend_gives_the_same_sizes():
    reports = [_json(str(path), "--parallelism", "1..8", "--top", "4") for path in KEYED]
    first = [_decoded(op) for op in reports[0]["operators"]]
    assert sum(op["entries"] for op in first) == 5333
    for report in reports[1:]:
        assert [_decoded(op) for op in report["operators"]] == first


def test_the_numbers_add_up():
    report = _json(str(KEYED[0]), "-p", "2,4,8", "-n", "3")
    assert report["keyed_bytes"] == sum(op["keyed_bytes"] for op in report["operators"])
    for op in report["operators"]:
        assert op["keyed_bytes"] == sum(s["bytes"] for s in op["states"]) == sum(op["key_group_bytes"])
        assert op["entries"] == sum(s["entries"] for s in op["states"]) == sum(op["key_group_entries"])
        if not op["states"]:
            continue
        assert sum(op["subtask_bytes"]) == op["keyed_bytes"] and len(op["key_group_bytes"]) == op["max_parallelism"]
        for s in op["states"]:
            assert s["bytes"] == s["key_bytes"] + s["value_bytes"]
            assert len(s["top_by_bytes"]) == min(3, s["keys"])
            assert [k["bytes"] for k in s["top_by_bytes"]] == sorted((k["bytes"] for k in s["top_by_bytes"]),
                                                                      reverse=True)
        assert [p["parallelism"] for p in op["rescale"]] == [2, 3, 4, 8]
        for point in op["rescale"]:
            assert sum(point["subtask_bytes"]) == op["keyed_bytes"] and len(point["subtask_bytes"]) == point["parallelism"]
            assert point["max"] == max(point["subtask_bytes"])
        assert op["best_parallelism"] == min((p for p in op["rescale"] if p["parallelism"] != 3),
                                             key=lambda p: (p["max"], p["parallelism"]))["parallelism"]
        skew = op["key_group_skew"]
        assert skew["max"] == max(op["key_group_bytes"]) and skew["heaviest"][0]["bytes"] == skew["max"]
        assert op["subtask_skew"]["max"] == max(op["subtask_bytes"])


def test_a_canonical_savepoint_holds_exactly_its_entries_bytes():
    """Flink's key-group streams: header, then per key group a state id, every entry's two lengths and
    bytes, and a 2-byte mark after each state's run: the entries' bytes are Flink's bytes less that."""
    savepoint = Savepoint.open(str(KEYED[0]))
    report = state_sizes(savepoint)
    for op in report.operators:
        view = savepoint.operator(op.uid_hash)
        for source in view.keyed_states():
            with source.open() as state:
                runs: dict[int, set] = {}
                for (sid, kg, *_), _, _ in state.sized_entries():
                    runs.setdefault(kg, set()).add(sid)
                for kg, start, end in state.regions:
                    framing = 2 + 2 * len(runs[kg]) + 8 * op.key_group_entries[kg]
                    assert end - start - framing == op.key_group_bytes[kg]


def test_ttl_expiry_equals_the_timestamps_read():
    at, ttl_ms = 1_800_000_000_000, 3_600_000
    report = state_sizes(str(TTL_SAMPLE), at=at, ttl_ms=ttl_ms)
    savepoint = Savepoint.open(str(TTL_SAMPLE))
    checked = 0
    for op in report.operators:
        for state in op.states:
            if state.ttl is None:
                continue
            table = tables.keyed_table(savepoint.operator(op.uid_hash), [state.name], ttl_timestamps=True)
            values = [row[-1] for batch in engine.iter_batches(table) for row in engine.batch_rows(batch)]
            stamps = [v.asDict()["ttl_timestamp"] for v in values if v is not None] if state.kind == "VALUE" else None
            if not stamps:  # a map state, or no entries
                continue
            assert state.ttl.oldest_access == min(stamps) and state.ttl.newest_access == max(stamps)
            assert state.ttl.expired_entries == sum(1 for s in stamps if s + ttl_ms <= at)
            checked += 1
            mid = sorted(stamps)[len(stamps) // 2]
            again = state_sizes(str(TTL_SAMPLE), at=mid + ttl_ms, ttl_ms=ttl_ms, operators=[op.uid_hash])
            (same,) = [s for s in again.operators[0].states if s.name == state.name]
            assert same.ttl.expired_entries == sum(1 for s in stamps if s <= mid) > 0
    assert checked


def test_growth_between_two_snapshots():
    same = _json(str(KEYED[2]), str(KEYED[0]), "-n", "3")
    assert same["states"] and all(g["growth"] == 0 for g in same["states"]) and not same["keys"] + same["shrunk_keys"]
    assert all(s["new_keys"] == s["gone_keys"] == s["grown_keys"] == s["shrunk_keys"] == 0
               for join in same["key_joins"] for s in join["states"])
    grown = state_growth(str(SAMPLES / "sql-change" / "old"), str(SAMPLES / "sql-change" / "new"))
    rows = grown.to_dict()["operators"]
    assert [g["growth"] for g in rows] == sorted((g["growth"] for g in rows), reverse=True)
    assert {g["operator"] for g in rows} >= {op.display_name for op in grown.new.operators}
    # operator state: its list, union and broadcast states grow as their decoded bytes and entries
    old, new = SAMPLES / "operator-state-hashmap-checkpoint", SAMPLES / "operator-state-rocksdb-savepoint"
    grown = state_growth(str(old), str(new))
    before, after = state_sizes(str(old)), state_sizes(str(new))
    states = {(g.operator, g.state): g for g in grown.states}
    listed = [(op.display_name, s) for op in after.operators for s in op.operator_states]
    assert len(listed) >= 10
    for name, state in listed:
        (was,) = [s for s in before.operator(name).operator_states if s.name == state.name]
        assert (states[name, state.name].old_bytes, states[name, state.name].new_entries) == (was.bytes, state.entries)
    assert {g.operator: g.new_bytes for g in grown.operators} == {op.display_name: op.operator_state_bytes
                                                                  for op in after.operators}


def test_terminal_tables_with_bars():
    result = _invoke("sizes", str(KEYED[0]), "--operator", "keyed", "-n", "2", "-p", "2..4")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "keyed/counts: largest keys by bytes" in text and "rescale preview" in text and "█" in text
    assert "window-agg" not in text
    result = _invoke("sizes", str(KEYED[2]), str(KEYED[0]), "--operator", "keyed")
    assert result.exit_code == 0 and "states by growth" in result.stdout
    result = _invoke("sizes", str(SAMPLES / "operator-state-rocksdb-savepoint"))
    assert result.exit_code == 0, result.output
    assert "Operator states" in result.stdout and "Keyed states" not in result.stdout
    assert all(word in result.stdout for word in ("union-marks", "UNION", "BROADCAST", "SPLIT_DISTRIBUTE", "█"))


@pytest.mark.parametrize("args,message", [
    (["/nonexistent/savepoint"], "/nonexistent/savepoint"),
    ([str(KEYED[0]), "--parallelism", "2,x"], "--parallelism"),
    ([str(KEYED[0]), "--parallelism", "0..4"], "--parallelism"),
    ([str(KEYED[0]), "--ttl", "soon"], "--ttl"),
    ([str(KEYED[0]), "--at", "yesterday"], "--at"),
    ([str(KEYED[0]), "--operator", "nope"], "nope"),
    ([str(KEYED[0]), "--html", "/nonexistent/dir/report.html"], "/nonexistent/dir/report.html"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = _invoke("sizes", *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("error:")


class _Numbers(HTMLParser):
    """Every element carrying a JSON path and its value."""

    def __init__(self):
        super().__init__()
        self.found: list[tuple[str, str]] = []
        self.checked: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if "data-json" in attributes:
            self.found.append((attributes["data-json"], attributes["data-value"]))
        if tag == "body":
            self.checked = attributes.get("data-checked")


def _at(document, path: str):
    for part in path.split("."):
        document = document[int(part)] if isinstance(document, list) else document[part]
    return document


def _same_number(shown: str, value) -> bool:
    return float(shown) == float(value)


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> str:
    """KEYED[0] with k-1's events grown, k-2's gone (tests/readers/test_sizes_growth.py's change)."""
    from fstate.writers.modify import SavepointModifier

    from tests.sizes_compare import GROW

    out = tmp_path_factory.mktemp("grown") / "grown"
    SavepointModifier(str(KEYED[0]), None, engine="embedded").transform_state("keyed", "events", sql=GROW).write(
        str(out), deep=True)
    return str(out)


@pytest.mark.parametrize("args", [[str(KEYED[3]), "-p", "1..8", "-n", "3"], [str(KEYED[0]), "GROWN"],
                                  [str(SAMPLES / "operator-state-hashmap-savepoint")]],
                         ids=["sizes", "growth", "operator-state"])
def test_html_page_in_headless_chromium(args, tmp_path, request):
    args = [request.getfixturevalue("grown") if arg == "GROWN" else arg for arg in args]
    page = tmp_path / "report.html"
    result = _invoke("sizes", *args, "--html", str(page))
    assert result.exit_code == 0, result.output
    report = _json(*args)
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)  # nothing from the network
    rendered = browser.render(page)
    assert rendered.console == [], rendered.console
    numbers = _Numbers()
    numbers.feed(rendered.dom)
    assert len(numbers.found) > 20
    assert numbers.checked == str(len(numbers.found))  # the page's script checked every number
    for path, shown in numbers.found:
        assert _same_number(shown, _at(report, path)), path
    if "operator-state" in args[0]:  # every list, union and broadcast state's bytes and entries shown
        shown = {path for path, _ in numbers.found}
        assert {f"operators.{i}.operator_states.{n}.{what}" for i, op in enumerate(report["operators"])
                for n in range(len(op["operator_states"])) for what in ("bytes", "entries")} <= shown
        assert sum(len(op["operator_states"]) for op in report["operators"]) >= 10
    shown = {path for path, _ in numbers.found}
    if "-p" in args:
        (keyed,) = [op for op in report["operators"] if op["uid"] == "keyed"]
        assert {f"operators.{report['operators'].index(keyed)}.rescale.{n}.max" for n in range(8)} <= shown
        # the whole job's preview: every slot at every parallelism
        assert [p["parallelism"] for p in report["job"]["rescale"]] == list(range(1, 9))
        assert {f"job.rescale.{n}.slot_bytes.{i}" for n in range(8) for i in range(n + 1)} <= shown
    if len(args) == 2:  # growth: the keys that grew and shrank, every state's key counts
        assert report["keys"] and report["shrunk_keys"] and report["keys_by_elements"]
        for listed in ("keys", "shrunk_keys", "keys_by_elements"):
            assert {f"{listed}.{n}.{what}" for n in range(len(report[listed]))
                    for what in ("old_bytes", "new_bytes", "growth", "element_growth")} <= shown
        assert {f"key_joins.{i}.states.{n}.{count}" for i, join in enumerate(report["key_joins"])
                for n in range(len(join["states"])) for count in ("new_keys", "gone_keys", "grown_keys")} <= shown


def test_a_process_pool_measures_the_same(monkeypatch):
    """Much state is measured a subtask a process: the same report (the top keys' heaps merged)."""
    from fstate.savepoint import pool

    alone = state_sizes(str(KEYED[1]), top=3, parallelisms=[2, 5]).to_dict()
    monkeypatch.setattr(pool, "SMALL_BYTES", 0)
    pooled = state_sizes(str(KEYED[1]), top=3, parallelisms=[2, 5], workers=2).to_dict()
    assert pooled == dict(alone, at=pooled["at"])


def test_an_sql_plan_gives_the_ttl():
    """The plan records `table.exec.state.ttl` (1 h here) per state: the same expiry as --ttl 1h."""
    at = 1_795_460_974_800 + 3_600_000  # within the sample's accesses: some expired, some not
    planned = state_sizes(str(TTL_SAMPLE), plan=str(TTL_SAMPLE / "plan.json"), at=at)
    told = state_sizes(str(TTL_SAMPLE), ttl_ms=3_600_000, at=at)
    expiry = [[(s.name, s.ttl) for s in op.states] for op in planned.operators]
    assert expiry == [[(s.name, s.ttl) for s in op.states] for op in told.operators]
    counted = [s.ttl for op in planned.operators for s in op.states if s.ttl is not None]
    assert {op.ttl_ms for op in planned.operators if any(s.ttl for s in op.states)} == {3_600_000}
    assert 0 < sum(t.expired_entries for t in counted) < sum(s.entries for op in planned.operators for s in op.states
                                                             if s.ttl is not None)


def test_a_damaged_state_file_is_one_line_naming_it(tmp_path):
    import shutil

    copy = tmp_path / "damaged"
    shutil.copytree(KEYED[0], copy)
    (state_file,) = [p for p in copy.rglob("*") if p.is_file() and p.stat().st_size == 44022]
    with open(state_file, "r+b") as handle:
        handle.truncate(1000)
    result = _invoke("sizes", str(copy))
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(state_file) in line


def test_many_key_groups_are_drawn_in_ranges():
    from fstate.readers import sizes_html

    values = [i % 7 for i in range(32768)]
    svg = sizes_html._columns(values, "key_group_bytes")
    sums = [int(v.replace(",", "")) for v in re.findall(r"<title>\d+\.\.\d+: ([\d,]+) B</title>", svg)]
    assert 0 < len(sums) <= sizes_html.MAX_COLUMNS and sum(sums) == sum(values) and "data-json" not in svg


@pytest.mark.parametrize("sample", ["keyed-hashmap-savepoint", "keyed-rocksdb-checkpoint", "sql-uids-savepoint",
                                    "cep-savepoint", "keyed-1.20-savepoint", "keyed-hashmap-checkpoint"])
def test_the_compiled_pass_equals_the_entry_by_entry_one(sample, monkeypatch):
    """Canonical streams, heap-native ones (a hashmap checkpoint: each entry measured as the canonical
    layout stores it) and RocksDB snapshots are measured by the compiled scanner (Scanner.measure),
    anything else entry by entry: both give the same report (the compiled pass declining here: measured
    entry by entry)."""
    from fstate.readers import sizes_measure
    from fstate.savepoint import _fastpath

    if not _fastpath.available():
        pytest.skip("the compiled scanner is not built")
    used = []
    compiled = sizes_measure._measure_compiled
    monkeypatch.setattr(sizes_measure, "_measure_compiled", lambda *a: used.append(compiled(*a)) or used[-1])
    fast = state_sizes(str(SAMPLES / sample), top=4, parallelisms=[2, 7], at=0).to_dict()
    assert any(result is not None for result in used)

    def declined(self, keys, deadline=None, ranks=None):
        return None

    monkeypatch.setattr(sizes_measure.KeyedStateSource, "open", _opening_with(declined))
    assert state_sizes(str(SAMPLES / sample), top=4, parallelisms=[2, 7], at=0).to_dict() == fast


def _opening_with(measured_key_groups):
    """KeyedStateSource.open whose states' compiled pass raises as ``measured_key_groups`` does."""
    from contextlib import contextmanager

    from fstate.savepoint.keyed_state import KeyedStateSource

    original = KeyedStateSource.open

    @contextmanager
    def opened(self, **options):
        with original(self, **options) as state:
            state.measured_key_groups = measured_key_groups.__get__(state)
            yield state

    return opened


@pytest.mark.parametrize("sample", ["keyed-hashmap-savepoint", "keyed-hashmap-checkpoint"])
def test_large_streams_are_measured_in_spans(sample, monkeypatch):
    """A large key-group stream is read in spans of key groups (as `read` does): the same report."""
    whole = state_sizes(str(SAMPLES / sample), top=3, parallelisms=[4], at=0).to_dict()
    monkeypatch.setattr(tables, "SPLIT_BYTES", 4096)
    view = Savepoint.open(str(SAMPLES / sample)).operator("keyed")
    assert len(tables.keyed_sources(view)) > 3 * 5  # the three subtasks' streams in spans
    assert state_sizes(str(SAMPLES / sample), top=3, parallelisms=[4], at=0).to_dict() == whole


@pytest.mark.spark
def test_spark_measures_a_piece_a_task_and_gives_the_same_report(spark, monkeypatch, tmp_path):
    """--engine spark: a Spark task a piece (spans of key groups here, RocksDB snapshots, a subtask's
    operator state), each a partial result merged on the driver: the very same JSON as the embedded
    engine on hashmap and RocksDB savepoints, a checkpoint, TTL state and operator state; a state file
    damaged is, inside a Spark task too, one line naming it, exit 2."""
    import shutil

    from fstate.readers import spark_tasks

    monkeypatch.setattr(tables, "SPLIT_BYTES", 4096)
    tasks = []
    map_tasks = spark_tasks.map_tasks
    monkeypatch.setattr(spark_tasks, "map_tasks", lambda *a, **k: tasks.append(len(a[3])) or map_tasks(*a, **k))
    cases = [(KEYED[0], ()), (KEYED[1], ()), (KEYED[2], ()), (TTL_SAMPLE, ("--ttl", "1h")),
             (SAMPLES / "operator-state-hashmap-savepoint", ())]
    for path, extra in cases:
        args = (str(path), "-n", "4", "-p", "2..5", "--at", "1795460978400", *extra)
        embedded = _json(*args, "--engine", "embedded")
        assert not tasks
        assert _json(*args, "--engine", "spark") == embedded, path
        assert tasks.pop() > 2 and any(op["states"] or op["operator_states"] for op in embedded["operators"])

    copy = tmp_path / "damaged"
    shutil.copytree(KEYED[0], copy)
    state_file = max((p for p in copy.rglob("*") if p.is_file() and p.name != "_metadata" and p.suffix != ".json"),
                     key=lambda p: p.stat().st_size)
    data = bytearray(state_file.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    state_file.write_bytes(bytes(data))
    lines = []
    for engine_name in ("embedded", "spark"):
        result = _invoke("sizes", str(copy), "--engine", engine_name)
        assert result.exit_code == 2, result.output
        lines.append(result.stderr.strip().splitlines())
    assert tasks and lines[0] == lines[1] and len(lines[1]) == 1 and lines[1][0].startswith("error:")
    assert state_file.name in lines[1][0], lines


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("operator-state-*")))
def test_operator_state_entries_and_bytes_are_the_dumps_and_flinks(sample):
    """List, union and broadcast states: per state and subtask, the job's dump's elements / entries and
    the bytes Flink's offsets give them (tests/sizes_compare.py)."""
    from tests.sizes_compare import check_operator_state_sizes

    path = SAMPLES / sample
    assert check_operator_state_sizes(path, json.loads((path / "dump.json").read_text(encoding="utf-8"))) >= 10


@pytest.mark.parametrize("offset", [0.3, 0.5, 0.8])
def test_a_damaged_heap_checkpoint_fails_alike_on_both_passes(offset, tmp_path, monkeypatch):
    """A heap-native stream damaged is one CorruptStateError naming the file and the key group, from the
    compiled pass as from the Python one (``FSTATE_PURE_PYTHON=1``); its detail may differ (the compiled
    pass reads no further than the key group's region)."""
    import shutil

    from fstate.savepoint.errors import CorruptStateError

    copy = tmp_path / "damaged"
    shutil.copytree(KEYED[2], copy)
    state_file = max((p for p in copy.rglob("*") if p.is_file() and p.name != "_metadata" and p.suffix != ".json"),
                     key=lambda p: p.stat().st_size)
    data = bytearray(state_file.read_bytes())
    at = int(len(data) * offset)
    data[at:at + 16] = b"\xff" * 16
    state_file.write_bytes(bytes(data))
    messages = []
    for pure in ("0", "1"):
        monkeypatch.setenv("FSTATE_PURE_PYTHON", pure)
        with pytest.raises(CorruptStateError) as raised:
            state_sizes(str(copy), workers=1)
        messages.append(str(raised.value))
    located = [re.search(r"key group \d+", message) for message in messages]
    assert all(located) and located[0].group() == located[1].group(), messages
    assert all(state_file.name in message for message in messages), messages


def test_auto_measures_large_state_here_and_growth_by_size(monkeypatch):
    """``--engine auto`` (the default): one snapshot's sizes are measured on this machine whatever the
    state's size (a pass's memory does not grow with it); growth (``sizes OLD NEW``) goes to Spark above
    the size threshold, as ``read`` does; a Spark start is recorded here instead of made."""
    from fstate.cli import sizes as cli_sizes

    monkeypatch.setattr(engine, "SPARK_ABOVE_BYTES", 0)
    started = []

    def no_spark(*args, **kwargs):
        started.append(args)
        raise RuntimeError("Spark was started")

    monkeypatch.setattr(cli_sizes, "start_spark", no_spark)
    assert _json(str(KEYED[0]))["operators"] and not started
    result = _invoke("sizes", str(KEYED[0]), str(KEYED[0]), "--json")
    assert started and result.exit_code != 0
    started.clear()
    from fstate.readers import session

    monkeypatch.setattr(session, "get_spark", no_spark)
    assert state_sizes(str(KEYED[0]), engine="auto").operators and not started
    with pytest.raises(RuntimeError, match="Spark was started"):
        state_growth(str(KEYED[0]), str(KEYED[0]), engine="auto")
