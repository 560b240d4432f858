"""State time-to-live, as Flink has it: ``StateTtlConfig`` (built with ``StateTtlConfig.new_builder``)
enabled on a keyed state descriptor with ``descriptor.enable_time_to_live(config)``.

* A TTL state stores every value (every list element, every map entry) as
  ``TtlValue(user value, last access timestamp)`` and is written with Flink's TTL serializer
  (``TtlStateFactory$TtlSerializerSnapshot``: the timestamp, then the user value), so fstate reads it
  and real Flink restores it with the same descriptor. The layout is the format core's
  :class:`~fstate.savepoint.types.TtlType`; the runtime uses its timestamped form.
* Time is processing time from the runtime's clock (``ManualClock`` in tests). A value expires when
  ``last access + ttl <= now``. ``OnCreateAndWrite`` renews the timestamp on writes,
  ``OnReadAndWrite`` on reads too. ``NeverReturnExpired`` hides expired values (and removes them when
  read); ``ReturnExpiredIfNotCleanedUp`` returns them until they are cleaned up.
* Cleanup: expired values are removed when read; incrementally (``cleanup_incrementally(size,
  every_record)``, on by default with 5 entries per state access unless
  ``disable_cleanup_in_background()``, as Flink's heap backend); and, with
  ``cleanup_full_snapshot()``, left out of every snapshot.
* Restoring: a TTL state restores with its timestamps. Since Flink 2.2 a state may switch between TTL
  and no TTL across a restore: values restored into a TTL descriptor count as accessed at restore
  time; TTL values restored into a descriptor without TTL lose their timestamps.
"""

from __future__ import annotations

import datetime
import enum
import logging
from typing import Any, Callable, Iterator

from ...savepoint.ttl_meta import (is_ttl_meta, plain_meta, timestamped_meta, ttl_meta, ttl_type,
                                   with_timestamped_states, wrap_meta_value_type)
from ...savepoint.types import TtlValue

log = logging.getLogger("fstate.runtime.ttl")

_LONG_MAX = (1 << 63) - 1


# =============================================================================================
# configuration


class UpdateType(enum.Enum):
    """When the last access timestamp is renewed."""

    Disabled = "Disabled"
    OnCreateAndWrite = "OnCreateAndWrite"
    OnReadAndWrite = "OnReadAndWrite"


class StateVisibility(enum.Enum):
    """Whether an expired value not yet cleaned up may be returned."""

    ReturnExpiredIfNotCleanedUp = "ReturnExpiredIfNotCleanedUp"
    NeverReturnExpired = "NeverReturnExpired"


class TtlTimeCharacteristic(enum.Enum):
    ProcessingTime = "ProcessingTime"


class IncrementalCleanupStrategy:
    """Check ``cleanup_size`` entries of the state at every state access (and, with
    ``run_cleanup_for_every_record``, at every record), removing the expired ones."""

    def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool):
        if cleanup_size < 0:
            raise ValueError("Number of incrementally cleaned up state entries cannot be negative.")
        self.cleanup_size = cleanup_size
        self.every_record = bool(run_cleanup_for_every_record)

    def get_cleanup_size(self) -> int:
        return self.cleanup_size

    def run_cleanup_for_every_record(self) -> bool:
        return self.every_record

    def __repr__(self) -> str:
        return f"IncrementalCleanupStrategy(cleanup_size={self.cleanup_size}, every_record={self.every_record})"


DEFAULT_INCREMENTAL_CLEANUP = IncrementalCleanupStrategy(5, False)


class RocksdbCompactFilterCleanupStrategy:
    """Accepted for API compatibility; the runtime's heap state has no compaction (as Flink's heap
    backend ignores it)."""

    def __init__(self, query_time_after_num_entries: int = 1000, periodic_compaction_time=None):
        self.query_time_after_num_entries = query_time_after_num_entries
        self.periodic_compaction_time = periodic_compaction_time


class CleanupStrategies:
    def __init__(self, full_snapshot: bool, incremental: IncrementalCleanupStrategy | None,
                 rocksdb: RocksdbCompactFilterCleanupStrategy | None, cleanup_in_background: bool):
        self._full_snapshot = full_snapshot
        self._incremental = incremental
        self._rocksdb = rocksdb
        self._background = cleanup_in_background

    def is_full_snapshot(self) -> bool:
        return self._full_snapshot

    def is_cleanup_in_background(self) -> bool:
        return self._background

    def get_incremental_cleanup_strategy(self) -> IncrementalCleanupStrategy | None:
        if self._incremental is not None:
            return self._incremental
        return DEFAULT_INCREMENTAL_CLEANUP if self._background else None

    def in_rocksdb_compact_filter(self) -> bool:
        return self._rocksdb is not None or self._background


def _millis(ttl: Any) -> int:
    if isinstance(ttl, datetime.timedelta):
        return ttl // datetime.timedelta(milliseconds=1)
    if isinstance(ttl, bool) or not isinstance(ttl, int):
        raise TypeError(f"a TTL is a datetime.timedelta or milliseconds (int), not {ttl!r}")
    return ttl


class StateTtlConfig:
    """Configuration of state TTL (Flink's ``StateTtlConfig``). Build it with
    ``StateTtlConfig.new_builder(timedelta or ms)...build()``."""

    UpdateType = UpdateType
    StateVisibility = StateVisibility
    TtlTimeCharacteristic = TtlTimeCharacteristic
    DISABLED: "StateTtlConfig"

    def __init__(self, update_type: UpdateType, state_visibility: StateVisibility,
                 time_characteristic: TtlTimeCharacteristic, ttl_ms: int, cleanup: CleanupStrategies):
        if ttl_ms <= 0:
            raise ValueError("TTL is expected to be positive.")
        self.update_type = UpdateType(update_type)
        self.state_visibility = StateVisibility(state_visibility)
        self.time_characteristic = TtlTimeCharacteristic(time_characteristic)
        self.ttl_ms = ttl_ms
        self.cleanup_strategies = cleanup

    @staticmethod
    def new_builder(ttl: Any) -> "StateTtlConfig.Builder":
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> UpdateType:
        return self.update_type

    def get_state_visibility(self) -> StateVisibility:
        return self.state_visibility

    def get_ttl(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.ttl_ms)

    get_time_to_live = get_ttl

    def get_ttl_time_characteristic(self) -> TtlTimeCharacteristic:
        return self.time_characteristic

    def get_cleanup_strategies(self) -> CleanupStrategies:
        return self.cleanup_strategies

    def is_enabled(self) -> bool:
        return self.update_type is not UpdateType.Disabled

    def __repr__(self) -> str:
        return (f"StateTtlConfig{{updateType={self.update_type.value}, stateVisibility={self.state_visibility.value}, "
                f"ttlTimeCharacteristic={self.time_characteristic.value}, ttl={self.ttl_ms} ms}}")

    class Builder:
        def __init__(self, ttl: Any):
            self._ttl = _millis(ttl)
            self._update_type = UpdateType.OnCreateAndWrite
            self._visibility = StateVisibility.NeverReturnExpired
            self._time = TtlTimeCharacteristic.ProcessingTime
            self._full_snapshot = False
            self._incremental: IncrementalCleanupStrategy | None = None
            self._rocksdb: RocksdbCompactFilterCleanupStrategy | None = None
            self._background = True

        def set_update_type(self, update_type: UpdateType) -> "StateTtlConfig.Builder":
            self._update_type = UpdateType(update_type)
            return self

        def update_ttl_on_create_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> "StateTtlConfig.Builder":
            return self.set_update_type(UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: StateVisibility) -> "StateTtlConfig.Builder":
            self._visibility = StateVisibility(visibility)
            return self

        def return_expired_if_not_cleaned_up(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> "StateTtlConfig.Builder":
            return self.set_state_visibility(StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(self, characteristic: TtlTimeCharacteristic) -> "StateTtlConfig.Builder":
            self._time = TtlTimeCharacteristic(characteristic)
            return self

        def use_processing_time(self) -> "StateTtlConfig.Builder":
            return self.set_ttl_time_characteristic(TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> "StateTtlConfig.Builder":
            self._full_snapshot = True
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool
                                  ) -> "StateTtlConfig.Builder":
            self._incremental = IncrementalCleanupStrategy(cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int,
                                              periodic_compaction_time=None) -> "StateTtlConfig.Builder":
            self._rocksdb = RocksdbCompactFilterCleanupStrategy(query_time_after_num_entries, periodic_compaction_time)
            return self

        def disable_cleanup_in_background(self) -> "StateTtlConfig.Builder":
            self._background = False
            return self

        def set_ttl(self, ttl: Any) -> "StateTtlConfig.Builder":
            self._ttl = _millis(ttl)
            return self

        def build(self) -> "StateTtlConfig":
            return StateTtlConfig(self._update_type, self._visibility, self._time, self._ttl,
                                  CleanupStrategies(self._full_snapshot, self._incremental, self._rocksdb,
                                                    self._background))


StateTtlConfig.DISABLED = StateTtlConfig.new_builder(_LONG_MAX).set_update_type(UpdateType.Disabled).build()


# =============================================================================================
# values


def expired(last_access: int, ttl_ms: int, now: int) -> bool:
    """Flink's ``TtlUtils.expired``: last access + ttl (without overflow) <= now."""
    return last_access + (min(_LONG_MAX - last_access, ttl_ms) if last_access > 0 else ttl_ms) <= now


def _wrap_all(kind: str, value: Any, now: int) -> Any:
    if kind == "LIST":
        return [TtlValue(v, now) for v in value]
    if kind == "MAP":
        return {k: (None if v is None else TtlValue(v, now)) for k, v in value.items()}
    return TtlValue(value, now)


def _unwrap_all(kind: str, value: Any) -> Any:
    if kind == "LIST":
        return [v.user_value for v in value]
    if kind == "MAP":
        return {k: (None if v is None else v.user_value) for k, v in value.items()}
    return value.user_value


def migrate_table(table, to_ttl: bool, now: int, where: str) -> None:
    """Switch a restored state between TTL and no TTL in place (Flink 2.2+ does this on restore):
    values gaining TTL count as accessed ``now``; values losing it keep their user value."""
    kind = table.meta.kind
    for by_key in table.data.values():
        for key, value in by_key.items():
            by_key[key] = _wrap_all(kind, value, now) if to_ttl else _unwrap_all(kind, value)
    table.meta = ttl_meta(table.meta) if to_ttl else plain_meta(table.meta)
    log.info("%s: state '%s' restored %s TTL into a descriptor %s TTL; its values were migrated.", where,
             table.meta.name, "without" if to_ttl else "with", "with" if to_ttl else "without")


def unexpired_or_none(kind: str, value: Any, ttl_ms: int, now: int) -> Any:
    """Flink's ``getUnexpiredOrNull``: the value without its expired parts (the same object when
    nothing expired), None when nothing is left."""
    if kind == "LIST":
        kept = [v for v in value if not expired(v.last_access_timestamp, ttl_ms, now)]
        return None if not kept else value if len(kept) == len(value) else kept
    if kind == "MAP":
        kept = {k: v for k, v in value.items() if v is None or not expired(v.last_access_timestamp, ttl_ms, now)}
        return None if not kept else value if len(kept) == len(value) else kept
    return None if expired(value.last_access_timestamp, ttl_ms, now) else value


def snapshot_filter(kind: str, ttl_ms: int, clock) -> Callable[[Any], Any]:
    """Full-snapshot cleanup (Flink's ``TtlStateSnapshotTransformer``): what a snapshot writes of
    one value. A list loses its expired elements up to the first unexpired one (Flink's
    STOP_ON_FIRST_INCLUDED); map entries and values are dropped when expired."""
    def filter_value(value: Any) -> Any:
        now = clock.now_ms()
        if kind == "LIST":
            for i, v in enumerate(value):
                if not expired(v.last_access_timestamp, ttl_ms, now):
                    return value if i == 0 else value[i:]
            return None
        return unexpired_or_none(kind, value, ttl_ms, now)

    return filter_value


class IncrementalCleanup:
    """Walks all entries of one state, ``size`` entries per call, removing expired values (Flink's
    ``TtlIncrementalCleanup`` over a copy of the keys: the heap state table is not modified under
    an iterator)."""

    def __init__(self, table, kind: str, ttl_ms: int, clock, size: int):
        self._table = table
        self._kind = kind
        self._ttl = ttl_ms
        self._clock = clock
        self._size = size
        self._entries: Iterator[tuple[int, Any]] = iter(())

    def _walk(self) -> Iterator[tuple[int, Any]]:
        for kg, by_key in list(self._table.data.items()):
            for key in list(by_key):
                yield kg, key

    def run(self) -> None:
        done = 0
        restarted = False
        now = self._clock.now_ms()
        while done < self._size:
            nxt = next(self._entries, None)
            if nxt is None:
                if restarted:
                    return
                self._entries = self._walk()
                restarted = True
                continue
            kg, key = nxt
            by_key = self._table.data.get(kg)
            value = None if by_key is None else by_key.get(key)
            if value is None:
                continue
            clean = unexpired_or_none(self._kind, value, self._ttl, now)
            if clean is None:
                del by_key[key]
            elif clean is not value:
                by_key[key] = clean
            done += 1
