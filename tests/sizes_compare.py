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
