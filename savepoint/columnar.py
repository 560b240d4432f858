"""Keyed state as Arrow record batches, decoded in C (``fstate.savepoint._columnar``), in every
layout: canonical key groups (:func:`keyed_batches`), the heap backend's native key groups
(:func:`native_batches`) and RocksDB column families (:func:`rocksdb_batches`: the pairs read from
the table files in C by :mod:`.rocksdb_native`, or pulled from rocksdict's iterators in C when that
reader cannot read the snapshot).

The compiled decoder reads the key groups straight into Arrow buffers (validity bitmaps, offsets
and data; lists, maps and structs as child arrays) and makes no Python object per row or value.
The plain Python decoders in :mod:`keyed` and :mod:`rocksdb` stay the reference: the batches,
turned into rows, equal the rows of ``KeyedState.rows`` (:mod:`keyed_state`) shaped as
``decoders.PythonRows`` does (tests/savepoint/test_columnar.py and
test_columnar_layouts.py check every sample and generated streams), and the decoder is as strict
as the Python strict path (a key group ends exactly where its region ends, keys and values decode
to exactly their stored bytes). Every decoding error is a :class:`CorruptStateError` naming the
source.

Covered: keys, namespaces and values built from String, Long, Integer, Short, Byte, Boolean,
Double, Float, Character, Void / VoidNamespace / GlobalWindow, TimeWindow, Tuple of those,
Nullable and TTL wrappers, and opaque values (raw bytes), in VALUE (and reducing / aggregating),
LIST and MAP states that share one namespace type (heap-native: no opaque values, and every
state without a column has covered types, as its entries are decoded to be skipped). The
functions return None for anything else (and when the extension is missing or
``FSTATE_PURE_PYTHON=1``): the caller reads rows then.

Documented differences from the row path: a lone UTF-16 surrogate in a string (which UTF-8,
hence Arrow, cannot hold) becomes U+FFFD; a list or map state whose entries of one key are not
next to each other (no Flink writer does that) is reported as corrupt instead of being merged;
RocksDB entries are decoded as strictly as canonical ones (the row path accepts a key or value
that decodes to fewer bytes than stored there).
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple, Sequence

import pyarrow

from . import keyed
from . import streams
# type codes and plan modes: the enums of _wire.h, which both compiled decoders share
from ._fastpath import (LIST, LIST_RAW, LONG, MAP, NULLABLE, RAW, SCALAR_CODES, SKIP, TTL, TUPLE, VALUE, WINDOW,
                        ZERO)
from ._compiled import compiled_extension, pure_python_forced, speedups as _speedups
from .compression import decompress_framed
from .errors import DECODE_ERRORS, CorruptStateError, FStateError
from .keyed_codecs import LIST as LIST_FORM, MAP as MAP_FORM, RAW_LIST, RAW_MAP, TIMER, key_group_prefix_size
from .types import arrow_types
from .types import (NullableType, Scalar, TimeWindowType, TtlType,
                    TupleType, TypeInfo, PreOrderTypeVisitor, visit)
from .types.roles import as_opaque, as_timer

ABI = 5  # the interface version of _columnar.c this module speaks

_columnar = compiled_extension("_columnar", ABI)

SKIP_PLAIN, SKIP_LIST, SKIP_MAP = range(3)  # how a heap-native entry of a state without a column is skipped

#: rows per record batch (a batch ends after the key group, or the piece of one, that reaches it)
MAX_ROWS = 65536
#: a canonical key group larger than :data:`SPLIT_ABOVE` is decoded in pieces of about this size, one
#: at a time (:func:`key_group_pieces`), so that a reader holds a piece's rows, not a whole key group's
#: (one key group of 100 M keys at max parallelism 128 holds 67 MB of state)
PIECE_BYTES = 4 << 20
#: the largest key group decoded whole: cutting one costs a pass over its framing and a copy of its
#: entries, and in Flink's heap layout (each state's entries in its own order) placing every entry
#: with its row: a third more of the decoding's CPU for key groups of 6.7 MB (10 M keys, 128 key
#: groups), a few MB of memory saved. Above it (100 M keys: 67 MB) the pieces keep memory flat.
SPLIT_ABOVE = 16 << 20

#: (C type code, Arrow type) of the scalar kinds the compiled decoders take (the scalar registry)
_SCALARS: dict[str, tuple[int, pyarrow.DataType]] = {kind: (code, arrow_types.SCALAR_TYPES[kind])
                                                     for kind, code in SCALAR_CODES.items()}

WINDOW_TYPE = pyarrow.struct([pyarrow.field("start", pyarrow.int64(), nullable=False),
                              pyarrow.field("end", pyarrow.int64(), nullable=False)])


def list_type(element: pyarrow.DataType) -> pyarrow.DataType:
    """A list column as Spark writes it (its element field is named "element")."""
    return arrow_types.array_type(element)


def available() -> bool:
    """Whether the columnar decoder is used (built, and not switched off by FSTATE_PURE_PYTHON)."""
    return _columnar is not None and not pure_python_forced()


class ColumnarVisitor(PreOrderTypeVisitor[object]):
    """(C type spec, Arrow type) of a type the columnar decoder covers, or None. The Arrow types
    are what Spark writes for these columns (readers.schema.SparkTypeVisitor)."""

    def visit_scalar(self, node: Scalar) -> object:
        return _SCALARS.get(node.kind)

    def visit_time_window(self, node: TimeWindowType) -> object:
        return WINDOW, WINDOW_TYPE

    def visit_tuple(self, node: TupleType, fields) -> object:
        kids = [field() for field in fields]
        if any(k is None for k in kids):
            return None
        return ((TUPLE, tuple(spec for spec, _ in kids)),
                pyarrow.struct([pyarrow.field(name, arrow) for name, (_, arrow) in zip(node.field_names, kids)]))

    def visit_nullable(self, node: NullableType, inner) -> object:
        found = inner()
        return None if found is None else ((NULLABLE, node.padding, found[0]), found[1])

    def visit_ttl(self, node: TtlType, value, timestamp) -> object:
        if node.timestamped:  # TtlValue(user value, last access): the caller reads rows
            return None
        found = value()
        return None if found is None else ((TTL, found[0]), found[1])

    def _none(self, node: TypeInfo, *children) -> object:
        return None

    # not covered (the caller reads rows): rows, collections inside values, POJOs, enums, pickles,
    # opaque types inside composites, CEP and the table runtime's types
    visit_row = visit_list = visit_array_list = visit_set = visit_map = visit_either = _none
    visit_generic_array = visit_timer = visit_pojo = visit_enum = visit_pickled = visit_opaque = _none
    visit_cep = visit_row_data = visit_table_data = visit_raw_value_data = visit_external = visit_sorted_map = _none


def _covered(t: TypeInfo):
    return visit(t, ColumnarVisitor())


def arrow_type(t: TypeInfo) -> pyarrow.DataType | None:
    """The Arrow type of a covered type's values (None when the columnar decoder does not cover it)."""
    found = _stored(t)
    return None if found is None else found[1]


def _stored(t: TypeInfo):
    """A stored value, key or element: undecodable opaque types are their raw bytes."""
    if not t.fully_decodable:
        return (RAW, pyarrow.binary()) if as_opaque(t) is not None else None
    return _covered(t)


class StatePlan(NamedTuple):
    """The columnar decoder's plan of one state (a tuple to ``_columnar.Decoder``, in this order)."""

    mode: int  # SKIP, VALUE, LIST, LIST_RAW or MAP
    value: object = None  # C type specs (ColumnarVisitor)
    user_key: object = None
    ambiguous: bool = False  # key and namespace lengths written after each
    skip: object = None  # heap-native: how an entry of a state without a column is skipped


def _state_plan(codec, ns_type: TypeInfo):
    """(C plan, Arrow type of the state's column) or None, from the state's shape."""
    shape = codec.shape
    if codec.canonical is None or shape.form in (TIMER, RAW_MAP) or shape.namespace != ns_type:
        return None
    found = _stored(shape.value)
    if found is None:
        return None
    if shape.form in (LIST_FORM, RAW_LIST):
        mode = LIST_RAW if found[0] == RAW else LIST
        return StatePlan(mode, found[0], None, shape.ambiguous), list_type(found[1])
    if shape.form == MAP_FORM:
        uk = _stored(shape.user_key)
        if uk is None:
            return None
        return StatePlan(MAP, found[0], uk[0], shape.ambiguous), pyarrow.map_(uk[1], found[1])
    return StatePlan(VALUE, found[0], None, shape.ambiguous), found[1]


class Plan:
    """What the columnar decoder makes of these states (computed once, by :func:`plan`): each state's C
    plan, the key and namespace specs, and the Arrow type of every column."""

    def __init__(self, plans: tuple, state_ids: list[int], key, ns, types: list, flatten: bool, ns_mode: str,
                 prefix: int):
        self.plans, self.state_ids, self.key, self.ns, self.types = plans, state_ids, key, ns, types
        self.flatten, self.ns_mode, self.prefix = flatten, ns_mode, prefix

    def decoder(self, source: str | None):
        """A fresh C decoder (it accumulates the rows of one batch)."""
        keep_ns = self.ns_mode != "void" and self.ns[0] != ZERO  # a void namespace is a column of nulls
        return _columnar.Decoder(self.plans, tuple(self.state_ids), self.key[0], self.ns[0], keep_ns, self.prefix,
                                 CorruptStateError, source)

    def shape(self, names: Sequence[str]) -> "_Shape":
        return _Shape(self.key, self.ns, self.types, self.flatten, self.ns_mode, list(names))


def plan(meta, max_parallelism: int, codecs, state_ids: Sequence[int], flatten: bool, ns_mode: str, *,
         native: bool) -> Plan | None:
    """The columnar decoder's plan for these states of a canonical or RocksDB (``native`` False) or
    heap-native (True) layout, or None when it does not cover them (or is off): the caller reads
    rows then. The caller decides whether the compiled path is on (:func:`available`)."""
    state_ids = list(state_ids)
    if _columnar is None or not state_ids:
        return None
    key_t = meta.key_type
    ns_t = codecs[state_ids[0]].shape.namespace
    key, ns = (_covered(key_t) if key_t.fully_decodable else None), _covered(ns_t)
    if key is None or ns is None:
        return None
    if flatten and not (isinstance(key[0], tuple) and key[0][0] == TUPLE):
        return None
    if ns_mode == "slice" or (ns_mode == "window" and ns[0] not in (WINDOW, ZERO)):
        return None
    plans: list = [None] * len(codecs)
    types = []
    for sid in state_ids:
        found = (_native_plan if native else _state_plan)(codecs[sid], ns_t)
        if found is None or plans[sid] is not None:
            return None
        plans[sid], arrow = found
        types.append(arrow)
    for sid, codec in enumerate(codecs):
        if plans[sid] is None:
            skip = _skip_parts(codec) if native else None
            if native and skip is None:
                return None
            plans[sid] = StatePlan(SKIP, skip=skip)
    return Plan(tuple(plans), state_ids, key, ns, types, flatten, ns_mode, key_group_prefix_size(max_parallelism))


def stream_batches(found: Plan, buf: bytes, regions: Iterable[tuple[int, int, int]], meta, source: str | None,
                   names: Sequence[str], max_rows: int = MAX_ROWS, piece_bytes: int | None = None
                   ) -> Iterator[pyarrow.RecordBatch]:
    """The keyed table (readers.tables' rows without key filter and ``flat``) as record batches over
    the (key group, start, end) regions of a canonical stream: key (its fields when ``flatten``),
    the namespace part (``ns_mode`` void: none, window: start and end, else the namespace) and one
    column per state of the plan, named ``names``. One batch per run of key groups (or pieces of a
    key group larger than :data:`SPLIT_ABOVE`, of ``piece_bytes``, :data:`PIECE_BYTES` by default)
    reaching ``max_rows`` rows."""
    pieces = _Pieces(found, PIECE_BYTES if piece_bytes is None else piece_bytes, SPLIT_ABOVE)
    return _batches(found.decoder(source), found.shape(names), buf, regions, meta, source, max_rows, pieces)


def native_stream_batches(found: Plan, buf: bytes, regions: Iterable[tuple[int, int, int]], meta, codecs,
                          source: str | None, names: Sequence[str], max_rows: int = MAX_ROWS
                          ) -> Iterator[pyarrow.RecordBatch]:
    """:func:`stream_batches` over the key groups of a heap-native stream (keyed.native_key_group is
    the reference; strict as its strict path)."""
    return _native_batches(found.decoder(source), found.shape(names), buf, regions, meta, codecs, source, max_rows)


def snapshot_batches(found: Plan, db, max_parallelism: int, codecs, key_groups, source: str | None,
                     names: Sequence[str], max_rows: int = MAX_ROWS) -> Iterator[pyarrow.RecordBatch]:
    """:func:`stream_batches` over an open RocksDB snapshot (rocksdb.iter_entries is the reference):
    the decoder pulls the (key, value) pairs of each selected state's column family from its
    rocksdict iterator (no Python code per pair), key group by key group (rows in the reference's
    order: key group, state id, key; from the table files, a key group holding more than a piece
    (:data:`PIECE_BYTES` of one state's pairs, :func:`_packed_batches`) in that order piece by piece)."""
    from . import rocksdb
    from . import rocksdb_native

    runs = rocksdb.key_group_runs(key_groups, db.source.start_key_group, db.source.end_key_group)
    present = set(db.column_families)
    families = [(sid, codecs[sid].info.name) for sid in sorted(found.state_ids) if codecs[sid].info.name in present]
    prefix = key_group_prefix_size(max_parallelism)
    tables = rocksdb_native.open_tables(db, rocksdb_native.run_keys(runs, prefix))
    if tables is not None:  # the table files read in C (rocksdb_native.py); else rocksdict's iterators
        return _packed_batches(found.decoder(source), found.shape(names), db, tables, families, runs, prefix,
                               max_rows, _piece_lead(found, families))
    return _pair_batches(found.decoder(source), found.shape(names), db, families, runs, prefix, max_rows)


# -- the same, planned and read in one call (tests and benches): None when not covered ----------
def keyed_batches(buf: bytes, regions: Iterable[tuple[int, int, int]], meta, max_parallelism: int, codecs,
                  state_ids: list[int], source: str | None, flatten: bool, ns_mode: str, names: Sequence[str],
                  max_rows: int = MAX_ROWS) -> Iterator[pyarrow.RecordBatch] | None:
    """:func:`plan` and :func:`stream_batches` (None when not covered)."""
    found = plan(meta, max_parallelism, codecs, state_ids, flatten, ns_mode, native=False) if available() else None
    return None if found is None else stream_batches(found, buf, regions, meta, source, names, max_rows)


def native_batches(buf: bytes, regions: Iterable[tuple[int, int, int]], meta, max_parallelism: int, codecs,
                   state_ids: list[int], source: str | None, flatten: bool, ns_mode: str, names: Sequence[str],
                   max_rows: int = MAX_ROWS) -> Iterator[pyarrow.RecordBatch] | None:
    """:func:`plan` and :func:`native_stream_batches` (None when not covered)."""
    found = plan(meta, max_parallelism, codecs, state_ids, flatten, ns_mode, native=True) if available() else None
    return None if found is None else native_stream_batches(found, buf, regions, meta, codecs, source, names,
                                                            max_rows)


def rocksdb_batches(db, meta, max_parallelism: int, codecs, key_groups, state_ids: list[int], source: str | None,
                    flatten: bool, ns_mode: str, names: Sequence[str], max_rows: int = MAX_ROWS
                    ) -> Iterator[pyarrow.RecordBatch] | None:
    """:func:`plan` and :func:`snapshot_batches` (None when not covered)."""
    found = plan(meta, max_parallelism, codecs, state_ids, flatten, ns_mode, native=False) if available() else None
    return None if found is None else snapshot_batches(found, db, max_parallelism, codecs, key_groups, source, names,
                                                       max_rows)


def _native_plan(codec, ns_type: TypeInfo):
    """(C plan, Arrow type) of a state with a column in the heap-native layout: whole values."""
    shape = codec.shape
    if codec.native is None or shape.form in (TIMER, RAW_LIST, RAW_MAP) or shape.namespace != ns_type:
        return None
    found = _covered(shape.value)
    if found is None:
        return None
    if shape.form == LIST_FORM:
        return StatePlan(LIST, found[0]), list_type(found[1])
    if shape.form == MAP_FORM:
        uk = _covered(shape.user_key)
        return None if uk is None else (StatePlan(MAP, found[0], uk[0]), pyarrow.map_(uk[1], found[1]))
    return StatePlan(VALUE, found[0]), found[1]


def _skip_parts(codec):
    """How a heap-native entry of a state without a column is skipped, or None."""
    shape = codec.shape
    if shape.form == TIMER:  # TimerSerializer: timestamp, key, namespace
        timer = as_timer(shape.value)
        if timer is None:
            return None
        parts = [_covered(timer.key), _covered(timer.namespace)]
        return None if None in parts else ((SKIP_PLAIN, (TUPLE, (LONG, parts[0][0], parts[1][0]))),)
    if shape.form in (RAW_LIST, RAW_MAP):
        return None
    head = [_covered(shape.namespace), _covered(shape.key)]
    found = _covered(shape.value)
    if None in head or found is None:
        return None
    head = [(SKIP_PLAIN, part[0]) for part in head]
    if shape.form == LIST_FORM:
        return (*head, (SKIP_LIST, found[0]))
    if shape.form == MAP_FORM:
        uk = _covered(shape.user_key)
        return None if uk is None else (*head, (SKIP_MAP, uk[0], found[0]))
    return (*head, (SKIP_PLAIN, found[0]))


class _Shape:
    """Turns the decoder's buffers into a record batch."""

    def __init__(self, key, ns, types, flatten, ns_mode, names):
        self.key_type, self.ns_type, self.types = key[1], ns[1], types
        self.ns_zero = ns[0] == ZERO
        self.flatten, self.ns_mode, self.names = flatten, ns_mode, names

    def batch(self, flushed) -> pyarrow.RecordBatch:
        rows, key_desc, ns_desc, states = flushed
        key = _array(self.key_type, key_desc)
        columns = [key.field(i) for i in range(key.type.num_fields)] if self.flatten else [key]
        if self.ns_mode == "window":
            if self.ns_zero:
                columns += [pyarrow.nulls(rows, pyarrow.int64())] * 2
            else:
                window = _array(self.ns_type, ns_desc)
                columns += [window.field(0), window.field(1)]
        elif self.ns_mode != "void":
            columns.append(pyarrow.nulls(rows, self.ns_type) if self.ns_zero else _array(self.ns_type, ns_desc))
        for arrow, (desc, take) in zip(self.types, states):
            values = _array(arrow, desc)
            if take is not None:
                indices, valid = take
                values = values.take(pyarrow.Array.from_buffers(
                    pyarrow.int32(), rows, [None if valid is None else pyarrow.py_buffer(valid),
                                            pyarrow.py_buffer(indices)]))
            columns.append(values)
        if len(columns) != len(self.names):
            raise ValueError(f"{len(self.names)} column names for {len(columns)} columns")
        return pyarrow.RecordBatch.from_arrays(columns, names=self.names)


def _array(arrow: pyarrow.DataType, desc) -> pyarrow.Array:
    length, nulls, valid, buffers, kids = desc
    head = [None if valid is None else pyarrow.py_buffer(valid)] + [pyarrow.py_buffer(b) for b in buffers]
    if pyarrow.types.is_map(arrow):
        entries = pyarrow.StructArray.from_arrays(
            [_array(arrow.key_type, kids[0]), _array(arrow.item_type, kids[1])],
            fields=[arrow.key_field, arrow.item_field])
        return pyarrow.Array.from_buffers(arrow, length, head, nulls, children=[entries])
    if pyarrow.types.is_list(arrow):
        return pyarrow.Array.from_buffers(arrow, length, head, nulls, children=[_array(arrow.value_type, kids[0])])
    if pyarrow.types.is_struct(arrow):
        children = [_array(arrow.field(i).type, k) for i, k in enumerate(kids)]
        return pyarrow.Array.from_buffers(arrow, length, head, nulls, children=children)
    return pyarrow.Array.from_buffers(arrow, length, head, nulls)


def _batches(decoder, shape: _Shape, buf, regions, meta, source, max_rows, pieces: "_Pieces"
             ) -> Iterator[pyarrow.RecordBatch]:
    compressed = meta.compressed
    for kg, start, end in regions:
        if not meta.header_size <= start <= len(buf):
            raise CorruptStateError(f"key group {kg}: offset {start} is outside the state stream of "
                                    f"{len(buf)} bytes", source)
        if compressed:
            try:
                data, _ = decompress_framed(buf, start, end, source=source)
            except DECODE_ERRORS as e:
                raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None
            if keyed.framed_length(buf, start, end) != end - start:
                raise CorruptStateError(f"key group {kg}: its compressed stream does not end where the next key "
                                        f"group starts (byte {end})", source)
            data, start, end = data, 0, len(data)
        else:
            data = buf
        for block, pos, limit in pieces.of(data, start, end):
            rows = decoder.add(block, pos, limit, kg)
            if rows >= max_rows:
                yield shape.batch(decoder.flush())
        streams.release(buf, start, end)
    if decoder.rows:
        yield shape.batch(decoder.flush())


class _Pieces:
    """A canonical key group as the decoder is given it: whole, or, when it is larger than
    ``split_above`` (and ``piece_bytes``), in pieces of about ``piece_bytes`` that decode to its rows
    in the same order (``_speedups``' ``key_group_pieces``: each of the plan's states holds one entry
    per key, no map state), each framed as a key group of its own."""

    def __init__(self, found: Plan, piece_bytes: int, split_above: int):
        plans = found.plans
        cut = _speedups is not None and not pure_python_forced() and all(
            plans[sid].mode in (VALUE, LIST, LIST_RAW) for sid in found.state_ids)
        self.selected = tuple(found.state_ids) if cut else None
        self.piece_bytes, self.split_above, self.prefix = piece_bytes, max(piece_bytes, split_above), found.prefix

    def of(self, data, start: int, end: int) -> Iterator[tuple]:
        """(bytes, start, end) of the key group data[start:end], or of each of its pieces in turn."""
        pieces = None
        if self.selected is not None and end - start > self.split_above:
            pieces = _speedups.key_group_pieces(data, start, end, self.prefix, self.selected, self.piece_bytes,
                                                streams.is_mapped(data))
        if pieces is None:
            yield data, start, end
            return
        streams.release(data, start, end)  # a mapped stream: its pages are read again piece by piece
        view = memoryview(data)
        for runs in pieces:
            parts: list = []
            flags = []
            at = 0
            for sid, lo, hi, last in runs:
                parts += [_U16.pack(sid), view[lo:hi]]
                flags.append(at + 2 + last - lo)  # the run's last key: the piece's framing flags it
                at += 2 + hi - lo
            parts.append(_END_OF_KEY_GROUP)
            block = bytearray().join(parts)
            del parts
            for _, lo, hi, _ in runs:
                streams.release(data, lo, hi)
            for flag in flags:
                block[flag] |= keyed.META_FOLLOWS
            yield block, 0, len(block)


def _native_batches(decoder, shape: _Shape, buf, regions, meta, codecs, source, max_rows
                    ) -> Iterator[pyarrow.RecordBatch]:
    blocks = len(codecs)
    for kg, start, end in regions:
        if not meta.header_size <= start <= len(buf) - 4:
            raise CorruptStateError(f"key group {kg}: offset {start} is outside the state stream of "
                                    f"{len(buf)} bytes", source)
        stored = _I32.unpack_from(buf, start)[0]
        if stored != kg:
            raise CorruptStateError(f"key group {kg}: the block starts with key group {stored}", source)
        if not meta.compressed:
            rows = decoder.add_native(buf, start + 4, end, kg, blocks, False)
        else:  # one compressed stream per state block
            pos = start + 4
            for i in range(blocks):
                try:
                    data, _ = decompress_framed(buf, pos, end, source=source)
                except DECODE_ERRORS as e:
                    raise CorruptStateError(f"key group {kg}: cannot decode the state bytes ({e})", source) from None
                rows = decoder.add_native(data, 0, len(data), kg, 1, i > 0)
                pos += keyed.framed_length(buf, pos, end)
            if pos != end:
                raise CorruptStateError(f"key group {kg}: its data ends at byte {pos}, the next key group starts "
                                        f"at byte {end}", source)
        if rows >= max_rows:
            yield shape.batch(decoder.flush())
    if decoder.rows:
        yield shape.batch(decoder.flush())


_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_END_OF_KEY_GROUP = _U16.pack(keyed.END_OF_KEY_GROUP)


def _piece_lead(found: Plan, families) -> int | None:
    """The state whose pairs cut a RocksDB window into pieces (``rocksdb_native.windows``): the first
    family of a value or list state; None (whole windows) when there is none, or when some state's
    keys carry their lengths (``ambiguous``: its key bytes need not be self-delimiting)."""
    plans = [found.plans[sid] for sid, _ in families]
    if any(p.ambiguous for p in plans):
        return None
    return next((sid for (sid, _), p in zip(families, plans) if p.mode in (VALUE, LIST, LIST_RAW)), None)


def _packed_batches(decoder, shape: _Shape, db, tables, families, runs, prefix: int, max_rows: int,
                    lead: int | None = None) -> Iterator[pyarrow.RecordBatch]:
    """The batches of the (state id, column family) ``families`` over the key-group ``runs``, read from
    the table files in C (``rocksdb_native.windows``: in pieces of :data:`PIECE_BYTES` of ``lead``'s
    pairs, a piece's rows in the reference's order: state id, key); a batch ends after the key group
    (or piece of one) that brings it to ``max_rows`` rows."""
    from . import rocksdb_native

    for window in rocksdb_native.windows(db, tables, families, runs, prefix, PIECE_BYTES, lead):
        parts = tuple((sid, data, 0) for sid, data in window)
        while parts is not None:
            positions = decoder.add_packed(parts, max_rows)
            if decoder.rows >= max_rows:
                yield shape.batch(decoder.flush())
            parts = None if positions is None else tuple(
                (sid, data, at) for (sid, data, _), at in zip(parts, positions))
    if decoder.rows:
        yield shape.batch(decoder.flush())


def _pair_batches(decoder, shape: _Shape, db, families, runs, prefix: int, max_rows: int
                  ) -> Iterator[pyarrow.RecordBatch]:
    """The batches of the (state id, column family) ``families`` over the key-group ``runs``: per
    run, one cursor per family at the run's first key group, which the decoder reads in C."""
    from .rocksdb import key_group_prefix_bytes

    for lo, hi in runs:
        start = key_group_prefix_bytes(lo, prefix)
        opened = [(sid, name, db.cursor(name, start)) for sid, name in families]
        opened = [(sid, name, cursor) for sid, name, cursor in opened if cursor is not None]
        cursors = tuple((sid, cursor) for sid, _, cursor in opened)
        more = True
        while more:
            try:
                more = decoder.add_pairs_from(cursors, hi, max_rows)
            except FStateError:
                raise
            except Exception as e:
                if decoder.failed_cursor < 0:
                    raise
                raise db.read_error(opened[decoder.failed_cursor][1], e) from None
            if decoder.rows >= max_rows:
                yield shape.batch(decoder.flush())
    if decoder.rows:
        yield shape.batch(decoder.flush())
