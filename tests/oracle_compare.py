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

from fstate.readers import tables
from fstate.savepoint.loader import Savepoint
from fstate.savepoint.types import (EitherType, GenericArrayType, ListType, MapType, NullableType, PojoType,
                                    RowType, Scalar, TtlType, TupleType, TypeInfo)

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


_PLAIN = (str, int, bool, type(None))  # already in the normal form (the bulk of a dump's leaves)


def norm(v: Any) -> Any:
    if type(v) in _PLAIN:
        return v
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, dict):  # a JSON object of a dump (POJO, Either): field → value
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, (dt.date, dt.time, dt.datetime)):
        return v.isoformat()
    if isinstance(v, float) and v == int(v) and abs(v) < 2 ** 53:
        return float(v)
    return v


def _nano_of_day(t: dt.time) -> int:
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000_000 + t.microsecond * 1000


def _epoch_millis(v: dt.datetime) -> int:
    d = v - _EPOCH_UTC
    return (d.days * 86400 + d.seconds) * 1000 + d.microseconds // 1000


def norm_typed(v: Any, t: TypeInfo) -> Any:
    """A decoded value in the dump's conventions, driven by its TypeInfo (see tests/flink jobs)."""
    if v is None:
        return None
    if isinstance(t, (NullableType,)):
        return norm_typed(v, t.inner)
    if isinstance(t, TtlType):
        return norm_typed(v, t.value)
    if isinstance(t, Scalar):
        k = t.kind
        if k == "BigDecimal":
            return format(v, "f")
        if k == "BigInteger":
            return str(v)
        if k == "LocalDate":
            return (v - _EPOCH_DATE).days
        if k == "LocalTime":
            return _nano_of_day(v)
        if k == "LocalDateTime":
            return [(v.date() - _EPOCH_DATE).days, _nano_of_day(v.time())]
        if k == "Instant":
            d = v - _EPOCH_UTC
            return [d.days * 86400 + d.seconds, d.microseconds * 1000]
        if k == "SqlDate":
            return (v - _EPOCH_DATE).days * 86400000
        if k == "SqlTime":
            return _nano_of_day(v) // 1_000_000
        if k in ("SqlTimestamp", "Date"):
            return [_epoch_millis(v), v.microsecond * 1000] if k == "SqlTimestamp" else _epoch_millis(v)
        return norm(v)
    if isinstance(t, PojoType):
        if not t.decodable:
            return norm(v)
        return {n: norm_typed(x, ft) for (n, _, ft), x in zip(t.fields, v)}
    if isinstance(t, EitherType):
        left, right = v
        return {"right": norm_typed(right, t.children[1])} if left is None else {"left": norm_typed(left, t.children[0])}
    if isinstance(t, (TupleType, RowType)):
        return [norm_typed(x, c) for x, c in zip(v, t.children)]
    if isinstance(t, MapType):
        items = v.items() if isinstance(v, dict) else v
        return sorted(([norm_typed(k, t.key), norm_typed(x, t.value)] for k, x in items), key=_sort_key)
    if isinstance(t, (ListType, GenericArrayType)):
        return [norm_typed(x, t.children[0]) for x in v]
    if not t.decodable:
        return None  # opaque (Kryo, ...): the dump cannot say what the bytes are
    return norm(v)


_SORT_KEY = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode  # one encoder, not one a call


def _sort_key(x: Any) -> str:
    return _SORT_KEY(x)


def _sorted_entries(entries: list[list]) -> list[list]:
    """A keyed state's [key, value] entries in one order: by key alone when the keys are distinct (one
    entry per key and window: no value needs encoding), else by the whole entry."""
    by_key = sorted(entries, key=lambda entry: _sort_key(entry[0]))
    if any(a[0] == b[0] for a, b in zip(by_key, by_key[1:])):
        return sorted(entries, key=_sort_key)
    return by_key


def norm_dump_map(pairs: list) -> list:
    return sorted(([norm(k), norm(v)] for k, v in pairs), key=_sort_key)


def actual_state(sp: Savepoint, expected_op: dict) -> dict:
    """fstate's reading of the states the dump lists for one operator, in the dump's shape."""
    op = sp.operator(expected_op["uid"] or expected_op["operator_id"])  # SQL jobs without uids: the hash
    result: dict[str, Any] = {"parallelism": op.parallelism, "max_parallelism": op.max_parallelism}
    lists = {}
    for entry in expected_op.get("list_state", []):
        name = entry["state"]
        if name not in lists:
            by_subtask: dict[int, list] = {}
            table = tables.list_state_table(op, name)
            for subtask, _, v in table.rows():
                by_subtask.setdefault(subtask, []).append(norm_typed(v, table.columns[-1][1]))
            lists[name] = by_subtask
    result["list_state"] = lists
    result["broadcast_state"] = {}
    for e in expected_op.get("broadcast_state", []):
        table = tables.broadcast_state_table(op, e["state"])
        kt, vt = table.columns[0][1], table.columns[1][1]
        result["broadcast_state"][e["state"]] = sorted(
            ([norm_typed(k, kt), norm_typed(v, vt)] for k, v in table.rows()), key=_sort_key)
    result["keyed_state"] = _keyed_states(op, expected_op.get("keyed_state", []))
    if "timers" in expected_op and (expected_op["timers"] or expected_op.get("keyed_state")):
        t = tables.timers_table(op)
        cols = t.column_names
        timers = []
        for row in t.rows():
            r = dict(zip(cols, row))
            ns = [r["window_start"], r["window_end"]] if "window_start" in r else r.get("namespace")
            timers.append({"kind": r["kind"], "key": norm_typed(r["key"], t.columns[0][1]),
                           "timestamp": r["timestamp"], "namespace": ns})
        result["timers"] = sorted(timers, key=_sort_key)
    return result


def _keyed_states(op, dumped: list[dict]) -> dict[str, list]:
    """fstate's entries of the dumped keyed states, [key, value] sorted, each state's by name. The
    states of one namespace type are read as one table (a column each): a heap checkpoint's entries
    have no framing, so reading one of its states decodes every state of the stream."""
    opaque = {e["state"] for e in dumped if e.get("opaque")}
    metas = {s.name: s for _, s in op.keyed_meta.value_states} if op.keyed_meta is not None else {}
    groups: dict = {}
    for name in dict.fromkeys(e["state"] for e in dumped):
        meta = metas.get(name)  # (an unknown name: keyed_table's own error)
        groups.setdefault(meta.namespace_type if meta is not None else name, []).append(name)
    keyed: dict[str, list] = {}
    for names in groups.values():
        table = tables.keyed_table(op, names)
        windowed = "window_start" in table.column_names
        key_t = table.columns[0][1]
        value_ts = [column[1] for column in table.columns[-len(names):]]
        entries: list[list] = [[] for _ in names]
        undecodable = [not value_t.fully_decodable and name not in opaque for name, value_t in zip(names, value_ts)]
        for row in table.rows():
            key = None
            for index, (name, value_t) in enumerate(zip(names, value_ts)):
                stored = row[len(row) - len(names) + index]
                if stored is None:
                    continue
                if undecodable[index]:
                    raise AssertionError(f"state {name}: fstate cannot decode {value_t.name}")
                if key is None:
                    key = norm_typed(row[0], key_t)
                    if windowed:
                        key = [key, row[1], row[2]]
                entries[index].append([key, norm_typed(stored, value_t)])
        for name, found in zip(names, entries):
            keyed[name] = _sorted_entries(found)
    return keyed


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
            entries.append([norm(key), None if e.get("opaque") else norm(value)])
        keyed[e["state"]] = _sorted_entries(entries)
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


#: expected_state of the operators compared last, by their dump's JSON text: the dumps of one job agree
#: across releases, backends and snapshot kinds (tests/flink/VERSIONS.md), so a process comparing
#: TypesJob's variants normalises each operator's 10 000 keys once (the text costs a sixth of that)
_EXPECTED: dict[str, dict] = {}
_EXPECTED_KEPT = 12


def _expected_of(op: dict) -> dict:
    text = json.dumps(op)
    found = _EXPECTED.pop(text, None)
    if found is None:
        found = expected_state(op)
    _EXPECTED[text] = found  # the newest last
    while len(_EXPECTED) > _EXPECTED_KEPT:
        del _EXPECTED[next(iter(_EXPECTED))]
    return found


def assert_matches_dump(snapshot_dir: str | Path, dump: dict) -> int:
    """Assert fstate reads exactly the dumped state; returns the number of compared operators."""
    sp = Savepoint.open(str(snapshot_dir))
    for op in dump["operators"]:
        actual = actual_state(sp, op)
        expected = _expected_of(op)
        if actual != expected:
            raise AssertionError(f"operator {op['uid']} of {snapshot_dir}: {_first_difference(actual, expected)}")
    return len(dump["operators"])


def load_dump(out_dir: str | Path) -> tuple[Path, dict]:
    out_dir = Path(out_dir)
    dump = json.loads((out_dir / "dump.json").read_text())
    return out_dir / dump["snapshot_path"], dump
