"""Process pools for work split into pieces (a table's partitions, an operator's subtasks): the
embedded engine's reads and writes (``readers.engine``) and ``verify``'s decoding."""

from __future__ import annotations

import concurrent.futures
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
