"""How results are shown: one ``Output`` per invocation, chosen by ``--output`` (``--json`` for short).

Every command hands its results to the Output's method for that kind of result; no command formats
tables or JSON itself. ``TableOutput`` draws rich tables for people, ``JsonOutput`` prints JSON for
programs. Status lines ("wrote savepoint ...") and warnings go to stderr in every format, so stdout holds
only the result.

Adding a format: subclass ``Output`` (every abstract method; a missing one fails when the class is
instantiated) and add it to ``OUTPUTS``, which is what ``--output`` accepts.
"""

from __future__ import annotations

import base64
import datetime
import json
from abc import ABC, abstractmethod
from decimal import Decimal
from typing import Any, Iterable, Sequence

from rich.table import Table
from rich.text import Text

from .console import err, out


def to_jsonable(value: Any) -> Any:
    """Python/Spark values → JSON-friendly values (bytes as base64, dates ISO, structs as dicts)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if hasattr(value, "asDict"):
        return {k: to_jsonable(x) for k, x in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        if all(k is None or isinstance(k, (bool, int, float, str, Decimal)) for k in value):
            return {k if isinstance(k, str) else str(to_jsonable(k)): to_jsonable(x) for k, x in value.items()}
        # keys that are structs, lists, bytes or dates (e.g. the rows an SQL join keeps) stay values
        return [{"key": to_jsonable(k), "value": to_jsonable(x)} for k, x in value.items()]
    if isinstance(value, (list, tuple)):
        return [to_jsonable(x) for x in value]
    return str(value)


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Output(ABC):
    """One method per kind of result the commands produce."""

    @abstractmethod
    def summary(self, data: dict) -> None:
        """`fstate info`: the dict of ``savepoint.summary.summarize``."""

    @abstractmethod
    def views(self, path: str, views: list[dict]) -> None:
        """`fstate views`: dicts with view, table, operator, uid_hash, state."""

    @abstractmethod
    def dependencies(self, path: str, dependencies: dict[str, int]) -> None:
        """`fstate deps`: directory outside ``path`` → number of file handles pointing into it."""

    @abstractmethod
    def verify_report(self, report) -> None:
        """`fstate verify`: a ``savepoint.verify.VerifyReport``."""

    @abstractmethod
    def upgrade_report(self, report) -> None:
        """What ``fstate upgrade`` does with each operator's state (a writers.upgrade.UpgradeReport)."""

    @abstractmethod
    def diff(self, old: str, new: str, result: list[dict]) -> None:
        """`fstate diff`: one dict per state (``readers.views.diff``)."""

    @abstractmethod
    def rows(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
             limit: int | None = None) -> None:
        """Rows of a state table or query (`fstate read`, `fstate sql`); ``limit`` is how many were asked
        for, so that a format may say when there may be more."""

    @abstractmethod
    def registered_views(self, registered: dict[str, str]) -> None:
        """`fstate sql --views`: view name → what it holds (shown before the query's rows)."""

    @abstractmethod
    def sizes(self, data: dict) -> None:
        """`fstate sizes PATH`: ``readers.sizes.SizesReport.to_dict()``."""

    @abstractmethod
    def sizes_growth(self, data: dict) -> None:
        """`fstate sizes OLD NEW`: ``readers.sizes_growth.GrowthReport.to_dict()``."""

    def message(self, text: str) -> None:
        """A status line (rich markup allowed), on stderr."""
        err.print(text)

    def warning(self, text: str) -> None:
        err.print(f"[yellow]warning:[/] {text}")


def _cell(value: Any) -> Text:
    if isinstance(value, Text):
        return value
    if value is None:
        return Text("null", style="dim")
    if isinstance(value, (bytes, bytearray)):
        shown = bytes(value[:32]).hex()
        return Text("0x" + shown + ("…" if len(value) > 32 else ""))
    if isinstance(value, (str, int, float, bool)):
        return Text(str(value))
    return Text(json.dumps(to_jsonable(value), ensure_ascii=False))


_DECISION_STYLES = {"carried": "green", "migrated": "cyan", "new": "yellow", "dropped": "yellow",
                    "incompatible": "bold red"}


class TableOutput(Output):
    """Rich tables and coloured marks on the terminal."""

    @staticmethod
    def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> int:
        table = Table(title=title, show_lines=False, header_style="bold")
        for column in columns:
            table.add_column(column, overflow="fold")
        count = 0
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
            count += 1
        out.print(table)
        return count

    def summary(self, data: dict) -> None:
        kind = data["kind"] + (f" ({data['format'].lower()})" if data["format"] else "")
        out.print(f"[bold]{data['path']}[/]")
        out.print(f"  {kind}, checkpoint id {data['checkpoint_id']}, metadata version {data['metadata_version']} "
                  f"(Flink {data['flink_versions']}), {len(data['operators'])} operators, "
                  f"{human_bytes(data['total_state_bytes'])} of state")
        in_flight = sum(operator.get("channel_state_bytes", 0) for operator in data["operators"])
        if in_flight:
            out.print(f"  of which {human_bytes(in_flight)} in-flight data (channel state of an unaligned checkpoint)")
        operators = []
        for operator in data["operators"]:
            storage = ", ".join(f"{v} {k}" for k, v in operator["storage"].items() if v) or "-"
            keyed = "-"
            if operator["keyed_state_bytes"]:
                layout = operator["keyed_layout"]
                keyed = human_bytes(operator["keyed_state_bytes"]) + (f" ({layout})" if layout else "")
            operator_bytes = operator["operator_state_bytes"]
            operators.append((operator["uid"] or "-", operator["name"] or "-", operator["uid_hash"],
                              str(operator["parallelism"]), str(operator["max_parallelism"]), keyed,
                              human_bytes(operator_bytes) if operator_bytes else "-", storage))
        columns = ("uid", "name", "uid hash", "par", "max par", "keyed state", "operator state", "storage")
        sql = [operator.get("sql") for operator in data["operators"]]
        if any(sql):  # an SQL job: the kind of each operator of the table runtime after its name
            columns = columns[:2] + ("sql kind",) + columns[2:]
            operators = [row[:2] + ((entry or {}).get("kind") or "-",) + row[2:] for row, entry in zip(operators, sql)]
        self.table(columns, operators, title="Operators")
        planned = [entry for entry in sql if entry and "description" in entry]
        if planned:
            self.table(("node", "kind", "key", "description"),
                       [(str(entry["node_id"]), entry["kind"], ", ".join(entry["key"]) or "-", entry["description"])
                        for entry in sorted(planned, key=lambda entry: entry["node_id"])], title="SQL plan")
        self.table(("operator", "state", "backend", "kind", "type", "key type", "namespace"),
                   [(operator["uid"] or operator["uid_hash"], s["name"], s["backend"], s["kind"], s["type"],
                     s["key_type"] or "-", s["namespace"] or "-")
                    for operator in data["operators"] for s in operator["states"]], title="States")
        for warning in data["warnings"]:
            self.warning(warning)
        for directory, count in sorted(data.get("dependencies", {}).items()):
            self.message(f"[yellow]depends on[/] {directory} ({count} file handles): deleting it breaks this savepoint")

    def views(self, path: str, views: list[dict]) -> None:
        self.table(("view", "table", "operator", "state"),
                   [(v["view"], v["table"], v["operator"] or "-", v["state"] or "-") for v in views])

    def dependencies(self, path: str, dependencies: dict[str, int]) -> None:
        if not dependencies:
            out.print("self-contained: no files outside the savepoint directory")
        else:
            self.table(("directory", "handles"), sorted(dependencies.items()), title="depends on")

    def verify_report(self, report) -> None:
        for problem in report.problems:
            out.print(f"[red]✗[/] {problem}")
        for operator in report.operators:
            mark = "[green]✓[/]" if operator.ok else "[red]✗[/]"
            out.print(f"{mark} {operator.operator} ({len(operator.checked)} checks)")
            for problem in operator.problems:
                out.print(f"    [red]•[/] {problem}")
            for warning in getattr(operator, "warnings", ()):
                out.print(f"    [yellow]•[/] {warning}")
        external = sorted(set(report.external))
        if external:
            out.print(f"[yellow]handles outside the savepoint directory:[/] {len(external)} file(s), "
                      f"e.g. {external[0]}")
        out.print("[green]OK[/]" if report.ok else "[red]PROBLEMS FOUND[/]")

    def upgrade_report(self, report) -> None:
        rows = []
        for step in report.steps:
            data = step.to_dict()
            decision = data["decision"]
            node = data["new_node"] or data["old_node"]
            what = f"{node['kind']} ({', '.join(node['key']) or '-'})" if node else "-"
            details = [data["reason"]]
            rows.append((Text(decision, style=_DECISION_STYLES.get(decision, "")), data["old"] or "-",
                         data["new"] or "-", what, "; ".join(details)))
        self.table(("state", "old operator", "new operator", "SQL operator (key)", "why"), rows,
                   title=f"upgrade: metadata V{report.source_version} → V{report.target_version}")
        verdict = {0: "[green]everything carries[/]",
                   1: "[yellow]some state starts empty or is dropped[/] (writing it needs --allow-empty / --allow-drop)",
                   2: "[red]refused: some state cannot be carried[/]"}[report.exit_code]
        out.print(verdict)

    def diff(self, old: str, new: str, result: list[dict]) -> None:
        self.table(("operator", "state", "table", "added", "removed", "changed", "examples"),
                   [(r["operator"], r["state"], r["table"], r["added"], r["removed"], r["changed"],
                     r["note"] or json.dumps(r["examples"][:2], ensure_ascii=False, default=str))
                    for r in result], title=f"{old} → {new}")

    def rows(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
             limit: int | None = None) -> None:
        shown = self.table(columns, rows, title=title)
        if limit is not None and shown == limit:
            err.print(f"(first {limit} rows; --limit to see more, --out to write all)")

    def registered_views(self, registered: dict[str, str]) -> None:
        self.table(("view", "holds"), sorted(registered.items()), title="views")

    def sizes(self, data: dict) -> None:
        _show_sizes(self, data)

    def sizes_growth(self, data: dict) -> None:
        _show_growth(self, data)


# `fstate sizes` on the terminal: tables with inline bars

BAR_WIDTH = 24


def _bar(value: float, largest: float, style: str = "blue") -> Text:
    """An inline bar ``value / largest`` of :data:`BAR_WIDTH` cells (eighths of a cell)."""
    if largest <= 0 or value <= 0:
        return Text("")
    eighths = max(1, round(BAR_WIDTH * 8 * value / largest))
    full, rest = divmod(eighths, 8)
    return Text("█" * full + (" ▏▎▍▌▋▊▉"[rest] if rest else ""), style=style)


def _bytes(n: float) -> str:
    return human_bytes(int(round(n)))


def _sql_name(sql: dict | None) -> str:
    """An SQL operator as ``kind`` (``kind #node`` when its node id is known)."""
    if not sql:
        return "-"
    return sql["kind"] + (f" #{sql['node_id']}" if sql.get("node_id") is not None else "")


def _show_sizes(output: "TableOutput", data: dict) -> None:
    operators = data["operators"]
    out.print(f"[bold]{data['path']}[/]: {human_bytes(data['handle_bytes'])} of state in its handles, "
              f"{human_bytes(data['keyed_bytes'])} of keyed entries, "
              f"{human_bytes(data['operator_state_bytes'])} of operator state elements and entries")
    holding = [op for op in operators if op["handle_bytes"] or op["states"]]
    largest = max((op["handle_bytes"] for op in holding), default=0)
    output.table(("operator", "sql", "par", "max par", "state (handles)", "", "keyed entries", "entries"),
                 [(op["uid"] or op["uid_hash"], _sql_name(op.get("sql")), str(op["parallelism"]),
                   str(op["max_parallelism"]), human_bytes(op["handle_bytes"]), _bar(op["handle_bytes"], largest),
                   human_bytes(op["keyed_bytes"]), f"{op['entries']:,}") for op in holding],
                 title="Operators holding state" + (f" ({len(operators) - len(holding)} more hold none)"
                                                    if len(holding) < len(operators) else ""))
    keyed = [op for op in operators if op["states"]]
    rows = []
    largest = max((s["bytes"] for op in keyed for s in op["states"]), default=0)
    for op in keyed:
        for s in op["states"]:
            ttl = s["ttl"]
            expired = (f"{ttl['expired_entries']:,} / {human_bytes(ttl['expired_bytes'])}"
                       if ttl and op["ttl_ms"] else ("TTL (--ttl to count expired)" if ttl else "-"))
            rows.append((op["uid"] or op["uid_hash"], s["name"], s["kind"], human_bytes(s["bytes"]),
                         _bar(s["bytes"], largest), f"{s['entries']:,}", f"{s['keys']:,}", f"{s['elements']:,}",
                         expired))
    listed = [(op["uid"] or op["uid_hash"], s) for op in operators for s in op["operator_states"]]
    if rows or not listed:
        output.table(("operator", "state", "kind", "bytes", "", "entries", "keys", "elements", "expired"), rows,
                     title="Keyed states (bytes of their entries)")
    if listed:
        largest = max(s["bytes"] for _, s in listed)
        output.table(("operator", "state", "kind", "bytes", "", "entries", "per subtask"),
                     [(name, s["name"], s["kind"], human_bytes(s["bytes"]), _bar(s["bytes"], largest),
                       f"{s['entries']:,}", _per_subtask(s["subtask_bytes"])) for name, s in listed],
                     title="Operator states (bytes of their list elements and broadcast entries)")
    _show_job(output, data["job"])
    for op in keyed:
        name = op["uid"] or op["uid_hash"]
        skews = [("subtasks", op["subtask_skew"]), ("key groups", op["key_group_skew"])]
        output.table(("over", "max", "mean", "p99", "max / mean", "heaviest (index: bytes)"),
                     [(what, _bytes(k["max"]), _bytes(k["mean"]), _bytes(k["p99"]), f"{k['max_over_mean']:.2f}",
                       ", ".join(f"{h['index']}: {human_bytes(h['bytes'])}" for h in k["heaviest"][:5]))
                      for what, k in skews], title=f"{name}: skew")
        top = max((p["max"] for p in op["rescale"]), default=0)
        output.table(("parallelism", "max subtask", "", "mean", "max / mean", ""),
                     [(str(p["parallelism"]), _bytes(p["max"]), _bar(p["max"], top), _bytes(p["mean"]),
                       f"{p['max_over_mean']:.2f}",
                       "best" if p["parallelism"] == op["best_parallelism"] else
                       ("now" if p["parallelism"] == op["parallelism"] else "")) for p in op["rescale"]],
                     title=f"{name}: rescale preview (state per subtask)")
        for s in op["states"]:
            for top_list, measure in (("top_by_bytes", "bytes"), ("top_by_elements", "elements")):
                items = s[top_list]
                if not items:
                    continue
                most = items[0][measure]
                output.table(("key", "key group", "bytes", "entries", "elements", ""),
                             [(k["key"], str(k["key_group"]), human_bytes(k["bytes"]), f"{k['entries']:,}",
                               f"{k['elements']:,}", _bar(k[measure], most)) for k in items],
                             title=f"{name}/{s['name']}: largest keys by {measure}")


def _show_job(output: "TableOutput", job: dict) -> None:
    """The job-level rescale preview: keyed state per slot (slot sharing) at each parallelism."""
    if not job["rescale"] or not job["following"] + job["fixed"]:
        return
    top = max(p["max"] for p in job["rescale"])
    output.table(("parallelism", "fullest slot", "", "mean", "max / mean", "", "per slot"),
                 [(str(p["parallelism"]), _bytes(p["max"]), _bar(p["max"], top), _bytes(p["mean"]),
                   f"{p['max_over_mean']:.2f}",
                   "best" if p["parallelism"] == job["best_parallelism"] else
                   ("now" if p["parallelism"] == job["parallelism"] else ""), _per_subtask(p["slot_bytes"], 6))
                  for p in job["rescale"]],
                 title=f"job: keyed state per slot (slot sharing; the job's parallelism {job['parallelism']})")
    for fixed in job["fixed"]:
        out.print(f"[dim]{fixed['operator']} keeps its own parallelism {fixed['parallelism']} (its subtask i in "
                  "slot i)[/]")
    for skipped in job["skipped"]:
        out.print(f"[dim]parallelism {skipped['parallelism']}: not possible, {skipped['reason']}[/]")


def _per_subtask(values: list[int], shown: int = 8) -> str:
    """The first ``shown`` subtasks' bytes (and how many more there are)."""
    text = ", ".join(human_bytes(value) for value in values[:shown])
    return text + (f", … ({len(values) - shown} more)" if len(values) > shown else "")


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + human_bytes(abs(n))


def _show_growth(output: "TableOutput", data: dict) -> None:
    out.print(f"[bold]{data['old']}[/] → [bold]{data['new']}[/]")
    for part, columns in (("operators", ("operator",)), ("states", ("operator", "state"))):
        rows = data[part]
        largest = max((abs(g["growth"]) for g in rows), default=0)
        output.table(columns + ("old", "new", "growth", "", "old entries", "new entries"),
                     [tuple(g[c] for c in columns) + (human_bytes(g["old_bytes"]), human_bytes(g["new_bytes"]),
                      _signed(g["growth"]), _bar(abs(g["growth"]), largest, "red" if g["growth"] > 0 else "green"),
                      f"{g['old_entries']:,}", f"{g['new_entries']:,}") for g in rows],
                     title=f"{part} by growth")
    for part, title, measure in (("keys", "keys that grew most (bytes)", "growth"),
                                 ("keys_by_elements", "keys that grew most (list / map elements)", "element_growth"),
                                 ("shrunk_keys", "keys that shrank most (gone: new 0 B)", "growth")):
        rows = data[part]
        if not rows:
            continue
        largest = max(abs(g[measure]) for g in rows)
        output.table(("operator", "state", "key", "key group", "old", "new", "growth", "", "elements"),
                     [(g["operator"], g["state"], g["key"], str(g["key_group"]), human_bytes(g["old_bytes"]),
                       human_bytes(g["new_bytes"]), _signed(g["growth"]),
                       _bar(abs(g[measure]), largest, "red" if g[measure] > 0 else "green"),
                       f"{g['old_elements']:,} → {g['new_elements']:,}") for g in rows], title=title)
    rows = [(join["operator"], state["name"], f"{state['new_keys']:,}", f"{state['gone_keys']:,}",
             f"{state['grown_keys']:,}", f"{state['shrunk_keys']:,}", f"{state['same_keys']:,}", join["join"])
            for join in data["key_joins"] for state in join["states"]]
    output.table(("operator", "state", "new", "gone", "grown", "shrunk", "same", "joined by"), rows,
                 title="keys, OLD against NEW")
    for join in data["key_joins"]:
        if join["note"]:
            out.print(f"[dim]{join['operator']}: {join['note']}[/]")


class JsonOutput(Output):
    """JSON on stdout: one document per command, or one object per line for rows (`read`, `sql`)."""

    @staticmethod
    def document(data: Any) -> None:
        out.print_json(json.dumps(to_jsonable(data), ensure_ascii=False))

    @staticmethod
    def line(data: Any) -> None:
        out.print(json.dumps(to_jsonable(data), ensure_ascii=False), soft_wrap=True, markup=False)

    def summary(self, data: dict) -> None:
        self.document(data)

    def views(self, path: str, views: list[dict]) -> None:
        self.document({"path": path, "views": views})

    def dependencies(self, path: str, dependencies: dict[str, int]) -> None:
        self.document({"path": path, "dependencies": dependencies})

    def verify_report(self, report) -> None:
        self.document(report.to_dict())

    def upgrade_report(self, report) -> None:
        self.document(report.to_dict())

    def diff(self, old: str, new: str, result: list[dict]) -> None:
        self.document(result)

    def rows(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
             limit: int | None = None) -> None:
        for row in rows:
            self.line(dict(zip(columns, row)))

    def registered_views(self, registered: dict[str, str]) -> None:
        # stdout carries only the query's rows (one JSON object each); the view list goes beside them
        err.print(json.dumps({"views": registered}, ensure_ascii=False), soft_wrap=True, markup=False)

    def sizes(self, data: dict) -> None:
        self.document(data)

    def sizes_growth(self, data: dict) -> None:
        self.document(data)


# What --output accepts. The first is the default.
OUTPUTS: dict[str, type[Output]] = {"table": TableOutput, "json": JsonOutput}
