"""`fstate verify`: every handle resolves, every file has the bytes the handles claim, every state
decodes with its serializer to exactly the bytes its handle declares (offsets, lengths, key-group
boundaries, element counts; :mod:`.verify_structure`), compressed chunks match their CRC32C,
channel-state files of unaligned checkpoints exist, parallelism fits the max parallelism, and no
handle escapes the savepoint directory unless allowed.

Flink stores no checksum of uncompressed state: a changed byte that leaves every length, count and
offset intact (inside a long, a double, a string's characters) is not detectable by any reader."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable

from . import handles
from . import keyed_state
from . import streams
from . import operator as operator_state
from . import pool
from . import verify_structure
from .compression import checking_checksums
from .errors import (CorruptStateError, ExternalPathError, FStateError, SavepointNotFoundError,
                     UnsupportedSerializerError)
from .io import io_for, is_remote, strip_file_scheme
from .io.policy import handle_target
from .loader import OperatorView, Savepoint
from .metadata import subtask_stream_handles


class Problem(str):
    """One problem as `verify` prints it, remembering the file it is about (``None``: no one file)."""

    path: str | None

    def __new__(cls, text: str, path: str | None = None) -> "Problem":
        problem = super().__new__(cls, text)
        problem.path = path
        return problem

    def __reduce__(self):  # keeps the path across the process pool
        return Problem, (str(self), self.path)


@dataclass
class OperatorReport:
    operator: str
    uid_hash: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: what was not checked because fstate cannot decode it (serializers it does not know): no problem
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class VerifyReport:
    path: str
    operators: list[OperatorReport]
    problems: list[str] = field(default_factory=list)  # savepoint-level (e.g. unreadable _metadata)
    external: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(o.ok for o in self.operators)

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "problems": self.problems, "external_paths": self.external,
                "operators": [{"operator": o.operator, "uid_hash": o.uid_hash, "ok": o.ok, "checked": o.checked,
                               "problems": o.problems} for o in self.operators]}


def _stream_handles(op: OperatorView) -> Iterable[tuple[str, object, object]]:
    """(what, stream handle, channel-state handle or None) of every place a subtask's bytes live."""
    for i, s in sorted(op.state.subtasks.items()):
        for what, h in subtask_stream_handles(s):
            yield f"subtask {i} {what}", h, None
        for what, ch in verify_structure.channel_handles(s):
            if ch.delegate is not None:
                yield f"subtask {i} {what}", ch.delegate, ch


def _is_external(sp: Savepoint, h) -> str | None:
    """The file a handle names when it is outside the snapshot's directories (the one path policy,
    savepoint/io/policy.py: symlinks resolved; for chk-N also the job's shared/ and taskowned/)."""
    for attr in ("relative_path", "path", "physical_path"):
        if "\x00" in (getattr(h, attr, None) or ""):
            return repr(getattr(h, attr))
    target = handle_target(h, sp.path)
    if target is None or sp.path_policy.is_inside(target):
        return None
    return target if is_remote(target) else os.path.realpath(strip_file_scheme(target))


def _moved(sp: Savepoint, h) -> tuple[str, str] | None:
    """(the missing file, what fixes it) when an absolute handle names a file that is missing where
    it says but present in the savepoint's directory: a moved savepoint."""
    path = getattr(h, "path", None) or getattr(h, "physical_path", None)
    if not path or isinstance(h, handles.RelativeFileHandle):
        return None
    source = streams.relocate_source(streams.stream_source(h, sp.path, allow_external=True), sp.path,
                                     sp.checkpoint_base_dir)
    hint = streams.moved_hint(source.path, sp.path) if source.path else None
    return None if hint is None else (source.path, hint)


def _check_file(sp: Savepoint, h, channel=None) -> str | None:
    src = streams.stream_source(h, sp.path, allow_external=True)
    if src.path is None:
        if channel is not None:
            return verify_structure.check_channel_offsets(channel, len(src.data or b""))
        return None
    io = io_for(src.path, sp.fs_options)
    if not io.exists(src.path):
        return f"state file {src.path} does not exist"
    size = io.size(src.path)
    if channel is not None:
        problem = verify_structure.check_channel_offsets(channel, size - src.start)
        if problem:
            return f"{problem} ({src.path})"
    need = src.start + (src.length or 0)
    if isinstance(h, handles.SegmentFileHandle):
        if size < need:
            return f"state file {src.path} has {size} bytes; the segment needs {need}"
    elif src.length is not None and size != src.length:
        return f"state file {src.path} has {size} bytes, the handle says {src.length}"
    return None


def _guard(report: OperatorReport, what: str, fn: Callable[[], object]) -> None:
    try:
        fn()
        report.checked.append(what)
    except UnsupportedSerializerError as e:
        report.warnings.append(f"{what}: not decoded: {e.detail}")
    except FStateError as e:
        report.problems.append(Problem(f"{what}: {e.detail if e.path else e}" + (f" ({e.path})" if e.path else ""),
                                       e.path))


def verify(path: str, *, allow_external_paths: bool = False, decode: bool = True, fs_options=None,
           reference: bool = False) -> VerifyReport:
    """Check a savepoint or checkpoint (see the module doc). Keyed state is decoded by the compiled
    decoders, as strict as the plain-Python ones since both check every length, delimiter and flag;
    ``reference``: by the plain-Python reference decoders instead, RocksDB's tables read by rocksdict
    rather than the C table reader (slower; the tests compare both)."""
    try:
        sp = Savepoint.open(path, allow_external_paths=True, fs_options=fs_options)
    except SavepointNotFoundError:
        raise  # not a savepoint at all (no such path, no `_metadata`, a file that is none): bad input
    except FStateError as e:
        return VerifyReport(path, [], [str(e)])
    report = VerifyReport(sp.path, [])
    for op in sp.operators:
        r = OperatorReport(op.display_name, op.uid_hash)
        report.operators.append(r)
        r.problems.extend(verify_structure.bounds_problems(op.parallelism, op.max_parallelism, op.state.subtasks,
                                                           op.state.finished_subtasks))
        files_ok = True
        for what, h, channel in _stream_handles(op):
            moved = _moved(sp, h)
            if moved is not None:
                r.problems.append(Problem(f"{what}: state file {moved[0]} does not exist; {moved[1]}", moved[0]))
                files_ok = False
                continue
            outside = _is_external(sp, h)
            if outside is not None:
                report.external.append(outside)
                if not allow_external_paths:
                    r.problems.append(f"{what}: points outside the savepoint directory: {outside} "
                                      "(pass --allow-external-paths if that is intended)")
                    files_ok = False
                    continue
            problem = _check_file(sp, h, channel)
            if problem:
                r.problems.append(f"{what}: {problem}")
                files_ok = False
        if not files_ok or not decode:
            continue
        with checking_checksums():
            _decode_operator(op, r, reference)
    return report


#: what a refused write tells the user, after the problem
NOT_WRITTEN = "nothing was written (--no-verify, or verify=False, writes it anyway)"


def check_written(directory: str, origins: dict[str, tuple[str, int]] | None = None, fs_options=None) -> None:
    """The one check of everything fstate writes (bootstrap, modify, upgrade, the Python API's
    writers): ``directory`` (a complete savepoint, not yet in place) passes :func:`verify`, else a
    CorruptStateError naming the file and the problem. ``origins``: {file name in ``directory``:
    (the file its bytes were copied from, the byte they started at)}, so that damage copied from
    an input is reported at the input's file."""
    report = verify(directory, allow_external_paths=True, fs_options=fs_options)
    if report.ok:
        return
    where, problem = next(((None, p) for p in report.problems), None) or next(
        (o.operator, p) for o in report.operators for p in o.problems)
    path = getattr(problem, "path", None)
    origin = (origins or {}).get(os.path.basename(path)) if path else None
    text = str(problem).removesuffix(f" ({path})") if path else str(problem)  # the path leads the message
    text = f"{where}: {text}" if where else text
    if origin is not None:
        path, start = origin  # the input the damaged bytes were copied from
        if start:
            text = f"{text} (of the segment that starts at byte {start})"
    raise CorruptStateError(f"the new savepoint does not verify: {text}; {NOT_WRITTEN}", path)


def _decode_operator(op: OperatorView, r: OperatorReport, reference: bool) -> None:
    om_holder = {}
    _guard(r, "operator state header", lambda: om_holder.setdefault("m", op.operator_meta))
    om = om_holder.get("m")
    for s in (om.states if om else []):
        if s.kind == "BROADCAST":
            _guard(r, f"broadcast state '{s.name}'", lambda s=s: sum(1 for _ in op.broadcast_state(s.name)))
        else:
            _guard(r, f"{s.kind.lower()} state '{s.name}'", lambda s=s: sum(1 for _ in op.list_state(s.name)))
    for subtask, h in op.operator_handles():
        if h.delegate is not None:
            _guard(r, f"operator state of subtask {subtask}", lambda h=h: _check_operator_stream(op, h, r))
    if not op.has_keyed_state:
        return
    found = {}
    _guard(r, "keyed state handles", lambda: found.setdefault("s", op.keyed_states()))
    km_holder = {}
    _guard(r, "keyed state header", lambda: km_holder.setdefault("m", op.keyed_meta))
    if km_holder.get("m") is None or "s" not in found:
        return
    sources = found["s"]
    workers = _workers(op, len(sources))
    if workers == 1:
        for source in sources:
            _guard(r, _source_label(source), lambda source=source: _decode_source(op, source, r, reference))
        return
    # a subtask a process: each re-opens the savepoint (nothing open crosses a process) and reports back
    with pool.spawn_pool(workers) as executor:
        futures = [executor.submit(_source_task, op.savepoint.path, op.savepoint.fs_options, op.uid_hash, index,
                               reference)
                   for index in range(len(sources))]
        for future in futures:
            done = future.result()
            r.checked.extend(done.checked)
            r.problems.extend(done.problems)
            r.warnings.extend(note for note in done.warnings if note not in r.warnings)


def _workers(op: OperatorView, sources: int) -> int:
    return pool.pool_size(sources, sum(h.size for _, h in op.keyed_handles() if h is not None))


def _source_label(source) -> str:
    what = "RocksDB state" if source.rocksdb is not None else "keyed state"
    return f"{what} of subtask {source.subtask} (key groups {source.start_key_group}-{source.end_key_group})"


def _decode_source(op: OperatorView, source, r: OperatorReport, reference: bool) -> int:
    """Every entry of one subtask's keyed state, strictly decoded, each key in its key group. A large
    key-group stream is read in pieces of about keyed_state.SPLIT_BYTES (the header and one piece's key
    groups at a time, so memory does not grow with the stream), its offsets checked over the whole."""
    if source.rocksdb is not None:
        with source.open(io=op.savepoint.io, strict=reference) as state:
            state.db.check_options()  # every file Flink's restore reads: OPTIONS too
            return _count_checked(op, state, r, source.label)
    pieces = [dataclasses.replace(source, span=span, span_key_groups=(lo, hi))
              for lo, hi, span in keyed_state.split_stream(source.handle, source.stream, keyed_state.SPLIT_BYTES)
              if span is not None] \
        or [source]
    count = 0
    for piece in pieces:
        with piece.open(io=op.savepoint.io, strict=reference) as state:
            if piece is pieces[0]:  # a key-group stream: its offsets and header first
                length = source.stream.length if piece.span is not None else len(state.buf)
                verify_structure.check_key_group_offsets(source.handle, state.meta.header_size, length, source.label)
                _check_header(r, op.keyed_meta.states, state.meta.states, source.label,
                              (op.keyed_meta.key_type, state.meta.key_type))
            count += _count_checked(op, state, r, source.label)
    return count


def _count_checked(op: OperatorView, state, r: OperatorReport, label: str | None) -> int:
    entries = state.entries(states=_decodable(state.codecs, r))
    return sum(1 for _ in verify_structure.checking_key_groups(entries, state.meta.key_type, op.max_parallelism,
                                                               label))


def _source_task(path: str, fs_options, uid_hash: str, index: int, reference: bool) -> OperatorReport:
    """:func:`_decode_source` of the ``index``-th keyed source of an operator, in a pool process."""
    with checking_checksums():
        op = Savepoint.open(path, allow_external_paths=True, fs_options=fs_options).operator(uid_hash)
        r = OperatorReport(op.display_name, op.uid_hash)
        source = op.keyed_states()[index]
        _guard(r, _source_label(source), lambda: _decode_source(op, source, r, reference))
        return r


def _check_operator_stream(op: OperatorView, h, r: OperatorReport) -> None:
    buf = op.savepoint.read_stream(h.delegate)
    src = op.savepoint.stream_source(h.delegate).label
    meta = operator_state.read_operator_proxy(buf, src, operator_state.header_end(h, len(buf)))
    reference = op.operator_meta
    _check_header(r, reference.states if reference else [], meta.states, src)
    verify_structure.check_operator_stream(buf, h, meta, src)


def _check_header(r: OperatorReport, reference, states, source: str, key_types: tuple = ()) -> None:
    mismatch = verify_structure.header_mismatch(reference, states, key_types)
    if mismatch:
        raise CorruptStateError(mismatch, source)
    for name in verify_structure.opaque_states(states):
        note = f"state '{name}': values kept as bytes (serializers fstate cannot read), their framing is not checked"
        if note not in r.warnings:
            r.warnings.append(note)


def _decodable(codecs, report: OperatorReport) -> set[int]:
    """The states whose entries fstate can decode; the others are noted once as not decoded."""
    out = set()
    for codec in codecs:
        if codec.canonical is not None:
            out.add(codec.state_id)
            continue
        note = f"state '{codec.info.name}': not decoded (it has serializers fstate cannot read)"
        if note not in report.warnings:
            report.warnings.append(note)
    return out


__all__ = ["verify", "check_written", "Problem", "VerifyReport", "OperatorReport", "ExternalPathError"]
