"""Finding a savepoint: its directory and ``_metadata`` from whatever the user points at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import InvalidArgumentError, SavepointNotFoundError, StorageError
from .access import io_for
from .base import FileIO
from .options import FsOptions
from .remote import RemoteFileIO
from .uri import is_remote, parent_of, scheme_of, split_uri, strip_file_scheme

METADATA_FILE = "_metadata"


@dataclass(frozen=True)
class SavepointLocation:
    """Where a savepoint lives: its directory (exclusive dir for relative handles) and `_metadata`."""

    directory: str
    metadata_path: str
    io: FileIO


def locate(path: str, options: Mapping[str, Any] | FsOptions | None = None) -> SavepointLocation:
    """Accept a savepoint/checkpoint directory, its `_metadata` file, a `chk-N` dir, a file: URI or
    a remote URI (s3://bucket/prefix, ...)."""
    io = io_for(path, options)
    local = strip_file_scheme(path) if scheme_of(path) == "file" else path
    local = local.rstrip("/") or "/"
    if is_remote(local) and not split_uri(local)[1]:
        raise InvalidArgumentError("a bucket name is missing", path)
    if not io.exists(local):
        if is_remote(local) and isinstance(io, RemoteFileIO) and io.bucket_exists(local) is False:
            raise StorageError(f"bucket '{split_uri(local)[1]}' does not exist", path)
        raise SavepointNotFoundError("no such file or directory", path)
    if io.is_dir(local):
        meta = io.join(local, METADATA_FILE)
        if io.exists(meta):
            return SavepointLocation(local, meta, io)
        candidates = [
            n for n in io.list_dir(local)
            if (n.startswith("chk-") or n.startswith("savepoint-")) and io.exists(io.join(io.join(local, n), METADATA_FILE))
        ]
        if len(candidates) == 1:
            # a savepoint target directory (or a job's checkpoint directory) holding exactly one
            only = io.join(local, candidates[0])
            return SavepointLocation(only, io.join(only, METADATA_FILE), io)
        hint = f"; it contains {', '.join(candidates)}: pass one of them" if candidates else ""
        raise SavepointNotFoundError(f"not a savepoint or checkpoint directory (no {METADATA_FILE} file){hint}", path)
    directory = parent_of(local)
    return SavepointLocation(directory, local, io)
