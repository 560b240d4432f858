"""Local files (plain paths and ``file:`` URIs)."""

from __future__ import annotations

import mmap
import os
from contextlib import contextmanager

from ..errors import FStateError, MissingStateFileError
from .base import FileIO
from .uri import strip_file_scheme


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

    def map_range(self, path: str, offset: int, length: int):
        """An ``mmap`` of the range when ``offset`` is at a mapping boundary (a file holding one stream
        starts at 0) and the file holds the whole range; else None."""
        if offset % mmap.ALLOCATIONGRANULARITY or length <= 0:
            return None
        p = self._p(path)
        with self._errors(p):
            with open(p, "rb") as f:
                if os.fstat(f.fileno()).st_size < offset + length:
                    return None
                return mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ, offset=offset)

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

    @contextmanager
    def open_output(self, path: str):
        p = self._p(path)
        try:
            f = open(p, "wb")
        except OSError as e:
            raise FStateError(f"cannot write: {e.strerror or e}", p) from None
        with f:
            yield f

    @contextmanager
    def open_input(self, path: str):
        p = self._p(path)
        with self._errors(p):
            f = open(p, "rb")
        with f:
            yield f

    def write(self, path: str, data: bytes) -> None:
        with self.open_output(path) as f:
            f.write(data)

    def delete(self, path: str) -> None:
        try:
            os.remove(self._p(path))
        except FileNotFoundError:
            pass

    def list_files(self, path: str) -> list[str]:
        p = self._p(path)
        out = []
        for root, _, files in os.walk(p):
            out += [os.path.join(root, f) for f in files]
        return sorted(out)

    @property
    def atomic_rename(self) -> bool:
        return True

    def rename(self, src: str, dst: str) -> None:
        with self._errors(self._p(src)):
            os.replace(self._p(src), self._p(dst))
