"""Process pools for work split into pieces (a table's partitions, an operator's subtasks): the
embedded engine's reads and writes (``readers.engine``) and ``verify``'s decoding."""

from __future__ import annotations

import concurrent.futures
import ctypes
import multiprocessing
import os

#: less state than this is worked on in this process (a pool's start-up costs more)
SMALL_BYTES = 16 * 1024 * 1024


def pool_size(pieces: int, size: int, workers: int | None = None) -> int:
    """How many processes work on ``pieces`` holding ``size`` bytes of state: 1 for one piece or
    less than :data:`SMALL_BYTES`, else one a core (``workers`` if given), at most one a piece."""
    if pieces <= 1 or size < SMALL_BYTES:
        return 1
    return max(1, min(workers or os.cpu_count() or 1, pieces))


def spawn_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of fresh interpreters (``spawn``: the same on every platform; nothing open is inherited)."""
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


#: allocations of at least this many bytes get memory of their own, returned when freed
#: (:func:`return_large_blocks`)
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_large_blocks_returned = False


def return_large_blocks() -> None:
    """Have this process's large allocations (a piece of a key group, its decoded columns: megabytes,
    made and freed again and again) returned to the system when freed (glibc, once a process): by
    default glibc raises its threshold for that to the size of the largest block freed, after which
    such blocks come from its heap, which keeps what it took (a reader's memory then grew with every
    partition it read). A no-op where the C library has no ``mallopt``."""
    global _large_blocks_returned
    if _large_blocks_returned:
        return
    _large_blocks_returned = True
    try:
        libc = ctypes.CDLL(None)  # this process's symbols, the C library's among them (find_library runs ldconfig)
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError, TypeError):  # not glibc
        pass
