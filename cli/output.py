"""Rendering results: rich tables for people, JSON (--json) for programs."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any, Iterable

from rich.table import Table
from rich.text import Text

from .console import out


def to_jsonable(v: Any) -> Any:
    """Python/Spark values → JSON-friendly values (bytes as base64, dates ISO, structs as dicts)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if hasattr(v, "asDict"):
        return {k: to_jsonable(x) for k, x in v.asDict(recursive=False).items()}
    if isinstance(v, dict):
        return {str(to_jsonable(k)) if not isinstance(k, str) else k: to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_jsonable(x) for x in v]
    return str(v)


def print_json(data: Any) -> None:
    out.print_json(json.dumps(to_jsonable(data), ensure_ascii=False))


def _cell(v: Any) -> Text:
    if v is None:
        return Text("null", style="dim")
    if isinstance(v, (bytes, bytearray)):
        return Text("0x" + bytes(v).hex() if len(v) <= 32 else "0x" + bytes(v[:32]).hex() + "…")
    if isinstance(v, (str, int, float, bool)):
        return Text(str(v))
    return Text(json.dumps(to_jsonable(v), ensure_ascii=False))


def print_rows(columns: list[str], rows: Iterable[Iterable[Any]], title: str | None = None) -> int:
    table = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        table.add_column(c, overflow="fold")
    n = 0
    for r in rows:
        table.add_row(*(_cell(v) for v in r))
        n += 1
    out.print(table)
    return n


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
