"""One visitor over the TypeInfo tree (in the style of PyIceberg's schema visitors).

A visitor subclasses :class:`TypeInfoVisitor` and defines one ``visit_*`` method per node class;
:func:`visit` calls the method for the node's exact class (a subclass such as ``SetType`` has its
own branch, it never falls back to its parent's). A method receives the node and recurses into the
children itself with ``visit(child, self)``, so it decides whether and how to walk them.

A missing branch fails loudly: a node class without an entry in :data:`BRANCHES` raises
:class:`MissingVisitorBranchError` when visited, and a visitor class that does not define every
method of :class:`TypeInfoVisitor` (all abstract) fails when it is defined.
tests/savepoint/test_type_visitors.py finds every visitor of the package and checks each answers for
every node class.

Adding a node class: add it to :data:`BRANCHES` and an abstract ``visit_*`` method to
:class:`TypeInfoVisitor`; importing fstate then names every visitor that lacks it.
"""

from __future__ import annotations

from abc import abstractmethod
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
    """Base of all visitors: one abstract method per node class (:data:`BRANCHES`). A visitor class
    that leaves one undefined fails when it is defined (a ``TypeError`` naming the methods), unless it
    is declared a partial base with ``class Base(TypeInfoVisitor, abstract=True)``."""

    def __init_subclass__(cls, abstract: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        missing = [method for method in BRANCHES.values()
                   if getattr(cls, method, None) is None or getattr(getattr(cls, method), "__isabstractmethod__", False)]
        if missing:
            raise TypeError(f"visitor {cls.__qualname__} has no branch {', '.join(missing)}: define them "
                            "(a TypeInfo node class each, see fstate.savepoint.types.visitor.BRANCHES)")

    @abstractmethod
    def visit_scalar(self, node: Scalar) -> Result:
        """The branch of :class:`Scalar`."""

    @abstractmethod
    def visit_time_window(self, node: TimeWindowType) -> Result:
        """The branch of :class:`TimeWindowType`."""

    @abstractmethod
    def visit_tuple(self, node: TupleType) -> Result:
        """The branch of :class:`TupleType`."""

    @abstractmethod
    def visit_row(self, node: RowType) -> Result:
        """The branch of :class:`RowType`."""

    @abstractmethod
    def visit_list(self, node: ListType) -> Result:
        """The branch of :class:`ListType`."""

    @abstractmethod
    def visit_array_list(self, node: ArrayListType) -> Result:
        """The branch of :class:`ArrayListType`."""

    @abstractmethod
    def visit_set(self, node: SetType) -> Result:
        """The branch of :class:`SetType`."""

    @abstractmethod
    def visit_map(self, node: MapType) -> Result:
        """The branch of :class:`MapType`."""

    @abstractmethod
    def visit_nullable(self, node: NullableType) -> Result:
        """The branch of :class:`NullableType`."""

    @abstractmethod
    def visit_either(self, node: EitherType) -> Result:
        """The branch of :class:`EitherType`."""

    @abstractmethod
    def visit_generic_array(self, node: GenericArrayType) -> Result:
        """The branch of :class:`GenericArrayType`."""

    @abstractmethod
    def visit_timer(self, node: TimerType) -> Result:
        """The branch of :class:`TimerType`."""

    @abstractmethod
    def visit_ttl(self, node: TtlType) -> Result:
        """The branch of :class:`TtlType`."""

    @abstractmethod
    def visit_pojo(self, node: PojoType) -> Result:
        """The branch of :class:`PojoType`."""

    @abstractmethod
    def visit_enum(self, node: EnumType) -> Result:
        """The branch of :class:`EnumType`."""

    @abstractmethod
    def visit_pickled(self, node: PickledType) -> Result:
        """The branch of :class:`PickledType`."""

    @abstractmethod
    def visit_opaque(self, node: OpaqueType) -> Result:
        """The branch of :class:`OpaqueType`."""

    @abstractmethod
    def visit_cep(self, node: CepType) -> Result:
        """The branch of :class:`CepType`."""

    @abstractmethod
    def visit_row_data(self, node: RowDataType) -> Result:
        """The branch of :class:`RowDataType`."""

    @abstractmethod
    def visit_table_data(self, node: TableDataType) -> Result:
        """The branch of :class:`TableDataType`."""

    @abstractmethod
    def visit_raw_value_data(self, node: RawValueDataType) -> Result:
        """The branch of :class:`RawValueDataType`."""

    @abstractmethod
    def visit_external(self, node: ExternalType) -> Result:
        """The branch of :class:`ExternalType`."""

    @abstractmethod
    def visit_sorted_map(self, node: SortedMapType) -> Result:
        """The branch of :class:`SortedMapType`."""
