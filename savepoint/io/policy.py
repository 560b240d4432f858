"""The one path policy: which files a snapshot may name, for every entry point (CLI, Python API,
data source, SQL views, diff, shallow and deep modify, verify, deps, relocate).

A snapshot's file handles may name files inside its own directory only, unless external paths are
allowed (``--allow-external-paths``, ``allow_external_paths=True``, data source option
``allowExternalPaths=true``); the default is False everywhere. "Inside" is decided on real paths:
``..`` segments are resolved and symlinks followed (``os.path.realpath``) before comparing, so a
symlink inside the directory that points outside is outside. For URIs another scheme family,
bucket/host or key prefix is outside.

Besides the snapshot's directory, these count as inside, as Flink's own layout has them:

- for a checkpoint ``<job dir>/chk-N``: the job directory's ``shared/`` and ``taskowned/`` (RocksDB
  incremental checkpoints name their shared files there by absolute paths; file merging uses
  ``taskowned/``). Nothing else of the job directory, and not its parent;
- the directory given as the checkpoint directory's new location (``--checkpoint-base-dir``), where
  the user said those files now are.

``fstate deps`` (:func:`external_files`) is stricter: it lists every file outside the snapshot's own
directory, the job's ``shared/`` too (copying ``chk-N`` alone loses them).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ExternalPathError
from .uri import is_remote, is_within, join, parent_of, strip_file_scheme

#: how to allow external paths, as every message says it
ALLOW_HINT = "pass --allow-external-paths (allow_external_paths=True, data source option allowExternalPaths=true) to allow it"

_CHECKPOINT_DIR = re.compile(r"chk-[0-9]+")


def real_location(path: str) -> str:
    """Where a path really is: local paths with ``file:`` stripped, ``..`` resolved and symlinks
    followed; URIs unchanged."""
    return path if is_remote(path) else os.path.realpath(strip_file_scheme(path))


@dataclass(frozen=True)
class PathPolicy:
    """The directories whose files a snapshot may name (``inside``, the snapshot's own first) and
    whether files elsewhere are allowed."""

    directory: str
    inside: tuple[str, ...]
    allow_external: bool = False

    @classmethod
    def for_snapshot(cls, directory: str, *, allow_external: bool = False,
                     checkpoint_base_dir: str | None = None) -> "PathPolicy":
        inside = [directory]
        if not is_remote(directory):
            local = strip_file_scheme(directory).rstrip("/") or "/"
            parent, name = os.path.split(local)
            if _CHECKPOINT_DIR.fullmatch(name):
                inside += [os.path.join(parent, "shared"), os.path.join(parent, "taskowned")]
        else:
            name = directory.rstrip("/").rsplit("/", 1)[-1]
            if _CHECKPOINT_DIR.fullmatch(name):
                parent = parent_of(directory.rstrip("/"))
                inside += [join(parent, "shared"), join(parent, "taskowned")]
        if checkpoint_base_dir:
            inside.append(checkpoint_base_dir)
        return cls(directory, tuple(inside), allow_external)

    def is_inside(self, path: str) -> bool:
        """Whether ``path`` (absolute, ``file:`` or a URI) lies in one of the inside directories,
        symlinks resolved."""
        return any(is_within(path, d) for d in self.inside)

    def check(self, path: str, shown: str | None = None) -> str:
        """``path`` as fstate opens it (``file:`` stripped) when it is inside or external paths are
        allowed; else :class:`ExternalPathError` naming the file (``shown``, default the path)."""
        if not self.allow_external and not self.is_inside(path):
            raise external_path_error(shown or path, self.directory, real_location(path))
        return path if is_remote(path) else strip_file_scheme(path)

    def relative(self, relative_path: str) -> str:
        """The file a relative handle names (joined to the directory), checked like :meth:`check`:
        an absolute or ``..`` relative path, or one through a symlink, may lead outside."""
        return self.check(join(self.directory, relative_path), relative_path)


def external_path_error(shown: str, directory: str, real: str | None = None) -> ExternalPathError:
    """The one-line error for a file outside the savepoint directory."""
    where = f" (really {real})" if real and real not in (shown, strip_file_scheme(shown)) else ""
    return ExternalPathError(f"state file {shown}{where} lies outside the savepoint directory; {ALLOW_HINT}",
                             directory)


def handle_target(handle, directory: str) -> str | None:
    """The file a stream handle names (relative handles joined to ``directory``), None for inline
    and empty handles."""
    from .. import handles

    if isinstance(handle, handles.RelativeFileHandle):
        return join(directory, handle.relative_path)
    if isinstance(handle, handles.FileHandle):
        return handle.path
    if isinstance(handle, handles.SegmentFileHandle):
        return handle.physical_path
    return None


def snapshot_stream_handles(metadata):
    """Every stream handle of a snapshot: operator and keyed state (RocksDB files too) and the
    channel state of unaligned checkpoints."""
    from ..metadata import stream_handles

    for _, _, _, handle in stream_handles(metadata):
        yield handle
    for op in metadata.operators:
        for subtask in op.subtasks.values():
            for channel in (*subtask.input_channels, *subtask.result_subpartitions):
                if channel.delegate is not None:
                    yield channel.delegate


def external_files(metadata, directory: str) -> dict[str, int]:
    """Directories outside ``directory`` (real paths: symlinks followed) holding files the snapshot's
    handles name, with the number of handles: absolute paths, ``file:`` URIs, relative handles with
    ``..`` or an absolute path, symlinks, other buckets or prefixes."""
    out: dict[str, int] = {}
    for handle in snapshot_stream_handles(metadata):
        target = handle_target(handle, directory)
        if target is None or "\x00" in target or is_within(target, directory):
            continue
        real = real_location(target)
        parent = parent_of(real)
        out[parent] = out.get(parent, 0) + 1
    return out
