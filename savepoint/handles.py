"""State handles: the pointers in `_metadata` that say where state bytes live.

Every handle kind Flink 1.11–2.3 writes is modelled here; savepoint/handle_codec.py reads and
writes them (byte for byte), savepoint/streams.py resolves stream handles to bytes (relative file
handles against the directory that holds `_metadata`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import limits

# ---------------------------------------------------------------------------------------------
# tags

NULL = 0
BYTE_STREAM = 1
FILE = 2
KEY_GROUPS_V1 = 3
PARTITIONABLE_OPERATOR = 4
INCREMENTAL_V1 = 5
RELATIVE_FILE = 6
SAVEPOINT_KEY_GROUPS = 7
CHANGELOG_BACKEND_V1 = 8
IN_MEMORY_CHANGELOG = 9
CHANGELOG_STREAM_V1 = 10
INCREMENTAL_V2 = 11
KEY_GROUPS_V2 = 12
CHANGELOG_STREAM_V2 = 13
CHANGELOG_BACKEND_V2 = 14
SEGMENT_FILE = 15
EMPTY_SEGMENT_FILE = 16
FILE_MERGING_OPERATOR = 17

# Defensive limits: a corrupted count must not make us allocate gigabytes.
MAX_KEY_GROUPS = limits.MAX_KEY_GROUPS


# ---------------------------------------------------------------------------------------------
# stream handles


@dataclass(frozen=True)
class ByteStreamHandle:
    """State bytes inlined in `_metadata` (the name is an opaque label, never a file)."""

    name: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def describe(self) -> str:
        return f"inline ({len(self.data)} bytes)"


@dataclass(frozen=True)
class FileHandle:
    """An absolute file path (Flink's `Path` text form, e.g. ``file:/data/x``)."""

    path: str
    size: int

    def describe(self) -> str:
        return self.path


@dataclass(frozen=True)
class RelativeFileHandle:
    """A file relative to the directory holding `_metadata`."""

    relative_path: str
    size: int

    def describe(self) -> str:
        return self.relative_path


@dataclass(frozen=True)
class SegmentFileHandle:
    """A byte range of a merged physical file (file merging, Flink 1.20+)."""

    start: int
    size: int
    scope: int  # 0 EXCLUSIVE, 1 SHARED
    physical_path: str
    logical_file_id: str

    def describe(self) -> str:
        return f"{self.physical_path}[{self.start}:{self.start + self.size}]"


@dataclass(frozen=True)
class EmptySegmentFileHandle:
    size: int = 0

    def describe(self) -> str:
        return "empty segment"


StreamHandle = ByteStreamHandle | FileHandle | RelativeFileHandle | SegmentFileHandle | EmptySegmentFileHandle


# ---------------------------------------------------------------------------------------------
# keyed handles


@dataclass(frozen=True)
class KeyGroupsHandle:
    """Key-group handle: offsets of every key group of a range inside one stream.

    ``tag`` tells the layout: 7 = canonical savepoint layout; 12 / 3 = heap-native layout
    (hashmap checkpoints and native savepoints).
    """

    tag: int
    start_key_group: int
    offsets: tuple[int, ...]
    delegate: StreamHandle | None
    handle_id: str | None = None

    @property
    def end_key_group(self) -> int:
        """Inclusive end of the key-group range."""
        return self.start_key_group + len(self.offsets) - 1

    @property
    def canonical(self) -> bool:
        return self.tag == SAVEPOINT_KEY_GROUPS

    @property
    def size(self) -> int:
        return stream_size(self.delegate)


@dataclass(frozen=True)
class IncrementalKeyedHandle:
    """RocksDB incremental checkpoint / native savepoint: SST and private files."""

    tag: int
    checkpoint_id: int
    backend_identifier: str
    start_key_group: int
    num_key_groups: int
    checkpointed_size: int
    metadata_state: StreamHandle | None
    shared: tuple[tuple[str, StreamHandle | None], ...]
    private: tuple[tuple[str, StreamHandle | None], ...]
    handle_id: str | None = None

    @property
    def end_key_group(self) -> int:
        return self.start_key_group + self.num_key_groups - 1

    @property
    def size(self) -> int:
        return (stream_size(self.metadata_state) + sum(stream_size(h) for _, h in self.shared)
                + sum(stream_size(h) for _, h in self.private))


@dataclass(frozen=True)
class ChangelogBackendHandle:
    tag: int
    start_key_group: int
    num_key_groups: int
    checkpointed_size: int
    materialized: tuple
    non_materialized: tuple
    materialization_id: int
    checkpoint_id: int
    handle_id: str

    @property
    def end_key_group(self) -> int:
        return self.start_key_group + self.num_key_groups - 1

    @property
    def size(self) -> int:
        return sum(getattr(h, "size", 0) for h in self.materialized + self.non_materialized)


@dataclass(frozen=True)
class InMemoryChangelogHandle:
    start_key_group: int
    num_key_groups: int
    sequence_from: int
    sequence_to: int
    changes: tuple[tuple[int, bytes], ...]
    handle_id: str

    @property
    def size(self) -> int:
        return sum(len(b) for _, b in self.changes)


@dataclass(frozen=True)
class ChangelogStreamHandle:
    tag: int
    start_key_group: int
    num_key_groups: int
    handles: tuple[tuple[int, StreamHandle | None], ...]
    state_size: int
    checkpointed_size: int
    handle_id: str
    storage_identifier: str

    @property
    def size(self) -> int:
        return self.state_size


KeyedHandle = KeyGroupsHandle | IncrementalKeyedHandle | ChangelogBackendHandle | InMemoryChangelogHandle | ChangelogStreamHandle


# ---------------------------------------------------------------------------------------------
# operator handles

MODE_NAMES = ("SPLIT_DISTRIBUTE", "UNION", "BROADCAST")


@dataclass(frozen=True)
class StateOffsets:
    mode: int
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStreamHandle:
    """Operator (list / union / broadcast) state of one subtask: per-state offsets into one stream."""

    states: dict[str, StateOffsets]
    delegate: StreamHandle | None
    tag: int = PARTITIONABLE_OPERATOR
    task_owned_dir: str | None = None  # file-merging handle (tag 17) only
    shared_dir: str | None = None
    is_empty: bool = False

    @property
    def size(self) -> int:
        return stream_size(self.delegate)


# ---------------------------------------------------------------------------------------------
# channel state (unaligned checkpoints): parsed to walk the file, kept opaque otherwise


@dataclass(frozen=True)
class ChannelStateHandle:
    tag: int  # 0 = untagged (V3–V5), else V6 tag
    subtask_index: int
    info: tuple[int, int] | None
    offsets: tuple[int, ...]
    state_size: int
    delegate: StreamHandle | None
    merged_offsets: bytes = b""

    @property
    def size(self) -> int:
        return self.state_size


def stream_size(h) -> int:
    if h is None:
        return 0
    return h.size
