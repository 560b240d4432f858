"""A RocksDB snapshot's live table files read from its MANIFEST, without RocksDB: what rocksdict's
``list_cf`` and ``live_files`` report (the column families, and each live table file's column family,
level and smallest and largest user key), for the C table reader (:mod:`.rocksdb_native`), so the fast
path opens no RocksDB database.

The MANIFEST is a log file: 32 KiB blocks of records, a record (7-byte header: masked CRC32C of its
type and payload, uint16 length, type; the recyclable types' 11-byte header adds the uint32 number of
the log) a whole logical record (FULL) or its FIRST, MIDDLE and LAST fragments; fewer than a header's
bytes at a block's end are padding. Each logical record is a VersionEdit: (varint tag, payload)...,
applied in order to the column family it names (tag 200; ``default`` without one): table files
deleted (6, level and file number), then added (7, 100, 102, 103: level, number, size, smallest and
largest internal key, sequence numbers; 103's custom fields end with tag 1, each length-prefixed, a
field RocksDB must know has bit 6 set), column families added (201) and dropped (202), atomic groups
(300: applied when complete). Tags with bit 13 set are length-prefixed and may be ignored.

Anything this replay does not read exactly as RocksDB would is :class:`Unsupported` and left to
RocksDB (rocksdict, the reference and the fallback): a required tag or field it does not know, blob
files, WAL records it cannot skip, another comparator, table files under another path, an unfinished
atomic group. So is a damaged MANIFEST (a checksum, a torn or malformed record, an edit that cannot
apply): how a damaged MANIFEST is read depends on RocksDB's version and recovery mode, so RocksDB
decides (and its error names the snapshot); the fast path never reads what the reference would not.
tests/savepoint/test_rocksdb_manifest.py compares the replay with rocksdict's ``live_files``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._compiled import compiled_extension

ABI = 4  # the interface version of _sst.c (savepoint/_sst.c) this package speaks
#: the C table reader (also the MANIFEST's checksums); None when it is not built
sst = compiled_extension("_sst", ABI)

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
RECYCLABLE = 4  # the recyclable types are FULL..LAST + 4, with the log number in their header
ZERO = 0  # preallocated (zeroed) space: the rest of the block is empty
BYTEWISE = b"leveldb.BytewiseComparator"

# VersionEdit tags
COMPARATOR, LOG_NUMBER, NEXT_FILE_NUMBER, LAST_SEQUENCE, COMPACT_CURSOR, DELETED_FILE, NEW_FILE = 1, 2, 3, 4, 5, 6, 7
PREV_LOG_NUMBER, MIN_LOG_NUMBER_TO_KEEP = 9, 10
NEW_FILE2, NEW_FILE3, NEW_FILE4 = 100, 102, 103
COLUMN_FAMILY, COLUMN_FAMILY_ADD, COLUMN_FAMILY_DROP, MAX_COLUMN_FAMILY = 200, 201, 202, 203
IN_ATOMIC_GROUP = 300
SAFE_IGNORE = 1 << 13  # a tag with this bit: length-prefixed, may be skipped
#: ignorable tags that are nevertheless not length-prefixed (the first WAL records, replaced by later tags)
WAL_ADDITION, WAL_DELETION = SAFE_IGNORE + 4, SAFE_IGNORE + 5

# NewFile4's custom fields
TERMINATE, OLDEST_BLOB_FILE_NUMBER, EPOCH_NUMBER, USER_TIMESTAMPS_PERSISTED = 1, 4, 13, 16
NON_SAFE_IGNORE = 1 << 6  # a custom field with this bit must be known
PATH_ID = NON_SAFE_IGNORE + 1


class Unsupported(Exception):
    """What RocksDB itself must read (see the module doc); internal, never reaches the user."""


@dataclass(frozen=True)
class TableFile:
    """A live table file as the MANIFEST records it."""

    number: int
    level: int
    smallest: bytes  # its first and last user keys
    largest: bytes
    smallest_seqno: int
    largest_seqno: int
    epoch: int  # RocksDB 7.10+'s L0 order (0: not recorded)
    smallest_trailer: int  # the sequence number and type of the smallest internal key (level order)

    @property
    def name(self) -> str:
        return f"{self.number:06d}.sst"


@dataclass
class ColumnFamily:
    id: int
    name: str
    files: dict[int, TableFile] = field(default_factory=dict)  # number → file

    def live(self) -> list[TableFile]:
        """Its files as RocksDB lists them: by level, L0 newest first, a later level by smallest key."""
        out = []
        for level in sorted({f.level for f in self.files.values()}):
            files = [f for f in self.files.values() if f.level == level]
            if level == 0:
                files.sort(key=lambda f: (f.epoch, f.largest_seqno, f.smallest_seqno, f.number), reverse=True)
            else:
                files.sort(key=lambda f: (f.smallest, -f.smallest_trailer, f.number))
            out += files
        return out


@dataclass(frozen=True)
class Manifest:
    """The column families (RocksDB's order: the order they were added, ``default`` first) and their
    live table files."""

    families: tuple[ColumnFamily, ...]

    @property
    def names(self) -> list[str]:
        return [family.name for family in self.families]


# ---------------------------------------------------------------------------------------------
# the log


def records(data: bytes, number: int) -> list[bytes]:
    """The logical records of a log file (``number``: the one in its name, which recyclable records
    carry)."""
    if sst is None:
        raise Unsupported("the C table reader is not built")
    crc = sst.masked_crc32c
    view = memoryview(data)
    out: list[bytes] = []
    pending: list[bytes] | None = None  # the fragments of the record being read
    pos, size = 0, len(data)
    while pos < size:
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left  # the block's trailer
            continue
        if size - pos < 7:
            raise Unsupported(f"a record header torn at byte {pos}")
        length = data[pos + 4] | data[pos + 5] << 8
        kind = data[pos + 6]
        header = 7
        if FULL + RECYCLABLE <= kind <= LAST + RECYCLABLE:
            header = 11
            if left < header or size - pos < header:
                raise Unsupported(f"a record header torn at byte {pos}")
            if int.from_bytes(data[pos + 7:pos + 11], "little") != number & 0xFFFFFFFF:
                raise Unsupported(f"a record of another log at byte {pos}")
            kind -= RECYCLABLE
        elif kind == ZERO and length == 0:
            if pending is not None:
                raise Unsupported(f"an empty record inside a fragmented one at byte {pos}")
            pos += left
            continue
        if not FULL <= kind <= LAST:
            raise Unsupported(f"a record of type {kind} at byte {pos}")
        end = pos + header + length
        if end > pos + left or end > size:
            raise Unsupported(f"a record of {length} bytes torn at byte {pos}")
        stored = int.from_bytes(data[pos:pos + 4], "little")
        if crc(view[pos + 6:end]) != stored:  # the type, a recyclable record's log number, the payload
            raise Unsupported(f"the record at byte {pos} does not match its checksum")
        payload = bytes(view[pos + header:end])
        pos = end
        if kind == FULL:
            if pending is not None:
                raise Unsupported(f"a whole record inside a fragmented one at byte {end - length - header}")
            out.append(payload)
        elif kind == FIRST:
            if pending is not None:
                raise Unsupported(f"a first fragment inside a fragmented record at byte {end - length - header}")
            pending = [payload]
        else:
            if pending is None:
                raise Unsupported(f"a fragment without its first at byte {end - length - header}")
            pending.append(payload)
            if kind == LAST:
                out.append(b"".join(pending))
                pending = None
    if pending is not None:
        raise Unsupported("the last record is torn")
    return out


# ---------------------------------------------------------------------------------------------
# the edits


def _varint(data: bytes, pos: int, limit: int = 64) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift >= limit:
            raise Unsupported("a varint past the end of an edit")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> limit:
                raise Unsupported("a varint too large")
            return value, pos
        shift += 7


def _slice(data: bytes, pos: int) -> tuple[bytes, int]:
    length, pos = _varint(data, pos, 32)
    if pos + length > len(data):
        raise Unsupported("a length-prefixed field past the end of an edit")
    return data[pos:pos + length], pos + length


def _internal_key(data: bytes, pos: int) -> tuple[bytes, int, int]:
    """(user key, trailer: sequence number << 8 | type, position after it)"""
    key, pos = _slice(data, pos)
    if len(key) < 8:
        raise Unsupported("an internal key shorter than 8 bytes")
    return key[:-8], int.from_bytes(key[-8:], "little"), pos


#: the numbers a MANIFEST must set somewhere (RocksDB refuses one without them)
REQUIRED = frozenset((NEXT_FILE_NUMBER, LOG_NUMBER, LAST_SEQUENCE))
#: RocksDB's default number of levels (the one a read-only open with our OPTIONS file uses)
LEVELS = 7


@dataclass
class Edit:
    """What of one VersionEdit changes the live files and column families."""

    family: int = 0
    added: list[TableFile] = field(default_factory=list)
    deleted: list[tuple[int, int]] = field(default_factory=list)  # (level, number)
    add_family: str | None = None
    drop_family: bool = False
    comparator: bytes | None = None
    atomic_remaining: int | None = None
    #: which of the numbers RocksDB requires of a MANIFEST (:data:`REQUIRED`) it sets
    numbers: set[int] = field(default_factory=set)


def _new_file(data: bytes, pos: int, tag: int) -> tuple[TableFile, int]:
    level, pos = _varint(data, pos, 32)
    if level >= LEVELS:
        raise Unsupported(f"a table file on level {level}")
    number, pos = _varint(data, pos)
    if tag == NEW_FILE3:
        path_id, pos = _varint(data, pos, 32)
        if path_id:
            raise Unsupported("a table file under another path")
    _, pos = _varint(data, pos)  # its size
    smallest, smallest_trailer, pos = _internal_key(data, pos)
    largest, largest_trailer, pos = _internal_key(data, pos)
    smallest_seqno = largest_seqno = epoch = 0
    if tag != NEW_FILE:
        smallest_seqno, pos = _varint(data, pos)
        largest_seqno, pos = _varint(data, pos)
    if tag == NEW_FILE4:
        while True:
            custom, pos = _varint(data, pos, 32)
            if custom == TERMINATE:
                break
            value, pos = _slice(data, pos)
            if custom == EPOCH_NUMBER:
                epoch = _varint(value, 0)[0]
            elif custom == PATH_ID:
                if len(value) != 1:
                    raise Unsupported("a path id that is not one byte")
                if value[0]:
                    raise Unsupported("a table file under another path")
            elif custom == OLDEST_BLOB_FILE_NUMBER:
                if _varint(value, 0)[0]:
                    raise Unsupported("a table file referencing blob files")
            elif custom == USER_TIMESTAMPS_PERSISTED:
                if value != b"\x01":
                    raise Unsupported("a table file without its user-defined timestamps")
            elif custom & NON_SAFE_IGNORE:
                raise Unsupported(f"a table file's field {custom} RocksDB must know")
    return TableFile(number, level, smallest, largest, smallest_seqno, largest_seqno, epoch, smallest_trailer), pos


def decode_edit(data: bytes) -> Edit:
    """One VersionEdit (the payload of a logical record of the MANIFEST)."""
    edit = Edit()
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos, 32)
        if tag == COMPARATOR:
            edit.comparator, pos = _slice(data, pos)
        elif tag in (LOG_NUMBER, NEXT_FILE_NUMBER, LAST_SEQUENCE, PREV_LOG_NUMBER, MIN_LOG_NUMBER_TO_KEEP):
            _, pos = _varint(data, pos)
            edit.numbers.add(tag)
        elif tag == MAX_COLUMN_FAMILY:
            _, pos = _varint(data, pos, 32)
        elif tag == COMPACT_CURSOR:
            _, pos = _varint(data, pos, 32)
            _, _, pos = _internal_key(data, pos)
        elif tag == DELETED_FILE:
            level, pos = _varint(data, pos, 32)
            number, pos = _varint(data, pos)
            edit.deleted.append((level, number))
        elif tag in (NEW_FILE, NEW_FILE2, NEW_FILE3, NEW_FILE4):
            table, pos = _new_file(data, pos, tag)
            edit.added.append(table)
        elif tag == COLUMN_FAMILY:
            edit.family, pos = _varint(data, pos, 32)
        elif tag == COLUMN_FAMILY_ADD:
            name, pos = _slice(data, pos)
            edit.add_family = name.decode("utf-8", "surrogateescape")
        elif tag == COLUMN_FAMILY_DROP:
            edit.drop_family = True
        elif tag == IN_ATOMIC_GROUP:
            edit.atomic_remaining, pos = _varint(data, pos, 32)
        elif tag & SAFE_IGNORE and tag not in (WAL_ADDITION, WAL_DELETION):
            _, pos = _slice(data, pos)  # the DB id, WAL records, ...: nothing of the live files
        else:
            raise Unsupported(f"a VersionEdit tag {tag}")
    return edit


def replay(edits: list[Edit]) -> Manifest:
    """The column families and live files after ``edits`` in order (an atomic group's edits applied
    when the group is complete)."""
    families: dict[int, ColumnFamily] = {0: ColumnFamily(0, "default")}
    group: list[Edit] = []
    for edit in edits:
        if edit.atomic_remaining is not None:
            if group and group[-1].atomic_remaining != edit.atomic_remaining + 1:
                raise Unsupported("an atomic group whose counts do not follow")
            group.append(edit)
            if edit.atomic_remaining == 0:
                for member in group:
                    _apply(families, member)
                group = []
            continue
        if group:
            raise Unsupported("an edit inside an atomic group")
        _apply(families, edit)
    if group:
        raise Unsupported("an unfinished atomic group")
    missing = REQUIRED - {tag for edit in edits for tag in edit.numbers}
    if missing:
        raise Unsupported(f"no VersionEdit sets the numbers {sorted(missing)}")
    return Manifest(tuple(families.values()))


def _apply(families: dict[int, ColumnFamily], edit: Edit) -> None:
    if edit.comparator is not None and edit.comparator != BYTEWISE:
        raise Unsupported(f"the comparator {edit.comparator!r}")
    if edit.add_family is not None or edit.drop_family:
        if edit.added or edit.deleted or (edit.add_family is not None and edit.drop_family):
            raise Unsupported("a column family added or dropped with table files")
        if edit.drop_family:
            if edit.family == 0 or edit.family not in families:
                raise Unsupported(f"a drop of column family {edit.family}")
            del families[edit.family]
        else:
            if edit.family in families or any(f.name == edit.add_family for f in families.values()):
                raise Unsupported(f"column family {edit.add_family!r} added twice")
            families[edit.family] = ColumnFamily(edit.family, edit.add_family)
        return
    family = families.get(edit.family)
    if family is None:
        if edit.added or edit.deleted:
            raise Unsupported(f"table files of column family {edit.family}, which does not exist")
        return
    files = family.files
    for level, number in edit.deleted:
        found = files.get(number)
        if found is None or found.level != level:
            raise Unsupported(f"a deletion of table file {number} on level {level}, which is not there")
        del files[number]
    for table in edit.added:
        if table.number in files:
            raise Unsupported(f"table file {table.number} added twice")
        files[table.number] = table


def read(data: bytes, name: str) -> Manifest:
    """The live files of the MANIFEST file ``name`` (MANIFEST-<number>) holding ``data``."""
    number = name.partition("-")[2]
    if not number.isdigit():
        raise Unsupported(f"a MANIFEST named {name}")
    return replay([decode_edit(record) for record in records(data, int(number))])
