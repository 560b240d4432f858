"""The entry point: :func:`io_for` gives the FileIO for a path (one per file system and options per
process); :func:`copy_range` and :func:`iter_chunks` stream byte ranges between any two of them."""

from __future__ import annotations

import threading
from typing import Any, Iterator, Mapping

from ..errors import MissingStateFileError, StorageError
from .base import FileIO
from .local import LocalFileIO
from .options import FsOptions, resolve_fs_options
from .remote import RemoteFileIO
from .uri import FAMILIES, scheme_of, split_uri

COPY_CHUNK = 8 * 1024 * 1024

_LOCAL = LocalFileIO()
_CACHE: dict[tuple, RemoteFileIO] = {}
_CACHE_LOCK = threading.Lock()


def io_for(path: str, options: Mapping[str, Any] | FsOptions | None = None) -> FileIO:
    """The FileIO for ``path``: local paths and ``file:`` URIs, ``s3://``/``s3a://``/``s3n://``/``s3p://``,
    ``gs://`` and ``hdfs://``. ``options`` (a mapping or normalized tuple) are merged over the
    process defaults and the environment (see the module doc)."""
    scheme = scheme_of(path)
    if scheme == "file":
        return _LOCAL
    family = FAMILIES.get(scheme)
    if family is None:
        raise StorageError(f"file system scheme '{scheme}://' is not supported (local paths, file:, s3://, s3a://, "
                           "s3n://, s3p://, gs:// and hdfs:// are)", path)
    opts = resolve_fs_options(options)
    authority = split_uri(path)[1] if family == "hdfs" else ""
    key = (family, authority, opts)
    io = _CACHE.get(key)
    if io is None:
        with _CACHE_LOCK:
            io = _CACHE.setdefault(key, RemoteFileIO(family, authority, opts))
    return io


def copy_range(src: str, start: int, length: int, dst: str, options: FsOptions | None = None) -> None:
    """Stream ``length`` bytes of ``src`` from ``start`` into a new file ``dst`` (any two file
    systems), in chunks; an error if ``src`` holds fewer bytes."""
    src_io, dst_io = io_for(src, options), io_for(dst, options)
    with src_io.open_input(src) as fin, dst_io.open_output(dst) as fout:
        fin.seek(start)
        remaining = length
        while remaining > 0:
            chunk = fin.read(min(remaining, COPY_CHUNK))
            if not chunk:
                raise MissingStateFileError(f"state file is shorter than its handle says ({start + length} bytes)", src)
            fout.write(chunk)
            remaining -= len(chunk)


def iter_chunks(src: str, start: int, length: int, options: FsOptions | None = None) -> Iterator[bytes]:
    """The bytes of a range, in chunks of at most COPY_CHUNK (never the whole file in memory)."""
    io = io_for(src, options)
    with io.open_input(src) as fin:
        fin.seek(start)
        remaining = length
        while remaining > 0:
            chunk = fin.read(min(remaining, COPY_CHUNK))
            if not chunk:
                raise MissingStateFileError(f"state file is shorter than its handle says ({start + length} bytes)", src)
            remaining -= len(chunk)
            yield chunk
