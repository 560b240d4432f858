"""The keyed state of one subtask, whatever its layout: the one place where the layout and the
decoder are chosen.

Keyed state is stored in one of three layouts:

* ``canonical`` — key-group streams of savepoints (and of RocksDB full checkpoints): per key group,
  every state's (key bytes, value bytes) pairs (:mod:`.keyed`);
* ``heap-native`` — key-group streams of heap checkpoints and native heap savepoints: per key
  group and state, a count and the entries (:mod:`.keyed`);
* ``rocksdb`` — RocksDB's own files (incremental and native checkpoints, NATIVE savepoints of the
  RocksDB backend): one column family per state, each entry stored as in the canonical layout
  (:mod:`.rocksdb`).

and decoded by the compiled scanner (``_speedups.c`` through :mod:`._fastpath`; canonical streams, and
RocksDB snapshots whose table files the C table reader reads: their pairs framed as canonical key
groups by :func:`.rocksdb_native.key_group_blocks`) or by the plain Python decoders (the reference;
every layout; over rocksdict's pairs for RocksDB). A :class:`KeyedState` is opened
over one subtask's state (or a piece of it), decides both once, and offers what every consumer
needs:

* :meth:`KeyedState.entries` — one tuple per stored entry (:data:`.keyed.Entry`), for writers
  (re-keying), ``verify`` and anything that re-encodes state;
* :meth:`KeyedState.rows` — one row per (key, namespace) with a value per selected state (the
  runtime's restore, readers);
* the keyed table's rows or Arrow batches through one interface, whichever decoder makes them
  (:func:`.decoders.new_decoder`: columnar, compiled rows or Python);
* :meth:`KeyedState.timer_rows` — the timers.

Where the state of each subtask lives is a picklable :class:`KeyedStateSource`
(``OperatorView.keyed_states()``); its :meth:`~KeyedStateSource.open` gives the KeyedState (for a
RocksDB snapshot the database is opened in a temporary directory that goes away with the block):

    for source in op.keyed_states():
        with source.open() as state:
            for state_id, key_group, identity, key, namespace, value in state.entries(): ...

Readers, which read byte ranges of large streams themselves, build one with
:meth:`KeyedState.of_stream` or :func:`open_rocksdb`.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator

from . import _fastpath
from . import handles
from . import keyed
from . import rocksdb
from . import rocksdb_native
from . import streams
from . import ttl_meta
from . import verify_structure
from .errors import DECODE_ERRORS, CorruptStateError, FStateError, MissingStateFileError, UnsupportedSerializerError
from .io import FileIO
from .keyed_codecs import StateCodec, frozen

CANONICAL = "canonical"
HEAP_NATIVE = "heap-native"
ROCKSDB = "rocksdb"

COMPILED = "compiled"
PYTHON = "python"

#: what a measuring pass's top heaps hold now (:meth:`KeyedState.measured_key_groups`): the keys each
#: state ranks, and per state ``(bytes, text, elements, text)``, what a key must beat to rank
Ranks = Callable[[], tuple[int, list[tuple[int, str, int, str]]]]

class KeyedState:
    """The keyed state of one subtask, or of some of its key groups, with its layout and decoder.

    Build one with :meth:`of_stream` (a key-group stream in memory), :meth:`of_rocksdb` (an open
    RocksDB snapshot), :func:`open_rocksdb` or :meth:`KeyedStateSource.open`. The layout of a
    stream is found when first needed (parsing the first key group when the handle does not say);
    the compiled decoder is used when it is built and not switched off (``FSTATE_PURE_PYTHON=1``,
    read when the object is made) and the layout is canonical, unless ``strict``.
    """

    def __init__(self, meta: keyed.KeyedBackendMeta, max_parallelism: int, *, source: str | None,
                 key_groups: Iterable[int] | None, codecs: list[StateCodec] | None, strict: bool,
                 buf: bytes | None = None, handle: handles.KeyGroupsHandle | None = None,
                 db: rocksdb.RocksDBSnapshot | None = None):
        self.meta = meta
        self.max_parallelism = max_parallelism
        self.source = source
        #: the key groups read (None: all of the handle's)
        self.key_groups = None if key_groups is None else frozenset(key_groups)
        self.strict = strict
        self.buf = buf
        self.handle = handle
        self.db = db
        self._codecs = codecs
        #: whether the compiled decoders may be used (built, not switched off when this was made)
        self.compiled = _fastpath.available()
        #: whether the C table reader may read a RocksDB snapshot (built, not switched off when this was made,
        #: not ``strict``: the reference reads it with rocksdict)
        self.native = db is not None and not strict and rocksdb_native.available()

    @classmethod
    def of_stream(cls, buf: bytes, handle: handles.KeyGroupsHandle, meta: keyed.KeyedBackendMeta,
                  max_parallelism: int, *, key_groups: Iterable[int] | None = None, source: str | None = None,
                  codecs: list[StateCodec] | None = None, strict: bool = False) -> "KeyedState":
        """A key-group stream (canonical or heap-native): ``buf`` holds the proxy header and the key
        groups ``handle``'s offsets point at. ``strict``: decoded by the plain-Python reference
        decoders (``verify(reference=True)``); the compiled ones make the same checks (every key and
        value decodes to exactly its stored bytes, every key group ends where the next one starts)."""
        return cls(meta, max_parallelism, source=source, key_groups=key_groups, codecs=codecs, strict=strict,
                   buf=buf, handle=handle)

    @classmethod
    def of_rocksdb(cls, db: rocksdb.RocksDBSnapshot, meta: keyed.KeyedBackendMeta, max_parallelism: int, *,
                   key_groups: Iterable[int] | None = None, source: str | None = None,
                   codecs: list[StateCodec] | None = None, strict: bool = False) -> "KeyedState":
        """An open RocksDB snapshot (``meta``: :func:`.rocksdb.read_meta`). ``strict``: read by the
        references, rocksdict and the plain-Python decoders (``verify(reference=True)``)."""
        return cls(meta, max_parallelism, source=source or db.source.label, key_groups=key_groups, codecs=codecs,
                   strict=strict, db=db)

    # -- what was chosen ---------------------------------------------------------------------
    @cached_property
    def codecs(self) -> list[StateCodec]:
        """Each state's decoders (:func:`.keyed_codecs.state_codecs`, always strict)."""
        if self._codecs is not None:
            return self._codecs
        return keyed.state_codecs(self.meta, self.max_parallelism, self.source)

    @cached_property
    def regions(self) -> list[tuple[int, int, int]]:
        """(key group, start, end) of every key group with data in the stream (none for RocksDB)."""
        if self.db is not None:
            return []
        return keyed.key_group_regions(self.handle, len(self.buf))

    @cached_property
    def layout(self) -> str:
        """:data:`CANONICAL`, :data:`HEAP_NATIVE` or :data:`ROCKSDB`."""
        if self.db is not None:
            return ROCKSDB
        canonical = keyed.is_canonical_layout(self.buf, self.handle, self.meta, self.regions, self.codecs,
                                              self.source, self.max_parallelism)
        return CANONICAL if canonical else HEAP_NATIVE

    @property
    def decoder(self) -> str:
        """:data:`COMPILED` (the C scanner: canonical streams, and RocksDB snapshots whose table files
        the C table reader reads) or :data:`PYTHON`."""
        if not self.compiled or self.strict:
            return PYTHON
        if self.layout == ROCKSDB:
            return COMPILED if self.native_tables is not None else PYTHON
        return COMPILED if self.layout == CANONICAL else PYTHON

    @cached_property
    def native_tables(self) -> rocksdb_native.NativeTables | None:
        """A RocksDB snapshot's table files of the selected key groups opened by the C table reader
        (:mod:`.rocksdb_native`), or None: read with rocksdict (a stream; the reader is not built or
        switched off, or a table needs RocksDB itself)."""
        if not self.native:
            return None
        return rocksdb_native.open_tables(self.db, rocksdb_native.run_keys(self._runs(), self._prefix()))

    def _prefix(self) -> int:
        return keyed.key_group_prefix_size(self.max_parallelism)

    def _runs(self) -> list[tuple[int, int]]:
        return rocksdb.key_group_runs(self.key_groups, self.db.source.start_key_group, self.db.source.end_key_group)

    def _rocksdb_blocks(self, states: set[int] | None) -> Iterator[tuple[int, Any, int, int]] | None:
        """The selected states' pairs in the selected key groups, read by the C table reader and framed
        as canonical key groups (:func:`.rocksdb_native.key_group_blocks`): (key group, bytes, start,
        end) as :meth:`data_regions` yields a stream's; None when rocksdict reads the snapshot."""
        tables = self.native_tables
        if tables is None:
            return None
        present = set(self.db.column_families)
        families = [(sid, codec.info.name) for sid, codec in enumerate(self.codecs)
                    if (states is None or sid in states) and codec.info.name in present]
        return rocksdb_native.key_group_blocks(self.db, tables, families, self._runs(), self._prefix(), self.source)

    def checked_regions(self) -> Iterator[tuple[int, int, int]]:
        """(key group, start, end) of the selected key groups, after checking the key-group offsets
        follow the header in order and each region starts inside the stream."""
        verify_structure.check_key_group_offsets(self.handle, self.meta.header_size, len(self.buf), self.source)
        return keyed.checked_regions(self.regions, self.key_groups, self.meta, len(self.buf), self.source)

    def data_regions(self, states: set[int] | None = None) -> Iterator[tuple[int, Any, int, int]]:
        """(key group, bytes, start, end) of the selected key groups' canonical entries: the region of
        the stream, or the decompressed stream of a compressed key group (keyed.key_group_data); of a
        RocksDB snapshot read by the C table reader, its pairs of the ``states`` (None: all) framed as
        canonical key groups."""
        if self.db is not None:
            blocks = self._rocksdb_blocks(states)
            if blocks is None:
                raise RuntimeError("data_regions of a RocksDB snapshot needs the C table reader")
            return blocks
        return self._stream_regions()

    def _stream_regions(self) -> Iterator[tuple[int, Any, int, int]]:
        buf, compressed, source = self.buf, self.meta.compressed, self.source
        for kg, start, end in self.checked_regions():
            try:
                yield (kg, *keyed.key_group_data(buf, start, end, kg, compressed, source))
            except DECODE_ERRORS as e:
                raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None

    # -- reading -----------------------------------------------------------------------------
    def entries(self, states: set[int] | None = None) -> Iterator[keyed.Entry]:
        """Every stored entry of the selected states (None: all) in the selected key groups, ordered
        by key group: (state id, key group, identity, key, namespace, value).

        MAP states yield one entry per map entry (value = (user key, user value)) in the canonical
        and RocksDB layouts, and one per (key, namespace) with value = list of (user key, user
        value) in the heap layout. Timers yield value = timestamp. Decoding starts at the first
        entry."""
        if self.db is not None:
            blocks = self._rocksdb_blocks(states)
            if blocks is not None:
                return self._block_entries(blocks, states)
            return rocksdb.iter_entries(self.db, self.meta, self.max_parallelism, codecs=self.codecs,
                                        key_groups=self.key_groups, states=states, source=self.source)
        return self._stream_entries(states)

    def _block_entries(self, blocks: Iterator[tuple[int, Any, int, int]], states: set[int] | None
                       ) -> Iterator[keyed.Entry]:
        """The entries of uncompressed canonical key groups (a RocksDB snapshot's, framed)."""
        codecs, source = self.codecs, self.source
        scan = (_fastpath.compiled_scanner(self.meta, codecs, self.max_parallelism, states, source)
                if self.decoder == COMPILED else None)
        for kg, data, pos, limit in blocks:
            try:
                if scan is not None:
                    yield from _fastpath.canonical_key_group(scan, data, pos, limit, kg)
                else:
                    yield from keyed.canonical_entries(data, pos, limit, kg, codecs, states, self.max_parallelism,
                                                       source)
            except DECODE_ERRORS as e:
                raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None

    def _stream_entries(self, states: set[int] | None) -> Iterator[keyed.Entry]:
        buf, meta, codecs, source = self.buf, self.meta, self.codecs, self.source
        layout = self.layout
        scan = (_fastpath.compiled_scanner(meta, codecs, self.max_parallelism, states, source)
                if self.decoder == COMPILED else None)
        for kg, start, end in self.checked_regions():
            try:
                if scan is not None:  # the compiled scanner (_speedups.c), same entries
                    data, pos, limit = keyed.key_group_data(buf, start, end, kg, meta.compressed, source)
                    yield from _fastpath.canonical_key_group(scan, data, pos, limit, kg)
                elif layout == CANONICAL:
                    yield from keyed.canonical_key_group(buf, start, end, kg, meta, codecs, states,
                                                         self.max_parallelism, source)
                else:
                    yield from keyed.native_key_group(buf, start, end, kg, meta, codecs, states, source)
            except DECODE_ERRORS as e:
                raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None

    def sized_entries(self, states: set[int] | None = None) -> Iterator[tuple[keyed.Entry, int, int]]:
        """Every entry :meth:`entries` yields, with the bytes it takes in Flink's canonical layout
        (what savepoints and RocksDB store): (entry, key bytes, value bytes). Key bytes: the key-group
        prefix, key, namespace and a map entry's user key; value bytes: the value (a list's elements
        with their delimiters, a map value with its null flag). Ordered by key group within each
        state. Heap-native entries are measured by encoding them canonically (one entry per map
        entry, none for an empty value, as a savepoint stores them)."""
        if self.db is not None:
            blocks = self._rocksdb_blocks(states)
            return self._rocksdb_sized(states) if blocks is None else self._canonical_sized(states, blocks)
        if self.layout == CANONICAL:
            return self._canonical_sized(states, self.data_regions())
        return self._native_sized(states)

    def measured_key_groups(self, keys: list[dict], deadline: int | None = None, ranks: Ranks | None = None
                            ) -> Iterator[tuple[int, list[list[int]], list | None]] | None:
        """The compiled scanner measuring every entry as :meth:`sized_entries` does, without handing
        them over one by one: per key group of a stream (in order), or per state and key group of a
        RocksDB snapshot (its pairs framed as a canonical key group), each entry's bytes, entry and
        elements (a list's elements, a map entry) added to its key's ``keys[state id][key]`` =
        [bytes, entries, elements, key], with the [entries, bytes, key bytes, value bytes, elements,
        TTL timestamps, oldest, newest, expired entries, expired bytes, expired elements] of each
        state there (TTL: the last accesses of the TTL wrappers the scanner decodes, see
        :meth:`records_ttl`; expired: at or before ``deadline``, counted when it is given). None when
        the compiled scanner cannot read this state (``strict``, not built, a compressed heap-native
        stream or one with a state of types it does not decode): measure :meth:`sized_entries` then.
        A heap-native key group is measured as the canonical layout stores it (as
        :meth:`sized_entries` does). A key Python cannot hash (a list, a dict, a row holding one) is
        counted under :func:`.keyed_codecs.frozen` of it.

        With ``ranks`` (what the caller's top heaps hold now: the keys each state ranks, and per state
        its thresholds ``(bytes, text, elements, text)``, asked before each key group), a canonical key
        group is measured without its keys (``Scanner.measure_top``): ``keys`` stays empty and the third
        item is, per state, (its number of keys, [[bytes, entries, elements, key], ...] of the keys
        that may rank past those thresholds, in the order they came); else (a heap-native key group,
        a state whose keys the scanner does not know by their bytes) it is None and ``keys`` is
        filled."""
        if not self.compiled or self.strict:
            return None
        if self.db is not None:
            blocks = self._rocksdb_blocks(None)
            return (self._measured_rocksdb(keys, deadline, ranks) if blocks is None
                    else self._measured(keys, deadline, ranks, blocks=blocks))
        if self.layout == HEAP_NATIVE:
            if self.meta.compressed or not all(_fastpath.measures_native(codec) for codec in self.codecs):
                return None
            return self._measured(keys, deadline, None, native=True)
        if self.decoder != COMPILED:
            return None
        return self._measured(keys, deadline, ranks)

    def records_ttl(self) -> bool:
        """Whether :meth:`measured_key_groups` records every TTL state's timestamps (each TTL state's
        values are TTL wrappers the compiled scanner decodes; opened without timestamped values)."""
        return all(_fastpath.records_ttl(codec) for codec in self.codecs if ttl_meta.is_ttl_meta(codec.info))

    def _measured(self, keys: list[dict], deadline: int | None, ranks: Ranks | None, native: bool = False,
                  blocks=None) -> Iterator[tuple[int, list[list[int]], list | None]]:
        scan = _fastpath.compiled_scanner(self.meta, self.codecs, self.max_parallelism, None, self.source)
        regions = ((kg, self.buf, start, end) for kg, start, end in self.checked_regions()) if native else \
            blocks if blocks is not None else self.data_regions()
        for kg, data, pos, limit in regions:
            yield (kg, *self._measure_block(scan, kg, data, pos, limit, keys, deadline, f"key group {kg}", native,
                                            ranks))

    def _measured_rocksdb(self, keys: list[dict], deadline: int | None, ranks: Ranks | None
                          ) -> Iterator[tuple[int, list[list[int]], list | None]]:
        """rocksdict's pairs framed in Python, per state and key group (the reference of the framing in C)."""
        scan = _fastpath.compiled_scanner(self.meta, self.codecs, self.max_parallelism, None, self.source)
        prefix, runs = self._prefix(), self._runs()
        present = set(self.db.column_families)
        for sid, codec in enumerate(self.codecs):
            name = codec.info.name
            if name not in present:
                continue
            current, pairs = None, []
            # the pairs, then an end mark: the last key group is measured when the mark comes
            for kg, kb, vb in itertools.chain(rocksdb.state_pairs(self.db, name, runs, prefix, self.source),
                                              ((None, b"", b""),)):
                if kg != current and pairs:
                    block = keyed.encode_key_group(current, {sid: pairs})
                    yield (current, *self._measure_block(scan, current, block, 0, len(block), keys, deadline,
                                                         f"state '{name}', key group {current}", ranks=ranks))
                    pairs = []
                current = kg
                pairs.append((kb, vb))

    def _measure_block(self, scan, kg: int, data, pos: int, limit: int, keys: list[dict], deadline: int | None,
                       where: str, native: bool = False, ranks: Ranks | None = None
                       ) -> tuple[list[list[int]], list | None]:
        """A key group's totals per state, and (with ``ranks``, when the scanner knows this key group's
        keys by their bytes) per state its number of keys and the keys that may rank, else None (its
        keys in ``keys``)."""
        try:
            if ranks is not None:
                top, thresholds = ranks()
                # a mapped stream's pages dropped behind the pass
                rows = scan.measure_top(data, pos, limit, kg, thresholds, top, deadline, streams.is_mapped(data))
                if rows is not None:
                    return [row[:11] for row in rows], [(row[11], row[12]) for row in rows]
            return scan.measure(data, pos, limit, kg, keys, deadline, native, frozen), None
        except DECODE_ERRORS as e:
            raise CorruptStateError(f"{where}: cannot decode the state bytes ({e})", self.source) from None
        finally:
            streams.release(data, pos, limit)  # the key group's pages (a mapped stream's) once measured

    def _rocksdb_sized(self, states: set[int] | None) -> Iterator[tuple[keyed.Entry, int, int]]:
        prefix, runs = self._prefix(), self._runs()
        present = set(self.db.column_families)
        for sid, codec in enumerate(self.codecs):
            if (states is not None and sid not in states) or codec.info.name not in present:
                continue
            for kg, kb, vb in rocksdb.state_pairs(self.db, codec.info.name, runs, prefix, self.source):
                ident, key, ns, value = rocksdb.decode_pair(codec, kg, kb, vb, self.source)
                yield (sid, kg, ident, key, ns, value), len(kb), len(vb)

    def _canonical_sized(self, states: set[int] | None, regions: Iterator[tuple[int, Any, int, int]]
                         ) -> Iterator[tuple[keyed.Entry, int, int]]:
        codecs, source, n_states = self.codecs, self.source, len(self.codecs)
        prefix = keyed.key_group_prefix_size(self.max_parallelism)
        scan = (_fastpath.compiled_scanner(self.meta, codecs, self.max_parallelism, states, source)
                if self.decoder == COMPILED else None)
        for kg, data, pos, limit in regions:
            try:
                pairs = keyed.canonical_pairs(data, pos, limit, kg, n_states, prefix, source)
                if states is not None:
                    pairs = (pair for pair in pairs if pair[0] in states)
                if scan is not None:  # the compiled scanner decodes the same entries in the same order
                    for (_, kstart, kend, vend), entry in zip(pairs, _fastpath.canonical_key_group(
                            scan, data, pos, limit, kg)):
                        yield entry, kend - kstart, vend - kend - 4
                    continue
                for sid, kstart, kend, vend in pairs:
                    codec = codecs[sid]
                    if codec.canonical is None:
                        raise UnsupportedSerializerError(f"state '{codec.info.name}' has types fstate cannot decode",
                                                         source)
                    ident, key, ns, value = codec.canonical(keyed.unflagged_key(data, kstart, kend),
                                                            data[kend + 4:vend])
                    yield (sid, kg, ident, key, ns, value), kend - kstart, vend - kend - 4
            except DECODE_ERRORS as e:
                raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None

    def _native_sized(self, states: set[int] | None) -> Iterator[tuple[keyed.Entry, int, int]]:
        encoders: dict[int, keyed.PairEncoder] = {}
        for sid, kg, ident, key, ns, value in self.entries(states):
            encoder = encoders.get(sid)
            if encoder is None:
                encoder = encoders[sid] = keyed.PairEncoder(self.meta, sid, self.max_parallelism)
            pairs = encoder.pairs(kg, key, value, ns)
            if self.codecs[sid].shape.is_map:  # a map's entries one by one, as the canonical layout stores them
                for item, (kb, vb) in zip(value, pairs):
                    yield (sid, kg, ident, key, ns, tuple(item)), len(kb), len(vb)
            elif pairs:
                (kb, vb), = pairs
                yield (sid, kg, ident, key, ns, value), len(kb), len(vb)

    def rows(self, state_ids: list[int]) -> Iterator[tuple[int, Any, Any, list]]:
        """One row per (key, namespace) of the selected key groups: (key group, key, namespace,
        [value of each state in ``state_ids`` or None]). Decoding starts at the first row."""
        if self.decoder == COMPILED:  # rows grouped by the compiled scanner
            yield from _fastpath.keyed_rows(self.data_regions(set(state_ids)), self.meta, self.max_parallelism, state_ids,
                                            self.codecs, self.source)
            return
        yield from keyed.rows_from_entries(self.entries(set(state_ids)), self.codecs, state_ids)

    def timer_rows(self) -> Iterator[tuple[str, str, int, Any, Any, int]]:
        """(timer service, kind 'event'/'processing', timestamp, key, namespace, key group) of every
        timer in the selected key groups."""
        timer_ids = {i for i, _ in self.meta.timer_states}
        if timer_ids:
            yield from keyed.timers_from_entries(self.entries(timer_ids), self.meta)


@contextmanager
def open_rocksdb(source: rocksdb.RocksDBSource, max_parallelism: int, *, key_groups: Iterable[int] | None = None,
                 io: FileIO | None = None, tmp_dir: str | None = None, header_search: bool = True,
                 meta_of: Callable[[keyed.KeyedBackendMeta], keyed.KeyedBackendMeta] | None = None,
                 strict: bool = False) -> Iterator[KeyedState]:
    """The keyed state of one subtask's RocksDB snapshot, in a ``with`` block (the database's
    temporary directory is removed when it ends, also on errors). ``meta_of``: see
    :meth:`KeyedStateSource.open`; ``strict``: :meth:`KeyedState.of_rocksdb`."""
    meta = rocksdb.read_meta(source, io, header_search=header_search)
    if meta_of is not None:
        meta = meta_of(meta)
    # the reference lists the files with RocksDB; the C reader's fast path replays the MANIFEST
    reference = strict or not rocksdb_native.available()
    with rocksdb.open_snapshot(source, tmp_dir=tmp_dir, io=io, reference=reference) as db:
        yield KeyedState.of_rocksdb(db, meta, max_parallelism, key_groups=key_groups, source=source.label,
                                    strict=strict)


#: bytes of a key-group stream read at a time when it is large (a table partition, a verify step)
SPLIT_BYTES = 32 * 1024 * 1024


def split_stream(h: handles.KeyGroupsHandle, src: streams.StreamSource, split_bytes: int = SPLIT_BYTES
                 ) -> list[tuple[int, int, tuple[int, int] | None]]:
    """A key-group stream's key groups in pieces of about ``split_bytes``, by the handle's offsets:
    (first key group, last key group, byte range), or the whole range once (byte range None) when the
    stream is small or in memory."""
    total = src.length if src.length is not None else len(src.data or b"")
    if src.path is not None and src.length is not None:
        actual = streams.source_io(src).size(src.path)
        if actual < src.start + src.length:
            raise MissingStateFileError(f"state file has {actual} bytes, but the savepoint's metadata says "
                                        f"{src.start + src.length}", src.path)
    if total <= split_bytes or src.path is None:
        return [(h.start_key_group, h.end_key_group, None)]
    present = [(h.start_key_group + i, o) for i, o in enumerate(h.offsets) if o != 0 or not h.canonical]
    if not present:
        return []
    ordered = sorted(present, key=lambda x: x[1])
    # the stream is laid out in key-group order; consecutive key groups make pieces of ~split_bytes
    pieces = []
    start_i = 0
    for i in range(1, len(ordered) + 1):
        end_byte = ordered[i][1] if i < len(ordered) else total
        if end_byte - ordered[start_i][1] >= split_bytes or i == len(ordered):
            pieces.append((ordered[start_i][0], ordered[i - 1][0], (ordered[start_i][1], end_byte)))
            start_i = i
    return pieces


@dataclass(frozen=True)
class KeyedStateSource:
    """Where one subtask's keyed state lives: a key-group stream (``stream`` and its ``handle``) or
    a RocksDB snapshot (``rocksdb``). Picklable, holds nothing open: ship it to where it is read."""

    subtask: int
    max_parallelism: int
    stream: streams.StreamSource | None = None
    handle: handles.KeyGroupsHandle | None = None
    rocksdb: rocksdb.RocksDBSource | None = None
    #: a byte range of the stream holding some of the handle's key groups (a reader's piece of a large
    #: stream: only the header and that range are read), with those key groups (inclusive)
    span: tuple[int, int] | None = None
    span_key_groups: tuple[int, int] | None = None

    @property
    def label(self) -> str | None:
        return self.rocksdb.label if self.rocksdb is not None else self.stream.label

    @property
    def start_key_group(self) -> int:
        return self.rocksdb.start_key_group if self.rocksdb is not None else self.handle.start_key_group

    @property
    def end_key_group(self) -> int:
        return self.rocksdb.end_key_group if self.rocksdb is not None else self.handle.end_key_group

    @contextmanager
    def open(self, *, key_groups: Iterable[int] | None = None, io: FileIO | None = None, strict: bool = False,
             tmp_dir: str | None = None, header_search: bool = True,
             meta_of: Callable[[keyed.KeyedBackendMeta], keyed.KeyedBackendMeta] | None = None
             ) -> Iterator[KeyedState]:
        """The :class:`KeyedState`, in a ``with`` block. ``strict``: see :meth:`KeyedState.of_stream`
        (key-group streams) and :meth:`KeyedState.of_rocksdb`. ``header_search``: a serializer snapshot fstate cannot parse makes only
        its own state opaque (False: it is an error). ``meta_of``: the header as the caller decodes
        it (e.g. the runtime's restore keeps TTL values' timestamps)."""
        if self.rocksdb is not None:
            with open_rocksdb(self.rocksdb, self.max_parallelism, key_groups=key_groups, io=io, tmp_dir=tmp_dir,
                              header_search=header_search, meta_of=meta_of, strict=strict) as state:
                yield state
            return
        if self.span is not None and self.stream.path is not None:
            buf, handle, meta = self._read_span(io)
            if handle is self.handle:  # the whole stream mapped: its key groups of the span are read
                lo, hi = self.span_key_groups
                key_groups = [kg for kg in (range(lo, hi + 1) if key_groups is None else key_groups) if lo <= kg <= hi]
        else:
            buf, handle = streams.read_source(self.stream, io), self.handle
            end = keyed.header_end(handle.offsets, len(buf)) if header_search else None
            meta = keyed.read_keyed_proxy(buf, self.stream.label, end)
        if meta_of is not None:
            meta = meta_of(meta)
        yield KeyedState.of_stream(buf, handle, meta, self.max_parallelism, key_groups=key_groups,
                                   source=self.stream.label, strict=strict)

    def _read_span(self, io: FileIO | None) -> tuple[Any, handles.KeyGroupsHandle, keyed.KeyedBackendMeta]:
        """The header and the span's bytes, with a handle over the span's key groups whose offsets
        point into them; or, from a local file, the whole stream mapped (a read-only mmap: only the
        pages read are loaded) with the whole handle."""
        source, label = self.stream, self.stream.label
        io = io or streams.source_io(source)
        size = 64 * 1024
        lo, hi = self.span
        while True:
            header = io.read_range(source.path, source.start, min(size, lo))
            try:
                meta = keyed.read_keyed_proxy(header, label, keyed.header_end(self.handle.offsets))
                break
            except FStateError:
                if size >= lo:
                    raise
                size *= 4
        h = self.handle
        # mapped (a local file): the whole stream with its handle, of which only the span's key groups
        # are read (the caller selects them), their pages dropped as they are decoded
        # (streams.release); else the header and the span's bytes
        mapped = io.map_range(source.path, source.start, source.length) if source.length else None
        if mapped is not None:
            return mapped, h, meta
        body = io.read_range(source.path, source.start + lo, hi - lo)
        start, end = self.span_key_groups
        first = start - h.start_key_group
        offsets = tuple((o - lo + meta.header_size) if o else 0 for o in h.offsets[first:first + end - start + 1])
        shifted = handles.KeyGroupsHandle(h.tag, start, offsets, h.delegate, h.handle_id)
        return header[:meta.header_size] + body, shifted, meta
