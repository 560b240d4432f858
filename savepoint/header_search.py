"""Backend headers holding serializer snapshots fstate cannot parse.

A serializer snapshot in a keyed- or operator-backend header is ``i32 2, UTF class name, i32 version,
payload`` with no length (Flink's ``TypeSerializerSnapshotSerializationProxy`` and
``TypeSerializerSnapshot.writeVersionedSnapshot``): a payload fstate cannot read has no end of its
own. The header's end is known from elsewhere (the first key group's offset, the first operator
state's offset, the length of a RocksDB meta-data stream), and what may follow a serializer snapshot
is fixed by the header's grammar:

* another serializer of the same state: one of Flink's three serializer keys
  (``KEY_SERIALIZER``, ``NAMESPACE_SERIALIZER``, ``VALUE_SERIALIZER``), then ``i32 2``;
* the next state's meta info (name, backend type 0-3, option count, ...);
* after the key serializer of a keyed header: the ``i16`` state count;
* the end of the header.

:class:`HeaderSearch` parses the header as usual; a serializer *slot* (one whole top-level snapshot,
nested ones included) that cannot be parsed becomes a :data:`~.types.OpaqueType` whose payload ends at
one of the positions where the grammar can go on. Every such choice is followed to the header's end
(memoized per position), and the header is accepted only if **exactly one** complete parse exists:
the true parse is always among them, so a unique one is the true one. None, or more than one, is an
:class:`UnresolvedSnapshotError` for this header only. Nothing is guessed.
"""

from __future__ import annotations

import re
import struct
from typing import Callable, TypeVar

from . import metainfo
from .binary import DataInput, decode_mutf8, encode_mutf8
from .errors import DECODE_ERRORS, FStateError, UnresolvedSnapshotError, UnsupportedSerializerError
from .metainfo import StateMetaInfo
from .types import OpaqueType, TypeInfo
from .types.roles import as_opaque
from .types.snapshots import PROXY_VERSION, read_serializer_snapshot

#: Flink's StateMetaInfoSnapshot.CommonSerializerKeys, as they are written (u16 length + bytes)
SERIALIZER_KEYS = tuple(len(encode_mutf8(k)).to_bytes(2, "big") + encode_mutf8(k)
                        for k in (metainfo.KEY_SERIALIZER, metainfo.NAMESPACE_SERIALIZER, metainfo.VALUE_SERIALIZER))
#: Stop after this many parse steps (a header that needs more is reported unresolved, not guessed).
STEP_BUDGET = 200_000
#: Most complete readings of one header compared; a header with more is reported unresolved.
MAX_READINGS = 16
UNKNOWN_REASON = "unknown serializer"
_CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)+(\$[\w$]+)*")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_END = "end"
Result = TypeVar("Result")
_BROADCAST = "broadcast"


class _BudgetExhausted(Exception):
    pass


def unresolved_snapshot(snapshot_class: str, version: int, payload: bytes, cause: str) -> OpaqueType:
    """The type of a serializer slot fstate could not parse (values read as raw bytes)."""
    return OpaqueType(snapshot_class, version, payload, reason=f"{UNKNOWN_REASON}: {cause}")


def is_unresolved(t: TypeInfo) -> bool:
    opaque = as_opaque(t)
    return opaque is not None and opaque.reason.startswith(UNKNOWN_REASON + ":")


class HeaderSearch:
    """The unique parse of one header (``buf[:end]``) with unparseable serializer slots made opaque."""

    def __init__(self, buf, end: int, source: str | None):
        self.buf = buf
        self.end = end
        self.source = source
        self.steps = 0
        self._states: dict[tuple, list] = {}
        self._slots: dict[tuple, list] = {}
        self.first_error: FStateError | None = None
        #: id of each opaque type made here -> (its slot's start, its end) in ``buf``
        self._ranges: dict[int, tuple[int, int]] = {}
        self.incomplete = False

    # -- entry points --------------------------------------------------------------------------
    def keyed(self, pos: int) -> tuple[TypeInfo, list[StateMetaInfo]]:
        """Key serializer and states of a keyed header whose key serializer slot starts at ``pos``."""
        def after_key(q):
            n = self._i16(q)
            return [] if n is None or n < 0 else self._states_from(q + 2, n, _END)

        solutions = []
        for key_type, q in self._slot(pos, self._key_follows):
            for states in after_key(q):
                solutions.append((key_type, states))
        return self._choose(solutions, lambda solution: [solution[0]] + _slot_types(solution[1]))

    def operator(self, pos: int) -> list[StateMetaInfo]:
        """The states (list/union, then broadcast) of an operator header whose first i16 count is at ``pos``."""
        n = self._i16(pos)
        solutions = [] if n is None or n < 0 else self._states_from(pos + 2, n, _BROADCAST)
        return self._choose(solutions, _slot_types)

    def _choose(self, solutions: list, types_of: Callable[[object], list[TypeInfo]]):
        """The one complete reading; with several, the one whose opaque byte ranges every other reading
        also leaves opaque (the others only differ by taking well-formed header structure, known
        serializer snapshots and state meta infos, for the inside of an unknown payload)."""
        if self.incomplete or len(solutions) > MAX_READINGS:
            raise UnresolvedSnapshotError(f"more than {MAX_READINGS} readings of the header end where it "
                                          "ends, so none is taken: its states are not listed", self.source)
        if not solutions:
            raise UnresolvedSnapshotError(f"no reading of the header ends where it ends (byte {self.end}): "
                                          "its states are not listed", self.source)
        if len(solutions) == 1:
            return solutions[0]
        ranges = [self._opaque_ranges(types_of(s)) for s in solutions]
        finest = [i for i, mine in enumerate(ranges)
                  if all(j == i or _covered(mine, theirs) for j, theirs in enumerate(ranges))]
        if len(finest) != 1:
            raise UnresolvedSnapshotError(
                f"{len(solutions)} readings of the header end where it ends and none is contained in all "
                "others, so none is taken: its states are not listed", self.source)
        return solutions[finest[0]]

    def _opaque_ranges(self, types: list[TypeInfo]) -> list[tuple[int, int]]:
        return [self._ranges[id(t)] for t in types if id(t) in self._ranges]

    # -- grammar -------------------------------------------------------------------------------
    def _tick(self) -> None:
        self.steps += 1
        if self.steps > STEP_BUDGET:
            raise _BudgetExhausted()

    def _i16(self, q: int) -> int | None:
        return _I16.unpack_from(self.buf, q)[0] if q + 2 <= self.end else None

    def _states_from(self, pos: int, k: int, after: str) -> list[list[StateMetaInfo]]:
        """Every parse (at most two) of ``k`` states from ``pos`` followed by ``after`` up to the end."""
        memo_key = (pos, k, after)
        found = self._states.get(memo_key)
        if found is not None:
            return found
        self._tick()
        out: list[list[StateMetaInfo]] = []
        if k == 0:
            if after == _END:
                out = [[]] if pos == self.end else []
            else:
                n = self._i16(pos)
                out = [] if n is None or n < 0 else self._states_from(pos + 2, n, _END)
        else:
            head = self._state_head(pos)
            if head is not None:
                name, backend_type, options, n_slots, q = head
                for slots, following in self._slots_from(q, n_slots, k - 1, after):
                    serializers = dict(slots)
                    if _plausible_serializers(backend_type, slots, serializers):
                        out.append([StateMetaInfo(name, backend_type, options, serializers)] + following)
                out = self._capped(out)
        self._states[memo_key] = out
        return out

    def _state_head(self, pos: int):
        inp = DataInput(self.buf, pos, self.end, self.source)
        try:
            name = inp.read_utf()
            backend_type = inp.read_i32()
            if not 0 <= backend_type < len(metainfo.BACKEND_TYPES):
                return None
            options = {}
            for _ in range(inp.read_count("state option", limit=1024, unit_size=4)):
                option = inp.read_utf()
                options[option] = inp.read_utf()
            n_slots = inp.read_count("state serializer", limit=1024, unit_size=6)
        except (FStateError, *DECODE_ERRORS):
            return None
        return name, backend_type, options, n_slots, inp.pos

    def _slots_from(self, pos: int, r: int, k: int, after: str) -> list[tuple[list, list]]:
        """Every parse (at most two) of the ``r`` remaining serializer slots of a state from ``pos``,
        with the ``k`` states and ``after`` that follow it: (slots, following states)."""
        memo_key = (pos, r, k, after)
        found = self._slots.get(memo_key)
        if found is not None:
            return found
        self._tick()
        out: list[tuple[list, list]] = []
        if r == 0:
            out = [([], states) for states in self._states_from(pos, k, after)]
        elif pos + 2 <= self.end:
            n = (self.buf[pos] << 8) | self.buf[pos + 1]
            try:
                key = decode_mutf8(bytes(self.buf[pos + 2:pos + 2 + n]))
            except UnicodeDecodeError:
                key = None
            if key is not None and pos + 2 + n <= self.end:
                follows = self._follows(r - 1, k, after)
                for t, q in self._slot(pos + 2 + n, follows):
                    for slots, following in self._slots_from(q, r - 1, k, after):
                        out.append(([(key, t)] + slots, following))
                out = self._capped(out)
        self._slots[memo_key] = out
        return out

    # -- one serializer slot -------------------------------------------------------------------
    def _slot(self, pos: int, follows: Callable[[int], bool]) -> list[tuple[TypeInfo, int]]:
        """The ways a serializer slot at ``pos`` can be read: its parse when fstate knows every class
        in it, else an opaque type ending at each position where ``follows`` holds."""
        self._tick()
        inp = DataInput(self.buf, pos, self.end, self.source)
        try:
            t = read_serializer_snapshot(inp)
            return [(t, inp.pos)]
        except (FStateError, *DECODE_ERRORS) as e:
            error = e
        head = self._snapshot_head(pos)
        if head is None:
            return []
        cls, version, payload_start = head
        cause = error.detail if isinstance(error, FStateError) else f"{cls} (version {version}): {error}"
        if self.first_error is None and isinstance(error, FStateError):
            self.first_error = error
        out = []
        for q in range(payload_start, self.end + 1):
            if follows(q):
                t = unresolved_snapshot(cls, version, bytes(self.buf[payload_start:q]), cause)
                self._ranges[id(t)] = (pos, q)
                out.append((t, q))
        return out

    def _capped(self, readings: list) -> list:
        if len(readings) > MAX_READINGS:
            self.incomplete = True
            return readings[:MAX_READINGS]
        return readings

    def _snapshot_head(self, pos: int) -> tuple[str, int, int] | None:
        buf = self.buf
        if pos + 6 > self.end or _I32.unpack_from(buf, pos)[0] != PROXY_VERSION:
            return None
        n = (buf[pos + 4] << 8) | buf[pos + 5]
        q = pos + 6 + n
        if q + 4 > self.end:
            return None
        try:
            cls = decode_mutf8(bytes(buf[pos + 6:q]))
        except UnicodeDecodeError:
            return None
        if _CLASS_NAME.fullmatch(cls) is None:
            return None
        version = _I32.unpack_from(buf, q)[0]
        return (cls, version, q + 4) if version >= 0 else None

    # -- what may follow a slot ------------------------------------------------------------------
    def _key_follows(self, q: int) -> bool:
        n = self._i16(q)
        if n is None or n < 0:
            return False
        return q + 2 == self.end if n == 0 else self._state_starts(q + 2)

    def _follows(self, r: int, k: int, after: str) -> Callable[[int], bool]:
        buf = self.buf
        if r > 0:
            return lambda q: any(buf.startswith(key, q) for key in SERIALIZER_KEYS) and \
                q + 2 + len(SERIALIZER_KEYS[0]) <= self.end
        if k > 0:
            return self._state_starts
        if after == _END:
            return lambda q: q == self.end
        return lambda q: (self._i16(q) or 0) >= 0 and q + 2 <= self.end

    def _state_starts(self, q: int) -> bool:
        """Could a state's meta info begin at ``q`` (name, backend type, option count)?"""
        if q + 2 > self.end:
            return False
        n = (self.buf[q] << 8) | self.buf[q + 1]
        p = q + 2 + n
        if n == 0 or p + 8 > self.end:
            return False
        backend_type = _I32.unpack_from(self.buf, p)[0]
        options = _I32.unpack_from(self.buf, p + 4)[0]
        return 0 <= backend_type < len(metainfo.BACKEND_TYPES) and 0 <= options <= 1024


def _slot_types(states: list[StateMetaInfo]) -> list[TypeInfo]:
    return [t for state in states for t in state.serializers.values()]


def _covered(inner: list[tuple[int, int]], outer: list[tuple[int, int]]) -> bool:
    """Does every range of ``inner`` lie within a range of ``outer``?"""
    return all(any(a <= start and end <= b for a, b in outer) for start, end in inner)


def _plausible_serializers(backend_type: int, slots: list, serializers: dict) -> bool:
    """Flink writes each serializer of a state once under one of its three keys; every state has a
    value serializer, and timer (priority queue) states have nothing else."""
    if len(serializers) != len(slots) or metainfo.VALUE_SERIALIZER not in serializers:
        return False
    if not set(serializers) <= {metainfo.KEY_SERIALIZER, metainfo.NAMESPACE_SERIALIZER, metainfo.VALUE_SERIALIZER}:
        return False
    return backend_type != metainfo.PRIORITY_QUEUE or len(serializers) == 1


def resolve(buf, end: int, source: str | None, first: Exception, run: Callable[[HeaderSearch], Result]) -> Result:
    """``run`` on a HeaderSearch of ``buf[:end]``, after the plain parse of the header failed with
    ``first``. UnresolvedSnapshotError (a CorruptStateError too, so that a caller that read only a
    prefix reads more and retries) when no unique parse exists; ``first`` itself when the header is
    simply corrupt (no serializer fstate could not read was met)."""
    if end > len(buf):
        if not isinstance(first, UnsupportedSerializerError):
            raise first
        raise UnresolvedSnapshotError(f"{first.detail}; the header ends at byte {end}, past the {len(buf)} "
                                      "bytes read", source) from None
    finder = HeaderSearch(buf, end, source)
    try:
        return run(finder)
    except _BudgetExhausted:
        error = UnresolvedSnapshotError(
            f"{_detail(first)}; its end was not found within {STEP_BUDGET} parse steps, so the states "
            "of this header are not listed", source)
    except UnresolvedSnapshotError as e:
        if not isinstance(first, UnsupportedSerializerError) and finder.first_error is None:
            raise first from None
        error = UnresolvedSnapshotError(f"{_detail(first)}; {e.detail}", source)
    raise error from None


def _detail(error: Exception) -> str:
    return error.detail if isinstance(error, FStateError) else str(error)
