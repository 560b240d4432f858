"""Which types Flink can place in key groups: those with a value-based Java ``hashCode``."""

from __future__ import annotations

from .base import TypeInfo
from .cep import CepType
from .composites import (ArrayListType, EitherType, GenericArrayType, ListType, MapType, NullableType, RowType,
                         SetType, TimerType, TtlType, TupleType)
from .pickled import OpaqueType, PickledType
from .pojo import EnumType, PojoType
from .scalars import Scalar, TimeWindowType
from .sorted_map import SortedMapType
from .table import ExternalType, RawValueDataType, RowDataType, TableDataType
from .visitor import PreOrderTypeVisitor, visit


class ValueHashVisitor(PreOrderTypeVisitor[bool]):
    """True when ``java_hash`` is defined for every value of the type (Flink's hashCode of the value;
    for fstate's pickled keys, a CRC-32 of the pickle bytes)."""

    def visit_scalar(self, node: Scalar) -> bool:
        return node.has_value_hash

    def visit_tuple(self, node: TupleType, fields) -> bool:
        return all(field() for field in fields)

    def visit_row(self, node: RowType, fields) -> bool:
        return all(field() for field in fields)

    def visit_nullable(self, node: NullableType, inner) -> bool:
        return inner()

    def visit_pickled(self, node: PickledType) -> bool:
        return True

    # No java_hash for values of these types (TypeInfo.java_hash raises UnsupportedSerializerError).
    def visit_time_window(self, node: TimeWindowType) -> bool:
        return False

    def visit_list(self, node: ListType, element) -> bool:
        return False

    def visit_array_list(self, node: ArrayListType, element) -> bool:
        return False

    def visit_set(self, node: SetType, element) -> bool:
        return False

    def visit_map(self, node: MapType, key, value) -> bool:
        return False

    def visit_either(self, node: EitherType, fields) -> bool:
        return False

    def visit_generic_array(self, node: GenericArrayType, element) -> bool:
        return False

    def visit_timer(self, node: TimerType, key, namespace) -> bool:
        return False

    def visit_ttl(self, node: TtlType, value, timestamp) -> bool:
        return False

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> bool:
        return False

    def visit_enum(self, node: EnumType) -> bool:
        return False

    def visit_opaque(self, node: OpaqueType) -> bool:
        return False

    # CEP: never the key of a CEP operator (its keys are the user's); fstate places no such keys
    def visit_cep(self, node: CepType, shape) -> bool:
        return False

    # table runtime
    def visit_row_data(self, node: RowDataType, fields) -> bool:
        return node.decodable  # BinaryRowData.hashCode: a hash of the row's bytes

    def visit_table_data(self, node: TableDataType) -> bool:
        return False

    def visit_raw_value_data(self, node: RawValueDataType, inner) -> bool:
        return False

    def visit_external(self, node: ExternalType, inner) -> bool:
        return inner()

    def visit_sorted_map(self, node: SortedMapType, key, value) -> bool:
        return False


def has_value_hash(t: TypeInfo) -> bool:
    """Whether keys of type ``t`` can be placed in key groups (``t.java_hash`` works for its values)."""
    return visit(t, ValueHashVisitor())
