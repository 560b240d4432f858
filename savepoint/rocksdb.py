"""Keyed state in RocksDB's own files: incremental checkpoints, native checkpoints (Flink 1.16+)
and NATIVE-format savepoints of the RocksDB backend.

Such a snapshot stores, per subtask, an :class:`~.handles.IncrementalKeyedHandle`: the RocksDB
files of the subtask's database (SSTs, MANIFEST, OPTIONS, CURRENT) under their RocksDB file names
(shared files: absolute paths into ``<checkpoint dir>/<job id>/shared/``; private files: relative
to ``chk-N`` or inline in `_metadata`), plus a meta-data stream holding the keyed-backend proxy
(state names and serializer snapshots), exactly as at the head of a canonical key-group stream and
without any further framing.

To read one, the files are gathered under their RocksDB names in a private temporary directory
(symlinks to local files; inline and remote bytes are written out) and the database is opened
read-only with ``rocksdict``. Flink's own OPTIONS file is left out (it names frocksdb options and,
with TTL, Flink's compaction filter, which a stock RocksDB need not know); an OPTIONS file of our
own gives every column family what reading needs: the bytewise comparator and the ','
string-append merge operator Flink sets (list state is stored as merge operands; without the
operator RocksDB cannot read them). Every keyed state is a column family named like the state (timers:
``_timer_state/event_user-timers`` ...; plus RocksDB's ``default``), and every entry is stored
exactly as the canonical savepoint layout stores it, so the canonical per-state decoders of
:mod:`.keyed` decode it:

* key = key-group prefix (1 byte if max parallelism ≤ 128, else 2) + key + namespace
  (+ user key for MAP state); timers: prefix + TimerSerializer bytes, empty value;
* value = the value (VALUE/REDUCING/AGGREGATING), elements joined by ``,`` (LIST, RocksDB's
  string-append merge operator), ``bool isNull`` + value (MAP).

Every reader reads the live table files of an opened snapshot in C instead
(:mod:`.rocksdb_native`, chosen in :mod:`.keyed_state`), rocksdict staying the reference (``strict``,
``FSTATE_ROCKSDB_NATIVE=0``) and the fallback. Which table files are live, and the column families,
the MANIFEST's replay tells (:mod:`.rocksdb_manifest`), so that such a read opens no database; the
reference asks RocksDB, and so does a read of a MANIFEST the replay leaves to RocksDB. The temporary
directory is removed when the :class:`RocksDBSnapshot` context ends, also on errors.
Nothing here imports Spark; ``rocksdict`` is imported only when a database is opened.
"""

from __future__ import annotations

import heapq
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator

from . import handles
from . import streams
from . import keyed
from . import rocksdb_manifest
from .errors import DECODE_ERRORS, CorruptStateError, FStateError, MissingStateFileError, UnsupportedSerializerError
from .io import FileIO, copy_range, is_remote, scheme_of

TEMP_PREFIX = "fstate-rocksdb-"
#: RocksDB's built-in merge operator that Flink configures on every column family (',' delimiter).
MERGE_OPERATOR = "StringAppendTESTOperator"
OPTIONS_FILE = "OPTIONS-999999999"

#: the hint every "file is missing" error of a checkpoint carries
MOVED_HINT = ("if the job's checkpoint directory was moved, give its new location (the directory "
              "holding shared/ and chk-N/) with --checkpoint-base-dir / checkpoint_base_dir")


# ---------------------------------------------------------------------------------------------
# where the files are (planned on the driver, shipped to executors)


@dataclass(frozen=True)
class RocksDBSource:
    """Everything needed to open one subtask's RocksDB snapshot: picklable, no open resources."""

    label: str
    start_key_group: int
    end_key_group: int
    metadata: streams.StreamSource
    files: tuple[tuple[str, streams.StreamSource], ...]  # RocksDB file name → its bytes
    #: the snapshot's own OPTIONS files: not read (see the module doc), only checked by verify
    options: tuple[tuple[str, streams.StreamSource], ...] = ()
    #: bytes of the snapshot's table files (SSTs: what reading it costs), as the handle records them
    table_bytes: int = 0

    @property
    def key_groups(self) -> range:
        return range(self.start_key_group, self.end_key_group + 1)


    def key_group_bytes(self, lo: int, hi: int) -> int:
        """The share of :attr:`table_bytes` of key groups lo..hi (RocksDB keys start with their key
        group, and a hash spreads keys evenly over key groups)."""
        count = self.end_key_group - self.start_key_group + 1
        inside = max(0, min(hi, self.end_key_group) - max(lo, self.start_key_group) + 1)
        return self.table_bytes * inside // count if count > 0 else 0

    def split(self, target: int) -> list[tuple[int, int]]:
        """The key-group range in contiguous pieces of about ``target`` bytes of table files each
        (at least one key group a piece), in key-group order. Every piece opens the whole database:
        with a remote file (copied to this machine for each opening) the range stays whole."""
        count = self.end_key_group - self.start_key_group + 1
        if any(src.path is not None and is_remote(src.path) for _, src in self.files):
            return [(self.start_key_group, self.end_key_group)]
        pieces = max(1, min(count, -(-self.table_bytes // max(1, target))))
        bounds = [self.start_key_group + count * i // pieces for i in range(pieces + 1)]
        return [(bounds[i], bounds[i + 1] - 1) for i in range(pieces)]


def rocksdb_source(handle: handles.IncrementalKeyedHandle, stream_source: Callable[[Any], streams.StreamSource], *,
                   label: str = "", check: bool = True) -> RocksDBSource:
    """The files of an incremental/native keyed handle. ``stream_source`` resolves one stream
    handle (relative paths, external-path policy, a moved checkpoint directory). With ``check``,
    every local file must exist with the size the handle records (MissingStateFileError)."""
    if handle.metadata_state is None:
        raise CorruptStateError("RocksDB keyed state handle without its meta-data stream", label)
    files = []
    options = []
    seen = set()
    table_bytes = 0
    for name, sh in handle.shared + handle.private:
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise CorruptStateError(f"invalid RocksDB file name {name!r}", label)
        if name in seen:
            raise CorruptStateError(f"RocksDB file {name} is listed twice", label)
        seen.add(name)
        if sh is None:
            raise CorruptStateError(f"RocksDB file {name} has no state handle", label)
        src = stream_source(sh)
        if is_table_file(name):
            table_bytes += handles.stream_size(sh)
        if check:
            _check_file(f"RocksDB file {name}", src, label)
        # OPTIONS: read with options of our own (see RocksDBSnapshot._write_options), checked by verify
        (options if _is_options_file(name) else files).append((name, src))
    meta = stream_source(handle.metadata_state)
    if check:
        _check_file("the meta-data stream", meta, label)
    return RocksDBSource(label, handle.start_key_group, handle.end_key_group, meta, tuple(files), tuple(options),
                         table_bytes)


def is_table_file(name: str) -> bool:
    """Whether a RocksDB file is a table file (SST) by its name."""
    return name.endswith(".sst")


def _is_options_file(name: str) -> bool:
    return name.startswith("OPTIONS-")


def _check_file(what: str, src: streams.StreamSource, label: str) -> None:
    """``what`` (e.g. "RocksDB file 000012.sst") exists with at least the bytes its handle covers."""
    if src.path is None or scheme_of(src.path) != "file":
        return
    try:
        size = os.path.getsize(src.path)
    except OSError:
        moved = f" (referenced as {src.label})" if src.label and src.label != src.path else ""
        raise MissingStateFileError(f"{what} of {label} does not exist{moved}; {MOVED_HINT}", src.path) from None
    if src.length is not None and size < src.start + src.length:
        raise MissingStateFileError(f"{what} of {label} has {size} bytes, but the snapshot's metadata says "
                                    f"{src.start + src.length}", src.path)


def read_meta(src: RocksDBSource, io: FileIO | None = None, *, header_search: bool = True) -> keyed.KeyedBackendMeta:
    """The keyed-backend proxy of the snapshot (its meta-data stream holds nothing else).
    ``header_search``: a serializer snapshot fstate cannot parse makes only its own state opaque
    (False: it is an error)."""
    m = src.metadata
    data = streams.read_source(m, io)
    return keyed.read_keyed_proxy(data, m.label or src.label, len(data) if header_search else None)


# ---------------------------------------------------------------------------------------------
# the opened database


class RocksDBSnapshot:
    """One subtask's RocksDB database, materialized in a temporary directory and opened read-only.

        with RocksDBSnapshot(src) as db:
            for key, value in db.items("total"): ...

    rocksdict opens the database when the snapshot opens (``reference``) or when first needed: to
    read pairs with RocksDB (:meth:`cursor`), or to list the files and column families of a MANIFEST
    the replay (:meth:`manifest`) leaves to RocksDB. The directory (and the database) go away when the
    context ends, on errors, and at the latest when the object is garbage collected.
    """

    def __init__(self, source: RocksDBSource, *, tmp_dir: str | None = None, io: FileIO | None = None,
                 reference: bool = False):
        self.source = source
        self.tmp_dir = tmp_dir
        self._io = io
        #: RocksDB (rocksdict) lists the files and column families; else the MANIFEST's replay does
        #: (:mod:`.rocksdb_manifest`) and RocksDB opens the database only when it must read it
        self.reference = reference
        self.path: str | None = None
        self._db = None
        self._manifest: rocksdb_manifest.Manifest | None = None
        self._manifest_read = False
        self._cfs: dict[str, Any] = {}
        self._names: list[str] = []
        self._cleanup: Callable[[], Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "RocksDBSnapshot":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> "RocksDBSnapshot":
        if self.path is not None:
            return self
        path = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.tmp_dir)
        self.path = path
        self._cleanup = weakref.finalize(self, shutil.rmtree, path, True)
        try:
            self._materialize()
            if self.reference:
                self._open_db()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        db, self._db = self._db, None
        self._cfs = {}
        self._manifest, self._manifest_read = None, False
        self.path = None
        if db is not None:
            try:
                db.close()
            except Exception:  # closing a read-only database cannot lose anything
                pass
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None

    # -- files -------------------------------------------------------------------------------
    def _materialize(self) -> None:
        label = self.source.label
        names = set()
        for name, src in self.source.files:
            target = os.path.join(self.path, name)
            names.add(name)
            if src.path is not None and scheme_of(src.path) == "file" and src.start == 0:
                _check_file(f"RocksDB file {name}", src, label)
                if src.length is None or os.path.getsize(src.path) == src.length:
                    try:
                        os.symlink(os.path.abspath(src.path), target)
                        continue
                    except OSError:
                        pass  # no symlinks here: copy
            try:
                if src.path is not None and is_remote(src.path) and src.length is not None:
                    # a remote file is streamed to the local directory, never held whole in memory
                    streams.source_io(src, self._io).size(src.path)  # missing → MissingStateFileError
                    copy_range(src.path, src.start, src.length, target, src.fs_options)
                    continue
                data = streams.read_source(src, self._io)
            except MissingStateFileError as e:
                raise MissingStateFileError(f"RocksDB file {name} of {label}: {e.detail}; {MOVED_HINT}",
                                            e.path) from None
            with open(target, "wb") as f:
                f.write(data)
        manifests = sorted((n for n in names if n.startswith("MANIFEST-")), key=_manifest_number)
        if not manifests:
            raise CorruptStateError(f"the RocksDB snapshot has no MANIFEST file "
                                    f"(files: {', '.join(sorted(names)) or 'none'})", label)
        if "CURRENT" not in names:
            with open(os.path.join(self.path, "CURRENT"), "w") as f:
                f.write(manifests[-1] + "\n")

    def _database(self):
        """The database opened by rocksdict (now, if it was not)."""
        self._require_open()
        if self._db is None:
            self._open_db()
        return self._db

    def manifest(self) -> rocksdb_manifest.Manifest | None:
        """The MANIFEST's live files and column families (the one CURRENT names, read once), or None:
        RocksDB lists them (the ``reference``, or a MANIFEST the replay leaves to RocksDB, see
        :mod:`.rocksdb_manifest`)."""
        self._require_open()
        if not self._manifest_read:
            self._manifest_read = True
            if not self.reference:
                try:
                    self._manifest = self._replayed()
                except rocksdb_manifest.Unsupported:
                    self._manifest = None
        return self._manifest

    def _replayed(self) -> rocksdb_manifest.Manifest:
        try:
            with open(os.path.join(self.path, "CURRENT"), "rb") as f:
                current = f.read()
        except OSError:
            raise rocksdb_manifest.Unsupported("no CURRENT") from None
        name = current[:-1].decode("ascii", "replace")
        if not current.endswith(b"\n") or "/" in name or dict(self.source.files).get(name) is None:
            raise rocksdb_manifest.Unsupported("CURRENT names no MANIFEST of the snapshot")
        with open(os.path.join(self.path, name), "rb") as f:
            data = f.read()
        return rocksdb_manifest.read(data, name)

    def _open_db(self) -> None:
        try:
            import rocksdict
        except ImportError:
            raise FStateError("reading RocksDB incremental/native snapshots needs the rocksdict package "
                              "(pip install rocksdict)", self.source.label) from None
        label = self.source.label
        try:
            names = rocksdict.Rdict.list_cf(self.path, rocksdict.Options(raw_mode=True))
        except Exception as e:
            raise CorruptStateError(f"cannot read the RocksDB MANIFEST ({e})", label) from None
        self._write_options(names)
        try:
            opts, cf_opts = rocksdict.Options.load_latest(self.path)
            for o in [opts, *cf_opts.values()]:
                o.create_if_missing(False)
            self._db = rocksdict.Rdict(self.path, opts, cf_opts, access_type=rocksdict.AccessType.read_only(False))
            self._cfs = {n: self._db.get_column_family(n) for n in names}
        except Exception as e:
            raise CorruptStateError(f"RocksDB cannot open the snapshot ({e})", label) from None
        self._names = list(names)
        self._read_options = rocksdict.ReadOptions()
        self._read_options.fill_cache(False)
        self._read_options.set_total_order_seek(True)

    def _write_options(self, names: list[str]) -> None:
        """An OPTIONS file that gives every column family Flink's merge operator (rocksdict can
        only set merge operators through an OPTIONS file) and the bytewise comparator."""
        lines = ["[Version]", "  rocksdb_version=8.10.0", "  options_file_version=1.1", "",
                 "[DBOptions]", "  create_if_missing=false", "  max_open_files=-1", ""]
        for n in names:
            lines += [f'[CFOptions "{_escape_option(n)}"]', f"  merge_operator={MERGE_OPERATOR}",
                      "  comparator=leveldb.BytewiseComparator", ""]
        with open(os.path.join(self.path, OPTIONS_FILE), "w", encoding="utf-8") as f:
            f.write("\n".join(lines))

    def check_options(self) -> None:
        """verify: each OPTIONS file of the snapshot is one RocksDB parses (every option known, every
        value of its type) and describes exactly the column families the MANIFEST holds. An OPTIONS
        file has no checksum: a changed digit or comment that still parses cannot be detected."""
        import rocksdict

        label = self.source.label
        names = self.column_families
        for name, src in self.source.options:
            directory = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.tmp_dir)
            try:
                data = streams.read_source(src, self._io)
                with open(os.path.join(directory, name), "wb") as f:
                    f.write(data)
                try:
                    _, families = rocksdict.Options.load_latest(directory, ignore_unknown_options=False)
                except Exception as e:  # RocksDB's parser: one line naming the option
                    reason = " ".join(str(e).strip("'\" ").split()) or repr(e)
                    raise CorruptStateError(f"RocksDB file {name} is not an OPTIONS file RocksDB reads ({reason})",
                                            src.path or label) from None
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            if sorted(families) != sorted(names):
                extra = sorted(set(families) ^ set(names))
                raise CorruptStateError(f"RocksDB file {name} describes column families {sorted(families)}, the "
                                        f"MANIFEST holds {sorted(names)} (differing: {extra})",
                                        src.path or label)

    # -- reading -----------------------------------------------------------------------------
    @property
    def column_families(self) -> list[str]:
        """All column families: one per state (registered in this backend), and ``default``."""
        manifest = self.manifest() if self._db is None else None
        if manifest is not None:
            return manifest.names
        self._database()
        return list(self._names)

    def _require_open(self) -> None:
        if self.path is None:
            raise RuntimeError("the RocksDB snapshot is not open (use it in a with block)")

    def cursor(self, column_family: str, start: bytes = b""):
        """A rocksdict iterator over one column family, at its first key from ``start`` (None when
        the column family does not exist): ``key()`` (None past the end), ``value()``, ``next()``
        and ``status()`` (raises the error that ended an iteration early). Its errors become
        fstate's through :meth:`read_error`. :meth:`items` reads one in Python; the columnar
        decoder calls it from C (columnar.rocksdb_batches)."""
        self._database()
        cf = self._cfs.get(column_family)
        if cf is None:
            return None
        try:
            it = cf.iter(self._read_options)
            if start:
                it.seek(start)
            else:
                it.seek_to_first()
        except FStateError:
            raise
        except Exception as e:
            raise self.read_error(column_family, e) from None
        return it

    def live_tables(self) -> list[LiveTable] | None:
        """Every live table file (the MANIFEST's, as RocksDB reports them: by column family, level, and
        in a level in RocksDB's order); None when the database holds entries outside its table files
        (a write-ahead log with data, blob files), which only RocksDB reads."""
        self._require_open()
        sources = dict(self.source.files)
        for name, src in self.source.files:
            if name.endswith(".blob") or (name.endswith(".log") and os.path.getsize(os.path.join(self.path, name))):
                return None
        manifest = self.manifest() if self._db is None else None
        if manifest is not None:
            live = [(table.name, family.name, table.level, table.smallest, table.largest)
                    for family in manifest.families for table in family.live()]
        else:
            try:
                live = [(entry["name"].lstrip("/"), None, entry["level"], entry["start_key"], entry["end_key"])
                        for entry in self._database().live_files()]
            except FStateError:
                raise
            except Exception as e:
                raise CorruptStateError(f"RocksDB cannot list the snapshot's files ({e})", self.source.label) from None
        out = []
        for name, family, level, smallest, largest in live:
            src = sources.get(name)
            if src is None:
                raise CorruptStateError(f"the MANIFEST names table file {name}, which the snapshot does not hold",
                                        self.source.label)
            inline = f"{self.source.label} ({src.label})" if src.label else self.source.label
            out.append(LiveTable(name, os.path.join(self.path, name), src.path or inline, level, smallest, largest,
                                 family))
        return out

    def read_error(self, column_family: str, e: Exception) -> Exception:
        """The error to raise for ``e``, raised by a cursor of ``column_family``."""
        if type(e).__name__ == "DbClosedError" or self._db is None:
            return RuntimeError("the RocksDB snapshot was closed while reading it")
        return CorruptStateError(f"RocksDB cannot read column family '{column_family}' ({e})", self.source.label)

    def items(self, column_family: str, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of one column family in key order, from ``start``. Errors (a corrupt
        file, a merge that cannot be applied) raise instead of ending the iteration early."""
        it = self.cursor(column_family, start)
        if it is None:
            return
        try:
            valid, key, value, step = it.valid, it.key, it.value, it.next
            while valid():
                yield key(), value()
                step()
            it.status()
        except FStateError:
            raise
        except Exception as e:
            raise self.read_error(column_family, e) from None


@dataclass(frozen=True)
class LiveTable:
    """A live table file of an open snapshot."""

    name: str  # its RocksDB name
    path: str  # in the snapshot's temporary directory
    origin: str  # the file it came from: its path, or where its bytes are inline
    level: int
    smallest: bytes  # its first and last user keys (the MANIFEST's)
    largest: bytes
    #: its column family (the MANIFEST's replay); None when RocksDB listed it (the table's own properties name it)
    column_family: str | None = None


def _escape_option(s: str) -> str:
    out = []
    for c in s:
        if c in "\\#:\r\n":
            out.append("\\" + {"\n": "n", "\r": "r"}.get(c, c))
        else:
            out.append(c)
    return "".join(out)


def _manifest_number(name: str) -> int:
    number = name.partition("-")[2]
    return int(number) if number.isdigit() else -1


def open_snapshot(source: RocksDBSource, *, tmp_dir: str | None = None, io: FileIO | None = None,
                  reference: bool = False) -> RocksDBSnapshot:
    """A :class:`RocksDBSnapshot` to use in a ``with`` block (``reference``: see the class)."""
    return RocksDBSnapshot(source, tmp_dir=tmp_dir, io=io, reference=reference)


# ---------------------------------------------------------------------------------------------
# entries


def key_group_prefix_bytes(kg: int, prefix: int) -> bytes:
    return bytes((kg,)) if prefix == 1 else bytes(((kg >> 8) & 0xFF, kg & 0xFF))


def _key_group(kb: bytes, prefix: int) -> int:
    """The key group of a key's prefix; a key shorter than its prefix (corrupt: only a 1-byte key
    with a 2-byte prefix can come after a key group's first key) gets the first one it sorts in.
    The columnar decoder computes the same (pair_key_group in _columnar_native.h)."""
    if len(kb) >= prefix:
        return kb[0] if prefix == 1 else (kb[0] << 8) | kb[1]
    return kb[0] << 8 if kb else 0


def key_group_runs(wanted: Iterable[int] | None, lo: int, hi: int) -> list[tuple[int, int]]:
    """Contiguous key-group ranges to read within [lo, hi]."""
    if wanted is None:
        return [(lo, hi)] if lo <= hi else []
    kgs = sorted({k for k in wanted if lo <= k <= hi})
    out: list[tuple[int, int]] = []
    for k in kgs:
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def state_pairs(db: RocksDBSnapshot, name: str, runs, prefix: int, source: str | None
                ) -> Iterator[tuple[int, bytes, bytes]]:
    """(key group, key bytes, value bytes) of one state's column family in the key-group ``runs``
    (:func:`key_group_runs`), in key order."""
    for lo, hi in runs:
        for kb, vb in db.items(name, key_group_prefix_bytes(lo, prefix)):
            kg = _key_group(kb, prefix)
            if kg > hi:
                break
            if len(kb) < prefix:
                raise CorruptStateError(f"state '{name}', key group {kg}: the key {kb.hex()} is shorter than its "
                                        f"key-group prefix", source)
            yield kg, kb, vb


def decode_pair(codec: keyed.StateCodec, kg: int, kb: bytes, vb: bytes, source: str | None
                ) -> tuple[bytes, Any, Any, Any]:
    """One stored pair of a state's column family decoded: (identity, key, namespace, value)."""
    if codec.canonical is None:
        raise UnsupportedSerializerError(f"state '{codec.info.name}' has types fstate cannot decode", source)
    try:
        return codec.canonical(kb, vb)
    except DECODE_ERRORS as e:
        raise CorruptStateError(f"state '{codec.info.name}', key group {kg}: cannot decode the entry "
                                f"{kb.hex()} ({e})", source) from None


def _state_entries(db: RocksDBSnapshot, sid: int, codec: keyed.StateCodec, runs, prefix: int,
                   source: str | None) -> Iterator[keyed.Entry]:
    for kg, kb, vb in state_pairs(db, codec.info.name, runs, prefix, source):
        ident, key, ns, value = decode_pair(codec, kg, kb, vb, source)
        yield sid, kg, ident, key, ns, value


def iter_entries(db: RocksDBSnapshot, meta: keyed.KeyedBackendMeta, max_parallelism: int, *,
                 codecs: list | None = None, key_groups: Iterable[int] | None = None,
                 states: set[int] | None = None, source: str | None = None) -> Iterator[keyed.Entry]:
    """Every entry of the selected states in the selected key groups (within the handle's range),
    as :meth:`.keyed_state.KeyedState.entries` yields them for the canonical layout: (state id, key group,
    identity, key, namespace, value), ordered by key group, then state id, then key bytes. MAP
    states yield one entry per map entry (value = (user key, user value)); timers value = timestamp.
    A state of the proxy without a column family has no entries."""
    source = source or db.source.label
    if codecs is None:
        codecs = keyed.state_codecs(meta, max_parallelism, source)
    prefix = keyed.key_group_prefix_size(max_parallelism)
    runs = key_group_runs(key_groups, db.source.start_key_group, db.source.end_key_group)
    present = set(db.column_families)
    streams = [_state_entries(db, sid, c, runs, prefix, source) for sid, c in enumerate(codecs)
               if (states is None or sid in states) and c.info.name in present]
    if not streams:
        return iter(())
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=itemgetter(1))
