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

Each write first settles what killed writers left in its parent: every ``.name.fstate-tmp-*``
directory whose name no live writer holds the lock of is deleted (an ``.old`` one is renamed back
to ``name`` when ``name`` is missing). A directory whose writer still runs is never touched.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import shutil
import uuid

from .errors import ConcurrentWriteError, InvalidArgumentError

TEMP_MARK = ".fstate-tmp-"
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.fstate-tmp-(?P<token>[0-9a-f]{12})(?P<old>\.old)?$")
_LOCK_SUFFIX = ".fstate-lock"


def temp_path(target: str) -> str:
    """A fresh hidden sibling of ``target`` to stage it in."""
    parent, name = os.path.split(target)
    return os.path.join(parent, f".{name}{TEMP_MARK}{uuid.uuid4().hex[:12]}")


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


def settle_parent(parent: str, held: TargetLock | None = None) -> list[str]:
    """Remove the staging directories of killed writers in ``parent`` (put back an old target a
    killed overwrite had moved away); ``held``: the lock of a target this process writes. Returns
    what it did, one line each."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    by_name: dict[str, list[str]] = {}
    for entry in entries:
        match = _TEMP_NAME.match(entry)
        path = os.path.join(parent, entry)
        if match and os.path.isdir(path) and not os.path.islink(path):
            by_name.setdefault(match.group("name"), []).append(entry)
    done: list[str] = []
    for name, staged in sorted(by_name.items()):
        target = os.path.join(parent, name)
        own = held is not None and held.target == target
        lock = held if own else TargetLock(target)
        if not own and not lock.acquire():
            continue  # a live writer's
        try:
            done += _settle(parent, target, staged)
        finally:
            if not own:
                lock.release()
    return done


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
        done.append(f"removed {os.path.join(parent, entry)} (left by a killed write)")
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
    """

    def __init__(self, target: str, overwrite: bool, *, create: bool = True,
                 exists_hint: str = "use overwrite to replace it"):
        self.target = os.path.abspath(target).rstrip("/") or "/"
        self.overwrite = overwrite
        parent = os.path.dirname(self.target)
        os.makedirs(parent, exist_ok=True)
        self.lock = lock_target(self.target)
        try:
            settle_parent(parent, self.lock)
            if os.path.lexists(self.target) and not overwrite:
                raise InvalidArgumentError(f"target already exists ({exists_hint})", self.target)
            self.temp_dir = temp_path(self.target)
            if create:
                os.makedirs(self.temp_dir)
        except BaseException:
            self.lock.release()
            raise

    def commit(self) -> str:
        try:
            move_into_place(self.temp_dir, self.target, self.overwrite)
        except BaseException:
            self.abort()
            raise
        self.lock.release()
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.lock.release()
