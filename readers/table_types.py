"""What a state's type is to the state tables (:mod:`.tables`): a row whose fields become columns or
take an SQL plan's names, a TTL wrapper to look through, a map, a sorted map, a POJO, a timer. One
visitor answers, so a new TypeInfo node class gets its answer where it is added (the visitor's
abstract branches), never a silent default."""

from __future__ import annotations

from ..savepoint.types import MapType, PojoType, PreOrderTypeVisitor, TimerType, TtlType, TypeInfo, visit
from ..savepoint.types.sorted_map import SortedMapType
from ..savepoint.types.table import RowDataType

#: a composite with named fields (Tuple, Row, CEP's values, the table runtime's wrappers of them)
ROW = "row"
#: the table runtime's row (RowData): its fields can be renamed by an SQL plan
ROW_DATA = "row-data"
TTL, MAP, SORTED_MAP, POJO, TIMER, OTHER = "ttl", "map", "sorted-map", "pojo", "timer", "other"


class TablePartVisitor(PreOrderTypeVisitor[str]):
    """:data:`ROW`, :data:`ROW_DATA`, :data:`TTL`, :data:`MAP`, :data:`SORTED_MAP`, :data:`POJO`,
    :data:`TIMER` or :data:`OTHER`."""

    def _row(self, node: TypeInfo, *children) -> str:
        return ROW

    def _other(self, node: TypeInfo, *children) -> str:
        return OTHER

    visit_tuple = visit_row = visit_cep = visit_raw_value_data = visit_external = _row
    visit_scalar = visit_time_window = visit_list = visit_array_list = visit_set = visit_nullable = _other
    visit_either = visit_generic_array = visit_enum = visit_pickled = visit_opaque = visit_table_data = _other

    def visit_row_data(self, node: RowDataType, fields) -> str:
        return ROW_DATA

    def visit_ttl(self, node: TtlType, value, timestamp) -> str:
        return TTL

    def visit_map(self, node: MapType, key, value) -> str:
        return MAP

    def visit_sorted_map(self, node: SortedMapType, key, value) -> str:
        return SORTED_MAP

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> str:
        return POJO

    def visit_timer(self, node: TimerType, key, namespace) -> str:
        return TIMER


class KeyFieldsVisitor(PreOrderTypeVisitor["list[tuple[str, str | None, TypeInfo | None]] | None"]):
    """The fields a flattened key's columns are (name, declaring class or None, type) when a key of this
    type has named fields (a Tuple, Row, Either, POJO, RowData or CEP value with nested types), else
    None: the key is one column."""

    def _named(self, node: TypeInfo, *children) -> list | None:
        if not node.children:
            return None
        return list(zip(node.field_names, [None] * len(node.children), node.children))

    def visit_pojo(self, node: PojoType, fields, registered, nonregistered) -> list | None:
        return list(node.fields) if node.children else None

    def _none(self, node: TypeInfo, *children) -> None:
        return None

    visit_tuple = visit_row = visit_either = visit_cep = visit_row_data = _named
    visit_scalar = visit_time_window = visit_list = visit_array_list = visit_set = visit_map = visit_nullable = _none
    visit_generic_array = visit_timer = visit_ttl = visit_enum = visit_pickled = visit_opaque = _none
    visit_table_data = visit_raw_value_data = visit_external = visit_sorted_map = _none


_PART = TablePartVisitor()
_KEY_FIELDS = KeyFieldsVisitor()


def part(type_info: TypeInfo | None) -> str | None:
    """What ``type_info`` is to the tables (None for None)."""
    return None if type_info is None else visit(type_info, _PART)


def key_fields(key_type: TypeInfo) -> list[tuple[str, str | None, TypeInfo | None]] | None:
    """The fields of a key flattened into columns (:class:`KeyFieldsVisitor`), or None."""
    return visit(key_type, _KEY_FIELDS)


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


