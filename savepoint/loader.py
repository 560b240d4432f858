"""Opening a savepoint: `_metadata` plus lazy access to each operator's state (the core's entry point)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterator, TypeVar

from . import atomic
from . import handles
from . import header_search
from . import streams
from . import keyed
from . import keyed_state
from . import operator as operator_state
from . import rocksdb
from .errors import CorruptStateError, FStateError, MissingStateFileError, UnknownOperatorError, UnknownStateError, UnsupportedSerializerError
from .io import FileIO, SavepointLocation, io_for, is_remote, locate, resolve_fs_options, strip_file_scheme
from .io.policy import PathPolicy
from .metadata import CheckpointMetadata, OperatorState, read_metadata
from .metainfo import StateMetaInfo
from . import sql_plan
from .types.hashing import operator_id_for_uid, parse_operator_id

R = TypeVar("R")
_HEADER_PROBE = 64 * 1024


@dataclass(frozen=True)
class StateDescription:
    """One state of an operator, as `fstate info` shows it."""

    name: str
    backend: str  # 'keyed', 'operator', 'broadcast', 'timers'
    kind: str  # VALUE/LIST/MAP/REDUCING/AGGREGATING, SPLIT_DISTRIBUTE/UNION/BROADCAST, TIMERS
    type_name: str
    key_type: str | None
    namespace: str | None
    warnings: tuple[str, ...] = ()


class Savepoint:
    """A savepoint or checkpoint directory, opened read-only."""

    def __init__(self, location: SavepointLocation, metadata: CheckpointMetadata, *, allow_external_paths: bool = False,
                 checkpoint_base_dir: str | None = None, fs_options: tuple = ()):
        self.location = location
        #: file-system options in force (see savepoint/io/); every remote StreamSource carries them
        self.fs_options = fs_options
        self.metadata = metadata
        self.allow_external_paths = allow_external_paths
        #: new location of the job's checkpoint directory (``shared/``, ``chk-N/``) when it moved
        self.checkpoint_base_dir = checkpoint_base_dir

    @classmethod
    def open(cls, path: str, *, allow_external_paths: bool = False,
             checkpoint_base_dir: str | None = None, fs_options=None) -> "Savepoint":
        """``fs_options``: file-system options for remote paths (endpoint, region, credentials, ...)."""
        opts = resolve_fs_options(fs_options)
        loc = locate(path, opts)
        if not is_remote(loc.directory):
            atomic.sweep_near(loc.directory)  # what killed fstate writers left beside it, said in one line each
        data = loc.io.read(loc.metadata_path)
        return cls(loc, read_metadata(data, loc.metadata_path), allow_external_paths=allow_external_paths,
                   checkpoint_base_dir=checkpoint_base_dir, fs_options=opts)

    @property
    def path(self) -> str:
        return self.location.directory

    @property
    def io(self) -> FileIO:
        return self.location.io

    @cached_property
    def operators(self) -> list["OperatorView"]:
        return [OperatorView(self, op) for op in self.metadata.operators]

    def operator(self, uid_or_hash: str) -> "OperatorView":
        """Find an operator by uid (as given to ``.uid()``) or by its 32-hex-digit uid hash."""
        for op in self.operators:
            if op.uid is not None and op.uid == uid_or_hash:
                return op
        wanted = [operator_id_for_uid(uid_or_hash)]
        raw = parse_operator_id(uid_or_hash)
        if raw is not None:
            wanted.append(raw)
        for op in self.operators:
            if op.state.operator_id in wanted:
                return op
        by_name = [op for op in self.operators if uid_or_hash in _sql_names(op)]
        if len(by_name) == 1:  # an SQL operator without uid, by name: GroupAggregate[4] or group_aggregate_4
            return by_name[0]
        known = ", ".join(o.display_name for o in self.operators) or "none"
        raise UnknownOperatorError(f"no operator with uid or uid hash '{uid_or_hash}' (operators: {known})",
                                   self.location.metadata_path)

    # -- bytes -------------------------------------------------------------------------------
    def stream_source(self, handle) -> streams.StreamSource:
        src = self._stream_source(handle)
        if self.fs_options and src.path is not None and is_remote(src.path):
            src = dataclasses.replace(src, fs_options=self.fs_options)
        return src

    @cached_property
    def path_policy(self) -> PathPolicy:
        """Which files this snapshot's handles may name (see :mod:`.io.policy`): its directory, for a
        ``chk-N`` also the job's ``shared/`` and ``taskowned/``, and ``checkpoint_base_dir``."""
        return PathPolicy.for_snapshot(self.path, allow_external=self.allow_external_paths,
                                       checkpoint_base_dir=self.checkpoint_base_dir)

    def _stream_source(self, handle) -> streams.StreamSource:
        if not isinstance(handle, (handles.FileHandle, handles.SegmentFileHandle)):
            return streams.stream_source(handle, self.path, policy=self.path_policy)
        # absolute paths: follow a moved checkpoint directory, then apply the path policy
        src = streams.relocate_source(streams.stream_source(handle, self.path, allow_external=True), self.path,
                                self.checkpoint_base_dir)
        hint = streams.moved_hint(src.path, self.path) if src.path is not None else None
        if hint is not None:
            raise MissingStateFileError(f"state file does not exist; {hint}", src.path)
        if not self.allow_external_paths and src.path is not None and (
                is_remote(src.path) or io_for(src.path).exists(src.path) or os.path.islink(src.path)):
            # (a missing local file is reported as missing when read)
            original = handle.path if isinstance(handle, handles.FileHandle) else handle.physical_path
            shown = original if src.path in (original, strip_file_scheme(original)) else f"{original} (found at {src.path})"
            self.path_policy.check(src.path, shown)
        return src

    def read_stream(self, handle) -> bytes:
        return streams.read_source(self.stream_source(handle), self.io)

    def read_header(self, handle, parse: Callable[[bytes], R]) -> R:
        """Parse a stream's header without reading a large file whole (probe, then widen)."""
        src = self.stream_source(handle)
        if src.path is None or src.length is None or src.length <= _HEADER_PROBE:
            return parse(streams.read_source(src, self.io))
        size = _HEADER_PROBE
        while True:
            data = streams.source_io(src, self.io).read_range(src.path, src.start, min(size, src.length))
            try:
                return parse(data)
            except CorruptStateError:
                if size >= src.length:
                    raise
                size *= 4


class OperatorView:
    """One operator of a savepoint: identity, parallelism, and its state."""

    def __init__(self, savepoint: Savepoint, state: OperatorState):
        self.savepoint = savepoint
        self.state = state

    # -- identity ----------------------------------------------------------------------------
    @property
    def uid(self) -> str | None:
        return self.state.uid

    @property
    def name(self) -> str | None:
        return self.state.name

    @property
    def uid_hash(self) -> str:
        return self.state.uid_hash

    @property
    def display_name(self) -> str:
        return self.uid or self.uid_hash

    @property
    def parallelism(self) -> int:
        return self.state.parallelism

    @property
    def max_parallelism(self) -> int:
        return self.state.max_parallelism

    @property
    def source(self) -> str:
        return f"{self.savepoint.location.metadata_path} (operator {self.display_name})"

    # -- handles -----------------------------------------------------------------------------
    def operator_handles(self) -> list[tuple[int, handles.OperatorStreamHandle]]:
        return [(i, s.managed_operator) for i, s in sorted(self.state.subtasks.items())
                if s.managed_operator is not None]

    def keyed_handles(self) -> list[tuple[int, Any]]:
        return [(i, s.managed_keyed) for i, s in sorted(self.state.subtasks.items()) if s.managed_keyed is not None]

    def key_group_handles(self) -> list[tuple[int, handles.KeyGroupsHandle]]:
        """Key-group stream handles (canonical and heap layouts); an error for other layouts. To
        read keyed state in any layout use :meth:`keyed_states`."""
        out = []
        for i, h in self.keyed_handles():
            if isinstance(h, handles.IncrementalKeyedHandle):
                raise FStateError(
                    f"keyed state of operator {self.display_name} is stored as {_handle_kind(h)} (RocksDB "
                    "files), not as key-group streams (keyed_states() reads every layout)",
                    self.savepoint.location.metadata_path)
            if not isinstance(h, handles.KeyGroupsHandle):
                raise FStateError(
                    f"keyed state of operator {self.display_name} is stored as {_handle_kind(h)}, "
                    "which fstate cannot decode yet", self.savepoint.location.metadata_path)
            if h.delegate is not None:
                out.append((i, h))
        return out

    def readable_keyed_handles(self) -> list[tuple[int, handles.KeyGroupsHandle | handles.IncrementalKeyedHandle]]:
        """Keyed handles fstate reads: key-group streams and RocksDB incremental/native snapshots
        (an error for other layouts, e.g. changelog)."""
        out = []
        for i, h in self.keyed_handles():
            if isinstance(h, handles.IncrementalKeyedHandle):
                out.append((i, h))
            elif not isinstance(h, handles.KeyGroupsHandle):
                raise FStateError(
                    f"keyed state of operator {self.display_name} is stored as {_handle_kind(h)}, "
                    "which fstate cannot decode yet", self.savepoint.location.metadata_path)
            elif h.delegate is not None:
                out.append((i, h))
        return out

    def keyed_states(self) -> list[keyed_state.KeyedStateSource]:
        """Where each subtask's keyed state lives, whatever its layout (key-group streams, RocksDB
        snapshots; an error for layouts fstate cannot read): open each with ``.open()``."""
        out = []
        for subtask, h in self.readable_keyed_handles():
            if isinstance(h, handles.IncrementalKeyedHandle):
                out.append(keyed_state.KeyedStateSource(subtask, self.max_parallelism,
                                                        rocksdb=self.rocksdb_source(subtask, h)))
            else:
                out.append(keyed_state.KeyedStateSource(subtask, self.max_parallelism,
                                                        self.savepoint.stream_source(h.delegate), h))
        return out

    def rocksdb_source(self, subtask: int, handle: handles.IncrementalKeyedHandle, *, check: bool = True) -> rocksdb.RocksDBSource:
        """Where the RocksDB files of one subtask's incremental/native handle are (checked to exist)."""
        return rocksdb.rocksdb_source(handle, self.savepoint.stream_source,
                                 label=f"{self.source} subtask {subtask}", check=check)

    # -- proxies -----------------------------------------------------------------------------
    @cached_property
    def operator_meta(self) -> operator_state.OperatorBackendMeta | None:
        for _, h in self.operator_handles():
            if h.delegate is not None and h.size > 0:
                stream = self.savepoint.stream_source(h.delegate)
                src = stream.label
                return self.savepoint.read_header(h.delegate, lambda b: operator_state.read_operator_proxy(
                    b, src, operator_state.header_end(h, stream.length or len(b))))
        return None

    @cached_property
    def keyed_meta(self) -> keyed.KeyedBackendMeta | None:
        found = self.keyed_handles()
        for _, h in found:
            if isinstance(h, handles.KeyGroupsHandle) and h.delegate is not None:
                src = self.savepoint.stream_source(h.delegate).label
                length = self.savepoint.stream_source(h.delegate).length
                return self.savepoint.read_header(h.delegate, lambda b: keyed.read_keyed_proxy(
                    b, src, keyed.header_end(h.offsets, length or len(b))))
            if isinstance(h, handles.IncrementalKeyedHandle) and h.metadata_state is not None:
                # the meta-data stream of a RocksDB snapshot is the keyed-backend proxy alone
                stream = self.savepoint.stream_source(h.metadata_state)
                src = stream.label
                return self.savepoint.read_header(
                    h.metadata_state, lambda b: keyed.read_keyed_proxy(b, src, stream.length or len(b)))
        return None

    @property
    def has_keyed_state(self) -> bool:
        return bool(self.keyed_handles())

    @property
    def keyed_layout(self) -> str | None:
        hs = [h for _, h in self.keyed_handles()]
        if not hs:
            return None
        return _handle_kind(hs[0])

    def describe_states(self) -> list[StateDescription]:
        out: list[StateDescription] = []
        try:
            om = self.operator_meta
        except UnsupportedSerializerError as e:  # contained to this operator's operator state
            om = None
            out.append(StateDescription("(operator state)", "operator", "?", "?", None, None,
                                        (f"operator-state header not decoded: {e.detail}",)))
        if om is not None:
            for s in om.states:
                backend = "broadcast" if s.kind == "BROADCAST" else "operator"
                out.append(StateDescription(s.name, backend, s.kind, s.type_name(),
                                            s.key_type.name if s.key_type else None, None, _warnings(s)))
        if self.has_keyed_state and not all(isinstance(h, (handles.KeyGroupsHandle, handles.IncrementalKeyedHandle))
                                            for _, h in self.keyed_handles()):
            out.append(StateDescription("(keyed state)", "keyed", self.keyed_layout or "?", "?", None, None,
                                        (f"stored as {self.keyed_layout}: not decoded yet",)))
            return out
        try:
            km = self.keyed_meta
        except UnsupportedSerializerError as e:
            # contained to this operator: the others are still listed
            out.append(StateDescription("(keyed state)", "keyed", "?", "?", None, None,
                                        (f"keyed-state header not decoded: {e.detail}",)))
            return out
        if km is not None:
            key_warning = _key_warning(km.key_type)
            for s in km.states:
                if s.backend_type == 3:
                    out.append(StateDescription(s.name, "timers", s.kind, s.value_type.name, km.key_type.name,
                                                None, key_warning + _warnings(s)))
                else:
                    ns = s.namespace_type.name
                    out.append(StateDescription(s.name, "keyed", s.kind, s.value_type.name, km.key_type.name,
                                                None if ns == "VoidNamespace" else ns, key_warning + _warnings(s)))
        return out

    def operator_state_info(self, name: str, broadcast: bool) -> StateMetaInfo:
        om = self.operator_meta
        info = om.state(name) if om else None
        if info is None or (info.kind == "BROADCAST") != broadcast:
            kinds = "broadcast" if broadcast else "list/union"
            names = [s.name for s in (om.states if om else []) if (s.kind == "BROADCAST") == broadcast]
            raise UnknownStateError(
                f"operator {self.display_name} has no {kinds} state '{name}' "
                f"({kinds} states: {', '.join(names) or 'none'})", self.savepoint.location.metadata_path)
        return info

    # -- operator state values -----------------------------------------------------------------
    def list_state(self, name: str) -> Iterator[tuple[int, int, Any]]:
        """(subtask, index within the subtask, element) for list and union state."""
        self.operator_state_info(name, broadcast=False)
        for subtask, h in self.operator_handles():
            if h.delegate is None:  # (a subtask without this state is read too: its handle's names are checked)
                continue
            buf = self.savepoint.read_stream(h.delegate)
            src = self.savepoint.stream_source(h.delegate).label
            meta = operator_state.read_operator_proxy(buf, src, operator_state.header_end(h, len(buf)))
            for i, v in enumerate(operator_state.read_list_state(buf, h, meta, name, src)):
                yield subtask, i, v

    def broadcast_state(self, name: str) -> Iterator[tuple[Any, Any]]:
        """(key, value) of broadcast state: one copy (every subtask holds the same)."""
        self.operator_state_info(name, broadcast=True)
        for _, h in self.operator_handles():
            if h.delegate is None or name not in h.states:
                continue
            buf = self.savepoint.read_stream(h.delegate)
            src = self.savepoint.stream_source(h.delegate).label
            meta = operator_state.read_operator_proxy(buf, src, operator_state.header_end(h, len(buf)))
            yield from operator_state.read_broadcast_state(buf, h, meta, name, src)
            return


def _key_warning(key_type) -> tuple[str, ...]:
    if key_type.fully_decodable:
        return ()
    unknown = _unknown_serializers([key_type])
    what = unknown[0] if unknown else f"{key_type.name} cannot be decoded"
    return (f"key serializer: {what}; keys are read as raw bytes",)


def _unknown_serializers(types) -> list[str]:
    return [t.reason[len(header_search.UNKNOWN_REASON) + 2:] for t in types if header_search.is_unresolved(t)]


def _warnings(s: StateMetaInfo) -> tuple[str, ...]:
    bad = s.undecodable
    if not bad:
        return ()
    unknown = _unknown_serializers(s.serializers.values())
    if unknown:
        return (f"{'; '.join(unknown)}; values are read as raw bytes",)
    names = ", ".join(sorted({b.name for b in bad}))
    return (f"values of {names} cannot be decoded; they are read as raw bytes",)


def _handle_kind(h) -> str:
    if isinstance(h, handles.KeyGroupsHandle):
        return "canonical" if h.canonical else "heap-native"
    if isinstance(h, handles.IncrementalKeyedHandle):
        return "RocksDB incremental/native"
    if isinstance(h, (handles.ChangelogBackendHandle, handles.ChangelogStreamHandle, handles.InMemoryChangelogHandle)):
        return "changelog"
    return type(h).__name__


def _sql_names(op: "OperatorView") -> tuple[str, ...]:
    """The names an SQL operator answers to besides its uid and uid hash: its name in ``_metadata``
    (``GroupAggregate[4]``, metadata V5+) and ``<kind>_<node id>`` (``group_aggregate_4``, as views
    name it)."""
    found = sql_plan.sql_operator(op.name, op.uid) if op.name or op.uid else None
    if found is None or found.node_id is None:
        return ()
    return tuple(n for n in (op.name, f"{found.kind.replace('-', '_')}_{found.node_id}") if n)

