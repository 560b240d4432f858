"""The keyed-backend serialization proxy: the header of every keyed state stream (Flink's
``KeyedBackendSerializationProxy``): version, compression flag, key serializer snapshot and one
meta info per state. Below both the decoders (keyed_codecs) and the layouts (keyed)."""

from __future__ import annotations

from dataclasses import dataclass

from . import metainfo
from .binary import DataInput, DataOutput
from . import header_search
from .errors import DECODE_ERRORS, FStateError, UnsupportedVersionError
from .metainfo import StateMetaInfo, read_state_meta_info, write_state_meta_info
from .types import TypeInfo
from .types.snapshots import read_serializer_snapshot, write_serializer_snapshot

CURRENT_VERSION = 6


@dataclass
class KeyedBackendMeta:
    version: int
    compressed: bool
    key_type: TypeInfo
    states: list[StateMetaInfo]
    header_size: int = 0

    def state_id(self, name: str) -> int | None:
        return next((i for i, s in enumerate(self.states) if s.name == name), None)

    @property
    def value_states(self) -> list[tuple[int, StateMetaInfo]]:
        return [(i, s) for i, s in enumerate(self.states) if s.backend_type == metainfo.KEY_VALUE]

    @property
    def timer_states(self) -> list[tuple[int, StateMetaInfo]]:
        return [(i, s) for i, s in enumerate(self.states) if s.backend_type == metainfo.PRIORITY_QUEUE]


def read_keyed_proxy(buf: bytes, source: str | None = None, end: int | None = None) -> KeyedBackendMeta:
    """The header at the start of ``buf``. A serializer snapshot fstate cannot parse makes only its
    own serializer opaque (raw bytes) when ``end``, where the header ends (see :func:`header_end`, or
    the length of a RocksDB meta-data stream), is known: see :mod:`.header_search`. Without ``end``,
    or when no unique reading exists, the error names this header only."""
    inp = DataInput(buf, source=source)
    version = inp.read_i32()
    if version != CURRENT_VERSION:
        raise UnsupportedVersionError(
            f"unsupported keyed state backend version {version} (fstate reads {CURRENT_VERSION}, "
            "written by Flink 1.7 and later)", source)
    compressed = inp.read_bool()
    key_start = inp.pos
    try:
        key_type = read_serializer_snapshot(inp)
        n = inp.read_i16()
        if n < 0:
            raise inp.fail(f"negative keyed state count {n}")
        states = [read_state_meta_info(inp) for _ in range(n)]
        return KeyedBackendMeta(version, compressed, key_type, states, inp.pos)
    except (FStateError, *DECODE_ERRORS) as first:
        if end is None:
            raise
        key_type, states = header_search.resolve(buf, end, source, first, lambda finder: finder.keyed(key_start))
        return KeyedBackendMeta(version, compressed, key_type, states, end)


def header_end(offsets, stream_length: int | None = None) -> int | None:
    """Where a key-group stream's header ends: its first non-empty key group's offset (offset 0
    marks an empty key group); with no key group stored, the stream is the header alone."""
    return min((o for o in offsets if o), default=stream_length)


def write_keyed_proxy(out: DataOutput, meta: KeyedBackendMeta) -> None:
    out.write_i32(CURRENT_VERSION)
    out.write_bool(meta.compressed)
    write_serializer_snapshot(out, meta.key_type)
    out.write_i16(len(meta.states))
    for s in meta.states:
        write_state_meta_info(out, s)
