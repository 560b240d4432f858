"""Resolving stream handles to bytes: where a handle's bytes live (:class:`StreamSource`, shippable to a
Spark executor), the path checks that keep reads inside the snapshot, and finding files of a moved
checkpoint directory."""

from __future__ import annotations

import dataclasses
import mmap
import os
import re
import shlex
from dataclasses import dataclass

from .errors import CorruptStateError, MissingStateFileError
from .io import FileIO, io_for, scheme_of, strip_file_scheme
from .io.policy import PathPolicy
from .handles import (ByteStreamHandle, EmptySegmentFileHandle, FileHandle, RelativeFileHandle,
    SegmentFileHandle)


# ---------------------------------------------------------------------------------------------
# resolving stream handles to bytes


@dataclass(frozen=True)
class StreamSource:
    """Where the bytes of a stream handle live, in a form that can be shipped to a Spark executor."""

    path: str | None  # None for inline
    start: int = 0
    length: int | None = None
    data: bytes | None = None
    label: str = ""
    #: file-system options (endpoint, credentials, ...) for a remote path, carried to the executor
    fs_options: tuple = dataclasses.field(default=(), repr=False)


def resolve_path(path: str, base_dir: str, allow_external: bool = False) -> str:
    """Absolute handle path → local path (or remote URI), checking that it stays in ``base_dir``
    (symlinks resolved) unless external paths are allowed (see :mod:`.io.policy`)."""
    return PathPolicy(base_dir, (base_dir,), allow_external).check(path)


def stream_source(h, base_dir: str, *, allow_external: bool = False, policy: PathPolicy | None = None) -> StreamSource:
    """Where the bytes of handle ``h`` live; its file checked by ``policy`` (by default: inside
    ``base_dir`` unless ``allow_external``)."""
    for attr in ("relative_path", "path", "physical_path"):
        if "\x00" in (getattr(h, attr, None) or ""):
            raise CorruptStateError(f"a state handle's file path contains a NUL byte: {getattr(h, attr)!r}", base_dir)
    if policy is None:
        policy = PathPolicy(base_dir, (base_dir,), allow_external)
    if isinstance(h, ByteStreamHandle):
        return StreamSource(None, data=h.data, label=f"inline state '{h.name}'")
    if isinstance(h, RelativeFileHandle):
        rel = h.relative_path
        return StreamSource(policy.relative(rel), 0, h.size, label=rel)
    if isinstance(h, FileHandle):
        p = policy.check(h.path)
        return StreamSource(p, 0, h.size, label=p)
    if isinstance(h, SegmentFileHandle):
        p = policy.check(h.physical_path)
        return StreamSource(p, h.start, h.size, label=p)
    if isinstance(h, EmptySegmentFileHandle):
        return StreamSource(None, data=b"", label="empty segment")
    raise CorruptStateError(f"cannot open a stream from handle {type(h).__name__}", base_dir)


_CHECKPOINT_SUBDIR = re.compile(r"^(shared|taskowned|chk-[0-9]+)$")


def relocation_candidates(path: str, snapshot_dir: str, checkpoint_base_dir: str | None = None) -> list[str]:
    """Where an absolute state file of a checkpoint may live after the job's checkpoint directory
    (``<dir>/<job id>`` with ``shared/``, ``taskowned/`` and ``chk-N/``) was moved: under
    ``checkpoint_base_dir`` (that directory, or its parent), then beside the snapshot's ``chk-N``.
    Local paths only; empty when the path is not inside such a directory."""
    if scheme_of(path) != "file":
        return []
    parts = strip_file_scheme(path).split("/")
    for i in range(len(parts) - 2, 0, -1):
        if _CHECKPOINT_SUBDIR.match(parts[i]):
            rel, job = parts[i:], parts[i - 1]
            break
    else:
        return []
    out = []
    if checkpoint_base_dir:
        base = strip_file_scheme(checkpoint_base_dir)
        out += [os.path.join(base, *rel), os.path.join(base, job, *rel)]
    out.append(os.path.join(os.path.dirname(strip_file_scheme(snapshot_dir).rstrip("/")), *rel))
    return out


def moved_hint(path: str, snapshot_dir: str) -> str | None:
    """For an absolute local state file that does not exist but does under ``snapshot_dir`` (by its
    last one to three path components): what the user runs to fix the handles of a moved savepoint
    (``fstate relocate``); None otherwise."""
    if scheme_of(path) != "file" or scheme_of(snapshot_dir) != "file":
        return None
    missing = strip_file_scheme(path).rstrip("/")
    if os.path.lexists(missing):
        return None
    here = os.path.abspath(strip_file_scheme(snapshot_dir).rstrip("/"))
    parts = missing.split("/")
    for k in range(1, min(len(parts) - 1, 3) + 1):
        if os.path.isfile(os.path.join(here, *parts[-k:])):
            old = "/".join(parts[:-k]) or "/"
            if old == here:
                return None
            return (f"the savepoint looks moved (its handles name {old}/..., the file is in {here}); fix them with: "
                    f"fstate relocate {shlex.quote(here)} --from {shlex.quote(old)} --to {shlex.quote(here)}")
    return None


def relocate_source(src: StreamSource, snapshot_dir: str, checkpoint_base_dir: str | None = None) -> StreamSource:
    """The source of an absolute-path handle, pointed at the file's new location when the job's
    checkpoint directory moved (see :func:`relocation_candidates`): an existing file under
    ``checkpoint_base_dir`` wins, then the original path, then the snapshot's sibling directories.
    Unchanged when nothing is found (reading then reports the original path as missing)."""
    if src.path is None or scheme_of(src.path) != "file":
        return src
    cands = relocation_candidates(src.path, snapshot_dir, checkpoint_base_dir)
    n_override = 2 if checkpoint_base_dir and cands else 0
    for c in cands[:n_override] + [src.path] + cands[n_override:]:
        if os.path.isfile(c):
            return src if c == src.path else dataclasses.replace(src, path=c)
    return src


def source_io(src: StreamSource, io: FileIO | None = None) -> FileIO:
    """The FileIO that serves ``src`` (``io`` when it does; else one made with the source's options)."""
    if io is not None and io.accepts(src.path):
        return io
    return io_for(src.path, src.fs_options)


def is_mapped(buf) -> bool:
    """Whether ``buf`` is a mapped stream (:meth:`.io.FileIO.map_range`) whose pages a reader may drop
    once read (:func:`release`; the compiled passes drop them as they go when told so)."""
    return isinstance(buf, mmap.mmap) and hasattr(buf, "madvise")


def release(buf, start: int, end: int) -> None:
    """A mapped stream's (:meth:`.io.FileIO.map_range`) whole pages within ``[start, end)`` dropped from
    this process once read (they stay in the page cache and come back if read again): a reader of a
    large stream holds the pages of what it is reading, not of all it has read. Bytes in memory stay."""
    if not is_mapped(buf):
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = min(end, len(buf)) // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        buf.madvise(mmap.MADV_DONTNEED, first, last - first)


def read_source(src: StreamSource, io: FileIO | None = None) -> bytes:
    if src.path is None:
        return src.data or b""
    io = source_io(src, io)
    if src.start == 0 and src.length is not None:
        data = io.read(src.path)
    else:
        data = io.read_range(src.path, src.start, src.length if src.length is not None else -1)
    if src.length is not None and len(data) != src.length:
        raise MissingStateFileError(
            f"state file has {len(data)} bytes, but the savepoint's metadata says {src.length}", src.path)
    return data
