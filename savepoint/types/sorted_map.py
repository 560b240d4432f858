"""The table runtime's ``SortedMapSerializer``: the ``sorted-map`` state of a Top-N over an updating
input (``RetractableTopNFunction``, a Rank with ``RetractStrategy``), sort key -> how many input rows
have it.

Facts (learned from Flink's sources, checked on real savepoints of Flink 2.3.0 and 1.20.1 by
tests/flink/test_sql_topn_oracle.py):

* values are written as ``MapSerializer`` writes a map: an ``int`` size, then per entry the key, a
  null flag (1: null) and the value unless null. Flink iterates its ``TreeMap``, so the entries are
  in the comparator's order; reading, it puts them into a new ``TreeMap`` (the bytes' order does not
  matter to Flink). A Top-N's key serializer is the sort key's ``RowDataSerializer``, its value
  serializer ``LongSerializer``.
* the snapshot (``SortedMapSerializerSnapshot``, version 3) is the comparator as one Java
  serialization stream, then ``NestedSerializersSnapshotDelegate`` (magic, version 1, count 2, the key
  and value serializer snapshots); no composite framing. A Top-N's comparator is a
  ``ComparableRecordComparator``: the generated comparator's code (a ``GeneratedRecordComparator``)
  and, per sort key field, its position in the sort key, ascending or not and nulls last or not.
* the generated comparator compares field by field: two nulls are equal, a null alone is greater
  when nulls are last, else smaller (whatever the direction); two values compare as their type
  does (numbers and booleans by value, strings and binaries byte by byte unsigned, decimals and
  timestamps by value), negated when descending.

fstate keeps the comparator's bytes to write the snapshot back, but cannot build one: this type only
comes from a snapshot. Values decode to a dict in the bytes' order and encode sorted as the comparator
sorts when fstate knows how its fields compare (:func:`comparator_sort_key`), so a map that went
through Spark (whose maps do not keep their order) is written back in Flink's order; otherwise in the
order given.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

from ..binary import DataOutput
from .base import NESTED_MAGIC, Decoder, Encoder, TypeInfo, as_fields
from .composites import map_decoder, map_encoder
from .logical import BINARY_ROOTS, FIXED_SIZES, STRING_ROOTS, TIMESTAMP_ROOTS, LogicalType
from .table import TABLE, RowDataType

SORTED_MAP = TABLE + "SortedMapSerializerSnapshot"
#: the comparator of a Top-N's sort keys (its generated code, the sort key fields and their order)
RECORD_COMPARATOR = "org.apache.flink.table.runtime.operators.rank.ComparableRecordComparator"


class SortKeyOrder(NamedTuple):
    """One field of a sort key's order: its position in the key, ascending or not, nulls last or first."""

    position: int
    ascending: bool
    nulls_last: bool


def comparator_order(comparator: Any) -> tuple[SortKeyOrder, ...] | None:
    """The order a Java-read comparator (:func:`~..javaser.read_java_object`) sorts by, when it is a
    Top-N's ``ComparableRecordComparator``; None for another comparator."""
    if not isinstance(comparator, dict) or comparator.get("@class") != RECORD_COMPARATOR:
        return None
    fields = [comparator.get(f) for f in ("compareKeyPositions", "compareOrders", "nullsIsLast")]
    if not all(isinstance(f, list) and len(f) == len(fields[0]) for f in fields):
        return None
    return tuple(SortKeyOrder(int(p), bool(a), bool(n)) for p, a, n in zip(*fields))


def _compare(a, b) -> int:
    """Java's ``a > b ? 1 : a < b ? -1 : 0`` (the generated code's compare of primitives)."""
    return (a > b) - (a < b)


def _compare_strings(a: str, b: str) -> int:
    return _compare(a.encode("utf-8"), b.encode("utf-8"))


def _compare_timestamps(a, b) -> int:
    return _compare((a, getattr(a, "nanosecond", 0)), (b, getattr(b, "nanosecond", 0)))


def _field_compare(t: LogicalType) -> Callable[[Any, Any], int] | None:
    if t.root in STRING_ROOTS:
        return _compare_strings
    if t.root in TIMESTAMP_ROOTS:
        return _compare_timestamps
    if t.root in FIXED_SIZES or t.root in BINARY_ROOTS or t.root == "DECIMAL":
        return _compare
    return None  # rows, arrays, maps, raw values: fstate does not say how Flink compares them


def comparator_sort_key(order: tuple[SortKeyOrder, ...] | None, key: TypeInfo) -> Callable[[Any], Any] | None:
    """A ``sort`` key function ordering sort key values (tuples, dicts by field name or Spark Rows) as
    the comparator does, or None when the order or a field's comparison is unknown."""
    if order is None or not isinstance(key, RowDataType) or not key.decodable:
        return None
    compares = []
    for o in order:
        found = _field_compare(key.types[o.position]) if 0 <= o.position < key.arity else None
        if found is None:
            return None
        compares.append((o, found))
    names = key.field_names

    def compare(x, y) -> int:
        x, y = as_fields(x, names), as_fields(y, names)
        for o, field_compare in compares:
            a, b = x[o.position], y[o.position]
            if a is None or b is None:
                if a is None and b is None:
                    continue
                return (1 if o.nulls_last else -1) * (1 if a is None else -1)
            result = field_compare(a, b)
            if result:
                return result if o.ascending else -result
        return 0

    return functools.cmp_to_key(compare)


class SortedMapType(TypeInfo):
    """``SortedMapSerializer``: a map kept in its comparator's order (see the module).

    ``comparator`` is the comparator's Java serialization as read (for a Top-N, a generated class's
    code); ``order`` is what that comparator sorts by, when fstate recognises it."""

    snapshot_class = SORTED_MAP

    def __init__(self, key: TypeInfo, value: TypeInfo, comparator: bytes, version: int = 3,
                 order: tuple[SortKeyOrder, ...] | None = None):
        self.children = (key, value)
        self.comparator = bytes(comparator)
        self.snapshot_version = version
        self.order = order

    @property
    def key(self) -> TypeInfo:
        return self.children[0]

    @property
    def value(self) -> TypeInfo:
        return self.children[1]

    def with_entries(self, key: TypeInfo, value: TypeInfo) -> "SortedMapType":
        """The same map with other key and value nodes (e.g. the sort key's fields named by a plan)."""
        return SortedMapType(key, value, self.comparator, self.snapshot_version, self.order)

    @property
    def order_text(self) -> str | None:
        """The comparator's order by the key's field names (``f0 DESC, f1 ASC NULLS LAST``); nulls are
        only named where they are not where Flink SQL puts them by default (first ascending, last
        descending)."""
        if self.order is None:
            return None
        names = getattr(self.key, "field_names", ())
        parts = []
        for o in self.order:
            name = names[o.position] if 0 <= o.position < len(names) else f"#{o.position}"
            nulls = "" if o.nulls_last != o.ascending else (" NULLS LAST" if o.nulls_last else " NULLS FIRST")
            parts.append(f"{name} {'ASC' if o.ascending else 'DESC'}{nulls}")
        return ", ".join(parts)

    @property
    def name(self) -> str:
        order = self.order_text
        return f"SortedMap<{self.key.name}, {self.value.name}>" + (f" ({order})" if order else "")

    def _key(self) -> tuple:
        return (self.snapshot_version, self.comparator, self.children)

    def _write_payload(self, out: DataOutput) -> None:
        out.write_bytes(self.comparator)
        out.write_i32(NESTED_MAGIC)
        out.write_i32(1)
        out.write_i32(len(self.children))
        for c in self.children:
            c.write_snapshot(out)

    def decoder(self) -> Decoder:
        return map_decoder(self.key, self.value, "sorted map size", unique=True)

    def encoder(self) -> Encoder:
        return map_encoder(self.key, self.value, comparator_sort_key(self.order, self.key))
