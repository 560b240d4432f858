"""The sanity limits of a savepoint, one rule for every command and writer: what Flink itself
accepts (``KeyGroupRangeAssignment``: max parallelism 1..2^15, parallelism 1..max parallelism). Reading
`_metadata` (info, read, verify, modify...), building a savepoint and the runtime all check them here."""

from __future__ import annotations

#: the largest max parallelism Flink accepts (2^15): also the largest number of key groups
UPPER_MAX_PARALLELISM = 1 << 15
MAX_KEY_GROUPS = UPPER_MAX_PARALLELISM


def parallelism_problems(parallelism: int, max_parallelism: int) -> list[str]:
    """What Flink would refuse about an operator's parallelism and max parallelism (empty: none)."""
    out = []
    if not 1 <= max_parallelism <= UPPER_MAX_PARALLELISM:
        out.append(f"max parallelism {max_parallelism} is outside 1..{UPPER_MAX_PARALLELISM}")
    if not 1 <= parallelism <= max(max_parallelism, 1):
        out.append(f"parallelism {parallelism} is outside 1..{max_parallelism} (its max parallelism)")
    return out
