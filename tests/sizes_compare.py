"""``fstate sizes``'s operator state against a Flink job's dump and Flink's own bytes.

Entries: the dump's list and union elements per subtask (what each subtask snapshotted), and its
broadcast entries on every subtask (each snapshots the whole broadcast state). Bytes, independently
of fstate's decoders: Flink writes a subtask's states one after the other, each list element at the
offset the handle records, so a state's elements take the bytes from its first offset to the next
state's (or the stream's end), and a broadcast state's entries those less its 4-byte entry count.
"""

from __future__ import annotations

from fstate.readers.sizes import state_sizes
from fstate.savepoint.loader import Savepoint


def expected_entries(dump: dict) -> dict[str, dict[str, list[int]]]:
    """{operator id (uid hash): {state: entries per subtask}} from a dump."""
    found: dict[str, dict[str, list[int]]] = {}
    for op in dump["operators"]:
        states: dict[str, list[int]] = {}
        for entry in op["list_state"]:
            states.setdefault(entry["state"], [0] * op["parallelism"])[entry["subtask"]] += len(entry["values"])
        for entry in op["broadcast_state"]:
            states[entry["state"]] = [len(entry["entries"])] * op["parallelism"]
        if states:
            found[op["operator_id"]] = states
    return found


def flink_bytes(savepoint: Savepoint, uid_hash: str) -> dict[str, list[int]]:
    """{state: bytes of its elements / entries per subtask}, from the handles' offsets (uncompressed
    streams)."""
    view = savepoint.operator(uid_hash)
    meta = view.operator_meta
    assert meta is not None and not meta.compressed
    kinds = {state.name: state.kind for state in meta.states}
    found = {name: [0] * view.parallelism for name in kinds}
    for subtask, handle in view.operator_handles():
        if handle.delegate is None:
            continue
        length = len(savepoint.read_stream(handle.delegate))
        starts = sorted({offset for entry in handle.states.values() for offset in entry.offsets})
        for name, entry in handle.states.items():
            for offset in entry.offsets:
                following = [start for start in starts if start > offset]
                end = following[0] if following else length
                found[name][subtask] += end - offset - (4 if kinds[name] == "BROADCAST" else 0)
    return found


def check_operator_state_sizes(snapshot_dir, dump: dict, **options) -> int:
    """``state_sizes`` (``options``: its engine) equals the dump's entries and Flink's bytes for every
    operator holding operator state; the number of states checked."""
    savepoint = Savepoint.open(str(snapshot_dir))
    report = state_sizes(savepoint, at=0, **options)
    checked = 0
    for uid_hash, states in expected_entries(dump).items():
        measured = report.operator(uid_hash)
        found = {state.name: state for state in measured.operator_states}
        assert set(found) == set(states), uid_hash
        flink = flink_bytes(savepoint, uid_hash)
        for name, entries in states.items():
            assert found[name].subtask_entries == entries, (uid_hash, name)
            assert found[name].subtask_bytes == flink[name], (uid_hash, name)
            checked += 1
        assert measured.operator_state_bytes == sum(sum(flink[name]) for name in states)
    return checked


# growth by key (`fstate sizes OLD NEW`): what it must list, from every key's sizes in each snapshot

#: a change of samples/keyed-hashmap-savepoint's "events" state (fstate modify --transform): k-1's two
#: events become eight (a small key grows to a medium one), k-2's events go
GROW = ("SELECT key, CASE WHEN key = 'k-1' THEN concat(events, events, events, events) "
        "WHEN key = 'k-2' THEN NULL ELSE events END AS events FROM state")

#: a key's sizes: {"key": text, "key_group": int, "bytes": int, "entries": int, "elements": int}
KeySizes = dict


def expected_key_growth(old: dict[str, dict[str, KeySizes]], new: dict[str, dict[str, KeySizes]],
                        top: int) -> dict[str, dict]:
    """{state: {"grown", "by_elements", "shrunk": rows, "counts": {...}}} from each snapshot's
    {state: {key text: KeySizes}}: every key compared, the ``top`` of each list (ties: key text)."""
    found = {}
    for state in sorted(old.keys() | new.keys()):
        before, after = old.get(state, {}), new.get(state, {})
        rows, counts = [], {"new_keys": 0, "gone_keys": 0, "grown_keys": 0, "shrunk_keys": 0, "same_keys": 0}
        for key in before.keys() | after.keys():
            a, b = before.get(key), after.get(key)
            row = {"key": key, "key_group": (b or a)["key_group"],
                   "old_bytes": a["bytes"] if a else 0, "new_bytes": b["bytes"] if b else 0,
                   "old_entries": a["entries"] if a else 0, "new_entries": b["entries"] if b else 0,
                   "old_elements": a["elements"] if a else 0, "new_elements": b["elements"] if b else 0}
            row["growth"] = row["new_bytes"] - row["old_bytes"]
            row["element_growth"] = row["new_elements"] - row["old_elements"]
            rows.append(row)
            kind = ("new_keys" if a is None else "gone_keys" if b is None else "grown_keys" if row["growth"] > 0
                    else "shrunk_keys" if row["growth"] < 0 else "same_keys")
            counts[kind] += 1
        found[state] = {
            "grown": sorted((r for r in rows if r["growth"] > 0), key=lambda r: (-r["growth"], r["key"]))[:top],
            "by_elements": sorted((r for r in rows if r["element_growth"] > 0),
                                  key=lambda r: (-r["element_growth"], r["key"]))[:top],
            "shrunk": sorted((r for r in rows if r["growth"] < 0), key=lambda r: (r["growth"], r["key"]))[:top],
            "counts": counts}
    return found


def reported_key_growth(report: dict, operator: str) -> dict[str, dict]:
    """What a growth report (``GrowthReport.to_dict()``) says of one operator's keys, as
    :func:`expected_key_growth` shapes it."""
    (join,) = [j for j in report["key_joins"] if j["operator"] == operator]
    found = {}
    for state in join["states"]:
        name = state["name"]

        def rows(listed: str) -> list[dict]:
            return [{k: v for k, v in row.items() if k not in ("operator", "state")} for row in report[listed]
                    if row["operator"] == operator and row["state"] == name]

        found[name] = {"grown": rows("keys"), "by_elements": rows("keys_by_elements"), "shrunk": rows("shrunk_keys"),
                       "counts": {k: v for k, v in state.items() if k != "name"}}
    return found


def measured_keys(path, operator: str) -> dict[str, dict[str, KeySizes]]:
    """Every key's sizes in a snapshot as ``fstate sizes`` measures them (its top lists long enough
    to hold every key): {state: {key text: KeySizes}}."""
    savepoint = Savepoint.open(str(path))
    if operator not in {op.uid for op in savepoint.operators}:
        return {}
    op = state_sizes(savepoint, top=10 ** 9, operators=[operator]).operator(operator)
    return {state.name: {item.to_dict()["key"]: item.to_dict() for item in state.top_by_bytes} for state in op.states}
