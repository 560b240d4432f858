"""Remote files - S3 (s3, s3a, s3n, s3p), Google Cloud Storage (gs) and HDFS - through ``pyarrow.fs``.

Errors become :class:`~..errors.StorageError` (or MissingStateFileError) naming the URI; throttling,
network failures and server errors are retried with backoff first."""

from __future__ import annotations

import posixpath
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable

from ..errors import FStateError, InvalidArgumentError, MissingStateFileError, StorageError
from .base import FileIO
from .classify import aws_credentials_apparent, classify_error
from .filesystems import gcs_filesystem, hdfs_filesystem, s3_filesystem
from .options import FsOptions, bool_option, describe_options, number_option, options_for
from .uri import family_of, join, split_uri


class _Output:
    """A remote output stream that reports failures as StorageError naming the URI."""

    def __init__(self, io: "RemoteFileIO", uri: str, stream):
        self._io, self._uri, self._stream = io, uri, stream

    def write(self, data) -> int:
        try:
            return self._stream.write(data)
        except OSError as e:
            raise self._io._translate(e, self._uri, "write") from None

    def tell(self) -> int:
        return self._stream.tell()

    def close(self) -> None:
        try:
            self._stream.close()
        except OSError as e:
            raise self._io._translate(e, self._uri, "write") from None


class RemoteFileIO(FileIO):
    """Files on S3 (s3, s3a, s3n, s3p), Google Cloud Storage (gs) or HDFS through ``pyarrow.fs``.

    Paths are full URIs. Picklable (the pyarrow file system is made again where it is used); one
    instance per family, host and options per process (see :func:`io_for`)."""

    def __init__(self, family: str, authority: str = "", options: FsOptions = ()):
        self.family = family
        self.authority = authority  # HDFS name node (host:port); buckets are part of the paths
        self.options = options
        self._opts = options_for(family, options)
        self.retries = max(1, int(number_option(self._opts, "retries", int, 3)))
        self.retry_wait = float(number_option(self._opts, "retry_wait", float, 0.5))
        self._fs = None
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"family": self.family, "authority": self.authority, "options": self.options}

    def __setstate__(self, state):
        self.__init__(state["family"], state["authority"], state["options"])

    def __repr__(self) -> str:
        return f"RemoteFileIO({self.family}, options: {describe_options(self.options)})"

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def fs(self):
        if self._fs is None:
            with self._lock:
                if self._fs is None:
                    try:
                        if self.family == "s3":
                            self._fs = s3_filesystem(self._opts)
                        elif self.family == "gcs":
                            self._fs = gcs_filesystem(self._opts)
                        else:
                            self._fs = hdfs_filesystem(self.authority, self._opts)
                    except ImportError as e:
                        raise StorageError(f"pyarrow cannot open {self.family} file systems here: {e}") from None
        return self._fs

    def accepts(self, path: str) -> bool:
        if family_of(path) != self.family:
            return False
        return self.family != "hdfs" or split_uri(path)[1] == self.authority

    def _p(self, uri: str) -> str:
        if "\x00" in uri:
            raise FStateError("a path with a NUL byte", repr(uri))
        fam, authority, key = split_uri(uri)
        if fam != self.family:
            raise FStateError(f"internal: {self.family} file system asked for {uri}")
        if self.family == "hdfs":
            return "/" + key
        if not authority:
            raise InvalidArgumentError("a bucket name is missing", uri)
        return f"{authority}/{key}" if key else authority

    def bucket_exists(self, uri: str) -> bool | None:
        if self.family == "hdfs":
            return None
        import pyarrow.fs as pafs

        try:
            return self.fs.get_file_info(split_uri(uri)[1]).type != pafs.FileType.NotFound
        except OSError:
            return None

    def _translate(self, e: BaseException, uri: str, op: str) -> FStateError:
        message = str(e).strip() or type(e).__name__
        if isinstance(e, FileNotFoundError):
            kind = "missing"
        elif isinstance(e, PermissionError):
            kind = "denied"
        else:
            kind, _ = classify_error(message)
        if kind == "missing" and self.bucket_exists(uri) is False:
            kind = "no_bucket"
        if kind == "missing":
            return MissingStateFileError("file does not exist", uri)
        if kind == "no_bucket":
            return StorageError(f"bucket '{split_uri(uri)[1]}' does not exist", uri)
        if self.family == "s3" and kind in ("denied", "server") and not bool_option(self._opts, "anonymous") \
                and not aws_credentials_apparent(self._opts):
            return StorageError(
                "no AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
                "~/.aws/credentials, or pass --fs-option access_key=... secret_key=...; anonymous=true for public "
                f"buckets); {op} failed: {message}", uri)
        if kind == "denied":
            return StorageError(f"access denied ({op}): {message}", uri)
        if kind == "throttled":
            return StorageError(f"throttled by the server ({op}), still after {self.retries} attempts: {message}",
                                uri, transient=True)
        if kind == "network":
            return StorageError(f"cannot reach the storage endpoint ({op}), still after {self.retries} attempts: "
                                f"{message}", uri, transient=True)
        if kind == "server":
            return StorageError(f"storage server error ({op}), still after {self.retries} attempts: {message}", uri,
                                transient=True)
        return StorageError(f"{op} failed: {message}", uri)

    def _call(self, uri: str, op: str, fn: Callable[[], Any]):
        """Run ``fn``, retrying transient failures (throttling, network, 5xx) with backoff; any
        failure becomes an FStateError naming ``uri``."""
        for attempt in range(self.retries):
            try:
                return fn()
            except FStateError:
                raise
            except (OSError, ValueError) as e:
                if isinstance(e, OSError) and not isinstance(e, (FileNotFoundError, PermissionError)):
                    kind, retryable = classify_error(str(e))
                    if retryable and attempt + 1 < self.retries and not (
                            self.family == "s3" and kind == "server" and not aws_credentials_apparent(self._opts)
                            and not bool_option(self._opts, "anonymous")):
                        time.sleep(min(self.retry_wait * (2 ** attempt), 10.0))
                        continue
                if isinstance(e, ValueError):
                    raise FStateError(f"{op} failed: {e}", uri) from None
                raise self._translate(e, uri, op) from None
        raise AssertionError("unreachable")

    def _info(self, uri: str):
        return self._call(uri, "stat", lambda: self.fs.get_file_info(self._p(uri)))

    # -- reading -------------------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        def go():
            with self.fs.open_input_file(self._p(path)) as f:
                return f.read()
        return self._call(path, "read", go)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        def go():
            with self.fs.open_input_file(self._p(path)) as f:
                # never ask for more than the object holds: a corrupt length must not allocate gigabytes
                available = max(0, f.size() - offset)
                n = available if length is None or length < 0 else min(length, available)
                return f.read_at(n, offset) if n > 0 else b""
        return self._call(path, "read", go)

    def exists(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return self._info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        import pyarrow.fs as pafs

        return self._info(path).type == pafs.FileType.Directory

    def size(self, path: str) -> int:
        import pyarrow.fs as pafs

        info = self._info(path)
        if info.type == pafs.FileType.NotFound:
            if self.bucket_exists(path) is False:
                raise StorageError(f"bucket '{split_uri(path)[1]}' does not exist", path)
            raise MissingStateFileError("file does not exist", path)
        if info.type != pafs.FileType.File:
            raise FStateError("is a directory, expected a file", path)
        return info.size

    def _listing(self, path: str, recursive: bool):
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(self._p(path).rstrip("/"), recursive=recursive, allow_not_found=True)
        return self._call(path, "list", lambda: self.fs.get_file_info(sel))

    def list_dir(self, path: str) -> list[str]:
        return sorted(posixpath.basename(i.path.rstrip("/")) for i in self._listing(path, False))

    def list_files(self, path: str) -> list[str]:
        import pyarrow.fs as pafs

        base = path.rstrip("/")
        root = self._p(base).rstrip("/")
        out = []
        for i in self._listing(path, True):
            if i.type == pafs.FileType.File and i.path.startswith(root + "/"):
                out.append(base + "/" + i.path[len(root) + 1:])
        return sorted(out)

    def join(self, base: str, name: str) -> str:
        return join(base, name)

    @contextmanager
    def open_input(self, path: str):
        f = self._call(path, "read", lambda: self.fs.open_input_file(self._p(path)))
        try:
            yield _Input(self, path, f)
        finally:
            f.close()

    # -- writing -------------------------------------------------------------------------------
    @contextmanager
    def open_output(self, path: str):
        stream = self._call(path, "write", lambda: self.fs.open_output_stream(self._p(path)))
        out = _Output(self, path, stream)
        try:
            yield out
        except BaseException:
            try:
                stream.close()  # pyarrow cannot abort an upload: the caller deletes what it wrote
            except OSError:
                pass
            raise
        out.close()

    def write(self, path: str, data: bytes) -> None:
        """One request (retried as a whole): the object appears complete or not at all."""
        def go():
            with self.fs.open_output_stream(self._p(path)) as f:
                f.write(data)
        self._call(path, "write", go)

    def delete(self, path: str) -> None:
        def go():
            try:
                self.fs.delete_file(self._p(path))
            except FileNotFoundError:
                pass
        self._call(path, "delete", go)


class _Input:
    """A remote input file whose reads report failures as FStateErrors naming the URI."""

    def __init__(self, io: RemoteFileIO, uri: str, f):
        self._io, self._uri, self._f = io, uri, f

    def read(self, n: int = -1) -> bytes:
        return self._io._call(self._uri, "read", lambda: self._f.read(n if n is not None and n >= 0 else None))

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def tell(self) -> int:
        return self._f.tell()

    def size(self) -> int:
        return self._f.size()
