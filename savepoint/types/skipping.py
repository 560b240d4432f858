"""Skipping serializer snapshots of classes fstate does not know.

Flink writes a serializer snapshot as ``UTF class name, i32 version, payload`` with no length: in a
keyed- or operator-backend header (``KeyedBackendSerializationProxy``, state meta info) nothing says
where an unknown payload ends. It ends where the next item of the header begins, and every item that
can follow a snapshot starts with a modified-UTF string (the next nested snapshot's class name, the
next serializer key, the next state's name), or with the i16 state count and then a string.

:func:`parse_skipping_unknown` therefore parses the header; at an unknown snapshot it tries each
position after the unknown's version where such a string starts as the payload's end, and keeps the
first for which the *whole rest of the header* parses (depth first, so several unknowns resolve
one after another). The parser sees the choice through :func:`skip_hint` and returns an OpaqueType
with the skipped bytes, which writes back byte for byte. If no position works, the first error is
raised as before: the failure stays with that one header (one operator).
"""

from __future__ import annotations

import contextvars
import re
from typing import Callable, TypeVar

from ..errors import FStateError, UnknownSnapshotError, UnresolvedSnapshotError

Result = TypeVar("Result")

_HINTS: contextvars.ContextVar[tuple[object, dict[int, int]] | None] = contextvars.ContextVar(
    "fstate_snapshot_skip_hints", default=None)

#: Parse attempts per header before giving up (each attempt re-reads the header).
ATTEMPT_BUDGET = 3000
#: How far past an unknown snapshot's start its end is looked for.
SCAN_WINDOW = 1 << 16
_CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)+")
_MAX_VERSION = 1000
#: Most unknown snapshots resolved in one header.
MAX_SKIPPED = 24


def skip_hint(buffer: object, start: int) -> int | None:
    """Where the unknown snapshot whose class name starts at ``start`` in ``buffer`` ends, if chosen."""
    hints = _HINTS.get()
    if hints is None or hints[0] is not buffer:
        return None
    return hints[1].get(start)


def _utf_at(buf, q: int) -> bool:
    if q + 2 > len(buf):
        return False
    n = (buf[q] << 8) | buf[q + 1]
    if not 1 <= n <= 1024 or q + 2 + n > len(buf):
        return False
    return all(b >= 0x20 and b != 0x7F for b in buf[q + 2:q + 2 + n])


def candidate_ends(buf, payload_start: int) -> list[int]:
    """Positions where the item after an unknown snapshot may begin, nearest first."""
    limit = min(len(buf), payload_start + SCAN_WINDOW)
    return [q for q in range(payload_start, limit) if _utf_at(buf, q) or _utf_at(buf, q + 2)]


class _Exhausted(Exception):
    pass


def parse_skipping_unknown(buf, parse: Callable[[object], Result], accept: Callable[[Result], bool]) -> Result:
    """``parse(buf)``, resolving unknown serializer snapshots in ``buf`` as described above; a choice
    of ends counts only if ``accept`` holds for the result (e.g. the header ends where the stream's
    first key group begins: without such a check a wrong end followed by a zero count would do)."""
    attempts = 0
    truncated: list[FStateError] = []

    def attempt(hints: dict[int, int]) -> Result:
        token = _HINTS.set((buf, hints))
        try:
            return parse(buf)
        finally:
            _HINTS.reset(token)

    def search(hints: dict[int, int], limit: int) -> tuple[bool, Result | None]:
        nonlocal attempts
        attempts += 1
        if attempts > ATTEMPT_BUDGET:
            raise _Exhausted()
        try:
            result = attempt(hints)
            return accept(result), result
        except UnknownSnapshotError as e:
            if len(hints) >= limit or e.buffer is not buf or e.start in hints or not _plausible(buf, e):
                return False, None
            floor = max(hints.values(), default=0)
            if e.start < floor:
                return False, None
            for end in candidate_ends(buf, e.payload_start):
                ok, result = search({**hints, e.start: end}, limit)
                if ok:
                    return True, result
            return False, None
        except FStateError as e:
            if "truncated" in e.detail:
                truncated.append(e)
            return False, None

    try:
        return attempt({})
    except UnknownSnapshotError as first:
        if first.buffer is not buf:
            raise
        ok, result = False, None
        try:
            # the fewest skipped snapshots first: an unknown payload often holds real nested
            # snapshots, and ending it at one of those always needs one more skipped snapshot
            for limit in range(1, MAX_SKIPPED + 1):
                ok, result = search({}, limit)
                if ok:
                    break
        except _Exhausted:
            ok, result = False, None
        if ok:
            return result
        if truncated:
            # maybe only a prefix of the stream was read: a caller that probes widens and retries
            raise UnresolvedSnapshotError(f"{first.detail} (and no end for it was found before the end of "
                                    "the bytes read: truncated?)", first.path) from first
        raise


def _plausible(buf, e: UnknownSnapshotError) -> bool:
    """Could this be a snapshot rather than a string inside an unknown payload? Java serialization
    (e.g. the LogicalTypes in a RowDataSerializer snapshot) writes class names after TC_CLASSDESC
    (0x72), followed by the serialVersionUID, whose high half (mostly 0) is read as the version."""
    if e.start > 0 and buf[e.start - 1] == 0x72:
        return False
    return 1 <= e.version <= _MAX_VERSION and _CLASS_NAME.fullmatch(e.snapshot_class) is not None
