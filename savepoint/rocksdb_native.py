"""RocksDB's table files read in C (``fstate.savepoint._sst``, savepoint/_sst.c): the live tables of
an open :class:`.rocksdb.RocksDBSnapshot`, one merger a column family, read a key-group window at a
time (:func:`windows`, no Python object per pair): by the columnar decoder from the mergers' buffers,
and by every other reader (rows, entries, ``verify``, ``sizes``, the writers) as canonical key groups
(:func:`key_group_blocks`, framed in C) that the canonical decoders read as a savepoint's.

The live tables and their column families come from the MANIFEST's replay (:mod:`.rocksdb_manifest`), so
no RocksDB database is opened when the C reader reads every table. rocksdict (RocksDB itself) stays
the reference and the fallback (it lists the tables when the replay leaves the MANIFEST to it):
:func:`open_tables` gives None
when the extension is missing, ``FSTATE_PURE_PYTHON=1`` or ``FSTATE_ROCKSDB_NATIVE=0`` is set, the
database holds entries outside its table files, or a table uses a feature the C reader does not
read (another comparator, format version or checksum, a compression without its library here,
range deletions, a partitioned or hash index, a compression dictionary). Checked before the first
pair is read; bytes that are not a valid table are a :class:`CorruptStateError` naming the file.
tests/savepoint/test_sst.py compares both readers on generated databases and every sample,
test_sst_generated.py on databases written by Flink's own RocksDB (merges, every deletion).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Sequence

from ._compiled import pure_python_forced
from .errors import CorruptStateError
from .rocksdb import RocksDBSnapshot, key_group_prefix_bytes
from .rocksdb_manifest import sst as _sst

#: ``FSTATE_ROCKSDB_NATIVE=0`` reads every RocksDB snapshot with rocksdict (benchmarks, comparisons)
ENV = "FSTATE_ROCKSDB_NATIVE"


def available() -> bool:
    return _sst is not None and not pure_python_forced() and os.environ.get(ENV, "1") != "0"


@dataclass
class NativeTables:
    """The live table files of one snapshot, opened, by column family."""

    families: dict[str, tuple]  # column family → (_sst.Table, ...)
    origins: dict[str, tuple[str, str]]  # a table's local path → (its RocksDB name, the file it came from)

    def merger(self, column_family: str, prefix: int):
        """A fresh merger over the column family's tables (None: it has no table file)."""
        tables = self.families.get(column_family)
        return None if not tables else _sst.Merger(tables, prefix)

    def error(self, e: Exception) -> CorruptStateError:
        """The error of a merger's ``_sst.Corrupt``."""
        path, problem = e.args
        name, origin = self.origins.get(path, (path, path))
        return corrupt(name, origin, problem)


def corrupt_types() -> tuple[type, ...]:
    """The exception a merger raises for bytes that are not a valid table."""
    return (_sst.Corrupt,) if _sst is not None else ()


def corrupt(name: str, origin: str, problem: str) -> CorruptStateError:
    return CorruptStateError(f"RocksDB table file {name}: {problem}", origin)


def open_tables(db: RocksDBSnapshot, keys: tuple[bytes, bytes | None] | None = None) -> NativeTables | None:
    """The snapshot's live tables opened by the C reader, or None (see the module doc). ``keys``:
    only the tables holding user keys in [first, end) (end None: no end) are opened; the others
    cannot change a key of that range."""
    if not available():
        return None
    live = db.live_tables()
    if live is None:
        return None
    families: dict[str, list] = {}
    origins = {}
    for entry in live:
        if keys is not None and (entry.largest < keys[0] or (keys[1] is not None and entry.smallest >= keys[1])):
            continue
        try:
            table = _sst.Table(entry.path)
        except _sst.Unsupported:
            return None
        except _sst.Corrupt as e:
            raise corrupt(entry.name, entry.origin, e.args[1]) from None
        origins[entry.path] = (entry.name, entry.origin)
        family = entry.column_family
        if family is None:  # listed by RocksDB: the table's properties name its column family
            family = table.column_family.decode("utf-8", "surrogateescape")
        families.setdefault(family, []).append(table)
    known = set(db.column_families)
    if not set(families) <= known:
        return None  # a table of a column family RocksDB does not list: RocksDB decides
    return NativeTables({name: tuple(tables) for name, tables in families.items()}, origins)


def run_keys(runs: Sequence[tuple[int, int]], prefix: int) -> tuple[bytes, bytes | None] | None:
    """The user keys of the key-group ``runs`` (rocksdb.key_group_runs), [first, end) (end None: no
    end), for :func:`open_tables`; None when there is no run."""
    if not runs:
        return None
    after = runs[-1][1] + 1
    return key_group_prefix_bytes(runs[0][0], prefix), \
        key_group_prefix_bytes(after, prefix) if after < 1 << (8 * prefix) else None


#: bytes of table files whose pairs the C table reader hands over at a time (a key-group window)
WINDOW_BYTES = 8 << 20


def windows(db: RocksDBSnapshot, tables: NativeTables, families: Sequence[tuple[int, str]],
            runs: Sequence[tuple[int, int]], prefix: int, piece_bytes: int | None = None,
            lead: int | None = None) -> Iterator[tuple[tuple[int, bytes], ...]]:
    """The pairs of the (state id, column family) ``families`` over the key-group ``runs``, a window
    of key groups at a time: per run, one merger a family at the run's first key group, read in
    windows of key groups holding about :data:`WINDOW_BYTES` of table files each; per window
    ((state id, the merger's read: uint32 length, key, uint32 length, value, ...), ...) in state id
    order (families without a table file left out). A table's bad bytes raise its
    :class:`CorruptStateError`.

    With ``piece_bytes`` and ``lead``, the state id of a family whose keys are its rows' identities
    (a value or list state: key group, key, namespace, nothing after), a window is read in pieces that
    ``lead``'s pairs end (``Merger.read_piece``): at a key group once they hold ``piece_bytes``, or
    within a key group whose pairs of ``lead`` alone hold that much, before one of its keys; every
    other family's pairs end at the same key group or key. A row's pairs are then in one piece (its
    identity's keys sort together in every family: Flink's key and namespace bytes are self-delimiting
    when not written with their lengths), and a key group of any size is held a piece at a time."""
    for lo, hi in runs:
        mergers = [(sid, tables.merger(name, prefix)) for sid, name in sorted(families)]
        mergers = [(sid, merger) for sid, merger in mergers if merger is not None]
        if not mergers:
            continue
        leader = dict(mergers).get(lead) if piece_bytes else None
        size = db.source.key_group_bytes(lo, hi)
        step = max(1, (hi - lo + 1) * WINDOW_BYTES // size) if size else hi - lo + 1
        try:
            for _, merger in mergers:
                merger.seek(key_group_prefix_bytes(lo, prefix))
            for start in range(lo, hi + 1, step):
                last = min(hi, start + step - 1)
                if leader is None:
                    yield tuple((sid, merger.read(last)) for sid, merger in mergers)
                    continue
                cut = b""
                while cut is not None:
                    led, cut = leader.read_piece(last, piece_bytes)
                    yield tuple((sid, led if merger is leader else merger.read(last) if cut is None
                                 else merger.read(last, cut)) for sid, merger in mergers)
        except _sst.Corrupt as e:
            raise tables.error(e) from None


def key_group_blocks(db: RocksDBSnapshot, tables: NativeTables, families: Sequence[tuple[int, str]],
                     runs: Sequence[tuple[int, int]], prefix: int, source: str | None
                     ) -> Iterator[tuple[int, bytes, int, int]]:
    """The :func:`windows` framed as key groups of Flink's canonical layout (RocksDB stores every
    entry as that layout does): (key group, bytes, start, end) as a key-group stream's regions, read
    by the canonical decoders (rocksdb.iter_entries, over rocksdict, is the reference). A key
    shorter than its key-group prefix is a :class:`CorruptStateError`."""
    names = dict(families)
    for parts in windows(db, tables, families, runs, prefix):
        try:
            data, regions = _sst.frame(parts, prefix)
        except ValueError as e:
            index, kg = e.args
            raise CorruptStateError(f"state '{names[parts[index][0]]}', key group {kg}: a key is shorter than its "
                                    f"key-group prefix", source) from None
        for kg, start, end in regions:
            yield kg, data, start, end
