"""The IO seam: every file fstate reads or writes goes through a :class:`FileIO`.

Local paths and ``file:`` URIs are served by :class:`LocalFileIO`. Remote schemes (``s3://``,
``s3a://``, ``hdfs://``, ``gs://``) will plug in here through ``pyarrow.fs`` without touching the
readers or writers, which only ever see URIs/paths and this interface.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from contextlib import contextmanager
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from .errors import FStateError, MissingStateFileError, SavepointNotFoundError

METADATA_FILE = "_metadata"


class FileIO(ABC):
    """Minimal file-system interface used by the format core."""

    @abstractmethod
    def read(self, path: str) -> bytes: ...

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes: ...

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abstractmethod
    def size(self, path: str) -> int: ...

    @abstractmethod
    def list_dir(self, path: str) -> list[str]: ...

    @abstractmethod
    def join(self, base: str, name: str) -> str: ...


def strip_file_scheme(path: str) -> str:
    """``file:/a/b``, ``file:///a/b`` and ``file://localhost/a/b`` → ``/a/b``; plain paths unchanged."""
    if path.startswith("file:"):
        parsed = urlparse(path)
        if parsed.netloc not in ("", "localhost"):
            raise FStateError(f"file URI with a host is not supported: {path}")
        return unquote(parsed.path) or "/"
    return path


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def scheme_of(path: str) -> str:
    if path.startswith("file:"):
        return "file"
    m = _SCHEME.match(path)
    return path[: m.end() - 3].lower() if m else "file"


class LocalFileIO(FileIO):
    """Local files. Every OS-level failure (missing file, permissions, a path with a NUL byte from a
    corrupt handle, a file that is a directory) becomes an FStateError naming the path."""

    def _p(self, path: str) -> str:
        return strip_file_scheme(path)

    @contextmanager
    def _errors(self, p: str):
        try:
            yield
        except FileNotFoundError:
            raise MissingStateFileError("file does not exist", p) from None
        except IsADirectoryError:
            raise FStateError("is a directory, expected a file", p) from None
        except PermissionError:
            raise FStateError("permission denied", p) from None
        except (OSError, ValueError) as e:
            raise FStateError(f"cannot read: {e}", repr(p) if "\x00" in p else p) from None

    def read(self, path: str) -> bytes:
        p = self._p(path)
        with self._errors(p):
            with open(p, "rb") as f:
                return f.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        p = self._p(path)
        with self._errors(p):
            with open(p, "rb") as f:
                # never ask for more than the file holds: a corrupt length must not allocate gigabytes
                available = max(0, os.fstat(f.fileno()).st_size - offset)
                f.seek(offset)
                return f.read(available if length is None or length < 0 else min(length, available))

    def exists(self, path: str) -> bool:
        p = self._p(path)
        with self._errors(p):
            return os.path.exists(p)

    def is_dir(self, path: str) -> bool:
        p = self._p(path)
        with self._errors(p):
            return os.path.isdir(p)

    def size(self, path: str) -> int:
        p = self._p(path)
        with self._errors(p):
            return os.path.getsize(p)

    def list_dir(self, path: str) -> list[str]:
        p = self._p(path)
        with self._errors(p):
            return sorted(os.listdir(p))

    def join(self, base: str, name: str) -> str:
        return os.path.join(self._p(base), name)


def io_for(path: str) -> FileIO:
    scheme = scheme_of(path)
    if scheme == "file":
        return LocalFileIO()
    raise FStateError(f"file system scheme '{scheme}://' is not supported yet (local paths and file: URIs are)", path)


@dataclass(frozen=True)
class SavepointLocation:
    """Where a savepoint lives: its directory (exclusive dir for relative handles) and `_metadata`."""

    directory: str
    metadata_path: str
    io: FileIO


def locate(path: str) -> SavepointLocation:
    """Accept a savepoint/checkpoint directory, its `_metadata` file, a `chk-N` dir or a file: URI."""
    io = io_for(path)
    local = strip_file_scheme(path) if scheme_of(path) == "file" else path
    local = local.rstrip("/") or "/"
    if not io.exists(local):
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
    directory = os.path.dirname(local) or "."
    return SavepointLocation(directory, local, io)
