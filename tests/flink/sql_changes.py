"""The corpus of Flink SQL query changes and its oracle (``jobs/v2/SqlChangeJob.java``).

A query change is proved on real Flink: the OLD statement set runs over rows ``[0, N)`` of SqlJob's
input and stops with a savepoint (:func:`old_run`); the savepoint is migrated; the NEW set restores
it and runs over ``[N, 2N)`` to the end of input (:func:`restore`). Its final output, the OLD run's
changelog followed by the restore's (:func:`materialize`), must equal the NEW set run from scratch
over all input (:func:`scratch`), except for columns that start fresh (:func:`compare`'s ``ignore``).

The statement sets live here and only here (:func:`statement_set`); the job gets them as a spec.
Phases of the job (one Flink job each; several run in one JVM, see :func:`run_phases`):

=================  =====================================================================  ======
kind               what runs                                                              cached
=================  =====================================================================  ======
``old``            the set over rows [0, N), then a watermark (windows ending at or       yes
                   before :func:`old_watermark` + 1 fire, later ones stay open), stop
                   with savepoint once the sources emitted everything
``template``       the set with no state and no input, savepoint right away               yes
``scratch``        the set over rows [0, 2N) and the dims twice (the input of both        yes
                   halves), to the end of input (which fires every window)
``scratch-second`` the set over rows [N, 2N) and the dims once (what an operator that     yes
                   starts empty sees after a restore)
``plan``           the set's compiled plan only (no job)                                  yes
``restore``        the set from a savepoint (unclaimed state refused) over rows           by the
                   [N, 2N) and the dims once, to the end of input                         bytes
=================  =====================================================================  ======

Every phase but ``plan`` dumps the job's operators and each print sink's raw changelog. Cached
phases are keyed by their spec (the set's SQL and ``uids`` included), the Flink version and the job's
source hash, so editing one query regenerates only the phases of the sets that hold it.
"""

from __future__ import annotations

import collections
import hashlib
import json
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Mapping, Sequence

from fstate.savepoint import sql_plan
from tests.flink import harness
from tests.flink.restore import tree_hash

JOB = "SqlChangeJob"
#: rows per half
N = 120
#: the versions the corpus runs on (SqlChangeJob is ported to 1.x like SqlJob)
VERSIONS = ("2.3.0", "1.20.1")
#: SqlJob's event time step (row i has event time i * STEP_MS) and the corpus's window size
STEP_MS = 250
WINDOW_MS = 5000

OLD, NEW = "old", "new"
#: NEW with one change Flink's state cannot follow (plans only)
REFUSED = ("window-size", "key-added")

CACHED_KINDS = ("old", "template", "scratch", "scratch-second", "plan")
KINDS = CACHED_KINDS + ("restore",)


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # as in the sink's DDL: BIGINT, STRING, TIMESTAMP(3)


@dataclass(frozen=True)
class Sink:
    """A print sink table and the query writing it (``INSERT INTO table query``)."""

    table: str
    columns: tuple[Column, ...]
    query: str

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def insert(self) -> str:
        return f"INSERT INTO {self.table} {self.query}"

    def spec(self) -> dict:
        return {"table": self.table, "columns": ", ".join(f"{c.name} {c.type}" for c in self.columns),
                "insert": self.insert}


@dataclass(frozen=True)
class StatementSet:
    name: str
    sinks: tuple[Sink, ...]

    def sink(self, table: str) -> Sink:
        for s in self.sinks:
            if s.table == table:
                return s
        raise KeyError(f"statement set {self.name!r} has no sink {table!r}")

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(s.table for s in self.sinks)


def _sink(table: str, columns: str, query: str) -> Sink:
    cols = tuple(Column(*c.strip().split(" ", 1)) for c in columns.split(","))
    return Sink(table, cols, " ".join(query.split()))


def _tumble(seconds: int) -> str:
    return f"TABLE(TUMBLE(TABLE ev, DESCRIPTOR(rowtime), INTERVAL '{seconds}' SECOND))"


def _dedup(columns: str, order: str) -> str:
    return (f"SELECT {columns} FROM (SELECT {columns}, ROW_NUMBER() OVER (PARTITION BY k ORDER BY proctime {order}) "
            "AS rn FROM ev) WHERE rn = 1")


def _old(n: int) -> tuple[Sink, ...]:
    return (
        _sink("agg_out", "k STRING, cnt BIGINT, total BIGINT, mx BIGINT",
              "SELECT k, COUNT(*) AS cnt, SUM(v) AS total, MAX(v) AS mx FROM ev GROUP BY k"),
        _sink("fagg_out", "name STRING, cnt BIGINT, total BIGINT",
              "SELECT name, COUNT(*) AS cnt, SUM(v) AS total FROM ev WHERE v < 1000 GROUP BY name"),
        _sink("last_out", "id BIGINT, k STRING, v BIGINT", _dedup("id, k, v", "DESC")),
        _sink("join_out", "id BIGINT, k STRING, label STRING",
              "SELECT e.id, e.k, d.label FROM (SELECT id, k FROM ev WHERE MOD(id, 4) = 0) AS e "
              "JOIN dims AS d ON e.k = d.k"),
        _sink("win_out", "k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), cnt BIGINT, total BIGINT",
              f"SELECT k, window_start, window_end, COUNT(*) AS cnt, SUM(v) AS total FROM {_tumble(5)} "
              "GROUP BY k, window_start, window_end"),
        _sink("agg2_out", "k STRING, name STRING, cnt BIGINT, total BIGINT, mx BIGINT",
              "SELECT k, name, COUNT(*) AS cnt, SUM(v) AS total, MAX(v) AS mx FROM ev GROUP BY k, name"),
        _sink("first_out", "id BIGINT, k STRING, v BIGINT", _dedup("id, k, v", "ASC")),
    )


def _new(n: int) -> tuple[Sink, ...]:
    old = {s.table: s for s in _old(n)}
    return (
        # new, first in the set: every node id after it shifts
        _sink("bucket_out", "b BIGINT, cnt BIGINT",
              "SELECT MOD(id, 3) AS b, COUNT(*) AS cnt FROM ev GROUP BY MOD(id, 3)"),
        old["agg_out"],  # unchanged
        # the filter upstream of the aggregate changed: the same rows pass in [0, n), fewer after
        _sink("fagg_out", "name STRING, cnt BIGINT, total BIGINT",
              f"SELECT name, COUNT(*) AS cnt, SUM(v) AS total FROM ev WHERE id < {n * 3 // 2} GROUP BY name"),
        _sink("last_out", "id BIGINT, k STRING, v BIGINT, name STRING", _dedup("id, k, v, name", "DESC")),
        _sink("join_out", "id BIGINT, k STRING, v BIGINT, label STRING",
              "SELECT e.id, e.k, e.v, d.label FROM (SELECT id, k, v FROM ev WHERE MOD(id, 4) = 0) AS e "
              "JOIN dims AS d ON e.k = d.k"),
        _sink("win_out", "k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), total BIGINT, cnt BIGINT",
              f"SELECT k, window_start, window_end, SUM(v) AS total, COUNT(*) AS cnt FROM {_tumble(5)} "
              "GROUP BY k, window_start, window_end"),
        _sink("agg2_out", "name STRING, k STRING, mx BIGINT, cnt BIGINT, mn BIGINT",
              "SELECT name, k, MAX(v) AS mx, COUNT(*) AS cnt, MIN(v) AS mn FROM ev GROUP BY k, name"),
        # first_out dropped
    )


def _refused(name: str, n: int) -> tuple[Sink, ...]:
    changed = {
        "window-size": _sink(
            "win_out", "k STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), total BIGINT, cnt BIGINT",
            f"SELECT k, window_start, window_end, SUM(v) AS total, COUNT(*) AS cnt FROM {_tumble(10)} "
            "GROUP BY k, window_start, window_end"),
        "key-added": _sink(
            "agg_out", "k STRING, name STRING, cnt BIGINT, total BIGINT, mx BIGINT",
            "SELECT k, name, COUNT(*) AS cnt, SUM(v) AS total, MAX(v) AS mx FROM ev GROUP BY k, name"),
    }[name]
    return tuple(changed if s.table == changed.table else s for s in _new(n))


def statement_set(name: str, n: int = N) -> StatementSet:
    """The corpus's set ``name`` (:data:`OLD`, :data:`NEW` or one of :data:`REFUSED`) for halves of ``n`` rows."""
    if name == OLD:
        return StatementSet(name, _old(n))
    if name == NEW:
        return StatementSet(name, _new(n))
    if name in REFUSED:
        return StatementSet(name, _refused(name, n))
    raise KeyError(f"no statement set {name!r} (have {[OLD, NEW, *REFUSED]})")


def old_watermark(n: int = N) -> int:
    """The watermark the OLD run emits after its rows: 5 s windows ending by 60 % of the first half's
    event time fire, the later ones stay open in the savepoint (17999 for N = 120)."""
    return (n * STEP_MS * 3 // 5) // WINDOW_MS * WINDOW_MS - 1


# --------------------------------------------------------------------------- phases


@dataclass(frozen=True)
class Phase:
    """One job of SqlChangeJob: ``kind`` (:data:`KINDS`) of ``set`` with halves of ``n`` rows, with
    ``uids`` (``table.exec.uid.generation: ALWAYS``) or without (SQL operators get no uid, their
    operator ids are hashes of the job graph); ``savepoint`` for a restore."""

    kind: str
    set: StatementSet
    uids: bool
    n: int = N
    savepoint: Path | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"phase kind must be one of {KINDS}, not {self.kind!r}")
        if (self.kind == "restore") != (self.savepoint is not None):
            raise ValueError("a restore phase, and only one, names a savepoint")

    def spec(self) -> dict:
        """The phase as the job reads it (without its directory name)."""
        n = self.n
        rows, watermark, dims, mode = {
            "old": ([0, n], old_watermark(n), 1, "savepoint"),
            "template": ([0, 0], None, 0, "savepoint"),
            "scratch": ([0, 2 * n], None, 2, "finish"),
            "scratch-second": ([n, 2 * n], None, 1, "finish"),
            "plan": ([0, 0], None, 0, "plan"),
            "restore": ([n, 2 * n], None, 1, "finish"),
        }[self.kind]
        return {"mode": mode, "uids": self.uids, "sinks": [s.spec() for s in self.set.sinks], "rows": rows,
                "watermark": watermark, "dims": dims,
                "restore": str(Path(self.savepoint).resolve()) if self.savepoint else None}


@dataclass(frozen=True)
class PhaseRun:
    """What one phase left: its directory (``dump.json``, ``plan.json``, ``savepoint/``) and dump."""

    phase: Phase
    out_dir: Path
    dump: dict = field(repr=False)
    cached: bool

    @property
    def seconds(self) -> float:
        """Wall time of the phase inside its JVM (planner, job, savepoint; not the JVM's start)."""
        return self.dump["timing"]["phase_ms"] / 1000

    @property
    def savepoint(self) -> Path | None:
        """The savepoint the phase took (old, template) or restored (restore); None otherwise."""
        path = self.dump.get("snapshot_path")
        return None if path is None else self.out_dir / path

    @property
    def plan_path(self) -> Path:
        return self.out_dir / self.dump["plan"]

    def plan(self) -> sql_plan.Plan:
        return sql_plan.load_plan(str(self.plan_path))

    @property
    def operators(self) -> list[dict]:
        """Every stream node of the job in id order: name, uid, operator_id, parallelism, max_parallelism."""
        return self.dump["operators"]

    @property
    def changelog(self) -> dict[str, list[str]]:
        """sink table -> the raw lines its print sink wrote, in order ("+I[k0, 1, 5, 5]", "-U[...]")."""
        return self.dump["changelog"]

    @property
    def failure(self) -> str | None:
        """A restore Flink failed: the exception's cause chain (None when the job finished)."""
        return self.dump.get("failure")


class RestoreFailed(AssertionError):
    """Flink failed the restored job (e.g. state it cannot map); ``run`` holds the phase's dump."""

    def __init__(self, run: PhaseRun) -> None:
        super().__init__(f"Flink {run.dump['flink_version']} failed restoring {run.phase.savepoint} into "
                         f"{run.phase.set.name!r}:\n{run.failure}")
        self.run = run


def _cache_entry(version: str, job_hash: str, phase: Phase) -> Path:
    spec = phase.spec()
    if spec["restore"] is not None:  # by the savepoint's bytes (fstate writes reproducible savepoints)
        spec["restore"] = tree_hash(Path(spec["restore"]))
    key = hashlib.sha256(json.dumps([harness.GENERATION_FORMAT, JOB, version, job_hash, spec])
                         .encode()).hexdigest()[:12]
    uids = "uids" if phase.uids else "no-uids"
    return harness.CACHE / "oracle" / f"{JOB}-{version}-{uids}-{phase.kind}-{phase.set.name}-{key}"


def _load(phase: Phase, out_dir: Path, cached: bool) -> PhaseRun:
    return PhaseRun(phase, out_dir, json.loads((out_dir / "dump.json").read_text(encoding="utf-8")), cached)


def run_phases(version: str, phases: Sequence[Phase], timeout: int | None = None) -> list[PhaseRun]:
    """The runs of ``phases``, in order: from the cache, all others in ONE JVM (a restore is cached by
    the bytes of the savepoint it restores: fstate writes reproducible savepoints)."""
    harness.require_flink(version)
    runs: dict[int, PhaseRun] = {}
    job_hash = harness.job_hash(JOB, version)
    entries = {i: _cache_entry(version, job_hash, p) for i, p in enumerate(phases)}
    with ExitStack() as locks:
        for entry in sorted(set(entries.values()), key=str):
            locks.enter_context(harness.locked(entry))
        for i, entry in entries.items():
            if (entry / ".complete.json").exists():
                runs[i] = _load(phases[i], entry, cached=True)
        todo = {entries[i]: (i, f"{i:02d}-{p.kind}-{p.set.name}", p) for i, p in enumerate(phases) if i not in runs}
        if todo:
            # beside their cache entries, so that moving them is a rename
            base = harness.CACHE / "oracle"
            base.mkdir(parents=True, exist_ok=True)
            jvm_dir = Path(tempfile.mkdtemp(prefix=f"{JOB}-", dir=base))
            spec = jvm_dir / "spec.json"
            spec.write_text(json.dumps({"phases": [dict(p.spec(), name=name) for _, name, p in todo.values()]},
                                       indent=1))
            try:
                harness.run_job(JOB, version, jvm_dir / "out", ["--backend", "hashmap", "--spec", str(spec)],
                                timeout=timeout or harness.DEFAULT_JOB_TIMEOUT + 60 * len(todo), expect_snapshot=False)
            except harness.FlinkJobError:  # the error carries stderr and the log's tail
                shutil.rmtree(jvm_dir, ignore_errors=True)
                raise
            for entry, (i, name, p) in todo.items():
                if entry.exists():
                    shutil.rmtree(entry)
                shutil.move(str(jvm_dir / "out" / name), str(entry))
                (entry / ".complete.json").write_text(json.dumps({"spec": p.spec()}) + "\n")
            shutil.rmtree(jvm_dir)
        for i, entry in entries.items():
            if i not in runs:
                runs[i] = _load(phases[i], entry, cached=False)
    return [runs[i] for i in range(len(phases))]


def _as_set(s: StatementSet | str, n: int) -> StatementSet:
    return statement_set(s, n) if isinstance(s, str) else s


def old_run(version: str, uids: bool, set: StatementSet | str = OLD, n: int = N) -> PhaseRun:
    """The OLD set over rows [0, n) with its savepoint (cached)."""
    return run_phases(version, [Phase("old", _as_set(set, n), uids, n)])[0]


def template(version: str, uids: bool, set: StatementSet | str, n: int = N) -> PhaseRun:
    """``set`` started without state and input, savepoint taken right away (cached)."""
    return run_phases(version, [Phase("template", _as_set(set, n), uids, n)])[0]


def scratch(version: str, uids: bool, set: StatementSet | str, n: int = N) -> PhaseRun:
    """``set`` over all input: rows [0, 2n), the dims twice (cached)."""
    return run_phases(version, [Phase("scratch", _as_set(set, n), uids, n)])[0]


def scratch_second(version: str, uids: bool, set: StatementSet | str, n: int = N) -> PhaseRun:
    """``set`` over the second half only: rows [n, 2n), the dims once (cached)."""
    return run_phases(version, [Phase("scratch-second", _as_set(set, n), uids, n)])[0]


def plan(version: str, uids: bool, set: StatementSet | str, n: int = N) -> PhaseRun:
    """``set``'s compiled plan only (cached); the run has no operators, changelog or savepoint."""
    return run_phases(version, [Phase("plan", _as_set(set, n), uids, n)])[0]


def restore(version: str, uids: bool, set: StatementSet | str, savepoint_dir: Path, n: int = N) -> PhaseRun:
    """``set`` restored from ``savepoint_dir`` over rows [n, 2n) (cached by the savepoint's bytes);
    raises :class:`RestoreFailed` when Flink fails the job."""
    (run,) = run_phases(version, [Phase("restore", _as_set(set, n), uids, n, Path(savepoint_dir))])
    if run.failure is not None:
        raise RestoreFailed(run)
    return run


def corpus_phases(uids: bool, n: int = N) -> dict[str, Phase]:
    """The corpus's cached phases for ``uids``: ``old`` (OLD), ``scratch-old``,
    ``scratch-second-old``, ``template-new``, ``scratch-new``, ``scratch-second-new``, and
    ``plan-<name>`` for OLD, NEW and each of :data:`REFUSED`."""
    old, new = statement_set(OLD, n), statement_set(NEW, n)
    phases = {"old": Phase("old", old, uids, n), "scratch-old": Phase("scratch", old, uids, n),
              "scratch-second-old": Phase("scratch-second", old, uids, n),
              "template-new": Phase("template", new, uids, n), "scratch-new": Phase("scratch", new, uids, n),
              "scratch-second-new": Phase("scratch-second", new, uids, n)}
    for name in (OLD, NEW, *REFUSED):
        phases[f"plan-{name}"] = Phase("plan", statement_set(name, n), uids, n)
    return phases


def prepare(version: str, n: int = N) -> dict[bool, dict[str, PhaseRun]]:
    """uids (True, False) -> :func:`corpus_phases` name -> run: every cached phase of the corpus,
    with and without uids, what is not cached yet in one JVM."""
    wanted = [(uids, name, phase) for uids in (True, False) for name, phase in corpus_phases(uids, n).items()]
    out: dict[bool, dict[str, PhaseRun]] = {True: {}, False: {}}
    for (uids, name, _), run in zip(wanted, run_phases(version, [phase for _, _, phase in wanted])):
        out[uids][name] = run
    return out


# --------------------------------------------------------------------------- plans


def sink_nodes(plan: sql_plan.Plan, table: str) -> list[sql_plan.PlanNode]:
    """The plan's nodes feeding the sink ``table``, the sink first, then upstream breadth first."""
    sinks = [node for node in plan.nodes.values() if node.kind == "sink"
             and node.spec.get("dynamicTableSink", {}).get("table", {}).get("identifier", "").endswith(f"`{table}`")]
    if len(sinks) != 1:
        raise KeyError(f"{plan.path}: {len(sinks)} sink nodes write {table!r}")
    seen, order = {sinks[0].id}, [sinks[0]]
    for node in order:
        for source in plan.inputs.get(node.id, ()):
            if source not in seen:
                seen.add(source)
                order.append(plan.nodes[source])
    return order


def stateful_nodes(plan: sql_plan.Plan, table: str) -> list[sql_plan.PlanNode]:
    """The nodes feeding ``table`` that keep state (the sink itself excluded), downstream first."""
    return [node for node in sink_nodes(plan, table)[1:] if node.kind in sql_plan.STATEFUL_KINDS]


# --------------------------------------------------------------------------- output


class ChangelogError(AssertionError):
    """A changelog that cannot be applied: a retraction of a row the sink does not hold, or a line
    that is not a row of its sink."""


@dataclass(frozen=True)
class Table:
    """A sink's final rows: tuples of values in ``columns`` order, sorted. BIGINT -> int, STRING ->
    str, TIMESTAMP(3) -> str as printed (``1970-01-01T00:00:05``), NULL -> None."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    def project(self, ignore: Collection[str] = ()) -> Table:
        keep = [i for i, c in enumerate(self.columns) if c not in ignore]
        return Table(tuple(self.columns[i] for i in keep), _sorted(tuple(r[i] for i in keep) for r in self.rows))


def _sorted(rows) -> tuple[tuple, ...]:
    return tuple(sorted(rows, key=lambda r: tuple((0, "") if v is None else (1, v) for v in r)))


def _value(text: str, sql_type: str) -> object:
    if text == "null":
        return None
    return int(text) if sql_type.upper() in ("BIGINT", "INT", "INTEGER", "SMALLINT", "TINYINT") else text


def parse_line(sink: Sink, line: str) -> tuple[str, dict[str, object]]:
    """A print sink line ("+I[k0, 1]") of ``sink`` -> (its kind "+I"/"+U"/"-U"/"-D", column -> value)."""
    kind, body = line[:2], line[2:]
    fields = body[1:-1].split(", ") if body not in ("[]",) else []
    if kind not in ("+I", "+U", "-U", "-D") or not (body.startswith("[") and body.endswith("]")) \
            or len(fields) != len(sink.columns):
        raise ChangelogError(f"{sink.table}: {line!r} is not a row of ({', '.join(sink.column_names)})")
    return kind, {c.name: _value(text, c.type) for c, text in zip(sink.columns, fields)}


def materialize(*runs: PhaseRun, into: StatementSet | None = None,
                ignore: Mapping[str, Collection[str]] | None = None) -> dict[str, Table]:
    """The final table of every sink of ``into`` (default: the last run's set) after the changelogs
    of ``runs`` in order, e.g. ``materialize(old, restored)`` or ``materialize(scratch_run)``.

    A run's rows map to ``into``'s columns by name (a column the run's sink lacks is None); sinks
    ``into`` lacks are dropped, sinks only ``into`` has start empty. +I/+U add a row, -U/-D remove
    one equal row; a retraction of a row the sink does not hold raises :class:`ChangelogError`
    (all of them, listed). ``ignore`` (sink -> columns) leaves those columns out before the rows are
    applied, so retractions match on the other columns."""
    target = into or runs[-1].phase.set
    ignore = ignore or {}
    columns = {s.table: tuple(c for c in s.column_names if c not in ignore.get(s.table, ())) for s in target.sinks}
    held = {table: collections.Counter() for table in columns}
    unmatched: list[str] = []
    for run in runs:
        if run.failure is not None:
            raise RestoreFailed(run)
        if run.dump.get("changelog") is None:
            raise ValueError(f"the {run.phase.kind} phase of {run.phase.set.name!r} ran no job: it has no changelog")
        for table, lines in run.changelog.items():
            if table not in columns:
                continue
            sink = run.phase.set.sink(table)
            for line in lines:
                kind, values = parse_line(sink, line)
                row = tuple(values.get(c) for c in columns[table])
                if kind in ("+I", "+U"):
                    held[table][row] += 1
                elif held[table][row] > 0:
                    held[table][row] -= 1
                else:
                    unmatched.append(f"{run.phase.kind} {table}: {line} (as {row})")
    if unmatched:
        raise ChangelogError(f"{len(unmatched)} retractions of rows the sinks do not hold:\n" + "\n".join(unmatched))
    return {table: Table(columns[table], _sorted(held[table].elements())) for table in columns}


def compare(got: Mapping[str, Table], expected: Mapping[str, Table],
            ignore: Mapping[str, Collection[str]] | None = None) -> list[str]:
    """The differences of two materialized outputs, one line each (empty when equal), with the
    ``ignore``d columns (sink -> column names) left out of both."""
    ignore = ignore or {}
    out = []
    for table in sorted(set(got) | set(expected)):
        if table not in got or table not in expected:
            out.append(f"{table}: only in {'got' if table in got else 'expected'}")
            continue
        a, b = got[table].project(ignore.get(table, ())), expected[table].project(ignore.get(table, ()))
        if a.columns != b.columns:
            out.append(f"{table}: columns {a.columns} != expected {b.columns}")
            continue
        extra = collections.Counter(a.rows) - collections.Counter(b.rows)
        missing = collections.Counter(b.rows) - collections.Counter(a.rows)
        out += [f"{table}: unexpected {row}" for row in _sorted(extra.elements())]
        out += [f"{table}: missing {row}" for row in _sorted(missing.elements())]
    return out

