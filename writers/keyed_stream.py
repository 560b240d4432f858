"""Keyed state streams from rows: the encoding both engines share, and the embedded engine's writer.

A keyed source's rows (a key, one value per state, timer columns) become canonical (key bytes, value
bytes) pairs by key group (:class:`KeyedEncoding`, the same on a Spark executor and in this process),
and each subtask's pairs become one canonical key-group stream (:func:`write_subtask_stream`, sorted
by key group, spilled to a state file past the inline threshold). Spark routes the pairs to their
subtask with a shuffle (``writer.write_keyed_pairs``); the embedded engine (:func:`write_keyed_batches`)
puts them into local temporary files by range of key groups (:class:`KeyGroupSpill`) and reads those
back range after range, so neither holds more than one range in memory. Both write the same bytes:
pairs are sorted within a key group (``keyed.encode_key_group``) and files are named by content.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import os
import struct
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ..savepoint import handles
from ..savepoint import keyed
from ..savepoint import pair_encoding
from ..savepoint.builder import stream_name, write_stream
from ..savepoint.errors import FStateError, InvalidArgumentError
from ..savepoint.io import io_for, is_remote, join, strip_file_scheme
from ..savepoint.types import TypeInfo
from ..savepoint.types.hashing import check_parallelism, key_group_for_hash, key_group_range, operator_index_for_key_group
from .validation import row_error


@dataclass(frozen=True)
class KeyedEncoding:
    """How the rows of one keyed source become pairs (picklable: Spark ships it to its executors).
    A row is ``(key, value of each state..., timers of each timer state...)``."""

    meta: keyed.KeyedBackendMeta
    key_type: TypeInfo
    n_states: int
    #: (state id, column) of the event and processing timer states present
    timer_ids: tuple[tuple[int, str], ...]
    key_what: str
    #: per state id: how errors name its column
    whats: tuple[str, ...]
    parallelism: int
    max_parallelism: int

    def pairs(self, rows: Iterable[tuple]) -> Iterator[tuple[int, int, tuple[bytes, bytes]]]:
        """``(key group, state id, (key bytes, value bytes))`` of every value of ``rows``; one line
        naming the column and the value for a row its types cannot hold."""
        max_parallelism, n_states, whats = self.max_parallelism, self.n_states, self.whats
        encoders = [keyed.PairEncoder(self.meta, i, max_parallelism) for i in range(len(self.meta.states))]
        # states with equal namespace serializers share the key's bytes (made once a row)
        namespaces: dict[str, int] = {}
        shared = [namespaces.setdefault(self.meta.states[sid].namespace_type.name, len(namespaces))
                  for sid in range(n_states)]
        java_hash = self.key_type.java_hash
        for row in rows:
            key = row[0]
            if key is None:
                raise InvalidArgumentError(f"{self.key_what}: a row has a null key")
            try:
                kg = key_group_for_hash(java_hash(key), max_parallelism)
            except FStateError:
                raise
            except Exception as e:
                raise row_error(self.key_what, key, e) from None
            composites: list[bytes | None] = [None] * len(namespaces)
            for sid in range(n_states):
                value = row[1 + sid]
                if value is None:
                    continue
                try:
                    composite = composites[shared[sid]]
                    if composite is None:
                        composite = composites[shared[sid]] = encoders[sid].composite(kg, key)
                    found = encoders[sid].pairs(kg, key, value, composite=composite)
                except FStateError:
                    raise
                except Exception as e:
                    raise row_error(whats[sid], value, e) from None
                for pair in found:
                    yield kg, sid, pair
            for j, (sid, _) in enumerate(self.timer_ids):
                ts = row[1 + n_states + j]
                for t in (ts if isinstance(ts, (list, tuple)) else [ts] if ts is not None else []):
                    try:
                        pair = encoders[sid].pairs(kg, key, int(t))[0]
                    except FStateError:
                        raise
                    except Exception as e:
                        raise row_error(whats[sid], t, e) from None
                    yield kg, sid, pair

    def compiled_plan(self) -> tuple | None:
        """The compiled encoder's plan of these rows (``pair_encoding.plan``), None: encoded in Python."""
        return pair_encoding.plan(self.meta, self.key_type, self.n_states, len(self.timer_ids))

    def subtask_of(self, kg: int) -> int:
        return operator_index_for_key_group(kg, self.parallelism, self.max_parallelism)


class SpillingStream:
    """Bytes kept in memory up to the inline threshold, then streamed to a new state file (local or
    remote, through the IO seam): a small stream is inlined, a big one never held whole."""

    def __init__(self, directory: str, inline_threshold: int, fs_options):
        self.directory, self.threshold, self.fs_options = directory, inline_threshold, fs_options
        self.buffer: list[bytes] = []
        self.size = 0
        self.name: str | None = None
        self._ctx = None
        self._out = None
        self._io = io_for(directory, fs_options)
        self._digest = hashlib.sha256()

    def write(self, data: bytes) -> None:
        if self._out is None and self.size + len(data) > self.threshold:
            # locally under a temporary name, renamed to its content's (builder.stream_name) at the end;
            # an object store cannot rename: a random name there
            self.name = (f".{uuid.uuid4().hex}.part" if self._io.atomic_rename else str(uuid.uuid4()))
            self._ctx = self._io.open_output(join(self.directory, self.name))
            self._out = self._ctx.__enter__()
            for b in self.buffer:
                self._out.write(b)
            self.buffer = []
        if self._out is not None:
            self._out.write(data)
        else:
            self.buffer.append(data)
        self._digest.update(data)
        self.size += len(data)

    def finish(self):
        """The stream's handle (inline or a relative file)."""
        if self._ctx is None:
            return write_stream(self.directory, b"".join(self.buffer), self.threshold, self.fs_options)
        ctx, self._ctx = self._ctx, None
        ctx.__exit__(None, None, None)
        if self._io.atomic_rename:
            name = stream_name(self._digest.digest())
            self._io.rename(join(self.directory, self.name), join(self.directory, name))
            self.name = name
        return handles.RelativeFileHandle(self.name, self.size)

    def fail(self, exc: BaseException) -> None:
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            try:
                ctx.__exit__(type(exc), exc, exc.__traceback__)
            except BaseException:
                pass


def write_subtask_stream(index: int, groups: Iterable[tuple[int, dict[int, list]]], meta: keyed.KeyedBackendMeta,
                         parallelism: int, max_parallelism: int, directory: str, inline_threshold: int,
                         fs_options=None) -> handles.KeyGroupsHandle:
    """Subtask ``index``'s canonical stream from its key groups' pairs (``(key group, {state id:
    pairs})`` in ascending key-group order); a subtask without keys gets the header alone, as Flink
    writes it."""
    blocks = ((kg, key_group_block(kg, by_state)) for kg, by_state in groups)
    return write_subtask_blocks(index, blocks, meta, parallelism, max_parallelism, directory, inline_threshold,
                                fs_options)


def key_group_block(kg: int, by_state: dict[int, list], what: str = "keyed state") -> bytes:
    """One key group's canonical block (``keyed.encode_key_group``); a key written twice is bad input."""
    try:
        return keyed.encode_key_group(kg, by_state)
    except ValueError as e:
        raise InvalidArgumentError(f"{what}: {e}") from None


def write_subtask_blocks(index: int, blocks: Iterable[tuple[int, bytes]], meta: keyed.KeyedBackendMeta,
                         parallelism: int, max_parallelism: int, directory: str, inline_threshold: int,
                         fs_options=None) -> handles.KeyGroupsHandle:
    """Subtask ``index``'s canonical stream from its key groups' blocks (``(key group, block)`` in
    ascending key-group order)."""
    lo, hi = key_group_range(index, parallelism, max_parallelism)
    offsets = [0] * (hi - lo + 1)
    out = SpillingStream(directory, inline_threshold, fs_options)
    try:
        out.write(keyed.proxy_bytes(meta))
        for kg, block in blocks:
            if not lo <= kg <= hi:
                raise FStateError(f"internal: key group {kg} routed to subtask {index}")
            offsets[kg - lo] = out.size
            out.write(block)
        handle = out.finish()
    except BaseException as e:
        out.fail(e)
        raise
    return handles.KeyGroupsHandle(handles.SAVEPOINT_KEY_GROUPS, lo, tuple(offsets), handle)


# ---------------------------------------------------------------------------------------------
# the embedded engine: pairs spilled by range of key groups, then one stream per subtask


def scratch_parent(directory: str | None) -> str | None:
    """Where the embedded engine's temporary files of a write go: in the new savepoint's local staging
    ``directory`` (the same disk as the result, removed with it), else (a remote target, or none) in the
    system's temporary directory (None)."""
    return None if directory is None or is_remote(directory) else strip_file_scheme(directory)

_RECORD = struct.Struct(">HHII")  # key group, state id, key length, value length

#: the bytes a range's buffer holds before they are appended to the range's file: while rows are
#: encoded the spill holds at most ranges × this (16 MiB), whatever the rows; writing a subtask's
#: stream holds one range's records (one key group's, or 1/256 of the pairs with more key groups)
FLUSH_BYTES = 1 << 16


class KeyGroupSpill:
    """Encoded pairs by key group: each range of key groups in a buffer, appended to a local temporary
    file whenever the buffer passes ``flush_bytes``; :func:`spilled_blocks` reads them back range after
    range (one range in memory at a time), in ascending key-group order."""

    def __init__(self, max_parallelism: int, ranges: int = 256, flush_bytes: int | None = None,
                 scratch: str | None = None):
        """``flush_bytes``: :data:`FLUSH_BYTES` unless given; ``scratch``: the directory its files go
        into (:func:`scratch_parent`; None: the system's temporary directory)."""
        self.max_parallelism = max_parallelism
        self.ranges = max(1, min(max_parallelism, ranges))
        self.flush_bytes = FLUSH_BYTES if flush_bytes is None else flush_bytes
        self.scratch = scratch
        #: buffers appended to their range's file so far
        self.flushes = 0
        self.buffers = [bytearray() for _ in range(self.ranges)]
        self.spilled = [False] * self.ranges
        self._dir: tempfile.TemporaryDirectory | None = None

    def _path(self, index: int) -> str:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix=".fstate-spill-", dir=self.scratch)
        return os.path.join(self._dir.name, str(index))

    def add(self, kg: int, sid: int, pair: tuple[bytes, bytes]) -> None:
        index = kg * self.ranges // self.max_parallelism
        buffer = self.buffers[index]
        key, value = pair
        buffer += _RECORD.pack(kg, sid, len(key), len(value))
        buffer += key
        buffer += value
        if len(buffer) > self.flush_bytes:
            self._flush(index)

    def add_records(self, index: int, records: bytes) -> None:
        """Records of range ``index`` made by :func:`encode_batch`."""
        self.buffers[index] += records
        if len(self.buffers[index]) > self.flush_bytes:
            self._flush(index)

    def _flush(self, index: int) -> None:
        self.flushes += 1
        with open(self._path(index), "ab") as f:
            f.write(self.buffers[index])
        self.spilled[index] = True
        self.buffers[index].clear()

    def files(self) -> list[str | None]:
        """Every range's records in its file (None: a range without any), buffers emptied."""
        out: list[str | None] = []
        for index in range(self.ranges):
            if self.buffers[index]:
                self._flush(index)
            out.append(self._path(index) if self.spilled[index] else None)
        return out

    def close(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def spilled_blocks(files: list[str | None], max_parallelism: int, lo: int, hi: int,
                   what: str = "keyed state") -> Iterator[tuple[int, bytes]]:
    """The canonical blocks of key groups ``lo..hi`` of a spill's range ``files`` (:meth:`KeyGroupSpill.files`),
    in ascending order, one range in memory at a time: compiled, or else (no compiled encoder,
    or it declines a range: a key written twice) in Python, which is the reference."""
    for data in _range_files(files, max_parallelism, lo, hi):
        blocks = pair_encoding.key_group_blocks(data, lo, hi)
        if blocks is None:
            blocks = ((kg, key_group_block(kg, by_state, what)) for kg, by_state in _groups_of(data, lo, hi))
        yield from blocks


def _range_files(files: list[str | None], max_parallelism: int, lo: int, hi: int) -> Iterator[bytes]:
    ranges = len(files)
    for index in range(lo * ranges // max_parallelism, hi * ranges // max_parallelism + 1):
        if files[index] is not None:
            with open(files[index], "rb") as f:
                yield f.read()


def _groups_of(data: bytes, lo: int, hi: int) -> Iterator[tuple[int, dict[int, list]]]:
    """Key groups ``lo..hi`` of one range file's records, in ascending order."""
    unpack = _RECORD.unpack_from
    size = _RECORD.size
    by_group: dict[int, dict[int, list]] = {}
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        kg, sid, key_length, value_length = unpack(data, pos)
        pos += size
        if lo <= kg <= hi:
            key = bytes(view[pos:pos + key_length])
            by_group.setdefault(kg, {}).setdefault(sid, []).append(
                (key, bytes(view[pos + key_length:pos + key_length + value_length])))
        pos += key_length + value_length
    del view
    for kg in sorted(by_group):
        yield kg, by_group.pop(kg)


def write_spilled_subtask(files: list[str | None], encoding: KeyedEncoding, index: int, directory: str,
                          inline_threshold: int, fs_options=None) -> handles.KeyGroupsHandle:
    """Subtask ``index``'s stream from a spill's range files (a pool worker's task)."""
    return write_spilled_stream(files, encoding.meta, index, encoding.parallelism, encoding.max_parallelism,
                                directory, inline_threshold, fs_options)


def write_spilled_stream(files: list[str | None], meta: keyed.KeyedBackendMeta, index: int, parallelism: int,
                         max_parallelism: int, directory: str, inline_threshold: int, fs_options=None,
                         what: str = "keyed state") -> handles.KeyGroupsHandle:
    """Subtask ``index``'s stream from a spill's range files (:meth:`KeyGroupSpill.files`); ``what``
    names the state in the error about a key written twice."""
    lo, hi = key_group_range(index, parallelism, max_parallelism)
    return write_subtask_blocks(index, spilled_blocks(files, max_parallelism, lo, hi, what), meta, parallelism,
                                max_parallelism, directory, inline_threshold, fs_options)


def encode_batch(encoding: KeyedEncoding, ranges: int, batch) -> tuple[dict[int, bytes], int]:
    """One record batch's pairs as :class:`KeyGroupSpill` records by range (a pool worker's task)."""
    from .arrow_frames import batch_values

    compiled_plan = encoding.compiled_plan()
    compiled = pair_encoding.encode_arrow(compiled_plan, batch.columns, encoding.max_parallelism, ranges)
    if compiled is not None:
        return compiled, batch.num_rows
    columns = batch_values(batch)
    compiled = pair_encoding.encode_rows(compiled_plan, columns, encoding.max_parallelism, ranges)
    if compiled is not None:
        return compiled, batch.num_rows
    spill = KeyGroupSpill(encoding.max_parallelism, ranges, flush_bytes=1 << 62)
    for kg, sid, pair in encoding.pairs(zip(*columns)):
        spill.add(kg, sid, pair)
    return {index: bytes(buffer) for index, buffer in enumerate(spill.buffers) if buffer}, batch.num_rows


#: batches encoded in this process before the rest go to a pool (a pool's start costs about a second)
_BATCHES_HERE = 16


def write_keyed_batches(batches: Iterable, encoding: KeyedEncoding, directory: str, inline_threshold: int,
                        fs_options=None, workers: int | None = None, size: int | None = None
                        ) -> list[tuple[int, handles.KeyGroupsHandle]]:
    """The embedded engine's keyed writer: every subtask's stream from record batches of the columns
    :func:`encoding_for` names, the same bytes Spark's ``write_keyed_pairs`` writes. Rows the compiled
    encoder has a plan for are encoded and written here, whatever their number (``pair_encoding``). Else
    the first batches are encoded here (none of a source of more than ``pool.SMALL_BYTES``); a longer
    stream's others on a
    process pool (one worker a core, a few batches in
    flight each, so memory stays flat), their records spilled here by range of key groups, and then
    each subtask's stream is written there from the spill's files."""
    from ..savepoint import pool

    parallelism, max_parallelism = encoding.parallelism, encoding.max_parallelism
    check_parallelism(parallelism, max_parallelism)
    spill = KeyGroupSpill(max_parallelism, scratch=scratch_parent(directory))
    try:
        batches = iter(batches)
        # a source known to be large (``size`` bytes) goes to the pool at once; rows the compiled encoder
        # has a plan for are all encoded here (faster than a pool's start and the batches' trips to it)
        here = _BATCHES_HERE if size is None or size < pool.SMALL_BYTES else 0
        if encoding.compiled_plan() is not None and pair_encoding.available():
            here = None
        for batch in itertools.islice(batches, here):
            for index, records in encode_batch(encoding, spill.ranges, batch)[0].items():
                spill.add_records(index, records)
        first = next(batches, None)
        if first is None:  # a short stream: written here
            files = spill.files()
            return [(index, write_spilled_subtask(files, encoding, index, directory, inline_threshold, fs_options))
                    for index in range(parallelism)]
        count = workers or os.cpu_count() or 1
        with pool.spawn_pool(count) as executor:
            pending: collections.deque = collections.deque()
            for batch in itertools.chain([first], batches):
                pending.append(executor.submit(encode_batch, encoding, spill.ranges, batch))
                while len(pending) > 2 * count or (pending and pending[0].done()):
                    for index, records in pending.popleft().result()[0].items():
                        spill.add_records(index, records)
            while pending:
                for index, records in pending.popleft().result()[0].items():
                    spill.add_records(index, records)
            files = spill.files()
            futures = [executor.submit(write_spilled_subtask, files, encoding, index, directory, inline_threshold,
                                       fs_options) for index in range(parallelism)]
            return [(index, future.result()) for index, future in enumerate(futures)]
    finally:
        spill.close()


def encoding_for(meta: keyed.KeyedBackendMeta, key_type: TypeInfo, states: list[Any], event_timers: str | None,
                 processing_timers: str | None, what: str, key: str, parallelism: int,
                 max_parallelism: int) -> tuple[KeyedEncoding, list[str]]:
    """The :class:`KeyedEncoding` of a keyed source and the columns its rows are made of, in order
    (``states``: the writer's KeyedStateSpecs)."""
    n_states = len(states)
    timer_ids: list[tuple[int, str]] = []
    for column in (event_timers, processing_timers):
        if column:
            timer_ids.append((n_states + len(timer_ids), column))
    columns = [key] + [s.column for s in states] + [c for _, c in timer_ids]
    whats = ([f"{what}, state '{s.name}', column '{s.column}'" for s in states]
             + [f"{what}, timers column '{c}'" for _, c in timer_ids])
    return KeyedEncoding(meta, key_type, n_states, tuple(timer_ids), f"{what}, key column '{key}'", tuple(whats),
                         parallelism, max_parallelism), columns
