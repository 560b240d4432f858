"""What a node is to code that looks into a state's type without decoding it (a keyed state's shape,
TTL meta infos, SQL bindings and migrations, the writers): a list serializer, a map, a TTL wrapper,
the table runtime's row, a timer, a nullable wrapper, opaque bytes, a CEP serializer, or another.

One visitor answers (:class:`RoleVisitor`), so a new node class gets its role where it is added (an
abstract branch), never by falling into an ``isinstance`` check written for another class. The
``as_*`` helpers return the node when it has that role, else None (also for None).
"""

from __future__ import annotations

from .base import TypeInfo
from .cep import CepType
from .composites import ListType, MapType, NullableType, TimerType, TtlType
from .pickled import OpaqueType
from .table import RowDataType
from .visitor import PreOrderTypeVisitor, visit

#: a list serializer (List, ArrayList, Set): ``element``
LIST = "list"
#: a MapSerializer: ``key``, ``value``
MAP = "map"
#: a TTL wrapper: ``value`` (and the timestamp)
TTL = "ttl"
#: the table runtime's row (RowData): ``arity``, ``types``
ROW_DATA = "row-data"
#: a timer of the internal timer service: ``key``, ``namespace``
TIMER = "timer"
#: a NullableSerializer: ``inner``, ``padding``
NULLABLE = "nullable"
#: a serializer whose values fstate keeps as raw bytes: ``snapshot_class``, ``reason``
OPAQUE = "opaque"
#: one of Flink CEP's serializers: ``kind``
CEP = "cep"
#: any other node
OTHER = "other"


class RoleVisitor(PreOrderTypeVisitor[str]):
    """:data:`LIST`, :data:`MAP`, :data:`TTL`, :data:`ROW_DATA`, :data:`TIMER`, :data:`NULLABLE`,
    :data:`OPAQUE`, :data:`CEP` or :data:`OTHER`."""

    def _list(self, node: ListType, element) -> str:
        return LIST

    def _other(self, node: TypeInfo, *children) -> str:
        return OTHER

    visit_list = visit_array_list = visit_set = _list
    visit_scalar = visit_time_window = visit_tuple = visit_row = visit_either = visit_generic_array = _other
    visit_pojo = visit_enum = visit_pickled = visit_table_data = visit_raw_value_data = visit_external = _other
    visit_sorted_map = _other

    def visit_map(self, node: MapType, key, value) -> str:
        return MAP

    def visit_ttl(self, node: TtlType, value, timestamp) -> str:
        return TTL

    def visit_row_data(self, node: RowDataType, fields) -> str:
        return ROW_DATA

    def visit_timer(self, node: TimerType, key, namespace) -> str:
        return TIMER

    def visit_nullable(self, node: NullableType, inner) -> str:
        return NULLABLE

    def visit_opaque(self, node: OpaqueType) -> str:
        return OPAQUE

    def visit_cep(self, node: CepType, shape) -> str:
        return CEP


_ROLE = RoleVisitor()


def role(t: TypeInfo | None) -> str | None:
    """The role of ``t`` (None for None)."""
    return None if t is None else visit(t, _ROLE)


def as_list(t: TypeInfo | None) -> ListType | None:
    return t if role(t) == LIST else None


def as_map(t: TypeInfo | None) -> MapType | None:
    return t if role(t) == MAP else None


def as_ttl(t: TypeInfo | None) -> TtlType | None:
    return t if role(t) == TTL else None


def as_row_data(t: TypeInfo | None) -> RowDataType | None:
    return t if role(t) == ROW_DATA else None


def as_timer(t: TypeInfo | None) -> TimerType | None:
    return t if role(t) == TIMER else None


def as_nullable(t: TypeInfo | None) -> NullableType | None:
    return t if role(t) == NULLABLE else None


def as_opaque(t: TypeInfo | None) -> OpaqueType | None:
    return t if role(t) == OPAQUE else None


def as_cep(t: TypeInfo | None) -> CepType | None:
    return t if role(t) == CEP else None


def without_ttl(t: TypeInfo | None) -> TypeInfo | None:
    """``t`` with one TTL wrapper looked through."""
    return t.value if role(t) == TTL else t


__all__ = ["LIST", "MAP", "TTL", "ROW_DATA", "TIMER", "NULLABLE", "OPAQUE", "CEP", "OTHER", "RoleVisitor", "role",
           "as_list", "as_map", "as_ttl", "as_row_data", "as_timer", "as_nullable", "as_opaque", "as_cep",
           "without_ttl"]
