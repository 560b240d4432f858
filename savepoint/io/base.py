"""The :class:`FileIO` interface every file fstate reads or writes goes through."""

from __future__ import annotations

from abc import ABC, abstractmethod

from .uri import is_remote


class FileIO(ABC):
    """Minimal file-system interface used by the format core, the readers and the writers."""

    @abstractmethod
    def read(self, path: str) -> bytes: ...

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """At most ``length`` bytes from ``offset`` (all to the end when ``length`` < 0); never more
        than the file holds, whatever ``length`` says."""

    def map_range(self, path: str, offset: int, length: int):
        """``length`` bytes from ``offset`` mapped into memory (read-only, loaded as they are read), or
        None when this file system cannot map them; then :meth:`read_range` reads them."""
        return None

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abstractmethod
    def size(self, path: str) -> int: ...

    @abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Names of the entries directly in a directory, sorted."""

    @abstractmethod
    def join(self, base: str, name: str) -> str: ...

    # -- writing -----------------------------------------------------------------------------
    @abstractmethod
    def open_output(self, path: str):
        """A context manager giving a binary stream that creates (or replaces) ``path``; the file
        is complete when the block ends without an error."""

    @abstractmethod
    def open_input(self, path: str):
        """A context manager giving a seekable binary stream over ``path``."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove a file; no error if it is already gone."""

    @abstractmethod
    def list_files(self, path: str) -> list[str]:
        """Every file under directory ``path`` (recursively), as full paths/URIs; [] if none."""

    def write(self, path: str, data: bytes) -> None:
        """Create (or replace) ``path`` with ``data`` as a whole."""
        with self.open_output(path) as f:
            f.write(data)

    def accepts(self, path: str) -> bool:
        """Whether this IO serves ``path`` (its scheme, bucket or host)."""
        return not is_remote(path)

    @property
    def atomic_rename(self) -> bool:
        """Whether a directory or file can be renamed into place (local: yes; object stores: no)."""
        return False

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` at once, replacing it (only where :attr:`atomic_rename`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot rename files")
