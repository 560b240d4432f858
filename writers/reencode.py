"""Keyed state re-encoded into another operator's layout, without Spark.

An upgrade (writers/upgrade.py) carries an operator's keyed state into the operator of another job
or another Flink release whose state differs: other serializers (a field added to a stored row, an
accumulator added or removed, Flink 2.x's nullable POJO fields), other state names, another key
layout, another max parallelism or parallelism. :class:`KeyedReencode` says, per state of the new
operator, which state of the old one it takes its entries from and how each value changes;
:func:`reencode_keyed` decodes the old operator's entries (any layout: canonical, heap-native,
RocksDB), maps them, puts each key into its key group under the new max parallelism and writes one
canonical key-group stream per new subtask (readable by every state backend, as Flink's own
canonical savepoints).

TTL is kept: values decode with their last-access timestamps (``savepoint/ttl_meta.py``), the
mapping sees the user value, and the new value keeps its timestamp; a value that gains TTL counts as
written now, one that loses it drops the timestamp (as Flink 2.2+ converts across a TTL change).

The encoded pairs are spilled to local files by range of key groups (writers/keyed_stream.py,
``KeyGroupSpill``, as the embedded engine's writer does) and each subtask's stream is written from them
a range at a time: memory does not grow with the state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..savepoint import handles, keyed, metainfo
from ..savepoint import operator as operator_state
from ..savepoint.builder import INLINE_THRESHOLD, write_stream
from ..savepoint.errors import ENCODE_ERRORS, InvalidArgumentError, UnsupportedSerializerError
from ..savepoint.ttl_meta import stored_ttl, with_timestamped_states
from ..savepoint.types import TtlValue
from ..savepoint.types.composites import ttl_write_timestamp
from ..savepoint.types.hashing import check_parallelism, key_group_for_hash, key_group_range
from . import keyed_stream

#: A mapping of one value (or list element, or (map key, map value) pair) of the old state to the
#: new state's; returning :data:`DROP` leaves the entry out.
ValueMapping = Callable[[Any], Any]
DROP = object()


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class StateSource:
    """Where one state of the new operator takes its entries from: the old operator's state
    ``name`` (None: the state starts empty), each value passed through ``value``."""

    name: str | None
    value: ValueMapping = _same


@dataclass
class KeyedReencode:
    """The new operator's keyed backend header and, per state of it, its :class:`StateSource`
    (states not named start empty). ``key`` maps an old key to the new one (None: the same)."""

    meta: keyed.KeyedBackendMeta
    states: dict[str, StateSource] = field(default_factory=dict)
    key: ValueMapping | None = None

    def sources(self) -> dict[str, list[tuple[int, StateSource]]]:
        """Old state name → the new states (id, source) fed from it."""
        out: dict[str, list[tuple[int, StateSource]]] = {}
        for sid, info in enumerate(self.meta.states):
            source = self.states.get(info.name)
            if source is not None and source.name is not None:
                out.setdefault(source.name, []).append((sid, source))
        return out


class _StateWriter:
    """Maps and encodes the entries of one old state into one new state. TTL: a mapping sees the
    user value; the new value keeps the old one's last access (or ``now`` when it gains TTL)."""

    def __init__(self, old: metainfo.StateMetaInfo, new_meta: keyed.KeyedBackendMeta, sid: int, source: StateSource,
                 max_parallelism: int, now: int):
        self.sid = sid
        self.new = new_meta.states[sid]
        self.kind = self.new.kind
        self.timer = self.new.backend_type == metainfo.PRIORITY_QUEUE
        if self.timer != (old.backend_type == metainfo.PRIORITY_QUEUE) or (
                not self.timer and old.kind != self.kind):
            raise InvalidArgumentError(f"state '{self.new.name}' ({self.kind}) cannot take the entries of "
                                       f"state '{old.name}' ({old.kind})")
        self.encoder = keyed.PairEncoder(new_meta, sid, max_parallelism)
        self.mapping = source.value
        self.new_ttl = not self.timer and stored_ttl(self.new) is not None
        self.now = now

    def _stored(self, mapped: Any, old: Any) -> Any:
        """A mapped user value as the new state stores it (TTL-wrapped when the new state has TTL)."""
        if not self.new_ttl or mapped is None:
            return mapped
        return TtlValue(mapped, old.last_access_timestamp if isinstance(old, TtlValue) else self.now)

    def _map(self, stored: Any) -> Any:
        """The new stored value of an old stored value or list element (DROP: none)."""
        mapped = self.mapping(stored.user_value if isinstance(stored, TtlValue) else stored)
        return DROP if mapped is DROP or mapped is None else self._stored(mapped, stored)

    def pairs(self, kg: int, key: Any, namespace: Any, value: Any) -> list[tuple[bytes, bytes]]:
        if self.timer:
            return self.encoder.pairs(kg, key, value, namespace)
        if self.kind == "MAP":  # one (user key, value) pair, or all of them (heap layout)
            entries = [value] if isinstance(value, tuple) else list(value.items() if isinstance(value, dict) else value)
            mapped = []
            for user_key, stored in entries:
                pair = self.mapping((user_key, stored.user_value if isinstance(stored, TtlValue) else stored))
                if pair is not DROP and pair is not None:
                    mapped.append((pair[0], self._stored(pair[1], stored)))
            return self.encoder.pairs(kg, key, mapped, namespace) if mapped else []
        if self.kind == "LIST":
            return self.encoder.pairs(kg, key, [e for e in map(self._map, value) if e is not DROP], namespace)
        mapped = self._map(value)
        return [] if mapped is DROP else self.encoder.pairs(kg, key, mapped, namespace)


def reencode_keyed(view, plan: KeyedReencode, *, parallelism: int, max_parallelism: int, directory: str,
                   inline_threshold: int = INLINE_THRESHOLD, fs_options=None, now: int | None = None
                   ) -> dict[int, handles.KeyGroupsHandle]:
    """The keyed state of ``view`` (a loader.OperatorView) re-encoded as ``plan`` says, as one
    canonical key-group stream per subtask of ``parallelism`` (written into ``directory``, small
    ones inline). Raises InvalidArgumentError naming the operator when a state cannot be mapped."""
    check_parallelism(parallelism, max_parallelism)
    what = f"operator {view.display_name}"
    now = ttl_write_timestamp() if now is None else now
    meta = with_timestamped_states(dataclasses.replace(plan.meta, compressed=False,
                                                       version=keyed.CURRENT_VERSION))
    old_meta = view.keyed_meta
    feeds = plan.sources()
    writers: dict[int, list[_StateWriter]] = {}
    for old_name, targets in feeds.items():
        old_id = old_meta.state_id(old_name) if old_meta is not None else None
        if old_id is None:
            raise InvalidArgumentError(f"{what} has no keyed state '{old_name}'")
        try:
            writers[old_id] = [_StateWriter(old_meta.states[old_id], meta, sid, source, max_parallelism, now)
                               for sid, source in targets]
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
    key_fn = plan.key
    key_type = meta.key_type
    same_layout = key_fn is None and max_parallelism == view.max_parallelism
    spill = keyed_stream.KeyGroupSpill(max_parallelism, scratch=keyed_stream.scratch_parent(directory))
    try:
        if writers:
            for source in view.keyed_states():
                with source.open(meta_of=with_timestamped_states) as state:
                    for old_id, kg, _, key, namespace, value in state.entries(set(writers)):
                        new_key = key if key_fn is None else key_fn(key)
                        if not same_layout:
                            kg = key_group_for_hash(key_type.java_hash(new_key), max_parallelism)
                        for writer in writers[old_id]:
                            try:
                                pairs = writer.pairs(kg, new_key, namespace, value)
                            except ENCODE_ERRORS as e:
                                raise InvalidArgumentError(f"{what}, state '{writer.new.name}': cannot encode the "
                                                           f"value {value!r} of key {key!r} ({e})") from None
                            for pair in pairs:
                                spill.add(kg, writer.sid, pair)
        files = spill.files()
        return {index: keyed_stream.write_spilled_stream(files, meta, index, parallelism, max_parallelism, directory,
                                                         inline_threshold, fs_options, what)
                for index in range(parallelism)}
    finally:
        spill.close()


def write_key_group_streams(meta: keyed.KeyedBackendMeta, pairs_by_kg: dict[int, dict[int, list]], parallelism: int,
                            max_parallelism: int, directory: str, inline_threshold: int, fs_options=None,
                            what: str = "keyed state") -> dict[int, handles.KeyGroupsHandle]:
    """One canonical stream per subtask from encoded pairs by key group and state id."""
    out = {}
    for index in range(parallelism):
        lo, hi = key_group_range(index, parallelism, max_parallelism)
        try:
            data, offsets = keyed.encode_canonical_stream(meta, lo, hi, {kg: pairs_by_kg[kg] for kg in
                                                                         _present(pairs_by_kg, lo, hi)})
        except ValueError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
        out[index] = handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, lo, offsets,
                                             write_stream(directory, data, inline_threshold, fs_options))
    return out


def reencode_operator(view, meta: operator_state.OperatorBackendMeta, *, proxy_version: int, directory: str,
                      inline_threshold: int = INLINE_THRESHOLD, fs_options=None
                      ) -> dict[int, handles.OperatorStreamHandle]:
    """The list, union and broadcast state of every subtask of ``view`` decoded and written again
    under the header ``meta`` (the same state names, other serializers: writers/flink_target.py) of
    version ``proxy_version`` (the target release's: savepoint/builder.py ``operator_proxy_version_for``),
    each subtask keeping its own elements (Flink redistributes them on restore as it would have)."""
    what = f"operator {view.display_name}"
    out = {}
    for subtask, h in view.operator_handles():
        if h.delegate is None:
            continue
        buf = view.savepoint.read_stream(h.delegate)
        src = view.savepoint.stream_source(h.delegate).label
        old = operator_state.read_operator_proxy(buf, src, operator_state.header_end(h, len(buf)))
        parts = []
        for info in meta.states:
            if old.state(info.name) is None:
                raise InvalidArgumentError(f"{what}, subtask {subtask} has no operator state '{info.name}'")
            if info.kind == "BROADCAST":
                values = list(operator_state.read_broadcast_state(buf, h, old, info.name, src))
            else:
                values = operator_state.read_list_state(buf, h, old, info.name, src)
            parts.append((info, values))
        try:
            data, offsets = operator_state.encode_operator_stream(parts, proxy_version)
        except (*ENCODE_ERRORS, UnsupportedSerializerError) as e:
            raise InvalidArgumentError(f"{what}, subtask {subtask}: cannot encode its operator state ({e})") from None
        out[subtask] = handles.OperatorStreamHandle(offsets, write_stream(directory, data, inline_threshold, fs_options))
    return out


def _present(pairs_by_kg: dict[int, Any], lo: int, hi: int) -> Iterable[int]:
    return (kg for kg in pairs_by_kg if lo <= kg <= hi)


__all__ = ["KeyedReencode", "StateSource", "reencode_keyed", "reencode_operator", "write_key_group_streams", "DROP"]
