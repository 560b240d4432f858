"""``fstate sizes`` on the terminal: rich tables with inline bars (the table output's part for it)."""

from __future__ import annotations

from rich.text import Text

from .console import out
from .output import human_bytes

BAR_WIDTH = 24


def bar(value: float, largest: float, style: str = "blue") -> Text:
    """An inline bar ``value / largest`` of :data:`BAR_WIDTH` cells (eighths of a cell)."""
    if largest <= 0 or value <= 0:
        return Text("")
    eighths = max(1, round(BAR_WIDTH * 8 * value / largest))
    full, rest = divmod(eighths, 8)
    return Text("█" * full + (" ▏▎▍▌▋▊▉"[rest] if rest else ""), style=style)


def _bytes(n: float) -> str:
    return human_bytes(int(round(n)))


def show_sizes(output, data: dict) -> None:
    operators = data["operators"]
    out.print(f"[bold]{data['path']}[/]: {human_bytes(data['handle_bytes'])} of state in its handles, "
              f"{human_bytes(data['keyed_bytes'])} of keyed entries")
    largest = max((op["handle_bytes"] for op in operators), default=0)
    output.table(("operator", "sql", "par", "max par", "state (handles)", "", "keyed entries", "entries"),
                 [(op["uid"] or op["uid_hash"], (op.get("sql") or {}).get("kind") or "-", str(op["parallelism"]),
                   str(op["max_parallelism"]), human_bytes(op["handle_bytes"]), bar(op["handle_bytes"], largest),
                   human_bytes(op["keyed_bytes"]), f"{op['entries']:,}") for op in operators],
                 title="Operators")
    keyed = [op for op in operators if op["states"]]
    rows = []
    largest = max((s["bytes"] for op in keyed for s in op["states"]), default=0)
    for op in keyed:
        for s in op["states"]:
            ttl = s["ttl"]
            expired = (f"{ttl['expired_entries']:,} / {human_bytes(ttl['expired_bytes'])}"
                       if ttl and data["ttl_ms"] else ("TTL (--ttl to count expired)" if ttl else "-"))
            rows.append((op["uid"] or op["uid_hash"], s["name"], s["kind"], human_bytes(s["bytes"]),
                         bar(s["bytes"], largest), f"{s['entries']:,}", f"{s['keys']:,}", f"{s['elements']:,}",
                         expired))
    output.table(("operator", "state", "kind", "bytes", "", "entries", "keys", "elements", "expired"), rows,
                 title="Keyed states (bytes of their entries)")
    for op in keyed:
        name = op["uid"] or op["uid_hash"]
        skews = [("subtasks", op["subtask_skew"]), ("key groups", op["key_group_skew"])]
        output.table(("over", "max", "mean", "p99", "max / mean", "heaviest (index: bytes)"),
                     [(what, _bytes(k["max"]), _bytes(k["mean"]), _bytes(k["p99"]), f"{k['max_over_mean']:.2f}",
                       ", ".join(f"{h['index']}: {human_bytes(h['bytes'])}" for h in k["heaviest"][:5]))
                      for what, k in skews], title=f"{name}: skew")
        top = max((p["max"] for p in op["rescale"]), default=0)
        output.table(("parallelism", "max subtask", "", "mean", "max / mean", ""),
                     [(str(p["parallelism"]), _bytes(p["max"]), bar(p["max"], top), _bytes(p["mean"]),
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
                               f"{k['elements']:,}", bar(k[measure], most)) for k in items],
                             title=f"{name}/{s['name']}: largest keys by {measure}")


def show_growth(output, data: dict) -> None:
    out.print(f"[bold]{data['old']}[/] → [bold]{data['new']}[/]")
    for part, columns in (("operators", ("operator",)), ("states", ("operator", "state")),
                          ("keys", ("operator", "state", "key"))):
        rows = data[part]
        largest = max((abs(g["growth"]) for g in rows), default=0)
        output.table(columns + ("old", "new", "growth", "", "old entries", "new entries"),
                     [tuple(g[c] for c in columns) + (human_bytes(g["old_bytes"]), human_bytes(g["new_bytes"]),
                      ("+" if g["growth"] >= 0 else "-") + human_bytes(abs(g["growth"])),
                      bar(abs(g["growth"]), largest, "red" if g["growth"] > 0 else "green"),
                      f"{g['old_entries']:,}", f"{g['new_entries']:,}") for g in rows],
                     title=f"{part} by growth")
