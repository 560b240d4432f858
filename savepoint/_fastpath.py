"""The compiled decoder of canonical key groups (``fstate.savepoint._speedups``), used by
:class:`.keyed_state.KeyedState` when it chooses it (this module knows nothing of layouts).

The plain Python decoders in :mod:`keyed` are the reference; the C scanner produces exactly the same
entries and rows and fails on the same inputs with the same kinds of errors (tests/savepoint/test_speedups.py
checks both on every sample and on generated and corrupted streams). Both are strict: a key group's
entries end exactly at its region's end, and every key and value decodes to exactly its stored bytes.

A state is decoded in C when its key, namespace and values are built from: String, Long, Integer,
Short, Byte, Boolean, Double, Float, Character (and their Flink ``*Value`` twins), VoidNamespace /
GlobalWindow / Void, TimeWindow, Tuple of those, Nullable and TTL wrappers, and opaque (raw bytes)
values. Any other state of the same stream is decoded by its Python decoder, called from the C
scanner for each of its entries, so one unusual state never sends the whole stream down the slow
path. Timers are decoded in C too.

``FSTATE_PURE_PYTHON=1`` (read at every call) forces the plain Python path; so does a missing
extension (an install without a C compiler).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, NamedTuple

from . import keyed_codecs
from ._compiled import pure_python_forced, speedups as _speedups
from .errors import DECODE_ERRORS, CorruptStateError, UnsupportedSerializerError
from .types import (ArrayListType, EitherType, EnumType, GenericArrayType, ListType, MapType, NullableType,
                    OpaqueType, PickledType, PojoType, RowType, SCALAR_KINDS, Scalar, SetType, TimeWindowType, TimerType,
                    TtlType, TupleType, TypeInfo, PreOrderTypeVisitor, visit)
from .types.cep import CepType
from .types.roles import as_timer
from .types.sorted_map import SortedMapType
from .types.table import ExternalType, RawValueDataType, RowDataType, TableDataType


# type codes and plan modes: the enums of _wire.h (both compiled decoders; columnar.py imports them from here)
# and _speedups.c
(STRING, LONG, INT, SHORT, BYTE, BOOL, DOUBLE, FLOAT, CHAR, ZERO, WINDOW, TUPLE, NULLABLE, TTL,
 RAW) = range(1, 16)
SKIP, VALUE, LIST, LIST_RAW, MAP, TIMER, PY = range(7)
C_PLAIN, C_LIST, C_MAP = range(3)

#: the type codes by their names in the scalar registry (``ScalarKind.fast_path``)
CODES = {"STRING": STRING, "LONG": LONG, "INT": INT, "SHORT": SHORT, "BYTE": BYTE, "BOOL": BOOL, "DOUBLE": DOUBLE,
         "FLOAT": FLOAT, "CHAR": CHAR, "ZERO": ZERO}

# A scalar is decoded in C when its kind has a fast-path code in the registry (the C decoder reads the
# same bytes and makes the same values as the scalar's Python decoder).
SCALAR_CODES = {kind: CODES[entry.fast_path] for kind, entry in SCALAR_KINDS.items() if entry.fast_path}


def available() -> bool:
    """Whether the compiled path is used (built, and not switched off by FSTATE_PURE_PYTHON)."""
    return _speedups is not None and not pure_python_forced()


class FastPathSpecVisitor(PreOrderTypeVisitor[Any]):
    """The C scanner's description of a type (a type code, or a tuple for Tuple, Nullable and TTL),
    or None when the scanner cannot decode it."""

    def visit_scalar(self, node: Scalar) -> Any:
        return SCALAR_CODES.get(node.kind)

    def visit_time_window(self, node: TimeWindowType) -> Any:
        return WINDOW

    def visit_tuple(self, node: TupleType, fields) -> Any:
        kids = tuple(field() for field in fields)
        return None if any(k is None for k in kids) else (TUPLE, kids)

    def visit_nullable(self, node: NullableType, inner) -> Any:
        spec = inner()
        return None if spec is None else (NULLABLE, node.padding, spec)

    def visit_ttl(self, node: TtlType, value, timestamp) -> Any:
        if node.timestamped:  # TtlValue(user value, timestamp): the Python decoder builds it
            return None
        spec = value()
        return None if spec is None else (TTL, spec)

    # Decoded by their Python decoders (called from the C scanner).
    def visit_row(self, node: RowType, fields) -> Any:
        return None

    def visit_list(self, node: ListType, element) -> Any:
        return None

    def visit_array_list(self, node: ArrayListType, element) -> Any:
        return None

    def visit_set(self, node: SetType, element) -> Any:
        return None

    def visit_map(self, node: MapType, key, value) -> Any:
        return None

    def visit_either(self, node: EitherType, fields) -> Any:
        return None

    def visit_generic_array(self, node: GenericArrayType, element) -> Any:
        return None

    def visit_timer(self, node: TimerType, key, namespace) -> Any:
        return None

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> Any:
        return None

    def visit_enum(self, node: EnumType) -> Any:
        return None

    def visit_pickled(self, node: PickledType) -> Any:
        return None

    def visit_opaque(self, node: OpaqueType) -> Any:
        return None

    # CEP
    def visit_cep(self, node: CepType, shape) -> Any:
        return None

    # table runtime: not on the fast path (decoded by their Python decoders)
    def visit_row_data(self, node: RowDataType, fields) -> Any:
        return None

    def visit_table_data(self, node: TableDataType) -> Any:
        return None

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> Any:
        return None

    def visit_external(self, node: ExternalType, inner) -> Any:
        return None

    def visit_sorted_map(self, node: SortedMapType, key, value) -> Any:
        return None


def type_spec(t: TypeInfo) -> Any:
    """The C scanner's description of a type, or None when the scanner cannot decode it."""
    return visit(t, FastPathSpecVisitor())


def _opaque_or_spec(t: TypeInfo) -> Any:
    """Where the Python decoder reads an undecodable type as "the rest of the bytes"."""
    return RAW if not t.fully_decodable else type_spec(t)


class ScanPlan(NamedTuple):
    """The C scanner's plan of one state (a tuple to ``_speedups.Scanner``, in this order)."""

    mode: int  # SKIP, VALUE, LIST, LIST_RAW, MAP, TIMER or PY
    key: Any = None  # type specs (:func:`type_spec`)
    namespace: Any = None
    value: Any = None
    user_key: Any = None
    ambiguous: bool = False  # key and namespace lengths written after each
    function: Any = None  # PY: the state's Python decoder
    column: int = -1  # its column in rows (-1: none)
    column_kind: int = 0  # C_PLAIN, C_LIST, C_MAP


def _plan(codec, wanted: bool, source: str | None, column: int, column_kind: int) -> ScanPlan:
    """The C scanner's plan of one state, from its :class:`.keyed_codecs.StateShape`."""
    info, shape = codec.info, codec.shape

    def py(func):
        return ScanPlan(PY, function=func, column=column, column_kind=column_kind)

    if not wanted:
        return ScanPlan(SKIP)
    if codec.canonical is None:
        name = info.name

        def unsupported(kb, vb):
            raise UnsupportedSerializerError(f"state '{name}' has types fstate cannot decode", source)

        return py(unsupported)
    if shape.form == keyed_codecs.TIMER:
        timer = as_timer(shape.value)
        if timer is not None:
            k, n = type_spec(timer.key), type_spec(timer.namespace)
            if k is not None and n is not None:
                return ScanPlan(TIMER, k, n, column=column, column_kind=column_kind)
        return py(codec.canonical)
    k = type_spec(shape.key) if shape.key.fully_decodable else None
    n = type_spec(shape.namespace)
    if k is None or n is None or shape.form == keyed_codecs.RAW_MAP:  # (raw map entries: in Python)
        return py(codec.canonical)
    ambiguous = shape.ambiguous
    if shape.form in (keyed_codecs.LIST, keyed_codecs.RAW_LIST):
        if not shape.value.fully_decodable:
            return ScanPlan(LIST_RAW, k, n, ambiguous=ambiguous, column=column, column_kind=column_kind)
        e = type_spec(shape.value)
        if e is None:
            return py(codec.canonical)
        return ScanPlan(LIST, k, n, e, ambiguous=ambiguous, column=column, column_kind=column_kind)
    if shape.form == keyed_codecs.MAP:
        uk, uv = _opaque_or_spec(shape.user_key), _opaque_or_spec(shape.value)
        if uk is None or uv is None:
            return py(codec.canonical)
        return ScanPlan(MAP, k, n, uv, uk, ambiguous, column=column, column_kind=column_kind)
    v = _opaque_or_spec(shape.value)
    if v is None:
        return py(codec.canonical)
    return ScanPlan(VALUE, k, n, v, ambiguous=ambiguous, column=column, column_kind=column_kind)


def measures_native(codec) -> bool:
    """Whether the C scanner's ``measure(native=True)`` reads this state's heap-native entries: its
    namespace, key and whole value (a list serializer's elements, a map serializer's entries) are of
    the types it decodes itself."""
    if codec.native is None:
        return False
    plan = _plan(codec, True, None, -1, C_PLAIN)
    if plan.mode == LIST:
        return codec.shape.form == keyed_codecs.LIST
    if plan.mode == MAP:
        return RAW not in (plan.value, plan.user_key)
    return plan.mode == TIMER or (plan.mode == VALUE and plan.value != RAW)


def records_ttl(codec) -> bool:
    """Whether the C scanner's ``measure()`` records every last-access timestamp of this TTL state: its
    value (list element, map value) is a TTL wrapper the scanner decodes itself (one timestamp each)."""
    plan = _plan(codec, True, None, -1, C_PLAIN)
    spec = plan.value
    return plan.mode in (VALUE, LIST, MAP) and type(spec) is tuple and spec[0] == TTL


def scanner(meta, codecs, max_parallelism: int, states: set[int] | None, source: str | None,
            state_ids: list[int] | None = None):
    """A C scanner for these states (``state_ids``: the row columns, for :func:`canonical_rows`),
    or None when the compiled path is off."""
    if not available():
        return None
    return compiled_scanner(meta, codecs, max_parallelism, states, source, state_ids)


def compiled_scanner(meta, codecs, max_parallelism: int, states: set[int] | None, source: str | None,
                     state_ids: list[int] | None = None):
    """:func:`scanner` for a reader that chose the compiled path already (the extension is built:
    :func:`available` was true when it chose; FSTATE_PURE_PYTHON is not read again)."""
    prefix = 1 if max_parallelism <= 128 else 2
    columns = {sid: i for i, sid in enumerate(state_ids)} if state_ids is not None else {}
    plans = []
    for i, codec in enumerate(codecs):
        wanted = states is None or i in states
        col = columns.get(i, -1)
        ckind = C_MAP if codec.kind == "MAP" else C_LIST if codec.kind == "LIST" else C_PLAIN  # the column's kind
        plans.append(_plan(codec, wanted, source, col, ckind))
    return _speedups.Scanner(tuple(plans), prefix, CorruptStateError, source)


def canonical_key_group(scan, data, pos: int, end: int, kg: int) -> Iterator[tuple]:
    """The entries of one canonical key group (keyed.canonical_key_group, in C), which lie in
    ``data[pos:end]`` (keyed.key_group_data). On an error the entries decoded before it are yielded
    first, as the Python generator does."""
    out: list = []
    try:
        scan.entries(data, pos, end, kg, out)
    except BaseException:
        yield from out
        raise
    yield from out


def _grouped(regions, source: str | None, group):
    """(key group, {identity: row}) per key group; ``group(data, pos, end, kg, rows)`` fills the
    rows in C (Scanner.rows or Scanner.table)."""
    for kg, data, pos, end in regions:
        rows: dict = {}
        try:
            group(data, pos, end, kg, rows)
        except DECODE_ERRORS as e:
            raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None
        yield kg, rows


def keyed_rows(regions: Iterable[tuple[int, Any, int, int]], meta, max_parallelism: int,
               state_ids: list[int], codecs, source: str | None) -> Iterator[tuple]:
    """KeyedState.rows in C over the (key group, bytes, start, end) regions of a canonical stream
    (KeyedState's data regions): (key group, key, namespace, values). Only when the extension is
    built."""
    scan = compiled_scanner(meta, codecs, max_parallelism, set(state_ids), source, state_ids)
    width = len(state_ids)

    def group(data, pos, end, kg, rows):
        scan.rows(data, pos, end, kg, width, rows)

    return ((kg, key, ns, vals)
            for kg, rows in _grouped(regions, source, group)
            for key, ns, vals in rows.values())


NS_MODES = {"void": 0, "window": 1}


def table_rows(regions: Iterable[tuple[int, Any, int, int]], meta, max_parallelism: int, codecs,
               state_ids: list[int], source: str | None, flatten: bool, ns_mode: str) -> Iterator[tuple]:
    """decoders.CompiledRows: the keyed table's row tuples (decoders.PythonRows without key
    filter and ``flat``):
    key (its fields when ``flatten``), the namespace part (``ns_mode`` void: none, window: start and
    end, else the namespace) and one value per state, over the (key group, bytes, start, end)
    regions of a canonical stream. Only when the extension is built."""
    scan = compiled_scanner(meta, codecs, max_parallelism, set(state_ids), source, state_ids)
    mode = NS_MODES.get(ns_mode, 2)
    width = len(state_ids)

    def group(data, pos, end, kg, rows):
        scan.table(data, pos, end, kg, width, flatten, mode, rows)

    def gen():
        for _, rows in _grouped(regions, source, group):
            yield from rows.values()

    return gen()
