"""Keyed states with TTL (Flink's ``TtlValueState``, ``TtlListState``, ``TtlMapState``,
``TtlReducingState``, ``TtlAggregatingState``): the same API as the plain states, over values stored
as ``TtlValue(user value, last access)`` (per element for lists, per entry for maps). See
:mod:`.ttl` for the semantics."""

from __future__ import annotations

from typing import Any, Iterable

from ...savepoint.types import TtlValue
from .keyed_base import KeyedStateBase
from .ttl import IncrementalCleanup, StateTtlConfig, StateVisibility, UpdateType, expired, snapshot_filter


class _TtlState(KeyedStateBase):
    __slots__ = ("_ttl", "_on_read", "_return_expired", "_clock", "_cleanup")

    def __init__(self, backend, table, desc):
        super().__init__(backend, table, desc)
        config: StateTtlConfig = desc.ttl_config
        self._clock = backend.clock
        self._ttl = config.ttl_ms
        self._on_read = config.update_type is UpdateType.OnReadAndWrite
        self._return_expired = config.state_visibility is StateVisibility.ReturnExpiredIfNotCleanedUp
        strategies = config.cleanup_strategies
        table.snapshot_filter = (snapshot_filter(self.kind, self._ttl, self._clock) if strategies.is_full_snapshot()
                                 else None)
        incremental = strategies.get_incremental_cleanup_strategy()
        self._cleanup = None
        if incremental is not None and incremental.cleanup_size > 0:
            self._cleanup = IncrementalCleanup(table, self.kind, self._ttl, self._clock, incremental.cleanup_size)
            if incremental.every_record:
                backend.add_key_selection_listener(self._cleanup.run)

    # -- helpers --------------------------------------------------------------------------------
    def _accessed(self) -> None:
        if self._cleanup is not None:
            self._cleanup.run()

    def _now(self) -> int:
        return self._clock.now_ms()

    def _expired(self, v: TtlValue, now: int) -> bool:
        return expired(v.last_access_timestamp, self._ttl, now)

    def _unexpired(self, v: TtlValue | None, now: int) -> Any:
        """Flink's ``getUnexpired``: the user value, or None when absent or expired and hidden."""
        if v is None or (not self._return_expired and self._expired(v, now)):
            return None
        return v.user_value

    def _checked(self, v: TtlValue | None, update, remove) -> TtlValue | None:
        """Flink's ``getWrappedWithTtlCheckAndUpdate``: an expired value is removed (and returned
        only when expired values are visible); a live one is renewed on read with OnReadAndWrite."""
        if v is None:
            return None
        now = self._now()
        if self._expired(v, now):
            remove()
            return v if self._return_expired else None
        if self._on_read:
            update(TtlValue(v.user_value, now))
        return v

    def _checked_value(self) -> Any:
        m = self._map()
        key = self._b.current_key
        v = self._checked(m.get(key), lambda nv: m.__setitem__(key, nv), lambda: m.pop(key, None))
        return None if v is None else v.user_value

    def clear(self) -> None:
        self._accessed()
        self._map().pop(self._b.current_key, None)


class TtlValueState(_TtlState):
    __slots__ = ()
    kind = "VALUE"

    def value(self) -> Any:
        self._accessed()
        return self._checked_value()

    def update(self, value: Any) -> None:
        self._accessed()
        if value is None:
            self._map().pop(self._b.current_key, None)
            return
        self._map()[self._b.current_key] = TtlValue(value, self._now())


class TtlListState(_TtlState):
    __slots__ = ()
    kind = "LIST"

    def get(self) -> list:
        self._accessed()
        m = self._map()
        key = self._b.current_key
        stored = m.get(key)
        if not stored:
            return []
        now = self._now()
        if self._on_read:
            renewed = [TtlValue(v.user_value, now) for v in stored if not self._expired(v, now)]
            if renewed:
                m[key] = renewed
        out = []
        any_unexpired = False
        for v in stored:
            live = not self._expired(v, now)
            any_unexpired |= live
            if live or self._return_expired:
                out.append(v.user_value)
        if not any_unexpired:
            m.pop(key, None)
        return out

    def _wrapped(self, values: Iterable[Any] | None) -> list:
        now = self._now()
        vals = list(values or ())
        if any(v is None for v in vals):
            raise ValueError(f"list state '{self.name}' cannot hold None")
        return [TtlValue(v, now) for v in vals]

    def add(self, value: Any) -> None:
        self._accessed()
        if value is None:
            raise ValueError(f"list state '{self.name}' cannot hold None")
        m = self._map()
        lst = m.get(self._b.current_key)
        v = TtlValue(value, self._now())
        if lst is None:
            m[self._b.current_key] = [v]
        else:
            lst.append(v)

    def add_all(self, values: Iterable[Any]) -> None:
        self._accessed()
        wrapped = self._wrapped(values)
        if wrapped:
            self._map().setdefault(self._b.current_key, []).extend(wrapped)

    def update(self, values: Iterable[Any] | None) -> None:
        self._accessed()
        wrapped = self._wrapped(values)
        if wrapped:
            self._map()[self._b.current_key] = wrapped
        else:
            self._map().pop(self._b.current_key, None)


class TtlMapState(_TtlState):
    __slots__ = ()
    kind = "MAP"

    def _entries(self, create: bool = False) -> dict | None:
        m = self._map()
        d = m.get(self._b.current_key)
        if d is None and create:
            d = m[self._b.current_key] = {}
        return d

    def _drop(self, d: dict, uk: Any) -> None:
        d.pop(uk, None)
        if not d:
            self._map().pop(self._b.current_key, None)

    def _get_wrapped(self, uk: Any) -> TtlValue | None:
        d = self._entries()
        if d is None:
            return None
        return self._checked(d.get(uk), lambda nv: d.__setitem__(uk, nv), lambda: self._drop(d, uk))

    def get(self, uk: Any) -> Any:
        self._accessed()
        v = self._get_wrapped(uk)
        return None if v is None else v.user_value

    def put(self, uk: Any, value: Any) -> None:
        self._accessed()
        self._entries(True)[uk] = None if value is None else TtlValue(value, self._now())

    def put_all(self, entries: dict) -> None:
        self._accessed()
        if not entries:
            return
        now = self._now()
        self._entries(True).update({k: (None if v is None else TtlValue(v, now)) for k, v in entries.items()})

    def remove(self, uk: Any) -> None:
        self._accessed()
        d = self._entries()
        if d is not None:
            self._drop(d, uk)

    def contains(self, uk: Any) -> bool:
        self._accessed()
        return self._get_wrapped(uk) is not None

    def items(self) -> list:
        """The visible entries; expired ones are removed on the way, live ones renewed on read
        with OnReadAndWrite (Flink's entries iterator)."""
        self._accessed()
        d = self._entries()
        if not d:
            return []
        out = []
        for uk, v in list(d.items()):
            if v is None:
                out.append((uk, None))
                continue
            w = self._checked(v, lambda nv, uk=uk: d.__setitem__(uk, nv), lambda uk=uk: self._drop(d, uk))
            if w is not None:
                out.append((uk, w.user_value))
        return out

    def keys(self) -> list:
        return [k for k, _ in self.items()]

    def values(self) -> list:
        return [v for _, v in self.items()]

    def is_empty(self) -> bool:
        return not self.items()


class TtlReducingState(_TtlState):
    __slots__ = ()
    kind = "REDUCING"

    def get(self) -> Any:
        self._accessed()
        return self._checked_value()

    def add(self, value: Any) -> None:
        """Flink's ``TtlReduceFunction``: the stored value takes part only while visible."""
        self._accessed()
        m = self._map()
        key = self._b.current_key
        now = self._now()
        old = self._unexpired(m.get(key), now)
        m[key] = TtlValue(value if old is None else self._desc.reduce(old, value), now)


class TtlAggregatingState(_TtlState):
    __slots__ = ()
    kind = "AGGREGATING"

    def get(self) -> Any:
        self._accessed()
        acc = self._checked_value()
        return None if acc is None else self._desc.function.get_result(acc)

    def add(self, value: Any) -> None:
        """Flink's ``TtlAggregateFunction.add``: a new accumulator when the stored one is hidden."""
        self._accessed()
        m = self._map()
        key = self._b.current_key
        now = self._now()
        f = self._desc.function
        acc = self._unexpired(m.get(key), now)
        if acc is None:
            acc = f.create_accumulator()
        m[key] = TtlValue(f.add(value, acc), now)


TTL_STATE_CLASSES = {"VALUE": TtlValueState, "LIST": TtlListState, "MAP": TtlMapState,
                     "REDUCING": TtlReducingState, "AGGREGATING": TtlAggregatingState}
