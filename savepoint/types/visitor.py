"""The visitors over the TypeInfo tree (in the style of PyIceberg's schema visitors): the dispatcher
:func:`visit` walks the tree, a visitor only says what each node class means.

A visitor defines one ``visit_*`` method per node class (:data:`BRANCHES`; a subclass such as
``SetType`` has its own branch, it never falls back to its parent's) and derives from one of two bases:

* :class:`TypeVisitor` (post-order): :func:`visit` visits a node's children first and hands their
  results to the node's method, as ``visit_list(node, element)``, ``visit_map(node, key, value)``,
  ``visit_row(node, fields)`` (a tuple of results): the Spark and Arrow types, the value converters;
* :class:`PreOrderTypeVisitor`: the method gets the children as thunks (``Callable[[], Result]``):
  calling one visits that child. A visitor that stops early (a type it cannot name, a POJO whose
  classes are gone), that visits a child with other context (a Spark column's field) or that never
  looks inside (what a node is) calls them or not, as it needs: all other visitors.

What a node class hands its method besides the node is its entry in :data:`CHILDREN` (the same for
both bases); a node class without one is a leaf. No visitor calls :func:`visit` on a node's children
itself (tests/test_type_checks.py).

A missing branch fails loudly: a node class without an entry in :data:`BRANCHES` raises
:class:`MissingVisitorBranchError` when visited, and a visitor class that does not define every
method of :class:`TypeInfoVisitor` (all abstract) fails when it is defined.
tests/savepoint/test_type_visitors.py finds every visitor of the package and checks each answers for
every node class.

Adding a node class: add it to :data:`BRANCHES` (and :data:`CHILDREN` when it has nested types) and an
abstract ``visit_*`` method to :class:`TypeInfoVisitor`; importing fstate then names every visitor
that lacks it.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import partial
from operator import attrgetter
from typing import Any, Callable, Generic, NamedTuple, TypeVar

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
#: what a branch gets for a child: its result (TypeVisitor) or a thunk visiting it (PreOrderTypeVisitor)
Child = TypeVar("Child")


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


class Many(NamedTuple):
    """A child argument that is a tuple of nested types (None where a type is gone): one result or
    thunk each, None for None."""

    get: Callable[[Any], tuple]


_FIELDS = Many(attrgetter("children"))
_ELEMENT = attrgetter("element")
_FIRST = lambda node: node.children[0]  # noqa: E731
_INNER = attrgetter("inner")
_KEY, _VALUE = attrgetter("key"), attrgetter("value")

#: The arguments each node class's branch gets after the node (one child each, or :class:`Many`), in
#: this order; a node class without an entry is a leaf (its branch gets the node alone).
CHILDREN: dict[type[TypeInfo], tuple] = {
    TupleType: (_FIELDS,),  # fields
    RowType: (_FIELDS,),  # fields
    EitherType: (_FIELDS,),  # fields: left, right
    ListType: (_ELEMENT,), ArrayListType: (_ELEMENT,), SetType: (_ELEMENT,),  # element
    GenericArrayType: (_FIRST,),  # element
    MapType: (_KEY, _VALUE),  # key, value
    NullableType: (_INNER,),  # inner
    TimerType: (_KEY, attrgetter("namespace")),  # key, namespace
    TtlType: (_VALUE, _FIRST),  # value, timestamp (its last access)
    # fields, registered subclasses, other subclasses (None where the class is gone)
    PojoType: (Many(lambda node: tuple(t for _, _, t in node.fields)),
               Many(lambda node: tuple(t for _, t in node.registered)),
               Many(lambda node: tuple(t for _, t in node.nonregistered))),
    CepType: (attrgetter("shape"),),  # shape: the decoded value's structure in plain nodes (not a child node)
    RowDataType: (_FIELDS,),  # fields: the field serializers (none for a BinaryRowData)
    RawValueDataType: (_INNER,), ExternalType: (_INNER,),  # inner
    SortedMapType: (_KEY, _VALUE),  # key, value
}


def visit(typeinfo: TypeInfo, visitor: "TypeInfoVisitor[Result, Any]") -> Result:
    """Call ``visitor``'s branch for the exact class of ``typeinfo`` with its children's results
    (:class:`TypeVisitor`) or thunks (:class:`PreOrderTypeVisitor`), as :data:`CHILDREN` lists them."""
    node_class = type(typeinfo)
    branch = BRANCHES.get(node_class)
    if branch is None:
        raise MissingVisitorBranchError(
            f"TypeInfo node class {node_class.__qualname__} has no visitor branch "
            f"(visiting with {type(visitor).__qualname__}); add it to fstate.savepoint.types.visitor.BRANCHES")
    children = CHILDREN.get(node_class)
    if children is None:
        return getattr(visitor, branch)(typeinfo)
    child = _thunk if visitor.pre_order else _result
    return getattr(visitor, branch)(typeinfo, *[child(getter, typeinfo, visitor) for getter in children])


def _result(getter, node: TypeInfo, visitor):
    if type(getter) is Many:
        return tuple(None if c is None else visit(c, visitor) for c in getter.get(node))
    return visit(getter(node), visitor)


def _thunk(getter, node: TypeInfo, visitor):
    if type(getter) is Many:
        return tuple(None if c is None else partial(visit, c, visitor) for c in getter.get(node))
    return partial(_visit_got, getter, node, visitor)  # the child is looked up when the thunk is called


def _visit_got(getter, node: TypeInfo, visitor):
    return visit(getter(node), visitor)


class TypeInfoVisitor(Generic[Result, Child]):
    """What every visitor defines: one abstract method per node class (:data:`BRANCHES`), getting the
    node and its children (:data:`CHILDREN`) as ``Child``: a result or a thunk. A visitor derives from
    :class:`TypeVisitor` or :class:`PreOrderTypeVisitor`; a visitor class that leaves a method undefined
    fails when it is defined (a ``TypeError`` naming the methods), unless it is declared a partial base
    with ``class Base(TypeVisitor[str], abstract=True)``."""

    #: whether :func:`visit` hands the branches thunks (True) or results (False)
    pre_order: bool

    def __init_subclass__(cls, abstract: bool = False, **kwargs):
        super().__init_subclass__(**kwargs)
        if abstract:
            return
        if not hasattr(cls, "pre_order"):
            raise TypeError(f"visitor {cls.__qualname__} derives from TypeInfoVisitor: derive from TypeVisitor "
                            "(post-order, children's results) or PreOrderTypeVisitor (children's thunks)")
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
    def visit_tuple(self, node: TupleType, fields: tuple[Child, ...]) -> Result:
        """The branch of :class:`TupleType`."""

    @abstractmethod
    def visit_row(self, node: RowType, fields: tuple[Child, ...]) -> Result:
        """The branch of :class:`RowType`."""

    @abstractmethod
    def visit_list(self, node: ListType, element: Child) -> Result:
        """The branch of :class:`ListType`."""

    @abstractmethod
    def visit_array_list(self, node: ArrayListType, element: Child) -> Result:
        """The branch of :class:`ArrayListType`."""

    @abstractmethod
    def visit_set(self, node: SetType, element: Child) -> Result:
        """The branch of :class:`SetType`."""

    @abstractmethod
    def visit_map(self, node: MapType, key: Child, value: Child) -> Result:
        """The branch of :class:`MapType`."""

    @abstractmethod
    def visit_nullable(self, node: NullableType, inner: Child) -> Result:
        """The branch of :class:`NullableType`."""

    @abstractmethod
    def visit_either(self, node: EitherType, fields: tuple[Child, ...]) -> Result:
        """The branch of :class:`EitherType` (``fields``: left, right)."""

    @abstractmethod
    def visit_generic_array(self, node: GenericArrayType, element: Child) -> Result:
        """The branch of :class:`GenericArrayType`."""

    @abstractmethod
    def visit_timer(self, node: TimerType, key: Child, namespace: Child) -> Result:
        """The branch of :class:`TimerType`."""

    @abstractmethod
    def visit_ttl(self, node: TtlType, value: Child, timestamp: Child) -> Result:
        """The branch of :class:`TtlType`."""

    @abstractmethod
    def visit_pojo(self, node: PojoType, fields: tuple[Child | None, ...], registered: tuple[Child | None, ...],
                   nonregistered: tuple[Child | None, ...]) -> Result:
        """The branch of :class:`PojoType` (one child per field and subclass, None where its class is gone)."""

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
    def visit_cep(self, node: CepType, shape: Child) -> Result:
        """The branch of :class:`CepType` (``shape``: its value's structure, ``CepType.shape``)."""

    @abstractmethod
    def visit_row_data(self, node: RowDataType, fields: tuple[Child, ...]) -> Result:
        """The branch of :class:`RowDataType`."""

    @abstractmethod
    def visit_table_data(self, node: TableDataType) -> Result:
        """The branch of :class:`TableDataType`."""

    @abstractmethod
    def visit_raw_value_data(self, node: RawValueDataType, inner: Child) -> Result:
        """The branch of :class:`RawValueDataType`."""

    @abstractmethod
    def visit_external(self, node: ExternalType, inner: Child) -> Result:
        """The branch of :class:`ExternalType`."""

    @abstractmethod
    def visit_sorted_map(self, node: SortedMapType, key: Child, value: Child) -> Result:
        """The branch of :class:`SortedMapType`."""


class TypeVisitor(TypeInfoVisitor[Result, Result], abstract=True):
    """A post-order visitor: every branch gets its children's results (PyIceberg's ``SchemaVisitor``)."""

    pre_order = False


class PreOrderTypeVisitor(TypeInfoVisitor[Result, Callable[[], Result]], abstract=True):
    """A pre-order visitor: every branch gets a thunk per child and calls those it needs (PyIceberg's
    ``PreOrderSchemaVisitor``)."""

    pre_order = True


#: The bases a visitor derives from.
BASES: tuple[type, ...] = (TypeVisitor, PreOrderTypeVisitor)
