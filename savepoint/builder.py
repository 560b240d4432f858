"""Writing a savepoint directory atomically: state files, then `_metadata` last, then a rename.

Used by the bootstrap/modify writers and by the runtime. Locally everything goes into a temporary
sibling directory of the target; only a complete savepoint is ever renamed into place (an existing
one is replaced only when the new one is complete, and never leaves no target), and a failure
removes the temporary directory. A second writer of the same target fails at once, and what killed
writers left in the parent directory is cleaned up first (savepoint/atomic.py). Object stores (s3://, gs://, ...) have no rename: the
state files are written under the final prefix and `_metadata` last, in one request, so a reader
never sees a `_metadata` whose files are not all there; a failure deletes the files written.
Nothing outside the target is modified, except the hidden
staging and lock files next to it.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass, field

from . import handles
from .atomic import StagedDirectory
from .errors import FStateError, InvalidArgumentError
from .io import (METADATA_FILE, canonical, io_for, is_remote, is_within, join, resolve_fs_options, split_uri,
                 strip_file_scheme)
from .metadata import CheckpointMetadata, OperatorState, SubtaskState, stream_handles, write_metadata
from .trailers import CANONICAL_SAVEPOINT_PROPERTIES
from .types.hashing import check_parallelism, operator_id_for_uid, parse_operator_id

#: Flink's default `execution.checkpointing.data-inline-threshold` (20 kb): smaller streams are
#: inlined into `_metadata`, larger ones get their own file next to it.
INLINE_THRESHOLD = 20 * 1024
METADATA_VERSION = 6
#: The operator-state header version Flink 1.18 and later write (with the compression flag).
OPERATOR_PROXY_VERSION = 6


def _release(flink_version: str) -> tuple[int, int]:
    """(major, minor) of a Flink release named like "1.18", "1.18.1" or "2"."""
    try:
        parts = [int(x) for x in flink_version.split(".")[:2]]
    except ValueError:
        raise InvalidArgumentError(f"not a Flink version: '{flink_version}'") from None
    release = (parts[0], parts[1] if len(parts) > 1 else 0)
    if release < (1, 11):
        raise InvalidArgumentError(f"Flink {flink_version} is older than 1.11; fstate writes metadata V3 to V6")
    return release


def metadata_version_for(flink_version: str | None) -> int:
    """The `_metadata` version a Flink release reads and writes: 1.11–1.15 → 3, 1.16–1.20 → 4,
    2.0 → 5, 2.1 and later → 6."""
    if not flink_version:
        return METADATA_VERSION
    release = _release(flink_version)
    if release < (1, 16):
        return 3
    if release < (2, 0):
        return 4
    return 5 if release == (2, 0) else 6


def operator_proxy_version_for(flink_version: str | None) -> int:
    """The operator-state header version a Flink release writes: 5 up to 1.17, 6 (which adds the
    compression flag, and which 1.16 and 1.17 refuse) from 1.18 on."""
    if not flink_version:
        return OPERATOR_PROXY_VERSION
    return 5 if _release(flink_version) < (1, 18) else OPERATOR_PROXY_VERSION


#: The State Processor API writes bootstrapped savepoints with checkpoint id 0.
BOOTSTRAP_CHECKPOINT_ID = 0


def stream_name(digest: bytes) -> str:
    """The name of a state stream fstate writes (a file, or an inline handle's name): a UUID, as
    Flink names them, made of the SHA-256 ``digest`` of what the stream holds, so that the same input
    gives the same savepoint, byte for byte (reproducible output; the Flink oracle caches its restores
    of fstate's savepoints by their bytes). Streams of equal content share a name and a file."""
    return str(uuid.UUID(bytes=digest[:16], version=4))


def write_stream(directory: str, data: bytes, inline_threshold: int = INLINE_THRESHOLD, fs_options=None):
    """A stream handle for ``data``: inline when small, else a new file in ``directory`` (a local
    path or a URI; ``fs_options`` for remote ones). Safe to call on a Spark executor (the directory
    must be on a shared or remote file system)."""
    if len(data) == 0:
        return None
    digest = hashlib.sha256(data).digest()
    if len(data) <= inline_threshold:
        return handles.ByteStreamHandle(stream_name(hashlib.sha256(b"inline:" + digest).digest()), data)
    name = stream_name(digest)
    io = io_for(directory, fs_options)
    path = join(directory, name)
    if io.atomic_rename:  # equal streams written at once by two tasks: each file complete, one wins
        part = join(directory, f".{name}.{uuid.uuid4().hex[:8]}.part")
        io.write(part, data)
        io.rename(part, path)
    else:  # an object store's PUT is atomic
        io.write(path, data)
    return handles.RelativeFileHandle(name, len(data))


def resolve_operator_id(uid: str | None, uid_hash: str | None) -> bytes:
    if uid_hash:
        raw = parse_operator_id(uid_hash)
        if raw is None:
            raise InvalidArgumentError(f"uid hash must be 32 hex digits, got '{uid_hash}'")
        return raw
    if not uid:
        raise InvalidArgumentError("an operator needs a uid or a uid hash")
    return operator_id_for_uid(uid)


@dataclass
class OperatorBuild:
    uid: str | None
    operator_id: bytes
    name: str | None
    parallelism: int
    max_parallelism: int
    subtasks: dict[int, SubtaskState] = field(default_factory=dict)

    def subtask(self, index: int) -> SubtaskState:
        return self.subtasks.setdefault(index, SubtaskState())


class SavepointBuilder:
    """Collects operators and writes a savepoint directory atomically.

    >>> b = SavepointBuilder("/out/sp")
    >>> op = b.operator("my-uid", parallelism=2, max_parallelism=128)
    >>> op.subtask(0).managed_operator = ...      # handles from write_stream(b.temp_dir, ...)
    >>> b.commit()
    """

    def __init__(self, target: str, *, overwrite: bool = False, checkpoint_id: int = BOOTSTRAP_CHECKPOINT_ID,
                 properties: bytes = CANONICAL_SAVEPOINT_PROPERTIES, inline_threshold: int = INLINE_THRESHOLD,
                 metadata_version: int = METADATA_VERSION, operator_proxy_version: int = OPERATOR_PROXY_VERSION,
                 fs_options=None):
        #: file-system options for a remote target (passed on to the executors that write files)
        self.fs_options = resolve_fs_options(fs_options)
        self.remote = is_remote(target)
        if self.remote:
            self._init_remote(target, overwrite)
        else:
            # a lock against a second writer of the target, and a hidden sibling to stage it in
            self._staged = StagedDirectory(strip_file_scheme(target), overwrite)
            self.target = self._staged.target
            self.temp_dir = self._staged.temp_dir
        self.overwrite = overwrite
        self.checkpoint_id = checkpoint_id
        self.properties = properties
        self.inline_threshold = inline_threshold
        self.metadata_version = metadata_version
        #: the operator-state header version of the streams written for it (operator_proxy_version_for)
        self.operator_proxy_version = operator_proxy_version
        self.operators: dict[bytes, OperatorBuild] = {}
        self.extra_operators: list[OperatorState] = []
        #: {file name: (the file its bytes were copied from, start)}: see note_copy
        self.origins: dict[str, tuple[str, int]] = {}
        self._done = False

    def operator(self, uid: str | None, *, uid_hash: str | None = None, parallelism: int, max_parallelism: int,
                 name: str | None = None) -> OperatorBuild:
        check_parallelism(parallelism, max_parallelism)
        op_id = resolve_operator_id(uid, uid_hash)
        existing = self.operators.get(op_id)
        if existing is not None:
            if (existing.parallelism, existing.max_parallelism) != (parallelism, max_parallelism):
                raise InvalidArgumentError(
                    f"operator {uid or uid_hash}: parallelism {parallelism}/{max_parallelism} differs from "
                    f"{existing.parallelism}/{existing.max_parallelism} given before")
            return existing
        op = OperatorBuild(uid, op_id, name or uid, parallelism, max_parallelism)
        self.operators[op_id] = op
        return op

    def add_operator_state(self, op: OperatorState) -> None:
        """An already complete operator (e.g. a shallow copy from a base savepoint)."""
        self.extra_operators.append(op)

    def _init_remote(self, target: str, overwrite: bool) -> None:
        self.target = target.rstrip("/")
        if not split_uri(self.target)[2]:
            raise InvalidArgumentError("a savepoint needs a prefix inside the bucket, not the bucket root", target)
        self.io = io_for(self.target, self.fs_options)
        if self.io.exists(join(self.target, METADATA_FILE)) and not overwrite:
            raise InvalidArgumentError(f"target already exists (it has a {METADATA_FILE}; use overwrite to replace "
                                       "it)", self.target)
        # no rename on object stores: files go under the final prefix, `_metadata` last; what was
        # there before is remembered so that a failure deletes only what this write created
        self.temp_dir = self.target
        self._existing = set(self.io.list_files(self.target))

    def stream(self, data: bytes):
        return write_stream(self.temp_dir, data, self.inline_threshold, self.fs_options)

    def metadata(self) -> CheckpointMetadata:
        ops = []
        for b in self.operators.values():
            ops.append(OperatorState(b.operator_id, b.parallelism, b.max_parallelism,
                                     {i: s for i, s in sorted(b.subtasks.items()) if not s.is_empty},
                                     name=b.name, uid=b.uid))
        ids = [o.operator_id for o in ops] + [o.operator_id for o in self.extra_operators]
        dup = {i.hex() for i in ids if ids.count(i) > 1}
        if dup:
            raise InvalidArgumentError(f"operator id(s) {', '.join(sorted(dup))} would appear twice")
        return CheckpointMetadata(self.metadata_version, self.checkpoint_id, ops + self.extra_operators,
                                  properties_raw=self.properties)

    def note_copy(self, name: str, source: str, start: int) -> None:
        """File ``name`` of the new savepoint holds bytes copied from ``source`` (from byte ``start``):
        a problem :meth:`commit`'s verify finds in it is reported at ``source``."""
        self.origins[name] = (source, start)

    def commit(self, verify: bool = True) -> str:
        """Write `_metadata` last and move the finished directory into place. ``verify`` (local
        targets): the complete staged directory must pass `fstate verify`'s checks first
        (verify.check_written); when it does not, nothing is left behind."""
        if self.remote:
            return self._commit_remote()
        try:
            write_metadata_file(os.path.join(self.temp_dir, METADATA_FILE), write_metadata(self.metadata()))
            if verify:
                from .verify import check_written

                check_written(self.temp_dir, self.origins, self.fs_options)
            self._staged.commit()  # the old target, if any, is kept until the new one is in place
            self._done = True
            return self.target
        except BaseException:
            self.abort()
            raise

    def _commit_remote(self) -> str:
        meta_path = join(self.target, METADATA_FILE)
        try:
            meta = self.metadata()
            data = write_metadata(meta)
            self._check_uploads(meta)
            old = None
            if self.io.exists(meta_path):
                if not self.overwrite:
                    raise InvalidArgumentError("target appeared while writing; not replaced", self.target)
                old = self.io.read(meta_path)
            self.io.write(meta_path, data)  # one PUT: the savepoint appears complete, or not at all
            self._done = True
        except BaseException:
            self.abort()
            raise
        if old is not None:
            self._delete_replaced(old, data)
        return self.target

    def _check_uploads(self, meta) -> None:
        """Every file `_metadata` will point at is there with its size (no rename means no
        directory listing to trust: each object is checked before the savepoint appears)."""
        from .errors import StorageError

        for f, size in sorted(_relative_files(meta, self.target).items()):
            actual = self.io.size(f)
            if actual != size:
                raise StorageError(f"uploaded state file has {actual} bytes, expected {size}", f)

    def _delete_replaced(self, old: bytes, new: bytes) -> None:
        """After an overwrite: the files of the replaced savepoint that the new one does not use."""
        from .metadata import read_metadata

        try:
            old_files = _owned_files(read_metadata(old, self.target), self.target)
        except FStateError:
            return  # the old `_metadata` was not readable: leave its files alone
        keep = _owned_files(read_metadata(new, self.target), self.target)
        for f in sorted(old_files - keep):
            try:
                self.io.delete(f)
            except FStateError:
                pass

    def abort(self) -> None:
        if self._done:
            return
        if self.remote:
            try:
                for f in self.io.list_files(self.target):
                    if f not in self._existing:
                        self.io.delete(f)
            except FStateError:
                pass  # best effort: without `_metadata`, leftover files are not a savepoint
            return
        self._staged.abort()

    def __enter__(self) -> "SavepointBuilder":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.abort()
        elif not self._done:
            self.commit()
        return False


def write_metadata_file(path: str, data: bytes, fs_options=None) -> None:
    """Write a `_metadata` file so that readers see the old bytes or the new ones, never a part:
    locally a temporary sibling, fsync, rename; on object stores one PUT replaces the object whole."""
    if is_remote(path):
        io_for(path, fs_options).write(path, data)
        return
    tmp = f"{path}.fstate-tmp-{uuid.uuid4().hex[:12]}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def ensure_writable_target(target: str, overwrite: bool, fs_options=None) -> None:
    if is_remote(target):
        if not overwrite and io_for(target, fs_options).exists(join(target, METADATA_FILE)):
            raise FStateError(f"target already exists (it has a {METADATA_FILE}; use --overwrite to replace it)",
                              target)
        return
    t = strip_file_scheme(target)
    if os.path.exists(t) and not overwrite:
        raise FStateError("target already exists (use --overwrite to replace it)", t)


def _relative_files(meta, directory: str) -> dict[str, int]:
    """{path: size} of the files that relative handles of ``meta`` name in ``directory``."""
    return {join(directory, h.relative_path): h.size for _, _, _, h in stream_handles(meta)
            if isinstance(h, handles.RelativeFileHandle)}


def _owned_files(meta, directory: str) -> set[str]:
    """Files inside ``directory`` that the handles of ``meta`` point at (relative or absolute)."""
    out: set[str] = set()
    for _, _, _, h in stream_handles(meta):
        if isinstance(h, handles.RelativeFileHandle):
            out.add(canonical(join(directory, h.relative_path)))
        elif isinstance(h, (handles.FileHandle, handles.SegmentFileHandle)):
            p = h.path if isinstance(h, handles.FileHandle) else h.physical_path
            if is_within(p, directory):
                out.add(canonical(p))
    prefix = directory.rstrip("/")
    # back to the spelling the target uses (s3a:// stays s3a://)
    return {prefix + f[len(canonical(prefix)):] for f in out}
