"""The keyed table of one :class:`.keyed_state.KeyedState`, through one interface whichever decoder
makes it.

:func:`new_decoder` looks at the state once (its layout and decoder, chosen when it was opened,
``FSTATE_PURE_PYTHON`` included) and at what is asked (:class:`RowShape`), and returns a
:class:`TableDecoder`; never None. Every decoder gives both:

* :meth:`TableDecoder.rows` — the table's row tuples: the key (its fields when ``flatten``), the
  namespace part (:data:`VOID`: none, :data:`WINDOW` / :data:`SLICE`: start and end,
  :data:`NAMESPACE`: the namespace) and one value per state (``flat``: one row per list element or
  map entry, with its index or map key);
* :meth:`TableDecoder.batches` — the same as Arrow record batches; a decoder that does not make
  Arrow itself hands its rows to the caller's ``from_rows``.

Behind it: the columnar decoder (:mod:`.columnar`, Arrow buffers in C, every layout), the compiled
row scanner (:mod:`._fastpath`, canonical streams) and the plain Python decoders (the reference,
every layout). Nothing downstream asks which: they give the same rows (tests/savepoint/test_columnar.py,
test_speedups.py), and the state is opened once whatever is chosen.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from . import _fastpath
from . import keyed_state as keyed_state_module

if TYPE_CHECKING:
    import pyarrow

    from . import columnar as columnar_module

#: how a keyed table shows the namespace
VOID, WINDOW, NAMESPACE, SLICE = "void", "window", "namespace", "slice"
NS_MODES = (VOID, WINDOW, NAMESPACE, SLICE)

#: builds Arrow batches from row tuples (the caller's conversion, which knows the table's schema)
FromRows = Callable[[Iterator[tuple]], Iterator["pyarrow.RecordBatch"]]


@dataclass(frozen=True)
class RowShape:
    """How a keyed table's rows are shaped (picklable: partitions carry it to executors)."""

    #: the key's fields as columns (a Tuple / Row / RowData key)
    flatten: bool = False
    #: :data:`VOID`, :data:`WINDOW`, :data:`NAMESPACE` or :data:`SLICE`
    ns_mode: str = VOID
    #: :data:`SLICE`: the window's length in ms (the namespace is the window's end)
    slice_size: int = 0
    #: one row per list element / map entry of the one selected state
    flat: bool = False
    #: TTL states' values as {value, ttl_timestamp} (``ttl_meta.with_timestamped_states``)
    ttl_timestamps: bool = False

    def __post_init__(self):
        if self.ns_mode not in NS_MODES:
            raise ValueError(f"unknown namespace mode {self.ns_mode!r}")


def hashable(value: Any) -> Any:
    """A decoded key as a set member (lists and dicts as tuples): what a key filter holds."""
    if isinstance(value, list):
        return tuple(hashable(x) for x in value)
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(x)) for k, x in value.items()))
    return value


class TableDecoder(ABC):
    """A keyed table decoded: its rows, or its Arrow batches."""

    #: which decoder this is ("columnar", "compiled", "python", "timers"): for tests and benches only
    name = ""

    @abstractmethod
    def rows(self) -> Iterator[tuple]:
        """The table's row tuples (decoding starts at the first)."""

    def batches(self, names: Sequence[str], from_rows: FromRows) -> Iterator["pyarrow.RecordBatch"]:
        """The table as record batches with columns ``names``: made by the decoder, or ``from_rows``
        over :meth:`rows`."""
        return from_rows(self.rows())


class _Shaped(TableDecoder):
    """Rows shaped from (key, namespace, values) by the one rule of :class:`RowShape`."""

    def __init__(self, state: keyed_state_module.KeyedState, shape: RowShape):
        self.state, self.shape = state, shape

    def key_part(self, key) -> tuple:
        return tuple(key) if self.shape.flatten else (key,)

    def ns_part(self, ns) -> tuple:
        mode = self.shape.ns_mode
        if mode == VOID:
            return ()
        if mode == WINDOW:
            return (None, None) if ns is None else (ns[0], ns[1])
        if mode == SLICE:  # an SQL tumbling window's namespace: its end (ms)
            return (None, None) if ns is None else (ns - self.shape.slice_size, ns)
        return (ns,)


class PythonRows(_Shaped):
    """Rows from :meth:`.KeyedState.rows` (the compiled row grouping or the Python decoders), with
    a key filter and ``flat`` rows."""

    name = "python"

    def __init__(self, state, shape: RowShape, state_ids: Sequence[int], key_filter: frozenset | None = None):
        super().__init__(state, shape)
        self.state_ids, self.key_filter = list(state_ids), key_filter

    def rows(self) -> Iterator[tuple]:
        key_filter, flat, key_part, ns_part = self.key_filter, self.shape.flat, self.key_part, self.ns_part
        kind = self.state.meta.states[self.state_ids[0]].kind if flat else None
        for _, key, ns, vals in self.state.rows(self.state_ids):
            if key_filter is not None and hashable(key) not in key_filter:
                continue
            head = key_part(key) + ns_part(ns)
            if not flat:
                yield head + tuple(vals)
                continue
            v = vals[0]
            if kind == "LIST":
                for i, x in enumerate(v or ()):
                    yield head + (i, x)
            elif kind == "MAP":
                for mk, mv in (v or {}).items():
                    yield head + (mk, mv)
            else:
                yield head + (v,)


class CompiledRows(TableDecoder):
    """Row tuples built by the compiled scanner (a canonical stream; no key filter, not ``flat``,
    no slices)."""

    name = "compiled"

    def __init__(self, state, shape: RowShape, state_ids: Sequence[int]):
        self.state, self.shape, self.state_ids = state, shape, list(state_ids)

    def rows(self) -> Iterator[tuple]:
        state = self.state
        return _fastpath.table_rows(state.data_regions(set(self.state_ids)), state.meta, state.max_parallelism, state.codecs,
                                    self.state_ids, state.source, self.shape.flatten, self.shape.ns_mode)


class Columnar(TableDecoder):
    """Arrow batches from the columnar decoder (its plan made once); rows from ``row_decoder`` over
    the same open state."""

    name = "columnar"

    def __init__(self, state, plan: "columnar_module.Plan", row_decoder: TableDecoder):
        self.state, self.plan, self.row_decoder = state, plan, row_decoder

    def rows(self) -> Iterator[tuple]:
        return self.row_decoder.rows()

    def batches(self, names: Sequence[str], from_rows: FromRows) -> Iterator["pyarrow.RecordBatch"]:
        from . import columnar

        state = self.state
        if state.layout == keyed_state_module.ROCKSDB:
            return columnar.snapshot_batches(self.plan, state.db, state.max_parallelism, state.codecs,
                                             state.key_groups, state.source, names)
        if state.layout == keyed_state_module.CANONICAL:
            return columnar.stream_batches(self.plan, state.buf, state.checked_regions(), state.meta, state.source,
                                           names)
        return columnar.native_stream_batches(self.plan, state.buf, state.checked_regions(), state.meta,
                                              state.codecs, state.source, names)


class TimerRows(_Shaped):
    """The timers table: key, timestamp, namespace part, kind ('event' / 'processing'), service."""

    name = "timers"

    def __init__(self, state, shape: RowShape, key_filter: frozenset | None = None):
        super().__init__(state, shape)
        self.key_filter = key_filter

    def rows(self) -> Iterator[tuple]:
        key_filter = self.key_filter
        for service, kind, ts, key, ns, _ in self.state.timer_rows():
            if key_filter is not None and hashable(key) not in key_filter:
                continue
            yield self.key_part(key) + (ts,) + self.ns_part(ns) + (kind, service)


def new_decoder(state: keyed_state_module.KeyedState, state_ids: Sequence[int], shape: RowShape = RowShape(), *,
                key_filter: frozenset | None = None, timers: bool = False) -> TableDecoder:
    """The decoder of the keyed table of ``state_ids`` (``timers``: the timers table) shaped as
    ``shape``, keeping the keys in ``key_filter`` (None: all). Never None: the columnar decoder when
    it covers the states, else the compiled rows when the state chose the compiled decoder, else
    the Python decoders."""
    if timers:
        return TimerRows(state, shape, key_filter)
    python = PythonRows(state, shape, state_ids, key_filter)
    if key_filter is not None or shape.flat or shape.ns_mode == SLICE:
        return python
    rows: TableDecoder = (CompiledRows(state, shape, state_ids)
                          if state.decoder == keyed_state_module.COMPILED else python)
    if not state.compiled or state.strict:
        return rows
    from . import columnar  # imports pyarrow: only when the compiled path is on

    plan = columnar.plan(state.meta, state.max_parallelism, state.codecs, state_ids, shape.flatten, shape.ns_mode,
                         native=state.layout == keyed_state_module.HEAP_NATIVE)
    return rows if plan is None else Columnar(state, plan, rows)
