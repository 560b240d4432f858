"""Decode benchmark: columnar decoding (savepoint/_columnar.c) against the compiled row path
(savepoint/_speedups.c via decoders.CompiledRows) and a raw read of the same bytes, on one core.

    python bench/decode_columnar.py [--keys 2000000] [--repeat 3] [--cpu 0] [--cache DIR]

The stream is synthetic but in Flink's canonical savepoint layout (keyed.encode_canonical_stream):
N String keys ("key-<n>"), a ValueState<Long> and a ListState<String> of 3 elements per key, max
parallelism 128. An entry is one (key, state) value: 2 per key. The stream is cached in --cache
(built once; building it in Python takes a while). The same state in the heap backend's native
layout (a checkpoint's) is decoded too (columnar.native_batches). Prints the machine's load
(uptime) first.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fstate.savepoint import columnar, handles, keyed  # noqa: E402
from fstate.savepoint import _fastpath  # noqa: E402
from fstate.savepoint.keyed_codecs import state_codecs  # noqa: E402
from fstate.savepoint.decoders import CompiledRows, RowShape  # noqa: E402
from fstate.savepoint.keyed_state import CANONICAL, KeyedState  # noqa: E402
from fstate.savepoint.types import LONG, STRING  # noqa: E402

MAX_PARALLELISM = 128


def bench_meta() -> keyed.KeyedBackendMeta:
    states = [keyed.value_state_meta("count", "VALUE", LONG), keyed.value_state_meta("events", "LIST", STRING)]
    meta = keyed.KeyedBackendMeta(keyed.CURRENT_VERSION, False, STRING, states)
    meta.header_size = len(keyed.proxy_bytes(meta))
    return meta


def build_stream(meta, keys: int) -> tuple[bytes, tuple[int, ...]]:
    value, events = (keyed.PairEncoder(meta, sid, MAX_PARALLELISM) for sid in (0, 1))
    pairs: dict = {}
    for n in range(keys):
        kg = n % MAX_PARALLELISM  # the decoders do not recompute key groups from the keys
        key = f"key-{n}"
        by_state = pairs.setdefault(kg, {0: [], 1: []})
        by_state[0] += value.pairs(kg, key, n)
        by_state[1] += events.pairs(kg, key, [f"event-{n}-a", f"event-{n}-b", f"event-{n}-c"])
    return keyed.encode_canonical_stream(meta, 0, MAX_PARALLELISM - 1, pairs)


def build_native_stream(meta, keys: int) -> tuple[bytes, tuple[int, ...]]:
    """The same state in the heap-native layout: per key group and state a count and the entries
    (namespace, key, whole value)."""
    string = STRING.encoder()
    by_kg: dict = {}
    for n in range(keys):
        key = bytearray(b"\x00")  # the void namespace, then the key
        string(key, f"key-{n}")
        events = bytearray(struct.pack(">i", 3))
        for suffix in "abc":
            string(events, f"event-{n}-{suffix}")
        value, lists = by_kg.setdefault(n % MAX_PARALLELISM, ([], []))
        value.append(bytes(key) + struct.pack(">q", n))
        lists.append(bytes(key) + bytes(events))
    out = bytearray(keyed.proxy_bytes(meta))
    offsets = []
    for kg in range(MAX_PARALLELISM):
        offsets.append(len(out))
        out += struct.pack(">i", kg)
        for sid, entries in enumerate(by_kg.get(kg, ([], []))):
            out += struct.pack(">Hi", sid, len(entries)) + b"".join(entries)
    return bytes(out), tuple(offsets)


def load(cache: Path, keys: int, meta, layout: str = "canonical") -> tuple[bytes, tuple[int, ...]]:
    path = cache / f"{layout}-{keys}.bin"
    if not path.exists():
        t = time.perf_counter()
        buf, offsets = (build_stream if layout == "canonical" else build_native_stream)(meta, keys)
        cache.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buf)
        (cache / f"{layout}-{keys}.offsets").write_text(",".join(map(str, offsets)))
        print(f"built the {layout} stream in {time.perf_counter() - t:.1f} s: {path}")
    offsets = tuple(int(x) for x in (cache / f"{layout}-{keys}.offsets").read_text().split(","))
    return path.read_bytes(), offsets


def best(repeat: int, run) -> tuple[float, float]:
    """The best wall time and the best CPU time of this process (the machine may be shared)."""
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="the core to pin this process to")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "fstate-bench")
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    if not columnar.available() or not _fastpath.available():
        raise SystemExit("the compiled extensions are not built (pip install -e .)")
    meta = bench_meta()
    buf, offsets = load(a.cache, a.keys, meta)
    entries = 2 * a.keys
    print(f"stream: {len(buf) / 1e6:.1f} MB, {a.keys:,} keys, {entries:,} entries, one core (cpu {a.cpu})")
    handle = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, 0, offsets, None)
    codecs = state_codecs(meta, MAX_PARALLELISM)
    state = KeyedState.of_stream(buf, handle, meta, MAX_PARALLELISM, codecs=codecs)
    assert state.layout == CANONICAL
    regions = list(state.checked_regions())
    path = a.cache / f"canonical-{a.keys}.bin"

    def raw():
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass

    def rows():
        n = 0
        for _ in CompiledRows(state, RowShape(), [0, 1]).rows():
            n += 1
        assert n == a.keys, n

    def batches():
        n = 0
        for batch in columnar.keyed_batches(buf, regions, meta, MAX_PARALLELISM, codecs, [0, 1], None, False, "void",
                                            ["key", "count", "events"]):
            n += batch.num_rows
        assert n == a.keys, n

    native_buf, native_offsets = load(a.cache, a.keys, meta, "heap-native")
    native_handle = handles.KeyGroupsHandle(handles.KEY_GROUPS_V2, 0, native_offsets, None)
    native_regions = keyed.key_group_regions(native_handle, len(native_buf))

    def native_batches():
        n = 0
        for batch in columnar.native_batches(native_buf, native_regions, meta, MAX_PARALLELISM, codecs, [0, 1], None,
                                             False, "void", ["key", "count", "events"]):
            n += batch.num_rows
        assert n == a.keys, n

    results = [("raw read of the same bytes", best(a.repeat, raw)),
               ("compiled row path (decoders.CompiledRows)", best(a.repeat, rows)),
               ("columnar (columnar.keyed_batches)", best(a.repeat, batches)),
               ("columnar heap-native (native_batches)", best(a.repeat, native_batches))]
    print(f"  {'':<40} {'wall':>8}    {'M entries/s':>11}   {'CPU':>8}    {'M entries/s':>11}")
    for name, (wall, cpu) in results:
        print(f"  {name:<40} {wall:8.3f} s  {entries / wall / 1e6:11.2f}   {cpu:8.3f} s  {entries / cpu / 1e6:11.2f}")
    (raw_wall, _), (rows_wall, rows_cpu), (col_wall, col_cpu), _ = (seconds for _, seconds in results)
    print(f"  columnar / compiled rows: {rows_wall / col_wall:.1f}x wall, {rows_cpu / col_cpu:.1f}x CPU;  "
          f"columnar / raw: {col_wall / raw_wall:.1f}x wall")
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
