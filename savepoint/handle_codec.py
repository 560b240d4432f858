"""Reading and writing state handles in Flink's `_metadata` format (every handle kind of Flink
1.11–2.3, written back byte for byte)."""

from __future__ import annotations

from .binary import DataInput, DataOutput
from .handles import (BYTE_STREAM, ByteStreamHandle, CHANGELOG_BACKEND_V1, CHANGELOG_BACKEND_V2,
    CHANGELOG_STREAM_V1, CHANGELOG_STREAM_V2, ChangelogBackendHandle, ChangelogStreamHandle,
    ChannelStateHandle, EMPTY_SEGMENT_FILE, EmptySegmentFileHandle, FILE, FILE_MERGING_OPERATOR, FileHandle,
    INCREMENTAL_V1, INCREMENTAL_V2, IN_MEMORY_CHANGELOG, InMemoryChangelogHandle, IncrementalKeyedHandle,
    KEY_GROUPS_V1, KEY_GROUPS_V2, KeyGroupsHandle, KeyedHandle, MAX_KEY_GROUPS, MODE_NAMES, NULL,
    OperatorStreamHandle, PARTITIONABLE_OPERATOR, RELATIVE_FILE, RelativeFileHandle, SAVEPOINT_KEY_GROUPS,
    SEGMENT_FILE, SegmentFileHandle, StateOffsets, StreamHandle)


# ---------------------------------------------------------------------------------------------
# reading


def read_stream_handle(inp: DataInput) -> StreamHandle | KeyGroupsHandle | None:
    tag = inp.read_u8()
    if tag == NULL:
        return None
    if tag == BYTE_STREAM:
        name = inp.read_utf()
        n = inp.read_count("inline state byte", unit_size=1)
        return ByteStreamHandle(name, inp.read_bytes(n))
    if tag == FILE:
        size = inp.read_i64()
        return FileHandle(inp.read_utf(), size)
    if tag == RELATIVE_FILE:
        rel = inp.read_utf()
        return RelativeFileHandle(rel, inp.read_i64())
    if tag == KEY_GROUPS_V1:
        return _read_key_groups(inp, tag)
    if tag == SEGMENT_FILE:
        start = inp.read_i64()
        size = inp.read_i64()
        scope = inp.read_i32()
        physical = inp.read_utf()
        return SegmentFileHandle(start, size, scope, physical, inp.read_utf())
    if tag == EMPTY_SEGMENT_FILE:
        return EmptySegmentFileHandle()
    inp.pos -= 1
    raise inp.fail(f"unknown stream state handle type {tag}")


def _read_delegate(inp: DataInput) -> StreamHandle | None:
    h = read_stream_handle(inp)
    if isinstance(h, KeyGroupsHandle):
        raise inp.fail("a key-groups handle cannot be the delegate of another handle")
    return h


def _read_key_groups(inp: DataInput, tag: int) -> KeyGroupsHandle:
    start = inp.read_i32()
    n = inp.read_count("key group", limit=MAX_KEY_GROUPS, unit_size=8)
    if start < 0 or start + n > MAX_KEY_GROUPS:
        raise inp.fail(f"key-group range start {start}, count {n} is outside 0..{MAX_KEY_GROUPS - 1}")
    offsets = tuple(inp.read_i64() for _ in range(n))
    delegate = _read_delegate(inp)
    handle_id = inp.read_utf() if tag == KEY_GROUPS_V2 else None
    return KeyGroupsHandle(tag, start, offsets, delegate, handle_id)


def _read_file_list(inp: DataInput) -> tuple[tuple[str, StreamHandle | None], ...]:
    n = inp.read_count("state file", unit_size=3)
    return tuple((inp.read_utf(), _read_delegate(inp)) for _ in range(n))


def read_keyed_handle(inp: DataInput) -> KeyedHandle | None:
    tag = inp.read_u8()
    if tag == NULL:
        return None
    if tag in (SAVEPOINT_KEY_GROUPS, KEY_GROUPS_V1, KEY_GROUPS_V2):
        return _read_key_groups(inp, tag)
    if tag in (INCREMENTAL_V1, INCREMENTAL_V2):
        checkpoint_id = inp.read_i64()
        backend_id = inp.read_utf()
        start = inp.read_i32()
        num = inp.read_i32()
        if num < 0 or start < 0 or start + num > MAX_KEY_GROUPS:
            raise inp.fail(f"key-group range start {start}, count {num} is invalid")
        checkpointed_size = inp.read_i64() if tag == INCREMENTAL_V2 else 0
        meta = _read_delegate(inp)
        shared = _read_file_list(inp)
        private = _read_file_list(inp)
        handle_id = inp.read_utf() if tag == INCREMENTAL_V2 else None
        return IncrementalKeyedHandle(tag, checkpoint_id, backend_id, start, num, checkpointed_size, meta,
                                      shared, private, handle_id)
    if tag in (CHANGELOG_BACKEND_V1, CHANGELOG_BACKEND_V2):
        start = inp.read_i32()
        num = inp.read_i32()
        checkpointed_size = inp.read_i64()
        n_mat = inp.read_count("materialized handle")
        materialized = tuple(read_keyed_handle(inp) for _ in range(n_mat))
        n_non = inp.read_count("non-materialized handle")
        non_materialized = tuple(read_keyed_handle(inp) for _ in range(n_non))
        materialization_id = inp.read_i64()
        checkpoint_id = inp.read_i64() if tag == CHANGELOG_BACKEND_V2 else materialization_id
        return ChangelogBackendHandle(tag, start, num, checkpointed_size, materialized, non_materialized,
                                      materialization_id, checkpoint_id, inp.read_utf())
    if tag == IN_MEMORY_CHANGELOG:
        start = inp.read_i32()
        num = inp.read_i32()
        seq_from = inp.read_i64()
        seq_to = inp.read_i64()
        n = inp.read_count("changelog change", unit_size=8)
        changes = []
        for _ in range(n):
            kg = inp.read_i32()
            ln = inp.read_count("change byte")
            changes.append((kg, inp.read_bytes(ln)))
        return InMemoryChangelogHandle(start, num, seq_from, seq_to, tuple(changes), inp.read_utf())
    if tag in (CHANGELOG_STREAM_V1, CHANGELOG_STREAM_V2):
        start = inp.read_i32()
        num = inp.read_i32()
        n = inp.read_count("changelog stream handle", unit_size=9)
        handles = tuple((inp.read_i64(), _read_delegate(inp)) for _ in range(n))
        state_size = inp.read_i64()
        checkpointed_size = inp.read_i64()
        handle_id = inp.read_utf()
        storage = inp.read_utf() if tag == CHANGELOG_STREAM_V2 else "filesystem"
        return ChangelogStreamHandle(tag, start, num, handles, state_size, checkpointed_size, handle_id, storage)
    inp.pos -= 1
    raise inp.fail(f"unknown keyed state handle type {tag}")


def read_operator_handle(inp: DataInput) -> OperatorStreamHandle | None:
    tag = inp.read_u8()
    if tag == NULL:
        return None
    if tag not in (PARTITIONABLE_OPERATOR, FILE_MERGING_OPERATOR):
        inp.pos -= 1
        raise inp.fail(f"unknown operator state handle type {tag}")
    n = inp.read_count("operator state", unit_size=7)
    states: dict[str, StateOffsets] = {}
    for _ in range(n):
        name = inp.read_utf()
        mode = inp.read_i8()
        if not 0 <= mode < len(MODE_NAMES):
            raise inp.fail(f"unknown distribution mode {mode} of operator state '{name}'")
        k = inp.read_count("state partition offset", unit_size=8)
        states[name] = StateOffsets(mode, tuple(inp.read_i64() for _ in range(k)))
    if tag == FILE_MERGING_OPERATOR:
        task_owned = inp.read_utf()
        shared = inp.read_utf()
        is_empty = inp.read_bool()
        delegate = _read_delegate(inp)
        return OperatorStreamHandle(states, delegate, tag, task_owned, shared, is_empty)
    return OperatorStreamHandle(states, _read_delegate(inp))


def read_channel_handle(inp: DataInput, tagged: bool, output: bool) -> ChannelStateHandle:
    tag = inp.read_u8() if tagged else 0
    if tag in (0, 1, 2):
        if tagged and tag != (2 if output else 1):
            raise inp.fail(f"channel state handle type {tag} in the {'output' if output else 'input'} list")
        subtask = inp.read_i32()
        info = (inp.read_i32(), inp.read_i32())
        n = inp.read_count("channel offset", unit_size=8)
        offsets = tuple(inp.read_i64() for _ in range(n))
        size = inp.read_i64()
        return ChannelStateHandle(tag, subtask, info, offsets, size, _read_delegate(inp))
    if tag in (3, 4):
        if tag != (4 if output else 3):
            raise inp.fail(f"channel state handle type {tag} in the {'output' if output else 'input'} list")
        subtask = inp.read_i32()
        size = inp.read_i64()
        delegate = _read_delegate(inp)
        blob_len = inp.read_count("channel offsets byte")
        return ChannelStateHandle(tag, subtask, None, (), size, delegate, inp.read_bytes(blob_len))
    inp.pos -= 1
    raise inp.fail(f"unknown channel state handle type {tag}")


# ---------------------------------------------------------------------------------------------
# writing


def write_stream_handle(out: DataOutput, h) -> None:
    if h is None:
        out.write_u8(NULL)
    elif isinstance(h, ByteStreamHandle):
        out.write_u8(BYTE_STREAM)
        out.write_utf(h.name)
        out.write_i32(len(h.data))
        out.write_bytes(h.data)
    elif isinstance(h, FileHandle):
        out.write_u8(FILE)
        out.write_i64(h.size)
        out.write_utf(h.path)
    elif isinstance(h, RelativeFileHandle):
        out.write_u8(RELATIVE_FILE)
        out.write_utf(h.relative_path)
        out.write_i64(h.size)
    elif isinstance(h, KeyGroupsHandle):
        _write_key_groups(out, h)
    elif isinstance(h, SegmentFileHandle):
        out.write_u8(SEGMENT_FILE)
        out.write_i64(h.start)
        out.write_i64(h.size)
        out.write_i32(h.scope)
        out.write_utf(h.physical_path)
        out.write_utf(h.logical_file_id)
    elif isinstance(h, EmptySegmentFileHandle):
        out.write_u8(EMPTY_SEGMENT_FILE)
    else:
        raise TypeError(f"not a stream handle: {h!r}")


def _write_key_groups(out: DataOutput, h: KeyGroupsHandle) -> None:
    out.write_u8(h.tag)
    out.write_i32(h.start_key_group)
    out.write_i32(len(h.offsets))
    for o in h.offsets:
        out.write_i64(o)
    write_stream_handle(out, h.delegate)
    if h.tag == KEY_GROUPS_V2:
        out.write_utf(h.handle_id or "")


def _write_file_list(out: DataOutput, files) -> None:
    out.write_i32(len(files))
    for name, h in files:
        out.write_utf(name)
        write_stream_handle(out, h)


def write_keyed_handle(out: DataOutput, h) -> None:
    if h is None:
        out.write_u8(NULL)
    elif isinstance(h, KeyGroupsHandle):
        _write_key_groups(out, h)
    elif isinstance(h, IncrementalKeyedHandle):
        out.write_u8(h.tag)
        out.write_i64(h.checkpoint_id)
        out.write_utf(h.backend_identifier)
        out.write_i32(h.start_key_group)
        out.write_i32(h.num_key_groups)
        if h.tag == INCREMENTAL_V2:
            out.write_i64(h.checkpointed_size)
        write_stream_handle(out, h.metadata_state)
        _write_file_list(out, h.shared)
        _write_file_list(out, h.private)
        if h.tag == INCREMENTAL_V2:
            out.write_utf(h.handle_id or "")
    elif isinstance(h, ChangelogBackendHandle):
        out.write_u8(h.tag)
        out.write_i32(h.start_key_group)
        out.write_i32(h.num_key_groups)
        out.write_i64(h.checkpointed_size)
        for group in (h.materialized, h.non_materialized):
            out.write_i32(len(group))
            for sub in group:
                write_keyed_handle(out, sub)
        out.write_i64(h.materialization_id)
        if h.tag == CHANGELOG_BACKEND_V2:
            out.write_i64(h.checkpoint_id)
        out.write_utf(h.handle_id)
    elif isinstance(h, InMemoryChangelogHandle):
        out.write_u8(IN_MEMORY_CHANGELOG)
        out.write_i32(h.start_key_group)
        out.write_i32(h.num_key_groups)
        out.write_i64(h.sequence_from)
        out.write_i64(h.sequence_to)
        out.write_i32(len(h.changes))
        for kg, b in h.changes:
            out.write_i32(kg)
            out.write_i32(len(b))
            out.write_bytes(b)
        out.write_utf(h.handle_id)
    elif isinstance(h, ChangelogStreamHandle):
        out.write_u8(h.tag)
        out.write_i32(h.start_key_group)
        out.write_i32(h.num_key_groups)
        out.write_i32(len(h.handles))
        for offset, sh in h.handles:
            out.write_i64(offset)
            write_stream_handle(out, sh)
        out.write_i64(h.state_size)
        out.write_i64(h.checkpointed_size)
        out.write_utf(h.handle_id)
        if h.tag == CHANGELOG_STREAM_V2:
            out.write_utf(h.storage_identifier)
    else:
        raise TypeError(f"not a keyed state handle: {h!r}")


def write_operator_handle(out: DataOutput, h: OperatorStreamHandle | None) -> None:
    if h is None:
        out.write_u8(NULL)
        return
    out.write_u8(h.tag)
    out.write_i32(len(h.states))
    for name, so in h.states.items():
        out.write_utf(name)
        out.write_u8(so.mode)
        out.write_i32(len(so.offsets))
        for o in so.offsets:
            out.write_i64(o)
    if h.tag == FILE_MERGING_OPERATOR:
        out.write_utf(h.task_owned_dir or "")
        out.write_utf(h.shared_dir or "")
        out.write_bool(h.is_empty)
    write_stream_handle(out, h.delegate)


def write_channel_handle(out: DataOutput, h: ChannelStateHandle, tagged: bool) -> None:
    if tagged:
        out.write_u8(h.tag)
    if h.tag in (3, 4):
        out.write_i32(h.subtask_index)
        out.write_i64(h.state_size)
        write_stream_handle(out, h.delegate)
        out.write_i32(len(h.merged_offsets))
        out.write_bytes(h.merged_offsets)
        return
    out.write_i32(h.subtask_index)
    out.write_i32(h.info[0])
    out.write_i32(h.info[1])
    out.write_i32(len(h.offsets))
    for o in h.offsets:
        out.write_i64(o)
    out.write_i64(h.state_size)
    write_stream_handle(out, h.delegate)
