"""What a state's type is to the state tables (:mod:`.tables`): a row whose fields become columns or
take an SQL plan's names, a TTL wrapper to look through, a map, a sorted map, a POJO, a timer. One
visitor answers, so a new TypeInfo node class gets its answer where it is added (the visitor's
abstract branches), never a silent default."""

from __future__ import annotations

from ..savepoint.types import MapType, PojoType, TimerType, TtlType, TypeInfo, TypeInfoVisitor, visit
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import RowDataType

#: a composite with named fields (Tuple, Row, CEP's values, the table runtime's wrappers of them)
ROW = "row"
#: the table runtime's row (RowData): its fields can be renamed by an SQL plan
ROW_DATA = "row-data"
TTL, MAP, SORTED_MAP, POJO, TIMER, OTHER = "ttl", "map", "sorted-map", "pojo", "timer", "other"


class TablePartVisitor(TypeInfoVisitor[str]):
    """:data:`ROW`, :data:`ROW_DATA`, :data:`TTL`, :data:`MAP`, :data:`SORTED_MAP`, :data:`POJO`,
    :data:`TIMER` or :data:`OTHER`."""

    def _row(self, node: TypeInfo) -> str:
        return ROW

    def _other(self, node: TypeInfo) -> str:
        return OTHER

    visit_tuple = visit_row = visit_cep = visit_raw_value_data = visit_external = _row
    visit_scalar = visit_time_window = visit_list = visit_array_list = visit_set = visit_nullable = _other
    visit_either = visit_generic_array = visit_enum = visit_pickled = visit_opaque = visit_table_data = _other

    def visit_row_data(self, node: RowDataType) -> str:
        return ROW_DATA

    def visit_ttl(self, node: TtlType) -> str:
        return TTL

    def visit_map(self, node: MapType) -> str:
        return MAP

    def visit_sorted_map(self, node: SortedMapType) -> str:
        return SORTED_MAP

    def visit_pojo(self, node: PojoType) -> str:
        return POJO

    def visit_timer(self, node: TimerType) -> str:
        return TIMER


_PART = TablePartVisitor()


def part(type_info: TypeInfo | None) -> str | None:
    """What ``type_info`` is to the tables (None for None)."""
    return None if type_info is None else visit(type_info, _PART)


def unwrapped(type_info: TypeInfo | None) -> TypeInfo | None:
    """``type_info`` with its TTL wrappers looked through."""
    while part(type_info) == TTL:
        type_info = type_info.value
    return type_info


def row_arity(type_info: TypeInfo | None) -> int | None:
    """How many fields a state part has when it is a row (Row, Tuple, RowData, ...), else None; TTL
    wrappers are looked through."""
    type_info = unwrapped(type_info)
    found = part(type_info)
    if found == ROW_DATA:
        return type_info.arity
    return len(type_info.children) if found == ROW else None


def named(type_info: TypeInfo, names: tuple[str, ...] | None) -> TypeInfo:
    """``type_info`` with an SQL row's field names (TTL wrappers kept); other types unchanged. Only
    the names change: values are decoded by position."""
    if names is None:
        return type_info
    found = part(type_info)
    if found == TTL:
        return TtlType(type_info.children[0], named(type_info.value, names), type_info.snapshot_class,
                       type_info.timestamped)
    if found == ROW_DATA and type_info.types is not None and len(names) == type_info.arity:
        return RowDataType(type_info.types, type_info.children, names)
    return type_info


def sorted_map(type_info: TypeInfo) -> SortedMapType | None:
    """The sorted map a VALUE state holds (a retractable Top-N's ``sorted-map``), TTL wrappers looked through."""
    type_info = unwrapped(type_info)
    return type_info if part(type_info) == SORTED_MAP else None


def named_state_type(type_info: TypeInfo, names) -> TypeInfo:
    """A state's value type with the names of ``names`` (``sql_plan.FieldNames``) on its rows: a map's key
    and value, a sorted map's (TTL wrappers kept), or the value."""
    found = part(type_info)
    if found == MAP:
        return MapType(named(type_info.key, names.map_key), named(type_info.value, names.map_value))
    if found == TTL and sorted_map(type_info) is not None:
        return TtlType(type_info.children[0], named_state_type(type_info.value, names), type_info.snapshot_class,
                       type_info.timestamped)
    if found == SORTED_MAP:
        return type_info.with_entries(named(type_info.key, names.map_key), named(type_info.value, names.map_value))
    return named(type_info, names.value)


