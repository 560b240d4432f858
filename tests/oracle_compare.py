"""Compare what fstate reads from a savepoint with the JSON dump the real-Flink job wrote.

Both sides are brought to one normal form: tuples/structs → lists, bytes → base64, maps → sorted
[key, value] pairs, entries sorted. A mismatch reports the first differing entries.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from fstate.readers import tables as TB
from fstate.savepoint.loader import Savepoint


def norm(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return sorted(([norm(k), norm(x)] for k, x in v.items()), key=_sort_key)
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, (dt.date, dt.time, dt.datetime)):
        return v.isoformat()
    if isinstance(v, float) and v == int(v) and abs(v) < 2 ** 53:
        return float(v)
    return v


def _sort_key(x: Any) -> str:
    return json.dumps(x, sort_keys=True, ensure_ascii=False)


def norm_dump_map(pairs: list) -> list:
    return sorted(([norm(k), norm(v)] for k, v in pairs), key=_sort_key)


def actual_state(sp: Savepoint, expected_op: dict) -> dict:
    """fstate's reading of the states the dump lists for one operator, in the dump's shape."""
    op = sp.operator(expected_op["uid"])
    result: dict[str, Any] = {"parallelism": op.parallelism, "max_parallelism": op.max_parallelism}
    lists = {}
    for entry in expected_op.get("list_state", []):
        name = entry["state"]
        if name not in lists:
            by_subtask: dict[int, list] = {}
            for subtask, _, v in TB.list_state_table(op, name).rows():
                by_subtask.setdefault(subtask, []).append(norm(v))
            lists[name] = by_subtask
    result["list_state"] = lists
    result["broadcast_state"] = {
        e["state"]: norm_dump_map(list(TB.broadcast_state_table(op, e["state"]).rows()))
        for e in expected_op.get("broadcast_state", [])}
    keyed = {}
    for e in expected_op.get("keyed_state", []):
        table = TB.keyed_table(op, [e["state"]])
        windowed = "window_start" in table.column_names
        entries = []
        for row in table.rows():
            if windowed:
                key, value = [row[0], row[1], row[2]], row[3]
            else:
                key, value = row[0], row[1]
            if value is None:
                continue
            if e["kind"] == "MAP":
                value = norm(value)
            entries.append([norm(key), norm(value)])
        keyed[e["state"]] = sorted(entries, key=_sort_key)
    result["keyed_state"] = keyed
    if "timers" in expected_op and (expected_op["timers"] or expected_op.get("keyed_state")):
        t = TB.timers_table(op)
        cols = t.column_names
        timers = []
        for row in t.rows():
            r = dict(zip(cols, row))
            ns = [r["window_start"], r["window_end"]] if "window_start" in r else r.get("namespace")
            timers.append({"kind": r["kind"], "key": norm(r["key"]), "timestamp": r["timestamp"], "namespace": ns})
        result["timers"] = sorted(timers, key=_sort_key)
    return result


def expected_state(expected_op: dict) -> dict:
    lists: dict[str, dict[int, list]] = {}
    for e in expected_op.get("list_state", []):
        lists.setdefault(e["state"], {})
        if e["values"]:
            lists[e["state"]][e["subtask"]] = [norm(v) for v in e["values"]]
    keyed = {}
    for e in expected_op.get("keyed_state", []):
        entries = []
        for key, value in e["entries"]:
            if e["kind"] == "MAP":
                value = norm_dump_map(value)
            entries.append([norm(key), norm(value)])
        keyed[e["state"]] = sorted(entries, key=_sort_key)
    out = {"parallelism": expected_op["parallelism"], "max_parallelism": expected_op["max_parallelism"],
           "list_state": lists,
           "broadcast_state": {e["state"]: norm_dump_map(e["entries"]) for e in expected_op.get("broadcast_state", [])},
           "keyed_state": keyed}
    if "timers" in expected_op and (expected_op["timers"] or expected_op.get("keyed_state")):
        out["timers"] = sorted(({"kind": t["kind"], "key": norm(t["key"]), "timestamp": t["timestamp"],
                                 "namespace": t["namespace"]} for t in expected_op["timers"]), key=_sort_key)
    return out


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                return f"{path}/{k}: missing in fstate's reading"
            if k not in b:
                return f"{path}/{k}: not in Flink's dump"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            extra = [x for x in a if x not in b][:3]
            missing = [x for x in b if x not in a][:3]
            return f"{path}: fstate has {len(a)} entries, Flink {len(b)}; only fstate: {extra}; only Flink: {missing}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: fstate {a!r} != Flink {b!r}"


def assert_matches_dump(snapshot_dir: str | Path, dump: dict) -> int:
    """Assert fstate reads exactly the dumped state; returns the number of compared operators."""
    sp = Savepoint.open(str(snapshot_dir))
    for op in dump["operators"]:
        actual = actual_state(sp, op)
        expected = expected_state(op)
        if actual != expected:
            raise AssertionError(f"operator {op['uid']} of {snapshot_dir}: {_first_difference(actual, expected)}")
    return len(dump["operators"])


def load_dump(out_dir: str | Path) -> tuple[Path, dict]:
    out_dir = Path(out_dir)
    dump = json.loads((out_dir / "dump.json").read_text())
    return out_dir / dump["snapshot_path"], dump
