"""One visitor over the TypeInfo tree (in the style of PyIceberg's schema visitors).

A visitor subclasses :class:`TypeInfoVisitor` and defines one ``visit_*`` method per node class;
:func:`visit` calls the method for the node's exact class (a subclass such as ``SetType`` has its
own branch, it never falls back to its parent's). A method receives the node and recurses into the
children itself with ``visit(child, self)``, so it decides whether and how to walk them.

A missing branch fails loudly: a node class without an entry in :data:`BRANCHES`, or a visitor
that does not define the method, raises :class:`MissingVisitorBranchError` naming both.
tests/savepoint/test_type_visitors.py checks that every node class has a branch in every visitor.

Adding a node class: add it to :data:`BRANCHES` and a ``visit_*`` method to :class:`TypeInfoVisitor`,
then define that method in every visitor the test lists.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from .base import TypeInfo
from .cep import CepType
from .composites import (ArrayListType, Composite, EitherType, GenericArrayType, ListType, MapType, NullableType,
                         RowType, SetType, TimerType, TtlType, TupleType)
from .pickled import OpaqueType, PickledType
from .pojo import EnumType, PojoType
from .scalars import Scalar, TimeWindowType
from .sorted_map import SortedMapType
from .table import ExternalType, RawValueDataType, RowDataType, TableDataType

Result = TypeVar("Result")


class MissingVisitorBranchError(NotImplementedError):
    """A visitor has no branch for a node class (a bug in fstate, not in the input)."""


#: The visitor method of each concrete node class.
BRANCHES: dict[type[TypeInfo], str] = {
    Scalar: "visit_scalar",
    TimeWindowType: "visit_time_window",
    TupleType: "visit_tuple",
    RowType: "visit_row",
    ListType: "visit_list",
    ArrayListType: "visit_array_list",
    SetType: "visit_set",
    MapType: "visit_map",
    NullableType: "visit_nullable",
    EitherType: "visit_either",
    GenericArrayType: "visit_generic_array",
    TimerType: "visit_timer",
    TtlType: "visit_ttl",
    PojoType: "visit_pojo",
    EnumType: "visit_enum",
    PickledType: "visit_pickled",
    OpaqueType: "visit_opaque",
    # CEP
    CepType: "visit_cep",
    # table runtime
    RowDataType: "visit_row_data",
    TableDataType: "visit_table_data",
    RawValueDataType: "visit_raw_value_data",
    ExternalType: "visit_external",
    SortedMapType: "visit_sorted_map",
}

#: Base classes that are never nodes themselves.
ABSTRACT_NODES: tuple[type[TypeInfo], ...] = (TypeInfo, Composite)


def visit(typeinfo: TypeInfo, visitor: "TypeInfoVisitor[Result]") -> Result:
    """Call ``visitor``'s branch for the exact class of ``typeinfo``."""
    branch = BRANCHES.get(type(typeinfo))
    if branch is None:
        raise MissingVisitorBranchError(
            f"TypeInfo node class {type(typeinfo).__qualname__} has no visitor branch "
            f"(visiting with {type(visitor).__qualname__}); add it to fstate.savepoint.types.visitor.BRANCHES")
    return getattr(visitor, branch)(typeinfo)


class TypeInfoVisitor(Generic[Result]):
    """Base of all visitors: every method fails until the visitor defines it."""

    def _missing(self, node: TypeInfo, method: str) -> Result:
        raise MissingVisitorBranchError(
            f"{type(self).__qualname__} has no branch for TypeInfo node class {type(node).__qualname__} "
            f"({node.name}): define {type(self).__qualname__}.{method}")

    def visit_scalar(self, node: Scalar) -> Result:
        return self._missing(node, "visit_scalar")

    def visit_time_window(self, node: TimeWindowType) -> Result:
        return self._missing(node, "visit_time_window")

    def visit_tuple(self, node: TupleType) -> Result:
        return self._missing(node, "visit_tuple")

    def visit_row(self, node: RowType) -> Result:
        return self._missing(node, "visit_row")

    def visit_list(self, node: ListType) -> Result:
        return self._missing(node, "visit_list")

    def visit_array_list(self, node: ArrayListType) -> Result:
        return self._missing(node, "visit_array_list")

    def visit_set(self, node: SetType) -> Result:
        return self._missing(node, "visit_set")

    def visit_map(self, node: MapType) -> Result:
        return self._missing(node, "visit_map")

    def visit_nullable(self, node: NullableType) -> Result:
        return self._missing(node, "visit_nullable")

    def visit_either(self, node: EitherType) -> Result:
        return self._missing(node, "visit_either")

    def visit_generic_array(self, node: GenericArrayType) -> Result:
        return self._missing(node, "visit_generic_array")

    def visit_timer(self, node: TimerType) -> Result:
        return self._missing(node, "visit_timer")

    def visit_ttl(self, node: TtlType) -> Result:
        return self._missing(node, "visit_ttl")

    def visit_pojo(self, node: PojoType) -> Result:
        return self._missing(node, "visit_pojo")

    def visit_enum(self, node: EnumType) -> Result:
        return self._missing(node, "visit_enum")

    def visit_pickled(self, node: PickledType) -> Result:
        return self._missing(node, "visit_pickled")

    def visit_opaque(self, node: OpaqueType) -> Result:
        return self._missing(node, "visit_opaque")

    # CEP
    def visit_cep(self, node: CepType) -> Result:
        return self._missing(node, "visit_cep")
    # table runtime
    def visit_row_data(self, node: RowDataType) -> Result:
        return self._missing(node, "visit_row_data")

    def visit_table_data(self, node: TableDataType) -> Result:
        return self._missing(node, "visit_table_data")

    def visit_raw_value_data(self, node: RawValueDataType) -> Result:
        return self._missing(node, "visit_raw_value_data")

    def visit_external(self, node: ExternalType) -> Result:
        return self._missing(node, "visit_external")

    def visit_sorted_map(self, node: SortedMapType) -> Result:
        return self._missing(node, "visit_sorted_map")
