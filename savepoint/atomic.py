"""Local directory writes that never leave a half-written target, nor none where one was.

A writer of ``parent/name`` holds an exclusive lock on ``parent/.name.fstate-lock`` (``flock``: the
kernel releases it when the process ends, SIGKILL too) from its start to its end, and stages its
files in the hidden sibling ``parent/.name.fstate-tmp-<token>``. A second writer of the same target
fails at once with :class:`~fstate.savepoint.errors.ConcurrentWriteError`.

Committing moves the staged directory into place. Replacing an existing target swaps the two
directories in one step (``renameat2(RENAME_EXCHANGE)``, Linux) and then deletes the old one, so a
reader sees the old target or the new one, never none. Where the kernel or file system cannot swap,
the old target is first renamed to ``.name.fstate-tmp-<token>.old``; a writer killed between that
rename and the next leaves no target, and the next write to the same parent puts the old one back.

A staging directory's name carries its writer's host and process id
(``.name.fstate-tmp-<host>-<pid>-<token>``), so that any later fstate run tells the debris of a
killed writer from the work of a live one: each write settles its parent first, and opening a local
savepoint settles the savepoint's parent (:func:`sweep_near`). Settling deletes every
``.name.fstate-tmp-*`` directory whose writer is gone (its process is not alive on this host, and no
process holds the lock of ``name``), puts an ``.old`` one back as ``name`` when ``name`` is missing,
removes lock files nobody holds, and says what it did, one line each
(:class:`~fstate.savepoint.errors.FStateWarning`). A directory whose writer still runs is never touched.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import shutil
import socket
import uuid
import warnings

from .errors import ConcurrentWriteError, FStateWarning, InvalidArgumentError

TEMP_MARK = ".fstate-tmp-"
# (names without host and pid are those of older fstate versions: only the lock tells whether they are stale)
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.fstate-tmp-(?:(?P<host>[A-Za-z0-9_.-]+)-(?P<pid>[0-9]+)-)?"
                        r"(?P<token>[0-9a-f]{12})(?P<old>\.old)?$")
_LOCK_SUFFIX = ".fstate-lock"
_LOCK_NAME = re.compile(r"^\.(?P<name>.+)\.fstate-lock$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "localhost"


def temp_path(target: str) -> str:
    """A fresh hidden sibling of ``target`` to stage it in, named by this host and process."""
    parent, name = os.path.split(target)
    return os.path.join(parent, f".{name}{TEMP_MARK}{_host()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def _writer_alive(match: re.Match) -> bool:
    """Whether the process a staging directory's name records may still run (another host's: unknown,
    so yes unless its lock says otherwise)."""
    if match.group("pid") is None or match.group("host") != _host():
        return False  # no name to go by: the lock decides
    pid = int(match.group("pid"))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TargetLock:
    """The lock a writer of ``target`` holds; ``acquire`` returns False while another process holds it."""

    def __init__(self, target: str):
        parent, name = os.path.split(target)
        self.target = target
        self.path = os.path.join(parent, f".{name}{_LOCK_SUFFIX}")
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except OSError as e:  # a file system without locks: write unguarded, as before
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    os.close(fd)
                    raise
            try:
                current = os.stat(self.path)
                opened = os.fstat(fd)
                same = (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._fd = fd
                return True
            # the holder before us removed the file after we opened it: lock the one there now
            os.close(fd)

    def holder(self) -> str:
        """The process id the holder wrote, for messages ("" if unknown)."""
        try:
            with open(self.path) as f:
                return f.read().strip()
        except OSError:
            return ""

    def release(self) -> None:
        """Remove the lock file, then let go (a waiter that then gets the removed file retries)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None


def lock_target(target: str) -> TargetLock:
    """The lock of ``target``, held; ConcurrentWriteError when another process writes it."""
    lock = TargetLock(target)
    if not lock.acquire():
        pid = lock.holder()
        raise ConcurrentWriteError(f"another fstate process{f' (pid {pid})' if pid else ''} is writing it; "
                                   "try again when it has finished", target)
    return lock


def settle_parent(parent: str, held: TargetLock | None = None, *, only_known_dead: bool = False) -> list[str]:
    """Remove the staging directories of killed writers in ``parent`` (put back an old target a
    killed overwrite had moved away) and lock files nobody holds; ``held``: the lock of a target this
    process writes; ``only_known_dead``: only directories whose name records a process of this host
    that is gone (what readers settle). Returns what it did, one line each."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    by_name: dict[str, list[str]] = {}
    locks: set[str] = set()
    for entry in entries:
        match = _TEMP_NAME.match(entry)
        path = os.path.join(parent, entry)
        if match and os.path.isdir(path) and not os.path.islink(path):
            if _writer_alive(match):
                continue
            if only_known_dead and match.group("pid") is None:
                continue
            by_name.setdefault(match.group("name"), []).append(entry)
        elif not only_known_dead and _LOCK_NAME.match(entry) and os.path.isfile(path):
            locks.add(_LOCK_NAME.match(entry).group("name"))
    done: list[str] = []
    for name in sorted(set(by_name) | locks):
        target = os.path.join(parent, name)
        own = held is not None and held.target == target
        lock = held if own else TargetLock(target)
        if not own and not lock.acquire():
            continue  # a live writer's
        try:
            done += _settle(parent, target, by_name.get(name, []))
        finally:
            if not own:
                lock.release()  # (removes a lock file a killed writer left)
    return done


def sweep_near(path: str) -> None:
    """What killed fstate writers of this host left next to ``path`` (a local savepoint being
    opened): removed, one warning line each."""
    parent = os.path.dirname(os.path.abspath(path).rstrip("/"))
    if not os.path.isdir(parent):
        return
    try:
        done = settle_parent(parent, only_known_dead=True)
    except OSError:
        return  # a read-only or foreign directory: leave it
    _say(done)


def _say(done: list[str]) -> None:
    for line in done:
        warnings.warn(line, FStateWarning, stacklevel=3)


def _settle(parent: str, target: str, staged: list[str]) -> list[str]:
    done = []
    if not os.path.lexists(target):
        olds = [e for e in staged if e.endswith(".old")]
        if olds:
            newest = max(olds, key=lambda e: os.stat(os.path.join(parent, e)).st_mtime)
            os.rename(os.path.join(parent, newest), target)
            staged = [e for e in staged if e != newest]
            done.append(f"recovered {target} (an overwrite was killed before the new one was in place)")
    for entry in staged:
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
        match = _TEMP_NAME.match(entry)
        who = f"fstate process {match.group('pid')} on {match.group('host')}" if match and match.group("pid") \
            else "an fstate process"
        done.append(f"removed {os.path.join(parent, entry)} (left by {who}, killed while writing)")
    return done


def _exchange(first: str, second: str) -> bool:
    """Swap two paths in one step; False where the system cannot (then nothing happened)."""
    try:
        rename_at = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    rename_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_cwd, rename_exchange = -100, 2
    if rename_at(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), second)


def move_into_place(staged: str, target: str, overwrite: bool) -> None:
    """``staged`` becomes ``target``; an existing target is replaced only with ``overwrite``, and
    is kept until the new one is in place."""
    if os.path.lexists(target):
        if not overwrite:
            raise ConcurrentWriteError("target appeared while writing; not replaced", target)
        if _exchange(staged, target):
            shutil.rmtree(staged, ignore_errors=True)  # the old target, now at the staging path
            return
        backup = staged + ".old"
        os.rename(target, backup)
        os.rename(staged, target)  # killed before this: settle_parent puts the backup back
        shutil.rmtree(backup, ignore_errors=True)
        return
    try:
        os.rename(staged, target)
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise ConcurrentWriteError("target appeared while writing; not replaced", target) from None
        raise


class StagedDirectory:
    """A local directory written in a hidden sibling and moved into place by :meth:`commit`.

    >>> staged = StagedDirectory("/out/table", overwrite=False)
    >>> ...                      # write into staged.temp_dir
    >>> staged.commit()          # or staged.abort()

    As a ``with`` block it commits when the block ends and aborts when it raises.
    """

    def __init__(self, target: str, overwrite: bool, *, create: bool = True,
                 exists_hint: str = "use overwrite to replace it"):
        self.target = os.path.abspath(target).rstrip("/") or "/"
        self.overwrite = overwrite
        parent = os.path.dirname(self.target)
        os.makedirs(parent, exist_ok=True)
        self.lock = lock_target(self.target)
        try:
            _say(settle_parent(parent, self.lock))
            if os.path.lexists(self.target) and not overwrite:
                raise InvalidArgumentError(f"target already exists ({exists_hint})", self.target)
            self.temp_dir = temp_path(self.target)
            if create:
                os.makedirs(self.temp_dir)
        except BaseException:
            self.lock.release()
            raise

    def __enter__(self) -> "StagedDirectory":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def commit(self) -> str:
        try:
            move_into_place(self.temp_dir, self.target, self.overwrite)
        except BaseException:
            self.abort()
            raise
        self.lock.release()
        return self.target

    def abort(self) -> None:
        for _ in range(20):  # a writer still finishing (a Spark task) may add files while it is removed
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            if not os.path.exists(self.temp_dir):
                break
        self.lock.release()
